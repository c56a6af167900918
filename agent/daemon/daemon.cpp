// SPDX-License-Identifier: Apache-2.0
#include "daemon/daemon.hpp"

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

#ifndef IOLENS_VERSION
#define IOLENS_VERSION "0.0.0"
#endif

namespace iolens::daemon {
namespace {

using core::clock_ns;

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// This process's RSS (/proc/self/statm's resident pages), 0 when it cannot be read.
uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? st.st_ino : 0;
}

/// Every cgroup directory at and below `rel` (a path relative to the mount), parents first.
void walk_cgroups(const std::string& mount, const std::string& rel,
                  const std::function<void(uint64_t, const std::string&)>& visit, int depth = 0) {
  const std::string abs = mount + (rel == "/" ? "" : rel);
  const uint64_t id = inode_of(abs);
  if (id == 0 || depth > 64) return;
  visit(id, rel);
  DIR* d = opendir(abs.c_str());
  if (!d) return;
  std::vector<std::string> subdirs;
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0)
      continue;
    subdirs.emplace_back(e->d_name);
  }
  closedir(d);
  for (const auto& s : subdirs) walk_cgroups(mount, (rel == "/" ? "" : rel) + "/" + s, visit, depth + 1);
}

/// The kernel's loss counters under the names docs/counters.md uses.
nlohmann::json kernel_losses(const loader::KernelStats& st) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [cause, n] : loader::kernel_losses(st)) out[cause] = n;
  out["job_events"] = st[IOLENS_STAT_JOB_EVENTS_LOST];
  return out;
}

/// Losses no job was charged with (docs/counters.md#lost, `unattributed`): the kernel could not
/// make the process's `proc_lost` entry, or the process was in no job (or its job was written).
uint64_t unattributed_losses(const loader::KernelStats& st) {
  return st[IOLENS_STAT_LOSSES_UNATTRIBUTED] + st[IOLENS_STAT_LOSSES_NO_JOB];
}

/// One loss each, as IOLENS_STAT_LOSSES_UNATTRIBUTED counts them: not the "of which" counts,
/// nor cut paths (not a loss).
uint64_t losses_in(const iolens_proc_lost& v) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < IOLENS_NR_STATS; ++i)
    if (i != IOLENS_STAT_PATH_EVENTS_LOST && i != IOLENS_STAT_PROC_EVENTS_LOST &&
        i != IOLENS_STAT_JOB_EVENTS_LOST && i != IOLENS_STAT_PATHS_TRUNCATED)
      n += v.n[i];
  return n;
}

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

constexpr const char* kStateName = "state.cbor";
constexpr const char* kStateTmpName = "state.cbor.tmp";
constexpr const char* kMarkerName = "pressure-drain";
/// The largest closed job's record whose pages the loop cuts itself (parsing it: ~40 ms a MiB
/// on the VM); a bigger one is handed to the client to read (docs/control.md#job).
constexpr uint64_t kJobPageInLoopMaxBytes = 2u << 20;
constexpr const char* kCorruptPrefix = "state.cbor.corrupt-";
constexpr std::size_t kCorruptKept = 3;  // unusable state files kept for inspection
constexpr int64_t kInflightSweepEvery = 60'000'000'000;    // ns
constexpr uint64_t kInflightStaleAfter = 120'000'000'000;  // ns

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

bool Daemon::setup() {
  {
    // Blocked first: threads started later (the metrics server's) inherit the mask, so these
    // signals reach the loop's signalfd and never kill the process from another thread.
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR2}) sigaddset(&mask, s);
    pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  }
  // Before anything is created (directories, the socket): a daemon that cannot load its
  // programs must fail with the reason, not with a side effect of running unprivileged.
  if (Status s = loader::check_privileges(); !s) {
    spdlog::error("{}", s.message);
    return false;
  }
  if (Status s = loader::check_btf(opts_.btf_path); !s) {
    spdlog::error("{}", s.message);
    return false;
  }
  const auto mountinfo = read_file(opts_.mountinfo_path);
  if (!mountinfo) {
    spdlog::error("cannot read {}: {}", opts_.mountinfo_path, std::strerror(errno));
    return false;
  }
  const jobs::RootResult root = jobs::resolve_cgroup_root(cfg_.cgroup_root, *mountinfo);
  if (!root.error.empty()) {
    spdlog::error("cgroup root: {}", root.error);
    return false;
  }
  mount_ = root.path;
  if (access(mount_.c_str(), R_OK | X_OK) != 0) {
    spdlog::error("cannot read the cgroup root {}: {}", mount_, std::strerror(errno));
    return false;
  }
  mount_ino_ = inode_of(mount_);
  try {
    sel_.emplace(cfg_.rules);
  } catch (const std::exception& e) {
    spdlog::error("bad job rule: {}", e.what());
    return false;
  }
  if (sel_->watch_roots().size() > IOLENS_CGROUP_TRACE_MAX) {
    spdlog::error("the rules watch {} cgroup roots; the kernel's selection map holds {}",
                  sel_->watch_roots().size(), IOLENS_CGROUP_TRACE_MAX);
    return false;
  }
  writer_ = std::make_unique<JobWriter>(cfg_.output_dir, cfg_.rotation.max_bytes,
                                        cfg_.rotation.max_age_s,
                                        cfg_.record_compression == "zstd");
  if (Status s = writer_->prepare(); !s) {
    spdlog::error("{}", s.message);
    return false;
  }
  records_ = std::make_unique<RecordWriter>(*writer_);
  {
    // One daemon per state directory: a second one would overwrite the first one's state.
    // Checked, then used only through its descriptor: no file of it is ever followed through a
    // link (docs/daemon-config.md#the-daemons-directories).
    std::string error;
    state_dir_fd_ = core::open_private_dir(cfg_.state_dir, 0700, true, "state directory", error);
    if (state_dir_fd_ < 0) {
      spdlog::error("{}", error);
      return false;
    }
    state_lock_ = openat(state_dir_fd_, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat lock_st {};
    if (state_lock_ < 0 && errno == ELOOP) {
      spdlog::error("{}/lock is a symbolic link: refusing to open it (remove it)", cfg_.state_dir);
      return false;
    }
    if (state_lock_ >= 0 && (fstat(state_lock_, &lock_st) != 0 || !S_ISREG(lock_st.st_mode))) {
      spdlog::error("{}/lock is not a regular file: refusing it (remove it)", cfg_.state_dir);
      return false;
    }
    if (state_lock_ < 0 || flock(state_lock_, LOCK_EX | LOCK_NB) != 0) {
      spdlog::error("state directory {} is in use by another running iolensd ({})",
                    cfg_.state_dir, std::strerror(errno));
      return false;
    }
    saver_ = std::make_unique<StateSaver>(state_dir_fd_, kStateTmpName, kStateName);
  }
  // This daemon's state is its own now: a killed predecessor's temporaries in the output
  // directory can go (a writer's are flock'd: never taken).
  writer_->remove_stale_temporaries();
  if (const uint64_t n = writer_->stale_temporaries_removed())
    spdlog::warn("{}: removed {} temporary file(s) of a record a killed daemon was writing",
                 cfg_.output_dir, n);
  std::optional<gid_t> group;
  if (!cfg_.socket_group.empty()) {
    std::string err;
    group = control::group_id(cfg_.socket_group, err);
    if (!group) {
      spdlog::error("socket_group: {}", err);
      return false;
    }
  }
  std::string err;
  server_ = control::Server::listen(cfg_.socket_path, group, err);
  if (!server_) {
    spdlog::error("control socket: {}", err);
    return false;
  }
  // `status` and `jobs` are answered by the server's front thread from what the loop published
  // last, so that a loop busy with a big job never keeps them waiting (docs/control.md).
  control::Server* server = server_.get();
  if (!server_->start_front(
          [this, server](const nlohmann::json& req, AnswerBoard::Clock::time_point arrived)
              -> std::optional<nlohmann::json> {
            const std::string cmd = req.value("cmd", "");
            if (cmd == "job") {
              // A live job's page from the snapshot held for it, when it may answer (the loop
              // decides the rest: a new snapshot, a closed job, a refusal).
              const PageRequest r = parse_page_request(req);
              const auto now = LivePages::Clock::now();
              if (auto pages = live_pages_.usable(r.id, r.snapshot, now))
                return pages->page(r.offset, r.limit, now);
              return std::nullopt;
            }
            return board_.answer(cmd, arrived, [server] { server->wake_loop(); });
          },
          err))
    spdlog::warn("control socket: {}; the loop answers every request", err);
  // The node's name: the metrics' node label, and in captures and Darshan logs.
  node_ = cfg_.metrics.node;
  if (node_.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) node_ = host;
  }
  if (!cfg_.metrics.listen.empty()) {
    metrics_ = MetricsServer::start(cfg_.metrics, err);
    if (!metrics_) {
      spdlog::error("{}", err);
      return false;
    }
    classifier_ = FileClassifier(cfg_.metrics.classes);
    spdlog::info("metrics on {} (port {}){}{}", cfg_.metrics.listen,
                 metrics_->ports().empty() ? 0 : metrics_->ports().front(),
                 cfg_.metrics.username.empty() ? "" : ", basic auth",
                 cfg_.metrics.tls_cert_file.empty() ? "" : ", TLS");
  }

  {
    // Checked with the config (and the command line): here only said, with how it is spent.
    jobs::Limits l = cfg_.limits;
    jobs::MemoryPlan plan;
    if (std::string why = jobs::apply_memory_bound(l, &plan); !why.empty()) {
      spdlog::error("{}", why);
      return false;
    }
    memory_bound_ = plan.bound;
    const std::string spent = fmt::format(
        "the daemon {}, rings {} (mapped twice) and the names they bring {}, writing a record "
        "of {} files {}, {} records {}, names {}",
        core::human_bytes(plan.daemon), core::human_bytes(plan.rings),
        core::human_bytes(plan.ring_names), l.max_files_per_job,
        core::human_bytes(plan.writing), l.max_records, core::human_bytes(plan.records),
        core::human_bytes(plan.names));
    if (plan.implied)
      spdlog::warn("the limits given need {} of memory, more than the default bound of {}: the "
                   "bound is {} ({}); set limits.memory to say so",
                   core::human_bytes(plan.bound), core::human_bytes(jobs::Limits{}.memory),
                   core::human_bytes(plan.bound), spent);
    else
      spdlog::info("memory bound {}: {}", core::human_bytes(plan.bound), spent);
    // Said, as a build without jemalloc (IOLENS_JEMALLOC=OFF) spends more CPU on each record
    // and keeps up with fewer new files a second (docs/daemon.md#memory-allocator).
    spdlog::info("memory allocator: {}", core::heap_allocator());
  }

  loader::Options lo;
  lo.btf_path = opts_.btf_path;
  lo.verbose = opts_.verbose;
  lo.select_jobs = true;
  // No small BTF for CO-RE (loader/core_btf.hpp): it saves ~40 ms of a load, which the daemon
  // does once per start, and a root service should not run bpftool or write /var/cache (its
  // systemd unit makes it read-only).
  lo.core_btf_cache.clear();
  lo.pin_dir = cfg_.pin_dir;
  lo.max_file_records = cfg_.limits.kernel_file_records;
  // One tier, preallocated whole or made on demand (the loader gives two tiers to a run only).
  // Unless the config says, a daemon that resumes pinned state keeps its kind of map (an
  // upgrade must not lose the live jobs), and before Linux 6.1 the map is made on demand:
  // there a preallocated map hands a deleted record's element to the next new one at once,
  // where the on-demand map waited for an RCU grace period (bpf/README.md "Two tiers").
  bool prealloc = cfg_.limits.kernel_file_records_preallocated;
  std::string prealloc_why = "limits.kernel_file_records_preallocated";
  if (!cfg_.limits.given.kernel_file_records_preallocated) {
    const auto kernel = loader::running_kernel();
    if (!kernel) {
      prealloc = false;
      prealloc_why = "the default when the kernel's version is unknown";
    } else if (!kernel->at_least(6, 1)) {
      prealloc = false;
      prealloc_why = "the default before Linux 6.1";
    } else {
      prealloc_why = "the default";
    }
    lo.file_records_follow_pins = true;
  }
  lo.fast_file_records = prealloc ? cfg_.limits.kernel_file_records : 0;
  lo.max_cgroup_exclusions = cfg_.limits.kernel_cgroup_exclusions;
  lo.max_block_records = cfg_.limits.kernel_block_records;
  lo.max_inflight = cfg_.limits.kernel_inflight;
  lo.ring_bytes = cfg_.limits.ring_bytes;
  lo.trace_ring_bytes = cfg_.limits.trace_ring_bytes;
  lo.disabled_programs = cfg_.disabled_programs;
  lo.timing = cfg_.timing == "off" ? IOLENS_TIMING_OFF : IOLENS_TIMING_EXACT;
  Status st;
  loader_ = loader::Loader::create(lo, st);
  if (!loader_) {
    spdlog::error("{}", st.message);
    return false;
  }
  drain_ = std::make_unique<Drain>(*loader_, loader_->timing() == IOLENS_TIMING_OFF);
  captures_ = std::make_unique<CaptureRunner>(*loader_, [this] {
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  });
  const auto& pins = loader_->pin_state();
  if (!pins.discarded.empty())
    spdlog::warn("discarded the kernel state a previous iolensd left in {}: {}", cfg_.pin_dir,
                 pins.discarded);
  if (pins.resumed) spdlog::info("continuing the kernel state left in {}", cfg_.pin_dir);
  spdlog::info("programs: the {} build ({})", loader_->program_build(),
               loader_->program_build_note());
  // A preallocated element: the key, the value, the hash map's own header (~48 bytes) and a
  // 16-byte bucket (what the kernel charges, its memlock: 90.5 MiB for 65,536 with ABI 15's
  // 1,352-byte counters).
  if (loader_->fast_file_records() != (prealloc ? cfg_.limits.kernel_file_records : 0)) {
    prealloc_why = "the kernel state resumed";
    if (loader_->fast_file_records() > 0 && !prealloc)
      spdlog::warn("kept the preallocated file records of the kernel state resumed, where this "
                   "kernel's default is records made on demand (a preallocated map reuses a "
                   "deleted record's element at once before Linux 6.1): set "
                   "limits.kernel_file_records_preallocated to choose");
  }
  if (loader_->fast_file_records() > 0)
    spdlog::info("kernel file records: {} preallocated (~{} of kernel memory; {})",
                 cfg_.limits.kernel_file_records,
                 core::human_bytes(uint64_t{cfg_.limits.kernel_file_records} *
                                   (sizeof(iolens_file_counters) + sizeof(iolens_file_key) + 48 + 16)),
                 prealloc_why);
  else
    spdlog::info("kernel file records: up to {}, made as files are opened ({})",
                 cfg_.limits.kernel_file_records, prealloc_why);

  start_mono_ = clock_ns(CLOCK_MONOTONIC);
  mono_to_wall_ = core::mono_to_wall_now();
  wall_steps_ = core::WallClockSteps(mono_to_wall_);
  if (!setup_runs()) return false;
  new_table();
  resume();
  // The creation count first: a record made during the walk then makes the fill look higher
  // than it is, never lower (files_untaken).
  const uint64_t created = loader_->file_records_created();
  const int64_t in_map = loader_->map_entries("files");
  drain_->set_baseline(created, static_cast<uint64_t>(in_map > 0 ? in_map : 0));

  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR2}) sigaddset(&mask, s);
  sigfd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  signal(SIGPIPE, SIG_IGN);
  return true;
}

