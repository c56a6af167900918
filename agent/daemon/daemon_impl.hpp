// SPDX-License-Identifier: Apache-2.0
#pragma once
/// iolensd's loop (class Daemon), shared by its compilation units: daemon.cpp (start, the loop,
/// selection, metrics, stop), daemon_drain.cpp, daemon_state.cpp, daemon_records.cpp,
/// daemon_control.cpp and daemon_runs.cpp. Private to agent/daemon: the daemon's interface is
/// daemon.hpp.

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <type_traits>
#include <set>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <unordered_set>
#include <variant>
#include <spdlog/spdlog.h>
#include "control/peer.hpp"
#include "control/server.hpp"
#include "core/clock.hpp"
#include "core/heap.hpp"
#include "core/private_dir.hpp"
#include "core/units.hpp"
#include "core/wall_clock.hpp"
#include "core/zstd_stream.hpp"
#include "daemon/answer_board.hpp"
#include "daemon/capture.hpp"
#include "daemon/capture_runner.hpp"
#include "daemon/drain.hpp"
#include "core/events.hpp"
#include "daemon/job_metrics.hpp"
#include "daemon/job_record.hpp"
#include "daemon/job_table.hpp"
#include "daemon/job_writer.hpp"
#include "daemon/record_writer.hpp"
#include "daemon/runs.hpp"
#include "daemon/state_file.hpp"
#include "daemon/state_saver.hpp"
#include "daemon/metrics_server.hpp"
#include "exporters/darshan_log.hpp"
#include "iolens_abi.h"
#include "jobs/identity.hpp"
#include "jobs/memory_bound.hpp"
#include "jobs/selector.hpp"
#include "loader/loader.hpp"
#include "loader/preflight.hpp"
#include "daemon/daemon.hpp"

#ifndef IOLENS_VERSION
#define IOLENS_VERSION "0.0.0"
#endif

namespace iolens::daemon {

using core::clock_ns;

/// The file's bytes, or nothing when it cannot be read.
std::optional<std::string> read_file(const std::string& path);
/// This process's RSS (/proc/self/statm's resident pages), 0 when it cannot be read.
uint64_t resident_bytes();
/// The inode number of directory `path`, 0 if it is none.
uint64_t inode_of(const std::string& path);
/// Every cgroup directory at and below `rel` (a path relative to the mount), parents first.
void walk_cgroups(const std::string& mount, const std::string& rel,
                  const std::function<void(uint64_t, const std::string&)>& visit, int depth = 0);
/// The kernel's loss counters under the names docs/counters.md uses.
nlohmann::json kernel_losses(const loader::KernelStats& st);
/// Losses no job was charged with (docs/counters.md#lost, `unattributed`): the kernel could not
/// make the process's `proc_lost` entry, or the process was in no job (or its job was written).
uint64_t unattributed_losses(const loader::KernelStats& st);
/// One loss each, as IOLENS_STAT_LOSSES_UNATTRIBUTED counts them: not the "of which" counts,
/// nor cut paths (not a loss).
uint64_t losses_in(const iolens_proc_lost& v);

/// Fixed-size entries (record keys, name ids) as one CBOR binary of the state file, in their
/// in-memory layout (docs/state-format.md), and back.
template <class Entries>
nlohmann::json entries_binary(const Entries& entries) {
  using T = typename Entries::value_type;
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<uint8_t> out(entries.size() * sizeof(T));
  uint8_t* at = out.data();
  for (const T& e : entries) {  // a deque is not contiguous
    std::memcpy(at, &e, sizeof e);
    at += sizeof e;
  }
  return nlohmann::json::binary(std::move(out));
}
template <class T>
std::vector<T> binary_entries(const nlohmann::json& j) {
  static_assert(std::is_trivially_copyable_v<T>);
  const auto& b = j.get_binary();
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));  // (never from null)
  return v;
}

inline constexpr const char* kStateName = "state.cbor";
inline constexpr const char* kStateTmpName = "state.cbor.tmp";
inline constexpr const char* kMarkerName = "pressure-drain";
/// The largest closed job's record whose pages the loop cuts itself (parsing it: ~40 ms a MiB
/// on the VM); a bigger one is handed to the client to read (docs/control.md#job).
inline constexpr uint64_t kJobPageInLoopMaxBytes = 2u << 20;
inline constexpr const char* kCorruptPrefix = "state.cbor.corrupt-";
inline constexpr std::size_t kCorruptKept = 3;  // unusable state files kept for inspection
inline constexpr int64_t kInflightSweepEvery = 60'000'000'000;    // ns
inline constexpr uint64_t kInflightStaleAfter = 120'000'000'000;  // ns

