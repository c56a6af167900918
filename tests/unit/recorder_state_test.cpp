// SPDX-License-Identifier: Apache-2.0
// Recorder::save / Recorder::load (docs/state-format.md): a loaded recorder is the one that was
// saved, in its snapshots and in everything it does afterwards; truncated, damaged, foreign and
// hostile blobs are refused without crashing.
#include <gtest/gtest.h>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/packed_counters.hpp"
#include "core/recorder.hpp"
#include "exporters/json_report.hpp"
#include "iolens_abi.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
// The sanitizers' allocator does not fill glibc's mallinfo2: the heap is not measured there.
#define IOLENS_UNDER_SANITIZER 1
#else
#define IOLENS_UNDER_SANITIZER 0
#endif

using namespace iolens::core;
using namespace std::string_literals;

namespace {

constexpr uint32_t kDev = (8u << 20) | 1;  // 8:1
constexpr std::size_t kHeader = 24;        // magic, version, kernel ABI, payload length
constexpr std::size_t kTrailer = 4;        // CRC-32

/// A file of process `p` named by a walk (its components, leaf first, each NUL-ended) and
/// counted as `c`: its name event, then its kernel record (`removed`: read out of the kernel).
void add_named_file(Recorder& r, const ProcKey& p, uint64_t ino, uint32_t gen,
                    const std::string& walk, const FileCounters& c, bool removed) {
  PathEvent n;
  n.proc = p;
  n.op = IOLENS_PATH_FILE;
  n.dev = kDev;
  n.ino = ino;
  n.gen = gen;
  n.walk = walk;
  r.on_event(n);
  iolens_file_key k{};
  k.tgid = p.pid;
  k.pstart_ns = p.start_ns;
  k.dev = kDev;
  k.ino = ino;
  k.gen = gen;
  r.on_file(k, c, removed);
}

/// CRC-32 (IEEE 802.3, reflected, zlib's) from its definition: the format doc names this one.
uint32_t crc32(std::string_view b) {
  uint32_t c = 0xffffffffu;
  for (unsigned char x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_le(std::string& s, std::size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}
uint64_t get_le(std::string_view s, std::size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

std::string payload_of(const std::string& blob) {
  return blob.substr(kHeader, blob.size() - kHeader - kTrailer);
}

/// `blob`'s header with `payload`, the length and the CRC made right again: reaches the
/// payload decoder with whatever bytes the test wants.
std::string reseal(const std::string& blob, std::string_view payload) {
  std::string out = blob.substr(0, kHeader);
  put_le(out, 16, payload.size(), 8);
  out += payload;
  const uint32_t c = crc32(out);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(c >> (8 * i)));
  return out;
}

std::unique_ptr<Recorder> load_ok(const std::string& blob) {
  std::string error;
  auto r = Recorder::load(blob, error);
  EXPECT_NE(r, nullptr) << error;
  EXPECT_TRUE(r == nullptr || error.empty()) << error;
  return r;
}

/// Loading must fail, with a reason.
void expect_refused(std::string_view blob, const std::string& what) {
  std::string error;
  auto r = Recorder::load(blob, error);
  EXPECT_EQ(r, nullptr) << what;
  EXPECT_FALSE(error.empty()) << what;
}

/// The canonicalizer of these tests: "lnk" is a symlink to its own directory.
std::optional<std::string> canonical(const std::string& p) {
  const auto at = p.find("/lnk/");
  if (at == std::string::npos) return std::nullopt;
  return p.substr(0, at) + p.substr(at + 4);
}

std::string first_difference(const std::string& a, const std::string& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const std::size_t from = i > 200 ? i - 200 : 0;
  return "first difference at " + std::to_string(i) + ":\n--- a:\n" + a.substr(from, 400) +
         "\n--- b:\n" + b.substr(from, 400);
}

bool same_bytes(const FileCounters& a, const FileCounters& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

/// Every field of two snapshots (the JSON report leaves some out: folded_only_files, the
/// counters' state fields); `json`: the JSON reports too.
void expect_same_snapshots(const RunSnapshot& sa, const RunSnapshot& sb, bool json,
                           const std::string& what) {
  if (json) {
    using namespace iolens::exporters;
    const std::string ja = dump_json(run_to_json(sa, "t"));
    const std::string jb = dump_json(run_to_json(sb, "t"));
    EXPECT_TRUE(ja == jb) << what << ": " << first_difference(ja, jb);
  }
  EXPECT_EQ(sa.lost, sb.lost) << what;
  EXPECT_EQ(sa.folded_records, sb.folded_records) << what;
  EXPECT_EQ(sa.folded_only_files, sb.folded_only_files) << what;
  ASSERT_EQ(sa.processes.size(), sb.processes.size()) << what;
  for (std::size_t i = 0; i < sa.processes.size(); ++i) {
    const auto& a = sa.processes[i];
    const auto& b = sb.processes[i];
    const std::string w = what + " process " + std::to_string(i) + " pid " + std::to_string(a.pid);
    EXPECT_EQ(
        std::tie(a.pid, a.ppid, a.start_ns, a.end_ns, a.comm, a.exe, a.exit_code, a.files,
                 a.unlinks, a.renames, a.folded_files, a.folded_rename_sources, a.folded_unlinks),
        std::tie(b.pid, b.ppid, b.start_ns, b.end_ns, b.comm, b.exe, b.exit_code, b.files,
                 b.unlinks, b.renames, b.folded_files, b.folded_rename_sources, b.folded_unlinks))
        << w;
    EXPECT_TRUE(same_bytes(a.totals, b.totals)) << w;
    ASSERT_EQ(a.folded.has_value(), b.folded.has_value()) << w;
    if (a.folded) {
      EXPECT_TRUE(same_bytes(*a.folded, *b.folded)) << w;
    }
    ASSERT_EQ(a.other_io.size(), b.other_io.size()) << w;
    for (auto x = a.other_io.begin(), y = b.other_io.begin(); x != a.other_io.end(); ++x, ++y)
      EXPECT_EQ(std::tie(x->first, x->second.reads, x->second.writes, x->second.bytes_read,
                         x->second.bytes_written),
                std::tie(y->first, y->second.reads, y->second.writes, y->second.bytes_read,
                         y->second.bytes_written))
          << w;
  }
  ASSERT_EQ(sa.files.size(), sb.files.size()) << what;
  for (std::size_t i = 0; i < sa.files.size(); ++i) {
    const auto& a = sa.files[i];
    const auto& b = sb.files[i];
    const std::string w = what + " file " + std::to_string(i) + " " + a.path;
    EXPECT_EQ(std::tie(a.path, a.path_known, a.path_incomplete, a.dev, a.ino, a.pid,
                       a.proc_start_ns, a.rename_sources, a.unlinks, a.renamed_to),
              std::tie(b.path, b.path_known, b.path_incomplete, b.dev, b.ino, b.pid,
                       b.proc_start_ns, b.rename_sources, b.unlinks, b.renamed_to))
        << w;
    EXPECT_TRUE(same_bytes(a.counters, b.counters)) << w;
  }
}

/// Everything observable: the snapshots, memory(), and the saved bytes themselves.
void expect_same(const Recorder& a, const Recorder& b, const std::string& what, bool json = true) {
  const ClockBase clock{1000, 1'700'000'000'000'000'000};
  expect_same_snapshots(a.snapshot(clock), b.snapshot(clock), json, what);
  const auto ma = a.memory(), mb = b.memory();
  EXPECT_EQ(std::tie(ma.file_records, ma.other_records, ma.processes, ma.names, ma.paths,
                     ma.folded_files, ma.forgotten_paths, ma.approx_bytes),
            std::tie(mb.file_records, mb.other_records, mb.processes, mb.names, mb.paths,
                     mb.folded_files, mb.forgotten_paths, mb.approx_bytes))
      << what;
  EXPECT_EQ(a.folded_records(), b.folded_records()) << what;
  EXPECT_TRUE(a.save() == b.save()) << what << ": saved bytes differ";
}

/// A daemon's life in random steps: processes fork, exec and exit; files are named (walked or
/// looked up, some through the canonicalizer), renamed, unlinked (by known, unknown and
/// forgotten names); records arrive live and removed, with every field set (state included);
/// non-file descriptors, lost counts, and fold_to with forgotten names. Each step is applied to
/// every recorder given, and what they return must agree.
class Workload {
 public:
  explicit Workload(uint64_t seed) : seed_(seed) {}

  void run(std::vector<Recorder*> rs, int steps) {
    for (int i = 0; i < steps; ++i) step(rs);
  }

  /// What a drain of the kernel's maps gives a daemon: every record still there, live.
  void drain_into(Recorder& r) const {
    for (const auto& [k, c] : kernel_files_) r.on_file(k, c, false);
    for (const auto& [k, c] : kernel_others_) r.on_other(k, c, false);
  }
  std::size_t kernel_records() const { return kernel_files_.size() + kernel_others_.size(); }

  uint64_t rnd(uint64_t n) {
    seed_ = seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed_ >> 33) % n;
  }

 private:
  ProcKey any_proc() { return procs_[rnd(procs_.size())]; }
  std::string file_name(uint64_t ino, uint32_t gen) {
    return "f" + std::to_string(ino) + "_" + std::to_string(gen);
  }
  std::string dir_of(uint64_t ino) { return "d" + std::to_string(ino % 4); }

  FileCounters counters() {
    FileCounters c = new_counters();
    // Every field, the kernel's bookkeeping included: a later fold reads it.
    for (std::size_t at = 0; at < sizeof c; at += 8) {
      if (rnd(3) != 0) continue;
      const uint64_t v = rnd(5000);
      std::memcpy(reinterpret_cast<char*>(&c) + at, &v, sizeof v);
    }
    c.stats = rnd(3);
    c.reads = rnd(4);
    c.writes = rnd(3);
    c.opens = rnd(2);
    c.max_byte_read = rnd(4) ? static_cast<int64_t>(rnd(1 << 20)) : -1;
    c.max_byte_written = rnd(4) ? static_cast<int64_t>(rnd(1 << 20)) : -1;
    c.last_io_type = static_cast<uint32_t>(rnd(3));
    c.first_io_type = static_cast<uint32_t>(rnd(3));
    c.open_fds = static_cast<int64_t>(rnd(3)) - 1;
    c.last_byte_read = static_cast<int64_t>(rnd(1000));
    return c;
  }

  void step(const std::vector<Recorder*>& rs) {
    auto all = [&](auto f) {
      for (Recorder* r : rs) f(*r);
    };
    clock_ += 1 + rnd(1000);
    const uint64_t what = rnd(100);
    if (what < 6) {  // fork
      ForkEvent e;
      e.proc = {next_pid_++, clock_};
      e.parent = any_proc();
      e.ts_ns = clock_;
      e.comm = "worker" + std::to_string(rnd(5));
      procs_.push_back(e.proc);
      all([&](Recorder& r) { r.on_event(e); });
    } else if (what < 8) {  // exec
      PathEvent e;
      e.proc = any_proc();
      e.op = IOLENS_PATH_EXE;
      e.walk = "python3."s + std::to_string(rnd(3)) + "\0bin\0usr\0"s;
      e.comm = "python3";
      all([&](Recorder& r) { r.on_event(e); });
    } else if (what < 10) {  // exit
      const ExitEvent e{any_proc(), clock_, static_cast<int32_t>(rnd(2) ? rnd(4) << 8 : rnd(16))};
      all([&](Recorder& r) { r.on_event(e); });
    } else if (what < 22) {  // a name: walked from the struct file, or a lookup
      const uint64_t ino = 1 + rnd(kInodes);
      const uint32_t gen = 1 + static_cast<uint32_t>(rnd(2));
      PathEvent e;
      e.proc = any_proc();
      e.dev = kDev;
      e.ino = ino;
      e.gen = gen;
      e.flags = rnd(10) == 0 ? IOLENS_PATH_TRUNCATED : 0;
      if (rnd(3)) {
        e.op = IOLENS_PATH_FILE;
        e.walk = file_name(ino, gen) + "\0"s + dir_of(ino) + "\0"s;
      } else {
        e.op = IOLENS_PATH_LOOKUP;
        e.walk = dir_of(ino) + "\0"s;
        e.str1 = (rnd(2) ? "lnk/" : "") + file_name(ino, gen);
      }
      all([&](Recorder& r) { r.on_event(e); });
    } else if (what < 30) {  // unlink or rename by a path: known, renamed, forgotten or never seen
      PathEvent e;
      e.proc = any_proc();
      const uint64_t ino = 1 + rnd(kInodes + 20);
      std::string path =
          "/" + dir_of(ino) + "/" + file_name(ino, 1 + static_cast<uint32_t>(rnd(2)));
      if (!renamed_.empty() && rnd(4) == 0) path = renamed_[rnd(renamed_.size())];
      e.str1 = path;
      if (rnd(2)) {
        e.op = IOLENS_PATH_UNLINK;
      } else {
        e.op = IOLENS_PATH_RENAME;
        e.walk2 = dir_of(ino) + "\0"s;
        e.str2 = "r" + std::to_string(renames_++);
        renamed_.push_back("/" + dir_of(ino) + "/" + e.str2);
      }
      all([&](Recorder& r) { r.on_event(e); });
    } else if (what < 88) {  // a file record
      iolens_file_key k{};
      const ProcKey p = any_proc();
      k.tgid = p.pid;
      k.pstart_ns = p.start_ns;
      k.dev = kDev;
      k.ino = 1 + rnd(kInodes);
      k.gen = rnd(12) == 0 ? 0 : 1 + static_cast<uint32_t>(rnd(2));
      FileCounters c = counters();
      if (k.gen == 0) {  // a stat by path
        c = new_counters();
        c.stats = 1 + rnd(2);
        c.meta_start_ns = clock_;
        c.meta_end_ns = clock_ + 5;
      }
      const bool removed = rnd(3) != 0;
      all([&](Recorder& r) { r.on_file(k, c, removed); });
      if (removed)
        kernel_files_.erase(k);
      else
        kernel_files_[k] = c;
    } else if (what < 93) {  // a non-file descriptor
      iolens_file_key k{};
      const ProcKey p = any_proc();
      k.tgid = p.pid;
      k.pstart_ns = p.start_ns;
      static constexpr uint64_t kKinds[] = {001, 002, 014, 0, 006};
      k.ino = kKinds[rnd(5)];
      const FileCounters c = counters();
      const bool removed = rnd(2) != 0;
      all([&](Recorder& r) { r.on_other(k, c, removed); });
      if (removed)
        kernel_others_.erase(k);
      else
        kernel_others_[k] = c;
    } else if (what < 96) {  // lost counts
      const std::string cause = rnd(2) ? "events" : "custom_cause";
      const uint64_t n = rnd(100);
      const bool set = rnd(2);
      all([&](Recorder& r) { set ? r.set_lost(cause, n) : r.add_lost(cause, n); });
    } else {  // bound memory
      const std::size_t max = 20 + rnd(60);
      std::vector<std::size_t> folded;
      std::vector<std::vector<FileIdentity>> forgotten(rs.size());
      for (std::size_t i = 0; i < rs.size(); ++i)
        folded.push_back(rs[i]->fold_to(max, &forgotten[i]));
      for (std::size_t i = 1; i < rs.size(); ++i) {
        EXPECT_EQ(folded[i], folded[0]) << "fold_to(" << max << ") of recorder " << i;
        EXPECT_EQ(forgotten[i], forgotten[0]) << "forgotten by recorder " << i;
      }
    }
  }

  static constexpr uint64_t kInodes = 150;
  uint64_t seed_;
  uint64_t clock_ = 1'000'000;
  uint32_t next_pid_ = 101;
  std::vector<ProcKey> procs_{{100, 1000}};
  std::vector<std::string> renamed_;
  uint64_t renames_ = 0;
  // The kernel's maps as the records given live and removed leave them.
  struct KeyLess {
    bool operator()(const iolens_file_key& a, const iolens_file_key& b) const {
      return std::memcmp(&a, &b, sizeof a) < 0;
    }
  };
  std::map<iolens_file_key, FileCounters, KeyLess> kernel_files_, kernel_others_;
};

/// A small recorder with a bit of everything, for the byte-level tests.
Recorder small_recorder() {
  Recorder r(100, 1);
  r.add_lost("aa", 1);
  r.add_lost("ab", 2);
  Workload w(7);
  w.run({&r}, 40);
  return r;
}

}  // namespace

TEST(RecorderState, EmptyRecorderRoundTrips) {
  Recorder r(0, 0);
  const std::string blob = r.save();
  EXPECT_EQ(blob.substr(0, 8), "IOLENSRC");
  auto back = load_ok(blob);
  ASSERT_NE(back, nullptr);
  expect_same(r, *back, "empty");
}

TEST(RecorderState, LoadedRecorderIsTheSavedOneNowAndAfterwards) {
  // The original runs without a break; its twin is saved and loaded every few rounds (a
  // daemon restarting from its checkpoint). Both get the same events, records and folds.
  Recorder original(100, 1);
  original.set_canonicalizer(canonical);
  Workload w(2024);
  w.run({&original}, 3000);
  const auto mem = original.memory();
  // The state is rich: every member holds something.
  ASSERT_GT(mem.file_records, 50u);
  ASSERT_GT(mem.other_records, 5u);
  ASSERT_GT(mem.processes, 20u);
  ASSERT_GT(mem.names, 20u);
  ASSERT_GT(mem.paths, 20u);
  ASSERT_GT(mem.folded_files, 100u);
  ASSERT_GT(mem.forgotten_paths, 20u);
  ASSERT_GT(original.folded_records(), 100u);

  std::unique_ptr<Recorder> twin = load_ok(original.save());
  ASSERT_NE(twin, nullptr);
  twin->set_canonicalizer(canonical);  // not saved: the caller sets it again
  expect_same(original, *twin, "just loaded");
  for (int round = 0; round < 40 && !HasFailure(); ++round) {
    w.run({&original, twin.get()}, 150);
    expect_same(original, *twin, "round " + std::to_string(round), round % 10 == 9);
    if (round % 5 == 4) {
      twin = load_ok(twin->save());
      ASSERT_NE(twin, nullptr);
      twin->set_canonicalizer(canonical);
      expect_same(original, *twin, "reloaded at round " + std::to_string(round), false);
    }
  }
}

// iolensd's checkpoint leaves the live parts out (save(false)): a restart reads them from the
// kernel's map again. Loaded and then given the kernel's records, the recorder is the one that
// was saved, now and in everything it does afterwards.
TEST(RecorderState, SavedWithoutLivePartsAndDrainedIsTheSavedOne) {
  Recorder original(100, 1);
  original.set_canonicalizer(canonical);
  Workload w(99);
  w.run({&original}, 3000);
  ASSERT_GT(w.kernel_records(), 30u);
  ASSERT_GT(original.folded_records(), 100u);
  const std::string full = original.save();
  const std::string lean = original.save(false);
  // A live part is a packed counters' string in the full blob (a u32 length, then the masks
  // and a varint at least: a live record has counted something); none is in the lean one.
  EXPECT_LE(lean.size() + w.kernel_records() * (4 + PackedCounters::kRecordMasks * 8 + 1),
            full.size());
  std::unique_ptr<Recorder> twin = load_ok(lean);
  ASSERT_NE(twin, nullptr);
  twin->set_canonicalizer(canonical);
  w.drain_into(*twin);
  expect_same(original, *twin, "loaded without live parts, then drained");
  for (int round = 0; round < 30 && !HasFailure(); ++round) {
    w.run({&original, twin.get()}, 150);
    expect_same(original, *twin, "round " + std::to_string(round), round % 10 == 9);
    if (round % 5 == 4) {
      twin = load_ok(twin->save(false));
      ASSERT_NE(twin, nullptr);
      twin->set_canonicalizer(canonical);
      w.drain_into(*twin);
      expect_same(original, *twin, "reloaded at round " + std::to_string(round), false);
    }
  }
}

TEST(RecorderState, CanonicalizerIsNotSaved) {
  Recorder r(100, 1);
  r.set_canonicalizer(canonical);
  auto lookup = [](uint64_t ino) {
    PathEvent e;
    e.proc = {100, 5};
    e.op = IOLENS_PATH_LOOKUP;
    e.dev = kDev;
    e.ino = ino;
    e.walk = "d\0"s;
    e.str1 = "lnk/x" + std::to_string(ino);
    return e;
  };
  r.on_event(lookup(1));
  auto back = load_ok(r.save());
  ASSERT_NE(back, nullptr);
  for (Recorder* x : {&r, back.get()}) {
    x->on_event(lookup(2));
    iolens_file_key k{};
    k.tgid = 100;
    k.pstart_ns = 5;
    k.dev = kDev;
    FileCounters c = new_counters();
    c.stats = 1;
    for (uint64_t ino : {1, 2}) {
      k.ino = ino;
      x->on_file(k, c, false);
    }
  }
  auto path_of = [](const Recorder& x, uint64_t ino) {
    for (const auto& f : x.snapshot(ClockBase{}).files)
      if (f.ino == ino) return f.path;
    return "<none>"s;
  };
  EXPECT_EQ(path_of(r, 1), "/d/x1");
  EXPECT_EQ(path_of(*back, 1), "/d/x1");  // saved as it was canonicalized
  EXPECT_EQ(path_of(r, 2), "/d/x2");
  EXPECT_EQ(path_of(*back, 2), "/d/lnk/x2");  // no canonicalizer set on the loaded one
}

TEST(RecorderState, RefusesEmptyForeignAndOtherVersions) {
  const Recorder r = small_recorder();
  const std::string blob = r.save();
  ASSERT_NE(load_ok(blob), nullptr);
  expect_refused("", "empty");
  expect_refused("IOLENSRC", "magic only");
  std::string bad = blob;
  bad[0] = 'X';
  expect_refused(bad, "wrong magic");
  expect_refused(std::string(blob.size(), '\0'), "zeros");

  // Another format version, with a right CRC: refused as such (a later one, and 0).
  std::string error;
  for (uint32_t v : {3u, 0u}) {
    std::string other = blob;
    put_le(other, 8, v, 4);
    other = reseal(other, payload_of(blob));
    error.clear();
    EXPECT_EQ(Recorder::load(other, error), nullptr);
    EXPECT_NE(error.find("format version " + std::to_string(v)), std::string::npos) << error;
  }
  // Counters saved by another kernel ABI (another FileCounters layout).
  std::string abi = blob;
  put_le(abi, 12, IOLENS_ABI_VERSION + 1, 4);
  abi = reseal(abi, payload_of(blob));
  error.clear();
  EXPECT_EQ(Recorder::load(abi, error), nullptr);
  EXPECT_NE(error.find("ABI"), std::string::npos) << error;
  // The header as documented: magic, version 2, ABI, payload length; CRC-32 last.
  EXPECT_EQ(get_le(blob, 8, 4), 2u);
  EXPECT_EQ(get_le(blob, 12, 4), uint64_t{IOLENS_ABI_VERSION});
  EXPECT_EQ(get_le(blob, 16, 8), blob.size() - kHeader - kTrailer);
  EXPECT_EQ(get_le(blob, blob.size() - 4, 4),
            crc32(std::string_view(blob).substr(0, blob.size() - 4)));
}

namespace {

/// A blob of format version 1 (whole counters), made byte by byte from docs/state-format.md as
/// a daemon before packed records saved it: one process (pid 42), one file record of it with a
/// folded part `folded` and, if given, a live part.
std::string version1_blob(const FileCounters& folded, const FileCounters* live) {
  std::string p;
  auto u8 = [&](uint8_t v) { p.push_back(static_cast<char>(v)); };
  auto le = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p.push_back(static_cast<char>(v >> (8 * i)));
  };
  auto str = [&](std::string_view x) {
    le(x.size(), 4);
    p.append(x);
  };
  le(0, 4);  // root pid
  le(0, 4);  // tracer pid
  le(0, 8);  // folded_records
  le(1, 8);  // final_snapshots
  u8(0);     // no short_at
  le(0, 8);  // lost causes: none
  le(1, 8);  // processes: pid 42 started at 7, parent unknown, "cat", exited 0
  le(42, 4), le(7, 8), le(0, 4), le(0, 8), u8(0), str("cat"), str("/usr/bin/cat"), le(900, 8);
  u8(1), le(0, 4), le(0, 8), le(0, 8), u8(0);
  le(1, 8);  // file records: (8:1, ino 77, gen 3) of pid 42
  le(kDev, 4), le(77, 8), le(3, 4), le(42, 4), le(7, 8);
  u8(live ? 3 : 1);
  p.append(reinterpret_cast<const char*>(&folded), sizeof folded);
  if (live) p.append(reinterpret_cast<const char*>(live), sizeof *live);
  le(0, 8), le(0, 8), str("");
  le(0, 8);  // other records
  le(0, 8);  // names
  le(0, 8);  // paths
  le(0, 8);  // forgotten paths
  std::string b = "IOLENSRC";
  for (uint64_t v : {uint64_t{1}, uint64_t{IOLENS_ABI_VERSION}})
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>(uint64_t{p.size()} >> (8 * i)));
  b += p;
  const uint32_t c = crc32(b);
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(c >> (8 * i)));
  return b;
}

}  // namespace

