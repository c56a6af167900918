// SPDX-License-Identifier: Apache-2.0
// The recorder fed by generated records (no kernel): folding, names, attribution, processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/paths.hpp"
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

// The rows come out by pid, process start, then path, each with its own counters, whatever
// order the records arrived in (the snapshot orders small entries, then makes each row in place).
TEST(Recorder, SnapshotRowsOrderedWithTheirOwnCounters) {
  Recorder r(100, 1);
  struct Row {
    uint32_t pid;
    uint64_t pstart, ino;
    std::string name;
  };
  std::vector<Row> rows;
  for (uint32_t pid : {300u, 100u, 200u})
    for (uint64_t pstart : {7u, 3u})
      for (int i = 0; i < 40; ++i) {
        // names in an order unlike the inode numbers': ino 1000+i is "f<(i * 7) % 40>"
        rows.push_back({pid, pstart, 1000u + i, "f" + std::to_string(100 + (i * 7) % 40)});
      }
  std::vector<size_t> arrival(rows.size());
  for (size_t i = 0; i < arrival.size(); ++i) arrival[i] = (i * 37) % arrival.size();
  for (size_t i : arrival) {
    const Row& w = rows[i];
    r.on_event(name_event(w.pid, w.pstart, w.ino, w.name + "\0"s + "d\0"s));
    // the counters name the row: reads = ino, bytes = pid * 10 + pstart
    r.on_file(key(w.pid, w.pstart, w.ino), reads(w.ino, w.pid * 10 + w.pstart, 1, 2), false);
  }
  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), rows.size());
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.pid, a.pstart, a.name) < std::tie(b.pid, b.pstart, b.name);
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    const FileSnapshot& f = s.files[i];
    EXPECT_EQ(f.pid, rows[i].pid) << i;
    EXPECT_EQ(f.path, "/d/" + rows[i].name) << i;
    EXPECT_EQ(f.ino, rows[i].ino) << i;
    EXPECT_EQ(f.counters.reads, rows[i].ino) << i;
    EXPECT_EQ(f.counters.bytes_read, rows[i].pid * 10 + rows[i].pstart) << i;
  }
}

// The same with generations (names found by walking the names beside the records), several
// incarnations of one inode, and rows with no name (their "<unknown dev:ino>" path sorts with
// the others'): every row has its own name and counters.
TEST(Recorder, SnapshotRowsOrderedWithGenerationsAndUnknownNames) {
  Recorder r(100, 1);
  struct Row {
    uint32_t pid;
    uint64_t ino;
    uint32_t gen;
    std::string path;  // as the snapshot shows it
  };
  std::vector<Row> rows;
  for (uint32_t pid : {200u, 100u})
    for (int i = 0; i < 30; ++i)
      for (uint32_t gen : {5u, 2u}) {
        const uint64_t ino = 2000u + i;
        // every 7th file has no name; the others' names run against the inode numbers
        const bool named = i % 7 != 3;
        const std::string path = named ? "/d/g" + std::to_string(200 - i) + "." + std::to_string(gen)
                                       : unknown_path(kDev, ino);
        rows.push_back({pid, ino, gen, path});
      }
  for (size_t n = 0; n < rows.size(); ++n) {
    const Row& w = rows[(n * 41) % rows.size()];
    if (w.path.rfind("/d/", 0) == 0) {
      PathEvent e = name_event(w.pid, 1, w.ino, w.path.substr(3) + "\0"s + "d\0"s);
      e.gen = w.gen;
      r.on_event(e);
    }
    iolens_file_key k = key(w.pid, 1, w.ino);
    k.gen = w.gen;
    r.on_file(k, reads(w.ino * 10 + w.gen, w.pid, 1, 2), false);
  }
  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), rows.size());
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.pid, a.path, a.ino, a.gen) < std::tie(b.pid, b.path, b.ino, b.gen);
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    const FileSnapshot& f = s.files[i];
    EXPECT_EQ(f.pid, rows[i].pid) << i;
    EXPECT_EQ(f.path, rows[i].path) << i;
    EXPECT_EQ(f.path_known, rows[i].path.rfind("/d/", 0) == 0) << i;
    EXPECT_EQ(f.ino, rows[i].ino) << i;
    EXPECT_EQ(f.counters.reads, rows[i].ino * 10 + rows[i].gen) << i;
    EXPECT_EQ(f.counters.bytes_read, rows[i].pid) << i;
  }
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

