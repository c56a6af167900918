// SPDX-License-Identifier: Apache-2.0
#include "daemon/state_file.hpp"

#include <zlib.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <streambuf>

#include "core/zstd_stream.hpp"
#include "loader/loader.hpp"

namespace iolens::daemon {
namespace {

// Written: zstd (IOLSTAT2). Read: that, and zlib (IOLSTAT1) as earlier builds wrote it: a daemon
// upgraded in place restarts from its predecessor's state.
constexpr char kMagicZstd[8] = {'I', 'O', 'L', 'S', 'T', 'A', 'T', '2'};
constexpr char kMagicZlib[8] = {'I', 'O', 'L', 'S', 'T', 'A', 'T', '1'};
constexpr std::size_t kHeaderBytes = 16;
// zlib's deflate expands at most 1032:1 (its technical details).
constexpr uint64_t kMaxRatioZlib = 1032;
// zstd at most 32768:1: a block of 128 KiB of one byte repeated takes 4 bytes of a frame (its
// 3-byte header and the byte); a frame's own header only lowers the ratio.
constexpr uint64_t kMaxRatioZstd = 32768;
// The state is compressed on the saver's thread at every save: zstd's fastest level makes the
// same size as zlib's level 1 about three times as fast (bench/README.md "The state saved with
// zstd").
constexpr int kZstdLevel = 1;

/// Inflates `in` into exactly `raw_len` bytes, in steps of at most 1 MiB of output, so that
/// memory grows with the data actually inflated, never with the length the header claims.
bool inflate_exact(std::string_view in, uint64_t raw_len, std::vector<uint8_t>& out,
                   std::string& error) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) {
    error = "zlib: inflateInit failed";
    return false;
  }
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  constexpr std::size_t kStep = 1 << 20;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (out.size() == raw_len) {
      // Full: only the end of the stream may follow.
      uint8_t probe = 0;
      zs.next_out = &probe;
      zs.avail_out = 1;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (zs.avail_out == 0) rc = Z_DATA_ERROR;  // more data than the header claims
      break;
    }
    const std::size_t have = out.size();
    const std::size_t step = static_cast<std::size_t>(std::min<uint64_t>(kStep, raw_len - have));
    out.resize(have + step);
    zs.next_out = out.data() + have;
    zs.avail_out = static_cast<uInt>(step);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(have + step - zs.avail_out);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // the input ended early
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    error = "its compressed data is damaged or truncated (zlib: " +
            std::string(zs.msg ? zs.msg : rc == Z_DATA_ERROR ? "more data than claimed" : "incomplete") +
            ")";
    return false;
  }
  if (out.size() != raw_len) {
    error = "it claims " + std::to_string(raw_len) + " bytes of CBOR and holds " +
            std::to_string(out.size());
    return false;
  }
  return true;
}

bool is_unsigned(const nlohmann::json& j) { return j.is_number_unsigned(); }

/// The field `key` of `st`, required, of the kind `ok` accepts.
template <class Check>
bool field(const nlohmann::json& st, const char* key, const char* kind, Check ok,
           std::string& error) {
  const auto it = st.find(key);
  if (it == st.end()) {
    error = std::string("no field '") + key + "'";
    return false;
  }
  if (!ok(*it)) {
    error = std::string("field '") + key + "' is a " + it->type_name() + ", not " + kind;
    return false;
  }
  return true;
}

bool unsigned_values(const nlohmann::json& o) {
  if (!o.is_object()) return false;
  for (const auto& v : o) if (!v.is_number_unsigned()) return false;
  return true;
}

bool kernel_stats(const nlohmann::json& a) {
  // Shorter: saved by a version with fewer counters (the missing ones read as 0).
  if (!a.is_array() || a.size() > std::tuple_size_v<loader::KernelStats>) return false;
  for (const auto& v : a) if (!v.is_number_unsigned()) return false;
  return true;
}

bool loss_bases(const nlohmann::json& o) {
  if (!o.is_object()) return false;
  for (const auto& v : o) if (!kernel_stats(v)) return false;
  return true;
}

bool check_fields(const nlohmann::json& st, std::string& error) {
  if (!st.is_object()) {
    error = std::string("its CBOR is a ") + st.type_name() + ", not an object";
    return false;
  }
  const auto binary = [](const nlohmann::json& j) { return j.is_binary(); };
  const auto object = [](const nlohmann::json& j) { return j.is_object(); };
  const auto integer = [](const nlohmann::json& j) { return j.is_number_integer(); };
  if (!field(st, "format", "an unsigned integer", is_unsigned, error) ||
      !field(st, "pins_created_wall_ns", "an unsigned integer", is_unsigned, error) ||
      !field(st, "ring_pos", "an unsigned integer", is_unsigned, error) ||
      !field(st, "saved_wall_ns", "an integer", integer, error) ||
      !field(st, "kernel_lost", "an object of unsigned integers", unsigned_values, error) ||
      !field(st, "table", "an object", object, error) ||
      !field(st, "pending_files", "binary", binary, error) ||
      !field(st, "pending_others", "binary", binary, error) ||
      !field(st, "job_loss_base", "an object of kernel counter arrays", loss_bases, error))
    return false;
  // Optional (a state saved before it existed has none): 16-byte (ino, dev, gen) entries.
  const auto names = [](const nlohmann::json& j) {
    return j.is_binary() && j.get_binary().size() % 16 == 0;
  };
  if (st.contains("names_to_clear") &&
      !field(st, "names_to_clear", "binary of 16-byte entries", names, error))
    return false;
  if (st["format"].get<uint64_t>() != 1) {
    error = "unknown state format " + st["format"].dump();
    return false;
  }
  return true;
}

}  // namespace