TEST(RecorderState, AVersionOneBlobIsStillRead) {
  // An upgraded daemon keeps the checkpoint of the one before it: whole counters are read
  // into packed records, and saved again they are version 2 and load to the same snapshot.
  FileCounters folded = new_counters();
  folded.opens = folded.closes = 1;
  folded.reads = 3;
  folded.bytes_read = 12345;
  folded.max_byte_read = 12344;
  folded.read_start_ns = 1000;
  folded.read_end_ns = 2000;
  FileCounters live = folded;
  live.reads = 5;
  live.bytes_read = 20000;
  const FileCounters* const parts[] = {nullptr, &live};
  for (const FileCounters* l : parts) {
    const std::string v1 = version1_blob(folded, l);
    auto back = load_ok(v1);
    ASSERT_NE(back, nullptr);
    const RunSnapshot s = back->snapshot(ClockBase{});
    ASSERT_EQ(s.files.size(), 1u);
    EXPECT_EQ(s.files[0].pid, 42u);
    EXPECT_EQ(s.files[0].ino, 77u);
    EXPECT_EQ(s.files[0].counters.reads, l ? 8u : 3u);  // folded, then the live part on it
    EXPECT_EQ(s.files[0].counters.bytes_read, l ? 32345u : 12345u);
    EXPECT_EQ(s.files[0].counters.max_byte_read, 12344);
    const std::string v2 = back->save();
    EXPECT_EQ(get_le(v2, 8, 4), 2u);
    EXPECT_LT(v2.size(), v1.size());  // the counters packed
    auto again = load_ok(v2);
    ASSERT_NE(again, nullptr);
    expect_same(*back, *again, l ? "version 1 with a live part" : "version 1");
  }
}

