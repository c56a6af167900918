// SPDX-License-Identifier: Apache-2.0
// One row per file across processes (core/by_file.hpp): Darshan's shared-file reduction of the
// per-(process, file) rows, checked against values worked out by hand here, and the record's
// `by_file` as written (streamed) and as the DOM makes it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/by_file.hpp"
#include "exporters/json_report.hpp"

using namespace iolens;

namespace {

core::FileSnapshot row(const std::string& path, uint64_t ino, uint32_t pid, uint64_t bytes_read,
                       uint64_t bytes_written, uint64_t read_ns, uint64_t meta_ns) {
  core::FileSnapshot f;
  f.path = path;
  f.dev = 2049;
  f.ino = ino;
  f.pid = pid;
  f.proc_start_ns = 1000 + pid;
  f.counters = core::new_counters();
  f.counters.opens = 1;
  f.counters.reads = bytes_read ? 1 : 0;
  f.counters.writes = bytes_written ? 1 : 0;
  f.counters.bytes_read = bytes_read;
  f.counters.bytes_written = bytes_written;
  f.counters.read_time_ns = read_ns;
  f.counters.meta_time_ns = meta_ns;
  f.counters.max_read_time_ns = read_ns;
  f.counters.max_read_time_size = bytes_read;
  f.counters.max_byte_read = bytes_read ? static_cast<int64_t>(bytes_read) - 1 : -1;
  f.counters.open_start_ns = 100 * pid;
  f.counters.open_end_ns = 100 * pid + 5;
  f.counters.read_start_ns = bytes_read ? 100 * pid + 10 : 0;
  f.counters.read_end_ns = bytes_read ? 100 * pid + 20 : 0;
  return f;
}

std::string streamed(const core::RunSnapshot& s) {
  std::string out;
  EXPECT_TRUE(exporters::write_run_json(s, "9.9.9", [&](std::string_view piece) {
    out.append(piece);
    return true;
  }));
  return out;
}

}  // namespace