void Daemon::new_table() {
  table_ = std::make_unique<JobTable>(*sel_, cfg_.limits, mono_to_wall_);
  if (metrics_) table_->set_file_classes(cfg_.metrics.classes);
  table_->set_cgroup_resolver([this](uint64_t id) { return resolve_cgroup(id); });
  if (loader_) table_->set_timing(loader_->timing() == IOLENS_TIMING_OFF ? "off" : "exact");
  // Detached (on-demand, no job yet): a process selected before the first attach says so.
  if (loader_ && !loader_->syscall_hooks()) table_->hooks_detached(0);
}

std::optional<std::string> Daemon::resolve_cgroup(uint64_t id) {
  std::optional<std::string> found;
  for (const auto& root : sel_->watch_roots()) {
    if (found) break;
    walk_cgroups(mount_, root, [&](uint64_t cid, const std::string& rel) {
      if (cid == id && !found) found = rel;
    });
  }
  return found;
}

void Daemon::apply(const std::vector<SelectionChange>& changes) {
  for (const auto& c : changes) {
    Status s = c.action ? loader_->select_cgroup(c.cgroup_id, c.action)
                        : loader_->unselect_cgroup(c.cgroup_id);
    if (!s && c.action) selection_failed(c, s);
    else if (!s) spdlog::warn("{}", s.message);
    else if (c.action) selection_stored(c);
    spdlog::debug("cgroup {} ({}): {}", c.path, c.cgroup_id,
                  c.action == IOLENS_CGROUP_TRACE ? "trace" : c.action ? "exclude" : "removed");
    scan_needed_ = true;  // tasks already in it must be (un)marked
  }
}

void Daemon::selection_failed(const SelectionChange& c, const Status& s) {
  if (!sel_pending_.try_emplace(c.cgroup_id, c).second) return;  // counted when it first failed
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  if (c.action == IOLENS_CGROUP_TRACE) {
    ++untraced_cgroups_;
    if (trace_gaps_.size() >= kMaxTraceGaps) trace_gaps_.pop_front();
    trace_gaps_.push_back({c.path, clock_ns(CLOCK_MONOTONIC) + mono_to_wall_, 0});
    spdlog::error("watched root {}: {}; jobs below it run untraced until it can be stored "
                  "(lost.untraced_cgroups)", c.path, s.message);
    return;
  }
  ++unexcluded_cgroups_;
  unexcluded_last_ = c.path + ": " + s.message;
  log_unexcluded(now);
}

