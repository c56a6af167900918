// SPDX-License-Identifier: Apache-2.0
// Exporters on a known snapshot: the JSON record's fields and the human summary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/recorder.hpp"
#include "exporters/json_report.hpp"
#include "exporters/text_report.hpp"
#include "exporters/units.hpp"

using namespace iolens;
using nlohmann::json;

namespace {

core::RunSnapshot sample() {
  core::RunSnapshot s;
  s.command = {"python3", "train.py"};
  s.exit_code = 0;
  s.start_ns = 1000;
  s.end_ns = 2'000'001'000;
  core::ProcessSnapshot p;
  p.pid = 10;
  p.ppid = 9;
  p.start_ns = 1100;
  p.end_ns = 1900;
  p.comm = "python3";
  p.exe = "/usr/bin/python3.11";
  p.exit_code = 0;
  p.totals.reads = 3;
  p.totals.bytes_read = 3 * 1048576;
  p.totals.lat_read[6] = 3;
  p.totals.lat_read_sum_ns = 6'000'000;
  p.files = 1;
  p.other_io["pipe"] = {1, 2, 3, 4};
  s.processes.push_back(p);
  core::FileSnapshot f;
  f.path = "/data/x.npy";
  f.dev = 0x801;
  f.ino = 55;
  f.pid = 10;
  f.proc_start_ns = 1100;
  f.counters = core::new_counters();
  f.counters.reads = 3;
  f.counters.bytes_read = 3 * 1048576;
  f.counters.max_byte_read = 3 * 1048576 - 1;
  f.counters.size_read[4] = 3;
  f.counters.lat_read[6] = 3;  // three reads of 1-4 ms
  f.counters.lat_read_sum_ns = 6'000'000;
  s.files.push_back(f);
  s.lost = {{"file_records", 0}, {"events", 2}};
  return s;
}

}  // namespace

TEST(JsonReport, SchemaAndRequiredFields) {
  json j = json::parse(exporters::dump_json(exporters::run_to_json(sample(), "9.9.9")));
  EXPECT_EQ(j["schema"], "iolens.run/1");
  EXPECT_EQ(j["command"], json::array({"python3", "train.py"}));
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["start_ns"], 1000);
  EXPECT_EQ(j["end_ns"], 2'000'001'000);
  const auto& p = j["processes"][0];
  for (const char* k : {"pid", "ppid", "start_ns", "end_ns", "comm", "exe", "counters"})
    EXPECT_TRUE(p.contains(k)) << k;
  EXPECT_EQ(p["counters"]["bytes_read"], 3 * 1048576);
  EXPECT_EQ(p["counters"]["files"], 1);
  EXPECT_EQ(p["other_io"]["pipe"]["bytes_written"], 4);
  const auto& f = j["files"][0];
  for (const char* k : {"path", "dev", "ino", "pid", "counters"}) EXPECT_TRUE(f.contains(k)) << k;
  EXPECT_EQ(f["dev"], 0x801);
  EXPECT_EQ(f["counters"]["size_read_100k_1m"], 3);
  EXPECT_EQ(f["counters"]["lat_read_le_4ms"], 3);
  EXPECT_EQ(f["counters"]["lat_read_le_1ms"], 0);
  EXPECT_EQ(f["counters"]["lat_read_sum_ns"], 6'000'000);
  EXPECT_EQ(p["counters"]["lat_read_le_4ms"], 3);  // summed: in the process counters too
  EXPECT_EQ(p["counters"]["lat_read_sum_ns"], 6'000'000);
  EXPECT_EQ(f["counters"]["max_byte_read"], 3 * 1048576 - 1);
  EXPECT_EQ(f["counters"]["max_byte_written"], 0);  // none: 0, as Darshan prints it
  EXPECT_EQ(j["lost"]["events"], 2);
}

