// SPDX-License-Identifier: Apache-2.0
// The daemon's state file (issue 21): whatever bytes state.cbor holds, decoding never throws,
// never allocates more than the file can expand to, and says what is wrong.
#include <gtest/gtest.h>
#include <malloc.h>
#include <zlib.h>
#include <zstd.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/state_file.hpp"
#include "daemon/state_saver.hpp"
#include "loader/loader.hpp"

using iolens::daemon::decode_state;
using iolens::daemon::encode_state;

namespace {

/// A state with every field the daemon reads, of the right types.
nlohmann::json good_state() {
  nlohmann::json st;
  st["format"] = 1;
  st["abi"] = 7;
  st["pins_created_wall_ns"] = uint64_t{1795317300000000000};
  st["ring_pos"] = uint64_t{4096};
  st["saved_wall_ns"] = int64_t{1795317301000000000};
  st["kernel_lost"] = {{"events", 0u}, {"file_records", 3u}};
  st["table"] = {{"format", 1}};
  st["pending_files"] = nlohmann::json::binary({});
  st["pending_others"] = nlohmann::json::binary({1, 2, 3});
  st["names_to_clear"] = nlohmann::json::binary(std::vector<uint8_t>(32, 9));  // optional
  iolens::loader::KernelStats base{};
  base[2] = 5;
  st["job_loss_base"] = {{"cgroup/a", base}};
  return st;
}

std::string as_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

std::string file_of(const nlohmann::json& st) { return as_text(*encode_state(st)); }

/// The header (zstd's, IOLSTAT2, unless `magic` says) with `raw_len` and `tail` as its
/// "compressed" data.
std::string header(uint64_t raw_len, const std::string& tail,
                   const std::string& magic = "IOLSTAT2") {
  std::string s = magic;
  s.append(reinterpret_cast<const char*>(&raw_len), 8);
  return s + tail;
}

/// A file as earlier builds wrote it (IOLSTAT1: zlib) around a CBOR `raw`.
std::string wrapped_zlib(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> z(compressBound(raw.size()));
  uLongf zlen = z.size();
  EXPECT_EQ(compress2(z.data(), &zlen, raw.data(), raw.size(), 1), Z_OK);
  return header(raw.size(), std::string(z.begin(), z.begin() + zlen), "IOLSTAT1");
}

/// A file whose header and compression (zstd's one-shot, not write_state's) are right around a
/// CBOR `raw`.
std::string wrapped(const std::vector<uint8_t>& raw) {
  std::string z(ZSTD_compressBound(raw.size()), '\0');
  const std::size_t n = ZSTD_compress(z.data(), z.size(), raw.data(), raw.size(), 1);
  EXPECT_FALSE(ZSTD_isError(n));
  z.resize(n);
  return header(raw.size(), z);
}

/// Decodes, expecting a refusal whose message holds `words`.
void refused(const std::string& bytes, const std::string& words) {
  nlohmann::json st = "untouched";
  std::string error;
  bool ok = true;
  EXPECT_NO_THROW(ok = decode_state(bytes, st, error));
  EXPECT_FALSE(ok);
  EXPECT_NE(error.find(words), std::string::npos) << "error: " << error;
  EXPECT_EQ(st, "untouched");
}

}  // namespace

TEST(StateFile, RoundTrips) {
  nlohmann::json st;
  std::string error;
  ASSERT_TRUE(decode_state(file_of(good_state()), st, error)) << error;
  EXPECT_EQ(st, good_state());
}

