// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A capture's bytes on their way to the client's file, written by a thread of their own through
/// a bounded queue, so that a reader who does not read (a pipe nobody drains, a FUSE file system
/// whose server does not answer) can never block the daemon's loop (docs/capture.md, "Output").
/// The loop encodes and queues; only the writer thread calls write(2), fsync(2) and close(2) on
/// the descriptor. Pipes are written non-blocking, waiting in poll(2) so the thread can be told
/// to stop; a regular file's write(2) cannot be interrupted, so a thread stuck there is
/// abandoned: it ends, and closes the file, whenever the kernel gives it back.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "loader/status.hpp"

namespace iolens::capture {

/// The most bytes a capture may have waiting for its output. Past it the reader is not keeping
/// up (the job produces faster than the file takes): the output is declared stalled.
inline constexpr uint64_t kMaxQueuedOutputBytes = 64ULL << 20;
/// How long bytes may wait with none taken by the output before it is declared stalled.
inline constexpr std::chrono::milliseconds kOutputStallTimeout{10000};
/// Writer threads at most, abandoned ones included: each holds a thread and a descriptor until
/// its file system answers, so a user who stalls capture after capture cannot pile them up.
inline constexpr int kMaxOutputWriters = 4;

struct OutputLimits {
  uint64_t max_queued_bytes = kMaxQueuedOutputBytes;
  std::chrono::milliseconds stall_timeout = kOutputStallTimeout;
};

enum class OutputKind { Regular, Pipe, Other };
/// What `fd` is, without asking its file system (statx with AT_STATX_DONT_SYNC: a FUSE server
/// is not consulted, so this cannot block either).
OutputKind output_kind(int fd);

struct OutputState {
  uint64_t written = 0;  // bytes the output took
  uint64_t queued = 0;   // bytes waiting (a block partly written included)
  bool done = false;     // the writer ended: all written (and synced, closed) or failed
  bool stalled = false;  // declared stalled (bound or timeout); `error` says which
  Status error;          // why the output failed; ok while it works
};

class AsyncOutput {
 public:
  /// Takes `fd` (a regular file or a pipe open for writing; closed by the writer thread) and
  /// starts the thread. A pipe's open file description is set O_NONBLOCK. nullptr and `error`
  /// if the thread cannot start (the descriptor is closed then).
  static std::unique_ptr<AsyncOutput> start(int fd, const OutputLimits& limits, Status& error);
  /// abandon(): a writer still running is left to end by itself.
  ~AsyncOutput();
  AsyncOutput(const AsyncOutput&) = delete;
  AsyncOutput& operator=(const AsyncOutput&) = delete;

  /// Queues `bytes`; never blocks. An error once the output failed or stalled, or when the
  /// bytes would take the queue past max_queued_bytes (the output is then declared stalled).
  Status push(std::string_view bytes);
  /// No more bytes: once all are written the writer syncs a regular file and closes it.
  void close();
  /// The writer's progress. Declares the output stalled when bytes have waited stall_timeout
  /// with none taken (and tells the writer to give up).
  OutputState check();
  /// Waits up to `timeout` for the writer to end; true if it did.
  bool wait(std::chrono::milliseconds timeout);
  /// Tells the writer to stop: a pipe's writer ends at once, a regular file's after its
  /// current write(2). Bytes still queued are not written.
  void abandon();

  /// Writer threads that have not ended, abandoned ones included (a thread stuck in a FUSE
  /// write(2) ends only when the kernel gives it back).
  static int writers_alive();

  struct Shared;

 private:
  explicit AsyncOutput(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  std::shared_ptr<Shared> s_;
};

}  // namespace iolens::capture
