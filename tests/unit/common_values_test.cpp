// SPDX-License-Identifier: Apache-2.0
// Darshan's four most common access sizes and strides (ACCESS1..4, STRIDE1..4) as the kernel's
// accounting tallies them (bpf/iolens_account.h, the same C the programs run; the side slots as
// core::account_rw mirrors the programs' tally_more) and core/common_values.hpp reads them. The oracle is a transcription of Darshan's own code, not of
// ours: darshan-posix.c POSIX_RECORD_READ/WRITE (stride, last byte), darshan-common.c
// darshan_track_common_val_counters (a tree of at most 32 values) and darshan-common.h
// DARSHAN_UPDATE_COMMON_VAL_COUNTERS (the four slots, updated after every call), plus numbers
// worked out by hand.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "core/common_values.hpp"
#include "core/counters.hpp"
#include "iolens_account.h"

namespace {

using iolens::core::common_accesses;
using iolens::core::common_strides;
using iolens::core::CommonValue;
using iolens::core::CommonValues;
using iolens::core::FileCounters;
using iolens::core::untallied;

/// Darshan 3.5.0's rules for one record, transcribed.
class DarshanRecord {
 public:
  void open() { last_read_ = last_written_ = 0; }  // _POSIX_RECORD_OPEN resets both
  void close() { last_read_ = last_written_ = 0; }
  void access(bool write, int64_t offset, int64_t ret) {
    if (ret < 0) return;
    int64_t& last = write ? last_written_ : last_read_;
    int64_t stride = 0;
    if (offset > 0 && offset > last && last != 0) stride = offset - last - 1;
    last = offset + ret - 1;
    track(access_tree_, access_val_, access_cnt_, ret);
    track(stride_tree_, stride_val_, stride_cnt_, stride);
  }
  CommonValues access_four() const { return four(access_val_, access_cnt_); }
  CommonValues stride_four() const { return four(stride_val_, stride_cnt_); }

 private:
  // darshan_track_common_val_counters: a new value is added only while fewer than 32 are held;
  // then DARSHAN_UPDATE_COMMON_VAL_COUNTERS(val, cnt, &value, 1, tree count, 0)
  static void track(std::map<int64_t, int64_t>& tree, int64_t* val, int64_t* cnt, int64_t v) {
    auto it = tree.find(v);
    if (it == tree.end()) {
      if (tree.size() >= 32) return;
      it = tree.emplace(v, 0).first;
    }
    ++it->second;
    update(val, cnt, v, it->second);
  }
  static void update(int64_t* val, int64_t* cnt, int64_t v, int64_t total) {
    int64_t tmp_val[4] = {0}, tmp_cnt[4] = {0};
    int n = 0, i = 0;
    if (v == 0) return;
    for (i = 0; i < 4; ++i) {
      if (cnt[i] > total || (cnt[i] == total && val[i] > v)) {
        tmp_val[n] = val[i];
        tmp_cnt[n] = cnt[i];
        ++n;
      } else {
        break;
      }
    }
    if (n == 4) return;
    tmp_val[n] = v;
    tmp_cnt[n] = total;
    ++n;
    while (n != 4 && i < 4) {  // Darshan's loop has no `i < 4`: it never needs it
      if (val[i] != v) {
        tmp_val[n] = val[i];
        tmp_cnt[n] = cnt[i];
        ++n;
      }
      ++i;
    }
    std::memcpy(val, tmp_val, sizeof tmp_val);
    std::memcpy(cnt, tmp_cnt, sizeof tmp_cnt);
  }
  static CommonValues four(const int64_t* val, const int64_t* cnt) {
    CommonValues out{};
    for (int i = 0; i < 4; ++i) out[static_cast<std::size_t>(i)] = {val[i], cnt[i]};
    return out;
  }

