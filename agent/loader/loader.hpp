// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The only module that touches libbpf: loads and attaches the kernel programs, marks the traced
/// root, drains the maps and the ring buffer. Everything above it sees plain records.

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/block.hpp"
#include "core/counters.hpp"
#include "iolens_abi.h"
#include "loader/phase_times.hpp"
#include "loader/preflight.hpp"
#include "loader/record_maps.hpp"
#include "loader/status.hpp"
#include "loader/trace_control.hpp"

namespace iolens::loader {

/// Whether the two builds' objects have the same maps (name, type, key and value sizes,
/// entries, flags) and programs (name, type, expected attach type, section), in the same order:
/// what the skeleton they share assumes beyond the layout of their variables, which the build
/// compares (bpf/CMakeLists.txt). Opens both, loads nothing: no privileges needed.
Status program_builds_alike();

struct Options {
  std::string btf_path = "/sys/kernel/btf/vmlinux";
  /// Auto: `casts` where the kernel has what it needs, else `plain`, and `plain` again if the
  /// kernel refuses the `casts` build. IOLENS_BPF_BUILD in the environment (auto, casts or
  /// plain) replaces it.
  ProgramBuild program_build = ProgramBuild::Auto;
  /// Where the small BTF that CO-RE relocates against is kept (loader/core_btf.hpp), made by
  /// `bpftool` on first use; "" to relocate against the kernel's whole BTF. Only with the
  /// default btf_path. When not "", IOLENS_CACHE_DIR and IOLENS_BPFTOOL in the environment
  /// replace these two (IOLENS_CACHE_DIR="" turns the cache off), except under sudo
  /// (SUDO_UID set): the invoking user does not choose what root runs or writes.
  std::string core_btf_cache = "/var/cache/iolens";
  std::string bpftool = "/usr/sbin/bpftool";
  uint32_t max_file_records = 65536;   // kernel map size; more are drained/folded, not lost
  /// Preallocated file records (bpf/README.md "Two tiers of records"): the first
  /// `fast_file_records` records live in a preallocated map, where making one costs a fifth of
  /// what it costs in a map whose memory follows use; the rest, up to max_file_records in all,
  /// in such a map (two tiers: a run only, no pin_dir, no select_jobs). At or above
  /// max_file_records: one preallocated map (the daemon's choice). 0: one map whose memory
  /// follows use.
  uint32_t fast_file_records = 0;
  /// With pins to resume whose `files` map was made the other way (preallocated or not): keep
  /// that map and resume, instead of discarding the pinned state (the daemon, when its
  /// configuration does not say which it wants). fast_file_records() tells which was kept.
  bool file_records_follow_pins = false;
  uint32_t max_other_records = 8192;
  /// Entries of the `tallies_more` map (side entries of the records with more than
  /// IOLENS_TALLY_SLOTS distinct access sizes or strides; memory follows use). 0: a sixteenth of
  /// max_file_records, at least 256. Full: values untallied, counted (lost.tally_slots).
  uint32_t max_tally_records = 0;
  /// Entries of each in-flight map (O_DIRECT calls, io_uring requests, block requests between
  /// submission and completion); 0 keeps the object's sizes (8192, 8192 and 16384). Not
  /// pinned: a restarted daemon makes them anew. What does not fit is counted (lost.
  /// direct_inflight, uring_inflight, block_inflight), never silently dropped.
  uint32_t max_inflight = 0;
  /// Entries of the per-(process, device) block map (pinned in daemon mode; another size
  /// discards the pinned state). What does not fit is counted (lost.block_records).
  uint32_t max_block_records = 16384;
  /// Entries of the cgroup exclusion map (daemon mode): excluded cgroups directly below a
  /// traced one. Traced cgroups have their own map (IOLENS_CGROUP_TRACE_MAX entries).
  uint32_t max_cgroup_exclusions = 65536;
  uint32_t ring_bytes = 8u << 20;
  /// Size of the trace-mode ring (one 88-byte record per traced call, see set_trace_mode):
  /// a power of two, at least a page. Allocated whole at load (kernel memory), mapped only in
  /// trace mode (consume_trace).
  uint32_t trace_ring_bytes = 16u << 20;
  bool verbose = false;                // libbpf debug output
  /// Daemon mode: select tasks by cgroup (select_cgroup) and comm (select_comm), report cgroup
  /// creation and removal, and attach the syscall hooks only when asked (set_syscall_hooks).
  bool select_jobs = false;
  /// Pin maps and links under this bpffs directory so that a restarted agent continues them
  /// (daemon mode). Empty: nothing pinned, everything goes away with the agent.
  std::string pin_dir;
  /// Optional programs (those below the system calls: page cache, faults, O_DIRECT, io_uring,
  /// writeback, block layer) not to load, by program name; reported as "disabled by
  /// configuration". Core programs cannot be disabled.
  std::vector<std::string> disabled_programs;
  /// How calls are timed (enum iolens_timing, docs/counters.md "Timing"). IOLENS_TIMING_OFF
  /// attaches no sys_enter program (close's entry comes from its classic tracepoint, which
  /// needs tracefs: the loader mounts it, and where it cannot, times exactly and says why).
  iolens_timing timing = IOLENS_TIMING_EXACT;
  /// Whether set_trace_mode may turn a trace on. false (`iolens run` without --trace) makes
  /// trace mode's code dead in sys_exit: on Linux 6.8+ the verifier walks a quarter fewer of
  /// its instructions (bpf/README.md "Trace mode").
  bool trace_calls = true;
};

/// What a start with pinning found: a previous agent's live state, or why it was discarded.
struct PinState {
  bool resumed = false;        // maps and links of a previous agent were found and reused
  std::string discarded;       // non-empty: a previous agent's pins existed but were removed (why)
  int64_t mono_to_wall_ns = 0; // clock base of the maps when resumed
  uint64_t created_wall_ns = 0;
};

/// One program and whether it is attached; failures are reported, never hidden.
struct ProgramState {
  std::string name;
  bool attached = false;
  std::string error;
};

/// The kernel's per-CPU `stats` counters (IOLENS_STAT_*), then the programs' recursion misses
/// (Loader::program_misses, summed) at kProgramMisses.
constexpr uint32_t kProgramMisses = IOLENS_NR_STATS;
using KernelStats = std::array<uint64_t, IOLENS_NR_STATS + 1>;

/// The kernel's loss counters under the names docs/counters.md ("lost") uses, one table for
/// `iolens run` and iolensd. Without `job_events` (daemon mode only: iolensd adds it).
std::vector<std::pair<std::string, uint64_t>> kernel_losses(const KernelStats& st);

class Loader : public RecordMaps, public TraceControl {
 public:
  /// Opens, loads and attaches every program. On failure returns nullptr and sets `status`.
  static std::unique_ptr<Loader> create(const Options& opts, Status& status);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts tracing `pid` (and, through fork, all it creates). Call before it runs the job.
  Status trace_process(pid_t pid);
  /// Stops tracing `pid`'s main thread (a process rule's candidate that did not match).
  Status untrace_process(pid_t pid);