TEST(Counters, LiveEvictionTakesIdleRecordsUntilTheMapIsNearlyFull) {
  FileCounters c = new_counters();
  c.opens = c.closes = 1;
  c.open_fds = 0;
  c.writes = 1;
  c.open_end_ns = 1'000;
  c.write_end_ns = 2'000;
  c.close_end_ns = 3'000;  // the latest end
  EXPECT_EQ(last_activity_ns(c), 3'000u);
  const uint64_t idle = 3'000 + kEvictIdleNs;
  EXPECT_FALSE(live_evictable(c, 50, 100, idle));       // half full: no pressure
  EXPECT_TRUE(live_evictable(c, 51, 100, idle));        // over half, idle long enough
  EXPECT_FALSE(live_evictable(c, 51, 100, idle - 1));   // closed just now: may be reopened
  EXPECT_FALSE(live_evictable(c, 75, 100, 3'000));      // 3/4 full: still only idle ones
  EXPECT_TRUE(live_evictable(c, 76, 100, 3'000));       // over 3/4: any foldable record
  // The last activity given (timing off: IdleClock), not the record's end times.
  EXPECT_FALSE(live_evictable(c, 51, 100, idle, idle - 1));
  EXPECT_TRUE(live_evictable(c, 51, 100, idle, idle - kEvictIdleNs));
  c.meta_end_ns = 5'000;  // a later stat counts as activity
  EXPECT_EQ(last_activity_ns(c), 5'000u);
  EXPECT_FALSE(live_evictable(c, 51, 100, idle));
  c.open_fds = 1;  // open again: never, however full
  EXPECT_FALSE(live_evictable(c, 100, 100, idle + 10'000));
}

// Timing off: a record is idle since the first drain that saw its counters as they are; any
// change starts it again, and a record a drain did not ask about is forgotten.
TEST(Counters, FileKeysHashedByTheirFieldsOnly) {
  // The drain's hashed sets of kernel keys (iolensd's pending keys, IdleClock): every field
  // tells keys apart, the padding does not.
  iolens_file_key a{};
  a.ino = 7;
  a.dev = 0x800001;
  a.tgid = 42;
  a.pstart_ns = 1'000;
  a.gen = 3;
  iolens_file_key b = a;
  b.pad = 0xffffffff;
  EXPECT_TRUE(FileKeyEq{}(a, b));
  EXPECT_EQ(FileKeyHash{}(a), FileKeyHash{}(b));
  for (int field = 0; field < 5; ++field) {
    iolens_file_key c = a;
    if (field == 0) c.ino = 8;
    if (field == 1) c.dev = 0x800002;
    if (field == 2) c.tgid = 43;
    if (field == 3) c.pstart_ns = 1'001;
    if (field == 4) c.gen = 4;
    EXPECT_FALSE(FileKeyEq{}(a, c)) << "field " << field;
    EXPECT_NE(FileKeyHash{}(a), FileKeyHash{}(c)) << "field " << field;
  }
  // A job's named files: dense inode numbers of one device spread over distinct hashes.
  std::set<std::size_t> hashes;
  for (uint64_t ino = 1; ino <= 1000; ++ino)
    hashes.insert(FileIdentityHash{}(FileIdentity{.ino = ino, .dev = 0x800001, .gen = 0}));
  EXPECT_EQ(hashes.size(), 1000u);
  EXPECT_NE(FileIdentityHash{}(FileIdentity{.ino = 1, .dev = 1, .gen = 0}),
            FileIdentityHash{}(FileIdentity{.ino = 1, .dev = 1, .gen = 1}));
}

TEST(Counters, UnchangedRecordsSkipOnlyWhatWasHandedOnAsItIs) {
  FileCounters c = new_counters();
  c.opens = 1;
  c.open_fds = 1;
  c.writes = 2;
  c.bytes_written = 3000;
  iolens_file_key k{};
  k.ino = 7;
  k.tgid = 42;
  k.pstart_ns = 5;
  const uint64_t fp = UnchangedRecords::fingerprint(c);
  UnchangedRecords seen;
  seen.begin();
  EXPECT_FALSE(seen.unchanged(k, fp));  // never handed on
  seen.handed(k, fp);
  seen.end();
  seen.begin();
  EXPECT_TRUE(seen.unchanged(k, fp));
  EXPECT_FALSE(seen.unchanged(k, fp + 1));  // changed since
  iolens_file_key other = k;
  other.tgid = 43;
  EXPECT_FALSE(seen.unchanged(other, fp));  // another process's record of the same file
  seen.end();
  // Removed (handed on as final): a later record of the same key starts afresh, though it may
  // be equal to the old one (timing off: no end times tell them apart).
  seen.removed(k);
  seen.begin();
  EXPECT_FALSE(seen.unchanged(k, fp));
  seen.handed(k, fp);
  seen.end();
  // A walk that did not read it (gone from the map another way): forgotten.
  seen.begin();
  seen.end();
  EXPECT_EQ(seen.size(), 0u);
  seen.begin();
  EXPECT_FALSE(seen.unchanged(k, fp));
  seen.handed(k, fp);
  seen.end();
  // Read unchanged by a walk: kept for the next.
  seen.begin();
  EXPECT_TRUE(seen.unchanged(k, fp));
  seen.end();
  seen.begin();
  EXPECT_TRUE(seen.unchanged(k, fp));
  seen.end();
  seen.clear();
  seen.begin();
  EXPECT_FALSE(seen.unchanged(k, fp));
  seen.end();
}

TEST(Counters, UnchangedRecordsFingerprintSeesEveryWordOfTheCounters) {
  // Any change of any word of the record or of its side entry's slots (a live record's side
  // entry can be newer at a later walk while the record is not) changes the fingerprint.
  FileCounters c = new_counters();
  c.opens = 1;
  c.reads = 9;
  const uint64_t base = UnchangedRecords::fingerprint(c);
  std::set<uint64_t> seen{base};
  constexpr std::size_t kWords = sizeof(FileCounters) / 8;
  static_assert(kWords > sizeof(iolens_file_counters) / 8, "the side entry is in the words");
  for (std::size_t i = 0; i < kWords; ++i) {
    for (uint64_t delta : {uint64_t{1}, uint64_t{1} << 63}) {
      FileCounters d = c;
      uint64_t w;
      std::memcpy(&w, reinterpret_cast<const char*>(&d) + i * 8, 8);
      w += delta;
      std::memcpy(reinterpret_cast<char*>(&d) + i * 8, &w, 8);
      const uint64_t fp = UnchangedRecords::fingerprint(d);
      EXPECT_NE(fp, base) << "word " << i << " + " << delta;
      seen.insert(fp);
    }
  }
  EXPECT_EQ(seen.size(), 1 + 2 * kWords);  // and no two changes alike
  EXPECT_EQ(UnchangedRecords::fingerprint(c), base);  // the same counters, the same
}

TEST(Counters, IdleClockTellsIdleRecordsByUnchangedCounters) {
  FileCounters c = new_counters();
  c.opens = c.closes = 1;
  c.open_fds = 0;
  c.reads = 3;
  iolens_file_key k{};
  k.ino = 7;
  k.tgid = 42;
  IdleClock clock;
  const uint64_t t = 1'000'000'000;
  clock.begin();
  EXPECT_EQ(clock.since(k, c, t), t);  // first seen: idle from now on at most
  clock.end();
  clock.begin();
  EXPECT_EQ(clock.since(k, c, t + 5'000'000), t);  // unchanged: idle since the first drain
  clock.end();
  // Through drain_evictable, with the map over half full (51 of 100) and no end time at all:
  clock.begin();
  EXPECT_FALSE(drain_evictable(k, c, 51, 100, t + kEvictIdleNs - 1, &clock));
  clock.end();
  clock.begin();
  EXPECT_TRUE(drain_evictable(k, c, 51, 100, t + kEvictIdleNs, &clock));
  clock.end();
  c.reads = 4;  // a call: idle again only from this drain on
  clock.begin();
  EXPECT_FALSE(drain_evictable(k, c, 51, 100, t + 2 * kEvictIdleNs, &clock));
  clock.end();
  clock.begin();
  EXPECT_TRUE(drain_evictable(k, c, 51, 100, t + 3 * kEvictIdleNs, &clock));
  clock.end();
  clock.begin();
  clock.end();  // a drain that did not ask about it: forgotten
  EXPECT_EQ(clock.tracked(), 0u);
  clock.begin();
  EXPECT_EQ(clock.since(k, c, t + 4 * kEvictIdleNs), t + 4 * kEvictIdleNs);
  clock.end();
  // Without the clock (timing exact) the record's own end times decide: none here means "idle
  // since 0", taken at once.
  EXPECT_TRUE(drain_evictable(k, c, 51, 100, t, nullptr));
  // Half full or not foldable: never, whatever the clock says.
  clock.begin();
  EXPECT_FALSE(drain_evictable(k, c, 50, 100, t + 9 * kEvictIdleNs, &clock));
  c.open_fds = 1;
  EXPECT_FALSE(drain_evictable(k, c, 99, 100, t + 9 * kEvictIdleNs, &clock));
  clock.end();
}

// ---- Bounded memory: fold_to ----

namespace {

/// The Fold::Sum counters must be equal: what the process totals hold.
void expect_same_sums(const FileCounters& want, const FileCounters& got, const std::string& what) {
  for (const auto& f : counter_fields()) {
    if (f.fold != Fold::Sum) continue;
    EXPECT_EQ(counter_value(want, f), counter_value(got, f)) << what << " " << f.name;
  }
}

const ProcessSnapshot* find_proc(const RunSnapshot& s, uint32_t pid) {
  for (const auto& p : s.processes)
    if (p.pid == pid) return &p;
  return nullptr;
}

/// The process totals are its rows plus its folded record (docs/counters.md#folded-records).
void expect_rows_plus_folded_make_totals(const RunSnapshot& s) {
  for (const auto& p : s.processes) {
    FileCounters sum{};
    for (const auto& f : s.files)
      if (f.pid == p.pid && f.proc_start_ns == p.start_ns) add_totals(sum, f.counters);
    if (p.folded) add_totals(sum, *p.folded);
    EXPECT_EQ(p.folded.has_value(), p.folded_files > 0) << "pid " << p.pid;
    expect_same_sums(p.totals, sum, "pid " + std::to_string(p.pid) + " rows + folded:");
  }
}

/// Recorder::summary() is the sums over the snapshot's processes (what `iolens jobs` shows of a
/// live job without building its snapshot).
void expect_summary_is_snapshots(const Recorder& r, const RunSnapshot& s, const std::string& what) {
  const Recorder::Summary got = r.summary();
  FileCounters totals{};
  uint64_t files = 0, folded_files = 0;
  for (const auto& p : s.processes) {
    add_totals(totals, p.totals);
    files += p.files;
    folded_files += p.folded_files;
  }
  EXPECT_EQ(got.files, files) << what;
  EXPECT_EQ(got.folded_files, folded_files) << what;
  expect_same_sums(totals, got.totals, what + " summary totals:");
}

/// A record with some of everything the process totals sum.
FileCounters busy(uint64_t bytes, uint64_t calls, uint64_t t) {
  FileCounters c = new_counters();
  c.opens = 1;
  c.closes = 1;
  c.reads = calls;
  c.bytes_read = bytes;
  c.max_byte_read = static_cast<int64_t>(bytes) - 1;
  c.seq_reads = calls - 1;
  c.consec_reads = calls - 1;
  c.size_read[bytes / calls <= 100 ? 0 : 2] = calls;
  c.read_time_ns = 10 * calls;
  c.meta_time_ns = 3;
  c.max_read_time_ns = 10;
  c.open_start_ns = t;
  c.open_end_ns = t + 1;
  c.read_start_ns = t + 1;
  c.read_end_ns = t + 1 + 10 * calls;
  c.close_start_ns = c.close_end_ns = t + 2 + 10 * calls;
  c.first_io_type = c.last_io_type = IOLENS_IO_READ;
  return c;
}

}  // namespace

// A record with no call of its own (all counters zero) is no row, unless a stat by path joins it:
// the summary `iolens jobs` shows counts the rows the record's snapshot has, one each here.
TEST(Recorder, SummaryCountsTheRowsOfTheSnapshot) {
  Recorder r(100, 1);
  auto k = [](uint32_t pid, uint64_t ino, uint32_t gen) {
    iolens_file_key x = key(pid, 5, ino);
    x.gen = gen;
    return x;
  };
  FileCounters none = new_counters();
  none.meta_time_ns = 7;  // a failed close's time: no call counted, no row, not in the totals
  FileCounters st = new_counters();
  st.stats = 1;
  FileCounters rd = new_counters();
  rd.opens = rd.reads = rd.closes = 1;
  rd.bytes_read = 10;
  r.on_file(k(100, 1, 7), none, true);  // no calls: no row
  r.on_file(k(100, 2, 7), none, true);  // no calls of its own, but a stat joins it: a row
  r.on_file(k(100, 2, 0), st, true);
  r.on_file(k(100, 3, 7), rd, true);    // a row
  r.on_file(k(101, 3, 0), st, true);    // a stat alone: a row of its own
  const RunSnapshot s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), 3u);
  expect_summary_is_snapshots(r, s, "before the fold");
  EXPECT_EQ(r.summary().files, 3u);
  EXPECT_EQ(r.summary().totals.stats, 2u);
  EXPECT_EQ(r.summary().totals.bytes_read, 10u);
  EXPECT_EQ(r.summary().totals.meta_time_ns, 7u);  // the record a stat joins has a row
  // Folded, the same files are counted from the folded records.
  r.fold_to(1);
  expect_summary_is_snapshots(r, r.snapshot(ClockBase{}), "after the fold");
}

TEST(Fold, TwoHundredThousandRecordsUnderFiftyThousand) {
  constexpr uint32_t kFiles = 200'000;
  constexpr std::size_t kMax = 50'000;
  Recorder r(100, 1);
  FileCounters want{};
  std::vector<uint64_t> sizes;
  sizes.reserve(kFiles);
  for (uint32_t i = 1; i <= kFiles; ++i) {
    // Distinct sizes in a scrambled order (48271 is invertible modulo the prime 200003).
    const uint64_t bytes = (uint64_t{i} * 48271) % 200003;
    r.on_event(name_event(100, 5, i, "f" + std::to_string(i) + "\0d\0"s));
    const FileCounters c = busy(bytes, 1 + i % 7, 1000 + i);
    r.on_file(key(100, 5, i), c, true);
    add_totals(want, c);
    sizes.push_back(bytes);
  }
  ASSERT_EQ(r.memory().names, kFiles);
  ASSERT_EQ(r.memory().paths, kFiles);

  std::vector<FileIdentity> forgotten;
  const std::size_t folded = r.fold_to(kMax, &forgotten);
  EXPECT_LE(r.file_records(), kMax);
  EXPECT_EQ(r.file_records(), kMax * 9 / 10);  // hysteresis: 10% of room left
  EXPECT_EQ(folded, kFiles - r.file_records());
  EXPECT_EQ(r.folded_records(), folded);
  EXPECT_EQ(forgotten.size(), folded);
  EXPECT_EQ(r.fold_to(kMax), 0u);  // under the limit: nothing to do
  const auto mem = r.memory();
  EXPECT_EQ(mem.names, r.file_records());  // the folded files' names are gone
  EXPECT_EQ(mem.paths, r.file_records());
  EXPECT_EQ(mem.forgotten_paths, folded);
  EXPECT_EQ(mem.folded_files, folded);

  const auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.processes.size(), 1u);
  const auto& p = s.processes[0];
  expect_same_sums(want, p.totals, "totals");
  EXPECT_EQ(p.totals.bytes_read, want.bytes_read);
  EXPECT_EQ(p.totals.reads, want.reads);
  EXPECT_EQ(p.totals.opens, kFiles);
  EXPECT_EQ(p.totals.read_time_ns, want.read_time_ns);
  EXPECT_EQ(p.files, kFiles);
  EXPECT_EQ(p.folded_files, folded);
  EXPECT_EQ(s.folded_records, folded);
  EXPECT_EQ(s.folded_only_files, folded);
  ASSERT_TRUE(p.folded.has_value());
  EXPECT_EQ(p.folded->opens, folded);
  expect_rows_plus_folded_make_totals(s);

  // The records kept are the biggest ones.
  std::vector<uint64_t> sorted = sizes;
  std::sort(sorted.begin(), sorted.end());
  const uint64_t smallest_kept = sorted[folded];
  uint64_t first_folded_start = UINT64_MAX, last_folded_close = 0;
  for (uint32_t i = 1; i <= kFiles; ++i) {
    if (sizes[i - 1] >= smallest_kept) continue;
    const FileCounters c = busy(sizes[i - 1], 1 + i % 7, 1000 + i);
    first_folded_start = std::min<uint64_t>(first_folded_start, c.read_start_ns);
    last_folded_close = std::max<uint64_t>(last_folded_close, c.close_end_ns);
  }
  EXPECT_EQ(p.folded->read_start_ns, first_folded_start);  // first start, last end
  EXPECT_EQ(p.folded->close_end_ns, last_folded_close);
  ASSERT_EQ(s.files.size(), r.file_records());
  for (const auto& f : s.files) ASSERT_GE(f.counters.bytes_read, smallest_kept) << f.path;
  EXPECT_LT(p.folded->max_byte_read, static_cast<int64_t>(smallest_kept));
}

// The names' bytes can ask for more records than the count does (the fold first orders only
// the tenth the count needs), or be all that asks (a count bound above the records held): the
// records folded are still the least useful, in order, the same whichever order they arrived in.
TEST(Fold, ANameBoundBeyondTheCountStillTakesTheLeastUsefulFirst) {
  constexpr uint32_t kFiles = 200;
  const std::string long_name(400, 'n');
  std::vector<uint64_t> kept_sizes;
  for (int run = 0; run < 4; ++run) {
    const int arrival = run % 2;
    // The count alone would fold 200 - 171 = 29 records; or none, with a bound of 1000.
    const std::size_t max_records = run < 2 ? 190 : 1000;
    SCOPED_TRACE("arrival " + std::to_string(arrival) + ", max " + std::to_string(max_records));
    Recorder r(100, 1);
    for (uint32_t n = 0; n < kFiles; ++n) {
      const uint32_t i = arrival ? kFiles - 1 - n : (n * 37) % kFiles;  // a permutation
      const uint64_t bytes = 1000 + (i * 7919) % kFiles;  // distinct sizes, not in inode order
      r.on_event(name_event(100, 1, 1 + i, long_name + std::to_string(i) + "\0"s + "d\0"s));
      r.on_file(key(100, 1, 1 + i), busy(bytes, 1 + i % 5, 1000 + i), true);
    }
    const std::size_t before = r.name_bytes();
    // the names' bound asks for about half
    const std::size_t folded = r.fold_to(max_records, nullptr, before / 2);
    EXPECT_GT(folded, 80u);
    EXPECT_LE(r.name_bytes(), before / 2 / 10 * 9);
    const RunSnapshot s = r.snapshot(ClockBase{});
    ASSERT_EQ(s.files.size(), kFiles - folded);
    std::vector<uint64_t> kept;
    for (const auto& f : s.files) kept.push_back(f.counters.bytes_read);
    std::sort(kept.begin(), kept.end());
    // the biggest ones are kept: exactly the sizes 1000 + folded .. 1000 + kFiles - 1
    for (std::size_t j = 0; j < kept.size(); ++j) EXPECT_EQ(kept[j], 1000 + folded + j) << j;
    if (run == 0)
      kept_sizes = kept;
    else
      EXPECT_EQ(kept, kept_sizes);
  }
}

TEST(Fold, LiveRecordsAreNeverFolded) {
  Recorder r(100, 1);
  for (uint64_t i = 1; i <= 5; ++i) r.on_file(key(100, 5, i), busy(1, 1, 10), false);  // live
  for (uint64_t i = 6; i <= 10; ++i) r.on_file(key(100, 5, i), busy(1000, 1, 10), true);
  EXPECT_EQ(r.fold_to(2), 5u);  // only the five out of the kernel, although bigger
  EXPECT_EQ(r.file_records(), 5u);
  EXPECT_EQ(r.fold_to(2), 0u);  // still nothing out of the kernel
  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), 5u);
  for (const auto& f : s.files) EXPECT_LE(f.ino, 5u);
  EXPECT_EQ(s.processes[0].files, 10u);
  EXPECT_EQ(s.processes[0].totals.bytes_read, 5u * 1 + 5u * 1000);
  // Once the kernel has let go of them, they can go too.
  for (uint64_t i = 1; i <= 5; ++i) r.on_file(key(100, 5, i), busy(1, 1, 10), true);
  EXPECT_EQ(r.fold_to(2), 4u);  // down to 2 * 9 / 10 = 1
  EXPECT_EQ(r.file_records(), 1u);
  s = r.snapshot(ClockBase{});
  EXPECT_EQ(s.processes[0].files, 10u);
  EXPECT_EQ(s.processes[0].totals.bytes_read, 5u * 1 + 5u * 1000);
  EXPECT_EQ(r.folded_records(), 9u);
}

TEST(Fold, OrderIsBytesThenCallsThenOldest) {
  Recorder r(100, 1);
  r.on_file(key(100, 5, 1), busy(10, 1, 500), true);   // old
  r.on_file(key(100, 5, 2), busy(10, 1, 100), true);   // older: goes first
  r.on_file(key(100, 5, 3), busy(10, 3, 50), true);    // more calls
  r.on_file(key(100, 5, 4), busy(20, 1, 10), true);    // more bytes
  EXPECT_EQ(r.fold_to(3), 2u);                          // 3 * 9 / 10 = 2 left
  auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.files[0].ino + s.files[1].ino, 3u + 4u);
  EXPECT_EQ(r.fold_to(1), 2u);
  s = r.snapshot(ClockBase{});
  EXPECT_EQ(s.files.size(), 0u);
  EXPECT_EQ(s.processes[0].files, 4u);
  EXPECT_EQ(s.processes[0].folded_files, 4u);
}

TEST(Fold, FileSeenAgainCountsOnceAndItsSwitchIsKept) {
  // Two recorders fed the same records; one folds. Totals and file counts must not differ.
  Recorder folded(100, 1), plain(100, 1);
  auto both = [&](auto f) {
    f(folded);
    f(plain);
  };
  both([](Recorder& r) {
    r.on_event(name_event(100, 5, 1, "a\0d\0"s));
    r.on_file(key(100, 5, 1), busy(5, 1, 10), true);  // read, then moved out of the kernel
    r.on_file(key(100, 5, 2), busy(500, 5, 10), true);
    r.on_file(key(100, 5, 3), busy(900, 5, 10), true);
  });
  EXPECT_EQ(folded.fold_to(2), 2u);  // a and 2 go
  EXPECT_EQ(folded.memory().names, 0u);
  both([](Recorder& r) {
    FileCounters w = new_counters();  // the process writes to a again
    w.opens = 1;
    w.writes = 2;
    w.bytes_written = 8;
    w.first_io_type = w.last_io_type = IOLENS_IO_WRITE;
    r.on_file(key(100, 5, 1), w, false);
  });
  const auto a = folded.snapshot(ClockBase{});
  const auto b = plain.snapshot(ClockBase{});
  ASSERT_EQ(a.processes.size(), 1u);
  expect_same_sums(b.processes[0].totals, a.processes[0].totals, "folded vs plain");
  EXPECT_EQ(b.processes[0].totals.rw_switches, 1u);  // the read part, then the write part
  EXPECT_EQ(a.processes[0].files, 3u);
  EXPECT_EQ(b.processes[0].files, 3u);
  EXPECT_EQ(a.processes[0].folded_files, 2u);
  expect_rows_plus_folded_make_totals(a);
  // The new part has a row of its own, counted once; its name was forgotten with the fold
  // (the kernel sends a name once: fold_to's `forgotten` says which to ask for again).
  ASSERT_EQ(a.files.size(), 2u);
  EXPECT_EQ(a.files[0].ino, 1u);
  EXPECT_EQ(a.files[0].counters.writes, 2u);
  EXPECT_EQ(a.files[0].counters.rw_switches, 1u);
  // Folded again, it is still one file.
  FileCounters w = new_counters();  // the kernel's final snapshot of the new part
  w.opens = 1;
  w.writes = 2;
  w.bytes_written = 8;
  w.first_io_type = w.last_io_type = IOLENS_IO_WRITE;
  folded.on_file(key(100, 5, 1), w, true);
  EXPECT_EQ(folded.fold_to(1), 2u);
  const auto c = folded.snapshot(ClockBase{});
  EXPECT_EQ(c.processes[0].files, 3u);
  EXPECT_EQ(c.processes[0].folded_files, 3u);
  expect_same_sums(b.processes[0].totals, c.processes[0].totals, "folded twice vs plain");
}

TEST(Fold, ForgottenNameStillAttributesUnlinkAndRename) {
  Recorder folded(100, 1), plain(100, 1);
  auto both = [&](auto f) {
    f(folded);
    f(plain);
  };
  both([](Recorder& r) {
    r.on_event(name_event(100, 5, 1, "a.tmp\0d\0"s));
    r.on_event(name_event(100, 5, 2, "b\0d\0"s));
    r.on_event(name_event(100, 5, 3, "big\0d\0"s));
    r.on_file(key(100, 5, 1), busy(1, 1, 10), true);
    r.on_file(key(100, 5, 2), busy(2, 1, 10), true);
    r.on_file(key(100, 5, 3), busy(1000, 1, 10), true);
  });
  std::vector<FileIdentity> forgotten;
  EXPECT_EQ(folded.fold_to(2, &forgotten), 2u);
  ASSERT_EQ(forgotten.size(), 2u);
  EXPECT_EQ(forgotten[0], (FileIdentity{1, kDev, 0}));
  EXPECT_EQ(folded.memory().names, 1u);
  EXPECT_EQ(folded.memory().forgotten_paths, 2u);
  both([](Recorder& r) {
    PathEvent ren;  // a.tmp -> a.pt by this process, then b unlinked by another one
    ren.proc = {100, 5};
    ren.op = IOLENS_PATH_RENAME;
    ren.str1 = "/d/a.tmp";
    ren.str2 = "/d/a.pt";
    r.on_event(ren);
    PathEvent un;
    un.proc = {200, 6};
    un.op = IOLENS_PATH_UNLINK;
    un.str1 = "/d/b";
    r.on_event(un);
    PathEvent un2 = un;  // the renamed file, by its new name
    un2.str1 = "/d/a.pt";
    r.on_event(un2);
  });
  const auto a = folded.snapshot(ClockBase{});
  const auto b = plain.snapshot(ClockBase{});
  for (uint32_t pid : {100u, 200u}) {
    const auto* pa = find_proc(a, pid);
    const auto* pb = find_proc(b, pid);
    ASSERT_NE(pa, nullptr);
    ASSERT_NE(pb, nullptr);
    EXPECT_EQ(pa->files, pb->files) << pid;
    EXPECT_EQ(pa->unlinks, pb->unlinks) << pid;
    EXPECT_EQ(pa->renames, pb->renames) << pid;
    expect_same_sums(pb->totals, pa->totals, "pid " + std::to_string(pid));
  }
  EXPECT_EQ(find_proc(a, 200)->files, 2u);  // it removed two files it never opened
  const auto* renamed = find(a, 100, "/d/a.tmp");
  ASSERT_NE(renamed, nullptr);  // named again by the path it was renamed from
  EXPECT_EQ(renamed->rename_sources, 1u);
  EXPECT_EQ(renamed->renamed_to, "/d/a.pt");
  EXPECT_NE(find(a, 200, "/d/b"), nullptr);
  const auto* gone = find(a, 200, "/d/a.tmp");  // the file's name: where it was first seen
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->unlinks, 1u);
  expect_rows_plus_folded_make_totals(a);
  // The name bytes kept up to date through folds, revivals and renames are what a loaded copy
  // counts from scratch.
  for (const Recorder* r : {&folded, &plain}) {
    std::string error;
    const auto copy = Recorder::load(r->save(), error);
    ASSERT_NE(copy, nullptr) << error;
    EXPECT_EQ(copy->name_bytes(), r->name_bytes());
    EXPECT_GT(r->name_bytes(), 0u);
  }
}

TEST(Fold, StatByPathGoesWithItsFile) {
  Recorder r(100, 1);
  auto k = [](uint64_t ino, uint32_t gen) {
    iolens_file_key x = key(100, 5, ino);
    x.gen = gen;
    return x;
  };
  FileCounters st = new_counters();
  st.stats = 2;
  st.meta_time_ns = 4;
  r.on_file(k(9, 0), st, true);                   // a stat by path, before the open
  r.on_file(k(9, 77), busy(50, 1, 10), true);      // the opened file
  r.on_file(k(10, 88), busy(5000, 1, 10), true);
  r.on_file(k(11, 99), busy(6000, 1, 10), true);
  // The stat is the least useful record, but it belongs to ino 9's row: they go together.
  EXPECT_EQ(r.fold_to(3), 2u);
  EXPECT_EQ(r.file_records(), 2u);
  auto s = r.snapshot(ClockBase{});
  EXPECT_EQ(s.processes[0].files, 3u);
  EXPECT_EQ(s.processes[0].folded_files, 1u);
  EXPECT_EQ(s.processes[0].totals.stats, 2u);
  EXPECT_EQ(s.processes[0].folded->stats, 2u);
  // Another stat by path of ino 9 after the fold joins the folded file: still one file.
  r.on_file(k(9, 0), st, false);
  s = r.snapshot(ClockBase{});
  EXPECT_EQ(s.processes[0].files, 3u);
  EXPECT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.processes[0].totals.stats, 4u);
  EXPECT_EQ(s.processes[0].folded->stats, 4u);
  expect_rows_plus_folded_make_totals(s);
}

