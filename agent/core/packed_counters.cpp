// SPDX-License-Identifier: Apache-2.0
#include "core/packed_counters.hpp"

#include <array>
#include <cstring>
#include <string>

namespace iolens::core {
namespace {

constexpr std::size_t kWords = PackedCounters::kWords;
constexpr std::size_t kMaskWords = PackedCounters::kMaskWords;
static_assert(sizeof(FileCounters) % 8 == 0, "counters are whole 64-bit words");
static_assert(kWords % 64 != 0, "the last mask word covers counters in part");
constexpr std::size_t kMaskBytes = kMaskWords * 8;
constexpr std::size_t kMaxVarint = 10;
static_assert(PackedCounters::kMaxBytes == kMaskBytes + kWords * kMaxVarint);
/// The bits of the last mask word that name counter words.
constexpr uint64_t kLastMaskBits = (uint64_t{1} << (kWords % 64)) - 1;

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
  const Words w = words_of(c);
  const Words& b = base();
  uint64_t mask[kMaskWords] = {};
  std::size_t n = kMaskBytes;
  for (std::size_t i = 0; i < kWords; ++i) {
    uint64_t d = w[i] - b[i];  // modulo 2^64: -1 -> 1000 is 1001, one or two bytes
    if (!d) continue;
    mask[i / 64] |= uint64_t{1} << (i % 64);
    while (d >= 0x80) {
      buf[n++] = static_cast<uint8_t>(d | 0x80);
      d >>= 7;
    }
    buf[n++] = static_cast<uint8_t>(d);
  }
  if (n == kMaskBytes) return 0;  // new_counters(): nothing
  std::memcpy(buf, mask, kMaskBytes);
  return n;
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
  if (b.size() < kMaskBytes) {
    error = "packed counters of " + std::to_string(b.size()) + " bytes (masks are " +
            std::to_string(kMaskBytes) + ")";
    return std::nullopt;
  }
  uint64_t mask[kMaskWords];
  std::memcpy(mask, b.data(), kMaskBytes);
  uint64_t any = 0;
  std::size_t words = 0;
  for (const uint64_t m : mask) {
    any |= m;
    words += static_cast<std::size_t>(__builtin_popcountll(m));
  }
  if (any == 0 || (mask[kMaskWords - 1] & ~kLastMaskBits)) {
    error = any ? "packed counters name a word past the counters"
                : "packed counters with no word (new counters are empty)";
    return std::nullopt;
  }
  std::size_t at = kMaskBytes;
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
  Words w = base();
  if (size_) {
    uint64_t mask[kMaskWords];
    std::memcpy(mask, data_.get(), kMaskBytes);
    const uint8_t* p = data_.get() + kMaskBytes;
    for (std::size_t part = 0; part < kMaskWords; ++part) {
      for (uint64_t m = mask[part]; m; m &= m - 1) {
        const std::size_t i = part * 64 + static_cast<std::size_t>(__builtin_ctzll(m));
        uint64_t d = 0;
        for (unsigned shift = 0;; shift += 7) {
          const uint8_t byte = *p++;
          d |= uint64_t{byte & 0x7fu} << shift;
          if (!(byte & 0x80)) break;
        }
        w[i] += d;
      }
    }
  }
  FileCounters c;
  std::memcpy(&c, w.data(), sizeof c);
  return c;
}

}  // namespace iolens::core
