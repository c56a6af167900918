// SPDX-License-Identifier: Apache-2.0
// Job records written off the daemon's loop: the streamed record is the table's record, byte
// for byte (with the daemon's overrides), and the writer's thread hands back what it wrote.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/job_record.hpp"
#include "daemon/job_table.hpp"
#include "daemon/job_writer.hpp"
#include "daemon/record_writer.hpp"
#include "daemon_test_util.hpp"
#include "exporters/json_report.hpp"

using namespace iolens;
using namespace iolens::daemon;
namespace fs = std::filesystem;
using testing_util::key;
using testing_util::mark;

namespace {

const std::string kPod = "/kubepods.slice/kubepods-burstable.slice/"
                         "kubepods-burstable-pod0f3e9a7c_1d2b_4c5d_8e9f_0a1b2c3d4e5f.slice";
const std::string kCtr = kPod + "/cri-containerd-" + std::string(64, 'a') + ".scope";

/// A table with one Kubernetes job: two processes with container labels, three files (one
/// name not UTF-8), and a live or a closed job as asked.
JobTable table_with_job(bool close) {
  jobs::Rule r;
  r.kind = jobs::RuleKind::Kubernetes;
  r.name = "kubernetes";
  r.roots = {"/kubepods.slice"};
  JobTable t(jobs::Selector({r}), jobs::Limits{}, 1'000'000'000);
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtr, true, 20);
  EXPECT_TRUE(t.on_mark(mark(100, 5)));
  t.on_event(core::ForkEvent{{101, 1010}, {100, 1000}, 30, "python3", 5});
  for (uint64_t ino : {1, 2, 3}) {
    core::FileCounters c = core::new_counters();
    c.opens = c.closes = c.reads = ino;
    c.bytes_read = 4096 * ino;
    c.max_byte_read = static_cast<int64_t>(4096 * ino) - 1;
    t.on_file(key(ino == 3 ? 101 : 100, ino), c, close);
  }
  if (close) t.on_cgroup_removed(3, 5'000);
  return t;
}

std::string streamed(const Job& job, const RecordBasis& basis, const nlohmann::json& overrides) {
  const core::RunSnapshot snap = job_snapshot(job, basis);
  std::string text;
  EXPECT_TRUE(exporters::write_run_json(
      snap, "v", [&](std::string_view piece) { text += piece; return true; },
      job_record_edits(job, job_summary(job, snap), overrides)));
  return text;
}

class RecordWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iolens-record-writer-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

}  // namespace

// The streamed record and the table's (the `job` answer's pages are cut from the latter) are
// one text; what that text holds is checked here and in daemon_job_table_test.cpp.
TEST(JobRecord, TheStreamedRecordIsTheTablesRecordByteForByte) {
  for (bool closed : {false, true}) {
    JobTable t = table_with_job(closed);
    const Job& job = *t.jobs().begin()->second;
    const nlohmann::json overrides = {{"lost", {{"events", 3}, {"decode_errors", 0}}},
                                      {"restart", {{"resumed", true}}}};
    nlohmann::json dom = t.job_json(job, "v");
    for (auto it = overrides.begin(); it != overrides.end(); ++it) dom[it.key()] = it.value();
    const std::string text = streamed(job, t.record_basis(), overrides);
    EXPECT_EQ(text, exporters::dump_json(dom)) << "closed " << closed;
    // What the comparison stands on: the record is a job's, with its processes' labels.
    EXPECT_EQ(dom["schema"], "iolens.job/1");
    EXPECT_FALSE(dom.contains("command"));
    EXPECT_EQ(dom["lost"]["events"], 3);
    EXPECT_EQ(dom["end_ns"].is_null(), !closed);
    EXPECT_EQ(dom["job"]["totals"]["bytes_read"], 4096u * 6);
    ASSERT_EQ(dom["processes"].size(), 2u);
    for (const auto& p : dom["processes"]) EXPECT_EQ(p["labels"]["container_id"], std::string(64, 'a'));
  }
}

TEST_F(RecordWriterTest, TheThreadWritesTheTakenJobAndHandsBackItsPathAndSummary) {
  JobTable t = table_with_job(true);
  ASSERT_EQ(t.closing().size(), 1u);
  const std::string id = t.closing().front();
  t.find(id)->state = JobState::Closed;  // as the daemon sets it before handing it over
  // A mount table in the basis: the record's rows take their alignment from it (-1 here: no
  // row has a path).
  const auto table = std::make_shared<const std::vector<core::AlignmentMount>>(
      std::vector<core::AlignmentMount>{{"/data", 65536}, {"/", 4096}});
  t.set_alignment_table(table);
  const nlohmann::json expected = t.job_json(*t.find(id), "v");
  ASSERT_TRUE(expected["files"][0]["counters"]["file_alignment"].is_null());  // no path here
  JobWriter files(dir_, 0, 0);
  ASSERT_TRUE(files.prepare());
  {
    RecordWriter w(files);
    EXPECT_EQ(w.pending(), 0u);
    RecordJob r;
    r.basis = t.record_basis();
    r.version = "v";
    r.serial = 7;
    r.job = t.take(id);
    ASSERT_TRUE(r.job);
    w.submit(std::move(r));
    w.wait_idle();
    EXPECT_EQ(w.pending(), 1u);  // written, not yet taken
    const std::vector<RecordDone> done = w.take_done();
    EXPECT_EQ(w.pending(), 0u);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].id, id);
    EXPECT_EQ(done[0].serial, 7u);
    EXPECT_EQ(done[0].alignment, table);  // the basis's, not read again
    EXPECT_TRUE(done[0].record) << done[0].record.message;
    EXPECT_EQ(done[0].summary, expected["job"]);
    ASSERT_FALSE(done[0].path.empty());
    const nlohmann::json written = nlohmann::json::parse(read(done[0].path));
    // Taken from the table, the job says closed in both.
    EXPECT_EQ(written, expected);
  }
  EXPECT_EQ(files.written(), 1u);
  EXPECT_EQ(files.failed(), 0u);
}