  /// Daemon mode. Tasks at or below cgroup `id` are traced (TRACE) or not (EXCLUDE); the
  /// nearest entry decides. Takes effect for tasks that fork, exec or move from now on; call
  /// scan_tasks() to apply it to the tasks already there. TRACE entries go to `cgroup_sel`,
  /// EXCLUDE ones to `cgroup_excl` (the cgroup's entry in the other map is removed): a full
  /// exclusion map fails with E2BIG and never takes a traced cgroup's slot.
  Status select_cgroup(uint64_t id, uint32_t action);
  Status unselect_cgroup(uint64_t id);
  /// The cgroup ids of the selection maps now (TRACE, EXCLUDE), in one batch per syscall.
  struct SelectionEntries {
    std::vector<uint64_t> traced, excluded;
  };
  SelectionEntries selection_entries() const;
  uint32_t max_cgroup_exclusions() const { return max_cgroup_exclusions_; }
  /// Processes that exec a program with this comm are traced wherever they run.
  Status select_comm(const std::string& comm);
  /// Runs the task iterator: marks every task now in a selected cgroup, unmarks cgroup-selected
  /// ones whose cgroup is no longer selected. Each change arrives as a mark event.
  /// `report_all`: also send a mark event for every process already traced (after a restart).
  Status scan_tasks(bool report_all = false);
  /// Attaches or detaches sys_enter/sys_exit: every syscall on the machine pays for them while
  /// attached (bench/README.md), so the daemon attaches them only while a job is alive.
  Status set_syscall_hooks(bool attached);
  bool syscall_hooks() const;
  /// When the syscall hooks a previous daemon left attached (resumed from their link pins) were
  /// attached: the wall-clock time of their link pin (bpffs stamps it at creation, right after
  /// the attach). nullopt when they are not attached from a previous daemon's pins.
  std::optional<int64_t> syscall_hooks_pinned_wall_ns() const;
  /// The timing the programs run with: Options::timing, unless off was asked for and could
  /// not be had (timing_note() says why).
  iolens_timing timing() const { return timing_; }
  const std::string& timing_note() const { return timing_note_; }
  /// The build of the programs loaded ("casts" or "plain"), and why that one.
  const std::string& program_build() const { return program_build_; }
  const std::string& program_build_note() const { return program_build_note_; }
  /// Daemon mode: what start-up found in pin_dir.
  const PinState& pin_state() const { return pin_state_; }
  /// Removes every pin, so the maps and programs go away with this agent (a clean stop).
  void unpin_all();
  /// Entries of a map now, by walking its keys (a syscall each); -1 if unknown.
  int64_t map_entries(const std::string& name) const;

