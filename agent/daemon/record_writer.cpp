// SPDX-License-Identifier: Apache-2.0
#include "daemon/record_writer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <exception>

#include "core/clock.hpp"
#include "core/heap.hpp"
#include "exporters/darshan_log.hpp"
#include "exporters/json_report.hpp"

namespace iolens::daemon {
namespace {

/// Records (and processes) a disposed job must have held for its memory to be given back.
constexpr std::size_t kTrimAfterRecords = 4096;
/// Live jobs' snapshots (JobPages) are given back at most this often (ns).
constexpr int64_t kSnapshotTrimEvery = 60'000'000'000;

}  // namespace

MountTableWatch::MountTableWatch()
    : fd_(open("/proc/self/mounts", O_RDONLY | O_CLOEXEC)) {}

MountTableWatch::~MountTableWatch() {
  if (fd_ >= 0) close(fd_);
}

bool MountTableWatch::changed() {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLPRI, 0};
  const bool flagged = poll(&p, 1, 0) > 0 && (p.revents & (POLLPRI | POLLERR)) != 0;
  // The poll itself clears the kernel's flag (it notes the namespace's event count it saw).
  if (!flagged && !first_) return false;
  first_ = false;
  return true;
}

RecordDone write_record(JobWriter& files, const RecordJob& r,
                        const std::vector<std::pair<std::string, std::string>>* given_mounts) {
  const Job& job = *r.job;
  RecordDone d;
  d.id = job.identity.id;
  d.serial = r.serial;
  // Darshan's mount table, read here rather than on the daemon's loop: statfs() of a mount
  // whose server does not answer (NFS) may block for long.
  // Read once: the same table gives the alignments and the Darshan log's mount entries.
  RecordBasis basis = r.basis;
  std::vector<std::pair<std::string, std::string>> mounts;
  if (given_mounts) mounts = *given_mounts;
  else if (!basis.alignment || r.darshan) mounts = exporters::read_mounts("/proc/self/mounts");
  if (!basis.alignment)
    basis.alignment = std::make_shared<const std::vector<core::AlignmentMount>>(
        exporters::alignment_table(mounts));
  d.alignment = basis.alignment;
  core::RunSnapshot snap = job_snapshot(job, basis);
  d.summary = job_summary(job, snap);
  if (r.interrupted) d.summary["state"] = "interrupted";
  std::string log;
  if (r.darshan) {
    exporters::DarshanJobInfo info = darshan_job_info(job, snap, r.node, r.basis.mono_to_wall_ns);
    const int64_t end = snap.end_ns;
    if (!job.end_ns) {
      // Written at a stop while still running: Darshan's header needs an end; the stop's.
      snap.end_ns = core::clock_ns(CLOCK_REALTIME);
      info.metadata.emplace_back("state", "interrupted");
    }
    info.mounts = std::move(mounts);
    log = exporters::darshan_log(snap, info);
    snap.end_ns = end;
  }
  const exporters::RecordEdits edits = job_record_edits(job, d.summary, r.overrides);
  const JobWritten w = files.write(
      job_file_name(d.id, job.start_ns),
      [&](const Sink& sink) { return exporters::write_run_json(snap, r.version, sink, edits); },
      r.darshan ? &log : nullptr, false,
      // One incarnation of one job (a cgroup made again under the same path has another id)
      // and the kind of record: an interrupted one is never the job's final record.
      std::to_string(job.cgroup_id) + " " + d.id + (r.interrupted ? " interrupted" : " closed"),
      job.restored && !r.interrupted);
  d.path = w.path;
  d.already = w.already;
  d.record = w.record;
  d.darshan = w.darshan;
  return d;
}

RecordWriter::RecordWriter(JobWriter& files) : files_(files), thread_([this] { run(); }) {}

RecordWriter::~RecordWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void RecordWriter::submit(RecordJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(job), core::clock_ns(CLOCK_MONOTONIC)});
  }
  wake_.notify_all();
}

std::vector<RecordDone> RecordWriter::take_done() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RecordDone> out;
  out.swap(done_);
  return out;
}

std::size_t RecordWriter::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (busy_since_ns_ != 0) + done_.size();
}

void RecordWriter::dispose(std::shared_ptr<const Job> job) {
  const std::size_t rows = job && job->rec ? job->rec->file_records() + job->rec->processes() : 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    disposed_.push_back({std::move(job), rows, false});
  }
  wake_.notify_all();
}

void RecordWriter::dispose(std::shared_ptr<const void> what, std::size_t rows) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    disposed_.push_back({std::move(what), rows, true});
  }
  wake_.notify_all();
}

void RecordWriter::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && busy_since_ns_ == 0 && !tidying_; });
}

std::shared_ptr<const std::vector<core::AlignmentMount>> RecordWriter::alignment() const {
  std::lock_guard<std::mutex> lock(mu_);
  return alignment_;
}