// The daemon takes Darshan's mount table for live pages and captures from the writer's
// thread, which reads it when it starts (never the daemon's loop: statfs() may block), then
// again for each record written without one.
TEST_F(RecordWriterTest, TheWritersThreadReadsTheMountTableAtItsStartAndAgainOnlyWhenItChanged) {
  JobWriter files(dir_, 0, 0);
  RecordWriter w(files);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!w.alignment() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto first = w.alignment();
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->empty());  // this machine has a mount Darshan keeps ("/", at least)
  JobTable t = table_with_job(true);
  const std::string id = t.closing().front();
  t.find(id)->state = JobState::Closed;
  RecordJob r;
  r.basis = t.record_basis();  // no table: the writer gives the record its own
  r.version = "v";
  r.job = t.take(id);
  w.submit(std::move(r));
  w.wait_idle();
  const std::vector<RecordDone> done = w.take_done();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_NE(done[0].alignment, nullptr);
  // No mount came or went since the start: the table read then (MountTableWatch's test has a
  // mount change it read again for)
  EXPECT_EQ(done[0].alignment, first);
  EXPECT_EQ(w.alignment(), done[0].alignment);
}

TEST_F(RecordWriterTest, AJobWrittenAtAStopSaysInterruptedAndGetsItsDarshanLog) {
  JobTable t = table_with_job(false);
  const std::string id = t.jobs().begin()->first;
  JobWriter files(dir_, 0, 0);
  RecordJob r;
  r.basis = t.record_basis();
  r.version = "v";
  r.interrupted = true;
  r.darshan = true;
  r.node = "node7";
  r.job = t.take(id);
  const RecordDone d = write_record(files, r);
  ASSERT_TRUE(d.record) << d.record.message;
  ASSERT_TRUE(d.darshan) << d.darshan.message;
  EXPECT_EQ(d.summary["state"], "interrupted");
  const nlohmann::json written = nlohmann::json::parse(read(d.path));
  EXPECT_EQ(written["job"]["state"], "interrupted");
  EXPECT_TRUE(written["end_ns"].is_null());
  const std::string log = d.path.substr(0, d.path.size() - 5) + ".darshan";
  EXPECT_GT(fs::file_size(log), 0u);
  EXPECT_EQ(files.darshan_written(), 1u);
  // No mount table in the basis (the daemon leaves it to the writer, off its loop): the writer
  // read this process's and hands it back (its rows have no path: their alignment is null).
  ASSERT_NE(d.alignment, nullptr);
  EXPECT_FALSE(d.alignment->empty());
}

