// SPDX-License-Identifier: Apache-2.0
// BPF tier: load the real programs, TRIGGER real syscalls in a traced child, then ASSERT every
// field the kernel recorded against what the child is known to have done.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "core/common_values.hpp"
#include "core/counters.hpp"
#include "core/events.hpp"
#include "core/paths.hpp"
#include "core/recorder.hpp"
#include "loader/loader.hpp"
#include "loader/preflight.hpp"
#include "bpf_test_util.hpp"

namespace fs = std::filesystem;
using iolens::core::FileCounters;
using iolens::core::FileSnapshot;
using iolens::core::ProcessSnapshot;
using iolens::core::RunSnapshot;
using iolens::loader::Loader;

namespace {

/// A fresh loader per test; skips (with the reason) when this process may not load BPF.
class BpfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto s = iolens::loader::check_privileges(); !s) GTEST_SKIP() << s.message;
    opts_.max_file_records = max_records();
    opts_.fast_file_records = fast_records();
    opts_.max_tally_records = max_tally_records();
    iolens::Status st;
    loader_ = Loader::create(opts_, st);
    ASSERT_NE(loader_, nullptr) << st.message;
    char tmpl[] = "/var/tmp/iolens-bpf-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = fs::canonical(tmpl);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  virtual uint32_t max_records() const { return 65536; }
  virtual uint32_t fast_records() const { return 0; }
  virtual uint32_t max_tally_records() const { return 0; }
  /// Files written by a child, drained three times with each disposition (whole, or in pieces).
  void check_drain_hands_every_record_once(const std::string& prefix, bool in_pieces);

  /// Forks a waiting child, marks it traced (or not), releases it to run `body`.
  pid_t run_child(const std::function<void()>& body, bool traced = true) {
    iolens::bpftest::ReleaseFlag go;
    const pid_t pid = fork();
    if (pid == 0) {
      go.wait();
      body();
      _exit(0);
    }
    if (traced) {
      auto s = loader_->trace_process(pid);
      EXPECT_TRUE(s.ok) << s.message;
    }
    go.release();
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    return pid;
  }

  /// Everything the kernel holds, through the same recorder the CLI uses.
  RunSnapshot collect(pid_t root) {
    iolens::core::Recorder rec(static_cast<uint32_t>(root), static_cast<uint32_t>(getpid()));
    auto sink = [&](std::span<const uint8_t> b) {
      auto r = iolens::core::decode_event(b);
      EXPECT_TRUE(r.ok) << r.error;
      if (r.ok) rec.on_event(r.event);
    };
    loader_->consume_events(sink);
    auto never = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
    loader_->drain_files(never, [&](const auto& k, const auto& c, bool rm) { rec.on_file(k, c, rm); });
    loader_->drain_others(never, [&](const auto& k, const auto& c, bool rm) { rec.on_other(k, c, rm); });
    return rec.snapshot(iolens::core::ClockBase{});
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::map<std::string, const FileSnapshot*> files_of(const RunSnapshot& s, pid_t pid) {
    std::map<std::string, const FileSnapshot*> out;
    for (const auto& f : s.files)
      if (f.pid == static_cast<uint32_t>(pid)) out[f.path] = &f;
    return out;
  }

  iolens::loader::Options opts_;
  std::unique_ptr<Loader> loader_;
  fs::path dir_;
};

uint64_t total(const __u64 (&buckets)[IOLENS_NR_LAT_BUCKETS]) {
  uint64_t n = 0;
  for (__u64 b : buckets) n += b;
  return n;
}

/// The latency bucket of `ns` computed from the user-space bounds, not by the kernel's function.
std::size_t lat_bucket_of(uint64_t ns) {
  const auto& b = iolens::core::kLatencyBoundsNs;
  return static_cast<std::size_t>(std::lower_bound(b.begin(), b.end(), ns) - b.begin());
}

/// The highest non-empty bucket, or -1.
int highest_bucket(const __u64 (&buckets)[IOLENS_NR_LAT_BUCKETS]) {
  for (int i = IOLENS_NR_LAT_BUCKETS - 1; i >= 0; --i)
    if (buckets[i]) return i;
  return -1;
}

void write_file(const std::string& p, size_t size) {
  std::string data(size, 'x');
  int fd = open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0 || write(fd, data.data(), data.size()) != static_cast<ssize_t>(size)) std::abort();
  close(fd);
}

/// In a traced child: 3 writes of 4096 at 0, 4096, 8192; a pread of 1000 at 100; a seek to 0;
/// reads of 5000 to EOF (5000 @0, 5000 @5000, 2288 @10000, 0 @12288); fsync; close.
void rw_pattern(const std::string& f) {
  int fd = open(f.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
  char buf[8192] = {};
  for (int i = 0; i < 3; ++i)
    if (write(fd, buf, 4096) != 4096) _exit(1);
  if (pread(fd, buf, 1000, 100) != 1000) _exit(2);
  lseek(fd, 0, SEEK_SET);
  while (read(fd, buf, 5000) > 0) {
  }
  fsync(fd);
  close(fd);
}

/// The counts rw_pattern's calls make, whatever the timing: its ground truth, by construction.
void expect_rw_pattern_counts(const iolens::core::FileCounters& c) {
  EXPECT_EQ(c.opens, 1u);
  EXPECT_EQ(c.writes, 3u);
  EXPECT_EQ(c.bytes_written, 12288u);
  EXPECT_EQ(c.reads, 5u);
  EXPECT_EQ(c.bytes_read, 1000u + 5000 + 5000 + 2288);
  // Reads: 100 (> 0: seq), 0 (back), 5000 (consec), 10000 (consec), 12288 (consec).
  EXPECT_EQ(c.seq_reads, 4u);
  EXPECT_EQ(c.consec_reads, 3u);
  EXPECT_EQ(c.seeks, 1u);
  EXPECT_EQ(c.fsyncs, 1u);
  EXPECT_EQ(c.closes, 1u);
}

}  // namespace

TEST_F(BpfTest, EveryProgramAttached) {
  ASSERT_FALSE(loader_->programs().empty());
  for (const auto& p : loader_->programs()) EXPECT_TRUE(p.attached) << p.name << ": " << p.error;
}

// Issue 5 item 8: optional programs degrade one by one. Every optional program attaches on this
// kernel (EveryProgramAttached); one disabled is reported not attached with its reason while
// the others run, and names that are not optional programs are refused with a clear error.
TEST_F(BpfTest, ProgramMissesReadForEveryLoadedProgram) {
  // bpf_prog_info.recursion_misses of each program (lost.program_misses): one entry per
  // attached program, by its name, and their sum in stats().
  std::set<std::string> attached;
  for (const auto& p : loader_->programs())
    if (p.attached) attached.insert(p.name);
  std::set<std::string> read;
  uint64_t sum = 0;
  for (const auto& [name, n] : loader_->program_misses()) {
    read.insert(name);
    sum += n;
  }
  for (const auto& name : attached) EXPECT_TRUE(read.count(name)) << name << " not read";
  EXPECT_LE(sum, loader_->stats()[iolens::loader::kProgramMisses]);
}

TEST_F(BpfTest, OptionalProgramsDegradeOneByOne) {
  const std::set<std::string> core = {"sched_process_fork", "sched_process_exec",
                                      "sched_process_exit", "sys_enter", "sys_exit"};
  std::vector<std::string> extras;
  for (const auto& p : loader_->programs())
    if (!core.count(p.name)) extras.push_back(p.name);
  ASSERT_GE(extras.size(), 2u) << "no optional programs in the object";
  loader_.reset();  // one agent at a time holds the programs

  iolens::loader::Options opts = opts_;
  opts.disabled_programs = {extras[0]};
  iolens::Status st;
  auto l = Loader::create(opts, st);
  ASSERT_NE(l, nullptr) << st.message;
  size_t attached = 0;
  for (const auto& p : l->programs()) {
    if (p.name == extras[0]) {
      EXPECT_FALSE(p.attached);
      EXPECT_EQ(p.error, "disabled by configuration");
    } else {
      EXPECT_TRUE(p.attached) << p.name << ": " << p.error;
      ++attached;
    }
  }
  EXPECT_EQ(attached, core.size() + extras.size() - 1);
  l.reset();

  for (const std::string bad : {"sys_exit", "no_such_program"}) {
    opts.disabled_programs = {bad};
    EXPECT_EQ(Loader::create(opts, st), nullptr) << bad;
    EXPECT_NE(st.message.find(bad), std::string::npos) << st.message;
    EXPECT_NE(st.message.find(bad == "sys_exit" ? "core program" : "no optional program"),
              std::string::npos)
        << st.message;
  }
}

