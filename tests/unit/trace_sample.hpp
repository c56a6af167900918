// SPDX-License-Identifier: Apache-2.0
#pragma once
// A synthetic captured trace for the converter tests: three processes of a training job (the
// main process writing a checkpoint, a DataLoader worker reading a data file, a shell), their
// names, every op kind, failed calls, a copy, pipes and a socket, a stat by path, losses. Ops are
// stored out of start order, as per-CPU rings deliver them.

#include <algorithm>
#include <climits>
#include <cstdint>

#include "trace/trace.hpp"

namespace iolens::testing {

inline constexpr uint64_t kW = 1'000'000'000'000;  // window start, CLOCK_MONOTONIC ns (1000 s)
inline constexpr uint32_t kDev = (8u << 20) | 1u;  // sda1
// The wall clock 5 s after a Kineto base (215 periods of 7,889,238 s after the epoch) at the
// window start: timestamps relative to that base stay small and exact in a double.
inline constexpr int64_t kKinetoBase = 215LL * 7'889'238LL * 1'000'000'000LL;
inline constexpr int64_t kMonoToWall = kKinetoBase + 5'000'000'000LL - static_cast<int64_t>(kW);

struct SampleProc {
  uint32_t pid;
  uint64_t pstart;
};
inline constexpr SampleProc kMain{100, kW - 1'000'000'000};  // started before the window
inline constexpr SampleProc kWorker{101, kW + 1'000'000};
inline constexpr SampleProc kShell{102, kW + 2'000'000};

struct SampleFile {
  uint32_t dev;
  uint64_t ino;
  uint32_t gen;
};
inline constexpr SampleFile kData{kDev, 11, 7};   // /data/train.bin
inline constexpr SampleFile kCkpt{kDev, 12, 3};   // /ckpt/model.pt
inline constexpr SampleFile kPipe{0, 001, 0};     // S_IFIFO >> 12
inline constexpr SampleFile kSocket{0, 014, 0};   // S_IFSOCK >> 12
inline constexpr SampleFile kNone{0, 0, 0};

/// One record: `at_us` microseconds after the window start, lasting `dur_ns`.
inline iolens_trace_record sample_op(uint16_t op, uint16_t nr, SampleProc p, uint32_t tid,
                                     uint64_t at_us, uint64_t dur_ns, SampleFile f, int32_t fd,
                                     int64_t offset, int64_t ret, int64_t arg, uint32_t flags = 0) {
  iolens_trace_record r{};
  r.start_ns = kW + at_us * 1000;
  r.end_ns = r.start_ns + dur_ns;
  r.pstart_ns = p.pstart;
  r.ino = f.ino;
  r.dev = f.dev;
  r.gen = f.gen;
  r.offset = offset;
  r.ret = ret;
  r.arg = arg;
  r.tgid = p.pid;
  r.tid = tid;
  r.op = op;
  r.nr = nr;
  r.flags = flags;
  r.fd = fd;
  return r;
}

inline trace::Trace sample_trace() {
  trace::Trace t;
  t.meta.producer = "iolens 0.1.0";
  t.meta.node = "node1";
  t.meta.target = "run";
  t.meta.abi_version = IOLENS_ABI_VERSION;  // a trace of this build (ABI 14+: buffers and modes)
  t.meta.job_kind = "run";
  t.meta.job_id = "4242";
  t.meta.job_labels = {{"team", "vision"}};
  t.meta.command = {"python3", "train.py"};
  t.meta.window_start_ns = kW;
  t.meta.window_end_ns = kW + 2'000'000'000;
  t.meta.mono_to_wall_ns = kMonoToWall;
  t.meta.ring_bytes = 8 << 20;
  t.files = {{kData.ino, kData.dev, kData.gen, "/data/train.bin", 0},
             {kCkpt.ino, kCkpt.dev, kCkpt.gen, "/ckpt/model.pt", 0}};
  t.processes = {
      {kMain.pid, kMain.pstart, 1, 5, "python3", "/usr/bin/python3.11", -1, -1},
      {kWorker.pid, kWorker.pstart, kMain.pid, kMain.pstart, "pt_data_worker", "",
       static_cast<int64_t>(kW + 1'900'000'000), 0},
      // Exited, wait status unknown.
      {kShell.pid, kShell.pstart, kMain.pid, kMain.pstart, "sh", "/bin/sh",
       static_cast<int64_t>(kW + 1'500'000'000), -1},
  };
  constexpr auto R = IOLENS_OP_READ, W = IOLENS_OP_WRITE;
  constexpr uint32_t kOther = IOLENS_TRACE_F_OTHER, kNoFile = IOLENS_TRACE_F_NOFILE,
                     kCopy = IOLENS_TRACE_F_COPY;
  const SampleProc m = kMain, w = kWorker, s = kShell;
  t.ops = {
      // The worker reads the data file (main thread 101, a second thread 105).
      sample_op(IOLENS_OP_OPEN, 257, w, 101, 10, 5'000, kData, 5, -1, 5, 0),
      sample_op(R, 0, w, 101, 20, 20'000, kData, 5, 0, 4096, 4096),
      sample_op(R, 0, w, 101, 50, 15'000, kData, 5, 4096, 4096, 4096),
      sample_op(R, 17, w, 105, 80, 30'000, kData, 5, 100000, 1000, 1000),
      sample_op(R, 0, w, 101, 120, 1'000, kData, 5, 8192, 0, 4096),      // end of file
      sample_op(R, 0, w, 101, 130, 2'000, kData, 5, -1, -4, 4096),       // EINTR
      sample_op(IOLENS_OP_SEEK, 8, w, 101, 140, 500, kData, 5, 0, 0, 0),
      sample_op(IOLENS_OP_STAT, 5, w, 101, 150, 700, kData, 5, -1, 0, 0),
      sample_op(IOLENS_OP_MMAP, 9, w, 101, 160, 3'000, kData, 5, -1, 0x7f0000000000, 0),
      sample_op(IOLENS_OP_CLOSE, 3, w, 101, 200, 1'000, kData, 5, -1, 0, 0),
      sample_op(IOLENS_OP_OPEN, 257, w, 101, 150'000, 4'000, kData, 6, -1, 6, 0),
      sample_op(R, 0, w, 101, 150'010, 50'000, kData, 6, 0, 65536, 65536),
      sample_op(IOLENS_OP_CLOSE, 3, w, 101, 150'100, 1'000, kData, 6, -1, 0, 0),
      // The main process writes a checkpoint, reads some back, syncs, renames and removes it.
      sample_op(IOLENS_OP_OPEN, 85, m, 100, 300, 8'000, kCkpt, 3, -1, 3, 0),
      sample_op(W, 1, m, 100, 310, 2'000'000, kCkpt, 3, 0, 1048577, 1048577),
      sample_op(W, 1, m, 100, 2400, 30'000, kCkpt, 3, 1048577, 2000, 2000),
      sample_op(R, 17, m, 100, 2500, 9'000, kCkpt, 3, 0, 100, 100),
      sample_op(IOLENS_OP_FSYNC, 74, m, 100, 2600, 3'000'000, kCkpt, 3, -1, 0, 0),
      sample_op(IOLENS_OP_CLOSE, 3, m, 100, 5700, 2'000, kCkpt, 3, -1, 0, 0),
      sample_op(IOLENS_OP_RENAME, 82, m, 100, 5800, 10'000, kCkpt, -1, -1, 0, 0),
      sample_op(IOLENS_OP_UNLINK, 87, m, 100, 5900, 10'000, kCkpt, -1, -1, 0, 0),
      // A pipe, a sendfile from the data file (an inherited descriptor) to a socket, a failed
      // open, a stat by path (generation unknown).
      sample_op(R, 0, m, 100, 6000, 1'000, kPipe, 0, -1, 10, 100, kOther),
      sample_op(R, 40, m, 100, 6100, 40'000, kData, 7, 0, 8192, 8192, kCopy),
      sample_op(W, 40, m, 100, 6100, 40'000, kSocket, 8, -1, 8192, 8192, kCopy | kOther),
      sample_op(IOLENS_OP_OPEN, 257, m, 100, 6200, 3'000, kNone, -1, -1, -2, 0, kNoFile),
      sample_op(IOLENS_OP_STAT, 4, m, 100, 6300, 2'000, {kDev, 11, 0}, -1, -1, 0, 0),
      // The shell: a pipe write and a failed stat.
      sample_op(W, 1, s, 102, 1'000'000, 5'000, kPipe, 1, -1, 5, 5, kOther),
      sample_op(IOLENS_OP_STAT, 4, s, 102, 1'000'100, 2'000, kNone, -1, -1, -2, 0, kNoFile),
  };
  // Per-CPU rings: the worker's records arrive after the main process's.
  std::rotate(t.ops.begin(), t.ops.begin() + 13, t.ops.end());
  t.losses.produced = t.ops.size() + 4;
  t.losses.ring_full = 3;
  t.losses.other = 1;
  t.losses.notes = {"1 record failed to decode"};
  t.complete = true;
  return t;
}

/// The sample plus records a damaged or hostile file could hold: an unknown kind and syscall,
/// unknown flag bits, end before start, a start of 0, extreme offsets and returns, a process and
/// a file nobody named; the clock base wraps and the window is unknown.
inline trace::Trace garbage_trace() {
  trace::Trace t = sample_trace();
  t.meta.mono_to_wall_ns = INT64_MIN + 7;
  t.meta.window_start_ns = 0;
  t.meta.window_end_ns = 0;
  iolens_trace_record r = sample_op(99, 999, {4242, 1}, 4243, 5, 10, {7, 8, 9}, -5, INT64_MIN,
                                    INT64_MIN, INT64_MAX, 0xf0);
  t.ops.push_back(r);
  r.op = IOLENS_OP_READ;
  r.end_ns = r.start_ns - 1;  // ends before it starts
  r.ret = INT64_MAX;
  t.ops.push_back(r);
  r.start_ns = 0;
  r.end_ns = UINT64_MAX;
  r.op = IOLENS_OP_WRITE;
  t.ops.push_back(r);
  r.op = IOLENS_OP_MMAP;
  r.ret = -4096;  // an address, not an error
  r.start_ns = 42;
  t.ops.push_back(r);
  return t;
}

}  // namespace iolens::testing
