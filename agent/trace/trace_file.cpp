// SPDX-License-Identifier: Apache-2.0
// The native trace file: layout, rules and error reporting in docs/trace-format.md.
#include "trace/trace_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef IOLENS_FUZZING
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_d_forceIgnoreChecksum, see kVerifyChecksums
#endif
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/binary_io.hpp"

namespace iolens::trace {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "OPS payloads are the records' memory image, little-endian on disk");

// The fuzz build (tests/fuzz) accepts any checksum so that mutated inputs reach the decoders
// behind the checks; every other build verifies them (the unit tests prove they are checked).
#ifdef IOLENS_FUZZING
constexpr bool kVerifyChecksums = false;
#else
constexpr bool kVerifyChecksums = true;
#endif

// ---- layout (docs/trace-format.md#layout) ----

// 0x89 (not ASCII: a 7-bit channel damages it), then "IOLTR", then CR LF (a text-mode copy
// that converts line ends damages it), as PNG does.
constexpr std::array<uint8_t, 8> kMagic = {0x89, 'I', 'O', 'L', 'T', 'R', '\r', '\n'};
constexpr std::size_t kFileHeaderBytes = 16;   // magic, u16 major, u16 minor, u32 crc
constexpr std::size_t kBlockHeaderBytes = 28;  // see BlockHeader

enum BlockKind : uint8_t {
  kMetaBlock = 1,
  kFilesBlock = 2,
  kProcessesBlock = 3,
  kOpsBlock = 4,
  kTrailerBlock = 5,
};
enum Codec : uint8_t { kStored = 0, kZstd = 1 };
constexpr uint16_t kSkippable = 0x1;  // a reader that does not know the kind skips the block

constexpr std::size_t kOpBytes = sizeof(iolens_trace_record);
constexpr std::size_t kMinFileEntry = 8 + 4 + 4 + 4 + 4;                 // empty path
constexpr std::size_t kMinProcessEntry = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4;  // empty comm, exe
constexpr uint32_t kMaxJsonBytes = 4u << 20;           // META and TRAILER payloads
constexpr int kMaxJsonDepth = 8;                       // ours nest 5 deep
constexpr std::size_t kMaxStringBytes = 1u << 20;      // one path, comm or exe
constexpr std::size_t kNamesFlushBytes = 1u << 20;     // buffered names that make a block
// Decompression bombs: the blocks up to any point of a file may expand to at most
// kFreeRawBytes + kMaxExpansion × the file's bytes up to there. Op records compress 3×
// (random fields) to 10×; the writer stores a block uncompressed rather than break the rule.
constexpr uint64_t kFreeRawBytes = 16u << 20;
constexpr uint64_t kMaxExpansion = 64;

struct BlockHeader {
  uint8_t kind = 0;
  uint8_t codec = 0;
  uint16_t flags = 0;
  uint32_t seq = 0;          // 0 for the first block, +1 for each next one
  uint32_t count = 0;        // items in the block
  uint32_t stored_len = 0;   // payload bytes that follow the header
  uint32_t raw_len = 0;      // payload bytes once decompressed
  uint32_t payload_crc = 0;  // CRC-32 of the stored payload
  uint32_t header_crc = 0;   // CRC-32 of the 24 bytes before it
};

uint32_t crc32_of(const void* p, std::size_t n) {
  return static_cast<uint32_t>(::crc32(0, static_cast<const Bytef*>(p), static_cast<uInt>(n)));
}

void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::array<uint8_t, kFileHeaderBytes> file_header() {
  std::array<uint8_t, kFileHeaderBytes> h{};
  std::memcpy(h.data(), kMagic.data(), kMagic.size());
  put_le(h.data() + 8, kFormatMajor, 2);
  put_le(h.data() + 10, kFormatMinor, 2);
  put_le(h.data() + 12, crc32_of(h.data(), 12), 4);
  return h;
}

std::array<uint8_t, kBlockHeaderBytes> encode(BlockHeader b) {
  std::array<uint8_t, kBlockHeaderBytes> h{};
  h[0] = b.kind;
  h[1] = b.codec;
  put_le(h.data() + 2, b.flags, 2);
  put_le(h.data() + 4, b.seq, 4);
  put_le(h.data() + 8, b.count, 4);
  put_le(h.data() + 12, b.stored_len, 4);
  put_le(h.data() + 16, b.raw_len, 4);
  put_le(h.data() + 20, b.payload_crc, 4);
  put_le(h.data() + 24, crc32_of(h.data(), 24), 4);
  return h;
}

BlockHeader decode(const uint8_t* h) {
  BlockHeader b;
  b.kind = h[0];
  b.codec = h[1];
  b.flags = static_cast<uint16_t>(get_le(h + 2, 2));
  b.seq = static_cast<uint32_t>(get_le(h + 4, 4));
  b.count = static_cast<uint32_t>(get_le(h + 8, 4));
  b.stored_len = static_cast<uint32_t>(get_le(h + 12, 4));
  b.raw_len = static_cast<uint32_t>(get_le(h + 16, 4));
  b.payload_crc = static_cast<uint32_t>(get_le(h + 20, 4));
  b.header_crc = static_cast<uint32_t>(get_le(h + 24, 4));
  return b;
}

std::string kind_name(uint8_t kind) {
  switch (kind) {
    case kMetaBlock: return "META";
    case kFilesBlock: return "FILES";
    case kProcessesBlock: return "PROCESSES";
    case kOpsBlock: return "OPS";
    case kTrailerBlock: return "TRAILER";
    default: return "kind-" + std::to_string(kind);
  }
}