void Daemon::log_unexcluded(int64_t now, bool force) {
  // A user who can create cgroups makes as many of these as he likes: one line at most every
  // 10 s, with the count since the last one.
  if (unexcluded_cgroups_ == unexcluded_logged_) return;
  if (!force && unexcluded_log_mono_ != 0 && now - unexcluded_log_mono_ < 10'000'000'000LL)
    return;
  spdlog::warn("{} excluded cgroup(s) without a kernel exclusion ({} in all, {} waiting), the "
               "last {}; their processes are traced until the daemon finds them in no job "
               "(lost.unexcluded_cgroups, unattributed_processes)",
               unexcluded_cgroups_ - unexcluded_logged_, unexcluded_cgroups_, sel_pending_.size(),
               unexcluded_last_);
  unexcluded_logged_ = unexcluded_cgroups_;
  unexcluded_log_mono_ = now;
}

void Daemon::selection_stored(const SelectionChange& c) {
  if (!sel_pending_.erase(c.cgroup_id)) return;
  if (c.action != IOLENS_CGROUP_TRACE) return;
  for (TraceGap& g : trace_gaps_)
    if (g.path == c.path && g.to_wall == 0) g.to_wall = clock_ns(CLOCK_MONOTONIC) + mono_to_wall_;
  spdlog::info("watched root {} is traced again", c.path);
}

bool Daemon::cgroup_root_present() {
  auto is_root = [this](const std::string& path) {
    struct statfs fs {};
    return statfs(path.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC &&
           inode_of(path) == mount_ino_;
  };
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  // Missing: looked for at most every 2 s (it reads the mount table), whoever asks.
  if (cgroup_root_missing_since_ != 0 && now - cgroup_root_looked_ < 2'000'000'000LL) return false;
  cgroup_root_looked_ = now;
  auto back = [&](const char* how) {
    if (cgroup_root_missing_since_ == 0) return;
    spdlog::info("the cgroup filesystem is {} {} after {:.1f} s: jobs are checked against it "
                 "again", how, mount_, static_cast<double>(now - cgroup_root_missing_since_) / 1e9);
    cgroup_root_missing_since_ = 0;
  };
  if (is_root(mount_)) {
    back("back at");
    return true;
  }
  // Mounted again elsewhere (cgroup_root auto), or the configured mount point again.
  if (const auto mountinfo = read_file(opts_.mountinfo_path)) {
    const jobs::RootResult root = jobs::resolve_cgroup_root(cfg_.cgroup_root, *mountinfo);
    if (root.error.empty() && root.path != mount_ && is_root(root.path)) {
      spdlog::warn("the cgroup filesystem moved from {} to {}: paths are taken there from now on",
                   mount_, root.path);
      mount_ = root.path;
      ++cgroup_root_moves_;
      back("mounted at");
      return true;
    }
  }
  if (cgroup_root_missing_since_ == 0) {
    cgroup_root_missing_since_ = now;
    ++cgroup_root_outages_;
    spdlog::warn("the cgroup filesystem is not mounted at {} any more: until it is back, no job "
                 "is closed because its cgroup is not found (the kernel's removal events still "
                 "close them) and selections wait; looked for every 2 s", mount_);
  }
  return false;
}

void Daemon::retry_selection() {
  log_unexcluded(clock_ns(CLOCK_MONOTONIC));  // the failures the last line did not tell
  if (!sel_retry_) return;
  sel_retry_ = false;
  bool excl_full = false;
  for (auto it = sel_pending_.begin(); it != sel_pending_.end();) {
    const SelectionChange c = it->second;
    ++it;  // c may leave sel_pending_ below
    // First: once the map is full, the rest wait without a stat(2) each (an rmdir loop by a
    // user must not cost a pass over every pending cgroup's path at every round).
    if (excl_full && c.action == IOLENS_CGROUP_EXCLUDE) continue;
    // Its removal event may have been dropped: a dead cgroup's entry would hold a slot forever.
    // Not found because the cgroup filesystem is not mounted: it waits.
    const std::string rel = c.path == "/" ? "" : c.path;
    if (inode_of(mount_ + rel) != c.cgroup_id) {
      const std::string mount = mount_;
      if (!cgroup_root_present()) {
        sel_retry_ = true;
        break;
      }
      if (mount_ == mount || inode_of(mount_ + rel) != c.cgroup_id) {  // not just moved
        sel_pending_.erase(c.cgroup_id);
        continue;
      }
    }
    if (Status s = loader_->select_cgroup(c.cgroup_id, c.action); !s) {
      excl_full = excl_full || (s.err == E2BIG && c.action == IOLENS_CGROUP_EXCLUDE);
      continue;
    }
    selection_stored(c);
    scan_needed_ = true;  // tasks already there must be (un)marked
  }
}

uint64_t Daemon::untraced_cgroups_of(const Job& job) const {
  if (job.cgroup_id == 0) return 0;  // a process rule's job: selected by comm, not by cgroup
  const std::string& cg = job.identity.job_cgroup;
  uint64_t n = 0;
  for (const TraceGap& g : trace_gaps_) {
    const bool covers = cg == g.path || g.path == "/" ||
                        (cg.size() > g.path.size() && cg.compare(0, g.path.size(), g.path) == 0 &&
                         cg[g.path.size()] == '/');
    const bool overlaps = (g.to_wall == 0 || g.to_wall > job.start_ns) &&
                          (!job.end_ns || g.from_wall < *job.end_ns);
    if (covers && overlaps) ++n;
  }
  return n;
}

void Daemon::initial_scan() {
  std::vector<SelectionChange> wanted;
  for (const auto& root : sel_->watch_roots()) {
    walk_cgroups(mount_, root, [&](uint64_t id, const std::string& rel) {
      auto changes = table_->on_cgroup(id, rel, false, static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
      apply(changes);
      wanted.insert(wanted.end(), changes.begin(), changes.end());
    });
  }
  // A resumed daemon's maps may hold entries this scan did not ask for: a cgroup removed while
  // no program watched, or a root of an older configuration. They would decide for tasks.
  std::set<uint64_t> keep;
  for (const auto& c : wanted) keep.insert(c.cgroup_id);
  const loader::Loader::SelectionEntries had = loader_->selection_entries();
  std::size_t pruned = 0;
  for (const auto* ids : {&had.traced, &had.excluded})
    for (uint64_t id : *ids)
      if (!keep.count(id) && loader_->unselect_cgroup(id)) ++pruned;
  if (pruned) spdlog::info("removed {} stale cgroup selection entries", pruned);
  for (const auto& comm : sel_->process_comms())
    if (Status s = loader_->select_comm(comm); !s) spdlog::warn("{}", s.message);
  scan_needed_ = true;
}

void Daemon::on_cgroup_event(const core::CgroupEvent& c) {
  if (c.created) {
    if (c.truncated) spdlog::warn("cgroup path longer than {} bytes cut: {}", c.path.size(), c.path);
    apply(table_->on_cgroup(c.id, c.path, true, c.ts_ns));
  } else {
    table_->on_cgroup_removed(c.id, c.ts_ns);
    drain_soon_ = true;
    // Its entry, if it had one, is gone (the kernel's rmdir program): room for a pending one.
    if (auto it = sel_pending_.find(c.id); it != sel_pending_.end()) {
      selection_stored(it->second);  // a root that is gone no longer leaves its jobs untraced
      sel_pending_.erase(c.id);
    }
    sel_retry_ = !sel_pending_.empty();
  }
}

void Daemon::on_mark_event(const core::MarkEvent& m) {
  if (m.reason == IOLENS_MARK_COMM) {
    const auto cmdline = read_file("/proc/" + std::to_string(m.proc.pid) + "/cmdline");
    std::optional<std::string> rule;
    if (cmdline) {
      rule = sel_->match_process(m.comm, *cmdline);
    } else {
      // Gone before its cmdline could be read (it ran for less than the daemon's reaction
      // time): judged by its comm alone, the part the kernel matched, and logged.
      for (const auto& r : sel_->rules())
        if (r.kind == jobs::RuleKind::Process && r.comm == m.comm) {
          rule = r.name;
          break;
        }
      spdlog::info("process {} ({}) exited before its cmdline was read: rule {} by comm alone",
                   m.proc.pid, m.comm, rule.value_or("?"));
    }
    if (rule) {
      table_->add_process_job(m, *rule);
    } else {
      loader_->untrace_process(static_cast<pid_t>(m.proc.pid));
    }
    return;
  }
  if (!table_->on_mark(m)) {
    loader_->untrace_process(static_cast<pid_t>(m.proc.pid));
    return;
  }
  // A whole thread group moved: only its leader was marked; the iterator marks the others.
  if (m.reason == IOLENS_MARK_ATTACH && m.threads > 1) scan_needed_ = true;
}

void Daemon::on_record(std::span<const uint8_t> bytes) {
  state_dirty_ = true;
  core::DecodeResult r = core::decode_event(bytes);
  if (!r.ok) {
    ++decode_errors_;
    return;
  }
  if (r.job) {
    if (const auto* c = std::get_if<core::CgroupEvent>(&*r.job)) on_cgroup_event(*c);
    if (const auto* m = std::get_if<core::MarkEvent>(&*r.job)) on_mark_event(*m);
    return;
  }
  table_->on_event(r.event);
}

void Daemon::note_new_jobs() {
  for (const auto& [id, job] : table_->jobs()) {
    if (job_loss_base_.count(id)) continue;
    job_loss_base_[id] = loader_->stats();
    job_decode_base_[id] = decode_errors_;
    // Optional enrichment: the pod's namespace and name, from the kubelet's log directory.
    auto& labels = job->identity.labels;
    if (job->identity.kind == "kubernetes" && labels.count("pod_uid") && !labels.count("pod")) {
      if (auto nn = jobs::pod_name_from_log_dir(opts_.pod_log_dir, labels["pod_uid"])) {
        labels["namespace"] = nn->first;
        labels["pod"] = nn->second;
      }
    }
    spdlog::info("job {} ({}) opened: cgroup {}", id, job->identity.kind, job->identity.job_cgroup);
  }
}

void Daemon::drain(bool may_save) {
  while (drain_->round_open()) drain_piece(0, may_save);
  drain_piece(0, may_save);
}

bool Daemon::mark_pressure() {
  // Without the marker, a crash before the next save would lose what the taken records gained
  // since the last one with nobody told: while it cannot be made (the state directory full or
  // read-only), no live record is taken (the map fills, and the kernel counts what it cannot
  // store), and each failure is counted.
  if (pressure_marked_) return true;
  // Created afresh, never through a link left at its name.
  const int fd = core::create_fresh(state_dir_fd_, kMarkerName, 0600);
  if (fd < 0) {
    if (marker_failures_++ % 60 == 0)
      spdlog::error("cannot create the pressure-drain marker {}/{}: {}; no live record is "
                    "taken until it can be ({} failures)",
                    cfg_.state_dir, kMarkerName, std::strerror(errno), marker_failures_);
    return false;
  }
  close(fd);
  pressure_marked_ = true;
  return true;
}

bool Daemon::drain_piece(int64_t deadline_ns, bool may_save) {
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  // Within half the piece's time (a ring full of names takes seconds), the walk has the rest:
  // what is left waits for the next piece; a record whose process's mark is among it stays in
  // the kernel until the ring is read past it (Drain::unknown).
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); },
                          deadline_ns == 0 ? 0 : t0 + std::max<int64_t>(deadline_ns - t0, 0) / 2);
  learn_uids();  // processes that arrived with these events, while they are alive
  // A pressure drain reads and deletes live records in one step: a crash before the next saved
  // state would lose what they gained since the last one. The marker, made before the first of
  // them is taken (mark_pressure), lets the next daemon say so (docs/daemon.md). Saves leave
  // live counts out while no live record can be taken (checkpoint()): once one may be, none is
  // taken until a save that holds them is on disk, gathered at the end of this round (its walk
  // has just refreshed them; a save before it would hold none after a restart), so that what a
  // crash can lose is what they gained since. Asked at each piece: a save gathered between two
  // pieces may leave them out.
  Drain::Rules rules;
  rules.now = t0;
  rules.deadline_ns = deadline_ns;
  rules.may_take_live = last_save_live_ || always_live_saves_;
  rules.may_take_now = [this] { return mark_pressure(); };
  const Drain::Piece piece = drain_->piece(*table_, rules);
  if (piece.live_save_due) live_save_due_ = true;
  if (piece.moved) state_dirty_ = true;
  const Drain::Round& round = drain_->round();
  if (!piece.round_ended) {
    // Names and records come faster than rounds end (a job making long-named files: 18 MB/s of
    // names held three times over until the round's fold; 30,000 new files a second, a round's
    // worth folded at its end in one piece of up to 0.9 s): fold as soon as a piece leaves
    // names or records at twice their bounds and records have left the kernel since the last
    // fold (before, there is nothing new to fold). Twice: a fold sorts every record of the job,
    // and a job of 200,000 short-named files folded at every piece took twice the CPU
    // (bench/README.md "Memory: one bound"). File records only: processes fold after a whole walk.
    if (round.walks.ok && drain_->removed_records() != removed_at_fold_ &&
        (table_->names_over_limits(2) || table_->records_over_limits(2)))
      fold_over_limits(true);
    drain_->account(clock_ns(CLOCK_MONOTONIC) - t0);
    return false;
  }
  // The round has ended: every record was read (unless a walk failed part way).
  last_drain_complete_ = round.walks.ok;
  if (!last_drain_complete_ && drain_failures_++ % 60 == 0)
    spdlog::error("drain: {} ({} drains incomplete)", round.walks.message, drain_failures_);
  // A walk that failed part way left records unread: no job is written or folded from it.
  if (last_drain_complete_) closable_.insert(round.closing.begin(), round.closing.end());
  drain_blocks(t0);
  drain_proc_losses(t0);
  if (last_drain_complete_) fold_over_limits();
  // Not forced by a pressure drain: saving a big job's state at every one of them would cost more
  // than the drains (a burst of new files); the marker stays until the next save. Forced only
  // once, when live records may be taken and the last save did not hold their counts.
  // After a failed save (a full or read-only disk), tried again at most once a second: under
  // pressure drains come every few ms.
  if (may_save && t0 - last_save_failed_mono_ >= kSaveRetryEvery) checkpoint(live_save_due_);
  drain_->account(clock_ns(CLOCK_MONOTONIC) - t0);
  last_drain_ = clock_ns(CLOCK_MONOTONIC);
  last_drain_us_ = static_cast<uint64_t>(round.work_ns) / 1000;
  last_round_pieces_ = round.pieces;
  last_round_longest_piece_ns_ = round.longest_piece_ns;
  ++drains_;
  drain_hist_.observe(static_cast<double>(round.work_ns) / 1e9);
  return true;
}

void Daemon::drain_blocks(int64_t now) {
  // The block layer's (process, device) records: a live process's are read again at each
  // drain; an exited one's are added to its job once and deleted from the kernel (a crash before
  // the next saved state loses those, docs/daemon.md). Records of processes in no job (after
  // the grace period of unknown ones) and of jobs already written are deleted.
  // Requests whose completion never reached block_rq_complete: counted once old enough that
  // no device still works on them (the block layer's own timeout is 30 s), so the in-flight
  // map does not keep them (lost.block_untimed).
  if (now - last_inflight_sweep_ >= kInflightSweepEvery) {
    // Each request swept is charged to its process's job, as the kernel charges the untimed
    // ones it finds (lost.block_untimed).
    std::vector<iolens_block_key> owners;
    loader_->sweep_block_inflight(kInflightStaleAfter, &owners);
    uint64_t no_job = 0;
    for (const iolens_block_key& k : owners)
      if (!table_->add_loss({k.tgid, k.pstart_ns}, IOLENS_STAT_BLOCK_UNTIMED_SWEPT)) ++no_job;
    count_no_job(no_job);
    if (!owners.empty()) state_dirty_ = true;  // lost_done is saved
    last_inflight_sweep_ = now;
  }
  std::vector<iolens_block_key> gone;
  for (const auto& r : loader_->read_blocks()) {
    const core::ProcKey p{r.key.tgid, r.key.pstart_ns};
    if (!table_->attributed(p)) {
      if (drain_->unknown(p, now) == Drain::Disposition::RemoveLive)
        gone.push_back(r.key);
      continue;
    }
    const bool final = table_->exited(p);
    if (!table_->on_block(r.key, r.counters, final) || final) gone.push_back(r.key);
  }
  if (gone.empty()) return;
  loader_->delete_blocks(gone);
  state_dirty_ = true;
}

void Daemon::drain_proc_losses(int64_t now) {
  // Kept as block records are: a live process's entry is read again at each drain; an exited
  // one's is taken out of the kernel (read and deleted in one step: nothing charged meanwhile
  // is lost) and added to its job once. Those of processes in no job (after the grace period of
  // unknown ones) are counted as no job's (lost.unattributed).
  std::vector<iolens_proc_key> take;
  const auto entries = loader_->read_proc_losses();
  proc_lost_entries_ = entries.size();
  for (const auto& [key, v] : entries) {
    const core::ProcKey p{key.tgid, key.pstart_ns};
    if (!table_->attributed(p)) {
      if (drain_->unknown(p, now) == Drain::Disposition::RemoveLive)
        take.push_back(key);
    } else if (table_->exited(p) || !table_->on_proc_lost(key, v, false)) {
      take.push_back(key);  // (the second: a job not in the table; none expected)
    }
  }
  if (take.empty()) return;
  uint64_t no_job = 0;
  for (const auto& [key, v] : loader_->take_proc_losses(take))
    if (!table_->on_proc_lost(key, v, true)) no_job += losses_in(v);
  count_no_job(no_job);
  state_dirty_ = true;
}

void Daemon::count_no_job(uint64_t n) {
  if (n == 0) return;
  if (Status s = loader_->add_user_stat(IOLENS_STAT_LOSSES_NO_JOB, n); !s)
    spdlog::warn("could not count {} losses of processes in no job: {}", n, s.message);
}

void Daemon::release_losses(const Job& job) {
  // Its live processes' entries hold what its `lost` already counts: they are taken out, and
  // what was charged since the last drain is no job's. A process that goes on (a daemon a run
  // left behind) makes a new entry, no job's too.
  if (job.lost_live.empty()) return;
  std::vector<iolens_proc_key> keys;
  for (const auto& [p, n] : job.lost_live) keys.push_back({p.pid, 0, p.start_ns});
  uint64_t since = 0;
  for (const auto& [key, v] : loader_->take_proc_losses(keys)) {
    const auto& had = job.lost_live.at(core::ProcKey{key.tgid, key.pstart_ns});
    iolens_proc_lost d{};
    for (std::size_t i = 0; i < had.size(); ++i) d.n[i] = v.n[i] > had[i] ? v.n[i] - had[i] : 0;
    since += losses_in(d);
  }
  count_no_job(since);
}

bool Daemon::checkpoint(bool force) {
  collect_saved();
  if (!state_dirty_ && !live_save_due_ && drain_->pending_files().empty() &&
      drain_->pending_others().empty())
    return true;
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  // Saving costs (a recorder holds ~700 bytes a record): at most every kCheckpointEvery,
  // unless the ring has run far enough that a replay could no longer reach the saved point.
  const uint64_t ring_run = loader_->ring_consumer_pos() - last_checkpoint_pos_;
  if (!force && t0 - last_checkpoint_mono_ < kCheckpointEvery &&
      ring_run < loader_->ring_size() / 2)
    return true;
  if (save_under_way_) return false;  // one at a time: what changed since waits for the next
  nlohmann::json st;
  st["format"] = 1;
  st["abi"] = IOLENS_ABI_VERSION;
  st["pins_created_wall_ns"] = loader_->pin_state().created_wall_ns;
  st["ring_pos"] = loader_->ring_consumer_pos();
  // By the offset the table is saved with (a step since the loop's last look waits for it).
  st["saved_wall_ns"] = clock_ns(CLOCK_MONOTONIC) + table_->clock().mono_to_wall_ns;
  st["kernel_lost"] = kernel_losses(loader_->stats());
  // Jobs whose record is being written are saved too, as closing: killed before the record is
  // written, the next daemon writes it; saved again once it is, they are not.
  std::vector<const Job*> handed_over;
  for (const auto& [serial, w] : writing_) handed_over.push_back(w.job.get());
  // The live records' counts are in the kernel's pinned map, which a restart reads again: they
  // are saved only while a drain may take live records out of it (the map over half full, or
  // rounds draining it since it was). A 50,000-record live job's save fell from 0.5-1.3 s of
  // the loop to ~60 ms (bench/README.md "The daemon's answers while it writes a record").
  const bool with_live =
      live_save_due_ || always_live_saves_ || drain_->draining() ||
      drain_->files_in_map(loader_->file_records_created()) * 2 > loader_->max_file_records();
  st["table"] = table_->save(handed_over, with_live, &spare_blobs_);
  spare_blobs_.clear();  // those of jobs gone since go
  st["pending_files"] = entries_binary(drain_->pending_files());
  st["pending_others"] = entries_binary(drain_->pending_others());
  static_assert(sizeof(loader::Loader::NameId) == 16, "docs/state-format.md: names_to_clear");
  st["names_to_clear"] = entries_binary(names_to_clear_);
  nlohmann::json bases = nlohmann::json::object();
  for (const auto& [id, b] : job_loss_base_) bases[id] = b;
  st["job_loss_base"] = bases;
  // What changes from here on is for the next save; this one's outcome is taken by
  // collect_saved(). A save without the live counts on its way: no live record is taken from
  // now (the one on disk may hold them, the next will not).
  save_under_way_ = SaveUnderWay{with_live,
                                 drain_->pending_files().size(),
                                 drain_->pending_others().size(),
                                 drain_->live_taken(),
                                 st["ring_pos"].get<uint64_t>(), t0, 0, record_serial_};
  if (!with_live) last_save_live_ = false;
  state_dirty_ = false;
  saver_->submit(std::move(st));
  save_under_way_->gather_ns = clock_ns(CLOCK_MONOTONIC) - t0;
  return true;
}

void Daemon::collect_saved() {
  if (!save_under_way_) return;
  std::optional<StateSaved> r = saver_->take();
  if (!r) return;  // still being written
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  spare_blobs_ = std::move(r->buffers);
  const SaveUnderWay s = *save_under_way_;
  save_under_way_.reset();
  if (!r->ok) {
    // Without a saved state, deleting the records would risk them: they stay in the kernel,
    // and what the save held is saved by the next (after a failure, at most once a second).
    state_dirty_ = true;
    last_save_failed_mono_ = t0;
    if (checkpoint_failures_++ % 60 == 0)
      spdlog::error("cannot save state to {}: {}", state_path(), r->error);
    // Records are not kept waiting on a state that cannot be saved: written now, a kill before
    // the next save may write one of them again (as before saves came first).
    release_held(true);
    return;
  }
  ++checkpoints_;
  saved_serial_ = std::max(saved_serial_, s.record_serial);
  release_held(false);
  // The next save is timed from this one's gathering, and the ring's run from what it holds:
  // only once it is on disk (after a failure, the next drain tries again).
  last_checkpoint_mono_ = s.gathered_mono;
  last_checkpoint_pos_ = s.ring_pos;
  if (s.with_live) {
    last_save_live_ = true;
    live_save_due_ = false;
  }
  // Every live record taken before the gathering is in the saved state: the marker's window
  // is closed, unless records were taken since (then the next save closes it).
  if (pressure_marked_ && drain_->live_taken() == s.live_taken) {
    unlinkat(state_dir_fd_, kMarkerName, 0);
    pressure_marked_ = false;
  }
  // The final records this save holds leave the kernel now; those reported final since wait
  // for the next save.
  drain_->released(s.pending_files, s.pending_others);
  last_checkpoint_us_ = static_cast<uint64_t>(r->finished_ns - s.gathered_mono) / 1000;
  last_save_gather_us_ = static_cast<uint64_t>(s.gather_ns) / 1000;
  last_save_collect_us_ = static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC) - t0) / 1000;
  last_save_loop_us_ = last_save_gather_us_ + last_save_collect_us_;
}

