// SPDX-License-Identifier: Apache-2.0
// The wall clock's steps: what counts as one, what is kept, and a real reading's noise.
#include "core/wall_clock.hpp"

#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>

#include "core/clock.hpp"

namespace iolens::core {
namespace {

constexpr int64_t kHour = 3600LL * 1000000000LL;

TEST(WallClockSteps, ReadingNoiseIsNoStep) {
  WallClockSteps w(5 * kHour);
  EXPECT_FALSE(w.observe(5 * kHour + WallClockSteps::kMinStep - 1, 10));
  EXPECT_FALSE(w.observe(5 * kHour - WallClockSteps::kMinStep + 1, 20));
  EXPECT_EQ(w.offset(), 5 * kHour);  // noise is not taken either
  EXPECT_EQ(w.steps(), 0u);
  EXPECT_TRUE(w.kept().empty());
}

TEST(WallClockSteps, StepsForwardAndBackAreTakenCountedAndDated) {
  WallClockSteps w(5 * kHour);
  const auto fwd = w.observe(6 * kHour, 100);
  ASSERT_TRUE(fwd);
  EXPECT_EQ(*fwd, kHour);
  EXPECT_EQ(w.offset(), 6 * kHour);
  const auto back = w.observe(6 * kHour - 2 * WallClockSteps::kMinStep, 200);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, -2 * WallClockSteps::kMinStep);
  EXPECT_EQ(w.steps(), 2u);
  EXPECT_EQ(w.stepped_ns(), static_cast<uint64_t>(kHour + 2 * WallClockSteps::kMinStep));
  // Noise after a step is measured against the new offset.
  EXPECT_FALSE(w.observe(w.offset() + 10, 300));
  ASSERT_EQ(w.kept().size(), 2u);
  EXPECT_EQ(w.kept()[0].at_mono, 100);
  EXPECT_EQ(w.kept()[1].delta_ns, -2 * WallClockSteps::kMinStep);
}

TEST(WallClockSteps, BetweenSelectsAJobsWindow) {
  WallClockSteps w(0);
  for (int i = 1; i <= 5; ++i) w.observe(i * kHour, i * 1000);
  const auto mid = w.between(2000, 4000);
  ASSERT_EQ(mid.size(), 3u);
  EXPECT_EQ(mid.front().at_mono, 2000);
  EXPECT_EQ(mid.back().at_mono, 4000);
  const auto open = w.between(4500, std::nullopt);  // a live job: to now
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].at_mono, 5000);
  EXPECT_TRUE(w.between(6000, std::nullopt).empty());
}

TEST(WallClockSteps, KeepsTheNewestAndCountsAll) {
  WallClockSteps w(0);
  const size_t n = WallClockSteps::kKept + 10;
  for (size_t i = 1; i <= n; ++i) w.observe(static_cast<int64_t>(i) * kHour, static_cast<int64_t>(i));
  EXPECT_EQ(w.steps(), n);
  ASSERT_EQ(w.kept().size(), WallClockSteps::kKept);
  EXPECT_EQ(w.kept().front().at_mono, 11);
  EXPECT_EQ(w.kept().back().at_mono, static_cast<int64_t>(n));
}

TEST(MonoToWallNow, AgreesWithTheClocksAndIsSteady) {
  // Two readings a moment apart differ by far less than a step: a daemon that reads it at every
  // pass of its loop must not see steps that are not there.
  const int64_t a = mono_to_wall_now();
  const int64_t naive = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
  int64_t worst = 0;
  for (int i = 0; i < 1000; ++i) {
    const int64_t d = mono_to_wall_now() - a;
    worst = std::max(worst, d < 0 ? -d : d);
  }
  EXPECT_LT(worst, WallClockSteps::kMinStep / 10);
  EXPECT_LT(std::llabs(naive - a), WallClockSteps::kMinStep);
}

}  // namespace
}  // namespace iolens::core
