// SPDX-License-Identifier: Apache-2.0
#include "cli/child.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace iolens::cli {
namespace {

// What the child writes on the error pipe before it gives up: which step failed, and errno.
enum ChildStage : int { kExec = 0, kDropPrivileges = 1 };

void child_fail(int fd, ChildStage stage, int code) {
  const int msg[2] = {stage, errno};
  ssize_t w = write(fd, msg, sizeof(msg));
  (void)w;
  _exit(code);
}

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

}  // namespace

Status resolve_command(const std::string& name, std::string& path_out) {
  if (name.empty()) return Status::Error("empty command name", EINVAL);
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name))
      return Status::Error("cannot run '" + name + "': " +
                               (access(name.c_str(), F_OK) == 0 ? "not an executable file"
                                                                 : std::strerror(ENOENT)),
                           ENOENT);
    path_out = name;
    return Status::Ok();
  }
  const char* env = std::getenv("PATH");
  std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find(':', pos);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(pos, end - pos);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + name;
    if (is_executable_file(cand)) {
      path_out = cand;
      return Status::Ok();
    }
    pos = end + 1;
  }
  return Status::Error("command not found: '" + name + "' (not in PATH)", ENOENT);
}

Status SuspendedChild::spawn(const std::vector<std::string>& argv,
                             const std::optional<Invoker>& as) {
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return Status::Error("pipe: " + std::string(std::strerror(errno)), errno);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(err[0]);
    close(err[1]);
    return Status::Error("fork: " + std::string(std::strerror(e)), e);
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. Signals iolens handles are reset by exec.
    close(err[0]);
    // Before the stop, so that a failure is known before tracing starts. Groups first: after
    // setuid there is no privilege left to change them.
    if (as && (setgroups(as->groups.size(), as->groups.data()) != 0 || setgid(as->gid) != 0 ||
               setuid(as->uid) != 0 || getuid() != as->uid || geteuid() != as->uid))
      child_fail(err[1], kDropPrivileges, 126);
    // Spawned before iolens loads its programs: if iolens dies meanwhile, the command must not
    // run untraced. After the credential change, which clears the death signal.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    raise(SIGSTOP);
    prctl(PR_SET_PDEATHSIG, 0);  // released: from here the command outlives iolens as before
    execvp(args[0], args.data());
    child_fail(err[1], kExec, 127);
  }
  close(err[1]);
  pid_ = pid;
  err_fd_ = err[0];
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WUNTRACED);
  } while (r < 0 && errno == EINTR);
  if (r != pid || !WIFSTOPPED(status)) {
    pid_ = -1;
    int msg[2] = {0, 0};
    if (as && r == pid && read(err_fd_, msg, sizeof(msg)) == static_cast<ssize_t>(sizeof(msg)) &&
        msg[0] == kDropPrivileges)
      return Status::Error("cannot run the command as uid " + std::to_string(as->uid) + " gid " +
                               std::to_string(as->gid) + ": " + std::strerror(msg[1]),
                           msg[1]);
    return Status::Error("the command's process did not start", ECHILD);
  }
  return Status::Ok();
}

Status SuspendedChild::release() {
  released_ = true;
  if (kill(pid_, SIGCONT) != 0) return Status::Error("cannot release the command", errno);
  int msg[2] = {0, 0};
  ssize_t n;
  do {
    n = read(err_fd_, msg, sizeof(msg));
  } while (n < 0 && errno == EINTR);
  close(err_fd_);
  err_fd_ = -1;
  if (n == static_cast<ssize_t>(sizeof(msg))) {
    const int e = msg[1];
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return Status::Error(std::strerror(e), e);
  }
  return Status::Ok();  // EOF: the exec succeeded and closed the CLOEXEC pipe
}

SuspendedChild::~SuspendedChild() {
  if (err_fd_ >= 0) close(err_fd_);
  if (pid_ > 0 && !released_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

}  // namespace iolens::cli
