// SPDX-License-Identifier: Apache-2.0
#include "exporters/trace_replay.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/file_alignment.hpp"
#include "core/paths.hpp"
#include "exporters/trace_common.hpp"
#include "core/common_values.hpp"
#include "iolens_account.h"

namespace iolens::exporters {
namespace {

/// Whether the accounting's `offset + ret - 1` is a value: the kernel's offsets and sizes always
/// are; a damaged record's may not be, and such a call is not counted.
bool rw_in_range(int64_t offset, int64_t ret) {
  int64_t end = 0;
  return !__builtin_add_overflow(offset, ret, &end) && end != INT64_MIN;
}

core::ProcKey proc_of(const iolens_trace_record& r) { return core::ProcKey{r.tgid, r.pstart_ns}; }

/// A canonical path as the kernel sends it: components leaf first, each NUL-terminated.
std::string walk_of(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    if (end > pos) parts.push_back(path.substr(pos, end - pos));
    pos = end + 1;
  }
  std::string walk;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    walk += *it;
    walk += '\0';
  }
  return walk;
}

/// The path the recorder keeps for a name it receives as a walk: the captured path itself for
/// every canonical path (absolute, no empty components, no NUL byte).
std::string recorded_path(const std::string& path) { return core::path_from_walk(walk_of(path)); }

/// The name the recorder gives an op's regular file (see TraceIndex::name).
std::string recorded_name(const TraceIndex& idx, const iolens_trace_record& r) {
  if (const trace::FileName* n = idx.name(r)) return recorded_path(n->path);
  return core::unknown_path(r.dev, r.ino);
}

core::PathEvent file_name_event(const trace::FileName& f, const core::ProcKey& proc) {
  core::PathEvent e;
  e.proc = proc;
  e.op = IOLENS_PATH_FILE;
  e.flags = static_cast<uint16_t>(f.flags);
  e.dev = f.dev;
  e.ino = f.ino;
  e.gen = f.gen;
  e.walk = walk_of(f.path);
  return e;
}

}  // namespace

ReplayedRecords replay_records(const trace::Trace& t) {
  ReplayedRecords out;
  // The kernel updates a record at sys_exit: replay in end order.
  std::vector<std::size_t> order(t.ops.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return t.ops[a].end_ns < t.ops[b].end_ns;
  });
  for (std::size_t i : order) {
    const iolens_trace_record& r = t.ops[i];
    // A call whose entry was not seen is not counted; a call on no file has no record.
    if (r.start_ns == 0 || (r.flags & IOLENS_TRACE_F_NOFILE)) continue;
    const bool other = (r.flags & IOLENS_TRACE_F_OTHER) != 0;
    auto record = [&]() -> core::FileCounters* {
      if (other)
        return &out.others.try_emplace({proc_of(r), static_cast<uint32_t>(r.ino)},
                                       core::new_counters())
                    .first->second;
      return &out.files.try_emplace(core::FileKey{r.dev, r.ino, r.gen, proc_of(r)},
                                    core::new_counters())
                  .first->second;
    };
    auto meta = [&](int op) {
      // Metadata calls count on regular files only (the kernel's on_meta looks up no `others`).
      if (!other) iolens_account_meta(record(), op, r.start_ns, r.end_ns);
    };
    switch (r.op) {
      case IOLENS_OP_READ:
      case IOLENS_OP_WRITE:
        if (r.ret >= 0 && rw_in_range(r.offset, r.ret)) {
          // As the kernel: a regular file's values past its record's slots go to the side
          // slots; pipes, sockets and ttys tally nothing.
          if (other)
            iolens_account_rw_tally(record(), r.op == IOLENS_OP_WRITE, r.offset, r.ret,
                                    r.start_ns, r.end_ns, 0, nullptr);
          else
            core::account_rw(*record(), r.op == IOLENS_OP_WRITE, r.offset, r.ret, r.start_ns,
                             r.end_ns);
          // Traces of ABI 13 and earlier never set the flag: their mem_not_aligned stays 0.
          if (r.flags & IOLENS_TRACE_F_MEM_UNALIGNED) iolens_account_mem_unaligned(record(), r.ret);
        }
        break;
      case IOLENS_OP_OPEN:
      case IOLENS_OP_DUP:
        if (r.ret >= 0 && !other) {
          iolens_account_open(record(), r.op == IOLENS_OP_DUP, r.start_ns, r.end_ns);
          // An open's arg is its mode when it may create (ABI 14; 0 before).
          if (r.op == IOLENS_OP_OPEN && r.arg > 0)
            iolens_account_mode(record(), static_cast<uint64_t>(r.arg));
        }
        break;
      case IOLENS_OP_CLOSE:
        // Counted whatever close returned: the pattern state resets (Darshan).
        if (!other) iolens_account_close(record(), r.ret, r.start_ns, r.end_ns);
        break;
      case IOLENS_OP_SEEK:
        if (r.ret >= 0) meta(IOLENS_META_SEEK);
        break;
      case IOLENS_OP_STAT:
        if (r.ret == 0) meta(IOLENS_META_STAT);
        break;
      case IOLENS_OP_MMAP:
        if (trace_op_succeeded(r)) meta(IOLENS_META_MMAP);
        break;
      case IOLENS_OP_FSYNC:
        if (r.ret >= 0) meta(IOLENS_META_FSYNC);
        break;
      case IOLENS_OP_FDATASYNC:
        if (r.ret >= 0) meta(IOLENS_META_FDSYNC);
        break;
      case IOLENS_OP_TRUNCATE:
        if (r.ret == 0) meta(IOLENS_META_TRUNCATE);
        break;
      default:
        break;  // unlink and rename are the recorder's (replay_counters)
    }
  }
  return out;
}

