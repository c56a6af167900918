// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The daemon's picture of the node: cgroups under the watched roots, the jobs they make, which
/// process belongs to which job, and one Recorder per job. Pure: fed by decoded events and map
/// records (from the loader, or from tests), it says what the kernel selection must become and
/// which jobs are ready to be written, but does no I/O itself.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <string>
#include <unordered_set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/events.hpp"
#include "core/file_alignment.hpp"
#include "core/metrics_snapshot.hpp"
#include "core/recorder.hpp"
#include "core/snapshot.hpp"
#include "exporters/darshan_log.hpp"
#include "daemon/job_pages.hpp"
#include "jobs/config.hpp"
#include "jobs/selector.hpp"

namespace iolens::daemon {

/// A change the kernel's cgroup selection map must receive.
struct SelectionChange {
  uint64_t cgroup_id = 0;
  uint32_t action = 0;  // IOLENS_CGROUP_TRACE / IOLENS_CGROUP_EXCLUDE; 0 = remove the entry
  std::string path;     // for the log
};

enum class JobState { Live, Closing, Closed };
/// "live", "closing", "closed": the `state` of records and of `iolens jobs`.
std::string job_state_name(JobState s);
struct RecordBasis;

struct Job {
  jobs::Identity identity;
  std::string rule;
  uint64_t cgroup_id = 0;          // of identity.job_cgroup; 0 for process-rule jobs
  JobState state = JobState::Live;
  int64_t start_ns = 0;            // wall clock: cgroup creation or first sight
  std::optional<int64_t> end_ns;   // wall clock: cgroup removal or last exit
  bool end_estimated = false;      // the removal event was lost: end_ns is when it was noticed
  bool start_estimated = false;    // created before the daemon saw it: start_ns is first sight
  /// The real uid of the first of its processes the daemon found alive (/proc/PID/status);
  /// -1 until then (the daemon asks only for the Darshan log's header).
  int64_t uid = -1;
  std::set<core::ProcKey> procs;   // every process attributed and not folded (rec's)
  std::set<core::ProcKey> live;    // those not yet exited
  std::map<core::ProcKey, std::map<std::string, std::string>> proc_labels;  // container, step...
  std::unique_ptr<core::Recorder> rec;
  /// Files whose name this job's recorder has received (its own event or one from the table's
  /// node-wide cache): the kernel sends a file's name once for the whole node. Hashed: every
  /// record of every drain is looked up here (JobTable::give_name).
  std::unordered_set<core::FileIdentity, core::FileIdentityHash> named;
  /// By file class name: what fold_to took out of the recorder's file records, so the per-class
  /// metrics stay monotonic when records are folded (their paths are gone then).
  std::map<std::string, core::ClassTotals> folded_classes;
  /// The same by device (kernel dev_t).
  std::map<uint32_t, core::ClassTotals> folded_devices;
  /// Darshan's FILE_NOT_ALIGNED of the records fold_to took out, each with its file's
  /// alignment then (a folded record has no path left): iolens_job_file_not_aligned_operations
  /// stays monotonic.
  uint64_t folded_not_aligned = 0;
  /// The most iolens_job_file_not_aligned_operations has shown: kept records are judged again
  /// at each publish, by their name then, and a name replaced (a canonical one for a lexical
  /// one, one sent again) can be cut or lead to another mount; a counter never goes down.
  /// Mutable: the metrics read the job as const, and only they move it.
  mutable uint64_t not_aligned_shown = 0;
  /// The block layer by device (kernel dev_t; docs/counters.md "Block layer (ABI 7)"): the sums
  /// of exited processes' records (each added once, then deleted from the kernel), and the
  /// latest values of the live processes' records.
  std::map<uint32_t, iolens_block_counters> block_done;
  std::map<core::ProcKey, std::map<uint32_t, iolens_block_counters>> block_live;
  /// Its own losses (the kernel's `proc_lost` entries of its processes, by enum iolens_stat), kept
  /// as block records are: exited processes' added once, live processes' as they are now.
  std::array<uint64_t, IOLENS_NR_STATS> lost_done{};
  std::map<core::ProcKey, std::array<uint64_t, IOLENS_NR_STATS>> lost_live;
  /// lost_done plus every lost_live: what the kernel could not count of this job.
  std::array<uint64_t, IOLENS_NR_STATS> own_losses() const;
  /// A process of the job was selected while the on-demand syscall hooks were detached
  /// (docs/daemon.md#cost): its calls from then until the hooks were attached were not counted.
  /// Monotonic ns: the earliest such selection (0: none), and the attach that followed it (0:
  /// not attached yet).
  uint64_t unhooked_since = 0;
  uint64_t unhooked_until = 0;
  /// Taken from a saved state (JobTable::load): a daemon killed after that save may have
  /// written its record already (JobWriter::write's maybe_written). Not saved.
  bool restored = false;
};

/// Counts of what could not be attributed to a job (shown in status and metrics).
struct TableStats {
  uint64_t unattributed_processes = 0;  // traced, but in no job (e.g. directly in a root)
  uint64_t unattributed_records = 0;    // kernel records of such processes, discarded
  uint64_t unknown_cgroups = 0;         // cgroup ids no event or scan named
  uint64_t folded_records = 0;          // over all jobs, closed ones included
  uint64_t folded_processes = 0;        // the same for processes (limits.max_processes_per_job)
  uint64_t unattributed_forgotten = 0;  // unattributed processes dropped from the set, not exited
  uint64_t jobs_closed = 0;
};

class JobTable {
 public:
  /// `mono_to_wall_ns`: wall = monotonic + offset, for the kernel's timestamps.
  JobTable(jobs::Selector selector, jobs::Limits limits, int64_t mono_to_wall_ns);

