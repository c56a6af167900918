// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Who ran iolens through sudo. `sudo iolens run -- CMD` must not make CMD root: the command
/// runs as the invoking user, and the files iolens writes are created as that user (so they are
/// theirs, and only where they may write). The agent itself keeps root: it needs it to trace.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "loader/status.hpp"

namespace iolens::cli {

struct Invoker {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;           // SUDO_USER; empty when sudo did not say
  std::vector<gid_t> groups;  // supplementary groups of `name` (getgrouplist), else {gid}
};

/// SUDO_UID/SUDO_GID as ids: decimal digits only, in range, not -1. Both or neither must be set
/// (`present` says which). Pure: the values are passed in (nullptr = unset).
Status parse_sudo_ids(const char* sudo_uid, const char* sudo_gid, uid_t& uid, gid_t& gid,
                      bool& present);

/// The invoking user when iolens runs under sudo (real uid 0, SUDO_UID/SUDO_GID set, not 0);
/// nullopt otherwise. A malformed SUDO_UID/SUDO_GID, or a SUDO_USER that is not that uid, is an
/// error: never a silent fall back to root.
Status find_invoker(std::optional<Invoker>& out);

/// While alive, the process creates and opens files as `who` (filesystem ids and supplementary
/// groups; effective ids stay root, so tracing is unaffected). Restores root's on destruction.
/// A no-op for nullopt. Call with one thread only (setgroups applies to every thread).
class FileAccessAs {
 public:
  explicit FileAccessAs(const std::optional<Invoker>& who);
  ~FileAccessAs();
  FileAccessAs(const FileAccessAs&) = delete;
  FileAccessAs& operator=(const FileAccessAs&) = delete;
  /// Not ok when the identity could not be taken (then nothing should be opened).
  const Status& status() const { return status_; }

 private:
  bool active_ = false;
  bool groups_changed_ = false;
  uid_t old_fsuid_ = 0;
  gid_t old_fsgid_ = 0;
  std::vector<gid_t> saved_groups_;
  Status status_;
};

}  // namespace iolens::cli
