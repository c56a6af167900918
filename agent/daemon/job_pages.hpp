// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A live job's `job` answers, page by page, from one snapshot of the job
/// (docs/control.md#live-jobs).
///
/// A snapshot copies every record the job holds: 1.4-1.7 s of the daemon's loop for a job of
/// 150,000 files held whole. Cut afresh for each page, `iolens job` of such a job (150 pages) held the
/// loop for minutes, and any socket user could repeat it (bench/README.md "Live jobs"). Now the loop takes one snapshot
/// (JobPages) and LivePages holds it: the following pages are cut from it by the control
/// socket's front thread, so a client paging through a job costs the loop one snapshot and
/// joins pages of one and the same moment. LivePages also decides when the loop may take a new
/// snapshot, so that `job` requests, however many, take a bounded share of the loop.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "control/protocol.hpp"
#include "core/by_file.hpp"
#include "core/snapshot.hpp"
#include "exporters/json_report.hpp"

namespace iolens::daemon {

/// A `job` request (docs/control.md#job): `id`, `offset` (0), `limit` (kJobPageDefault, at
/// most kJobPageMax) and, continuing a live job's pages, the `snapshot` they come from.
struct PageRequest {
  std::string id;
  uint64_t offset = 0;
  uint64_t limit = 0;
  std::optional<uint64_t> snapshot;
};
/// Throws control::BadRequest naming the member that is wrong.
PageRequest parse_page_request(const nlohmann::json& req);

/// One snapshot of a live job, immutable once made: any thread may cut pages from it.
class JobPages {
 public:
  using Clock = std::chrono::steady_clock;
  /// `edits`: how the run record becomes the job's (job_record_edits, with the daemon's
  /// members as its overrides). `serial` names this snapshot in its pages (page.snapshot).
  /// `max_rows`: a page holds at most this many rows of each list, whatever it is asked for.
  JobPages(std::string id, uint64_t serial, core::RunSnapshot snap, exporters::RecordEdits edits,
           std::string version, Clock::time_point taken_at,
           std::size_t max_rows = control::kLiveJobPageMax);
  JobPages(const JobPages&) = delete;  // across_ points into snap_
  JobPages& operator=(const JobPages&) = delete;

  /// The record's members with processes, files and by_file rows [offset, offset + limit)
  /// (`limit` at most max_rows),
  /// and `page` {offset, limit, processes, files, by_file, next, snapshot, age_ms}.
  nlohmann::json page(std::size_t offset, std::size_t limit, Clock::time_point now) const;

  const std::string& id() const { return id_; }
  uint64_t serial() const { return serial_; }
  Clock::time_point taken_at() const { return taken_at_; }
  /// Rows held (processes, files): what the snapshot weighs.
  std::size_t rows() const { return snap_.processes.size() + snap_.files.size(); }

 private:
  std::string id_;
  uint64_t serial_;
  core::RunSnapshot snap_;
  core::FilesAcrossProcesses across_;  // of snap_: built once, its rows sorted once
  exporters::RecordEdits edits_;
  std::string version_;
  Clock::time_point taken_at_;
  std::size_t max_rows_;
};

/// The snapshot held for live jobs' pages, and when a new one may be taken. One is held at a
/// time (its memory is that of a record being written, bounded by limits.max_files_per_job).
/// A request for job J is answered from the held snapshot when it is J's and:
/// - the request names it (`"snapshot": serial`, a client continuing its pages); or
/// - it is younger than its reuse window, max(`reuse_min`, `reuse_factor` times what it took).
/// Otherwise the loop takes a new one (letting the held one go), when:
/// - the budget allows: after a snapshot that took d, the next is taken no sooner than
///   (`budget_factor` - 1) x d later, so snapshots take at most 1/budget_factor of the loop's
///   time (the held job's own requests never wait for it: its reuse window outlasts it);
/// - and the held one is not being paged: no page that named it (a client reading page after
///   page) within `in_use`, or it is older than `protect_max` (so a client paging through a
///   big job is not made to start again by every other request, nor can one hold it for ever).
/// A request that would need one sooner is answered from the held one if it is its job's,
/// however old, else told to retry then. Thread-safe: the front thread
/// answers from it, the loop takes snapshots.
class LivePages {
 public:
  using Clock = JobPages::Clock;
  struct Policy {
    Clock::duration reuse_min = std::chrono::seconds(1);
    unsigned reuse_factor = 20;
    unsigned budget_factor = 20;
    /// Held no longer than this after its last page.
    Clock::duration idle_drop = std::chrono::seconds(30);
    /// Not replaced while paged this recently, unless older than protect_max.
    Clock::duration in_use = std::chrono::seconds(1);
    Clock::duration protect_max = std::chrono::seconds(30);
  };
  LivePages();
  explicit LivePages(Policy policy);

  /// The held snapshot if it may answer a request for `id` without a new one (above): with
  /// `snapshot`, only that one; with `any_age`, `id`'s however old (for a request of that job
  /// while no new snapshot may be taken, rather than a refusal). Marks it used and counts the
  /// page (pages_held).
  std::shared_ptr<const JobPages> usable(const std::string& id, std::optional<uint64_t> snapshot,
                                         Clock::time_point now, bool any_age = false);
  /// How long the loop must wait before it may take a new snapshot (zero: now): the budget's
  /// wait, or the held one's while it is being paged.
  Clock::duration wait_for_new(Clock::time_point now) const;
  const Policy& policy() const { return policy_; }
  /// The next snapshot's serial (counting up from the wall-clock microseconds at construction,
  /// so that a client paging across a daemon restart never names a new snapshot).
  uint64_t next_serial();
  /// Holds `pages`, taken in `took`, ending at `now`. Returns the one it replaces (the caller
  /// frees it where freeing a big one costs nothing: not on the loop).
  std::shared_ptr<const JobPages> hold(std::shared_ptr<const JobPages> pages,
                                       Clock::duration took, Clock::time_point now);
  /// Lets go of job `id`'s snapshot (it left the table), or of any held `idle_drop` past its
  /// last page (`id` empty). Returns it, to be freed as hold()'s.
  std::shared_ptr<const JobPages> drop(const std::string& id, Clock::time_point now);
  /// Lets go of whatever is held (before a new snapshot is taken: two are never held at once).
  std::shared_ptr<const JobPages> release();

  /// What happened to `job` requests for live jobs (docs/control.md#live-jobs).
  struct Counts {
    uint64_t snapshots = 0;       // taken by the loop
    uint64_t pages_held = 0;      // answered from a snapshot taken for an earlier request
    uint64_t retry_busy = 0;      // told to retry: a new snapshot not allowed yet
    uint64_t retry_gone = 0;      // told to retry: the snapshot the client named is gone
    uint64_t last_snapshot_us = 0;
    uint64_t held_rows = 0;       // rows of the snapshot held now (0: none)
  };
  Counts counts() const;
  /// The loop counts the requests it tells to retry.
  void count_retry(bool gone);

 private:
  Clock::duration reuse_window(Clock::duration took) const;

  const Policy policy_;
  mutable std::mutex mu_;
  std::shared_ptr<const JobPages> held_;
  Clock::duration held_took_{};
  Clock::time_point last_used_{};
  std::optional<Clock::time_point> last_paged_;  // its last page that named it (a client paging)
  Clock::time_point next_allowed_{};  // the budget: no new snapshot before
  uint64_t serial_ = 0;
  Counts counts_;
};

}  // namespace iolens::daemon