  /// The metrics' file classes: records folded to bound memory keep their class in
  /// Job::folded_classes. Without it nothing is kept.
  void set_file_classes(std::vector<jobs::FileClass> classes);

  /// Resolves a cgroup id nobody named yet (created before the daemon, outside a scan) to its
  /// path; the daemon searches the cgroup filesystem. May return nullopt.
  using CgroupResolver = std::function<std::optional<std::string>(uint64_t id)>;
  void set_cgroup_resolver(CgroupResolver r) { resolve_ = std::move(r); }
  /// How the daemon's programs time calls ("exact" or "off"), for every job record.
  void set_timing(std::string timing) { timing_ = std::move(timing); }
  /// The mount table the records' file_alignment comes from (core/file_alignment.hpp), as the
  /// daemon read it last; none: unknown (null in records).
  void set_alignment_table(std::shared_ptr<const std::vector<core::AlignmentMount>> t) {
    alignment_ = std::move(t);
  }
  /// That table (null: none read yet), for the jobs' file_not_aligned metric.
  const std::vector<core::AlignmentMount>* alignment_table() const { return alignment_.get(); }
  /// The syscall hooks' state (monotonic ns), so that a job whose process is selected while
  /// they are detached says so (Job::unhooked_since). A table starts with them attached.
  void hooks_detached(uint64_t at_mono);
  void hooks_attached(uint64_t at_mono);
  /// Jobs that have had a process selected while the hooks were detached, since the start.
  uint64_t jobs_unhooked() const { return jobs_unhooked_; }

  /// A cgroup that exists (found by a scan, `created` = false) or was just created. Returns the
  /// selection changes it needs: a watched root gets TRACE, an excluded cgroup under a root
  /// whose parent is not excluded gets EXCLUDE (so its tasks are not traced; deeper excluded
  /// cgroups are covered by that entry), a job cgroup opens its job.
  std::vector<SelectionChange> on_cgroup(uint64_t id, const std::string& path, bool created,
                                         uint64_t ts_mono);
  /// A cgroup was removed: its job, if it is a job's own cgroup, starts closing.
  void on_cgroup_removed(uint64_t id, uint64_t ts_mono);

  /// A process entered the selection. Returns false when it belongs to no job: the caller
  /// should stop tracing it.
  bool on_mark(const core::MarkEvent& m);
  /// A process selected by a process rule (its comm matched in the kernel, its cmdline here).
  void add_process_job(const core::MarkEvent& m, const std::string& rule);

  /// Fork, exit and path events of traced processes.
  void on_event(const core::Event& ev);
  /// A kernel record. Records of processes in no job are counted and dropped. True when its
  /// job holds it and has its file's name: handing it on again unchanged would do nothing (a
  /// record whose name has not come yet is handed on again, so that it gets it).
  bool on_file(const iolens_file_key& key, const core::FileCounters& c, bool removed);
  void on_other(const iolens_file_key& key, const core::FileCounters& c, bool removed);

  /// A kernel block record (bpf/iolens_block.bpf.h); `final`: its process has exited, so the
  /// caller deletes it from the kernel once this returned true. False: the process is in no
  /// job (nothing kept).
  bool on_block(const iolens_block_key& key, const iolens_block_counters& c, bool final);
  /// A process's kernel loss entry (`proc_lost`), with `final` as for on_block. False: the
  /// process is in no job, or its job was written (nothing kept: the caller counts it as a loss
  /// no job was charged with).
  bool on_proc_lost(const iolens_proc_key& key, const iolens_proc_lost& v, bool final);
  /// One loss (enum iolens_stat) user space found of process `p` (a block request the daemon's
  /// sweep found untimed), added to its job. False: in no job.
  bool add_loss(const core::ProcKey& p, uint32_t stat);