namespace {

/// A version 1 blob of one process (pid 42) with records of two files, ino 77 (small) and 78
/// (big), where only 78 has a name (/d/b) but both have paths: /d/a1 and /d/a2 lead to 77. This
/// build never makes such a state (a file gets a name with its first path, and loses both at
/// once); a blob may still hold one.
std::string unnamed_paths_blob() {
  std::string p;
  auto u8 = [&](uint8_t v) { p.push_back(static_cast<char>(v)); };
  auto le = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p.push_back(static_cast<char>(v >> (8 * i)));
  };
  auto str = [&](std::string_view x) {
    le(x.size(), 4);
    p.append(x);
  };
  auto id = [&](uint64_t ino) { le(kDev, 4), le(ino, 8), le(3, 4); };
  le(0, 4), le(0, 4), le(0, 8), le(2, 8), u8(0);  // root, tracer, folded, final, no short_at
  le(0, 8);                                        // lost causes: none
  le(1, 8);                                        // processes: pid 42, running
  le(42, 4), le(7, 8), le(0, 4), le(0, 8), u8(0), str("cat"), str("/usr/bin/cat"), le(0, 8);
  u8(0), le(0, 8), le(0, 8), u8(0);
  le(2, 8);  // file records
  for (uint64_t ino : {77, 78}) {
    FileCounters c = new_counters();
    c.opens = c.closes = 1;
    c.reads = 1;
    c.bytes_read = ino == 77 ? 10 : 100000;
    c.first_io_type = c.last_io_type = IOLENS_IO_READ;
    id(ino), le(42, 4), le(7, 8), u8(1);
    p.append(reinterpret_cast<const char*>(&c), sizeof c);
    le(0, 8), le(0, 8), str("");
  }
  le(0, 8);  // other records
  le(1, 8);  // names
  id(78), str("/d/b"), u8(1);
  le(3, 8);  // paths, sorted
  str("/d/a1"), id(77);
  str("/d/a2"), id(77);
  str("/d/b"), id(78);
  le(0, 8);  // forgotten paths
  std::string b = "IOLENSRC";
  for (uint64_t v : {uint64_t{1}, uint64_t{IOLENS_ABI_VERSION}})
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>(uint64_t{p.size()} >> (8 * i)));
  b += p;
  const uint32_t c = crc32(b);
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(c >> (8 * i)));
  return b;
}

}  // namespace