core::RunSnapshot replay_counters(const trace::Trace& t) {
  const TraceIndex idx(t);
  core::Recorder rec(0, 0);  // no root of our own: every process comes from the trace

  // Names first. The process a name event comes from does not matter to the recorder, but it
  // creates that process: use the first op's (or the first listed process), which is one of
  // the run's anyway.
  std::optional<core::ProcKey> some_proc;
  if (!idx.by_start().empty())
    some_proc = proc_of(t.ops[idx.by_start().front()]);
  else if (!t.processes.empty())
    some_proc = core::ProcKey{t.processes.front().pid, t.processes.front().pstart_ns};
  if (some_proc)
    for (const trace::FileName& f : t.files) rec.on_event(file_name_event(f, *some_proc));

  for (const trace::Process& p : t.processes) {
    const core::ProcKey key{p.pid, p.pstart_ns};
    rec.on_event(core::ForkEvent{key, {p.ppid, p.parent_pstart_ns}, p.pstart_ns, p.comm, 0});
    if (!p.exe.empty()) {
      core::PathEvent e;
      e.proc = key;
      e.op = IOLENS_PATH_EXE;
      e.walk = walk_of(p.exe);
      e.comm = p.comm;
      rec.on_event(e);
    }
    // An unknown wait status (-1) is cleared from the snapshot below.
    if (p.exit_ns >= 0)
      rec.on_event(core::ExitEvent{key, static_cast<uint64_t>(p.exit_ns),
                                   p.exit_code >= 0 ? p.exit_code : 0});
  }

  // Unlinks and renames: the recorder attributes them by path. The name is sent again just
  // before, so the path leads to this very file (a later file may have taken the name since).
  // The trace has no path for a call on no file, nor a rename's target: a path no name can
  // have (it holds a NUL byte) stands for them.
  const std::string no_path(1, '\0');
  for (std::size_t i : idx.by_start()) {
    const iolens_trace_record& r = t.ops[i];
    if ((r.op != IOLENS_OP_UNLINK && r.op != IOLENS_OP_RENAME) || r.ret != 0 || r.start_ns == 0)
      continue;
    const trace::FileName* n = idx.name(r);
    if (n) rec.on_event(file_name_event(*n, proc_of(r)));
    core::PathEvent e;
    e.proc = proc_of(r);
    e.ts_ns = r.end_ns;
    e.op = r.op == IOLENS_OP_UNLINK ? IOLENS_PATH_UNLINK : IOLENS_PATH_RENAME;
    e.str1 = n ? recorded_path(n->path) : no_path;
    e.str2 = no_path;
    rec.on_event(e);
  }

  const ReplayedRecords records = replay_records(t);
  for (const auto& [k, c] : records.files) {
    const iolens_file_key key{k.ino, k.dev, k.proc.pid, k.proc.start_ns, k.gen, 0};
    rec.on_file(key, c, true);
  }
  for (const auto& [k, c] : records.others) {
    const iolens_file_key key{k.second, 0, k.first.pid, k.first.start_ns, 0, 0};
    rec.on_other(key, c, true);
  }
  rec.set_lost("trace_ring_full", t.losses.ring_full);
  rec.set_lost("trace_size_limit", t.losses.size_limit);
  rec.set_lost("trace_other", t.losses.other);

  const core::ClockBase clock{idx.window_start_ns(), t.meta.mono_to_wall_ns};
  core::RunSnapshot run = rec.snapshot(clock);
  if (t.meta.alignment_mounts) {
    std::vector<core::AlignmentMount> table;
    for (const auto& [point, block_size] : *t.meta.alignment_mounts)
      table.push_back(core::AlignmentMount{point, block_size});
    core::set_file_alignments(run, table);
  }
  run.command = t.meta.command;
  if (t.meta.abi_version < 14) run.not_recorded = {"mem_not_aligned", "mode"};
  run.start_ns = trace_wall_ns(t.meta, idx.window_start_ns());
  run.end_ns = trace_wall_ns(t.meta, idx.window_end_ns());
  for (auto& f : run.files) f.renamed_to.clear();
  for (const trace::Process& p : t.processes) {
    if (p.exit_ns < 0 || p.exit_code >= 0) continue;
    const int64_t start = p.pstart_ns ? trace_wall_ns(t.meta, p.pstart_ns) : 0;
    for (auto& ps : run.processes)
      if (ps.pid == p.pid && ps.start_ns == start) ps.exit_code.reset();
  }
  return run;
}

