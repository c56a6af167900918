// SPDX-License-Identifier: Apache-2.0
#pragma once
/// One bound on iolensd's memory (`limits.memory`), from which the record limits not given in
/// the config are derived (docs/daemon.md#memory-bound). Pure: the costs are constants measured
/// on the daemon (bench/README.md "Memory: one bound"), the limits come from the config.

#include <cstdint>
#include <string>

#include "jobs/config.hpp"

namespace iolens::jobs {

/// What each part costs in iolensd's RSS, measured with heaptrack and /proc on
/// e2e_daemon_memory_bound's jobs (docs/daemon.md#memory-bound).
struct MemoryCost {
  /// The daemon with no job (code, libraries, the programs' user side, threads, metrics; ~10
  /// MiB), and a capture's buffers (taken from the ring in pieces; a few MiB).
  static constexpr uint64_t kDaemon = 24ull << 20;
  /// A mapped ring costs twice its size: libbpf maps its data twice (for records that wrap).
  /// Both rings count: a capture maps the trace ring while it runs.
  static constexpr uint64_t kRingFactor = 2;
  /// Names read from one ring's worth of events before the next drain folds what is over the
  /// name bounds: each name is held four times (the node-wide cache, the job's name, its path
  /// index entry, and a state save gathered meanwhile) for up to a ring's bytes of names.
  static constexpr uint64_t kRingNameCopies = 4;
  /// A record held for a job (kept or live, its counters packed), its entries in the job's
  /// tables and in the node-wide name cache (605 bytes measured without the cache, unit test
  /// RecorderState.TwoHundredThousandRecords; ~300 more with it), and its part of a state
  /// save, gathered in the loop (~250 bytes, in a buffer grown by doubling).
  static constexpr uint64_t kRecord = 1400;
  /// A record of a job whose record file is being written: its rows copied for the writer,
  /// the JSON and Darshan buffers (a 50,000-record job took ~150 MiB while written, with ABI
  /// 14's 1,080-byte counters; ABI 15's rows are 272 bytes bigger and have 18 more JSON members,
  /// ABI 16's user-space rows 784 more (core::FileCounters::more), not measured again:
  /// e2e_daemon_memory_bound's peak (VmHWM) stayed at 177-178 MiB of the 256).
  static constexpr uint64_t kRecordWritten = 3000;
  /// Names are bounded in bytes by max_path_bytes, but held more than once: in the jobs'
  /// recorders (a path and its path index entry, both counted), in the node-wide cache of
  /// names (counted on its own), and in a state save's blob with its growth.
  static constexpr uint64_t kNameCopies = 4;
  /// Room left for records at the least, past the daemon and its rings.
  static constexpr uint64_t kMinRecordRoom = 8ull << 20;
};

/// How a bound is spent (bytes), for the log, `iolensd --check` and docs.
struct MemoryPlan {
  uint64_t bound = 0;
  /// `limits.memory` was not given and the limits given need more than its default: the bound
  /// is what they need (said in the log; set `limits.memory` to make it an error).
  bool implied = false;
  uint64_t daemon = 0, rings = 0, ring_names = 0, records = 0, writing = 0, names = 0;
  /// The parts' sum, saturated at 2^64 - 1 (limits given that big are not wrapped around).
  uint64_t total() const;
};

/// Sets the limits not given (Limits::given) from `l.memory`: what is left past the daemon, its
/// rings (both mapped: a capture may run) and a ring's worth of names goes 35% to writing a
/// record (`max_files_per_job`), 45% to the records held (`max_records`) and 20% to names
/// (`max_path_bytes`, kNameCopies times; `max_path_bytes_per_job` is then at most 64 MiB and
/// at most that), less what the limits given take. Counts derived are at least 1,000, bytes at
/// least 64 KiB, and `max_records` derived at least `max_files_per_job` (the node holds one
/// job's worth).
/// When `memory` is not given and the limits given need more than its default (or leave less
/// than kMinRecordRoom), the bound becomes what they need (MemoryPlan::implied) and the limits
/// not given keep their default values. Returns "" (and `plan`) or why the limits given do not
/// fit a `memory` that was given. Idempotent: call it again after changing a limit (and its
/// given flag).
std::string apply_memory_bound(Limits& l, MemoryPlan* plan = nullptr);

}  // namespace iolens::jobs
