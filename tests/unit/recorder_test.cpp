// SPDX-License-Identifier: Apache-2.0
// The recorder fed by generated records (no kernel): folding, names, attribution, processes.
#include <gtest/gtest.h>

#include <string>

#include "core/recorder.hpp"
#include "iolens_abi.h"

using namespace iolens::core;
using namespace std::string_literals;

namespace {

constexpr uint32_t kDev = (8u << 20) | 1;  // 8:1

iolens_file_key key(uint32_t pid, uint64_t pstart, uint64_t ino) {
  iolens_file_key k{};
  k.ino = ino;
  k.dev = kDev;
  k.tgid = pid;
  k.pstart_ns = pstart;
  return k;
}

PathEvent name_event(uint32_t pid, uint64_t pstart, uint64_t ino, std::string walk) {
  PathEvent p;
  p.proc = {pid, pstart};
  p.op = IOLENS_PATH_FILE;
  p.dev = kDev;
  p.ino = ino;
  p.walk = std::move(walk);
  return p;
}

FileCounters reads(uint64_t n, uint64_t bytes, uint64_t start, uint64_t end) {
  FileCounters c = new_counters();
  c.reads = n;
  c.bytes_read = bytes;
  c.max_byte_read = static_cast<int64_t>(bytes) - 1;
  c.read_start_ns = start;
  c.read_end_ns = end;
  c.first_io_type = c.last_io_type = IOLENS_IO_READ;
  return c;
}

const FileSnapshot* find(const RunSnapshot& s, uint32_t pid, const std::string& path) {
  for (const auto& f : s.files)
    if (f.pid == pid && f.path == path) return &f;
  return nullptr;
}

}  // namespace

TEST(Recorder, LiveSnapshotsReplaceRemovedOnesFold) {
  Recorder r(100, 1);
  r.on_event(name_event(100, 5, 9, "a.bin\0data\0"s));
  r.on_file(key(100, 5, 9), reads(1, 10, 1000, 1100), false);
  r.on_file(key(100, 5, 9), reads(2, 20, 1000, 1200), false);  // same incarnation, later
  auto s = r.snapshot(ClockBase{});
  auto* f = find(s, 100, "/data/a.bin");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->counters.reads, 2u);
  EXPECT_EQ(f->counters.bytes_read, 20u);

  // Removed from the kernel, then a new incarnation: the two are folded.
  r.on_file(key(100, 5, 9), reads(3, 30, 1000, 1300), true);
  FileCounters later = new_counters();
  later.writes = 1;
  later.bytes_written = 7;
  later.first_io_type = later.last_io_type = IOLENS_IO_WRITE;
  later.write_start_ns = 2000;
  later.write_end_ns = 2100;
  r.on_file(key(100, 5, 9), later, false);
  s = r.snapshot(ClockBase{});
  f = find(s, 100, "/data/a.bin");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->counters.reads, 3u);
  EXPECT_EQ(f->counters.writes, 1u);
  EXPECT_EQ(f->counters.bytes_read, 30u);
  EXPECT_EQ(f->counters.bytes_written, 7u);
  EXPECT_EQ(f->counters.rw_switches, 1u);  // read part, then a part starting with a write
  EXPECT_EQ(f->counters.read_start_ns, 1000u);
  EXPECT_EQ(f->counters.write_end_ns, 2100u);
}

TEST(Recorder, TimestampsRelativeAndWallClock) {
  Recorder r(100, 1);
  r.on_file(key(100, 5000, 9), reads(1, 1, 6000, 6500), false);
  ClockBase clock{5500, 1'000'000};
  auto s = r.snapshot(clock);
  ASSERT_EQ(s.files.size(), 1u);
  EXPECT_EQ(s.files[0].counters.read_start_ns, 500u);
  EXPECT_EQ(s.files[0].counters.read_end_ns, 1000u);
  EXPECT_EQ(s.files[0].counters.write_start_ns, 0u);  // never: stays 0
  EXPECT_EQ(s.files[0].proc_start_ns, 1'005'000);
}

TEST(Recorder, UnknownNameIsSaidNotInvented) {
  Recorder r(100, 1);
  r.on_file(key(100, 5, 12345), reads(1, 1, 1, 2), false);
  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), 1u);
  EXPECT_FALSE(s.files[0].path_known);
  EXPECT_EQ(s.files[0].path, "<unknown 8:1:12345>");
}

