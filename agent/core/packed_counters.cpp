// SPDX-License-Identifier: Apache-2.0
#include "core/packed_counters.hpp"

#include <array>
#include <cstring>

namespace iolens::core {
namespace {

constexpr std::size_t kWords = sizeof(FileCounters) / 8;
static_assert(sizeof(FileCounters) % 8 == 0, "counters are whole 64-bit words");
static_assert(kWords <= 128, "two mask words cover every counter");
constexpr std::size_t kMaskBytes = 16;
constexpr std::size_t kMaxVarint = 10;

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

PackedCounters::PackedCounters(const FileCounters& c) {
  const Words w = words_of(c);
  const Words& b = base();
  uint8_t buf[kMaskBytes + kWords * kMaxVarint];
  uint64_t mask[2] = {0, 0};
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
  if (n == kMaskBytes) return;  // new_counters(): nothing to hold
  std::memcpy(buf, mask, kMaskBytes);
  data_ = std::make_unique_for_overwrite<uint8_t[]>(n);
  std::memcpy(data_.get(), buf, n);
  size_ = static_cast<uint32_t>(n);
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

FileCounters PackedCounters::unpack() const {
  Words w = base();
  if (size_) {
    uint64_t mask[2];
    std::memcpy(mask, data_.get(), kMaskBytes);
    const uint8_t* p = data_.get() + kMaskBytes;
    for (std::size_t half = 0; half < 2; ++half) {
      for (uint64_t m = mask[half]; m; m &= m - 1) {
        const std::size_t i = half * 64 + static_cast<std::size_t>(__builtin_ctzll(m));
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
