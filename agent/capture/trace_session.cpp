// SPDX-License-Identifier: Apache-2.0
#include "capture/trace_session.hpp"

#include <algorithm>
#include <vector>

namespace iolens::capture {

template <typename Open>
std::unique_ptr<TraceSession> TraceSession::make(const trace::Meta& meta,
                                                 const SessionOptions& options, Status& error,
                                                 Open open) {
  std::unique_ptr<TraceSession> s(new TraceSession());
  s->options_ = options;
  s->window_start_ns_ = meta.window_start_ns;
  if (Status st = open(s->writer_); !st) {
    error = st;
    return nullptr;
  }
  return s;
}

std::unique_ptr<TraceSession> TraceSession::open_fd(int fd, const trace::Meta& meta,
                                                    const SessionOptions& options,
                                                    Status& error) {
  return make(meta, options, error,
              [&](trace::TraceWriter& w) { return w.open_fd(fd, meta, options.writer); });
}

std::unique_ptr<TraceSession> TraceSession::open_sink(trace::TraceWriter::Sink sink,
                                                      const trace::Meta& meta,
                                                      const SessionOptions& options,
                                                      Status& error) {
  return make(meta, options, error, [&](trace::TraceWriter& w) {
    return w.open_sink(std::move(sink), meta, options.writer);
  });
}

Status TraceSession::keep(Status s) {
  if (!s && error_) error_ = s;
  return s;
}

void TraceSession::on_ops(std::span<const iolens_trace_record> ops) {
  if (!error_) return;
  std::vector<iolens_trace_record> batch;
  batch.reserve(ops.size());
  for (const iolens_trace_record& op : ops) {
    if (op.start_ns < window_start_ns_ || op.end_ns > window_end_ns_) {
      ++outside_;
      continue;
    }
    // The limit is checked against what is on disk: the file can pass it by the one block of
    // ops that crossed it (docs/capture.md), whose ops were taken while it was under.
    if (size_dropped_ > 0 || (options_.max_bytes && writer_.bytes_written() >= options_.max_bytes)) {
      ++size_dropped_;
      continue;
    }
    batch.push_back(op);
    if (!(op.flags & IOLENS_TRACE_F_NOFILE)) {
      const core::FileIdentity id{op.ino, op.dev, op.gen};
      if (!named_.count(id)) unnamed_.insert(id);
    }
    // Ops that complete a block are handed over at once (the writer writes the block), so that
    // the next op is checked against the file with that block in it: a batch read from the
    // ring can hold many blocks' worth.
    if (options_.max_bytes && batch.size() == writer_.ops_until_block()) {
      if (!keep(writer_.add_ops(batch))) return;
      ops_written_ += batch.size();
      batch.clear();
    }
  }
  if (batch.empty()) return;
  if (keep(writer_.add_ops(batch))) ops_written_ += batch.size();
}

Status TraceSession::sync(const core::Recorder& rec) {
  if (!error_) return error_;
  for (auto it = unnamed_.begin(); it != unnamed_.end();) {
    trace::FileName f{it->ino, it->dev, it->gen, {}, 0};
    bool incomplete = false;
    if (it->dev == 0) {
      // Non-regular descriptors: the kernel stores their kind (S_IFMT >> 12) as the inode.
      f.path = "<" + core::other_kind_name(it->ino) + ">";
    } else if (const std::string* path = rec.file_name(*it, &incomplete)) {
      f.path = *path;
      f.flags = incomplete ? IOLENS_PATH_TRUNCATED : 0;
    } else {
      ++it;
      continue;
    }
    if (!keep(writer_.add_file(f))) return error_;
    named_.insert(*it);
    it = unnamed_.erase(it);
  }
  Status st;
  rec.visit_processes([&](const core::Recorder::ProcessView& p) {
    auto [w, fresh] = written_procs_.try_emplace(p.key, p.end_ns);
    if (!st || (!fresh && w->second == p.end_ns)) return;
    w->second = p.end_ns;
    trace::Process out;
    out.pid = p.key.pid;
    out.pstart_ns = p.key.start_ns;
    if (p.parent) {
      out.ppid = p.parent->pid;
      out.parent_pstart_ns = p.parent->start_ns;
    }
    out.comm = p.comm;
    out.exe = p.exe;
    if (p.end_ns) out.exit_ns = static_cast<int64_t>(p.end_ns);
    if (p.wait_status) out.exit_code = *p.wait_status;
    st = writer_.add_process(out);
  });
  if (!keep(st)) return error_;
  return keep(writer_.flush());
}

Status TraceSession::finish(const core::Recorder& rec, trace::Losses losses,
                            uint64_t window_end_ns) {
  sync(rec);
  losses.size_limit += size_dropped_;
  losses.produced -= std::min(outside_, losses.produced);
  if (!unnamed_.empty())
    losses.notes.push_back(std::to_string(unnamed_.size()) +
                           " file(s) of the ops were never named (their name event was lost or "
                           "came after the capture ended): they appear as dev:inode");
  if (!error_) return error_;
  return keep(writer_.finish(losses, window_end_ns));
}

}  // namespace iolens::capture
