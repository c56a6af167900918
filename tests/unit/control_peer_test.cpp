// SPDX-License-Identifier: Apache-2.0
// Who may use the control socket: the rule, the /proc parser behind the fallback, group names.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "control/peer.hpp"

using namespace iolens::control;

namespace {

struct Case {
  const char* what;
  Peer peer;
  uid_t daemon_euid;
  std::optional<gid_t> group;
  std::vector<gid_t> peer_groups;
  bool allowed;
};

}  // namespace

TEST(ControlPeer, AllowedTable) {
  const Case cases[] = {
      {"root always", {10, 0, 0}, 0, std::nullopt, {}, true},
      {"root even when the daemon is not root", {10, 0, 5}, 900, 998, {}, true},
      {"the daemon's own user", {10, 900, 900}, 900, std::nullopt, {}, true},
      {"another user, no group configured", {10, 1000, 1000}, 0, std::nullopt, {}, false},
      {"another user, no group configured, even in gid 998",
       {10, 1000, 998},
       0,
       std::nullopt,
       {998},
       false},
      {"primary gid is the group", {10, 1000, 998}, 0, 998, {}, true},
      {"supplementary group", {10, 1000, 1000}, 0, 998, {27, 998, 1001}, true},
      {"in other groups only", {10, 1000, 1000}, 0, 998, {27, 100, 1001}, false},
      {"no groups at all", {10, 1000, 1000}, 0, 998, {}, false},
      {"group 0 configured, peer in group 0", {10, 1000, 0}, 0, 0, {}, true},
      {"uid equal to the daemon's gid is not the daemon", {10, 998, 1000}, 0, 998, {}, false},
      {"peer in another pid namespace (pid 0)", {0, 1000, 1000}, 0, 998, {998}, true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.allowed, peer_allowed(c.peer, c.daemon_euid, c.group, c.peer_groups)) << c.what;
  }
}

TEST(ControlPeer, GroupsFromProcStatus) {
  const std::string status =
      "Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n"
      "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t256\n"
      "Groups:\t4 24 27 998 \nNStgid:\t4242\n";
  EXPECT_EQ((std::vector<gid_t>{4, 24, 27, 998}), groups_from_proc_status(status));
  EXPECT_TRUE(groups_from_proc_status("Name:\tx\nGroups:\t\nNStgid:\t1\n").empty());
  EXPECT_TRUE(groups_from_proc_status("Name:\tx\n").empty());
  EXPECT_TRUE(groups_from_proc_status("").empty());
  // Junk is skipped, never read as a group (a gid out of range would wrap to a real group).
  EXPECT_EQ((std::vector<gid_t>{5}), groups_from_proc_status("Groups:\t-1 x 5 99999999999 7z\n"));
  // Only the line that starts with the key: "NotGroups:" is not it.
  EXPECT_EQ((std::vector<gid_t>{9}), groups_from_proc_status("XGroups:\t3\nGroups:\t9"));
}

TEST(ControlPeer, RealUidFromProcStatus) {
  EXPECT_EQ(std::optional<uid_t>(1000),
            real_uid_from_proc_status("Name:\tsh\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n"));
  EXPECT_EQ(std::optional<uid_t>(0), real_uid_from_proc_status("Uid:\t0\t1000\t1000\t1000"));
  EXPECT_EQ(std::nullopt, real_uid_from_proc_status("Name:\tx\n"));
  EXPECT_EQ(std::nullopt, real_uid_from_proc_status(""));
  // A malformed real uid is not replaced by the next one (the effective uid).
  EXPECT_EQ(std::nullopt, real_uid_from_proc_status("Uid:\t-1\t1000\t1000\t1000\n"));
  EXPECT_EQ(std::nullopt, real_uid_from_proc_status("Uid:\t1000\n"));
}

TEST(ControlPeer, PeerGroupsFallsBackToProc) {
  // A socket fd that is not a unix socket: SO_PEERGROUPS fails, /proc/self/status is read.
  int fds[2];
  ASSERT_EQ(0, pipe(fds));
  std::vector<gid_t> want(static_cast<size_t>(getgroups(0, nullptr)));
  ASSERT_EQ(static_cast<int>(want.size()), getgroups(static_cast<int>(want.size()), want.data()));
  std::vector<gid_t> got = peer_groups(fds[0], getpid());
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(want, got);
  EXPECT_TRUE(peer_groups(fds[0], 0).empty());
  close(fds[0]);
  close(fds[1]);
}

TEST(ControlPeer, GroupId) {
  std::string error;
  EXPECT_EQ(std::optional<gid_t>(0), group_id("root", error)) << error;
  EXPECT_EQ(std::optional<gid_t>(0), group_id("0", error));
  EXPECT_EQ(std::optional<gid_t>(12345), group_id("12345", error));
  EXPECT_EQ(std::nullopt, group_id("no-such-group-iolens", error));
  EXPECT_EQ("no group named 'no-such-group-iolens'", error);
  EXPECT_EQ(std::nullopt, group_id("", error));
  EXPECT_EQ("empty group name", error);
  // Not a number, so a name: and there is no such name.
  EXPECT_EQ(std::nullopt, group_id("12x", error));
  EXPECT_EQ(std::nullopt, group_id("-1", error));
  EXPECT_EQ("root", group_name(0));
  EXPECT_EQ("4000000000", group_name(4000000000u));
}
