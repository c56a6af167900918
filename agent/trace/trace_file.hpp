// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The native trace file (docs/trace-format.md). TraceWriter streams a capture into
/// self-contained, checksummed, zstd-compressed blocks, so that a file cut at any point still
/// holds every block before the cut; read_trace_file/read_trace_bytes give back the Trace, or
/// everything up to the first damage and where that damage starts.
/// No libbpf: the op records are the plain `struct iolens_trace_record` of bpf/iolens_abi.h.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "loader/status.hpp"
#include "trace/trace.hpp"

namespace iolens::trace {

/// The format version this build writes. It reads every minor version of the same major one
/// (a minor version only adds what an older reader may ignore); another major one is refused.
inline constexpr uint16_t kFormatMajor = 1;
inline constexpr uint16_t kFormatMinor = 0;

/// Limits of the format: a block's decompressed payload, the ops of one OPS block.
inline constexpr uint32_t kMaxBlockRawBytes = 16u << 20;
inline constexpr uint32_t kMaxOpsPerBlock = 131072;  // 11.5 MB of records

struct WriterOptions {
  uint32_t ops_per_block = 16384;  // an OPS block every this many ops, 1..kMaxOpsPerBlock
  bool compress = true;            // false: every block stored as is (codec 0), e.g. for tests
  int zstd_level = 3;              // 1 (fastest) .. 19
};

/// Writes one trace file. Not thread-safe. Every call returns the first error again once one
/// happened (a failed write leaves at most a partial block, which a reader sees as truncation).
class TraceWriter {
 public:
  TraceWriter();
  /// Closes a file opened by open(); writes nothing more: a file not finish()ed has no trailer
  /// and reads as truncated after its last complete block.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  /// A moved-from writer may only be destroyed or assigned to.
  TraceWriter(TraceWriter&&) noexcept;
  TraceWriter& operator=(TraceWriter&&) noexcept;

  /// Creates or truncates `path` (mode 0644 before the umask), writes the file header and the
  /// META block (`meta.window_end_ns` is not written: finish() gives it).
  Status open(const std::string& path, const Meta& meta, const WriterOptions& options = {});
  /// The same on a descriptor open for writing and blocking (a pipe, stdout); not closed here.
  Status open_fd(int fd, const Meta& meta, const WriterOptions& options = {});
  /// Where open_sink() hands each complete piece of the file (header, blocks) in order; an
  /// error it returns is the writer's first error.
  using Sink = std::function<Status(std::string_view bytes)>;
  /// The same into `sink` (e.g. a queue another thread writes out: iolensd's captures). No
  /// fsync: finish() hands the trailer over, and the sink's owner syncs.
  Status open_sink(Sink sink, const Meta& meta, const WriterOptions& options = {});

  /// Buffers ops; every `ops_per_block` ops an OPS block is written (after the names buffered
  /// so far, so that a cut file names the ops it holds).
  Status add_ops(std::span<const iolens_trace_record> ops);
  /// Buffers a file name or a process; written with the next OPS block, on flush(), or once
  /// about 1 MiB of them is buffered. Adding (dev, ino, gen) or (pid, pstart_ns) again later
  /// (e.g. a process with its exit filled in) is allowed: the reader keeps the latest.
  Status add_file(const FileName& file);
  Status add_process(const Process& process);
  /// Writes everything buffered, as complete blocks.
  Status flush();
  /// flush(), then the TRAILER block (losses, window end, counts of what was written), then
  /// fsync (for a regular file) and close (for a file open() opened). Nothing can be added after.
  Status finish(const Losses& losses, uint64_t window_end_ns);

  /// Bytes written to the file so far; at most one block of ops and ~1 MiB of names more are
  /// buffered (flush() first for an exact figure).
  uint64_t bytes_written() const;
  /// Ops accepted by add_ops (written or buffered).
  uint64_t ops_added() const;
  /// How many more ops complete the OPS block being filled (add_ops writes it then).
  uint32_t ops_until_block() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// What kind of problem stopped a read.
enum class ReadProblem {
  none,       // a clean, complete file
  io,         // the file could not be opened or read (status.err has the errno)
  foreign,    // not an iolens trace file (bad magic)
  too_new,    // another major version of the format
  truncated,  // the file ends inside a block, or before the trailer (status names where)
  corrupt,    // a checksum, length, compressed stream, payload or rule of the format is wrong
};

struct ReadResult {
  /// Everything of the blocks before the damage; `trace.complete` once the trailer was read.
  Trace trace;
  /// ok for a clean file; else one message naming the byte offset where the damage starts
  /// ("truncated at byte 12345: ...", "corrupt OPS block 3 at byte 12345: ...").
  Status status;
  /// Bytes up to the end of the last good block: the file's size when ok, else the offset the
  /// message names (the damage starts there).
  uint64_t good_bytes = 0;
  ReadProblem problem = ReadProblem::none;
};

/// Reads a trace file block by block (memory: the trace plus one block).
ReadResult read_trace_file(const std::string& path);
/// Reads from a descriptor open for reading (a pipe works too); not closed.
ReadResult read_trace_fd(int fd);
/// Reads a trace held in memory.
ReadResult read_trace_bytes(std::span<const uint8_t> bytes);

}  // namespace iolens::trace
