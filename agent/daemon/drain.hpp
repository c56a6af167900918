// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The daemon's drain: rounds of walks of the kernel's record maps, each round in pieces
/// between which the loop answers its clients (docs/daemon.md#responsiveness). The rules are
/// here: which record is handed to the job table as it is, which stays in the kernel unread,
/// which is taken out (its process exited; or the map is over half full and the record idle),
/// and which waits for its process to be known. The kernel is behind loader::RecordMaps (a fake
/// in tests/unit/daemon_drain_test.cpp). The work that needs a whole round read (block records,
/// folds, the state save) and the pressure marker's file are the daemon's.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/counters.hpp"
#include "core/events.hpp"
#include "daemon/job_table.hpp"
#include "iolens_abi.h"
#include "loader/record_maps.hpp"
#include "loader/status.hpp"

namespace iolens::daemon {

class Drain {
 public:
  using Disposition = loader::RecordMaps::Disposition;
  /// `timing_off`: the kernel's records carry no end times; a record's idleness is then told by
  /// its counters unchanged since an earlier round (core::IdleClock).
  Drain(loader::RecordMaps& maps, bool timing_off) : maps_(maps), timing_off_(timing_off) {}

  /// At start: the kernel's creation count and the records its map holds then (an earlier
  /// daemon's, or made before this one's first drain), so that files_untaken() needs no walk.
  void set_baseline(uint64_t created, uint64_t in_map) {
    created_baseline_ = created > in_map ? created - in_map : 0;
  }

  struct Rules {
    int64_t now = 0;          // CLOCK_MONOTONIC as the piece began
    int64_t deadline_ns = 0;  // the walk stops between two batches once past it; 0: to the end
    /// Live records may be taken out of the kernel: a save on disk holds their counts (or every
    /// save keeps them). Else none is, and a map over half full asks for such a save.
    bool may_take_live = false;
    /// Asked before each record taken while it may still change, or taken before a save holds
    /// it (the daemon's pressure marker: a crash before the next save loses what it gained
    /// since the last one, and the next daemon must be able to say so). False: it stays.
    std::function<bool()> may_take_now;
  };
  struct Piece {
    bool round_ended = false;  // every record was read (or a walk failed): round() tells
    uint64_t moved = 0;  // records handed over as removed (taken, or final and deferred)
    /// Live records should be taken (the map is over half full) but may not be until a save
    /// holds their counts.
    bool live_save_due = false;
  };
  /// One piece of the open round (one begins if none is open; it notes the jobs closing then).
  Piece piece(JobTable& table, const Rules& rules);

  /// A drain round: one walk of the files and others maps, in pieces. A record present
  /// throughout is read once in it.
  struct Round {
    bool open = false;
    int64_t work_ns = 0;  // the loop's time in its pieces (account())
    uint32_t pieces = 0;
    int64_t longest_piece_ns = 0;
    bool files_done = false;
    loader::RecordMaps::WalkPosition files, others;
    Status walks = Status::Ok();  // or the first walk that failed part way (round incomplete)
    // Jobs closing when it began: their processes had exited before its first read, so once
    // it ends every record of theirs has been moved out (a job closing meanwhile may still
    // have records in the part already walked: it waits for the next round).
    std::vector<std::pair<std::string, uint64_t>> closing;  // (id, cgroup id)
    bool whole_drain = false;  // draining() as it began, live records takable throughout
  };
  /// The round under way, or the last one once it ended (until the next begins).
  const Round& round() const { return round_; }
  bool round_open() const { return round_.open; }
  /// Adds a piece's time (the daemon's work after the walk included) to the round's.
  void account(int64_t piece_ns) {
    round_.work_ns += piece_ns;
    round_.longest_piece_ns = std::max(round_.longest_piece_ns, piece_ns);
  }

  /// The map was found over half full: rounds that begin take every idle record they read
  /// until one has walked the whole map doing so.
  bool draining() const { return draining_; }

