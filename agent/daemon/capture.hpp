// SPDX-License-Identifier: Apache-2.0
#pragma once
/// iolensd's on-demand captures (`iolens capture`, docs/capture.md): what a capture request
/// asks, and the state of the one capture that may run at a time. The daemon's loop feeds it
/// the kernel's trace records and ends it; this file holds no kernel code.

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include <sys/types.h>

#include "capture/async_output.hpp"
#include "capture/trace_session.hpp"

namespace iolens::daemon {

/// The longest capture one request may ask for.
inline constexpr uint64_t kMaxCaptureMs = 24ULL * 3600 * 1000;

struct CaptureRequest {
  std::string job;     // one of job, cgroup, pid
  std::string cgroup;
  uint32_t pid = 0;
  uint64_t duration_ms = 30000;
  uint64_t max_bytes = 0;  // 0: no limit
};

/// The request's fields checked; throws control::BadRequest saying what is wrong.
CaptureRequest parse_capture_request(const nlohmann::json& req);

/// Why a capture ended.
enum class CaptureEnd {
  None, Duration, Stopped, JobEnded, SizeLimit, WriteError, DaemonStop, OutputStalled
};
const char* capture_end_name(CaptureEnd e);

/// How long a stopping iolensd (SIGTERM, SIGUSR2 hand-over) waits for a capture's writer to
/// get the last bytes out; then the writer is abandoned and the bytes left are counted.
inline constexpr std::chrono::milliseconds kCaptureStopWait{5000};

/// Who may stop a capture: the uid that started it, root, or iolensd's own user. Any peer the
/// socket admits may read its status.
bool capture_stop_allowed(uid_t owner, uid_t peer, uid_t daemon_euid);

/// A capture in progress (or just ended, until the next one starts).
struct Capture {
  uint64_t id = 0;
  std::string job_id;
  std::string target;          // "job:ID", "cgroup:PATH", "pid:N"
  uid_t uid = 0;               // who asked for it (SO_PEERCRED): only they or root may stop it
  /// The client's file, written by a thread of its own; the session encodes into its queue.
  std::unique_ptr<capture::AsyncOutput> output;
  std::unique_ptr<capture::TraceSession> session;
  capture::OutputState out_state;  // as of the last look (CaptureRunner::service, status)
  int64_t start_mono_ns = 0;
  int64_t deadline_mono_ns = 0;
  int64_t end_mono_ns = 0;     // 0 while running
  uint64_t produced0 = 0;      // the kernel's trace stats when it started
  uint64_t lost0 = 0;
  uint64_t produced = 0;       // since start, for this capture
  uint64_t ring_full = 0;
  bool stop_requested = false;
  CaptureEnd end = CaptureEnd::None;  // why the window ended
  bool settled = false;        // and the output is done with (written, or given up)
  uint64_t unwritten = 0;      // bytes the output never took (stalled, or abandoned at a stop)
  std::string error;           // the write error or stall that ended it, if any
  int64_t last_sync_mono_ns = 0;

  /// The window is open: the kernel traces the target.
  bool window_open() const { return end == CaptureEnd::None; }
  /// The window is open, or closed with its last bytes still on their way to the file.
  bool running() const { return !settled; }
  /// The answer to capture_status (and to capture and capture_stop).
  nlohmann::json status(int64_t now_mono_ns) const;
};

}  // namespace iolens::daemon
