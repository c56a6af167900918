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
  // 30 words differ from new_counters(); 24 bytes of masks, 1-3 bytes per count, 6 per
  // timestamp: well under a fifth of the 1,352 bytes of the kernel's record.
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
    EXPECT_LE(p.heap_bytes(), PackedCounters::kMaskWords * 8 + sizeof(w) / 8 * 10);
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

namespace {

/// `bytes` refused by from_bytes, with a reason that contains `why`.
void expect_refused(const std::string& bytes, const std::string& why) {
  std::string error;
  EXPECT_FALSE(PackedCounters::from_bytes(bytes, error).has_value()) << why;
  EXPECT_NE(error.find(why), std::string::npos) << "wanted '" << why << "', got '" << error << "'";
}

/// Three masks of the record's words (169 since ABI 15: 64 + 64 + 41), then `tail`.
std::string masks(uint64_t lo, uint64_t mid, uint64_t hi, const std::string& tail) {
  static_assert(PackedCounters::kRecordMasks == 3);
  std::string s(24, '\0');
  std::memcpy(s.data(), &lo, 8);
  std::memcpy(s.data() + 8, &mid, 8);
  std::memcpy(s.data() + 16, &hi, 8);
  return s + tail;
}

/// The record's three masks with the top bit of the third (side masks follow), then the two
/// side masks (98 side words: 64 + 34), then `tail`.
std::string side_masks(uint64_t lo, uint64_t mid, uint64_t hi, uint64_t s0, uint64_t s1,
                       const std::string& tail) {
  static_assert(PackedCounters::kSideMasks == 2 && PackedCounters::kSideWords == 98);
  std::string s(16, '\0');
  std::memcpy(s.data(), &s0, 8);
  std::memcpy(s.data() + 8, &s1, 8);
  return masks(lo, mid, hi | uint64_t{1} << 63, s + tail);
}

}  // namespace

TEST(PackedCounters, BytesReadBackAreCheckedAndGiveTheSameCounters) {
  // What a state blob holds comes back exactly: the same bytes, the same counters.
  const PackedCounters p(read_once());
  std::string error;
  const auto back = PackedCounters::from_bytes(std::string(p.bytes()), error);
  ASSERT_TRUE(back.has_value()) << error;
  EXPECT_EQ(back->bytes(), p.bytes());
  EXPECT_TRUE(same(back->unpack(), read_once()));
  const auto empty = PackedCounters::from_bytes("", error);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(same(empty->unpack(), new_counters()));
  // The longest varint: all ones (new_counters() value 0) is ten bytes, the tenth 0x01.
  const std::string all_ones = std::string(9, '\xff') + '\x01';
  const auto ones = PackedCounters::from_bytes(masks(1, 0, 0, all_ones), error);
  ASSERT_TRUE(ones.has_value()) << error;
  EXPECT_EQ(ones->unpack().opens, ~uint64_t{0});
  // A word of the second mask (word 64 + 3) and its value 5; the last word (128 + 40), 7.
  const auto high =
      PackedCounters::from_bytes(masks(0, 1u << 3, uint64_t{1} << 40, "\x05\x07"), error);
  ASSERT_TRUE(high.has_value()) << error;
  uint64_t w[sizeof(FileCounters) / 8];
  static_assert(sizeof(w) / 8 == 169 + 98);
  const FileCounters c = high->unpack();
  std::memcpy(w, &c, sizeof c);
  EXPECT_EQ(w[64 + 3], 5u);
  EXPECT_EQ(w[128 + 40], 7u);
  // Side words (FileCounters::more): word 2 of the side (169 + 2) 3, its last (169 + 97) 9.
  const auto side = PackedCounters::from_bytes(
      side_masks(1, 0, 0, uint64_t{1} << 2, uint64_t{1} << 33, "\x01\x03\x09"), error);
  ASSERT_TRUE(side.has_value()) << error;
  const FileCounters cs = side->unpack();
  std::memcpy(w, &cs, sizeof cs);
  EXPECT_EQ(w[0], 1u);
  EXPECT_EQ(w[169 + 2], 3u);
  EXPECT_EQ(w[169 + 97], 9u);
  EXPECT_EQ(cs.more.stride.untallied, 9u);  // the last side word
  EXPECT_EQ(PackedCounters(cs).bytes(), side->bytes());  // canonical: packs to the same bytes

  // Each way a blob may lie, refused with its reason; never read past its end.
  expect_refused(std::string(23, '\x01'), "masks are 24");
  expect_refused(masks(0, 0, 0, ""), "no word");
  expect_refused(masks(0, 0, uint64_t{1} << 41, "\x01"), "past the counters");  // word 169
  expect_refused(masks(1, 0, 0, ""), "cut inside word 0");
  expect_refused(masks(3, 0, 0, "\x01"), "cut inside word 1");
  expect_refused(masks(1, 0, 0, "\x81"), "cut inside word 0");  // a continuation, then nothing
  expect_refused(masks(1, 0, 0, std::string("\x00", 1)), "no difference");
  expect_refused(masks(1, 0, 0, std::string("\x81\x00", 2)), "shortest form");
  expect_refused(masks(1, 0, 0, std::string(9, '\xff') + '\x02'), "over 64 bits");
  expect_refused(masks(1, 0, 0, std::string(10, '\xff') + '\x01'), "over 64 bits");
  expect_refused(masks(1, 0, 0, "\x01\x01"), "1 bytes after");
  expect_refused(masks(1, 0, uint64_t{1} << 63, std::string(15, '\0')), "side slots are 40");
  expect_refused(side_masks(1, 0, 0, 0, 0, "\x01"), "name none");
  expect_refused(side_masks(1, 0, 0, 0, uint64_t{1} << 34, "\x01\x01"), "past the counters");
}