class Daemon {
 public:
  explicit Daemon(const DaemonOptions& o) : opts_(o), cfg_(o.config) {}
  int run();

 private:
  bool setup();
  void initial_scan();
  void on_record(std::span<const uint8_t> bytes);
  void on_cgroup_event(const core::CgroupEvent& c);
  void on_mark_event(const core::MarkEvent& m);
  void apply(const std::vector<SelectionChange>& changes);
  /// A selection entry the kernel maps did not take: counted once, logged, retried later.
  void selection_failed(const SelectionChange& c, const Status& s);
  void selection_stored(const SelectionChange& c);
  /// Retries the pending entries after cgroups went away (their entries freed slots).
  void retry_selection();
  void log_unexcluded(int64_t now, bool force = false);
  /// Trace entries that were missing while the job ran, over its cgroup: its lost.untraced_cgroups.
  uint64_t untraced_cgroups_of(const Job& job) const;
  /// A whole drain round now: the open one finished, then one begun here (so a job closed
  /// before the call is ready to be written after it). `may_save`: false on a client's request
  /// path (run_end), which must not wait for a save and its fsync; the loop's next drain saves.
  void drain(bool may_save = true);
  /// One piece of the open drain round (one begins if none is open): the kernel's maps are
  /// walked until CLOCK_MONOTONIC passes `deadline_ns` (0: to their end), so that the loop
  /// answers clients between the pieces of a big map's walk. Returns true when the round
  /// ended (every record read): the work that needs them all is done then.
  bool drain_piece(int64_t deadline_ns, bool may_save);
  /// Writes the jobs that were closing when a complete round began (closable_).
  void write_closed();
  /// Takes what records_ has written: logs it, lists the jobs as closed, saves the state.
  void collect_written(bool save = true);
  /// Hands a job to records_, taken out of the table.
  void submit_record(const std::string& id, nlohmann::json overrides, bool interrupted);
  /// The uid of jobs that have none yet, from a live process (for the Darshan log's header).
  /// Called after each read of the ring, so that a process seen alive is read alive.
  void learn_uids();
  void hooks_policy();
  void note_new_jobs();
  void stop_clean();
  /// Gathers the state and hands it to saver_ when a save is due (or `force`). Returns false
  /// when one was due and could not be started (a save still under way: the caller tries
  /// again).
  bool checkpoint(bool force = false);
  /// Takes a finished save's outcome: the final records it holds leave the kernel, the
  /// pressure marker goes if no live record was taken since it was gathered.
  void collect_saved();
  /// Waits for the save under way, if any, and takes its outcome (stop, hand-over).
  void finish_save();
  void publish_metrics(bool force = false);
  core::DaemonHealth health();
  /// Whether a live record may be taken out of the kernel before a save holds it: the
  /// pressure-drain marker is made first (docs/daemon.md); false while it cannot be.
  bool mark_pressure();
  /// Reads the block records into the jobs; removes those of exited processes and of
  /// processes in no job.
  void drain_blocks(int64_t now);
  /// Reads the kernel's per-process losses into the jobs, as drain_blocks does block records;
  /// those of processes in no job are counted (IOLENS_STAT_LOSSES_NO_JOB) and removed.
  void drain_proc_losses(int64_t now);
  /// Adds `n` to IOLENS_STAT_LOSSES_NO_JOB (losses charged to processes in no job).
  void count_no_job(uint64_t n);
  /// A job leaves the table: the kernel's loss entries of its live processes go with it.
  void release_losses(const Job& job);
  void reconcile();
  void annotate_restart(const Job& job, nlohmann::json& record);
  /// A job record's `lost` (what its processes were charged with, and what no process could be
  /// charged with while it was live) and `node_lost` (the node's counts while it was live),
  /// set in `out` (docs/counters.md#lost: the same in closed, interrupted and run records).
  void job_losses(const std::string& id, nlohmann::json& out);
  /// lost.before_hooks, and `syscall_hooks` when a process of the job was selected while the
  /// on-demand hooks were detached (docs/daemon.md#cost).
  void annotate_hooks(const Job& job, nlohmann::json& record) const;
  /// `wall_clock_steps` when the wall clock was stepped while the job was live.
  void annotate_clock(const Job& job, nlohmann::json& record) const;
  /// Follows the wall clock (core/wall_clock.hpp): once a pass, before anything is converted.
  void follow_wall_clock();
  /// Moves every wall time the daemon holds by a step of the wall clock.
  void rebase_wall(int64_t delta_ns);
  void resume();
  /// A resumed daemon, once the initial scan has selected the watched cgroups: reads the ring,
  /// then marks (report-all scan) every traced process, so those the saved state lacks join
  /// their jobs before the first drain reads their records.
  void relearn_processes();
  /// A fresh, empty job table (at start, and in place of one a bad state half loaded).
  void new_table();
  /// Renames an unusable state.cbor to state.cbor.corrupt-<time> (kept for inspection, the
  /// newest kCorruptKept) and logs it; returns the new name ("" if it could not be moved).
  std::string move_state_aside(const std::string& why);
  nlohmann::json handle(const nlohmann::json& req, control::RequestContext& ctx);
  /// Folds what is over the record and name limits (JobTable::enforce_limits; `within_round`:
  /// before a drain round's end) and queues the names forgotten for the kernel (clear_names).
  void fold_over_limits(bool within_round = false);
  /// Has the kernel forget the queued names (send them again if the files are used again),
  /// a slice at a time until `deadline_ns` (0: all of them).
  void clear_names(int64_t deadline_ns);
  /// What a capture's trace file says of this node.
  CaptureRunner::Setting capture_setting() const;
  nlohmann::json status_json();
  /// `jobs`'s result: the live jobs, the closed ones kept, those being written.
  nlohmann::json jobs_json() const;
  /// `status` and `jobs` answers for the control socket's front thread: both (at start), those
  /// a request waits for, or (at a round's end) also those due again (docs/control.md).
  enum class Publish { all, wanted, wanted_or_due };
  void publish_answers(Publish which);
  std::optional<std::string> resolve_cgroup(uint64_t id);
  // Runs (docs/run.md#through-iolensd): `iolens run` counted by this daemon's programs.
  /// Opens the run root and removes the empty run cgroups an earlier daemon left (the others
  /// stay as orphans, ended once empty). False: a configured root that cannot be used.
  bool setup_runs();
  nlohmann::json start_run(const nlohmann::json& req, control::RequestContext& ctx);
  nlohmann::json end_run(const nlohmann::json& req, control::RequestContext& ctx);
  /// Moves what is left in the run's cgroup back to where the command came from, removes the
  /// cgroup and closes its job in the table (not yet written: the caller decides).
  void close_run_cgroup(Run& run);
  /// Ends the runs whose client is gone (their jobs are then written as any job's) and the
  /// orphans whose cgroup has emptied.
  void service_runs();
  /// The run's job leaves the table as write_closed() would take it, without a record: its
  /// client has the counts.
  void take_run_job(const std::string& id);
  /// A page of a live job's `job` answer: from the snapshot held for it, or a new one when
  /// LivePages allows; else control::Retry (docs/control.md#live-jobs).
  nlohmann::json live_job_page(const Job& job, const PageRequest& r);
  /// Lets go of job `id`'s held snapshot (it leaves the table), or ("") of one nobody pages.
  void drop_pages(const std::string& id);
  /// Frees a snapshot let go of on the record writer's thread (freeing a big one takes long).
  void dispose_pages(std::shared_ptr<const JobPages> pages);

