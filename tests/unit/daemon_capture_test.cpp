// SPDX-License-Identifier: Apache-2.0
// Captures in iolensd (agent/daemon/capture): who may stop one, and what its status says once
// its output stalled.
#include "daemon/capture.hpp"

#include <gtest/gtest.h>

namespace iolens::daemon {
namespace {

TEST(Capture, OnlyItsOwnerRootOrTheDaemonsUserMayStopIt) {
  EXPECT_TRUE(capture_stop_allowed(1000, 1000, 0));
  EXPECT_TRUE(capture_stop_allowed(1000, 0, 0));
  EXPECT_FALSE(capture_stop_allowed(1000, 1001, 0));
  EXPECT_FALSE(capture_stop_allowed(1000, 65534, 0));
  // iolensd running as its own user: that user too (as on the socket itself).
  EXPECT_TRUE(capture_stop_allowed(1000, 990, 990));
  EXPECT_FALSE(capture_stop_allowed(1000, 1001, 990));
  // Root's capture: nobody else.
  EXPECT_FALSE(capture_stop_allowed(0, 1000, 0));
}

TEST(Capture, StatusOfAStalledCaptureSaysWhyAndWhatNeverGotOut) {
  Capture c;
  c.id = 4;
  c.uid = 1000;
  c.start_mono_ns = 1000000000;
  c.deadline_mono_ns = 31000000000;
  EXPECT_EQ("running", c.status(2000000000)["state"]);
  c.end = CaptureEnd::OutputStalled;
  c.end_mono_ns = 12000000000;
  // Window closed, output not settled yet: still running (the client waits on).
  EXPECT_EQ("running", c.status(13000000000)["state"]);
  EXPECT_EQ(0.0, c.status(13000000000)["remaining_s"]);
  c.settled = true;
  c.out_state.written = 65536;
  c.out_state.queued = 4096;
  c.unwritten = 4096;
  c.error = "output stalled: it took no bytes for 10 s";
  const auto j = c.status(14000000000);
  EXPECT_EQ("failed", j["state"]);
  EXPECT_EQ("output stalled", j["reason"]);
  EXPECT_EQ(1000u, j["uid"]);
  EXPECT_EQ(65536u, j["bytes"]);
  EXPECT_EQ(4096u, j["output"]["unwritten_bytes"]);
  EXPECT_EQ(11.0, j["elapsed_s"]);
}

}  // namespace
}  // namespace iolens::daemon