TEST_F(BpfTest, ReadsWritesAndPatternExact) {
  const std::string f = path("data.bin");
  const pid_t pid = run_child([&] { rw_pattern(f); });
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  ASSERT_TRUE(files.count(f)) << "no record for " << f;
  const auto& c = files[f]->counters;
  expect_rw_pattern_counts(c);
  EXPECT_EQ(c.max_byte_written, 12287);
  EXPECT_EQ(c.max_byte_read, 12287);
  // Writes: 0 (not > last_byte 0), 4096 (seq+consec), 8192 (seq+consec).
  EXPECT_EQ(c.seq_writes, 2u);
  EXPECT_EQ(c.consec_writes, 2u);
  EXPECT_EQ(c.rw_switches, 1u);
  EXPECT_EQ(c.size_write[2], 3u);  // 4096: 1K-10K
  EXPECT_EQ(c.size_read[0], 1u);   // the 0-byte read at EOF
  EXPECT_EQ(c.size_read[1], 1u);   // 1000
  EXPECT_EQ(c.size_read[2], 3u);   // 5000, 5000, 2288
  EXPECT_GT(c.read_time_ns, 0u);
  EXPECT_GT(c.write_time_ns, 0u);
  EXPECT_GT(c.meta_time_ns, 0u);
  // Every counted data call is in the latency histogram once; fsync is not a write there, so
  // lat_write_sum_ns is not compared with write_time_ns (which includes the fsync) here.
  EXPECT_EQ(total(c.lat_read), 5u);
  EXPECT_EQ(total(c.lat_write), 3u);
  EXPECT_GE(c.lat_read_sum_ns, c.read_time_ns);
  EXPECT_GT(c.lat_read_sum_ns, 0u);
  EXPECT_GT(c.lat_write_sum_ns, 0u);
  struct stat st {};
  ASSERT_EQ(stat(f.c_str(), &st), 0);
  EXPECT_EQ(files[f]->dev, st.st_dev);
  EXPECT_EQ(files[f]->ino, st.st_ino);
}

/// Timing off (docs/counters.md#timing): close_enter instead of sys_enter, no clock.
class BpfTimingOffTest : public BpfTest {
 protected:
  void SetUp() override {
    opts_.timing = IOLENS_TIMING_OFF;
    BpfTest::SetUp();
  }
};

TEST_F(BpfTimingOffTest, CloseEnterInsteadOfSysEnterAndNoTrace) {
  ASSERT_EQ(loader_->timing(), IOLENS_TIMING_OFF) << loader_->timing_note();
  std::map<std::string, bool> attached;
  for (const auto& p : loader_->programs()) attached[p.name] = p.attached;
  EXPECT_TRUE(attached["close_enter"]);
  EXPECT_TRUE(attached["sys_exit"]);
  EXPECT_EQ(attached.count("sys_enter"), 0u) << "sys_enter is not loaded with timing off";
  EXPECT_TRUE(loader_->syscall_hooks());
  const auto st = loader_->set_trace_mode(IOLENS_TRACE_ALL);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("timing off"), std::string::npos) << st.message;
  EXPECT_EQ(loader_->trace_mode(), IOLENS_TRACE_OFF);
}

// The same calls as ReadsWritesAndPatternExact: every count the same, every time 0, no
// latency bucket; the close counted through close_enter.
TEST_F(BpfTimingOffTest, CountsExactWithNoTime) {
  const std::string f = path("data.bin");
  const pid_t pid = run_child([&] { rw_pattern(f); });
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  ASSERT_TRUE(files.count(f)) << "no record for " << f;
  const auto& c = files[f]->counters;
  expect_rw_pattern_counts(c);
  EXPECT_EQ(c.read_time_ns, 0u);
  EXPECT_EQ(c.write_time_ns, 0u);
  EXPECT_EQ(c.meta_time_ns, 0u);
  EXPECT_EQ(c.max_read_time_ns, 0u);
  EXPECT_EQ(c.open_start_ns, 0u);
  EXPECT_EQ(c.close_end_ns, 0u);
  EXPECT_EQ(total(c.lat_read), 0u);
  EXPECT_EQ(total(c.lat_write), 0u);
  EXPECT_EQ(c.lat_read_sum_ns, 0u);
}

// A drain reads the map a batch at a time (up to 1024 records) and handles each batch before
// reading the next, deleting records as it goes. 3,000 files, each written with its own byte
// count, and a disposition per file chosen by the test: every record must be handed over
// exactly once with its own count, removed ones never again, deferred ones until deleted (and
// RemoveFinalNow ones deleted at the walk's end although the caller defers the others).
void BpfTest::check_drain_hands_every_record_once(const std::string& prefix, bool in_pieces) {
  constexpr int kFiles = 3000;
  const pid_t pid = run_child([&] {
    std::string data(6, 'x');
    for (int i = 0; i < kFiles; ++i) {
      const std::string p = path(prefix + std::to_string(i));
      const int fd = open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      if (fd < 0 || write(fd, data.data(), static_cast<size_t>(i % 6 + 1)) != i % 6 + 1) _exit(1);
      close(fd);
    }
  });
  std::map<uint64_t, uint64_t> written;  // inode -> bytes, from the files themselves
  for (int i = 0; i < kFiles; ++i) {
    struct stat sb {};
    ASSERT_EQ(stat(path(prefix + std::to_string(i)).c_str(), &sb), 0);
    written[sb.st_ino] = static_cast<uint64_t>(sb.st_size);
  }
  ASSERT_EQ(written.size(), static_cast<size_t>(kFiles));
  using D = Loader::Disposition;
  // 1 byte: taken live; 2: final, deferred; 3: skipped; 4 and 5: kept; 6: final, now.
  auto disposition = [](uint64_t bytes) {
    return bytes == 1   ? D::RemoveLive
           : bytes == 2 ? D::RemoveFinal
           : bytes == 3 ? D::Skip
           : bytes == 6 ? D::RemoveFinalNow
                        : D::Keep;
  };
  auto removes = [](D d) {
    return d == D::RemoveLive || d == D::RemoveFinal || d == D::RemoveFinalNow;
  };
  struct Seen {
    int times = 0;
    bool removed = false;
    uint64_t bytes = 0;
  };
  auto drain = [&](bool by_test, std::vector<iolens_file_key>* deferred) {
    std::map<uint64_t, Seen> seen;
    auto remove = [&](const iolens_file_key& k, const iolens_file_counters& c) {
      if (k.tgid != static_cast<uint32_t>(pid) || !written.count(k.ino) || !by_test) return D::Keep;
      return disposition(c.bytes_written);
    };
    auto sink = [&](const iolens_file_key& k, const iolens_file_counters& c, bool removed) {
      if (k.tgid != static_cast<uint32_t>(pid) || !written.count(k.ino)) return;
      Seen& s = seen[k.ino];
      ++s.times;
      s.removed = removed;
      s.bytes = c.bytes_written;
    };
    if (!in_pieces) {
      auto st = loader_->drain_files(remove, sink, deferred);
      EXPECT_TRUE(st.ok) << st.message;
      return seen;
    }
    Loader::WalkPosition at;
    int pieces = 0;
    do {
      auto st = loader_->drain_files(remove, sink, deferred, &at, 1);
      EXPECT_TRUE(st.ok) << st.message;
      ++pieces;
    } while (at.resume && pieces < 1000);
    // 3,000 of ours and whatever else the map holds, at most 1,024 a batch.
    EXPECT_GE(pieces, 3);
    EXPECT_FALSE(at.resume);
    return seen;
  };
  std::vector<iolens_file_key> deferred;
  const auto first = drain(true, &deferred);
  size_t expect_deferred = 0;
  for (const auto& [ino, bytes] : written) {
    const D d = disposition(bytes);
    expect_deferred += d == D::RemoveFinal;
    if (d == D::Skip) {
      EXPECT_EQ(first.count(ino), 0u) << "skipped record " << ino << " handed over";
      continue;
    }
    ASSERT_EQ(first.count(ino), 1u) << "record of inode " << ino << " not handed over";
    const Seen& s = first.at(ino);
    EXPECT_EQ(s.times, 1) << "inode " << ino;
    EXPECT_EQ(s.bytes, bytes) << "inode " << ino;
    EXPECT_EQ(s.removed, removes(d)) << "inode " << ino;
  }
  EXPECT_EQ(deferred.size(), expect_deferred);
  // Taken live or final now: gone. Deferred: still in the kernel until deleted. Skipped and
  // kept: there.
  const auto second = drain(false, nullptr);
  for (const auto& [ino, bytes] : written) {
    const D d = disposition(bytes);
    const int times = second.count(ino) ? second.at(ino).times : 0;
    EXPECT_EQ(times, d == D::RemoveLive || d == D::RemoveFinalNow ? 0 : 1) << "inode " << ino;
  }
  loader_->delete_files(deferred);
  const auto third = drain(false, nullptr);
  for (const auto& [ino, bytes] : written) {
    const D d = disposition(bytes);
    EXPECT_EQ(third.count(ino), removes(d) ? 0u : 1u)
        << "inode " << ino;
  }
}


