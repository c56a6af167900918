// SPDX-License-Identifier: Apache-2.0
#pragma once
/// `iolensd`: attaches the kernel programs in job-selection mode, keeps the job table, answers
/// the control socket, writes each job's record when it ends (docs/daemon.md).

#include <cstdint>
#include <string>

#include "jobs/config.hpp"

namespace iolens::daemon {

struct DaemonOptions {
  jobs::Config config;
  std::string btf_path = "/sys/kernel/btf/vmlinux";
  bool verbose = false;          // libbpf debug output
  /// "on-demand" (default): syscall hooks attached only while a job is live (plus
  /// hooks_idle_s); "always": attached from start to stop.
  std::string syscall_hooks = "on-demand";
  uint32_t hooks_idle_s = 30;
  std::string mountinfo_path = "/proc/self/mountinfo";
  /// The kubelet's pod log directory (<namespace>_<pod>_<uid>): names pods when present.
  std::string pod_log_dir = "/var/log/pods";
};

/// Runs until SIGTERM/SIGINT (clean stop: records written, kernel state removed) or SIGUSR2
/// (hand-over stop: state saved, kernel state kept for the next daemon). Returns the exit code.
int run_daemon(const DaemonOptions& opts);

}  // namespace iolens::daemon
