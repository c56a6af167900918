// SPDX-License-Identifier: Apache-2.0
// Job record files: stable names, hostile ids made safe, atomic writes, rotation by size and age.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/zstd_stream.hpp"
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
  /// A file of `bytes` bytes modified at `mtime`.
  void put(const std::string& name, size_t bytes, time_t mtime) const {
    std::ofstream(dir_ + "/" + name) << std::string(bytes, 'x');
    touch(name, mtime);
  }
  void touch(const std::string& name, time_t mtime) const {
    timespec times[2] = {{mtime, 0}, {mtime, 0}};
    utimensat(AT_FDCWD, (dir_ + "/" + name).c_str(), times, 0);
  }
  /// Job x's record and log written while the temporary name of its file ending in `suffix`
  /// is taken by a directory: open(2) fails (EISDIR) for that file only.
  JobWritten write_blocked(JobWriter& w, const std::string& suffix) const {
    fs::create_directory(dir_ + "/.tmp-20261122T031500Z_x" + suffix);
    const std::string log = "log";
    return w.write("20261122T031500Z_x.json", {{"a", 1}}, &log);
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
  const JobWritten w1 = w.write("20261122T031500Z_x.json", {{"a", 1}});
  const JobWritten w2 = w.write("20261122T031500Z_x.json", {{"a", 2}});
  ASSERT_TRUE(w1.record.ok);
  ASSERT_TRUE(w2.record.ok);
  EXPECT_TRUE(w1.darshan.ok);  // none asked
  EXPECT_EQ(w1.darshan_path, "");
  const std::string p1 = w1.path, p2 = w2.path;
  EXPECT_NE(p1, p2);
  EXPECT_EQ(fs::path(p2).filename(), "20261122T031500Z_x.1.json");
  std::ifstream in(p1);
  nlohmann::json j;
  in >> j;
  EXPECT_EQ(j["a"], 1);
  for (const auto& e : fs::directory_iterator(dir_ + "/out"))
    EXPECT_NE(e.path().filename().string().rfind(".tmp", 0), 0u) << "temporary left behind";
  EXPECT_EQ(w.written(), 2u);
  EXPECT_EQ(w.darshan_written(), 0u);
  EXPECT_EQ(fs::path(p1).parent_path(), fs::path(dir_ + "/out"));
}

TEST_F(WriterTest, WritesTheDarshanLogUnderTheRecordsStem) {
  JobWriter w(dir_, 0, 0);
  const std::string log1 = std::string("3.41\0\0\0\0", 8) + "one", log2 = "two";
  const JobWritten a = w.write("20261122T031500Z_x.json", {{"a", 1}}, &log1);
  ASSERT_TRUE(a.record.ok) << a.record.message;
  ASSERT_TRUE(a.darshan.ok) << a.darshan.message;
  EXPECT_EQ(a.path, dir_ + "/20261122T031500Z_x.json");
  EXPECT_EQ(a.darshan_path, dir_ + "/20261122T031500Z_x.darshan");
  std::ifstream in(a.darshan_path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), log1);  // byte for byte
  // A second job of that name: both files get the next free stem, together.
  const JobWritten b = w.write("20261122T031500Z_x.json", {{"a", 2}}, &log2);
  EXPECT_EQ(b.path, dir_ + "/20261122T031500Z_x.1.json");
  EXPECT_EQ(b.darshan_path, dir_ + "/20261122T031500Z_x.1.darshan");
  // A stem taken by a log alone (its record lost) is not reused either.
  std::ofstream(dir_ + "/20261122T031500Z_y.darshan") << "orphan";
  const JobWritten c = w.write("20261122T031500Z_y.json", {{"a", 3}}, &log2);
  EXPECT_EQ(c.path, dir_ + "/20261122T031500Z_y.1.json");
  EXPECT_EQ(c.darshan_path, dir_ + "/20261122T031500Z_y.1.darshan");
  EXPECT_EQ(w.written(), 3u);
  EXPECT_EQ(w.darshan_written(), 3u);
  EXPECT_EQ(w.failed() + w.darshan_failed(), 0u);
  for (const auto& n : names()) EXPECT_NE(n.rfind(".tmp", 0), 0u) << "temporary left behind: " << n;
}