// A loaded state's paths are counted per file again, those of a file without a name too, and
// a fold that forgets that file finds them all (a walk: it has no name to find one by); named
// later, the file takes its count with it. Each step as a twin that forgets as before does it.
TEST(RecorderState, PathsOfAFileLoadedWithoutANameAreCountedAndForgotten) {
  for (bool named_later : {false, true}) {
    SCOPED_TRACE(named_later ? "named after the load" : "never named");
    const std::string blob = unnamed_paths_blob();
    auto r = load_ok(blob);
    auto ref = load_ok(blob);
    ASSERT_NE(r, nullptr);
    ASSERT_NE(ref, nullptr);
    ref->set_reference_forget(true);
    EXPECT_TRUE(r->path_counts_exact());
    EXPECT_EQ(r->memory().paths, 3u);
    if (named_later) {
      for (Recorder* x : {r.get(), ref.get()})
        add_named_file(*x, {42, 7}, 77, 3, "a3\0d\0"s, new_counters(), true);
      EXPECT_TRUE(r->path_counts_exact());
    }
    std::vector<FileIdentity> fa, fb;
    ASSERT_EQ(r->fold_to(1, &fa), 2u);  // both records: down to 0
    ASSERT_EQ(ref->fold_to(1, &fb), 2u);
    EXPECT_EQ(fa, fb);
    EXPECT_EQ(r->path_walks(), 1u);
    EXPECT_EQ(r->memory().paths, 0u);
    EXPECT_EQ(r->memory().forgotten_paths, named_later ? 4u : 3u);
    EXPECT_TRUE(r->path_counts_exact());
    expect_same(*r, *ref, "folded");
    PathEvent un;  // by another process, by a path of the unnamed file: still attributed
    un.proc = {43, 8};
    un.op = IOLENS_PATH_UNLINK;
    un.str1 = "/d/a2";
    for (Recorder* x : {r.get(), ref.get()}) x->on_event(un);
    const RunSnapshot s = r->snapshot(ClockBase{});
    bool found = false;
    for (const auto& f : s.files)
      if (f.pid == 43 && f.ino == 77) found = f.unlinks == 1 && f.path == "/d/a2";
    EXPECT_TRUE(found);
    EXPECT_TRUE(r->path_counts_exact());
    expect_same(*r, *ref, "unlinked");
  }
}