  /// Whether the process is known and its last thread has exited (records are final).
  bool exited(const core::ProcKey& p) const;
  /// Whether the process belongs to a job (its records are kept).
  bool attributed(const core::ProcKey& p) const;
  /// Whether names are over `times` their bounds now: a job's over max_path_bytes_per_job, all
  /// jobs' or the node-wide cache's over max_path_bytes. O(jobs).
  bool names_over_limits(std::size_t times = 1) const;
  /// The same for file records: a job's over max_files_per_job, or all jobs' over max_records.
  bool records_over_limits(std::size_t times = 1) const;

  /// Folds records of jobs over their per-job limit, then of the biggest jobs while the total is
  /// over max_records. Returns the records folded; the files whose names were forgotten are
  /// appended to `forgotten` (the kernel must be told to name them again).
  /// `within_round`: only file records (by count and by name bytes) and the node-wide name
  /// cache; never a process. What a drain may do before its round ends: a process that exited
  /// may still have records in the part of the map not walked yet, and is folded only after a
  /// whole walk (docs/daemon.md#memory-bound).
  std::size_t enforce_limits(std::vector<core::FileIdentity>* forgotten = nullptr,
                             bool within_round = false);

  /// Jobs that have closed since the last call (cgroup removed, or last process exited for a
  /// process rule), ready to be written after the drain that follows their close. Their
  /// records are final; take_closed() removes them from the table.
  std::vector<std::string> closing() const;
  std::unique_ptr<Job> take(const std::string& id);

  /// What a live or closing job's recorder holds, with the job's start and end (0 while live);
  /// file timestamps count from boot (the monotonic clock's zero).
  core::RunSnapshot job_snapshot(const Job& job) const;
  /// The job record (`iolens.job/1`, docs/daemon.md) of a live or closing job.
  nlohmann::json job_json(const Job& job, const std::string& version) const;
  /// The same from a snapshot of it (job_snapshot), which a big job makes costly: one serves
  /// the record and the Darshan log.
  nlohmann::json job_json(const Job& job, const core::RunSnapshot& snap,
                          const std::string& version) const;
  /// The header of a job's Darshan log written from `snap` (job_snapshot); `node` goes in its
  /// metadata. Mounts are the caller's (this class does no I/O). docs/darshan-log.md.
  exporters::DarshanJobInfo darshan_job_info(const Job& job, const core::RunSnapshot& snap,
                                             const std::string& node) const;
  /// A snapshot of the job to cut the `job` request's pages from (JobPages::page: the record's
  /// fields with rows [offset, offset + limit) of its lists, at most `max_rows` of each, plus
  /// `page`, docs/control.md#job: the answer's size is bounded whatever the job's), with `overrides` replacing the record's members (job_record_edits) and named
  /// `serial` in its pages.
  std::shared_ptr<const JobPages> job_pages(const Job& job, const std::string& version,
                                            uint64_t serial, nlohmann::json overrides,
                                            JobPages::Clock::time_point now,
                                            std::size_t max_rows = control::kLiveJobPageMax) const;
  /// One line per job for `iolens jobs`.
  nlohmann::json job_summary(const Job& job) const;
  /// Processes held in the unattributed set (bounded, kMaxUnattributed).
  std::size_t unattributed_held() const { return unattributed_.size(); }
  /// The most processes the unattributed set holds: past it the earliest started are dropped.
  static constexpr std::size_t kMaxUnattributed = 16384;

  const std::map<std::string, std::unique_ptr<Job>>& jobs() const { return jobs_; }
  Job* find(const std::string& id);
  const TableStats& stats() const { return stats_; }
  std::size_t file_records() const;
  /// Live jobs that have a process alive or a cgroup: syscall hooks are needed while > 0.
  std::size_t active_jobs() const;
  /// The path of a known cgroup id, "" if unknown.
  std::string cgroup_path(uint64_t id) const;
  const jobs::Selector& selector() const { return selector_; }

