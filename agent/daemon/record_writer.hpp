// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Writes closed jobs' records and Darshan logs on a thread of its own. Building and writing a
/// big job's record takes seconds (a 50,000-file job: ~12 s when the loop did it, with the
/// whole JSON document in memory); the daemon's loop must keep answering the control socket
/// and /metrics meanwhile (docs/daemon.md#responsiveness). A job taken out of the table is
/// handed over whole and never changed again: this thread reads it, and so may the loop (the
/// daemon saves it in its state, as closing, until its record is written).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/job_record.hpp"
#include "daemon/job_table.hpp"
#include "daemon/job_writer.hpp"
#include "loader/status.hpp"

namespace iolens::daemon {

/// A job to write, with everything its record needs.
struct RecordJob {
  std::shared_ptr<const Job> job;  // taken out of the table (JobTable::take); read-only now
  RecordBasis basis;
  nlohmann::json overrides = nlohmann::json::object();  // replace the record's members (lost...)
  bool interrupted = false;  // written at a stop while still running: `job.state` says so
  bool darshan = false;      // write its Darshan log too
  std::string node;          // for the Darshan log's metadata
  std::string version;
  uint64_t serial = 0;  // the submitter's, returned in RecordDone (a job id can come back)
};

/// What became of one.
struct RecordDone {
  std::string id;
  uint64_t serial = 0;
  std::string path;        // the record's path, "" if it was not written
  nlohmann::json summary;  // the record's `job` member
  Status record;           // ok, or why the record was not written
  Status darshan;          // ok (also without a log), or why the log was not written
  bool already = false;    // written before a restart already: nothing written (JobWritten)
  int64_t took_ns = 0;    // from submit() to written
  /// The mount table the rows' file_alignment came from (read on the writer's thread when the
  /// job's basis had none), for the daemon to keep as its latest.
  std::shared_ptr<const std::vector<core::AlignmentMount>> alignment;
};

/// Writes one job's record (and log) through `files`, streaming the JSON (no document in
/// memory), without rotating the directory: what the thread does with each job (then it
/// rotates). Also used directly (tests).
/// `mounts`: the mount table (exporters::read_mounts) to use instead of reading it, with
/// r.basis.alignment made from it.
RecordDone write_record(JobWriter& files, const RecordJob& r,
                        const std::vector<std::pair<std::string, std::string>>* mounts = nullptr);

/// Whether the mount table changed since the last call that said so (or since the first
/// call): poll(2) of /proc/self/mounts, which the kernel flags at every mount, unmount or
/// remount in the namespace (and clears when a poll sees it). True when it cannot tell.
class MountTableWatch {
 public:
  MountTableWatch();
  ~MountTableWatch();
  MountTableWatch(const MountTableWatch&) = delete;
  MountTableWatch& operator=(const MountTableWatch&) = delete;
  /// True the first time, then after a change; the flag is cleared here (before the caller
  /// reads the table: a change after this call flags it again).
  bool changed();

 private:
  int fd_ = -1;
  bool first_ = true;
};

class RecordWriter {
 public:
  /// `files` must outlive this object; from now on only this object's thread writes through it.
  explicit RecordWriter(JobWriter& files);
  /// Writes what is still queued, then joins.
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  void submit(RecordJob job);
  /// The jobs written (or failed) since the last call, in submission order.
  std::vector<RecordDone> take_done();
  /// Jobs submitted and not yet returned by take_done() (written or not).
  std::size_t pending() const;
  /// Blocks until every job submitted so far is written (take_done() then returns them).
  void wait_idle();
  /// Lets this thread free `job` (the caller's last reference, once taken back from
  /// take_done()): a big job's memory takes long to free, and not on the loop.
  void dispose(std::shared_ptr<const Job> job);
  /// The same for a live job's snapshot let go of (its pages, JobPages), `rows` saying how big
  /// (processes and files). These come as often as snapshots are taken, so the memory they
  /// held is given back to the system at most once a minute (the trim holds each allocator
  /// arena's lock, the loop's too, while it works).
  void dispose(std::shared_ptr<const void> what, std::size_t rows);
  /// Darshan's mount table as this thread read it last: when it started, then for a record
  /// when the mount table changed since (statfs() of a dead NFS server may block: never on
  /// the daemon's loop). Null until the first read is done.
  std::shared_ptr<const std::vector<core::AlignmentMount>> alignment() const;

 private:
  void run();

  JobWriter& files_;
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  struct Queued {
    RecordJob job;
    int64_t submitted_ns;
  };
  std::deque<Queued> queue_;
  struct Disposed {
    std::shared_ptr<const void> what;
    std::size_t rows;
    bool snapshot;  // a live job's snapshot: trims rate-limited
  };
  std::vector<Disposed> disposed_;
  int64_t last_snapshot_trim_ns_ = 0;  // CLOCK_MONOTONIC; this thread's alone
  std::size_t snapshot_rows_untrimmed_ = 0;  // freed since, to be trimmed when a minute is up
  std::size_t held_untrimmed_ = 0;  // rows of disposed jobs freed since the last trim
  int64_t busy_since_ns_ = 0;  // the job being written (its submission), 0 when none
  bool tidying_ = false;       // after a record: rotating the directory, freeing the job
  std::vector<RecordDone> done_;
  std::shared_ptr<const std::vector<core::AlignmentMount>> alignment_;
  // The thread's own: the mounts and their alignments as read last, read again only when the
  // table changed (a table of 23 mounts cost ~0.7 ms and a thread per mount for each record:
  // bench/README.md "Thousands of short jobs").
  MountTableWatch mounts_watch_;
  std::vector<std::pair<std::string, std::string>> mounts_;
  std::shared_ptr<const std::vector<core::AlignmentMount>> mounts_alignment_;
  int64_t mounts_read_ns_ = 0;  // CLOCK_MONOTONIC of that read
  static constexpr int64_t kMountsReadEvery = 60'000'000'000;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything above is
};

}  // namespace iolens::daemon