TEST(Recorder, CanonicalNameWinsOverLookupName) {
  Recorder r(100, 1);
  PathEvent lookup;
  lookup.proc = {100, 5};
  lookup.op = IOLENS_PATH_LOOKUP;
  lookup.dev = kDev;
  lookup.ino = 9;
  lookup.walk = "cwd\0"s;
  lookup.str1 = "link/../x.bin";
  r.on_event(lookup);
  r.on_file(key(100, 5, 9), reads(1, 1, 1, 2), false);
  EXPECT_EQ(r.snapshot(ClockBase{}).files[0].path, "/cwd/x.bin");
  r.on_event(name_event(100, 5, 9, "x.bin\0real\0"s));
  EXPECT_EQ(r.snapshot(ClockBase{}).files[0].path, "/real/x.bin");
  r.on_event(lookup);  // a later lexical name does not replace the canonical one
  EXPECT_EQ(r.snapshot(ClockBase{}).files[0].path, "/real/x.bin");
}

TEST(Recorder, RenameAndUnlinkAttributedEvenBeforeTheRecordArrives) {
  Recorder r(100, 1);
  r.on_event(name_event(100, 5, 9, "ckpt.tmp\0d\0"s));
  PathEvent ren;
  ren.proc = {100, 5};
  ren.op = IOLENS_PATH_RENAME;
  ren.walk = "d\0"s;
  ren.str1 = "ckpt.tmp";
  ren.walk2 = "d\0"s;
  ren.str2 = "./ckpt.pt";
  r.on_event(ren);
  PathEvent un;
  un.proc = {100, 5};
  un.op = IOLENS_PATH_UNLINK;
  un.str1 = "/d/ckpt.pt";  // the new name now points at the same file
  r.on_event(un);
  FileCounters w = new_counters();
  w.writes = 64;
  w.bytes_written = 64u << 20;
  r.on_file(key(100, 5, 9), w, false);  // the record arrives at the next drain
  auto s = r.snapshot(ClockBase{});
  auto* f = find(s, 100, "/d/ckpt.tmp");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rename_sources, 1u);
  EXPECT_EQ(f->renamed_to, "/d/ckpt.pt");
  EXPECT_EQ(f->unlinks, 1u);
  EXPECT_EQ(f->counters.writes, 64u);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].renames, 1u);
  EXPECT_EQ(s.processes[0].unlinks, 1u);
}

TEST(Recorder, ProcessTreeExitCodesAndTotals) {
  Recorder r(100, 1);
  ForkEvent fork;
  fork.proc = {101, 20};
  fork.parent = {100, 5};
  fork.comm = "python3";
  r.on_event(fork);
  r.on_event(ExitEvent{{101, 20}, 90, 9});           // SIGKILL
  r.on_event(ExitEvent{{100, 5}, 95, 3 << 8});       // exit(3)
  r.on_file(key(101, 20, 1), reads(2, 200, 30, 40), false);
  r.on_file(key(101, 20, 2), reads(3, 300, 30, 40), false);
  iolens_file_key pipe = key(101, 20, 001);
  pipe.dev = 0;
  FileCounters pw = new_counters();
  pw.writes = 4;
  pw.bytes_written = 44;
  r.on_other(pipe, pw, false);
  EXPECT_TRUE(r.exited({101, 20}));
  EXPECT_FALSE(r.exited({101, 21}));
  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.processes.size(), 2u);
  const auto& root = s.processes[0];
  const auto& child = s.processes[1];
  EXPECT_EQ(root.pid, 100u);
  EXPECT_EQ(root.ppid, 1u);  // the tracer
  EXPECT_EQ(root.exit_code, 3);
  EXPECT_EQ(child.ppid, 100u);
  EXPECT_EQ(child.exit_code, 128 + 9);
  EXPECT_EQ(child.comm, "python3");
  EXPECT_EQ(child.totals.reads, 5u);
  EXPECT_EQ(child.totals.bytes_read, 500u);
  EXPECT_EQ(child.files, 2u);
  ASSERT_TRUE(child.other_io.count("pipe"));
  EXPECT_EQ(child.other_io.at("pipe").bytes_written, 44u);
  EXPECT_EQ(child.totals.writes, 0u);  // pipes never in file totals
}

