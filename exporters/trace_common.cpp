// SPDX-License-Identifier: Apache-2.0
#include "exporters/trace_common.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "core/paths.hpp"
#include "core/recorder.hpp"
#include "exporters/json_report.hpp"
#include "iolens_syscalls.h"

namespace iolens::exporters {

std::string trace_op_name(uint16_t op) {
  static constexpr std::array<const char*, IOLENS_NR_OPS> kNames = {
      "",     "read", "write", "open",  "dup",       "close",    "seek",
      "stat", "mmap", "fsync", "fdatasync", "truncate", "unlink", "rename"};
  if (op >= 1 && op < kNames.size()) return kNames[op];
  return "op" + std::to_string(op);
}

std::string_view syscall_name(uint16_t nr) {
  switch (nr) {
#define IOLENS_SYSCALL(name) \
  case IOLENS_NR_##name:     \
    return #name;
    IOLENS_SYSCALL(read) IOLENS_SYSCALL(write) IOLENS_SYSCALL(open) IOLENS_SYSCALL(close)
    IOLENS_SYSCALL(stat) IOLENS_SYSCALL(fstat) IOLENS_SYSCALL(lstat) IOLENS_SYSCALL(lseek)
    IOLENS_SYSCALL(mmap) IOLENS_SYSCALL(pread64) IOLENS_SYSCALL(pwrite64) IOLENS_SYSCALL(readv)
    IOLENS_SYSCALL(writev) IOLENS_SYSCALL(dup) IOLENS_SYSCALL(dup2) IOLENS_SYSCALL(sendfile)
    IOLENS_SYSCALL(fcntl) IOLENS_SYSCALL(fsync) IOLENS_SYSCALL(fdatasync)
    IOLENS_SYSCALL(ftruncate) IOLENS_SYSCALL(rename) IOLENS_SYSCALL(creat)
    IOLENS_SYSCALL(unlink) IOLENS_SYSCALL(openat) IOLENS_SYSCALL(splice)
    IOLENS_SYSCALL(newfstatat) IOLENS_SYSCALL(unlinkat) IOLENS_SYSCALL(renameat)
    IOLENS_SYSCALL(dup3) IOLENS_SYSCALL(preadv) IOLENS_SYSCALL(pwritev)
    IOLENS_SYSCALL(renameat2) IOLENS_SYSCALL(copy_file_range) IOLENS_SYSCALL(preadv2)
    IOLENS_SYSCALL(pwritev2) IOLENS_SYSCALL(statx) IOLENS_SYSCALL(openat2)
#undef IOLENS_SYSCALL
    default:
      return "";
  }
}

std::vector<std::string> trace_flag_names(uint32_t flags) {
  std::vector<std::string> out;
  if (flags & IOLENS_TRACE_F_OTHER) out.emplace_back("other");
  if (flags & IOLENS_TRACE_F_NOFILE) out.emplace_back("nofile");
  if (flags & IOLENS_TRACE_F_COPY) out.emplace_back("copy");
  if (flags & IOLENS_TRACE_F_MEM_UNALIGNED) out.emplace_back("mem_unaligned");
  const uint32_t unknown = flags & ~uint32_t{IOLENS_TRACE_F_OTHER | IOLENS_TRACE_F_NOFILE |
                                             IOLENS_TRACE_F_COPY | IOLENS_TRACE_F_MEM_UNALIGNED};
  if (unknown) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%x", unknown);
    out.emplace_back(buf);
  }
  return out;
}

nlohmann::json trace_losses_json(const trace::Losses& l) {
  return {{"produced", l.produced},     {"ring_full", l.ring_full},
          {"size_limit", l.size_limit}, {"other", l.other},
          {"total", trace_lost_total(l)}, {"notes", l.notes}};
}

nlohmann::json trace_meta_json(const trace::Trace& t) {
  const trace::Meta& m = t.meta;
  nlohmann::json j;
  put_string(j, "producer", m.producer);
  put_string(j, "node", m.node);
  put_string(j, "target", m.target);
  put_string(j, "job_kind", m.job_kind);
  put_string(j, "job_id", m.job_id);
  j["job_labels"] = nlohmann::json::object();
  for (const auto& [k, v] : m.job_labels) put_string(j["job_labels"], k, v);
  j["command"] = m.command;
  j["mono_to_wall_ns"] = m.mono_to_wall_ns;
  j["ring_bytes"] = m.ring_bytes;
  j["complete"] = t.complete;
  j["losses"] = trace_losses_json(t.losses);
  return j;
}

bool trace_op_succeeded(const iolens_trace_record& r) {
  if (r.op == IOLENS_OP_MMAP) return static_cast<uint64_t>(r.ret) < static_cast<uint64_t>(-4095);
  return r.ret >= 0;
}

