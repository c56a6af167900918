// SPDX-License-Identifier: Apache-2.0
#pragma once
/// `iolens capture`: asks iolensd to write a per-operation trace of a live job into a file this
/// command opens (so the file is the user's, with the user's permissions: the descriptor travels
/// over the control socket), shows progress, stops it on Ctrl-C (docs/capture.md).

#include <cstdint>
#include <string>

#include "control/client.hpp"

namespace CLI {
class App;
}

namespace iolens::cli {

struct CaptureOptions {
  std::string job;     // --job ID
  std::string cgroup;  // --cgroup PATH
  uint32_t pid = 0;    // --pid PID
  std::string duration = "30s";
  std::string max_size = "1GiB";
  std::string output;  // -o FILE
  std::string socket = control::kDefaultSocketPath;
  bool quiet = false;
  bool force = false;  // replace an existing (regular) output file
};

/// Adds the `capture` subcommand; its options land in `opts`.
CLI::App* add_capture_command(CLI::App& app, CaptureOptions& opts);

/// "1G" means GiB here, as in fio and dd; everything parse_size_bytes takes is taken too.
/// Empty `error` on success.
uint64_t parse_cli_size(const std::string& text, std::string& error);

/// 0 when the capture ended as asked (duration, Ctrl-C, job end, size limit); 1 when the daemon
/// could not be asked or the capture failed; 2 for a bad command line or a refused output (it
/// exists without --force, or is a symbolic link or not a regular file: cli/output_file.hpp).
/// Under sudo the output is created as the invoking user.
int run_capture(const CaptureOptions& opts);

}  // namespace iolens::cli