TEST(RecorderState, RefusesEveryTruncationAndExtension) {
  const std::string blob = small_recorder().save();
  for (std::size_t n = 0; n < blob.size(); ++n)
    expect_refused(std::string_view(blob).substr(0, n), "prefix of " + std::to_string(n));
  expect_refused(blob + "x", "a byte appended");
  // The same behind a right length and CRC: the payload decoder itself must see the end.
  const std::string payload = payload_of(blob);
  for (std::size_t n = 0; n < payload.size(); ++n)
    expect_refused(reseal(blob, std::string_view(payload).substr(0, n)),
                   "resealed payload prefix of " + std::to_string(n));
  expect_refused(reseal(blob, payload + "x"), "resealed payload with a byte appended");
  if (HasFailure()) return;
  std::printf("small blob: %zu bytes, %zu prefixes refused\n", blob.size(),
              blob.size() + payload.size());
}

TEST(RecorderState, RefusesEveryDamagedByte) {
  const std::string blob = small_recorder().save();
  std::string bad = blob;
  for (std::size_t i = 0; i < bad.size(); ++i) {
    for (int flip : {1 << (i % 8), 0xff}) {
      bad[i] = static_cast<char>(bad[i] ^ flip);
      expect_refused(bad, "byte " + std::to_string(i) + " ^ " + std::to_string(flip));
      bad[i] = blob[i];
    }
    if (HasFailure()) return;
  }
}

