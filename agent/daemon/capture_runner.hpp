// SPDX-License-Identifier: Apache-2.0
#pragma once
/// iolensd's captures as the loop runs them (docs/capture.md): the one capture at a time, from
/// its request (which job, the kernel's filter, the trace file's header) through feeding it the
/// kernel's trace records to its end (its time, size or job up, a stop, a failed or stalled
/// output, the daemon's stop) and the last bytes written. The kernel is behind
/// loader::TraceControl (a fake in tests/unit/daemon_capture_test.cpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control/server.hpp"
#include "core/file_alignment.hpp"
#include "daemon/capture.hpp"
#include "daemon/job_table.hpp"
#include "loader/trace_control.hpp"

namespace iolens::daemon {

class CaptureRunner {
 public:
  /// `read_events`: reads the kernel's event ring into the job table, so that the files the
  /// last trace records name have their names when a window ends.
  CaptureRunner(loader::TraceControl& kernel, std::function<void()> read_events)
      : kernel_(kernel), read_events_(std::move(read_events)) {}

  /// What a capture's trace file says of where it was made, besides its job.
  struct Setting {
    std::string producer;      // "iolens VERSION"
    std::string node;
    std::string cgroup_mount;  // the cgroup2 root: a request's cgroup may be given under it
    bool timing_off = false;   // the kernel's records have no start times: no capture
    /// The mount table the record writer's thread read last, if any (no statfs() here).
    std::shared_ptr<const std::vector<core::AlignmentMount>> alignment;
  };
  /// `capture`: starts one over the request's job, cgroup or process (which must be in a live
  /// job of `table`), writing to the descriptor the client passed. Its status, or throws
  /// control::BadRequest (a malformed request) or std::runtime_error (why it cannot start).
  nlohmann::json start(const nlohmann::json& req, control::RequestContext& ctx,
                       JobTable& table, const Setting& setting, int64_t now);
  /// `capture_status` and `capture_stop` (only the capture's owner, root or `daemon_euid` may
  /// stop it: control::Denied).
  nlohmann::json status_or_stop(bool stop, const nlohmann::json& req, uid_t peer_uid,
                                uid_t daemon_euid, JobTable& table, int64_t now);
  /// Feeds the running capture and ends it when its time, size or job is up, or its output
  /// failed or stalled; a window closed waits for its output here.
  void service(JobTable& table, int64_t now);
  /// Ends the window now (the kernel stops tracing; what is in the rings is written).
  void end(JobTable& table, CaptureEnd why);
  /// Job `id` leaves the table: its capture ends first, while its recorder can name the files.
  void job_ending(JobTable& table, const std::string& id);
  /// At the daemon's stop: the window ends and the writer gets at most kCaptureStopWait.
  void end_for_stop(JobTable& table);
  /// The last capture's status as of `now` (its output looked at), or null when there has
  /// been none.
  nlohmann::json status(int64_t now);
  /// The running capture's window is open (the trace ring is worth polling).
  bool window_open() const { return capture_ && capture_->window_open(); }
  /// The running capture, or the last one (its status), or null.
  const Capture* last() const { return capture_.get(); }

 private:
  /// What the trace ring holds, handed to `session` in bounded pieces.
  void take_trace(capture::TraceSession& session);
  /// Once the window has ended: the capture is over when its output is done with (all written,
  /// failed, or, with `give_up`, abandoned as it is). Logs the end.
  void settle(bool give_up = false);

  loader::TraceControl& kernel_;
  std::function<void()> read_events_;
  std::unique_ptr<Capture> capture_;
  uint64_t next_id_ = 1;
};

}  // namespace iolens::daemon
