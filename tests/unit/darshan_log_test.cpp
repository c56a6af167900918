// SPDX-License-Identifier: Apache-2.0
// The Darshan log writer against the format's written specification (shared/DARSHAN.md,
// docs/darshan-log.md): header layout byte by byte, zlib regions, record sizes; then a round trip
// through the reader, and the reader's errors on damaged files.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "core/counters.hpp"
#include "exporters/darshan_log.hpp"

using namespace iolens;
using namespace iolens::exporters;

namespace {

template <class T>
T at(const std::string& s, std::size_t off) {
  T v;
  std::memcpy(&v, s.data() + off, sizeof(v));
  return v;
}

std::string inflate_all(const std::string& z) {
  std::string out(1 << 20, '\0');
  uLongf len = out.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &len,
                       reinterpret_cast<const Bytef*>(z.data()), z.size()),
            Z_OK);
  out.resize(len);
  return out;
}

core::RunSnapshot sample() {
  core::RunSnapshot s;
  s.command = {"python3", "train.py"};
  s.exit_code = 0;
  s.start_ns = 1700000000123456789;
  s.end_ns = 1700000010987654321;
  for (uint32_t pid : {100u, 101u}) {
    core::ProcessSnapshot p;
    p.pid = pid;
    p.start_ns = 1700000000000000000 + pid;
    s.processes.push_back(p);
  }
  core::FileSnapshot f;
  f.path = "/data/a.npy";
  f.pid = 101;
  f.proc_start_ns = 1700000000000000101;
  f.counters = core::new_counters();
  f.counters.opens = 2;
  f.counters.dups = 1;
  f.counters.reads = 3;
  f.counters.bytes_read = 6530;
  f.counters.max_byte_read = 3264;
  f.counters.size_read[0] = 1;
  f.counters.size_read[2] = 2;
  f.counters.read_time_ns = 1500;
  f.counters.read_start_ns = 2'000'000'000;
  s.files.push_back(f);
  f.path = "/ckpt/model.pt";
  f.pid = 100;
  f.proc_start_ns = 1700000000000000100;
  f.counters = core::new_counters();
  f.counters.writes = 2;
  f.counters.bytes_written = 7671;
  f.counters.size_write[2] = 1;
  f.counters.size_write[0] = 1;
  f.counters.mem_not_aligned = 1;
  f.counters.mode = 0644;
  f.rename_sources = 1;
  s.files.push_back(f);
  return s;
}

DarshanJobInfo info() {
  DarshanJobInfo j;
  j.uid = 1000;
  j.jobid = 100;
  j.mounts = {{"ext4", "/"}, {"tmpfs", "/dev/shm"}, {"bad type", "/x"}};
  return j;
}

}  // namespace

TEST(DarshanLog, HeaderLayoutAndRegions) {
  const std::string log = darshan_log(sample(), info());
  ASSERT_GT(log.size(), kDarshanHeaderSize);
  EXPECT_EQ(std::string(log.data(), 8), std::string("3.41\0\0\0\0", 8));
  EXPECT_EQ(at<int64_t>(log, 8), 6567223);
  EXPECT_EQ(log[16], 0);  // zlib
  for (int i = 17; i < 24; ++i) EXPECT_EQ(log[static_cast<size_t>(i)], 0) << "padding " << i;
  EXPECT_EQ(at<uint64_t>(log, 24), 0u);  // partial_flag
  const auto names_off = at<uint64_t>(log, 32);
  const auto names_len = at<uint64_t>(log, 40);
  const auto posix_off = at<uint64_t>(log, 48 + 16 * 1);
  const auto posix_len = at<uint64_t>(log, 48 + 16 * 1 + 8);
  EXPECT_GT(names_off, kDarshanHeaderSize);  // the job region starts right after the header
  EXPECT_EQ(posix_off, names_off + names_len);
  EXPECT_EQ(log.size(), posix_off + posix_len);
  for (int m = 0; m < 64; ++m) {
    if (m == 1) continue;
    EXPECT_EQ(at<uint64_t>(log, 48 + 16 * static_cast<size_t>(m)), 0u) << "module " << m;
    EXPECT_EQ(at<uint32_t>(log, 1072 + 4 * static_cast<size_t>(m)), 0u) << "version of " << m;
  }
  EXPECT_EQ(at<uint32_t>(log, 1072 + 4), 4u);  // POSIX module version

  // Every region is a zlib stream that plain zlib inflates.
  const std::string job = inflate_all(log.substr(kDarshanHeaderSize, names_off - kDarshanHeaderSize));
  EXPECT_EQ(at<int64_t>(job, 0), 1000);               // uid
  EXPECT_EQ(at<int64_t>(job, 8), 1700000000);         // start sec
  EXPECT_EQ(at<int64_t>(job, 16), 123456789);         // start nsec
  EXPECT_EQ(at<int64_t>(job, 24), 1700000010);        // end sec
  EXPECT_EQ(at<int64_t>(job, 40), 2);                 // nprocs: one rank per process
  EXPECT_EQ(at<int64_t>(job, 48), 100);               // jobid
  EXPECT_EQ(std::string(job.data() + 56), "lib_ver=3.5.0\nproducer=iolens\n");
  EXPECT_EQ(std::string(job.data() + 1080), "python3 train.py\next4\t/\ntmpfs\t/dev/shm");
  const std::string posix = inflate_all(log.substr(posix_off, posix_len));
  EXPECT_EQ(posix.size(), 2 * kDarshanPosixRecordSize);
  const std::string names = inflate_all(log.substr(names_off, names_len));
  EXPECT_EQ(names.size(), (8 + 11 + 1) + (8 + 14 + 1));  // "/data/a.npy", "/ckpt/model.pt"
}

