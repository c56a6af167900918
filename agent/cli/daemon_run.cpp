// SPDX-License-Identifier: Apache-2.0
#include "cli/daemon_run.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "cli/child.hpp"
#include "cli/forwarding.hpp"
#include "cli/output_file.hpp"
#include "control/client.hpp"
#include "control/unique_fd.hpp"
#include "core/block.hpp"
#include "core/file_alignment.hpp"
#include "core/recorder.hpp"
#include "exporters/darshan_log.hpp"
#include "exporters/json_report.hpp"
#include "exporters/text_report.hpp"

#ifndef IOLENS_VERSION
#define IOLENS_VERSION "0.0.0"
#endif

namespace iolens::cli {
namespace {

using control::UniqueFd;
using nlohmann::json;

/// The daemon's answer to `run_end` may take a drain of every job's records and a save of the
/// run's recorder: far more than a status request.
constexpr int kRunEndTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 5000;

void error_line(const std::string& msg) { std::fprintf(stderr, "iolens: %s\n", msg.c_str()); }

/// The recorder iolensd wrote into `fd` (`bytes` of it, from offset 0).
std::unique_ptr<core::Recorder> read_recorder(int fd, uint64_t bytes, std::string& error) {
  std::string blob(bytes, '\0');
  std::size_t done = 0;
  while (done < blob.size()) {
    const ssize_t n = pread(fd, blob.data() + done, blob.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? std::strerror(errno) : "shorter than iolensd said";
      return nullptr;
    }
    done += static_cast<std::size_t>(n);
  }
  return core::Recorder::load(blob, error);
}

/// The block layer of the run from the answer's (kernel dev_t, raw counters) pairs.
std::vector<core::BlockDeviceSnapshot> block_of(const json& answer, std::string& error) {
  std::vector<core::BlockRecord> records;
  const json blocks = answer.value("block", json::array());
  for (const auto& b : blocks) {
    core::BlockRecord r{};
    const auto words = b.value("counters", std::vector<uint64_t>{});
    if (words.size() * 8 != sizeof(r.counters)) {
      error = "iolensd sent block counters of another layout";
      return {};
    }
    std::memcpy(&r.counters, words.data(), sizeof(r.counters));
    r.key.dev = b.value("dev", 0u);
    records.push_back(r);
  }
  return core::rollup_blocks(
      records, [](uint32_t, uint64_t) { return true; },
      [](uint32_t major, uint32_t minor) { return core::block_device_name("/sys", major, minor); });
}

/// Closes an output iolens wrote (`written`: whether every write succeeded) and says why it
/// failed: the write's errno, or the close's (a file system may report a failed write there).
bool finish_output(int& fd, const std::string& path, bool written) {
  const int write_errno = errno;
  const bool closed = close(fd) == 0;
  fd = -1;
  if (written && closed) return true;
  error_line("writing " + path + " failed: " + std::strerror(written ? errno : write_errno));
  return false;
}

}  // namespace

uint64_t now_ns(clockid_t clk) {
  timespec ts{};
  clock_gettime(clk, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

int write_run_outputs(const RunOptions& opts, core::RunSnapshot& snap,
                      const std::optional<Invoker>& invoker, pid_t child_pid, int& json_fd,
                      int& darshan_fd, const RunOutputExtras& extras) {
  const auto mark = [&](const char* step) {
    if (extras.mark) extras.mark(step);
  };
  // Darshan's FILE_ALIGNMENT of every row, from this process's mount table, which the Darshan
  // log lists too (docs/counters.md "Alignment and mode").
  std::vector<std::pair<std::string, std::string>> mounts;
  if (json_fd >= 0 || darshan_fd >= 0) {
    mounts = exporters::read_mounts("/proc/self/mounts");
    core::set_file_alignments(snap, exporters::alignment_table(mounts));
  }
  if (!opts.quiet) {
    exporters::TextOptions topts;
    topts.top_files = opts.top_files;
    std::fputs(exporters::run_summary(snap, topts).c_str(), stderr);
    if (!extras.note.empty()) error_line(extras.note);
    mark("summary");
  }
  if (darshan_fd >= 0) {
    exporters::DarshanJobInfo info;
    info.uid = static_cast<int64_t>(invoker ? invoker->uid : getuid());
    info.jobid = child_pid;
    info.mounts = mounts;
    const auto dxt = extras.dxt ? extras.dxt() : std::nullopt;
    const std::string log =
        dxt ? exporters::darshan_log(snap, info, *dxt) : exporters::darshan_log(snap, info);
    if (!finish_output(darshan_fd, opts.darshan_path, write_all(darshan_fd, log))) return 1;
    mark("darshan");
  }
  if (json_fd >= 0) {
    const bool written = exporters::write_run_json(
        snap, IOLENS_VERSION, [&](std::string_view piece) { return write_all(json_fd, piece); });
    if (!finish_output(json_fd, opts.json_path, written)) return 1;
    mark("json");
  }
  return snap.exit_code ? *snap.exit_code : 1;
}

core::ClockBase run_clock_now(int64_t& start_wall) {
  core::ClockBase clock;
  clock.start_mono_ns = now_ns(CLOCK_MONOTONIC);
  clock.mono_to_wall_ns =
      static_cast<int64_t>(now_ns(CLOCK_REALTIME)) - static_cast<int64_t>(now_ns(CLOCK_MONOTONIC));
  start_wall = static_cast<int64_t>(clock.start_mono_ns) + clock.mono_to_wall_ns;
  return clock;
}

std::string daemon_path_refusal(const RunOptions& opts) {
  if (!opts.local_only_option.empty())
    return opts.local_only_option + " needs iolens's own programs";
  if (!opts.trace_path.empty()) return "--trace needs iolens's own programs";
  return {};
}

std::optional<int> run_via_daemon(const RunOptions& opts, const std::optional<Invoker>& invoker,
                                  int& json_fd, int& darshan_fd, std::string& why) {
  why = daemon_path_refusal(opts);
  if (!why.empty()) return std::nullopt;
  // No socket file, no daemon: said as a failed connect would say it, without the command's
  // process made and killed first (~1.3 ms of every run on a node without iolensd). Any other
  // answer (a path connect() may reach with credentials stat() does not use, a bad path) is
  // left to the request, which says what it is.
  struct stat st {};
  if (!opts.socket.empty() && stat(opts.socket.c_str(), &st) != 0 && errno == ENOENT) {
    why = control::connect_error(opts.socket, ENOENT);
    return std::nullopt;
  }
  int64_t start_wall = 0;
  const core::ClockBase clock = run_clock_now(start_wall);

  install_forwarding();
  SuspendedChild child;
  if (Status s = child.spawn(opts.command, invoker); !s) {
    why = s.message;
    return std::nullopt;  // the local path tries again and says so
  }
  // Our liveness for iolensd: it holds the read end; when this process dies, the write end
  // closes and iolensd ends the run (no cgroup or job left behind). Made after the fork, so the
  // command never holds it.
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) != 0) {
    why = std::string("pipe: ") + std::strerror(errno);
    return std::nullopt;
  }
  UniqueFd alive_r(alive[0]), alive_w(alive[1]);
  const auto started = control::request(
      opts.socket, {{"cmd", "run"}, {"pid", child.pid()}}, why, kRunTimeoutMs, alive_r.get());
  alive_r.reset();
  if (!started) return std::nullopt;  // ~SuspendedChild kills the command, which never ran
  const uint64_t run_id = started->value("run", uint64_t{0});
  const std::string job = started->value("job", "");
  spdlog::debug("counted by iolensd: run {}, job {}, cgroup {}", run_id, job,
                started->value("cgroup", ""));

  const pid_t child_pid = child.pid();
  set_forwarded_child(child_pid);
  const Status released = child.release();
  int wait_status = 0;
  bool reaped = false;
  if (released) {
    reaped = wait_forwarded_child(child_pid, wait_status);
    if (!reaped) error_line(std::string("cannot wait for the command: ") + std::strerror(errno));
  }
  set_forwarded_child(-1);
  const uint64_t end_mono = now_ns(CLOCK_MONOTONIC);

  // The counts: iolensd writes the run's recorder into a memfd of ours (never a file it would
  // open for us, never bytes through the socket's JSON).
  UniqueFd mem(static_cast<int>(memfd_create("iolens-run", MFD_CLOEXEC)));
  std::string error;
  std::optional<json> ended;
  if (mem.get() < 0) {
    error = std::string("memfd_create: ") + std::strerror(errno);
  } else {
    ended = control::request(opts.socket, {{"cmd", "run_end"}, {"run", run_id}}, error,
                             kRunEndTimeoutMs, mem.get());
  }
  alive_w.reset();
  if (!released) {
    error_line("cannot run '" + opts.command[0] + "': " + released.message);
    return released.err == ENOENT ? 127 : 126;
  }
  std::unique_ptr<core::Recorder> rec;
  if (ended) rec = read_recorder(mem.get(), ended->value("recorder_bytes", uint64_t{0}), error);
  if (!rec) {
    error_line("iolensd counted the command (job " + job +
               ") but its counts could not be had: " + error);
    return 1;
  }
  const json lost = ended->value("lost", json::object());
  for (auto it = lost.begin(); it != lost.end(); ++it)
    if (it->is_number_unsigned()) rec->set_lost(it.key(), it->get<uint64_t>());
  core::RunSnapshot snap = rec->snapshot(clock);
  snap.block = block_of(*ended, error);
  if (!error.empty()) spdlog::warn("{}", error);
  snap.command = opts.command;
  const json not_attached = ended->value("not_attached", json::object());
  for (auto it = not_attached.begin(); it != not_attached.end(); ++it)
    snap.not_attached[it.key()] = it->is_string() ? it->get<std::string>() : "not attached";
  if (reaped)
    snap.exit_code =
        WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  snap.start_ns = start_wall;
  snap.end_ns = static_cast<int64_t>(end_mono) + clock.mono_to_wall_ns;
  snap.collector = "iolensd";
  snap.collector_note = job;
  // The daemon's timing (an older daemon, which does not say, timed exactly).
  snap.timing = ended->value("timing", std::string("exact")) == "off" ? "off" : "exact";
  return write_run_outputs(opts, snap, invoker, child_pid, json_fd, darshan_fd);
}

}  // namespace iolens::cli