void RecordWriter::run() {
  // The daemon's live pages and captures take the mount table from here: read first, off the
  // loop and unlocked (a blocked statfs() holds only this thread).
  mounts_watch_.changed();  // read now: the first record reuses it unless a mount came since
  mounts_read_ns_ = core::clock_ns(CLOCK_MONOTONIC);
  mounts_ = exporters::read_mounts("/proc/self/mounts");
  mounts_alignment_ = std::make_shared<const std::vector<core::AlignmentMount>>(
      exporters::alignment_table(mounts_));
  auto table = mounts_alignment_;
  std::unique_lock<std::mutex> lock(mu_);
  if (!alignment_) alignment_ = std::move(table);
  for (;;) {
    const auto woken = [this] { return stopping_ || !queue_.empty() || !disposed_.empty(); };
    if (snapshot_rows_untrimmed_ == 0) {
      wake_.wait(lock, woken);
    } else if (!wake_.wait_for(lock, std::chrono::nanoseconds(std::max<int64_t>(
                                         0, last_snapshot_trim_ns_ + kSnapshotTrimEvery -
                                                core::clock_ns(CLOCK_MONOTONIC))),
                               woken)) {
      // Snapshots freed since the last trim, given back once a minute has passed: with no
      // other work, so that their memory is not kept until some other disposal comes.
      snapshot_rows_untrimmed_ = 0;
      last_snapshot_trim_ns_ = core::clock_ns(CLOCK_MONOTONIC);
      lock.unlock();
      core::heap_release();
      lock.lock();
      continue;
    }
    if (!disposed_.empty()) {
      std::vector<Disposed> gone;
      gone.swap(disposed_);
      lock.unlock();
      std::size_t held = 0, snapshot_rows = 0;
      for (const auto& d : gone) (d.snapshot ? snapshot_rows : held) += d.rows;
      gone.clear();
      const int64_t now = core::clock_ns(CLOCK_MONOTONIC);
      if (snapshot_rows_untrimmed_ + snapshot_rows >= kTrimAfterRecords) {
        if (last_snapshot_trim_ns_ == 0 || now - last_snapshot_trim_ns_ >= kSnapshotTrimEvery) {
          last_snapshot_trim_ns_ = now;
          held += kTrimAfterRecords;  // trimmed below
          snapshot_rows_untrimmed_ = 0;
        } else {
          snapshot_rows_untrimmed_ += snapshot_rows;  // trimmed when the minute is up
        }
      }
      // A big closed job's records were most of the heap; freed, they stay the process's (glibc
      // keeps freed pages mapped; jemalloc for up to its decay time, 10 s) until given back: without this, iolensd's RSS stayed near its
      // peak after a big job (bench/README.md "Memory: records kept packed, ..."). Here, off
      // the loop, and only after a big job: the trim holds each arena's lock while it gives
      // pages back, the loop's too. Small jobs count together: thousands of them one after the
      // other left as much memory unreturned as one big job (bench/README.md "Thousands of
      // short jobs").
      held_untrimmed_ += held;
      if (held_untrimmed_ >= kTrimAfterRecords) {
        held_untrimmed_ = 0;
        core::heap_release();
      }
      lock.lock();
      continue;
    }
    if (queue_.empty()) return;  // stopping, and everything written
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    busy_since_ns_ = q.submitted_ns;
    lock.unlock();
    RecordDone d;
    try {
      // Read again when a mount came or went, and at least once a minute: a mount point whose
      // statfs() failed or timed out (a server that did not answer) got the fallback
      // alignment, which must not stay until some unrelated mount happens.
      const int64_t now = core::clock_ns(CLOCK_MONOTONIC);
      if (mounts_watch_.changed() || !mounts_alignment_ || now - mounts_read_ns_ >= kMountsReadEvery) {
        mounts_read_ns_ = now;
        mounts_ = exporters::read_mounts("/proc/self/mounts");
        mounts_alignment_ = std::make_shared<const std::vector<core::AlignmentMount>>(
            exporters::alignment_table(mounts_));
      }
      if (!q.job.basis.alignment) q.job.basis.alignment = mounts_alignment_;
      d = write_record(files_, q.job, &mounts_);
    } catch (const std::exception& e) {
      // Not expected (the record is made of checked values): said, never a dead thread.
      d.id = q.job.job ? q.job.job->identity.id : std::string();
      d.serial = q.job.serial;
      d.record = Status::Error(std::string("cannot make the record: ") + e.what());
      files_.count_failed();
    }
    d.took_ns = core::clock_ns(CLOCK_MONOTONIC) - q.submitted_ns;
    // Rotation follows a record written, as it did when the loop wrote (never a failed one).
    const std::string keep = d.path.empty() ? "" : d.path.substr(d.path.rfind('/') + 1);
    lock.lock();
    // Handed back as soon as the record is there, so a client that sees the file finds the
    // job closed; the slow rest follows.
    busy_since_ns_ = 0;
    if (d.alignment) alignment_ = d.alignment;
    done_.push_back(std::move(d));
    tidying_ = true;
    lock.unlock();
    if (!keep.empty()) files_.rotate(keep);
    q.job.job.reset();  // the job's memory goes here (or in dispose()), not on the loop
    lock.lock();
    tidying_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace iolens::daemon
