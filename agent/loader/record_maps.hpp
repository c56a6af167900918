// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The kernel's (process, file) record maps as the daemon's drain sees them: walked in pieces,
/// each record kept, reported or taken out by the caller's rule. This is all the drain needs of
/// the kernel, so that its rules are unit-tested against a fake one
/// (tests/unit/daemon_drain_test.cpp); loader::Loader is the real one.

#include <cstdint>
#include <functional>
#include <vector>

#include "core/counters.hpp"
#include "iolens_abi.h"
#include "loader/status.hpp"

namespace iolens::loader {

class RecordMaps {
 public:
  virtual ~RecordMaps() = default;

  /// Reads every record of the files (or others) map and hands it to `sink`; records that
  /// `remove` says to remove are deleted from the kernel map and reported with removed=true
  /// (RemoveLive ones with the value read atomically with the delete).
  /// A record comes with its side entry's tally slots (core::FileCounters::more; 0 without one).
  using RecordSink =
      std::function<void(const iolens_file_key&, const core::FileCounters&, bool removed)>;
  /// What a drain does with a record it read.
  enum class Disposition {
    Keep,        // leave it in the kernel
    RemoveFinal, // nothing can update it any more (its process exited): delete it, in batches
    RemoveLive,  // it may still be updated: read and delete it in one step
    RemoveFinalNow,  // as RemoveFinal, but deleted at this walk's end even when the caller
                     // defers the others (a map too full to wait for a save)
    Skip,        // neither report nor delete (reported final and awaiting deletion; or a live
                 // record the caller reads only later)
  };
  /// Asked for every record. A drain reads the map a batch at a time and handles each batch
  /// before reading the next: its memory is one batch, whatever the map holds.
  using RemovePredicate =
      std::function<Disposition(const iolens_file_key&, const iolens_file_counters&)>;
  /// `deferred`: when given, RemoveFinal records are reported removed but their keys are
  /// appended here instead of being deleted, so the caller can save its state first and delete
  /// them after (delete_files/delete_others): a crash in between cannot lose or double them.
  ///
  /// A walk in pieces: with `at`, the drain stops between two batches once CLOCK_MONOTONIC
  /// passes `deadline_ns`, leaving in `*at` where the next drain given it goes on (`at->resume`
  /// false: the walk reached the map's end, or failed). Every record in the map from the
  /// first piece to the last is handed over exactly once; one created meanwhile may be or not.
  /// Without `at`, the whole map.
  struct WalkPosition {
    bool resume = false;  // a walk is under way: the next piece starts at `token`
    uint32_t token = 0;   // the kernel's batch token (a hash map's next bucket)
  };
  /// The walks. The default arguments are the same in every implementation (a default argument
  /// goes with the static type).
  virtual Status drain_files(const RemovePredicate& remove, const RecordSink& sink,
                             std::vector<iolens_file_key>* deferred = nullptr,
                             WalkPosition* at = nullptr, int64_t deadline_ns = 0) = 0;
  virtual Status drain_others(const RemovePredicate& remove, const RecordSink& sink,
                              std::vector<iolens_file_key>* deferred = nullptr,
                              WalkPosition* at = nullptr, int64_t deadline_ns = 0) = 0;
  /// Deletes records a walk reported final and deferred (after a save holds them).
  virtual void delete_files(const std::vector<iolens_file_key>& keys) = 0;
  virtual void delete_others(const std::vector<iolens_file_key>& keys) = 0;
  /// The files map's size, and how many records the kernel has made in it since it was
  /// created (IOLENS_STAT_FILE_RECORDS_CREATED): with the records taken out, how full it is
  /// without walking it.
  virtual uint32_t max_file_records() const = 0;
  virtual uint64_t file_records_created() const = 0;
  /// The event ring's positions (bytes since the ring was created): how far the kernel has
  /// written it, and how far it has been read. A process's mark is in the ring before any
  /// record of its own.
  virtual uint64_t ring_producer_pos() const = 0;
  virtual uint64_t ring_consumer_pos() const = 0;
};

}  // namespace iolens::loader
