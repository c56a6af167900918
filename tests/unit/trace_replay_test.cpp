// SPDX-License-Identifier: Apache-2.0
// Counters from a captured trace (exporters/trace_replay): replaying the synthetic trace gives
// exactly the records that calling bpf/iolens_account.h directly gives, in the kernel's order
// and under its conditions; Darshan's rules hold on them (numbers worked out by hand from
// docs/counters.md); the recorder's snapshot names, ranks and attributes as a live run does; and
// the Darshan log of the trace, DXT_POSIX included, reads back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/common_values.hpp"
#include "core/counters.hpp"
#include "core/file_alignment.hpp"
#include "exporters/darshan_log.hpp"
#include "exporters/json_report.hpp"
#include "exporters/trace_replay.hpp"
#include "iolens_account.h"
#include "trace_sample.hpp"

using namespace iolens;
using namespace iolens::testing;

namespace {

uint64_t at(uint64_t us) { return kW + us * 1000; }

core::FileKey key(SampleProc p, SampleFile f) {
  return core::FileKey{f.dev, f.ino, f.gen, core::ProcKey{p.pid, p.pstart}};
}

bool same(const core::FileCounters& a, const core::FileCounters& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

const core::FileSnapshot* row(const core::RunSnapshot& run, uint32_t pid, const std::string& path) {
  for (const auto& f : run.files)
    if (f.pid == pid && f.path == path) return &f;
  return nullptr;
}

}  // namespace

TEST(TraceReplay, RecordsAreWhatTheAccountingFunctionsGive) {
  const exporters::ReplayedRecords recs = exporters::replay_records(sample_trace());

  // The worker's data file, call by call as the kernel makes them (the EINTR read counts
  // nowhere).
  core::FileCounters data = core::new_counters();
  iolens_account_open(&data, 0, at(10), at(10) + 5'000);
  iolens_account_rw(&data, 0, 0, 4096, at(20), at(20) + 20'000);
  iolens_account_rw(&data, 0, 4096, 4096, at(50), at(50) + 15'000);
  iolens_account_rw(&data, 0, 100000, 1000, at(80), at(80) + 30'000);
  iolens_account_rw(&data, 0, 8192, 0, at(120), at(120) + 1'000);
  iolens_account_meta(&data, IOLENS_META_SEEK, at(140), at(140) + 500);
  iolens_account_meta(&data, IOLENS_META_STAT, at(150), at(150) + 700);
  iolens_account_meta(&data, IOLENS_META_MMAP, at(160), at(160) + 3'000);
  iolens_account_close(&data, 0, at(200), at(200) + 1'000);
  iolens_account_open(&data, 0, at(150'000), at(150'000) + 4'000);
  iolens_account_rw(&data, 0, 0, 65536, at(150'010), at(150'010) + 50'000);
  iolens_account_close(&data, 0, at(150'100), at(150'100) + 1'000);
  EXPECT_TRUE(same(recs.files.at(key(kWorker, kData)), data));

  // The checkpoint: two writes, a read back, an fsync, a close.
  core::FileCounters ckpt = core::new_counters();
  iolens_account_open(&ckpt, 0, at(300), at(300) + 8'000);
  iolens_account_rw(&ckpt, 1, 0, 1048577, at(310), at(310) + 2'000'000);
  iolens_account_rw(&ckpt, 1, 1048577, 2000, at(2400), at(2400) + 30'000);
  iolens_account_rw(&ckpt, 0, 0, 100, at(2500), at(2500) + 9'000);
  iolens_account_meta(&ckpt, IOLENS_META_FSYNC, at(2600), at(2600) + 3'000'000);
  iolens_account_close(&ckpt, 0, at(5700), at(5700) + 2'000);
  EXPECT_TRUE(same(recs.files.at(key(kMain, kCkpt)), ckpt));

  // The copy's input side on an inherited descriptor; the stat by path on its own record
  // (generation 0), as the kernel keeps it.
  core::FileCounters copy_in = core::new_counters();
  iolens_account_rw(&copy_in, 0, 0, 8192, at(6100), at(6100) + 40'000);
  EXPECT_TRUE(same(recs.files.at(key(kMain, kData)), copy_in));
  core::FileCounters stat = core::new_counters();
  iolens_account_meta(&stat, IOLENS_META_STAT, at(6300), at(6300) + 2'000);
  EXPECT_TRUE(same(recs.files.at(key(kMain, {kDev, 11, 0})), stat));
  EXPECT_EQ(recs.files.size(), 4u);  // failed calls on no file have no record

  // Pipes and sockets: reads and writes only, in `others` by descriptor kind, tallying no size
  // or stride (as the kernel's fd_record gives them: with_tallies 0).
  core::FileCounters pipe = core::new_counters();
  iolens_account_rw_tally(&pipe, 0, -1, 10, at(6000), at(6000) + 1'000, 0, nullptr);
  EXPECT_TRUE(same(recs.others.at({{kMain.pid, kMain.pstart}, 001}), pipe));
  core::FileCounters sock = core::new_counters();
  iolens_account_rw_tally(&sock, 1, -1, 8192, at(6100), at(6100) + 40'000, 0, nullptr);
  EXPECT_TRUE(same(recs.others.at({{kMain.pid, kMain.pstart}, 014}), sock));
  EXPECT_EQ(recs.others.size(), 3u);
}

// ABI 14: a read or write flagged IOLENS_TRACE_F_MEM_UNALIGNED counts in mem_not_aligned when
// it succeeded; an open's arg is its mode when it may create (0 otherwise), a dup's arg is a
// descriptor and no mode.
TEST(TraceReplay, MemoryAlignmentAndModeComeFromTheFlagsAndTheOpensArg) {
  trace::Trace t = sample_trace();
  const auto w = kWorker;
  constexpr uint16_t R = IOLENS_OP_READ, W = IOLENS_OP_WRITE;
  constexpr uint32_t U = IOLENS_TRACE_F_MEM_UNALIGNED;
  const SampleFile f{kDev, 77, 1};
  t.ops = {
      sample_op(IOLENS_OP_OPEN, 257, w, 101, 10, 1'000, f, 5, -1, 5, 0640),
      sample_op(W, 1, w, 101, 20, 1'000, f, 5, 0, 100, 100, U),
      sample_op(W, 1, w, 101, 30, 1'000, f, 5, 100, 100, 100),
      sample_op(R, 0, w, 101, 40, 1'000, f, 5, 200, 0, 100, U),  // 0 bytes: counts
      sample_op(R, 0, w, 101, 50, 1'000, f, 5, -1, -14, 100, U),  // EFAULT: does not
      sample_op(IOLENS_OP_DUP, 32, w, 101, 60, 1'000, f, 9, -1, 9, 9),
      sample_op(IOLENS_OP_OPEN, 257, w, 101, 70, 1'000, f, 6, -1, 6, 0),  // O_RDONLY
  };
  const exporters::ReplayedRecords recs = exporters::replay_records(t);
  const core::FileCounters& c = recs.files.at(key(w, f));
  EXPECT_EQ(c.writes, 2u);
  EXPECT_EQ(c.reads, 1u);
  EXPECT_EQ(c.mem_not_aligned, 2u);
  EXPECT_EQ(c.opens, 3u);
  EXPECT_EQ(c.mode, 0640u);
}

// A trace's header keeps Darshan's mount table (ABI 14): the rows of its replay get their
// paths' alignment from it, and FILE_NOT_ALIGNED from the offsets; without one, not known.
TEST(TraceReplay, RowsTakeTheirAlignmentFromTheHeadersMountTable) {
  trace::Trace t = sample_trace();
  t.meta.alignment_mounts.reset();
  for (const auto& f : exporters::replay_counters(t).files)
    EXPECT_FALSE(f.file_alignment.has_value()) << f.path;
  t.meta.alignment_mounts = {{"/data", 1 << 20}, {"/", 4096}};
  const core::RunSnapshot run = exporters::replay_counters(t);
  const auto* data = row(run, kWorker.pid, "/data/train.bin");
  const auto* ckpt = row(run, kMain.pid, "/ckpt/model.pt");
  ASSERT_NE(data, nullptr);
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(data->file_alignment, 1 << 20);
  EXPECT_EQ(ckpt->file_alignment, 4096);
  // The worker's reads of train.bin start at 0, 4096, 100000, 8192 (0 bytes) and, reopened, 0:
  // none is a multiple of 1 MiB but the two at 0.
  EXPECT_EQ(core::file_not_aligned(data->counters, *data->file_alignment), 3);
  // The checkpoint's writes at 0 and 1048577, its read at 0: one not a multiple of 4096.
  EXPECT_EQ(core::file_not_aligned(ckpt->counters, *ckpt->file_alignment), 1);
}

// A trace written before ABI 14 has no buffer flag and no open's mode: its replay says so
// (`not_recorded`), and its Darshan log has them as not collected (-1), not as zeros.
TEST(TraceReplay, ATraceOfAnOlderAbiSaysWhatItDidNotRecord) {
  trace::Trace t = sample_trace();
  EXPECT_TRUE(exporters::replay_counters(t).not_recorded.empty());
  t.meta.abi_version = 13;
  const core::RunSnapshot run = exporters::replay_counters(t);
  EXPECT_EQ(run.not_recorded, (std::vector<std::string>{"mem_not_aligned", "mode"}));
  EXPECT_EQ(exporters::run_to_json(run, "v")["not_recorded"],
            nlohmann::json({"mem_not_aligned", "mode"}));
  exporters::DarshanLogContents log;
  std::string err;
  ASSERT_TRUE(exporters::read_darshan_log(
      exporters::darshan_log(run, exporters::darshan_job_of_trace(t)), log, err))
      << err;
  ASSERT_FALSE(log.posix.empty());
  for (const auto& r : log.posix) {
    for (const char* name : {"MEM_NOT_ALIGNED", "MEM_ALIGNMENT", "MODE"})
      EXPECT_EQ(r.counters[static_cast<size_t>(exporters::darshan_posix_counter_index(name))], -1)
          << name;
  }
}

TEST(TraceReplay, DarshanRulesHold) {
  const exporters::ReplayedRecords recs = exporters::replay_records(sample_trace());
  const core::FileCounters& d = recs.files.at(key(kWorker, kData));
  EXPECT_EQ(d.opens, 2u);
  EXPECT_EQ(d.closes, 2u);
  EXPECT_EQ(d.reads, 5u);  // the read at end of file (0 bytes) counts, the EINTR one does not
  EXPECT_EQ(d.bytes_read, 4096u + 4096 + 1000 + 0 + 65536);
  // 0 > 0 no; 4096 > 4095 seq and consec; 100000 > 8191 seq; 8192 > 100999 no; after the
  // reopen last_byte is 0 again: 0 > 0 no.
  EXPECT_EQ(d.seq_reads, 2u);
  EXPECT_EQ(d.consec_reads, 1u);
  EXPECT_EQ(d.max_byte_read, 100999);
  EXPECT_EQ(d.size_read[0], 1u);  // 0 bytes
  EXPECT_EQ(d.size_read[1], 1u);  // 1000
  EXPECT_EQ(d.size_read[2], 2u);  // 4096 twice
  EXPECT_EQ(d.size_read[3], 1u);  // 65536
  EXPECT_EQ(d.rw_switches, 0u);
  EXPECT_EQ(d.seeks, 1u);
  EXPECT_EQ(d.stats, 1u);
  EXPECT_EQ(d.mmaps, 1u);
  EXPECT_EQ(d.read_time_ns, 20'000u + 15'000 + 30'000 + 1'000 + 50'000);
  EXPECT_EQ(d.max_read_time_ns, 50'000u);
  EXPECT_EQ(d.max_read_time_size, 65536u);
  EXPECT_EQ(d.meta_time_ns, 5'000u + 500 + 700 + 1'000 + 4'000 + 1'000);  // mmap: no time
  EXPECT_EQ(d.read_start_ns, at(20));
  // Common sizes: 4096 twice, then 1000 and 65536 once each (ties: the larger first); the
  // 0-byte read is tallied but never shown. Strides: 0 at the first read and after the reopen,
  // 4096 - 4095 - 1 = 0, 100000 - 8191 - 1 = 91808, then 8192 (not forward of 100999): 0.
  const core::CommonValues sizes = core::common_accesses(d);
  EXPECT_EQ(sizes, (core::CommonValues{{{4096, 2}, {65536, 1}, {1000, 1}, {0, 0}}}));
  EXPECT_EQ(core::common_strides(d),
            (core::CommonValues{{{91808, 1}, {0, 0}, {0, 0}, {0, 0}}}));
  EXPECT_EQ(core::untallied(d.access, d.more.access) + core::untallied(d.stride, d.more.stride), 0u);

  const core::FileCounters& c = recs.files.at(key(kMain, kCkpt));
  EXPECT_EQ(c.writes, 2u);
  EXPECT_EQ(c.bytes_written, 1050577u);
  EXPECT_EQ(c.seq_writes, 1u);
  EXPECT_EQ(c.consec_writes, 1u);
  EXPECT_EQ(c.max_byte_written, 1050576);
  EXPECT_EQ(c.size_write[5], 1u);  // 1 MiB + 1: (1M, 4M]
  EXPECT_EQ(c.size_write[2], 1u);  // 2000: (1K, 10K]
  EXPECT_EQ(c.reads, 1u);
  EXPECT_EQ(c.seq_reads, 0u);
  EXPECT_EQ(c.max_byte_read, 99);
  EXPECT_EQ(c.rw_switches, 1u);
  EXPECT_EQ(c.fsyncs, 1u);
  EXPECT_EQ(c.write_time_ns, 2'000'000u + 30'000 + 3'000'000);  // fsync is write time
}

TEST(TraceReplay, SnapshotIsWhatARunReports) {
  const trace::Trace t = sample_trace();
  const core::RunSnapshot run = exporters::replay_counters(t);
  EXPECT_EQ(run.command, t.meta.command);
  EXPECT_EQ(run.start_ns, static_cast<int64_t>(kW) + kMonoToWall);
  EXPECT_EQ(run.end_ns, static_cast<int64_t>(kW) + 2'000'000'000 + kMonoToWall);
  EXPECT_FALSE(run.exit_code.has_value());
  EXPECT_EQ(run.lost.at("trace_ring_full"), 3u);
  EXPECT_EQ(run.lost.at("trace_size_limit"), 0u);
  EXPECT_EQ(run.lost.at("trace_other"), 1u);

  // Processes in start order: the ranks of the Darshan log.
  ASSERT_EQ(run.processes.size(), 3u);
  const auto& mainp = run.processes[0];
  const auto& worker = run.processes[1];
  const auto& shell = run.processes[2];
  EXPECT_EQ(mainp.pid, kMain.pid);
  EXPECT_EQ(mainp.comm, "python3");
  EXPECT_EQ(mainp.exe, "/usr/bin/python3.11");
  EXPECT_EQ(mainp.ppid, 1u);
  EXPECT_FALSE(mainp.end_ns.has_value());
  EXPECT_EQ(mainp.renames, 1u);
  EXPECT_EQ(mainp.unlinks, 1u);
  EXPECT_EQ(mainp.other_io.at("pipe").bytes_read, 10u);
  EXPECT_EQ(mainp.other_io.at("socket").bytes_written, 8192u);
  EXPECT_EQ(worker.pid, kWorker.pid);
  EXPECT_EQ(worker.ppid, kMain.pid);
  EXPECT_EQ(worker.comm, "pt_data_worker");
  EXPECT_EQ(worker.exit_code, 0);
  EXPECT_EQ(worker.end_ns, static_cast<int64_t>(kW) + 1'900'000'000 + kMonoToWall);
  EXPECT_EQ(shell.pid, kShell.pid);
  EXPECT_FALSE(shell.exit_code.has_value());  // exited, wait status unknown
  EXPECT_TRUE(shell.end_ns.has_value());
  EXPECT_EQ(shell.other_io.at("pipe").bytes_written, 5u);

  ASSERT_EQ(run.files.size(), 3u);
  const core::FileSnapshot* ckpt = row(run, kMain.pid, "/ckpt/model.pt");
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(ckpt->rename_sources, 1u);
  EXPECT_EQ(ckpt->unlinks, 1u);
  EXPECT_EQ(ckpt->renamed_to, "");  // not in a trace
  EXPECT_EQ(ckpt->counters.bytes_written, 1050577u);
  EXPECT_EQ(ckpt->counters.write_start_ns, 310'000u);  // relative to the window start
  // The stat by path joins the process's only incarnation of the file, as in a run.
  const core::FileSnapshot* copy_in = row(run, kMain.pid, "/data/train.bin");
  ASSERT_NE(copy_in, nullptr);
  EXPECT_EQ(copy_in->counters.reads, 1u);
  EXPECT_EQ(copy_in->counters.stats, 1u);
  const core::FileSnapshot* data = row(run, kWorker.pid, "/data/train.bin");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->counters.bytes_read, 74728u);
  EXPECT_EQ(data->counters.read_start_ns, 20'000u);
  EXPECT_EQ(worker.totals.bytes_read, 74728u);
}

TEST(TraceReplay, DarshanLogOfTheTraceReadsBackWithDxt) {
  const trace::Trace t = sample_trace();
  const core::RunSnapshot run = exporters::replay_counters(t);
  const exporters::DarshanJobInfo job = exporters::darshan_job_of_trace(t);
  EXPECT_EQ(job.jobid, 4242);
  const std::string log = exporters::darshan_log(run, job, exporters::dxt_of_trace(t, run));
  exporters::DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(exporters::read_darshan_log(log, c, err)) << err;
  EXPECT_NE(c.metadata.find("trace_records_lost=4\n"), std::string::npos) << c.metadata;
  EXPECT_NE(c.metadata.find("job_id=4242\n"), std::string::npos) << c.metadata;
  EXPECT_EQ(c.partial_flag, uint64_t{1} << exporters::kDarshanDxtPosixModule);  // records lost
  EXPECT_EQ(c.dxt_posix_version, 2u);
  ASSERT_EQ(c.dxt_posix.size(), 3u);

  // Every DXT record has the POSIX record of its (id, rank), with as many reads and writes.
  auto counter = [](const exporters::DarshanPosixRecord& r, const char* name) {
    return r.counters[static_cast<size_t>(exporters::darshan_posix_counter_index(name))];
  };
  for (const auto& x : c.dxt_posix) {
    EXPECT_EQ(x.hostname, "node1");
    EXPECT_EQ(x.id, exporters::darshan_record_id(x.path));
    bool found = false;
    for (const auto& p : c.posix) {
      if (p.id != x.id || p.rank != x.rank) continue;
      found = true;
      EXPECT_EQ(counter(p, "READS"), static_cast<int64_t>(x.reads.size())) << x.path;
      EXPECT_EQ(counter(p, "WRITES"), static_cast<int64_t>(x.writes.size())) << x.path;
    }
    EXPECT_TRUE(found) << x.path << " rank " << x.rank;
  }

  const exporters::DarshanDxtRecord* worker = nullptr;
  const exporters::DarshanDxtRecord* ckpt = nullptr;
  for (const auto& x : c.dxt_posix) {
    if (x.rank == 1 && x.path == "/data/train.bin") worker = &x;
    if (x.rank == 0 && x.path == "/ckpt/model.pt") ckpt = &x;
  }
  ASSERT_NE(worker, nullptr);
  ASSERT_EQ(worker->reads.size(), 5u);
  EXPECT_TRUE(worker->writes.empty());
  const int64_t offsets[] = {0, 4096, 100000, 8192, 0};
  const int64_t lengths[] = {4096, 4096, 1000, 0, 65536};
  const uint64_t starts_us[] = {20, 50, 80, 120, 150'010};
  const uint64_t durs_ns[] = {20'000, 15'000, 30'000, 1'000, 50'000};
  const int64_t threads[] = {101, 101, 105, 101, 101};
  for (size_t i = 0; i < 5; ++i) {
    const auto& g = worker->reads[i];
    EXPECT_EQ(g.offset, offsets[i]);
    EXPECT_EQ(g.length, lengths[i]);
    EXPECT_DOUBLE_EQ(g.start, static_cast<double>(starts_us[i] * 1000) / 1e9);
    EXPECT_DOUBLE_EQ(g.end, static_cast<double>(starts_us[i] * 1000 + durs_ns[i]) / 1e9);
    EXPECT_EQ(g.thread, threads[i]);
  }
  ASSERT_NE(ckpt, nullptr);
  ASSERT_EQ(ckpt->writes.size(), 2u);
  ASSERT_EQ(ckpt->reads.size(), 1u);
  EXPECT_EQ(ckpt->writes[1].offset, 1048577);
  EXPECT_EQ(ckpt->writes[1].length, 2000);
  EXPECT_DOUBLE_EQ(ckpt->writes[1].start, 2.4e-3);
  EXPECT_EQ(ckpt->reads[0].length, 100);

  // Version 1 for Darshan <= 3.5's tools: no thread field.
  const std::string v1 = exporters::darshan_log(run, job, exporters::dxt_of_trace(t, run, 1));
  exporters::DarshanLogContents c1;
  ASSERT_TRUE(exporters::read_darshan_log(v1, c1, err)) << err;
  EXPECT_EQ(c1.dxt_posix_version, 1u);
  ASSERT_EQ(c1.dxt_posix.size(), 3u);
  for (const auto& x : c1.dxt_posix)
    for (const auto& g : x.reads) EXPECT_EQ(g.thread, -1);
}

TEST(TraceReplay, JobIdFallsBackToTheFirstProcess) {
  trace::Trace t = sample_trace();
  t.meta.job_id = "k8s-uid-1234";
  EXPECT_EQ(exporters::darshan_job_of_trace(t).jobid, kMain.pid);
  t.losses = {};
  t.complete = false;
  const core::RunSnapshot run = exporters::replay_counters(t);
  const exporters::DarshanDxt dxt = exporters::dxt_of_trace(t, run);
  EXPECT_FALSE(dxt.partial);
  const auto meta = exporters::darshan_job_of_trace(t).metadata;
  EXPECT_NE(std::find(meta.begin(), meta.end(),
                      std::pair<std::string, std::string>{"trace_complete", "0"}),
            meta.end());
}

TEST(TraceReplay, GarbageRecordsGiveAReadableLog) {
  const trace::Trace t = garbage_trace();
  const core::RunSnapshot run = exporters::replay_counters(t);
  const std::string log = exporters::darshan_log(run, exporters::darshan_job_of_trace(t),
                                                 exporters::dxt_of_trace(t, run));
  exporters::DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(exporters::read_darshan_log(log, c, err)) << err;
  // The read that "ends before it starts" is counted with no time; the write with no start is not.
  bool odd = false;
  for (const auto& f : run.files) {
    if (f.pid != 4242) continue;
    odd = true;
    EXPECT_EQ(f.path, "<unknown 0:7:8>");
    EXPECT_EQ(f.counters.reads, 1u);
    EXPECT_EQ(f.counters.writes, 0u);
    EXPECT_EQ(f.counters.read_time_ns, 0u);
    EXPECT_EQ(f.counters.mmaps, 1u);
  }
  EXPECT_TRUE(odd);
}
