// SPDX-License-Identifier: Apache-2.0
#include "core/block.hpp"

#include <algorithm>
#include <fstream>
#include <map>

#include "core/counters.hpp"
#include "core/paths.hpp"

namespace iolens::core {

namespace {

// The counters struct is only __u64 sums (bpf/iolens_abi.h): adding it as an array of them
// adds every field, including the ones a future ABI appends.
static_assert(sizeof(iolens_block_counters) % sizeof(uint64_t) == 0);
constexpr size_t kBlockFields = sizeof(iolens_block_counters) / sizeof(uint64_t);

/// "le_1us" .. "gt_1s": the per-file latency counters' suffixes, so both use one naming.
const std::vector<std::string>& latency_suffixes() {
  static const std::vector<std::string> suffixes = [] {
    std::vector<std::string> out;
    const std::string prefix = "lat_read_";
    for (const auto& f : counter_fields()) {
      const std::string name(f.name);
      if (name.rfind(prefix, 0) == 0) out.push_back(name.substr(prefix.size()));
    }
    return out;
  }();
  return suffixes;
}

const char* const kSizeSuffixes[IOLENS_NR_BLK_SIZE_BUCKETS] = {
    "le_4k", "le_16k", "le_64k", "le_256k", "le_1m", "le_4m", "le_16m", "gt_16m"};

using Values = std::vector<std::pair<std::string, uint64_t>>;

void put_histogram(Values& out, const std::string& prefix, const __u64* b, size_t n,
                   const char* const* suffixes) {
  for (size_t i = 0; i < n; ++i) out.emplace_back(prefix + suffixes[i], b[i]);
}

void put_latency(Values& out, const std::string& prefix, const __u64* b) {
  const auto& sfx = latency_suffixes();
  for (size_t i = 0; i < IOLENS_NR_LAT_BUCKETS && i < sfx.size(); ++i)
    out.emplace_back(prefix + sfx[i], b[i]);
}

}  // namespace

Values block_counter_values(const iolens_block_counters& c) {
  Values v = {
      {"read_bytes", c.read_bytes},       {"write_bytes", c.write_bytes},
      {"read_bios", c.read_bios},         {"write_bios", c.write_bios},
      {"writeback_bytes", c.writeback_bytes}, {"writeback_bios", c.writeback_bios},
      {"flush_bios", c.flush_bios},       {"discard_bios", c.discard_bios},
      {"discard_bytes", c.discard_bytes}, {"read_reqs", c.read_reqs},
      {"write_reqs", c.write_reqs},       {"unqueued_reqs", c.unqueued_reqs},
  };
  put_histogram(v, "size_read_", c.size_read, IOLENS_NR_BLK_SIZE_BUCKETS, kSizeSuffixes);
  put_histogram(v, "size_write_", c.size_write, IOLENS_NR_BLK_SIZE_BUCKETS, kSizeSuffixes);
  put_latency(v, "queue_read_", c.queue_read);
  put_latency(v, "queue_write_", c.queue_write);
  v.emplace_back("queue_read_sum_ns", c.queue_read_sum_ns);
  v.emplace_back("queue_write_sum_ns", c.queue_write_sum_ns);
  put_latency(v, "dev_read_", c.dev_read);
  put_latency(v, "dev_write_", c.dev_write);
  v.emplace_back("dev_read_sum_ns", c.dev_read_sum_ns);
  v.emplace_back("dev_write_sum_ns", c.dev_write_sum_ns);
  v.emplace_back("dev_errors", c.dev_errors);
  return v;
}

int histogram_quantile_bucket(const __u64* buckets, size_t n, double q) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += buckets[i];
  if (total == 0) return -1;
  // The smallest bucket whose cumulative count reaches q of the total (at least one request).
  const double want = std::max(1.0, q * static_cast<double>(total));
  uint64_t seen = 0;
  for (size_t i = 0; i < n; ++i) {
    seen += buckets[i];
    if (static_cast<double>(seen) >= want) return static_cast<int>(i);
  }
  return static_cast<int>(n) - 1;
}

void add_block_counters(iolens_block_counters& into, const iolens_block_counters& c) {
  auto* dst = reinterpret_cast<uint64_t*>(&into);
  const auto* src = reinterpret_cast<const uint64_t*>(&c);
  for (size_t i = 0; i < kBlockFields; ++i) dst[i] += src[i];
}

std::vector<BlockDeviceSnapshot> rollup_blocks(
    const std::vector<BlockRecord>& records,
    const std::function<bool(uint32_t tgid, uint64_t pstart_ns)>& keep,
    const std::function<std::string(uint32_t major, uint32_t minor)>& device_name) {
  std::map<uint64_t, BlockDeviceSnapshot> by_dev;
  for (const auto& r : records) {
    if (!keep(r.key.tgid, r.key.pstart_ns)) continue;
    const uint64_t st_dev = kernel_dev_to_user(r.key.dev);
    auto [it, added] = by_dev.try_emplace(st_dev);
    BlockDeviceSnapshot& d = it->second;
    if (added) {
      const uint32_t major = kernel_dev_major(r.key.dev), minor = kernel_dev_minor(r.key.dev);
      d.st_dev = st_dev;
      d.dev = std::to_string(major) + ":" + std::to_string(minor);
      d.name = device_name(major, minor);
      if (d.name.empty()) d.name = d.dev;
    }
    add_block_counters(d.counters, r.counters);
  }
  std::vector<BlockDeviceSnapshot> out;
  out.reserve(by_dev.size());
  for (auto& [dev, d] : by_dev) out.push_back(std::move(d));
  return out;
}

std::string block_device_name(const std::string& sys_root, uint32_t major, uint32_t minor) {
  const std::string mm = std::to_string(major) + ":" + std::to_string(minor);
  std::ifstream in(sys_root + "/dev/block/" + mm + "/uevent");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("DEVNAME=", 0) == 0 && line.size() > 8) return line.substr(8);
  return mm;
}

bool block_request_untimed(const iolens_rq_inflight& f, uint64_t now_ns, uint64_t min_age_ns) {
  if (!f.counted || f.issue_ns == 0) return false;
  // An issue time after now (read before the kernel wrote it) is in flight, not stale.
  return f.issue_ns <= now_ns && now_ns - f.issue_ns >= min_age_ns;
}

}  // namespace iolens::core