void Daemon::release_held(bool all) {
  while (!held_.empty() && (all || held_.front().serial <= saved_serial_)) {
    records_->submit(std::move(held_.front()));
    held_.pop_front();
  }
}

void Daemon::finish_save() {
  if (!save_under_way_) return;
  saver_->wait();
  collect_saved();
}

void Daemon::resume() {
  const auto& pins = loader_->pin_state();
  restart_["resumed"] = pins.resumed;
  restart_["at_ns"] = clock_ns(CLOCK_REALTIME);
  if (!pins.discarded.empty()) restart_["discarded"] = pins.discarded;
  if (!pins.resumed) {
    struct stat saved {};
    if (pins.discarded.empty() && fstatat(state_dir_fd_, kStateName, &saved, 0) == 0) {
      // An earlier daemon's state, but no pinned kernel state to continue: the pins were
      // removed, or the node restarted (bpffs does not survive it). What that daemon had not
      // written in records yet is gone: said, not silent.
      restart_["state"] = "unusable: " + state_path() + " of an earlier iolensd, but no pinned "
                          "kernel state in " + cfg_.pin_dir + " to continue (removed, or the "
                          "node restarted): its jobs' counts not yet in records are lost";
      spdlog::warn("{}", restart_["state"].get<std::string>());
    }
    unlinkat(state_dir_fd_, kStateName, 0);  // it described kernel state that no longer exists
    unlinkat(state_dir_fd_, kMarkerName, 0);
    return;
  }
  // The names the previous daemon had are not in its state (its node-wide cache of them can be
  // megabytes), whatever the state: the kernel sends each file's name again with its next new
  // record. Without this, a file named before a restart stayed "<unknown dev:ino>" in every
  // later job's record (what the replayed ring held aside).
  const std::size_t renamed = loader_->forget_all_names();
  restart_["names_to_send_again"] = renamed;
  nlohmann::json lost = nlohmann::json::object();
  const auto text = core::read_file_at(state_dir_fd_, kStateName);
  nlohmann::json st;
  std::string error;
  // decode_state checks every field this function reads, and JobTable::load the table's; the
  // catch is defence in depth: nothing in a file may keep the daemon from starting.
  try {
    if (!text) {
      restart_["state"] = "none: the previous daemon saved no state";
    } else if (!decode_state(*text, st, error)) {
      restart_["state"] = "corrupt: " + state_path() + " is not a usable saved state (" + error +
                          ")" + move_state_aside(error);
    } else if (st["pins_created_wall_ns"].get<uint64_t>() != pins.created_wall_ns) {
      restart_["state"] = "stale: saved for other kernel maps";
    } else if (!table_->load(st.at("table"), error)) {
      restart_["state"] = "corrupt: " + state_path() + " holds an unreadable job table (" + error +
                          ")" + move_state_aside(error);
    } else {
      restart_["state"] = "loaded";
      restart_["saved_wall_ns"] = st["saved_wall_ns"].get<int64_t>();
      // The syscall hooks since the save (before the ring's records are replayed against the
      // times they were detached): attached now, a window the save left open ends now (when
      // the dead daemon attached them is unknown: the later end); detached now while the save
      // had them attached, they count as detached from the save on.
      // By the saving daemon's clock: the table holds its offset, and its jobs' wall times by
      // it. A step of the wall clock since (while no daemon ran) moves them as a live daemon
      // would have, counted as seen at the save.
      const int64_t saved_mono =
          st["saved_wall_ns"].get<int64_t>() - table_->clock().mono_to_wall_ns;
      wall_steps_ = core::WallClockSteps(table_->clock().mono_to_wall_ns);
      if (const auto step = wall_steps_.observe(mono_to_wall_, std::max<int64_t>(saved_mono, 0))) {
        table_->rebase_wall(*step);
        restart_["wall_clock_stepped_ns"] = *step;
        spdlog::warn("the wall clock was stepped by {:+.3f} s since the saved state: the resumed "
                     "jobs' wall times are moved with it", static_cast<double>(*step) / 1e9);
      }
      if (loader_->syscall_hooks()) {
        // Attached from the dead daemon's link pins: bpffs stamped the pin when it attached
        // them, so a window the save left open ends then, not now (a job started after that
        // attach is not flagged). Kept within [the save, now] (a clock step).
        const int64_t now_mono = clock_ns(CLOCK_MONOTONIC);
        int64_t at = now_mono;
        if (const auto wall = loader_->syscall_hooks_pinned_wall_ns())
          at = std::clamp(*wall - mono_to_wall_, std::clamp<int64_t>(saved_mono, 0, now_mono),
                          now_mono);
        table_->hooks_attached(static_cast<uint64_t>(at));
      } else
        table_->hooks_detached(static_cast<uint64_t>(std::max<int64_t>(saved_mono, 0)));
      for (auto b = st["job_loss_base"].begin(); b != st["job_loss_base"].end(); ++b) {
        loader::KernelStats base{};  // a shorter array (an older version's) leaves zeros
        for (size_t i = 0; i < b.value().size() && i < base.size(); ++i)
          base[i] = b.value()[i].get<uint64_t>();
        job_loss_base_[b.key()] = base;
      }
      // Records the previous daemon held as final but had not deleted yet.
      loader_->delete_files(binary_entries<iolens_file_key>(st.at("pending_files")));
      loader_->delete_others(binary_entries<iolens_file_key>(st.at("pending_others")));
      // Names the previous daemon folded and had not had the kernel forget yet.
      if (st.contains("names_to_clear"))
        loader_->forget_names(binary_entries<loader::Loader::NameId>(st["names_to_clear"]));
      // Replay what the previous daemon consumed after it saved.
      const uint64_t pos = st["ring_pos"].get<uint64_t>();
      const uint64_t replay = loader_->ring_consumer_pos() - pos;
      if (Status s = loader_->rewind_ring(pos); s) {
        restart_["replayed_bytes"] = replay;
      } else {
        restart_["replay"] = s.message;
        lost["events_not_replayed"] = replay;
      }
      // Kernel drops while no daemon read the ring (it filled up): counted by the kernel.
      const nlohmann::json now = kernel_losses(loader_->stats());
      const nlohmann::json& before = st["kernel_lost"];
      for (auto v = now.begin(); v != now.end(); ++v) {
        const uint64_t was = before.value(v.key(), uint64_t{0});
        const uint64_t d = v.value().get<uint64_t>() - was;
        if (d) lost[v.key()] = d;
      }
    }
  } catch (const std::exception& e) {
    // Whatever was taken from the file is dropped: the jobs continue as after a corrupt state.
    new_table();
    job_loss_base_.clear();
    job_decode_base_.clear();
    lost = nlohmann::json::object();
    restart_.erase("saved_wall_ns");
    restart_.erase("replayed_bytes");
    restart_["state"] = "corrupt: " + state_path() + " could not be used (" + e.what() + ")" +
                        move_state_aside(e.what());
  }
  struct stat marker {};
  if (fstatat(state_dir_fd_, kMarkerName, &marker, AT_SYMLINK_NOFOLLOW) == 0) {
    lost["interrupted_pressure_drain"] = 1;
    always_live_saves_ = true;
    restart_["pressure_drain"] =
        "the previous daemon died while moving idle records out of the full kernel map; the "
        "counts those records gained since the state saved before it are lost";
    unlinkat(state_dir_fd_, kMarkerName, 0);
  }
  restart_["lost"] = lost;
  spdlog::info("resumed: state {}, {}", restart_.value("state", "?"), restart_.dump());
}

void Daemon::relearn_processes() {
  // The ring first: the scan below writes a mark per traced process into it, and a ring that
  // filled while no daemon read it would drop them (counted, but each dropped mark leaves a
  // process the saved state does not know, and its records, out of its job). What it holds is
  // read in order, as the loop would, with the job table the initial scan completed.
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  // Processes the saved state does not know (it was older, or absent, or the marks the dead
  // daemon read after its save could not be replayed) are relearned here; the hooks first if a
  // job is live, so that they count from their mark.
  hooks_policy();
  if (Status s = loader_->scan_tasks(true); !s) spdlog::warn("{}", s.message);
  // The scan's marks now (the iterator wrote them as it ran): a job they reopen (a process
  // rule's, marked at the scan's time) is then among the jobs found at start, whose records say
  // what the restart could not recover.
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
}

std::string Daemon::move_state_aside(const std::string& why) {
  // <unix seconds>.<9-digit nanoseconds>, never over another: two daemons that start within a
  // second (a crash loop) must both leave their file for inspection.
  std::string name;
  int moved = -1;
  for (int attempt = 0; attempt < 8 && moved != 0; ++attempt) {
    const int64_t now = clock_ns(CLOCK_REALTIME);
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%09lld", static_cast<long long>(now % 1000000000));
    name = kCorruptPrefix + std::to_string(now / 1000000000) + frac;
    moved = renameat2(state_dir_fd_, kStateName, state_dir_fd_, name.c_str(), RENAME_NOREPLACE);
    if (moved != 0 && (errno == EINVAL || errno == ENOSYS) &&
        linkat(state_dir_fd_, kStateName, state_dir_fd_, name.c_str(), 0) == 0)
      moved = unlinkat(state_dir_fd_, kStateName, 0);
    if (moved != 0 && errno != EEXIST) break;
  }
  if (moved != 0) {
    const int e = errno;
    spdlog::error("state file {} is unusable ({}) and cannot be moved aside: {}; starting "
                  "without it", state_path(), why, std::strerror(e));
    unlinkat(state_dir_fd_, kStateName, 0);
    return "";
  }
  spdlog::error("state file {} is unusable ({}): moved to {}/{} for inspection; starting without "
                "it (jobs it held are marked lost.restart_state_unusable)",
                state_path(), why, cfg_.state_dir, name);
  // The newest few are kept: a state that goes bad at every start must not fill the disk.
  std::vector<std::string> kept;
  const int list_fd = fcntl(state_dir_fd_, F_DUPFD_CLOEXEC, 0);
  if (DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr) {
    while (const dirent* e = readdir(d))
      if (std::strncmp(e->d_name, kCorruptPrefix, std::strlen(kCorruptPrefix)) == 0)
        kept.emplace_back(e->d_name);
    closedir(d);
  } else if (list_fd >= 0) {
    close(list_fd);
  }
  // Same-length decimal seconds (and fixed-width nanoseconds) sort as times; a shorter (older)
  // name sorts by length first, as does one of an older version (seconds only).
  std::sort(kept.begin(), kept.end(), [](const std::string& x, const std::string& y) {
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  for (std::size_t i = 0; i + kCorruptKept < kept.size(); ++i)
    unlinkat(state_dir_fd_, kept[i].c_str(), 0);
  return "; moved to " + name;
}

/// Cgroup events can be dropped (the ring full): what they would have said is checked against
/// the cgroup filesystem. A job whose cgroup is gone is closed; after a drop, the watched roots
/// are walked again for cgroups nobody named.
void Daemon::reconcile() {
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  const uint64_t dropped = loader_->stat(IOLENS_STAT_JOB_EVENTS_LOST);
  if (now - last_reconcile_ < 2'000'000'000LL && dropped == reconciled_job_events_lost_) return;
  last_reconcile_ = now;
  // While the cgroup filesystem is not mounted, every cgroup looks gone: nothing is closed for
  // that, and the walk below waits for it. Looked at first, every time (so that an outage or
  // a move is seen with no job live too, and the paths below are under the mount as it is).
  if (!cgroup_root_present()) return;
  auto not_at_path = [this](const std::pair<uint64_t, std::string>& g) {
    const Job* job = table_->find(g.second);
    return job && job->state == JobState::Live && job->cgroup_id == g.first &&
           inode_of(mount_ + job->identity.job_cgroup) != g.first;
  };
  std::vector<std::pair<uint64_t, std::string>> gone;
  for (const auto& [id, job] : table_->jobs())
    if (job->cgroup_id != 0 && not_at_path({job->cgroup_id, id})) gone.emplace_back(job->cgroup_id, id);
  if (!gone.empty()) {
    // Its removal event may only be unread: the kernel sends it before rmdir returns, but the
    // ring is read in pieces behind a burst of names (a loader job's), and the marks of the
    // job's last processes may be in it too. Closed now, the job would end early and those
    // processes' records go to no job (seen in e2e_daemon_soak). Read the ring (for at most a
    // drain piece: a full ring waits for the next look): what is still live after that, and
    // still not at its path with the filesystem still there (not unmounted and mounted again
    // between the looks), lost its event.
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); },
                            now + static_cast<int64_t>(cfg_.drain_piece_ms) * 1000000LL);
    if (loader_->events_cut_short()) return;
    const std::string mount = mount_;
    std::erase_if(gone, [&](const auto& g) { return !not_at_path(g); });
    if (!cgroup_root_present() || mount_ != mount) return;
  }
  for (const auto& [cgid, id] : gone) {
    spdlog::warn("job {}: its cgroup is gone but no removal event arrived ({} job events "
                 "dropped): closing it now", id, dropped);
    table_->on_cgroup_removed(cgid, static_cast<uint64_t>(now));
    if (Job* job = table_->find(id)) job->end_estimated = true;
    ++jobs_closed_by_reconcile_;
    drain_soon_ = true;
  }
  if (dropped != reconciled_job_events_lost_) {
    reconciled_job_events_lost_ = dropped;
    for (const auto& root : sel_->watch_roots())
      walk_cgroups(mount_, root, [&](uint64_t id, const std::string& rel) {
        if (table_->cgroup_path(id).empty())
          apply(table_->on_cgroup(id, rel, false, static_cast<uint64_t>(now)));
      });
  }
}

/// A job that was live when this daemon took over from a dead one says how that went: what
/// the restart could not recover is counted in its `lost` (docs/daemon.md#restart-without-loss).
void Daemon::annotate_restart(const Job& job, nlohmann::json& record) {
  if (!restart_.value("resumed", false) ||
      (job.start_ns >= start_mono_ + mono_to_wall_ && !found_at_start_.count(job.identity.id)))
    return;
  record["restart"] = restart_;
  if (restart_.value("state", "") != "loaded") record["lost"]["restart_state_unusable"] = 1;
  if (auto it = restart_.find("lost"); it != restart_.end())
    for (auto l = it->begin(); l != it->end(); ++l) record["lost"]["restart_" + l.key()] = l.value();
}

