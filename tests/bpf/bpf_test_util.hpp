// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Helpers shared by the BPF-tier tests: where cgroup v2 is mounted, small file writes.

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <fstream>
#include <sstream>
#include <string>

namespace iolens::bpftest {

/// The cgroup2 mount: /sys/fs/cgroup on pure v2 hosts, /sys/fs/cgroup/unified on hybrid ones;
/// "" if there is none.
inline std::string cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::string found;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line);
    std::string id, parent, devno, root, point;
    f >> id >> parent >> devno >> root >> point;
    if (found.empty() || point == "/sys/fs/cgroup") found = point;
  }
  return found;
}

/// Writes `text` to an existing file (a cgroup control file); aborts on failure.
inline void write_text(const std::string& p, const std::string& text) {
  const int fd = open(p.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) std::abort();
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
  close(fd);
}

/// A flag in memory shared with the children forked after it: a child waits for it without a
/// system call (it spins with sched_yield, which no program traces), so however late the test
/// marks it as traced, its traced calls are exactly those it makes after the release. (A child
/// blocked in read() on a pipe when it is marked has that read uncounted: its entry was not seen.)
class ReleaseFlag {
 public:
  ReleaseFlag()
      : flag_(static_cast<std::atomic<int>*>(mmap(nullptr, sizeof(std::atomic<int>),
                                                  PROT_READ | PROT_WRITE,
                                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0))) {
    if (flag_ == MAP_FAILED) std::abort();
    new (flag_) std::atomic<int>(0);
  }
  ~ReleaseFlag() { munmap(flag_, sizeof(*flag_)); }
  ReleaseFlag(const ReleaseFlag&) = delete;
  ReleaseFlag& operator=(const ReleaseFlag&) = delete;

  /// In the child: dies with the test's process, then waits for release().
  void wait() const {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    while (flag_->load() == 0) sched_yield();
  }
  void release() { flag_->store(1); }

 private:
  std::atomic<int>* flag_;
};

}  // namespace iolens::bpftest