  DaemonOptions opts_;
  jobs::Config cfg_;
  std::string mount_;
  // The cgroup filesystem unmounted or moved under the daemon (docs/daemon.md "The cgroup
  // filesystem remounted"): a cgroup not found at its path is then not taken for gone.
  uint64_t mount_ino_ = 0;                 // the root cgroup's inode, as found at start
  int64_t cgroup_root_missing_since_ = 0;  // monotonic; 0: mounted where mount_ says
  int64_t cgroup_root_looked_ = 0;         // the last look (monotonic)
  uint64_t cgroup_root_outages_ = 0, cgroup_root_moves_ = 0;
  /// Whether mount_ is (still) the cgroup2 root found at start; if not, the configured root is
  /// looked for again (at another mount point, it is taken). Logs and counts outages.
  bool cgroup_root_present();
  std::optional<jobs::Selector> sel_;
  std::unique_ptr<loader::Loader> loader_;
  // Before server_: its front thread reads the board and the held snapshot until the server is
  // destroyed.
  AnswerBoard board_;
  LivePages live_pages_;
  std::unique_ptr<control::Server> server_;
  std::unique_ptr<JobTable> table_;
  std::unique_ptr<JobWriter> writer_;
  // After writer_: destroyed first, it writes through writer_ until it is.
  std::unique_ptr<RecordWriter> records_;
  // Jobs handed to records_ and not yet written, by submission serial (a job id can come back
  // while its earlier record is written): their `iolens jobs` line meanwhile, and the job,
  // which the state saves as closing until its record is written (checkpoint()).
  struct Writing {
    nlohmann::json line;
    std::shared_ptr<const Job> job;
  };
  std::map<uint64_t, Writing> writing_;
  // Closed jobs in writing_ not given to the record writer yet: each waits until a save that
  // holds it (as closing) is on disk, so that a daemon killed while its files are written finds
  // it in the state it restarts from (and then whether they were written: JobWriter). Without
  // this, a job that closed and was written within a save interval of the last save was in no
  // saved state: killed then, the next daemon had neither the job nor its cgroup to find it by.
  std::deque<RecordJob> held_;
  uint64_t saved_serial_ = 0;  // the highest record serial a save on disk holds
  uint64_t held_released_unsaved_ = 0;  // times held jobs went without their save (it hung)
  static constexpr int64_t kHeldSaveWait = 30'000'000'000;
  /// Gives the record writer the held jobs a save on disk holds (all of them with `all`).
  void release_held(bool all);
  uint64_t record_serial_ = 0;
  bool save_written_ = false;  // records written since the last save: save at the next pass
  int sigfd_ = -1;
  int state_lock_ = -1;  // flock'd for the daemon's lifetime
  int state_dir_fd_ = -1;  // the checked state directory: its files are opened through it
  int64_t start_mono_ = 0;
  int64_t mono_to_wall_ = 0;  // follows the wall clock's steps (wall_steps_)
  core::WallClockSteps wall_steps_{0};
  bool scan_needed_ = false;
  bool drain_soon_ = false;
  int64_t last_drain_ = 0;
  int64_t last_active_ = 0;
  int64_t hooks_since_mono_ = -1;  // when the syscall hooks were last attached; -1 detached
  uint64_t hooks_attach_count_ = 0;
  uint64_t decode_errors_ = 0;
  uint64_t last_drain_us_ = 0;
  uint64_t drains_ = 0;  // completed drain rounds, for `status` (tests wait on it, not on sleeps)
  // The drain's rounds and rules (drain.hpp): made once the loader is.
  std::unique_ptr<Drain> drain_;
  uint32_t last_round_pieces_ = 0;
  int64_t last_round_longest_piece_ns_ = 0;
  // Jobs ready to be written: closing when a complete round began (write_closed()), with their
  // cgroup id then (a cgroup made again at the same path gives the job a new one: not ready).
  std::set<std::pair<std::string, uint64_t>> closable_;

