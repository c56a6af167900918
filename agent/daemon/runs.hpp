// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Runs: `iolens run` commands that iolensd counts with its own, already loaded programs
/// (docs/run.md#through-iolensd, docs/control.md#run). The client forks its command stopped and
/// asks; the daemon makes a fresh cgroup `run-<daemon pid>-<n>` under its run root (`runs:`, a
/// watched root whose children are jobs), moves the command into it, and at the end sends the
/// job's recorder back instead of writing a record. The checks are pure (unit-tested); the
/// cgroup file system is reached only through RunCgroups.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "control/unique_fd.hpp"
#include "loader/status.hpp"

namespace iolens::daemon {

/// What one client can make the daemon hold: runs open at once per uid, and in all. A run
/// costs a cgroup, a job and a descriptor; a user starting more gets `failed` until one ends.
inline constexpr std::size_t kMaxRunsPerUid = 64;
inline constexpr std::size_t kMaxRuns = 1024;

/// Why the peer (`peer_pid`, `peer_uid`) may not put `pid` in a run, from `pid`'s
/// /proc/PID/status text; empty when it may. The process must be the peer's own child
/// (PPid: the client forked it, and it cannot be reaped and its pid reused while the client
/// waits for the answer) and, unless the peer is root, all four of its uids must be the peer's:
/// a user moves only his own commands into a counted cgroup.
std::string run_pid_refusal(std::string_view proc_status, pid_t pid, pid_t peer_pid,
                            uid_t peer_uid);

/// The real uid in /proc/PID/status text, or nullopt.
std::optional<uid_t> status_uid(std::string_view proc_status);

/// The cgroup v2 path ("0::/user.slice/x" → "/user.slice/x") in /proc/PID/cgroup text.
std::optional<std::string> cgroup_v2_path(std::string_view proc_cgroup);

/// "populated 0|1" of a cgroup.events text.
std::optional<bool> cgroup_populated(std::string_view events);

/// One run while its client waits.
struct Run {
  uint64_t id = 0;
  std::string name;         // run-<daemon pid>-<id>, in the run root
  std::string path;         // relative to the cgroup mount
  uint64_t cgroup_id = 0;
  std::string job_id;
  uid_t uid = 0;            // the peer's, who may end it
  pid_t client = 0;         // the peer's pid
  pid_t root = 0;           // the command
  std::string origin;       // the command's cgroup before the move: leftovers go back there
  /// The read end of a pipe whose write end only the client holds: readable (EOF) once the
  /// client is gone. -1: orphaned (a run a previous daemon left), ended once its cgroup empties.
  control::UniqueFd alive;
};

/// The run root in the cgroup file system, used through its descriptor.
class RunCgroups {
 public:
  /// Opens `mount` + `rel` (creating it, 0755, root's: only the daemon makes cgroups there).
  static std::unique_ptr<RunCgroups> open(const std::string& mount, const std::string& rel,
                                          std::string& error);
  ~RunCgroups();
  RunCgroups(const RunCgroups&) = delete;
  RunCgroups& operator=(const RunCgroups&) = delete;

  const std::string& rel() const { return rel_; }
  /// mkdir `name`; its cgroup id (inode) in `id`.
  Status make(const std::string& name, uint64_t& id);
  /// Writes `pid` to `name`/cgroup.procs.
  Status move(const std::string& name, pid_t pid);
  /// Moves every process still in `name` to the cgroup `to` (relative to the mount), or to the
  /// mount's root cgroup when `to` is gone. Returns how many were moved.
  std::size_t evacuate(const std::string& name, const std::string& to);
  /// rmdir `name`, retried for up to 200 ms while the kernel still counts an exiting task.
  Status remove(const std::string& name);
  std::optional<bool> populated(const std::string& name) const;
  /// The `run-*` cgroups in the root (left by an earlier daemon).
  std::vector<std::string> list() const;

 private:
  RunCgroups(std::string mount, std::string rel, int fd)
      : mount_(std::move(mount)), rel_(std::move(rel)), fd_(fd) {}
  std::string mount_;
  std::string rel_;
  int fd_;
};

}  // namespace iolens::daemon
