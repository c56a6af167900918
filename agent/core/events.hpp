// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Decoding of ring-buffer records (bpf/iolens_abi.h) into typed, validated events.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>

namespace iolens::core {

struct ProcKey {
  uint32_t pid = 0;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC
  auto operator<=>(const ProcKey&) const = default;
};

struct ForkEvent {
  ProcKey proc;
  ProcKey parent;
  uint64_t ts_ns = 0;
  std::string comm;  // the parent's comm (the child's until it execs)
  uint64_t cgroup_id = 0;  // the child's cgroup v2 id
};

struct ExitEvent {
  ProcKey proc;
  uint64_t ts_ns = 0;
  int32_t wait_status = 0;  // exit code << 8 | signal, as the kernel keeps it
};

struct PathEvent {
  ProcKey proc;
  uint64_t ts_ns = 0;
  uint16_t op = 0;  // enum iolens_path_op
  uint16_t flags = 0;
  uint32_t dev = 0;  // kernel dev_t
  uint64_t ino = 0;
  uint32_t gen = 0;  // inode generation
  std::string walk, str1, walk2, str2;  // raw, see iolens_path_event
  std::string comm;
};

using Event = std::variant<ForkEvent, ExitEvent, PathEvent>;

/// A cgroup v2 directory created or removed (daemon mode), named when it happened.
struct CgroupEvent {
  bool created = true;  // mkdir; false: rmdir
  uint64_t id = 0;      // cgroup id (the directory's inode number)
  uint32_t level = 0;
  std::string path;     // relative to the cgroup2 mount, "/a/b"
  bool truncated = false;
  uint64_t ts_ns = 0;
};

/// A process entered or left the selection (daemon mode): enum iolens_mark_reason.
struct MarkEvent {
  ProcKey proc;
  ProcKey parent;
  uint64_t cgroup_id = 0;
  uint32_t reason = 0;
  uint32_t threads = 0;
  std::string comm;
  uint64_t ts_ns = 0;
};

/// Events about jobs rather than about one process's I/O: consumed by the daemon's job table.
using JobEvent = std::variant<CgroupEvent, MarkEvent>;

struct DecodeResult {
  bool ok = false;
  Event event;                  // valid when ok and !job
  std::optional<JobEvent> job;  // set for cgroup and mark events
  std::string error;            // why a record was rejected
};

/// Decodes one ring-buffer record. Never trusts sizes inside the record beyond `bytes`.
DecodeResult decode_event(std::span<const uint8_t> bytes);

}  // namespace iolens::core
