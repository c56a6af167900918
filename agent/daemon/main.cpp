// SPDX-License-Identifier: Apache-2.0
// iolensd: the node daemon. Configuration from a YAML file (docs/daemon-config.md); flags
// override the common settings.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <optional>

#include "control/log_escape.hpp"
#include "core/crash_point.hpp"
#include "daemon/daemon.hpp"
#include "jobs/config.hpp"
#include "jobs/memory_bound.hpp"

#ifndef IOLENS_VERSION
#define IOLENS_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{"iolensd: per-job I/O of the DL jobs of this node, from the kernel", "iolensd"};
  app.set_version_flag("--version", IOLENS_VERSION);
  std::string config_path, check_path;
  std::string cgroup_root, output_dir, state_dir, pin_dir, socket, socket_group, log_level;
  std::string hooks;
  uint32_t drain_ms = 0;
  std::optional<uint32_t> hooks_idle_s;
  uint64_t max_files_per_job = 0;
  std::string btf = "/sys/kernel/btf/vmlinux";
  bool verbose = false;
  app.add_option("-c,--config", config_path, "YAML configuration file")
      ->check(CLI::ExistingFile);
  app.add_option("--check-config", check_path,
                 "validate a configuration file, print every error, exit (0: valid)");
  app.add_option("--cgroup-root", cgroup_root, "cgroup2 mount (default: auto)");
  app.add_option("--output-dir", output_dir, "where job records are written");
  app.add_option("--state-dir", state_dir, "where the daemon keeps its state across restarts");
  app.add_option("--pin-dir", pin_dir, "bpffs directory for maps and links kept across restarts");
  app.add_option("--socket", socket, "control socket path");
  app.add_option("--socket-group", socket_group, "group allowed to query the daemon");
  app.add_option("--drain-interval-ms", drain_ms, "how often kernel records are read")
      ->check(CLI::Range(10u, 600000u));
  app.add_option("--max-files-per-job", max_files_per_job,
                 "file records kept per job before the least useful are folded")
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--syscall-hooks", hooks,
                 "on-demand: attach syscall hooks only while a job is live; always "
                 "(default: the config's syscall_hooks)")
      ->check(CLI::IsMember({"on-demand", "always"}));
  app.add_option("--hooks-idle-s", hooks_idle_s,
                 "seconds without a live job before on-demand hooks are detached");
  std::string pod_log_dir = "/var/log/pods";
  app.add_option("--pod-log-dir", pod_log_dir,
                 "kubelet pod log directory, to name pods (namespace_name_uid entries)");
  std::optional<std::string> metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "serve /metrics on host:port (\"\" disables; default: the config's "
                 "metrics.listen, 127.0.0.1:9464)");
  app.add_option("--btf", btf, "kernel BTF for CO-RE");
  app.add_flag("-v,--verbose", verbose, "libbpf debug output");
  CLI11_PARSE(app, argc, argv);
  // Crash points (tests only, docs/daemon.md#crash-points): a misspelt one would never fire.
  for (const char* var : {"IOLENS_CRASH_AT", "IOLENS_CRASH_AFTER"}) {
    const char* v = getenv(var);
    if (v && *v && !iolens::core::known_crash_point(v)) {
      std::string known;
      for (const char* k : iolens::core::kCrashPoints) known += std::string(known.empty() ? "" : ", ") + k;
      std::cerr << "iolensd: " << var << "=" << v << ": no such crash point (they are: " << known
                << ")\n";
      return 2;
    }
  }

  if (!check_path.empty()) {
    const auto r = iolens::jobs::load_config_file(check_path);
    for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.c_str());
    if (!r.ok()) return 1;
    std::printf("%s: valid, %zu job rule(s)\n", check_path.c_str(), r.config.rules.size());
    return 0;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "iolensd: no configuration: iolensd --config FILE (see %s)\n",
                 "docs/daemon-config.md");
    return 2;
  }
  auto r = iolens::jobs::load_config_file(config_path);
  if (!r.ok()) {
    for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.c_str());
    std::fprintf(stderr, "iolensd: %zu error(s) in %s\n", r.errors.size(), config_path.c_str());
    return 2;
  }
  iolens::daemon::DaemonOptions opts;
  opts.config = r.config;
  auto& c = opts.config;
  if (!cgroup_root.empty()) c.cgroup_root = cgroup_root;
  if (!output_dir.empty()) c.output_dir = output_dir;
  if (!state_dir.empty()) c.state_dir = state_dir;
  if (!pin_dir.empty()) c.pin_dir = pin_dir;
  if (!socket.empty()) c.socket_path = socket;
  if (!socket_group.empty()) c.socket_group = socket_group;
  if (drain_ms) c.drain_interval_ms = drain_ms;
  if (max_files_per_job) {
    c.limits.max_files_per_job = max_files_per_job;
    c.limits.given.max_files_per_job = true;
    if (std::string why = iolens::jobs::apply_memory_bound(c.limits); !why.empty()) {
      std::fprintf(stderr, "iolensd: --max-files-per-job: %s\n", why.c_str());
      return 2;
    }
  }
  if (!log_level.empty()) c.log_level = log_level;
  if (metrics_listen) {
    if (std::string why = iolens::jobs::check_listen_address(*metrics_listen); !why.empty()) {
      std::fprintf(stderr, "iolensd: --metrics-listen: %s\n", why.c_str());
      return 2;
    }
    c.metrics.listen = *metrics_listen;
  }
  opts.btf_path = btf;
  opts.verbose = verbose;
  opts.syscall_hooks = hooks.empty() ? c.syscall_hooks : hooks;
  opts.hooks_idle_s = static_cast<uint32_t>(hooks_idle_s.value_or(c.hooks_idle_s));
  opts.pod_log_dir = pod_log_dir;

  // Logs on stderr: journald (or the caller) adds the timestamps it wants. Every message is
  // escaped: cgroup names, comm and paths are chosen by local users (control/log_escape.hpp).
  auto logger = spdlog::stderr_logger_st("iolensd");
  logger->set_formatter(iolens::control::escaping_formatter("iolensd: %l: %v"));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(c.log_level));
  return iolens::daemon::run_daemon(opts);
}
