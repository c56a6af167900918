// SPDX-License-Identifier: Apache-2.0
// zstd for iolensd's job records (core/zstd_stream.hpp): a frame made from pieces reads back as
// their text; the reader refuses what is not zstd, cut, damaged or bigger than its bound.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/zstd_stream.hpp"

using namespace iolens::core;

namespace {

std::string text(std::size_t n) {
  std::string s;
  for (std::size_t i = 0; s.size() < n; ++i) s += "{\"path\": \"/data/" + std::to_string(i * 7919 % 100003) + "\"},\n";
  s.resize(n);
  return s;
}

std::string compress(const std::string& in, std::size_t piece, std::size_t* outs = nullptr) {
  std::string out;
  ZstdWriter z([&](std::string_view p) {
    out.append(p);
    if (outs) ++*outs;
    return true;
  }, 3);
  for (std::size_t i = 0; i < in.size(); i += piece) EXPECT_TRUE(z.write(std::string_view(in).substr(i, piece)));
  EXPECT_TRUE(z.finish());
  return out;
}

}  // namespace

TEST(ZstdStream, PiecesMakeOneFrameThatReadsBackAsTheirText) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{65536}, std::size_t{5} << 20}) {
    const std::string in = text(n);
    std::size_t outs = 0;
    const std::string z = compress(in, 4093, &outs);
    EXPECT_TRUE(is_zstd_frame(z));
    std::string error;
    const auto back = zstd_decompress(z, in.size(), error);
    ASSERT_TRUE(back) << error;
    EXPECT_EQ(*back, in);
    if (n == (std::size_t{5} << 20)) {
      EXPECT_LT(z.size(), in.size() / 5);  // text like a record's compresses well
      EXPECT_GT(outs, 1u);                 // handed over as it came, not held to the end
    }
  }
}

TEST(ZstdStream, TheReaderRefusesWhatItCannotTrust) {
  const std::string in = text(300000);
  const std::string z = compress(in, 1000);
  std::string error;
  EXPECT_FALSE(zstd_decompress(in, SIZE_MAX, error));
  EXPECT_NE(error.find("not zstd"), std::string::npos) << error;
  EXPECT_FALSE(zstd_decompress(z, in.size() - 1, error));  // the bound
  EXPECT_NE(error.find("more than"), std::string::npos) << error;
  for (std::size_t cut : {std::size_t{4}, std::size_t{10}, z.size() / 2, z.size() - 1}) {
    EXPECT_FALSE(zstd_decompress(z.substr(0, cut), SIZE_MAX, error)) << cut;
    EXPECT_FALSE(error.empty());
  }
  // A flipped byte anywhere past the magic: damaged data or a checksum that does not match.
  for (std::size_t at = 4; at < z.size(); at += z.size() / 37 + 1) {
    std::string bad = z;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    const auto got = zstd_decompress(bad, SIZE_MAX, error);
    EXPECT_TRUE(!got || *got == in) << "byte " << at;  // never silently different text
    EXPECT_FALSE(got) << "byte " << at;
  }
  std::string trailing = z + "garbage";
  EXPECT_FALSE(zstd_decompress(trailing, SIZE_MAX, error));
  // two frames one after the other: their texts, in order
  const auto two = zstd_decompress(z + compress("tail", 2), SIZE_MAX, error);
  ASSERT_TRUE(two) << error;
  EXPECT_EQ(*two, in + "tail");
}

// Every reader of iolensd's records: plain JSON as it is, zstd decompressed, a damaged or too
// big one refused with why.
TEST(ZstdStream, ARecordsTextWhicheverWayItWasWritten) {
  const std::string json = text(100000);
  const std::string z = compress(json, 777);
  std::string error;
  bool over = true;
  EXPECT_EQ(text_of_record(json, 10, error, &over), json);  // plain: no bound applies
  EXPECT_FALSE(over);
  EXPECT_EQ(text_of_record(z, json.size(), error, &over), json);
  EXPECT_FALSE(text_of_record(z, json.size() - 1, error, &over));
  EXPECT_TRUE(over);
  EXPECT_FALSE(text_of_record(z.substr(0, z.size() / 2), SIZE_MAX, error, &over));
  EXPECT_FALSE(over);
  EXPECT_NE(error.find("cut"), std::string::npos) << error;
}

TEST(ZstdStream, AFailedOutputStopsTheWriter) {
  int calls = 0;
  ZstdWriter z([&](std::string_view) { return ++calls < 2; }, 3);
  const std::string in = text(4 << 20);
  bool ok = true;
  for (std::size_t i = 0; ok && i < in.size(); i += 65536) ok = z.write(std::string_view(in).substr(i, 65536));
  EXPECT_FALSE(ok && z.finish());
  EXPECT_FALSE(z.write("more"));
  EXPECT_FALSE(z.finish());
}