TEST(RecorderState, RefusesHugeLengthsAndCounts) {
  const std::string blob = small_recorder().save();
  // Header: a payload length far past the blob.
  std::string big = blob;
  put_le(big, 16, uint64_t{1} << 62, 8);
  expect_refused(big, "huge payload length");

  // Payload (docs/state-format.md): root pid, tracer pid, folded_records, final_snapshots,
  // short_at (flag + value), then the lost causes: a count, then (string, u64) sorted by name.
  std::string payload = payload_of(blob);
  std::size_t at = 4 + 4 + 8 + 8;
  ASSERT_LE(static_cast<uint8_t>(payload[at]), 1);
  at += 1 + (payload[at] ? 8 : 0);
  const std::size_t count_at = at;
  ASSERT_GE(get_le(payload, count_at, 8), 10u);
  const std::size_t string_at = count_at + 8;
  ASSERT_EQ(get_le(payload, string_at, 4), 2u);
  ASSERT_EQ(payload.substr(string_at + 4, 2), "aa");
  ASSERT_EQ(get_le(payload, string_at + 6, 8), 1u);
  ASSERT_EQ(payload.substr(string_at + 14 + 4, 2), "ab");
  ASSERT_NE(load_ok(reseal(blob, payload)), nullptr);  // the resealing itself is right

  for (uint64_t n : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{payload.size()}}) {
    std::string p = payload;
    put_le(p, count_at, n, 8);
    expect_refused(reseal(blob, p), "lost count " + std::to_string(n));
  }
  for (uint64_t n : {uint64_t{0xffffffff}, uint64_t{payload.size()}}) {
    std::string p = payload;
    put_le(p, string_at, n, 4);
    expect_refused(reseal(blob, p), "string length " + std::to_string(n));
  }
  // Keys must be strictly increasing, as the maps held them: a duplicate, then a disorder.
  for (char c : {'a', 'Z'}) {
    std::string p = payload;
    p[string_at + 14 + 4 + 1] = c;  // "ab" -> "aa", "aZ"
    std::string error;
    EXPECT_EQ(Recorder::load(reseal(blob, p), error), nullptr) << c;
    EXPECT_NE(error.find("strictly increasing"), std::string::npos) << error;
  }
}