TEST(DarshanLog, RoundTripThroughTheReader) {
  const auto run = sample();
  const std::string log = darshan_log(run, info());
  DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(read_darshan_log(log, c, err)) << err;
  EXPECT_EQ(c.exe, "python3 train.py");
  ASSERT_EQ(c.mounts.size(), 2u);
  EXPECT_EQ(c.mounts[1], (std::pair<std::string, std::string>{"tmpfs", "/dev/shm"}));
  ASSERT_EQ(c.posix.size(), 2u);
  ASSERT_EQ(c.names.size(), 2u);
  const auto& a = c.posix[0];
  EXPECT_EQ(c.names.at(a.id), "/data/a.npy");
  EXPECT_EQ(a.id, darshan_record_id("/data/a.npy"));
  EXPECT_EQ(a.rank, 1);  // pid 101 started second
  auto n = [&](const DarshanPosixRecord& r, const char* name) {
    return r.counters[static_cast<size_t>(darshan_posix_counter_index(name))];
  };
  auto fn = [&](const DarshanPosixRecord& r, const char* name) {
    return r.fcounters[static_cast<size_t>(darshan_posix_fcounter_index(name))];
  };
  EXPECT_EQ(n(a, "OPENS"), 2);
  EXPECT_EQ(n(a, "DUPS"), 1);
  EXPECT_EQ(n(a, "READS"), 3);
  EXPECT_EQ(n(a, "BYTES_READ"), 6530);
  EXPECT_EQ(n(a, "MAX_BYTE_READ"), 3264);
  EXPECT_EQ(n(a, "MAX_BYTE_WRITTEN"), 0);  // never written: 0, as Darshan
  EXPECT_EQ(n(a, "SIZE_READ_0_100"), 1);
  EXPECT_EQ(n(a, "SIZE_READ_1K_10K"), 2);
  EXPECT_EQ(n(a, "FILE_ALIGNMENT"), -1);  // not observed
  EXPECT_DOUBLE_EQ(fn(a, "F_READ_TIME"), 1.5e-6);
  EXPECT_DOUBLE_EQ(fn(a, "F_READ_START_TIMESTAMP"), 2.0);
  const auto& b = c.posix[1];
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(n(b, "BYTES_WRITTEN"), 7671);
  EXPECT_EQ(n(b, "RENAME_SOURCES"), 1);
  EXPECT_EQ(n(b, "SIZE_WRITE_1K_10K"), 1);
  // 69 integer and 17 floating counters, in Darshan's order.
  EXPECT_EQ(darshan_posix_counter_index("OPENS"), 0);
  EXPECT_EQ(darshan_posix_counter_index("BYTES_READ"), 14);
  EXPECT_EQ(darshan_posix_counter_index("SIZE_READ_0_100"), 29);
  EXPECT_EQ(darshan_posix_counter_index("SLOWEST_RANK_BYTES"), 68);
  EXPECT_EQ(darshan_posix_fcounter_index("F_READ_TIME"), 8);
  EXPECT_EQ(darshan_posix_fcounter_index("F_VARIANCE_RANK_BYTES"), 16);
}

