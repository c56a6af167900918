// SPDX-License-Identifier: Apache-2.0
#include "jobs/memory_bound.hpp"

#include <algorithm>
#include <string>

#include "core/units.hpp"

namespace iolens::jobs {
namespace {

using core::human_bytes;

constexpr uint64_t kMinCount = 1000;
constexpr uint64_t kMinPathBytes = 64ull << 10;
constexpr uint64_t kMaxPathBytesPerJob = 64ull << 20;
// Shares of what is left for records, in percent: writing, records held, names.
constexpr uint64_t kWritingShare = 35, kRecordsShare = 45, kNamesShare = 20;

uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

uint64_t MemoryPlan::total() const {
  return add_sat(add_sat(add_sat(add_sat(add_sat(daemon, rings), ring_names), records), writing),
                 names);
}

std::string apply_memory_bound(Limits& l, MemoryPlan* plan_out) {
  using C = MemoryCost;
  MemoryPlan plan;
  plan.daemon = C::kDaemon;
  plan.rings = add_sat(mul_sat(C::kRingFactor, l.ring_bytes),
                       mul_sat(C::kRingFactor, l.trace_ring_bytes));
  plan.ring_names = mul_sat(C::kRingNameCopies, l.ring_bytes);
  const uint64_t fixed = add_sat(add_sat(plan.daemon, plan.rings), plan.ring_names);
  const uint64_t room = l.memory > fixed ? l.memory - fixed : 0;
  if (l.given.memory && room < C::kMinRecordRoom)
    return "limits.memory: " + human_bytes(l.memory) +
           " is less than the daemon and its rings take (" + human_bytes(fixed) +
           ": both rings mapped twice, and the names a ring can bring) plus " +
           human_bytes(C::kMinRecordRoom) + " for records; raise it or make the rings smaller";
  // What the limits given take comes first; the rest is shared by the others.
  uint64_t taken = 0, weights = 0;
  if (l.given.max_files_per_job)
    taken = add_sat(taken, mul_sat(l.max_files_per_job, C::kRecordWritten));
  else
    weights += kWritingShare;
  if (l.given.max_records)
    taken = add_sat(taken, mul_sat(l.max_records, C::kRecord));
  else
    weights += kRecordsShare;
  if (l.given.max_path_bytes)
    taken = add_sat(taken, mul_sat(C::kNameCopies, l.max_path_bytes));
  else
    weights += kNamesShare;
  const bool fits = room >= C::kMinRecordRoom && taken <= room;
  if (!fits && !l.given.memory) {
    // No bound given, and the limits given need more than the default one: the bound becomes
    // what they need (plan.implied), and the limits not given keep their default values rather
    // than shrink to nothing.
    const Limits defaults;
    if (!l.given.max_files_per_job) l.max_files_per_job = defaults.max_files_per_job;
    if (!l.given.max_records) {
      // The node holds at least one job's worth: fewer would fold a job below its own limit.
      l.max_records = std::max(defaults.max_records, l.max_files_per_job);
    }
    if (!l.given.max_path_bytes) l.max_path_bytes = defaults.max_path_bytes;
  } else {
    const uint64_t rest = fits ? room - taken : 0;
    auto share = [&](uint64_t w) {
      return weights ? static_cast<uint64_t>(static_cast<unsigned __int128>(rest) * w / weights)
                     : 0;
    };
    // Rounded down (counts to hundreds, bytes to MiB) so that the limits read as chosen numbers.
    auto count = [](uint64_t n) { return std::max(kMinCount, n / 100 * 100); };
    if (!l.given.max_files_per_job)
      l.max_files_per_job = count(share(kWritingShare) / C::kRecordWritten);
    if (!l.given.max_records) {
      // At least one job's worth (as above); what that takes more comes out of the names'.
      l.max_records = std::max(count(share(kRecordsShare) / C::kRecord), l.max_files_per_job);
    }
    if (!l.given.max_path_bytes) {
      uint64_t left = rest;
      if (!l.given.max_files_per_job)
        left -= std::min(left, mul_sat(l.max_files_per_job, C::kRecordWritten));
      if (!l.given.max_records) left -= std::min(left, mul_sat(l.max_records, C::kRecord));
      const uint64_t b = std::min(share(kNamesShare), left) / C::kNameCopies;
      l.max_path_bytes = std::max(kMinPathBytes, b >= (1u << 20) ? b >> 20 << 20 : b);
    }
  }
  if (!l.given.max_path_bytes_per_job)
    l.max_path_bytes_per_job = std::min(kMaxPathBytesPerJob, l.max_path_bytes);
  plan.writing = mul_sat(l.max_files_per_job, C::kRecordWritten);
  plan.records = mul_sat(l.max_records, C::kRecord);
  plan.names = mul_sat(C::kNameCopies, l.max_path_bytes);
  plan.bound = l.memory;
  if (plan.total() > l.memory) {
    if (l.given.memory)
      return "limits.memory: the limits given need " + human_bytes(plan.total()) +
             " (the daemon " + human_bytes(plan.daemon) + ", rings " +
             human_bytes(add_sat(plan.rings, plan.ring_names)) +
             ", writing a record of max_files_per_job " + human_bytes(plan.writing) +
             ", max_records " + human_bytes(plan.records) + ", max_path_bytes " +
             human_bytes(l.max_path_bytes) + " held up to " + std::to_string(C::kNameCopies) +
             " times " + human_bytes(plan.names) + "), more than its " + human_bytes(l.memory) +
             "; raise it or lower them";
    plan.bound = plan.total();
    plan.implied = true;
  }
  if (plan_out) *plan_out = plan;
  return "";
}

}  // namespace iolens::jobs