TEST(StateFile, ABigStateIsWrittenInBoundedPiecesAsItIsEncoded) {
  // A state whose recorder blob is 24 MiB (a big job's): what write_state hands over comes in
  // pieces of at most 256 KiB plus the 16-byte header, adds up to a file that decodes to the
  // state, and is the same as the whole-file encoding. The pieces' bound is what keeps the
  // saver from holding the whole CBOR or the whole compressed file (bench/README.md "Memory").
  nlohmann::json st = good_state();
  std::vector<uint8_t> blob(24u << 20);
  uint32_t x = 2463;
  for (std::size_t i = 0; i < blob.size(); i += 7) {  // compressible, not trivially so
    x = x * 1103515245u + 12345u;
    blob[i] = static_cast<uint8_t>(x >> 24);
  }
  st["table"]["jobs"] = {{{"recorder", nlohmann::json::binary(blob)}}};
  std::string file;
  std::size_t pieces = 0, largest = 0;
  ASSERT_TRUE(iolens::daemon::write_state(st, [&](std::string_view piece) {
    ++pieces;
    largest = std::max(largest, piece.size());
    file.append(piece);
    return true;
  }));
  EXPECT_GT(pieces, 4u);
  EXPECT_LE(largest, std::size_t{256} << 10);
  EXPECT_LT(file.size(), blob.size());
  // The file is the documented one, checked without write_state's own code: the header, then
  // one zstd frame that zstd's one-shot decompression turns into exactly the state's CBOR.
  const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(st);
  ASSERT_GE(file.size(), 16u);
  EXPECT_EQ(file.substr(0, 8), "IOLSTAT2");
  uint64_t raw_len = 0;
  std::memcpy(&raw_len, file.data() + 8, 8);
  EXPECT_EQ(raw_len, cbor.size());
  std::vector<uint8_t> raw(cbor.size() + 1);
  const std::size_t raw_size =
      ZSTD_decompress(raw.data(), raw.size(), file.data() + 16, file.size() - 16);
  ASSERT_FALSE(ZSTD_isError(raw_size)) << ZSTD_getErrorName(raw_size);
  ASSERT_EQ(raw_size, cbor.size());
  raw.resize(raw_size);
  EXPECT_TRUE(raw == cbor);
  nlohmann::json back;
  std::string error;
  ASSERT_TRUE(decode_state(file, back, error)) << error;
  EXPECT_EQ(back, st);
  // The sink refusing (a failed write) stops the encoding and says so.
  std::size_t calls = 0;
  std::string why;
  EXPECT_FALSE(
      iolens::daemon::write_state(st, [&](std::string_view) { return ++calls < 3; }, &why));
  EXPECT_EQ(calls, 3u);
  EXPECT_NE(why.find("write failed"), std::string::npos) << why;
#if !defined(__SANITIZE_ADDRESS__)
  // And the encoder never holds the state's CBOR (24 MiB and more) nor its compressed form: the
  // heap it adds while it writes stays at its buffers and zstd's context (measured by the
  // allocator at every piece; the sanitizers' allocator does not fill mallinfo2).
  // In use: the arenas' chunks and the mmapped ones (a big vector is mmapped).
  auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  const std::size_t heap0 = heap();
  std::size_t grown = 0;
  ASSERT_TRUE(iolens::daemon::write_state(st, [&](std::string_view) {
    const std::size_t now = heap();
    grown = std::max(grown, now > heap0 ? now - heap0 : 0);
    return true;
  }));
  EXPECT_LT(grown, std::size_t{4} << 20) << grown;
#endif
}

TEST(StateFile, AWrongTypeIsAnErrorNotAnException) {
  // The crash loop of issue 21: a field of the wrong type threw type_error out of resume().
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"pins_created_wall_ns", "x"},
                                                            {"format", -1},
                                                            {"ring_pos", 1.5},
                                                            {"saved_wall_ns", "now"},
                                                            {"kernel_lost", {{"events", "many"}}},
                                                            {"table", nlohmann::json::array()},
                                                            {"pending_files", 3},
                                                            {"pending_others", "x"},
                                                            {"names_to_clear", 7},
                                                            {"job_loss_base", {{"a", {1, "x"}}}}}) {
    SCOPED_TRACE(key);
    nlohmann::json st = good_state();
    st[key] = value;
    refused(file_of(st), "'" + key + "'");
  }
  nlohmann::json ragged = good_state();  // names to clear come in 16-byte entries
  ragged["names_to_clear"] = nlohmann::json::binary(std::vector<uint8_t>(17, 0));
  refused(file_of(ragged), "'names_to_clear'");
  nlohmann::json older = good_state();  // saved before names were cleared in slices: none
  older.erase("names_to_clear");
  nlohmann::json out;
  std::string error;
  EXPECT_TRUE(decode_state(file_of(older), out, error)) << error;
  nlohmann::json missing = good_state();
  missing.erase("table");
  refused(file_of(missing), "no field 'table'");
  nlohmann::json other = good_state();
  other["format"] = 2;
  refused(file_of(other), "unknown state format 2");
  refused(file_of(nlohmann::json::array({1, 2})), "not an object");
  refused(file_of("text"), "not an object");
}