DarshanDxt dxt_of_trace(const trace::Trace& t, const core::RunSnapshot& run, uint32_t version) {
  const TraceIndex idx(t);
  std::map<std::pair<uint32_t, int64_t>, int64_t> rank_of;
  for (std::size_t i = 0; i < run.processes.size(); ++i)
    rank_of[{run.processes[i].pid, run.processes[i].start_ns}] = static_cast<int64_t>(i);
  const uint64_t origin = idx.window_start_ns();
  auto seconds = [&](uint64_t mono) {
    return static_cast<double>(static_cast<int64_t>(mono - origin)) / 1e9;
  };

  std::map<std::pair<int64_t, std::string>, DarshanDxtRecord> records;
  std::map<std::tuple<uint32_t, uint64_t, uint32_t>, std::string> names;  // recorded_name, once a file
  for (std::size_t i : idx.by_start()) {
    const iolens_trace_record& r = t.ops[i];
    if ((r.op != IOLENS_OP_READ && r.op != IOLENS_OP_WRITE) || r.ret < 0 || r.start_ns == 0 ||
        (r.flags & (IOLENS_TRACE_F_OTHER | IOLENS_TRACE_F_NOFILE)) ||
        !rw_in_range(r.offset, r.ret))
      continue;  // as replay_records: only the calls it counts
    const int64_t pstart = r.pstart_ns ? trace_wall_ns(t.meta, r.pstart_ns) : 0;
    const auto rank = rank_of.find({r.tgid, pstart});
    auto [name, added] = names.try_emplace({r.dev, r.ino, r.gen});
    if (added) name->second = recorded_name(idx, r);
    std::string path = name->second;
    DarshanDxtRecord& rec = records[{rank == rank_of.end() ? -1 : rank->second, path}];
    if (rec.path.empty()) {
      rec.path = std::move(path);
      rec.rank = rank == rank_of.end() ? -1 : rank->second;
      rec.hostname = t.meta.node;
    }
    DxtSegment g;
    g.offset = r.offset;
    g.length = r.ret;
    g.start = seconds(r.start_ns);
    g.end = seconds(r.end_ns);
    g.thread = r.tid;
    (r.op == IOLENS_OP_WRITE ? rec.writes : rec.reads).push_back(g);
  }
  DarshanDxt dxt;
  dxt.version = version;
  dxt.partial = trace_lost_total(t.losses) > 0;
  for (auto& [key, rec] : records) dxt.records.push_back(std::move(rec));
  return dxt;
}

DarshanJobInfo darshan_job_of_trace(const trace::Trace& t) {
  DarshanJobInfo j;
  int64_t first_pid = 0;
  if (!t.processes.empty()) {
    const auto first = std::min_element(
        t.processes.begin(), t.processes.end(), [](const trace::Process& a, const trace::Process& b) {
          return std::tie(a.pstart_ns, a.pid) < std::tie(b.pstart_ns, b.pid);
        });
    first_pid = first->pid;
  }
  j.jobid = darshan_jobid(t.meta.job_id, first_pid);
  j.metadata = {{"target", t.meta.target},
                {"job_kind", t.meta.job_kind},
                {"job_id", t.meta.job_id},
                {"node", t.meta.node},
                {"trace_records_lost", std::to_string(trace_lost_total(t.losses))},
                {"trace_complete", t.complete ? "1" : "0"}};
  return j;
}

}  // namespace iolens::exporters
