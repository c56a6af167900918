// SPDX-License-Identifier: Apache-2.0
// The daemon's drain (daemon/drain.hpp) against a fake kernel: a record map walked in batches
// from a token, as the kernel's hash map is, so that the rules (what is handed on, kept, taken,
// deferred until a save, or held for a process not known yet) and the walk in pieces are
// checked without privileges. The job table is the real one; each test knows the records it
// put in the fake map, and checks what the job holds against those.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <vector>

#include "daemon/drain.hpp"
#include "daemon/job_table.hpp"
#include "daemon_test_util.hpp"
#include "iolens_abi.h"
#include "loader/record_maps.hpp"

using namespace iolens;
using daemon::Drain;
using daemon::JobTable;
using testing_util::key;
using testing_util::mark;
using Disposition = loader::RecordMaps::Disposition;

namespace {

/// One kernel hash map: each record keeps the slot it was made in until it is deleted (a hash
/// map never resizes), and a walk goes through the slots in order, `batch` records at a time,
/// from a token that names the next slot, as BPF_MAP_LOOKUP_BATCH does.
class FakeMap {
 public:
  void put(const iolens_file_key& k, const iolens_file_counters& c) {
    for (auto& s : slots_)
      if (s && keys_equal(s->first, k)) {
        s->second = c;
        return;
      }
    slots_.emplace_back(std::make_pair(k, c));
  }
  std::optional<iolens_file_counters> get(const iolens_file_key& k) const {
    for (const auto& s : slots_)
      if (s && keys_equal(s->first, k)) return s->second;
    return std::nullopt;
  }
  bool erase(const iolens_file_key& k) {
    for (auto& s : slots_)
      if (s && keys_equal(s->first, k)) {
        s.reset();
        return true;
      }
    return false;
  }
  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& s : slots_) n += s.has_value();
    return n;
  }

  /// Loader::drain's contract (loader/record_maps.hpp): each record asked of `remove`, handed to
  /// `sink` unless skipped, RemoveLive asked again on the current value and taken in one step,
  /// final ones deleted at the walk's end or deferred; with `at` and a deadline, the walk
  /// stops after `batches_per_piece` batches.
  Status walk(const loader::RecordMaps::RemovePredicate& remove,
              const loader::RecordMaps::RecordSink& sink, std::vector<iolens_file_key>* deferred,
              loader::RecordMaps::WalkPosition* at, int64_t deadline_ns,
              std::size_t batches_per_piece) {
    ++walks;
    std::vector<iolens_file_key> final_keys, now_keys;
    std::size_t slot = at && at->resume ? at->token : 0;
    std::size_t batches = 0;
    while (slot < slots_.size()) {
      std::vector<std::pair<iolens_file_key, iolens_file_counters>> copy;
      for (; slot < slots_.size() && copy.size() < batch; ++slot)
        if (slots_[slot]) copy.push_back(*slots_[slot]);
      for (const auto& [k, v] : copy) {
        switch (remove(k, v)) {
          case Disposition::Keep:
            sink(k, widen(v), false);
            break;
          case Disposition::RemoveFinal:
            sink(k, widen(v), true);
            final_keys.push_back(k);
            break;
          case Disposition::RemoveFinalNow:
            sink(k, widen(v), true);
            now_keys.push_back(k);
            break;
          case Disposition::Skip:
            break;
          case Disposition::RemoveLive: {
            const std::optional<iolens_file_counters> cur = get(k);
            if (!cur) break;
            const Disposition again = remove(k, *cur);
            if (again == Disposition::RemoveLive) {
              erase(k);
              sink(k, widen(*cur), true);
            } else if (again != Disposition::Skip) {
              sink(k, widen(*cur), false);
            }
            break;
          }
        }
      }
      ++batches;
      if (at && deadline_ns > 0 && batches >= batches_per_piece && slot < slots_.size()) {
        at->resume = true;
        at->token = static_cast<uint32_t>(slot);
        for (const auto& k : now_keys) erase(k);
        if (deferred) deferred->insert(deferred->end(), final_keys.begin(), final_keys.end());
        else for (const auto& k : final_keys) erase(k);
        return Status::Ok();
      }
    }
    if (at) *at = {};
    for (const auto& k : now_keys) erase(k);
    if (deferred) deferred->insert(deferred->end(), final_keys.begin(), final_keys.end());
    else for (const auto& k : final_keys) erase(k);
    return Status::Ok();
  }

  std::size_t batch = 4;
  uint64_t walks = 0;

 private:
  static bool keys_equal(const iolens_file_key& a, const iolens_file_key& b) {
    return core::FileKeyEq{}(a, b);
  }
  static core::FileCounters widen(const iolens_file_counters& v) {
    return core::from_kernel(v, nullptr);
  }
  std::vector<std::optional<std::pair<iolens_file_key, iolens_file_counters>>> slots_;
};

