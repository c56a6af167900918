// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The wall clock against the monotonic one. The kernel stamps every event with the monotonic
/// clock (bpf_ktime_get_ns); records give wall times, `monotonic + offset`. The offset changes
/// only when the wall clock is stepped (settimeofday, an NTP client's step, a VM resumed and
/// corrected, a leap second): both clocks run at the same, slewed rate otherwise. A daemon that
/// took the offset once at start would write every later time off by each step since, for as
/// long as it runs; so it follows the offset, and counts and dates each step.

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace iolens::core {

/// CLOCK_REALTIME - CLOCK_MONOTONIC now, the wall reading taken between two monotonic ones and
/// set against their middle; a pair more than 20 us apart (preempted between readings) is read
/// again, so that a reading's error stays far below WallClockSteps::kMinStep.
int64_t mono_to_wall_now();

/// The offset in force and the steps seen. Pure: the readings are given.
class WallClockSteps {
 public:
  /// Smaller changes are taken for reading noise and left alone.
  static constexpr int64_t kMinStep = 1'000'000;  // 1 ms
  /// Steps kept for records (the oldest go first; `steps()` counts them all).
  static constexpr size_t kKept = 64;

  struct Step {
    int64_t at_mono = 0;   // when it was seen (monotonic); it happened since the reading before
    int64_t delta_ns = 0;  // new offset - old: positive when the clock was set forward
  };

  explicit WallClockSteps(int64_t offset) : offset_(offset) {}

  /// A new reading of the offset at `now_mono`. A change of at least kMinStep is a step: taken,
  /// counted, kept and returned; a smaller one is not.
  std::optional<int64_t> observe(int64_t offset, int64_t now_mono);

  int64_t offset() const { return offset_; }
  uint64_t steps() const { return steps_; }
  /// The sum of the steps' sizes, each counted as positive.
  uint64_t stepped_ns() const { return stepped_ns_; }
  const std::deque<Step>& kept() const { return kept_; }
  /// The kept steps seen in [from_mono, to_mono] (`to_mono` absent: to now), oldest first.
  std::vector<Step> between(int64_t from_mono, std::optional<int64_t> to_mono) const;

 private:
  int64_t offset_;
  uint64_t steps_ = 0;
  uint64_t stepped_ns_ = 0;
  std::deque<Step> kept_;
};

}  // namespace iolens::core
