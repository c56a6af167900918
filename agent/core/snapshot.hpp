// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The value the exporters consume: a complete, self-contained picture of one traced run.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/block.hpp"
#include "core/counters.hpp"

namespace iolens::core {

/// Reads/writes on one kind of non-file descriptor (pipe, socket, char, ...).
struct OtherIo {
  uint64_t reads = 0, writes = 0, bytes_read = 0, bytes_written = 0;
};

struct ProcessSnapshot {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  int64_t start_ns = 0;               // wall clock
  std::optional<int64_t> end_ns;      // wall clock; empty while running
  std::string comm;
  std::string exe;
  std::optional<int> exit_code;       // 128+N when killed by signal N
  FileCounters totals{};              // sums over the process's file records (Fold::Sum fields),
                                      // the folded ones included
  uint64_t files = 0;                 // distinct files, the folded ones included
  std::map<std::string, OtherIo> other_io;
  uint64_t unlinks = 0, renames = 0;
  /// The process's "other files" record (Recorder::fold_to): the records folded to bound
  /// memory, combined (sums add, maxima max, first start, last end; timestamps relative to the
  /// run start like FileSnapshot's). Present iff folded_files > 0. The process's file rows
  /// plus this make its totals.
  std::optional<FileCounters> folded;
  uint64_t folded_files = 0;          // distinct files some of whose counters are in `folded`
  uint64_t folded_rename_sources = 0, folded_unlinks = 0;
  /// Only on a daemon job's "<other processes>" row (pid 0, Recorder::fold_processes_to): the
  /// exited processes folded into it to bound memory; everything above sums theirs.
  uint64_t folded_processes = 0;
};

struct FileSnapshot {
  std::string path;                 // absolute; "<unknown dev:ino>" if no name was received
  bool path_known = true;
  bool path_incomplete = false;     // the kernel's walk was cut (depth) or did not reach "/"
  uint64_t dev = 0;                 // st_dev as stat(2) reports it
  uint64_t ino = 0;
  uint32_t pid = 0;
  int64_t proc_start_ns = 0;        // wall clock
  FileCounters counters{};          // timestamps already relative to the run start
  uint64_t rename_sources = 0;
  uint64_t unlinks = 0;
  std::string renamed_to;
  /// Darshan's FILE_ALIGNMENT of the path (file_alignment.hpp: -1 when no mount matches);
  /// nullopt when the snapshot's maker had no mount table (a trace converted without one).
  std::optional<int64_t> file_alignment;
};

struct RunSnapshot {
  std::vector<std::string> command;
  std::optional<int> exit_code;
  int64_t start_ns = 0;  // wall clock
  int64_t end_ns = 0;
  std::vector<ProcessSnapshot> processes;  // by start time
  std::vector<FileSnapshot> files;         // by pid, then path
  std::map<std::string, uint64_t> lost;    // every drop, by cause; zeros included
  uint64_t folded_records = 0;             // file records folded to bound memory (fold_to)
  /// Distinct (dev, ino) that are only in processes' `folded` records, in no `files` row: the
  /// run's distinct files are those of `files` plus these.
  uint64_t folded_only_files = 0;
  /// (dev, ino), as stat(2) shows them, of every file some of whose counters are in a
  /// process's `folded` record, sorted: its rows, and its row across processes (by_file.hpp),
  /// lack that part.
  std::vector<std::pair<uint64_t, uint64_t>> folded_files;
  /// Kernel programs that are not attached and why (an optional one the kernel lacks or
  /// refused): what this run could not see. Empty when everything is attached.
  std::map<std::string, std::string> not_attached;
  /// The block layer per device: the run's processes' bios and requests (docs/counters.md
  /// "Block layer (ABI 7)"), by device number. Empty when the block programs did not attach.
  std::vector<BlockDeviceSnapshot> block;
  /// Which programs counted the run (docs/run-json.md#collector): "local" (iolens loaded its
  /// own) or "iolensd" (the node's daemon counted it); empty: not a run (a daemon's job).
  std::string collector;
  /// With "iolensd": the daemon's job id. With "local": why no daemon was used, if one was
  /// tried ("no iolensd at /run/iolens/iolens.sock", "--trace needs local programs", ...).
  std::string collector_note;
  /// With "local": the kernel's file records of the run (bpf/README.md "Two tiers of records"):
  /// how many the preallocated tier holds, how many were made, and how many of those went to
  /// the spill tier because it was full. All 0: not known (the daemon path, a daemon's job).
  struct KernelRecords {
    uint64_t preallocated = 0, made = 0, spilled = 0;
  } kernel_records;
  /// How calls were timed (docs/counters.md "Timing"): "exact" (each call's entry and exit),
  /// or "off" (no clock read: every time counter is 0, meaning not measured).
  std::string timing = "exact";
  /// Why the run is timed exactly although off was asked for (tracefs or the close tracepoint
  /// missing); empty otherwise.
  std::string timing_note;
  /// Counters the snapshot's source did not record (a trace of ABI 13 or before has no buffer
  /// flag and no open's mode: "mem_not_aligned", "mode"): 0 in the rows, said in the record's
  /// `not_recorded`, -1 in a Darshan log.
  std::vector<std::string> not_recorded;
};

}  // namespace iolens::core