  std::map<std::string, loader::KernelStats> job_loss_base_;
  std::map<std::string, uint64_t> job_decode_base_;  // decode_errors_ when each job was first seen
  // Job selection entries the kernel maps could not take (docs/daemon.md#job-selection), by
  // cgroup id: retried when cgroups go away, forgotten when theirs does. Each counted once.
  std::map<uint64_t, SelectionChange> sel_pending_;
  bool sel_retry_ = false;
  uint64_t untraced_cgroups_ = 0;    // watched roots whose trace entry could not be stored
  uint64_t unexcluded_cgroups_ = 0;  // excluded cgroups whose exclusion could not be stored
  std::size_t proc_lost_entries_ = 0;  // the kernel's `proc_lost` entries at the last drain
  uint64_t unexcluded_logged_ = 0;
  int64_t unexcluded_log_mono_ = 0;
  std::string unexcluded_last_;  // the last one that failed, and why
  struct TraceGap {
    std::string path;  // the watched root that had no trace entry
    int64_t from_wall = 0;
    int64_t to_wall = 0;  // 0: still missing
  };
  std::deque<TraceGap> trace_gaps_;  // bounded (kMaxTraceGaps)
  static constexpr std::size_t kMaxTraceGaps = 4096;
  // Names folded out of the recorders whose kernel entry still says "sent": two syscalls each,
  // so cleared a slice at a time between answers (a 150,000-file job folded at the default
  // limits spent up to 0.8 s at once there); saved with the state, so that a restart clears
  // what a crash left. Until cleared, a folded file used again gets a record without a name.
  std::deque<loader::Loader::NameId> names_to_clear_;
  bool state_dirty_ = true;
  bool pressure_marked_ = false;  // the pressure-drain marker file exists
  bool last_save_live_ = false;   // the last save held the live records' counts
  bool live_save_due_ = false;    // no live record is taken until a save holds their counts
  bool last_drain_complete_ = true;  // the last drain read every record (its walks did not fail)
  uint64_t drain_failures_ = 0;
  // The previous daemon died inside a pressure drain: live parts it saved whose kernel records
  // it had taken are copies nothing refreshes, so every save keeps them (docs/daemon.md).
  bool always_live_saves_ = false;
  int64_t last_save_failed_mono_ = INT64_MIN / 2;
  static constexpr int64_t kSaveRetryEvery = 1'000'000'000;  // ns, after a failed save
  // The state is encoded and written by a thread (docs/daemon.md#restart-without-loss), one
  // save at a time; what a save under way holds, so that its outcome is applied to that only.
  std::unique_ptr<StateSaver> saver_;
  struct SaveUnderWay {
    bool with_live = false;
    std::size_t pending_files = 0;   // the first this many of the drain's pending files are in
                                     // it as final
    std::size_t pending_others = 0;  // the same for its pending others
    uint64_t live_taken = 0;         // Drain::live_taken() when it was gathered
    uint64_t ring_pos = 0;           // the ring's consumer position it holds
    int64_t gathered_mono = 0;
    int64_t gather_ns = 0;           // the loop's time gathering it
    uint64_t record_serial = 0;      // record_serial_ when gathered: jobs up to it are in it
  };
  std::optional<SaveUnderWay> save_under_way_;
  /// No live record may be taken until the save under way, which holds their counts, is on disk.
  bool waiting_for_live_save() const {
    return !last_save_live_ && !always_live_saves_ && save_under_way_ && save_under_way_->with_live;
  }
  uint64_t marker_failures_ = 0;  // pressure-drain markers that could not be created
  uint64_t memory_bound_ = 0;     // limits.memory, or what the limits given need (docs/daemon.md#memory-bound)
  uint64_t removed_at_fold_ = 0;  // Drain::removed_records() at the last fold_over_limits
  uint64_t last_save_loop_us_ = 0;  // the loop's part of the last save (gathering, collecting)
  uint64_t last_save_gather_us_ = 0, last_save_collect_us_ = 0;  // its two parts
  uint64_t checkpoints_ = 0;
  uint64_t names_cleared_ = 0;  // names the kernel was told to send again (clear_names)
  // The last save's recorder blob buffers, emptied with their pages kept, handed back by the
  // saver for the next gathering: on the VM a fresh buffer's page faults were most of a
  // gathering's time in the loop (10-30 us a page; 93-256 ms for a live job).
  std::map<std::string, std::vector<uint8_t>> spare_blobs_;  // by job id
  uint64_t checkpoint_failures_ = 0;
  uint64_t last_checkpoint_us_ = 0;
  int64_t last_checkpoint_mono_ = 0;
  int64_t last_reconcile_ = 0;
  int64_t last_inflight_sweep_ = 0;
  uint64_t reconciled_job_events_lost_ = 0;
  uint64_t jobs_closed_by_reconcile_ = 0;
  uint64_t last_checkpoint_pos_ = 0;
  static constexpr int64_t kCheckpointEvery = 5'000'000'000;  // ns
  nlohmann::json restart_ = nlohmann::json::object();
  // Jobs the first scan found live after a restart: their start preceded this daemon, even
  // when an unusable state left them a start of now (annotate_restart).
  std::set<std::string> found_at_start_;
  std::string state_path() const { return cfg_.state_dir + "/state.cbor"; }
  struct Closed {
    nlohmann::json summary;
    std::string path;
  };
  std::deque<std::pair<std::string, Closed>> closed_;  // newest last, bounded
  // Metrics (docs/metrics.md): the endpoint, and the ended jobs whose series stay for the grace
  // period, with their final values.
  std::unique_ptr<MetricsServer> metrics_;
  FileClassifier classifier_;
  std::string node_;
  // Captures (capture_runner.hpp): made once the loader is.
  std::unique_ptr<CaptureRunner> captures_;
  std::unique_ptr<RunCgroups> run_cg_;  // null: runs are off (no `runs:`)
  std::map<uint64_t, Run> runs_;
  std::vector<std::string> run_orphans_;  // run cgroups an earlier daemon left, still populated
  uint64_t next_run_ = 1;
  int64_t orphans_checked_ = 0;
  uint64_t runs_started_ = 0, runs_ended_ = 0, runs_abandoned_ = 0, runs_refused_ = 0;
  struct Retained {
    core::JobMetrics metrics;
    int64_t until_mono = 0;
  };
  std::deque<Retained> retained_;  // by end, at most metrics.max_jobs (retain_metrics)
  uint64_t retained_evicted_ = 0;  // ended jobs whose series went before their grace period's end
  void retain_metrics(const Job& job);
  core::DurationHistogram drain_hist_{{0.0001, 0.001, 0.01, 0.1, 1, 10}, {}, 0};
  double last_snapshot_s_ = 0;
  int64_t last_publish_mono_ = -1;
  static constexpr int64_t kPublishEvery = 1'000'000'000;  // ns: a walk of every record
};

}  // namespace iolens::daemon
