// SPDX-License-Identifier: Apache-2.0
// The native trace file (docs/trace-format.md): every field round-trips (hostile strings,
// extreme values), ops span many blocks, later entries win, losses reach the trailer; a file cut
// at every byte or with a bit flipped in every byte gives back what precedes the damage and
// names where it starts; foreign, empty, newer and hostile files are refused with the offset.
// The layout is written here again from the doc (not taken from the code), so the doc is tested.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/trace_file.hpp"
#include "trace_samples.hpp"

using namespace iolens::trace;
using nlohmann::json;

#define EXPECT_OK(expr)                               \
  do {                                                \
    const iolens::Status st_ = (expr);                \
    EXPECT_TRUE(st_.ok) << #expr ": " << st_.message; \
  } while (0)

namespace {

using Bytes = std::vector<uint8_t>;

// docs/trace-format.md#layout
constexpr std::size_t kFileHeader = 16;
constexpr std::size_t kBlockHeader = 28;
constexpr std::size_t kOp = 88;
constexpr uint8_t kMeta = 1, kFiles = 2, kProcesses = 3, kOps = 4, kTrailer = 5;
constexpr uint8_t kStored = 0, kZstd = 1;

uint64_t get_le(const Bytes& b, std::size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}
void put_le(Bytes& b, std::size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t crc(const uint8_t* p, std::size_t n) {
  return static_cast<uint32_t>(crc32(0, p, static_cast<uInt>(n)));
}
Bytes bytes_of(std::string_view s) { return Bytes(s.begin(), s.end()); }
void append(Bytes& to, const Bytes& b) { to.insert(to.end(), b.begin(), b.end()); }
std::string hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    out.push_back("0123456789abcdef"[c >> 4]);
    out.push_back("0123456789abcdef"[c & 15]);
  }
  return out;
}

Bytes file_header(uint16_t major = 1, uint16_t minor = 0) {
  Bytes h = {0x89, 'I', 'O', 'L', 'T', 'R', '\r', '\n', 0, 0, 0, 0, 0, 0, 0, 0};
  put_le(h, 8, major, 2);
  put_le(h, 10, minor, 2);
  put_le(h, 12, crc(h.data(), 12), 4);
  return h;
}

struct BlockSpec {
  uint8_t kind = kMeta;
  uint8_t codec = kStored;
  uint16_t flags = 0;
  uint32_t seq = 0;
  uint32_t count = 1;
  Bytes payload = {};
  int64_t stored_len = -1;  // -1: payload's size
  int64_t raw_len = -1;     // -1: payload's size
};

/// A block with right checksums and whatever fields the test wants.
Bytes block(const BlockSpec& s) {
  Bytes b(kBlockHeader);
  b[0] = s.kind;
  b[1] = s.codec;
  put_le(b, 2, s.flags, 2);
  put_le(b, 4, s.seq, 4);
  put_le(b, 8, s.count, 4);
  put_le(b, 12, s.stored_len < 0 ? s.payload.size() : uint64_t(s.stored_len), 4);
  put_le(b, 16, s.raw_len < 0 ? s.payload.size() : uint64_t(s.raw_len), 4);
  put_le(b, 20, crc(s.payload.data(), s.payload.size()), 4);
  put_le(b, 24, crc(b.data(), 24), 4);
  append(b, s.payload);
  return b;
}

/// A block's place in a file, from its header alone.
struct Block {
  std::size_t offset, end;
  uint8_t kind, codec;
  uint32_t count;
};
std::vector<Block> blocks_of(const Bytes& f) {
  std::vector<Block> out;
  for (std::size_t at = kFileHeader; at + kBlockHeader <= f.size();) {
    const std::size_t end = at + kBlockHeader + get_le(f, at + 12, 4);
    out.push_back({at, end, f[at], f[at + 1], static_cast<uint32_t>(get_le(f, at + 8, 4))});
    at = end;
  }
  return out;
}
Bytes payload_of(const Bytes& f, const Block& b) {
  return Bytes(f.begin() + long(b.offset + kBlockHeader), f.begin() + long(b.end));
}

/// The offset an error message names ("... at byte N..."), -1 if none.
int64_t named_offset(const std::string& message) {
  const auto at = message.find("at byte ");
  return at == std::string::npos ? -1 : std::stoll(message.substr(at + 8));
}

ReadResult read(const Bytes& b) { return read_trace_bytes(b); }

