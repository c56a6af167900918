// SPDX-License-Identifier: Apache-2.0
#pragma once
/// `iolens run -- CMD`: trace a command and its descendants, report at exit.

#include <cstdint>
#include <string>
#include <vector>

#include "control/client.hpp"
#include "loader/loader.hpp"

namespace iolens::cli {

/// Whether `iolens run` asks the node's iolensd to count the command (docs/run.md).
enum class DaemonUse {
  Auto,     // when one answers and takes it; else iolens loads its own programs
  Never,    // --local
  Require,  // --daemon: fail when iolensd cannot count it
};

struct RunOptions {
  std::vector<std::string> command;
  std::string json_path;         // empty: no JSON
  std::string darshan_path;      // empty: no Darshan log
  std::string trace_path;        // empty: no per-operation trace (docs/trace-format.md)
  uint64_t trace_max_bytes = 0;  // stop adding operations to the trace at this size; 0 = none
  bool quiet = false;            // no summary on stderr
  bool force = false;            // replace existing (regular) output files
  std::size_t top_files = 10;
  uint32_t drain_interval_ms = 1000;
  /// A run's loader: two tiers of file records, the first 8,192 preallocated (~2 ms of the
  /// start, ~8 MiB of kernel memory; bench/README.md "Issue 14: two tiers of file records").
  loader::Options loader = [] {
    loader::Options o;
    o.fast_file_records = 8192;
    return o;
  }();
  DaemonUse daemon = DaemonUse::Auto;
  std::string socket = control::kDefaultSocketPath;  // iolensd's control socket
  /// The first option given that only iolens's own programs can honour ("--btf", ...), or
  /// empty: such a run is counted locally.
  std::string local_only_option;
};

/// Runs the command traced: counted by the node's iolensd when it takes it (opts.daemon,
/// docs/run.md), else by iolens's own programs. Returns the exit status for iolens itself: the
/// command's status, or 1 (iolens could not trace; one line on stderr says why; the command did
/// not run; or, on the daemon path, the command ran but its counts could not be had), or 2 (an
/// output refused or not creatable, or a malformed SUDO_UID/SUDO_GID; the command did not run).
/// Under sudo the command runs as the invoking user and the outputs are created as that user
/// (cli/invoker.hpp).
int run_traced(const RunOptions& opts);

}  // namespace iolens::cli