TEST_F(WriterTest, AFailedDarshanLogIsCountedAndTheRecordStillWritten) {
  JobWriter w(dir_, 0, 0);
  const JobWritten r = write_blocked(w, ".darshan");
  EXPECT_FALSE(r.darshan.ok);
  EXPECT_NE(r.darshan.message.find(".tmp-20261122T031500Z_x.darshan"), std::string::npos)
      << r.darshan.message;
  EXPECT_EQ(r.darshan_path, "");
  ASSERT_TRUE(r.record.ok) << r.record.message;
  EXPECT_TRUE(fs::exists(dir_ + "/20261122T031500Z_x.json"));
  EXPECT_FALSE(fs::exists(dir_ + "/20261122T031500Z_x.darshan"));
  EXPECT_EQ(w.darshan_failed(), 1u);
  EXPECT_EQ(w.darshan_written(), 0u);
  EXPECT_EQ(w.written(), 1u);
  EXPECT_EQ(w.failed(), 0u);
  // The next job's log is written again.
  const std::string log = "log";
  const JobWritten n = w.write("20261122T031501Z_y.json", {{"a", 2}}, &log);
  EXPECT_TRUE(n.darshan.ok) << n.darshan.message;
  EXPECT_EQ(w.darshan_written(), 1u);
}