TEST(RecorderState, RandomlyDamagedPayloadsNeverCrash) {
  // A right CRC over random damage: whatever load accepts must snapshot, fold and save.
  Recorder r(100, 1);
  Workload w(99);
  w.run({&r}, 250);
  const std::string blob = r.save();
  const std::string payload = payload_of(blob);
  int accepted = 0;
  constexpr int kTries = 2000;
  for (int i = 0; i < kTries; ++i) {
    std::string p = payload;
    const uint64_t edits = 1 + w.rnd(4);
    for (uint64_t e = 0; e < edits; ++e) {
      const std::size_t at = w.rnd(p.size());
      switch (w.rnd(4)) {
        case 0: p[at] = static_cast<char>(w.rnd(256)); break;
        case 1: p[at] = static_cast<char>(0xff); break;
        case 2: p.erase(at, 1 + w.rnd(16)); break;
        default: p.insert(at, std::string(1 + w.rnd(8), static_cast<char>(w.rnd(256)))); break;
      }
    }
    std::string error;
    auto back = Recorder::load(reseal(blob, p), error);
    if (!back) {
      EXPECT_FALSE(error.empty());
      continue;
    }
    ++accepted;
    (void)back->snapshot(ClockBase{});
    back->fold_to(10);
    (void)back->snapshot(ClockBase{});
    auto again = load_ok(back->save());
    ASSERT_NE(again, nullptr);
  }
  std::printf("damaged payloads: %d of %d accepted (damage inside values), none crashed\n",
              accepted, kTries);
}