/// The kernel behind the drain: the files and others maps, their creation count, the ring's
/// positions.
class FakeKernel : public loader::RecordMaps {
 public:
  explicit FakeKernel(uint32_t max_files) : max_files_(max_files) {}
  void put_file(const iolens_file_key& k, const iolens_file_counters& c) {
    if (!files.get(k)) ++created_;
    files.put(k, c);
  }
  Status drain_files(const RemovePredicate& remove, const RecordSink& sink,
                     std::vector<iolens_file_key>* deferred = nullptr, WalkPosition* at = nullptr,
                     int64_t deadline_ns = 0) override {
    return files.walk(remove, sink, deferred, at, deadline_ns, batches_per_piece);
  }
  Status drain_others(const RemovePredicate& remove, const RecordSink& sink,
                      std::vector<iolens_file_key>* deferred = nullptr,
                      WalkPosition* at = nullptr, int64_t deadline_ns = 0) override {
    return others.walk(remove, sink, deferred, at, deadline_ns, batches_per_piece);
  }
  void delete_files(const std::vector<iolens_file_key>& keys) override {
    for (const auto& k : keys) deleted_files += files.erase(k);
  }
  void delete_others(const std::vector<iolens_file_key>& keys) override {
    for (const auto& k : keys) deleted_others += others.erase(k);
  }
  uint32_t max_file_records() const override { return max_files_; }
  uint64_t file_records_created() const override { return created_; }
  uint64_t ring_producer_pos() const override { return produced; }
  uint64_t ring_consumer_pos() const override { return consumed; }

  FakeMap files, others;
  std::size_t batches_per_piece = 1;
  uint64_t produced = 0, consumed = 0;
  uint64_t deleted_files = 0, deleted_others = 0;

 private:
  uint32_t max_files_;
  uint64_t created_ = 0;
};

/// A file record of `bytes` read, closed (foldable) or still open, last used at `end_ns`.
iolens_file_counters read_record(uint64_t bytes, bool open = false, uint64_t end_ns = 1) {
  core::FileCounters c = core::new_counters();
  c.opens = 1;
  c.closes = open ? 0 : 1;
  c.open_fds = open ? 1 : 0;
  c.reads = 1;
  c.bytes_read = bytes;
  c.max_byte_read = static_cast<int64_t>(bytes) - 1;
  c.read_start_ns = 1;
  c.read_end_ns = end_ns;
  return c;
}

/// The name event the kernel sends with process `pid`'s first record of file `ino`.
core::PathEvent name_of(uint32_t pid, uint64_t ino) {
  return testing_util::name_event(pid, ino, "f" + std::to_string(ino) + std::string("\0data\0", 6));
}

constexpr int64_t kSecond = 1'000'000'000;