TEST(StateFile, LossBasesOfAnOlderVersionAreShorterNotLonger) {
  // ABI 9 added counters: a base saved before has fewer, and the missing ones read as 0.
  nlohmann::json st = good_state();
  st["job_loss_base"] = {{"a", {1, 2}}};
  std::string error;
  nlohmann::json out;
  EXPECT_TRUE(decode_state(file_of(st), out, error)) << error;
  std::vector<uint64_t> longer(std::tuple_size_v<iolens::loader::KernelStats> + 1, 0);
  st["job_loss_base"] = {{"a", longer}};
  refused(file_of(st), "'job_loss_base'");
}

TEST(StateFile, AHugeClaimedLengthIsRefusedBeforeAnyAllocation) {
  // 25 bytes claiming 4 GiB: the unfixed daemon allocated (and zeroed) the 4 GiB first.
  const std::string nine("\x78\x9c\0\0\0\0\0\0\0", 9);
  refused(header(uint64_t{4} << 30, nine, "IOLSTAT1"), "impossible for zlib");
  refused(header(uint64_t{4} << 30, nine), "impossible for zstd");
  refused(header(UINT64_MAX, "x"), "impossible");
  refused(header(UINT64_MAX, "x", "IOLSTAT1"), "impossible");
  // Past zstd's highest ratio by one byte of CBOR: refused; at it, decompressed (and found
  // short): memory follows the data, never the claim.
  const std::string real = file_of(good_state());
  const uint64_t packed = real.size() - 16;
  refused(header(32768 * packed + 32768, real.substr(16)), "impossible for zstd");
  refused(header(32768 * packed, real.substr(16)), "holds");
  // The same for a file of an earlier build (zlib: at most 1032:1).
  const std::string old = wrapped_zlib(nlohmann::json::to_cbor(good_state()));
  refused(header(1032 * (old.size() - 16) + 1032, old.substr(16), "IOLSTAT1"), "impossible");
  refused(header(1032 * (old.size() - 16), old.substr(16), "IOLSTAT1"), "holds");
}

TEST(StateFile, AFileOfAnEarlierBuildIsStillRead) {
  // Upgraded in place, a daemon restarts from the state its predecessor saved with zlib.
  nlohmann::json st;
  std::string error;
  ASSERT_TRUE(decode_state(wrapped_zlib(nlohmann::json::to_cbor(good_state())), st, error))
      << error;
  EXPECT_EQ(st, good_state());
  // And one made by zstd's own one-shot compression reads as write_state's does.
  nlohmann::json st2;
  ASSERT_TRUE(decode_state(wrapped(nlohmann::json::to_cbor(good_state())), st2, error)) << error;
  EXPECT_EQ(st2, good_state());
}

TEST(StateFile, TruncationsAndDamageAreRefused) {
  const std::string real = file_of(good_state());
  refused("", "no IOLSTAT2 or IOLSTAT1 header");
  refused("IOLSTAT2", "no IOLSTAT2 or IOLSTAT1 header");
  refused("IOLSTAT1", "no IOLSTAT2 or IOLSTAT1 header");
  refused(std::string("XOLSTAT2") + real.substr(8), "no IOLSTAT2 or IOLSTAT1 header");
  refused(std::string("IOLSTAT3") + real.substr(8), "no IOLSTAT2 or IOLSTAT1 header");
  // zstd data under the zlib magic, and the other way round.
  refused(std::string("IOLSTAT1") + real.substr(8), "damaged");
  const std::string old = wrapped_zlib(nlohmann::json::to_cbor(good_state()));
  refused(std::string("IOLSTAT2") + old.substr(8), "damaged");
  for (std::size_t cut = 16; cut < real.size(); cut += 7) {
    SCOPED_TRACE(cut);
    nlohmann::json st;
    std::string error;
    bool ok = true;
    EXPECT_NO_THROW(ok = decode_state(real.substr(0, cut), st, error));
    EXPECT_FALSE(ok);
    EXPECT_FALSE(error.empty());
  }
  // A claimed length shorter than the data: refused, not cut short.
  uint64_t raw_len = 0;
  std::memcpy(&raw_len, real.data() + 8, 8);
  refused(header(raw_len - 1, real.substr(16)), "damaged");
  // Garbage after the header, and valid zstd or zlib around bytes that are not CBOR.
  refused(header(100, std::string(40, '\xff')), "damaged");
  refused(header(100, std::string(40, '\xff'), "IOLSTAT1"), "damaged");
  refused(wrapped({0xff, 0xff, 0x00}), "not valid CBOR");
  refused(wrapped_zlib({0xff, 0xff, 0x00}), "not valid CBOR");
  // A good frame with bytes after it: the claimed length is exceeded or a frame is cut.
  refused(real + "x", "damaged");
}