TEST_F(WriterTest, AFailedRecordIsCounted) {
  JobWriter w(dir_, 0, 0);
  const JobWritten r = write_blocked(w, ".json");
  EXPECT_FALSE(r.record.ok);
  EXPECT_EQ(r.path, "");
  EXPECT_EQ(w.failed(), 1u);
  EXPECT_EQ(w.written(), 0u);
  // The log, written first, stays: a valid log of the job, under the stem no record takes.
  EXPECT_TRUE(r.darshan.ok);
  EXPECT_TRUE(fs::exists(dir_ + "/20261122T031500Z_x.darshan"));
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

TEST_F(WriterTest, RotationCountsAndRemovesAJobsRecordAndLogTogether) {
  const time_t now = 2000000000;
  // a: record and log; b: record only (darshan_logs off then); c: a log whose record is gone.
  put("20261101T000000Z_a.json", 100, now - 30);
  put("20261101T000000Z_a.darshan", 300, now - 30);
  put("20261102T000000Z_b.json", 100, now - 20);
  put("20261103T000000Z_c.darshan", 100, now - 10);
  put("20261104T000000Z_d.json", 100, now - 5);
  put("20261104T000000Z_d.darshan", 100, now - 5);
  put(".tmp-20261105T000000Z_e.darshan", 5000, now - 999999);  // a temporary: never touched
  put("20261105T000000Z_e.darshan.txt", 5000, now - 999999);   // not a job's file
  // 800 bytes of job files: a's pair alone (400 together) brings them under 500.
  auto r = rotate_records(dir_, 500, 0, now);
  EXPECT_EQ(r.removed, (std::vector<std::string>{"20261101T000000Z_a.darshan",
                                                 "20261101T000000Z_a.json"}));
  EXPECT_EQ(r.removed_jobs, 1u);
  EXPECT_EQ(r.kept_bytes, 400u);
  // By age, the pair's newest file counts: d's log is fresh though its record is old.
  put("20261104T000000Z_d.json", 100, now - 5000);
  r = rotate_records(dir_, 0, 3600, now);
  EXPECT_TRUE(r.removed.empty());
  put("20261104T000000Z_d.darshan", 100, now - 4000);
  r = rotate_records(dir_, 0, 3600, now);
  EXPECT_EQ(r.removed, (std::vector<std::string>{"20261104T000000Z_d.darshan",
                                                 "20261104T000000Z_d.json"}));
  EXPECT_EQ(r.removed_jobs, 1u);
  // The record just written keeps its log, even over the limit; the others go, one job each.
  put("20261201T000000Z_f.json", 1000, now);
  put("20261201T000000Z_f.darshan", 1000, now);
  r = rotate_records(dir_, 100, 0, now, "20261201T000000Z_f.json");
  EXPECT_EQ(r.removed, (std::vector<std::string>{"20261102T000000Z_b.json",
                                                 "20261103T000000Z_c.darshan"}));
  EXPECT_EQ(r.removed_jobs, 2u);
  EXPECT_EQ(r.kept_bytes, 2000u);
  EXPECT_EQ(names(), (std::vector<std::string>{".tmp-20261105T000000Z_e.darshan",
                                               "20261105T000000Z_e.darshan.txt",
                                               "20261201T000000Z_f.darshan",
                                               "20261201T000000Z_f.json"}));
}

TEST_F(WriterTest, WriteRotatesPairsAndCountsJobs) {
  JobWriter w(dir_, 1500, 0);
  const std::string log(400, 'L');
  for (const char* n : {"20261101T000000Z_a.json", "20261102T000000Z_b.json",
                        "20261103T000000Z_c.json"}) {
    ASSERT_TRUE(w.write(n, {{"pad", std::string(300, 'p')}}, &log).record.ok);
    // Distinct modification times, oldest first, as separate writes would have them.
    const std::string stem = std::string(n).substr(0, std::string(n).size() - 5);
    const time_t t = time(nullptr) - 100 + static_cast<time_t>(w.written());
    for (const char* sfx : {".json", ".darshan"}) touch(stem + sfx, t);
  }
  // Each job is about 720 bytes: the third write leaves two jobs, the oldest pair gone.
  EXPECT_EQ(w.rotated(), 1u);
  EXPECT_EQ(names(), (std::vector<std::string>{"20261102T000000Z_b.darshan", "20261102T000000Z_b.json",
                                               "20261103T000000Z_c.darshan",
                                               "20261103T000000Z_c.json"}));
}

// Issue 21: 1,001 jobs whose sanitized names collide in the same second (ids that differ only in
// bytes the sanitizer replaces) once made the 1,001st overwrite the 1,000th record, both counted
// as written. Every one must get a file of its own, with its own content.
TEST_F(WriterTest, ThousandsOfCollidingNamesInOneSecondAllGetTheirOwnFile) {
  // In memory where there is a tmpfs: a thousand fsyncs on a disk take seconds.
  char shm[] = "/dev/shm/iolens-writer-XXXXXX";
  if (mkdtemp(shm) != nullptr) {
    fs::remove_all(dir_);
    dir_ = shm;
  }
  JobWriter w(dir_, 0, 0);
  const std::string log_bytes = "log";
  constexpr int kJobs = 1001;
  std::set<std::string> paths;
  for (int i = 0; i < kJobs; ++i) {
    const std::string id = "cgroup/j" + std::string(1, i % 2 ? '/' : ':');
    const std::string name = job_file_name(id, kStart);
    ASSERT_EQ(name, "20261122T031500Z_cgroup_j_.json");
    const JobWritten r = w.write(name, {{"n", i}}, i == kJobs - 1 ? &log_bytes : nullptr);
    ASSERT_TRUE(r.record.ok) << i << ": " << r.record.message;
    ASSERT_TRUE(r.darshan.ok) << i << ": " << r.darshan.message;
    EXPECT_TRUE(paths.insert(r.path).second) << i << ": " << r.path << " given twice";
  }
  EXPECT_EQ(w.written(), static_cast<uint64_t>(kJobs));
  EXPECT_EQ(names().size(), static_cast<size_t>(kJobs) + 1);  // and the last one's log
  std::set<int> seen;
  for (const std::string& p : paths) {
    std::ifstream in(p);
    nlohmann::json j;
    in >> j;
    seen.insert(j.at("n").get<int>());
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kJobs)) << "a record holds another job's content";
  // The last job's log shares its record's stem, and rotation still sees them as one job.
  const std::string last = *std::max_element(paths.begin(), paths.end(), [](auto& a, auto& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  EXPECT_EQ(last, dir_ + "/20261122T031500Z_cgroup_j_.1000.json");
  EXPECT_TRUE(fs::exists(dir_ + "/20261122T031500Z_cgroup_j_.1000.darshan"));
  const RotationResult rot = rotate_records(dir_, 1, 0, 2000000000, "20261122T031500Z_cgroup_j_.1000.json");
  EXPECT_EQ(rot.removed_jobs, static_cast<uint64_t>(kJobs) - 1);
  EXPECT_EQ(names(), (std::vector<std::string>{"20261122T031500Z_cgroup_j_.1000.darshan",
                                               "20261122T031500Z_cgroup_j_.1000.json"}));
}

// Issue 21: root writes records; a directory someone else controls is refused, never chmodded.
TEST_F(WriterTest, RefusesAnOutputDirectoryOthersControl) {
  fs::create_directory(dir_ + "/real");
  chmod((dir_ + "/real").c_str(), 0755);
  fs::create_directory_symlink(dir_ + "/real", dir_ + "/link");
  JobWriter via_link(dir_ + "/link", 0, 0);
  const auto s = via_link.prepare();
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.message.find(dir_ + "/link"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("symbolic link"), std::string::npos) << s.message;
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/real").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "the link's target was chmodded";
  const JobWritten w = via_link.write("20261122T031500Z_x.json", {{"a", 1}});
  EXPECT_FALSE(w.record.ok);
  EXPECT_EQ(via_link.failed(), 1u);
  EXPECT_TRUE(fs::is_empty(dir_ + "/real"));
  fs::create_directory(dir_ + "/open");
  chmod((dir_ + "/open").c_str(), 01777);
  JobWriter open_dir(dir_ + "/open", 0, 0);
  const auto o = open_dir.prepare();
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.message.find("group- or world-writable"), std::string::npos) << o.message;
}

// A stale temporary that is a hard link to someone's file: removed, never written through.
TEST_F(WriterTest, AStaleTemporaryIsNeverWrittenThrough) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "precious";
  ASSERT_EQ(link(victim.c_str(), (dir_ + "/.tmp-20261122T031500Z_x.json").c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), (dir_ + "/.tmp-20261122T031500Z_x.darshan").c_str()), 0);
  JobWriter w(dir_, 0, 0);
  const std::string log = "log";
  const JobWritten r = w.write("20261122T031500Z_x.json", {{"a", 1}}, &log);
  EXPECT_TRUE(r.record.ok) << r.record.message;
  EXPECT_TRUE(r.darshan.ok) << r.darshan.message;
  std::string content;
  std::getline(std::ifstream(victim), content);
  EXPECT_EQ(content, "precious");
}

