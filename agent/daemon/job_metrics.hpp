// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Builds the metrics' view of a job (core::JobMetrics) from its recorder: sums by container or
/// Slurm step, by file class, and the job's top K files. Pure: no clock, no I/O.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/file_alignment.hpp"
#include "core/metrics_snapshot.hpp"
#include "core/recorder.hpp"
#include "jobs/config.hpp"

namespace iolens::daemon {

struct Job;

/// Puts a path in a file class: the first class with a prefix of the path, else "other".
class FileClassifier {
 public:
  explicit FileClassifier(std::vector<jobs::FileClass> classes = {});
  /// The class's index; names().size() - 1 ("other") for no match or no path.
  std::size_t classify(const std::string* path) const;
  /// The configured names, then "other".
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<jobs::FileClass> classes_;
  std::vector<std::string> names_;
};

/// Adds a record's counters to `t` (bytes, calls, metadata operations; not `files`).
void add_record(core::ClassTotals& t, const core::FileCounters& c);

/// Darshan's FILE_NOT_ALIGNED of one of `rec`'s records with its file's alignment (`align`:
/// the daemon's mount table); 0 when that cannot be told: no table, no name or a cut one, the
/// "other files" record (many files), an alignment the offset buckets cannot tell.
uint64_t not_aligned_of(const core::Recorder& rec, const core::Recorder::RecordView& r,
                        core::AlignmentLookup* align);

/// Adds `b` to `a` field by field (files included).
void add_class_totals(core::ClassTotals& a, const core::ClassTotals& b);

/// All successful metadata calls of a record (opens, which include dups, stats, seeks, fsyncs,
/// fdatasyncs, mmaps, truncates, closes).
uint64_t metadata_ops(const core::FileCounters& c);

/// The job's own losses (what the kernel charged its processes with) under the names of
/// docs/counters.md#lost, zeros included, `job_events` too; not `program_misses`, which no
/// process can be charged with. For its record's `lost` and its metrics.
std::vector<std::pair<std::string, uint64_t>> own_losses_by_cause(const Job& job);

/// The metrics of one job; `top_files` = K (0: no per-file rows). The class sums include what
/// was folded out of the recorder (Job::folded_classes), so they only grow.
/// `alignment`: the daemon's mount table for the file_not_aligned sum (null: none read yet).
core::JobMetrics job_metrics(const Job& job, const FileClassifier& fc, uint32_t top_files,
                             const std::vector<core::AlignmentMount>* alignment = nullptr);

}  // namespace iolens::daemon
