// SPDX-License-Identifier: Apache-2.0
#pragma once
/// One row per file across the processes of a run or job: the per-(process, file) rows of a
/// snapshot reduced the way Darshan reduces a file that several MPI ranks opened into one
/// record (docs/run-json.md#by-file). Pure: a view of a RunSnapshot, made on demand so that a
/// 50,000-row job costs an index (8 bytes a row), not a second copy of its counters.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/counters.hpp"
#include "core/snapshot.hpp"

namespace iolens::core {

/// One process's part of a file: what Darshan's FASTEST_RANK / SLOWEST_RANK name.
struct ProcessShare {
  uint32_t pid = 0;
  int64_t proc_start_ns = 0;  // wall clock, with pid the process's identity
  uint64_t bytes = 0;         // bytes read + written
  uint64_t time_ns = 0;       // read + write + meta time
};

struct FileAcrossProcesses {
  /// The file's first row (by pid): its path, names and (dev, ino). Never null.
  const FileSnapshot* file = nullptr;
  uint64_t processes = 0;  // distinct processes with a row of this file
  uint64_t rows = 0;       // their rows (a process may have two: a file folded, then used again)
  /// combine_counters over the rows: sums add, maxima max, first start, last end. Counts and
  /// bytes are the sums over processes, as Darshan's shared-file records give them.
  FileCounters counters{};
  uint64_t rename_sources = 0, unlinks = 0;
  /// The processes with the least and the most I/O time (read + write + meta, as Darshan's
  /// FASTEST_RANK / SLOWEST_RANK; ties: the earlier started process, i.e. the lower rank), each
  /// with its own bytes and time summed over its rows.
  ProcessShare fastest, slowest;
  /// Population variance over the processes of the file of their I/O time (in s^2, as
  /// Darshan's F_VARIANCE_RANK_TIME) and of their bytes (F_VARIANCE_RANK_BYTES).
  double variance_time_s2 = 0;
  double variance_bytes = 0;
  /// Part of some process's counters for this file is in that process's "other files" record
  /// (folded to bound memory, docs/run-json.md#folded-records), not in this row.
  bool folded = false;
};

/// What makes rows one file: (dev, ino, path), the JSON record's `by_file`; or the path alone,
/// as Darshan keys its records (a hash of the path): the Darshan log's shared records.
enum class Grouping { File, Path };

/// The rows of a snapshot grouped by file, sorted by path, then dev and ino; within a file by
/// process start (then pid). Holds a pointer to `run`, which must outlive it and not change.
class FilesAcrossProcesses {
 public:
  explicit FilesAcrossProcesses(const RunSnapshot& run, Grouping grouping = Grouping::File);
  std::size_t size() const { return starts_.empty() ? 0 : starts_.size() - 1; }
  /// The i-th file, reduced from its rows now (O(rows of the file)).
  FileAcrossProcesses at(std::size_t i) const;
  /// The i-th file's bytes read + written over its rows (at()'s without the rest).
  uint64_t bytes(std::size_t i) const;
  /// The i-th file's rows: indexes into run.files, by process.
  std::span<const uint32_t> rows(std::size_t i) const {
    return {order_.data() + starts_.at(i), order_.data() + starts_.at(i + 1)};
  }

 private:
  const RunSnapshot* run_;
  std::vector<uint32_t> order_;   // indexes into run.files, grouped, a group's rows by process
  std::vector<uint32_t> starts_;  // group i is order_[starts_[i], starts_[i + 1])
};

}  // namespace iolens::core