TEST(DarshanLog, ExeTimestampBaseAndFoldedRecordsForDaemonJobs) {
  // iolensd's snapshots: timestamps count from boot; the job header names the first process.
  auto run = sample();
  run.files[0].counters.read_start_ns = 5'000'000'000'000;  // 5000 s after boot
  run.files[0].counters.read_end_ns = 4'999'000'000'000;    // before the (estimated) start
  run.folded_records = 3;
  DarshanJobInfo j = info();
  j.exe = "/usr/bin/python3";
  j.timestamp_base_ns = 4'999'500'000'000;  // the job started 4999.5 s after boot
  const std::string log = darshan_log(run, j);
  DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(read_darshan_log(log, c, err)) << err;
  EXPECT_EQ(c.exe, "/usr/bin/python3");  // not the snapshot's command line
  // The POSIX module is incomplete: folded records are in no POSIX record.
  EXPECT_EQ(c.partial_flag, uint64_t{1} << kDarshanPosixModule);
  EXPECT_EQ(at<uint64_t>(log, 24), 2u);
  auto fn = [&](const char* name) {
    return c.posix[0].fcounters[static_cast<size_t>(darshan_posix_fcounter_index(name))];
  };
  EXPECT_DOUBLE_EQ(fn("F_READ_START_TIMESTAMP"), 0.5);
  EXPECT_DOUBLE_EQ(fn("F_READ_END_TIMESTAMP"), -0.5);  // before the start: negative, not 0
  EXPECT_DOUBLE_EQ(fn("F_OPEN_START_TIMESTAMP"), 0.0);  // never: stays 0
  EXPECT_DOUBLE_EQ(fn("F_READ_TIME"), 1.5e-6);          // durations are not shifted
  // Without folded records, nothing is partial.
  run.folded_records = 0;
  EXPECT_EQ(at<uint64_t>(darshan_log(run, j), 24), 0u);
}

TEST(DarshanLog, JobIdsAndMounts) {
  EXPECT_EQ(darshan_jobid("4242", 7), 4242);
  EXPECT_EQ(darshan_jobid("", 7), 7);
  EXPECT_EQ(darshan_jobid("slurm/4242", 7), 7);
  EXPECT_EQ(darshan_jobid("-1", 7), 7);
  EXPECT_EQ(darshan_jobid("999999999999999999", 7), 999999999999999999);
  EXPECT_EQ(darshan_jobid("9999999999999999999", 7), 7);  // 19 digits may not fit
  const std::string path = ::testing::TempDir() + "/iolens-mounts-test";
  {
    std::ofstream f(path);
    f << "sysfs /sys sysfs rw,nosuid 0 0\n/dev/vda1 / ext4 rw,relatime 0 0\n";
  }
  EXPECT_EQ(read_mounts(path), (std::vector<std::pair<std::string, std::string>>{
                                   {"sysfs", "/sys"}, {"ext4", "/"}}));
  std::remove(path.c_str());
  EXPECT_TRUE(read_mounts(path).empty());
}

TEST(DarshanLog, RecordIdsAreStableAndSpreadOverTheTail) {
  // lookup8 adds the tail bytes into a, b and c by position: paths differing in any byte of a
  // 0..23-byte tail, or only in length, must differ.
  std::string p = "/data/set";
  const uint64_t base = darshan_record_id(p);
  EXPECT_EQ(base, darshan_record_id(std::string("/data/set")));
  for (size_t len = 1; len <= 50; ++len) {
    std::string s(len, 'a');
    for (size_t i = 0; i < len; ++i) {
      std::string t = s;
      t[i] = 'b';
      EXPECT_NE(darshan_record_id(s), darshan_record_id(t)) << len << " " << i;
    }
    EXPECT_NE(darshan_record_id(s), darshan_record_id(s + 'a'));
  }
}

TEST(DarshanLog, ReaderNamesTheDamage) {
  const std::string log = darshan_log(sample(), info());
  DarshanLogContents c;
  std::string err;
  EXPECT_FALSE(read_darshan_log(log.substr(0, 100), c, err));
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  std::string bad = log;
  bad[8] ^= 0x55;
  EXPECT_FALSE(read_darshan_log(bad, c = {}, err));
  EXPECT_NE(err.find("magic"), std::string::npos) << err;
  bad = log;
  bad[2] = '9';
  EXPECT_FALSE(read_darshan_log(bad, c = {}, err));
  EXPECT_NE(err.find("version"), std::string::npos) << err;
  // Cut inside the POSIX region: the reader says which region and where.
  EXPECT_FALSE(read_darshan_log(log.substr(0, log.size() - 5), c = {}, err));
  EXPECT_NE(err.find("POSIX region"), std::string::npos) << err;
  // Flip bytes inside the compressed job region.
  bad = log;
  for (size_t i = kDarshanHeaderSize + 10; i < kDarshanHeaderSize + 20; ++i) bad[i] ^= 0xff;
  EXPECT_FALSE(read_darshan_log(bad, c = {}, err));
  EXPECT_NE(err.find("job region"), std::string::npos) << err;
}