  /// Hands every pending ring-buffer record to `sink`, or (`deadline_ns`, CLOCK_MONOTONIC) those
  /// it has time for: the rest stays in the ring for the next call (its fd stays readable).
  /// Never blocks. Returns records consumed, or a negative errno.
  using EventSink = std::function<void(std::span<const uint8_t>)>;
  int consume_events(const EventSink& sink, int64_t deadline_ns = 0);
  /// Whether the last consume_events() stopped at its deadline with records left unread (most
  /// events do not wake a reader: only this says the ring is behind).
  bool events_cut_short() const;
  /// An fd that polls readable when the kernel woke the ring (cgroup and mark events do).
  int events_fd() const;

  // The record maps' walk (drain_files, drain_others) and its types: loader/record_maps.hpp.
  Status drain_files(const RemovePredicate& remove, const RecordSink& sink,
                     std::vector<iolens_file_key>* deferred = nullptr,
                     WalkPosition* at = nullptr, int64_t deadline_ns = 0) override;
  Status drain_others(const RemovePredicate& remove, const RecordSink& sink,
                      std::vector<iolens_file_key>* deferred = nullptr,
                      WalkPosition* at = nullptr, int64_t deadline_ns = 0) override;
  void delete_files(const std::vector<iolens_file_key>& keys) override;
  /// The kernel sends each file's name once; after the agent forgot names (folded records),
  /// this makes it send them again if the files are used again. Entries of another
  /// generation (the inode number reused) are left alone.
  struct NameId {  // the layout of iolens_name_id (checked in loader.cpp)
    uint64_t ino;
    uint32_t dev;
    uint32_t gen;
  };
  /// In daemon mode by the `forget_names` program, one system call for up to 4,096 names
  /// (IOLENS_FORGET_NAMES_MAX); else, or if the kernel refuses that run (logged once), or with
  /// `by_program` false (tests), by a lookup and an update a name. The caller bounds how many
  /// at a time.
  void forget_names(std::span<const NameId> ids, bool by_program = true);
  /// Has the kernel send every file's name again with its next new record: clears the `named`
  /// mark of every file in seen_files. For a daemon that continues an earlier one's kernel
  /// state, whose names it did not inherit (the node-wide name cache is not saved). Returns the
  /// marks cleared.
  std::size_t forget_all_names();
  /// Whether forget_names still runs the program (false once the kernel refused it).
  bool forgets_by_program() const;
  /// Names forget_names was asked to clear by the program and cleared by hand (the program
  /// refused, out of memory, or an entry it could not read); 0 while the program does its work.
  uint64_t names_cleared_by_hand() const { return names_cleared_by_hand_; }
  void delete_others(const std::vector<iolens_file_key>& keys) override;

  /// Every (process, device) record of the block layer (bpf/iolens_block.bpf.h), as it is now.
  std::vector<core::BlockRecord> read_blocks();
  void delete_blocks(const std::vector<iolens_block_key>& keys);

  /// Every process's losses (the `proc_lost` map, ABI 11: each kernel loss charged to the process
  /// it concerns), as they are now. Usually none.
  std::vector<std::pair<iolens_proc_key, iolens_proc_lost>> read_proc_losses();
  /// Takes these entries out of the kernel, each read and deleted in one step (what the kernel
  /// charged since read_proc_losses is in the value returned, not lost); those already gone are
  /// left out.
  std::vector<std::pair<iolens_proc_key, iolens_proc_lost>> take_proc_losses(
      const std::vector<iolens_proc_key>& keys);
  /// Removes from the kernel's block in-flight map the counted requests that core::
  /// block_request_untimed() says will never be timed (issued at least `min_age_ns` ago; 0: all
  /// counted ones still there) and adds them to the IOLENS_STAT_BLOCK_UNTIMED_SWEPT counter,
  /// so that a block_rq_complete the kernel never ran is counted (`block_untimed`) and its
  /// entry does not hold a slot forever. Returns how many; `owners` gets the process of each.
  uint64_t sweep_block_inflight(uint64_t min_age_ns,
                                std::vector<iolens_block_key>* owners = nullptr);
  /// Adds `n` to a `stats` slot that only user space writes (IOLENS_STAT_BLOCK_UNTIMED_SWEPT,
  /// IOLENS_STAT_LOSSES_NO_JOB): it is pinned with the rest, so it outlives this agent.
  Status add_user_stat(uint32_t index, uint64_t n);