// Whole, and in pieces (a deadline already passed: the walk pauses after each batch and goes
// on from where it stood, as the daemon's loop does between answers).
TEST_F(BpfTest, DrainHandsEveryRecordOnceAcrossBatches) {
  for (const bool in_pieces : {false, true}) {
    SCOPED_TRACE(in_pieces ? "in pieces" : "whole");
    check_drain_hands_every_record_once(in_pieces ? "p" : "w", in_pieces);
  }
}

TEST_F(BpfTest, LatencyHistogramOfRealReadsAndWrites) {
  constexpr int kReads = 40, kWrites = 25;
  const std::string f = path("lat.bin");
  write_file(f, 64 * 1024);
  const std::string out = path("lat_out.bin");
  const pid_t pid = run_child([&] {
    char buf[4096] = {};
    int fd = open(f.c_str(), O_RDONLY);
    for (int i = 0; i < kReads; ++i)
      if (pread(fd, buf, sizeof(buf), (i % 16) * 4096) != 4096) _exit(1);
    close(fd);
    fd = open(out.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    for (int i = 0; i < kWrites; ++i)
      if (write(fd, buf, sizeof(buf)) != 4096) _exit(2);
    if (pwrite(fd, buf, 10, -1) >= 0) _exit(3);  // EINVAL: not counted
    if (read(fd, buf, 1) >= 0) _exit(4);         // EBADF on O_WRONLY: not counted
    close(fd);
  });
  auto files = files_of(collect(pid), pid);
  ASSERT_TRUE(files.count(f));
  ASSERT_TRUE(files.count(out));
  const auto& r = files[f]->counters;
  EXPECT_EQ(r.reads, static_cast<uint64_t>(kReads));
  EXPECT_EQ(total(r.lat_read), r.reads);
  EXPECT_EQ(total(r.lat_write), 0u);
  EXPECT_GT(r.read_time_ns, 0u);
  EXPECT_GE(r.lat_read_sum_ns, r.read_time_ns);  // one thread: equal, but overlap only adds
  EXPECT_GE(r.lat_read_sum_ns, r.max_read_time_ns);
  EXPECT_EQ(r.lat_write_sum_ns, 0u);
  // The slowest read is in the highest non-empty bucket.
  EXPECT_EQ(highest_bucket(r.lat_read), static_cast<int>(lat_bucket_of(r.max_read_time_ns)));
  const auto& w = files[out]->counters;
  EXPECT_EQ(w.writes, static_cast<uint64_t>(kWrites));
  EXPECT_EQ(w.reads, 0u);
  EXPECT_EQ(total(w.lat_write), w.writes);
  EXPECT_EQ(total(w.lat_read), 0u);
  EXPECT_GT(w.write_time_ns, 0u);
  EXPECT_GE(w.lat_write_sum_ns, w.write_time_ns);  // no fsync here: write_time is writes only
  EXPECT_GE(w.lat_write_sum_ns, w.max_write_time_ns);
  EXPECT_EQ(w.lat_read_sum_ns, 0u);
  EXPECT_EQ(highest_bucket(w.lat_write), static_cast<int>(lat_bucket_of(w.max_write_time_ns)));
}

TEST_F(BpfTest, NamesAreCanonicalThroughSymlinksDotDotAndDirfd) {
  write_file(path("target.bin"), 10);
  fs::create_directory(dir_ / "sub");
  fs::create_symlink(dir_ / "target.bin", dir_ / "link.bin");
  write_file(path("rel.bin"), 10);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    char b[16];
    int fd = open((d + "/link.bin").c_str(), O_RDONLY);
    if (read(fd, b, sizeof(b)) != 10) _exit(1);
    close(fd);
    int dfd = open((d + "/sub").c_str(), O_RDONLY | O_DIRECTORY);
    fd = openat(dfd, "../rel.bin", O_RDONLY);
    if (read(fd, b, sizeof(b)) != 10) _exit(2);
    int fd2 = dup(fd);
    if (pread(fd2, b, 4, 0) != 4) _exit(3);
    close(fd2);
    close(fd);
    close(dfd);
  });
  auto files = files_of(collect(pid), pid);
  ASSERT_TRUE(files.count(path("target.bin"))) << "symlink not resolved to its target";
  EXPECT_FALSE(files.count(path("link.bin")));
  EXPECT_EQ(files[path("target.bin")]->counters.bytes_read, 10u);
  ASSERT_TRUE(files.count(path("rel.bin")));
  const auto& c = files[path("rel.bin")]->counters;
  EXPECT_EQ(c.opens, 2u);  // openat + dup
  EXPECT_EQ(c.dups, 1u);
  EXPECT_EQ(c.reads, 2u);  // one through the dup'd descriptor
  EXPECT_EQ(c.bytes_read, 14u);
  EXPECT_EQ(c.closes, 2u);
}

TEST_F(BpfTest, StatsMmapCopyAndOtherDescriptors) {
  write_file(path("never_opened.bin"), 100);
  write_file(path("mapped.bin"), 8192);
  write_file(path("src.bin"), 3000);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    struct stat st;
    stat((d + "/never_opened.bin").c_str(), &st);
    lstat((d + "/never_opened.bin").c_str(), &st);
    int fd = open((d + "/mapped.bin").c_str(), O_RDONLY);
    fstat(fd, &st);
    void* p = mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) _exit(1);
    munmap(p, 8192);
    close(fd);
    int in = open((d + "/src.bin").c_str(), O_RDONLY);
    int out = open((d + "/dst.bin").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (copy_file_range(in, nullptr, out, nullptr, 3000, 0) != 3000) _exit(2);
    close(in);
    close(out);
    int pfd[2];
    if (pipe(pfd) != 0 || write(pfd[1], "abc", 3) != 3) _exit(3);
    char b[3];
    if (read(pfd[0], b, 3) != 3) _exit(4);
  });
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  ASSERT_TRUE(files.count(path("never_opened.bin")));
  EXPECT_EQ(files[path("never_opened.bin")]->counters.stats, 2u);
  EXPECT_EQ(files[path("never_opened.bin")]->counters.opens, 0u);
  ASSERT_TRUE(files.count(path("mapped.bin")));
  EXPECT_EQ(files[path("mapped.bin")]->counters.stats, 1u);
  EXPECT_EQ(files[path("mapped.bin")]->counters.mmaps, 1u);
  ASSERT_TRUE(files.count(path("src.bin")));
  ASSERT_TRUE(files.count(path("dst.bin")));
  EXPECT_EQ(files[path("src.bin")]->counters.bytes_read, 3000u);
  EXPECT_EQ(files[path("dst.bin")]->counters.bytes_written, 3000u);
  // copy_file_range: one read of the source and one write of the destination, both timed.
  EXPECT_EQ(total(files[path("src.bin")]->counters.lat_read), 1u);
  EXPECT_EQ(total(files[path("src.bin")]->counters.lat_write), 0u);
  EXPECT_GT(files[path("src.bin")]->counters.lat_read_sum_ns, 0u);
  EXPECT_EQ(total(files[path("dst.bin")]->counters.lat_write), 1u);
  EXPECT_EQ(total(files[path("dst.bin")]->counters.lat_read), 0u);
  EXPECT_GT(files[path("dst.bin")]->counters.lat_write_sum_ns, 0u);
  // The pipe is never a file record; it is counted apart.
  const ProcessSnapshot* proc = nullptr;
  for (const auto& p : snap.processes)
    if (p.pid == static_cast<uint32_t>(pid)) proc = &p;
  ASSERT_NE(proc, nullptr);
  ASSERT_TRUE(proc->other_io.count("pipe"));
  EXPECT_EQ(proc->other_io.at("pipe").bytes_written, 3u);
  EXPECT_EQ(proc->other_io.at("pipe").bytes_read, 3u);
  // A copy's sides tally their size (ABI 15); a pipe's record tallies nothing (no output has
  // them, and its calls skip that work).
  EXPECT_EQ(files[path("src.bin")]->counters.access.value[0], 3000u + 1);
  EXPECT_EQ(files[path("src.bin")]->counters.access.count[0], 1u);
  EXPECT_EQ(files[path("dst.bin")]->counters.access.value[0], 3000u + 1);
  int pipe_records = 0;
  auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
  loader_->drain_others(keep, [&](const iolens_file_key& k, const iolens::core::FileCounters& c, bool) {
    if (k.tgid != static_cast<uint32_t>(pid) || k.ino != (S_IFIFO >> 12)) return;
    ++pipe_records;
    EXPECT_EQ(c.reads + c.writes, 2u);
    EXPECT_EQ(iolens::core::tally_calls(c.access, c.more.access) +
                  iolens::core::tally_calls(c.stride, c.more.stride),
              0u);
  });
  EXPECT_EQ(pipe_records, 1);
}

