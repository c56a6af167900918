// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Writes job records into the output directory under stable names, atomically, and keeps the
/// directory within its size and age limits (docs/daemon.md#output-files).

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/status.hpp"

namespace iolens::daemon {

/// `<start, UTC, %Y%m%dT%H%M%SZ>_<job id with every byte outside [A-Za-z0-9._-] as '_'>.json`
/// e.g. 20261122T031500Z_k8s_0f3e9a7c-1d2b-4c5d-8e9f-0a1b2c3d4e5f.json. Sorting the names sorts
/// the jobs by start.
std::string job_file_name(const std::string& job_id, int64_t start_wall_ns);

struct RotationResult {
  std::vector<std::string> removed;  // file names removed
  uint64_t removed_jobs = 0;         // jobs whose files were removed (a record and its log: one)
  uint64_t kept_bytes = 0;
  uint64_t gone = 0;  // files found gone already (removed by someone else since the listing)
};

/// The job files of an output directory, by stem, oldest written first: what rotation needs,
/// kept between rotations so that one does not list and stat the whole directory (with
/// thousands of records, each record written cost a stat of every file:
/// bench/README.md "Thousands of short jobs").
class StoredJobs {
 public:
  void clear();
  /// Lists `dir_fd` afresh (files named like job records or their logs, regular files only).
  /// False if it cannot be listed (then empty).
  bool list(int dir_fd);
  /// Adds `name` of `dir_fd` (stat'ed here) if it is named like a job's file; false if not.
  bool add_listed(int dir_fd, const std::string& name);
  /// Adds (or replaces) one file of job `stem`.
  void add(const std::string& stem, const std::string& name, uint64_t size, int64_t mtime);
  /// rotate_records() below on what is held: the files it removes (or finds gone) leave it.
  RotationResult rotate(int dir_fd, uint64_t max_bytes, uint64_t max_age_s, int64_t now_wall_s,
                        const std::string& keep);
  uint64_t bytes() const { return bytes_; }
  std::size_t jobs() const { return jobs_.size(); }