TEST_F(RecordWriterTest, ARecordThatCannotBeWrittenIsHandedBackWithItsError) {
  JobTable t = table_with_job(true);
  const std::string id = t.closing().front();
  std::ofstream(dir_ + "/file") << "x";
  JobWriter files(dir_ + "/file/out", 0, 0);  // a directory below a regular file: ENOTDIR
  RecordWriter w(files);
  RecordJob r;
  r.basis = t.record_basis();
  r.job = t.take(id);
  w.submit(std::move(r));
  w.wait_idle();
  const std::vector<RecordDone> done = w.take_done();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].record);
  EXPECT_NE(done[0].record.message.find(dir_ + "/file/out"), std::string::npos)
      << done[0].record.message;
  EXPECT_TRUE(done[0].path.empty());
  EXPECT_EQ(files.failed(), 1u);
}

TEST_F(RecordWriterTest, QueuedJobsAreWrittenBeforeTheWriterIsGone) {
  JobWriter files(dir_, 0, 0);
  std::vector<JobTable> tables;
  for (int i = 0; i < 3; ++i) tables.push_back(table_with_job(true));
  {
    RecordWriter w(files);
    // the same job three times: three records, the later ones under free names (.1, .2)
    for (JobTable& t : tables) {
      RecordJob r;
      r.basis = t.record_basis();
      r.version = "v";
      r.job = t.take(t.closing().front());
      w.submit(std::move(r));
    }
  }  // destroyed at once: what was queued is written, not dropped
  EXPECT_EQ(files.written(), 3u);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 3u);
  EXPECT_NE(names[0].find(".1.json"), std::string::npos);
  EXPECT_NE(names[1].find(".2.json"), std::string::npos);
}

TEST(JobRecordState, AJobHandedOverIsSavedAsClosingAndALoadedTableWritesTheSameRecord) {
  JobTable t = table_with_job(true);
  const std::string id = t.closing().front();
  t.find(id)->state = JobState::Closed;
  const nlohmann::json expected = t.job_json(*t.find(id), "v");
  std::shared_ptr<const Job> handed = t.take(id);
  EXPECT_TRUE(t.closing().empty());
  EXPECT_EQ(t.find(id), nullptr);
  // What the daemon saves while the record is written, loaded by the next daemon.
  const nlohmann::json saved = t.save({handed.get()});
  JobTable u(jobs::Selector({}), jobs::Limits{}, 1'000'000'000);
  std::string error;
  ASSERT_TRUE(u.load(saved, error)) << error;
  ASSERT_EQ(u.closing(), std::vector<std::string>{id});
  Job* again = u.find(id);
  ASSERT_NE(again, nullptr);
  again->state = JobState::Closed;
  EXPECT_EQ(u.job_json(*again, "v"), expected);
  // Saved without it (its record written), it is gone.
  JobTable v(jobs::Selector({}), jobs::Limits{}, 1'000'000'000);
  ASSERT_TRUE(v.load(t.save(), error)) << error;
  EXPECT_EQ(v.find(id), nullptr);
}

// The writer reads the mount table again only when it changed: no change, no re-read; a mount
// and an unmount each flag it. The mounts need root: done in a child in a mount namespace of its
// own (nothing of the host changes); skipped without root.
TEST(MountTableWatch, SaysChangedFirstThenOnlyAfterAMountOrUnmount) {
  if (geteuid() != 0) {
    // Without root, on the host's table (a mount elsewhere meanwhile would flag it).
    MountTableWatch w;
    EXPECT_TRUE(w.changed());
    EXPECT_FALSE(w.changed());
    GTEST_SKIP() << "mounting needs root (the no-change half ran)";
  }
  char tmpl[] = "/tmp/iolens-mountwatch-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // exit codes: 0 all as expected, 10+n the n-th expectation failed, 9 setup failed
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      _exit(9);
    MountTableWatch w;
    if (!w.changed()) _exit(10);
    if (w.changed()) _exit(11);
    if (w.changed()) _exit(11);
    if (mount("iolens-test", tmpl, "tmpfs", 0, "size=64k") != 0) _exit(9);
    if (!w.changed()) _exit(12);
    if (w.changed()) _exit(13);
    if (umount(tmpl) != 0) _exit(9);
    if (!w.changed()) _exit(14);
    _exit(w.changed() ? 15 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  rmdir(tmpl);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10+n: the n-th expectation in the child failed; 9: setup";
}
