// SPDX-License-Identifier: Apache-2.0
#include "exporters/trace_perfetto.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "exporters/json_report.hpp"
#include "exporters/trace_common.hpp"

namespace iolens::exporters {
namespace {

using nlohmann::json;

/// ns as microseconds with exactly three decimals, as Kineto writes them ("1234.567"): exact,
/// where a double would lose the nanoseconds of large values.
std::string micros(int64_t ns) {
  const uint64_t a = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%llu.%03u", ns < 0 ? "-" : "",
                static_cast<unsigned long long>(a / 1000), static_cast<unsigned>(a % 1000));
  return buf;
}

/// "100 ms", "250 us", "10 ns": the counter bucket width in its largest whole unit.
std::string interval_label(uint64_t ns) {
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + " s";
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + " ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + " us";
  return std::to_string(ns) + " ns";
}

/// The elements of "traceEvents", one a line.
class EventWriter {
 public:
  explicit EventWriter(std::ostream& out) : out_(out) {}
  /// Writes an event already serialized.
  void write_text(const std::string& ev) {
    out_ << (first_ ? "\n" : ",\n") << ev;
    first_ = false;
  }
  /// Writes `ev` with "ts" and "dur" added as exact decimal microseconds.
  void write(const json& ev, std::optional<int64_t> ts_ns = std::nullopt,
             std::optional<int64_t> dur_ns = std::nullopt) {
    std::string s = dump_json_line(ev);
    s.pop_back();  // the closing brace: every event has other keys before these
    if (ts_ns) s += ",\"ts\":" + micros(*ts_ns);
    if (dur_ns) s += ",\"dur\":" + micros(*dur_ns);
    s += '}';
    write_text(s);
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

json other_data(const trace::Trace& t, const TraceIndex& idx, int64_t base,
                const PerfettoOptions& opts) {
  json j = trace_meta_json(t);
  j["window_start_ns"] = idx.window_start_ns();
  j["window_end_ns"] = idx.window_end_ns();
  j["window_start_wall_ns"] = trace_wall_ns(t.meta, idx.window_start_ns());
  j["window_end_wall_ns"] = trace_wall_ns(t.meta, idx.window_end_ns());
  j["ops"] = t.ops.size();
  j["clock"] = "ts = (CLOCK_REALTIME ns - baseTimeNanoseconds) / 1000";
  j["base_time_ns"] = base;
  j["counter_interval_ns"] = opts.counter_interval_ns;
  return j;
}

/// What a process track is called: its comm, else its executable's base name, else "pid N".
std::string process_title(const trace::Process* p, uint32_t pid) {
  if (p && !p->comm.empty()) return p->comm;
  if (p && !p->exe.empty()) return p->exe.substr(p->exe.rfind('/') + 1);
  return "pid " + std::to_string(pid);
}

/// One op's complete event, written by hand (see append_field): a trace has millions.
std::string op_event(const TraceIndex& idx, const iolens_trace_record& r, int64_t ts_ns,
                     int64_t dur_ns) {
  std::string e = "{\"name\":\"";
  e += trace_op_name(r.op);  // letters and digits
  e += "\",\"ph\":\"X\",\"cat\":\"io\"";
  append_field(e, "pid", r.tgid);
  append_field(e, "tid", r.tid);
  e += ",\"ts\":" + micros(ts_ns) + ",\"dur\":" + micros(dur_ns) + ",\"args\":{";
  std::string a;  // the args' fields, each after a comma
  append_syscall_field(a, r);
  a += idx.path_fields(r, false);
  append_field(a, "fd", r.fd);
  const bool ok = trace_op_succeeded(r);
  if (r.op == IOLENS_OP_READ || r.op == IOLENS_OP_WRITE) {
    if (r.offset >= 0) append_field(a, "offset", r.offset);
    if (r.arg >= 0) append_field(a, "requested", r.arg);
    if (ok) append_field(a, "size", r.ret);
  } else if (r.op == IOLENS_OP_SEEK) {
    if (r.offset >= 0) append_field(a, "offset", r.offset);
    append_field(a, "whence", r.arg);
  }
  append_field(a, "ret", r.ret);
  append_errno_fields(a, r);
  append_flag_names_field(a, r);
  e.append(a, 1);  // without the first comma
  e += "}}";
  return e;
}

}  // namespace

int64_t kineto_base_time_ns(int64_t wall_ns) {
  // wall_ns minus its non-negative remainder; modular, so that no clock, however wrong, overflows.
  const int64_t rem = (wall_ns % kKinetoBasePeriodNs + kKinetoBasePeriodNs) % kKinetoBasePeriodNs;
  return static_cast<int64_t>(static_cast<uint64_t>(wall_ns) - static_cast<uint64_t>(rem));
}

void write_perfetto_json(const trace::Trace& t, std::ostream& out, const PerfettoOptions& opts) {
  const TraceIndex idx(t);
  auto wall = [&](uint64_t mono) { return trace_wall_ns(t.meta, mono); };
  const int64_t base =
      opts.base_time_ns ? *opts.base_time_ns : kineto_base_time_ns(wall(idx.window_start_ns()));
  // Modular: no intermediate sum can overflow a signed value.
  auto ts = [&](uint64_t mono) {
    return static_cast<int64_t>(static_cast<uint64_t>(wall(mono)) - static_cast<uint64_t>(base));
  };

  out << "{\"displayTimeUnit\":\"ns\",\"baseTimeNanoseconds\":" << base
      << ",\"otherData\":" << dump_json_line(other_data(t, idx, base, opts))
      << ",\"traceEvents\":[";
  EventWriter w(out);

  // Process tracks: every pid of the process list or of an op. A reused pid is one track, named
  // after its last process; sort index = order of first start.
  std::vector<const trace::Process*> by_start;
  for (const auto& p : t.processes) by_start.push_back(&p);
  std::stable_sort(by_start.begin(), by_start.end(), [](const auto* a, const auto* b) {
    return std::tie(a->pstart_ns, a->pid) < std::tie(b->pstart_ns, b->pid);
  });
  std::map<uint32_t, const trace::Process*> named;  // pid -> the process that names its track
  std::map<uint32_t, int64_t> sort_index;
  for (const auto* p : by_start) {
    named[p->pid] = p;
    sort_index.try_emplace(p->pid, static_cast<int64_t>(sort_index.size()));
  }
  std::set<std::pair<uint32_t, uint32_t>> threads;
  for (const auto& r : t.ops) {
    named.try_emplace(r.tgid, nullptr);
    sort_index.try_emplace(r.tgid, static_cast<int64_t>(sort_index.size()));
    threads.emplace(r.tgid, r.tid);
  }
  for (const auto& [pid, p] : named) {
    const std::string title = process_title(p, pid);
    json name_args;
    put_string(name_args, "name", title);
    w.write({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", name_args}});
    if (p && !p->exe.empty()) {
      json label_args;
      put_string(label_args, "labels", p->exe);
      w.write({{"name", "process_labels"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
               {"args", label_args}});
    }
    w.write({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
             {"args", {{"sort_index", sort_index.at(pid)}}}});
  }
  for (const auto& [pid, tid] : threads) {
    // The trace names processes, not threads: a thread shows its process's name and its tid.
    json args;
    put_string(args, "name", process_title(named.at(pid), pid));
    w.write({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", args}});
  }

  // The capture window and what it lost, as global instants (a vertical line across tracks).
  auto marker = [&](const std::string& name, uint64_t mono, json args) {
    w.write({{"name", name}, {"ph", "i"}, {"s", "g"}, {"cat", "iolens"}, {"pid", 0}, {"tid", 0},
             {"args", std::move(args)}},
            ts(mono));
  };
  marker("iolens capture start", idx.window_start_ns(), {{"target", t.meta.target}});
  if (const uint64_t lost = trace_lost_total(t.losses))
    marker("iolens: " + std::to_string(lost) + " trace records lost", idx.window_start_ns(),
           trace_losses_json(t.losses));
  marker(t.complete ? "iolens capture end" : "iolens capture end (cut short, no trailer)",
         idx.window_end_ns(), {{"complete", t.complete}});

  // One complete event per op, in start order; at equal starts the longer first, so that a
  // viewer nests them (a copy's two records have the same times).
  std::vector<std::size_t> order(t.ops.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  auto dur_of = [&](const iolens_trace_record& r) {
    return r.end_ns >= r.start_ns ? static_cast<int64_t>(r.end_ns - r.start_ns) : 0;
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = t.ops[a];
    const auto& y = t.ops[b];
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    return dur_of(x) > dur_of(y);
  });
  for (std::size_t i : order) {
    const iolens_trace_record& r = t.ops[i];
    w.write_text(op_event(idx, r, ts(r.start_ns), dur_of(r)));
  }

  // Bytes read and written per process and bucket (by the call's end: when the bytes moved),
  // regular files only. A bucket's value holds until the next sample: an idle bucket after a
  // busy one gets an explicit 0.
  if (opts.counter_interval_ns > 0) {
    const uint64_t width = opts.counter_interval_ns;
    const uint64_t origin = idx.window_start_ns();
    std::map<uint32_t, std::map<uint64_t, std::pair<uint64_t, uint64_t>>> buckets;
    for (const auto& r : t.ops) {
      if ((r.op != IOLENS_OP_READ && r.op != IOLENS_OP_WRITE) || r.ret < 0 ||
          (r.flags & (IOLENS_TRACE_F_OTHER | IOLENS_TRACE_F_NOFILE)))
        continue;
      const uint64_t b = r.end_ns > origin ? (r.end_ns - origin) / width : 0;
      auto& [rd, wr] = buckets[r.tgid][b];
      (r.op == IOLENS_OP_READ ? rd : wr) += static_cast<uint64_t>(r.ret);
    }
    const std::string name = "io bytes per " + interval_label(width);
    for (const auto& [pid, per] : buckets) {
      for (auto it = per.begin(); it != per.end(); ++it) {
        const auto [b, bytes] = *it;
        w.write({{"name", name}, {"ph", "C"}, {"cat", "io"}, {"pid", pid},
                 {"args", {{"read", bytes.first}, {"write", bytes.second}}}},
                ts(origin + b * width));
        const auto next = std::next(it);
        if (next == per.end() || next->first != b + 1)
          w.write({{"name", name}, {"ph", "C"}, {"cat", "io"}, {"pid", pid},
                   {"args", {{"read", 0}, {"write", 0}}}},
                  ts(origin + (b + 1) * width));
      }
    }
  }
  out << "\n]}\n";
}

}  // namespace iolens::exporters