TEST_F(BpfTest, RenameAndUnlinkAttributedByPath) {
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    int fd = open((d + "/ckpt.tmp").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (write(fd, "x", 1) != 1) _exit(1);
    close(fd);
    if (chdir(d.c_str()) != 0) _exit(2);
    if (rename("ckpt.tmp", "ckpt.pt") != 0) _exit(3);
    fd = open("gone.tmp", O_CREAT | O_WRONLY, 0644);
    close(fd);
    if (unlink("./gone.tmp") != 0) _exit(4);
  });
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  ASSERT_TRUE(files.count(path("ckpt.tmp")));
  EXPECT_EQ(files[path("ckpt.tmp")]->rename_sources, 1u);
  EXPECT_EQ(files[path("ckpt.tmp")]->renamed_to, path("ckpt.pt"));
  ASSERT_TRUE(files.count(path("gone.tmp")));
  EXPECT_EQ(files[path("gone.tmp")]->unlinks, 1u);
}

TEST_F(BpfTest, FollowsForksThreadsAndUntracedStayInvisible) {
  write_file(path("a.bin"), 4096);
  write_file(path("noise.bin"), 4096);
  const std::string d = dir_.string();
  pid_t grandchild = 0;
  int gpipe[2];
  ASSERT_EQ(pipe(gpipe), 0);
  const pid_t pid = run_child([&] {
    const pid_t g = fork();
    if (g == 0) {
      char b[4096];
      int fd = open((d + "/a.bin").c_str(), O_RDONLY);
      if (read(fd, b, sizeof(b)) != 4096) _exit(1);
      close(fd);
      _exit(3);
    }
    if (write(gpipe[1], &g, sizeof(g)) != sizeof(g)) _exit(1);
    int st;
    waitpid(g, &st, 0);
  });
  ASSERT_EQ(read(gpipe[0], &grandchild, sizeof(grandchild)), static_cast<ssize_t>(sizeof(grandchild)));
  close(gpipe[0]);
  close(gpipe[1]);
  const pid_t noise = run_child(
      [&] {
        char b[4096];
        int fd = open((d + "/noise.bin").c_str(), O_RDONLY);
        if (read(fd, b, sizeof(b)) != 4096) _exit(1);
        close(fd);
      },
      /*traced=*/false);
  auto snap = collect(pid);
  auto gfiles = files_of(snap, grandchild);
  ASSERT_TRUE(gfiles.count(path("a.bin")));
  EXPECT_EQ(gfiles[path("a.bin")]->counters.bytes_read, 4096u);
  const ProcessSnapshot* g = nullptr;
  for (const auto& p : snap.processes) {
    EXPECT_NE(p.pid, static_cast<uint32_t>(noise)) << "untraced process recorded";
    if (p.pid == static_cast<uint32_t>(grandchild)) g = &p;
  }
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->ppid, static_cast<uint32_t>(pid));
  ASSERT_TRUE(g->exit_code.has_value());
  EXPECT_EQ(*g->exit_code, 3);
  for (const auto& f : snap.files) EXPECT_NE(f.path, path("noise.bin"));
}

namespace {
class BpfSmallMapTest : public BpfTest {
 protected:
  uint32_t max_records() const override { return 64; }
};
}  // namespace

namespace {
/// A run's two tiers of records (bpf/README.md "Two tiers of records"), small: 8 preallocated.
class BpfTwoTierTest : public BpfTest {
 protected:
  uint32_t max_records() const override { return 4096; }
  uint32_t fast_records() const override { return 8; }
};

/// The descriptor this process holds for the loader's map called `name`, or -1.
int own_map_fd(const std::string& name) {
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && name == info.name) return fd;
  }
  return -1;
}
}  // namespace

TEST_F(BpfTwoTierTest, RecordsPastThePreallocatedTierAreExactAndNamed) {
  constexpr int kFiles = 40;
  for (int i = 0; i < kFiles; ++i) write_file(path("t" + std::to_string(i)), 100 + i);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    char b[256];
    for (int i = 0; i < kFiles; ++i) {
      int fd = open((d + "/t" + std::to_string(i)).c_str(), O_RDONLY);
      // two reads: the data, then end of file
      if (read(fd, b, sizeof(b)) != 100 + i || read(fd, b, sizeof(b)) != 0) _exit(1);
      close(fd);
    }
  });
  const auto st = loader_->stats();
  // Exactly the preallocated tier's 8 records were made there; the rest spilled.
  EXPECT_GE(st[IOLENS_STAT_FILE_RECORDS_CREATED], static_cast<uint64_t>(kFiles));
  EXPECT_EQ(st[IOLENS_STAT_FILE_RECORDS_CREATED] - st[IOLENS_STAT_FILE_RECORDS_SPILLED], 8u);
  EXPECT_EQ(st[IOLENS_STAT_FILE_RECORDS_LOST], 0u);
  EXPECT_EQ(st[IOLENS_STAT_FILE_RECORDS_TWICE], 0u);
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  for (int i = 0; i < kFiles; ++i) {
    const std::string p = path("t" + std::to_string(i));
    ASSERT_TRUE(files.count(p)) << p << " has no record (or no name)";
    const auto& c = files.at(p)->counters;
    EXPECT_EQ(c.opens, 1u) << p;
    EXPECT_EQ(c.reads, 2u) << p;
    EXPECT_EQ(c.bytes_read, static_cast<uint64_t>(100 + i)) << p;
    EXPECT_EQ(c.max_byte_read, 100 + i - 1) << p;
    EXPECT_EQ(c.closes, 1u) << p;
  }
}

// The page-cache programs only find records (a fault makes none): once `files` is full they must
// look in `files_spill` too (files_spill_used, set by the first spilled record).
TEST_F(BpfTwoTierTest, FaultsOnASpilledRecordAreCounted) {
  constexpr int kFiles = 16;
  constexpr int kPages = 16;
  for (int i = 0; i < kFiles; ++i) write_file(path("s" + std::to_string(i)), 64);
  write_file(path("m.bin"), kPages * 4096);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    char b[128];
    for (int i = 0; i < kFiles; ++i) {
      int fd = open((d + "/s" + std::to_string(i)).c_str(), O_RDONLY);
      if (read(fd, b, sizeof(b)) != 64) _exit(1);
      close(fd);
    }
    int fd = open((d + "/m.bin").c_str(), O_RDONLY);
    void* m = mmap(nullptr, kPages * 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) _exit(1);
    unsigned sum = 0;
    for (int p = 0; p < kPages; ++p) sum += static_cast<volatile unsigned char*>(m)[p * 4096];
    munmap(m, kPages * 4096);
    close(fd);
    _exit(sum == 12345678 ? 2 : 0);
  });
  EXPECT_GE(loader_->stat(IOLENS_STAT_FILE_RECORDS_SPILLED), static_cast<uint64_t>(kFiles - 8 + 1));
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  ASSERT_TRUE(files.count(path("m.bin")));
  const auto& c = files.at(path("m.bin"))->counters;
  EXPECT_EQ(c.mmaps, 1u);
  // Counted by the optional fault programs, where they are attached (all are here: the test
  // above checks it).
  bool faults = false;
  for (const auto& p : loader_->programs())
    if ((p.name == "mm_filemap_fault" || p.name == "mm_filemap_map_pages") && p.attached)
      faults = true;
  if (faults) {
    EXPECT_GE(c.fault_pages + c.fault_around_pages, static_cast<uint64_t>(kPages))
        << "the faults on a record of the spill tier were not counted";
  }
}

