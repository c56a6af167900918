// SPDX-License-Identifier: Apache-2.0
#include "cli/capture_command.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <nlohmann/json.hpp>

#include "cli/invoker.hpp"
#include "cli/output_file.hpp"
#include "control/format.hpp"
#include "exporters/units.hpp"
#include "jobs/units.hpp"

namespace iolens::cli {
namespace {

volatile sig_atomic_t g_stop = 0;

void on_stop_signal(int) { g_stop = 1; }

void say(const std::string& text) {
  std::fprintf(stderr, "iolens: %s\n", control::terminal_safe(text).c_str());
}

uint64_t u64(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

/// The capture status's losses: (ring full, size limit).
std::pair<uint64_t, uint64_t> losses(const nlohmann::json& st) {
  const auto lost = st.value("lost", nlohmann::json::object());
  return {u64(lost, "ring_full"), u64(lost, "size_limit")};
}

void nap_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);  // a signal ends it early: the loop looks at g_stop at once
}

}  // namespace

uint64_t parse_cli_size(const std::string& text, std::string& error) {
  std::string t = text;
  if (!t.empty() && std::strchr("kKmMgGtT", t.back()) != nullptr) t += "iB";
  const jobs::ParsedUnsigned p = jobs::parse_size_bytes(t);
  error = p.ok() ? "" : p.error;
  return p.value;
}

CLI::App* add_capture_command(CLI::App& app, CaptureOptions& o) {
  auto* cmd = app.add_subcommand(
      "capture", "Trace every I/O call of a live job into a file, through iolensd (on demand)");
  auto* job = cmd->add_option("--job", o.job, "The job's ID, as `iolens jobs` lists it");
  auto* cg = cmd->add_option("--cgroup", o.cgroup,
                             "A cgroup of a job (its path under the cgroup2 mount, or absolute)");
  auto* pid = cmd->add_option("--pid", o.pid, "A process of a job: it and its later children");
  job->excludes(cg, pid);
  cg->excludes(pid);
  cmd->add_option("--duration", o.duration, "Stop after this long (e.g. 500ms, 30s, 5m)")
      ->capture_default_str();
  cmd->add_option("--max-size", o.max_size,
                  "Stop adding operations once the file is this big (e.g. 100M, 1G; 0 = no limit)")
      ->capture_default_str();
  cmd->add_option("-o,--output", o.output, "The trace file to write (docs/trace-format.md)")
      ->required();
  cmd->add_flag("--force", o.force,
                "Replace the output file if it exists (a regular file only: a symbolic link or "
                "any other kind of file is never followed or written)");
  cmd->add_option("--socket", o.socket, "iolensd's control socket")->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "No progress and no summary");
  return cmd;
}

int run_capture(const CaptureOptions& o) {
  const int targets = !o.job.empty() + !o.cgroup.empty() + (o.pid != 0);
  if (targets != 1) {
    say("say what to capture: one of --job ID, --cgroup PATH or --pid PID");
    return 2;
  }
  const jobs::ParsedUnsigned duration = jobs::parse_duration_ms(o.duration);
  if (!duration.ok() || duration.value == 0) {
    say("--duration '" + o.duration + "': " +
        (duration.ok() ? std::string("must be more than 0") : duration.error));
    return 2;
  }
  std::string size_error;
  const uint64_t max_bytes = parse_cli_size(o.max_size, size_error);
  if (!size_error.empty()) {
    say("--max-size '" + o.max_size + "': " + size_error);
    return 2;
  }
  nlohmann::json req = {{"cmd", "capture"},
                        {"duration_ms", duration.value},
                        {"max_bytes", max_bytes}};
  if (!o.job.empty()) req["job"] = o.job;
  if (!o.cgroup.empty()) req["cgroup"] = o.cgroup;
  if (o.pid) req["pid"] = o.pid;

  // Opened here, with the user's own permissions (under sudo: those of the user who ran it);
  // the daemon writes through its copy.
  std::optional<Invoker> invoker;
  if (Status s = find_invoker(invoker); !s) {
    say(s.message);
    return 2;
  }
  int fd = -1;
  bool created = false;
  {
    OutputError e;
    fd = open_output_as(invoker, o.output, o.force, created, e);
    if (fd < 0) {
      say(output_error_line(o.output, e));
      return e.refused ? 2 : 1;
    }
  }
  std::string error;
  const auto started = control::request(o.socket, req, error, 5000, fd);
  struct stat file_st {};
  const bool empty = fstat(fd, &file_st) == 0 && file_st.st_size == 0;
  if (!started) {
    if (created && empty) {
      FileAccessAs as(invoker);
      if (as.status()) remove_created_output(fd, o.output);
    }
    close(fd);
    say(error);
    return 1;
  }
  close(fd);
  const uint64_t id = u64(*started, "id");
  const std::string job_id = started->value("job", "");

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);

  const bool progress = !o.quiet && isatty(STDERR_FILENO);
  bool stop_sent = false;
  nlohmann::json st;
  int failures = 0;
  for (;;) {
    if (g_stop && !stop_sent) {
      if (!control::request(o.socket, {{"cmd", "capture_stop"}, {"id", id}}, error))
        say("could not ask iolensd to stop the capture: " + error);
      stop_sent = true;
    }
    auto r = control::request(o.socket, {{"cmd", "capture_status"}, {"id", id}}, error);
    if (!r) {
      // A daemon busy with a big drain answers late: a few misses are not the end.
      if (++failures >= 5) {
        if (progress) std::fputs("\n", stderr);
        say(error + "; " + o.output + " holds what was written so far (readable up to its last "
                    "complete block)");
        return 1;
      }
      nap_ms(500);
      continue;
    }
    failures = 0;
    st = std::move(*r);
    const std::string state = st.value("state", "");
    if (progress) {
      std::fprintf(stderr, "\r\033[Kcapturing %s: %llu records, %s, lost %llu, %.0f s left",
                   control::terminal_safe(job_id).c_str(),
                   static_cast<unsigned long long>(u64(st, "records")),
                   exporters::human_bytes(u64(st, "bytes")).c_str(),
                   static_cast<unsigned long long>(losses(st).first + losses(st).second),
                   st.value("remaining_s", 0.0));
    }
    if (state != "running") break;
    nap_ms(g_stop ? 100 : 250);
  }
  if (progress) std::fputs("\n", stderr);
  const std::string state = st.value("state", "");
  if (!o.quiet || state != "done") {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.1f", st.value("elapsed_s", 0.0));
    say(std::string(state == "done" ? "captured " : "capture failed after ") +
        std::to_string(u64(st, "records")) + " records of job " + job_id + " in " + secs +
        " s into " + o.output + " (" + exporters::human_bytes(u64(st, "bytes")) + "; ended by " +
        st.value("reason", "?") + "); lost: " + std::to_string(losses(st).first) +
        " (ring full), " + std::to_string(losses(st).second) + " (size limit)");
  }
  return state == "done" ? 0 : 1;
}

}  // namespace iolens::cli
