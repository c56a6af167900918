// SPDX-License-Identifier: Apache-2.0
// TraceSession (agent/capture): what a capture keeps of the kernel's records, read back from
// the file it wrote. The window edges and the size limit decide what goes in; the trailer's
// counts must add up (produced = records in the file + ring_full + size_limit).
#include "capture/trace_session.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <vector>

namespace iolens::capture {
namespace {

class MemFd {
 public:
  MemFd() : fd_(memfd_create("session", MFD_CLOEXEC)) {}
  ~MemFd() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  trace::ReadResult read_back() const {
    lseek(fd_, 0, SEEK_SET);
    return trace::read_trace_fd(fd_);
  }

 private:
  int fd_;
};

iolens_trace_record op(uint64_t start, uint64_t end, int64_t offset) {
  iolens_trace_record r{};
  r.start_ns = start;
  r.end_ns = end;
  r.pstart_ns = 5;
  r.ino = 42;
  r.dev = 8;
  r.offset = offset;
  r.ret = 4096;
  r.arg = 4096;
  r.tgid = r.tid = 100;
  r.op = IOLENS_OP_READ;
  r.nr = 17;
  r.fd = 3;
  return r;
}

trace::Meta meta_from(uint64_t start) {
  trace::Meta m;
  m.producer = "test";
  m.target = "job:j";
  m.window_start_ns = start;
  return m;
}

TEST(TraceSession, KeepsExactlyTheCallsInsideTheWindowAndTakesTheEdgesOffProduced) {
  MemFd f;
  ASSERT_GE(f.fd(), 0);
  Status err;
  auto s = TraceSession::open_fd(f.fd(), meta_from(1000), {}, err);
  ASSERT_TRUE(s) << err.message;
  // Began before the capture (kernel already tracing): out. At the start: in.
  const std::vector<iolens_trace_record> first = {op(900, 1100, 0), op(1000, 1200, 1),
                                                  op(1500, 1600, 2)};
  s->on_ops(first);
  s->close_window(2000);
  // Still running when the window closed: out. Ended at the close: in.
  const std::vector<iolens_trace_record> last = {op(1900, 2100, 3), op(1990, 2000, 4)};
  s->on_ops(last);
  EXPECT_EQ(s->ops_written(), 3u);
  trace::Losses kernel;
  kernel.produced = 6;  // the five above and one lost in the ring
  kernel.ring_full = 1;
  core::Recorder rec(0, 0);
  ASSERT_TRUE(s->finish(rec, kernel, 2000));

  const trace::ReadResult r = f.read_back();
  ASSERT_TRUE(r.status) << r.status.message;
  ASSERT_TRUE(r.trace.complete);
  ASSERT_EQ(r.trace.ops.size(), 3u);
  EXPECT_EQ(r.trace.ops[0].offset, 1);
  EXPECT_EQ(r.trace.ops[1].offset, 2);
  EXPECT_EQ(r.trace.ops[2].offset, 4);
  EXPECT_EQ(r.trace.meta.window_start_ns, 1000u);
  EXPECT_EQ(r.trace.meta.window_end_ns, 2000u);
  EXPECT_EQ(r.trace.losses.produced, 4u);  // 6 - the two across the edges
  EXPECT_EQ(r.trace.losses.ring_full, 1u);
  EXPECT_EQ(r.trace.losses.produced,
            r.trace.ops.size() + r.trace.losses.ring_full + r.trace.losses.size_limit);
  // The file was never named (the recorder knows nothing): said in the notes.
  ASSERT_EQ(r.trace.losses.notes.size(), 1u);
  EXPECT_NE(r.trace.losses.notes[0].find("1 file(s)"), std::string::npos);
}

TEST(TraceSession, PastTheSizeLimitCallsAreCountedNotWritten) {
  MemFd f;
  Status err;
  SessionOptions o;
  o.max_bytes = 1;  // the header alone passes it
  auto s = TraceSession::open_fd(f.fd(), meta_from(0), o, err);
  ASSERT_TRUE(s) << err.message;
  std::vector<iolens_trace_record> ops;
  for (int i = 0; i < 10; ++i) ops.push_back(op(10 + i, 11 + i, i));
  s->on_ops(ops);
  EXPECT_TRUE(s->size_limit_reached());
  EXPECT_EQ(s->ops_dropped(), 10u);
  trace::Losses kernel;
  kernel.produced = 10;
  core::Recorder rec(0, 0);
  ASSERT_TRUE(s->finish(rec, kernel, 100));
  const trace::ReadResult r = f.read_back();
  ASSERT_TRUE(r.status) << r.status.message;
  EXPECT_EQ(r.trace.ops.size(), 0u);
  EXPECT_EQ(r.trace.losses.size_limit, 10u);
  EXPECT_EQ(r.trace.losses.produced, 10u);
}

// One batch from the ring can hold many blocks' worth of ops: the limit is checked against the
// file with each completed block in it, so the file passes it by the one block that crossed it,
// not by the whole batch. Stored blocks of 10 ops: the limit is one byte past the header and
// META, so the first OPS block crosses it and the other 40 of the batch are left out.
TEST(TraceSession, TheSizeLimitIsPassedByOneBlockNotByOneBatch) {
  MemFd probe, f;
  Status err;
  SessionOptions o;
  o.writer.ops_per_block = 10;
  o.writer.compress = false;
  {
    auto p = TraceSession::open_fd(probe.fd(), meta_from(0), o, err);
    ASSERT_TRUE(p) << err.message;
  }
  const off_t head = lseek(probe.fd(), 0, SEEK_END);
  ASSERT_GT(head, 0);
  o.max_bytes = static_cast<uint64_t>(head) + 1;
  auto s = TraceSession::open_fd(f.fd(), meta_from(0), o, err);
  ASSERT_TRUE(s) << err.message;
  std::vector<iolens_trace_record> ops;
  for (int i = 0; i < 50; ++i) ops.push_back(op(10 + i, 11 + i, i));
  s->on_ops(ops);
  EXPECT_EQ(s->ops_written(), 10u);
  EXPECT_EQ(s->ops_dropped(), 40u);
  trace::Losses kernel;
  kernel.produced = 50;
  core::Recorder rec(0, 0);
  ASSERT_TRUE(s->finish(rec, kernel, 100));
  const trace::ReadResult r = f.read_back();
  ASSERT_TRUE(r.status) << r.status.message;
  ASSERT_EQ(r.trace.ops.size(), 10u);
  EXPECT_EQ(r.trace.ops.back().offset, 9);
  EXPECT_EQ(r.trace.losses.size_limit, 40u);
  EXPECT_EQ(r.trace.losses.produced, 50u);
}

TEST(TraceSession, AnUnwritableFileIsAnErrorAtOpen) {
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Status err;
  auto s = TraceSession::open_fd(fd, meta_from(0), {}, err);
  close(fd);
  EXPECT_FALSE(s);
  EXPECT_FALSE(err);
  EXPECT_FALSE(err.message.empty());
}

}  // namespace
}  // namespace iolens::capture
