// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Aggregation of everything the kernel sends into per-process and per-file records. Pure:
/// fed by decoded events and map snapshots (from the loader or from tests), no clock of its own.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/counters.hpp"
#include "core/events.hpp"
#include "core/snapshot.hpp"
#include "iolens_abi.h"

namespace iolens::core {

struct FileKey {
  uint32_t dev = 0;  // kernel dev_t
  uint64_t ino = 0;
  uint32_t gen = 0;  // inode generation; 0 = unknown (path-based stat)
  ProcKey proc;
  auto operator<=>(const FileKey&) const = default;
};

FileKey file_key_of(const iolens_file_key& k);

/// Clock base of a run: wall = monotonic + offset.
struct ClockBase {
  uint64_t start_mono_ns = 0;
  int64_t mono_to_wall_ns = 0;
};

class Recorder {
 public:
  /// `root_pid`: the traced command; `tracer_pid`: the iolens process that created it.
  Recorder(uint32_t root_pid, uint32_t tracer_pid);

  /// Turns a lexical path from a path-based call into a canonical one (realpath in the agent;
  /// nothing in tests). Used only for files never named from a struct file.
  using Canonicalizer = std::function<std::optional<std::string>(const std::string&)>;
  void set_canonicalizer(Canonicalizer c) { canonicalize_ = std::move(c); }

  void on_event(const Event& ev);
  /// A snapshot of a kernel record. `removed`: the loader deleted it from the kernel map after
  /// reading, so it is final for that incarnation; a later record of the same key is folded on.
  void on_file(const iolens_file_key& key, const FileCounters& c, bool removed);
  void on_other(const iolens_file_key& key, const FileCounters& c, bool removed);
  void add_lost(const std::string& cause, uint64_t n);
  void set_lost(const std::string& cause, uint64_t n);

  /// Whether the last thread of this process has exited (its kernel records are final).
  bool exited(const ProcKey& p) const;

  RunSnapshot snapshot(const ClockBase& clock) const;

  std::size_t file_records() const { return files_.size(); }

 private:
  struct Proc {
    ProcKey key;
    ProcKey parent;
    bool parent_known = false;
    std::string comm, exe;
    uint64_t end_ns = 0;
    std::optional<int32_t> wait_status;
    uint64_t unlinks = 0, renames = 0;
  };
  struct FileAcc {
    FileCounters folded = new_counters();
    bool has_folded = false;
    FileCounters live = new_counters();
    bool has_live = false;
    uint64_t rename_sources = 0, unlinks = 0;
    std::string renamed_to;
    FileCounters total() const;
  };
  struct Name {
    std::string path;
    bool canonical = false;  // walked from a struct file (vs. lexical from a lookup)
    bool incomplete = false;
  };
  /// A file incarnation: (dev, ino, generation). Inode numbers are reused after unlink.
  using FileId = std::tuple<uint32_t, uint64_t, uint32_t>;

  Proc& proc(const ProcKey& k);
  void accumulate(FileAcc& acc, const FileCounters& c, bool removed);
  void on_path(const PathEvent& p);
  void set_name(FileId id, std::string path, bool canonical, bool incomplete);
  const Name* name_of(const FileKey& k) const;

  Canonicalizer canonicalize_;
  uint32_t root_pid_;
  uint32_t tracer_pid_;
  std::map<ProcKey, Proc> procs_;
  std::map<FileKey, FileAcc> files_;
  std::map<std::pair<ProcKey, uint32_t>, FileAcc> others_;
  std::map<FileId, Name> names_;
  std::unordered_map<std::string, FileId> by_path_;
  std::map<std::string, uint64_t> lost_;
};

/// "pipe", "socket", ... for the S_IFMT >> 12 value the kernel stores in others' ino.
std::string other_kind_name(uint64_t ifmt_shifted);

/// 128+N for a signal, the exit code otherwise (shells' convention).
int exit_code_of_wait_status(int32_t status);

}  // namespace iolens::core
