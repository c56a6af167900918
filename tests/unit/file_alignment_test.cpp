// SPDX-License-Identifier: Apache-2.0
// Darshan's FILE_ALIGNMENT and FILE_NOT_ALIGNED (core/file_alignment, iolens_align_bucket):
// every expectation worked out by hand from Darshan 3.5.0's rules (docs/counters.md
// "Alignment and mode"; darshan-core.c, darshan-posix.c), never from another call of the code.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/file_alignment.hpp"
#include "iolens_account.h"

using namespace iolens::core;

namespace {

using Mounts = std::vector<std::pair<std::string, std::string>>;  // (type, point)

/// statfs as a table: f_bsize by point; a point not in it fails.
auto statfs_table(std::map<std::string, MountStatfs> t) {
  return [t = std::move(t)](const std::string& point) {
    const auto it = t.find(point);
    return it == t.end() ? MountStatfs{} : it->second;
  };
}

MountStatfs bsize(int64_t b) { return MountStatfs{true, 0xEF53, b}; }

/// Counters after reads or writes at these offsets, as the accounting counts them.
FileCounters at_offsets(const std::vector<int64_t>& offsets) {
  FileCounters c = new_counters();
  for (int64_t off : offsets) iolens_account_rw(&c, 0, off, 10, 0, 0);
  return c;
}

}  // namespace

TEST(FileAlignment, TheBucketIsTheOffsetsLowestSetBit) {
  // 0 and multiples of 16 MiB are aligned to every alignment kept: no bucket.
  EXPECT_EQ(iolens_align_bucket(0), IOLENS_NR_ALIGN_BUCKETS);
  EXPECT_EQ(iolens_align_bucket(16 << 20), IOLENS_NR_ALIGN_BUCKETS);
  EXPECT_EQ(iolens_align_bucket(int64_t{48} << 20), IOLENS_NR_ALIGN_BUCKETS);
  EXPECT_EQ(iolens_align_bucket(-1), IOLENS_NR_ALIGN_BUCKETS);  // no offset known
  // Not a multiple of 512: bucket 0, whatever else.
  for (int64_t off : {1, 7, 100, 256, 511, 513, 4097, (16 << 20) + 1})
    EXPECT_EQ(iolens_align_bucket(off), 0u) << off;
  // 2^(8+k) exactly, and odd multiples of it: bucket k.
  for (uint32_t k = 1; k < IOLENS_NR_ALIGN_BUCKETS; ++k) {
    const int64_t p = int64_t{1} << (8 + k);
    EXPECT_EQ(iolens_align_bucket(p), k) << p;
    EXPECT_EQ(iolens_align_bucket(3 * p), k) << 3 * p;
  }
  EXPECT_EQ(iolens_align_bucket(4096), 4u);
  EXPECT_EQ(iolens_align_bucket(1 << 20), 12u);
  EXPECT_EQ(iolens_align_bucket(8 << 20), 15u);
}

TEST(FileAlignment, NotAlignedCountsTheOffsetsThatAreNoMultiple) {
  // Darshan: offset % alignment != 0 for every counted call, 0 bytes included; 0 is aligned.
  const FileCounters c = at_offsets({0, 100, 512, 1024, 1536, 2048, 4096, 4097, 8192, 65536,
                                     65600, 1 << 20, 3 << 20, 2 << 20 | 512});
  EXPECT_EQ(file_not_aligned(c, 512), 3);       // 100, 4097, 65600
  EXPECT_EQ(file_not_aligned(c, 1024), 6);      // + 512, 1536, 2 MiB + 512
  EXPECT_EQ(file_not_aligned(c, 4096), 8);      // + 1024, 2048
  EXPECT_EQ(file_not_aligned(c, 65536), 10);    // + 4096, 8192
  EXPECT_EQ(file_not_aligned(c, 1 << 20), 11);  // + 65536
  EXPECT_EQ(file_not_aligned(c, 2 << 20), 13);   // + 1 MiB, 3 MiB: all but 0 now
  EXPECT_EQ(file_not_aligned(c, 16 << 20), 13);
  // Darshan checks nothing when the alignment is -1; every offset is a multiple of 1.
  EXPECT_EQ(file_not_aligned(c, -1), 0);
  EXPECT_EQ(file_not_aligned(c, 1), 0);
  // What the buckets cannot tell.
  for (int64_t a : {2, 256, 3000, 4095, 32 << 20})
    EXPECT_EQ(file_not_aligned(c, a), std::nullopt) << a;
  // Failed calls count nowhere.
  FileCounters f = new_counters();
  iolens_account_rw(&f, 1, 100, -5, 0, 0);
  EXPECT_EQ(file_not_aligned(f, 4096), 0);
  // Parts of a record add up (a drained record and its later part; a file across processes).
  FileCounters a = at_offsets({100, 4096}), b = at_offsets({1024, 512});
  combine_counters(a, b);
  EXPECT_EQ(file_not_aligned(a, 4096), 3);
}

