// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Darshan's four most common access sizes and strides (POSIX_ACCESS1..4_ACCESS/COUNT,
/// POSIX_STRIDE1..4_STRIDE/COUNT) from the kernel's tallies (iolens_file_counters::access and
/// ::stride, bpf/iolens_account.h iolens_tally_add). Pure. Rules and source lines:
/// docs/counters.md "Common access sizes and strides (ABI 15)".

#include <array>
#include <cstdint>

#include "iolens_abi.h"

namespace iolens::core {

/// One of the four: a value and the calls that had it. {0, 0} is an unused slot, as in Darshan.
struct CommonValue {
  int64_t value = 0;
  int64_t count = 0;
  bool operator==(const CommonValue&) const = default;
};

using CommonValues = std::array<CommonValue, 4>;

/// Darshan's four from a tally: the most frequent values, ties to the larger value
/// (darshan-common.h DARSHAN_UPDATE_COMMON_VAL_COUNTERS), the value 0 never among them; unused
/// slots {0, 0}.
CommonValues common_values(const iolens_tally& t);

/// Adds `later`'s calls to `into` as if they had come after `into`'s (a record folded after its
/// kernel copy was moved out, or the records of several files or processes combined): a value
/// already held counts on, a new one takes the next free slot in `later`'s order, and the calls
/// of a value left without a slot are untallied, as are `later`'s own untallied calls.
void merge_tally(iolens_tally& into, const iolens_tally& later);

/// The calls a tally counted: held and untallied.
uint64_t tally_calls(const iolens_tally& t);

}  // namespace iolens::core
