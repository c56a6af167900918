// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The files the `iolens` commands write (run --json/--darshan/--trace, convert -o, capture -o).
/// iolens often runs as root: an output path is never followed through a symbolic link, never
/// anything but a regular file, and an existing file is replaced only when asked (--force).

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "cli/invoker.hpp"
#include "core/private_dir.hpp"

namespace iolens::cli {

struct OutputError {
  bool refused = false;  // refused by the rules above (exit 2), not an I/O error
  std::string message;   // one line: why, without the path
};

/// Why `path` cannot be written now (lstat only, nothing is created): empty when it can. Used to
/// check every output before anything is created or truncated.
OutputError check_output(const std::string& path, bool force);

/// Creates `path` (O_EXCL|O_NOFOLLOW, mode 0644 less the umask), or with `force` empties the
/// regular file already there (a symlink or a non-regular file is refused even then).
/// Returns the descriptor (O_CLOEXEC, write-only) or -1 with `error`; `created` says whether the
/// file is new (so that a caller giving up removes only what it made).
int open_output(const std::string& path, bool force, bool& created, OutputError& error);

/// open_output with the file access of `who` (FileAccessAs: the user who ran sudo; nullopt:
/// iolens's own).
int open_output_as(const std::optional<Invoker>& who, const std::string& path, bool force,
                   bool& created, OutputError& error);

/// The one line that says why the output `what` ("--json FILE", "FILE") was not written.
std::string output_error_line(const std::string& what, const OutputError& error);

/// Removes the output this run created and still holds open as `fd`, if `path` still names that
/// very file: the entry is checked and removed through its directory's descriptor, so a
/// directory or entry swapped since (a link to someone else's file) is left alone. Call it with
/// the same file access the output was created with (FileAccessAs under sudo).
void remove_created_output(int fd, const std::string& path);

/// core::write_all, under the name the CLI's callers use.
using core::write_all;

}  // namespace iolens::cli
