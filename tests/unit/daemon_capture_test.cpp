// SPDX-License-Identifier: Apache-2.0
// Captures in iolensd (agent/daemon/capture, capture_runner): who may stop one, what its status
// says once its output stalled, and the capture's logic against a fake kernel (the trace mode
// and ring of loader/trace_control.hpp): which filter a request sets, that the file holds the
// records of the window and the kernel's losses, and each way a capture ends.
#include "daemon/capture.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "control/peer.hpp"
#include "control/protocol.hpp"
#include "control/unique_fd.hpp"
#include "core/clock.hpp"
#include "daemon/capture_runner.hpp"
#include "daemon/job_table.hpp"
#include "daemon_test_util.hpp"
#include "loader/trace_control.hpp"
#include "trace/trace_file.hpp"

namespace iolens::daemon {
namespace {

TEST(Capture, OnlyItsOwnerRootOrTheDaemonsUserMayStopIt) {
  EXPECT_TRUE(capture_stop_allowed(1000, 1000, 0));
  EXPECT_TRUE(capture_stop_allowed(1000, 0, 0));
  EXPECT_FALSE(capture_stop_allowed(1000, 1001, 0));
  EXPECT_FALSE(capture_stop_allowed(1000, 65534, 0));
  // iolensd running as its own user: that user too (as on the socket itself).
  EXPECT_TRUE(capture_stop_allowed(1000, 990, 990));
  EXPECT_FALSE(capture_stop_allowed(1000, 1001, 990));
  // Root's capture: nobody else.
  EXPECT_FALSE(capture_stop_allowed(0, 1000, 0));
}

TEST(Capture, StatusOfAStalledCaptureSaysWhyAndWhatNeverGotOut) {
  Capture c;
  c.id = 4;
  c.uid = 1000;
  c.start_mono_ns = 1000000000;
  c.deadline_mono_ns = 31000000000;
  EXPECT_EQ("running", c.status(2000000000)["state"]);
  c.end = CaptureEnd::OutputStalled;
  c.end_mono_ns = 12000000000;
  // Window closed, output not settled yet: still running (the client waits on).
  EXPECT_EQ("running", c.status(13000000000)["state"]);
  EXPECT_EQ(0.0, c.status(13000000000)["remaining_s"]);
  c.settled = true;
  c.out_state.written = 65536;
  c.out_state.queued = 4096;
  c.unwritten = 4096;
  c.error = "output stalled: it took no bytes for 10 s";
  const auto j = c.status(14000000000);
  EXPECT_EQ("failed", j["state"]);
  EXPECT_EQ("output stalled", j["reason"]);
  EXPECT_EQ(1000u, j["uid"]);
  EXPECT_EQ(65536u, j["bytes"]);
  EXPECT_EQ(4096u, j["output"]["unwritten_bytes"]);
  EXPECT_EQ(11.0, j["elapsed_s"]);
}


/// The kernel's trace mode and ring: what the capture asked, and the records a test puts in.
class FakeTrace : public loader::TraceControl {
 public:
  Status set_trace_mode(iolens_trace_mode m, int cgroup_fd = -1) override {
    if (refuse) return Status::Error("refused by the test", EPERM);
    mode = m;
    cgroup_given = cgroup_fd >= 0;
    if (m != IOLENS_TRACE_PIDS) pids.clear();
    ++mode_changes;
    return Status::Ok();
  }
  Status add_trace_pid(uint32_t tgid) override {
    pids.push_back(tgid);
    return Status::Ok();
  }
  int consume_trace(const TraceSink& sink) override {
    const int n = static_cast<int>(ring.size());
    for (const auto& r : ring) sink(r);
    ring.clear();
    return n;
  }
  uint64_t trace_ring_size() const override { return 1 << 20; }
  uint64_t trace_records_made() const override { return made; }
  uint64_t trace_records_lost() const override { return lost; }

  /// A read of 4 KiB by process 500 of file `ino`, ended now, as the kernel would trace it
  /// (its start is not before the window's: a call that started earlier is left out).
  void call(uint64_t ino) {
    iolens_trace_record r{};
    r.end_ns = static_cast<uint64_t>(core::clock_ns(CLOCK_MONOTONIC));
    r.start_ns = r.end_ns;
    r.pstart_ns = 5000;
    r.tgid = r.tid = 500;
    r.ino = ino;
    r.dev = 7;
    r.gen = 1;
    r.op = IOLENS_OP_READ;
    r.nr = 17;  // pread64
    r.offset = 0;
    r.ret = r.arg = 4096;
    r.fd = 3;
    ring.push_back(r);
    ++made;
  }

