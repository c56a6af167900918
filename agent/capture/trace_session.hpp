// SPDX-License-Identifier: Apache-2.0
#pragma once
/// One capture being written to a trace file: the kernel's per-call records, and, from the
/// recorder of the traced job, the names of the files they touch and the process tree. Shared by
/// `iolens run --trace` and iolensd's captures (`iolens capture`). No libbpf: the caller drains
/// the kernel's trace ring and hands the records in.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>

#include "core/recorder.hpp"
#include "loader/status.hpp"
#include "trace/trace_file.hpp"

namespace iolens::capture {

struct SessionOptions {
  uint64_t max_bytes = 0;  // stop adding ops once the file holds this much; 0 = no limit
  trace::WriterOptions writer;
};

class TraceSession {
 public:
  /// Writes the file header and META to `fd` (a file the caller opened, possibly received from
  /// a client); the descriptor is not closed here. nullptr and `error` on failure.
  static std::unique_ptr<TraceSession> open_fd(int fd, const trace::Meta& meta,
                                               const SessionOptions& options, Status& error);
  /// The same into `sink` (trace::TraceWriter::open_sink): iolensd queues the bytes for a
  /// writer thread (capture/async_output.hpp).
  static std::unique_ptr<TraceSession> open_sink(trace::TraceWriter::Sink sink,
                                                 const trace::Meta& meta,
                                                 const SessionOptions& options, Status& error);

  /// Records of the kernel's trace ring, in ring order. Those of calls that started before the
  /// window or ended after it (close_window) are left out: a capture starts and stops on a
  /// running job, and the kernel's switch cannot fall exactly on the window's edges. Once the
  /// file reaches max_bytes the rest are counted as dropped (Losses::size_limit) instead of
  /// written.
  void on_ops(std::span<const iolens_trace_record> ops);
  /// The window ends at `end_ns`: records of calls that end later are left out. Taken before
  /// the kernel stops tracing, so that every call inside the window is in the ring.
  void close_window(uint64_t end_ns) { window_end_ns_ = end_ns; }
  /// Adds the names of the files and the processes the ops so far refer to, as far as `rec`
  /// knows them, and writes them out with the buffered ops, so a file cut after this point
  /// names what it holds. Names arrive through the kernel's other ring, a little after the
  /// first call on a file: an op whose file is not named yet is named by a later sync().
  Status sync(const core::Recorder& rec);
  /// The last sync(), then the trailer: `losses` (the kernel's, for this capture) plus the
  /// agent's own (size limit), the window's end. `losses.produced` is the kernel's count while
  /// tracing was on; the records left out at the window's edges are taken off it, so that
  /// produced = records in the file + ring_full + size_limit. Files never named are listed in
  /// losses.notes. Nothing can be added afterwards.
  Status finish(const core::Recorder& rec, trace::Losses losses, uint64_t window_end_ns);

  uint64_t ops_written() const { return ops_written_; }
  uint64_t ops_dropped() const { return size_dropped_; }
  uint64_t bytes_written() const { return writer_.bytes_written(); }
  bool size_limit_reached() const { return size_dropped_ > 0; }
  uint64_t window_start_ns() const { return window_start_ns_; }
  /// The first error of the writer (e.g. the disk is full), if any: the capture should stop.
  const Status& error() const { return error_; }

 private:
  TraceSession() = default;
  /// A session whose writer `open` opens (on a descriptor or a sink).
  template <typename Open>
  static std::unique_ptr<TraceSession> make(const trace::Meta& meta,
                                            const SessionOptions& options, Status& error,
                                            Open open);
  Status keep(Status s);

  trace::TraceWriter writer_;
  SessionOptions options_;
  uint64_t window_start_ns_ = 0;
  uint64_t window_end_ns_ = UINT64_MAX;
  uint64_t outside_ = 0;  // records of calls across the window's edges, left out
  uint64_t ops_written_ = 0;
  uint64_t size_dropped_ = 0;
  Status error_;
  /// Files the ops named, not yet given a name in the file. Non-regular descriptors (pipes,
  /// sockets) are named by their kind at once.
  std::set<core::FileIdentity> unnamed_;
  std::set<core::FileIdentity> named_;
  /// Processes written, with the exit time they were written with (0 = running).
  std::map<core::ProcKey, uint64_t> written_procs_;
};

}  // namespace iolens::capture
