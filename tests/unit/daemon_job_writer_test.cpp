// SPDX-License-Identifier: Apache-2.0
// Job record files: stable names, hostile ids made safe, atomic writes, rotation by size and age.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/job_writer.hpp"

namespace fs = std::filesystem;
using namespace iolens::daemon;

namespace {

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iolens-writer-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

// 2026-11-22 03:15:00 UTC
constexpr int64_t kStart = 1795317300LL * 1000000000LL;

}  // namespace

TEST(JobFileName, StableSortableAndSafe) {
  EXPECT_EQ(job_file_name("k8s/0f3e-1", kStart), "20261122T031500Z_k8s_0f3e-1.json");
  EXPECT_EQ(job_file_name("cgroup/a b/../c\n\xff", kStart), "20261122T031500Z_cgroup_a_b_.._c__.json");
  EXPECT_EQ(job_file_name("", kStart), "20261122T031500Z__.json");
  EXPECT_EQ(job_file_name(".hidden", kStart), "20261122T031500Z__.hidden.json");
  EXPECT_LT(job_file_name("z", kStart), job_file_name("a", kStart + 1000000000LL));
  EXPECT_LE(job_file_name(std::string(1000, 'x'), kStart).size(), 255u);
}

TEST_F(WriterTest, WritesAtomicallyAndNeverOverwrites) {
  JobWriter w(dir_ + "/out", 0, 0);
  ASSERT_TRUE(w.prepare().ok);
  std::string p1, p2;
  ASSERT_TRUE(w.write("20261122T031500Z_x.json", {{"a", 1}}, p1).ok);
  ASSERT_TRUE(w.write("20261122T031500Z_x.json", {{"a", 2}}, p2).ok);
  EXPECT_NE(p1, p2);
  EXPECT_EQ(fs::path(p2).filename(), "20261122T031500Z_x.1.json");
  std::ifstream in(p1);
  nlohmann::json j;
  in >> j;
  EXPECT_EQ(j["a"], 1);
  for (const auto& e : fs::directory_iterator(dir_ + "/out"))
    EXPECT_NE(e.path().filename().string().rfind(".tmp", 0), 0u) << "temporary left behind";
  EXPECT_EQ(w.written(), 2u);
}

TEST_F(WriterTest, UnwritableDirectoryIsAClearError) {
  const std::string file = dir_ + "/plain";
  std::ofstream(file) << "x";
  JobWriter w(file + "/sub", 0, 0);
  auto s = w.prepare();
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.message.find(file), std::string::npos) << s.message;
}

TEST_F(WriterTest, RotationRemovesOldestOverSizeAndExpiredOnly) {
  auto put = [&](const std::string& name, size_t bytes, time_t mtime) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << std::string(bytes, 'x');
    timespec times[2] = {{mtime, 0}, {mtime, 0}};
    utimensat(AT_FDCWD, p.c_str(), times, 0);
  };
  const time_t now = 2000000000;
  put("20261101T000000Z_a.json", 100, now - 10);
  put("20261102T000000Z_b.json", 100, now - 10);
  put("20261103T000000Z_c.json", 100, now - 10);
  put("notes.txt", 1000, now - 999999);  // not a record: never touched
  auto r = rotate_records(dir_, 250, 0, now);
  EXPECT_EQ(r.removed, std::vector<std::string>{"20261101T000000Z_a.json"});
  EXPECT_EQ(r.kept_bytes, 200u);
  put("20261104T000000Z_d.json", 10, now - 5000);
  r = rotate_records(dir_, 0, 3600, now);  // by age: only d is older than an hour
  EXPECT_EQ(r.removed, std::vector<std::string>{"20261104T000000Z_d.json"});
  EXPECT_EQ(names(), (std::vector<std::string>{"20261102T000000Z_b.json", "20261103T000000Z_c.json",
                                               "notes.txt"}));
  // Written last, though its job started first (a long job): the newest, kept.
  put("20261001T000000Z_long.json", 100, now - 1);
  r = rotate_records(dir_, 250, 0, now);
  EXPECT_EQ(r.removed, std::vector<std::string>{"20261102T000000Z_b.json"});
  // The record just written is kept even when it alone is over the limit.
  put("20261201T000000Z_huge.json", 1000, now);
  r = rotate_records(dir_, 500, 0, now, "20261201T000000Z_huge.json");
  EXPECT_EQ(r.removed, (std::vector<std::string>{"20261103T000000Z_c.json",
                                                 "20261001T000000Z_long.json"}));
  EXPECT_TRUE(fs::exists(dir_ + "/20261201T000000Z_huge.json"));
}