TEST(PackedCounters, ARecordWithoutSideSlotsCarriesThreeMasksAndOneWithFive) {
  FileCounters c = read_once();
  const PackedCounters plain(c);
  ASSERT_GE(plain.bytes().size(), 24u);
  uint64_t third = 0;
  std::memcpy(&third, plain.bytes().data() + 16, 8);
  EXPECT_EQ(third >> 63, 0u);
  c.more.access.value[0] = 4097;  // a side slot: the same words plus one, and two more masks
  c.more.access.count[0] = 1;
  const PackedCounters with_side(c);
  EXPECT_EQ(with_side.heap_bytes(), plain.heap_bytes() + 16 + 2 + 1);
  EXPECT_TRUE(same(with_side.unpack(), c));
}

TEST(PackedCounters, AMovedFromValueIsFreshCounters) {
  PackedCounters a(read_once());
  PackedCounters b(std::move(a));
  EXPECT_EQ(a.heap_bytes(), 0u);  // NOLINT(bugprone-use-after-move): what is tested
  EXPECT_TRUE(same(a.unpack(), new_counters()));
  EXPECT_TRUE(same(b.unpack(), read_once()));
  PackedCounters c;
  c = std::move(b);
  EXPECT_EQ(b.heap_bytes(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(same(b.unpack(), new_counters()));
  EXPECT_TRUE(same(c.unpack(), read_once()));
}

TEST(PackedCounters, AssignSaysWhetherAnythingChangedAndHoldsTheNewest) {
  // A record's live part is assigned at every drain: unchanged counters must be recognised (no
  // write), and every change, of size or in place, must be held exactly.
  PackedCounters p;
  EXPECT_FALSE(p.assign(new_counters()));  // nothing held, nothing given
  FileCounters c = read_once();
  EXPECT_TRUE(p.assign(c));
  EXPECT_TRUE(same(p.unpack(), c));
  EXPECT_FALSE(p.assign(c));
  EXPECT_TRUE(same(p.unpack(), c));
  const std::size_t before = p.heap_bytes();
  c.reads = 4;  // same length: rewritten in place
  EXPECT_TRUE(p.assign(c));
  EXPECT_EQ(p.heap_bytes(), before);
  EXPECT_TRUE(same(p.unpack(), c));
  c.bytes_read = uint64_t{1} << 50;  // longer
  c.writes = 2;
  EXPECT_TRUE(p.assign(c));
  EXPECT_GT(p.heap_bytes(), before);
  EXPECT_TRUE(same(p.unpack(), c));
  EXPECT_TRUE(p.assign(new_counters()));  // back to nothing
  EXPECT_EQ(p.heap_bytes(), 0u);
  EXPECT_TRUE(same(p.unpack(), new_counters()));
}