/// A file in memory for the writer's descriptor.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("trace", MFD_CLOEXEC)) {}
  ~MemFile() { close(fd_); }
  int fd() const { return fd_; }
  Bytes bytes() const {
    Bytes b(static_cast<std::size_t>(lseek(fd_, 0, SEEK_END)));
    EXPECT_EQ(pread(fd_, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
    return b;
  }

 private:
  int fd_;
};

Trace sample(std::size_t nops = 50, std::size_t nfiles = 16, std::size_t nprocs = 6) {
  Trace t;
  t.meta = samples::meta();
  t.meta.window_end_ns = 2'000'000'000'000ull;
  t.files = samples::files(nfiles);
  t.processes = samples::processes(nprocs);
  t.ops = samples::ops(nops);
  t.losses = samples::losses();
  t.complete = true;
  return t;
}

/// Writes `t` with names and ops interleaved (half the names, half the ops, a flush, the rest);
/// without `finish` the file ends with the flush of the rest (no trailer).
Bytes write_trace(const Trace& t, const WriterOptions& o = {}, bool finish = true) {
  MemFile m;
  TraceWriter w;
  EXPECT_OK(w.open_fd(m.fd(), t.meta, o));
  const std::size_t hf = t.files.size() / 2, hp = t.processes.size() / 2, ho = t.ops.size() / 2;
  for (std::size_t i = 0; i < hf; ++i) EXPECT_OK(w.add_file(t.files[i]));
  for (std::size_t i = 0; i < hp; ++i) EXPECT_OK(w.add_process(t.processes[i]));
  EXPECT_OK(w.add_ops(std::span(t.ops).first(ho)));
  EXPECT_OK(w.flush());
  for (std::size_t i = hf; i < t.files.size(); ++i) EXPECT_OK(w.add_file(t.files[i]));
  for (std::size_t i = hp; i < t.processes.size(); ++i) EXPECT_OK(w.add_process(t.processes[i]));
  EXPECT_OK(w.add_ops(std::span(t.ops).subspan(ho)));
  if (finish) EXPECT_OK(w.finish(t.losses, t.meta.window_end_ns));
  else EXPECT_OK(w.flush());
  const Bytes b = m.bytes();
  EXPECT_EQ(w.bytes_written(), b.size());
  EXPECT_EQ(w.ops_added(), t.ops.size());
  return b;
}

WriterOptions stored() {
  WriterOptions o;
  o.compress = false;
  return o;
}

/// The META payload the writer makes for the sample (uncompressed), and the file up to it.
Bytes sample_meta_payload() {
  const Bytes f = write_trace(Trace{sample(0, 0, 0)}, stored());
  return payload_of(f, blocks_of(f).at(0));
}
Bytes file_with_meta() {
  Bytes f = file_header();
  append(f, block({.kind = kMeta, .payload = sample_meta_payload()}));
  return f;
}
Bytes trailer_payload(uint64_t blocks, uint64_t ops = 0, uint64_t files = 0, uint64_t procs = 0) {
  const json j = {{"window_end_ns", 5},
                  {"losses",
                   {{"produced", 1}, {"ring_full", 2}, {"size_limit", 3}, {"other", 4},
                    {"notes", json::array()}}},
                  {"blocks", blocks}, {"ops", ops}, {"file_entries", files},
                  {"process_entries", procs}};
  return bytes_of(j.dump());
}

}  // namespace

TEST(TraceFile, RoundTripsEveryField) {
  for (const bool compress : {true, false}) {
    SCOPED_TRACE(compress ? "zstd" : "stored");
    WriterOptions o;
    o.compress = compress;
    const Trace t = sample();
    const Bytes f = write_trace(t, o);
    const ReadResult r = read(f);
    EXPECT_OK(r.status);
    EXPECT_EQ(r.problem, ReadProblem::none);
    EXPECT_EQ(r.good_bytes, f.size());
    EXPECT_TRUE(r.trace.complete);
    EXPECT_EQ(samples::difference(r.trace, t), "");
  }
}

TEST(TraceFile, EmptyTraceRoundTrips) {
  Trace t;
  t.complete = true;
  const Bytes f = write_trace(t);
  const ReadResult r = read(f);
  EXPECT_OK(r.status);
  EXPECT_EQ(samples::difference(r.trace, t), "");
  ASSERT_EQ(blocks_of(f).size(), 2u);  // META, TRAILER
}

