// SPDX-License-Identifier: Apache-2.0
#include "cli/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace iolens::cli {
namespace {

OutputError refusal(mode_t mode, bool force) {
  if (S_ISLNK(mode)) return {true, "is a symbolic link: not followed, even with --force"};
  if (!S_ISREG(mode))
    return {true, "exists and is not a regular file: not written, even with --force"};
  if (!force) return {true, "exists: not replaced without --force"};
  return {};
}

OutputError os_error(int err) { return {false, std::strerror(err)}; }

}  // namespace

OutputError check_output(const std::string& path, bool force) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return errno == ENOENT ? OutputError{} : os_error(errno);
  return refusal(st.st_mode, force);
}

int open_output(const std::string& path, bool force, bool& created, OutputError& error) {
  created = false;
  // A few rounds: the path may appear or vanish between the calls below (a race with another
  // process); each round decides on what is there now.
  for (int round = 0; round < 4; ++round) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      created = true;
      return fd;
    }
    if (errno != EEXIST) {
      error = os_error(errno);
      return -1;
    }
    struct stat before {};
    if (lstat(path.c_str(), &before) != 0) {
      if (errno == ENOENT) continue;
      error = os_error(errno);
      return -1;
    }
    if (error = refusal(before.st_mode, force); error.refused) return -1;
    // Not O_TRUNC: the file is emptied only once it is known to be the regular file looked at.
    // O_NONBLOCK: a FIFO swapped in meanwhile must not block the open.
    fd = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      error = errno == ELOOP ? refusal(S_IFLNK, force) : os_error(errno);
      return -1;
    }
    struct stat now {};
    if (fstat(fd, &now) != 0 || now.st_dev != before.st_dev || now.st_ino != before.st_ino ||
        !S_ISREG(now.st_mode)) {
      close(fd);
      continue;  // replaced under us: look again
    }
    if (ftruncate(fd, 0) != 0 || fcntl(fd, F_SETFL, 0) != 0) {
      error = os_error(errno);
      close(fd);
      return -1;
    }
    return fd;
  }
  error = {true, "keeps changing while it is opened: not written"};
  return -1;
}

int open_output_as(const std::optional<Invoker>& who, const std::string& path, bool force,
                   bool& created, OutputError& error) {
  FileAccessAs as(who);
  if (!as.status()) {
    error = {false, as.status().message};
    return -1;
  }
  return open_output(path, force, created, error);
}

std::string output_error_line(const std::string& what, const OutputError& error) {
  return (error.refused ? "" : "cannot write ") + what + ": " + error.message;
}

void remove_created_output(int fd, const std::string& path) {
  struct stat mine {};
  if (fd < 0 || fstat(fd, &mine) != 0) return;
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return;
  struct stat there {};
  if (fstatat(dir_fd, name.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
      there.st_dev == mine.st_dev && there.st_ino == mine.st_ino)
    unlinkat(dir_fd, name.c_str(), 0);
  close(dir_fd);
}

}  // namespace iolens::cli