TEST_F(BpfTwoTierTest, AKeyInBothTiersIsCountedOnce) {
  // What two threads racing while `files` is full can leave (file_record_make): one key in
  // both tiers, and FILE_RECORDS_TWICE moved. Made here by hand.
  const int files = own_map_fd("files"), spill = own_map_fd("files_spill");
  const int stats = own_map_fd("stats");
  ASSERT_GE(files, 0);
  ASSERT_GE(spill, 0);
  ASSERT_GE(stats, 0);
  iolens_file_key k{};
  k.ino = 4242;
  k.dev = 7;
  k.tgid = 999999;
  k.pstart_ns = 1;
  iolens_file_counters in_files{}, in_spill{};
  in_files.reads = 3;
  in_files.bytes_read = 300;
  in_spill.reads = 5;
  in_spill.bytes_read = 500;
  ASSERT_EQ(bpf_map_update_elem(files, &k, &in_files, BPF_NOEXIST), 0) << std::strerror(errno);
  ASSERT_EQ(bpf_map_update_elem(spill, &k, &in_spill, BPF_NOEXIST), 0) << std::strerror(errno);
  const __u32 idx = IOLENS_STAT_FILE_RECORDS_TWICE;
  std::vector<uint64_t> per_cpu(static_cast<std::size_t>(libbpf_num_possible_cpus()), 0);
  per_cpu[0] = 1;
  ASSERT_EQ(bpf_map_update_elem(stats, &idx, per_cpu.data(), BPF_ANY), 0);

  struct Seen {
    uint64_t reads;
    bool removed;
  };
  std::vector<Seen> seen;
  iolens::core::Recorder rec(1, static_cast<uint32_t>(getpid()));
  auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
  auto sink = [&](const iolens_file_key& key, const iolens::core::FileCounters& c, bool removed) {
    if (key.tgid != k.tgid) return;
    seen.push_back({c.reads, removed});
    rec.on_file(key, c, removed);
  };
  ASSERT_TRUE(loader_->drain_files(keep, sink).ok);
  ASSERT_EQ(seen.size(), 2u);
  // The spilled copy is final and leaves the kernel, handed over first; `files` stays live.
  EXPECT_EQ(seen[0].reads, 5u);
  EXPECT_TRUE(seen[0].removed);
  EXPECT_EQ(seen[1].reads, 3u);
  EXPECT_FALSE(seen[1].removed);
  iolens_file_counters v{};
  EXPECT_NE(bpf_map_lookup_elem(spill, &k, &v), 0);
  EXPECT_EQ(bpf_map_lookup_elem(files, &k, &v), 0);
  // The recorder adds the two.
  const auto snap = rec.snapshot(iolens::core::ClockBase{});
  uint64_t reads = 0, bytes = 0;
  for (const auto& f : snap.files)
    if (f.pid == k.tgid) reads += f.counters.reads, bytes += f.counters.bytes_read;
  EXPECT_EQ(reads, 8u);
  EXPECT_EQ(bytes, 800u);
  // A later drain hands over the one copy left.
  seen.clear();
  ASSERT_TRUE(loader_->drain_files(keep, sink).ok);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].reads, 3u);
  EXPECT_FALSE(seen[0].removed);
  reads = 0;
  for (const auto& f : rec.snapshot(iolens::core::ClockBase{}).files)
    if (f.pid == k.tgid) reads += f.counters.reads;
  EXPECT_EQ(reads, 8u);
}

TEST_F(BpfTwoTierTest, RecordsTakenOutOfEitherTierAreHandedOverOnce) {
  // 60 files, written 1..5 bytes: a drain takes the 1-byte ones out live, the 2-byte ones as
  // final, and keeps the rest; 8 records are in `files`, 52 spilled.
  constexpr int kFiles = 60;
  const pid_t pid = run_child([&] {
    const char data[5] = {'x', 'x', 'x', 'x', 'x'};
    for (int i = 0; i < kFiles; ++i) {
      const std::string p = path("d" + std::to_string(i));
      const int fd = open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      if (fd < 0 || write(fd, data, static_cast<size_t>(i % 5 + 1)) != i % 5 + 1) _exit(1);
      close(fd);
    }
  });
  EXPECT_GE(loader_->stat(IOLENS_STAT_FILE_RECORDS_SPILLED), static_cast<uint64_t>(kFiles - 8));
  std::map<uint64_t, uint64_t> written;  // inode -> bytes, from the files themselves
  for (int i = 0; i < kFiles; ++i) {
    struct stat sb {};
    ASSERT_EQ(stat(path("d" + std::to_string(i)).c_str(), &sb), 0);
    written[sb.st_ino] = static_cast<uint64_t>(sb.st_size);
  }
  // Which tier holds which file: the first 8 records made are in `files`.
  auto inodes_in = [&](const char* map) {
    std::set<uint64_t> out;
    const int fd = own_map_fd(map);
    EXPECT_GE(fd, 0) << map;
    iolens_file_key k{}, next{};
    for (bool first = true; bpf_map_get_next_key(fd, first ? nullptr : &k, &next) == 0;
         first = false) {
      k = next;
      if (k.tgid == static_cast<uint32_t>(pid) && written.count(k.ino)) out.insert(k.ino);
    }
    return out;
  };
  const std::set<uint64_t> fast = inodes_in("files"), spilled = inodes_in("files_spill");
  ASSERT_EQ(fast.size(), 8u);
  ASSERT_EQ(spilled.size(), written.size() - 8);
  // both tiers hold records of each disposition (sizes 1..5 in turn)
  for (const auto* tier : {&fast, &spilled}) {
    std::set<uint64_t> sizes;
    for (uint64_t ino : *tier) sizes.insert(written.at(ino));
    EXPECT_TRUE(sizes.count(1) && sizes.count(2) && sizes.count(3));
  }
  using D = Loader::Disposition;
  std::map<uint64_t, std::vector<bool>> seen;  // inode -> `removed` of each hand-over
  auto remove = [&](const iolens_file_key& k, const iolens_file_counters& c) {
    if (k.tgid != static_cast<uint32_t>(pid) || !written.count(k.ino)) return D::Keep;
    return c.bytes_written == 1 ? D::RemoveLive : c.bytes_written == 2 ? D::RemoveFinal : D::Keep;
  };
  auto sink = [&](const iolens_file_key& k, const iolens_file_counters& c, bool removed) {
    if (k.tgid != static_cast<uint32_t>(pid) || !written.count(k.ino)) return;
    EXPECT_EQ(c.bytes_written, written.at(k.ino)) << "inode " << k.ino;
    seen[k.ino].push_back(removed);
  };
  ASSERT_TRUE(loader_->drain_files(remove, sink).ok);
  ASSERT_EQ(seen.size(), written.size());
  for (const auto& [ino, bytes] : written)
    EXPECT_EQ(seen[ino], std::vector<bool>{bytes <= 2}) << "inode " << ino << ", " << bytes << " B";
  // A second drain: the removed records are gone from both tiers, the kept ones still there.
  seen.clear();
  ASSERT_TRUE(loader_->drain_files(remove, sink).ok);
  for (const auto& [ino, bytes] : written)
    EXPECT_EQ(seen.count(ino), bytes <= 2 ? 0u : 1u) << "inode " << ino << ", " << bytes << " B";
  // ... and each kept record is still in its own tier
  for (const char* map : {"files", "files_spill"}) {
    const auto& before = std::string(map) == "files" ? fast : spilled;
    std::set<uint64_t> kept;
    for (uint64_t ino : before)
      if (written.at(ino) > 2) kept.insert(ino);
    EXPECT_EQ(inodes_in(map), kept) << map;
  }
  // A drain in pieces or with deferred deletions is the daemon's: refused with two tiers.
  std::vector<iolens_file_key> deferred;
  EXPECT_FALSE(loader_->drain_files(remove, sink, &deferred).ok);
}

TEST(BpfLoaderOptions, TwoTiersAreARunsOnly) {
  // Refused before any privilege is needed.
  for (bool select : {true, false}) {
    iolens::loader::Options o;
    o.fast_file_records = 8;
    o.select_jobs = select;
    if (!select) o.pin_dir = "/sys/fs/bpf/iolens-test-never-made";
    iolens::Status st;
    EXPECT_EQ(Loader::create(o, st), nullptr);
    EXPECT_NE(st.message.find("two tiers of file records are for a run"), std::string::npos)
        << st.message;
    EXPECT_FALSE(fs::exists("/sys/fs/bpf/iolens-test-never-made"));
  }
}

namespace {
/// The kernel's `proc_lost` entry (ABI 11) of `pid`, and how many entries other processes have.
std::array<uint64_t, IOLENS_NR_STATS> proc_losses(iolens::loader::Loader& l, pid_t pid, int& others) {
  std::array<uint64_t, IOLENS_NR_STATS> out{};
  others = 0;
  for (const auto& [k, v] : l.read_proc_losses()) {
    if (k.tgid != static_cast<uint32_t>(pid)) {
      ++others;
      continue;
    }
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += v.n[i];
  }
  return out;
}
}  // namespace

