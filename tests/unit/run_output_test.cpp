// SPDX-License-Identifier: Apache-2.0
// `iolens run`'s output files and sudo identity (cli/output_file.hpp, cli/invoker.hpp): the
// rules that keep a root iolens from writing through a symlink or clobbering a file, and the
// strict reading of SUDO_UID/SUDO_GID. Runs as any user.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/invoker.hpp"
#include "cli/output_file.hpp"

namespace iolens::cli {
namespace {

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iolens-output-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    const std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string path(const char* name) const { return dir_ + "/" + name; }
  static void put(const std::string& p, const std::string& text) { std::ofstream(p) << text; }
  static std::string get(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(OutputFileTest, CreatesANewFile) {
  const std::string p = path("new.json");
  EXPECT_TRUE(check_output(p, false).message.empty());
  bool created = false;
  OutputError e;
  const int fd = open_output(p, false, created, e);
  ASSERT_GE(fd, 0) << e.message;
  EXPECT_TRUE(created);
  EXPECT_TRUE(write_all(fd, "hello"));
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  close(fd);
  EXPECT_EQ(get(p), "hello");
}

TEST_F(OutputFileTest, AnExistingFileOnlyWithForce) {
  const std::string p = path("old.json");
  put(p, "earlier run");
  OutputError e = check_output(p, false);
  EXPECT_TRUE(e.refused);
  EXPECT_NE(e.message.find("--force"), std::string::npos);
  bool created = true;
  EXPECT_EQ(open_output(p, false, created, e), -1);
  EXPECT_TRUE(e.refused);
  EXPECT_EQ(get(p), "earlier run");

  EXPECT_TRUE(check_output(p, true).message.empty());
  e = {};
  const int fd = open_output(p, true, created, e);
  ASSERT_GE(fd, 0) << e.message;
  EXPECT_FALSE(created);
  EXPECT_TRUE(write_all(fd, "new"));
  close(fd);
  EXPECT_EQ(get(p), "new");  // emptied first: nothing of the longer old content is left
}

TEST_F(OutputFileTest, SymlinksAreNeverFollowedEvenWithForce) {
  const std::string victim = path("victim"), link = path("link"), dangling = path("dangling");
  put(victim, "precious");
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_EQ(symlink(path("would-be-created").c_str(), dangling.c_str()), 0);
  for (bool force : {false, true}) {
    for (const std::string& p : {link, dangling}) {
      OutputError e = check_output(p, force);
      EXPECT_TRUE(e.refused);
      EXPECT_NE(e.message.find("symbolic link"), std::string::npos) << e.message;
      bool created = false;
      e = {};
      EXPECT_EQ(open_output(p, force, created, e), -1);
      EXPECT_TRUE(e.refused);
      EXPECT_NE(e.message.find("symbolic link"), std::string::npos) << e.message;
    }
  }
  EXPECT_EQ(get(victim), "precious");
  EXPECT_NE(access(path("would-be-created").c_str(), F_OK), 0);
}

TEST_F(OutputFileTest, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  bool created = false;
  OutputError e;
  EXPECT_EQ(open_output(fifo, true, created, e), -1);  // would block forever if opened
  EXPECT_TRUE(e.refused);
  EXPECT_NE(e.message.find("not a regular file"), std::string::npos) << e.message;
  EXPECT_TRUE(check_output(dir_, true).refused);  // a directory
}

TEST_F(OutputFileTest, OtherErrorsAreNotRefusals) {
  bool created = false;
  OutputError e;
  EXPECT_EQ(open_output(path("no-such-dir/x"), false, created, e), -1);
  EXPECT_FALSE(e.refused);
  EXPECT_FALSE(e.message.empty());
}

TEST(SudoIds, NumericIdsOnly) {
  uid_t uid = 1;
  gid_t gid = 1;
  bool present = true;
  EXPECT_TRUE(parse_sudo_ids(nullptr, nullptr, uid, gid, present));
  EXPECT_FALSE(present);
  EXPECT_TRUE(parse_sudo_ids("1000", "100", uid, gid, present));
  EXPECT_TRUE(present);
  EXPECT_EQ(uid, 1000u);
  EXPECT_EQ(gid, 100u);
  EXPECT_TRUE(parse_sudo_ids("0", "0", uid, gid, present));
  EXPECT_TRUE(parse_sudo_ids("4294967294", "4294967294", uid, gid, present));
  EXPECT_EQ(uid, 4294967294u);
  for (const char* bad : {"", "abc", "-1", "+5", " 5", "5 ", "5x", "0x10", "4294967295",
                          "99999999999", "18446744073709551617"}) {
    Status s = parse_sudo_ids(bad, "100", uid, gid, present);
    EXPECT_FALSE(s) << "SUDO_UID '" << bad << "'";
    EXPECT_NE(s.message.find("SUDO_UID"), std::string::npos) << s.message;
    s = parse_sudo_ids("1000", bad, uid, gid, present);
    EXPECT_FALSE(s) << "SUDO_GID '" << bad << "'";
    EXPECT_NE(s.message.find("SUDO_GID"), std::string::npos) << s.message;
  }
  EXPECT_FALSE(parse_sudo_ids("1000", nullptr, uid, gid, present));
  EXPECT_FALSE(parse_sudo_ids(nullptr, "1000", uid, gid, present));
}

}  // namespace
}  // namespace iolens::cli
