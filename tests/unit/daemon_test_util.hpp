// SPDX-License-Identifier: Apache-2.0
#pragma once
// Synthetic kernel records shared by the daemon's unit tests.

#include <string>
#include <utility>

#include "core/events.hpp"
#include "daemon/job_table.hpp"
#include "iolens_abi.h"
#include "jobs/config.hpp"
#include "jobs/selector.hpp"

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

/// The name event of file `ino` (kernel dev 7, generation 1) sent with process `pid`'s call:
/// `walk` is the kernel's walk, the file's own name first.
inline core::PathEvent name_event(uint32_t pid, uint64_t ino, std::string walk) {
  core::PathEvent n;
  n.proc = {pid, pid * 10ull};
  n.op = IOLENS_PATH_FILE;
  n.dev = 7;
  n.ino = ino;
  n.gen = 1;
  n.walk = std::move(walk);
  return n;
}

/// A job table of one cgroup job, "cgroup/dl/a" (cgroup 2, /dl/a), with process 500 in it.
inline daemon::JobTable one_job_table(jobs::Limits limits = {}) {
  jobs::Rule r;
  r.kind = jobs::RuleKind::Cgroup;
  r.name = "dl";
  r.globs = {"/dl/*"};
  r.roots = {"/dl"};
  daemon::JobTable t(jobs::Selector({r}), limits, 1'000'000'000);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_mark(mark(500, 2));
  return t;
}

}  // namespace iolens::testing_util