TEST_F(BpfSmallMapTest, FullMapCountsEveryLostOperation) {
  constexpr int kFiles = 200;
  for (int i = 0; i < kFiles; ++i) write_file(path("f" + std::to_string(i)), 10);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    char b[16];
    for (int i = 0; i < kFiles; ++i) {
      int fd = open((d + "/f" + std::to_string(i)).c_str(), O_RDONLY);
      if (read(fd, b, sizeof(b)) != 10) _exit(1);
      close(fd);
    }
  });
  auto snap = collect(pid);
  auto files = files_of(snap, pid);
  const auto lost = loader_->stats()[IOLENS_STAT_FILE_RECORDS_LOST];
  int recorded = 0;
  for (int i = 0; i < kFiles; ++i)
    if (files.count(path("f" + std::to_string(i)))) ++recorded;
  EXPECT_EQ(recorded, 64);
  // Every file without a record lost exactly its open, read and close, and the read's
  // page-cache lookup (mm_filemap_get_pages) where that hook is attached.
  uint64_t per_file = 3;
  for (const auto& p : loader_->programs())
    if (p.name == "mm_filemap_get_pages" && p.attached) per_file = 4;
  EXPECT_EQ(lost, static_cast<uint64_t>(kFiles - recorded) * per_file);
  // Each loss is charged to the process whose call it was (ABI 11), and to no other.
  int others = -1;
  const auto mine = proc_losses(*loader_, pid, others);
  EXPECT_EQ(mine[IOLENS_STAT_FILE_RECORDS_LOST], lost);
  EXPECT_EQ(others, 0);
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_LOSSES_UNATTRIBUTED], 0u);
  // Keyed as the process's file records are (tgid and the group leader's start).
  const auto entries = loader_->read_proc_losses();
  ASSERT_EQ(entries.size(), 1u);
  bool same_key = false;
  for (const auto& f : snap.files)
    if (f.pid == static_cast<uint32_t>(pid))
      same_key = static_cast<uint64_t>(f.proc_start_ns) == entries[0].first.pstart_ns;
  EXPECT_TRUE(same_key) << "proc_lost key start " << entries[0].first.pstart_ns;
  // Taking an entry (the daemon does, once its process exited) hands its value and leaves none.
  const auto taken = loader_->take_proc_losses({entries[0].first});
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].second.n[IOLENS_STAT_FILE_RECORDS_LOST], lost);
  EXPECT_TRUE(loader_->read_proc_losses().empty());
  EXPECT_TRUE(loader_->take_proc_losses({entries[0].first}).empty());
}

TEST_F(BpfTest, ReusedInodeNumberIsANewFile) {
  // ext4 gives a deleted file's inode number to the next file created: a temp file deleted
  // before a checkpoint is written is the common case (Python's tempfile probe does it).
  const std::string d = dir_.string();
  int ipipe[2];
  ASSERT_EQ(pipe(ipipe), 0);
  constexpr int kPairs = 5;
  const pid_t pid = run_child([&] {
    for (int i = 0; i < kPairs; ++i) {
      const std::string tmp = d + "/probe" + std::to_string(i);
      const std::string ck = d + "/ckpt" + std::to_string(i) + ".pt";
      int fd = open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      struct stat st;
      fstat(fd, &st);
      uint64_t inos[2] = {st.st_ino, 0};
      if (write(fd, "abcd", 4) != 4) _exit(1);
      close(fd);
      unlink(tmp.c_str());
      fd = open(ck.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      std::string data(100000, 'c');
      if (write(fd, data.data(), data.size()) != 100000) _exit(2);
      fstat(fd, &st);
      inos[1] = st.st_ino;
      close(fd);
      if (write(ipipe[1], inos, sizeof(inos)) != sizeof(inos)) _exit(3);
    }
  });
  close(ipipe[1]);
  int reused = 0;
  uint64_t inos[2];
  while (read(ipipe[0], inos, sizeof(inos)) == sizeof(inos)) reused += inos[0] == inos[1];
  close(ipipe[0]);
  auto files = files_of(collect(pid), pid);
  for (int i = 0; i < kPairs; ++i) {
    const std::string tmp = path("probe" + std::to_string(i));
    const std::string ck = path("ckpt" + std::to_string(i) + ".pt");
    ASSERT_TRUE(files.count(ck)) << ck << " missing (named after a deleted file?)";
    EXPECT_EQ(files[ck]->counters.bytes_written, 100000u);
    EXPECT_EQ(files[ck]->counters.opens, 1u);
    ASSERT_TRUE(files.count(tmp));
    EXPECT_EQ(files[tmp]->counters.bytes_written, 4u);
    EXPECT_EQ(files[tmp]->unlinks, 1u);
  }
  if (reused == 0) GTEST_SKIP() << "this filesystem did not reuse an inode number; nothing proven";
}

TEST_F(BpfTest, AnotherThreadClosingADescriptorDoesNotConfuseTheIdentityCache) {
  // Thread A writes to x_i; thread B closes that descriptor (A's cache still names x_i); A
  // deletes x_i and creates y_i, whose struct file and inode may reuse x_i's memory. Every byte
  // must land on the file it was written to.
  constexpr int kRounds = 40;
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    for (int i = 0; i < kRounds; ++i) {
      const std::string x = d + "/x" + std::to_string(i);
      const std::string y = d + "/y" + std::to_string(i);
      int fd = open(x.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
      if (write(fd, "0123456789", 10) != 10) _exit(1);
      std::thread closer([fd] { close(fd); });
      closer.join();
      unlink(x.c_str());
      usleep(30000);  // an RCU grace period: the freed inode's memory can come back
      int fy = open(y.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
      std::string data(1000, 'y');
      if (write(fy, data.data(), data.size()) != 1000) _exit(2);
      close(fy);
    }
  });
  auto files = files_of(collect(pid), pid);
  for (int i = 0; i < kRounds; ++i) {
    const std::string x = path("x" + std::to_string(i));
    const std::string y = path("y" + std::to_string(i));
    ASSERT_TRUE(files.count(x)) << x;
    ASSERT_TRUE(files.count(y)) << y;
    EXPECT_EQ(files[x]->counters.bytes_written, 10u) << x;
    EXPECT_EQ(files[x]->counters.opens, 1u) << x;
    EXPECT_EQ(files[y]->counters.bytes_written, 1000u) << y;
    EXPECT_EQ(files[y]->counters.opens, 1u) << y;
  }
}

TEST_F(BpfTest, DeepPathIsMarkedIncompleteAndCounted) {
  // 70 nested directories: deeper than the kernel walk's 56 steps. The name keeps its deepest
  // components, is flagged incomplete, and the cut is counted.
  std::string deep = dir_.string();
  for (int i = 0; i < 70; ++i) {
    deep += "/d" + std::to_string(i);
    ASSERT_EQ(mkdir(deep.c_str(), 0755), 0);
  }
  const std::string leaf = deep + "/leaf.bin";
  write_file(leaf, 5);
  const pid_t pid = run_child([&] {
    char b[8];
    int fd = open(leaf.c_str(), O_RDONLY);
    if (read(fd, b, sizeof(b)) != 5) _exit(1);
    close(fd);
  });
  auto snap = collect(pid);
  const FileSnapshot* rec = nullptr;
  for (const auto& f : snap.files)
    if (f.pid == static_cast<uint32_t>(pid) && f.counters.bytes_read == 5) rec = &f;
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->path_incomplete);
  EXPECT_NE(rec->path.find("/d69/leaf.bin"), std::string::npos) << rec->path;
  EXPECT_EQ(rec->path.find(dir_.string()), std::string::npos);  // the top was cut
  EXPECT_GE(loader_->stats()[IOLENS_STAT_PATHS_TRUNCATED], 1u);
}

namespace {
class BpfTinyRingTest : public BpfTest {
 protected:
  void SetUp() override {
    opts_.ring_bytes = 4096;  // one page: fills after a few dozen names
    BpfTest::SetUp();
  }
};
}  // namespace

TEST_F(BpfTinyRingTest, DroppedNamesAreCountedAndCountsStayExact) {
  constexpr int kFiles = 300;
  for (int i = 0; i < kFiles; ++i) write_file(path("n" + std::to_string(i)), 10);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    char b[16];
    for (int i = 0; i < kFiles; ++i) {
      int fd = open((d + "/n" + std::to_string(i)).c_str(), O_RDONLY);
      if (read(fd, b, sizeof(b)) != 10) _exit(1);
      close(fd);
    }
  });
  auto snap = collect(pid);  // the ring is read only now: it overflowed meanwhile
  const auto st = loader_->stats();
  int named = 0, unknown = 0;
  uint64_t bytes = 0;
  for (const auto& f : snap.files) {
    if (f.pid != static_cast<uint32_t>(pid) || f.counters.bytes_read != 10) continue;
    bytes += f.counters.bytes_read;
    (f.path_known ? named : unknown) += 1;
  }
  EXPECT_EQ(named + unknown, kFiles);  // every file has its record: counts never depend on names
  EXPECT_EQ(bytes, 10u * kFiles);
  EXPECT_GT(unknown, 0) << "a 4 KiB ring should have overflowed";
  // Each unnamed file lost its name at least once (first open; close retries): all counted.
  EXPECT_GE(st[IOLENS_STAT_PATH_EVENTS_LOST], static_cast<uint64_t>(unknown));
  EXPECT_GE(st[IOLENS_STAT_EVENTS_LOST], st[IOLENS_STAT_PATH_EVENTS_LOST]);
  // Only the child was traced: every dropped event is charged to it (ABI 11).
  int others = -1;
  const auto mine = proc_losses(*loader_, pid, others);
  EXPECT_EQ(mine[IOLENS_STAT_PATH_EVENTS_LOST], st[IOLENS_STAT_PATH_EVENTS_LOST]);
  EXPECT_EQ(mine[IOLENS_STAT_EVENTS_LOST], st[IOLENS_STAT_EVENTS_LOST]);
  EXPECT_EQ(others, 0);
  EXPECT_EQ(st[IOLENS_STAT_LOSSES_UNATTRIBUTED], 0u);
}