// The writer maps counters to Darshan's by upper-cased name. The latency histogram has no Darshan
// counterpart: none of its names may map (a match would silently overwrite a Darshan counter).
TEST(DarshanLog, LatencyCountersHaveNoDarshanSlot) {
  int lat = 0;
  for (const auto& f : core::counter_fields()) {
    if (!f.name.starts_with("lat_")) continue;
    ++lat;
    std::string upper(f.name);
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(darshan_posix_counter_index(upper), -1) << upper;
    EXPECT_EQ(darshan_posix_fcounter_index(upper), -1) << upper;
  }
  EXPECT_EQ(lat, 2 * IOLENS_NR_LAT_BUCKETS + 2);
}

namespace {

DarshanDxt sample_dxt() {
  DarshanDxt dxt;
  DarshanDxtRecord r;
  r.path = "/data/a.npy";
  r.rank = 1;
  r.hostname = std::string(70, 'h');  // longer than the 63 bytes + NUL of the field
  r.writes = {{0, 10, 0.5, 0.75, 77}};
  r.reads = {{4096, 100, 1.0, 1.25, 78}, {8192, 50, 2.0, 2.5, 79}};
  dxt.records.push_back(r);
  return dxt;
}

/// The log with its DXT_POSIX region replaced by `raw`, compressed.
std::string with_dxt_region(std::string log, const std::string& raw) {
  const auto off = at<uint64_t>(log, 48 + 16 * 10);
  uLongf len = compressBound(raw.size());
  std::string z(len, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &len,
                      reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 6),
            Z_OK);
  z.resize(len);
  log.resize(off);
  log += z;
  const uint64_t zlen = z.size();
  std::memcpy(log.data() + 48 + 16 * 10 + 8, &zlen, 8);
  return log;
}

}  // namespace

TEST(DarshanLog, DxtPosixRegionLayout) {
  const std::string log = darshan_log(sample(), info(), sample_dxt());
  const auto posix_off = at<uint64_t>(log, 48 + 16 * 1);
  const auto posix_len = at<uint64_t>(log, 48 + 16 * 1 + 8);
  const auto dxt_off = at<uint64_t>(log, 48 + 16 * 10);
  const auto dxt_len = at<uint64_t>(log, 48 + 16 * 10 + 8);
  EXPECT_EQ(dxt_off, posix_off + posix_len);  // regions in increasing module id
  EXPECT_EQ(log.size(), dxt_off + dxt_len);
  EXPECT_EQ(at<uint32_t>(log, 1072 + 4 * 1), 4u);
  EXPECT_EQ(at<uint32_t>(log, 1072 + 4 * 10), 2u);  // DXT_POSIX version 2
  EXPECT_EQ(at<uint64_t>(log, 24), 0u);             // partial_flag
  for (int m = 0; m < 64; ++m) {
    if (m == 1 || m == 10) continue;
    EXPECT_EQ(at<uint64_t>(log, 48 + 16 * static_cast<size_t>(m)), 0u) << "module " << m;
  }

  const std::string raw = inflate_all(log.substr(dxt_off, dxt_len));
  ASSERT_EQ(raw.size(), 104u + 3 * 40);  // one file header, three segments
  EXPECT_EQ(at<uint64_t>(raw, 0), darshan_record_id("/data/a.npy"));
  EXPECT_EQ(at<int64_t>(raw, 8), 1);   // rank
  EXPECT_EQ(at<int64_t>(raw, 16), 0);  // shared_record
  EXPECT_EQ(std::string(raw.data() + 24), std::string(63, 'h'));
  EXPECT_EQ(at<int64_t>(raw, 88), 1);  // write_count
  EXPECT_EQ(at<int64_t>(raw, 96), 2);  // read_count
  // Segments {int64 offset, int64 length, double start, double end, int64 thread}, writes first.
  const struct {
    int64_t offset, length;
    double start, end;
    int64_t thread;
  } want[] = {{0, 10, 0.5, 0.75, 77}, {4096, 100, 1.0, 1.25, 78}, {8192, 50, 2.0, 2.5, 79}};
  for (size_t i = 0; i < 3; ++i) {
    const size_t s = 104 + 40 * i;
    EXPECT_EQ(at<int64_t>(raw, s), want[i].offset) << i;
    EXPECT_EQ(at<int64_t>(raw, s + 8), want[i].length) << i;
    EXPECT_EQ(at<double>(raw, s + 16), want[i].start) << i;
    EXPECT_EQ(at<double>(raw, s + 24), want[i].end) << i;
    EXPECT_EQ(at<int64_t>(raw, s + 32), want[i].thread) << i;
  }

  // Version 1: 32-byte segments, no thread; a partial module sets its bit.
  DarshanDxt v1 = sample_dxt();
  v1.version = 1;
  v1.partial = true;
  const std::string log1 = darshan_log(sample(), info(), v1);
  EXPECT_EQ(at<uint32_t>(log1, 1072 + 4 * 10), 1u);
  EXPECT_EQ(at<uint64_t>(log1, 24), uint64_t{1} << 10);
  const std::string raw1 =
      inflate_all(log1.substr(at<uint64_t>(log1, 48 + 160), at<uint64_t>(log1, 48 + 168)));
  ASSERT_EQ(raw1.size(), 104u + 3 * 32);
  EXPECT_EQ(at<int64_t>(raw1, 104 + 32), 4096);  // the first read, right after the write
}

