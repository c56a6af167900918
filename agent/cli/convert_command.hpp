// SPDX-License-Identifier: Apache-2.0
#pragma once
/// `iolens convert FILE --to FORMAT [-o OUT]`: a native trace file (docs/trace-format.md) as
/// Perfetto/Chrome trace-event JSON, JSON lines, a Darshan log with DXT, or the run's JSON
/// record (docs/trace-convert.md).

#include <string>

namespace CLI {
class App;
}

namespace iolens::cli {

struct ConvertOptions {
  std::string input;
  std::string to;
  std::string output = "-";  // "-": stdout
  bool partial = false;      // convert what precedes the damage of a damaged file
  bool force = false;        // replace an existing (regular) output file
};

CLI::App* add_convert_command(CLI::App& app, ConvertOptions& opts);

/// 0 on success; 1 when the input cannot be read (one line says why and at which byte) or the
/// output cannot be written; 2 for a bad command line or a refused output (it exists without
/// --force, or is a symbolic link or not a regular file: cli/output_file.hpp). Under sudo the
/// output is created as the invoking user.
int run_convert(const ConvertOptions& opts);

}  // namespace iolens::cli
