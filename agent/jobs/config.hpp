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
  uint64_t max_files_per_job = 50000;
  uint64_t max_records = 1000000;
  uint32_t kernel_file_records = 65536;
  /// The kernel's ring buffer for names and process/cgroup events (`ring_size`). A burst of new
  /// files faster than the daemon reads them fills it; drops are counted (lost.events).
  uint32_t ring_bytes = 16u << 20;
};

struct Rotation {
  uint64_t max_bytes = 1ull << 30;
  uint64_t max_age_s = 30ull * 86400;
};

struct Config {
  std::string cgroup_root = "auto";  ///< "auto" or the absolute path of a cgroup2 mount
  std::string output_dir = "/var/lib/iolens/jobs";
  std::string state_dir = "/var/lib/iolens/state";
  std::string pin_dir = "/sys/fs/bpf/iolens";
  std::string socket_path = "/run/iolens/iolens.sock";  ///< YAML key `socket`
  std::string socket_group;                             ///< empty: root only
  uint32_t drain_interval_ms = 1000;
  uint64_t grace_s = 0;            ///< `grace_period`; reserved for the metrics work
  std::string log_level = "info";  ///< trace, debug, info, warn or error
  /// "on-demand": sys_enter/sys_exit attached only while a job is live (and hooks_idle_s
  /// after); "always": from start to stop. Every syscall on the node pays while attached.
  std::string syscall_hooks = "on-demand";
  uint64_t hooks_idle_s = 30;
  Limits limits;
  Rotation rotation;
  std::vector<Rule> rules;  ///< `jobs:`, in file order
};

struct ConfigResult {
  /// Valid settings are applied even when others are in error; use it only when ok().
  Config config;
  std::vector<std::string> errors;
  bool ok() const { return errors.empty(); }
};

/// Parses and validates `yaml_text`; `source_name` prefixes every error. Never throws.
ConfigResult parse_config(std::string_view yaml_text, const std::string& source_name);

/// Reads and parses a file; an unreadable file gives one error "PATH: cannot read: <reason>".
ConfigResult load_config_file(const std::string& path);

/// The roots a kubernetes or slurm rule watches when `roots:` is absent; empty for other kinds.
std::vector<std::string> default_roots(RuleKind kind);

}  // namespace iolens::jobs
