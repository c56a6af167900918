// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A record's counters as a daemon keeps them once they stop changing: only the words that
/// differ from new_counters(), each as a varint of the difference. A file read once by one
/// process has 20-45 such words of the 169, so its counters take ~100-200 bytes instead of 1,352:
/// what lets iolensd keep a big job's records within its memory bound (docs/daemon.md#bounded-memory).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/counters.hpp"

namespace iolens::core {

class PackedCounters {
 public:
  /// new_counters(), holding no memory.
  PackedCounters() = default;
  explicit PackedCounters(const FileCounters& c);
  PackedCounters(const PackedCounters& o);
  PackedCounters& operator=(const PackedCounters& o);
  /// A moved-from object is new_counters() again (its size goes with its bytes).
  PackedCounters(PackedCounters&& o) noexcept
      : data_(std::move(o.data_)), size_(std::exchange(o.size_, 0)) {}
  PackedCounters& operator=(PackedCounters&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }

  /// 64-bit words of the counters: the kernel record's, then its side entry's tally slots
  /// (FileCounters::more), and u64 masks that name them (one bit a word). The record's words
  /// have kRecordMasks masks, whose last one's top bit says that kSideMasks masks of the side
  /// words follow: the records without side slots (nearly all) carry three masks, not five.
  static constexpr std::size_t kWords = sizeof(FileCounters) / 8;
  static constexpr std::size_t kRecordWords = sizeof(iolens_file_counters) / 8;
  static constexpr std::size_t kSideWords = kWords - kRecordWords;
  static constexpr std::size_t kRecordMasks = (kRecordWords + 63) / 64;
  static constexpr std::size_t kSideMasks = (kSideWords + 63) / 64;
  static constexpr std::size_t kMaskWords = kRecordMasks + kSideMasks;
  /// The most bytes a packed form takes: the masks and a 10-byte varint per word.
  static constexpr std::size_t kMaxBytes = kMaskWords * 8 + kWords * 10;
  /// Packs `c` into `buf` (kMaxBytes long) without holding it; returns the bytes written (0 for
  /// new_counters()). What the constructor keeps, and what a state blob writes of a live part.
  static std::size_t pack(const FileCounters& c, uint8_t* buf);

  /// Holds `c` instead, reusing the held bytes when the size is the same; false, and nothing
  /// done, when `c` packs to exactly the bytes held. What a record's live part does at every
  /// drain: most live records did not change since the last one, and a compare of ~100 bytes
  /// is all they cost.
  bool assign(const FileCounters& c);

  /// The counters, exactly as given.
  FileCounters unpack() const;
  /// Bytes held on the heap (0 for new_counters()).
  std::size_t heap_bytes() const { return size_; }
  /// The packed form itself, as a recorder's state blob holds it (docs/state-format.md):
  /// empty for new_counters(), else kRecordMasks little-endian u64 masks of the record's words
  /// present (bit i % 64 of mask i / 64: word i), the last one's bit 63 set when kSideMasks
  /// masks of the side words present follow (bit j % 64 of side mask j / 64: word
  /// kRecordWords + j), then for each word present, in order, the LEB128 varint of
  /// (word - new_counters() word) mod 2^64.
  std::string_view bytes() const {
    return {reinterpret_cast<const char*>(data_.get()), size_};
  }
  /// Packed bytes read back from a state blob, which is never trusted: the masks must name
  /// only counter words and at least one, each word present must have one varint of a non-zero
  /// difference in its shortest form that fits 64 bits, and nothing may follow. So a blob
  /// accepted is the canonical form of its counters (saving it again gives the same bytes).
  /// nullopt and `error` otherwise.
  static std::optional<PackedCounters> from_bytes(std::string_view b, std::string& error);

 private:
  std::unique_ptr<uint8_t[]> data_;  // the u64 masks of the words present, then their varints
  uint32_t size_ = 0;
};

}  // namespace iolens::core
