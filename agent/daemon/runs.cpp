// SPDX-License-Identifier: Apache-2.0
#include "daemon/runs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/private_dir.hpp"

namespace iolens::daemon {
namespace {

/// The value of "Key:\t..." in a /proc status text (up to the line's end), or nullopt.
std::optional<std::string_view> status_field(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':')
      return line.substr(key.size() + 1);
    pos = end + 1;
  }
  return std::nullopt;
}

/// The whitespace-separated unsigned numbers of a field ("1000\t1000\t1000\t1000").
std::vector<uint64_t> numbers(std::string_view s) {
  std::vector<uint64_t> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i) break;
    uint64_t v = 0;
    if (std::from_chars(s.data() + i, s.data() + j, v).ec != std::errc()) break;
    out.push_back(v);
    i = j;
  }
  return out;
}

std::string errno_text(const std::string& what, int e) { return what + ": " + std::strerror(e); }

void nap_ms(long ms) {
  timespec ts{0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

std::string run_pid_refusal(std::string_view proc_status, pid_t pid, pid_t peer_pid,
                            uid_t peer_uid) {
  const std::string who = "process " + std::to_string(pid);
  const auto ppid = status_field(proc_status, "PPid");
  const auto uids = status_field(proc_status, "Uid");
  if (!ppid || !uids) return who + ": no PPid or Uid in its /proc status";
  const auto pp = numbers(*ppid);
  if (pp.size() != 1 || pp[0] != static_cast<uint64_t>(peer_pid))
    return who + " is not a child of the asking process (pid " + std::to_string(peer_pid) +
           "): a run is only for the command its client started";
  const auto u = numbers(*uids);
  if (u.size() != 4) return who + ": malformed Uid line in its /proc status";
  if (peer_uid == 0) return {};
  for (uint64_t id : u)
    if (id != peer_uid)
      return who + " does not belong to uid " + std::to_string(peer_uid) +
             " (its uids: real, effective, saved, fs " + std::to_string(u[0]) + " " +
             std::to_string(u[1]) + " " + std::to_string(u[2]) + " " + std::to_string(u[3]) + ")";
  return {};
}

std::optional<uid_t> status_uid(std::string_view proc_status) {
  const auto uids = status_field(proc_status, "Uid");
  if (!uids) return std::nullopt;
  const auto u = numbers(*uids);
  if (u.empty()) return std::nullopt;
  return static_cast<uid_t>(u[0]);
}

std::optional<std::string> cgroup_v2_path(std::string_view proc_cgroup) {
  std::size_t pos = 0;
  while (pos < proc_cgroup.size()) {
    std::size_t end = proc_cgroup.find('\n', pos);
    if (end == std::string_view::npos) end = proc_cgroup.size();
    const std::string_view line = proc_cgroup.substr(pos, end - pos);
    if (line.size() > 3 && line.compare(0, 3, "0::") == 0 && line[3] == '/')
      return std::string(line.substr(3));
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<bool> cgroup_populated(std::string_view events) {
  const std::string_view key = "populated ";
  std::size_t pos = 0;
  while (pos < events.size()) {
    std::size_t end = events.find('\n', pos);
    if (end == std::string_view::npos) end = events.size();
    const std::string_view line = events.substr(pos, end - pos);
    if (line.size() == key.size() + 1 && line.compare(0, key.size(), key) == 0) {
      if (line.back() == '0') return false;
      if (line.back() == '1') return true;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::unique_ptr<RunCgroups> RunCgroups::open(const std::string& mount, const std::string& rel,
                                             std::string& error) {
  // A directory of root's, writable by nobody else (the cgroup file system gives a new cgroup
  // 0755): a user who could create cgroups there could make jobs of his own in it.
  const int fd = core::open_private_dir(mount + rel, 0755, false, "run root (runs:)", error);
  if (fd < 0) return nullptr;
  return std::unique_ptr<RunCgroups>(new RunCgroups(mount, rel, fd));
}

RunCgroups::~RunCgroups() { close(fd_); }

Status RunCgroups::make(const std::string& name, uint64_t& id) {
  if (mkdirat(fd_, name.c_str(), 0755) != 0)
    return Status::Error(errno_text("cannot create cgroup " + rel_ + "/" + name, errno), errno);
  struct stat st {};
  if (fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    const int e = errno;
    unlinkat(fd_, name.c_str(), AT_REMOVEDIR);
    return Status::Error(errno_text("cannot stat cgroup " + rel_ + "/" + name, e), e);
  }
  id = st.st_ino;
  return Status::Ok();
}

Status RunCgroups::move(const std::string& name, pid_t pid) {
  const std::string procs = name + "/cgroup.procs";
  const int fd = openat(fd_, procs.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::Error(errno_text("cannot open " + rel_ + "/" + procs, errno), errno);
  const std::string text = std::to_string(pid) + "\n";
  const ssize_t n = write(fd, text.data(), text.size());
  const int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return Status::Error(errno_text("cannot move process " + std::to_string(pid) + " into " +
                                        rel_ + "/" + name,
                                    n < 0 ? e : EIO),
                         n < 0 ? e : EIO);
  return Status::Ok();
}

std::size_t RunCgroups::evacuate(const std::string& name, const std::string& to) {
  std::size_t moved = 0;
  // A few rounds: a process may fork while the others are moved.
  for (int round = 0; round < 4; ++round) {
    const auto text = core::read_file_at(fd_, name + "/cgroup.procs");
    if (!text || text->empty()) break;
    int dest = ::open((mount_ + (to == "/" ? "" : to) + "/cgroup.procs").c_str(),
                      O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (dest < 0) dest = ::open((mount_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (dest < 0) break;
    for (uint64_t pid : numbers(*text)) {
      const std::string line = std::to_string(pid) + "\n";
      moved += write(dest, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    }
    close(dest);
  }
  return moved;
}

Status RunCgroups::remove(const std::string& name) {
  for (int i = 0;; ++i) {
    if (unlinkat(fd_, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EBUSY || i == 40)
      return Status::Error(errno_text("cannot remove cgroup " + rel_ + "/" + name, errno), errno);
    nap_ms(5);  // an exited task leaves its cgroup a moment after its parent saw the exit
  }
}

std::optional<bool> RunCgroups::populated(const std::string& name) const {
  const auto text = core::read_file_at(fd_, name + "/cgroup.events");
  if (!text) return std::nullopt;
  return cgroup_populated(*text);
}

std::vector<std::string> RunCgroups::list() const {
  std::vector<std::string> out;
  const int dup_fd = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return out;
  DIR* d = fdopendir(dup_fd);
  if (!d) {
    close(dup_fd);
    return out;
  }
  rewinddir(d);
  while (const dirent* e = readdir(d))
    if (e->d_type == DT_DIR && std::strncmp(e->d_name, "run-", 4) == 0) out.emplace_back(e->d_name);
  closedir(d);
  return out;
}

}  // namespace iolens::daemon
