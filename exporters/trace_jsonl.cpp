// SPDX-License-Identifier: Apache-2.0
#include "exporters/trace_jsonl.hpp"

#include <string>

#include <nlohmann/json.hpp>

#include "core/paths.hpp"
#include "core/recorder.hpp"
#include "exporters/json_report.hpp"
#include "exporters/trace_common.hpp"

namespace iolens::exporters {
namespace {

using nlohmann::json;

void put_line(std::ostream& out, const json& j) { out << dump_json_line(j) << '\n'; }

}  // namespace

void write_jsonl(const trace::Trace& t, std::ostream& out) {
  const TraceIndex idx(t);
  const trace::Meta& m = t.meta;
  auto wall = [&](uint64_t mono) { return trace_wall_ns(m, mono); };

  json head = trace_meta_json(t);
  head["type"] = "trace";
  head["schema"] = kTraceJsonlSchema;
  // As captured: 0 = unknown (start) or not ended (end).
  head["window_start_ns"] = m.window_start_ns;
  head["window_end_ns"] = m.window_end_ns;
  head["window_start_wall_ns"] = m.window_start_ns ? json(wall(m.window_start_ns)) : json(nullptr);
  head["window_end_wall_ns"] = m.window_end_ns ? json(wall(m.window_end_ns)) : json(nullptr);
  head["counts"] = {{"processes", t.processes.size()},
                    {"files", t.files.size()},
                    {"ops", t.ops.size()}};
  put_line(out, head);

  for (const trace::Process& p : t.processes) {
    json j;
    j["type"] = "process";
    j["pid"] = p.pid;
    j["pstart_ns"] = p.pstart_ns;
    j["start_wall_ns"] = wall(p.pstart_ns);
    j["ppid"] = p.ppid;
    j["parent_pstart_ns"] = p.parent_pstart_ns;
    put_string(j, "comm", p.comm);
    put_string(j, "exe", p.exe);
    const bool exited = p.exit_ns >= 0;
    j["exit_ns"] = exited ? json(p.exit_ns) : json(nullptr);
    j["exit_wall_ns"] = exited ? json(wall(static_cast<uint64_t>(p.exit_ns))) : json(nullptr);
    j["wait_status"] = p.exit_code >= 0 ? json(p.exit_code) : json(nullptr);
    j["exit_code"] =
        p.exit_code >= 0 ? json(core::exit_code_of_wait_status(p.exit_code)) : json(nullptr);
    put_line(out, j);
  }

  for (const trace::FileName& f : t.files) {
    json j;
    j["type"] = "file";
    j["dev"] = f.dev;
    j["device"] = std::to_string(core::kernel_dev_major(f.dev)) + ":" +
                  std::to_string(core::kernel_dev_minor(f.dev));
    j["ino"] = f.ino;
    j["gen"] = f.gen;
    put_string(j, "path", f.path);
    j["flags"] = f.flags;
    j["truncated"] = (f.flags & IOLENS_PATH_TRUNCATED) != 0;
    j["unreached"] = (f.flags & IOLENS_PATH_UNREACHED) != 0;
    put_line(out, j);
  }

  // Op lines by hand (see append_field): a trace has millions.
  std::string line;
  for (std::size_t i : idx.by_start()) {
    const iolens_trace_record& r = t.ops[i];
    line = "{\"type\":\"op\"";
    append_field(line, "ts_ns", r.start_ns);
    append_field(line, "ts_wall_ns", wall(r.start_ns));
    append_field(line, "dur_ns", static_cast<int64_t>(r.end_ns - r.start_ns));
    append_field(line, "pid", r.tgid);
    append_field(line, "pstart_ns", r.pstart_ns);
    append_field(line, "tid", r.tid);
    line += ",\"op\":\"" + trace_op_name(r.op) + "\"";
    append_field(line, "nr", r.nr);
    const std::string_view sys = syscall_name(r.nr);
    line += ",\"syscall\":\"";
    line += sys;
    line += '"';
    append_field(line, "fd", r.fd);
    append_field(line, "offset", r.offset);
    append_field(line, "arg", r.arg);
    append_field(line, "ret", r.ret);
    append_field(line, "flags", r.flags);
    append_field(line, "dev", r.dev);
    append_field(line, "ino", r.ino);
    append_field(line, "gen", r.gen);
    line += idx.path_fields(r, true);
    if (r.op == IOLENS_OP_READ || r.op == IOLENS_OP_WRITE) {
      if (trace_op_succeeded(r)) append_field(line, "size", r.ret);
      if (r.arg >= 0) append_field(line, "requested", r.arg);
    }
    append_errno_fields(line, r);
    line += "}\n";
    out << line;
  }
}

}  // namespace iolens::exporters