void Daemon::annotate_clock(const Job& job, nlohmann::json& record) const {
  // The job's window in monotonic time (its wall times are by the clock now in force).
  const int64_t from = job.start_ns == 0 ? 0 : job.start_ns - mono_to_wall_;
  const std::optional<int64_t> to =
      job.end_ns ? std::optional<int64_t>(*job.end_ns - mono_to_wall_) : std::nullopt;
  const auto steps = wall_steps_.between(from, to);
  if (steps.empty()) return;
  nlohmann::json& out = record["wall_clock_steps"] = nlohmann::json::array();
  for (const auto& st : steps)
    out.push_back({{"seen_ns", st.at_mono + mono_to_wall_}, {"step_ns", st.delta_ns}});
}

void Daemon::follow_wall_clock() {
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  const auto step = wall_steps_.observe(core::mono_to_wall_now(), now);
  if (!step) return;
  rebase_wall(*step);
  spdlog::warn("the wall clock was stepped by {:+.3f} s: wall times in records and metrics are "
               "by the new clock from now on, for jobs already live too ({} step(s) since start)",
               static_cast<double>(*step) / 1e9, wall_steps_.steps());
}

void Daemon::rebase_wall(int64_t delta_ns) {
  mono_to_wall_ += delta_ns;
  table_->rebase_wall(delta_ns);
  for (TraceGap& g : trace_gaps_) {
    g.from_wall += delta_ns;
    if (g.to_wall != 0) g.to_wall += delta_ns;
  }
  const double d = static_cast<double>(delta_ns) / 1e9;
  for (Retained& r : retained_) {
    r.metrics.start_s += d;
    if (r.metrics.end_s) *r.metrics.end_s += d;
  }
  // Closed jobs held for a save are still the loop's (not the writer's yet): their record is
  // made when they are handed over, by the clock as it is then. Those with the writer already
  // are as they were when handed over.
  for (RecordJob& r : held_) {
    Job& job = const_cast<Job&>(*r.job);  // only the loop holds it until submitted
    if (job.start_ns != 0) job.start_ns += delta_ns;
    if (job.end_ns) *job.end_ns += delta_ns;
    r.basis.mono_to_wall_ns += delta_ns;
    if (auto w = writing_.find(r.serial); w != writing_.end()) {
      w->second.line["start_ns"] = job.start_ns;
      if (job.end_ns) w->second.line["end_ns"] = *job.end_ns;
    }
  }
  for (const char* key : {"at_ns", "saved_wall_ns"})
    if (auto it = restart_.find(key); it != restart_.end() && it->is_number_integer())
      *it = it->get<int64_t>() + delta_ns;
  // The page of an ended job's series says when it ended: published anew at once.
  last_publish_mono_ = -1;
}

void Daemon::annotate_hooks(const Job& job, nlohmann::json& record) const {
  record["lost"]["before_hooks"] = job.unhooked_since ? 1 : 0;
  if (!job.unhooked_since) return;
  auto wall = [&](uint64_t mono) { return static_cast<int64_t>(mono) + mono_to_wall_; };
  record["syscall_hooks"] = {
      {"first_selected_ns", wall(job.unhooked_since)},
      {"attached_ns", job.unhooked_until ? nlohmann::json(wall(job.unhooked_until))
                                         : nlohmann::json(nullptr)}};
}

void Daemon::job_losses(const std::string& id, nlohmann::json& out) {
  // The node's counts while the job was live: a non-zero one may concern another job.
  const loader::KernelStats now = loader_->stats();
  // A job the events of this drain opened, paged before note_new_jobs() saw it: from now (not
  // stored: note_new_jobs() sets its bases and labels).
  const auto b = job_loss_base_.find(id);
  const loader::KernelStats& base = b == job_loss_base_.end() ? now : b->second;
  loader::KernelStats delta{};
  for (size_t i = 0; i < now.size(); ++i) delta[i] = now[i] > base[i] ? now[i] - base[i] : 0;
  // (No decode base: a job this daemon loaded from a saved state, live since before it started.)
  const auto d = job_decode_base_.find(id);
  const uint64_t decode_errors =
      b == job_loss_base_.end() ? 0
                                : decode_errors_ - (d == job_decode_base_.end() ? 0 : d->second);
  nlohmann::json node = kernel_losses(delta);
  node["unattributed"] = unattributed_losses(delta);
  node["decode_errors"] = decode_errors;
  // The job's own: what the kernel charged its processes with (the last drain's values).
  nlohmann::json lost = nlohmann::json::object();
  const Job none;  // (every caller has its job; every cause is present all the same)
  const Job* job = table_->find(id);
  for (const auto& [cause, n] : own_losses_by_cause(job ? *job : none)) lost[cause] = n;
  // What no process can be charged with, while it was live: node-wide, may concern this job.
  lost["program_misses"] = delta[loader::kProgramMisses];
  lost["unattributed"] = node["unattributed"];
  lost["decode_errors"] = decode_errors;
  out["lost"] = std::move(lost);
  out["node_lost"] = std::move(node);
}

void Daemon::write_closed() {
  const std::set<std::pair<std::string, uint64_t>> ready = std::move(closable_);
  closable_.clear();
  for (const auto& [id, cgroup_id] : ready) {
    Job* job = table_->find(id);
    // Gone (written, or handed to a run's client), its id live again, or its cgroup made again
    // since (the next round that begins after that decides).
    if (!job || job->state != JobState::Closing || job->cgroup_id != cgroup_id) continue;
    // Its capture ends here, while its recorder can still name the files.
    captures_->job_ending(*table_, id);
    job->state = JobState::Closed;
    // Its series stay, final, for the grace period: the last values get scraped.
    if (metrics_) retain_metrics(*job);
    nlohmann::json overrides;
    job_losses(id, overrides);
    overrides["lost"]["untraced_cgroups"] = untraced_cgroups_of(*job);
    annotate_restart(*job, overrides);
    annotate_hooks(*job, overrides);
    annotate_clock(*job, overrides);
    submit_record(id, std::move(overrides), false);
    found_at_start_.erase(id);  // a later job of that id starts after this daemon
    job_loss_base_.erase(id);
    job_decode_base_.erase(id);
  }
}

void Daemon::submit_record(const std::string& id, nlohmann::json overrides, bool interrupted) {
  Job* job = table_->find(id);
  if (!job) return;
  // Its line in `iolens jobs` until written: what needs no snapshot (a big job's takes long).
  nlohmann::json line = job_head(*job);
  line["state"] = interrupted ? "interrupted" : "closed";
  line["writing"] = true;
  RecordJob r;
  r.basis = table_->record_basis();
  r.basis.alignment.reset();  // the writer's thread reads the mounts now (record_writer.cpp)
  r.overrides = std::move(overrides);
  r.interrupted = interrupted;
  r.darshan = cfg_.darshan_logs;
  r.node = node_;
  r.version = IOLENS_VERSION;
  drop_pages(id);
  r.job = table_->take(id);
  release_losses(*r.job);
  r.serial = ++record_serial_;
  writing_[r.serial] = Writing{std::move(line), r.job};
  // Not held: at a stop, which removes the state (nothing to wait for); and while its id is
  // live again or another job of its id waits to be written, as a save keeps one job an id
  // (JobTable::load), so no save would hold it.
  bool shadowed = table_->find(id) != nullptr;
  for (const auto& [serial, w] : writing_)
    shadowed = shadowed || (serial != r.serial && w.job && w.job->identity.id == id);
  if (interrupted || shadowed) {
    records_->submit(std::move(r));
    return;
  }
  held_.push_back(std::move(r));
  state_dirty_ = true;
}

void Daemon::collect_written(bool save) {
  for (RecordDone& d : records_->take_done()) {
    if (!d.darshan) spdlog::error("job {}: Darshan log: {}", d.id, d.darshan.message);
    if (!d.record) spdlog::error("job {}: {}", d.id, d.record.message);
    if (d.already)
      spdlog::info("job {}: written before the restart already: {}", d.id, d.path);
    else if (!d.path.empty())
      spdlog::info("job {} {}: {} ({:.1f} s)", d.id,
                   d.summary.value("state", "") == "interrupted" ? "written at stop (still running)"
                                                                 : "closed",
                   d.path, static_cast<double>(d.took_ns) / 1e9);
    auto w = writing_.find(d.serial);
    if (w != writing_.end()) {
      if (d.summary.is_null()) {  // the record could not even be made: its line stays
        d.summary = std::move(w->second.line);
        d.summary.erase("writing");
      }
      records_->dispose(std::move(w->second.job));
      writing_.erase(w);
    }
    closed_.push_back({d.id, Closed{std::move(d.summary), d.path}});
    while (closed_.size() > 256) closed_.pop_front();
    save_written_ = true;
  }
  // Saved once for all the jobs written (a save costs as much as the state is big), so that a
  // restart does not write them a second time. Not inside a request: its next pass does it.
  if (save && save_written_) {
    state_dirty_ = true;
    if (checkpoint(true)) save_written_ = false;  // else a save is under way: the next pass
  }
}

void Daemon::learn_uids() {
  if (!cfg_.darshan_logs) return;
  for (const auto& [id, job] : table_->jobs()) {
    if (job->uid >= 0 || job->live.empty()) continue;
    // The earliest started first: rank 0 when it is still alive.
    std::vector<core::ProcKey> live(job->live.begin(), job->live.end());
    std::sort(live.begin(), live.end(), [](const core::ProcKey& a, const core::ProcKey& b) {
      return std::tie(a.start_ns, a.pid) < std::tie(b.start_ns, b.pid);
    });
    for (const core::ProcKey& p : live) {
      const auto status = read_file("/proc/" + std::to_string(p.pid) + "/status");
      if (!status) continue;  // exited, its exit not read yet
      if (const auto uid = control::real_uid_from_proc_status(*status)) {
        job->uid = *uid;
        state_dirty_ = true;
        break;
      }
    }
  }
}

core::DaemonHealth Daemon::health() {
  core::DaemonHealth h;
  h.version = IOLENS_VERSION;
  h.abi_version = IOLENS_ABI_VERSION;
  const loader::KernelStats st = loader_->stats();
  const nlohmann::json kernel = kernel_losses(st);
  for (auto it = kernel.begin(); it != kernel.end(); ++it)
    if (it.key() != "paths_truncated") h.lost[it.key()] = it.value().get<uint64_t>();
  const TableStats& ts = table_->stats();
  h.lost["decode_errors"] = decode_errors_;
  h.lost["unattributed"] = unattributed_losses(st);
  h.lost["unattributed_records"] = ts.unattributed_records;
  h.lost["untraced_cgroups"] = untraced_cgroups_;
  h.lost["unexcluded_cgroups"] = unexcluded_cgroups_;
  // Captures' losses (node-wide, not a job's counters): records the trace ring had no room for,
  // and children trace mode PIDS could not follow.
  h.lost["trace_records"] = st[IOLENS_STAT_TRACE_LOST];
  h.lost["trace_pids"] = st[IOLENS_STAT_TRACE_PIDS_LOST];
  h.paths_truncated = st[IOLENS_STAT_PATHS_TRUNCATED];
  // The files map's fill from the kernel's own creation count; the selection maps are small
  // enough to count.
  h.maps.push_back({"files", static_cast<int64_t>(drain_->files_in_map(st[IOLENS_STAT_FILE_RECORDS_CREATED])),
                    loader_->max_file_records()});
  const loader::Loader::SelectionEntries sel = loader_->selection_entries();
  h.maps.push_back({"cgroup_sel", static_cast<int64_t>(sel.traced.size()), IOLENS_CGROUP_TRACE_MAX});
  h.maps.push_back({"cgroup_excl", static_cast<int64_t>(sel.excluded.size()),
                    loader_->max_cgroup_exclusions()});
  h.maps.push_back({"proc_lost", static_cast<int64_t>(proc_lost_entries_), IOLENS_PROC_LOST_MAX});
  h.drain = drain_hist_;
  for (const auto& p : loader_->programs())
    h.programs.push_back({p.name, p.attached, !p.attached && !p.error.empty()});
  h.syscall_hooks_attached = loader_->syscall_hooks();
  h.timing_exact = loader_->timing() == IOLENS_TIMING_EXACT;
  for (const auto& [id, job] : table_->jobs()) {
    if (job->state == JobState::Live) ++h.jobs_live;
    if (job->state == JobState::Closing) ++h.jobs_closing;
  }
  h.jobs_closed_total = ts.jobs_closed;
  h.file_records = table_->file_records();
  h.records_folded_total = ts.folded_records;
  h.processes_folded_total = ts.folded_processes;
  h.unattributed_processes = ts.unattributed_processes;
  h.records_written = writer_->written();
  h.records_failed = writer_->failed();
  h.darshan_logs_written = writer_->darshan_written();
  h.darshan_logs_failed = writer_->darshan_failed();
  h.records_unidentified = writer_->unidentified();
  h.state_saves = checkpoints_;
  h.state_save_failures = checkpoint_failures_;
  h.state_marker_failures = marker_failures_;
  h.memory_bound_bytes = memory_bound_;
  h.resident_bytes = resident_bytes();
  h.jobs_before_hooks = table_->jobs_unhooked();
  h.wall_clock_steps = wall_steps_.steps();
  h.cgroup_filesystem_mounted = cgroup_root_missing_since_ == 0;
  h.snapshot_duration_s = last_snapshot_s_;
  return h;
}

void Daemon::retain_metrics(const Job& job) {
  retained_.push_back({job_metrics(job, classifier_, cfg_.metrics.top_files,
                                   table_->alignment_table()),
                       clock_ns(CLOCK_MONOTONIC) + static_cast<int64_t>(cfg_.grace_s) * 1000000000LL});
  // No page shows more than max_jobs jobs: ended ones past that many are never shown, and
  // thousands of short jobs within a grace period held ~8 KiB each (bench/README.md
  // "Thousands of short jobs"). The earliest ended go first.
  while (retained_.size() > cfg_.metrics.max_jobs) {
    retained_.pop_front();
    ++retained_evicted_;
  }
}

