// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Darshan's four most common access sizes and strides (POSIX_ACCESS1..4_ACCESS/COUNT,
/// POSIX_STRIDE1..4_STRIDE/COUNT) from the kernel's tallies: a record's first IOLENS_TALLY_SLOTS
/// values (iolens_file_counters::access and ::stride, bpf/iolens_account.h iolens_tally_add) and
/// its side entry's next IOLENS_TALLY_MORE_SLOTS (FileCounters::more): Darshan's 32. Pure. Rules
/// and source lines: docs/counters.md "Common access sizes and strides".

#include <array>
#include <cstdint>

#include "core/counters.hpp"
#include "iolens_abi.h"

namespace iolens::core {

/// One of the four: a value and the calls that had it. {0, 0} is an unused slot, as in Darshan.
struct CommonValue {
  int64_t value = 0;
  int64_t count = 0;
  bool operator==(const CommonValue&) const = default;
};

using CommonValues = std::array<CommonValue, 4>;

/// Darshan's four from a tally's 32 slots (the record's, then its side entry's): the most
/// frequent values, ties to the larger value (darshan-common.h DARSHAN_UPDATE_COMMON_VAL_COUNTERS);
/// unused slots {0, 0}.
CommonValues common_values(const iolens_tally& t, const iolens_tally_more& more);
CommonValues common_accesses(const FileCounters& c);
CommonValues common_strides(const FileCounters& c);

/// Adds `later`'s calls to `into` as if they had come after `into`'s (a record folded after its
/// kernel copy was moved out, or the records of several files or processes combined): a value
/// already held counts on, a new one takes the next free slot of the 32 in `later`'s order, and
/// the calls of a value left without a slot are untallied, as are `later`'s own untallied calls.
void merge_tally(iolens_tally& into, iolens_tally_more& into_more, const iolens_tally& later,
                 const iolens_tally_more& later_more);
/// Both kinds of `later` into `into`.
void merge_tallies(FileCounters& into, const FileCounters& later);

/// A value `v` that found a record's slots full, into its side slots, as the kernel's
/// tally_more does (bpf/iolens.bpf.c): a held value counts on, a new one takes the next free
/// slot, and with none free the call is untallied.
void tally_more_add(iolens_tally_more& more, uint64_t v);

/// The calls a tally counted: held, in either part, and untallied.
uint64_t tally_calls(const iolens_tally& t, const iolens_tally_more& more);
/// The calls whose value was not tallied: past Darshan's 32, or (the kernel's `tallies_more`
/// full) without a side entry.
uint64_t untallied(const iolens_tally& t, const iolens_tally_more& more);

/// The kernel's accounting of a read or write (iolens_account_rw), its values past the
/// record's slots going to the side slots as the kernel's record_read/record_write sends them:
/// what a trace replay does with each call.
void account_rw(FileCounters& c, int is_write, int64_t offset, int64_t ret, uint64_t t0,
                uint64_t t1);

}  // namespace iolens::core