TEST(FileAlignment, TheTableIsDarshansMountTable) {
  const Mounts mounts = {
      {"ext4", "/"},           {"proc", "/proc"},     {"tmpfs", "/dev/shm"},
      {"nfs", "/home"},        {"xfs", "/data"},      {"cgroup2", "/sys/fs/cgroup"},
      {"ext4", "/data/small"}, {"tmpfs", "/data/small/shm"}, {"lustre", "/lus"},
      {"xfs", "/data"},        // the same (point, type) again: once
      {"ext4", "/gone"},       // statfs fails: 4096
  };
  const auto table = darshan_alignment_table(
      mounts, statfs_table({{"/", bsize(4096)},
                            {"/home", bsize(1 << 20)},
                            {"/data", bsize(65536)},
                            {"/sys/fs/cgroup", bsize(4096)},
                            {"/data/small", bsize(1024)},
                            {"/lus", MountStatfs{true, 0x0BD00BD0, 4096}}}));
  // Excluded types left out, nfs last before the sort, longest point first.
  const std::vector<AlignmentMount> want = {
      {"/sys/fs/cgroup", 4096}, {"/data/small", 1024}, {"/gone", 4096}, {"/home", 1 << 20},
      {"/data", 65536},         {"/lus", 1 << 20},     {"/", 4096}};
  ASSERT_EQ(table.size(), want.size());
  // Equal lengths ("/gone", "/home", "/data"; "/lus") in no set order by Darshan's qsort:
  // compare as a set where they tie, the longest-first order otherwise.
  for (std::size_t i = 0; i + 1 < table.size(); ++i)
    EXPECT_GE(table[i].point.size(), table[i + 1].point.size());
  for (const auto& m : want)
    EXPECT_NE(std::find(table.begin(), table.end(), m), table.end()) << m.point;

  EXPECT_EQ(darshan_file_alignment(table, "/data/small/x"), 1024);
  // tmpfs: its enclosing mount's; a string prefix is enough, as in Darshan
  EXPECT_EQ(darshan_file_alignment(table, "/data/small/shm/x"), 1024);
  EXPECT_EQ(darshan_file_alignment(table, "/data/smallish/x"), 1024);
  EXPECT_EQ(darshan_file_alignment(table, "/data/y"), 65536);
  EXPECT_EQ(darshan_file_alignment(table, "/dev/shm/z"), 4096);  // "/"'s
  EXPECT_EQ(darshan_file_alignment(table, "/home/u/f"), 1 << 20);
  EXPECT_EQ(darshan_file_alignment(table, "/lus/f"), 1 << 20);  // Lustre: 1 MiB, not statfs's
  EXPECT_EQ(darshan_file_alignment(table, "relative"), -1);     // no mount is a prefix
  EXPECT_EQ(darshan_file_alignment({}, "/x"), -1);
}

TEST(FileAlignment, AtMostSixtyFourMountsAndNfsOnlyIfRoomIsLeft) {
  Mounts mounts;
  mounts.emplace_back("nfs", "/n");
  // Two digits each: no point is a string prefix of another ("/m6" would be of "/m64/f").
  for (int i = 0; i < 70; ++i)
    mounts.emplace_back("ext4", (i < 10 ? "/m0" : "/m") + std::to_string(i));
  std::map<std::string, MountStatfs> st;
  for (const auto& [t, p] : mounts) st[p] = bsize(p == "/n" ? 8192 : 4096);
  const auto table = darshan_alignment_table(mounts, statfs_table(st));
  EXPECT_EQ(table.size(), 64u);
  EXPECT_EQ(darshan_file_alignment(table, "/n/f"), -1);    // nfs comes after 64 others: left out
  EXPECT_EQ(darshan_file_alignment(table, "/m63/f"), 4096);
  EXPECT_EQ(darshan_file_alignment(table, "/m64/f"), -1);  // the 65th: left out
}

TEST(FileAlignment, RowsGetTheirPathsAlignment) {
  RunSnapshot run;
  FileSnapshot f;
  f.path = "/data/a";
  run.files.push_back(f);
  f.path = "<unknown 8:1:5>";
  f.path_known = false;
  run.files.push_back(f);
  f.path = "/train/x.bin";  // the last components only: the kernel's walk was cut
  f.path_known = true;
  f.path_incomplete = true;
  run.files.push_back(f);
  f.path = "/elsewhere";
  f.path_incomplete = false;
  run.files.push_back(f);
  set_file_alignments(run, {{"/data", 65536}, {"/d", 512}});
  EXPECT_EQ(run.files[0].file_alignment, 65536);
  EXPECT_EQ(run.files[1].file_alignment, std::nullopt);  // no path: not known
  EXPECT_EQ(run.files[2].file_alignment, std::nullopt);  // a cut path: not known either
  EXPECT_EQ(run.files[3].file_alignment, -1);            // a path no mount is a prefix of
}

TEST(FileAlignment, TheLookupByDirectoryGivesDarshansAnswerForEveryPath) {
  // Mount points chosen to catch a shortcut: one below a directory of files (/d/sub), one that
  // begins like a file's name (/d/a: a prefix of /d/ab, not of /d/c), the root, and nested ones.
  std::vector<iolens::core::AlignmentMount> table = {
      {"/d/sub/deeper", 1 << 20}, {"/data/x", 8192}, {"/d/sub", 65536}, {"/data", 4096},
      {"/d/a", 2048}, {"/", 512}};
  std::sort(table.begin(), table.end(),
            [](const auto& a, const auto& b) { return a.point.size() > b.point.size(); });
  const std::vector<std::string> dirs = {"/d", "/d/sub", "/d/sub/deeper", "/data", "/data/x",
                                         "/data2", "/d/ab", "/e/f", ""};
  const std::vector<std::string> names = {"a", "ab", "c", "sub", "subx", "x", "xy", "deeper"};
  std::mt19937 rng(5);
  iolens::core::AlignmentLookup lookup(table);
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string path = dirs[rng() % dirs.size()] + "/" + names[rng() % names.size()];
    ASSERT_EQ(lookup.of(path), iolens::core::darshan_file_alignment(table, path)) << path;
    ++checked;
  }
  EXPECT_EQ(lookup.of("/d/ab"), 2048);  // Darshan's string prefix, not at a '/'
  EXPECT_EQ(lookup.of("/d/c"), 512);
  EXPECT_EQ(lookup.of("/d/sub/f"), 65536);
  EXPECT_EQ(lookup.of("relative"), iolens::core::darshan_file_alignment(table, "relative"));
  EXPECT_EQ(checked, 2000);
}