  int64_t last_read_ = 0, last_written_ = 0;
  std::map<int64_t, int64_t> access_tree_, stride_tree_;
  int64_t access_val_[4] = {}, access_cnt_[4] = {}, stride_val_[4] = {}, stride_cnt_[4] = {};
};

/// The kernel's record (with its side slots) and Darshan's, fed the same calls.
struct Both {
  FileCounters c = iolens::core::new_counters();
  DarshanRecord d;
  void open() {
    iolens_account_open(&c, 0, 0, 0);
    d.open();
  }
  void close() {
    iolens_account_close(&c, 0, 0, 0);
    d.close();
  }
  void read(int64_t offset, int64_t ret) { io(false, offset, ret); }
  void write(int64_t offset, int64_t ret) { io(true, offset, ret); }
  void io(bool write, int64_t offset, int64_t ret) {
    iolens::core::account_rw(c, write ? 1 : 0, offset, ret, 0, 0);
    d.access(write, offset, ret);
  }
};

CommonValues four(std::initializer_list<CommonValue> l) {
  CommonValues out{};
  std::size_t i = 0;
  for (const auto& v : l) out[i++] = v;
  return out;
}

TEST(CommonValues, AWholeFileReadByHand) {
  // Python's readall of a 10,000-byte file: read(10001) gives 10000, then 0; twice, reopened.
  Both b;
  for (int round = 0; round < 2; ++round) {
    b.open();
    b.read(0, 10000);
    b.read(10000, 0);  // offset 10000, last byte 9999: consecutive, stride 0
    b.close();
  }
  EXPECT_EQ(common_accesses(b.c), four({{10000, 2}}));  // 0 is tallied, never shown
  EXPECT_EQ(common_strides(b.c), four({}));              // every stride 0
  EXPECT_EQ(untallied(b.c.access, b.c.more.access), 0u);
  EXPECT_EQ(b.d.access_four(), common_accesses(b.c));
  EXPECT_EQ(b.d.stride_four(), common_strides(b.c));
}

TEST(CommonValues, StridesByHand) {
  Both b;
  b.open();
  b.read(0, 100);    // first: stride 0, last byte 99
  b.read(200, 100);  // 200 - 99 - 1 = 100, last 299
  b.read(400, 100);  // 100, last 499
  b.read(1000, 50);  // 500, last 1049
  b.read(0, 10);     // backward: 0, last 9
  b.read(30, 10);    // 30 - 9 - 1 = 20, last 39
  b.write(4096, 4096);   // writes have their own last byte (0): stride 0, last 8191
  b.write(12288, 4096);  // 12288 - 8191 - 1 = 4096
  EXPECT_EQ(common_strides(b.c), four({{100, 2}, {4096, 1}, {500, 1}, {20, 1}}));
  // reads and writes share one tally: 100 x3, 4096 x2, 10 x2, 50 x1 (ties: larger first)
  EXPECT_EQ(common_accesses(b.c), four({{100, 3}, {4096, 2}, {10, 2}, {50, 1}}));
  EXPECT_EQ(b.d.access_four(), common_accesses(b.c));
  EXPECT_EQ(b.d.stride_four(), common_strides(b.c));
}

TEST(CommonValues, TiesGoToTheLargerValueAndZeroIsNeverShown) {
  Both b;
  b.open();
  int64_t off = 0;
  for (int64_t size : {10, 50, 20, 40, 30, 0, 0, 0}) {
    b.read(off, size);
    off += size;
  }
  EXPECT_EQ(common_accesses(b.c), four({{50, 1}, {40, 1}, {30, 1}, {20, 1}}));
  EXPECT_EQ(b.d.access_four(), common_accesses(b.c));
}

TEST(CommonValues, ValuesPastTheRecordsSlotsGoToItsSideSlotsThenUntallied) {
  Both b;
  b.open();
  // 40 distinct sizes, the ninth and the 30th three times each, the 33rd five times: the record
  // holds the first 8, its side slots the next 24 (the 9th and 30th counted there and shown
  // first, as Darshan's 32-value tree shows them), and the 33rd onwards are untallied, as
  // Darshan drops them
  for (int64_t size = 1; size <= 40; ++size) {
    const int times = size == 9 || size == 30 ? 3 : size == 33 ? 5 : 1;
    for (int i = 0; i < times; ++i) b.read(0, size);
  }
  EXPECT_EQ(untallied(b.c.access, b.c.more.access), 5u + 7u);  // 33 x5, 34..40 once
  EXPECT_EQ(b.c.access.untallied, 0u);                         // each had a side slot to try
  EXPECT_EQ(b.c.more.access.value[0], 9u + 1);                 // the 9th value: side slot 1
  EXPECT_EQ(b.c.more.access.value[IOLENS_TALLY_MORE_SLOTS - 1], 32u + 1);
  EXPECT_EQ(b.d.access_four(), four({{30, 3}, {9, 3}, {32, 1}, {31, 1}}));
  EXPECT_EQ(common_accesses(b.c), b.d.access_four());
  EXPECT_EQ(iolens::core::tally_calls(b.c.access, b.c.more.access), 40u + 2 * 2 + 4);
  // Without side slots (iolens_account_rw: no side entry), the 9th on are untallied.
  FileCounters k = iolens::core::new_counters();
  for (int64_t size = 1; size <= 9; ++size) iolens_account_rw(&k, 0, 0, size, 0, 0);
  EXPECT_EQ(k.access.untallied, 1u);
  EXPECT_EQ(k.more.access.value[0], 0u);
}

TEST(CommonValues, AValueHeldTwiceCountsAsOne) {
  // A side entry left by a call that raced its record's removal, taken over by the record's
  // next part, can hold a value that part's own slots hold too (docs/counters.md): one value.
  FileCounters c = iolens::core::new_counters();
  c.access.value[0] = 4096 + 1;
  c.access.count[0] = 3;
  c.access.value[1] = 100 + 1;
  c.access.count[1] = 4;
  c.more.access.value[0] = 4096 + 1;
  c.more.access.count[0] = 2;
  EXPECT_EQ(common_accesses(c), four({{4096, 5}, {100, 4}}));
}

TEST(CommonValues, SameAsDarshanOnRandomCalls) {
  // Darshan's 32 values, in the order they came: the record's 8 and the side's 24 hold the same
  // ones, and both drop the calls of the values after them, so the four are the same always.
  std::mt19937_64 rng(19);
  const std::vector<int64_t> few_sizes = {0, 1, 512, 4096, 65536, 1048576};
  const std::vector<int64_t> gaps = {0, 0, 0, 1, 4096, 123457};
  int past_eight = 0, past_32 = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Both b;
    b.open();
    int64_t off_r = 0, off_w = 0;
    const bool many = trial % 2 == 1;  // sizes and gaps from a wide range: past 8 and 32 values
    const int calls = 1 + static_cast<int>(rng() % (many ? 200 : 60));
    for (int k = 0; k < calls; ++k) {
      const unsigned r = static_cast<unsigned>(rng() % 100);
      if (r < 3) {
        b.close();
        b.open();
        off_r = off_w = 0;
        continue;
      }
      const bool write = r % 3 == 0;
      int64_t& off = write ? off_w : off_r;
      const int64_t size = many ? static_cast<int64_t>(rng() % 48) * 512
                                : few_sizes[rng() % few_sizes.size()];
      if (rng() % 8 == 0)
        off = static_cast<int64_t>(rng() % 3) * 4096;  // backward or back to 0
      else
        off += many ? static_cast<int64_t>(rng() % 40) * 100 : gaps[rng() % gaps.size()];
      b.io(write, off, size);
      off += size;
    }
    past_eight += b.c.more.access.value[0] != 0 || b.c.more.stride.value[0] != 0;
    past_32 += untallied(b.c.access, b.c.more.access) + untallied(b.c.stride, b.c.more.stride) != 0;
    ASSERT_EQ(b.c.access.untallied + b.c.stride.untallied, 0u);  // a side entry always here
    ASSERT_EQ(b.d.access_four(), common_accesses(b.c)) << "trial " << trial;
    ASSERT_EQ(b.d.stride_four(), common_strides(b.c)) << "trial " << trial;
  }
  EXPECT_GT(past_eight, 500);  // the side slots were used
  EXPECT_GT(past_32, 200);     // and filled
}