TEST(RecorderState, TwoHundredThousandRecords) {
  constexpr uint32_t kFiles = 200'000;
#if !IOLENS_UNDER_SANITIZER
  // In use: the arenas' chunks and the mmapped ones (the path index's bucket array).
  auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  const std::size_t heap0 = heap();
#endif
  Recorder r(0, 0);
  for (uint32_t i = 1; i <= kFiles; ++i) {
    const ProcKey p{1000 + i % 50, 5000 + i % 50};
    FileCounters c = new_counters();
    c.opens = c.closes = 1;
    c.reads = 1 + i % 9;
    c.bytes_read = uint64_t{i} * 4096;
    c.read_start_ns = 10'000 + i;
    c.read_end_ns = 20'000 + i;
    c.first_io_type = c.last_io_type = IOLENS_IO_READ;
    add_named_file(r, p, i, 7, "shard-" + std::to_string(i) + ".tfrecord\0train\0data\0scratch\0"s,
                   c, i % 4 != 0);
  }
  ASSERT_EQ(r.file_records(), kFiles);
#if !IOLENS_UNDER_SANITIZER
  // What the recorder holds for them, measured by the allocator: each record (three quarters
  // out of the kernel, a quarter live, both kept packed), its name and its path index entry.
  // Measured 605 here (589 before ABI 14's third mask word and 557 before each record kept its
  // 32-byte fold rank); with the live parts
  // whole it was 765 (on d2ca8f8), with whole counters
  // for every record 1,407 (on e04b216).
  const double per_record = static_cast<double>(heap() - heap0) / kFiles;
  std::printf("%u records held: %.0f bytes each (record, name, path index)\n", kFiles, per_record);
  EXPECT_LT(per_record, 680.0);
#endif
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::duration<double, std::milli>>(d).count();
  };
  const auto t0 = Clock::now();
  const std::string blob = r.save();
  const auto t1 = Clock::now();
  std::string error;
  auto back = Recorder::load(blob, error);
  const auto t2 = Clock::now();
  ASSERT_NE(back, nullptr) << error;
  std::printf("%u records: blob %.1f MiB (%.0f bytes/record), save %.0f ms, load %.0f ms\n", kFiles,
              static_cast<double>(blob.size()) / (1 << 20),
              static_cast<double>(blob.size()) / kFiles, ms(t1 - t0), ms(t2 - t1));
  EXPECT_EQ(back->file_records(), kFiles);
  EXPECT_EQ(back->memory().names, kFiles);
  EXPECT_EQ(back->memory().paths, kFiles);
  EXPECT_TRUE(back->save() == blob);
  // And it goes on as the original: one fold, the same result.
  std::vector<FileIdentity> fa, fb;
  EXPECT_EQ(r.fold_to(100'000, &fa), back->fold_to(100'000, &fb));
  EXPECT_EQ(fa, fb);
  EXPECT_EQ(r.memory().folded_files, back->memory().folded_files);
  EXPECT_EQ(r.memory().forgotten_paths, back->memory().forgotten_paths);
}

TEST(RecorderState, TheBlobIsMadeInOneBufferOfItsSize) {
  // A daemon gathers every job's blob in its loop at each save: a buffer grown by doubling
  // holds up to twice the blob and copies it as it grows (44 MB for a job of 3 KB paths in
  // e2e_daemon_memory_bound). Long names and many records must be reserved for, not grown into.
  Recorder r(0, 0);
  for (uint32_t i = 1; i <= 3000; ++i) {
    FileCounters c = new_counters();
    c.opens = c.closes = 1;
    c.writes = 1;
    c.bytes_written = i;
    add_named_file(r, ProcKey{1000 + i % 7, 5000 + i % 7}, i, 1,
                   "f" + std::to_string(i) + '\0' + std::string(3000, 'd') + '\0', c, i % 2 == 0);
  }
  // Folded too: the "other files" records and their files' ids.
  EXPECT_GT(r.fold_to(1000), 0u);
  const std::vector<uint8_t> blob = r.save_bytes();
  EXPECT_GT(blob.size(), 1000u * 3000 * 2);  // each path kept and its index entry
  // Reserved within a few percent of the size: a buffer grown by doubling ends up to twice it.
  std::printf("blob %zu bytes in a buffer of %zu\n", blob.size(), blob.capacity());
  EXPECT_GE(blob.capacity(), blob.size());
  EXPECT_LE(blob.capacity(), blob.size() / 100 * 105) << blob.size() << " bytes in "
                                                       << blob.capacity();
  std::string error;
  EXPECT_NE(Recorder::load(std::string_view(reinterpret_cast<const char*>(blob.data()), blob.size()),
                           error),
            nullptr)
      << error;
}

TEST(RecorderState, SavedIntoAUsedBufferTheSameBytesInItsPages) {
  // iolensd gathers each save into the last save's buffers: whatever they held, the bytes are
  // save_bytes()'s, and a buffer big enough is written in place (no fresh pages to fault in).
  Recorder r(0, 0);
  for (uint32_t i = 1; i <= 500; ++i) {
    FileCounters c = new_counters();
    c.opens = c.closes = c.reads = 1;
    c.bytes_read = i;
    add_named_file(r, ProcKey{1000, 5000}, i, 1, "f" + std::to_string(i) + "\0d\0"s, c, i % 3 == 0);
  }
  const std::vector<uint8_t> want = r.save_bytes(false);
  std::vector<uint8_t> used(want.size() * 2, 0xab);  // a bigger blob's leftovers
  const uint8_t* pages = used.data();
  r.save_into(used, false);
  EXPECT_EQ(used, want);
  EXPECT_EQ(used.data(), pages);
  std::vector<uint8_t> small(16, 0xcd);  // too small: grown, still the same bytes
  r.save_into(small, false);
  EXPECT_EQ(small, want);
  std::vector<uint8_t> with_live;
  r.save_into(with_live, true);
  EXPECT_EQ(with_live, r.save_bytes(true));
}