TEST(Fold, NamesStayWhileAStatByPathNeedsThem) {
  Recorder r(100, 1);
  auto k = [](uint64_t ino, uint32_t gen) {
    iolens_file_key x = key(100, 5, ino);
    x.gen = gen;
    return x;
  };
  for (uint32_t gen : {77u, 78u}) {  // the inode reused: two files, then a stat of one of them
    PathEvent n = name_event(100, 5, 9, "ckpt\0d\0"s);
    n.gen = gen;
    r.on_event(n);
    r.on_file(k(9, gen), busy(10, 1, 10), true);
  }
  FileCounters st = new_counters();
  st.stats = 1;
  r.on_file(k(9, 0), st, false);  // which incarnation is unknown: a row of its own
  r.on_file(k(10, 1), busy(5000, 1, 10), true);
  EXPECT_EQ(r.fold_to(3), 2u);
  const auto s = r.snapshot(ClockBase{});
  EXPECT_EQ(s.processes[0].files, 4u);
  const auto* stat = find(s, 100, "/d/ckpt");  // still named, from the folded incarnations
  ASSERT_NE(stat, nullptr);
  EXPECT_EQ(stat->counters.stats, 1u);
  EXPECT_EQ(r.memory().names, 2u);
}

TEST(Fold, TheObserverSeesEachRecordTakenOnceNamedWithItsCounters) {
  // What iolensd keeps its folded class sums from: every file record a fold takes, once, with
  // its name and counters; never one it keeps. Bytes by path are the test's own.
  Recorder r(100, 1);
  ForkEvent fork;
  fork.proc = {101, 20};
  fork.parent = {100, 5};
  fork.comm = "worker";
  r.on_event(fork);
  std::map<std::string, uint64_t> made;  // path ("" = no name) -> bytes read, as made here
  for (uint64_t i = 1; i <= 20; ++i) {   // process 100: /d/f1 .. /d/f20, 100 * i bytes
    r.on_event(name_event(100, 5, i, "f" + std::to_string(i) + "\0d\0"s));
    r.on_file(key(100, 5, i), busy(100 * i, 1, 10), true);
    made["/d/f" + std::to_string(i)] += 100 * i;
  }
  r.on_file(key(100, 5, 500), busy(7, 1, 10), true);  // a record whose name never came
  made[""] += 7;
  for (uint64_t i = 1; i <= 5; ++i) {  // the worker: /d/g1 .. /d/g5, 5000 + i bytes
    r.on_event(name_event(101, 20, 100 + i, "g" + std::to_string(i) + "\0d\0"s));
    r.on_file(key(101, 20, 100 + i), busy(5000 + i, 1, 10), true);
    made["/d/g" + std::to_string(i)] += 5000 + i;
  }
  r.on_file(key(100, 5, 600), busy(1, 1, 10), false);  // live (and unnamed): never taken
  made[""] += 1;
  r.on_event(ExitEvent{{101, 20}, 90, 0});

  std::map<std::string, uint64_t> seen;
  std::size_t calls = 0;
  const Recorder::RecordVisitor observe = [&](const Recorder::RecordView& v) {
    ++calls;
    EXPECT_FALSE(v.other_files);
    seen[v.path ? *v.path : ""] += v.counters.bytes_read;
  };
  auto kept = [&] {
    std::map<std::string, uint64_t> k;
    r.visit_records([&](const Recorder::RecordView& v) {
      if (!v.other_files) k[v.path ? *v.path : ""] += v.counters.bytes_read;
    });
    return k;
  };
  // 27 records down to 9: the 18 smallest go (the unnamed one, /d/f1 .. /d/f17), not the live one.
  const std::size_t folded = r.fold_to(10, nullptr, SIZE_MAX, &observe);
  EXPECT_EQ(folded, 18u);
  EXPECT_EQ(calls, folded);
  EXPECT_EQ(seen.count("/d/f18"), 0u);
  EXPECT_EQ(seen[""], 7u);
  for (uint64_t i = 1; i <= 17; ++i) EXPECT_EQ(seen["/d/f" + std::to_string(i)], 100 * i) << i;
  // Taken plus kept is what was made, path by path.
  auto check = [&] {
    const auto k = kept();
    for (const auto& [path, bytes] : made) {
      const uint64_t got = (seen.count(path) ? seen.at(path) : 0) + (k.count(path) ? k.at(path) : 0);
      EXPECT_EQ(got, bytes) << path;
    }
  };
  check();
  // The worker exited: folding processes takes its five records, each once, named.
  calls = 0;
  const auto gone = r.fold_processes_to(1, nullptr, &observe);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], (ProcKey{101, 20}));
  EXPECT_EQ(calls, 5u);
  for (uint64_t i = 1; i <= 5; ++i) EXPECT_EQ(seen["/d/g" + std::to_string(i)], 5000 + i) << i;
  check();
  // Nothing left to fold: not called.
  calls = 0;
  EXPECT_EQ(r.fold_to(10, nullptr, SIZE_MAX, &observe), 0u);
  EXPECT_EQ(calls, 0u);
}

