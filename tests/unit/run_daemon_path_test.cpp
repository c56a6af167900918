// SPDX-License-Identifier: Apache-2.0
// `iolens run`'s choice of path (cli/daemon_run.hpp): which options keep a run local.
#include <gtest/gtest.h>

#include "cli/daemon_run.hpp"

using namespace iolens::cli;

TEST(RunDaemonPath, OptionsOnlyTheLocalPathHas) {
  RunOptions o;
  o.command = {"true"};
  EXPECT_EQ(daemon_path_refusal(o), "");
  o.json_path = "x.json";
  o.darshan_path = "x.darshan";
  o.quiet = true;
  EXPECT_EQ(daemon_path_refusal(o), "");  // outputs are made by the client either way
  o.local_only_option = "--btf";
  EXPECT_EQ(daemon_path_refusal(o), "--btf needs iolens's own programs");
  o.local_only_option.clear();
  o.trace_path = "x.trace";  // set without the option being counted (a caller's RunOptions)
  EXPECT_EQ(daemon_path_refusal(o), "--trace needs iolens's own programs");
}

TEST(RunDaemonPath, ClockBase) {
  int64_t start_wall = 0;
  const iolens::core::ClockBase c = run_clock_now(start_wall);
  EXPECT_GT(c.start_mono_ns, 0u);
  EXPECT_EQ(start_wall, static_cast<int64_t>(c.start_mono_ns) + c.mono_to_wall_ns);
  EXPECT_GT(start_wall, 1'600'000'000LL * 1'000'000'000LL);  // after 2020: a wall clock
}
