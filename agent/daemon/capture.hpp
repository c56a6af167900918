// SPDX-License-Identifier: Apache-2.0
#pragma once
/// iolensd's on-demand captures (`iolens capture`, docs/capture.md): what a capture request
/// asks, and the state of the one capture that may run at a time. The daemon's loop feeds it
/// the kernel's trace records and ends it; this file holds no kernel code.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "capture/trace_session.hpp"
#include "control/unique_fd.hpp"

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
enum class CaptureEnd { None, Duration, Stopped, JobEnded, SizeLimit, WriteError, DaemonStop };
const char* capture_end_name(CaptureEnd e);

/// A capture in progress (or just ended, until the next one starts).
struct Capture {
  uint64_t id = 0;
  std::string job_id;
  std::string target;          // "job:ID", "cgroup:PATH", "pid:N"
  control::UniqueFd out;       // the client's file
  std::unique_ptr<capture::TraceSession> session;
  int64_t start_mono_ns = 0;
  int64_t deadline_mono_ns = 0;
  int64_t end_mono_ns = 0;     // 0 while running
  uint64_t produced0 = 0;      // the kernel's trace stats when it started
  uint64_t lost0 = 0;
  uint64_t produced = 0;       // since start, for this capture
  uint64_t ring_full = 0;
  bool stop_requested = false;
  CaptureEnd end = CaptureEnd::None;
  std::string error;           // the write error that ended it, if any
  int64_t last_sync_mono_ns = 0;

  bool running() const { return end == CaptureEnd::None; }
  /// The answer to capture_status (and to capture and capture_stop).
  nlohmann::json status(int64_t now_mono_ns) const;
};

}  // namespace iolens::daemon
