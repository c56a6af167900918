// SPDX-License-Identifier: Apache-2.0
#include "exporters/json_report.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "core/by_file.hpp"
#include "core/common_values.hpp"
#include "core/file_alignment.hpp"

namespace iolens::exporters {
namespace {

using nlohmann::json;

std::string to_hex(const std::string& s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

json counters_json(const core::FileCounters& c) {
  json j = json::object();
  for (const auto& f : core::counter_fields()) j[std::string(f.name)] = core::counter_value(c, f);
  return j;
}

/// A row's file_alignment and file_not_aligned members (Darshan's FILE_ALIGNMENT and
/// FILE_NOT_ALIGNED; docs/counters.md "Alignment and mode"): null when not known (no mount
/// table, or an alignment the offsets' buckets cannot tell).
std::pair<std::optional<int64_t>, std::optional<int64_t>> alignment_of(
    const core::FileCounters& c, const std::optional<int64_t>& alignment) {
  if (!alignment) return {std::nullopt, std::nullopt};
  return {alignment, core::file_not_aligned(c, *alignment)};
}

json optional_json(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

/// The members of a file row's counters that are not plain counter_fields(): computed from the
/// record (and the file's alignment), in one table so that the DOM (file_json) and the streamed
/// text (append_counters_and_coverage) cannot differ. nullopt prints null.
struct DerivedInputs {
  const core::FileCounters& c;
  std::optional<int64_t> alignment, not_aligned;
  core::CommonValues access, stride;
};
DerivedInputs derived_inputs(const core::FileCounters& c,
                             const std::optional<int64_t>& file_alignment) {
  const auto [a, n] = alignment_of(c, file_alignment);
  return {c, a, n, core::common_accesses(c), core::common_strides(c)};
}
using DerivedValue = std::optional<int64_t> (*)(const DerivedInputs&);
struct DerivedMember {
  std::string_view name;
  DerivedValue value;
};
template <int I>
std::optional<int64_t> access_value(const DerivedInputs& d) { return d.access[I].value; }
template <int I>
std::optional<int64_t> access_count(const DerivedInputs& d) { return d.access[I].count; }
template <int I>
std::optional<int64_t> stride_value(const DerivedInputs& d) { return d.stride[I].value; }
template <int I>
std::optional<int64_t> stride_count(const DerivedInputs& d) { return d.stride[I].count; }
// Darshan's ACCESS1..4 / STRIDE1..4 (docs/counters.md "Common access sizes and strides"), FILE_ALIGNMENT
// and FILE_NOT_ALIGNED ("Alignment and mode"), and the calls the tallies could not hold.
constexpr std::array<DerivedMember, 20> kDerived = {{
    {"access1_access", access_value<0>},
    {"access2_access", access_value<1>},
    {"access3_access", access_value<2>},
    {"access4_access", access_value<3>},
    {"access1_count", access_count<0>},
    {"access2_count", access_count<1>},
    {"access3_count", access_count<2>},
    {"access4_count", access_count<3>},
    {"access_untallied",
     [](const DerivedInputs& d) -> std::optional<int64_t> {
       return static_cast<int64_t>(core::untallied(d.c.access, d.c.more.access));
     }},
    {"stride1_stride", stride_value<0>},
    {"stride2_stride", stride_value<1>},
    {"stride3_stride", stride_value<2>},
    {"stride4_stride", stride_value<3>},
    {"stride1_count", stride_count<0>},
    {"stride2_count", stride_count<1>},
    {"stride3_count", stride_count<2>},
    {"stride4_count", stride_count<3>},
    {"stride_untallied",
     [](const DerivedInputs& d) -> std::optional<int64_t> {
       return static_cast<int64_t>(core::untallied(d.c.stride, d.c.more.stride));
     }},
    {"file_alignment", [](const DerivedInputs& d) { return d.alignment; }},
    {"file_not_aligned", [](const DerivedInputs& d) { return d.not_aligned; }},
}};

void add_derived(json& counters, const core::FileCounters& c,
                 const std::optional<int64_t>& alignment) {
  const DerivedInputs d = derived_inputs(c, alignment);
  for (const auto& m : kDerived) counters[std::string(m.name)] = optional_json(m.value(d));
}

json ratio_json(double r) { return r < 0 ? json(nullptr) : json(r); }

/// How the record's bytes were read (core::read_coverage): the "coverage" per file.
json coverage_json(const core::FileCounters& c) {
  const core::ReadCoverage r = core::read_coverage(c);
  return {{"syscall_read_bytes", r.syscall_bytes},
          {"uring_read_bytes", r.uring_bytes},
          {"direct_read_bytes", r.direct_bytes},
          {"fault_bytes", r.fault_bytes},
          {"cache_hit_ratio", ratio_json(r.cache_hit_ratio)},
          {"fault_hit_ratio", ratio_json(r.fault_hit_ratio)}};
}

json process_counters_json(const core::ProcessSnapshot& p) {
  json j = json::object();
  for (const auto& f : core::counter_fields()) {
    if (f.fold != core::Fold::Sum) continue;
    j[std::string(f.name)] = core::counter_value(p.totals, f);
  }
  j["files"] = p.files;
  return j;
}

}  // namespace

void put_string(json& obj, const std::string& key, const std::string& value) {
  obj[key] = value;
  if (!is_valid_utf8(value)) obj[key + "_hex"] = to_hex(value);
}

bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return false;
    i += len;
  }
  return true;
}

json run_coverage_json(const core::RunSnapshot& run) {
  core::FileCounters all{};
  for (const auto& p : run.processes) core::add_totals(all, p.totals);
  return coverage_json(all);
}

namespace {

json process_json(const core::ProcessSnapshot& p) {
  json pj;
  pj["pid"] = p.pid;
  pj["ppid"] = p.ppid;
  pj["start_ns"] = p.start_ns;
  pj["end_ns"] = p.end_ns ? json(*p.end_ns) : json(nullptr);
  put_string(pj, "comm", p.comm);
  put_string(pj, "exe", p.exe);
  pj["exit_code"] = p.exit_code ? json(*p.exit_code) : json(nullptr);
  pj["counters"] = process_counters_json(p);
  json other = json::object();
  for (const auto& [kind, o] : p.other_io)
    other[kind] = {{"reads", o.reads},
                   {"writes", o.writes},
                   {"bytes_read", o.bytes_read},
                   {"bytes_written", o.bytes_written}};
  pj["other_io"] = other;
  pj["unlinks"] = p.unlinks;
  pj["renames"] = p.renames;
  if (p.folded_files > 0 && p.folded) {
    // The process's "other files" record: its file records folded to bound memory.
    json c = counters_json(*p.folded);
    c["rename_sources"] = p.folded_rename_sources;
    c["unlinks"] = p.folded_unlinks;
    pj["folded"] = {{"files", p.folded_files}, {"counters", std::move(c)}};
  }
  if (p.folded_processes > 0) pj["folded_processes"] = p.folded_processes;
  return pj;
}

json file_json(const core::FileSnapshot& f) {
  json fj;
  put_string(fj, "path", f.path);
  if (!f.path_known) fj["path_unknown"] = true;
  if (f.path_incomplete) fj["path_incomplete"] = true;
  fj["dev"] = f.dev;
  fj["ino"] = f.ino;
  fj["pid"] = f.pid;
  fj["proc_start_ns"] = f.proc_start_ns;
  if (!f.renamed_to.empty()) put_string(fj, "renamed_to", f.renamed_to);
  json c = counters_json(f.counters);
  c["rename_sources"] = f.rename_sources;
  c["unlinks"] = f.unlinks;
  add_derived(c, f.counters, f.file_alignment);
  fj["counters"] = std::move(c);
  fj["coverage"] = coverage_json(f.counters);
  return fj;
}

json share_json(const core::ProcessShare& s) {
  return {{"pid", s.pid}, {"proc_start_ns", s.proc_start_ns}, {"bytes", s.bytes},
          {"time_ns", s.time_ns}};
}

json by_file_json(const core::FileAcrossProcesses& f) {
  json fj;
  put_string(fj, "path", f.file->path);
  if (!f.file->path_known) fj["path_unknown"] = true;
  if (f.file->path_incomplete) fj["path_incomplete"] = true;
  fj["dev"] = f.file->dev;
  fj["ino"] = f.file->ino;
  fj["processes"] = f.processes;
  json c = counters_json(f.counters);
  c["rename_sources"] = f.rename_sources;
  c["unlinks"] = f.unlinks;
  add_derived(c, f.counters, f.file->file_alignment);
  fj["counters"] = std::move(c);
  fj["coverage"] = coverage_json(f.counters);
  fj["fastest"] = share_json(f.fastest);
  fj["slowest"] = share_json(f.slowest);
  fj["variance_time_s2"] = f.variance_time_s2;
  fj["variance_bytes"] = f.variance_bytes;
  if (f.folded) fj["folded"] = true;
  return fj;
}

/// Every member of the record but its processes and files (the large ones).
json run_head_json(const core::RunSnapshot& run, const std::string& version) {
  json j;
  j["schema"] = kRunSchema;
  j["version"] = version;
  j["command"] = json::array();
  for (const auto& a : run.command) j["command"].push_back(a);
  j["exit_code"] = run.exit_code ? json(*run.exit_code) : json(nullptr);
  j["start_ns"] = run.start_ns;
  j["end_ns"] = run.end_ns;
  j["coverage"] = run_coverage_json(run);
  j["not_attached"] = run.not_attached;
  j["timing"] = run.timing;
  if (!run.timing_note.empty()) put_string(j, "timing_note", run.timing_note);
  if (!run.not_recorded.empty()) j["not_recorded"] = run.not_recorded;
  if (!run.collector.empty()) {
    json c = {{"path", run.collector}};
    if (run.collector == "iolensd") c["job"] = run.collector_note;
    else if (!run.collector_note.empty()) put_string(c, "daemon", run.collector_note);
    if (run.collector == "local")
      c["file_records"] = {{"preallocated", run.kernel_records.preallocated},
                           {"made", run.kernel_records.made},
                           {"spilled", run.kernel_records.spilled}};
    j["collector"] = std::move(c);
  }
  j["lost"] = run.lost;
  j["folded_records"] = run.folded_records;

  json block = json::array();
  for (const auto& d : run.block) {
    json counters = json::object();
    for (const auto& [name, value] : core::block_counter_values(d.counters)) counters[name] = value;
    block.push_back({{"device", d.name}, {"dev", d.dev}, {"counters", std::move(counters)}});
  }
  j["block"] = std::move(block);
  return j;
}

/// `text` (a value dumped at indent level 0) as it is dumped `level` levels deep: every line
/// after the first indented by `level` more spaces. A dumped string never holds a raw newline.
void append_indented(std::string& out, const std::string& text, std::size_t level) {
  for (char c : text) {
    out += c;
    if (c == '\n') out.append(level, ' ');
  }
}

// ---- one file of the record, written directly ----

void append_int(std::string& out, int64_t v) {
  char b[24];
  out.append(b, static_cast<std::size_t>(std::to_chars(b, b + sizeof b, v).ptr - b));
}

void append_uint(std::string& out, uint64_t v) {
  char b[24];
  out.append(b, static_cast<std::size_t>(std::to_chars(b, b + sizeof b, v).ptr - b));
}

/// A scalar as nlohmann dumps it (its string escapes, its shortest round-trip doubles).
void append_scalar(std::string& out, const json& v) {
  out += v.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// `"key": ` at `spaces` of indentation, after the separator from the previous member.
void append_key(std::string& out, bool& first, std::size_t spaces, std::string_view key) {
  out += first ? "\n" : ",\n";
  first = false;
  out.append(spaces, ' ');
  out += '"';
  out += key;  // the keys written here are plain ASCII names: nothing to escape
  out += "\": ";
}

/// A string member and, when the bytes are not UTF-8, its `_hex` twin (put_string's pair).
void append_string_member(std::string& out, bool& first, std::size_t spaces,
                          std::string_view key, const std::string& value) {
  append_key(out, first, spaces, key);
  append_scalar(out, json(value));
  if (!is_valid_utf8(value)) {
    append_key(out, first, spaces, std::string(key) + "_hex");
    append_scalar(out, json(to_hex(value)));
  }
}

/// The exported counters in nlohmann's key order (sorted), rename_sources, unlinks and the
/// derived members among them (file_json adds those to counters_json's object): index into
/// counter_fields(), or -1 for rename_sources, -2 for unlinks, -3 - i for kDerived[i].
const std::vector<std::pair<std::string_view, int>>& sorted_file_counter_keys() {
  static const std::vector<std::pair<std::string_view, int>> keys = [] {
    std::vector<std::pair<std::string_view, int>> k;
    const auto fields = core::counter_fields();
    for (std::size_t i = 0; i < fields.size(); ++i)
      k.emplace_back(fields[i].name, static_cast<int>(i));
    k.emplace_back("rename_sources", -1);
    k.emplace_back("unlinks", -2);
    for (std::size_t i = 0; i < kDerived.size(); ++i)
      k.emplace_back(kDerived[i].name, -3 - static_cast<int>(i));
    std::sort(k.begin(), k.end());
    return k;
  }();
  return keys;
}

/// One file of the record, the text write_run_json streams: dump(file_json(f)) at indent 1,
/// re-indented 2 deeper. Written directly: building the ~130-member DOM of a file and dumping
/// it cost ~30 us per file, most of the end of a run with --json (bench/README.md "The run's
/// JSON record"). The unit tests compare it with the DOM's text byte for byte.
/// A row's "counters" and "coverage" members (the first two of both kinds of rows).
void append_counters_and_coverage(std::string& out, bool& first, const core::FileCounters& c,
                                  uint64_t rename_sources, uint64_t unlinks,
                                  const std::optional<int64_t>& file_alignment) {
  append_key(out, first, 3, "counters");
  out += '{';
  bool first_counter = true;
  const auto fields = core::counter_fields();
  const DerivedInputs derived = derived_inputs(c, file_alignment);
  for (const auto& [name, index] : sorted_file_counter_keys()) {
    append_key(out, first_counter, 4, name);
    if (index == -1) {
      append_uint(out, rename_sources);
    } else if (index == -2) {
      append_uint(out, unlinks);
    } else if (index < 0) {
      const std::optional<int64_t> v = kDerived[static_cast<std::size_t>(-3 - index)].value(derived);
      if (v)
        append_int(out, *v);
      else
        out += "null";
    } else {
      append_int(out, core::counter_value(c, fields[static_cast<std::size_t>(index)]));
    }
  }
  out += "\n   }";
  // six members with two doubles: coverage_json's own text (a small DOM) keeps one definition
  append_key(out, first, 3, "coverage");
  append_indented(out, coverage_json(c).dump(1, ' ', false, json::error_handler_t::replace), 3);
}

/// path(_hex), path_incomplete, path_unknown: consecutive in key order in both kinds of rows.
void append_path_members(std::string& out, bool& first, const core::FileSnapshot& f) {
  append_string_member(out, first, 3, "path", f.path);
  if (f.path_incomplete) {
    append_key(out, first, 3, "path_incomplete");
    out += "true";
  }
  if (!f.path_known) {
    append_key(out, first, 3, "path_unknown");
    out += "true";
  }
}

void append_file_json(std::string& out, const core::FileSnapshot& f) {
  // members in key order: counters, coverage, dev, ino, path(_hex), path_incomplete,
  // path_unknown, pid, proc_start_ns, renamed_to(_hex)
  bool first = true;
  out += '{';
  append_counters_and_coverage(out, first, f.counters, f.rename_sources, f.unlinks,
                               f.file_alignment);
  append_key(out, first, 3, "dev");
  append_uint(out, f.dev);
  append_key(out, first, 3, "ino");
  append_uint(out, f.ino);
  append_path_members(out, first, f);
  append_key(out, first, 3, "pid");
  append_uint(out, f.pid);
  append_key(out, first, 3, "proc_start_ns");
  append_int(out, f.proc_start_ns);
  if (!f.renamed_to.empty()) append_string_member(out, first, 3, "renamed_to", f.renamed_to);
  out += "\n  }";
}

void append_share(std::string& out, bool& first, std::string_view key,
                  const core::ProcessShare& share) {
  append_key(out, first, 3, key);
  out += '{';
  bool first_member = true;
  append_key(out, first_member, 4, "bytes");
  append_uint(out, share.bytes);
  append_key(out, first_member, 4, "pid");
  append_uint(out, share.pid);
  append_key(out, first_member, 4, "proc_start_ns");
  append_int(out, share.proc_start_ns);
  append_key(out, first_member, 4, "time_ns");
  append_uint(out, share.time_ns);
  out += "\n   }";
}

/// One row of `by_file`, as write_run_json streams it: dump(by_file_json(f)) at indent 1,
/// re-indented 2 deeper, written directly as append_file_json is (the unit tests compare them).
void append_by_file_json(std::string& out, const core::FileAcrossProcesses& f) {
  // members in key order: counters, coverage, dev, fastest, folded, ino, path(_hex),
  // path_incomplete, path_unknown, processes, slowest, variance_bytes, variance_time_s2
  bool first = true;
  out += '{';
  append_counters_and_coverage(out, first, f.counters, f.rename_sources, f.unlinks,
                               f.file->file_alignment);
  append_key(out, first, 3, "dev");
  append_uint(out, f.file->dev);
  append_share(out, first, "fastest", f.fastest);
  if (f.folded) {
    append_key(out, first, 3, "folded");
    out += "true";
  }
  append_key(out, first, 3, "ino");
  append_uint(out, f.file->ino);
  append_path_members(out, first, *f.file);
  append_key(out, first, 3, "processes");
  append_uint(out, f.processes);
  append_share(out, first, "slowest", f.slowest);
  append_key(out, first, 3, "variance_bytes");
  append_scalar(out, json(f.variance_bytes));
  append_key(out, first, 3, "variance_time_s2");
  append_scalar(out, json(f.variance_time_s2));
  out += "\n  }";
}


}  // namespace

json by_file_json(const core::FilesAcrossProcesses& by_file, std::size_t offset,
                  std::size_t limit) {
  json rows = json::array();
  for (std::size_t i = offset; i < by_file.size() && i - offset < limit; ++i)
    rows.push_back(by_file_json(by_file.at(i)));
  return rows;
}

json run_page_json(const core::RunSnapshot& run, const core::FilesAcrossProcesses& by_file,
                   const std::string& version, std::size_t offset, std::size_t limit,
                   const RecordEdits& edits) {
  json j = run_head_json(run, version);  // its coverage from every process, as the record's
  if (edits.head) edits.head(j);
  const auto rows = [&](const auto& all, const auto& to_json) {
    json out = json::array();
    for (std::size_t i = offset; i < all.size() && i - offset < limit; ++i)
      out.push_back(to_json(all[i]));
    return out;
  };
  j["processes"] = rows(run.processes, [&](const core::ProcessSnapshot& p) {
    json pj = process_json(p);
    if (edits.process) edits.process(pj);
    return pj;
  });
  j["files"] = rows(run.files, file_json);
  j["by_file"] = by_file_json(by_file, offset, limit);
  return j;
}

json run_to_json(const core::RunSnapshot& run, const std::string& version) {
  // One page holding every row.
  const core::FilesAcrossProcesses by_file(run);
  return run_page_json(run, by_file, version, 0, std::numeric_limits<std::size_t>::max(), {});
}

bool write_run_json(const core::RunSnapshot& run, const std::string& version,
                    const std::function<bool(std::string_view)>& write,
                    const RecordEdits& edits) {
  // dump_json's text (indent 1, members in key order: nlohmann's objects are sorted maps), with
  // processes and files made and written one at a time.
  std::string buf;
  const auto flush = [&](std::size_t above) {
    if (buf.size() <= above) return true;
    const bool ok = write(buf);
    buf.clear();
    return ok;
  };
  const auto dump = [](const json& v) {
    return v.dump(1, ' ', false, json::error_handler_t::replace);
  };
  json members = run_head_json(run, version);
  if (edits.head) edits.head(members);
  members["processes"] = nullptr;  // placeholders: their place in the key order
  members["files"] = nullptr;
  members["by_file"] = nullptr;
  buf += "{\n";
  bool first = true;
  for (const auto& [key, value] : members.items()) {
    buf += first ? " " : ",\n ";
    first = false;
    buf += dump(json(key)) + ": ";
    const auto stream = [&](const auto& elements, const auto& to_json) {
      if (elements.empty()) {
        buf += "[]";
        return true;
      }
      buf += "[\n";
      bool first_elem = true;
      for (const auto& e : elements) {
        buf += first_elem ? "  " : ",\n  ";
        first_elem = false;
        append_indented(buf, dump(to_json(e)), 2);
        if (!flush(64 * 1024)) return false;
      }
      buf += "\n ]";
      return true;
    };
    if (key == "processes") {
      const auto edited = [&](const core::ProcessSnapshot& p) {
        json j = process_json(p);
        if (edits.process) edits.process(j);
        return j;
      };
      if (!stream(run.processes, edited)) return false;
    } else if (key == "by_file") {
      const core::FilesAcrossProcesses by_file(run);
      if (by_file.size() == 0) {
        buf += "[]";
        continue;
      }
      buf += "[\n";
      for (std::size_t i = 0; i < by_file.size(); ++i) {
        buf += i == 0 ? "  " : ",\n  ";
        append_by_file_json(buf, by_file.at(i));
        if (!flush(64 * 1024)) return false;
      }
      buf += "\n ]";
    } else if (key == "files") {
      if (run.files.empty()) {
        buf += "[]";
        continue;
      }
      buf += "[\n";
      bool first_file = true;
      for (const auto& f : run.files) {
        buf += first_file ? "  " : ",\n  ";
        first_file = false;
        append_file_json(buf, f);
        if (!flush(64 * 1024)) return false;
      }
      buf += "\n ]";
    } else {
      append_indented(buf, dump(value), 1);
    }
  }
  buf += "\n}\n";
  return flush(0);
}

std::string dump_json(const json& j) {
  return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string dump_json_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace iolens::exporters
