// SPDX-License-Identifier: Apache-2.0
// limits.memory (issue 16, item 2): one bound on iolensd's RSS from which the record limits not
// given are derived. What is derived must fit the bound, give way to what the config gives,
// and a config whose limits cannot fit a bound it gives must be refused with the numbers.
#include <gtest/gtest.h>

#include <string>

#include "core/units.hpp"
#include "jobs/config.hpp"
#include "jobs/memory_bound.hpp"

using iolens::jobs::apply_memory_bound;
using iolens::core::human_bytes;
using iolens::jobs::Limits;
using iolens::jobs::MemoryCost;
using iolens::jobs::MemoryPlan;
using iolens::jobs::parse_config;

namespace {

constexpr uint64_t MiB = 1ull << 20;

/// The plan's parts computed here from the limits, by the costs the header states.
uint64_t needed(const Limits& l) {
  return MemoryCost::kDaemon + 2 * (uint64_t{l.ring_bytes} + l.trace_ring_bytes) +
         4 * uint64_t{l.ring_bytes} +
         l.max_files_per_job * MemoryCost::kRecordWritten + l.max_records * MemoryCost::kRecord +
         MemoryCost::kNameCopies * l.max_path_bytes;
}

}  // namespace

TEST(MemoryBound, TheDefaultsAreWhatTheDefaultBoundGives) {
  Limits l;
  MemoryPlan plan;
  ASSERT_EQ(apply_memory_bound(l, &plan), "");
  const Limits defaults;
  // The values Limits starts with (what a Config made without a file holds) are the derived ones.
  EXPECT_EQ(l.max_files_per_job, defaults.max_files_per_job);
  EXPECT_EQ(l.max_records, defaults.max_records);
  EXPECT_EQ(l.max_path_bytes, defaults.max_path_bytes);
  EXPECT_EQ(l.max_path_bytes_per_job, defaults.max_path_bytes_per_job);
  EXPECT_EQ(plan.bound, 256 * MiB);
  EXPECT_FALSE(plan.implied);
  EXPECT_EQ(plan.total(), needed(l));
  EXPECT_LE(plan.total(), 256 * MiB);
  // Rounding leaves little unspent: within 1% of the bound.
  EXPECT_GE(plan.total(), 256 * MiB / 100 * 99);
  // Rings count twice: 16 MiB each, both mapped; and four copies of a ring's names.
  EXPECT_EQ(plan.rings, 64 * MiB);
  EXPECT_EQ(plan.ring_names, 64 * MiB);
}

TEST(MemoryBound, ABiggerBoundGivesProportionallyMore) {
  Limits small, big;
  big.memory = 2048 * MiB;
  big.given.memory = true;
  MemoryPlan p;
  ASSERT_EQ(apply_memory_bound(small), "");
  ASSERT_EQ(apply_memory_bound(big, &p), "");
  EXPECT_GT(big.max_records, small.max_records * 10);
  EXPECT_GT(big.max_files_per_job, small.max_files_per_job * 10);
  EXPECT_GT(big.max_path_bytes, 64 * MiB);
  EXPECT_EQ(big.max_path_bytes_per_job, 64 * MiB);  // capped: one job's names
  EXPECT_LE(needed(big), 2048 * MiB);
  EXPECT_EQ(p.bound, 2048 * MiB);
}

TEST(MemoryBound, LimitsGivenTakeTheirPartFirst) {
  Limits l;
  l.max_files_per_job = 20000;  // 60 MB to write such a record
  l.given.max_files_per_job = true;
  ASSERT_EQ(apply_memory_bound(l), "");
  EXPECT_EQ(l.max_files_per_job, 20000u);
  EXPECT_LT(l.max_records, Limits{}.max_records);
  EXPECT_LE(needed(l), 256 * MiB);
  // A job's limit near what the bound allows, with the packaged config's bound given: the
  // records raised to one job's worth take from the names, and the config fits.
  for (uint64_t files : {22000u, 24000u, 24700u}) {
    Limits near;
    near.given.memory = true;
    near.max_files_per_job = files;
    near.given.max_files_per_job = true;
    MemoryPlan plan;
    ASSERT_EQ(apply_memory_bound(near, &plan), "") << files;
    EXPECT_EQ(near.max_records, files);
    EXPECT_LE(plan.total(), 256 * MiB) << files;
    EXPECT_GE(near.max_path_bytes, 64u << 10);
  }
  // Given again, unchanged: idempotent.
  const Limits once = l;
  ASSERT_EQ(apply_memory_bound(l), "");
  EXPECT_EQ(l.max_records, once.max_records);
  EXPECT_EQ(l.max_path_bytes, once.max_path_bytes);
}