 private:
  struct Job {
    std::vector<std::pair<std::string, uint64_t>> files;  // name, size; sorted by name
    uint64_t size = 0;
    int64_t mtime = 0;  // the newest file's (when the job's last file was written)
  };
  std::map<std::string, Job> jobs_;
  std::set<std::pair<int64_t, std::string>> by_age_;  // (mtime, stem)
  uint64_t bytes_ = 0;
};

/// A job's files are its record `<stem>.json` (or `<stem>.json.zst`) and, with `darshan_logs`, its Darshan log
/// `<stem>.darshan`: they count and go together. Removes the oldest jobs' files (by modification
/// time, i.e. when written, the newest of a job's files; then by name) while the directory's
/// files exceed `max_bytes` in total, and every job's files older than `max_age_s`.
/// `keep` (the record just written) and its log are never removed, even alone over `max_bytes`.
/// `now_wall_s`: seconds since the epoch. Only files named like job records (or their logs) are
/// touched.
RotationResult rotate_records(const std::string& dir, uint64_t max_bytes, uint64_t max_age_s,
                              int64_t now_wall_s, const std::string& keep = "");
/// The same in the directory `dir_fd` (never following a link in it). With neither limit the
/// directory is not even listed (an empty result, kept_bytes 0).
RotationResult rotate_records(int dir_fd, uint64_t max_bytes, uint64_t max_age_s,
                              int64_t now_wall_s, const std::string& keep = "");

/// What JobWriter::write did with each of a job's files.
struct JobWritten {
  Status record;             ///< the JSON record: ok, or why it was not written
  std::string path;          ///< where it was written ("" if not)
  Status darshan;            ///< the Darshan log: ok (also when there was none), or why not
  std::string darshan_path;  ///< where it was written ("" if none or not written)
  /// Found written already (a job a restarted daemon took from its saved state): path and
  /// darshan_path are the files there, nothing was written.
  bool already = false;
};

/// Where a record's text goes, piece by piece: false when a piece could not be written.
using Sink = std::function<bool(std::string_view)>;
/// A record's text, written through a Sink: false when the sink failed.
using RecordText = std::function<bool(const Sink&)>;

/// Used by one thread at a time; the counters may be read from any thread.
class JobWriter {
 public:
  /// `compress`: records are written as one zstd frame, `<stem>.json.zst` (config
  /// `record_compression`, docs/daemon.md#output-files); else as `<stem>.json`.
  JobWriter(std::string dir, uint64_t max_bytes, uint64_t max_age_s, bool compress = false);
  ~JobWriter();
  JobWriter(const JobWriter&) = delete;
  JobWriter& operator=(const JobWriter&) = delete;
  /// Opens the directory (created 0750 if missing, given 0750 otherwise) and keeps its
  /// descriptor: every file is then written through it. Refuses a symbolic link, a directory
  /// not owned by the daemon's user or writable by others (core::open_private_dir); an error
  /// names the directory and the reason. write() calls it when it has not been called.
  Status prepare();
  /// Writes `record` as `dir/name` (`name` ends in ".json"; compressed: ".json.zst" in its
  /// place) through a temporary file (created afresh: never written through a link) and a
  /// rename that never replaces, so a reader never sees half a record and no record overwrites
  /// another; a stem taken by a record of either kind (or a log) gets the first free ".N"
  /// suffix before the suffix (no upper bound). With `darshan_log` (a Darshan log's bytes), that log is written first, the same
  /// way, as `<stem>.darshan`: when a record appears, its log is there. A log that cannot be
  /// written is counted apart (darshan_failed()) and never keeps the record from being written.
  /// Then rotates.
  JobWritten write(const std::string& name, const nlohmann::json& record,
                   const std::string* darshan_log = nullptr);
  /// The same with the record's text made piece by piece: `record` hands each piece to the sink
  /// it is given and returns false as soon as the sink does (exporters::write_run_json): the
  /// whole text is never held in memory.
  /// Rotates after writing unless `rotate` is false (then call rotate()).
  ///
  /// `identity` (the job's id and start: one job, whatever its file's name) is set on both
  /// files as the extended attribute user.iolens.job. With `maybe_written` (the job comes from
  /// a saved state, and a daemon killed after that save may have written it), a record of that
  /// identity at one of the job's stems is taken as written (JobWritten::already; counted in
  /// already_written()) and a log of it without its record is kept and the record written
  /// beside it: a crash never makes a second copy (docs/daemon.md#crash-points).
  JobWritten write(const std::string& name, const RecordText& record,
                   const std::string* darshan_log = nullptr, bool rotate = true,
                   const std::string& identity = "", bool maybe_written = false);
  /// Keeps the directory within its limits, never removing `keep` (a record's name) or its log.
  void rotate(const std::string& keep);
  /// Counts a record that could not even be made (its writer's error): failed() includes it.
  void count_failed() { ++failed_; }
  uint64_t written() const { return written_; }
  uint64_t rotated() const { return rotated_; }
  uint64_t failed() const { return failed_; }
  uint64_t darshan_written() const { return darshan_written_; }
  uint64_t darshan_failed() const { return darshan_failed_; }
  /// Jobs found written already (see write()).
  uint64_t already_written() const { return already_written_; }
  /// Jobs whose files the filesystem refused the identity attribute (no user xattrs): a crash
  /// between their record and the next save would write them a second time.
  uint64_t unidentified() const { return unidentified_; }
  /// Removes the temporaries a killed writer left (named like a job file's temporary, regular,
  /// and not flock'd by a writer). Call once the daemon knows it is the directory's only one
  /// (its state and pin locks held).
  void remove_stale_temporaries();
  /// Temporaries removed by remove_stale_temporaries().
  uint64_t stale_temporaries_removed() const { return stale_removed_; }
  const std::string& dir() const { return dir_; }
  /// The directory's descriptor once prepare() succeeded, -1 before.
  int dir_fd() const { return dir_fd_; }

 private:
  std::string dir_;
  int dir_fd_ = -1;  // dir_, opened by prepare()
  uint64_t max_bytes_, max_age_s_;
  bool compress_;
  // Atomic: the record writer's thread writes, the daemon's loop reads them for its status.
  std::atomic<uint64_t> written_ = 0, rotated_ = 0, failed_ = 0;
  std::atomic<uint64_t> darshan_written_ = 0, darshan_failed_ = 0;
  std::atomic<uint64_t> already_written_ = 0, unidentified_ = 0, stale_removed_ = 0;
  /// The directory's job files as last listed (every kRelistEvery, and at the first rotation)
  /// plus those written since: the writer's thread's only.
  StoredJobs stored_;
  int64_t listed_mono_ = 0;  // when stored_ was listed; 0: never
  /// Files put there or removed by others (an administrator, a second daemon) are seen by the
  /// next listing: until then the rotation may keep or remove a little more than it should.
  static constexpr int64_t kRelistEvery = 60'000'000'000;
  /// A job's files among the stems of `base` (base, base.1, ...), by their identity: its record
  /// ("" if none) and the stem of its log ("" if none).
  struct Own {
    std::string record;
    std::string log_stem;
  };
  Own find_own(const std::string& base, const std::string& identity) const;
};

}  // namespace iolens::daemon
