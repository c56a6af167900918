// SPDX-License-Identifier: Apache-2.0
#include "cli/convert_command.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/invoker.hpp"
#include "cli/output_file.hpp"
#include "exporters/darshan_log.hpp"
#include "exporters/json_report.hpp"
#include "exporters/trace_jsonl.hpp"
#include "exporters/trace_perfetto.hpp"
#include "exporters/trace_replay.hpp"
#include "trace/trace_file.hpp"

#ifndef IOLENS_VERSION
#define IOLENS_VERSION "0.0.0"
#endif

namespace iolens::cli {
namespace {

void say(const std::string& text) { std::fprintf(stderr, "iolens: %s\n", text.c_str()); }

}  // namespace

CLI::App* add_convert_command(CLI::App& app, ConvertOptions& o) {
  auto* cmd = app.add_subcommand(
      "convert", "Convert a trace file (iolens run --trace, iolens capture) for other tools");
  cmd->add_option("FILE", o.input, "The trace file")->required();
  cmd->add_option("--to", o.to,
                  "perfetto (Chrome trace-event JSON: ui.perfetto.dev, TensorBoard), jsonl (one "
                  "JSON object per line), darshan (Darshan 3.41 log with POSIX and DXT_POSIX), "
                  "json (the iolens.run/1 record of the traced window)")
      ->required()
      ->check(CLI::IsMember({"perfetto", "chrome", "jsonl", "darshan", "json"}));
  cmd->add_option("-o,--output", o.output, "Where to write it (- for stdout)")
      ->capture_default_str();
  cmd->add_flag("--force", o.force,
                "Replace the output file if it exists (a regular file only: a symbolic link or "
                "any other kind of file is never followed or written)");
  cmd->add_flag("--partial", o.partial,
                "Convert what precedes the damage of a truncated or corrupted file (the error is "
                "still shown)");
  return cmd;
}

int run_convert(const ConvertOptions& o) {
  if (o.to == "darshan" && o.output == "-" && isatty(STDOUT_FILENO)) {
    say("a Darshan log is binary: give -o FILE");
    return 2;
  }
  // The output is created before the work, so that a refused one costs nothing, and removed
  // again if there is nothing to write into it.
  // Under sudo, both files are opened as the user who ran sudo: convert needs no privilege,
  // and must not lend root's to read or write a file that user could not.
  std::optional<Invoker> invoker;
  if (Status s = find_invoker(invoker); !s) {
    say(s.message);
    return 2;
  }
  int out_fd = -1;
  bool created = false;
  if (o.output != "-") {
    OutputError e;
    out_fd = open_output_as(invoker, o.output, o.force, created, e);
    if (out_fd < 0) {
      say(output_error_line(o.output, e));
      return e.refused ? 2 : 1;
    }
  }
  struct OutputGuard {
    int fd;
    bool remove;
    const std::string& path;
    const std::optional<Invoker>& invoker;
    ~OutputGuard() {
      if (remove) {
        FileAccessAs as(invoker);  // never root's right to remove what the user could not
        if (as.status()) remove_created_output(fd, path);
      }
      if (fd >= 0) close(fd);
    }
  } guard{out_fd, created, o.output, invoker};
  trace::ReadResult r;
  {
    FileAccessAs as(invoker);
    if (!as.status()) {
      say(as.status().message);
      return 1;
    }
    r = trace::read_trace_file(o.input);
  }
  if (!r.status) {
    if (r.problem == trace::ReadProblem::io || r.problem == trace::ReadProblem::foreign ||
        r.problem == trace::ReadProblem::too_new || !o.partial) {
      say(o.input + ": " + r.status.message +
          (r.problem == trace::ReadProblem::truncated || r.problem == trace::ReadProblem::corrupt
               ? " (--partial converts the " + std::to_string(r.trace.ops.size()) +
                     " records before it)"
               : ""));
      return 1;
    }
    say(o.input + ": " + r.status.message + "; converting the " +
        std::to_string(r.trace.ops.size()) + " records before it");
  }
  const trace::Trace& t = r.trace;
  std::ostringstream out;
  if (o.to == "perfetto" || o.to == "chrome") {
    exporters::write_perfetto_json(t, out);
  } else if (o.to == "jsonl") {
    exporters::write_jsonl(t, out);
  } else {
    const core::RunSnapshot snap = exporters::replay_counters(t);
    if (o.to == "json") {
      out << exporters::dump_json(exporters::run_to_json(snap, IOLENS_VERSION));
    } else {
      exporters::DarshanJobInfo info = exporters::darshan_job_of_trace(t);
      info.uid = static_cast<int64_t>(invoker ? invoker->uid : getuid());
      out << exporters::darshan_log(snap, info, exporters::dxt_of_trace(t, snap));
    }
  }
  const std::string bytes = out.str();
  if (o.output == "-") {
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) {
      say("writing to stdout failed");
      return 1;
    }
    return 0;
  }
  const bool written = write_all(out_fd, bytes);
  const int write_errno = errno;
  const int closed = close(out_fd);
  guard.fd = -1;
  if (!written || closed != 0) {
    say("cannot write " + o.output + ": " + std::strerror(written ? errno : write_errno));
    return 1;
  }
  guard.remove = false;
  return 0;
}

}  // namespace iolens::cli
