// SPDX-License-Identifier: Apache-2.0
// PackedCounters (issue 16, item 2): what a daemon keeps of a record that stopped changing must
// unpack to exactly the counters packed, whatever their values, and be small for the records
// a DL job makes by the hundred thousand.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/packed_counters.hpp"

using iolens::core::FileCounters;
using iolens::core::new_counters;
using iolens::core::PackedCounters;

namespace {

bool same(const FileCounters& a, const FileCounters& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// A file opened, read whole in three calls and closed, timed (what a DataLoader worker does
/// with each sample): its counters as the kernel leaves them.
FileCounters read_once() {
  FileCounters c = new_counters();
  const uint64_t t = 3'600'000'000'000ull;  // an hour after boot, in ns
  c.opens = 1;
  c.closes = 1;
  c.reads = 3;
  c.bytes_read = 110'000;
  c.max_byte_read = 109'999;
  c.last_byte_read = 109'999;
  c.seq_reads = 2;
  c.consec_reads = 2;
  c.size_read[4] = 2;
  c.size_read[3] = 1;
  c.read_time_ns = 41'000;
  c.meta_time_ns = 9'000;
  c.max_read_time_ns = 30'000;
  c.max_read_time_size = 65'536;
  c.lat_read[6] = 2;
  c.lat_read[7] = 1;
  c.lat_read_sum_ns = 41'000;
  c.open_start_ns = t;
  c.open_end_ns = t + 5'000;
  c.read_start_ns = t + 6'000;
  c.read_end_ns = t + 50'000;
  c.close_start_ns = t + 51'000;
  c.close_end_ns = t + 53'000;
  c.cache_read_pages = 27;
  c.last_read_end_ns = t + 50'000;
  c.last_meta_end_ns = t + 53'000;
  c.last_io_type = 1;
  c.first_io_type = 1;
  c.named = 1;
  return c;
}

}  // namespace

TEST(PackedCounters, NewCountersHoldNothing) {
  const PackedCounters p(new_counters());
  EXPECT_EQ(p.heap_bytes(), 0u);
  EXPECT_TRUE(same(p.unpack(), new_counters()));
  EXPECT_TRUE(same(PackedCounters().unpack(), new_counters()));
}

TEST(PackedCounters, AFileReadOnceIsSmallAndExact) {
  const FileCounters c = read_once();
  const PackedCounters p(c);
  EXPECT_TRUE(same(p.unpack(), c));
  // 30 words differ from new_counters(); 16 bytes of masks, 1-3 bytes per count, 6 per
  // timestamp: well under a fifth of the 936 bytes of whole counters.
  EXPECT_LE(p.heap_bytes(), 160u) << p.heap_bytes();
  EXPECT_LT(p.heap_bytes() * 5, sizeof(FileCounters));
}

TEST(PackedCounters, EveryWordAnyValueRoundTrips) {
  // Every word set, to values from 1 to all ones, the signed ones negative too: the varints'
  // longest form (10 bytes) and the wrap of (value - new_counters() value) both hold.
  std::mt19937_64 rng(2463);
  for (int round = 0; round < 200; ++round) {
    uint64_t w[sizeof(FileCounters) / 8];
    for (auto& x : w) {
      const int kind = static_cast<int>(rng() % 5);
      x = kind == 0 ? 0 : kind == 1 ? ~uint64_t{0} : kind == 2 ? (rng() & 0xff) : rng();
    }
    FileCounters c;
    std::memcpy(&c, w, sizeof c);
    const PackedCounters p(c);
    ASSERT_TRUE(same(p.unpack(), c)) << "round " << round;
    EXPECT_LE(p.heap_bytes(), 16 + sizeof(w) / 8 * 10);
    const PackedCounters copy(p);  // copies are deep and equal
    EXPECT_TRUE(same(copy.unpack(), c));
    PackedCounters assigned;
    assigned = copy;
    EXPECT_TRUE(same(assigned.unpack(), c));
  }
  // A field whose new_counters() value is -1 set back to 0 is a difference like any other.
  FileCounters c = new_counters();
  c.max_byte_read = 0;
  c.max_byte_written = -2;
  EXPECT_TRUE(same(PackedCounters(c).unpack(), c));
  EXPECT_GT(PackedCounters(c).heap_bytes(), 0u);
}