// record_compression: zstd (the daemon's default): the record is `<stem>.json.zst`, one zstd
// frame whose text is the record's; a stem taken by a record of the other kind is not reused;
// rotation counts and removes compressed records with their logs.
TEST_F(WriterTest, CompressedRecordsAreOneZstdFrameOfTheText) {
  JobWriter w(dir_, 0, 0, true);
  const std::string log = "log";
  const JobWritten a = w.write("20261122T031500Z_x.json", {{"a", 1}}, &log);
  ASSERT_TRUE(a.record.ok) << a.record.message;
  EXPECT_EQ(a.path, dir_ + "/20261122T031500Z_x.json.zst");
  EXPECT_EQ(a.darshan_path, dir_ + "/20261122T031500Z_x.darshan");
  std::ifstream in(a.path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  ASSERT_TRUE(iolens::core::is_zstd_frame(bytes));
  std::string error;
  const auto text = iolens::core::zstd_decompress(bytes, 1 << 20, error);
  ASSERT_TRUE(text) << error;
  EXPECT_EQ(*text, "{\n \"a\": 1\n}\n");
  // an uncompressed record of stem y (written before the setting changed) keeps y taken
  std::ofstream(dir_ + "/20261122T031500Z_y.json") << "{}";
  EXPECT_EQ(w.write("20261122T031500Z_y.json", {{"a", 2}}).path,
            dir_ + "/20261122T031500Z_y.1.json.zst");
  JobWriter plain(dir_, 0, 0, false);
  EXPECT_EQ(plain.write("20261122T031500Z_x.json", {{"a", 3}}).path,
            dir_ + "/20261122T031500Z_x.1.json");
  // a record whose text cannot be made leaves nothing behind
  const JobWritten bad = w.write("20261122T031500Z_z.json", [](const Sink&) { return false; });
  EXPECT_FALSE(bad.record.ok);
  for (const auto& n : names()) EXPECT_NE(n.rfind(".tmp", 0), 0u) << "temporary left behind: " << n;
  // rotation: a compressed record and its log are one job
  put("20261101T000000Z_old.json.zst", 10, 1000);
  put("20261101T000000Z_old.darshan", 10, 1000);
  const RotationResult r = rotate_records(dir_, 0, 60, 2000);
  EXPECT_EQ(r.removed_jobs, 1u);
  EXPECT_EQ(std::set<std::string>(r.removed.begin(), r.removed.end()),
            (std::set<std::string>{"20261101T000000Z_old.json.zst", "20261101T000000Z_old.darshan"}));
}

namespace {

/// A record's text for the streaming write().
RecordText text_of(const std::string& s) {
  return [s](const Sink& sink) { return sink(s); };
}

/// Whether /tmp keeps user extended attributes (tmpfs since Linux 6.6, ext4): the identity
/// tests need them.
bool user_xattrs() {
  char tmpl[] = "/tmp/iolens-xattr-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return false;
  const bool ok = fsetxattr(fd, "user.iolens.probe", "1", 1, 0) == 0;
  close(fd);
  unlink(tmpl);
  return ok;
}

}  // namespace

// A job a restarted daemon took from its saved state: its record found where an earlier daemon
// (killed before its next save) wrote it, by identity, behind another job's files of the same
// stem; nothing written again (docs/daemon.md#crash-points).
TEST_F(WriterTest, AJobWrittenBeforeARestartIsFoundByItsIdentityNotWrittenTwice) {
  if (!user_xattrs()) GTEST_SKIP() << "this filesystem keeps no user extended attributes";
  JobWriter w(dir_, 0, 0);
  const std::string log = "log";
  // Another job of that name and second first, then ours (at stem .1).
  ASSERT_TRUE(w.write("20261122T031500Z_x.json", text_of("{\"other\":1}"), &log, true, "5 x")
                  .record.ok);
  const JobWritten ours =
      w.write("20261122T031500Z_x.json", text_of("{\"ours\":1}"), &log, true, "7 x");
  ASSERT_EQ(ours.path, dir_ + "/20261122T031500Z_x.1.json");
  EXPECT_EQ(w.unidentified(), 0u);  // tmpfs and ext4 keep user xattrs

  JobWriter again(dir_, 0, 0);  // the restarted daemon's
  const JobWritten r =
      again.write("20261122T031500Z_x.json", text_of("{\"ours\":2}"), &log, true, "7 x", true);
  ASSERT_TRUE(r.record.ok) << r.record.message;
  EXPECT_TRUE(r.already);
  EXPECT_EQ(r.path, ours.path);
  EXPECT_EQ(r.darshan_path, dir_ + "/20261122T031500Z_x.1.darshan");
  EXPECT_EQ(again.already_written(), 1u);
  EXPECT_EQ(again.written(), 0u);
  EXPECT_EQ(names(), (std::vector<std::string>{"20261122T031500Z_x.1.darshan",
                                                "20261122T031500Z_x.1.json",
                                                "20261122T031500Z_x.darshan",
                                                "20261122T031500Z_x.json"}));
  std::string content;
  std::getline(std::ifstream(ours.path), content);
  EXPECT_EQ(content, "{\"ours\":1}");  // not replaced

  // Not from a saved state (maybe_written false), or another job (identity): a new stem.
  const JobWritten fresh =
      again.write("20261122T031500Z_x.json", text_of("{\"n\":3}"), &log, true, "7 x");
  EXPECT_EQ(fresh.path, dir_ + "/20261122T031500Z_x.2.json");
  const JobWritten other =
      again.write("20261122T031500Z_x.json", text_of("{\"n\":4}"), &log, true, "8 x", true);
  EXPECT_FALSE(other.already);
  EXPECT_EQ(other.path, dir_ + "/20261122T031500Z_x.3.json");
}

// The job's record is looked for at every stem of its name, not only up to the first free one:
// a stem before it may have been freed since (rotation, a collector moving records away).
TEST_F(WriterTest, AJobWrittenBehindAStemFreedSinceIsStillFound) {
  if (!user_xattrs()) GTEST_SKIP() << "this filesystem keeps no user extended attributes";
  JobWriter w(dir_, 0, 0);
  ASSERT_TRUE(w.write("20261122T031500Z_x.json", text_of("{}"), nullptr, true, "a").record.ok);
  const JobWritten ours = w.write("20261122T031500Z_x.json", text_of("{}"), nullptr, true, "b");
  ASSERT_EQ(ours.path, dir_ + "/20261122T031500Z_x.1.json");
  fs::remove(dir_ + "/20261122T031500Z_x.json");  // stem 0 free again
  JobWriter again(dir_, 0, 0);
  ASSERT_TRUE(again.prepare().ok);
  again.remove_stale_temporaries();  // as a start does: its listing must not hide the next one's
  const JobWritten r = again.write("20261122T031500Z_x.json", text_of("{}"), nullptr, true, "b", true);
  EXPECT_TRUE(r.already);
  EXPECT_EQ(r.path, ours.path);
  EXPECT_EQ(names(), (std::vector<std::string>{"20261122T031500Z_x.1.json"}));
}

// Killed after the job's log was renamed and before its record was: the log is kept and the
// record written beside it, under the same stem.
TEST_F(WriterTest, AJobsLogWithoutItsRecordGetsTheRecordBesideIt) {
  if (!user_xattrs()) GTEST_SKIP() << "this filesystem keeps no user extended attributes";
  const std::string log = "log";
  {
    JobWriter w(dir_, 0, 0);
    ASSERT_TRUE(w.write("20261122T031500Z_x.json", text_of("{}"), &log, true, "7 x").record.ok);
  }
  fs::remove(dir_ + "/20261122T031500Z_x.json");  // as if killed before the record's rename
  JobWriter again(dir_, 0, 0);
  const std::string log2 = "log, made again";
  const JobWritten r =
      again.write("20261122T031500Z_x.json", text_of("{\"r\":1}"), &log2, true, "7 x", true);
  ASSERT_TRUE(r.record.ok) << r.record.message;
  ASSERT_TRUE(r.darshan.ok) << r.darshan.message;
  EXPECT_FALSE(r.already);
  EXPECT_EQ(r.path, dir_ + "/20261122T031500Z_x.json");
  EXPECT_EQ(r.darshan_path, dir_ + "/20261122T031500Z_x.darshan");
  std::string content;
  std::getline(std::ifstream(r.darshan_path), content);
  EXPECT_EQ(content, "log");  // the one written before: whole (renamed into place)
  EXPECT_EQ(again.written(), 1u);
  EXPECT_EQ(again.darshan_written(), 0u);
  EXPECT_EQ(names(), (std::vector<std::string>{"20261122T031500Z_x.darshan",
                                                "20261122T031500Z_x.json"}));
}

// A killed writer's temporaries go at the next start, not one a writer holds, not a file named
// otherwise; their count is kept.
TEST_F(WriterTest, AKilledWritersTemporariesAreRemovedAtStartButNotAHeldOne) {
  put(".tmp-20261122T031500Z_x.json.zst", 100, 1795317300);
  put(".tmp-20261122T031500Z_x.darshan", 100, 1795317300);
  put(".tmp-20261122T031500Z_y.json", 100, 1795317300);  // held below
  put(".tmp-notes.txt", 100, 1795317300);                  // not a record's
  put("20261122T031500Z_z.json", 100, 1795317300);
  const int held = open((dir_ + "/.tmp-20261122T031500Z_y.json").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX), 0);
  JobWriter w(dir_, 0, 0);
  ASSERT_TRUE(w.prepare().ok);
  EXPECT_EQ(w.stale_temporaries_removed(), 0u);  // not by prepare(): the daemon asks once it
  w.remove_stale_temporaries();                    // holds its state directory
  close(held);
  EXPECT_EQ(w.stale_temporaries_removed(), 2u);
  EXPECT_EQ(names(), (std::vector<std::string>{".tmp-20261122T031500Z_y.json", ".tmp-notes.txt",
                                                "20261122T031500Z_z.json"}));
}

