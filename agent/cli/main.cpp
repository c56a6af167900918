// SPDX-License-Identifier: Apache-2.0
// The `iolens` command line. Parsing only; the work is in iolens_run and iolens_control.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "cli/capture_command.hpp"
#include "cli/command_words.hpp"
#include "cli/convert_command.hpp"
#include "cli/query_command.hpp"
#include "cli/run_command.hpp"
#include "control/log_escape.hpp"

int main(int argc, char** argv) {
  CLI::App app{"iolens: how a job really uses storage, seen from the kernel (eBPF)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("iolens ") + IOLENS_VERSION);

  iolens::cli::RunOptions run;
  bool verbose = false;
  auto* cmd = app.add_subcommand("run", "Run a command traced; print its I/O at exit");
  cmd->add_option("--json", run.json_path, "Write the iolens.run/1 JSON record to this file");
  cmd->add_option("--darshan", run.darshan_path,
                  "Also write a Darshan log (format 3.41, POSIX module) that darshan-parser and "
                  "PyDarshan read");
  cmd->add_option("--trace", run.trace_path,
                  "Also write every I/O call, in order, to this trace file (docs/trace-format.md; "
                  "iolens convert turns it into Perfetto, Darshan DXT or JSON lines)");
  std::string trace_max = "0";
  cmd->add_option("--trace-max-size", trace_max,
                  "Stop adding calls to the trace once it is this big (e.g. 500M, 2G; 0 = no "
                  "limit); the calls left out are counted")
      ->capture_default_str();
  std::string trace_ring = "16M";
  cmd->add_option("--trace-ring-size", trace_ring,
                  "Size of the kernel's ring for --trace records (a power of two, e.g. 64M): "
                  "larger if the trailer counts records lost to a full ring")
      ->capture_default_str();
  cmd->add_flag("--force", run.force,
                "Replace output files that exist (only regular files: a symbolic link or any "
                "other kind of file is never followed or written)");
  cmd->add_flag("-q,--quiet", run.quiet, "No summary on stderr");
  cmd->add_option("--top", run.top_files, "Files listed in the summary")->capture_default_str();
  cmd->add_option("--drain-interval-ms", run.drain_interval_ms,
                  "How often records of exited processes are moved out of the kernel "
                  "(at once when its map is half full)")
      ->capture_default_str()
      ->check(CLI::Range(10u, 60000u));
  cmd->add_option("--max-file-records", run.loader.max_file_records,
                  "Kernel map size for live (process, file) records; records of exited "
                  "processes and closed files are moved to user space, so the number of files "
                  "is not limited by it (operations that find it full are counted as lost)")
      ->capture_default_str()
      ->check(CLI::Range(64u, 16u << 20));
  cmd->add_option("--fast-file-records", run.loader.fast_file_records,
                  "Of --max-file-records (at most all of them), how many the kernel "
                  "preallocates: making a record there is several times cheaper, at ~1 KiB of "
                  "kernel memory each from the start (0: none preallocated)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 16u << 20));
  cmd->add_option("--max-inflight", run.loader.max_inflight,
                  "Entries of each kernel map of requests in flight (O_DIRECT calls, io_uring "
                  "requests, block requests; 0: 8192, 8192 and 16384); those that do not fit "
                  "are counted as lost (direct_inflight, uring_inflight, block_inflight)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 16u << 20));
  cmd->add_option("--max-other-records", run.loader.max_other_records,
                  "Kernel map size for (process, kind) records of I/O on pipes, sockets and "
                  "devices; calls that find it full are counted as lost (other_records)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 16u << 20));
  cmd->add_option("--max-block-records", run.loader.max_block_records,
                  "Kernel map size for (process, device) block-layer records; block I/O that "
                  "finds it full is counted as lost (block_records)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 16u << 20));
  cmd->add_option("--btf", run.loader.btf_path, "Kernel BTF file")->capture_default_str();
  cmd->add_option("--disable-program", run.loader.disabled_programs,
                  "Do not load this optional kernel program (page cache, fault, O_DIRECT, "
                  "io_uring, writeback, block hooks; repeatable); listed as not attached")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::string timing = "exact";
  cmd->add_option("--timing", timing,
                  "How calls are timed: exact (each call's entry and exit: Darshan's time "
                  "counters), or off (no program on every system call's entry: cheaper per "
                  "call; counts and bytes as exact, times not measured; no --trace)")
      ->capture_default_str();
  bool local = false, need_daemon = false;
  auto* local_flag = cmd->add_flag(
      "--local", local,
      "Load iolens's own kernel programs even when the node's iolensd could count the command");
  cmd->add_flag("--daemon", need_daemon,
                "Only let the node's iolensd count the command: fail when it cannot (no daemon, "
                "runs off, an option it cannot honour)")
      ->excludes(local_flag);
  cmd->add_option("--socket", run.socket, "iolensd's control socket, for the daemon path")
      ->capture_default_str();
  cmd->add_flag("-v,--verbose", verbose, "Debug logs, including libbpf's");
  // The words after "--" never reach CLI11 (command_words.hpp): this positional only takes a
  // command given without "--", and the check below says when there is none.
  cmd->add_option("command", run.command, "The command to trace, after --");
  cmd->positionals_at_end();

  iolens::cli::QueryCommands queries(app);
  iolens::cli::CaptureOptions capture;
  CLI::App* capture_cmd = iolens::cli::add_capture_command(app, capture);
  iolens::cli::ConvertOptions convert;
  CLI::App* convert_cmd = iolens::cli::add_convert_command(app, convert);

  const iolens::cli::CommandWords words = iolens::cli::split_run_command(argc, argv);
  try {
    app.parse(words.argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every usage error of every subcommand (a value out of range included: CLI11 would exit
    // 105 for it): one line, exit 2.
    return queries.usage_error(app, e);
  }
  if (cmd->parsed()) {
    run.command = iolens::cli::run_command_of(std::move(run.command), words.command);
    if (run.command.empty()) {
      std::fprintf(stderr, "iolens: run: no command to trace (iolens run [OPTIONS] -- COMMAND "
                           "[ARGS...])\nRun with --help for more information.\n");
      return 2;
    }
  }
  run.daemon = local ? iolens::cli::DaemonUse::Never
              : need_daemon ? iolens::cli::DaemonUse::Require
                            : iolens::cli::DaemonUse::Auto;
  // What only iolens's own programs can do: the daemon's are loaded already, its own way.
  for (const char* o :
       {"--trace", "--btf", "--max-file-records", "--fast-file-records", "--max-inflight",
        "--max-block-records", "--max-other-records", "--disable-program", "--timing"})
    if (run.local_only_option.empty() && cmd->count(o) > 0) run.local_only_option = o;
  if (queries.given()) return queries.run();
  // Checked here, not by CLI11, so that a bad value exits 2 with one line, as the sizes do.
  if (timing != "exact" && timing != "off") {
    std::fprintf(stderr, "iolens: --timing '%s': expected exact or off\n", timing.c_str());
    return 2;
  }
  run.loader.timing = timing == "off" ? IOLENS_TIMING_OFF : IOLENS_TIMING_EXACT;
  if (run.loader.timing == IOLENS_TIMING_OFF && !run.trace_path.empty()) {
    std::fprintf(stderr, "iolens: --trace needs each call's start and duration: not with "
                         "--timing off\n");
    return 2;
  }
  if (capture_cmd->parsed()) return iolens::cli::run_capture(capture);
  if (convert_cmd->parsed()) return iolens::cli::run_convert(convert);
  {
    std::string size_error;
    run.trace_max_bytes = iolens::cli::parse_cli_size(trace_max, size_error);
    if (!size_error.empty()) {
      std::fprintf(stderr, "iolens: --trace-max-size '%s': %s\n", trace_max.c_str(),
                   size_error.c_str());
      return 2;
    }
    const uint64_t ring = iolens::cli::parse_cli_size(trace_ring, size_error);
    if (!size_error.empty() || ring < 4096 || ring > (1u << 30) || (ring & (ring - 1)) != 0) {
      std::fprintf(stderr, "iolens: --trace-ring-size '%s': %s\n", trace_ring.c_str(),
                   size_error.empty() ? "must be a power of two from 4K to 1G"
                                      : size_error.c_str());
      return 2;
    }
    // The ring exists whether or not it is used (the programs refer to it): without --trace,
    // one page instead of 16 MiB of locked kernel memory.
    run.loader.trace_ring_bytes = run.trace_path.empty() ? 4096u : static_cast<uint32_t>(ring);
    // Nor is trace mode's code verified (a quarter of sys_exit's walk on Linux 6.8+,
    // bpf/README.md "Trace mode").
    run.loader.trace_calls = !run.trace_path.empty();
  }
  // Logs go to stderr: stdout belongs to the traced command.
  spdlog::set_default_logger(spdlog::stderr_color_mt("iolens"));
  // Escaped: the traced command's file names and comm can hold terminal escapes.
  spdlog::set_formatter(iolens::control::escaping_formatter("iolens: %l: %v"));
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
  run.loader.verbose = verbose;
  return iolens::cli::run_traced(run);
}