TEST(CommonValues, AMergeIsTheTallyOfTheCallsInOrder) {
  // One record split in two (moved out of the kernel, then made again): merged, the same as
  // one record of all the calls, whatever the number of values (past the 32: the same values
  // untallied).
  std::mt19937_64 rng(7);
  int inexact = 0, past_eight = 0;
  for (int trial = 0; trial < 500; ++trial) {
    FileCounters whole = iolens::core::new_counters(), a = whole, b = whole;
    const int n = 1 + static_cast<int>(rng() % 120), cut = static_cast<int>(rng() % (n + 1));
    const uint64_t range = trial % 2 ? 12 : 45;
    for (int k = 0; k < n; ++k) {
      const int64_t size = static_cast<int64_t>(rng() % range);
      iolens::core::account_rw(whole, 0, 0, size, 0, 0);
      iolens::core::account_rw(k < cut ? a : b, 0, 0, size, 0, 0);
    }
    // The later part drops what its own 32 have no room for, which the whole may hold: exact
    // when the later part dropped nothing.
    const bool later_dropped = untallied(b.access, b.more.access) != 0;
    iolens::core::merge_tallies(a, b);
    EXPECT_EQ(iolens::core::tally_calls(a.access, a.more.access), static_cast<uint64_t>(n));
    if (later_dropped) {
      ++inexact;
      continue;
    }
    ASSERT_EQ(std::memcmp(&a.access, &whole.access, sizeof a.access), 0) << "trial " << trial;
    ASSERT_EQ(std::memcmp(&a.more.access, &whole.more.access, sizeof a.more.access), 0)
        << "trial " << trial;
    past_eight += whole.more.access.value[0] != 0;
  }
  EXPECT_GT(past_eight, 100);  // exact merges that used the side slots
  EXPECT_LT(inexact, 250);
}