// The writer rotates from what it listed once plus what it wrote since (StoredJobs), not from a
// listing per record: the directory stays within its size after every record, the newest jobs
// kept, each job's record and log together, and a file removed behind its back does not stop it.
TEST_F(WriterTest, RotationFromTheWritersOwnIndexKeepsTheNewestWithinTheSize) {
  JobWriter w(dir_, 2000, 0);
  const std::string log(100, 'l');
  std::vector<std::string> stems;
  for (int i = 0; i < 60; ++i) {
    const std::string name = job_file_name("j", kStart + int64_t{i} * 1000000000LL);
    const JobWritten r = w.write(name, text_of(std::string(150 + i, 'r')), &log);
    ASSERT_TRUE(r.record.ok) << r.record.message;
    stems.push_back(name.substr(0, name.size() - 5));
    if (i == 31) fs::remove(dir_ + "/" + stems[30] + ".darshan");  // behind its back
    uint64_t total = 0;
    std::set<std::string> present;
    for (const auto& e : fs::directory_iterator(dir_)) {
      total += fs::file_size(e.path());
      present.insert(e.path().filename());
    }
    EXPECT_LE(total, 2000u) << "after record " << i;
    // The newest job is whole; every job present is whole and newer than every job removed.
    EXPECT_TRUE(present.count(stems.back() + ".json") && present.count(stems.back() + ".darshan"));
    bool gone = false;
    for (int k = i; k >= 0; --k) {
      const bool rec = present.count(stems[k] + ".json") != 0;
      const bool lg = present.count(stems[k] + ".darshan") != 0;
      if (k != 30) {
        EXPECT_EQ(rec, lg) << stems[k] << " after record " << i;
      }
      if (!rec) {
        gone = true;
      } else {
        EXPECT_FALSE(gone) << stems[k] << " kept while a newer job went, after record " << i;
      }
    }
  }
  // ~350 bytes a job: 5 fit in 2000 bytes.
  EXPECT_GE(w.rotated(), 54u);
  EXPECT_LE(w.rotated(), 55u);
  const int fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  StoredJobs listed;
  ASSERT_TRUE(listed.list(fd));
  close(fd);
  EXPECT_GE(listed.jobs(), 5u);
  EXPECT_LE(listed.bytes(), 2000u);
}