namespace {

/// Counts what is written through it: the CBOR's length, which the header gives before the data.
class CountingBuf : public std::streambuf {
 public:
  uint64_t count = 0;

 protected:
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) ++count;
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    count += static_cast<uint64_t>(n);
    return n;
  }
};

/// Compresses what is written through it (zstd, kZstdLevel) and hands the compressed bytes to
/// `out` in pieces of up to ~128 KiB (core::ZstdWriter): neither the whole CBOR nor the whole
/// compressed data is held.
class ZstdBuf : public std::streambuf {
 public:
  explicit ZstdBuf(const StateOut& out) : z_(out, kZstdLevel), in_(kInBytes) {
    setp(in_.data(), in_.data() + in_.size());
  }
  ZstdBuf(const ZstdBuf&) = delete;
  ZstdBuf& operator=(const ZstdBuf&) = delete;

  /// Compresses what is left and ends the frame. False if zstd or `out` failed at any point.
  bool finish() { return pump() && z_.finish(); }

 protected:
  int_type overflow(int_type c) override {
    if (!pump()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

 private:
  static constexpr std::size_t kInBytes = 256 << 10;

  /// Hands the put area to the compressor, then empties it.
  bool pump() {
    const bool ok = z_.write(std::string_view(pbase(), static_cast<std::size_t>(pptr() - pbase())));
    setp(in_.data(), in_.data() + in_.size());
    return ok;
  }

  core::ZstdWriter z_;
  std::vector<char> in_;
};

}  // namespace

bool write_state(const nlohmann::json& state, const StateOut& out, std::string* why) {
  auto fail = [&](const char* what) {
    if (why) *why = what;
    return false;
  };
  // Twice through the CBOR writer: once to count (the header holds the length, and the file is
  // written front to back), once into zlib. CBOR of a big job is mostly its recorder blobs,
  // which the writer copies through in bulk: the second pass costs far less than holding it.
  CountingBuf counter;
  {
    std::ostream os(&counter);
    nlohmann::json::to_cbor(state, os);
  }
  char head[kHeaderBytes];
  std::memcpy(head, kMagicZstd, sizeof kMagicZstd);
  const uint64_t raw_len = counter.count;
  if (raw_len > kMaxStateRawBytes) return fail("the state's CBOR is over 4 GiB");
  std::memcpy(head + 8, &raw_len, 8);
  if (!out(std::string_view(head, sizeof head))) return fail("the write failed");
  ZstdBuf z(out);
  {
    std::ostream os(&z);
    nlohmann::json::to_cbor(state, os);
    os.flush();
    if (!os) return fail("the write failed, or zstd did");
  }
  if (!z.finish()) return fail("the write failed, or zstd did");
  return true;
}

std::optional<std::vector<uint8_t>> encode_state(const nlohmann::json& state) {
  std::vector<uint8_t> bytes;
  const bool ok = write_state(state, [&](std::string_view piece) {
    bytes.insert(bytes.end(), piece.begin(), piece.end());
    return true;
  });
  if (!ok) return std::nullopt;
  return bytes;
}

bool decode_state(std::string_view bytes, nlohmann::json& state, std::string& error) {
  try {
    const bool zstd =
        bytes.size() >= kHeaderBytes && std::memcmp(bytes.data(), kMagicZstd, 8) == 0;
    if (!zstd &&
        (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagicZlib, 8) != 0)) {
      error = "no IOLSTAT2 or IOLSTAT1 header (" + std::to_string(bytes.size()) + " bytes)";
      return false;
    }
    uint64_t raw_len = 0;
    std::memcpy(&raw_len, bytes.data() + 8, 8);
    const uint64_t packed = bytes.size() - kHeaderBytes;
    const uint64_t ratio = zstd ? kMaxRatioZstd : kMaxRatioZlib;
    if (raw_len > kMaxStateRawBytes || raw_len / ratio > packed) {
      error = "it claims " + std::to_string(raw_len) + " bytes of CBOR from " +
              std::to_string(packed) + " compressed bytes (impossible for " +
              (zstd ? "zstd" : "zlib") + ", or over " + std::to_string(kMaxStateRawBytes) + ")";
      return false;
    }
    std::vector<uint8_t> raw;      // zlib's
    std::optional<std::string> out;  // zstd's
    if (zstd) {
      // Memory follows the data: the output grows as it is decompressed, never past the claim.
      out = core::zstd_decompress(bytes.substr(kHeaderBytes), raw_len, error);
      if (!out) {
        error = "its compressed data is damaged or truncated (" + error + ")";
        return false;
      }
      if (out->size() != raw_len) {
        error = "it claims " + std::to_string(raw_len) + " bytes of CBOR and holds " +
                std::to_string(out->size());
        return false;
      }
    } else {
      if (packed > UINT32_MAX) {  // zlib's avail_in; no state comes near it
        error = "it is over 4 GiB";
        return false;
      }
      if (!inflate_exact(bytes.substr(kHeaderBytes), raw_len, raw, error)) return false;
    }
    nlohmann::json st = out ? nlohmann::json::from_cbor(*out, true, false)
                            : nlohmann::json::from_cbor(raw, true, false);
    if (st.is_discarded()) {
      error = "its data is not valid CBOR";
      return false;
    }
    if (!check_fields(st, error)) return false;
    state = std::move(st);
    return true;
  } catch (const std::exception& e) {  // bad_alloc, or a check above that missed a case
    error = std::string("cannot decode it: ") + e.what();
    return false;
  }
}

}  // namespace iolens::daemon