// Three processes read /data/shared (pid 20 in two rows: a file folded, then used again), one
// process writes /data/own; /data/shared has a part in a process's folded record.
TEST(ByFile, RowsOfAFileAreReducedAsDarshanReducesASharedFile) {
  core::RunSnapshot s;
  s.files.push_back(row("/data/shared", 7, 10, 4096, 0, 3'000'000'000, 1'000'000'000));
  s.files.push_back(row("/data/shared", 7, 20, 1000, 0, 500'000'000, 0));
  s.files.push_back(row("/data/shared", 7, 20, 24, 0, 500'000'000, 0));
  s.files.push_back(row("/data/shared", 7, 30, 0, 0, 0, 2'000'000'000));
  s.files.push_back(row("/data/own", 8, 20, 0, 512, 0, 0));
  s.folded_files = {{2049, 7}};

  const core::FilesAcrossProcesses by_file(s);
  ASSERT_EQ(by_file.size(), 2u);
  // sorted by path: /data/own first
  const core::FileAcrossProcesses own = by_file.at(0);
  EXPECT_EQ(own.file->path, "/data/own");
  EXPECT_EQ(own.processes, 1u);
  EXPECT_EQ(own.counters.bytes_written, 512u);
  EXPECT_EQ(own.fastest.pid, 20u);
  EXPECT_EQ(own.slowest.pid, 20u);
  EXPECT_EQ(own.variance_bytes, 0.0);
  EXPECT_FALSE(own.folded);

  const core::FileAcrossProcesses f = by_file.at(1);
  EXPECT_EQ(f.file->path, "/data/shared");
  EXPECT_EQ(f.processes, 3u);
  EXPECT_EQ(f.rows, 4u);
  // sums
  EXPECT_EQ(f.counters.opens, 4u);
  EXPECT_EQ(f.counters.reads, 3u);
  EXPECT_EQ(f.counters.bytes_read, 4096u + 1000u + 24u);
  EXPECT_EQ(f.counters.read_time_ns, 4'000'000'000u);
  EXPECT_EQ(f.counters.meta_time_ns, 3'000'000'000u);
  // maxima; the slowest read's size follows it
  EXPECT_EQ(f.counters.max_byte_read, 4095);
  EXPECT_EQ(f.counters.max_read_time_ns, 3'000'000'000u);
  EXPECT_EQ(f.counters.max_read_time_size, 4096u);
  // first start (0 = never is not a start), last end
  EXPECT_EQ(f.counters.open_start_ns, 1000u);
  EXPECT_EQ(f.counters.read_start_ns, 1010u);
  EXPECT_EQ(f.counters.open_end_ns, 3005u);
  EXPECT_EQ(f.counters.read_end_ns, 2020u);
  // per process: 10 = 4 s, 4096 B; 20 = 1 s, 1024 B (its two rows); 30 = 2 s, 0 B
  EXPECT_EQ(f.fastest.pid, 20u);
  EXPECT_EQ(f.fastest.proc_start_ns, 1020);
  EXPECT_EQ(f.fastest.bytes, 1024u);
  EXPECT_EQ(f.fastest.time_ns, 1'000'000'000u);
  EXPECT_EQ(f.slowest.pid, 10u);
  EXPECT_EQ(f.slowest.bytes, 4096u);
  EXPECT_EQ(f.slowest.time_ns, 4'000'000'000u);
  // population variances: times {4, 1, 2} s, mean 7/3; bytes {4096, 1024, 0}, mean 5120/3
  EXPECT_NEAR(f.variance_time_s2, (25.0 / 9 + 16.0 / 9 + 1.0 / 9) / 3, 1e-12);
  const double m = 5120.0 / 3;
  EXPECT_NEAR(f.variance_bytes,
              ((4096 - m) * (4096 - m) + (1024 - m) * (1024 - m) + m * m) / 3, 1e-6);
  EXPECT_TRUE(f.folded);
}

TEST(ByFile, TiesGoToTheEarlierProcessAndTwoIncarnationsAtOnePathStayApart) {
  core::RunSnapshot s;
  s.files.push_back(row("/x", 1, 30, 10, 0, 5, 0));
  s.files.push_back(row("/x", 1, 10, 20, 0, 5, 0));
  s.files.push_back(row("/x", 2, 10, 30, 0, 5, 0));  // same path, another inode: another file
  const core::FilesAcrossProcesses by_file(s);
  ASSERT_EQ(by_file.size(), 2u);
  const auto a = by_file.at(0);
  EXPECT_EQ(a.file->ino, 1u);
  EXPECT_EQ(a.processes, 2u);
  EXPECT_EQ(a.fastest.pid, 10u);
  EXPECT_EQ(a.slowest.pid, 10u);
  EXPECT_EQ(by_file.at(1).file->ino, 2u);
  EXPECT_EQ(by_file.at(1).counters.bytes_read, 30u);
  EXPECT_EQ(core::FilesAcrossProcesses(core::RunSnapshot{}).size(), 0u);
}

// write_run_json writes `by_file` rows directly: byte for byte the DOM's text, for shared and
// single rows, folded ones, non-UTF-8 and unknown paths, fractional variances.
TEST(ByFile, TheStreamedRowsAreTheDumpedOnes) {
  core::RunSnapshot s;
  s.files.push_back(row("/data/shared", 7, 10, 4096, 0, 3'000'000'001, 1));
  s.files.push_back(row("/data/shared", 7, 20, 1000, 0, 7, 0));
  s.files.push_back(row("/data/shared", 7, 30, 3, 0, 0, 2'000'000'000));
  s.files.push_back(row(std::string("/d/\xff\x01\"q\""), 9, 20, 0, 512, 0, 0));
  core::FileSnapshot unknown = row("<unknown 8:1:5>", 5, 10, 1, 0, 0, 0);
  unknown.path_known = false;
  unknown.path_incomplete = true;
  s.files.push_back(unknown);
  s.folded_files = {{2049, 7}};
  const std::string text = streamed(s);
  EXPECT_EQ(text, exporters::dump_json(exporters::run_to_json(s, "9.9.9")));
  const auto j = nlohmann::json::parse(text);
  ASSERT_EQ(j["by_file"].size(), 3u);  // by path: "/d/\xff...", "/data/shared", "<unknown"
  EXPECT_EQ(j["by_file"][1]["processes"], 3);
  EXPECT_EQ(j["by_file"][1]["folded"], true);
  EXPECT_EQ(j["by_file"][1]["counters"]["bytes_read"], 4096 + 1000 + 3);
  EXPECT_EQ(j["by_file"][1]["slowest"]["pid"], 10);
  EXPECT_FALSE(j["by_file"][0].contains("folded"));
  EXPECT_EQ(j["by_file"][2]["path_unknown"], true);
  // the paged rows are the same rows
  const core::FilesAcrossProcesses across(s);
  EXPECT_EQ(exporters::by_file_json(across, 1, 5),
            nlohmann::json({j["by_file"][1], j["by_file"][2]}));
  EXPECT_EQ(exporters::by_file_json(across, 9, 5), nlohmann::json::array());
}
