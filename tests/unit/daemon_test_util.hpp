// SPDX-License-Identifier: Apache-2.0
#pragma once
// Synthetic kernel records shared by the daemon's unit tests.

#include "core/events.hpp"
#include "iolens_abi.h"

namespace iolens::testing_util {

/// A process `pid` (started at pid * 10 ns) marked into cgroup `cgroup` by a cgroup.procs write.
inline core::MarkEvent mark(uint32_t pid, uint64_t cgroup, uint64_t ts = 1000) {
  core::MarkEvent m;
  m.proc = {pid, pid * 10ull};
  m.parent = {1, 1};
  m.cgroup_id = cgroup;
  m.reason = IOLENS_MARK_ATTACH;
  m.threads = 1;
  m.comm = "python3";
  m.ts_ns = ts;
  return m;
}

/// The kernel key of (that process, file `ino` on kernel dev 7, generation 1).
inline iolens_file_key key(uint32_t pid, uint64_t ino) {
  iolens_file_key k{};
  k.ino = ino;
  k.dev = 7;
  k.tgid = pid;
  k.pstart_ns = pid * 10ull;
  k.gen = 1;
  return k;
}

}  // namespace iolens::testing_util
