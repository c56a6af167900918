// SPDX-License-Identifier: Apache-2.0
// Decoding ring-buffer records: well-formed ones round-trip, malformed ones are rejected.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/events.hpp"
#include "iolens_abi.h"

using namespace iolens::core;

namespace {

template <class T>
std::vector<uint8_t> bytes_of(const T& v, size_t n = sizeof(T)) {
  std::vector<uint8_t> b(n);
  std::memcpy(b.data(), &v, n);
  return b;
}

std::vector<uint8_t> path_record(uint16_t op, const std::string& walk, const std::string& s1,
                                 const std::string& walk2 = "", const std::string& s2 = "") {
  iolens_path_event e{};
  e.hdr = {IOLENS_EV_PATH, 42, 1000, 2000, 7};
  e.op = op;
  e.dev = (8u << 20) | 1;
  e.ino = 77;
  e.walk_len = static_cast<uint16_t>(walk.size());
  e.str1_len = static_cast<uint16_t>(s1.size());
  e.walk2_len = static_cast<uint16_t>(walk2.size());
  e.str2_len = static_cast<uint16_t>(s2.size());
  std::string data = walk + s1 + walk2 + s2;
  std::memcpy(e.data, data.data(), data.size());
  return bytes_of(e, offsetof(iolens_path_event, data) + data.size());
}

}  // namespace

TEST(Events, Fork) {
  iolens_fork_event e{};
  e.hdr = {IOLENS_EV_FORK, 11, 500, 600, 7};
  e.ppid = 10;
  e.parent_pstart_ns = 400;
  std::strcpy(e.comm, "python3");
  auto r = decode_event(bytes_of(e));
  ASSERT_TRUE(r.ok) << r.error;
  const auto& f = std::get<ForkEvent>(r.event);
  EXPECT_EQ(f.proc, (ProcKey{11, 500}));
  EXPECT_EQ(f.parent, (ProcKey{10, 400}));
  EXPECT_EQ(f.comm, "python3");
}

TEST(Events, CommWithoutTerminatorIsBounded) {
  iolens_fork_event e{};
  e.hdr = {IOLENS_EV_FORK, 1, 1, 1, 7};
  std::memset(e.comm, 'A', sizeof(e.comm));  // no NUL
  auto r = decode_event(bytes_of(e));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(std::get<ForkEvent>(r.event).comm, std::string(16, 'A'));
}

TEST(Events, Exit) {
  iolens_exit_event e{};
  e.hdr = {IOLENS_EV_EXIT, 11, 500, 900, 7};
  e.exit_code = 9;  // killed by SIGKILL
  auto r = decode_event(bytes_of(e));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(std::get<ExitEvent>(r.event).wait_status, 9);
}

TEST(Events, PathWithTwoArguments) {
  using namespace std::string_literals;
  auto r = decode_event(path_record(IOLENS_PATH_RENAME, "d\0"s, "a.tmp\0"s, "e\0"s, "b.pt\0"s));
  ASSERT_TRUE(r.ok) << r.error;
  const auto& p = std::get<PathEvent>(r.event);
  EXPECT_EQ(p.walk, "d\0"s);
  EXPECT_EQ(p.str1, "a.tmp");  // terminator dropped
  EXPECT_EQ(p.walk2, "e\0"s);
  EXPECT_EQ(p.str2, "b.pt");
  EXPECT_EQ(p.ino, 77u);
  EXPECT_EQ(p.proc, (ProcKey{42, 1000}));
}

TEST(Events, RejectsTruncatedAndForeignRecords) {
  EXPECT_FALSE(decode_event({}).ok);
  std::vector<uint8_t> tiny(10, 0);
  EXPECT_FALSE(decode_event(tiny).ok);
  iolens_event_header h{99, 1, 1, 1, 0};
  auto r = decode_event(bytes_of(h));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("unknown event type"), std::string::npos);
  iolens_exit_event x{};
  x.hdr = {IOLENS_EV_EXIT, 1, 1, 1, 7};
  EXPECT_FALSE(decode_event(bytes_of(x, sizeof(x) - 1)).ok);
}

TEST(Events, RejectsLengthsPastTheRecord) {
  auto b = path_record(IOLENS_PATH_FILE, std::string("abc\0", 4), "");
  b.resize(b.size() - 2);  // walk_len says 4, only 2 bytes remain
  auto r = decode_event(b);
  EXPECT_FALSE(r.ok);
  auto c = path_record(7, "", "");  // unknown op
  EXPECT_FALSE(decode_event(c).ok);
}

TEST(Events, CgroupMkdir) {
  iolens_cgroup_event e{};
  e.hdr = {IOLENS_EV_CGROUP, 1, 2, 3, 4242};
  e.op = IOLENS_CGROUP_MKDIR;
  e.level = 2;
  const char path[] = "/kubepods.slice/pod1";
  std::memcpy(e.path, path, sizeof(path));
  e.path_len = sizeof(path);
  auto r = decode_event(bytes_of(e, offsetof(iolens_cgroup_event, path) + sizeof(path)));
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(r.job.has_value());
  const auto& c = std::get<CgroupEvent>(*r.job);
  EXPECT_TRUE(c.created);
  EXPECT_EQ(c.id, 4242u);
  EXPECT_EQ(c.level, 2u);
  EXPECT_EQ(c.path, "/kubepods.slice/pod1");
  EXPECT_FALSE(c.truncated);
}

TEST(Events, CgroupRecordCannotClaimMoreThanItHas) {
  iolens_cgroup_event e{};
  e.hdr = {IOLENS_EV_CGROUP, 1, 2, 3, 9};
  e.op = IOLENS_CGROUP_RMDIR;
  e.path_len = 500;  // but only 10 bytes follow the header
  auto r = decode_event(bytes_of(e, offsetof(iolens_cgroup_event, path) + 10));
  EXPECT_FALSE(r.ok);
  e.path_len = 0;
  e.op = 77;
  EXPECT_FALSE(decode_event(bytes_of(e, sizeof(e))).ok);
}

TEST(Events, Mark) {
  iolens_mark_event e{};
  e.hdr = {IOLENS_EV_MARK, 31, 3100, 3200, 77};
  e.reason = IOLENS_MARK_ATTACH;
  e.threads = 4;
  e.ppid = 30;
  e.parent_pstart_ns = 3000;
  std::memcpy(e.comm, "python3", 8);
  auto r = decode_event(bytes_of(e, sizeof(e)));
  ASSERT_TRUE(r.ok) << r.error;
  const auto& m = std::get<MarkEvent>(*r.job);
  EXPECT_EQ(m.proc, (ProcKey{31, 3100}));
  EXPECT_EQ(m.parent, (ProcKey{30, 3000}));
  EXPECT_EQ(m.cgroup_id, 77u);
  EXPECT_EQ(m.reason, static_cast<uint32_t>(IOLENS_MARK_ATTACH));
  EXPECT_EQ(m.threads, 4u);
  EXPECT_EQ(m.comm, "python3");
  e.reason = 99;
  EXPECT_FALSE(decode_event(bytes_of(e, sizeof(e))).ok);
  EXPECT_FALSE(decode_event(bytes_of(e, sizeof(e) - 1)).ok);
}