TEST(MemoryBound, LimitsOverAGivenBoundAreRefusedWithTheNumbers) {
  Limits l;
  l.given.memory = true;
  l.max_records = 1000000;
  l.given.max_records = true;
  const std::string why = apply_memory_bound(l);
  // 1,000,000 records of 1,400 bytes: 1.3 GiB.
  EXPECT_NE(why.find("limits.memory: the limits given need"), std::string::npos) << why;
  EXPECT_NE(why.find("more than its 256 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("max_records 1.30 GiB"), std::string::npos) << why;
}

TEST(MemoryBound, ABoundBelowTheDaemonAndItsRingsIsRefused) {
  Limits l;
  l.memory = 64 * MiB;  // the rings alone take 64 MiB mapped
  l.given.memory = true;
  const std::string why = apply_memory_bound(l);
  EXPECT_EQ(why,
            "limits.memory: 64.0 MiB is less than the daemon and its rings take (152 MiB: both "
            "rings mapped twice, and the names a ring can bring) plus 8.00 MiB for records; raise "
            "it or make the rings smaller");
}

TEST(MemoryBound, LimitsGivenWithoutABoundRaiseItAndSaySo) {
  // An older config that sets big limits and no memory keeps working: its bound is what they
  // need, and the plan says it was implied (iolensd logs it).
  Limits l;
  l.max_records = 1000000;
  l.given.max_records = true;
  MemoryPlan plan;
  ASSERT_EQ(apply_memory_bound(l, &plan), "");
  EXPECT_TRUE(plan.implied);
  EXPECT_EQ(plan.bound, needed(l));
  EXPECT_GT(plan.bound, 256 * MiB);
  // The others keep their defaults, not what is left (nothing).
  EXPECT_EQ(l.max_files_per_job, Limits{}.max_files_per_job);
  EXPECT_EQ(l.max_path_bytes, Limits{}.max_path_bytes);
  // Rings so big nothing is left for records: the same.
  Limits rings;
  rings.ring_bytes = rings.trace_ring_bytes = 128u << 20;
  ASSERT_EQ(apply_memory_bound(rings, &plan), "");
  EXPECT_TRUE(plan.implied);
  EXPECT_EQ(rings.max_records, Limits{}.max_records);
  EXPECT_EQ(plan.bound, needed(rings));
  // Limits so big their cost overflows 64 bits: saturated, never wrapped to a small bound.
  Limits huge;
  huge.max_records = UINT64_MAX;
  huge.given.max_records = true;
  ASSERT_EQ(apply_memory_bound(huge, &plan), "");
  EXPECT_EQ(plan.bound, UINT64_MAX);
}

TEST(MemoryBound, TheConfigDerivesAndChecks) {
  const std::string jobs = "jobs:\n  - kubernetes: {}\n";
  auto r = parse_config(jobs + "limits:\n  memory: 1GiB\n", "t.yaml");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(r.errors);
  EXPECT_EQ(r.config.limits.memory, 1024 * MiB);
  EXPECT_TRUE(r.config.limits.given.memory);
  EXPECT_GT(r.config.limits.max_records, Limits{}.max_records * 5);
  r = parse_config(jobs + "limits:\n  memory: 64MiB\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << ::testing::PrintToString(r.errors);
  EXPECT_EQ(r.errors[0].rfind("t.yaml:3:1: limits: limits.memory: 64.0 MiB is less than", 0), 0u)
      << r.errors[0];
  r = parse_config(jobs + "limits:\n  memory: 256MiB\n  max_files_per_job: 50000\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << ::testing::PrintToString(r.errors);
  EXPECT_NE(r.errors[0].find("the limits given need"), std::string::npos) << r.errors[0];
  r = parse_config(jobs + "limits:\n  memory: lots\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << ::testing::PrintToString(r.errors);
  EXPECT_NE(r.errors[0].find("limits.memory"), std::string::npos) << r.errors[0];
}

TEST(MemoryBound, SizesForPeople) {
  // The shared formatter (core/units.hpp) the messages use: whole bounds read whole, and the
  // largest sizes do not wrap.
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1024), "1.00 KiB");
  EXPECT_EQ(human_bytes(256 * MiB), "256 MiB");
  EXPECT_EQ(human_bytes(3 * MiB / 2), "1.50 MiB");
  EXPECT_EQ(human_bytes(UINT64_MAX), "16384 PiB");
}