  /// Everything the table holds, for the daemon's checkpoint (docs/daemon.md#restart-without-loss); the
  /// recorders as opaque binary blobs (core::Recorder::save). `handed_over`: jobs taken out of
  /// the table whose record is not written yet, saved as closing (a daemon that loads this
  /// writes them). `with_live`: core::Recorder::save's, for the table's own jobs (handed-over
  /// ones always keep their live parts: nothing reads them back into those jobs). `buffers`:
  /// byte buffers by job id (the last save's) that the blobs are written into, taken from it;
  /// a job without one gets a fresh buffer.
  nlohmann::json save(const std::vector<const Job*>& handed_over = {}, bool with_live = true,
                      std::map<std::string, std::vector<uint8_t>>* buffers = nullptr) const;
  /// Replaces the table's contents with a saved one. False (and `error`) if it is malformed;
  /// the table is then unchanged.
  bool load(const nlohmann::json& saved, std::string& error);
  core::ClockBase clock() const;
  /// The wall clock was stepped by `delta_ns` (core/wall_clock.hpp): the offset and every wall
  /// time the table holds (jobs' start and end) move with it, so that a record says when things
  /// happened by the clock as it is now set, with the durations the monotonic clock measured.
  void rebase_wall(int64_t delta_ns);
  /// What a record of one of its jobs needs of the table (job_record.hpp).
  RecordBasis record_basis() const;

 private:
  struct Cgroup {
    std::string path;
    std::string job_id;  // non-empty when the cgroup is (in) a job
  };
  /// Whether the parent of `path` is an excluded cgroup inside a traced root: its entry (or
  /// its own parent's) already excludes `path`.
  bool parent_excluded(const std::string& path) const;
  Job& open_job(const jobs::Identity& id, const std::string& rule, int64_t start_ns);
  Job* job_of_cgroup(uint64_t cgroup_id);
  /// The job of a process; nullptr when it is in none, or its job was written and taken.
  Job* job_of_process(const core::ProcKey& p);
  void attribute(Job& job, const core::ProcKey& p, const core::ProcKey& parent,
                 const std::string& comm, uint64_t cgroup_id, uint64_t ts);
  int64_t wall(uint64_t mono) const { return static_cast<int64_t>(mono) + mono_to_wall_; }

  jobs::Selector selector_;
  jobs::Limits limits_;
  int64_t mono_to_wall_;
  CgroupResolver resolve_;
  std::string timing_ = "exact";
  std::shared_ptr<const std::vector<core::AlignmentMount>> alignment_;
  /// When the hooks were detached: [from, to) in monotonic ns, `to` UINT64_MAX while they are.
  /// Events are read within seconds; intervals that ended over kUnhookedKeep ago are dropped.
  std::vector<std::pair<uint64_t, uint64_t>> unhooked_;  // (a deque would make the table not nothrow-movable)
  static constexpr uint64_t kUnhookedKeep = 600'000'000'000ULL;
  uint64_t jobs_unhooked_ = 0;
  std::map<uint64_t, Cgroup> cgroups_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  std::map<core::ProcKey, std::string> proc_job_;
  std::set<core::ProcKey> unattributed_;
  TableStats stats_;
  /// The last name event of each file seen on the node, by (dev, ino, generation): given to a
  /// job whose process uses a file another job's process named first.
  std::map<std::tuple<uint32_t, uint64_t, uint32_t>, core::PathEvent> names_;
  std::size_t names_bytes_ = 0;  // their strings' bytes, bounded by limits.max_path_bytes
  /// Gives the job the file's name if the table has it; false when it has none yet.
  bool give_name(Job& job, const iolens_file_key& key);
  /// `procs`: also fold exited processes past max_processes_per_job.
  std::size_t fold_job(Job& job, std::size_t limit, std::size_t byte_limit,
                       std::vector<core::FileIdentity>* forgotten, bool procs = true);
  void note_unattributed(const core::ProcKey& p);
  std::optional<std::vector<jobs::FileClass>> classes_;
};

/// The `page` object of a paged `job` answer: the totals, and `next` (the next offset, null
/// when this page reached the end of all three lists).
nlohmann::json page_json(std::size_t offset, std::size_t limit, std::size_t processes,
                         std::size_t files, std::size_t by_file);

/// One page of a written record (`text`, iolens.job/1) as JobPages::page pages a live job's: the
/// elements of `processes` and `files` outside [offset, offset + limit) are dropped while
/// parsing, so only the page is ever held as JSON. nullopt when `text` is no JSON object.
std::optional<nlohmann::json> record_page(std::string_view text, std::size_t offset,
                                          std::size_t limit);

/// Labels of a process's own cgroup below its job (container id, Slurm step...).
std::map<std::string, std::string> sub_labels(const jobs::Selector& sel, const std::string& path);

}  // namespace iolens::daemon
