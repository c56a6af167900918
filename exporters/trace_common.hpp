// SPDX-License-Identifier: Apache-2.0
#pragma once
/// What the trace converters (trace_perfetto, trace_jsonl, trace_replay) share: names of op
/// kinds, syscalls and flags, and an index of a captured trace's names and processes.

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/trace.hpp"

namespace iolens::exporters {

/// The wall clock (CLOCK_REALTIME ns) of a CLOCK_MONOTONIC time by the trace's clock base;
/// modular, as the recorder's, so that no sum overflows a signed value.
inline int64_t trace_wall_ns(const trace::Meta& m, uint64_t mono) {
  return static_cast<int64_t>(mono + static_cast<uint64_t>(m.mono_to_wall_ns));
}

/// Records lost by every cause.
inline uint64_t trace_lost_total(const trace::Losses& l) {
  return l.ring_full + l.size_limit + l.other;
}

/// {produced, ring_full, size_limit, other, total, notes}.
nlohmann::json trace_losses_json(const trace::Losses& l);

/// Who and what was captured: producer, node, target, job_kind, job_id, job_labels, command,
/// mono_to_wall_ns, ring_bytes, complete, losses (strings not valid UTF-8 with "*_hex").
nlohmann::json trace_meta_json(const trace::Trace& t);

/// "read", "write", "open", "dup", "close", "seek", "stat", "mmap", "fsync", "fdatasync",
/// "truncate", "unlink", "rename" for enum iolens_trace_op_kind; "op<N>" for anything else.
std::string trace_op_name(uint16_t op);

/// The x86-64 name of a syscall iolens traces ("pread64", "openat"); "" for other numbers.
std::string_view syscall_name(uint16_t nr);

/// The names of the IOLENS_TRACE_F_* bits set in `flags`: "other", "nofile", "copy", and
/// "0x<hex>" for the unknown bits together.
std::vector<std::string> trace_flag_names(uint32_t flags);

/// Whether a call succeeded by its return value: ret >= 0, except mmap, whose address is
/// unsigned (an error is -1..-4095, as the kernel's IS_ERR_VALUE).
bool trace_op_succeeded(const iolens_trace_record& r);

/// The errno of a failed call (1..4095, from ret = -errno); 0 when it succeeded or when its
/// return value is no errno (a damaged record).
int trace_op_errno(const iolens_trace_record& r);

// The converters write one JSON object per op by hand (an nlohmann::json object per op costs
// several microseconds; a trace has millions): integers as they are, strings only through
// nlohmann's escaping, field by field.

/// Appends `,"key":v` to `out`.
template <std::integral T>
void append_field(std::string& out, std::string_view key, T v) {
  out += ",\"";
  out += key;
  out += "\":";
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

/// Appends `,"errno":N,"error":"ENAME"` for a failed call; nothing otherwise.
void append_errno_fields(std::string& out, const iolens_trace_record& r);

/// Appends the op's "syscall" field (its name, or its number when iolens does not trace it)
/// and "flags" (trace_flag_names, when any).
void append_syscall_field(std::string& out, const iolens_trace_record& r);
void append_flag_names_field(std::string& out, const iolens_trace_record& r);

/// Lookups into a trace's names and processes; the trace must outlive the index.
class TraceIndex {
 public:
  explicit TraceIndex(const trace::Trace& t);

  /// The name of the regular file an op refers to, as iolens's recorder names it: the exact
  /// (dev, ino, gen); for gen 0 (a stat by path, generation unknown) the incarnation of
  /// (dev, ino) with the highest generation. nullptr for F_OTHER and F_NOFILE ops and for files
  /// whose name was not captured.
  const trace::FileName* name(const iolens_trace_record& r) const;

  /// What an op's file is called in the converters' output: "" for F_NOFILE, "<pipe>",
  /// "<socket>", ... for F_OTHER, the captured path, or "<unknown MAJ:MIN:INO>" (as the run
  /// JSON names a file without a name).
  std::string file_label(const iolens_trace_record& r) const;

  /// file_label(r) as JSON fields, escaped once per file: `,"path":"..."`, with
  /// `,"path_hex":"..."` when not valid UTF-8 (put_string) and, if `mark_unknown`,
  /// `,"path_unknown":true` for a regular file without a captured name; "" for F_NOFILE.
  const std::string& path_fields(const iolens_trace_record& r, bool mark_unknown) const;

  /// The process (pid, pstart_ns); nullptr if it is not in the trace's process list.
  const trace::Process* process(uint32_t pid, uint64_t pstart_ns) const;

  /// meta.window_start_ns, or the earliest op start when that is 0 (unknown).
  uint64_t window_start_ns() const { return window_start_; }
  /// meta.window_end_ns, or the latest op end (at least the window start) when that is 0 (the
  /// capture did not end cleanly).
  uint64_t window_end_ns() const { return window_end_; }

  /// Indices of the trace's ops by start time; equal starts keep the file's order (a copy's
  /// READ before its WRITE).
  const std::vector<std::size_t>& by_start() const { return by_start_; }

 private:
  const trace::Trace& trace_;
  // (dev, ino, gen) -> index into trace_.files; the last entry wins, as in the recorder.
  std::map<std::tuple<uint32_t, uint64_t, uint32_t>, std::size_t> names_;
  std::map<std::pair<uint32_t, uint64_t>, std::size_t> processes_;
  std::vector<std::size_t> by_start_;
  // (mark_unknown, F_OTHER|F_NOFILE bits, dev, ino, gen) -> path_fields
  mutable std::map<std::tuple<bool, uint32_t, uint32_t, uint64_t, uint32_t>, std::string> fields_;
  uint64_t window_start_ = 0;
  uint64_t window_end_ = 0;
};

}  // namespace iolens::exporters