  /// Records reported final (their process exited) and kept in the kernel until a save holds
  /// them (docs/daemon.md#restart-without-loss): the save lists them, and once it is on disk
  /// released(n_files, n_others) deletes the first n of each from the kernel. Later pieces
  /// and rounds skip them meanwhile.
  const std::vector<iolens_file_key>& pending_files() const { return pending_files_; }
  const std::vector<iolens_file_key>& pending_others() const { return pending_others_; }
  void released(std::size_t n_files, std::size_t n_others);

  /// Records in the kernel's files map this daemon has not taken yet, from the kernel's own
  /// creation count: no walk (a status asked every 20 ms of a 50,000-record job spent a quarter
  /// of the loop's time counting keys when it walked).
  uint64_t files_untaken(uint64_t created) const {
    const uint64_t gone = created_baseline_ + removed_records_;
    return created > gone ? created - gone : 0;  // never wraps (a failed stat reads 0)
  }
  /// The entries the map holds: those, and the final records kept until the next save.
  uint64_t files_in_map(uint64_t created) const {
    return files_untaken(created) + pending_files_.size();
  }

  uint64_t removed_records() const { return removed_records_; }  // taken out of `files`
  /// Takes of records before a save held them (RemoveLive, RemoveFinalNow; a live record's take
  /// is decided twice, on the batch's copy and on the value read again): compared, to tell
  /// whether any was taken since a save was gathered.
  uint64_t live_taken() const { return live_taken_; }
  uint64_t records_read() const { return records_read_; }  // file records read (each read)
  uint64_t records_unchanged() const { return records_unchanged_; }  // of them, held as they are
  uint64_t pieces() const { return pieces_; }
  /// A record (of a map, of the block layer, a loss) of process `p`, which no job holds: Skip
  /// while its mark may still be coming (3 s from the first such record, and until the ring has
  /// been read past where the kernel had written it then), RemoveLive after (in no job, or its
  /// mark was lost: the caller discards it and counts it).
  Disposition unknown(const core::ProcKey& p, int64_t now);
  /// At a round's end, once every kind of record was read (the block and loss records too):
  /// forgets the unknown processes a job now holds, and those first seen over a minute ago.
  void forget_unknown(const JobTable& table, int64_t now);
  /// Processes with records and no job (waiting for their mark, or forgotten by neither).
  std::size_t unknown_processes() const { return unknown_since_.size(); }

 private:
  Disposition file_disposition(JobTable& table, const Rules& rules, std::size_t fill,
                               const iolens_file_key& k, const iolens_file_counters& c);

  loader::RecordMaps& maps_;
  const bool timing_off_;
  Round round_;
  bool draining_ = false;
  uint64_t created_baseline_ = 0;  // FILE_RECORDS_CREATED minus the entries at start
  uint64_t removed_records_ = 0;
  uint64_t live_taken_ = 0;
  uint64_t records_read_ = 0;
  uint64_t records_unchanged_ = 0;
  uint64_t pieces_ = 0;
  std::vector<iolens_file_key> pending_files_, pending_others_;
  // The same keys, for the walks until the deletion: they must not be reported again. Hashed:
  // every record of every round is looked up here (a DataLoader job's tens of thousands of
  // exited records held until the next save cost a tree of them ~15 key compares a record).
  std::unordered_set<iolens_file_key, core::FileKeyHash, core::FileKeyEq> pending_set_;
  // Processes with records but no job yet: when first seen, and the ring's producer position
  // then (their mark, if any, is before it).
  struct Unknown {
    int64_t since = 0;
    uint64_t ring_pos = 0;
  };
  std::map<core::ProcKey, Unknown> unknown_since_;
  core::IdleClock idle_clock_;        // timing off: when each evictable record last changed
  core::UnchangedRecords unchanged_;  // live records the table holds as they are in the map
};

}  // namespace iolens::daemon
