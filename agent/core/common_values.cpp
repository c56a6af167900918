// SPDX-License-Identifier: Apache-2.0
#include "core/common_values.hpp"

namespace iolens::core {
namespace {
/// A value that found a record's slots full, into `side` (the FileCounters whose side slots
/// take it: core::account_rw), as the kernel's tally_more does; without one, untallied.
void side_add(void* side, iolens_tally* t, int which, uint64_t v);
}  // namespace
}  // namespace iolens::core

// Before iolens_account.h, which this file alone includes with a side entry to go to.
#define IOLENS_TALLY_SIDE(side, t, which, v) iolens::core::side_add(side, t, which, v)
#include "iolens_account.h"

namespace iolens::core {
namespace {

constexpr int kSlots = IOLENS_TALLY_SLOTS + IOLENS_TALLY_MORE_SLOTS;  // Darshan's 32

// Slot i of the 32: the record's first, then the side entry's.
template <typename T, typename M>
auto& value_at(T& t, M& more, int i) {
  return i < IOLENS_TALLY_SLOTS ? t.value[i] : more.value[i - IOLENS_TALLY_SLOTS];
}
template <typename T, typename M>
auto& count_at(T& t, M& more, int i) {
  return i < IOLENS_TALLY_SLOTS ? t.count[i] : more.count[i - IOLENS_TALLY_SLOTS];
}

}  // namespace

CommonValues common_values(const iolens_tally& t, const iolens_tally_more& more) {
  CommonValues out{};
  // Insertion into the four, as Darshan's slots take values: by count, ties to the larger value
  // (a hand-written loop: GCC 12 warns on std::sort of a short range at -O2)
  const auto before = [](const CommonValue& a, const CommonValue& b) {
    return a.count != b.count ? a.count > b.count : a.value > b.value;
  };
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t key = value_at(t, more, i);
    // value 0 is stored as 1: tallied (it took a slot, as it takes one of Darshan's 32) but
    // never one of the four (darshan-common.h: `if(*(int64_t *)__vals == 0) break;`)
    if (key <= 1 || count_at(t, more, i) == 0) continue;
    // A value is held once, but a side entry left by a call that raced its record's removal
    // can hold one the record's next part holds too (docs/counters.md): counted as one value.
    uint64_t n = 0;
    bool seen = false;
    for (int j = 0; j < kSlots; ++j) {
      if (value_at(t, more, j) != key) continue;
      seen = seen || j < i;
      n += count_at(t, more, j);
    }
    if (seen) continue;
    const CommonValue held{static_cast<int64_t>(key - 1), static_cast<int64_t>(n)};
    std::size_t at = 0;
    while (at < out.size() && out[at].count != 0 && !before(held, out[at])) ++at;
    if (at == out.size()) continue;
    for (std::size_t j = out.size() - 1; j > at; --j) out[j] = out[j - 1];
    out[at] = held;
  }
  return out;
}

CommonValues common_accesses(const FileCounters& c) { return common_values(c.access, c.more.access); }
CommonValues common_strides(const FileCounters& c) { return common_values(c.stride, c.more.stride); }

void merge_tally(iolens_tally& into, iolens_tally_more& into_more, const iolens_tally& later,
                 const iolens_tally_more& later_more) {
  into.untallied += later.untallied;
  into_more.untallied += later_more.untallied;
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t v = value_at(later, later_more, i);  // a slot key, 0 for a free slot
    if (v == 0) continue;
    int slot = 0;
    while (slot < kSlots && value_at(into, into_more, slot) != 0 &&
           value_at(into, into_more, slot) != v)
      ++slot;
    if (slot == kSlots) {
      into_more.untallied += count_at(later, later_more, i);
      continue;
    }
    value_at(into, into_more, slot) = v;
    count_at(into, into_more, slot) += count_at(later, later_more, i);
  }
}

void merge_tallies(FileCounters& into, const FileCounters& later) {
  merge_tally(into.access, into.more.access, later.access, later.more.access);
  merge_tally(into.stride, into.more.stride, later.stride, later.more.stride);
}

void tally_more_add(iolens_tally_more& more, uint64_t v) {
  if (iolens_tally_slots_add(more.value, more.count, IOLENS_TALLY_MORE_SLOTS, v + 1))
    more.untallied += 1;
}

uint64_t tally_calls(const iolens_tally& t, const iolens_tally_more& more) {
  uint64_t n = untallied(t, more);
  for (int i = 0; i < kSlots; ++i) n += count_at(t, more, i);
  return n;
}

uint64_t untallied(const iolens_tally& t, const iolens_tally_more& more) {
  return t.untallied + more.untallied;
}

namespace {
void side_add(void* side, iolens_tally* t, int which, uint64_t v) {
  auto* c = static_cast<FileCounters*>(side);
  if (!c) {
    t->untallied += 1;
    return;
  }
  tally_more_add(which == IOLENS_SIDE_STRIDE ? c->more.stride : c->more.access, v);
}
}  // namespace

void account_rw(FileCounters& c, int is_write, int64_t offset, int64_t ret, uint64_t t0,
                uint64_t t1) {
  iolens_account_rw_tally(&c, is_write, offset, ret, t0, t1, 1, &c);
}

}  // namespace iolens::core
