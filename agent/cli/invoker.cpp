// SPDX-License-Identifier: Apache-2.0
#include "cli/invoker.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace iolens::cli {
namespace {

bool parse_id(const char* text, unsigned long& out) {
  if (text == nullptr || *text == '\0') return false;
  unsigned long v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    const unsigned long d = static_cast<unsigned long>(*p - '0');
    if (v > (0xfffffffeUL - d) / 10) return false;  // past the largest id (-1 means "none")
    v = v * 10 + d;
  }
  out = v;
  return true;
}

}  // namespace

Status parse_sudo_ids(const char* sudo_uid, const char* sudo_gid, uid_t& uid, gid_t& gid,
                      bool& present) {
  present = sudo_uid != nullptr || sudo_gid != nullptr;
  if (!present) return Status::Ok();
  unsigned long u = 0, g = 0;
  if (sudo_uid == nullptr || sudo_gid == nullptr)
    return Status::Error(std::string(sudo_uid ? "SUDO_GID" : "SUDO_UID") +
                             " is not set but " + (sudo_uid ? "SUDO_UID" : "SUDO_GID") +
                             " is: cannot tell which user ran sudo",
                         EINVAL);
  if (!parse_id(sudo_uid, u))
    return Status::Error("SUDO_UID '" + std::string(sudo_uid) + "' is not a user id", EINVAL);
  if (!parse_id(sudo_gid, g))
    return Status::Error("SUDO_GID '" + std::string(sudo_gid) + "' is not a group id", EINVAL);
  uid = static_cast<uid_t>(u);
  gid = static_cast<gid_t>(g);
  return Status::Ok();
}

Status find_invoker(std::optional<Invoker>& out) {
  out.reset();
  if (getuid() != 0) return Status::Ok();  // not sudo: the ids are already the user's
  Invoker who;
  bool present = false;
  if (Status s = parse_sudo_ids(std::getenv("SUDO_UID"), std::getenv("SUDO_GID"), who.uid,
                                who.gid, present);
      !s)
    return s;
  if (!present || who.uid == 0) return Status::Ok();  // root itself, or root ran sudo
  const char* user = std::getenv("SUDO_USER");
  if (user != nullptr && *user != '\0') {
    errno = 0;
    const passwd* pw = getpwnam(user);
    if (pw == nullptr)
      return Status::Error("SUDO_USER '" + std::string(user) + "' is not a known user", ENOENT);
    if (pw->pw_uid != who.uid)
      return Status::Error("SUDO_USER '" + std::string(user) + "' is uid " +
                               std::to_string(pw->pw_uid) + ", not SUDO_UID " +
                               std::to_string(who.uid),
                           EINVAL);
    who.name = user;
    // What initgroups would set; computed here because the child may only make
    // async-signal-safe calls between fork and exec.
    int n = 64;
    for (int tries = 0; tries < 8; ++tries) {
      who.groups.assign(static_cast<std::size_t>(n), 0);
      const int want = n;
      if (getgrouplist(user, who.gid, who.groups.data(), &n) >= 0) {
        who.groups.resize(static_cast<std::size_t>(n));
        break;
      }
      if (n <= want) n = want * 2;
      who.groups.clear();
    }
    if (who.groups.empty())
      return Status::Error("cannot list the groups of SUDO_USER '" + std::string(user) + "'", EINVAL);
  } else {
    who.groups = {who.gid};  // sudo did not say who: no supplementary group at all
  }
  out = std::move(who);
  return Status::Ok();
}

FileAccessAs::FileAccessAs(const std::optional<Invoker>& who) {
  if (!who) return;
  const int n = getgroups(0, nullptr);
  if (n >= 0) {
    saved_groups_.resize(static_cast<std::size_t>(n));
    if (getgroups(n, saved_groups_.data()) != n) saved_groups_.clear();
  }
  if (n < 0 || setgroups(who->groups.size(), who->groups.data()) != 0) {
    status_ = Status::Error(std::string("cannot take the groups of uid ") +
                                std::to_string(who->uid) + ": " + std::strerror(errno),
                            errno);
    return;
  }
  groups_changed_ = true;
  active_ = true;
  old_fsgid_ = static_cast<gid_t>(setfsgid(who->gid));
  old_fsuid_ = static_cast<uid_t>(setfsuid(who->uid));
  // setfsuid/setfsgid report no error; asking again (-1 is no change) says whether they took.
  if (static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) != who->uid ||
      static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))) != who->gid)
    status_ = Status::Error("cannot take the file ids of uid " + std::to_string(who->uid), EPERM);
}

FileAccessAs::~FileAccessAs() {
  if (!active_) return;
  setfsuid(old_fsuid_);
  setfsgid(old_fsgid_);
  if (groups_changed_) {
    const int rc = setgroups(saved_groups_.size(), saved_groups_.data());
    (void)rc;  // root restoring its own groups: cannot fail for want of privilege
  }
}

}  // namespace iolens::cli