/// A new snapshot for the scrapes: every job of the table, and the ended ones in their grace
/// period (docs/metrics.md). Built after each drain, so a scrape never waits for the loop.
void Daemon::publish_metrics(bool force) {
  if (!metrics_) return;
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  // A drain under pressure comes every few ms; the snapshot walks every record, and scrapes
  // come every few seconds: at most one a second is enough.
  if (!force && last_publish_mono_ >= 0 && t0 - last_publish_mono_ < kPublishEvery) return;
  last_publish_mono_ = t0;
  std::erase_if(retained_, [&](const Retained& r) { return r.until_mono <= t0; });
  auto s = std::make_shared<core::MetricsSnapshot>();
  s->node = node_;
  // Darshan's mount table as the record writer's thread read it last (never read here), for
  // the jobs' file_not_aligned
  table_->set_alignment_table(records_->alignment());
  uint64_t dropped = 0;
  const std::size_t max = cfg_.metrics.max_jobs;
  for (const auto& [id, job] : table_->jobs()) {
    if (s->jobs.size() >= max) {
      ++dropped;
      continue;
    }
    s->jobs.push_back(
        job_metrics(*job, classifier_, cfg_.metrics.top_files, table_->alignment_table()));
  }
  for (const Retained& r : retained_) {
    if (table_->find(r.metrics.id)) continue;  // the id is live again: the live job's series
    if (s->jobs.size() >= max) {
      ++dropped;
      continue;
    }
    s->jobs.push_back(r.metrics);
  }
  std::sort(s->jobs.begin(), s->jobs.end(),
            [](const core::JobMetrics& a, const core::JobMetrics& b) { return a.id < b.id; });
  s->daemon = health();
  s->daemon.jobs_dropped = dropped;
  s->daemon.ended_jobs_evicted = retained_evicted_;
  last_snapshot_s_ = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - t0) / 1e9;
  s->daemon.snapshot_duration_s = last_snapshot_s_;
  metrics_->publish(std::move(s));
}

void Daemon::hooks_policy() {
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  const bool always = opts_.syscall_hooks == "always";
  const bool active = table_->active_jobs() > 0;
  if (active) last_active_ = now;
  const bool attached = loader_->syscall_hooks();
  if ((always || active) && !attached) {
    if (Status s = loader_->set_syscall_hooks(true); !s) {
      spdlog::error("{}", s.message);
      return;
    }
    hooks_since_mono_ = now;
    table_->hooks_attached(static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
    state_dirty_ = true;  // the saved state keeps when they were detached
    ++hooks_attach_count_;
    spdlog::info("syscall hooks attached ({} live job(s))", table_->active_jobs());
  } else if (attached && !always && !active &&
             now - last_active_ > static_cast<int64_t>(opts_.hooks_idle_s) * 1000000000LL) {
    table_->hooks_detached(static_cast<uint64_t>(now));
    state_dirty_ = true;
    loader_->set_syscall_hooks(false);
    hooks_since_mono_ = -1;
    spdlog::info("syscall hooks detached (no live job for {} s)", opts_.hooks_idle_s);
  }
}

nlohmann::json Daemon::status_json() {
  nlohmann::json j;
  j["version"] = IOLENS_VERSION;
  j["pid"] = getpid();
  j["uptime_s"] = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - start_mono_) / 1e9;
  j["cgroup_root"] = mount_;
  j["cgroup_filesystem"] = {
      {"mounted", cgroup_root_missing_since_ == 0},
      {"missing_s", cgroup_root_missing_since_ == 0
                        ? 0.0
                        : static_cast<double>(clock_ns(CLOCK_MONOTONIC) -
                                              cgroup_root_missing_since_) / 1e9},
      {"outages", cgroup_root_outages_},
      {"moves", cgroup_root_moves_}};
  j["watch_roots"] = sel_->watch_roots();
  j["syscall_hooks"] = loader_->syscall_hooks() ? "attached" : "detached";
  j["syscall_hooks_mode"] = opts_.syscall_hooks;
  j["timing"] = loader_->timing() == IOLENS_TIMING_OFF ? "off" : "exact";
  if (!loader_->timing_note().empty()) j["timing_note"] = loader_->timing_note();
  j["program_build"] = loader_->program_build();
  nlohmann::json progs = nlohmann::json::array();
  std::map<std::string, uint64_t> misses;
  for (const auto& [name, n] : loader_->program_misses()) misses[name] = n;
  for (const auto& p : loader_->programs())
    progs.push_back({{"name", p.name},
                     {"attached", p.attached},
                     {"error", p.error},
                     {"state", p.attached ? "attached" : p.error.empty() ? "detached" : "failed"},
                     {"misses", misses.count(p.name) ? misses[p.name] : 0}});
  j["programs"] = progs;
  const loader::Loader::SelectionEntries sel = loader_->selection_entries();
  j["maps"] = nlohmann::json::array(
      {{{"name", "files"},
        {"entries", drain_->files_in_map(loader_->file_records_created())},
        {"max", loader_->max_file_records()}},
       {{"name", "cgroup_sel"}, {"entries", sel.traced.size()}, {"max", IOLENS_CGROUP_TRACE_MAX}},
       {{"name", "cgroup_excl"}, {"entries", sel.excluded.size()},
        {"max", loader_->max_cgroup_exclusions()}},
       {{"name", "proc_lost"}, {"entries", proc_lost_entries_}, {"max", IOLENS_PROC_LOST_MAX}}});
  const loader::KernelStats kst = loader_->stats();
  nlohmann::json lost = kernel_losses(kst);
  const TableStats& ts = table_->stats();
  lost["decode_errors"] = decode_errors_;
  // Node-level: every loss is the node's; these are the ones no job was charged with.
  lost["unattributed"] = unattributed_losses(kst);
  lost["unattributed_records"] = ts.unattributed_records;
  lost["untraced_cgroups"] = untraced_cgroups_;
  lost["unexcluded_cgroups"] = unexcluded_cgroups_;
  // Selection entries waiting for room in their kernel map (retried as cgroups go away).
  j["selection_pending"] = sel_pending_.size();
  j["lost"] = lost;
  j["unattributed_processes"] = ts.unattributed_processes;
  j["unattributed_held"] = table_->unattributed_held();  // bounded; exited ones leave
  j["jobs"] = {{"live", table_->active_jobs()},
               {"closed", ts.jobs_closed},
               {"closed_without_event", jobs_closed_by_reconcile_},
               {"before_hooks", table_->jobs_unhooked()}};
  j["records"] = {{"files", table_->file_records()},
                  {"folded", ts.folded_records},
                  {"processes_folded", ts.folded_processes},
                  {"names_to_clear", names_to_clear_.size()},
                  {"names_cleared", names_cleared_},
                  {"names_cleared_by_hand", loader_->names_cleared_by_hand()}};
  j["drain"] = {{"last_us", last_drain_us_},
                {"count", drains_},
                {"incomplete", drain_failures_},
                {"pieces", drain_->pieces()},
                {"records_read", drain_->records_read()},
                {"records_unchanged", drain_->records_unchanged()},
                {"last_pieces", last_round_pieces_},
                {"last_longest_piece_us", last_round_longest_piece_ns_ / 1000}};
  j["output"] = {{"dir", writer_->dir()}, {"written", writer_->written()},
                 {"writing", writing_.size()}, {"waiting_for_save", held_.size()},
                 {"compression", cfg_.record_compression},
                 {"rotated", writer_->rotated()}, {"failed", writer_->failed()},
                 {"already_written", writer_->already_written()},
                 {"unidentified", writer_->unidentified()},
                 {"stale_temporaries_removed", writer_->stale_temporaries_removed()},
                 {"darshan_logs", {{"enabled", cfg_.darshan_logs},
                                   {"written", writer_->darshan_written()},
                                   {"failed", writer_->darshan_failed()}}}};
  const auto& pins = loader_->pin_state();
  j["restart"] = restart_;
  j["restart"]["note"] = pins.discarded;
  j["wall_clock"] = {{"mono_to_wall_ns", mono_to_wall_},
                     {"steps", wall_steps_.steps()},
                     {"stepped_ns", wall_steps_.stepped_ns()}};
  if (!wall_steps_.kept().empty())
    j["wall_clock"]["last_step"] = {
        {"seen_ns", wall_steps_.kept().back().at_mono + mono_to_wall_},
        {"step_ns", wall_steps_.kept().back().delta_ns}};
  j["state"] = {{"path", state_path()}, {"saves", checkpoints_}, {"failures", checkpoint_failures_},
                {"last_us", last_checkpoint_us_}, {"last_in_loop_us", last_save_loop_us_},
                {"last_gather_us", last_save_gather_us_},
                {"last_collect_us", last_save_collect_us_},
                {"under_way", save_under_way_.has_value()},
                {"marker_failures", marker_failures_}};
  if (metrics_)
    j["metrics"] = {{"listen", cfg_.metrics.listen}, {"ports", metrics_->ports()},
                    {"scrapes", metrics_->scrapes()}, {"jobs_retained", retained_.size()},
                    {"jobs_evicted", retained_evicted_}};
  else
    j["metrics"] = {{"listen", ""}};
  // How `status` and `jobs` were answered by the front thread: stale ones while the loop was
  // in a piece of work longer than control::kFreshAnswerWait.
  const AnswerBoard::Counts answers = board_.counts();
  const LivePages::Counts pages = live_pages_.counts();
  j["control"] = {{"answered_fresh", answers.fresh},
                  {"answered_stale", answers.stale},
                  {"oldest_stale_ms", answers.oldest_stale_ms},
                  // `job` of live jobs (docs/control.md#live-jobs)
                  {"live_pages", {{"snapshots", pages.snapshots},
                                  {"last_snapshot_ms", pages.last_snapshot_us / 1000},
                                  {"held_rows", pages.held_rows},
                                  {"pages_held", pages.pages_held},
                                  {"retry_busy", pages.retry_busy},
                                  {"retry_gone", pages.retry_gone}}}};
  j["runs"] = {{"root", run_cg_ ? run_cg_->rel() : ""}, {"live", runs_.size()},
               {"orphans", run_orphans_.size()}, {"started", runs_started_},
               {"ended", runs_ended_}, {"abandoned", runs_abandoned_},
               {"refused", runs_refused_}};
  return j;
}

bool Daemon::setup_runs() {
  if (cfg_.runs.empty()) return true;
  std::string error;
  run_cg_ = RunCgroups::open(mount_, cfg_.runs, error);
  if (!run_cg_) {
    spdlog::error("{}", error);
    return false;
  }
  // Runs of an earlier daemon (a crash or a hand-over): nobody will end them. Empty ones go
  // now; populated ones stay jobs until their processes are gone (service_runs).
  for (const std::string& name : run_cg_->list()) {
    if (run_cg_->populated(name).value_or(true)) {
      run_orphans_.push_back(name);
      spdlog::info("run cgroup {}/{} left by an earlier iolensd: removed once empty", cfg_.runs,
                   name);
    } else if (Status s = run_cg_->remove(name); !s) {
      spdlog::warn("{}", s.message);
    }
  }
  spdlog::info("runs: iolens run may use {} (a cgroup per run)", cfg_.runs);
  return true;
}

nlohmann::json Daemon::start_run(const nlohmann::json& req, control::RequestContext& ctx) {
  if (!run_cg_)
    throw std::runtime_error("runs are off in this iolensd (no runs: in its configuration)");
  const auto pid_it = req.find("pid");
  if (pid_it == req.end() || !pid_it->is_number_unsigned() || pid_it->get<uint64_t>() == 0 ||
      pid_it->get<uint64_t>() > static_cast<uint64_t>(INT_MAX))
    throw control::BadRequest("'pid' must be a process id");
  const auto pid = static_cast<pid_t>(pid_it->get<uint64_t>());
  // The client's liveness: the read end of a pipe only the client can write. Its EOF ends the
  // run, so a killed client leaves no cgroup, job or hooks behind.
  struct stat st {};
  if (ctx.passed_fd.get() < 0 || fstat(ctx.passed_fd.get(), &st) != 0 || !S_ISFIFO(st.st_mode))
    throw control::BadRequest(
        "a run needs the read end of a pipe passed with the request (SCM_RIGHTS)" +
        (ctx.fd_refusal.empty() ? std::string() : ": " + ctx.fd_refusal));
  const std::string proc = "/proc/" + std::to_string(pid);
  const auto status = read_file(proc + "/status");
  if (!status) throw std::runtime_error("no process " + std::to_string(pid));
  if (std::string why = run_pid_refusal(*status, pid, ctx.peer.pid, ctx.peer.uid); !why.empty()) {
    ++runs_refused_;
    spdlog::warn("run refused for pid {} uid {}: {}", ctx.peer.pid, ctx.peer.uid, why);
    throw control::Denied(why);
  }
  std::size_t mine = 0;
  for (const auto& [id, r] : runs_) mine += r.uid == ctx.peer.uid;
  if (mine >= kMaxRunsPerUid || runs_.size() >= kMaxRuns) {
    ++runs_refused_;
    throw std::runtime_error(mine >= kMaxRunsPerUid
                                 ? "uid " + std::to_string(ctx.peer.uid) + " has " +
                                       std::to_string(mine) + " runs open (at most " +
                                       std::to_string(kMaxRunsPerUid) + ")"
                                 : "this iolensd has " + std::to_string(runs_.size()) +
                                       " runs open (at most " + std::to_string(kMaxRuns) + ")");
  }
  const auto cg_text = read_file(proc + "/cgroup");
  Run run;
  run.id = next_run_++;
  run.name = "run-" + std::to_string(getpid()) + "-" + std::to_string(run.id);
  run.path = cfg_.runs + "/" + run.name;
  run.uid = ctx.peer.uid;
  run.client = ctx.peer.pid;
  run.root = pid;
  run.origin = cg_text ? cgroup_v2_path(*cg_text).value_or("/") : "/";
  if (Status s = run_cg_->make(run.name, run.cgroup_id); !s) throw std::runtime_error(s.message);
  const auto now = static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC));
  // The job opens now, not when the mkdir event is read: the command must find it.
  apply(table_->on_cgroup(run.cgroup_id, run.path, true, now));
  const jobs::Classification c = sel_->classify(run.path);
  Job* job = c.identity ? table_->find(c.identity->id) : nullptr;
  const auto fail = [&](const std::string& why) {
    // Its mkdir event first, so that it cannot open the job again after the removal.
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
    run_cg_->remove(run.name);
    table_->on_cgroup_removed(run.cgroup_id, static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
    if (job) take_run_job(job->identity.id);
    throw std::runtime_error(why);
  };
  if (!job) fail("the run's cgroup " + run.path + " is not a job of this iolensd's rules");
  run.job_id = job->identity.id;
  // The same recorder as `iolens run` makes (the command's parent is the client). Without its
  // canonicalizer: realpath(3) of a name the command chose would run in this loop, as root,
  // and a path on the user's own FUSE file system whose server stops answering would stall
  // the daemon (docs/security.md). Names seen only by path stay as the kernel walked them, as
  // in every daemon job (docs/run.md).
  job->rec = std::make_unique<core::Recorder>(static_cast<uint32_t>(pid),
                                              static_cast<uint32_t>(ctx.peer.pid));
  if (auto u = status_uid(*status)) job->uid = *u;
  note_new_jobs();
  hooks_policy();  // the syscall hooks are attached before the command runs, never after
  if (!loader_->syscall_hooks()) fail("the syscall hooks could not be attached (see the log)");
  if (Status s = run_cg_->move(run.name, pid); !s) fail(s.message);
  // The move marked the command (the cgroup_attach_task program runs in that write); without
  // that program, the task iterator marks it. Its mark is read now, so the job has it.
  bool attach_prog = false;
  for (const auto& p : loader_->programs())
    if (p.name == "cgroup_attach_task") attach_prog = p.attached;
  if (!attach_prog)
    if (Status s = loader_->scan_tasks(); !s) spdlog::warn("{}", s.message);
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  if (job->procs.empty()) {
    run_cg_->evacuate(run.name, run.origin);
    fail("process " + std::to_string(pid) + " was moved into " + run.path +
         " but the kernel did not mark it traced");
  }
  run.alive = control::UniqueFd(ctx.passed_fd.release());
  ++runs_started_;
  spdlog::info("run {} for pid {} uid {}: command pid {} in {} (job {})", run.id, run.client,
               run.uid, pid, run.path, run.job_id);
  nlohmann::json answer = {{"run", run.id}, {"job", run.job_id}, {"cgroup", run.path}};
  runs_.emplace(run.id, std::move(run));
  return answer;
}

