// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Who is on the other end of a control connection, and whether the daemon answers them.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace iolens::control {

/// The peer's credentials as the kernel recorded them at connect() (SO_PEERCRED). pid is 0 when
/// the peer lives in a pid namespace the daemon cannot see.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

/// Who may talk to the daemon: root, the daemon's own euid, or members of `group` (primary gid
/// or one of `peer_groups`, the peer's supplementary groups).
bool peer_allowed(const Peer& peer, uid_t daemon_euid, std::optional<gid_t> group,
                  const std::vector<gid_t>& peer_groups);

/// The supplementary groups in the text of /proc/<pid>/status (its "Groups:" line); empty if the
/// line is missing. Unparsable entries are skipped: they can only shrink the set.
std::vector<gid_t> groups_from_proc_status(std::string_view status_text);

/// The real uid in the text of /proc/<pid>/status (the first number of its "Uid:" line);
/// nullopt if the line is missing or malformed.
std::optional<uid_t> real_uid_from_proc_status(std::string_view status_text);

/// SO_PEERCRED of a connected unix socket; nullopt and `error` if the kernel gives none.
std::optional<Peer> peer_credentials(int fd, std::string& error);

/// The peer's supplementary groups. SO_PEERGROUPS (Linux 4.13) first: it is the set the kernel
/// recorded at connect(), so it cannot change under us and works across pid namespaces. Older
/// kernels: /proc/<pid>/status, which a peer that has exited (pid reused) could make wrong, so
/// it is only a fallback. Empty when neither is available.
std::vector<gid_t> peer_groups(int fd, pid_t pid, const std::string& proc_root = "/proc");

/// A group by name (getgrnam_r) or number ("998"). nullopt and `error` if there is no such
/// group name.
std::optional<gid_t> group_id(const std::string& name, std::string& error);

/// The group's name for messages, or its number if it has none.
std::string group_name(gid_t gid);

}  // namespace iolens::control