TEST(TraceFile, LayoutIsTheDocumentedOne) {
  const Trace t = sample(20, 3, 2);
  const Bytes f = write_trace(t, stored());
  EXPECT_EQ(Bytes(f.begin(), f.begin() + 16), file_header(1, 0));
  const auto blocks = blocks_of(f);
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(blocks.back().end, f.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    EXPECT_EQ(b.codec, kStored);
    EXPECT_EQ(get_le(f, b.offset + 2, 2), 0u);  // flags
    EXPECT_EQ(get_le(f, b.offset + 4, 4), i);   // sequence
    EXPECT_EQ(get_le(f, b.offset + 16, 4), b.end - b.offset - kBlockHeader);  // raw = stored
    EXPECT_EQ(get_le(f, b.offset + 20, 4), crc(f.data() + b.offset + kBlockHeader, b.end - b.offset - kBlockHeader));
    EXPECT_EQ(get_le(f, b.offset + 24, 4), crc(f.data() + b.offset, 24));
  }
  // META first, TRAILER last, names before the ops they come with.
  std::string kinds;
  for (const Block& b : blocks) kinds += std::to_string(b.kind);
  EXPECT_EQ(kinds, "1234234" "5");

  const json meta = json::parse(payload_of(f, blocks[0]));
  EXPECT_EQ(meta["format"], "iolens-trace");
  EXPECT_EQ(meta["node"], json({{"hex", "6e6f64652dff01"}}));  // "node-\xff\x01"
  EXPECT_EQ(meta["target"], t.meta.target);                       // valid UTF-8: a string
  EXPECT_EQ(meta["job"]["labels"].back(), json({{{"hex", "ff206b6579"}}, {{"hex", "76616c7565fe0a"}}}));
  EXPECT_EQ(meta["mono_to_wall_ns"], t.meta.mono_to_wall_ns);
  EXPECT_EQ(meta["abi_version"], IOLENS_ABI_VERSION);
  const json& rec = meta["op_record"];
  EXPECT_EQ(rec["size"], kOp);
  EXPECT_EQ(rec["byte_order"], "little");
  std::string layout;
  for (const json& fld : rec["fields"])
    layout += fld["name"].get<std::string>() + ":" + std::to_string(fld["offset"].get<int>()) +
              ":" + fld["type"].get<std::string>() + " ";
  EXPECT_EQ(layout,
            "start_ns:0:u64 end_ns:8:u64 pstart_ns:16:u64 ino:24:u64 dev:32:u32 gen:36:u32 "
            "offset:40:i64 ret:48:i64 arg:56:i64 tgid:64:u32 tid:68:u32 op:72:u16 nr:74:u16 "
            "flags:76:u32 fd:80:i32 pad:84:u32 ");
  EXPECT_EQ(rec["op_kinds"]["1"], "read");
  EXPECT_EQ(rec["op_kinds"]["13"], "rename");

  // FILES: u64 ino, u32 dev, u32 gen, u32 flags, u32 length, the path.
  const Bytes files = payload_of(f, blocks[1]);
  EXPECT_EQ(blocks[1].count, 1u);
  EXPECT_EQ(get_le(files, 0, 8), t.files[0].ino);
  EXPECT_EQ(get_le(files, 8, 4), t.files[0].dev);
  EXPECT_EQ(get_le(files, 12, 4), t.files[0].gen);
  EXPECT_EQ(get_le(files, 16, 4), t.files[0].flags);
  EXPECT_EQ(get_le(files, 20, 4), t.files[0].path.size());
  EXPECT_EQ(std::string(files.begin() + 24, files.end()), t.files[0].path);
  // PROCESSES: u32 pid, u32 ppid, u64 pstart, u64 parent pstart, i64 exit, i32 code, comm, exe.
  const Bytes procs = payload_of(f, blocks[2]);
  const Process& p = t.processes[0];
  EXPECT_EQ(get_le(procs, 0, 4), p.pid);
  EXPECT_EQ(get_le(procs, 4, 4), p.ppid);
  EXPECT_EQ(get_le(procs, 8, 8), p.pstart_ns);
  EXPECT_EQ(get_le(procs, 16, 8), p.parent_pstart_ns);
  EXPECT_EQ(get_le(procs, 24, 8), uint64_t(p.exit_ns));
  EXPECT_EQ(get_le(procs, 32, 4), uint32_t(p.exit_code));
  EXPECT_EQ(get_le(procs, 36, 4), p.comm.size());
  EXPECT_EQ(procs.size(), 44 + p.comm.size() + p.exe.size());
  // OPS: the records' bytes.
  const Bytes ops = payload_of(f, blocks[3]);
  ASSERT_EQ(ops.size(), 10 * kOp);
  EXPECT_EQ(std::memcmp(ops.data(), t.ops.data(), ops.size()), 0);

  const json trailer = json::parse(payload_of(f, blocks.back()));
  EXPECT_EQ(trailer["window_end_ns"], t.meta.window_end_ns);
  EXPECT_EQ(trailer["blocks"], blocks.size() - 1);
  EXPECT_EQ(trailer["ops"], 20);
  EXPECT_EQ(trailer["file_entries"], 3);
  EXPECT_EQ(trailer["process_entries"], 2);
  EXPECT_EQ(trailer["losses"]["ring_full"], 1234);
  EXPECT_EQ(trailer["losses"]["notes"][1], json({{"hex", hex(t.losses.notes[1])}}));
}