void Daemon::close_run_cgroup(Run& run) {
  if (const std::size_t left = run_cg_->evacuate(run.name, run.origin))
    spdlog::info("run {}: {} process(es) still running moved back to {} (not counted further)",
                 run.id, left, run.origin);
  if (Status s = run_cg_->remove(run.name); !s) spdlog::warn("run {}: {}", run.id, s.message);
  // Closed at once, not when the rmdir event is read (a lost event would leave it live).
  table_->on_cgroup_removed(run.cgroup_id, static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
  drain_soon_ = true;
}

void Daemon::take_run_job(const std::string& id) {
  Job* job = table_->find(id);
  if (!job) return;
  captures_->job_ending(*table_, id);
  job->state = JobState::Closed;
  if (metrics_) retain_metrics(*job);
  drop_pages(id);
  if (auto taken = table_->take(id)) release_losses(*taken);
  job_loss_base_.erase(id);
  job_decode_base_.erase(id);
  state_dirty_ = true;  // saved with the next checkpoint: a restart must not find it live
}

nlohmann::json Daemon::end_run(const nlohmann::json& req, control::RequestContext& ctx) {
  const auto id_it = req.find("run");
  if (id_it == req.end() || !id_it->is_number_unsigned())
    throw control::BadRequest("'run' must be a run id");
  const auto it = runs_.find(id_it->get<uint64_t>());
  if (it == runs_.end())
    throw std::runtime_error("no run " + id_it->dump() + " in this iolensd (restarted?)");
  Run& run = it->second;
  // Only the client that started it ends it: the same process (run ids start again at 1 in a
  // restarted daemon, so another client's id may name this run), of the same uid.
  if (ctx.peer.pid != run.client || (ctx.peer.uid != 0 && ctx.peer.uid != run.uid))
    throw control::Denied("run " + std::to_string(run.id) + " was started by pid " +
                          std::to_string(run.client) + " uid " + std::to_string(run.uid) +
                          ", not pid " + std::to_string(ctx.peer.pid) + " uid " +
                          std::to_string(ctx.peer.uid));
  // The counts go into a memfd the client made: writing it never waits for anyone (a pipe, or
  // a file on a FUSE mount, could stall the loop). Only shmem files answer F_GET_SEALS.
  const int out = ctx.passed_fd.get();
  if (out < 0 || fcntl(out, F_GET_SEALS) < 0)
    throw control::BadRequest("run_end needs a memfd passed with the request (SCM_RIGHTS)" +
                              (ctx.fd_refusal.empty() ? std::string() : ": " + ctx.fd_refusal));
  close_run_cgroup(run);
  // Not saved here: a save (and its fsync) would make the client wait; the loop saves soon.
  drain(false);
  drain(false);  // the first pass may have learnt of exits; the second moves their records out
  Job* job = table_->find(run.job_id);
  if (!job) {
    runs_.erase(it);
    throw std::runtime_error("the run's job " + run.job_id + " was already written");
  }
  const std::vector<uint8_t> blob = job->rec->save_bytes();
  std::size_t done = 0;
  while (done < blob.size()) {
    const ssize_t n = pwrite(out, blob.data() + done, blob.size() - done,
                             static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(n < 0 ? errno : ENOSPC);
      take_run_job(run.job_id);
      runs_.erase(it);
      throw std::runtime_error("cannot write the run's counts to the client's memfd: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  // The run's losses, as any job's (docs/counters.md#lost).
  nlohmann::json losses;
  job_losses(run.job_id, losses);
  nlohmann::json lost = std::move(losses["lost"]);
  lost["untraced_cgroups"] = untraced_cgroups_of(*job);
  nlohmann::json block = nlohmann::json::array();
  auto add_block = [&](uint32_t dev, const iolens_block_counters& c) {
    const auto* words = reinterpret_cast<const uint64_t*>(&c);
    block.push_back({{"dev", dev},
                     {"counters", std::vector<uint64_t>(words, words + sizeof(c) / 8)}});
  };
  for (const auto& [dev, c] : job->block_done) add_block(dev, c);
  for (const auto& [p, devs] : job->block_live)
    for (const auto& [dev, c] : devs) add_block(dev, c);
  nlohmann::json not_attached = nlohmann::json::object();
  for (const auto& p : loader_->programs())
    if (!p.attached) not_attached[p.name] = p.error.empty() ? "not attached" : p.error;
  nlohmann::json answer = {{"run", run.id},
                           {"job", run.job_id},
                           {"abi", IOLENS_ABI_VERSION},
                           {"recorder_bytes", blob.size()},
                           {"lost", lost},
                           {"block", block},
                           {"not_attached", not_attached},
                           {"timing", loader_->timing() == IOLENS_TIMING_OFF ? "off" : "exact"}};
  spdlog::info("run {} ended: job {} sent to pid {} ({} bytes)", run.id, run.job_id,
               ctx.peer.pid, blob.size());
  take_run_job(run.job_id);
  runs_.erase(it);
  ++runs_ended_;
  return answer;
}

void Daemon::service_runs() {
  for (auto it = runs_.begin(); it != runs_.end();) {
    Run& run = it->second;
    pollfd p{run.alive.get(), POLLIN, 0};
    if (poll(&p, 1, 0) <= 0 || p.revents == 0) {
      ++it;
      continue;
    }
    // The client is gone (its pipe's write end closed): nobody will ask for these counts. The
    // job is written as any job's, so nothing counted is lost.
    spdlog::warn("run {}: its client pid {} is gone; ending it (job {} written to {})", run.id,
                 run.client, run.job_id, cfg_.output_dir);
    close_run_cgroup(run);
    ++runs_abandoned_;
    it = runs_.erase(it);
  }
  const int64_t t = clock_ns(CLOCK_MONOTONIC);
  if (run_orphans_.empty() || t - orphans_checked_ < 1'000'000'000LL) return;
  orphans_checked_ = t;
  std::erase_if(run_orphans_, [&](const std::string& name) {
    if (run_cg_->populated(name).value_or(true)) return false;
    if (Status s = run_cg_->remove(name); !s) {
      spdlog::warn("{}", s.message);
      return false;
    }
    drain_soon_ = true;  // its rmdir event closes its job
    return true;
  });
}

void Daemon::fold_over_limits(bool within_round) {
  // the mount table the folds give the records' file_not_aligned with (Job::folded_not_aligned)
  table_->set_alignment_table(records_->alignment());
  // A record read from the map has had its name sent before; folded before that name is read,
  // it would be folded unnamed (into the wrong class) and the name, arriving after, kept for
  // no record. So the ring is read to its end first when a deadline left it behind (as it was
  // read at every piece before reads were cut).
  if (loader_->events_cut_short())
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  removed_at_fold_ = drain_->removed_records();
  std::vector<core::FileIdentity> forgotten;
  if (table_->enforce_limits(&forgotten, within_round) > 0) state_dirty_ = true;
  // Folded records' names, and evicted node-wide name copies.
  for (const auto& f : forgotten) names_to_clear_.push_back({f.ino, f.dev, f.gen});
}

void Daemon::clear_names(int64_t deadline_ns) {
  std::vector<loader::Loader::NameId> slice;
  while (!names_to_clear_.empty()) {
    // ~0.6 ms by the kernel's program, ~1 ms of system calls for 256 by hand (asked each
    // slice: the kernel may refuse the program in the middle of a pass); then the clock.
    const std::size_t slice_size =
        loader_->forgets_by_program() ? IOLENS_FORGET_NAMES_MAX : 256;
    const auto end = names_to_clear_.begin() +
                     static_cast<std::ptrdiff_t>(std::min(slice_size, names_to_clear_.size()));
    slice.assign(names_to_clear_.begin(), end);
    loader_->forget_names(slice);
    names_to_clear_.erase(names_to_clear_.begin(), end);
    names_cleared_ += slice.size();
    if (deadline_ns != 0 && clock_ns(CLOCK_MONOTONIC) >= deadline_ns) break;
  }
}

CaptureRunner::Setting Daemon::capture_setting() const {
  CaptureRunner::Setting s;
  s.producer = std::string("iolens ") + IOLENS_VERSION;
  s.node = node_;
  s.cgroup_mount = mount_;
  s.timing_off = loader_->timing() == IOLENS_TIMING_OFF;
  s.alignment = records_->alignment();
  return s;
}

nlohmann::json Daemon::jobs_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [id, job] : table_->jobs()) list.push_back(table_->job_summary(*job));
  for (const auto& [id, c] : closed_) list.push_back(c.summary);
  for (const auto& [serial, w] : writing_) list.push_back(w.line);
  return {{"jobs", list}};
}

nlohmann::json Daemon::live_job_page(const Job& job, const PageRequest& r) {
  const std::string& id = job.identity.id;
  auto now = LivePages::Clock::now();
  // Pages of the snapshot held for the job: the front thread answers them unless it is past
  // its reuse window (or the front thread is not running).
  if (auto pages = live_pages_.usable(id, r.snapshot, now))
    return pages->page(r.offset, r.limit, now);
  if (r.snapshot) {
    live_pages_.count_retry(true);
    throw control::Retry("the snapshot " + std::to_string(*r.snapshot) + " of job " + id +
                             " that these pages come from is no longer held (a newer one was "
                             "taken, or it was not asked for in " +
                             std::to_string(live_pages_.policy().idle_drop / std::chrono::seconds(1)) +
                             " s): ask again from offset 0",
                         std::chrono::milliseconds(0));
  }
  if (const auto wait = live_pages_.wait_for_new(now); wait > LivePages::Clock::duration::zero()) {
    // Snapshots take a bounded share of the loop's time, and one being paged is kept a while:
    // the job's own held snapshot answers meanwhile, however old (its age_ms says so).
    if (auto pages = live_pages_.usable(id, std::nullopt, now, true))
      return pages->page(r.offset, r.limit, now);
    live_pages_.count_retry(false);
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wait);
    throw control::Retry("iolensd holds a snapshot of a live job that a client is reading, or "
                         "took one (" +
                             std::to_string(live_pages_.counts().last_snapshot_us / 1000) +
                             " ms long) a moment ago and spends at most 1/" +
                             std::to_string(live_pages_.policy().budget_factor) +
                             " of its time on them: ask again in " + std::to_string(ms.count()) +
                             " ms",
                         ms);
  }
  // The members the daemon adds to a job's record: its losses so far (the last drain's), as
  // its record will have them, and what a restart or late hooks left out.
  nlohmann::json members = nlohmann::json::object();
  job_losses(id, members);
  members["lost"]["untraced_cgroups"] = untraced_cgroups_of(job);
  annotate_restart(job, members);
  annotate_hooks(job, members);
  annotate_clock(job, members);
  // The one held goes first (freed on the writer's thread meanwhile): a big job's snapshot is
  // hundreds of MB, and two are never held at once.
  dispose_pages(live_pages_.release());
  const uint64_t serial = live_pages_.next_serial();
  // Darshan's mount table as the record writer's thread read it last (never read here).
  table_->set_alignment_table(records_->alignment());
  auto pages = table_->job_pages(job, IOLENS_VERSION, serial, std::move(members), now);
  const auto end = LivePages::Clock::now();
  nlohmann::json page = pages->page(r.offset, r.limit, end);
  dispose_pages(live_pages_.hold(pages, end - now, end));
  return page;
}

void Daemon::dispose_pages(std::shared_ptr<const JobPages> pages) {
  if (!pages) return;
  const std::size_t rows = pages->rows();
  records_->dispose(std::move(pages), rows);
}

void Daemon::drop_pages(const std::string& id) {
  dispose_pages(live_pages_.drop(id, LivePages::Clock::now()));
}

void Daemon::publish_answers(Publish which) {
  using std::chrono::seconds;
  const auto is_due = [&](const char* cmd, std::optional<AnswerBoard::Clock::duration> asked) {
    return which == Publish::all || board_.wanted(cmd) ||
           (which == Publish::wanted_or_due && board_.due(cmd, seconds(1), asked));
  };
  // `status` is a few map reads and counters: kept at most a second old (plus the loop's piece
  // of work) at every round's end. `jobs` sums every live job's records (Recorder::summary):
  // only while somebody asks (within a minute).
  if (is_due("status", std::nullopt)) {
    const auto at = AnswerBoard::Clock::now();
    board_.publish("status", status_json(), at);
  }
  if (is_due("jobs", seconds(60))) {
    const auto at = AnswerBoard::Clock::now();
    collect_written(false);  // a record on disk is a closed job's, as `jobs` in the loop says
    board_.publish("jobs", jobs_json(), at);
  }
}

nlohmann::json Daemon::handle(const nlohmann::json& req, control::RequestContext& ctx) {
  const std::string cmd = req.value("cmd", "");
  if (cmd == "status") return status_json();
  if (cmd == "capture")
    return captures_->start(req, ctx, *table_, capture_setting(), clock_ns(CLOCK_MONOTONIC));
  if (cmd == "run") return start_run(req, ctx);
  if (cmd == "run_end") return end_run(req, ctx);
  if (cmd == "capture_status" || cmd == "capture_stop")
    return captures_->status_or_stop(cmd == "capture_stop", req, ctx.peer.uid, geteuid(),
                                     *table_, clock_ns(CLOCK_MONOTONIC));
  // A record on disk is a closed job's (saved at the loop's next pass, not in the request).
  if (cmd == "jobs" || cmd == "job") collect_written(false);
  if (cmd == "jobs") return jobs_json();
  if (cmd == "job") {
    // One page per request (docs/control.md#job): the answer's size and the memory it holds
    // are bounded by the page.
    const PageRequest r = parse_page_request(req);
    const std::string& id = r.id;
    const uint64_t offset = r.offset, limit = r.limit;
    if (Job* job = table_->find(id)) return live_job_page(*job, r);
    if (std::any_of(writing_.begin(), writing_.end(),
                    [&](const auto& w) { return w.second.job->identity.id == id; }))
      // `iolens job` waits and asks again (a client paging the live job when it closed too).
      throw control::Retry("job " + id + " has ended and its record is being written: ask "
                           "again once `iolens jobs` no longer says it is writing",
                           std::chrono::milliseconds(500));
    const auto fd_it = req.find("fd");
    if (fd_it != req.end() && !fd_it->is_boolean())
      throw control::BadRequest("'fd' must be true or false");
    const bool hand_fd = fd_it != req.end() && fd_it->get<bool>();
    for (auto it = closed_.rbegin(); it != closed_.rend(); ++it) {
      if (it->first != id) continue;
      const std::string& path = it->second.path;
      if (path.empty())
        throw std::runtime_error("job " + id + " has ended and its record could not be written "
                                 "(iolens status: output.failed; the daemon's log says why)");
      const std::string unreadable =
          "job " + id + " has ended and its record " + path + " cannot be read (rotated away?)";
      // Through the output directory's descriptor, never following a link left at the name.
      uint64_t size = 0;
      control::UniqueFd rfd(
          core::open_regular_at(writer_->dir_fd(), path.substr(path.rfind('/') + 1), &size));
      if (rfd.get() < 0) throw std::runtime_error(unreadable);
      if (hand_fd && !ctx.reply_fd_allowed)
        throw std::runtime_error(
            "too many records handed to uid " + std::to_string(ctx.peer.uid) +
            " and not read by their clients yet: try again once they are read");
      if (hand_fd) {
        // The client reads the record itself: parsing a big one here held every other client
        // (6 s a request for a 163 MB record, bench/README.md).
        ctx.reply_fd = std::move(rfd);
        return {{"id", id}, {"state", "closed"}, {"record", path}, {"bytes", size}};
      }
      const auto too_big = [&](const std::string& how_big) {
        return std::runtime_error(
            "job " + id + " has ended and its record " + path + " is " + how_big +
            ": pages are cut here only from records up to " +
            std::to_string(kJobPageInLoopMaxBytes >> 20) +
            " MiB of JSON; ask with \"fd\": true for the record itself (iolens job does)");
      };
      if (size > kJobPageInLoopMaxBytes) throw too_big(std::to_string(size >> 20) + " MiB");
      // The descriptor already open: the file is read once, through it.
      if (auto bytes = core::read_all(rfd.get())) {
        // A compressed record is inflated only up to the bound the loop allows itself.
        std::string error;
        bool over = false;
        const auto text =
            core::text_of_record(std::move(*bytes), kJobPageInLoopMaxBytes, error, &over);
        if (over)
          throw too_big("over " + std::to_string(kJobPageInLoopMaxBytes >> 20) + " MiB of JSON");
        if (!text) throw std::runtime_error(unreadable + ": " + error);
        if (auto j = record_page(*text, offset, limit)) return *j;
      }
      throw std::runtime_error(unreadable);
    }
    throw std::runtime_error("no job '" + id + "' (see iolens jobs)");
  }
  throw control::BadRequest("unknown command '" + cmd + "'");
}

void Daemon::stop_clean() {
  log_unexcluded(clock_ns(CLOCK_MONOTONIC), true);
  captures_->end_for_stop(*table_);
  // Runs end with the daemon: their cgroups go, their jobs are written below as closed ones
  // (their clients' run_end then fails and says so).
  for (auto& [id, run] : runs_) close_run_cgroup(run);
  runs_.clear();
  drain();
  drain();  // the first pass may have learnt of exits; the second moves their records out
  write_closed();
  release_held(true);  // the stop writes every closed job; the state goes below
  // Live jobs: what is held so far, marked as cut short by the stop.
  std::vector<std::string> live;
  for (const auto& [id, job] : table_->jobs()) live.push_back(id);
  for (const std::string& id : live) {
    const Job& job = *table_->find(id);
    nlohmann::json overrides;
    job_losses(id, overrides);
    overrides["lost"]["untraced_cgroups"] = untraced_cgroups_of(job);
    annotate_restart(job, overrides);
    annotate_hooks(job, overrides);
    annotate_clock(job, overrides);
    submit_record(id, std::move(overrides), true);
  }
  records_->wait_idle();
  collect_written(false);  // no save: the state goes below
  finish_save();  // the saver's rename must not bring it back after the unlink
  loader_->unpin_all();
  unlinkat(state_dir_fd_, kStateName, 0);  // it described kernel state that is gone now
  if (run_cg_) {
    const std::string root = mount_ + run_cg_->rel();
    run_cg_.reset();
    rmdir(root.c_str());  // only when empty: another daemon's runs or orphans keep it
  }
}

int Daemon::run() {
  if (!setup()) return 1;
  initial_scan();
  if (restart_.value("resumed", false)) {
    relearn_processes();
    for (const auto& [id, job] : table_->jobs()) found_at_start_.insert(id);
    // The saved state leaves the live records' counts to the kernel's map (checkpoint()): they
    // are read before anything is answered or published, or a job's totals (and its Prometheus
    // counters) would go down after a restart and back up at the first drain.
    drain(false);
  }
  // The start-up's big buffers (the kernel's BTF read twice, the programs, the first scans)
  // are freed by now: given back, or jemalloc keeps them for its decay time (~13 MiB of RSS
  // more at the start than on glibc's malloc, which unmaps big blocks as they are freed).
  core::heap_release();
  publish_metrics(true);
  publish_answers(Publish::all);  // from now on the front thread answers `status` and `jobs`
  spdlog::info("iolensd {} started: cgroup root {}, watching {}, {} job(s) found", IOLENS_VERSION,
               mount_, fmt::join(sel_->watch_roots(), ", "), table_->jobs().size());
  const int64_t interval = static_cast<int64_t>(cfg_.drain_interval_ms) * 1000000LL;
  last_drain_ = clock_ns(CLOCK_MONOTONIC);
  for (;;) {
    follow_wall_clock();
    if (scan_needed_) {
      scan_needed_ = false;
      // The hooks first, if a job is live: a task the scan marks is then counted from its mark
      // (marked while they are detached, its job would say calls may be missing: before_hooks).
      hooks_policy();
      if (Status s = loader_->scan_tasks(); !s) spdlog::warn("{}", s.message);
    }
    // The ring and the names to clear, together for at most half a drain piece's time (a burst
    // of new files makes tens of thousands of name events, and its folds as many names to
    // clear); the piece below has its whole time, so that the map is drained as fast as before.
    // A pass of the loop is then at most about two pieces: answers wait at most that long.
    const int64_t piece = static_cast<int64_t>(cfg_.drain_piece_ms) * 1000000LL;
    const int64_t events_until = clock_ns(CLOCK_MONOTONIC) + piece / 2;
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); }, events_until);
    clear_names(events_until);
    collect_saved();
    // A save that does not end (a state directory on a mount whose server does not answer)
    // must not keep records from being written: after kHeldSaveWait they go without it.
    if (!held_.empty() && save_under_way_ &&
        clock_ns(CLOCK_MONOTONIC) - save_under_way_->gathered_mono >= kHeldSaveWait) {
      if (held_released_unsaved_++ == 0)
        spdlog::warn("a state save has been under way for {} s: closed jobs are written without "
                     "waiting for it", kHeldSaveWait / 1000000000);
      release_held(true);
    }
    // No live record is taken until a save holds their counts: one that was due while another
    // save was under way is started as soon as that one is done, not at the next round's end.
    if ((live_save_due_ || !held_.empty()) && !save_under_way_ &&
        clock_ns(CLOCK_MONOTONIC) - last_save_failed_mono_ >= kSaveRetryEvery)
      checkpoint(true);
    reconcile();
    retry_selection();
    captures_->service(*table_, clock_ns(CLOCK_MONOTONIC));
    service_runs();
    note_new_jobs();
    learn_uids();
    collect_written();
    hooks_policy();
    const int64_t now = clock_ns(CLOCK_MONOTONIC);
    const uint64_t in_map = drain_->files_untaken(loader_->file_records_created());
    // A round under way goes on; a new one when asked, each interval, or under pressure (the
    // map over half full; a drain of it still due under half waits for the interval). Not
    // while the save that must hold the live counts before any is taken is being written: such
    // a round could take nothing, and would read the whole map again and again until the save
    // was done.
    const bool pressure =
        in_map * 2 > loader_->max_file_records() && !waiting_for_live_save();
    if (drain_->round_open() || drain_soon_ || now - last_drain_ >= interval || pressure) {
      if (!drain_->round_open()) drain_soon_ = false;  // asked during a round: the next sees it
      if (drain_piece(now + piece, true)) {
        if (last_drain_complete_) write_closed();
        if (!held_.empty() && !save_under_way_ &&  // what they wait for
            clock_ns(CLOCK_MONOTONIC) - last_save_failed_mono_ >= kSaveRetryEvery)
          checkpoint(true);
        publish_metrics();
        // What the front thread answers during a long piece of work is then at most about a
        // second older than that piece (docs/control.md#answer-times).
        publish_answers(Publish::wanted_or_due);
      }
    }
    drop_pages("");  // a live job's snapshot nobody pages any more
    // The trace ring wakes us once half full (and is drained every round anyway).
    const bool capturing = captures_->window_open();
    std::vector<pollfd> fds = {{loader_->events_fd(), POLLIN, 0}, {server_->fd(), POLLIN, 0},
                               {sigfd_, POLLIN, 0},
                               {capturing ? loader_->trace_fd() : -1, POLLIN, 0}};
    // A run's client that dies wakes us: its run ends at once (service_runs).
    for (const auto& [id, run] : runs_)
      if (run.alive.get() >= 0) fds.push_back({run.alive.get(), POLLIN, 0});
    // Short naps while the map fills fast; otherwise the ring wakes us for what matters.
    // A round under way: no nap, only what is pending is answered before its next piece.
    // Events left in the ring by a deadline, or names to clear: no nap (most events do not wake
    // the reader; those that arrive meanwhile wait for the timer, as before).
    const bool behind = !names_to_clear_.empty() || loader_->events_cut_short();
    const int timeout = drain_->round_open() || behind                        ? 0
                        : in_map * 4 > loader_->max_file_records() ? 2
                        : capturing                                  ? 50
                                                                     : 100;
    const int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      break;
    }
    if (fds[1].revents & POLLIN) {
      server_->serve_pending([this](const nlohmann::json& req, control::RequestContext& ctx) {
        return handle(req, ctx);
      });
    }
    // Answers the front thread waits for (control::kFreshAnswerWait at most).
    publish_answers(Publish::wanted);
    if (fds[2].revents & POLLIN) {
      signalfd_siginfo si{};
      if (read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        if (si.ssi_signo == SIGHUP) {
          spdlog::info("SIGHUP: nothing to reload; restart iolensd to apply a new config");
          continue;
        }
        if (si.ssi_signo == SIGUSR2) {
          // Hand-over (an upgrade): save everything, leave the programs counting for the next
          // daemon, which continues the same jobs.
          spdlog::info("SIGUSR2: saving state and leaving the kernel programs to the next iolensd");
          log_unexcluded(clock_ns(CLOCK_MONOTONIC), true);
          captures_->end_for_stop(*table_);  // a capture does not survive the hand-over
          drain();
          clear_names(0);
          release_held(true);
          records_->wait_idle();  // the next daemon would write them a second time
          collect_written(false);
          finish_save();
          state_dirty_ = true;
          checkpoint(true);
          finish_save();  // on disk before the next daemon reads it
          return 0;
        }
        spdlog::info("signal {}: stopping", strsignal(static_cast<int>(si.ssi_signo)));
        stop_clean();
        return 0;
      }
    }
  }
  stop_clean();
  return 1;
}

}  // namespace

int run_daemon(const DaemonOptions& opts) {
  Daemon d(opts);
  return d.run();
}

}  // namespace iolens::daemon
