// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The traced command: created stopped (SIGSTOP, before exec) so that tracing is attached before
/// it runs its first instruction, then released with SIGCONT. A stop rather than a read on a
/// pipe: a read would complete after tracing starts and be counted as the command's I/O.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "cli/invoker.hpp"
#include "loader/status.hpp"

namespace iolens::cli {

/// argv[0] as execvp would find it, or an error naming the command.
Status resolve_command(const std::string& name, std::string& path_out);

class SuspendedChild {
 public:
  /// Forks a child that stops itself, waits until it is stopped, and returns. With `as`, the
  /// child first becomes that user (supplementary groups, gid, uid: all of real, effective and
  /// saved, so it cannot come back to root); an error if it cannot (then it never runs).
  Status spawn(const std::vector<std::string>& argv, const std::optional<Invoker>& as = {});
  /// Lets the child exec. Fails (and reaps the child) if the exec failed.
  Status release();
  pid_t pid() const { return pid_; }
  /// Kills and reaps a child that was never released.
  ~SuspendedChild();

 private:
  pid_t pid_ = -1;
  bool released_ = false;
  int err_fd_ = -1;  // parent's end: the child writes {stage, errno} here on failure (CLOEXEC)
};

}  // namespace iolens::cli
