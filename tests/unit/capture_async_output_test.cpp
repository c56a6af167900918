// SPDX-License-Identifier: Apache-2.0
// AsyncOutput (agent/capture): a capture's bytes written by a thread of their own, so that a
// reader who does not read cannot block the caller. Against real pipes and files: everything
// pushed arrives, in order, and the descriptor is closed; a pipe nobody reads is declared
// stalled (by time, and by the queue's bound) while push() keeps returning at once; a stalled
// or abandoned writer lets go of the descriptor.
#include "capture/async_output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "capture/trace_session.hpp"

namespace iolens::capture {
namespace {

using namespace std::chrono_literals;

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      r = fds[0];
      w = fds[1];
    }
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  int take_w() { return std::exchange(w, -1); }
  /// Everything until end of file (the writer closed its end), or until `limit` bytes.
  std::string read_all(std::size_t limit = SIZE_MAX) const {
    std::string out;
    char buf[65536];
    while (out.size() < limit) {
      const ssize_t n = read(r, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
};

std::string pattern(std::size_t n, char seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i % 251);
  return s;
}

TEST(AsyncOutput, KindsAreTold) {
  Pipe p;
  EXPECT_EQ(OutputKind::Pipe, output_kind(p.w));
  const int mfd = memfd_create("k", MFD_CLOEXEC);
  EXPECT_EQ(OutputKind::Regular, output_kind(mfd));
  close(mfd);
  const int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EXPECT_EQ(OutputKind::Other, output_kind(dir));
  close(dir);
  EXPECT_EQ(OutputKind::Other, output_kind(-1));
}

TEST(AsyncOutput, EverythingArrivesInOrderThenThePipeIsClosed) {
  Pipe p;
  Status err;
  auto out = AsyncOutput::start(p.take_w(), {}, err);
  ASSERT_TRUE(out) << err.message;
  std::string sent;
  for (int i = 0; i < 40; ++i) {  // 2.5 MiB: far more than the pipe holds
    const std::string chunk = pattern(65536 + static_cast<std::size_t>(i), static_cast<char>(i));
    ASSERT_TRUE(out->push(chunk));
    sent += chunk;
  }
  out->close();
  const std::string got = p.read_all();  // ends at EOF: the writer closed its end
  EXPECT_EQ(sent.size(), got.size());
  EXPECT_TRUE(sent == got);
  ASSERT_TRUE(out->wait(10s));
  const OutputState st = out->check();
  EXPECT_TRUE(st.done);
  EXPECT_TRUE(st.error.ok) << st.error.message;
  EXPECT_FALSE(st.stalled);
  EXPECT_EQ(sent.size(), st.written);
  EXPECT_EQ(0u, st.queued);
  EXPECT_FALSE(out->push("late"));
}

TEST(AsyncOutput, APipeNobodyReadsNeverBlocksPushAndIsDeclaredStalled) {
  Pipe p;
  Status err;
  auto out = AsyncOutput::start(p.take_w(), {64ULL << 20, 300ms}, err);
  ASSERT_TRUE(out) << err.message;
  // 4 MiB into a 64 KiB pipe nobody reads: every push returns (the test would hang otherwise).
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(out->push(pattern(65536, 'a')));
  OutputState st = out->check();
  EXPECT_FALSE(st.done);
  EXPECT_GT(st.queued, 0u);
  // Bytes wait and none are taken: stalled once the timeout has passed.
  for (int i = 0; i < 200 && !st.stalled; ++i) {
    std::this_thread::sleep_for(20ms);
    st = out->check();
  }
  ASSERT_TRUE(st.stalled);
  EXPECT_NE(std::string::npos, st.error.message.find("output stalled")) << st.error.message;
  EXPECT_EQ(4u << 20, st.written + st.queued);
  // The writer leaves its poll and closes the pipe: the reader gets what fit, then EOF.
  ASSERT_TRUE(out->wait(10s));
  EXPECT_EQ(st.written, p.read_all().size());
  EXPECT_FALSE(out->push("more"));
}

TEST(AsyncOutput, TheQueueBoundDeclaresAStallAtOnce) {
  Pipe p;
  Status err;
  auto out = AsyncOutput::start(p.take_w(), {256 << 10, 3600s}, err);
  ASSERT_TRUE(out) << err.message;
  Status last;
  int pushed = 0;
  for (; pushed < 100; ++pushed) {
    last = out->push(pattern(64 << 10, 'b'));
    if (!last) break;
  }
  // The pipe holds 64 KiB (maybe a partial 64 KiB chunk in flight), the queue at most 256 KiB.
  EXPECT_LE(pushed, 7);
  ASSERT_FALSE(last);
  EXPECT_NE(std::string::npos, last.message.find("output stalled")) << last.message;
  const OutputState st = out->check();
  EXPECT_TRUE(st.stalled);
  EXPECT_LE(st.queued, 256u << 10);
  EXPECT_TRUE(out->wait(10s));
}

TEST(AsyncOutput, ARegularFileIsWrittenAndSynced) {
  const int mfd = memfd_create("out", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  const int keep = dup(mfd);  // the writer closes its own
  Status err;
  auto out = AsyncOutput::start(mfd, {}, err);
  ASSERT_TRUE(out) << err.message;
  ASSERT_TRUE(out->push("hello "));
  ASSERT_TRUE(out->push("world"));
  out->close();
  ASSERT_TRUE(out->wait(10s));
  EXPECT_TRUE(out->check().error.ok);
  char buf[32] = {};
  EXPECT_EQ(11, pread(keep, buf, sizeof(buf), 0));
  EXPECT_STREQ("hello world", buf);
  close(keep);
}

TEST(AsyncOutput, AbandonLetsGoOfAFullPipe) {
  Pipe p;
  Status err;
  auto out = AsyncOutput::start(p.take_w(), {}, err);
  ASSERT_TRUE(out) << err.message;
  ASSERT_TRUE(out->push(pattern(1 << 20, 'c')));
  out->abandon();
  ASSERT_TRUE(out->wait(10s));
  const std::string got = p.read_all();  // EOF: the write end is closed
  EXPECT_LT(got.size(), 1u << 20);
}

TEST(AsyncOutput, ADestroyedOutputStillClosesItsDescriptor) {
  Pipe p;
  Status err;
  auto out = AsyncOutput::start(p.take_w(), {}, err);
  ASSERT_TRUE(out) << err.message;
  ASSERT_TRUE(out->push(pattern(1 << 20, 'd')));
  out.reset();  // abandons; the thread ends by itself
  pollfd pfd{p.r, POLLIN, 0};
  std::string got;
  for (int i = 0; i < 500; ++i) {  // up to 10 s for EOF
    if (poll(&pfd, 1, 20) > 0) {
      char buf[65536];
      const ssize_t n = read(p.r, buf, sizeof(buf));
      if (n == 0) break;
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    }
  }
  EXPECT_LT(got.size(), 1u << 20);
  EXPECT_EQ(0, read(p.r, nullptr, 0));
}

TEST(AsyncOutput, ATraceSessionThroughTheQueueMakesACompleteFile) {
  Pipe p;
  Status err;
  auto out = AsyncOutput::start(p.take_w(), {}, err);
  ASSERT_TRUE(out) << err.message;
  AsyncOutput* o = out.get();
  trace::Meta meta;
  meta.producer = "test";
  meta.target = "job:j";
  meta.window_start_ns = 100;
  auto s = TraceSession::open_sink([o](std::string_view b) { return o->push(b); }, meta, {}, err);
  ASSERT_TRUE(s) << err.message;
  iolens_trace_record r{};
  r.start_ns = 200;
  r.end_ns = 300;
  r.op = IOLENS_OP_READ;
  r.flags = IOLENS_TRACE_F_NOFILE;
  r.tgid = r.tid = 7;
  s->on_ops(std::span<const iolens_trace_record>(&r, 1));
  core::Recorder rec(0, 0);
  trace::Losses losses;
  losses.produced = 1;
  ASSERT_TRUE(s->finish(rec, losses, 400));
  out->close();
  const std::string bytes = p.read_all();
  ASSERT_TRUE(out->wait(10s));
  EXPECT_EQ(bytes.size(), s->bytes_written());
  const trace::ReadResult got = trace::read_trace_bytes(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  ASSERT_TRUE(got.status.ok) << got.status.message;
  EXPECT_TRUE(got.trace.complete);
  ASSERT_EQ(1u, got.trace.ops.size());
  EXPECT_EQ(200u, got.trace.ops[0].start_ns);
}


TEST(AsyncOutput, WritersAliveCountsEveryThreadUntilItEnds) {
  // The daemon refuses a capture while kMaxOutputWriters of them have not ended (abandoned
  // ones stuck in a FUSE write included): the count must follow the threads exactly.
  const int base = AsyncOutput::writers_alive();
  Pipe a, b;
  Status err;
  auto x = AsyncOutput::start(a.take_w(), {}, err);
  ASSERT_TRUE(x) << err.message;
  auto y = AsyncOutput::start(b.take_w(), {}, err);
  ASSERT_TRUE(y) << err.message;
  EXPECT_EQ(base + 2, AsyncOutput::writers_alive());
  ASSERT_TRUE(x->push(pattern(1 << 20, 'e')));  // more than the pipe holds: x's writer waits
  x->abandon();
  ASSERT_TRUE(x->wait(10s));
  y->close();
  ASSERT_TRUE(y->wait(10s));
  for (int i = 0; i < 500 && AsyncOutput::writers_alive() != base; ++i)
    std::this_thread::sleep_for(10ms);  // the count drops just after done is said
  EXPECT_EQ(base, AsyncOutput::writers_alive());
}

}  // namespace
}  // namespace iolens::capture
