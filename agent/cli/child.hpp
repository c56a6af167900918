// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The traced command: created stopped (blocked on a pipe) so that tracing is attached before it
/// runs its first instruction, then released.

#include <sys/types.h>

#include <string>
#include <vector>

#include "loader/status.hpp"

namespace iolens::cli {

/// argv[0] as execvp would find it, or an error naming the command.
Status resolve_command(const std::string& name, std::string& path_out);

class SuspendedChild {
 public:
  /// Forks a child that waits for release() and then execs `argv`.
  Status spawn(const std::vector<std::string>& argv);
  /// Lets the child exec. Fails (and reaps the child) if the exec failed.
  Status release();
  pid_t pid() const { return pid_; }
  ~SuspendedChild();

 private:
  pid_t pid_ = -1;
  int go_fd_ = -1;   // parent's end: one byte releases the child
  int err_fd_ = -1;  // parent's end: the child writes errno here if exec fails (CLOEXEC)
};

}  // namespace iolens::cli