TEST(DarshanLog, WithoutDxtRecordsTheLogIsPosixOnly) {
  EXPECT_EQ(darshan_log(sample(), info(), DarshanDxt{}), darshan_log(sample(), info()));
}

TEST(DarshanLog, DxtRoundTripAndDamage) {
  const std::string log = darshan_log(sample(), info(), sample_dxt());
  DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(read_darshan_log(log, c, err)) << err;
  ASSERT_EQ(c.posix.size(), 2u);  // POSIX unchanged beside DXT
  EXPECT_EQ(c.dxt_posix_version, 2u);
  ASSERT_EQ(c.dxt_posix.size(), 1u);
  const auto& r = c.dxt_posix[0];
  EXPECT_EQ(r.path, "/data/a.npy");  // named through the name region
  EXPECT_EQ(r.id, darshan_record_id("/data/a.npy"));
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.hostname, std::string(63, 'h'));
  ASSERT_EQ(r.writes.size(), 1u);
  ASSERT_EQ(r.reads.size(), 2u);
  EXPECT_EQ(r.reads[1].offset, 8192);
  EXPECT_EQ(r.reads[1].length, 50);
  EXPECT_EQ(r.reads[1].start, 2.0);
  EXPECT_EQ(r.reads[1].end, 2.5);
  EXPECT_EQ(r.reads[1].thread, 79);

  // A DXT path that no POSIX record has still gets its name.
  DarshanDxt other = sample_dxt();
  other.records[0].path = "/only/in/dxt";
  ASSERT_TRUE(read_darshan_log(darshan_log(sample(), info(), other), c = {}, err)) << err;
  EXPECT_EQ(c.dxt_posix[0].path, "/only/in/dxt");

  // A newer module version than the reader knows, counts past the region, stray bytes.
  std::string bad = log;
  const uint32_t v3 = 3;
  std::memcpy(bad.data() + 1072 + 40, &v3, 4);
  EXPECT_FALSE(read_darshan_log(bad, c = {}, err));
  EXPECT_NE(err.find("DXT_POSIX module version 3"), std::string::npos) << err;
  std::string raw = inflate_all(log.substr(at<uint64_t>(log, 208), at<uint64_t>(log, 216)));
  std::string big = raw;
  const int64_t huge = int64_t{1} << 60;
  std::memcpy(big.data() + 96, &huge, 8);
  EXPECT_FALSE(read_darshan_log(with_dxt_region(log, big), c = {}, err));
  EXPECT_NE(err.find("do not fit"), std::string::npos) << err;
  EXPECT_FALSE(read_darshan_log(with_dxt_region(log, raw + "xyz"), c = {}, err));
  EXPECT_NE(err.find("stray bytes"), std::string::npos) << err;
  EXPECT_TRUE(read_darshan_log(with_dxt_region(log, raw), c = {}, err)) << err;
}

// timing: off (docs/counters.md "Timing"): the time counters are 0 because not measured, and the
// job metadata says so, after lib_ver and producer and before the caller's lines.
TEST(DarshanLog, TimingOffIsSaidInTheJobMetadata) {
  auto run = sample();
  DarshanJobInfo j = info();
  j.metadata = {{"iolens_job", "slurm/7"}};
  DarshanLogContents c;
  std::string err;
  // Default, exact: no timing line.
  ASSERT_EQ(run.timing, "exact");
  ASSERT_TRUE(read_darshan_log(darshan_log(run, j), c, err)) << err;
  EXPECT_EQ(c.metadata, "lib_ver=3.5.0\nproducer=iolens\niolens_job=slurm/7\n");
  EXPECT_EQ(c.metadata.find("iolens_timing"), std::string::npos);

  run.timing = "off";
  for (auto& f : run.files) {  // as timing off records them
    f.counters.read_time_ns = 0;
    f.counters.read_start_ns = 0;
  }
  const std::string log = darshan_log(run, j);
  DarshanLogContents off;
  ASSERT_TRUE(read_darshan_log(log, off, err)) << err;
  EXPECT_EQ(off.metadata, "lib_ver=3.5.0\nproducer=iolens\niolens_timing=off\niolens_job=slurm/7\n");
  // The raw job region too (the reader is not what puts it there).
  const auto names_off = at<uint64_t>(log, 32);
  const std::string job = inflate_all(log.substr(kDarshanHeaderSize, names_off - kDarshanHeaderSize));
  EXPECT_EQ(std::string(job.data() + 56), "lib_ver=3.5.0\nproducer=iolens\niolens_timing=off\niolens_job=slurm/7\n");
  // Counts and bytes are exact all the same.
  ASSERT_EQ(off.posix.size(), 2u);
  EXPECT_EQ(off.posix[0].counters[static_cast<size_t>(darshan_posix_counter_index("READS"))], 3);
  EXPECT_EQ(off.posix[0].counters[static_cast<size_t>(darshan_posix_counter_index("BYTES_READ"))],
            6530);
}

