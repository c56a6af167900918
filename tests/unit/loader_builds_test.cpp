// SPDX-License-Identifier: Apache-2.0
// The two builds of the programs (bpf/README.md "Two builds") share one skeleton: the build
// compares their variables' layout; this compares their maps and programs, opened, not loaded.
#include <gtest/gtest.h>

#include "loader/loader.hpp"

TEST(ProgramBuilds, SameMapsAndPrograms) {
  const iolens::Status s = iolens::loader::program_builds_alike();
  EXPECT_TRUE(s) << s.message;
}
