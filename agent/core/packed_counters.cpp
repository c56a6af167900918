// SPDX-License-Identifier: Apache-2.0
#include "core/packed_counters.hpp"

#include <array>
#include <cstring>
#include <string>

namespace iolens::core {
namespace {

constexpr std::size_t kWords = PackedCounters::kWords;
constexpr std::size_t kRecordWords = PackedCounters::kRecordWords;
constexpr std::size_t kRecordMasks = PackedCounters::kRecordMasks;
constexpr std::size_t kSideWords = PackedCounters::kSideWords;
constexpr std::size_t kSideMasks = PackedCounters::kSideMasks;
constexpr std::size_t kMaskWords = PackedCounters::kMaskWords;
static_assert(sizeof(FileCounters) % 8 == 0, "counters are whole 64-bit words");
static_assert(sizeof(iolens_file_counters) % 8 == 0, "the record is whole 64-bit words");
static_assert(kRecordWords % 64 != 0 && kRecordWords % 64 < 63,
              "the last record mask covers counters in part, its top bit free");
static_assert(kSideWords % 64 != 0, "the last side mask covers words in part");
constexpr std::size_t kMaxVarint = 10;
static_assert(PackedCounters::kMaxBytes == kMaskWords * 8 + kWords * kMaxVarint);
/// The bits of the last record mask that name counter words, and the one that says the side
/// masks follow; the bits of the last side mask that name side words.
constexpr uint64_t kLastRecordBits = (uint64_t{1} << (kRecordWords % 64)) - 1;
constexpr uint64_t kSideFollows = uint64_t{1} << 63;
constexpr uint64_t kLastSideBits = (uint64_t{1} << (kSideWords % 64)) - 1;

/// Mask word m names word i: the record's masks, then the side's.
std::size_t word_of(std::size_t m, unsigned bit) {
  return m < kRecordMasks ? m * 64 + bit : kRecordWords + (m - kRecordMasks) * 64 + bit;
}

using Words = std::array<uint64_t, kWords>;

Words words_of(const FileCounters& c) {
  Words w;
  std::memcpy(w.data(), &c, sizeof c);
  return w;
}

/// new_counters() as words: what an absent word is.
const Words& base() {
  static const Words b = words_of(new_counters());
  return b;
}

}  // namespace

std::size_t PackedCounters::pack(const FileCounters& c, uint8_t* buf) {
  // One pass over the words, each read where it lies (no copy of the 2 KB of counters), its
  // varint written past the room all the masks could take; the side words (nearly always as
  // new) compared whole first. A record at every drain goes through here: two passes over a
  // copy were ~8% of iolensd's CPU at 10,000 new files a second.
  const auto* raw = reinterpret_cast<const unsigned char*>(&c);
  const Words& b = base();
  uint64_t mask[kMaskWords] = {};
  constexpr std::size_t kRoom = kMaskWords * 8;
  std::size_t n = kRoom;
  auto put = [&](std::size_t i) {
    uint64_t w;
    std::memcpy(&w, raw + i * 8, 8);
    uint64_t d = w - b[i];  // modulo 2^64: -1 -> 1000 is 1001, one or two bytes
    if (!d) return false;
    while (d >= 0x80) {
      buf[n++] = static_cast<uint8_t>(d | 0x80);
      d >>= 7;
    }
    buf[n++] = static_cast<uint8_t>(d);
    return true;
  };
  for (std::size_t i = 0; i < kRecordWords; ++i)
    if (put(i)) mask[i / 64] |= uint64_t{1} << (i % 64);
  const bool side = std::memcmp(raw + kRecordWords * 8, &b[kRecordWords], kSideWords * 8) != 0;
  if (side) {
    for (std::size_t j = 0; j < kSideWords; ++j)
      if (put(kRecordWords + j)) mask[kRecordMasks + j / 64] |= uint64_t{1} << (j % 64);
  }
  if (n == kRoom) return 0;  // new_counters(): nothing
  if (side) mask[kRecordMasks - 1] |= kSideFollows;
  const std::size_t masks = (side ? kMaskWords : kRecordMasks) * 8;
  if (masks != kRoom) std::memmove(buf + masks, buf + kRoom, n - kRoom);
  std::memcpy(buf, mask, masks);
  return n - (kRoom - masks);
}

PackedCounters::PackedCounters(const FileCounters& c) {
  uint8_t buf[kMaxBytes];
  const std::size_t n = pack(c, buf);
  if (!n) return;
  data_ = std::make_unique_for_overwrite<uint8_t[]>(n);
  std::memcpy(data_.get(), buf, n);
  size_ = static_cast<uint32_t>(n);
}

bool PackedCounters::assign(const FileCounters& c) {
  uint8_t buf[kMaxBytes];
  const std::size_t n = pack(c, buf);
  if (n == size_ && (n == 0 || std::memcmp(buf, data_.get(), n) == 0)) return false;
  if (n != size_) {
    data_ = n ? std::make_unique_for_overwrite<uint8_t[]>(n) : nullptr;
    size_ = static_cast<uint32_t>(n);
  }
  if (n) std::memcpy(data_.get(), buf, n);
  return true;
}

PackedCounters::PackedCounters(const PackedCounters& o) : size_(o.size_) {
  if (!size_) return;
  data_ = std::make_unique_for_overwrite<uint8_t[]>(size_);
  std::memcpy(data_.get(), o.data_.get(), size_);
}

PackedCounters& PackedCounters::operator=(const PackedCounters& o) {
  if (this != &o) *this = PackedCounters(o);
  return *this;
}

std::optional<PackedCounters> PackedCounters::from_bytes(std::string_view b, std::string& error) {
  if (b.empty()) return PackedCounters();
  constexpr std::size_t kRecordMaskBytes = kRecordMasks * 8;
  if (b.size() < kRecordMaskBytes) {
    error = "packed counters of " + std::to_string(b.size()) + " bytes (masks are " +
            std::to_string(kRecordMaskBytes) + ")";
    return std::nullopt;
  }
  uint64_t mask[kMaskWords] = {};
  std::memcpy(mask, b.data(), kRecordMaskBytes);
  const bool side = (mask[kRecordMasks - 1] & kSideFollows) != 0;
  mask[kRecordMasks - 1] &= ~kSideFollows;
  const std::size_t mask_bytes = (side ? kMaskWords : kRecordMasks) * 8;
  if (side) {
    if (b.size() < mask_bytes) {
      error = "packed counters of " + std::to_string(b.size()) + " bytes (masks with the side "
              "slots are " + std::to_string(mask_bytes) + ")";
      return std::nullopt;
    }
    std::memcpy(mask + kRecordMasks, b.data() + kRecordMaskBytes, kSideMasks * 8);
  }
  uint64_t any = 0, any_side = 0;
  std::size_t words = 0;
  for (std::size_t m = 0; m < kMaskWords; ++m) {
    any |= mask[m];
    if (m >= kRecordMasks) any_side |= mask[m];
    words += static_cast<std::size_t>(__builtin_popcountll(mask[m]));
  }
  if (any == 0 || (mask[kRecordMasks - 1] & ~kLastRecordBits) ||
      (mask[kMaskWords - 1] & ~kLastSideBits)) {
    error = any ? "packed counters name a word past the counters"
                : "packed counters with no word (new counters are empty)";
    return std::nullopt;
  }
  if (side && any_side == 0) {
    error = "packed counters say side slots follow but name none";
    return std::nullopt;
  }
  std::size_t at = mask_bytes;
  for (std::size_t k = 0; k < words; ++k) {
    // LEB128: at most 10 bytes, the tenth holding bit 63 only; the last byte non-zero unless
    // it is the only one (shortest form), and that one non-zero too (a difference).
    std::size_t len = 0;
    for (;;) {
      if (at + len >= b.size()) {
        error = "packed counters cut inside word " + std::to_string(k);
        return std::nullopt;
      }
      const uint8_t byte = static_cast<uint8_t>(b[at + len]);
      ++len;
      if (len == kMaxVarint && byte > 1) {
        error = "packed counter over 64 bits";
        return std::nullopt;
      }
      if (!(byte & 0x80)) {
        if (byte == 0) {
          error = len == 1 ? "packed counter of no difference" : "packed counter not in its shortest form";
          return std::nullopt;
        }
        break;
      }
      if (len == kMaxVarint) {
        error = "packed counter over 64 bits";
        return std::nullopt;
      }
    }
    at += len;
  }
  if (at != b.size()) {
    error = std::to_string(b.size() - at) + " bytes after the packed counters";
    return std::nullopt;
  }
  PackedCounters p;
  p.data_ = std::make_unique_for_overwrite<uint8_t[]>(b.size());
  std::memcpy(p.data_.get(), b.data(), b.size());
  p.size_ = static_cast<uint32_t>(b.size());
  return p;
}

FileCounters PackedCounters::unpack() const {
  // Written into the result in place (new_counters() first, then each word present), not
  // through a copy of the words.
  FileCounters c;
  std::memcpy(&c, base().data(), sizeof c);
  if (size_) {
    auto* raw = reinterpret_cast<unsigned char*>(&c);
    uint64_t mask[kMaskWords] = {};
    std::memcpy(mask, data_.get(), kRecordMasks * 8);
    const bool side = (mask[kRecordMasks - 1] & kSideFollows) != 0;
    mask[kRecordMasks - 1] &= ~kSideFollows;
    if (side) std::memcpy(mask + kRecordMasks, data_.get() + kRecordMasks * 8, kSideMasks * 8);
    const uint8_t* p = data_.get() + (side ? kMaskWords : kRecordMasks) * 8;
    const std::size_t parts = side ? kMaskWords : kRecordMasks;
    for (std::size_t part = 0; part < parts; ++part) {
      for (uint64_t m = mask[part]; m; m &= m - 1) {
        const std::size_t i = word_of(part, static_cast<unsigned>(__builtin_ctzll(m)));
        uint64_t d = 0;
        for (unsigned shift = 0;; shift += 7) {
          const uint8_t byte = *p++;
          d |= uint64_t{byte & 0x7fu} << shift;
          if (!(byte & 0x80)) break;
        }
        uint64_t w;
        std::memcpy(&w, raw + i * 8, 8);
        w += d;
        std::memcpy(raw + i * 8, &w, 8);
      }
    }
  }
  return c;
}

}  // namespace iolens::core
