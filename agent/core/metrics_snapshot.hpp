// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The value the Prometheus exporter renders (docs/metrics.md): per-job aggregates and the
/// daemon's own health, built by the daemon after a drain, published, and rendered at scrape
/// time. Pure data: no pids, no per-file rows beyond the bounded top K.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/counters.hpp"
#include "iolens_abi.h"

namespace iolens::core {

/// Sums over the (process, file) records of one part of a job (Fold::Sum fields of
/// FileCounters: counts, bytes, times, size and latency buckets).
struct MetricsGroup {
  /// Labels below the job: container (kubernetes), slurm_step (slurm); empty for the rest.
  std::map<std::string, std::string> labels;
  FileCounters totals{};
};

/// One file class of one job (metrics.classes, plus "other").
struct ClassTotals {
  uint64_t bytes_read = 0, bytes_written = 0, reads = 0, writes = 0, metadata_ops = 0;
  uint64_t files = 0;  // distinct files of the class among the job's kept records
  friend bool operator==(const ClassTotals&, const ClassTotals&) = default;
};

/// One of a job's top files (summed over its processes), or the rest ("<other>").
struct TopFile {
  std::string path;
  uint64_t bytes_read = 0, bytes_written = 0, reads = 0, writes = 0;
};

struct JobMetrics {
  std::string kind, id, rule, cgroup;
  /// Job-level labels exported on every series (namespace, pod, slurm_job, slurm_uid).
  std::map<std::string, std::string> labels;
  /// The identity's other labels, on iolens_job_info only (pod_uid, unit, container_id...).
  std::map<std::string, std::string> info_labels;
  std::vector<MetricsGroup> groups;              // sorted by labels
  std::vector<std::pair<std::string, ClassTotals>> classes;  // configured order, "other" last
  /// By the device ("MAJ:MIN") of the files' file system; folded records included.
  std::vector<std::pair<std::string, ClassTotals>> devices;
  /// The block layer by device ("MAJ:MIN" of the bios' device): what reached the disks for the
  /// job (docs/counters.md "Block layer (ABI 7)").
  std::vector<std::pair<std::string, iolens_block_counters>> block;
  std::vector<TopFile> top_files;                // by bytes, descending; at most K
  std::optional<TopFile> other_files;            // the rest, when top files are exported
  uint64_t files = 0;                            // distinct (dev, ino), folded ones included
  uint64_t processes = 0, processes_running = 0;
  uint64_t folded_records = 0;
  uint64_t folded_processes = 0;                 // exited processes folded (max_processes_per_job)
  /// Darshan's FILE_NOT_ALIGNED summed over the job's records whose file's alignment is known
  /// (folded ones included, as they were when folded).
  uint64_t file_not_aligned = 0;
  /// What the kernel could not count of the job's processes, by cause (docs/counters.md#lost);
  /// only the causes that are not zero.
  std::vector<std::pair<std::string, uint64_t>> lost;
  double start_s = 0;                            // Unix time
  std::optional<double> end_s;                   // set once the job ended
};

struct ProgramHealth {
  std::string name;
  bool attached = false;
  bool failed = false;
};

struct MapHealth {
  std::string name;
  int64_t entries = 0;  // -1 unknown
  uint64_t capacity = 0;
};

/// Cumulative histogram of the daemon's own durations (drains).
struct DurationHistogram {
  std::vector<double> bounds;    // seconds, ascending; +Inf implied
  std::vector<uint64_t> counts;  // per bucket (not cumulative), bounds.size() + 1
  double sum = 0;
  void observe(double seconds) {
    if (counts.size() != bounds.size() + 1) counts.assign(bounds.size() + 1, 0);
    std::size_t i = 0;
    while (i < bounds.size() && seconds > bounds[i]) ++i;
    ++counts[i];
    sum += seconds;
  }
};

struct DaemonHealth {
  std::string version;
  uint32_t abi_version = 0;
  std::map<std::string, uint64_t> lost;  // by cause, zeros included
  uint64_t paths_truncated = 0;
  std::vector<MapHealth> maps;
  DurationHistogram drain;
  std::vector<ProgramHealth> programs;
  bool syscall_hooks_attached = false;
  /// The daemon's `timing`: false (off) leaves the job series of call times out (not measured).
  bool timing_exact = true;
  uint64_t jobs_live = 0, jobs_closing = 0, jobs_closed_total = 0;
  uint64_t jobs_dropped = 0;  // left off by metrics.max_jobs
  uint64_t ended_jobs_evicted = 0;  // ended jobs' series gone before their grace period's end
  /// Jobs with a process selected while the on-demand syscall hooks were detached.
  uint64_t jobs_before_hooks = 0;
  /// Steps of the wall clock the daemon followed (core/wall_clock.hpp).
  uint64_t wall_clock_steps = 0;
  /// Whether the cgroup filesystem is mounted where the daemon found it (or moved to).
  bool cgroup_filesystem_mounted = true;
  uint64_t file_records = 0, records_folded_total = 0, unattributed_processes = 0;
  uint64_t processes_folded_total = 0;
  uint64_t records_written = 0, records_failed = 0;
  uint64_t darshan_logs_written = 0, darshan_logs_failed = 0;  // with darshan_logs
  uint64_t records_unidentified = 0;  // written without the identity attribute (JobWriter)
  uint64_t state_saves = 0, state_save_failures = 0;
  uint64_t state_marker_failures = 0;  // pressure-drain markers that could not be created
  double snapshot_duration_s = 0;
  /// limits.memory (or what the limits given need, docs/daemon.md#memory-bound) and the RSS
  /// at the snapshot (0: unknown).
  uint64_t memory_bound_bytes = 0, resident_bytes = 0;
};

struct MetricsSnapshot {
  std::string node;
  DaemonHealth daemon;
  std::vector<JobMetrics> jobs;  // by id
};

}  // namespace iolens::core
