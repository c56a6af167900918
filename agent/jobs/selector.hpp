// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The selection rules applied: which cgroups the kernel must trace, and what each cgroup is (a
/// job, an ancestor that may hold jobs, or nothing iolensd cares about). Pure: paths in, verdicts
/// out; the daemon feeds it the cgroups it discovers.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/config.hpp"
#include "jobs/identity.hpp"

namespace iolens::jobs {

enum class Verdict {
  Job,        ///< the cgroup is a job's cgroup or lies below one
  Container,  ///< may hold jobs below it (e.g. /kubepods.slice): keep tracing it
  Excluded,   ///< no job can be at or below it
};

struct Classification {
  Verdict verdict = Verdict::Excluded;
  std::optional<Identity> identity;  ///< set for Job
  std::string rule;                  ///< the deciding rule's name; empty for Excluded
};

class Selector {
 public:
  /// `rules` as parse_config returns them. Throws std::invalid_argument for a rule that cannot
  /// work: a root, slice or glob that is not a canonical cgroup path, or a cmdline that is not a
  /// valid regex (parse_config reports all of those as errors first). Kubernetes and slurm rules
  /// without roots watch default_roots().
  explicit Selector(std::vector<Rule> rules);

  /// Paths (relative to the cgroup root) under which the kernel must trace every task: the
  /// kubernetes and slurm roots, systemd slices, and each cgroup glob's static prefix (its
  /// components before the first one with a wildcard; the whole path when there is none). In rule
  /// order, without duplicates, and without a path that lies under another one.
  std::vector<std::string> watch_roots() const;

  /// What a cgroup is. Each rule gives a verdict; the job whose cgroup is the outermost wins (so
  /// every cgroup below a job belongs to that job, whatever rules say about it), and among
  /// rules that name the same job cgroup, the first. Otherwise Container if any rule says so
  /// (its name is `rule`), else Excluded. A malformed path (see split_cgroup_path) is Excluded.
  ///
  /// Per rule: a strict ancestor of one of its roots is Container. Below a root, kubernetes and
  /// slurm follow match_kubernetes / match_slurm (Job; Ancestor or Before: Container; Off:
  /// Excluded, but a root itself is at least Container). systemd: the slice's direct child whose
  /// name matches a unit glob is the job; other children are Excluded. cgroup: the job is the
  /// shortest prefix of the path that matches a glob (`**` matches zero or more components);
  /// a path that some extension could match is Container; kind "cgroup", id "cgroup/<job path>",
  /// with identify()'s labels and sub when identify() names the same job cgroup.
  Classification classify(std::string_view cgroup_path) const;

  /// Process rules: the command names the kernel matches at exec, without duplicates.
  std::vector<std::string> process_comms() const;

  /// The name of the first process rule matched by a process that exec'd with this comm (cut at
  /// its first NUL) and cmdline (NUL-separated, as /proc/PID/cmdline). Only the first
  /// kMaxCmdlineBytes of the cmdline are searched.
  std::optional<std::string> match_process(std::string_view comm, std::string_view cmdline) const;

  /// Bounds the CPU one exec can cost the daemon; a longer cmdline is cut before matching.
  static constexpr std::size_t kMaxCmdlineBytes = 64 * 1024;

  const std::vector<Rule>& rules() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // immutable once built: copies share it, threads may too
};

/// The cgroup2 mount to use: `configured` ("auto" or an absolute path) against the text of
/// /proc/self/mountinfo. auto: /sys/fs/cgroup if it is cgroup2, else /sys/fs/cgroup/unified
/// (systemd's hybrid layout), else the first cgroup2 mount. `error` is set (and `path` empty)
/// when there is none, or when the configured path is not a cgroup2 mount point.
struct RootResult {
  std::string path;
  std::string error;
};
RootResult resolve_cgroup_root(const std::string& configured, std::string_view mountinfo_text);

// Globs, shared with the config checks.

/// Whether one path component matches one glob component: `*` any bytes, `?` one byte, `[abc]`,
/// `[a-z]`, `[!a-z]` or `[^a-z]` one byte of (or not of) a set; `]` first in a set is literal.
/// No escapes; bytes compare as bytes.
bool glob_component_matches(std::string_view pattern, std::string_view component);

/// Whether a glob component contains `*`, `?` or `[`.
bool has_wildcard(std::string_view pattern);

/// An empty string when `glob` is a valid name glob (one component: no '/', no unterminated
/// '['), else why not.
std::string check_name_glob(std::string_view glob);

/// An empty string when `glob` is a valid cgroup path glob for a cgroup rule, else why not.
/// Besides the syntax (absolute, no empty/./.. component, `**` only as a whole component), it
/// refuses a wildcard in the first component (the kernel would trace the whole machine) and a
/// trailing `**` (the job is the shortest matching prefix, so it would add nothing).
std::string check_cgroup_glob(std::string_view glob);

/// An empty string when `pattern` is a usable `cmdline` regex (ECMAScript, at most
/// kMaxCmdlineRegexBytes, no back-references), else why not.
std::string check_cmdline_regex(std::string_view pattern);
inline constexpr std::size_t kMaxCmdlineRegexBytes = 1024;

/// The components of `glob` before the first one with a wildcard, as a path ("/a/b/*/c" ->
/// "/a/b"); the whole glob when it has none.
std::string cgroup_glob_static_prefix(std::string_view glob);

}  // namespace iolens::jobs