class DrainTest : public ::testing::Test {
 protected:
  static JobTable table() { return testing_util::one_job_table(); }
  static uint64_t bytes_read(JobTable& t) {
    const auto rec = t.job_json(*t.find("cgroup/dl/a"), "test");
    return rec["job"]["totals"]["bytes_read"].get<uint64_t>();
  }
  /// One whole round in pieces; returns its pieces.
  static uint32_t round(Drain& d, JobTable& t, Drain::Rules rules) {
    if (!rules.may_take_now) rules.may_take_now = [] { return true; };
    uint32_t pieces = 0;
    for (;;) {
      ++pieces;
      if (d.piece(t, rules).round_ended) return pieces;
      if (pieces > 10'000) ADD_FAILURE() << "the round never ended";
      if (pieces > 10'000) return pieces;
    }
  }
  static Drain::Rules in_pieces(int64_t now = kSecond) {
    Drain::Rules r;
    r.now = now;
    r.deadline_ns = 1;  // the fake stops after batches_per_piece batches
    return r;
  }
};

}  // namespace

TEST_F(DrainTest, ARoundInPiecesHandsEachLiveRecordOnOnceAndKeepsItInTheKernel) {
  FakeKernel k(1024);
  JobTable t = table();
  uint64_t total = 0;
  for (uint64_t ino = 1; ino <= 37; ++ino) {
    k.put_file(key(500, ino), read_record(ino * 100, true));
    if (ino != 37) t.on_event(name_of(500, ino));  // 37's name is not read yet
    total += ino * 100;
  }
  Drain d(k, false);
  const uint32_t pieces = round(d, t, in_pieces());
  EXPECT_EQ(pieces, 11u);  // 37 records, 4 a batch, a batch a piece; then the empty others
  EXPECT_EQ(d.records_read(), 37u);
  EXPECT_EQ(d.round().pieces, pieces);
  EXPECT_TRUE(d.round().walks.ok);
  EXPECT_EQ(k.files.size(), 37u);  // a live record stays, the map under half full
  EXPECT_EQ(bytes_read(t), total);
  EXPECT_EQ(d.removed_records(), 0u);
  // A second round finds the named ones unchanged: nothing handed on again. The record whose
  // name has not come is handed on at each round, until it has its name.
  round(d, t, in_pieces());
  EXPECT_EQ(d.records_read(), 74u);
  EXPECT_EQ(d.records_unchanged(), 36u);
  EXPECT_EQ(bytes_read(t), total);
  t.on_event(name_of(500, 37));
  round(d, t, in_pieces());
  EXPECT_EQ(d.records_unchanged(), 36u + 36u);
  const auto rec = t.job_json(*t.find("cgroup/dl/a"), "test");
  bool named = false;
  for (const auto& f : rec["files"])
    if (f["ino"] == 37u) named = f.value("path", "").find("f37") != std::string::npos;
  EXPECT_TRUE(named) << rec["files"].dump();
  round(d, t, in_pieces());
  EXPECT_EQ(d.records_unchanged(), 36u + 36u + 37u);
  // One grows: only it is handed on, and the job has its new count.
  k.put_file(key(500, 5), read_record(5 * 100 + 4096, true));
  round(d, t, in_pieces());
  EXPECT_EQ(d.records_unchanged(), 36u + 36u + 37u + 36u);
  EXPECT_EQ(bytes_read(t), total + 4096);
}

TEST_F(DrainTest, RecordsMadeAfterTheWalkPassedTheirSlotWaitForTheNextRound) {
  FakeKernel k(1024);
  JobTable t = table();
  for (uint64_t ino = 1; ino <= 8; ++ino) k.put_file(key(500, ino), read_record(10, true));
  Drain d(k, false);
  Drain::Rules r = in_pieces();
  r.may_take_now = [] { return true; };
  EXPECT_FALSE(d.piece(t, r).round_ended);  // slots 0-3 read
  k.put_file(key(500, 9), read_record(1000, true));  // a new slot at the end: read in this round
  while (!d.piece(t, r).round_ended) {
  }
  EXPECT_EQ(d.records_read(), 9u);
  EXPECT_EQ(bytes_read(t), 8 * 10 + 1000u);
}

TEST_F(DrainTest, AnExitedProcessesRecordsWaitInTheKernelForTheSaveThenLeave) {
  FakeKernel k(1024);
  JobTable t = table();
  t.on_event(core::ForkEvent{{600, 6000}, {500, 5000}, 1100, "worker", 1});
  for (uint64_t ino = 1; ino <= 6; ++ino) k.put_file(key(600, ino), read_record(ino));
  t.on_event(core::ExitEvent{{600, 6000}, 1200, 0});
  Drain d(k, false);
  round(d, t, in_pieces());
  // Reported final (handed over as removed), kept in the kernel until a save holds them.
  EXPECT_EQ(d.pending_files().size(), 6u);
  EXPECT_EQ(k.files.size(), 6u);
  EXPECT_EQ(d.files_in_map(k.file_records_created()), 6u);
  EXPECT_EQ(bytes_read(t), 21u);
  // Later rounds skip them: not handed on twice.
  round(d, t, in_pieces());
  EXPECT_EQ(bytes_read(t), 21u);
  EXPECT_EQ(d.records_read(), 6u);
  // A save held the first four: they leave the kernel, the other two wait for the next.
  d.released(4, 0);
  EXPECT_EQ(k.deleted_files, 4u);
  EXPECT_EQ(d.pending_files().size(), 2u);
  EXPECT_EQ(k.files.size(), 2u);
  round(d, t, in_pieces());
  EXPECT_EQ(bytes_read(t), 21u);
  d.released(2, 0);
  EXPECT_EQ(k.files.size(), 0u);
  EXPECT_EQ(d.files_in_map(k.file_records_created()), 0u);
}

TEST_F(DrainTest, AMapOverHalfFullTakesIdleRecordsOnlyOnceASaveMayHoldThem) {
  FakeKernel k(16);
  JobTable t = table();
  // 10 of 16: over half. Closed records, idle for seconds.
  uint64_t total = 0;
  for (uint64_t ino = 1; ino <= 10; ++ino) {
    k.put_file(key(500, ino), read_record(ino * 7, false, 1));
    total += ino * 7;
  }
  Drain d(k, false);
  Drain::Rules r = in_pieces(10 * kSecond);
  r.may_take_live = false;  // the last save did not hold the live counts
  r.may_take_now = [] { return true; };
  bool due = false;
  for (;;) {
    const Drain::Piece p = d.piece(t, r);
    due |= p.live_save_due;
    if (p.round_ended) break;
  }
  EXPECT_TRUE(due);
  EXPECT_TRUE(d.draining());
  EXPECT_EQ(k.files.size(), 10u);  // none taken
  EXPECT_EQ(bytes_read(t), total);
  // The marker cannot be made: still none taken.
  r.may_take_live = true;
  int asked = 0;
  r.may_take_now = [&] {
    ++asked;
    return false;
  };
  round(d, t, r);
  EXPECT_GT(asked, 0);
  EXPECT_EQ(k.files.size(), 10u);
  EXPECT_EQ(d.live_taken(), 0u);
  // Now it can: every idle record is taken, the job's counts unchanged by the move, and the
  // round that walked the whole map taking them ends the drain.
  r.may_take_now = [] { return true; };
  round(d, t, r);
  EXPECT_EQ(k.files.size(), 0u);
  EXPECT_EQ(d.removed_records(), 10u);
  // Each take counts (a live record's is decided twice: on the batch's copy, then on the
  // value read again), so that a save can tell whether any was taken since it was gathered.
  EXPECT_GE(d.live_taken(), 10u);
  EXPECT_EQ(bytes_read(t), total);
  EXPECT_FALSE(d.draining());
  EXPECT_EQ(d.files_untaken(k.file_records_created()), 0u);
}

TEST_F(DrainTest, AnOpenRecordStaysThoughTheMapIsFull) {
  FakeKernel k(8);
  JobTable t = table();
  for (uint64_t ino = 1; ino <= 7; ++ino) k.put_file(key(500, ino), read_record(1, ino == 3));
  Drain d(k, false);
  Drain::Rules r = in_pieces(10 * kSecond);
  r.may_take_live = true;
  round(d, t, r);
  ASSERT_EQ(k.files.size(), 1u);
  EXPECT_TRUE(k.files.get(key(500, 3)).has_value());  // still open: the kernel updates it
  EXPECT_EQ(bytes_read(t), 7u);
}

TEST_F(DrainTest, AnUnknownProcessesRecordsWaitForItsMarkThenGoAsUnattributed) {
  FakeKernel k(1024);
  JobTable t = table();
  k.put_file(key(700, 1), read_record(50, true));   // process 700: no event has placed it yet
  k.put_file(key(701, 1), read_record(60, true));
  k.produced = 4096;  // the ring written up to here as the records are first seen
  k.consumed = 1024;
  Drain d(k, false);
  Drain::Rules r = in_pieces(kSecond);
  round(d, t, r);
  d.forget_unknown(t, r.now);
  EXPECT_EQ(d.unknown_processes(), 2u);
  EXPECT_EQ(k.files.size(), 2u);
  // Its mark arrives: the job holds its record.
  t.on_mark(mark(700, 2));
  round(d, t, r);
  EXPECT_EQ(bytes_read(t), 50u);
  d.forget_unknown(t, r.now);
  EXPECT_EQ(d.unknown_processes(), 1u);
  // 701: 3 s later, but the ring not yet read past where it stood: kept.
  r.now = 5 * kSecond;
  round(d, t, r);
  EXPECT_TRUE(k.files.get(key(701, 1)).has_value());
  // Read past it: taken out (the daemon counts it unattributed); 700's stays, a live record.
  k.consumed = 4096;
  round(d, t, r);
  EXPECT_FALSE(k.files.get(key(701, 1)).has_value());
  EXPECT_TRUE(k.files.get(key(700, 1)).has_value());
  EXPECT_EQ(bytes_read(t), 50u);
  d.forget_unknown(t, r.now);
  EXPECT_EQ(d.unknown_processes(), 1u);  // forgotten after a minute, or once attributed
  d.forget_unknown(t, 70 * kSecond);
  EXPECT_EQ(d.unknown_processes(), 0u);
}

TEST_F(DrainTest, OthersAreWalkedAfterTheFilesAndTheirFinalRecordsDeferredToo) {
  FakeKernel k(1024);
  JobTable t = table();
  t.on_event(core::ForkEvent{{600, 6000}, {500, 5000}, 1100, "worker", 1});
  for (uint64_t ino = 1; ino <= 5; ++ino) {
    k.put_file(key(500, ino), read_record(1, true));
    k.others.put(key(600, 100 + ino), read_record(1));
  }
  t.on_event(core::ExitEvent{{600, 6000}, 1200, 0});
  Drain d(k, false);
  const uint32_t pieces = round(d, t, in_pieces());
  EXPECT_EQ(pieces, 4u);  // files: 2 batches, then others: 2 (each piece one batch)
  EXPECT_EQ(d.pending_others().size(), 5u);
  EXPECT_EQ(k.others.size(), 5u);
  d.released(0, 5);
  EXPECT_EQ(k.deleted_others, 5u);
  EXPECT_EQ(k.others.size(), 0u);
}

TEST_F(DrainTest, JobsClosingAsARoundBeginsAreListedWithIt) {
  FakeKernel k(1024);
  JobTable t = table();
  t.on_cgroup_removed(2, 2000);
  ASSERT_FALSE(t.closing().empty());
  Drain d(k, false);
  round(d, t, in_pieces());
  ASSERT_EQ(d.round().closing.size(), 1u);
  EXPECT_EQ(d.round().closing[0].first, "cgroup/dl/a");
  EXPECT_EQ(d.round().closing[0].second, 2u);
}

TEST_F(DrainTest, UnderPressureAnExitedProcessesRecordsLeaveAtOnceUnderTheMarker) {
  FakeKernel k(8);
  JobTable t = table();
  t.on_event(core::ForkEvent{{600, 6000}, {500, 5000}, 1100, "worker", 1});
  for (uint64_t ino = 1; ino <= 5; ++ino) k.put_file(key(600, ino), read_record(ino));
  t.on_event(core::ExitEvent{{600, 6000}, 1200, 0});
  Drain d(k, false);
  Drain::Rules r = in_pieces();
  // Over half full, but no save may hold live counts yet: they wait for the save, as usual.
  r.may_take_live = false;
  round(d, t, r);
  EXPECT_EQ(d.pending_files().size(), 5u);
  EXPECT_EQ(k.files.size(), 5u);
  d.released(5, 0);
  for (uint64_t ino = 1; ino <= 5; ++ino) k.put_file(key(600, 10 + ino), read_record(ino));
  // Now they may be taken: out at the walk's end, not kept for a save, and counted as taken.
  r.may_take_live = true;
  int marked = 0;
  r.may_take_now = [&] {
    ++marked;
    return true;
  };
  round(d, t, r);
  EXPECT_EQ(marked, 5);
  EXPECT_EQ(d.pending_files().size(), 0u);
  EXPECT_EQ(k.files.size(), 0u);
  EXPECT_EQ(d.live_taken(), 5u);
  EXPECT_EQ(bytes_read(t), 30u);
}