TEST(CommonValues, FoldAndCombineMergeTheTallies) {
  FileCounters early = iolens::core::new_counters(), late = early;
  iolens_account_open(&early, 0, 0, 0);
  iolens_account_rw(&early, 0, 0, 100, 0, 0);
  iolens_account_close(&early, 0, 0, 0);
  iolens_account_open(&late, 0, 0, 0);
  iolens_account_rw(&late, 0, 0, 100, 0, 0);
  iolens_account_rw(&late, 0, 300, 7, 0, 0);  // stride 300 - 99 - 1 = 200
  iolens::core::fold_counters(early, late);
  EXPECT_EQ(common_accesses(early), four({{100, 2}, {7, 1}}));
  EXPECT_EQ(common_strides(early), four({{200, 1}}));
}

TEST(CommonValues, ThreadsClaimingSlotsAtOnceNeitherLoseNorDoubleACall) {
  // The kernel's claim protocol, as the same C runs it, under real threads: 2 threads (this
  // machine's cores), each tallying the values 1..6 in its own order, start together on a fresh
  // tally, many times. Every value must be held once, with every call counted.
  constexpr int kThreads = 2, kRounds = 3000;
  for (int round = 0; round < kRounds; ++round) {
    iolens_tally t{};
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int th = 0; th < kThreads; ++th)
      threads.emplace_back([&, th] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        for (int k = 0; k < 6; ++k) iolens_tally_add(&t, static_cast<__u64>((k + th) % 6 + 1));
      });
    for (auto& th : threads) th.join();
    std::map<__u64, __u64> held;
    for (int i = 0; i < IOLENS_TALLY_SLOTS; ++i)
      if (t.value[i] != 0) {
        ASSERT_TRUE(held.emplace(t.value[i], t.count[i]).second) << round;
      }
    ASSERT_EQ(held.size(), 6u) << round;
    for (const auto& [key, count] : held) ASSERT_EQ(count, static_cast<__u64>(kThreads)) << round;
    ASSERT_EQ(t.untallied, 0u);
    // slots fill in order: no free slot before a held one
    for (int i = 1; i < IOLENS_TALLY_SLOTS; ++i)
      if (t.value[i] != 0) {
        ASSERT_NE(t.value[i - 1], 0u) << round;
      }
  }
}

}  // namespace
