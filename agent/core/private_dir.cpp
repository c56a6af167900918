// SPDX-License-Identifier: Apache-2.0
#include "core/private_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace iolens::core {
namespace {

std::string octal(mode_t m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

/// mkdir -p of `path`'s parents (0755 for those it creates; existing ones are left as they are:
/// an administrator may have chosen their mode), then of `path` itself with `mode`.
bool make_dirs(const std::string& path, mode_t mode, bool& created, std::string& error) {
  created = false;
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string dir = path.substr(0, pos);
    const bool last = pos == path.size();
    if (mkdir(dir.c_str(), last ? mode : 0755) == 0) {
      created = last;
      if (!last) {
        // mkdir applied the umask; through a descriptor of what was just made, not by path.
        const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
          fchmod(fd, 0755);
          close(fd);
        }
      }
    } else if (errno != EEXIST) {
      error = "cannot create directory " + dir + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

}  // namespace

int open_private_dir(const std::string& path, mode_t mode, bool force_mode, const std::string& what,
                     std::string& error) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  bool created = false;
  if (!make_dirs(p, mode, created, error)) {
    error = what + " " + path + ": " + error;
    return -1;
  }
  const int fd = open(p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    struct stat lst {};
    if (lstat(p.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
      error = what + " " + path +
              " is a symbolic link: refusing it (iolensd's directories must be real directories "
              "of its own; give the link's target instead)";
    else if (e == ENOTDIR)
      error = what + " " + path + " is not a directory";
    else
      error = "cannot open " + what + " " + path + ": " + std::strerror(e);
    return -1;
  }
  struct stat st {};
  const uid_t euid = geteuid();
  if (fstat(fd, &st) != 0) {
    error = "cannot stat " + what + " " + path + ": " + std::strerror(errno);
  } else if (st.st_uid != euid) {
    error = what + " " + path + " is owned by uid " + std::to_string(st.st_uid) +
            ", not by this process's user (uid " + std::to_string(euid) +
            "): refusing it (another user could replace its files)";
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    error = what + " " + path + " is group- or world-writable (mode " + octal(st.st_mode) +
            (st.st_mode & S_ISVTX ? ", sticky" : "") +
            "): refusing it (other users could plant files or links in it; chmod go-w it, or "
            "give a directory of this user's own)";
  } else if ((created || force_mode) && (st.st_mode & 07777) != mode && fchmod(fd, mode) != 0) {
    error = "cannot chmod " + octal(mode) + " " + what + " " + path + ": " + std::strerror(errno);
  } else {
    return fd;
  }
  close(fd);
  return -1;
}

int create_fresh(int dir_fd, const std::string& name, mode_t mode) {
  // unlinkat never follows a link. What it cannot remove (a directory of that name) makes the
  // open below fail with EEXIST, which the caller reports.
  unlinkat(dir_fd, name.c_str(), 0);
  return openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
}

int open_regular_at(int dir_fd, const std::string& name, uint64_t* size) {
  // O_NONBLOCK: a FIFO planted at the name must not hold the daemon's loop in open or read.
  const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    errno = EINVAL;
    return -1;
  }
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::optional<std::string> read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return out;
    if (n < 0) return std::nullopt;  // a part read is no file: a transient EIO must not pass for its end
    out.append(buf, static_cast<size_t>(n));
  }
}

bool write_all(int fd, std::string_view text) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = ENOSPC;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::string> read_file_at(int dir_fd, const std::string& name) {
  const int fd = open_regular_at(dir_fd, name);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> out = read_all(fd);
  close(fd);
  return out;
}

}  // namespace iolens::core
