// SPDX-License-Identifier: Apache-2.0
// Runs (daemon/runs.hpp): who may put a process in a run, the /proc and cgroup texts read, and
// the run root's operations on a plain directory (a cgroup file system behaves the same for
// mkdir, rmdir and listing).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/runs.hpp"

using namespace iolens::daemon;

namespace {

std::string status_text(pid_t ppid, const std::string& uids) {
  return "Name:\tjob\nUmask:\t0022\nState:\tT (stopped)\nTgid:\t50\nPid:\t50\nPPid:\t" +
         std::to_string(ppid) + "\nTracerPid:\t0\nUid:\t" + uids + "\nGid:\t0\t0\t0\t0\n";
}

}  // namespace

TEST(DaemonRuns, PidRefusal) {
  // The peer's own child, of the peer's uid: taken.
  EXPECT_EQ(run_pid_refusal(status_text(40, "1000\t1000\t1000\t1000"), 50, 40, 1000), "");
  // Root may run a child that became another user (iolens run under sudo).
  EXPECT_EQ(run_pid_refusal(status_text(40, "1000\t1000\t1000\t1000"), 50, 40, 0), "");
  // Not the peer's child: refused whoever asks, root included.
  EXPECT_NE(run_pid_refusal(status_text(1, "1000\t1000\t1000\t1000"), 50, 40, 1000)
                .find("is not a child of the asking process (pid 40)"),
            std::string::npos);
  EXPECT_NE(run_pid_refusal(status_text(1, "0\t0\t0\t0"), 50, 40, 0).find("not a child"),
            std::string::npos);
  // Any of the four uids another user's (a setuid program): refused for a non-root peer.
  for (const char* uids : {"1001\t1000\t1000\t1000", "1000\t0\t1000\t1000",
                           "1000\t1000\t0\t1000", "1000\t1000\t1000\t0"})
    EXPECT_NE(run_pid_refusal(status_text(40, uids), 50, 40, 1000)
                  .find("does not belong to uid 1000"),
              std::string::npos)
        << uids;
  // Malformed status texts are refusals, never a pass.
  EXPECT_NE(run_pid_refusal("", 50, 40, 0), "");
  EXPECT_NE(run_pid_refusal("PPid:\t40\n", 50, 40, 0), "");
  EXPECT_NE(run_pid_refusal("PPid:\t40\nUid:\t0\t0\n", 50, 40, 0), "");
  EXPECT_NE(run_pid_refusal("PPid:\tx\nUid:\t0\t0\t0\t0\n", 50, 40, 0), "");
  EXPECT_NE(run_pid_refusal("PPid:\t40 41\nUid:\t0\t0\t0\t0\n", 50, 40, 0), "");
  EXPECT_EQ(status_uid(status_text(40, "1000\t0\t0\t0")), 1000u);
  EXPECT_EQ(status_uid("Name:\tx\n"), std::nullopt);
}

TEST(DaemonRuns, ProcCgroupAndEvents) {
  EXPECT_EQ(cgroup_v2_path("0::/user.slice/session-2.scope\n"), "/user.slice/session-2.scope");
  // Hybrid layout: v1 lines first.
  EXPECT_EQ(cgroup_v2_path("12:pids:/user.slice\n1:name=systemd:/user.slice/x\n0::/x/y\n"),
            "/x/y");
  EXPECT_EQ(cgroup_v2_path("0::/\n"), "/");
  EXPECT_EQ(cgroup_v2_path("1:cpu:/a\n"), std::nullopt);
  EXPECT_EQ(cgroup_v2_path(""), std::nullopt);
  EXPECT_EQ(cgroup_populated("populated 1\nfrozen 0\n"), true);
  EXPECT_EQ(cgroup_populated("populated 0\nfrozen 0\n"), false);
  EXPECT_EQ(cgroup_populated("frozen 0\n"), std::nullopt);
  EXPECT_EQ(cgroup_populated("populated 2\n"), std::nullopt);
}

TEST(DaemonRuns, RootOnADirectory) {
  char tmpl[] = "/tmp/iolens-runs-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string base = tmpl;
  chmod(base.c_str(), 0755);
  std::string error;
  // Created when missing, 0755.
  auto root = RunCgroups::open(base, "/runs", error);
  ASSERT_NE(root, nullptr) << error;
  struct stat st {};
  ASSERT_EQ(stat((base + "/runs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  uint64_t id = 0;
  ASSERT_TRUE(root->make("run-1-1", id));
  EXPECT_NE(id, 0u);
  EXPECT_FALSE(root->make("run-1-1", id));  // never reused
  std::filesystem::create_directory(base + "/runs/other");
  EXPECT_EQ(root->list(), std::vector<std::string>{"run-1-1"});
  // No cgroup.procs in a plain directory: the move fails with the reason.
  const auto moved = root->move("run-1-1", getpid());
  EXPECT_FALSE(moved);
  EXPECT_NE(moved.message.find("cgroup.procs"), std::string::npos);
  EXPECT_EQ(root->populated("run-1-1"), std::nullopt);
  { std::ofstream(base + "/runs/run-1-1/cgroup.events") << "populated 0\n"; }
  EXPECT_EQ(root->populated("run-1-1"), false);
  std::filesystem::remove(base + "/runs/run-1-1/cgroup.events");
  EXPECT_TRUE(root->remove("run-1-1"));
  EXPECT_TRUE(root->remove("run-1-1"));  // gone already: fine
  EXPECT_TRUE(root->list().empty());
  root.reset();
  // A run root others may write to is refused: they could make jobs there.
  chmod((base + "/runs").c_str(), 0777);
  EXPECT_EQ(RunCgroups::open(base, "/runs", error), nullptr);
  EXPECT_NE(error.find("writable"), std::string::npos) << error;
  std::filesystem::remove_all(base);
}
