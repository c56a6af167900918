// SPDX-License-Identifier: Apache-2.0
#include "control/peer.hpp"

#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // asm-generic/socket.h; older libc headers lack it
#endif

namespace iolens::control {
namespace {

/// A decimal id that fits `T` exactly ("12", not "12x", "-1" or "99999999999").
template <typename T>
std::optional<T> parse_id(std::string_view s) {
  if (s.empty()) return std::nullopt;
  T value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

/// The numbers of the line starting with `key` of a /proc/<pid>/status text; unparsable
/// entries are skipped.
template <typename T>
std::vector<T> status_ids(std::string_view status_text, std::string_view key) {
  std::vector<T> ids;
  size_t pos = 0;
  while (pos < status_text.size()) {
    size_t eol = status_text.find('\n', pos);
    if (eol == std::string_view::npos) eol = status_text.size();
    std::string_view line = status_text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(key)) continue;
    line.remove_prefix(key.size());
    while (!line.empty()) {
      const size_t start = line.find_first_not_of(" \t");
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      const size_t len = std::min(line.find_first_of(" \t"), line.size());
      if (auto id = parse_id<T>(line.substr(0, len))) ids.push_back(*id);
      line.remove_prefix(len);
    }
    break;
  }
  return ids;
}

}  // namespace

bool peer_allowed(const Peer& peer, uid_t daemon_euid, std::optional<gid_t> group,
                  const std::vector<gid_t>& peer_groups) {
  if (peer.uid == 0 || peer.uid == daemon_euid) return true;
  if (!group) return false;
  return peer.gid == *group ||
         std::find(peer_groups.begin(), peer_groups.end(), *group) != peer_groups.end();
}

std::vector<gid_t> groups_from_proc_status(std::string_view status_text) {
  return status_ids<gid_t>(status_text, "Groups:");
}

std::optional<uid_t> real_uid_from_proc_status(std::string_view status_text) {
  // Real, effective, saved set and filesystem uid: all four, or the first may not be the real.
  const std::vector<uid_t> ids = status_ids<uid_t>(status_text, "Uid:");
  if (ids.size() != 4) return std::nullopt;
  return ids[0];
}

std::optional<Peer> peer_credentials(int fd, std::string& error) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    error = std::string("SO_PEERCRED: ") + std::strerror(errno);
    return std::nullopt;
  }
  return Peer{cred.pid, cred.uid, cred.gid};
}

std::vector<gid_t> peer_groups(int fd, pid_t pid, const std::string& proc_root) {
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      return groups;
    }
    if (errno != ERANGE) break;
    groups.resize(len / sizeof(gid_t) + 1);  // the kernel said how much it needs
  }
  if (pid <= 0) return {};
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/status");
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return groups_from_proc_status(text.str());
}

std::optional<gid_t> group_id(const std::string& name, std::string& error) {
  if (name.empty()) {
    error = "empty group name";
    return std::nullopt;
  }
  if (auto gid = parse_id<gid_t>(name)) return gid;
  long hint = sysconf(_SC_GETGR_R_SIZE_MAX);
  std::vector<char> buf(hint > 0 ? static_cast<size_t>(hint) : 1024);
  for (;;) {
    group grp{};
    group* found = nullptr;
    const int rc = getgrnam_r(name.c_str(), &grp, buf.data(), buf.size(), &found);
    if (rc == ERANGE && buf.size() < (1u << 24)) {  // a group with very many members
      buf.resize(buf.size() * 2);
      continue;
    }
    if (rc != 0) {
      error = "cannot look up group '" + name + "': " + std::strerror(rc);
      return std::nullopt;
    }
    if (found == nullptr) {
      error = "no group named '" + name + "'";
      return std::nullopt;
    }
    return grp.gr_gid;
  }
}

std::string group_name(gid_t gid) {
  std::vector<char> buf(4096);
  for (;;) {
    group grp{};
    group* found = nullptr;
    const int rc = getgrgid_r(gid, &grp, buf.data(), buf.size(), &found);
    if (rc == ERANGE && buf.size() < (1u << 24)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    if (rc != 0 || found == nullptr) return std::to_string(gid);
    return grp.gr_name;
  }
}

}  // namespace iolens::control
