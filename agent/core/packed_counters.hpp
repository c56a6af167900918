// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A record's counters as a daemon keeps them once they stop changing: only the words that
/// differ from new_counters(), each as a varint of the difference. A file read once by one
/// process has 20-40 such words of the 117, so its counters take ~100-200 bytes instead of 936:
/// what lets iolensd keep a big job's records within its memory bound (docs/daemon.md#bounded-memory).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/counters.hpp"

namespace iolens::core {

class PackedCounters {
 public:
  /// new_counters(), holding no memory.
  PackedCounters() = default;
  explicit PackedCounters(const FileCounters& c);
  PackedCounters(const PackedCounters& o);
  PackedCounters& operator=(const PackedCounters& o);
  PackedCounters(PackedCounters&&) noexcept = default;
  PackedCounters& operator=(PackedCounters&&) noexcept = default;

  /// The counters, exactly as given.
  FileCounters unpack() const;
  /// Bytes held on the heap (0 for new_counters()).
  std::size_t heap_bytes() const { return size_; }

 private:
  std::unique_ptr<uint8_t[]> data_;  // two u64 masks of the words present, then their varints
  uint32_t size_ = 0;
};

}  // namespace iolens::core