TEST(TraceFile, ManyOpsInManyBlocks) {
  const auto ops = samples::ops(100'000, 7);
  for (const uint32_t per_block : {4096u, 16384u}) {
    SCOPED_TRACE(per_block);
    MemFile m;
    TraceWriter w;
    WriterOptions o;
    o.ops_per_block = per_block;
    EXPECT_OK(w.open_fd(m.fd(), Meta{}, o));
    // Spans of awkward sizes: blocks are cut by count, not by call.
    for (std::size_t at = 0; at < ops.size();) {
      const std::size_t n = std::min<std::size_t>(ops.size() - at, 1 + at % 7919);
      EXPECT_OK(w.add_ops(std::span(ops).subspan(at, n)));
      at += n;
    }
    EXPECT_OK(w.finish(Losses{}, 1));
    const Bytes f = m.bytes();
    std::size_t op_blocks = 0;
    for (const Block& b : blocks_of(f)) {
      if (b.kind != kOps) continue;
      ++op_blocks;
      EXPECT_EQ(b.codec, kZstd);
      EXPECT_LE(b.count, per_block);
    }
    EXPECT_EQ(op_blocks, (ops.size() + per_block - 1) / per_block);
    const ReadResult r = read(f);
    EXPECT_OK(r.status);
    ASSERT_EQ(r.trace.ops.size(), ops.size());
    EXPECT_EQ(std::memcmp(r.trace.ops.data(), ops.data(), ops.size() * kOp), 0);
    // zstd earns its keep on real-looking records (times, offsets, small ids).
    EXPECT_LT(f.size(), ops.size() * kOp / 2);
  }
}

TEST(TraceFile, LaterEntriesWinInFirstSeenOrder) {
  MemFile m;
  TraceWriter w;
  EXPECT_OK(w.open_fd(m.fd(), Meta{}));
  auto procs = samples::processes(3);
  auto files = samples::files(3);
  procs[1].exit_ns = -1;
  procs[1].exit_code = -1;
  for (const auto& p : procs) EXPECT_OK(w.add_process(p));
  for (const auto& f : files) EXPECT_OK(w.add_file(f));
  EXPECT_OK(w.add_ops(samples::ops(10)));
  EXPECT_OK(w.flush());
  // The process exits, the file gets its name walked again, a new process comes.
  procs[1].exit_ns = 77'000;
  procs[1].exit_code = 9;
  procs[1].exe = "/usr/bin/later";
  files[2].path = "/data/renamed";
  EXPECT_OK(w.add_process(procs[1]));
  EXPECT_OK(w.add_file(files[2]));
  const auto extra = samples::processes(4).back();
  EXPECT_OK(w.add_process(extra));
  EXPECT_OK(w.add_process(procs[1]));  // twice in one block: still one entry
  EXPECT_OK(w.finish(Losses{}, 1));

  const ReadResult r = read(m.bytes());
  EXPECT_OK(r.status);
  ASSERT_EQ(r.trace.processes.size(), 4u);
  EXPECT_EQ(r.trace.processes[1].exit_ns, 77'000);
  EXPECT_EQ(r.trace.processes[1].exit_code, 9);
  EXPECT_EQ(r.trace.processes[1].exe, "/usr/bin/later");
  EXPECT_EQ(r.trace.processes[3].pid, extra.pid);
  ASSERT_EQ(r.trace.files.size(), 3u);
  EXPECT_EQ(r.trace.files[2].path, "/data/renamed");
  EXPECT_EQ(r.trace.files[0].path, files[0].path);
}

TEST(TraceFile, LossesAndWindowEndComeFromTheTrailer) {
  Trace t = sample(3, 1, 1);
  t.losses.notes.push_back(std::string(1000, '\x01'));
  const Bytes f = write_trace(t);
  const ReadResult r = read(f);
  EXPECT_OK(r.status);
  EXPECT_EQ(r.trace.losses.produced, 123'456'789u);
  EXPECT_EQ(r.trace.losses.notes, t.losses.notes);
  EXPECT_EQ(r.trace.meta.window_end_ns, t.meta.window_end_ns);
}

TEST(TraceFile, UnfinishedFileGivesAllItsBlocks) {
  const Trace t = sample(40, 6, 4);
  const Bytes f = write_trace(t, {}, /*finish=*/false);
  const ReadResult r = read(f);
  EXPECT_FALSE(r.status.ok);
  EXPECT_EQ(r.problem, ReadProblem::truncated);
  EXPECT_EQ(r.status.message, "truncated at byte " + std::to_string(f.size()) +
                                  ": the file ends before its trailer (the capture did not finish)");
  EXPECT_EQ(r.good_bytes, f.size());
  EXPECT_FALSE(r.trace.complete);
  Trace expected = t;
  expected.losses = Losses{};
  expected.meta.window_end_ns = 0;
  expected.complete = false;
  EXPECT_EQ(samples::difference(r.trace, expected), "");
}

/// A small file of many blocks of every kind, compressed and not.
std::vector<std::pair<Trace, Bytes>> small_multi_block_files() {
  std::vector<std::pair<Trace, Bytes>> out;
  for (const bool compress : {true, false}) {
    WriterOptions o;
    o.compress = compress;
    o.ops_per_block = 3;
    // A light META: every cut re-reads it, and the hostile one is the round trip's business.
    Trace t = sample(14, 4, 3);
    t.meta = Meta{};
    t.meta.command = {"python3", "train.py"};
    out.emplace_back(t, write_trace(t, o));
  }
  return out;
}

/// What a reader must give for the blocks of `f` that end at or before `good`.
void expect_blocks_before(const ReadResult& r, const Trace& t, const Bytes& f, std::size_t good) {
  std::size_t ops = 0, files = 0, procs = 0;
  bool meta = false;
  for (const Block& b : blocks_of(f)) {
    if (b.end > good) break;
    meta |= b.kind == kMeta;
    if (b.kind == kOps) ops += b.count;
    if (b.kind == kFiles) files += b.count;
    if (b.kind == kProcesses) procs += b.count;
  }
  ASSERT_EQ(r.trace.ops.size(), ops);
  if (ops > 0) {
    EXPECT_EQ(std::memcmp(r.trace.ops.data(), t.ops.data(), ops * kOp), 0);
  }
  EXPECT_EQ(r.trace.files.size(), files);
  EXPECT_EQ(r.trace.processes.size(), procs);
  EXPECT_EQ(r.trace.meta.command, meta ? t.meta.command : std::vector<std::string>{});
  EXPECT_FALSE(r.trace.complete);
}

TEST(TraceFile, CutAtEveryByteGivesTheBlocksBeforeTheCut) {
  for (const auto& [t, f] : small_multi_block_files()) {
    const auto blocks = blocks_of(f);
    ASSERT_GE(blocks.size(), 10u);
    for (std::size_t cut = 0; cut < f.size(); ++cut) {
      SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(f.size()));
      const Bytes part(f.begin(), f.begin() + long(cut));
      const ReadResult r = read(part);
      std::size_t good = cut < kFileHeader ? 0 : kFileHeader;
      for (const Block& b : blocks)
        if (b.end <= cut) good = b.end;
      ASSERT_FALSE(r.status.ok);
      EXPECT_EQ(r.problem, ReadProblem::truncated) << r.status.message;
      EXPECT_EQ(r.good_bytes, good);
      EXPECT_EQ(named_offset(r.status.message), int64_t(good)) << r.status.message;
      EXPECT_EQ(r.status.message.rfind("truncated at byte ", 0), 0u) << r.status.message;
      expect_blocks_before(r, t, f, good);
    }
  }
}

TEST(TraceFile, BitFlipInEveryByteIsFoundAtItsBlock) {
  for (const auto& [t, f] : small_multi_block_files()) {
    const auto blocks = blocks_of(f);
    for (std::size_t at = 0; at < f.size(); ++at) {
      SCOPED_TRACE("bit " + std::to_string(at % 8) + " of byte " + std::to_string(at));
      Bytes damaged = f;
      damaged[at] ^= static_cast<uint8_t>(1u << (at % 8));
      const ReadResult r = read(damaged);
      std::size_t start = 0;
      for (const Block& b : blocks)
        if (b.offset <= at) start = b.offset;
      ASSERT_FALSE(r.status.ok);
      EXPECT_EQ(r.problem, at < 8 ? ReadProblem::foreign : ReadProblem::corrupt) << r.status.message;
      EXPECT_EQ(r.good_bytes, start);
      EXPECT_EQ(named_offset(r.status.message), int64_t(start)) << r.status.message;
      EXPECT_NE(r.status.message.find(at < 8 ? "bad magic" : "checksum mismatch"), std::string::npos)
          << r.status.message;
      expect_blocks_before(r, t, f, start);
    }
  }
}

TEST(TraceFile, ForeignEmptyAndShortFiles) {
  ReadResult r = read({});
  EXPECT_EQ(r.problem, ReadProblem::truncated);
  EXPECT_EQ(r.status.message, "truncated at byte 0: the file is empty");

  for (const char* foreign : {"GIF89a\x01\x00\x01\x00\x80\x00\x00", "{\"ops\": []}\n", "\x89PNG\r\n\x1a\n",
                              "\x89IOLTR\n\n................"}) {
    r = read(bytes_of(foreign));
    EXPECT_EQ(r.problem, ReadProblem::foreign) << foreign;
    EXPECT_EQ(r.status.message, "not an iolens trace file: bad magic at byte 0");
    EXPECT_EQ(r.good_bytes, 0u);
  }
  // Only the header: a capture that wrote nothing else.
  r = read(file_header());
  EXPECT_EQ(r.problem, ReadProblem::truncated);
  EXPECT_EQ(named_offset(r.status.message), 16);
  // A prefix of the magic is the start of a trace.
  r = read(Bytes{0x89, 'I', 'O'});
  EXPECT_EQ(r.problem, ReadProblem::truncated);
  EXPECT_EQ(r.status.message, "truncated at byte 0: 3 of the 16 bytes of the file header");
}

TEST(TraceFile, VersionsAndSkippableBlocks) {
  Bytes f = file_header(2, 0);
  ReadResult r = read(f);
  EXPECT_EQ(r.problem, ReadProblem::too_new);
  EXPECT_EQ(r.status.message,
            "the file header at byte 0 says format version 2.0: this iolens reads version 1.x (a "
            "newer iolens wrote the file)");
  EXPECT_EQ(read(file_header(0, 3)).problem, ReadProblem::corrupt);

  // A later minor version may add block kinds marked skippable: read, checked, passed over.
  f = file_header(1, 7);
  append(f, block({.kind = kMeta, .payload = sample_meta_payload()}));
  append(f, block({.kind = 200, .flags = 1, .seq = 1, .count = 3, .payload = bytes_of("future")}));
  append(f, block({.kind = kTrailer, .seq = 2, .payload = trailer_payload(2)}));
  r = read(f);
  EXPECT_OK(r.status);
  EXPECT_TRUE(r.trace.complete);
  EXPECT_EQ(r.trace.losses.other, 4u);
  EXPECT_EQ(r.trace.meta.window_end_ns, 5u);

  // Without the flag an unknown kind cannot be understood: refused where it starts.
  f = file_with_meta();
  const std::size_t at = f.size();
  append(f, block({.kind = 200, .seq = 1, .payload = bytes_of("future")}));
  r = read(f);
  EXPECT_EQ(r.problem, ReadProblem::corrupt);
  EXPECT_EQ(r.status.message, "corrupt kind-200 block 1 at byte " + std::to_string(at) +
                                  ": unknown block kind 200 not marked skippable");
}

/// A file with the sample META, then `bad` as block 1: refused at the block's offset.
void expect_block_refused(const BlockSpec& bad, ReadProblem problem, const std::string& why,
                          const Bytes& extra = {}) {
  Bytes f = file_with_meta();
  const std::size_t at = f.size();
  append(f, block(bad));
  append(f, extra);
  const ReadResult r = read(f);
  EXPECT_EQ(r.problem, problem) << r.status.message;
  EXPECT_EQ(r.good_bytes, at);
  EXPECT_EQ(named_offset(r.status.message), int64_t(at)) << r.status.message;
  EXPECT_NE(r.status.message.find(why), std::string::npos) << r.status.message;
  EXPECT_EQ(r.trace.meta.producer, samples::meta().producer);  // what came before is kept
}

TEST(TraceFile, AbsurdLengthsAndCountsAreRefusedBeforeAnyAllocation) {
  using P = ReadProblem;
  expect_block_refused({.kind = kOps, .seq = 1, .stored_len = 0xffffffff, .raw_len = 0xffffffff},
                       P::corrupt, "raw length 4294967295 above the maximum 16777216");
  expect_block_refused({.kind = kOps, .codec = kZstd, .seq = 1, .count = 10, .stored_len = 0xfffffff0, .raw_len = 880},
                       P::corrupt, "above zstd's bound");
  expect_block_refused({.kind = kTrailer, .seq = 1, .stored_len = 5u << 20, .raw_len = 5u << 20},
                       P::corrupt, "raw length 5242880 above the maximum 4194304");
  expect_block_refused({.kind = kOps, .seq = 1, .count = 0xffffffff, .payload = Bytes(88)},
                       P::corrupt, "88 bytes are not 4294967295 op records of 88 bytes");
  expect_block_refused({.kind = kOps, .seq = 1, .count = 1, .payload = Bytes(100)},
                       P::corrupt, "100 bytes are not 1 op records");
  expect_block_refused({.kind = kFiles, .seq = 1, .count = 1'000'000, .payload = Bytes(30)},
                       P::corrupt, "count 1000000 does not fit in 30 bytes");
  expect_block_refused({.kind = kProcesses, .seq = 1, .count = 2, .payload = Bytes(60)},
                       P::corrupt, "count 2 does not fit in 60 bytes");
  expect_block_refused({.kind = kTrailer, .seq = 1, .count = 2, .payload = trailer_payload(1)},
                       P::corrupt, "count 2, not 1");
  expect_block_refused({.kind = kFiles, .seq = 1, .count = 0, .stored_len = 4096, .raw_len = 4096},
                       P::truncated, "the FILES block header says 4096 bytes, 1000 remain", Bytes(1000));
  // Lengths inside a payload: a path longer than its block, stray bytes after the entries.
  Bytes entry(24);
  put_le(entry, 20, 0xfffffff0, 4);
  expect_block_refused({.kind = kFiles, .seq = 1, .count = 1, .payload = entry}, P::corrupt,
                       "entry 0: truncated: string of 4294967280 bytes, 0 left");
  entry = Bytes(24 + 5);
  expect_block_refused({.kind = kFiles, .seq = 1, .count = 1, .payload = entry}, P::corrupt,
                       "5 bytes after the last entry");
}

TEST(TraceFile, RulesOfTheFormat) {
  using P = ReadProblem;
  expect_block_refused({.kind = kOps, .seq = 2}, P::corrupt, "sequence number 2, expected 1");
  expect_block_refused({.kind = kMeta, .seq = 1, .payload = sample_meta_payload()}, P::corrupt,
                       "a second META block");
  expect_block_refused({.kind = kOps, .flags = 4, .seq = 1, .count = 0}, P::corrupt, "unknown flags 4");
  expect_block_refused({.kind = kOps, .codec = 7, .seq = 1, .count = 0}, P::corrupt, "unknown codec 7");
  expect_block_refused({.kind = kTrailer, .seq = 1, .payload = trailer_payload(1, 5)}, P::corrupt,
                       "the trailer counts 5 ops, the file has 0");
  expect_block_refused({.kind = kTrailer, .seq = 1, .payload = trailer_payload(3)}, P::corrupt,
                       "the trailer counts 3 blocks, the file has 1");

  Bytes f = file_header();
  append(f, block({.kind = kOps, .count = 0}));
  EXPECT_EQ(read(f).status.message, "corrupt OPS block 0 at byte 16: the first block is not META");

  // Bytes after the trailer: the capture ended (complete), but the file is not what was written.
  f = write_trace(sample(5, 1, 1));
  const std::size_t size = f.size();
  f.push_back(0);
  const ReadResult r = read(f);
  EXPECT_EQ(r.problem, P::corrupt);
  EXPECT_EQ(r.status.message, "unexpected bytes after the trailer at byte " + std::to_string(size));
  EXPECT_EQ(r.good_bytes, size);
  EXPECT_TRUE(r.trace.complete);
}

TEST(TraceFile, BadJsonIsRefused) {
  const json good = json::parse(sample_meta_payload());
  auto with = [&](const json::json_pointer& at, const json& v) {
    json j = good;
    json& parent = j.at(at.parent_pointer());
    if (!v.is_discarded()) j[at] = v;
    else if (parent.is_array()) parent.erase(std::stoul(at.back()));
    else parent.erase(at.back());
    return bytes_of(j.dump());
  };
  const json gone = json(json::value_t::discarded);
  const std::pair<Bytes, std::string> cases[] = {
      {bytes_of("{not json"), "parse error"},
      {bytes_of("[]"), "expected an object holding \"producer\""},
      {bytes_of("{}"), "\"producer\" missing"},
      {bytes_of("{\"producer\": \"\xff\"}"), "invalid string: ill-formed UTF-8"},
      {bytes_of(std::string(10000, '[') + std::string(10000, ']')), "JSON nested too deep"},
      {with("/window_start_ns"_json_pointer, -1), "\"window_start_ns\" is not an unsigned integer"},
      {with("/window_start_ns"_json_pointer, 1.5), "\"window_start_ns\" is not an unsigned integer"},
      {with("/mono_to_wall_ns"_json_pointer, 1e300), "\"mono_to_wall_ns\" is not a 64-bit signed integer"},
      {with("/mono_to_wall_ns"_json_pointer, json(uint64_t{1} << 63)), "not a 64-bit signed integer"},
      {with("/ring_bytes"_json_pointer, gone), "\"ring_bytes\" missing"},
      {with("/node"_json_pointer, {{"hex", "zz"}}), "\"node\": \"hex\" is not an even number"},
      {with("/node"_json_pointer, {{"hex", "abc"}}), "not an even number"},
      {with("/node"_json_pointer, {{"hex", "AB"}}), "lowercase"},
      {with("/node"_json_pointer, {{"hex", "ab"}, {"more", 1}}), "neither a string nor"},
      {with("/node"_json_pointer, 5), "\"node\" is neither a string nor"},
      {with("/job/labels/0"_json_pointer, {"a"}), "a job label is not [key, value]"},
      {with("/command/0"_json_pointer, nullptr), "a command argument is neither"},
      {with("/op_record/size"_json_pointer, 80), "op records are not 88 bytes"},
      {with("/op_record/byte_order"_json_pointer, "big"), "not little-endian"},
      {with("/op_record/fields/3/name"_json_pointer, "inode"), "op record field 3 is not ino"},
      {with("/op_record/fields/15"_json_pointer, gone), "op record fields differ"},
      {with("/alignment_mounts/0"_json_pointer, {"/x"}), "an alignment mount is not [point, block size]"},
      {with("/alignment_mounts/0"_json_pointer, {"/x", "4096"}), "not [point, block size]"},
      {with("/alignment_mounts/0"_json_pointer, {"/x", 1.5}), "not [point, block size]"},
      {with("/alignment_mounts/0"_json_pointer, {"/x", 0}), "not [point, block size]"},
      {with("/alignment_mounts/0"_json_pointer, {"/x", -2}), "not [point, block size]"},
      {with("/alignment_mounts/0"_json_pointer, {"/x", json(uint64_t{1} << 63)}),
       "not [point, block size]"},
      {with("/alignment_mounts/0"_json_pointer, {5, 4096}), "an alignment mount point is neither"},
      {with("/alignment_mounts"_json_pointer, 7), "\"alignment_mounts\""},
  };
  for (const auto& [payload, why] : cases) {
    SCOPED_TRACE(why);
    Bytes f = file_header();
    append(f, block({.kind = kMeta, .payload = payload}));
    const ReadResult r = read(f);
    EXPECT_EQ(r.problem, ReadProblem::corrupt);
    EXPECT_EQ(r.status.message.rfind("corrupt META block 0 at byte 16: ", 0), 0u) << r.status.message;
    EXPECT_NE(r.status.message.find(why), std::string::npos) << r.status.message;
  }
  // A file of ABI 13 and before has no mount table: its alignments are not known.
  {
    Bytes old = file_header(1, 1);
    json older = good;
    older.erase("alignment_mounts");
    append(old, block({.kind = kMeta, .payload = bytes_of(older.dump())}));
    append(old, block({.kind = kTrailer, .seq = 1, .payload = trailer_payload(1)}));
    const ReadResult r = read(old);
    EXPECT_OK(r.status);
    EXPECT_FALSE(r.trace.meta.alignment_mounts.has_value());
  }
  // Unknown keys are what a later minor version adds: ignored.
  json later = good;
  later["new_in_1_1"] = {{"x", 1}};
  Bytes f = file_header(1, 1);
  append(f, block({.kind = kMeta, .payload = bytes_of(later.dump())}));
  append(f, block({.kind = kTrailer, .seq = 1, .payload = trailer_payload(1)}));
  EXPECT_OK(read(f).status);
}

TEST(TraceFile, DamagedZstdFramesAreRefused) {
  const Trace t = sample(200, 2, 2);
  const Bytes f = write_trace(t);
  const auto blocks = blocks_of(f);
  Block ops{};
  for (const Block& b : blocks)
    if (b.kind == kOps && ops.kind == 0) ops = b;
  ASSERT_EQ(ops.codec, kZstd);
  const Bytes frame = payload_of(f, ops);
  // The block re-sealed (right checksums) around another payload or raw length.
  auto resealed = [&](const Bytes& payload, uint32_t count) {
    Bytes g(f.begin(), f.begin() + long(ops.offset));
    append(g, block({.kind = kOps, .codec = kZstd, .seq = uint32_t(get_le(f, ops.offset + 4, 4)),
                     .count = count, .payload = payload, .raw_len = count * int64_t(kOp)}));
    return read(g);
  };
  const ReadResult untouched = resealed(frame, ops.count);  // reads, then ends without trailer
  EXPECT_EQ(untouched.problem, ReadProblem::truncated);
  EXPECT_EQ(untouched.good_bytes, ops.end);
  Bytes bad = frame;
  bad[bad.size() / 2] ^= 0x55;
  for (const auto& [payload, count, why] :
       {std::tuple{bad, ops.count, std::string("zstd: ")},
        std::tuple{Bytes(frame.begin(), frame.end() - 1), ops.count, std::string("not one zstd frame")},
        std::tuple{Bytes(40, 0x42), ops.count, std::string("not one zstd frame")},
        std::tuple{frame, ops.count - 1, std::string("does not declare the raw length")}}) {
    const ReadResult r = resealed(payload, count);
    EXPECT_EQ(r.problem, ReadProblem::corrupt) << why;
    EXPECT_EQ(named_offset(r.status.message), int64_t(ops.offset));
    EXPECT_NE(r.status.message.find(why), std::string::npos) << r.status.message;
  }
}

TEST(TraceFile, DecompressionBombsAreRefusedAndNeverWritten) {
  // Zero records compress ~1000x: past 16 MiB of raw data the writer stores blocks as they are
  // so that its files always obey the reader's expansion rule.
  const std::vector<iolens_trace_record> zeros(kMaxOpsPerBlock);
  MemFile m;
  TraceWriter w;
  WriterOptions o;
  o.ops_per_block = kMaxOpsPerBlock;
  EXPECT_OK(w.open_fd(m.fd(), Meta{}, o));
  EXPECT_OK(w.add_ops(zeros));
  EXPECT_OK(w.flush());
  Bytes f = m.bytes();
  EXPECT_LT(f.size(), 100'000u);  // one compressed block
  EXPECT_OK(w.add_ops(zeros));
  EXPECT_OK(w.finish(Losses{}, 1));
  const Bytes g = m.bytes();
  const auto blocks = blocks_of(g);
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[1].codec, kZstd);
  EXPECT_EQ(blocks[2].codec, kStored);
  const ReadResult r = read(g);
  EXPECT_OK(r.status);
  EXPECT_EQ(r.trace.ops.size(), 2 * zeros.size());

  // A hostile second block claiming 16 MiB from 100 bytes is refused before it is inflated.
  const std::size_t at = f.size();
  append(f, block({.kind = kFiles, .codec = kZstd, .seq = 2, .count = 0, .payload = Bytes(100),
                   .raw_len = kMaxBlockRawBytes}));
  const ReadResult bomb = read(f);
  EXPECT_EQ(bomb.problem, ReadProblem::corrupt);
  EXPECT_EQ(bomb.status.message, "corrupt FILES block 2 at byte " + std::to_string(at) +
                                     ": expands the file beyond 64 times its size");
  EXPECT_EQ(bomb.trace.ops.size(), zeros.size());
}

TEST(TraceFile, FilesAndPipes) {
  const Trace t = sample(5000, 20, 5);
  const std::string path = testing::TempDir() + "/iolens_trace_file_test.iotrace";
  TraceWriter w;
  EXPECT_OK(w.open(path, t.meta));
  EXPECT_OK(w.add_ops(t.ops));
  for (const auto& f : t.files) EXPECT_OK(w.add_file(f));
  for (const auto& p : t.processes) EXPECT_OK(w.add_process(p));
  EXPECT_OK(w.finish(t.losses, t.meta.window_end_ns));
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(w.bytes_written(), uint64_t(st.st_size));
  ReadResult r = read_trace_file(path);
  EXPECT_OK(r.status);
  EXPECT_EQ(samples::difference(r.trace, t), "");
  unlink(path.c_str());

  r = read_trace_file(path);
  EXPECT_EQ(r.problem, ReadProblem::io);
  EXPECT_EQ(r.status.err, ENOENT);
  EXPECT_EQ(r.status.message, "cannot open trace file " + path + ": No such file or directory");

  // Streamed through a pipe: the reader takes blocks as they come.
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  std::thread writer([&] {
    TraceWriter pw;
    WriterOptions o;
    o.ops_per_block = 1000;
    EXPECT_OK(pw.open_fd(p[1], t.meta, o));
    for (const auto& f : t.files) EXPECT_OK(pw.add_file(f));
    for (const auto& q : t.processes) EXPECT_OK(pw.add_process(q));
    EXPECT_OK(pw.add_ops(t.ops));
    EXPECT_OK(pw.finish(t.losses, t.meta.window_end_ns));
    close(p[1]);
  });
  r = read_trace_fd(p[0]);
  writer.join();
  close(p[0]);
  EXPECT_OK(r.status);
  EXPECT_EQ(samples::difference(r.trace, t), "");
}

TEST(TraceFile, WriteErrorsAreStickyAndCarryErrno) {
  TraceWriter w;
  iolens::Status s = w.open("/nonexistent-dir/x.iotrace", Meta{});
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.err, ENOENT);
  EXPECT_EQ(w.add_ops(samples::ops(1)).message, s.message);

  TraceWriter full;
  s = full.open("/dev/full", Meta{});
  EXPECT_EQ(s.err, ENOSPC);
  EXPECT_EQ(s.message, "cannot write trace file /dev/full: No space left on device");
  EXPECT_EQ(full.finish(Losses{}, 0).err, ENOSPC);

  for (const WriterOptions& bad : {WriterOptions{.ops_per_block = 0}, WriterOptions{.ops_per_block = kMaxOpsPerBlock + 1},
                                   WriterOptions{.zstd_level = 0}}) {
    MemFile m;
    TraceWriter v;
    EXPECT_EQ(v.open_fd(m.fd(), Meta{}, bad).err, EINVAL);
    EXPECT_EQ(m.bytes().size(), 0u);  // refused before writing anything
  }
}