  iolens_trace_mode mode = IOLENS_TRACE_OFF;
  bool cgroup_given = false;
  std::vector<uint32_t> pids;
  std::vector<iolens_trace_record> ring;
  uint64_t made = 0, lost = 0;
  int mode_changes = 0;
  bool refuse = false;
};

class CaptureRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("iolens-capture-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / "cgroup" / "dl" / "a");
    setting_.producer = "iolens test";
    setting_.node = "node-1";
    setting_.cgroup_mount = (dir_ / "cgroup").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static JobTable table() { return testing_util::one_job_table(); }

  /// Starts a capture as uid 1000 would, its output the file `out`.
  nlohmann::json start(CaptureRunner& runner, JobTable& t, const nlohmann::json& req,
                       const std::string& out = "out.iolt") {
    control::UniqueFd fd(open((dir_ / out).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                              0600));
    control::UniqueFd reply;
    const std::string refusal;
    control::RequestContext ctx{peer_, fd, refusal, reply, true};
    return runner.start(req, ctx, t, setting_, core::clock_ns(CLOCK_MONOTONIC));
  }

  /// Services the capture until its output is done with (at most 10 s).
  static void settle(CaptureRunner& runner, JobTable& t) {
    for (int i = 0; i < 2000 && runner.last() && runner.last()->running(); ++i) {
      runner.service(t, core::clock_ns(CLOCK_MONOTONIC));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(runner.last());
    ASSERT_FALSE(runner.last()->running()) << "the capture never settled";
  }

  trace::ReadResult read(const std::string& out = "out.iolt") {
    return trace::read_trace_file((dir_ / out).string());
  }

  std::filesystem::path dir_;
  CaptureRunner::Setting setting_;
  control::Peer peer_{1234, 1000, 1000};
  int events_read_ = 0;
};

TEST_F(CaptureRunnerTest, AJobsCaptureTracesItsCgroupAndHoldsTheWindowsRecordsAndLosses) {
  FakeTrace k;
  JobTable t = table();
  CaptureRunner runner(k, [this] { ++events_read_; });
  const auto st = start(runner, t, {{"job", "cgroup/dl/a"}, {"duration_ms", 60000u}});
  EXPECT_EQ(st["state"], "running");
  EXPECT_EQ(k.mode, IOLENS_TRACE_CGROUP);
  EXPECT_TRUE(k.cgroup_given);
  EXPECT_TRUE(runner.window_open());
  for (uint64_t i = 1; i <= 25; ++i) k.call(i);
  runner.service(t, core::clock_ns(CLOCK_MONOTONIC));
  EXPECT_TRUE(k.ring.empty());  // fed to the session
  for (uint64_t i = 26; i <= 40; ++i) k.call(i);
  k.lost = 3;  // the ring had no room for three more
  k.made += 3;
  runner.end(t, CaptureEnd::Stopped);
  EXPECT_EQ(k.mode, IOLENS_TRACE_OFF);
  EXPECT_EQ(events_read_, 1);  // the names of the last records' files, before the last read
  settle(runner, t);
  EXPECT_EQ(runner.last()->end, CaptureEnd::Stopped);
  EXPECT_TRUE(runner.last()->error.empty()) << runner.last()->error;
  const trace::ReadResult r = read();
  ASSERT_TRUE(r.status.ok) << r.status.message;
  EXPECT_TRUE(r.trace.complete);
  EXPECT_EQ(r.trace.ops.size(), 40u);
  EXPECT_EQ(r.trace.losses.ring_full, 3u);
  EXPECT_EQ(r.trace.losses.produced, 43u);
  EXPECT_EQ(r.trace.meta.job_id, "cgroup/dl/a");
  EXPECT_EQ(r.trace.meta.target, "job:cgroup/dl/a");
  EXPECT_EQ(r.trace.meta.node, "node-1");
  const auto status = runner.last()->status(core::clock_ns(CLOCK_MONOTONIC));
  EXPECT_EQ(status["state"], "done") << status.dump();
}

TEST_F(CaptureRunnerTest, AProcesssCaptureTracesItsPidAndEndsWithItsTimeOrItsJob) {
  FakeTrace k;
  JobTable t = table();
  CaptureRunner runner(k, [] {});
  start(runner, t, {{"pid", 500u}, {"duration_ms", 1u}});
  EXPECT_EQ(k.mode, IOLENS_TRACE_PIDS);
  EXPECT_EQ(k.pids, std::vector<uint32_t>{500});
  k.call(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  settle(runner, t);  // its millisecond is up
  EXPECT_EQ(runner.last()->end, CaptureEnd::Duration);
  EXPECT_EQ(k.mode, IOLENS_TRACE_OFF);
  EXPECT_EQ(read().trace.ops.size(), 1u);
  // The next one ends with its job.
  start(runner, t, {{"pid", 500u}, {"duration_ms", 60000u}}, "second.iolt");
  ASSERT_TRUE(runner.window_open());
  runner.job_ending(t, "cgroup/dl/a");
  settle(runner, t);
  EXPECT_EQ(runner.last()->end, CaptureEnd::JobEnded);
  EXPECT_EQ(runner.last()->id, 2u);
  EXPECT_TRUE(read("second.iolt").trace.complete);
}

TEST_F(CaptureRunnerTest, ACaptureThatCannotStartSaysWhyAndLeavesTheKernelUntraced) {
  FakeTrace k;
  JobTable t = table();
  CaptureRunner runner(k, [] {});
  EXPECT_THROW(start(runner, t, {{"job", "cgroup/dl/nope"}}), std::runtime_error);
  EXPECT_THROW(start(runner, t, {{"pid", 999u}}), std::runtime_error);  // in no live job
  EXPECT_THROW(start(runner, t, {{"cgroup", "/elsewhere"}}), std::runtime_error);
  EXPECT_THROW(start(runner, t, {{"cgroup", "/dl/../etc"}}), std::runtime_error);
  EXPECT_THROW(start(runner, t, {{"pid", 500u}, {"job", "cgroup/dl/a"}}), control::BadRequest);
  EXPECT_EQ(k.mode_changes, 0);  // refused before the kernel was touched
  k.refuse = true;
  try {
    start(runner, t, {{"pid", 500u}});
    ADD_FAILURE() << "a refused trace mode started a capture";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start tracing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runner.last(), nullptr);
  k.refuse = false;
  setting_.timing_off = true;
  EXPECT_THROW(start(runner, t, {{"pid", 500u}}), std::runtime_error);
  setting_.timing_off = false;
  // One at a time.
  start(runner, t, {{"cgroup", setting_.cgroup_mount + "/dl/a/"}});
  EXPECT_EQ(k.mode, IOLENS_TRACE_CGROUP);
  EXPECT_THROW(start(runner, t, {{"pid", 500u}}, "other.iolt"), std::runtime_error);
  runner.end_for_stop(t);
  EXPECT_EQ(runner.last()->end, CaptureEnd::DaemonStop);
  EXPECT_FALSE(runner.last()->running());
}

TEST_F(CaptureRunnerTest, ItsSizeLimitEndsItAndWhatItDroppedIsCounted) {
  FakeTrace k;
  JobTable t = table();
  CaptureRunner runner(k, [] {});
  // A block of ops (16,384) is written whole: the file passes 1 byte with the first block, and
  // every op after it is dropped and counted.
  start(runner, t, {{"pid", 500u}, {"max_bytes", 1u}, {"duration_ms", 60000u}});
  for (uint64_t i = 0; i < 20000; ++i) k.call(i % 50 + 1);
  runner.service(t, core::clock_ns(CLOCK_MONOTONIC));
  settle(runner, t);
  EXPECT_EQ(runner.last()->end, CaptureEnd::SizeLimit);
  const trace::ReadResult r = read();
  ASSERT_TRUE(r.status.ok) << r.status.message;
  EXPECT_EQ(r.trace.ops.size() + r.trace.losses.size_limit, 20000u);
  EXPECT_GT(r.trace.losses.size_limit, 0u);
  EXPECT_EQ(r.trace.losses.produced, 20000u);
  EXPECT_EQ(runner.last()->status(0)["lost"]["size_limit"], r.trace.losses.size_limit);
}

TEST_F(CaptureRunnerTest, OnlyItsOwnerOrRootMayStopIt) {
  FakeTrace k;
  JobTable t = table();
  CaptureRunner runner(k, [] {});
  EXPECT_THROW(runner.status_or_stop(false, nlohmann::json::object(), 1000, 0, t, 0),
               std::runtime_error);  // none yet
  start(runner, t, {{"pid", 500u}});
  const int64_t now = core::clock_ns(CLOCK_MONOTONIC);
  EXPECT_THROW(runner.status_or_stop(true, nlohmann::json::object(), 1001, 0, t, now),
               control::Denied);
  EXPECT_EQ(runner.status_or_stop(false, nlohmann::json::object(), 1001, 0, t, now)["state"],
            "running");
  EXPECT_THROW(runner.status_or_stop(false, {{"id", 7u}}, 1000, 0, t, now), std::runtime_error);
  runner.status_or_stop(true, {{"id", 1u}}, 1000, 0, t, now);
  EXPECT_FALSE(runner.window_open());
  settle(runner, t);
  EXPECT_EQ(runner.last()->end, CaptureEnd::Stopped);
}

}  // namespace
}  // namespace iolens::daemon
