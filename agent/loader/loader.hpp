// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The only module that touches libbpf: loads and attaches the kernel programs, marks the traced
/// root, drains the maps and the ring buffer. Everything above it sees plain records.

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "iolens_abi.h"
#include "loader/status.hpp"

namespace iolens::loader {

struct Options {
  std::string btf_path = "/sys/kernel/btf/vmlinux";
  uint32_t max_file_records = 65536;   // kernel map size; more are drained/folded, not lost
  uint32_t max_other_records = 8192;
  uint32_t ring_bytes = 8u << 20;
  bool verbose = false;                // libbpf debug output
};

/// One program and whether it is attached; failures are reported, never hidden.
struct ProgramState {
  std::string name;
  bool attached = false;
  std::string error;
};

using KernelStats = std::array<uint64_t, IOLENS_NR_STATS>;

class Loader {
 public:
  /// Opens, loads and attaches every program. On failure returns nullptr and sets `status`.
  static std::unique_ptr<Loader> create(const Options& opts, Status& status);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts tracing `pid` (and, through fork, all it creates). Call before it runs the job.
  Status trace_process(pid_t pid);

  /// Hands every pending ring-buffer record to `sink`; never blocks. Returns records consumed.
  using EventSink = std::function<void(std::span<const uint8_t>)>;
  int consume_events(const EventSink& sink);

  /// Reads every record of the files (or others) map and hands it to `sink`; records that
  /// `remove` says to remove are deleted from the kernel map and reported with removed=true
  /// (RemoveLive ones with the value read atomically with the delete).
  using RecordSink =
      std::function<void(const iolens_file_key&, const iolens_file_counters&, bool removed)>;
  /// What a drain does with a record it read.
  enum class Disposition {
    Keep,        // leave it in the kernel
    RemoveFinal, // nothing can update it any more (its process exited): delete it, in batches
    RemoveLive,  // it may still be updated: read and delete it in one step
  };
  /// Asked for every record; `records_in_map` is how many the map held at this drain.
  using RemovePredicate = std::function<Disposition(
      const iolens_file_key&, const iolens_file_counters&, std::size_t records_in_map)>;
  Status drain_files(const RemovePredicate& remove, const RecordSink& sink);
  Status drain_others(const RemovePredicate& remove, const RecordSink& sink);

  /// Sums of the per-CPU drop/failure counters.
  KernelStats stats() const;
  /// One of them (cheap enough to poll every few milliseconds).
  uint64_t stat(uint32_t index) const;
  const std::vector<ProgramState>& programs() const { return programs_; }
  uint32_t max_file_records() const { return max_file_records_; }

 private:
  struct Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  Status drain(int map_fd, const RemovePredicate& remove, const RecordSink& sink);
  void delete_keys(int map_fd, const std::vector<iolens_file_key>& keys);

  std::unique_ptr<Impl> impl_;
  std::vector<ProgramState> programs_;
  uint32_t max_file_records_ = 0;
  bool batch_ok_ = true;  // cleared when the kernel refuses batched map reads
};

}  // namespace iolens::loader
