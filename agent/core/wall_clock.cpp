// SPDX-License-Identifier: Apache-2.0
#include "core/wall_clock.hpp"

#include <time.h>

#include "core/clock.hpp"

namespace iolens::core {

int64_t mono_to_wall_now() {
  int64_t best = 0;
  int64_t best_gap = -1;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int64_t m1 = clock_ns(CLOCK_MONOTONIC);
    const int64_t w = clock_ns(CLOCK_REALTIME);
    const int64_t m2 = clock_ns(CLOCK_MONOTONIC);
    const int64_t gap = m2 - m1;
    if (best_gap < 0 || gap < best_gap) {
      best_gap = gap;
      best = w - (m1 + gap / 2);
    }
    if (gap <= 20'000) break;
  }
  return best;
}

std::optional<int64_t> WallClockSteps::observe(int64_t offset, int64_t now_mono) {
  const int64_t delta = offset - offset_;
  if (delta > -kMinStep && delta < kMinStep) return std::nullopt;
  offset_ = offset;
  ++steps_;
  stepped_ns_ += static_cast<uint64_t>(delta < 0 ? -delta : delta);
  if (kept_.size() >= kKept) kept_.pop_front();
  kept_.push_back({now_mono, delta});
  return delta;
}

std::vector<WallClockSteps::Step> WallClockSteps::between(int64_t from_mono,
                                                          std::optional<int64_t> to_mono) const {
  std::vector<Step> out;
  for (const Step& s : kept_)
    if (s.at_mono >= from_mono && (!to_mono || s.at_mono <= *to_mono)) out.push_back(s);
  return out;
}

}  // namespace iolens::core