TEST(JsonReport, EveryDocumentedCounterIsPresent) {
  json j = exporters::run_to_json(sample(), "x");
  const auto& c = j["files"][0]["counters"];
  for (const char* k :
       {"opens", "dups", "reads", "writes", "seeks", "stats", "mmaps", "fsyncs", "fdsyncs",
        "bytes_read", "bytes_written", "max_byte_read", "max_byte_written", "seq_reads",
        "consec_reads", "seq_writes", "consec_writes", "rw_switches", "size_read_0_100",
        "size_read_100_1k", "size_read_1k_10k", "size_read_10k_100k", "size_read_100k_1m",
        "size_read_1m_4m", "size_read_4m_10m", "size_read_10m_100m", "size_read_100m_1g",
        "size_read_1g_plus", "size_write_0_100", "size_write_1g_plus", "read_time_ns",
        "write_time_ns", "meta_time_ns", "max_read_time_ns", "max_write_time_ns",
        "open_start_ns", "close_end_ns", "rename_sources", "unlinks", "lat_read_le_1us",
        "lat_read_le_4us", "lat_read_le_16us", "lat_read_le_64us", "lat_read_le_256us",
        "lat_read_le_1ms", "lat_read_le_4ms", "lat_read_le_16ms", "lat_read_le_64ms",
        "lat_read_le_256ms", "lat_read_le_1s", "lat_read_gt_1s", "lat_write_le_1us",
        "lat_write_le_4us", "lat_write_le_16us", "lat_write_le_64us", "lat_write_le_256us",
        "lat_write_le_1ms", "lat_write_le_4ms", "lat_write_le_16ms", "lat_write_le_64ms",
        "lat_write_le_256ms", "lat_write_le_1s", "lat_write_gt_1s", "lat_read_sum_ns",
        "lat_write_sum_ns", "mem_not_aligned", "mode", "file_alignment", "file_not_aligned",
        "access1_access", "access2_access", "access3_access", "access4_access", "access1_count",
        "access2_count", "access3_count", "access4_count", "access_untallied", "stride1_stride",
        "stride2_stride", "stride3_stride", "stride4_stride", "stride1_count", "stride2_count",
        "stride3_count", "stride4_count", "stride_untallied"})
    EXPECT_TRUE(c.contains(k)) << k;
  // The offsets' buckets are not counters of their own: FILE_NOT_ALIGNED comes from them.
  for (const auto& [k, v] : c.items()) EXPECT_EQ(k.find("offset_lsb"), std::string::npos) << k;
  // No mount table given: the alignment is not known.
  EXPECT_TRUE(c["file_alignment"].is_null());
  EXPECT_TRUE(c["file_not_aligned"].is_null());
}