// iolensd reads the ring within a drain piece's time: a deadline stops the read after a record
// (looked at every 64), the rest stays in the ring, and the next read hands it over, none twice
// and none lost. Ground truth: the files the child opened, each named once.
TEST_F(BpfTest, ADeadlineLeavesTheRestOfTheRingForTheNextRead) {
  constexpr int kFiles = 500;
  for (int i = 0; i < kFiles; ++i) write_file(path("r" + std::to_string(i)), 10);
  const std::string d = dir_.string();
  const pid_t pid = run_child([&] {
    char b[16];
    for (int i = 0; i < kFiles; ++i) {
      int fd = open((d + "/r" + std::to_string(i)).c_str(), O_RDONLY);
      if (read(fd, b, sizeof(b)) != 10) _exit(1);
      close(fd);
    }
  });
  std::map<std::string, int> named;  // the child's names, by path
  int records = 0;
  auto sink = [&](std::span<const uint8_t> b) {
    ++records;
    auto r = iolens::core::decode_event(b);
    ASSERT_TRUE(r.ok) << r.error;
    const auto* p = std::get_if<iolens::core::PathEvent>(&r.event);
    if (p && p->proc.pid == static_cast<uint32_t>(pid) && p->op == IOLENS_PATH_FILE)
      ++named[iolens::core::path_from_walk(p->walk)];
  };
  // A deadline already past: one look, after the 64th record.
  EXPECT_FALSE(loader_->events_cut_short());
  EXPECT_EQ(loader_->consume_events(sink, 1), 64);
  EXPECT_EQ(records, 64);
  EXPECT_TRUE(loader_->events_cut_short());  // what tells iolensd not to nap
  EXPECT_LT(loader_->ring_consumer_pos(), loader_->ring_producer_pos());
  EXPECT_EQ(loader_->consume_events(sink, 1), 64);
  // No deadline: the rest, at once.
  const int rest = loader_->consume_events(sink);
  EXPECT_GT(rest, 0);
  EXPECT_FALSE(loader_->events_cut_short());
  EXPECT_EQ(records, 128 + rest);
  EXPECT_EQ(loader_->ring_consumer_pos(), loader_->ring_producer_pos());
  EXPECT_EQ(loader_->consume_events(sink, 1), 0);  // nothing left: not cut short
  EXPECT_FALSE(loader_->events_cut_short());
  ASSERT_EQ(named.size(), static_cast<std::size_t>(kFiles));
  for (int i = 0; i < kFiles; ++i) EXPECT_EQ(named[path("r" + std::to_string(i))], 1) << i;
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_EVENTS_LOST], 0u);
}

// The block layer (bpf/iolens_block.bpf.h): a traced child's O_DIRECT reads are charged to it on
// the file's device, every request sized and timed; an untraced child's identical reads are
// charged to nobody; delete_blocks removes records.
TEST_F(BpfTest, BlockLayerChargesDirectReadsToTheTracedProcessOnly) {
  constexpr size_t kSize = 1 << 20, kChunk = 256 << 10;
  write_file(path("direct.bin"), kSize);
  {
    const int fd = open(path("direct.bin").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fsync(fd), 0);  // nothing dirty: the reads must not write anything first
    close(fd);
  }
  struct stat st {};
  ASSERT_EQ(stat(path("direct.bin").c_str(), &st), 0);
  const uint32_t kdev = (major(st.st_dev) << 20) | minor(st.st_dev);
  const std::string file = path("direct.bin");
  auto direct_reads = [&] {
    void* buf = mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const int fd = open(file.c_str(), O_RDONLY | O_DIRECT);
    if (buf == MAP_FAILED || fd < 0) _exit(1);
    for (size_t off = 0; off < kSize; off += kChunk)
      if (pread(fd, buf, kChunk, static_cast<off_t>(off)) != static_cast<ssize_t>(kChunk)) _exit(1);
    close(fd);
  };
  const pid_t traced = run_child(direct_reads);
  const pid_t untraced = run_child(direct_reads, /*traced=*/false);

  const auto records = loader_->read_blocks();
  const iolens_block_counters* c = nullptr;
  std::vector<iolens_block_key> keys;
  for (const auto& r : records) {
    EXPECT_NE(r.key.tgid, static_cast<uint32_t>(untraced)) << "untraced process charged";
    keys.push_back(r.key);
    if (r.key.tgid == static_cast<uint32_t>(traced) && r.key.dev == kdev) c = &r.counters;
  }
  ASSERT_NE(c, nullptr) << "no block record of the traced child on " << major(st.st_dev) << ":"
                        << minor(st.st_dev);
  EXPECT_GE(c->read_bytes, kSize);
  EXPECT_LE(c->read_bytes, kSize + (16 << 10));  // at most a few metadata blocks
  EXPECT_GE(c->read_bios, kSize / kChunk);
  EXPECT_EQ(c->write_bytes, 0u);
  EXPECT_EQ(c->writeback_bytes, 0u);
  EXPECT_GE(c->read_reqs, kSize / kChunk);
  uint64_t sized = 0;
  for (__u64 n : c->size_read) sized += n;
  EXPECT_EQ(sized, c->read_reqs);
  // Every request timed, except those counted in block_untimed (completions the kernel did
  // not run block_rq_complete for; the child's are the only requests with in-flight entries).
  loader_->sweep_block_inflight(0);
  const auto stats = loader_->stats();
  const uint64_t untimed =
      stats[IOLENS_STAT_BLOCK_UNTIMED] + stats[IOLENS_STAT_BLOCK_UNTIMED_SWEPT];
  EXPECT_EQ(total(c->dev_read) + untimed, c->read_reqs);
  EXPECT_EQ(loader_->sweep_block_inflight(0), 0u) << "a swept entry must be gone";
  EXPECT_GT(c->dev_read_sum_ns, 0u);
  EXPECT_EQ(total(c->queue_read) + c->unqueued_reqs, c->read_reqs);

  loader_->delete_blocks(keys);
  for (const auto& r : loader_->read_blocks())
    EXPECT_NE(r.key.tgid, static_cast<uint32_t>(traced)) << "record not deleted";
}

namespace {

/// pread()s of `sizes` at offset 0 (every stride 0) on the open `fd`; _exit(9) on a short read.
void pread_sizes(int fd, const std::vector<int>& sizes) {
  static char buf[4096];
  for (int n : sizes)
    if (pread(fd, buf, static_cast<size_t>(n), 0) != n) _exit(9);
}

/// 1..40, the 9th and 30th three times each, the 33rd five times: Darshan's 32 values are 1..32;
/// its four {30 x3, 9 x3, 32, 31}; 33 x5 and 34..40 are past them (12 calls untallied).
std::vector<int> forty_sizes() {
  std::vector<int> out;
  for (int size = 1; size <= 40; ++size)
    for (int i = 0; i < (size == 9 || size == 30 ? 3 : size == 33 ? 5 : 1); ++i)
      out.push_back(size);
  return out;
}

/// The file record of `pid`'s `ino` handed over by one drain that removes the exited
/// process's records (RemoveFinal) and keeps the others; nullopt if none.
std::optional<FileCounters> drain_one(Loader& l, pid_t pid, ino_t ino, bool final_for_pid) {
  std::optional<FileCounters> out;
  auto remove = [&](const iolens_file_key& k, const iolens_file_counters&) {
    return final_for_pid && k.tgid == static_cast<uint32_t>(pid) ? Loader::Disposition::RemoveFinal
                                                                 : Loader::Disposition::Keep;
  };
  EXPECT_TRUE(l.drain_files(remove, [&](const iolens_file_key& k, const FileCounters& c, bool) {
                 if (k.tgid == static_cast<uint32_t>(pid) && k.ino == ino) out = c;
               }).ok);
  return out;
}

/// The side entries in the kernel's `tallies_more` of `pid`'s records.
int side_entries_of(pid_t pid) {
  const int fd = own_map_fd("tallies_more");
  EXPECT_GE(fd, 0);
  int n = 0;
  iolens_file_key k{}, next{};
  bool first = true;
  while (bpf_map_get_next_key(fd, first ? nullptr : &k, &next) == 0) {
    first = false;
    k = next;
    n += k.tgid == static_cast<uint32_t>(pid);
  }
  return n;
}

ino_t ino_of(const std::string& p) {
  struct stat st {};
  if (stat(p.c_str(), &st) != 0) std::abort();
  return st.st_ino;
}

}  // namespace