  /// Ring positions (bytes since the ring was created). The consumer position lives in the
  /// ring's memory, so it survives the agent when the ring is pinned.
  uint64_t ring_consumer_pos() const override;
  uint64_t ring_producer_pos() const override;
  uint64_t ring_size() const;
  /// Moves the consumer back to `pos` so that records consumed since are read again (a
  /// restarted daemon replays what it consumed after its last saved state). Fails when the
  /// producer may have overwritten them (it ran more than the ring's size past `pos`).
  Status rewind_ring(uint64_t pos);

  // Trace mode (set_trace_mode, add_trace_pid, consume_trace): loader/trace_control.hpp.
  Status set_trace_mode(iolens_trace_mode mode, int cgroup_fd = -1) override;
  iolens_trace_mode trace_mode() const;
  Status add_trace_pid(uint32_t tgid) override;
  int consume_trace(const TraceSink& sink) override;
  /// An fd that polls readable when the trace ring is more than half full; -1 while the ring
  /// is not mapped (no trace).
  int trace_fd() const;
  uint64_t trace_ring_size() const override;
  uint64_t trace_records_made() const override { return stat(IOLENS_STAT_TRACE_RECORDS); }
  uint64_t trace_records_lost() const override { return stat(IOLENS_STAT_TRACE_LOST); }

  /// Sums of the per-CPU drop/failure counters, and at kProgramMisses the runs of iolens's
  /// programs the kernel skipped (program_misses()).
  KernelStats stats() const;
  /// Per loaded program, the times the kernel did not run it because it was already running on
  /// that CPU (bpf_prog_info.recursion_misses): e.g. block_rq_complete in a softirq interrupted
  /// by a hard interrupt that completes another request. Each is an event iolens did not see.
  std::vector<std::pair<std::string, uint64_t>> program_misses() const;
  /// One of them (cheap enough to poll every few milliseconds).
  uint64_t stat(uint32_t index) const;
  const std::vector<ProgramState>& programs() const { return programs_; }
  /// All the tiers' entries (Options::max_file_records).
  uint32_t max_file_records() const override { return max_file_records_; }
  uint64_t file_records_created() const override {
    return stat(IOLENS_STAT_FILE_RECORDS_CREATED);
  }
  /// Entries of the preallocated first tier; 0 when there is one tier.
  uint32_t fast_file_records() const { return fast_file_records_; }
  /// How long each step of create() took (IOLENS_TIMING, bench/startup.py).
  const PhaseTimes& start_times() const { return start_times_; }

 private:
  struct Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  /// One try of create(). `core_btf_file`: the cached small CO-RE BTF's path when a CO-RE
  /// relocation failed with it (create() then tries the kernel's BTF), else left alone.
  /// `casts_refused`: the kernel refused to load the casts build (create() tries the plain one).
  static std::unique_ptr<Loader> create_once(const Options& opts,
                                             const std::map<std::string, std::string>& left_out,
                                             Status& status, std::string& failed_prog,
                                             std::string& failed_line, PhaseTimes& times,
                                             std::string& core_btf_file, bool& casts_refused);
  /// `sides`: the map's records have side entries (`tallies_more`: the file tiers).
  Status drain(int map_fd, const RemovePredicate& remove, const RecordSink& sink,
               std::vector<iolens_file_key>* deferred, WalkPosition* at, int64_t deadline_ns,
               bool sides);
  /// The side entries as they are now, for the live records of the drain that begins.
  void read_sides();
  /// After a whole walk of the file tiers: deletes the side entries read when it began that
  /// no record owns, counting them (IOLENS_STAT_TALLY_ORPHANS).
  void sweep_sides();
  Status attach_one(const std::string& name, bool pin);
  void set_program_state(const std::string& name, bool attached, const std::string& error);
  void delete_keys(int map_fd, const std::vector<iolens_file_key>& keys);
  void clear_trace_pids();

  std::unique_ptr<Impl> impl_;
  std::vector<ProgramState> programs_;
  PinState pin_state_;
  PhaseTimes start_times_;
  std::string pin_dir_;
  uint32_t max_file_records_ = 0;
  uint32_t fast_file_records_ = 0;
  /// FILE_RECORDS_TWICE as of the last drain of the spill tier: while it has not moved, no key
  /// can be in both tiers and the drain does not look for one.
  uint64_t twice_seen_ = 0;
  uint32_t max_cgroup_exclusions_ = 0;
  iolens_timing timing_ = IOLENS_TIMING_EXACT;
  std::string timing_note_;
  std::string program_build_ = "plain";
  std::string program_build_note_;
  bool batch_ok_ = true;  // cleared when the kernel refuses batched map reads
  bool forget_run_ok_ = true;  // cleared when the kernel refuses to run `forget_names`
  uint64_t names_cleared_by_hand_ = 0;
  uint64_t forget_short_runs_ = 0;
};

}  // namespace iolens::loader
