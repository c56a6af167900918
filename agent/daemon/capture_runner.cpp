// SPDX-License-Identifier: Apache-2.0
#include "daemon/capture_runner.hpp"

#include <fcntl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "control/protocol.hpp"
#include "control/unique_fd.hpp"
#include "core/clock.hpp"
#include "core/recorder.hpp"
#include "trace/trace.hpp"

namespace iolens::daemon {

using core::clock_ns;

nlohmann::json CaptureRunner::start(const nlohmann::json& req, control::RequestContext& ctx,
                                    JobTable& table, const Setting& setting, int64_t now) {
  const CaptureRequest r = parse_capture_request(req);
  if (setting.timing_off)
    throw std::runtime_error("a capture needs each call's start and duration, and this iolensd "
                             "runs with timing off (timing: exact in its config)");
  if (capture_ && capture_->running())
    throw std::runtime_error(
        "a capture is running already (id " + std::to_string(capture_->id) + ", job " +
        capture_->job_id + ", uid " + std::to_string(capture_->uid) + ", " +
        std::to_string(std::max<int64_t>(0, capture_->deadline_mono_ns - now) / 1000000000) +
        " s left): one at a time");
  if (capture::AsyncOutput::writers_alive() >= capture::kMaxOutputWriters)
    throw std::runtime_error(
        std::to_string(capture::AsyncOutput::writers_alive()) +
        " outputs of earlier captures are still not closed (their file system does not answer): "
        "no new capture until one is (docs/capture.md)");
  if (ctx.passed_fd.get() < 0 && !ctx.fd_refusal.empty())
    throw std::runtime_error(ctx.fd_refusal);  // docs/control.md#limits: a FUSE close stuck
  if (ctx.passed_fd.get() < 0)
    throw control::BadRequest("a capture needs the output file's descriptor with the request "
                              "(iolens capture -o FILE sends it)");
  // Nothing here may wait on the file: its file system may be a FUSE server the client runs.
  const int fl = fcntl(ctx.passed_fd.get(), F_GETFL);
  if (fl < 0 || capture::output_kind(ctx.passed_fd.get()) == capture::OutputKind::Other ||
      ((fl & O_ACCMODE) != O_WRONLY && (fl & O_ACCMODE) != O_RDWR))
    throw std::runtime_error("the output must be a regular file or a pipe open for writing");

  // Which job, and how the kernel tells its tasks from the others'.
  Job* job = nullptr;
  std::string target, cgroup_rel;
  std::vector<uint32_t> pids;
  if (!r.job.empty()) {
    target = "job:" + r.job;
    job = table.find(r.job);
    if (!job || job->state != JobState::Live)
      throw std::runtime_error("no live job '" + r.job + "' (see iolens jobs)");
    if (job->cgroup_id != 0) {
      cgroup_rel = job->identity.job_cgroup;
    } else {
      for (const core::ProcKey& p : job->live) pids.push_back(p.pid);
    }
  } else if (!r.cgroup.empty()) {
    target = "cgroup:" + r.cgroup;
    std::string rel = r.cgroup;
    if (rel.rfind(setting.cgroup_mount + "/", 0) == 0) rel = rel.substr(setting.cgroup_mount.size());
    while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
    if (rel.empty() || rel[0] != '/' || rel.find("/../") != std::string::npos ||
        rel.ends_with("/.."))
      throw std::runtime_error("cgroup '" + r.cgroup + "': give its path under " + setting.cgroup_mount +
                               " (such as /kubepods/pod1) or its absolute path");
    for (const auto& [id, j] : table.jobs()) {
      const std::string& jc = j->identity.job_cgroup;
      if (j->state == JobState::Live && j->cgroup_id != 0 &&
          (rel == jc || rel.rfind(jc + "/", 0) == 0))
        job = j.get();
    }
    if (!job) throw std::runtime_error("cgroup " + rel + " is in no live job (see iolens jobs)");
    cgroup_rel = rel;
  } else {
    target = "pid:" + std::to_string(r.pid);
    for (const auto& [id, j] : table.jobs()) {
      if (j->state != JobState::Live) continue;
      for (const core::ProcKey& p : j->live)
        if (p.pid == r.pid) job = j.get();
    }
    if (!job) throw std::runtime_error("process " + std::to_string(r.pid) +
                                       " is in no live job (see iolens jobs)");
    pids.push_back(r.pid);
  }

  control::UniqueFd cgroup_fd;
  if (!cgroup_rel.empty()) {
    cgroup_fd.reset(open((setting.cgroup_mount + cgroup_rel).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (cgroup_fd.get() < 0)
      throw std::runtime_error("cannot open cgroup " + setting.cgroup_mount + cgroup_rel + ": " +
                               std::strerror(errno));
  }

  // The kernel's filter first, then the window's start: every call that starts after it is in
  // the ring, whole. The ring holds what comes before the file is ready; records of calls that
  // started earlier are left out by the session.
  const uint64_t produced0 = kernel_.trace_records_made();
  const uint64_t lost0 = kernel_.trace_records_lost();
  Status st = cgroup_fd.get() >= 0 ? kernel_.set_trace_mode(IOLENS_TRACE_CGROUP, cgroup_fd.get())
                                   : Status::Ok();
  for (uint32_t pid : pids)
    if (st) st = kernel_.add_trace_pid(pid);
  if (st && cgroup_fd.get() < 0) st = kernel_.set_trace_mode(IOLENS_TRACE_PIDS);
  const auto tracing_off = [this] {
    kernel_.set_trace_mode(IOLENS_TRACE_OFF);
    kernel_.consume_trace([](const iolens_trace_record&) {});
  };
  if (!st) {
    tracing_off();
    throw std::runtime_error("cannot start tracing: " + st.message);
  }
  const int64_t start = clock_ns(CLOCK_MONOTONIC);

  trace::Meta meta;
  meta.producer = setting.producer;
  meta.node = setting.node;
  meta.target = target;
  meta.job_kind = job->identity.kind;
  meta.job_id = job->identity.id;
  meta.job_labels = job->identity.labels;
  meta.window_start_ns = static_cast<uint64_t>(start);
  meta.mono_to_wall_ns = table.clock().mono_to_wall_ns;
  meta.ring_bytes = kernel_.trace_ring_size();
  // The mount table the record writer's thread read last (no statfs() on this loop), if any.
  if (const auto& t = setting.alignment) {
    meta.alignment_mounts.emplace();
    for (const core::AlignmentMount& m : *t)
      meta.alignment_mounts->emplace_back(m.point, m.block_size);
  }
  capture::SessionOptions so;
  so.max_bytes = r.max_bytes;
  Status err;
  // The loop only encodes and queues; the output's own thread writes (capture/async_output).
  auto output = capture::AsyncOutput::start(ctx.passed_fd.release(), {}, err);
  if (!output) {
    tracing_off();
    throw std::runtime_error("cannot write the trace: " + err.message);
  }
  capture::AsyncOutput* out = output.get();
  auto session = capture::TraceSession::open_sink(
      [out](std::string_view bytes) { return out->push(bytes); }, meta, so, err);
  if (!session) {
    tracing_off();
    throw std::runtime_error("cannot write the trace: " + err.message);
  }
  auto c = std::make_unique<Capture>();
  c->id = next_id_++;
  c->job_id = job->identity.id;
  c->target = target;
  c->uid = ctx.peer.uid;
  c->output = std::move(output);
  c->session = std::move(session);
  c->start_mono_ns = start;
  c->deadline_mono_ns = start + static_cast<int64_t>(r.duration_ms) * 1000000LL;
  c->produced0 = produced0;
  c->lost0 = lost0;
  c->last_sync_mono_ns = now;
  capture_ = std::move(c);
  spdlog::info("capture {} of job {} ({}) started for {} ms by uid {}", capture_->id,
               capture_->job_id, target, r.duration_ms, capture_->uid);
  return capture_->status(now);
}

nlohmann::json CaptureRunner::status_or_stop(bool stop, const nlohmann::json& req,
                                             uid_t peer_uid, uid_t daemon_euid, JobTable& table,
                                             int64_t now) {
  if (!capture_ || (req.contains("id") && req["id"] != capture_->id))
    throw std::runtime_error("no such capture (only the last one is kept)");
  // Anyone the socket admits may watch a capture; only its owner (or root) may end it.
  if (stop && !capture_stop_allowed(capture_->uid, peer_uid, daemon_euid))
    throw control::Denied("capture " + std::to_string(capture_->id) + " was started by uid " +
                          std::to_string(capture_->uid) + ": only that user or root may stop "
                          "it (uid " + std::to_string(peer_uid) + " asked)");
  if (stop && capture_->window_open()) {
    capture_->stop_requested = true;
    service(table, now);
  }
  return status(now);
}

nlohmann::json CaptureRunner::status(int64_t now) {
  if (!capture_) return nullptr;
  if (capture_->running()) capture_->out_state = capture_->output->check();
  return capture_->status(now);
}

void CaptureRunner::job_ending(JobTable& table, const std::string& id) {
  if (capture_ && capture_->running() && capture_->job_id == id) end(table, CaptureEnd::JobEnded);
}

void CaptureRunner::take_trace(capture::TraceSession& session) {
  // Handed over in pieces: a full 16 MiB ring is 190,000 records, and one vector of them (grown
  // by doubling) and what the writer made of it at once cost ~36 MiB of heap at the peak
  // (heaptrack, e2e_daemon_memory_bound); pieces keep that to a few MiB.
  // The sink runs inside libbpf's C callback, which an exception must not cross: one is kept,
  // the records read after it are dropped, and it is thrown again from here (as it was when
  // the whole batch was handed over after the read).
  constexpr std::size_t kPiece = 8192;
  std::vector<iolens_trace_record> batch;
  batch.reserve(kPiece);
  std::exception_ptr failed;
  kernel_.consume_trace([&](const iolens_trace_record& r) {
    if (failed) return;
    try {
      batch.push_back(r);
      if (batch.size() == kPiece) {
        session.on_ops(batch);
        batch.clear();
      }
    } catch (...) {
      failed = std::current_exception();
    }
  });
  if (failed) std::rethrow_exception(failed);
  session.on_ops(batch);
}

void CaptureRunner::service(JobTable& table, int64_t now) {
  if (!capture_ || !capture_->running()) return;
  Capture& c = *capture_;
  if (!c.window_open()) {
    settle();
    return;
  }
  take_trace(*c.session);
  c.out_state = c.output->check();
  Job* job = table.find(c.job_id);
  CaptureEnd why = CaptureEnd::None;
  if (c.out_state.stalled) why = CaptureEnd::OutputStalled;
  else if (!c.session->error()) why = CaptureEnd::WriteError;
  else if (c.stop_requested) why = CaptureEnd::Stopped;
  else if (!job || job->state != JobState::Live) why = CaptureEnd::JobEnded;
  else if (c.session->size_limit_reached()) why = CaptureEnd::SizeLimit;
  else if (now >= c.deadline_mono_ns) why = CaptureEnd::Duration;
  if (why != CaptureEnd::None) {
    end(table, why);
    return;
  }
  c.produced = kernel_.trace_records_made() - c.produced0;
  c.ring_full = kernel_.trace_records_lost() - c.lost0;
  if (now - c.last_sync_mono_ns >= 1000000000LL) {
    c.last_sync_mono_ns = now;
    c.session->sync(*job->rec);
  }
}

void CaptureRunner::end(JobTable& table, CaptureEnd why) {
  if (!capture_ || !capture_->window_open()) return;
  Capture& c = *capture_;
  // The window ends before the kernel stops: every call that ended inside it is in the ring.
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  c.session->close_window(static_cast<uint64_t>(now));
  kernel_.set_trace_mode(IOLENS_TRACE_OFF);  // also empties the pid list
  // What is already in the rings: the last records, and the names of their files.
  read_events_();
  take_trace(*c.session);
  c.produced = kernel_.trace_records_made() - c.produced0;
  c.ring_full = kernel_.trace_records_lost() - c.lost0;
  trace::Losses losses;
  losses.produced = c.produced;
  losses.ring_full = c.ring_full;
  Job* job = table.find(c.job_id);
  core::Recorder empty(0, 0);
  const Status st = c.session->finish(job ? *job->rec : empty, losses, static_cast<uint64_t>(now));
  if (!st && why != CaptureEnd::OutputStalled) why = CaptureEnd::WriteError;
  if (!st) c.error = st.message;
  c.end = why;
  c.end_mono_ns = now;
  c.output->close();  // the writer syncs and closes the file once the queue is out
  settle();
}

void CaptureRunner::settle(bool give_up) {
  if (!capture_ || !capture_->running() || capture_->window_open()) return;
  Capture& c = *capture_;
  c.out_state = c.output->check();
  const bool failed = !c.out_state.error.ok;
  if (!c.out_state.done && !failed && !give_up) return;  // still writing, and not stalled
  if (failed || !c.out_state.done) {
    // Stalled, failed or given up: what is still queued never reaches the file.
    if (c.out_state.stalled) c.end = CaptureEnd::OutputStalled;
    else if (failed && c.end != CaptureEnd::OutputStalled) c.end = CaptureEnd::WriteError;
    c.error = failed ? c.out_state.error.message
                     : "the output did not take its last " + std::to_string(c.out_state.queued) +
                           " bytes within " + std::to_string(kCaptureStopWait.count()) +
                           " ms of the stop (abandoned)";
    c.unwritten = c.out_state.queued;
    c.output->abandon();
  }
  c.settled = true;
  spdlog::log(c.error.empty() ? spdlog::level::info : spdlog::level::warn,
              "capture {} of job {} ended ({}): {} records encoded, {} of their {} bytes "
              "written ({} never written), {} lost (ring full), {} dropped (size limit){}{}",
              c.id, c.job_id, capture_end_name(c.end), c.session->ops_written(),
              c.out_state.written, c.session->bytes_written(), c.unwritten, c.ring_full,
              c.session->ops_dropped(), c.error.empty() ? "" : ": ", c.error);
}

void CaptureRunner::end_for_stop(JobTable& table) {
  end(table, CaptureEnd::DaemonStop);
  if (!capture_ || !capture_->running()) return;
  // Bounded: a reader that does not read (or a stuck file system) cannot hold up the stop.
  capture_->output->wait(kCaptureStopWait);
  settle(true);
}

}  // namespace iolens::daemon
