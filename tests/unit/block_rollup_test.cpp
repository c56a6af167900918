// SPDX-License-Identifier: Apache-2.0
// The block layer's per-device rollup (agent/core/block.hpp): which records count, how they add
// up, how devices are named; and the request size buckets the kernel uses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/block.hpp"
#include "iolens_account.h"

namespace {

using iolens::core::BlockRecord;

constexpr uint32_t kdev(uint32_t major, uint32_t minor) { return major << 20 | minor; }

BlockRecord rec(uint32_t tgid, uint64_t pstart, uint32_t dev, uint64_t read_bytes,
                uint64_t write_bytes) {
  BlockRecord r{};
  r.key.tgid = tgid;
  r.key.pstart_ns = pstart;
  r.key.dev = dev;
  r.counters.read_bytes = read_bytes;
  r.counters.write_bytes = write_bytes;
  r.counters.read_reqs = read_bytes ? 1 : 0;
  r.counters.dev_read[3] = read_bytes ? 1 : 0;
  r.counters.dev_errors = 1;  // the last field: every field adds
  return r;
}

std::string name_of(uint32_t major, uint32_t minor) {
  return major == 254 && minor == 0 ? "vda" : "";
}

}  // namespace

TEST(BlockRollup, SumsTheRunsProcessesPerDevice) {
  const std::vector<BlockRecord> records = {
      rec(10, 100, kdev(254, 0), 4096, 0),
      rec(11, 200, kdev(254, 0), 8192, 1 << 20),
      rec(10, 100, kdev(8, 17), 0, 512),
      rec(12, 999, kdev(254, 0), 1 << 30, 1 << 30),  // not of the run
      rec(10, 101, kdev(254, 0), 1 << 30, 0),        // pid 10 reused: another process
  };
  auto keep = [](uint32_t tgid, uint64_t pstart) {
    return (tgid == 10 && pstart == 100) || (tgid == 11 && pstart == 200);
  };
  const auto devs = iolens::core::rollup_blocks(records, keep, name_of);
  ASSERT_EQ(devs.size(), 2u);
  // Sorted by device number: 8:17 before 254:0.
  EXPECT_EQ(devs[0].dev, "8:17");
  EXPECT_EQ(devs[0].name, "8:17");  // no name known: MAJ:MIN
  EXPECT_EQ(devs[0].st_dev, (8ull << 8) | 17);
  EXPECT_EQ(devs[0].counters.write_bytes, 512u);
  EXPECT_EQ(devs[0].counters.dev_errors, 1u);
  EXPECT_EQ(devs[1].dev, "254:0");
  EXPECT_EQ(devs[1].name, "vda");
  EXPECT_EQ(devs[1].counters.read_bytes, 4096u + 8192u);
  EXPECT_EQ(devs[1].counters.write_bytes, 1u << 20);
  EXPECT_EQ(devs[1].counters.read_reqs, 2u);
  EXPECT_EQ(devs[1].counters.dev_read[3], 2u);
  EXPECT_EQ(devs[1].counters.dev_errors, 2u);
}

TEST(BlockRollup, NothingKeptGivesNoDevice) {
  const auto devs = iolens::core::rollup_blocks({rec(1, 1, kdev(254, 0), 1, 1)},
                                                [](uint32_t, uint64_t) { return false; }, name_of);
  EXPECT_TRUE(devs.empty());
}

TEST(BlockRollup, DeviceNameFromSysfsUevent) {
  const auto root = std::filesystem::temp_directory_path() /
                    ("iolens_block_sys_" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "dev/block/259:3");
  std::ofstream(root / "dev/block/259:3/uevent") << "MAJOR=259\nMINOR=3\nDEVNAME=nvme0n1p2\n"
                                                    "DEVTYPE=partition\n";
  EXPECT_EQ(iolens::core::block_device_name(root.string(), 259, 3), "nvme0n1p2");
  EXPECT_EQ(iolens::core::block_device_name(root.string(), 259, 4), "259:4");
  std::filesystem::remove_all(root);
}

TEST(BlockSizeBuckets, KernelFunctionMatchesTheBounds) {
  ASSERT_EQ(iolens::core::kBlockSizeBoundsBytes.size(), (size_t)IOLENS_NR_BLK_SIZE_BUCKETS - 1);
  EXPECT_EQ(iolens_blk_size_bucket(0), 0u);
  EXPECT_EQ(iolens_blk_size_bucket(512), 0u);
  for (__u32 i = 0; i < iolens::core::kBlockSizeBoundsBytes.size(); i++) {
    const uint64_t bound = iolens::core::kBlockSizeBoundsBytes[i];
    EXPECT_EQ(iolens_blk_size_bucket(bound), i) << bound;
    EXPECT_EQ(iolens_blk_size_bucket(bound + 1), i + 1) << bound << " + 1";
  }
  EXPECT_EQ(iolens_blk_size_bucket(~0ull), (__u32)IOLENS_NR_BLK_SIZE_BUCKETS - 1);
}

TEST(BlockCounterValues, EveryFieldNamedOnce) {
  iolens_block_counters c{};
  auto* raw = reinterpret_cast<uint64_t*>(&c);
  for (size_t i = 0; i < sizeof(c) / 8; ++i) raw[i] = i + 1;  // each field its own value
  const auto v = iolens::core::block_counter_values(c);
  ASSERT_EQ(v.size(), sizeof(c) / 8);
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_TRUE(names.insert(v[i].first).second) << v[i].first;
    EXPECT_EQ(v[i].second, i + 1) << v[i].first;  // ABI order
  }
  EXPECT_EQ(v[0].first, "read_bytes");
  EXPECT_EQ(v[12].first, "size_read_le_4k");
  EXPECT_EQ(v[19].first, "size_read_gt_16m");
  EXPECT_EQ(v[28].first, "queue_read_le_1us");
  EXPECT_EQ(v[39].first, "queue_read_gt_1s");
  EXPECT_EQ(v[54].first, "dev_read_le_1us");
  EXPECT_EQ(v[80].first, "dev_errors");
}

TEST(BlockCounterValues, QuantileBucket) {
  const __u64 empty[4] = {};
  EXPECT_EQ(iolens::core::histogram_quantile_bucket(empty, 4, 0.5), -1);
  const __u64 h[4] = {0, 50, 49, 1};
  EXPECT_EQ(iolens::core::histogram_quantile_bucket(h, 4, 0.5), 1);
  EXPECT_EQ(iolens::core::histogram_quantile_bucket(h, 4, 0.99), 2);
  EXPECT_EQ(iolens::core::histogram_quantile_bucket(h, 4, 1.0), 3);
}

TEST(BlockUntimed, OnlyCountedIssuedRequestsOldEnough) {
  using iolens::core::block_request_untimed;
  iolens_rq_inflight f{};
  f.issue_ns = 1000;
  f.counted = 1;
  EXPECT_TRUE(block_request_untimed(f, 5000, 0));
  EXPECT_TRUE(block_request_untimed(f, 5000, 4000));   // exactly the age
  EXPECT_FALSE(block_request_untimed(f, 5000, 4001));  // younger: may still complete
  EXPECT_FALSE(block_request_untimed(f, 500, 0));      // issued after `now` was read
  f.counted = 0;  // inserted, merged away or not charged: never counted, so never untimed
  EXPECT_FALSE(block_request_untimed(f, 5000, 0));
  f.counted = 1;
  f.issue_ns = 0;  // counted entries always have an issue time; a zero one is not stale
  EXPECT_FALSE(block_request_untimed(f, 5000, 0));
}