// A file every process has a row of is one shared record (rank -1) reduced as Darshan's
// posix_record_reduction_op reduces a file all MPI ranks opened; a file only some processes
// touched keeps one record per process; shared records come last.
TEST(DarshanLog, AFileEveryProcessTouchedIsOneSharedRecord) {
  auto run = sample();  // ranks 0 (pid 100) and 1 (pid 101); a.npy by 101, model.pt by 100
  core::FileSnapshot f = run.files[0];  // pid 100 reads a.npy too
  f.pid = 100;
  f.proc_start_ns = 1700000000000000100;
  f.counters = core::new_counters();
  f.counters.opens = 1;
  f.counters.reads = 1;
  f.counters.bytes_read = 100;
  f.counters.max_byte_read = 9999;
  f.counters.read_time_ns = 4'000'000'000;
  f.counters.max_read_time_ns = 4'000'000'000;
  f.counters.max_read_time_size = 100;
  f.counters.read_start_ns = 1'000'000'000;
  run.files.push_back(f);
  DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(read_darshan_log(darshan_log(run, info()), c, err)) << err;
  ASSERT_EQ(c.posix.size(), 2u);
  auto n = [&](const DarshanPosixRecord& r, const char* name) {
    return r.counters[static_cast<size_t>(darshan_posix_counter_index(name))];
  };
  auto fn = [&](const DarshanPosixRecord& r, const char* name) {
    return r.fcounters[static_cast<size_t>(darshan_posix_fcounter_index(name))];
  };
  const auto& own = c.posix[0];
  EXPECT_EQ(c.names.at(own.id), "/ckpt/model.pt");
  EXPECT_EQ(own.rank, 0);
  const auto& shared = c.posix[1];
  EXPECT_EQ(c.names.at(shared.id), "/data/a.npy");
  EXPECT_EQ(shared.rank, -1);
  EXPECT_EQ(n(shared, "OPENS"), 3);
  EXPECT_EQ(n(shared, "READS"), 4);
  EXPECT_EQ(n(shared, "BYTES_READ"), 6630);
  EXPECT_EQ(n(shared, "MAX_BYTE_READ"), 9999);
  EXPECT_EQ(n(shared, "MAX_READ_TIME_SIZE"), 100);  // follows F_MAX_READ_TIME
  // rank 1: 1500 ns, 6530 bytes; rank 0: 4 s, 100 bytes
  EXPECT_EQ(n(shared, "FASTEST_RANK"), 1);
  EXPECT_EQ(n(shared, "FASTEST_RANK_BYTES"), 6530);
  EXPECT_EQ(n(shared, "SLOWEST_RANK"), 0);
  EXPECT_EQ(n(shared, "SLOWEST_RANK_BYTES"), 100);
  EXPECT_DOUBLE_EQ(fn(shared, "F_FASTEST_RANK_TIME"), 1.5e-6);
  EXPECT_DOUBLE_EQ(fn(shared, "F_SLOWEST_RANK_TIME"), 4.0);
  EXPECT_DOUBLE_EQ(fn(shared, "F_READ_TIME"), 4.0 + 1.5e-6);
  EXPECT_DOUBLE_EQ(fn(shared, "F_READ_START_TIMESTAMP"), 1.0);  // the earlier start
  const double dt = (4.0 - 1.5e-6) / 2;
  EXPECT_NEAR(fn(shared, "F_VARIANCE_RANK_TIME"), dt * dt, 1e-9);
  EXPECT_DOUBLE_EQ(fn(shared, "F_VARIANCE_RANK_BYTES"), (6530.0 - 100) / 2 * (6530.0 - 100) / 2);
  // per-process records keep F_VARIANCE_* and the rank extremes at 0, as Darshan's unreduced
  // ones (only posix_mpi_redux sets them), though this one moved bytes
  ASSERT_GT(n(own, "BYTES_WRITTEN"), 0);
  EXPECT_EQ(fn(own, "F_VARIANCE_RANK_TIME"), 0.0);
  for (const char* name : {"FASTEST_RANK", "FASTEST_RANK_BYTES", "SLOWEST_RANK", "SLOWEST_RANK_BYTES"})
    EXPECT_EQ(n(own, name), 0) << name;
  // Darshan's memory alignment and mode; no mount table was given: the file alignment is -1
  EXPECT_EQ(n(own, "MEM_NOT_ALIGNED"), 1);
  EXPECT_EQ(n(own, "MEM_ALIGNMENT"), 8);
  EXPECT_EQ(n(own, "MODE"), 0644);
  EXPECT_EQ(n(own, "FILE_ALIGNMENT"), -1);
  EXPECT_EQ(n(own, "FILE_NOT_ALIGNED"), -1);
  EXPECT_EQ(n(shared, "MEM_ALIGNMENT"), 8);
  EXPECT_EQ(n(shared, "MODE"), 0);
  EXPECT_EQ(n(shared, "MEM_NOT_ALIGNED"), 0);
  EXPECT_EQ(fn(own, "F_FASTEST_RANK_TIME"), 0.0);
  EXPECT_EQ(fn(own, "F_SLOWEST_RANK_TIME"), 0.0);

  // Darshan keys records by path: two inodes at one path (a file replaced between the two
  // processes' opens) that every process touched are one shared record still.
  run.files.back().ino = 999;
  DarshanLogContents c2;
  ASSERT_TRUE(read_darshan_log(darshan_log(run, info()), c2, err)) << err;
  ASSERT_EQ(c2.posix.size(), 2u);
  EXPECT_EQ(c2.posix[1].rank, -1);
  EXPECT_EQ(n(c2.posix[1], "BYTES_READ"), 6630);
  // A row of a process the snapshot does not list (its events lost) is a rank of its own
  // (rank 2, nprocs 3), never -1 (shared); a.npy is then not every rank's.
  run.files.back().pid = 555;
  DarshanLogContents c3;
  ASSERT_TRUE(read_darshan_log(darshan_log(run, info()), c3, err)) << err;
  ASSERT_EQ(c3.posix.size(), 3u);
  std::set<std::pair<std::string, int64_t>> got;
  for (const auto& r : c3.posix) got.emplace(c3.names.at(r.id), r.rank);
  EXPECT_EQ(got, (std::set<std::pair<std::string, int64_t>>{
                     {"/ckpt/model.pt", 0}, {"/data/a.npy", 1}, {"/data/a.npy", 2}}));
  const std::string log3 = darshan_log(run, info());
  int64_t nprocs = 0;
  std::memcpy(&nprocs, inflate_all(log3.substr(kDarshanHeaderSize, at<uint64_t>(log3, 32) -
                                                                      kDarshanHeaderSize))
                           .data() + 40,
              sizeof nprocs);
  EXPECT_EQ(nprocs, 3);
}

