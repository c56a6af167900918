// SPDX-License-Identifier: Apache-2.0
// Crash points (core/crash_point.hpp): a process asked to die at a point dies there by SIGKILL,
// only there, and with IOLENS_CRASH_AFTER only once the other point has passed. Each case runs
// in a process of its own (the environment is read once per process).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/crash_point.hpp"

using iolens::core::crash_point;

namespace {

/// Runs `body` in a freshly started copy of this test binary (the threadsafe death-test
/// style), with the environment set there first.
class CrashPointTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace

TEST_F(CrashPointTest, DiesByItsOwnSigkillAtThePointAskedOnly) {
  EXPECT_EXIT(
      {
        setenv("IOLENS_CRASH_AT", "record_renamed", 1);
        unsetenv("IOLENS_CRASH_AFTER");
        crash_point("record_written");
        crash_point("state_renamed");
        fprintf(stderr, "passed the others\n");  // dead before here: the wrong point
        crash_point("record_renamed");
        exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGKILL), "passed the others");
  EXPECT_EXIT(
      {
        unsetenv("IOLENS_CRASH_AT");
        for (const char* p : iolens::core::kCrashPoints) crash_point(p);
        exit(3);
      },
      ::testing::ExitedWithCode(3), "");
}

TEST_F(CrashPointTest, AfterArmsThePointOnlyOnceTheOtherHasPassed) {
  EXPECT_EXIT(
      {
        setenv("IOLENS_CRASH_AT", "state_written", 1);
        setenv("IOLENS_CRASH_AFTER", "record_renamed", 1);
        crash_point("state_written");  // a save before any record: goes on
        crash_point("state_written");
        crash_point("record_renamed");
        exit(4);
      },
      ::testing::ExitedWithCode(4), "");
  EXPECT_EXIT(
      {
        setenv("IOLENS_CRASH_AT", "state_written", 1);
        setenv("IOLENS_CRASH_AFTER", "record_renamed", 1);
        crash_point("state_written");
        crash_point("record_renamed");
        fprintf(stderr, "armed\n");  // dead before here: too early
        crash_point("state_written");  // the save after the record: dies
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "armed");
}

TEST(CrashPoint, KnowsItsPointsOnly) {
  for (const char* p : iolens::core::kCrashPoints) EXPECT_TRUE(iolens::core::known_crash_point(p));
  EXPECT_FALSE(iolens::core::known_crash_point("record_renamd"));
  EXPECT_FALSE(iolens::core::known_crash_point(""));
}
