// SPDX-License-Identifier: Apache-2.0
#include "daemon/capture.hpp"

#include <algorithm>

#include "control/protocol.hpp"

namespace iolens::daemon {
namespace {

uint64_t unsigned_field(const nlohmann::json& req, const char* key, uint64_t fallback) {
  auto it = req.find(key);
  if (it == req.end()) return fallback;
  if (!it->is_number_unsigned())
    throw control::BadRequest(std::string("'") + key + "' must be a non-negative integer");
  return it->get<uint64_t>();
}

}  // namespace

CaptureRequest parse_capture_request(const nlohmann::json& req) {
  CaptureRequest r;
  int targets = 0;
  if (auto it = req.find("job"); it != req.end()) {
    if (!it->is_string() || it->get<std::string>().empty())
      throw control::BadRequest("'job' must be a job ID (a non-empty string)");
    r.job = it->get<std::string>();
    ++targets;
  }
  if (auto it = req.find("cgroup"); it != req.end()) {
    if (!it->is_string() || it->get<std::string>().empty())
      throw control::BadRequest("'cgroup' must be a cgroup path (a non-empty string)");
    r.cgroup = it->get<std::string>();
    ++targets;
  }
  if (req.contains("pid")) {
    const uint64_t pid = unsigned_field(req, "pid", 0);
    if (pid == 0 || pid > 0x3fffffff) throw control::BadRequest("'pid' must be a process id");
    r.pid = static_cast<uint32_t>(pid);
    ++targets;
  }
  if (targets != 1)
    throw control::BadRequest("a capture needs exactly one of 'job', 'cgroup' or 'pid'");
  r.duration_ms = unsigned_field(req, "duration_ms", r.duration_ms);
  if (r.duration_ms == 0 || r.duration_ms > kMaxCaptureMs)
    throw control::BadRequest("'duration_ms' must be 1 to " + std::to_string(kMaxCaptureMs) +
                              " (24 h)");
  r.max_bytes = unsigned_field(req, "max_bytes", 0);
  return r;
}

const char* capture_end_name(CaptureEnd e) {
  switch (e) {
    case CaptureEnd::None: return "";
    case CaptureEnd::Duration: return "duration";
    case CaptureEnd::Stopped: return "stopped";
    case CaptureEnd::JobEnded: return "job ended";
    case CaptureEnd::SizeLimit: return "size limit";
    case CaptureEnd::WriteError: return "write error";
    case CaptureEnd::DaemonStop: return "iolensd stopping";
    case CaptureEnd::OutputStalled: return "output stalled";
  }
  return "";
}

bool capture_stop_allowed(uid_t owner, uid_t peer, uid_t daemon_euid) {
  return peer == owner || peer == 0 || peer == daemon_euid;
}

nlohmann::json Capture::status(int64_t now) const {
  const int64_t until = window_open() ? now : end_mono_ns;
  nlohmann::json j = {
      {"id", id},
      {"job", job_id},
      {"target", target},
      {"uid", uid},
      {"state", running() ? "running" : (error.empty() ? "done" : "failed")},
      {"records", session ? session->ops_written() : 0},
      {"bytes", out_state.written},
      {"output", {{"queued_bytes", out_state.queued}, {"unwritten_bytes", unwritten}}},
      {"produced", produced},
      {"lost", {{"ring_full", ring_full}, {"size_limit", session ? session->ops_dropped() : 0}}},
      {"elapsed_s", static_cast<double>(std::max<int64_t>(0, until - start_mono_ns)) / 1e9},
      {"remaining_s",
       window_open() ? static_cast<double>(std::max<int64_t>(0, deadline_mono_ns - now)) / 1e9
                     : 0.0},
  };
  if (!running()) j["reason"] = capture_end_name(end);
  if (!error.empty()) j["error"] = error;
  return j;
}

}  // namespace iolens::daemon
