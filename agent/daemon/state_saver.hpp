// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Encodes and writes the daemon's saved state on a thread of its own. Gathering the state
/// (JobTable::save) stays in the loop, where the table lives; encoding it (CBOR, zlib) and the
/// write, fsync and rename do not: for a 50,000-record job those took ~0.7 s of the ~1.5 s a save
/// kept the control socket waiting (docs/daemon.md#responsiveness). One save at a time.

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace iolens::daemon {

/// How one save went.
struct StateSaved {
  bool ok = false;
  int err = 0;             // errno of the step that failed
  std::string error;       // what failed, for the log
  uint64_t bytes = 0;      // written
  int64_t finished_ns = 0; // monotonic
  /// The recorders' blob buffers of the state by job id, emptied, their pages kept: the next
  /// gathering writes each job's blob into its own (JobTable::save) instead of faulting in
  /// fresh ones in the loop.
  std::map<std::string, std::vector<uint8_t>> buffers;
};

/// Writes `state` (encode_state) as `name` in `dir_fd` through `tmp_name` (created afresh),
/// fsync and rename: what the thread does with each save. Also used directly (tests).
StateSaved save_state_file(const nlohmann::json& state, int dir_fd, const char* tmp_name,
                           const char* name);

/// Moves the recorders' blob buffers out of a state by job id (emptied, capacity kept), leaving
/// empty binaries: what the saver hands back after writing it. A buffer much bigger than its
/// blob (a job that shrank: folded) is freed instead, so that what is kept is about the size
/// of the blobs.
std::map<std::string, std::vector<uint8_t>> take_blob_buffers(nlohmann::json& state);

class StateSaver {
 public:
  /// `dir_fd` (the checked state directory) must stay open while this object lives.
  StateSaver(int dir_fd, const char* tmp_name, const char* name);
  /// Finishes the save under way, then joins.
  ~StateSaver();
  StateSaver(const StateSaver&) = delete;
  StateSaver& operator=(const StateSaver&) = delete;

  /// Starts saving `state`. Only when !busy().
  void submit(nlohmann::json state);
  /// A save submitted and not yet taken back with take() (finished or not).
  bool busy() const;
  /// The result of the last save once it is finished (then !busy()), nothing before.
  std::optional<StateSaved> take();
  /// Blocks until the save under way, if any, is finished (take() then returns it).
  void wait();

 private:
  void run();

  const int dir_fd_;
  const char* const tmp_name_;
  const char* const name_;
  mutable std::mutex mu_;
  std::condition_variable wake_, done_;
  std::optional<nlohmann::json> queued_;
  std::optional<StateSaved> result_;
  bool working_ = false;
  bool stopping_ = false;
  int64_t last_trim_ns_ = 0;  // the thread's own: when it last gave memory back
  /// A state file this big (its compressed bytes) held tens of MB while it was gathered.
  static constexpr uint64_t kTrimAfterBytes = 1 << 20;
  static constexpr int64_t kTrimEveryNs = 60'000'000'000;
  std::thread thread_;  // last: started once everything above is
};

}  // namespace iolens::daemon
