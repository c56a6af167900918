// SPDX-License-Identifier: Apache-2.0
// The trace converters to Chrome/Perfetto trace-event JSON and to JSON lines, on a synthetic
// trace (trace_sample.hpp): the trace event format's required keys per phase, timestamps and
// durations against the ops, per-track order, metadata, counters against the ops' bytes, the
// clock base, hostile names, and an exact round trip of every op through JSON lines.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "exporters/trace_common.hpp"
#include "exporters/trace_jsonl.hpp"
#include "exporters/trace_perfetto.hpp"
#include "trace_sample.hpp"

using namespace iolens;
using namespace iolens::testing;
using nlohmann::json;

namespace {

/// The document, parsed: json::parse throws on anything that is not JSON, invalid UTF-8 included.
json perfetto(const trace::Trace& t, const exporters::PerfettoOptions& o = {}) {
  std::ostringstream out;
  exporters::write_perfetto_json(t, out, o);
  return json::parse(out.str());
}

std::vector<json> jsonl(const trace::Trace& t) {
  std::ostringstream out;
  exporters::write_jsonl(t, out);
  std::vector<json> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

/// A "ts"/"dur" in µs back to ns (the writer prints exactly three decimals).
int64_t ns_of(const json& us) { return std::llround(us.get<double>() * 1000.0); }

/// Where an op starts on the Perfetto time axis: wall clock minus the base, in ns.
int64_t axis_ns(uint64_t mono, int64_t base = kKinetoBase) {
  return static_cast<int64_t>(mono) + kMonoToWall - base;
}

std::vector<json> events(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

/// The first complete event of thread `tid` starting at `start`; null if none.
json find_x(const json& doc, uint32_t tid, uint64_t start) {
  for (const json& e : events(doc, "X"))
    if (e["tid"] == tid && ns_of(e["ts"]) == axis_ns(start)) return e;
  return nullptr;
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

}  // namespace

TEST(TracePerfetto, KinetoBaseIsTheWallClockFlooredToThreeMonths) {
  const int64_t p = exporters::kKinetoBasePeriodNs;
  EXPECT_EQ(p, 7'889'238'000'000'000LL);
  EXPECT_EQ(exporters::kineto_base_time_ns(kKinetoBase), kKinetoBase);
  EXPECT_EQ(exporters::kineto_base_time_ns(kKinetoBase + p - 1), kKinetoBase);
  EXPECT_EQ(exporters::kineto_base_time_ns(kKinetoBase - 1), kKinetoBase - p);
  EXPECT_EQ(exporters::kineto_base_time_ns(0), 0);
  EXPECT_EQ(exporters::kineto_base_time_ns(-1), -p);
  // Any clock, however wrong, gives a value (no overflow: the sanitizer build checks).
  (void)exporters::kineto_base_time_ns(INT64_MIN);
  EXPECT_EQ(exporters::kineto_base_time_ns(INT64_MAX) % p, 0);
}

TEST(TracePerfetto, EveryEventHasTheKeysOfItsPhase) {
  const json doc = perfetto(sample_trace());
  ASSERT_TRUE(doc["traceEvents"].is_array());
  EXPECT_EQ(doc["displayTimeUnit"], "ns");
  EXPECT_EQ(doc["baseTimeNanoseconds"], kKinetoBase);
  std::map<std::string, int> phases;
  for (const json& e : doc["traceEvents"]) {
    for (const char* k : {"ph", "name", "pid"}) ASSERT_TRUE(e.contains(k)) << k << " in " << e;
    const std::string ph = e["ph"];
    ++phases[ph];
    if (ph == "X") {
      for (const char* k : {"ts", "dur", "tid", "cat", "args"}) ASSERT_TRUE(e.contains(k)) << e;
      EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_EQ(e["cat"], "io");
    } else if (ph == "C") {
      ASSERT_TRUE(e.contains("ts") && e.contains("args")) << e;
      for (const auto& [k, v] : e["args"].items()) EXPECT_TRUE(v.is_number()) << k;
    } else if (ph == "M") {
      ASSERT_TRUE(e.contains("tid") && e["args"].is_object()) << e;
      const std::set<std::string> known = {"process_name", "process_labels", "process_sort_index",
                                           "thread_name"};
      EXPECT_TRUE(known.count(e["name"].get<std::string>())) << e;
    } else if (ph == "i") {
      ASSERT_TRUE(e.contains("ts") && e.contains("s")) << e;
      EXPECT_EQ(e["s"], "g");
    } else {
      ADD_FAILURE() << "unexpected phase " << e;
    }
  }
  EXPECT_EQ(phases["X"], static_cast<int>(sample_trace().ops.size()));
  EXPECT_GT(phases["C"], 0);
  EXPECT_GT(phases["M"], 0);
}

TEST(TracePerfetto, CompleteEventsAreTheOps) {
  const trace::Trace t = sample_trace();
  const json doc = perfetto(t);
  using Key = std::tuple<std::string, uint32_t, uint32_t, int64_t, int64_t, int64_t, int64_t>;
  std::multiset<Key> want, got;
  for (const auto& r : t.ops)
    want.emplace(exporters::trace_op_name(r.op), r.tgid, r.tid, axis_ns(r.start_ns),
                 static_cast<int64_t>(r.end_ns - r.start_ns), r.fd, r.ret);
  std::map<std::pair<uint32_t, uint32_t>, int64_t> last_ts;
  for (const json& e : events(doc, "X")) {
    const int64_t ts = ns_of(e["ts"]);
    got.emplace(e["name"], e["pid"], e["tid"], ts, ns_of(e["dur"]), e["args"]["fd"],
                e["args"]["ret"]);
    // Non-decreasing per (pid, tid) track.
    const auto track = std::make_pair(e["pid"].get<uint32_t>(), e["tid"].get<uint32_t>());
    if (auto it = last_ts.find(track); it != last_ts.end()) {
      EXPECT_GE(ts, it->second) << e;
    }
    last_ts[track] = ts;
  }
  EXPECT_EQ(got, want);

  const json pread = find_x(doc, 105, kW + 80'000);
  ASSERT_FALSE(pread.is_null());
  const json& a = pread["args"];
  EXPECT_EQ(a["path"], "/data/train.bin");
  EXPECT_EQ(a["syscall"], "pread64");
  EXPECT_EQ(a["offset"], 100000);
  EXPECT_EQ(a["size"], 1000);
  EXPECT_EQ(a["requested"], 1000);
  EXPECT_EQ(pread["pid"], kWorker.pid);

  const json eintr = find_x(doc, 101, kW + 130'000);
  ASSERT_FALSE(eintr.is_null());
  EXPECT_EQ(eintr["args"]["errno"], 4);
  EXPECT_EQ(eintr["args"]["error"], "EINTR");
  EXPECT_FALSE(eintr["args"].contains("size"));
  EXPECT_FALSE(eintr["args"].contains("offset"));  // -1: unknown

  const json failed_open = find_x(doc, 100, kW + 6'200'000);
  ASSERT_FALSE(failed_open.is_null());
  EXPECT_FALSE(failed_open["args"].contains("path"));
  EXPECT_EQ(failed_open["args"]["error"], "ENOENT");
  EXPECT_EQ(failed_open["args"]["flags"], json({"nofile"}));

  const json pipe = find_x(doc, 100, kW + 6'000'000);
  ASSERT_FALSE(pipe.is_null());
  EXPECT_EQ(pipe["args"]["path"], "<pipe>");

  const json stat = find_x(doc, 100, kW + 6'300'000);
  ASSERT_FALSE(stat.is_null());
  EXPECT_EQ(stat["name"], "stat");
  EXPECT_EQ(stat["args"]["path"], "/data/train.bin");  // generation 0: the file's name

  const json mmap = find_x(doc, 101, kW + 160'000);
  ASSERT_FALSE(mmap.is_null());
  EXPECT_FALSE(mmap["args"].contains("errno"));  // an address, not an error

  // A copy's two records start together: both on the main thread's track, read then write.
  std::vector<json> copy;
  for (const json& e : events(doc, "X"))
    if (ns_of(e["ts"]) == axis_ns(kW + 6'100'000)) copy.push_back(e);
  ASSERT_EQ(copy.size(), 2u);
  EXPECT_EQ(copy[0]["name"], "read");
  EXPECT_EQ(copy[0]["args"]["flags"], json({"copy"}));
  EXPECT_EQ(copy[1]["args"]["flags"], json({"other", "copy"}));
  EXPECT_EQ(copy[1]["args"]["path"], "<socket>");
}

TEST(TracePerfetto, MetadataNamesEveryProcessAndThread) {
  const json doc = perfetto(sample_trace());
  std::map<uint32_t, std::string> names, labels;
  std::map<uint32_t, int64_t> sort;
  std::set<std::pair<uint32_t, uint32_t>> threads;
  for (const json& e : events(doc, "M")) {
    const uint32_t pid = e["pid"];
    if (e["name"] == "process_name") names[pid] = e["args"]["name"];
    if (e["name"] == "process_labels") labels[pid] = e["args"]["labels"];
    if (e["name"] == "process_sort_index") sort[pid] = e["args"]["sort_index"];
    if (e["name"] == "thread_name") {
      threads.emplace(pid, e["tid"].get<uint32_t>());
      EXPECT_EQ(e["args"]["name"], names.at(pid));  // processes come first
    }
  }
  EXPECT_EQ(names, (std::map<uint32_t, std::string>{
                       {100, "python3"}, {101, "pt_data_worker"}, {102, "sh"}}));
  EXPECT_EQ(labels, (std::map<uint32_t, std::string>{{100, "/usr/bin/python3.11"},
                                                     {102, "/bin/sh"}}));
  EXPECT_EQ(sort, (std::map<uint32_t, int64_t>{{100, 0}, {101, 1}, {102, 2}}));
  EXPECT_EQ(threads, (std::set<std::pair<uint32_t, uint32_t>>{
                         {100, 100}, {101, 101}, {101, 105}, {102, 102}}));
}

TEST(TracePerfetto, CountersAreTheBytesOfEachBucket) {
  const trace::Trace t = sample_trace();
  exporters::PerfettoOptions o;
  o.counter_interval_ns = 100'000'000;
  const json doc = perfetto(t, o);
  // Expected: bytes of successful reads and writes of regular files, by pid and by the
  // 100 ms bucket (from the window start) of the call's end.
  std::map<std::pair<uint32_t, int64_t>, std::pair<uint64_t, uint64_t>> want;
  for (const auto& r : t.ops) {
    if ((r.op != IOLENS_OP_READ && r.op != IOLENS_OP_WRITE) || r.ret < 0 ||
        (r.flags & IOLENS_TRACE_F_OTHER))
      continue;
    auto& [rd, wr] = want[{r.tgid, static_cast<int64_t>((r.end_ns - kW) / 100'000'000)}];
    (r.op == IOLENS_OP_READ ? rd : wr) += static_cast<uint64_t>(r.ret);
  }
  ASSERT_EQ(want.size(), 3u);  // the worker in buckets 0 and 1, the main process in 0
  EXPECT_EQ(want.at({101, 0}), (std::pair<uint64_t, uint64_t>{9192, 0}));
  EXPECT_EQ(want.at({101, 1}), (std::pair<uint64_t, uint64_t>{65536, 0}));
  EXPECT_EQ(want.at({100, 0}), (std::pair<uint64_t, uint64_t>{8292, 1050577}));

  std::map<std::pair<uint32_t, int64_t>, std::pair<uint64_t, uint64_t>> got;
  for (const json& e : events(doc, "C")) {
    EXPECT_EQ(e["name"], "io bytes per 100 ms");
    const int64_t off = ns_of(e["ts"]) - axis_ns(kW);
    ASSERT_EQ(off % 100'000'000, 0) << e;
    const auto key = std::make_pair(e["pid"].get<uint32_t>(), off / 100'000'000);
    ASSERT_FALSE(got.count(key)) << "two samples for one bucket: " << e;
    got[key] = {e["args"]["read"], e["args"]["write"]};
  }
  for (const auto& [key, bytes] : got) {
    auto it = want.find(key);
    const std::pair<uint64_t, uint64_t> expected =
        it == want.end() ? std::pair<uint64_t, uint64_t>{} : it->second;
    EXPECT_EQ(bytes, expected)
        << key.first << " bucket " << key.second;
  }
  for (const auto& [key, bytes] : want) {
    EXPECT_TRUE(got.count(key)) << key.first << " bucket " << key.second;
    // The step after a busy bucket returns to 0 unless the next bucket is busy too.
    const auto next = std::make_pair(key.first, key.second + 1);
    EXPECT_TRUE(got.count(next)) << "no sample after " << key.first << " " << key.second;
  }

  o.counter_interval_ns = 0;
  EXPECT_TRUE(events(perfetto(t, o), "C").empty());
}

TEST(TracePerfetto, JobWindowAndLossesAreShown) {
  const json doc = perfetto(sample_trace());
  const json& m = doc["otherData"];
  EXPECT_EQ(m["node"], "node1");
  EXPECT_EQ(m["job_id"], "4242");
  EXPECT_EQ(m["job_labels"]["team"], "vision");
  EXPECT_EQ(m["command"], json({"python3", "train.py"}));
  EXPECT_EQ(m["window_start_ns"], kW);
  EXPECT_EQ(m["window_start_wall_ns"], kKinetoBase + 5'000'000'000LL);
  EXPECT_EQ(m["losses"]["ring_full"], 3);
  EXPECT_EQ(m["losses"]["total"], 4);
  EXPECT_EQ(m["losses"]["notes"], json({"1 record failed to decode"}));
  std::map<std::string, int64_t> markers;
  for (const json& e : events(doc, "i")) markers[e["name"]] = ns_of(e["ts"]);
  EXPECT_EQ(markers.at("iolens capture start"), 5'000'000'000);
  EXPECT_EQ(markers.at("iolens: 4 trace records lost"), 5'000'000'000);
  EXPECT_EQ(markers.at("iolens capture end"), 7'000'000'000);

  trace::Trace t = sample_trace();
  t.losses = {};
  t.complete = false;
  t.meta.window_end_ns = 0;  // no trailer: the window ends with the last op
  markers.clear();
  for (const json& e : events(perfetto(t), "i")) markers[e["name"]] = ns_of(e["ts"]);
  EXPECT_EQ(markers.size(), 2u);
  EXPECT_EQ(markers.at("iolens capture end (cut short, no trailer)"),
            axis_ns(kW + 1'000'100'000 + 2'000));
}

TEST(TracePerfetto, TimeBaseCanBeGivenOrTheEpoch) {
  const trace::Trace t = sample_trace();
  exporters::PerfettoOptions o;
  o.base_time_ns = kKinetoBase + 4'000'000'000LL;  // a torch trace's baseTimeNanoseconds
  json doc = perfetto(t, o);
  EXPECT_EQ(doc["baseTimeNanoseconds"], *o.base_time_ns);
  for (const json& e : events(doc, "i")) {
    if (e["name"] == "iolens capture start") {
      EXPECT_EQ(ns_of(e["ts"]), 1'000'000'000);
    }
  }
  o.base_time_ns = 0;  // µs since the epoch: about 1.7e15, exact to a fraction of a µs
  doc = perfetto(t, o);
  EXPECT_EQ(doc["baseTimeNanoseconds"], 0);
  for (const json& e : events(doc, "i")) {
    if (e["name"] == "iolens capture start") {
      EXPECT_NEAR(e["ts"].get<double>(), (kKinetoBase + 5'000'000'000.0) / 1000.0, 1.0);
    }
  }
}

TEST(TraceConvert, HostileNamesGiveValidJson) {
  trace::Trace t = sample_trace();
  const std::string path = std::string("/data/\xff\xfe\"q\\b\n\x01 ") + "\xe2\x82";  // cut UTF-8
  const std::string comm = "py\xc3\x28";
  t.files[0].path = path;
  t.processes[1].comm = comm;
  t.processes[0].exe = "/usr/bin/caf\xc3\xa9";  // valid UTF-8 stays as it is
  t.meta.job_labels["k"] = "\xc0\xaf";         // an overlong "/"
  const json doc = perfetto(t);  // parses: valid JSON and valid UTF-8
  const std::string fffd = "\xef\xbf\xbd";
  const json pread = find_x(doc, 105, kW + 80'000);
  ASSERT_FALSE(pread.is_null());
  const std::string shown = pread["args"]["path"];
  EXPECT_NE(shown.find(fffd), std::string::npos);
  EXPECT_NE(shown.find("\"q\\b\n\x01 "), std::string::npos);  // escaped, then parsed back
  EXPECT_EQ(pread["args"]["path_hex"], hex(path));
  bool named = false;
  for (const json& e : events(doc, "M")) {
    if (e["name"] == "process_name" && e["pid"] == kWorker.pid) {
      named = true;
      EXPECT_EQ(e["args"]["name"], "py" + fffd + "(");
      EXPECT_EQ(e["args"]["name_hex"], hex(comm));
    }
    if (e["name"] == "process_labels" && e["pid"] == kMain.pid) {
      EXPECT_EQ(e["args"]["labels"], "/usr/bin/caf\xc3\xa9");
    }
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(doc["otherData"]["job_labels"]["k_hex"], "c0af");

  const std::vector<json> lines = jsonl(t);  // every line parses
  bool seen = false;
  for (const json& l : lines) {
    if (l["type"] == "file" && l["ino"] == 11) {
      seen = true;
      EXPECT_EQ(l["path_hex"], hex(path));
    }
    if (l["type"] == "process" && l["pid"] == kWorker.pid) {
      EXPECT_EQ(l["comm_hex"], hex(comm));
    }
  }
  EXPECT_TRUE(seen);
}

TEST(TraceJsonl, FirstLineDescribesTheTraceThenProcessesFilesOps) {
  const trace::Trace t = sample_trace();
  const std::vector<json> lines = jsonl(t);
  ASSERT_EQ(lines.size(), 1 + t.processes.size() + t.files.size() + t.ops.size());
  const json& h = lines[0];
  EXPECT_EQ(h["type"], "trace");
  EXPECT_EQ(h["schema"], "iolens.trace-jsonl/1");
  EXPECT_EQ(h["node"], "node1");
  EXPECT_EQ(h["window_start_ns"], kW);
  EXPECT_EQ(h["window_start_wall_ns"], kKinetoBase + 5'000'000'000LL);
  EXPECT_EQ(h["mono_to_wall_ns"], kMonoToWall);
  EXPECT_EQ(h["losses"]["total"], 4);
  EXPECT_EQ(h["complete"], true);
  EXPECT_EQ(h["counts"]["ops"], t.ops.size());
  std::vector<std::string> types;
  for (const json& l : lines) types.push_back(l["type"]);
  EXPECT_TRUE(std::is_sorted(types.begin() + 1, types.end(), [](const auto& a, const auto& b) {
    auto rank = [](const std::string& s) { return s == "process" ? 0 : s == "file" ? 1 : 2; };
    return rank(a) < rank(b);
  }));

  const json& shell = lines[3];
  EXPECT_EQ(shell["pid"], kShell.pid);
  EXPECT_EQ(shell["comm"], "sh");
  EXPECT_TRUE(shell["exit_code"].is_null());  // wait status unknown
  EXPECT_EQ(shell["exit_ns"], kW + 1'500'000'000);
  EXPECT_EQ(lines[2]["exit_code"], 0);
  EXPECT_TRUE(lines[1]["exit_ns"].is_null());  // still running
  EXPECT_EQ(lines[4]["path"], "/data/train.bin");
  EXPECT_EQ(lines[4]["device"], "8:1");

  int64_t last = 0;
  for (std::size_t i = 6; i < lines.size(); ++i) {
    const json& op = lines[i];
    EXPECT_GE(op["ts_ns"].get<int64_t>(), last);
    last = op["ts_ns"];
    EXPECT_EQ(op["ts_wall_ns"].get<int64_t>(), op["ts_ns"].get<int64_t>() + kMonoToWall);
    if (op["op"] == "stat" && op["pid"] == kMain.pid) {
      EXPECT_EQ(op["path"], "/data/train.bin");
      EXPECT_EQ(op["gen"], 0);
    }
    if (op["op"] == "open" && op["ret"] == -2) {
      EXPECT_FALSE(op.contains("path"));
      EXPECT_EQ(op["error"], "ENOENT");
    }
    if (op["op"] == "read" && op["syscall"] == "pread64" && op["pid"] == kWorker.pid) {
      EXPECT_EQ(op["size"], 1000);
      EXPECT_EQ(op["requested"], 1000);
      EXPECT_EQ(op["tid"], 105);
    }
  }
}

TEST(TraceJsonl, EveryOpRoundTripsExactly) {
  const trace::Trace t = sample_trace();
  std::vector<iolens_trace_record> want;
  const exporters::TraceIndex idx(t);
  for (std::size_t i : idx.by_start()) want.push_back(t.ops[i]);
  std::vector<iolens_trace_record> got;
  for (const json& l : jsonl(t)) {
    if (l["type"] != "op") continue;
    iolens_trace_record r{};
    r.start_ns = l["ts_ns"];
    r.end_ns = r.start_ns + static_cast<uint64_t>(l["dur_ns"].get<int64_t>());
    r.pstart_ns = l["pstart_ns"];
    r.ino = l["ino"];
    r.dev = l["dev"];
    r.gen = l["gen"];
    r.offset = l["offset"];
    r.ret = l["ret"];
    r.arg = l["arg"];
    r.tgid = l["pid"];
    r.tid = l["tid"];
    for (uint16_t k = 1; k < IOLENS_NR_OPS; ++k)
      if (exporters::trace_op_name(k) == l["op"]) r.op = k;
    r.nr = l["nr"];
    r.flags = l["flags"];
    r.fd = l["fd"];
    got.push_back(r);
  }
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(iolens_trace_record)), 0) << "op " << i;
}

TEST(TraceConvert, GarbageRecordsDoNotBreakTheConverters) {
  // Records a damaged or hostile file could hold: unknown kinds and syscalls, end before start,
  // a start of 0, extreme offsets and returns, processes and files nobody named, a clock base
  // that wraps. Every converter still writes valid JSON (and, under the sanitizers, no UB).
  const trace::Trace t = garbage_trace();
  const json doc = perfetto(t);
  EXPECT_EQ(events(doc, "X").size(), t.ops.size());
  bool unknown = false;
  for (const json& e : events(doc, "X")) {
    if (e["name"] == "op99") {
      unknown = true;
      EXPECT_EQ(e["args"]["syscall"], 999);
      EXPECT_EQ(e["args"]["flags"], json({"0xf0"}));
      EXPECT_EQ(e["args"]["path"], "<unknown 0:7:8>");
    }
  }
  EXPECT_TRUE(unknown);
  EXPECT_EQ(jsonl(t).size(), 1 + t.processes.size() + t.files.size() + t.ops.size());
}