namespace {

class StateSaverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iolens-state-saver-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    close(fd_);
    std::filesystem::remove_all(dir_);
  }
  std::string read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
  int fd_ = -1;
};

}  // namespace

TEST_F(StateSaverTest, TheThreadWritesAStateThatDecodesToWhatWasSubmitted) {
  iolens::daemon::StateSaver saver(fd_, "state.tmp", "state");
  EXPECT_FALSE(saver.busy());
  EXPECT_FALSE(saver.take());
  saver.submit(good_state());
  EXPECT_TRUE(saver.busy());
  saver.wait();
  EXPECT_TRUE(saver.busy());  // finished, not yet taken
  const auto r = saver.take();
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok) << r->error;
  EXPECT_FALSE(saver.busy());
  const std::string bytes = read("state");
  EXPECT_EQ(r->bytes, bytes.size());
  nlohmann::json st;
  std::string error;
  ASSERT_TRUE(decode_state(bytes, st, error)) << error;
  EXPECT_EQ(st, good_state());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state.tmp"));
}

TEST_F(StateSaverTest, TheRecordersBuffersComeBackByJobEmptyWithTheirPagesAfterTheWrite) {
  // The loop gathers the next save into them: written first, then handed back, each under its
  // job's id; one much bigger than its blob (a job that shrank) is freed instead.
  nlohmann::json st = good_state();
  st["table"]["jobs"] = nlohmann::json::array();
  std::map<std::string, const uint8_t*> pages;
  auto add = [&](const std::string& id, std::size_t n, std::size_t capacity) {
    std::vector<uint8_t> blob;
    blob.reserve(capacity);
    blob.assign(n, static_cast<uint8_t>(n % 251));
    pages.emplace(id, blob.data());  // the first of an id
    st["table"]["jobs"].push_back({{"id", id}, {"recorder", nlohmann::json::binary(std::move(blob))}});
  };
  add("a", 1000, 1000);
  add("b", 5000, 5000);
  add("shrunk", 1000, 1 << 20);
  add("a", 300, 300);  // a second job of id a (closing and live again): the first keeps its
  const nlohmann::json want = st;
  iolens::daemon::StateSaver saver(fd_, "state.tmp", "state");
  saver.submit(std::move(st));
  saver.wait();
  auto r = saver.take();
  ASSERT_TRUE(r && r->ok) << (r ? r->error : "no result");
  nlohmann::json back;
  std::string error;
  ASSERT_TRUE(decode_state(read("state"), back, error)) << error;
  EXPECT_EQ(back, want);  // the blobs were written whole before they were taken
  ASSERT_EQ(r->buffers.size(), 2u);
  for (const auto& [id, buf] : r->buffers) {
    EXPECT_TRUE(buf.empty()) << id;
    EXPECT_EQ(buf.data(), pages[id]) << id;
  }
  EXPECT_GE(r->buffers.at("b").capacity(), 5000u);
  EXPECT_GE(r->buffers.at("a").capacity(), 1000u);
  EXPECT_EQ(r->buffers.count("shrunk"), 0u);
  // A state without jobs gives none back.
  saver.submit(good_state());
  saver.wait();
  EXPECT_TRUE(saver.take()->buffers.empty());
}

TEST_F(StateSaverTest, AFailedSaveSaysWhyAndLeavesTheLastStateAlone) {
  iolens::daemon::StateSaver saver(fd_, "state.tmp", "state");
  saver.submit(good_state());
  saver.wait();
  ASSERT_TRUE(saver.take()->ok);
  const std::string before = read("state");
  // The temporary's name taken by a non-empty directory: it can be neither removed nor created.
  std::filesystem::create_directories(dir_ + "/state.tmp/x");
  nlohmann::json other = good_state();
  other["ring_pos"] = uint64_t{8192};
  saver.submit(other);
  saver.wait();
  const auto r = saver.take();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->error.find("state.tmp"), std::string::npos) << r->error;
  EXPECT_EQ(read("state"), before);
}