// ---- the op record, described in META so that the file says how to read its ops ----

struct OpField {
  const char* name;
  std::size_t offset;
  std::size_t size;
  const char* type;  // u16, u32, i32, u64, i64: little-endian integers
};

#define IOLENS_OP_FIELD(f, type) \
  OpField { #f, offsetof(iolens_trace_record, f), sizeof(iolens_trace_record::f), type }
constexpr OpField kOpFields[] = {
    IOLENS_OP_FIELD(start_ns, "u64"), IOLENS_OP_FIELD(end_ns, "u64"),
    IOLENS_OP_FIELD(pstart_ns, "u64"), IOLENS_OP_FIELD(ino, "u64"),
    IOLENS_OP_FIELD(dev, "u32"),      IOLENS_OP_FIELD(gen, "u32"),
    IOLENS_OP_FIELD(offset, "i64"),   IOLENS_OP_FIELD(ret, "i64"),
    IOLENS_OP_FIELD(arg, "i64"),      IOLENS_OP_FIELD(tgid, "u32"),
    IOLENS_OP_FIELD(tid, "u32"),      IOLENS_OP_FIELD(op, "u16"),
    IOLENS_OP_FIELD(nr, "u16"),       IOLENS_OP_FIELD(flags, "u32"),
    IOLENS_OP_FIELD(fd, "i32"),       IOLENS_OP_FIELD(pad, "u32"),
};
#undef IOLENS_OP_FIELD

// The table covers the record exactly, in order, with no gap: a changed trace record breaks
// the build here, and changing the table changes the format (a new major version).
constexpr bool op_fields_tile_the_record() {
  std::size_t at = 0;
  for (const auto& f : kOpFields) {
    if (f.offset != at) return false;
    at += f.size;
  }
  return at == kOpBytes;
}
static_assert(kOpBytes == 88, "format 1's op record is ABI 6's 88-byte iolens_trace_record");
static_assert(op_fields_tile_the_record(), "kOpFields must describe iolens_trace_record exactly");

// Names of the op kinds and flags, for readers of META; informative only.
static_assert(IOLENS_NR_OPS == 14, "name the new op kind in kOpKindNames");
constexpr const char* kOpKindNames[] = {"read", "write", "open", "dup", "close", "seek", "stat",
                                        "mmap", "fsync", "fdatasync", "truncate", "unlink",
                                        "rename"};

json op_record_json() {
  json fields = json::array();
  for (const auto& f : kOpFields)
    fields.push_back({{"name", f.name}, {"offset", f.offset}, {"size", f.size}, {"type", f.type}});
  json kinds = json::object();
  for (std::size_t i = 0; i < std::size(kOpKindNames); ++i)
    kinds[std::to_string(i + 1)] = kOpKindNames[i];
  return {{"size", kOpBytes},
          {"byte_order", "little"},
          {"fields", fields},
          {"op_kinds", kinds},
          {"flags",
           {{std::to_string(IOLENS_TRACE_F_OTHER), "other"},
            {std::to_string(IOLENS_TRACE_F_NOFILE), "nofile"},
            {std::to_string(IOLENS_TRACE_F_COPY), "copy"},
            {std::to_string(IOLENS_TRACE_F_MEM_UNALIGNED), "mem_unaligned"}}}};
}

// ---- byte strings in JSON ----

/// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto cont = [&](std::size_t k, uint8_t lo = 0x80, uint8_t hi = 0xbf) {
    return i + k < n && p[i + k] >= lo && p[i + k] <= hi;
  };
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      i += 1;
    } else if (c >= 0xc2 && c <= 0xdf && cont(1)) {
      i += 2;
    } else if (c >= 0xe0 && c <= 0xef &&
               cont(1, c == 0xe0 ? 0xa0 : 0x80, c == 0xed ? 0x9f : 0xbf) && cont(2)) {
      i += 3;
    } else if (c >= 0xf0 && c <= 0xf4 &&
               cont(1, c == 0xf0 ? 0x90 : 0x80, c == 0xf4 ? 0x8f : 0xbf) && cont(2) && cont(3)) {
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

/// A string of any bytes: a JSON string when they are valid UTF-8, else {"hex": "<lowercase
/// hex of every byte>"}, so that every byte sequence round-trips exactly.
json bytes_json(std::string_view s) {
  if (valid_utf8(s)) return std::string(s);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * s.size());
  for (unsigned char c : s) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 0xf]);
  }
  return {{"hex", hex}};
}

class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const json& member(const json& obj, const char* key) {
  if (!obj.is_object()) throw FormatError(std::string("expected an object holding \"") + key + "\"");
  const auto it = obj.find(key);
  if (it == obj.end()) throw FormatError(std::string("\"") + key + "\" missing");
  return *it;
}

uint64_t u64_of(const json& obj, const char* key) {
  const json& v = member(obj, key);
  if (!v.is_number_unsigned())
    throw FormatError(std::string("\"") + key + "\" is not an unsigned integer");
  return v.get<uint64_t>();
}

