// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A captured trace in memory: what the native trace file (docs/trace-format.md) holds, what
/// `iolens run --trace` and `iolens capture` produce and what the converters read. Pure values:
/// no kernel, no libbpf.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "iolens_abi.h"

namespace iolens::trace {

/// The name of a file (or of a non-regular descriptor kind) the ops refer to by (dev, ino, gen).
struct FileName {
  uint64_t ino = 0;
  uint32_t dev = 0;
  uint32_t gen = 0;
  std::string path;    // canonical path; bytes as the kernel gave them (may be non-UTF-8)
  uint32_t flags = 0;  // IOLENS_PATH_TRUNCATED | IOLENS_PATH_UNREACHED
};

/// A process of the traced job: (pid, pstart_ns) as in the ops, with its parent.
struct Process {
  uint32_t pid = 0;
  uint64_t pstart_ns = 0;  // CLOCK_MONOTONIC ns, the key with pid
  uint32_t ppid = 0;
  uint64_t parent_pstart_ns = 0;
  std::string comm;
  std::string exe;         // "" when not known (no exec seen)
  int64_t exit_ns = -1;    // CLOCK_MONOTONIC ns, -1 = still running at the end of the capture
  int32_t exit_code = -1;  // raw wait status, -1 = unknown
};

/// Who and what was captured, and the clocks.
struct Meta {
  std::string producer;             // "iolens 0.1.0"
  std::string node;                 // hostname
  std::string target;               // "run", "job:ID", "cgroup:PATH" or "pid:N"
  std::string job_kind;             // "run", "kubernetes", "slurm", "systemd", "cgroup", ...
  std::string job_id;
  std::map<std::string, std::string> job_labels;
  std::vector<std::string> command; // argv of `iolens run`; empty for a capture
  uint64_t window_start_ns = 0;     // CLOCK_MONOTONIC ns: ops before it are not in the file
  uint64_t window_end_ns = 0;       // 0 until the capture ends (the trailer sets it)
  int64_t mono_to_wall_ns = 0;      // CLOCK_REALTIME - CLOCK_MONOTONIC at the start
  uint64_t ring_bytes = 0;          // size of the kernel's trace ring
  uint64_t abi_version = 0;         // IOLENS_ABI_VERSION of the writer (14+: buffers, modes)
  /// Darshan's mount table at the start, (mount point, block size), longest point first: what
  /// a converter takes the files' FILE_ALIGNMENT from (core/file_alignment.hpp). Absent from
  /// files of ABI 13 and before: the alignment of their files is unknown.
  std::optional<std::vector<std::pair<std::string, int64_t>>> alignment_mounts;
};

/// What did not make it into the file, by cause; every count is also in the trailer.
struct Losses {
  uint64_t produced = 0;     // records the kernel produced for this capture (sent or lost)
  uint64_t ring_full = 0;    // lost in the kernel: the trace ring was full
  uint64_t size_limit = 0;   // dropped by the agent: --max-size reached
  uint64_t other = 0;        // anything else (named in `notes`)
  std::vector<std::string> notes;
};

struct Trace {
  Meta meta;
  std::vector<FileName> files;
  std::vector<Process> processes;
  std::vector<iolens_trace_record> ops;  // in the order written (per-CPU rings: sort by start_ns)
  Losses losses;
  bool complete = false;  // the trailer was read: the capture ended cleanly
};

}  // namespace iolens::trace