TEST_F(BpfTest, ValuesPastTheRecordsSlotsAreInItsSideEntryAsDarshansTreeHasThem) {
  write_file(path("many.bin"), 4096);
  const std::string f = path("many.bin");
  const pid_t pid = run_child([&] {
    int fd = open(f.c_str(), O_RDONLY);
    pread_sizes(fd, forty_sizes());
    close(fd);
  });
  // Live: the side entry is in the kernel and handed over with its record.
  EXPECT_EQ(side_entries_of(pid), 1);
  const auto live = drain_one(*loader_, pid, ino_of(f), false);
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(live->reads, 48u);
  EXPECT_EQ(live->access.untallied, 0u);  // every value past 8 had its side entry
  EXPECT_EQ(live->more.access.value[0], 9u + 1);
  EXPECT_EQ(live->more.access.count[0], 3u);
  EXPECT_EQ(live->more.access.value[IOLENS_TALLY_MORE_SLOTS - 1], 32u + 1);
  EXPECT_EQ(iolens::core::untallied(live->access, live->more.access), 12u);
  EXPECT_EQ(iolens::core::common_accesses(*live),
            (iolens::core::CommonValues{{{30, 3}, {9, 3}, {32, 1}, {31, 1}}}));
  // Every stride 0 (each pread at offset 0): one value, no side slot.
  EXPECT_EQ(live->stride.value[0], 0u + 1);
  EXPECT_EQ(live->stride.count[0], 48u);
  EXPECT_EQ(live->more.stride.value[0], 0u);
  // Removed with its record: the same values, and the side entry deleted.
  const auto last = drain_one(*loader_, pid, ino_of(f), true);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(std::memcmp(&last->more, &live->more, sizeof last->more), 0);
  EXPECT_EQ(side_entries_of(pid), 0);
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_TALLY_LOST], 0u);
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_TALLY_ORPHANS], 0u);
}

TEST_F(BpfTest, ARecordTakenOutLiveTakesItsSideEntryAndTheNextStartsAfresh) {
  write_file(path("live.bin"), 4096);
  const std::string f = path("live.bin");
  iolens::bpftest::ReleaseFlag second;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  iolens::bpftest::ReleaseFlag go;
  const pid_t pid = fork();
  if (pid == 0) {
    go.wait();
    int fd = open(f.c_str(), O_RDONLY);
    pread_sizes(fd, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 12});
    close(fd);
    if (write(ready[1], "x", 1) != 1) _exit(8);
    second.wait();
    fd = open(f.c_str(), O_RDONLY);
    pread_sizes(fd, {100, 101, 102, 103, 104, 105, 106, 107, 108, 108, 109, 12});
    close(fd);
    _exit(0);
  }
  ASSERT_TRUE(loader_->trace_process(pid).ok);
  go.release();
  char x = 0;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  // The first part, taken while its process lives (as a drain under map pressure takes it).
  std::optional<FileCounters> first;
  auto take = [&](const iolens_file_key& k, const iolens_file_counters&) {
    return k.tgid == static_cast<uint32_t>(pid) && k.ino == ino_of(f)
               ? Loader::Disposition::RemoveLive
               : Loader::Disposition::Keep;
  };
  ASSERT_TRUE(loader_->drain_files(take, [&](const iolens_file_key& k, const FileCounters& c,
                                             bool removed) {
                        if (k.tgid == static_cast<uint32_t>(pid) && k.ino == ino_of(f)) {
                          EXPECT_TRUE(removed);
                          first = c;
                        }
                      }).ok);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->reads, 13u);
  EXPECT_EQ(first->more.access.value[3], 12u + 1);  // the 12th value, side slot 4
  EXPECT_EQ(first->more.access.count[3], 2u);
  EXPECT_EQ(side_entries_of(pid), 0);
  second.release();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  close(ready[0]);
  close(ready[1]);
  // The second part: its own slots from the first (100 first, 108 twice, 109 in the side, 12
  // in the side too: the first part's values are not in this record).
  const auto later = drain_one(*loader_, pid, ino_of(f), true);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->reads, 12u);
  EXPECT_EQ(later->access.value[0], 100u + 1);
  EXPECT_EQ(later->more.access.value[0], 108u + 1);
  EXPECT_EQ(later->more.access.count[0], 2u);
  EXPECT_EQ(later->more.access.value[1], 109u + 1);
  EXPECT_EQ(later->more.access.value[2], 12u + 1);
  // Folded as the recorder folds them: Darshan's tally of all 25 calls in order.
  FileCounters whole = *first;
  iolens::core::fold_counters(whole, *later);
  EXPECT_EQ(iolens::core::common_accesses(whole),
            (iolens::core::CommonValues{{{12, 3}, {108, 2}, {109, 1}, {107, 1}}}));
  EXPECT_EQ(side_entries_of(pid), 0);
}

namespace {
class BpfOneSideEntryTest : public BpfTest {
 protected:
  uint32_t max_tally_records() const override { return 1; }
};
}  // namespace

TEST_F(BpfOneSideEntryTest, AFullSideMapLeavesValuesUntalliedAndCountsThem) {
  write_file(path("a.bin"), 4096);
  write_file(path("b.bin"), 4096);
  const std::string a = path("a.bin"), b = path("b.bin");
  const pid_t pid = run_child([&] {
    int fa = open(a.c_str(), O_RDONLY), fb = open(b.c_str(), O_RDONLY);
    pread_sizes(fa, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});   // a's side entry: the only one
    pread_sizes(fb, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10});  // none left for b
    close(fa);
    close(fb);
  });
  const auto ra = drain_one(*loader_, pid, ino_of(a), false);
  const auto rb = drain_one(*loader_, pid, ino_of(b), false);
  ASSERT_TRUE(ra.has_value() && rb.has_value());
  EXPECT_EQ(ra->access.untallied, 0u);
  EXPECT_EQ(ra->more.access.value[1], 10u + 1);
  EXPECT_EQ(rb->access.untallied, 3u);  // 9, 10, 10
  EXPECT_EQ(rb->more.access.value[0], 0u);
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_TALLY_LOST], 3u);
  int others = -1;
  EXPECT_EQ(proc_losses(*loader_, pid, others)[IOLENS_STAT_TALLY_LOST], 3u);
  EXPECT_EQ(others, 0);
  bool named = false;
  for (const auto& [cause, n] : iolens::loader::kernel_losses(loader_->stats()))
    if (cause == "tally_slots") named = n == 3;
  EXPECT_TRUE(named);
}

TEST_F(BpfTest, ASideEntryWithoutItsRecordIsSweptAndCounted) {
  // What a call racing its record's removal can leave (Loader::sweep_sides): a side entry
  // whose record is gone. Made here by hand, beside one whose record is there.
  const int side = own_map_fd("tallies_more"), files = own_map_fd("files");
  ASSERT_GE(side, 0);
  ASSERT_GE(files, 0);
  iolens_file_key orphan{}, owned{};
  orphan.ino = 4242;
  orphan.dev = 7;
  orphan.tgid = 999999;
  orphan.pstart_ns = 1;
  owned = orphan;
  owned.ino = 4243;
  iolens_more_tallies m{};
  m.access.value[0] = 100;
  m.access.count[0] = 2;
  iolens_file_counters record = iolens::core::new_counters();
  ASSERT_EQ(bpf_map_update_elem(side, &orphan, &m, BPF_NOEXIST), 0) << std::strerror(errno);
  ASSERT_EQ(bpf_map_update_elem(side, &owned, &m, BPF_NOEXIST), 0) << std::strerror(errno);
  ASSERT_EQ(bpf_map_update_elem(files, &owned, &record, BPF_NOEXIST), 0) << std::strerror(errno);
  auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
  ASSERT_TRUE(loader_->drain_files(keep, [](const auto&, const auto&, bool) {}).ok);
  iolens_more_tallies back{};
  EXPECT_NE(bpf_map_lookup_elem(side, &orphan, &back), 0);
  EXPECT_EQ(bpf_map_lookup_elem(side, &owned, &back), 0);
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_TALLY_ORPHANS], 1u);
  // A drain in pieces sweeps only once its walk reached the map's end.
  ASSERT_EQ(bpf_map_update_elem(side, &orphan, &m, BPF_NOEXIST), 0);
  Loader::WalkPosition at;
  std::vector<iolens_file_key> deferred;
  ASSERT_TRUE(loader_->drain_files(keep, [](const auto&, const auto&, bool) {}, &deferred, &at, 0)
                  .ok);
  EXPECT_FALSE(at.resume);
  EXPECT_NE(bpf_map_lookup_elem(side, &orphan, &back), 0);
  EXPECT_EQ(loader_->stats()[IOLENS_STAT_TALLY_ORPHANS], 2u);
  bpf_map_delete_elem(side, &owned);
  bpf_map_delete_elem(files, &owned);
}