TEST(TraceFile, WriterMisuse) {
  TraceWriter w;
  EXPECT_EQ(w.add_ops(samples::ops(1)).message, "trace writer: not open");
  MemFile m;
  EXPECT_OK(w.open_fd(m.fd(), Meta{}));
  EXPECT_FALSE(w.open_fd(m.fd(), Meta{}).ok);
  FileName huge;
  huge.path.assign((1u << 20) + 1, 'x');
  EXPECT_EQ(w.add_file(huge).err, ENAMETOOLONG);
  EXPECT_OK(w.finish(Losses{}, 0));
  EXPECT_EQ(w.add_process(Process{}).message, "trace writer: descriptor " + std::to_string(m.fd()) + " already finished");
  EXPECT_FALSE(w.finish(Losses{}, 0).ok);
  EXPECT_OK(read(m.bytes()).status);  // the refused path left nothing behind
}

TEST(TraceFile, BytesWrittenGrowsBlockByBlock) {
  MemFile m;
  TraceWriter w;
  WriterOptions o;
  o.ops_per_block = 100;
  EXPECT_OK(w.open_fd(m.fd(), Meta{}, o));
  const uint64_t after_meta = w.bytes_written();
  EXPECT_EQ(after_meta, m.bytes().size());
  EXPECT_GT(after_meta, kFileHeader + kBlockHeader);
  EXPECT_OK(w.add_ops(samples::ops(99)));
  EXPECT_EQ(w.bytes_written(), after_meta);  // buffered
  EXPECT_OK(w.add_ops(samples::ops(1)));
  EXPECT_GT(w.bytes_written(), after_meta);  // a block of 100
  EXPECT_EQ(w.bytes_written(), m.bytes().size());
  EXPECT_OK(w.add_file(samples::files(1)[0]));
  EXPECT_OK(w.flush());
  EXPECT_EQ(w.bytes_written(), m.bytes().size());
  EXPECT_OK(w.finish(Losses{}, 0));
  EXPECT_EQ(w.bytes_written(), m.bytes().size());
}