// Darshan keeps a record per path: a rename gives the new path's record of that rank
// RENAME_TARGETS and RENAMED_FROM (the first source's record id). iolens's rows are per file,
// named by the path before the rename: the new path's record is the rank's row of that path,
// or a record of its own.
TEST(DarshanLog, RenameTargetsAreRecordsOfTheNewPaths) {
  core::RunSnapshot run = sample();
  run.files.clear();
  auto row = [&](uint32_t pid, const std::string& path, const std::string& to, uint64_t opened) {
    core::FileSnapshot f;
    f.path = path;
    f.pid = pid;
    f.proc_start_ns = 1700000000000000000 + pid;
    f.counters = core::new_counters();
    f.counters.writes = 1;
    f.counters.open_start_ns = opened;
    f.file_alignment = 4096;
    if (!to.empty()) {
      f.rename_sources = 1;
      f.renamed_to = to;
    }
    run.files.push_back(f);
  };
  // a checkpoint written twice to tmp and renamed onto model.pt (two inodes of one path)
  row(100, "/ckpt/tmp", "/ckpt/model.pt", 5'000);
  row(100, "/ckpt/tmp", "/ckpt/model.pt", 3'000);
  // renamed onto a path the process had a row of (another file, opened before)
  row(100, "/ckpt/other", "/ckpt/x", 7'000);
  row(100, "/ckpt/x", "", 1'000);
  run.files.back().counters.reads = 4;
  // another process's rename
  row(101, "/d/a", "/d/b", 2'000);

  DarshanLogContents c;
  std::string err;
  ASSERT_TRUE(read_darshan_log(darshan_log(run, info()), c, err)) << err;
  auto n = [&](const DarshanPosixRecord& r, const char* name) {
    return r.counters[static_cast<size_t>(darshan_posix_counter_index(name))];
  };
  std::map<std::pair<int64_t, std::string>, const DarshanPosixRecord*> by;
  for (const auto& r : c.posix)
    EXPECT_TRUE(by.emplace(std::pair{r.rank, c.names.at(r.id)}, &r).second) << c.names.at(r.id);
  // one record per (rank, path): the two rows of /ckpt/tmp are one, as Darshan keeps them
  ASSERT_EQ(c.posix.size(), 6u);  // four paths of rows, two new paths
  const auto* tmp = by.at({0, "/ckpt/tmp"});
  EXPECT_EQ(n(*tmp, "WRITES"), 2);
  EXPECT_EQ(n(*tmp, "RENAME_SOURCES"), 2);
  const auto id = [](const char* p) { return static_cast<int64_t>(darshan_record_id(p)); };
  const auto* model = by.at({0, "/ckpt/model.pt"});
  EXPECT_EQ(n(*model, "RENAME_TARGETS"), 2);
  EXPECT_EQ(n(*model, "RENAMED_FROM"), id("/ckpt/tmp"));
  EXPECT_EQ(n(*model, "OPENS") + n(*model, "WRITES") + n(*model, "RENAME_SOURCES"), 0);
  EXPECT_EQ(n(*model, "MAX_BYTE_WRITTEN"), 0);
  EXPECT_EQ(n(*model, "FILE_ALIGNMENT"), 4096);  // the source's file system
  EXPECT_EQ(n(*model, "MEM_ALIGNMENT"), 8);
  const auto* x = by.at({0, "/ckpt/x"});
  EXPECT_EQ(n(*x, "READS"), 4);  // the row of the path, with the rename added
  EXPECT_EQ(n(*x, "RENAME_TARGETS"), 1);
  EXPECT_EQ(n(*x, "RENAMED_FROM"), id("/ckpt/other"));
  EXPECT_EQ(n(*by.at({0, "/ckpt/other"}), "RENAME_SOURCES"), 1);
  EXPECT_EQ(n(*by.at({0, "/ckpt/other"}), "RENAME_TARGETS"), 0);
  const auto* b = by.at({1, "/d/b"});
  EXPECT_EQ(n(*b, "RENAME_TARGETS"), 1);
  EXPECT_EQ(n(*b, "RENAMED_FROM"), id("/d/a"));
  EXPECT_EQ(c.names.at(b->id), "/d/b");
}

// ACCESS1..4 and STRIDE1..4 land in Darshan's slots, values then counts (its counter order:
// STRIDE1..4_STRIDE, STRIDE1..4_COUNT, ACCESS1..4_ACCESS, ACCESS1..4_COUNT).
TEST(DarshanLog, CommonAccessSizesAndStridesFillTheirSlots) {
  core::RunSnapshot run = sample();
  auto& c = run.files[0].counters;  // /data/a.npy, rank 1
  const uint64_t sizes[][2] = {{0, 3}, {4096, 9}, {100, 2}, {65536, 9}, {7, 1}, {8, 1}};
  for (int i = 0; i < 6; ++i) {
    c.access.value[i] = sizes[i][0] + 1;
    c.access.count[i] = sizes[i][1];
  }
  c.stride.value[0] = 1;  // stride 0
  c.stride.count[0] = 20;
  c.stride.value[1] = 4096 + 1;
  c.stride.count[1] = 4;
  DarshanLogContents out;
  std::string err;
  ASSERT_TRUE(read_darshan_log(darshan_log(run, info()), out, err)) << err;
  const auto& r = out.posix[0];
  ASSERT_EQ(out.names.at(r.id), "/data/a.npy");
  auto n = [&](const char* name) {
    return r.counters[static_cast<size_t>(darshan_posix_counter_index(name))];
  };
  // 65536 and 4096 nine times each (the larger first), 100 twice, then 8 and 7 once (8 first)
  EXPECT_EQ(n("ACCESS1_ACCESS"), 65536);
  EXPECT_EQ(n("ACCESS1_COUNT"), 9);
  EXPECT_EQ(n("ACCESS2_ACCESS"), 4096);
  EXPECT_EQ(n("ACCESS2_COUNT"), 9);
  EXPECT_EQ(n("ACCESS3_ACCESS"), 100);
  EXPECT_EQ(n("ACCESS3_COUNT"), 2);
  EXPECT_EQ(n("ACCESS4_ACCESS"), 8);
  EXPECT_EQ(n("ACCESS4_COUNT"), 1);
  EXPECT_EQ(n("STRIDE1_STRIDE"), 4096);  // stride 0 is never shown
  EXPECT_EQ(n("STRIDE1_COUNT"), 4);
  EXPECT_EQ(n("STRIDE2_STRIDE"), 0);
  EXPECT_EQ(n("STRIDE2_COUNT"), 0);
  EXPECT_EQ(darshan_posix_counter_index("STRIDE1_STRIDE") + 8,
            darshan_posix_counter_index("ACCESS1_ACCESS"));
}
