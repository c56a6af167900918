// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The block layer of a run per device: the kernel's (process, device) records of the run's
/// processes summed by device (docs/counters.md "Block layer (ABI 7)"). Pure, no libbpf.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "iolens_abi.h"

namespace iolens::core {

/// Inclusive upper bounds of the request size buckets, bytes; iolens_blk_size_bucket
/// (bpf/iolens_account.h) uses the same. The last bucket is everything above 16 MiB.
inline constexpr std::array<uint64_t, IOLENS_NR_BLK_SIZE_BUCKETS - 1> kBlockSizeBoundsBytes = {
    4ull << 10, 16ull << 10, 64ull << 10, 256ull << 10, 1ull << 20, 4ull << 20, 16ull << 20,
};

/// One kernel record as the loader reads it.
struct BlockRecord {
  iolens_block_key key;
  iolens_block_counters counters;
};

struct BlockDeviceSnapshot {
  std::string name;       // "vda", "nvme0n1p2" (sysfs DEVNAME), else "MAJ:MIN"
  std::string dev;        // "MAJ:MIN" of st_dev as stat(2) shows it
  uint64_t st_dev = 0;    // st_dev as stat(2) reports it
  iolens_block_counters counters{};
};

/// Every counter of `c` by its exported name, in ABI order: the scalars by their field names,
/// histogram buckets as `size_read_le_4k` .. `size_read_gt_16m` and `dev_read_le_1us` ..
/// `dev_read_gt_1s` (the latency suffixes of the per-file `lat_*` counters).
std::vector<std::pair<std::string, uint64_t>> block_counter_values(const iolens_block_counters& c);

/// The bucket holding quantile `q` (0..1) of a histogram's requests; -1 when it is empty.
int histogram_quantile_bucket(const __u64* buckets, size_t n, double q);

/// Adds every counter of `c` to `into` (all of them are sums).
void add_block_counters(iolens_block_counters& into, const iolens_block_counters& c);

/// Sums the records that `keep` accepts (a process of the run: tgid, start CLOCK_MONOTONIC ns)
/// by device. `device_name` names a device by major and minor. Sorted by device number.
std::vector<BlockDeviceSnapshot> rollup_blocks(
    const std::vector<BlockRecord>& records,
    const std::function<bool(uint32_t tgid, uint64_t pstart_ns)>& keep,
    const std::function<std::string(uint32_t major, uint32_t minor)>& device_name);

/// Whether an in-flight entry stands for a counted request that will never be timed: counted
/// and issued at least `min_age_ns` before `now_ns` (CLOCK_MONOTONIC). A completion the kernel
/// did not run block_rq_complete for leaves such an entry behind (docs/counters.md
/// `block_untimed`); `min_age_ns` 0 takes every counted request still in flight.
bool block_request_untimed(const iolens_rq_inflight& f, uint64_t now_ns, uint64_t min_age_ns);

/// DEVNAME of /sys/dev/block/MAJ:MIN/uevent under `sys_root` ("/sys"), else "MAJ:MIN".
std::string block_device_name(const std::string& sys_root, uint32_t major, uint32_t minor);

}  // namespace iolens::core