int trace_op_errno(const iolens_trace_record& r) {
  if (trace_op_succeeded(r) || r.ret < -4095) return 0;
  return static_cast<int>(-r.ret);
}

void append_errno_fields(std::string& out, const iolens_trace_record& r) {
  const int err = trace_op_errno(r);
  if (err == 0) return;
  append_field(out, "errno", err);
  if (const char* name = strerrorname_np(err)) {
    out += ",\"error\":\"";
    out += name;  // "E" and capitals: nothing to escape
    out += '"';
  }
}

void append_syscall_field(std::string& out, const iolens_trace_record& r) {
  const std::string_view sys = syscall_name(r.nr);
  if (sys.empty()) {
    append_field(out, "syscall", r.nr);
    return;
  }
  out += ",\"syscall\":\"";
  out += sys;
  out += '"';
}

void append_flag_names_field(std::string& out, const iolens_trace_record& r) {
  if (r.flags == 0) return;
  out += ",\"flags\":";
  out += nlohmann::json(trace_flag_names(r.flags)).dump();
}

TraceIndex::TraceIndex(const trace::Trace& t) : trace_(t) {
  for (std::size_t i = 0; i < t.files.size(); ++i)
    names_[{t.files[i].dev, t.files[i].ino, t.files[i].gen}] = i;
  for (std::size_t i = 0; i < t.processes.size(); ++i)
    processes_[{t.processes[i].pid, t.processes[i].pstart_ns}] = i;
  by_start_.resize(t.ops.size());
  std::iota(by_start_.begin(), by_start_.end(), std::size_t{0});
  std::stable_sort(by_start_.begin(), by_start_.end(), [&](std::size_t a, std::size_t b) {
    return t.ops[a].start_ns < t.ops[b].start_ns;
  });
  window_start_ = t.meta.window_start_ns;
  if (window_start_ == 0) {
    // The earliest known start (0: the call's entry was not seen).
    for (std::size_t i : by_start_) {
      if (t.ops[i].start_ns == 0) continue;
      window_start_ = t.ops[i].start_ns;
      break;
    }
  }
  window_end_ = t.meta.window_end_ns;
  if (window_end_ == 0) {
    window_end_ = window_start_;
    for (const auto& r : t.ops) window_end_ = std::max<uint64_t>(window_end_, r.end_ns);
  }
}

const trace::FileName* TraceIndex::name(const iolens_trace_record& r) const {
  if (r.flags & (IOLENS_TRACE_F_OTHER | IOLENS_TRACE_F_NOFILE)) return nullptr;
  if (auto it = names_.find({r.dev, r.ino, r.gen}); it != names_.end())
    return &trace_.files[it->second];
  if (r.gen != 0) return nullptr;
  // Generation unknown: the last incarnation named, as Recorder::name_of does.
  auto it = names_.upper_bound({r.dev, r.ino, UINT32_MAX});
  if (it == names_.begin()) return nullptr;
  --it;
  const auto& [dev, ino, gen] = it->first;
  (void)gen;
  return dev == r.dev && ino == r.ino ? &trace_.files[it->second] : nullptr;
}

std::string TraceIndex::file_label(const iolens_trace_record& r) const {
  if (r.flags & IOLENS_TRACE_F_NOFILE) return "";
  if (r.flags & IOLENS_TRACE_F_OTHER) return "<" + core::other_kind_name(r.ino) + ">";
  if (const trace::FileName* n = name(r)) return n->path;
  return core::unknown_path(r.dev, r.ino);
}

const std::string& TraceIndex::path_fields(const iolens_trace_record& r, bool mark_unknown) const {
  const uint32_t kind = r.flags & (IOLENS_TRACE_F_OTHER | IOLENS_TRACE_F_NOFILE);
  auto [it, added] = fields_.try_emplace({mark_unknown, kind, r.dev, r.ino, r.gen});
  if (!added) return it->second;
  const std::string label = file_label(r);
  if (label.empty()) return it->second;
  nlohmann::json j;
  put_string(j, "path", label);
  if (mark_unknown && kind == 0 && !name(r)) j["path_unknown"] = true;
  std::string text = dump_json_line(j);  // {"path":...}: its fields, after a comma
  it->second = "," + text.substr(1, text.size() - 2);
  return it->second;
}

const trace::Process* TraceIndex::process(uint32_t pid, uint64_t pstart_ns) const {
  auto it = processes_.find({pid, pstart_ns});
  return it == processes_.end() ? nullptr : &trace_.processes[it->second];
}

}  // namespace iolens::exporters