TEST(Fold, MatchesAnUnfoldedTwinOnAMixedWorkload) {
  // Processes sharing files, re-opened files, stats by path, reused inodes, renames and
  // unlinks, with fold_to after every "drain": every process's totals and file count, and the
  // run's distinct files, must equal those of a recorder that never folds.
  Recorder folded(0, 0), plain(0, 0);
  uint64_t seed = 12345;
  auto rnd = [&](uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % n;
  };
  auto both = [&](auto f) {
    f(folded);
    f(plain);
  };
  std::size_t total_folded = 0;
  for (int round = 0; round < 60; ++round) {
    for (int op = 0; op < 200; ++op) {
      const uint32_t pid = 10 + static_cast<uint32_t>(rnd(4));
      const uint64_t ino = 1 + rnd(300);
      const uint32_t gen = rnd(10) == 0 ? 0 : 1 + static_cast<uint32_t>(rnd(2));
      const uint64_t what = rnd(10);
      iolens_file_key fk = key(pid, pid * 1000, ino);
      fk.gen = gen;
      if (what == 0 && gen != 0) {
        PathEvent n = name_event(pid, pid * 1000, ino, "f" + std::to_string(ino) + "\0d\0"s);
        n.gen = gen;
        both([&](Recorder& r) { r.on_event(n); });
      } else if (what == 1) {
        PathEvent u;
        u.proc = {pid, pid * 1000u};
        u.op = rnd(2) ? IOLENS_PATH_UNLINK : IOLENS_PATH_RENAME;
        u.str1 = "/d/f" + std::to_string(ino);
        u.str2 = "/d/g" + std::to_string(ino);
        both([&](Recorder& r) { r.on_event(u); });
      } else {
        FileCounters c = new_counters();
        if (gen == 0) {
          c.stats = 1;
        } else if (rnd(2)) {
          c = busy(1 + rnd(5000), 1 + rnd(4), round * 1000 + op);
        } else {
          c.opens = 1;
          c.writes = 1 + rnd(3);
          c.bytes_written = rnd(100);
          c.write_time_ns = rnd(50);
          c.first_io_type = c.last_io_type = IOLENS_IO_WRITE;
          if (rnd(2)) {  // read, then wrote
            c.first_io_type = IOLENS_IO_READ;
            c.reads = 1;
            c.rw_switches = 1;
          }
        }
        const bool removed = rnd(3) != 0;
        both([&](Recorder& r) { r.on_file(fk, c, removed); });
      }
    }
    total_folded += folded.fold_to(40 + rnd(40));
    const auto a = folded.snapshot(ClockBase{});
    const auto b = plain.snapshot(ClockBase{});
    ASSERT_EQ(a.processes.size(), b.processes.size());
    for (std::size_t i = 0; i < a.processes.size(); ++i) {
      const auto& pa = a.processes[i];
      const auto& pb = b.processes[i];
      const std::string what = "round " + std::to_string(round) + " pid " + std::to_string(pa.pid);
      EXPECT_EQ(pa.pid, pb.pid);
      EXPECT_EQ(pa.ppid, 0u) << what;
      EXPECT_EQ(pa.files, pb.files) << what;
      EXPECT_EQ(pa.unlinks, pb.unlinks) << what;
      EXPECT_EQ(pa.renames, pb.renames) << what;
      expect_same_sums(pb.totals, pa.totals, what);
      uint64_t ua = pa.folded_unlinks, ub = 0, ra = pa.folded_rename_sources, rb = 0;
      for (const auto& f : a.files)
        if (f.pid == pa.pid) ua += f.unlinks, ra += f.rename_sources;
      for (const auto& f : b.files)
        if (f.pid == pb.pid) ub += f.unlinks, rb += f.rename_sources;
      EXPECT_EQ(ua, ub) << what;
      EXPECT_EQ(ra, rb) << what;
    }
    expect_rows_plus_folded_make_totals(a);
    expect_summary_is_snapshots(folded, a, "round " + std::to_string(round) + " folded");
    expect_summary_is_snapshots(plain, b, "round " + std::to_string(round) + " plain");
    std::set<std::pair<uint64_t, uint64_t>> da, db;
    for (const auto& f : a.files) da.insert({f.dev, f.ino});
    for (const auto& f : b.files) db.insert({f.dev, f.ino});
    EXPECT_EQ(da.size() + a.folded_only_files, db.size()) << "round " << round;
    if (HasFailure()) break;
  }
  EXPECT_GT(total_folded, 1000u);  // the workload did fold, many times
  EXPECT_EQ(folded.folded_records(), total_folded);
  EXPECT_LT(folded.memory().names, plain.memory().names);
}