int64_t i64_of(const json& obj, const char* key) {
  const json& v = member(obj, key);
  if (v.is_number_unsigned() && v.get<uint64_t>() <= std::numeric_limits<int64_t>::max())
    return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  throw FormatError(std::string("\"") + key + "\" is not a 64-bit signed integer");
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string bytes_value(const json& v, const std::string& what) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.size() == 1 && v.contains("hex") && v["hex"].is_string()) {
    const auto& hex = v["hex"].get_ref<const std::string&>();
    std::string out;
    if (hex.size() % 2 == 0) {
      out.reserve(hex.size() / 2);
      for (std::size_t i = 0; i < hex.size(); i += 2) {
        const int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
        if (hi < 0 || lo < 0) break;
        out.push_back(static_cast<char>(hi << 4 | lo));
      }
      if (out.size() == hex.size() / 2) return out;
    }
    throw FormatError(what + ": \"hex\" is not an even number of lowercase hex digits");
  }
  throw FormatError(what + " is neither a string nor {\"hex\": ...}");
}

std::string bytes_of(const json& obj, const char* key) {
  return bytes_value(member(obj, key), std::string("\"") + key + "\"");
}

const json& array_of(const json& obj, const char* key) {
  const json& v = member(obj, key);
  if (!v.is_array()) throw FormatError(std::string("\"") + key + "\" is not an array");
  return v;
}

json parse_json(std::string_view text) {
  // Depth-limited: a hostile `[[[[...` is refused at once instead of building a deep value.
  const json::parser_callback_t limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw FormatError("JSON nested too deep");
    return true;
  };
  return json::parse(text.begin(), text.end(), limit);
}

// ---- META and TRAILER ----

json meta_json(const Meta& m) {
  json labels = json::array();
  for (const auto& [k, v] : m.job_labels) labels.push_back({bytes_json(k), bytes_json(v)});
  json command = json::array();
  for (const auto& a : m.command) command.push_back(bytes_json(a));
  json out = {{"format", "iolens-trace"},
          {"producer", bytes_json(m.producer)},
          {"node", bytes_json(m.node)},
          {"target", bytes_json(m.target)},
          {"job", {{"kind", bytes_json(m.job_kind)}, {"id", bytes_json(m.job_id)}, {"labels", labels}}},
          {"command", command},
          {"window_start_ns", m.window_start_ns},
          {"mono_to_wall_ns", m.mono_to_wall_ns},
          {"ring_bytes", m.ring_bytes},
          {"abi_version", m.abi_version ? m.abi_version : uint64_t{IOLENS_ABI_VERSION}},
          {"op_record", op_record_json()}};
  if (m.alignment_mounts) {
    json mounts = json::array();
    for (const auto& [point, block_size] : *m.alignment_mounts)
      mounts.push_back({bytes_json(point), block_size});
    out["alignment_mounts"] = std::move(mounts);
  }
  return out;
}

/// Refuses a file whose op records are not laid out as this build's (a writer bug, or a file
/// edited by hand): the format's major version fixes the layout.
void check_op_record(const json& rec) {
  if (u64_of(rec, "size") != kOpBytes) throw FormatError("op records are not 88 bytes");
  const json& order = member(rec, "byte_order");
  if (!order.is_string() || order.get_ref<const std::string&>() != "little")
    throw FormatError("op records are not little-endian");
  const json& fields = array_of(rec, "fields");
  if (fields.size() != std::size(kOpFields)) throw FormatError("op record fields differ");
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const OpField& f = kOpFields[i];
    const json& name = member(fields[i], "name");
    const json& type = member(fields[i], "type");
    if (!name.is_string() || name.get_ref<const std::string&>() != f.name ||
        u64_of(fields[i], "offset") != f.offset || u64_of(fields[i], "size") != f.size ||
        !type.is_string() || type.get_ref<const std::string&>() != f.type)
      throw FormatError("op record field " + std::to_string(i) + " is not " + f.name);
  }
}

Meta meta_of(const json& j) {
  Meta m;
  m.producer = bytes_of(j, "producer");
  m.node = bytes_of(j, "node");
  m.target = bytes_of(j, "target");
  const json& job = member(j, "job");
  m.job_kind = bytes_of(job, "kind");
  m.job_id = bytes_of(job, "id");
  for (const json& pair : array_of(job, "labels")) {
    if (!pair.is_array() || pair.size() != 2) throw FormatError("a job label is not [key, value]");
    m.job_labels.insert_or_assign(bytes_value(pair[0], "a label key"), bytes_value(pair[1], "a label value"));
  }
  for (const json& arg : array_of(j, "command")) m.command.push_back(bytes_value(arg, "a command argument"));
  m.window_start_ns = u64_of(j, "window_start_ns");
  m.mono_to_wall_ns = i64_of(j, "mono_to_wall_ns");
  m.ring_bytes = u64_of(j, "ring_bytes");
  if (j.contains("alignment_mounts")) {
    std::vector<std::pair<std::string, int64_t>> mounts;
    for (const json& pair : array_of(j, "alignment_mounts")) {
      // A block size is positive, or -1 (none); a JSON integer past int64's range is not one.
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer() ||
          (pair[1].is_number_unsigned() &&
           pair[1].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
          (pair[1].get<int64_t>() <= 0 && pair[1].get<int64_t>() != -1))
        throw FormatError("an alignment mount is not [point, block size]");
      mounts.emplace_back(bytes_value(pair[0], "an alignment mount point"),
                          pair[1].get<int64_t>());
    }
    m.alignment_mounts = std::move(mounts);
  }
  // The op record layout below is what decides how ops are read; the version says what the
  // writer put in them (ABI 14: the buffer flag and an open's mode).
  m.abi_version = u64_of(j, "abi_version");
  check_op_record(member(j, "op_record"));
  return m;
}

/// What the writer counted, for the reader to check that nothing is missing.
struct Counts {
  uint64_t blocks = 0;  // blocks before the trailer, META included
  uint64_t ops = 0;
  uint64_t file_entries = 0;
  uint64_t process_entries = 0;
};

