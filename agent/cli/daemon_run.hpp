// SPDX-License-Identifier: Apache-2.0
#pragma once
/// `iolens run` counted by the node's iolensd (docs/run.md#through-iolensd): no kernel program
/// is loaded. The command is forked stopped; iolensd moves it into a fresh cgroup under its run
/// root, where its programs, already loaded, count it; at the command's exit iolensd sends its
/// recorder back and the summary, --json and --darshan are made from it as for a local run.

#include <sys/types.h>
#include <time.h>

#include <functional>
#include <optional>
#include <string>

#include "cli/invoker.hpp"
#include "cli/run_command.hpp"
#include "core/recorder.hpp"
#include "exporters/darshan_log.hpp"

namespace iolens::cli {

uint64_t now_ns(clockid_t clk);

/// The run's clock base, taken now; `start_wall` gets the run's start (wall clock ns).
core::ClockBase run_clock_now(int64_t& start_wall);

/// What only the local path adds to the outputs.
struct RunOutputExtras {
  std::string note;  // a line said after the summary
  /// The Darshan log's DXT (from --trace); nullopt: a log without it.
  std::function<std::optional<exporters::DarshanDxt>()> dxt;
  std::function<void(const char* step)> mark;  // after each step written (IOLENS_TIMING)
};

/// The end of every `iolens run`, whichever programs counted it: the summary on stderr (unless
/// -q), the --darshan log and the --json record (streamed), each from `snap`. `json_fd` and
/// `darshan_fd` (-1: not asked for) are written and closed (set to -1). Returns the command's
/// exit status, or 1 when an output could not be written (one line says which).
int write_run_outputs(const RunOptions& opts, core::RunSnapshot& snap,
                      const std::optional<Invoker>& invoker, pid_t child_pid, int& json_fd,
                      int& darshan_fd, const RunOutputExtras& extras = {});

/// Why these options need iolens's own programs ("--trace needs iolens's own programs"), or "".
std::string daemon_path_refusal(const RunOptions& opts);

/// Runs the command counted by iolensd at opts.socket. nullopt, with `why`, when iolensd did
/// not take it (none answers, runs off, refused, an option it cannot honour): nothing of the
/// command ran and the caller counts it itself. Otherwise the command ran: its exit status, or
/// 1 when the counts could not be had or written (one line on stderr says why), as run_traced.
/// `json_fd` and `darshan_fd` (-1: not asked for) are written and closed (set to -1).
std::optional<int> run_via_daemon(const RunOptions& opts, const std::optional<Invoker>& invoker,
                                  int& json_fd, int& darshan_fd, std::string& why);

}  // namespace iolens::cli