namespace {

/// The kernel's walk of an absolute path: its components leaf first, each NUL-ended.
std::string walk_of(const std::string& path) {
  std::string w;
  for (std::size_t end = path.size(); end > 0;) {
    const std::size_t slash = path.rfind('/', end - 1);
    w += path.substr(slash + 1, end - slash - 1);
    w += '\0';
    end = slash;
  }
  return w;
}

PathEvent canonical_name(const ProcKey& p, uint64_t ino, uint32_t gen, const std::string& path) {
  PathEvent e = name_event(p.pid, p.start_ns, ino, walk_of(path));
  e.gen = gen;
  return e;
}

PathEvent by_path(const ProcKey& p, uint16_t op, const std::string& from,
                  const std::string& to = "") {
  PathEvent e;
  e.proc = p;
  e.op = op;
  e.str1 = from;
  e.str2 = to;
  return e;
}

/// The row of `pid` for file `ino`, or nullptr.
const FileSnapshot* find_ino(const RunSnapshot& s, uint32_t pid, uint64_t ino) {
  for (const auto& f : s.files)
    if (f.pid == pid && f.ino == ino) return &f;
  return nullptr;
}

}  // namespace

// A fold forgets the names of the files it took: each path leading to one moves to the hashed
// index. A file whose only path is its name's is found without walking every path held; a
// walk is left to files with other paths (a hard link, a rename target, a replaced name).
TEST(Fold, OnePathEachIsFoundWithoutAWalkOtherPathsAreWalkedFor) {
  const ProcKey p{100, 5};
  auto file = [&](Recorder& r, uint64_t ino, uint64_t bytes) {
    iolens_file_key k = key(100, 5, ino);
    k.gen = 1;
    r.on_file(k, busy(bytes, 1, 10), true);
  };
  {
    Recorder r(0, 0);
    for (uint64_t i = 1; i <= 20; ++i) {
      r.on_event(canonical_name(p, i, 1, "/d/f" + std::to_string(i)));
      file(r, i, 100 * i);
    }
    EXPECT_EQ(r.fold_to(10), 11u);  // down to 9: f1 .. f11 go
    EXPECT_EQ(r.path_walks(), 0u);
    EXPECT_EQ(r.memory().paths, 9u);
    EXPECT_EQ(r.memory().forgotten_paths, 11u);
    EXPECT_TRUE(r.path_counts_exact());
    r.on_event(by_path({200, 6}, IOLENS_PATH_UNLINK, "/d/f3"));  // still leads to it
    const RunSnapshot s = r.snapshot(ClockBase{});
    const FileSnapshot* gone = find_ino(s, 200, 3);
    ASSERT_NE(gone, nullptr);
    EXPECT_EQ(gone->path, "/d/f3");
    EXPECT_EQ(gone->unlinks, 1u);
  }

  // File 50, named as each case says, is the least useful record: a fold takes it and f1.
  struct Case {
    const char* what;
    std::vector<PathEvent> events;  // before its record
    uint64_t walks;                 // of the fold
    std::size_t forgotten;          // paths forgotten by the fold, f1's included
    std::vector<std::string> leading, not_leading;  // paths of file 50 after the fold, or not
  };
  PathEvent lookup = by_path(p, IOLENS_PATH_LOOKUP, "/d/lnk/y");
  lookup.dev = kDev;
  lookup.ino = 50;
  lookup.gen = 1;
  const Case cases[] = {
      {"one path", {canonical_name(p, 50, 1, "/d/a")}, 0, 2, {"/d/a"}, {}},
      {"no name", {}, 0, 1, {}, {}},
      {"hard link",
       {canonical_name(p, 50, 1, "/d/h1"), canonical_name(p, 50, 1, "/d/h2")},
       1, 3, {"/d/h1", "/d/h2"}, {}},
      {"renamed",
       {canonical_name(p, 50, 1, "/d/tmp"), by_path(p, IOLENS_PATH_RENAME, "/d/tmp", "/d/r")},
       1, 2, {"/d/r"}, {"/d/tmp"}},
      {"name taken over by another file",
       {canonical_name(p, 50, 1, "/d/x"), canonical_name(p, 71, 1, "/d/x")},
       0, 1, {}, {"/d/x"}},
      {"lexical name, then the canonical one", {lookup, canonical_name(p, 50, 1, "/d/y")},
       1, 3, {"/d/lnk/y", "/d/y"}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Recorder r(0, 0);
    for (uint64_t i = 1; i <= 10; ++i) {
      r.on_event(canonical_name(p, i, 1, "/d/f" + std::to_string(i)));
      file(r, i, 1000 * i);
    }
    for (const PathEvent& e : c.events) r.on_event(e);
    file(r, 50, 1);
    if (r.file_records() == 12) file(r, 71, 1'000'000);  // also given a record: kept
    const std::size_t paths = r.memory().paths;
    std::vector<FileIdentity> forgotten;
    ASSERT_EQ(r.fold_to(r.file_records() - 1, &forgotten), 2u);
    EXPECT_EQ(forgotten, (std::vector<FileIdentity>{{1, kDev, 1}, {50, kDev, 1}}));
    EXPECT_EQ(r.path_walks(), c.walks);
    EXPECT_EQ(r.memory().forgotten_paths, c.forgotten);
    EXPECT_EQ(r.memory().paths, paths - c.forgotten);
    EXPECT_TRUE(r.path_counts_exact());
    uint32_t pid = 300;
    for (const std::string& path : c.leading) {
      r.on_event(by_path({++pid, 7}, IOLENS_PATH_UNLINK, path));
      const RunSnapshot s = r.snapshot(ClockBase{});
      const FileSnapshot* f = find_ino(s, pid, 50);
      ASSERT_NE(f, nullptr) << path;
      EXPECT_EQ(f->unlinks, 1u) << path;
    }
    for (const std::string& path : c.not_leading) {
      r.on_event(by_path({++pid, 7}, IOLENS_PATH_UNLINK, path));
      EXPECT_EQ(find_ino(r.snapshot(ClockBase{}), pid, 50), nullptr) << path;
    }
    EXPECT_TRUE(r.path_counts_exact());
  }
}

// The forgetting shortcuts (paths counted per file, forgotten paths merged in two lists) change
// nothing a recorder does: random names (canonical, lexical, second ones), renames, unlinks,
// records, folds of records and processes, and save/load round trips, given to a recorder and
// to a twin that forgets as before (every path walked at each fold, one list merged whole).
// After every step the two save the same bytes (names, paths, forgotten paths, records), and
// each one's counts of paths per file are exact.
TEST(Fold, ForgettingShortcutsMatchTheReferenceOnRandomPaths) {
  auto canon = [](const std::string& path) -> std::optional<std::string> {
    const auto at = path.find("/lnk/");  // "lnk" is a symlink to its own directory
    if (at == std::string::npos) return std::nullopt;
    return path.substr(0, at) + path.substr(at + 4);
  };
  auto fast = std::make_unique<Recorder>(0, 0);
  auto ref = std::make_unique<Recorder>(0, 0);
  fast->set_canonicalizer(canon);
  ref->set_canonicalizer(canon);
  ref->set_reference_forget(true);
  uint64_t seed = 20240611;
  auto rnd = [&](uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % n;
  };
  auto each = [&](auto f) {
    f(*fast);
    f(*ref);
  };
  std::vector<uint32_t> starts(4, 1);  // each pid's current start time: a new process after a fold
  auto proc = [&] {
    const uint32_t pid = 10 + static_cast<uint32_t>(rnd(starts.size()));
    return ProcKey{pid, starts[pid - 10]};
  };
  auto path = [&](uint64_t n) {
    const uint64_t i = rnd(n);
    return (i % 3 == 0 ? "/e/"s : "/d/"s) + "p" + std::to_string(i);
  };
  std::size_t folds = 0, forgotten_total = 0, renames = 0, canonical_names = 0;
  uint64_t fast_walks = 0, ref_walks = 0;
  constexpr int kSteps = 6000;
  constexpr uint64_t kPaths = 240;
  for (int step = 0; step < kSteps; ++step) {
    const uint64_t what = rnd(100);
    const ProcKey p = proc();
    const uint64_t ino = 1 + rnd(60);
    const uint32_t gen = 1 + static_cast<uint32_t>(rnd(2));
    std::string op;
    if (what < 16) {  // a canonical name: a new one, a second one (a hard link), a reused path
      op = "name";
      const PathEvent e = canonical_name(p, ino, gen, path(kPaths));
      each([&](Recorder& r) { r.on_event(e); });
      ++canonical_names;
    } else if (what < 24) {  // a lexical name, maybe through the symlink
      op = "lookup";
      std::string x = path(kPaths);
      if (rnd(2)) x.insert(2, "/lnk");
      PathEvent e = by_path(p, IOLENS_PATH_LOOKUP, x);
      e.dev = kDev;
      e.ino = ino;
      e.gen = gen;
      each([&](Recorder& r) { r.on_event(e); });
    } else if (what < 34) {
      op = "rename";
      const PathEvent e = by_path(p, IOLENS_PATH_RENAME, path(kPaths), path(kPaths));
      each([&](Recorder& r) { r.on_event(e); });
      ++renames;
    } else if (what < 40) {
      op = "unlink";
      const PathEvent e = by_path(p, IOLENS_PATH_UNLINK, path(kPaths));
      each([&](Recorder& r) { r.on_event(e); });
    } else if (what < 84) {
      op = "record";
      iolens_file_key k = key(p.pid, p.start_ns, ino);
      k.gen = rnd(12) == 0 ? 0 : gen;  // now and then a stat by path (no generation)
      const FileCounters c = busy(1 + rnd(5000), 1 + rnd(3), step);
      const bool removed = rnd(5) != 0;
      each([&](Recorder& r) { r.on_file(k, c, removed); });
    } else if (what < 88) {
      op = "process fold";
      each([&](Recorder& r) { r.on_event(ExitEvent{p, 1000u + step, 0}); });
      std::vector<FileIdentity> fa, fb;
      const auto ga = fast->fold_processes_to(3, &fa);
      const auto gb = ref->fold_processes_to(3, &fb);
      ASSERT_EQ(ga, gb) << step;
      ASSERT_EQ(fa, fb) << step;
      for (const ProcKey& k : ga) starts[k.pid - 10] = 1000 + step;  // its pid is another's now
      forgotten_total += fa.size();
    } else if (what < 98) {
      op = "fold";
      const std::size_t bound = 4 + rnd(20);
      std::vector<FileIdentity> fa, fb;
      const std::size_t na = fast->fold_to(bound, &fa);
      const std::size_t nb = ref->fold_to(bound, &fb);
      ASSERT_EQ(na, nb) << step;
      ASSERT_EQ(fa, fb) << step;
      folds += na > 0;
      forgotten_total += fa.size();
    } else {
      op = "save and load";
      fast_walks += fast->path_walks();  // not saved
      ref_walks += ref->path_walks();
      for (auto* r : {&fast, &ref}) {
        std::string error;
        auto back = Recorder::load((*r)->save(), error);
        ASSERT_NE(back, nullptr) << error;
        back->set_canonicalizer(canon);
        *r = std::move(back);
      }
      ref->set_reference_forget(true);
    }
    const std::string where = "step " + std::to_string(step) + " (" + op + ")";
    ASSERT_TRUE(fast->path_counts_exact()) << where;
    ASSERT_TRUE(ref->path_counts_exact()) << where;
    // The saved bytes hold everything: names, paths, forgotten paths (as one list), records.
    ASSERT_TRUE(fast->save() == ref->save()) << where;
    const auto ma = fast->memory(), mb = ref->memory();
    ASSERT_EQ(std::tie(ma.names, ma.paths, ma.forgotten_paths, ma.approx_bytes),
              std::tie(mb.names, mb.paths, mb.forgotten_paths, mb.approx_bytes))
        << where;
    ASSERT_EQ(fast->name_bytes(), ref->name_bytes()) << where;
    if (op == "fold" || op == "process fold") {
      const auto a = fast->snapshot(ClockBase{});
      const auto b = ref->snapshot(ClockBase{});
      expect_summary_is_snapshots(*fast, a, where);
      ASSERT_EQ(a.files.size(), b.files.size()) << where;
      for (std::size_t i = 0; i < a.files.size(); ++i)
        ASSERT_EQ(std::tie(a.files[i].pid, a.files[i].ino, a.files[i].path, a.files[i].unlinks,
                           a.files[i].rename_sources, a.files[i].renamed_to),
                  std::tie(b.files[i].pid, b.files[i].ino, b.files[i].path, b.files[i].unlinks,
                           b.files[i].rename_sources, b.files[i].renamed_to))
            << where << " row " << i;
    }
  }
  // The workload did what it is for: many folds forgetting names, walks spared and not.
  EXPECT_GT(folds, 100u);
  EXPECT_GT(forgotten_total, 1000u);
  EXPECT_GT(renames, 200u);
  EXPECT_GT(canonical_names, 400u);
  EXPECT_GT(fast->memory().forgotten_paths, 60u);
  fast_walks += fast->path_walks();
  ref_walks += ref->path_walks();
  EXPECT_GT(fast_walks, 0u);
  EXPECT_LT(fast_walks, ref_walks);
  std::printf("%zu folds, %zu names forgotten, %zu forgotten paths held, path walks %llu of %llu\n",
              folds, forgotten_total, fast->memory().forgotten_paths,
              static_cast<unsigned long long>(fast_walks),
              static_cast<unsigned long long>(ref_walks));
}

TEST(Recorder, DaemonJobWithoutRootAttributesNoParent) {
  Recorder r(0, 77);  // a daemon's job: no root command, no tracer parent
  r.on_file(key(0, 0, 9), busy(1, 1, 1), false);  // pid 0 must not be taken for a root
  r.on_file(key(300, 5, 9), busy(1, 1, 1), false);
  ForkEvent fork;
  fork.proc = {301, 6};
  fork.parent = {300, 5};
  r.on_event(fork);
  const auto s = r.snapshot(ClockBase{});
  ASSERT_EQ(s.processes.size(), 3u);
  EXPECT_EQ(find_proc(s, 0)->ppid, 0u);
  EXPECT_EQ(find_proc(s, 300)->ppid, 0u);
  EXPECT_EQ(find_proc(s, 301)->ppid, 300u);
}

TEST(Counters, CombineAddsSwitchesFoldBridgesThem) {
  FileCounters a = busy(10, 2, 100);  // ends with a read
  a.rw_switches = 3;
  FileCounters w = new_counters();
  w.writes = 1;
  w.rw_switches = 1;
  w.max_write_time_ns = 9;
  w.max_write_time_size = 4096;
  w.write_end_ns = 50;
  w.first_io_type = w.last_io_type = IOLENS_IO_WRITE;
  FileCounters combined = a, folded = a;
  combine_counters(combined, w);
  fold_counters(folded, w);
  EXPECT_EQ(combined.rw_switches, 4u);  // different files: an exact sum
  EXPECT_EQ(folded.rw_switches, 5u);    // one file: the read -> write switch between the parts
  EXPECT_EQ(combined.writes, 1u);
  EXPECT_EQ(combined.max_write_time_size, 4096u);
  EXPECT_EQ(combined.read_end_ns, a.read_end_ns);
  EXPECT_EQ(combined.open_start_ns, 100u);
}

TEST(Counters, LatencyHistogramFieldsAreExportedAndSummed) {
  // Names, in order, each on its own array slot, all summed (docs/counters.md#latency-histogram).
  const char* kNames[IOLENS_NR_LAT_BUCKETS] = {"le_1us",  "le_4us",  "le_16us", "le_64us",
                                               "le_256us", "le_1ms", "le_4ms",  "le_16ms",
                                               "le_64ms", "le_256ms", "le_1s",  "gt_1s"};
  std::vector<const CounterField*> lat;
  for (const auto& f : counter_fields())
    if (f.name.starts_with("lat_")) lat.push_back(&f);
  ASSERT_EQ(lat.size(), 2u * IOLENS_NR_LAT_BUCKETS + 2);
  for (int i = 0; i < IOLENS_NR_LAT_BUCKETS; ++i) {
    EXPECT_EQ(lat[i]->name, "lat_read_"s + kNames[i]);
    EXPECT_EQ(lat[i]->offset, offsetof(iolens_file_counters, lat_read) + 8u * i);
    EXPECT_EQ(lat[IOLENS_NR_LAT_BUCKETS + i]->name, "lat_write_"s + kNames[i]);
    EXPECT_EQ(lat[IOLENS_NR_LAT_BUCKETS + i]->offset, offsetof(iolens_file_counters, lat_write) + 8u * i);
  }
  EXPECT_EQ(lat[2 * IOLENS_NR_LAT_BUCKETS]->name, "lat_read_sum_ns");
  EXPECT_EQ(lat[2 * IOLENS_NR_LAT_BUCKETS]->offset, offsetof(iolens_file_counters, lat_read_sum_ns));
  EXPECT_EQ(lat[2 * IOLENS_NR_LAT_BUCKETS + 1]->name, "lat_write_sum_ns");
  EXPECT_EQ(lat[2 * IOLENS_NR_LAT_BUCKETS + 1]->offset, offsetof(iolens_file_counters, lat_write_sum_ns));
  for (const auto* f : lat) {
    EXPECT_EQ(f->fold, Fold::Sum) << f->name;
    EXPECT_FALSE(f->is_signed) << f->name;
  }
  EXPECT_EQ(kLatencyBoundsNs.front(), 1'000u);
  EXPECT_EQ(kLatencyBoundsNs.back(), 1'000'000'000u);

  FileCounters a = new_counters(), b = new_counters();
  for (int i = 0; i < IOLENS_NR_LAT_BUCKETS; ++i) {
    a.lat_read[i] = 1 + i;
    a.lat_write[i] = 100 + i;
    b.lat_read[i] = 1000 + i;
    b.lat_write[i] = 2;
  }
  a.lat_read_sum_ns = 5;
  a.lat_write_sum_ns = 7;
  b.lat_read_sum_ns = 11;
  b.lat_write_sum_ns = 13;
  FileCounters combined = a, folded = a, total{};
  combine_counters(combined, b);
  fold_counters(folded, b);
  add_totals(total, a);
  add_totals(total, b);
  for (const FileCounters* c : {&combined, &folded, &total}) {
    for (int i = 0; i < IOLENS_NR_LAT_BUCKETS; ++i) {
      EXPECT_EQ(c->lat_read[i], 1001u + 2 * i) << "bucket " << i;
      EXPECT_EQ(c->lat_write[i], 102u + i) << "bucket " << i;
    }
    EXPECT_EQ(c->lat_read_sum_ns, 16u);
    EXPECT_EQ(c->lat_write_sum_ns, 20u);
  }
  EXPECT_EQ(counter_value(combined, *lat[11]), static_cast<int64_t>(1001 + 2 * 11));
}

// Darshan's MEM_NOT_ALIGNED adds up; its MODE is the last non-zero mode seen, so a later part
// of a record (or a later process's row, in a shared reduction) replaces it unless it is 0.
TEST(Counters, MemNotAlignedAddsUpAndModeIsTheLastNonZero) {
  const auto field = [](std::string_view name) {
    for (const auto& f : counter_fields())
      if (f.name == name) return &f;
    return static_cast<const CounterField*>(nullptr);
  };
  ASSERT_NE(field("mem_not_aligned"), nullptr);
  ASSERT_NE(field("mode"), nullptr);
  EXPECT_EQ(field("mem_not_aligned")->fold, Fold::Sum);
  EXPECT_EQ(field("mode")->fold, Fold::LastNonZero);

  FileCounters a = new_counters(), b = new_counters(), c = new_counters();
  a.mem_not_aligned = 3;
  a.mode = 0640;
  b.mem_not_aligned = 4;
  b.mode = 0;  // opened without O_CREAT
  c.mode = 0600;
  FileCounters folded = a, total{};
  fold_counters(folded, b);
  EXPECT_EQ(folded.mem_not_aligned, 7u);
  EXPECT_EQ(folded.mode, 0640u);
  fold_counters(folded, c);
  EXPECT_EQ(folded.mode, 0600u);
  FileCounters combined = a;
  combine_counters(combined, c);
  EXPECT_EQ(combined.mode, 0600u);
  add_totals(total, a);
  add_totals(total, b);
  EXPECT_EQ(total.mem_not_aligned, 7u);
  EXPECT_EQ(total.mode, 0u);  // not a sum: a process has no mode
}

TEST(Recorder, NamesAndProcessesForTraceFiles) {
  Recorder r(100, 1);
  r.on_event(ForkEvent{{101, 20}, {100, 5}, 10, "python3", 0});
  r.on_event(name_event(101, 20, 9, "a.bin\0data\0"s));
  r.on_event(ExitEvent{{101, 20}, 90, 3 << 8});
  bool incomplete = true;
  const std::string* name = r.file_name(FileIdentity{9, kDev, 0}, &incomplete);
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(*name, "/data/a.bin");
  EXPECT_FALSE(incomplete);
  EXPECT_EQ(r.file_name(FileIdentity{10, kDev, 0}), nullptr);  // never named
  std::vector<std::string> seen;
  r.visit_processes([&](const Recorder::ProcessView& p) {
    seen.push_back(std::to_string(p.key.pid) + " parent " +
                   (p.parent ? std::to_string(p.parent->pid) : "-") + " end " +
                   std::to_string(p.end_ns) + " status " +
                   (p.wait_status ? std::to_string(*p.wait_status) : "-") + " " + p.comm);
  });
  ASSERT_EQ(seen.size(), 1u);  // only processes something was heard of
  EXPECT_EQ(seen[0], "101 parent 100 end 90 status 768 python3");
}
