// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Little-endian fixed-width encoding for iolens's own binary blobs (the recorder checkpoint,
/// docs/state-format.md): a Writer that appends, and a bounds-checked Reader for untrusted bytes.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace iolens::core {

/// Appends to `Bytes`: a std::string, or a std::vector<uint8_t> (what a JSON binary value holds,
/// so that a blob for iolensd's state file is made in place rather than copied there).
template <class Bytes>
class BasicWriter {
 public:
  explicit BasicWriter(Bytes& out) : out_(out) {}

  void u8(uint8_t v) { out_.push_back(static_cast<typename Bytes::value_type>(v)); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const typename Bytes::value_type*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  /// u32 length, then the bytes. Strings longer than 4 GiB do not occur here (paths, comms).
  void string(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  /// Overwrites 8 bytes at `at` (a length known only at the end).
  void patch_u64(std::size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i)
      out_[at + i] = static_cast<typename Bytes::value_type>(v >> (8 * i));
  }
  std::size_t size() const { return out_.size(); }

 private:
  void le(uint64_t v, int n) {
    char b[8];
    for (int i = 0; i < n; ++i) b[i] = static_cast<char>(v >> (8 * i));
    bytes(b, static_cast<std::size_t>(n));
  }
  Bytes& out_;
};
using Writer = BasicWriter<std::string>;
using ByteWriter = BasicWriter<std::vector<uint8_t>>;

/// Reads `bytes` front to back. Every read checks the bytes left first; the first failure is
/// sticky (later reads fail too) and error() says what was being read and at which offset, so a
/// decoder can read a whole structure and test ok() once.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : in_(bytes) {}

  bool u8(uint8_t& v) {
    if (!need(1, "u8")) return false;
    v = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  bool u32(uint32_t& v) { return le(v, "u32"); }
  bool u64(uint64_t& v) { return le(v, "u64"); }
  bool i32(int32_t& v) {
    uint32_t u = 0;
    if (!u32(u)) return false;
    v = static_cast<int32_t>(u);
    return true;
  }
  /// A byte that must be 0 or 1.
  bool boolean(bool& v) {
    uint8_t b = 0;
    if (!u8(b)) return false;
    if (b > 1) return fail("boolean " + std::to_string(b));
    v = b != 0;
    return true;
  }
  /// `n` raw bytes into a trivially copyable object of exactly that size.
  template <class T>
  bool raw(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (!need(sizeof(T), "raw")) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  /// A u32 length, checked against the bytes left before anything is allocated.
  bool string(std::string& s) {
    uint32_t n = 0;
    if (!u32(n)) return false;
    if (!need(n, "string")) return false;
    s.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  /// A u64 count of entries that take at least `min_entry_bytes` each: refused when the bytes
  /// left could not hold that many, so a hostile count never sizes an allocation.
  /// `min_entry_bytes` > 0.
  bool count(uint64_t& n, std::size_t min_entry_bytes) {
    if (!u64(n)) return false;
    if (n > remaining() / min_entry_bytes)
      return fail("count " + std::to_string(n) + " larger than the bytes left allow");
    return true;
  }

  bool fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at offset " + std::to_string(pos_);
    pos_ = in_.size();  // sticky: nothing more can be read
    failed_ = true;
    return false;
  }
  bool ok() const { return !failed_; }
  const std::string& error() const { return error_; }
  std::size_t offset() const { return pos_; }
  std::size_t remaining() const { return in_.size() - pos_; }

 private:
  bool need(std::size_t n, const char* what) {
    if (failed_) return false;
    if (n > remaining())
      return fail(std::string("truncated: ") + what + " of " + std::to_string(n) + " bytes, " +
                  std::to_string(remaining()) + " left");
    return true;
  }
  template <class T>
  bool le(T& v, const char* what) {
    if (!need(sizeof(T), what)) return false;
    T x = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      x |= static_cast<T>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    v = x;
    return true;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  bool failed_ = false;
  std::string error_;
};

}  // namespace iolens::core
