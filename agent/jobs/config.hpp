// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The iolensd configuration (YAML, see docs/daemon-config.md): parsed and validated in one pass
/// that reports every problem at once, each as "SOURCE:LINE:COL: KEY.PATH: message".

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace iolens::jobs {

enum class RuleKind { Kubernetes, Slurm, Systemd, Cgroup, Process };

/// "kubernetes", "slurm", "systemd", "cgroup", "process".
std::string_view rule_kind_name(RuleKind kind);

/// One entry of `jobs:`: which cgroups (or processes) are jobs.
struct Rule {
  RuleKind kind = RuleKind::Kubernetes;
  /// `name:`; defaults to the kind's name. Unique among the rules.
  std::string name;
  /// Cgroup paths (relative to the cgroup root, starting with '/') under which the kernel traces
  /// every task. kubernetes and slurm: `roots:` or default_roots(); systemd: {slice}; cgroup: the
  /// static prefixes of `paths:` (cgroup_glob_static_prefix); process: none.
  std::vector<std::string> roots;
  /// cgroup: path globs (`paths:`); systemd: unit name globs (`units:`, e.g. "train-*.service").
  std::vector<std::string> globs;
  /// systemd only: the slice whose direct child units are matched.
  std::string slice = "/system.slice";
  /// process only: the exact command name (at most 15 bytes) the kernel matches at exec.
  std::string comm;
  /// process only: an optional ECMAScript regex searched in the cmdline, its NULs made spaces.
  std::string cmdline;
};

struct Limits {
  /// The bound on iolensd's RSS (`memory`): the limits below that the config does not give
  /// are derived from it (apply_memory_bound, jobs/memory_bound.hpp); their values here are
  /// what the default bound gives.
  uint64_t memory = 256ull << 20;
  uint64_t max_files_per_job = 12700;
  uint64_t max_records = 35000;
  /// Processes kept per job (`max_processes_per_job`): past it the oldest exited ones are folded
  /// into the job's "<other processes>" row, their counts kept (docs/daemon.md#bounded-memory).
  uint64_t max_processes_per_job = 10000;
  /// Folded (process, file) pairs whose file ids a job keeps (`max_folded_files_per_job`): the
  /// ids keep the per-process and distinct file counts of folded records exact, 16 bytes each;
  /// past it the oldest exited processes fold into "<other processes>" as above, so that a job
  /// whose workers are re-forked every epoch over a million files stays bounded.
  uint64_t max_folded_files_per_job = 250000;
  /// Bytes of file names (paths, rename targets) kept per job and for all jobs: records are
  /// folded until the names fit, as they are past max_files_per_job / max_records, so long
  /// paths fold like more files would (`max_path_bytes_per_job`, `max_path_bytes`).
  uint64_t max_path_bytes_per_job = 5ull << 20;
  uint64_t max_path_bytes = 5ull << 20;
  uint32_t kernel_file_records = 65536;
  /// The kernel's file records made ready at start (`kernel_file_records_preallocated`): a new
  /// (process, file) record then costs the traced call microseconds less (bench/README.md
  /// "iolensd: preallocated file records"), for ~1.41 KiB of kernel memory per record from the
  /// start (90.5 MiB at the default size) instead of as records are made. When the config does
  /// not say (given.kernel_file_records_preallocated), the daemon chooses: what pinned state it
  /// resumes has, else preallocated on Linux 6.1 and later (docs/daemon.md "Sizing").
  bool kernel_file_records_preallocated = true;
  /// Entries of the kernel's cgroup exclusion map: excluded cgroups directly below a traced
  /// one (docs/daemon.md#job-selection). Users who may create cgroups there can fill it; its
  /// fill never takes a job's entry, and what does not fit is counted (unexcluded_cgroups).
  uint32_t kernel_cgroup_exclusions = 65536;
  /// Entries of the kernel's per-(process, device) block map (`kernel_block_records`): block
  /// I/O of a pair that finds it full is counted (lost.block_records). Pinned: another size
  /// discards the pinned kernel state at the next start.
  uint32_t kernel_block_records = 16384;
  /// Entries of each in-flight map (`kernel_inflight`: O_DIRECT calls, io_uring requests, block
  /// requests between submission and completion); 0 (unset) keeps 8192, 8192 and 16384. What
  /// does not fit loses its time only, counted (direct_inflight, uring_inflight,
  /// block_inflight). Not pinned.
  uint32_t kernel_inflight = 0;
  /// The kernel's ring buffer for names and process/cgroup events (`ring_size`). A burst of new
  /// files faster than the daemon reads them fills it; drops are counted (lost.events).
  uint32_t ring_bytes = 16u << 20;
  /// The kernel's ring for per-call records while a capture runs (`trace_ring_size`): it must
  /// hold what the job does between two of the daemon's reads (10-50 ms); what does not fit is
  /// lost and counted in the capture's file. Allocated (locked) for the daemon's lifetime.
  uint32_t trace_ring_bytes = 16u << 20;
  /// Which of the limits derived from `memory` the config (or a command-line flag) gave, and
  /// whether it said kernel_file_records_preallocated (else the daemon chooses).
  struct Given {
    bool memory = false, max_files_per_job = false, max_records = false, max_path_bytes = false,
         max_path_bytes_per_job = false, kernel_file_records_preallocated = false;
  } given;
};

struct Rotation {
  uint64_t max_bytes = 1ull << 30;
  uint64_t max_age_s = 30ull * 86400;
};

/// A class of files for the metrics (`metrics.classes`): files whose path starts with one of
/// the prefixes (plain string prefixes; the first class that matches wins).
struct FileClass {
  std::string name;
  std::vector<std::string> prefixes;
};

/// The classes used when `metrics.classes` is absent (docs/metrics.md).
std::vector<FileClass> default_file_classes();

/// `metrics:` (docs/metrics.md, docs/daemon-config.md#metrics).
struct MetricsConfig {
  /// "host:port" ("[v6]:port"); port 0 picks a free one; "" disables the endpoint.
  std::string listen = "127.0.0.1:9464";
  std::string node;             ///< the `node` label; "" = the host name
  uint32_t top_files = 0;       ///< per-file series per job (K, plus one "<other>"); 0 = none
  uint32_t max_jobs = 1000;     ///< jobs with series at most; the others are counted
  std::vector<FileClass> classes = default_file_classes();
  std::string username;         ///< basic auth when non-empty
  std::string password_file;    ///< its password, first line
  std::string tls_cert_file;    ///< HTTPS with this PEM (certificate and key) when non-empty
  /// Server threads: each client connection holds one until its request is answered or timed
  /// out, so this many slow clients at once are needed to delay a scrape.
  uint32_t threads = 8;
  /// A client must send its whole request (and take the answer) within this; then it is
  /// dropped (civetweb's default is 30 s).
  uint32_t request_timeout_ms = 5000;
};

struct Config {
  std::string cgroup_root = "auto";  ///< "auto" or the absolute path of a cgroup2 mount
  std::string output_dir = "/var/lib/iolens/jobs";
  /// Also write each job's Darshan log (`<record stem>.darshan`) next to its JSON record.
  bool darshan_logs = false;
  /// `record_compression`: "zstd" (job records written as `.json.zst`, one zstd frame) or
  /// "none" (`.json`). docs/daemon.md#output-files.
  std::string record_compression = "zstd";
  std::string state_dir = "/var/lib/iolens/state";
  std::string pin_dir = "/sys/fs/bpf/iolens";
  std::string socket_path = "/run/iolens/iolens.sock";  ///< YAML key `socket`
  std::string socket_group;                             ///< empty: root only
  uint32_t drain_interval_ms = 1000;
  /// `drain_piece`: a drain round walks the kernel's maps in pieces of about this long, the
  /// control socket answered between them (docs/daemon.md#responsiveness). 1 ms to 1 s.
  uint32_t drain_piece_ms = 20;
  /// `grace_period`: an ended job's series stay on /metrics this long (whole seconds).
  uint64_t grace_s = 120;
  std::string log_level = "info";  ///< trace, debug, info, warn or error
  /// "on-demand": sys_enter/sys_exit attached only while a job is live (and hooks_idle_s
  /// after); "always": from start to stop. Every syscall on the node pays while attached.
  std::string syscall_hooks = "on-demand";
  /// "exact": calls timed from entry to exit (sys_enter on every system call of the node while
  /// the hooks are attached); "off": no entry program, times not measured (docs/counters.md
  /// "Timing"; loader::Options::timing).
  std::string timing = "exact";
  /// Optional kernel programs not to load (loader::Options::disabled_programs).
  std::vector<std::string> disabled_programs;
  uint64_t hooks_idle_s = 30;
  Limits limits;
  Rotation rotation;
  MetricsConfig metrics;
  std::vector<Rule> rules;  ///< `jobs:`, in file order; then run_rule(runs) when runs is set
  /// `runs:`: the cgroup (relative to the cgroup root) under which iolensd makes one cgroup per
  /// `iolens run` that asks it (docs/run.md#through-iolensd); empty: none.
  std::string runs;
};

/// The rule name of the runs' jobs (kRunRuleName), and the rule itself: a cgroup rule whose
/// jobs are `<runs>/run-*`, rooted at `runs`.
inline constexpr const char* kRunRuleName = "iolens-run";
Rule run_rule(const std::string& runs);

struct ConfigResult {
  /// Valid settings are applied even when others are in error; use it only when ok().
  Config config;
  std::vector<std::string> errors;
  bool ok() const { return errors.empty(); }
};

/// Parses and validates `yaml_text`; `source_name` prefixes every error. Never throws.
ConfigResult parse_config(std::string_view yaml_text, const std::string& source_name);

/// Why `listen` is not a valid `metrics.listen` value ("" when it is; "" itself is: disabled).
std::string check_listen_address(std::string_view listen);

/// Reads and parses a file; an unreadable file gives one error "PATH: cannot read: <reason>".
ConfigResult load_config_file(const std::string& path);

/// The roots a kubernetes or slurm rule watches when `roots:` is absent; empty for other kinds.
std::vector<std::string> default_roots(RuleKind kind);

}  // namespace iolens::jobs