TEST(JsonReport, HostileNamesStayValidJsonWithExactBytes) {
  auto s = sample();
  s.files[0].path = std::string("/d/a\"b\\c\nd\xff\xfe.bin");
  const std::string text = exporters::dump_json(exporters::run_to_json(s, "x"));
  json j = json::parse(text);  // throws if invalid
  const auto& f = j["files"][0];
  EXPECT_EQ(f["path_hex"], "2f642f6122625c630a64fffe2e62696e");
  EXPECT_NE(f["path"].get<std::string>().find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD
  // Valid UTF-8 names get no hex twin.
  s.files[0].path = "/d/\xc3\xa9t\xc3\xa9.bin";
  EXPECT_FALSE(exporters::run_to_json(s, "x")["files"][0].contains("path_hex"));
}

TEST(JsonReport, Utf8Validation) {
  EXPECT_TRUE(exporters::is_valid_utf8("plain"));
  EXPECT_TRUE(exporters::is_valid_utf8("\xe2\x82\xac"));
  EXPECT_FALSE(exporters::is_valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(exporters::is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(exporters::is_valid_utf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(exporters::is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
}

TEST(TextReport, SummaryHasTotalsTopFilesAndLost) {
  const std::string t = exporters::run_summary(sample());
  EXPECT_NE(t.find("python3 train.py"), std::string::npos);
  EXPECT_NE(t.find("exit 0 after 2.00 s"), std::string::npos) << t;
  EXPECT_NE(t.find("read 3.00 MiB in 3 calls"), std::string::npos) << t;
  EXPECT_NE(t.find("/data/x.npy"), std::string::npos);
  EXPECT_NE(t.find("lost: events=2"), std::string::npos) << t;
}

TEST(TextReport, DirectoriesAggregateAcrossProcessesAndFiles) {
  auto s = sample();
  core::FileSnapshot g = s.files[0];
  g.path = "/data/y.npy";
  g.ino = 56;
  g.pid = 11;  // another process, another file, same directory
  g.counters.bytes_read = 1048576;
  g.counters.reads = 1;
  s.files.push_back(g);
  core::FileSnapshot c = s.files[0];
  c.path = "/ckpt/model.pt";
  c.ino = 57;
  c.counters = core::new_counters();
  c.counters.bytes_written = 10;
  c.counters.writes = 1;
  s.files.push_back(c);
  const std::string t = exporters::run_summary(s);
  const auto at = t.find("top 2 directories by bytes");
  ASSERT_NE(at, std::string::npos) << t;
  // /data: 3 MiB + 1 MiB read, 3 + 1 reads, 2 distinct files; listed before /ckpt.
  const auto data = t.find("4.00 MiB        0 B        4        2  /data", at);
  const auto ckpt = t.find("0 B       10 B        1        1  /ckpt", at);
  EXPECT_NE(data, std::string::npos) << t;
  EXPECT_NE(ckpt, std::string::npos) << t;
  EXPECT_LT(data, ckpt);
}

TEST(TextReport, ControlBytesEscaped) {
  EXPECT_EQ(exporters::printable("a\nb\x1b[31m"), "a\\x0ab\\x1b[31m");
  EXPECT_EQ(exporters::printable("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(exporters::printable("bad\xff"), "bad\\xff");
}

TEST(Units, Human) {
  EXPECT_EQ(exporters::human_bytes(0), "0 B");
  EXPECT_EQ(exporters::human_bytes(1023), "1023 B");
  EXPECT_EQ(exporters::human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(exporters::human_bytes(64ull << 20), "64.0 MiB");
  EXPECT_EQ(exporters::human_duration(850), "850 ns");
  EXPECT_EQ(exporters::human_duration(12'300), "12.3 us");
  EXPECT_EQ(exporters::human_duration(1'200'000'000), "1.20 s");
  EXPECT_EQ(exporters::human_count(1234567), "1,234,567");
  EXPECT_EQ(exporters::human_count(999), "999");
}

TEST(TextReport, LongPathsAreNotCut) {
  auto s = sample();
  const std::string long_path = "/" + std::string(600, 'd') + "/file.npy";
  s.files[0].path = long_path;
  const std::string t = exporters::run_summary(s);
  EXPECT_NE(t.find(long_path + "\n"), std::string::npos);
}

namespace {

/// sample() after a daemon folded 4 of the process's records (docs/counters.md#folded-records).
core::RunSnapshot folded_sample() {
  core::RunSnapshot s = sample();
  core::FileCounters o = core::new_counters();
  o.opens = 4;
  o.reads = 8;
  o.bytes_read = 4096;
  o.max_byte_read = 1023;
  o.read_start_ns = 7;
  s.processes[0].folded = o;
  s.processes[0].folded_files = 4;
  s.processes[0].folded_unlinks = 1;
  s.processes[0].files += 4;
  s.processes[0].totals.reads += 8;
  s.processes[0].totals.bytes_read += 4096;
  s.folded_records = 5;  // one of the files was folded twice
  s.folded_only_files = 4;
  return s;
}

}  // namespace

TEST(JsonReport, FoldedRecordsShownOnlyWhenThereAreSome) {
  json plain = exporters::run_to_json(sample(), "x");
  EXPECT_EQ(plain["folded_records"], 0);  // always present
  EXPECT_FALSE(plain["processes"][0].contains("folded"));

  json j = json::parse(exporters::dump_json(exporters::run_to_json(folded_sample(), "x")));
  EXPECT_EQ(j["folded_records"], 5);
  const auto& p = j["processes"][0];
  ASSERT_TRUE(p.contains("folded"));
  EXPECT_EQ(p["folded"]["files"], 4);
  const auto& c = p["folded"]["counters"];
  EXPECT_EQ(c["reads"], 8);
  EXPECT_EQ(c["bytes_read"], 4096);
  EXPECT_EQ(c["max_byte_read"], 1023);
  EXPECT_EQ(c["max_byte_written"], 0);
  EXPECT_EQ(c["read_start_ns"], 7);
  EXPECT_EQ(c["unlinks"], 1);
  EXPECT_EQ(c["rename_sources"], 0);
  // Unchanged meaning: the process counters are the totals, folded records included.
  EXPECT_EQ(p["counters"]["reads"], 3 + 8);
  EXPECT_EQ(p["counters"]["files"], 5);
}

TEST(TextReport, FoldIsSaidAndCountedInTheHeader) {
  const std::string plain = exporters::run_summary(sample());
  EXPECT_EQ(plain.find("folded"), std::string::npos) << plain;
  EXPECT_NE(plain.find("1 processes, 1 files"), std::string::npos) << plain;

  const std::string t = exporters::run_summary(folded_sample());
  EXPECT_NE(t.find("5 file records folded into per-process (other files) records to bound memory"
                   " (totals exact"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("1 processes, 5 files, read 3.00 MiB in 11 calls"), std::string::npos) << t;
  // The process line is the same as without folding, with the exact totals.
  EXPECT_NE(t.find("python3                 11   3.00 MiB          0        0 B       0       0      5 "),
            std::string::npos)
      << t;
}

TEST(Reports, RecorderFoldEndToEnd) {
  // The recorder's fold reaches the JSON as docs/run-json.md says: the rows plus "folded" make
  // the process counters, and "files" counts every distinct file.
  core::Recorder r(100, 1);
  for (uint64_t i = 1; i <= 10; ++i) {
    iolens_file_key k{};
    k.ino = i;
    k.dev = (8u << 20) | 1;
    k.tgid = 100;
    k.pstart_ns = 5;
    core::FileCounters c = core::new_counters();
    c.opens = c.reads = i;
    c.bytes_read = 100 * i;
    r.on_file(k, c, true);
  }
  EXPECT_EQ(r.fold_to(5), 6u);
  json j = exporters::run_to_json(r.snapshot(core::ClockBase{}), "x");
  EXPECT_EQ(j["folded_records"], 6);
  const auto& p = j["processes"][0];
  EXPECT_EQ(p["counters"]["files"], 10);
  EXPECT_EQ(p["folded"]["files"], 6);
  EXPECT_EQ(p["folded"]["counters"]["bytes_read"], 100 * (1 + 2 + 3 + 4 + 5 + 6));
  uint64_t rows = 0;
  for (const auto& f : j["files"]) rows += f["counters"]["bytes_read"].get<uint64_t>();
  EXPECT_EQ(rows + p["folded"]["counters"]["bytes_read"].get<uint64_t>(),
            p["counters"]["bytes_read"].get<uint64_t>());
  EXPECT_EQ(p["counters"]["bytes_read"], 100 * 55);
  EXPECT_NE(exporters::run_summary(r.snapshot(core::ClockBase{})).find("10 files"),
            std::string::npos);
}

TEST(Coverage, PathsAndHitRatios) {
  core::FileCounters c = core::new_counters();
  EXPECT_EQ(core::read_coverage(c).cache_hit_ratio, -1);  // no buffered read: nothing to say
  EXPECT_FALSE(core::below_syscalls(c));
  c.bytes_read = 10 * 4096;
  c.uring_bytes_read = 4 * 4096;  // of bytes_read
  c.direct_bytes_read = 2 * 4096;
  c.cache_read_pages = 8;
  c.cache_miss_pages = 2;
  c.fault_pages = 5;
  c.fault_miss_pages = 9;  // read-around can insert more pages than faulted: clamped to 0
  const core::ReadCoverage r = core::read_coverage(c);
  EXPECT_EQ(r.syscall_bytes, 6u * 4096);
  EXPECT_EQ(r.uring_bytes, 4u * 4096);
  EXPECT_EQ(r.direct_bytes, 2u * 4096);
  EXPECT_EQ(r.fault_bytes, 5u * 4096);
  EXPECT_DOUBLE_EQ(r.cache_hit_ratio, 0.75);
  EXPECT_DOUBLE_EQ(r.fault_hit_ratio, 0.0);
  EXPECT_TRUE(core::below_syscalls(c));
  EXPECT_TRUE(core::has_activity(c));
}

TEST(Coverage, JsonPerFileAndRunAndTextOnlyWhenSeen) {
  core::RunSnapshot s = sample();
  json plain = exporters::run_to_json(s, "x");
  EXPECT_TRUE(plain["coverage"]["cache_hit_ratio"].is_null());
  EXPECT_EQ(plain["coverage"]["syscall_read_bytes"], 3 * 1048576);
  EXPECT_TRUE(plain["not_attached"].empty());
  EXPECT_EQ(exporters::run_summary(s).find("how bytes were read"), std::string::npos);
  EXPECT_EQ(exporters::run_summary(s).find("not attached"), std::string::npos);

  s.processes[0].totals.cache_read_pages = 768;
  s.processes[0].totals.cache_miss_pages = 192;
  s.files[0].counters.cache_read_pages = 768;
  s.files[0].counters.cache_miss_pages = 192;
  s.not_attached["fault"] = "tracepoint mm_filemap_fault is not in this kernel";
  json j = exporters::run_to_json(s, "x");
  EXPECT_DOUBLE_EQ(j["files"][0]["coverage"]["cache_hit_ratio"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["coverage"]["cache_hit_ratio"].get<double>(), 0.75);
  EXPECT_EQ(j["not_attached"]["fault"], "tracepoint mm_filemap_fault is not in this kernel");
  const std::string t = exporters::run_summary(s);
  EXPECT_NE(t.find("how bytes were read: system calls 3.00 MiB (page cache hits 75%)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("not attached: fault (tracepoint mm_filemap_fault is not in this kernel)"),
            std::string::npos)
      << t;

  // A checkpoint only written through the page cache is listed, ahead of smaller reads.
  core::FileSnapshot ck;
  ck.path = "/ckpt/model.pt";
  ck.pid = 10;
  ck.counters.dirtied_pages = 8192;
  ck.counters.bytes_written = 32 << 20;
  s.files.push_back(ck);
  s.processes[0].totals.dirtied_pages = 8192;
  const std::string t2 = exporters::run_summary(s);
  EXPECT_NE(t2.find("writes through the page cache: 32.0 MiB dirtied"), std::string::npos) << t2;
  const auto rows = t2.find("how bytes were read");
  EXPECT_LT(t2.find("/ckpt/model.pt", rows), t2.find("/data/x.npy", rows)) << t2;
}

// Which programs counted the run (docs/run-json.md#collector): absent for a daemon's job, a
// field and a summary line for a run, the daemon path with its job, the local path with why.
TEST(Reports, CollectorSaysWhichPathTheRunTook) {
  core::RunSnapshot s = sample();
  EXPECT_FALSE(exporters::run_to_json(s, "1").contains("collector"));
  EXPECT_EQ(exporters::run_summary(s, {}).find("counted by"), std::string::npos);
  s.collector = "iolensd";
  s.collector_note = "cgroup/iolens.runs/run-7-1";
  json j = exporters::run_to_json(s, "1");
  EXPECT_EQ(j["collector"], json({{"path", "iolensd"}, {"job", "cgroup/iolens.runs/run-7-1"}}));
  EXPECT_NE(exporters::run_summary(s, {}).find(
                "counted by: iolensd (job cgroup/iolens.runs/run-7-1)\n"),
            std::string::npos);
  s.collector = "local";
  s.collector_note = "cannot connect to iolensd at /x: No such file\x1b[2J";
  j = exporters::run_to_json(s, "1");
  EXPECT_EQ(j["collector"]["path"], "local");
  EXPECT_EQ(j["collector"]["daemon"], "cannot connect to iolensd at /x: No such file\x1b[2J");
  const std::string text = exporters::run_summary(s, {});
  EXPECT_NE(text.find("counted by: iolens's own programs (cannot connect to iolensd at /x: No "
                      "such file\\x1b[2J)\n"),
            std::string::npos)
      << text;
  s.collector_note.clear();
  s.kernel_records = {8192, 9000, 808};
  j = exporters::run_to_json(s, "1");
  EXPECT_EQ(j["collector"],
            json({{"path", "local"},
                  {"file_records", {{"preallocated", 8192}, {"made", 9000}, {"spilled", 808}}}}));
  EXPECT_NE(exporters::run_summary(s, {}).find("counted by: iolens's own programs\n"),
            std::string::npos);
}

namespace {

std::string streamed(const core::RunSnapshot& s, std::size_t* pieces = nullptr) {
  std::string text;
  std::size_t n = 0;
  EXPECT_TRUE(exporters::write_run_json(s, "9.9.9", [&](std::string_view piece) {
    text += piece;
    ++n;
    return true;
  }));
  if (pieces) *pieces = n;
  return text;
}

}  // namespace

TEST(JsonReport, StreamedRecordIsTheDumpedOne) {
  // Byte for byte what dump_json(run_to_json()) writes, whatever the shape.
  auto s = sample();
  EXPECT_EQ(streamed(s), exporters::dump_json(exporters::run_to_json(s, "9.9.9")));
  auto hostile = sample();
  hostile.files[0].path = std::string("/d/a\"b\\c\nd\xff\xfe.bin");
  hostile.processes[0].comm = "c\xff\n";
  hostile.not_attached["mm_filemap_fault"] = "tracepoint x is not in this kernel";
  EXPECT_EQ(streamed(hostile), exporters::dump_json(exporters::run_to_json(hostile, "9.9.9")));
  auto folded = folded_sample();
  EXPECT_EQ(streamed(folded), exporters::dump_json(exporters::run_to_json(folded, "9.9.9")));
  core::RunSnapshot empty;
  EXPECT_EQ(streamed(empty), exporters::dump_json(exporters::run_to_json(empty, "9.9.9")));
  auto daemon = sample();  // a run counted by iolensd (docs/run-json.md#collector)
  daemon.collector = "iolensd";
  daemon.collector_note = "cgroup/iolens.runs/run-7-1";
  EXPECT_EQ(streamed(daemon), exporters::dump_json(exporters::run_to_json(daemon, "9.9.9")));
}

// Every shape a file row takes (write_run_json writes file rows directly, not through the DOM):
// unknown and incomplete paths, a rename target in and out of UTF-8, hit ratios that are null,
// whole, fractional or tiny, negative and extreme numbers.
TEST(JsonReport, StreamedFileRowsOfEveryShapeAreTheDumpedOnes) {
  auto s = sample();
  const core::FileSnapshot base = s.files[0];
  s.files.clear();
  const double ratios[][2] = {{0, 0}, {1, 1}, {3, 1}, {3, 2}, {10000000, 1}, {7, 5}};
  for (int i = 0; i < 12; ++i) {
    core::FileSnapshot f = base;
    f.ino = 100 + static_cast<uint64_t>(i);
    f.path = "/d/f" + std::to_string(i);
    f.path_known = i % 3 != 1;
    f.path_incomplete = i % 4 == 2;
    if (i % 5 == 3) f.renamed_to = "/d/renamed" + std::to_string(i);
    if (i % 5 == 4) f.renamed_to = std::string("/d/\xc3(bad\x80") + std::to_string(i);
    if (i == 6) f.path = std::string("/d/\xff\x01\"q\"\t") + std::to_string(i);
    f.proc_start_ns = i == 7 ? -1 : (i == 8 ? INT64_MAX : f.proc_start_ns);
    f.rename_sources = static_cast<uint64_t>(i % 2);
    f.unlinks = i == 9 ? UINT64_MAX : 0;
    // cache_read_pages / cache_miss_pages and fault_pages / fault_miss_pages: the hit ratios
    const auto& rp = ratios[i % 6];
    f.counters.cache_read_pages = static_cast<uint64_t>(rp[0]);
    f.counters.cache_miss_pages = static_cast<uint64_t>(rp[1]);
    f.counters.fault_pages = static_cast<uint64_t>(rp[0]) * 3;
    f.counters.fault_miss_pages = static_cast<uint64_t>(rp[1]);
    f.counters.bytes_read = i == 10 ? UINT64_MAX / 2 : static_cast<uint64_t>(i) * 4096;
    f.counters.max_byte_read = i == 11 ? -1 : 77;
    // alignment unknown, none (-1), known, and one the offsets' buckets cannot tell
    f.file_alignment = i % 4 == 0   ? std::nullopt
                       : i % 4 == 1 ? std::optional<int64_t>(-1)
                       : i % 4 == 2 ? std::optional<int64_t>(4096)
                                    : std::optional<int64_t>(3000);
    f.counters.offset_lsb[0] = static_cast<uint64_t>(i);
    f.counters.offset_lsb[3] = 2;
    // tallies of 0 to 11 values (stored as value + 1), some calls untallied
    for (int v = 0; v < std::min(i, IOLENS_TALLY_SLOTS); ++v) {
      f.counters.access.value[v] = static_cast<uint64_t>(100 * v) + 1;
      f.counters.access.count[v] = static_cast<uint64_t>((v * 7 + i) % 5 + 1);
      f.counters.stride.value[v] = static_cast<uint64_t>(v == 3 ? 0 : INT64_MAX - v) + 1;
      f.counters.stride.count[v] = static_cast<uint64_t>(i);
    }
    f.counters.access.untallied = static_cast<uint64_t>(i > IOLENS_TALLY_SLOTS ? i : 0);
    s.files.push_back(f);
  }
  const json dom = exporters::run_to_json(s, "9.9.9");
  EXPECT_EQ(streamed(s), exporters::dump_json(dom));
  EXPECT_TRUE(dom["files"][0]["counters"]["file_not_aligned"].is_null());
  EXPECT_EQ(dom["files"][1]["counters"]["file_alignment"], -1);
  EXPECT_EQ(dom["files"][1]["counters"]["file_not_aligned"], 0);
  EXPECT_EQ(dom["files"][2]["counters"]["file_alignment"], 4096);
  EXPECT_EQ(dom["files"][2]["counters"]["file_not_aligned"], 2 + 2);  // buckets 0 (i = 2) and 3
  EXPECT_EQ(dom["files"][3]["counters"]["file_alignment"], 3000);
  EXPECT_TRUE(dom["files"][3]["counters"]["file_not_aligned"].is_null());
  // row 3: sizes 0 x4 (never shown), 100 x1, 200 x3 (counts (v * 7 + 3) % 5 + 1); row 10:
  // equal counts, the largest stride first
  EXPECT_EQ(dom["files"][3]["counters"]["access1_access"], 200);
  EXPECT_EQ(dom["files"][3]["counters"]["access1_count"], 3);
  EXPECT_EQ(dom["files"][3]["counters"]["access2_access"], 100);
  EXPECT_EQ(dom["files"][3]["counters"]["access3_access"], 0);
  EXPECT_EQ(dom["files"][3]["counters"]["access3_count"], 0);
  EXPECT_EQ(dom["files"][10]["counters"]["access_untallied"], 10);
  EXPECT_EQ(dom["files"][10]["counters"]["stride1_stride"], INT64_MAX);
}

TEST(JsonReport, StreamedRecordIsWrittenInPieces) {
  // Many files: written as it is made (several pieces), still the dumped text.
  auto s = sample();
  for (int i = 0; i < 2000; ++i) {
    auto f = s.files[0];
    f.path = "/data/sample_" + std::to_string(i) + ".npy";
    f.ino = 1000 + static_cast<uint64_t>(i);
    s.files.push_back(f);
  }
  std::size_t pieces = 0;
  const std::string text = streamed(s, &pieces);
  EXPECT_EQ(text, exporters::dump_json(exporters::run_to_json(s, "9.9.9")));
  EXPECT_GT(pieces, 10u);
  // A failed write ends it.
  std::size_t calls = 0;
  EXPECT_FALSE(exporters::write_run_json(s, "x", [&](std::string_view) { return ++calls < 3; }));
  EXPECT_EQ(calls, 3u);
}

namespace {

// The IO TIME cell of pid's row in the per-process table: the header's "IO TIME" is
// right-aligned in its column as the row's value is, so the cell ends where the header's does.
std::string io_time_cell(const std::string& summary, uint32_t pid) {
  const auto head = summary.find("\n     PID ");
  EXPECT_NE(head, std::string::npos) << summary;
  if (head == std::string::npos) return "?";
  const auto line_start = head + 1;
  const auto end = summary.find("IO TIME", line_start) + 7 - line_start;
  const std::string prefix = "\n" + std::string(8 - std::to_string(pid).size(), ' ') +
                             std::to_string(pid) + " ";
  const auto row = summary.find(prefix, line_start);
  EXPECT_NE(row, std::string::npos) << summary;
  if (row == std::string::npos) return "?";
  std::string cell = summary.substr(row + 1 + end - 10, 10);
  return cell.substr(cell.find_first_not_of(' ') == std::string::npos
                         ? cell.size()
                         : cell.find_first_not_of(' '));
}

}  // namespace

// timing: off (docs/counters.md "Timing"): the record says how calls were timed, "exact" by
// default; streamed and dumped records agree.
TEST(JsonReport, TimingIsARunMember) {
  core::RunSnapshot s = sample();
  s.processes[0].totals.read_time_ns = 1'200'000'000;
  json exact = json::parse(exporters::dump_json(exporters::run_to_json(s, "x")));
  ASSERT_TRUE(exact.contains("timing"));
  EXPECT_EQ(exact["timing"], "exact");
  EXPECT_EQ(json::parse(streamed(s))["timing"], "exact");
  s.timing = "off";
  json off = json::parse(exporters::dump_json(exporters::run_to_json(s, "x")));
  EXPECT_EQ(off["timing"], "off");
  EXPECT_EQ(json::parse(streamed(s))["timing"], "off");
  EXPECT_EQ(streamed(s), exporters::dump_json(exporters::run_to_json(s, "9.9.9")));
  // Counts and bytes are what they were.
  EXPECT_EQ(off["processes"][0]["counters"]["bytes_read"], 3 * 1048576);
  EXPECT_EQ(off["processes"][0]["counters"]["reads"], 3);
  EXPECT_FALSE(off.contains("timing_note"));
  // Off asked for and not had: exact, and why.
  s.timing = "exact";
  s.timing_note = "timing off needs close's classic tracepoint: no tracepoint";
  json fell = json::parse(streamed(s));
  EXPECT_EQ(fell["timing"], "exact");
  EXPECT_EQ(fell["timing_note"], s.timing_note);
  EXPECT_EQ(streamed(s), exporters::dump_json(exporters::run_to_json(s, "9.9.9")));
  EXPECT_NE(exporters::run_summary(s).find("timing: exact, not off as asked: timing off needs "
                                           "close's classic tracepoint: no tracepoint\n"),
            std::string::npos)
      << exporters::run_summary(s);
}

// timing: off in the summary: "-" for IO TIME (not a duration of 0 or of anything), and a line
// that says why, after the not-attached lines.
TEST(TextReport, TimingOffShowsNoIoTimeAndSaysSo) {
  const std::string kLine =
      "timing: off: calls were not timed (IO TIME and every time counter are not measured; "
      "counts and bytes are exact)\n";
  core::RunSnapshot s = sample();
  s.processes[0].totals.read_time_ns = 1'000'000'000;
  s.processes[0].totals.write_time_ns = 150'000'000;
  s.processes[0].totals.meta_time_ns = 50'000'000;  // 1.20 s in all
  s.not_attached["fault"] = "tracepoint mm_filemap_fault is not in this kernel";
  s.collector = "local";

  const std::string exact = exporters::run_summary(s);
  EXPECT_EQ(io_time_cell(exact, 10), "1.20 s") << exact;
  EXPECT_EQ(exact.find("timing: off"), std::string::npos) << exact;

  s.timing = "off";
  const std::string off = exporters::run_summary(s);
  EXPECT_EQ(io_time_cell(off, 10), "-") << off;
  EXPECT_EQ(off.find("1.20 s"), std::string::npos) << off;
  const auto at = off.find(kLine);
  ASSERT_NE(at, std::string::npos) << off;
  EXPECT_EQ(off[at - 1], '\n');  // a line of its own
  const auto not_attached = off.find("not attached: fault (");
  ASSERT_NE(not_attached, std::string::npos) << off;
  EXPECT_LT(not_attached, at) << off;
  EXPECT_LT(at, off.find("counted by: ")) << off;
  // The rest of the row is unchanged: the same text up to the IO TIME cell.
  EXPECT_NE(off.find("read 3.00 MiB in 3 calls"), std::string::npos) << off;
  const auto row_exact = exact.find("\n      10 ");
  const auto row_off = off.find("\n      10 ");
  ASSERT_NE(row_exact, std::string::npos);
  ASSERT_NE(row_off, std::string::npos);
  EXPECT_EQ(exact.substr(row_exact, 90), off.substr(row_off, 90));
}

// The summary's top files are files across processes: a file two processes read is one line
// with both processes' bytes and PROCS 2, above a file of one process with fewer bytes.
TEST(TextReport, TopFilesAreFilesAcrossProcesses) {
  auto s = sample();  // pid 10 read 3 MiB of /data/x.npy
  core::FileSnapshot g = s.files[0];
  g.pid = 11;
  g.counters.reads = 1;
  g.counters.bytes_read = 1048576;
  s.files.push_back(g);
  core::FileSnapshot h = s.files[0];
  h.path = "/data/y.npy";
  h.ino = 56;
  h.counters.bytes_read = 3 * 1048576 + 1;  // more than either part of x.npy, less than both
  s.files.push_back(h);
  exporters::TextOptions opts;
  opts.top_files = 2;
  const std::string t = exporters::run_summary(s, opts);
  const auto head = t.find("top 2 files by bytes (all processes)");
  ASSERT_NE(head, std::string::npos) << t;
  const auto x = t.find("  /data/x.npy", head), y = t.find("  /data/y.npy", head);
  ASSERT_NE(x, std::string::npos) << t;
  ASSERT_NE(y, std::string::npos) << t;
  EXPECT_LT(x, y) << t;
  const std::string x_line = t.substr(t.rfind('\n', x) + 1, x - t.rfind('\n', x) - 1);
  EXPECT_NE(x_line.find("4.00 MiB"), std::string::npos) << x_line;
  EXPECT_NE(x_line.find(" 4 "), std::string::npos) << x_line;  // 3 + 1 reads
  EXPECT_TRUE(x_line.ends_with("     2")) << x_line;             // PROCS, 6 wide
}
