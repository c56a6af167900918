// SPDX-License-Identifier: Apache-2.0
#include "core/common_values.hpp"

namespace iolens::core {

CommonValues common_values(const iolens_tally& t) {
  CommonValues out{};
  std::size_t n = 0;
  std::array<CommonValue, IOLENS_TALLY_SLOTS> held{};
  for (int i = 0; i < IOLENS_TALLY_SLOTS; ++i) {
    // value 0 is stored as 1: tallied (it took a slot, as it takes one of Darshan's 32) but
    // never one of the four (darshan-common.h: `if(*(int64_t *)__vals == 0) break;`)
    if (t.value[i] <= 1 || t.count[i] == 0) continue;
    held[n++] = {static_cast<int64_t>(t.value[i] - 1), static_cast<int64_t>(t.count[i])};
  }
  // Insertion into the four, as Darshan's slots take values: by count, ties to the larger value
  // (a hand-written loop: GCC 12 warns on std::sort of a short range at -O2)
  const auto before = [](const CommonValue& a, const CommonValue& b) {
    return a.count != b.count ? a.count > b.count : a.value > b.value;
  };
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t at = 0;
    while (at < out.size() && out[at].count != 0 && !before(held[i], out[at])) ++at;
    if (at == out.size()) continue;
    for (std::size_t j = out.size() - 1; j > at; --j) out[j] = out[j - 1];
    out[at] = held[i];
  }
  return out;
}

void merge_tally(iolens_tally& into, const iolens_tally& later) {
  into.untallied += later.untallied;
  for (int i = 0; i < IOLENS_TALLY_SLOTS; ++i) {
    const uint64_t key = later.value[i];
    if (key == 0) continue;
    int slot = 0;
    while (slot < IOLENS_TALLY_SLOTS && into.value[slot] != 0 && into.value[slot] != key) ++slot;
    if (slot == IOLENS_TALLY_SLOTS) {
      into.untallied += later.count[i];
      continue;
    }
    into.value[slot] = key;
    into.count[slot] += later.count[i];
  }
}

uint64_t tally_calls(const iolens_tally& t) {
  uint64_t n = t.untallied;
  for (int i = 0; i < IOLENS_TALLY_SLOTS; ++i) n += t.count[i];
  return n;
}

}  // namespace iolens::core