json trailer_json(const Losses& l, uint64_t window_end_ns, const Counts& c) {
  json notes = json::array();
  for (const auto& n : l.notes) notes.push_back(bytes_json(n));
  return {{"window_end_ns", window_end_ns},
          {"losses",
           {{"produced", l.produced},
            {"ring_full", l.ring_full},
            {"size_limit", l.size_limit},
            {"other", l.other},
            {"notes", notes}}},
          {"blocks", c.blocks},
          {"ops", c.ops},
          {"file_entries", c.file_entries},
          {"process_entries", c.process_entries}};
}

// ---- FILES and PROCESSES payloads ----

void put_file(std::string& out, const FileName& f) {
  core::Writer w(out);
  w.u64(f.ino);
  w.u32(f.dev);
  w.u32(f.gen);
  w.u32(f.flags);
  w.string(f.path);
}

void put_process(std::string& out, const Process& p) {
  core::Writer w(out);
  w.u32(p.pid);
  w.u32(p.ppid);
  w.u64(p.pstart_ns);
  w.u64(p.parent_pstart_ns);
  w.u64(static_cast<uint64_t>(p.exit_ns));
  w.i32(p.exit_code);
  w.string(p.comm);
  w.string(p.exe);
}

bool get_file(core::Reader& in, FileName& f) {
  return in.u64(f.ino) && in.u32(f.dev) && in.u32(f.gen) && in.u32(f.flags) && in.string(f.path);
}

bool get_process(core::Reader& in, Process& p) {
  uint64_t exit_ns = 0;
  const bool ok = in.u32(p.pid) && in.u32(p.ppid) && in.u64(p.pstart_ns) &&
                  in.u64(p.parent_pstart_ns) && in.u64(exit_ns) && in.i32(p.exit_code) &&
                  in.string(p.comm) && in.string(p.exe);
  p.exit_ns = static_cast<int64_t>(exit_ns);
  return ok;
}

/// Decodes `count` entries that fill `raw` exactly.
template <class T, class Get>
std::vector<T> entries(std::string_view raw, uint32_t count, Get get) {
  core::Reader in(raw);
  std::vector<T> out(count);
  for (uint32_t i = 0; i < count; ++i)
    if (!get(in, out[i])) throw FormatError("entry " + std::to_string(i) + ": " + in.error());
  if (in.remaining() != 0)
    throw FormatError(std::to_string(in.remaining()) + " bytes after the last entry");
  return out;
}

bool write_all(int fd, const uint8_t* p, std::size_t n, int& err) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// ---- reading: a byte source, then the parser ----

class Source {
 public:
  virtual ~Source() = default;
  /// Appends up to `n` bytes to `out`; fewer only at the end of the input or on an error
  /// (then `err` is set). Never allocates more than what arrives plus 1 MiB.
  virtual std::size_t read(std::size_t n, std::string& out) = 0;
  int err = 0;
};

