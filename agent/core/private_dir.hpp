// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The daemon's own directories (state, output, control socket): opened once, checked, and then
/// used through their descriptor (openat, renameat2, unlinkat), so that nobody else can make the
/// daemon, which runs as root, write, chmod or chown through a symbolic link (docs/daemon-config.md).

#include <sys/types.h>

#include <cstdint>

#include <optional>
#include <string>
#include <string_view>

namespace iolens::core {

/// Opens `path` as one of the daemon's own directories; returns its descriptor (O_DIRECTORY,
/// close-on-exec) or -1 with `error` naming `what`, the path and the reason.
///
/// A missing directory is created with `mode` (its missing parents 0755). Refused: a symbolic
/// link (the path's last component; O_NOFOLLOW), anything but a directory, a directory not owned
/// by the daemon's effective uid, and one that is group- or world-writable (the sticky bit does
/// not make it acceptable: a directory of the daemon must be its own). With `force_mode` an
/// existing directory is given `mode` too (through the descriptor, never by path).
int open_private_dir(const std::string& path, mode_t mode, bool force_mode, const std::string& what,
                     std::string& error);

/// Removes `name` in `dir_fd` if it is there (never following it), then creates it afresh with
/// O_EXCL|O_NOFOLLOW: a stale file, symbolic link or hard link at that name is never written
/// through. Returns the descriptor (O_WRONLY, close-on-exec) or -1 with errno set.
int create_fresh(int dir_fd, const std::string& name, mode_t mode);

/// `name` in `dir_fd` opened for reading, only if it is a regular file (O_NOFOLLOW; O_NONBLOCK, so
/// a FIFO planted at the name cannot hold the open); -1 otherwise. `size`: its size, when given.
int open_regular_at(int dir_fd, const std::string& name, uint64_t* size = nullptr);

/// The whole of what `fd` reads until its end; nullopt on a read error (a part read is no file).
std::optional<std::string> read_all(int fd);

/// Writes all of `text`, through EINTR and short writes. false with errno on failure (ENOSPC
/// when write(2) wrote nothing without saying why).
bool write_all(int fd, std::string_view text);

/// The whole of `name` in `dir_fd` (open_regular_at, read_all); nullopt if it cannot be read.
std::optional<std::string> read_file_at(int dir_fd, const std::string& name);

}  // namespace iolens::core
