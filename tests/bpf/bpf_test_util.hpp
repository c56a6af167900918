// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Helpers shared by the BPF-tier tests: where cgroup v2 is mounted, small file writes.

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
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

}  // namespace iolens::bpftest