TEST(Recorder, LostCausesAlwaysPresent) {
  Recorder r(1, 1);
  r.add_lost("decode_errors", 2);
  auto s = r.snapshot(ClockBase{});
  EXPECT_EQ(s.lost.at("decode_errors"), 2u);
  for (const char* c : {"file_records", "other_records", "events", "path_events",
                        "process_events", "untraced_threads", "paths_truncated"})
    EXPECT_EQ(s.lost.count(c), 1u) << c;
}

TEST(ExitCodes, ShellConvention) {
  EXPECT_EQ(exit_code_of_wait_status(0), 0);
  EXPECT_EQ(exit_code_of_wait_status(7 << 8), 7);
  EXPECT_EQ(exit_code_of_wait_status(15), 143);
  EXPECT_EQ(exit_code_of_wait_status(9 | 0x80), 137);  // core-dump bit ignored
}

TEST(Recorder, GenerationsSeparateReusedInodesAndStatsFoldIntoTheOpenedOne) {
  Recorder r(100, 1);
  auto k = [](uint64_t ino, uint32_t gen) {
    iolens_file_key x = key(100, 5, ino);
    x.gen = gen;
    return x;
  };
  PathEvent a = name_event(100, 5, 9, "probe\0d\0"s);
  a.gen = 111;
  PathEvent b = name_event(100, 5, 9, "ckpt.pt\0d\0"s);
  b.gen = 222;
  r.on_event(a);
  r.on_event(b);
  FileCounters w4 = new_counters();
  w4.writes = 1;
  w4.bytes_written = 4;
  FileCounters w100 = new_counters();
  w100.writes = 1;
  w100.bytes_written = 100000;
  r.on_file(k(9, 111), w4, false);
  r.on_file(k(9, 222), w100, false);
  // A path-based stat of another file, before it was opened: generation unknown (0).
  FileCounters st = new_counters();
  st.stats = 2;
  r.on_file(k(10, 0), st, false);
  FileCounters rd = new_counters();
  rd.reads = 1;
  rd.bytes_read = 50;
  r.on_file(k(10, 333), rd, false);
  PathEvent c = name_event(100, 5, 10, "data.npy\0d\0"s);
  c.gen = 333;
  r.on_event(c);

  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), 3u);
  auto* probe = find(s, 100, "/d/probe");
  auto* ckpt = find(s, 100, "/d/ckpt.pt");
  auto* data = find(s, 100, "/d/data.npy");
  ASSERT_NE(probe, nullptr);
  ASSERT_NE(ckpt, nullptr);
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(probe->counters.bytes_written, 4u);
  EXPECT_EQ(ckpt->counters.bytes_written, 100000u);
  EXPECT_EQ(data->counters.stats, 2u);  // the stat record was folded into the opened file
  EXPECT_EQ(data->counters.reads, 1u);
}

TEST(Recorder, RenamedAwayNameNoLongerLeadsToTheFile) {
  Recorder r(100, 1);
  r.on_event(name_event(100, 5, 9, "a.tmp\0d\0"s));
  FileCounters w = new_counters();
  w.writes = 1;
  r.on_file(key(100, 5, 9), w, false);
  PathEvent ren;
  ren.proc = {100, 5};
  ren.op = IOLENS_PATH_RENAME;
  ren.str1 = "/d/a.tmp";
  ren.str2 = "/d/a.pt";
  r.on_event(ren);
  PathEvent un;  // a new, never-seen file created at the old name, then unlinked
  un.proc = {100, 5};
  un.op = IOLENS_PATH_UNLINK;
  un.str1 = "/d/a.tmp";
  r.on_event(un);
  auto s = r.snapshot(ClockBase{});
  auto* f = find(s, 100, "/d/a.tmp");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rename_sources, 1u);
  EXPECT_EQ(f->unlinks, 0u);  // the unlink was of another file
  EXPECT_EQ(s.processes[0].unlinks, 1u);
}

TEST(Counters, FoldableOnlyWhenNothingIsLost) {
  FileCounters c = new_counters();
  c.stats = 3;
  EXPECT_TRUE(foldable(c));  // stats only
  c.opens = 1;
  c.open_fds = 1;
  c.reads = 2;
  EXPECT_FALSE(foldable(c));  // open: its pattern state is live
  c.open_fds = 0;
  EXPECT_TRUE(foldable(c));  // closed: the next open resets the state anyway
  FileCounters inherited = new_counters();
  inherited.reads = 5;
  inherited.open_fds = -1;  // read and closed through a descriptor inherited from the parent
  EXPECT_FALSE(foldable(inherited));
}