class SpanSource : public Source {
 public:
  explicit SpanSource(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  std::size_t read(std::size_t n, std::string& out) override {
    const std::size_t k = std::min(n, bytes_.size() - pos_);
    if (k == 0) return 0;
    out.append(reinterpret_cast<const char*>(bytes_.data()) + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::span<const uint8_t> bytes_;
  std::size_t pos_ = 0;
};

class FdSource : public Source {
 public:
  explicit FdSource(int fd) : fd_(fd) {}
  std::size_t read(std::size_t n, std::string& out) override {
    std::size_t got = 0;
    while (got < n) {
      const std::size_t chunk = std::min<std::size_t>(n - got, 1u << 20);
      const std::size_t old = out.size();
      out.resize(old + chunk);
      const ssize_t r = ::read(fd_, out.data() + old, chunk);
      const int e = errno;
      out.resize(old + static_cast<std::size_t>(std::max<ssize_t>(r, 0)));
      if (r < 0 && e == EINTR) continue;
      if (r < 0) err = e;
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    return got;
  }

 private:
  int fd_;
};

struct ZstdDctxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

class Parser {
 public:
  explicit Parser(Source& src) : src_(src) {}

  ReadResult run() {
    if (file_header()) {
      while (next_block()) {
      }
    }
    r_.good_bytes = off_;
    return std::move(r_);
  }

 private:
  bool stop(ReadProblem problem, std::string message, int err = 0) {
    r_.problem = problem;
    r_.status = Status::Error(std::move(message), err);
    return false;
  }
  bool io_error() {
    return stop(ReadProblem::io,
                "cannot read at byte " + std::to_string(off_) + ": " + std::strerror(src_.err),
                src_.err);
  }
  std::string truncated_at() const { return "truncated at byte " + std::to_string(off_) + ": "; }
  bool corrupt(const BlockHeader* b, const std::string& why) {
    std::string where = b ? kind_name(b->kind) + " block " : std::string("block ");
    return stop(ReadProblem::corrupt, "corrupt " + where + std::to_string(seq_) + " at byte " +
                                          std::to_string(off_) + ": " + why);
  }

  bool file_header() {
    std::string h;
    const std::size_t n = src_.read(kFileHeaderBytes, h);
    if (src_.err) return io_error();
    if (n == 0) return stop(ReadProblem::truncated, truncated_at() + "the file is empty");
    if (std::memcmp(h.data(), kMagic.data(), std::min(n, kMagic.size())) != 0)
      return stop(ReadProblem::foreign, "not an iolens trace file: bad magic at byte 0");
    if (n < kFileHeaderBytes)
      return stop(ReadProblem::truncated, truncated_at() + std::to_string(n) + " of the " +
                                              std::to_string(kFileHeaderBytes) +
                                              " bytes of the file header");
    const auto* p = reinterpret_cast<const uint8_t*>(h.data());
    if (kVerifyChecksums && crc32_of(p, 12) != get_le(p + 12, 4))
      return stop(ReadProblem::corrupt, "corrupt file header at byte 0: checksum mismatch");
    const auto major = get_le(p + 8, 2), minor = get_le(p + 10, 2);
    if (major != kFormatMajor)
      return stop(major > kFormatMajor ? ReadProblem::too_new : ReadProblem::corrupt,
                  "the file header at byte 0 says format version " + std::to_string(major) + "." +
                      std::to_string(minor) + ": this iolens reads version " +
                      std::to_string(kFormatMajor) + ".x" +
                      (major > kFormatMajor ? " (a newer iolens wrote the file)" : ""));
    off_ = kFileHeaderBytes;
    return true;
  }

  /// Checks a block header whose checksum is right against the format's rules, before any
  /// payload byte is read or allocated.
  bool check(const BlockHeader& b) {
    if (b.seq != seq_)
      return corrupt(&b, "sequence number " + std::to_string(b.seq) + ", expected " +
                             std::to_string(seq_) + " (blocks missing or repeated)");
    if (b.flags & ~kSkippable) return corrupt(&b, "unknown flags " + std::to_string(b.flags));
    if (b.codec != kStored && b.codec != kZstd)
      return corrupt(&b, "unknown codec " + std::to_string(b.codec));
    const bool known = b.kind >= kMetaBlock && b.kind <= kTrailerBlock;
    if (!known && !(b.flags & kSkippable))
      return corrupt(&b, "unknown block kind " + std::to_string(b.kind) + " not marked skippable");
    if (seq_ == 0 && b.kind != kMetaBlock) return corrupt(&b, "the first block is not META");
    if (seq_ != 0 && b.kind == kMetaBlock) return corrupt(&b, "a second META block");
    const uint32_t max_raw =
        b.kind == kMetaBlock || b.kind == kTrailerBlock ? kMaxJsonBytes : kMaxBlockRawBytes;
    if (b.raw_len > max_raw)
      return corrupt(&b, "raw length " + std::to_string(b.raw_len) + " above the maximum " +
                             std::to_string(max_raw));
    if (b.codec == kStored && b.stored_len != b.raw_len)
      return corrupt(&b, "stored length " + std::to_string(b.stored_len) +
                             " differs from raw length " + std::to_string(b.raw_len) +
                             " of an uncompressed block");
    if (b.codec == kZstd && b.stored_len > ZSTD_COMPRESSBOUND(b.raw_len))
      return corrupt(&b, "stored length " + std::to_string(b.stored_len) + " above zstd's bound " +
                             "for " + std::to_string(b.raw_len) + " bytes");
    const uint64_t end = off_ + kBlockHeaderBytes + b.stored_len;
    if (raw_total_ + b.raw_len > kFreeRawBytes + kMaxExpansion * end)
      return corrupt(&b, "expands the file beyond " + std::to_string(kMaxExpansion) +
                             " times its size");
    switch (b.kind) {
      case kMetaBlock:
      case kTrailerBlock:
        if (b.count != 1) return corrupt(&b, "count " + std::to_string(b.count) + ", not 1");
        break;
      case kOpsBlock:
        if (uint64_t{b.count} * kOpBytes != b.raw_len)
          return corrupt(&b, std::to_string(b.raw_len) + " bytes are not " +
                                 std::to_string(b.count) + " op records of " +
                                 std::to_string(kOpBytes) + " bytes");
        break;
      case kFilesBlock:
      case kProcessesBlock: {
        const std::size_t min = b.kind == kFilesBlock ? kMinFileEntry : kMinProcessEntry;
        if (b.count > b.raw_len / min)
          return corrupt(&b, "count " + std::to_string(b.count) + " does not fit in " +
                                 std::to_string(b.raw_len) + " bytes");
        break;
      }
    }
    return true;
  }

  bool next_block() {
    header_.clear();
    const std::size_t n = src_.read(kBlockHeaderBytes, header_);
    if (src_.err) return io_error();
    if (n == 0)
      return stop(ReadProblem::truncated,
                  truncated_at() + "the file ends before its trailer (the capture did not finish)");
    if (n < kBlockHeaderBytes)
      return stop(ReadProblem::truncated, truncated_at() + std::to_string(n) + " of the " +
                                              std::to_string(kBlockHeaderBytes) +
                                              " bytes of a block header");
    const auto* h = reinterpret_cast<const uint8_t*>(header_.data());
    const BlockHeader b = decode(h);
    if (kVerifyChecksums && crc32_of(h, 24) != b.header_crc)
      return corrupt(nullptr, "block header checksum mismatch");
    if (!check(b)) return false;

    stored_.clear();
    const std::size_t got = src_.read(b.stored_len, stored_);
    if (src_.err) return io_error();
    if (got < b.stored_len)
      return stop(ReadProblem::truncated, truncated_at() + "the " + kind_name(b.kind) +
                                              " block header says " +
                                              std::to_string(b.stored_len) + " bytes, " +
                                              std::to_string(got) + " remain");
    if (kVerifyChecksums && crc32_of(stored_.data(), stored_.size()) != b.payload_crc)
      return corrupt(&b, "payload checksum mismatch");

    const bool known = b.kind >= kMetaBlock && b.kind <= kTrailerBlock;
    if (known && !payload(b)) return false;
    off_ += kBlockHeaderBytes + b.stored_len;
    raw_total_ += b.raw_len;
    ++seq_;
    if (b.kind != kTrailerBlock) return true;

    std::string extra;
    if (src_.read(1, extra) != 0)
      return stop(ReadProblem::corrupt,
                  "unexpected bytes after the trailer at byte " + std::to_string(off_));
    if (src_.err) return io_error();
    return false;  // done, status ok
  }

  /// Decompresses and decodes a known block into the trace; nothing of it is kept on failure.
  bool payload(const BlockHeader& b) {
    std::string_view raw = stored_;
    if (b.codec == kZstd) {
      if (!dctx_) {
        dctx_.reset(ZSTD_createDCtx());
        if (!dctx_)
          return stop(ReadProblem::io,
                      "cannot allocate a zstd context at byte " + std::to_string(off_), ENOMEM);
#ifdef IOLENS_FUZZING
        ZSTD_DCtx_setParameter(dctx_.get(), ZSTD_d_forceIgnoreChecksum, 1);
#endif
      }
      const std::size_t frame = ZSTD_findFrameCompressedSize(stored_.data(), stored_.size());
      if (ZSTD_isError(frame) || frame != stored_.size())
        return corrupt(&b, "the payload is not one zstd frame");
      if (ZSTD_getFrameContentSize(stored_.data(), stored_.size()) != b.raw_len)
        return corrupt(&b, "the zstd frame does not declare the raw length");
      raw_.resize(b.raw_len);
      const std::size_t got =
          ZSTD_decompressDCtx(dctx_.get(), raw_.data(), raw_.size(), stored_.data(), stored_.size());
      if (ZSTD_isError(got)) return corrupt(&b, std::string("zstd: ") + ZSTD_getErrorName(got));
      if (got != b.raw_len) return corrupt(&b, "zstd gave " + std::to_string(got) + " bytes");
      raw = raw_;
    }
    try {
      decode_payload(b, raw);
    } catch (const FormatError& e) {
      return corrupt(&b, e.what());
    } catch (const json::exception& e) {
      return corrupt(&b, e.what());
    }
    return true;
  }

  void decode_payload(const BlockHeader& b, std::string_view raw) {
    Trace& t = r_.trace;
    switch (b.kind) {
      case kMetaBlock:
        t.meta = meta_of(parse_json(raw));
        break;
      case kFilesBlock:
        for (auto& f : entries<FileName>(raw, b.count, get_file)) {
          const auto [it, fresh] = file_index_.try_emplace(std::tuple{f.dev, f.ino, f.gen}, t.files.size());
          if (fresh) t.files.push_back(std::move(f));
          else t.files[it->second] = std::move(f);
        }
        counts_.file_entries += b.count;
        break;
      case kProcessesBlock:
        for (auto& p : entries<Process>(raw, b.count, get_process)) {
          const auto [it, fresh] = process_index_.try_emplace(std::pair{p.pid, p.pstart_ns}, t.processes.size());
          if (fresh) t.processes.push_back(std::move(p));
          else t.processes[it->second] = std::move(p);
        }
        counts_.process_entries += b.count;
        break;
      case kOpsBlock: {
        if (b.count == 0) break;
        const std::size_t old = t.ops.size();
        t.ops.resize(old + b.count);
        std::memcpy(t.ops.data() + old, raw.data(), raw.size());
        counts_.ops += b.count;
        break;
      }
      case kTrailerBlock:
        trailer(parse_json(raw));
        break;
    }
  }

  void trailer(const json& j) {
    counts_.blocks = seq_;
    const std::pair<const char*, uint64_t> expect[] = {{"blocks", counts_.blocks},
                                                       {"ops", counts_.ops},
                                                       {"file_entries", counts_.file_entries},
                                                       {"process_entries", counts_.process_entries}};
    for (const auto& [key, have] : expect)
      if (const uint64_t said = u64_of(j, key); said != have)
        throw FormatError("the trailer counts " + std::to_string(said) + " " + key + ", the file has " +
                          std::to_string(have));
    Losses l;
    const json& losses = member(j, "losses");
    l.produced = u64_of(losses, "produced");
    l.ring_full = u64_of(losses, "ring_full");
    l.size_limit = u64_of(losses, "size_limit");
    l.other = u64_of(losses, "other");
    for (const json& n : array_of(losses, "notes")) l.notes.push_back(bytes_value(n, "a loss note"));
    const uint64_t window_end = u64_of(j, "window_end_ns");
    Trace& t = r_.trace;
    t.losses = std::move(l);
    t.meta.window_end_ns = window_end;
    t.complete = true;
  }

  Source& src_;
  ReadResult r_;
  uint64_t off_ = 0;        // where the next block starts: the good bytes so far
  uint32_t seq_ = 0;        // blocks read
  uint64_t raw_total_ = 0;  // their raw bytes
  Counts counts_;
  std::map<std::tuple<uint32_t, uint64_t, uint32_t>, std::size_t> file_index_;
  std::map<std::pair<uint32_t, uint64_t>, std::size_t> process_index_;
  std::unique_ptr<ZSTD_DCtx, ZstdDctxFree> dctx_;
  std::string header_, stored_, raw_;
};

}  // namespace

// ---- the writer ----

struct TraceWriter::Impl {
  int fd = -1;
  Sink sink;  // open_sink(): instead of fd
  bool own_fd = false;
  bool regular = false;
  bool finished = false;
  std::string name;  // for messages: the path, or "descriptor N"
  WriterOptions opt;
  Status error;      // the first error, returned again by every later call
  ZSTD_CCtx* cctx = nullptr;
  struct Pending {  // a payload being buffered
    uint8_t kind;
    std::string bytes = {};
    uint32_t count = 0;
  };
  Pending ops{kOpsBlock}, files{kFilesBlock}, processes{kProcessesBlock};
  uint64_t bytes = 0, raw_total = 0, ops_added = 0;
  Counts counts;
  std::string zbuf, block;

  ~Impl() {
    ZSTD_freeCCtx(cctx);
    if (own_fd && fd >= 0) ::close(fd);
  }

  Status fail(Status s) {
    if (error.ok) error = std::move(s);
    return error;
  }
  Status usable() const {
    if (!error.ok) return error;
    if (finished) return Status::Error("trace writer: " + name + " already finished");
    if (fd < 0 && !sink) return Status::Error("trace writer: not open");
    return Status::Ok();
  }
  Status write(const void* p, std::size_t n) {
    if (sink) {
      if (Status s = sink(std::string_view(static_cast<const char*>(p), n)); !s) return fail(s);
      bytes += n;
      return Status::Ok();
    }
    int err = 0;
    if (!write_all(fd, static_cast<const uint8_t*>(p), n, err))
      return fail(Status::Error("cannot write trace file " + name + ": " + std::strerror(err), err));
    bytes += n;
    return Status::Ok();
  }

  static Status check(const WriterOptions& o) {
    if (o.ops_per_block < 1 || o.ops_per_block > kMaxOpsPerBlock)
      return Status::Error("trace writer: ops_per_block must be 1.." +
                           std::to_string(kMaxOpsPerBlock), EINVAL);
    if (o.zstd_level < 1 || o.zstd_level > 19)
      return Status::Error("trace writer: zstd_level must be 1..19", EINVAL);
    return Status::Ok();
  }

  Status start(const Meta& meta, const WriterOptions& options) {
    opt = options;
    cctx = ZSTD_createCCtx();
    if (!cctx) return fail(Status::Error("trace writer: cannot allocate a zstd context", ENOMEM));
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, opt.zstd_level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);  // the raw data checked too
    const auto h = file_header();
    if (Status s = write(h.data(), h.size()); !s) return s;
    std::string text;
    try {
      text = meta_json(meta).dump();
    } catch (const json::exception& e) {
      return fail(Status::Error(std::string("trace writer: META: ") + e.what(), EINVAL));
    }
    if (text.size() > kMaxJsonBytes)
      return fail(Status::Error("trace writer: META of " + std::to_string(text.size()) +
                                " bytes is above the maximum " + std::to_string(kMaxJsonBytes),
                                EINVAL));
    return write_block(kMetaBlock, 1, text);
  }

  Status write_block(uint8_t kind, uint32_t count, std::string_view raw) {
    if (counts.blocks >= std::numeric_limits<uint32_t>::max())
      return fail(Status::Error("trace writer: too many blocks", EFBIG));
    BlockHeader b;
    b.kind = kind;
    b.codec = kStored;
    b.seq = static_cast<uint32_t>(counts.blocks);
    b.count = count;
    b.raw_len = static_cast<uint32_t>(raw.size());
    std::string_view stored = raw;
    if (opt.compress) {
      zbuf.resize(ZSTD_compressBound(raw.size()));
      const std::size_t n = ZSTD_compress2(cctx, zbuf.data(), zbuf.size(), raw.data(), raw.size());
      if (ZSTD_isError(n))
        return fail(Status::Error(std::string("trace writer: zstd: ") + ZSTD_getErrorName(n), EIO));
      // Stored as is when zstd does not help, or when it would expand past the reader's limit.
      const uint64_t end = bytes + kBlockHeaderBytes + n;
      if (n < raw.size() && raw_total + raw.size() <= kFreeRawBytes + kMaxExpansion * end) {
        b.codec = kZstd;
        stored = std::string_view(zbuf.data(), n);
      }
    }
    b.stored_len = static_cast<uint32_t>(stored.size());
    b.payload_crc = crc32_of(stored.data(), stored.size());
    const auto h = encode(b);
    block.assign(reinterpret_cast<const char*>(h.data()), h.size());
    block.append(stored);
    if (Status s = write(block.data(), block.size()); !s) return s;
    raw_total += raw.size();
    ++counts.blocks;
    return Status::Ok();
  }

  /// Writes what `p` holds as a block (if anything) and counts its items in `written`.
  Status write_pending(Pending& p, uint64_t& written) {
    if (p.count == 0) return Status::Ok();
    if (Status s = write_block(p.kind, p.count, p.bytes); !s) return s;
    written += p.count;
    p.bytes.clear();
    p.count = 0;
    return Status::Ok();
  }
  Status write_names() {
    if (Status s = write_pending(files, counts.file_entries); !s) return s;
    return write_pending(processes, counts.process_entries);
  }
  /// The names first: a file cut after this OPS block names its ops.
  Status write_ops() {
    if (Status s = write_names(); !s) return s;
    return write_pending(ops, counts.ops);
  }

  Status names_added() {
    if (files.bytes.size() + processes.bytes.size() < kNamesFlushBytes) return Status::Ok();
    return write_names();
  }
};

TraceWriter::TraceWriter() : impl_(std::make_unique<Impl>()) {}
TraceWriter::~TraceWriter() = default;
TraceWriter::TraceWriter(TraceWriter&&) noexcept = default;
TraceWriter& TraceWriter::operator=(TraceWriter&&) noexcept = default;

Status TraceWriter::open(const std::string& path, const Meta& meta, const WriterOptions& options) {
  if (impl_->fd >= 0) return Status::Error("trace writer: already open on " + impl_->name);
  if (Status s = Impl::check(options); !s) return impl_->fail(s);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    return impl_->fail(Status::Error("cannot create trace file " + path + ": " + std::strerror(e), e));
  }
  impl_->fd = fd;
  impl_->own_fd = true;
  impl_->regular = true;
  impl_->name = path;
  return impl_->start(meta, options);
}

Status TraceWriter::open_fd(int fd, const Meta& meta, const WriterOptions& options) {
  if (impl_->fd >= 0) return Status::Error("trace writer: already open on " + impl_->name);
  if (fd < 0) return impl_->fail(Status::Error("trace writer: bad descriptor", EBADF));
  if (Status s = Impl::check(options); !s) return impl_->fail(s);
  struct stat st {};
  impl_->fd = fd;
  impl_->regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  impl_->name = "descriptor " + std::to_string(fd);
  return impl_->start(meta, options);
}

Status TraceWriter::open_sink(Sink sink, const Meta& meta, const WriterOptions& options) {
  if (impl_->fd >= 0 || impl_->sink)
    return Status::Error("trace writer: already open on " + impl_->name);
  if (!sink) return impl_->fail(Status::Error("trace writer: no sink", EINVAL));
  if (Status s = Impl::check(options); !s) return impl_->fail(s);
  impl_->sink = std::move(sink);
  impl_->name = "the capture's output";
  return impl_->start(meta, options);
}

Status TraceWriter::add_ops(std::span<const iolens_trace_record> ops) {
  if (Status s = impl_->usable(); !s) return s;
  Impl& w = *impl_;
  while (!ops.empty()) {
    const std::size_t take = std::min<std::size_t>(ops.size(), w.opt.ops_per_block - w.ops.count);
    w.ops.bytes.append(reinterpret_cast<const char*>(ops.data()), take * kOpBytes);
    w.ops.count += static_cast<uint32_t>(take);
    w.ops_added += take;
    ops = ops.subspan(take);
    if (w.ops.count == w.opt.ops_per_block)
      if (Status s = w.write_ops(); !s) return s;
  }
  return Status::Ok();
}

Status TraceWriter::add_file(const FileName& file) {
  if (Status s = impl_->usable(); !s) return s;
  if (file.path.size() > kMaxStringBytes)
    return Status::Error("trace writer: a path of " + std::to_string(file.path.size()) +
                         " bytes is too long", ENAMETOOLONG);
  put_file(impl_->files.bytes, file);
  ++impl_->files.count;
  return impl_->names_added();
}

Status TraceWriter::add_process(const Process& process) {
  if (Status s = impl_->usable(); !s) return s;
  if (process.comm.size() > kMaxStringBytes || process.exe.size() > kMaxStringBytes)
    return Status::Error("trace writer: a process name is too long", ENAMETOOLONG);
  put_process(impl_->processes.bytes, process);
  ++impl_->processes.count;
  return impl_->names_added();
}

Status TraceWriter::flush() {
  if (Status s = impl_->usable(); !s) return s;
  return impl_->write_ops();
}

Status TraceWriter::finish(const Losses& losses, uint64_t window_end_ns) {
  if (Status s = impl_->usable(); !s) return s;
  Impl& w = *impl_;
  if (Status s = w.write_ops(); !s) return s;
  std::string text;
  try {
    text = trailer_json(losses, window_end_ns, w.counts).dump();
  } catch (const json::exception& e) {
    return w.fail(Status::Error(std::string("trace writer: TRAILER: ") + e.what(), EINVAL));
  }
  if (text.size() > kMaxJsonBytes)
    return w.fail(Status::Error("trace writer: the loss notes are too long", EINVAL));
  if (Status s = w.write_block(kTrailerBlock, 1, text); !s) return s;
  w.finished = true;
  // A regular file is synced so that a complete trailer means a complete file on disk.
  if (w.regular && fsync(w.fd) != 0) {
    const int e = errno;
    return w.fail(Status::Error("cannot sync trace file " + w.name + ": " + std::strerror(e), e));
  }
  if (w.own_fd && ::close(std::exchange(w.fd, -1)) != 0) {
    const int e = errno;
    return w.fail(Status::Error("cannot close trace file " + w.name + ": " + std::strerror(e), e));
  }
  return Status::Ok();
}

uint64_t TraceWriter::bytes_written() const { return impl_->bytes; }

uint32_t TraceWriter::ops_until_block() const {
  return impl_->opt.ops_per_block - impl_->ops.count;
}
uint64_t TraceWriter::ops_added() const { return impl_->ops_added; }

// ---- reading ----

ReadResult read_trace_bytes(std::span<const uint8_t> bytes) {
  SpanSource src(bytes);
  return Parser(src).run();
}

ReadResult read_trace_fd(int fd) {
  FdSource src(fd);
  return Parser(src).run();
}

ReadResult read_trace_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    ReadResult r;
    r.problem = ReadProblem::io;
    r.status = Status::Error("cannot open trace file " + path + ": " + std::strerror(e), e);
    return r;
  }
  ReadResult r = read_trace_fd(fd);
  ::close(fd);
  return r;
}

}  // namespace iolens::trace
