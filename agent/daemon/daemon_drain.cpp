// SPDX-License-Identifier: Apache-2.0
// The daemon's side of a drain: a piece of the round (drain.hpp has the rules), the block and loss
// records read at its end, folds over the limits and the names they make the kernel forget.
#include "daemon/daemon_impl.hpp"

namespace iolens::daemon {

void Daemon::drain(bool may_save) {
  while (drain_->round_open()) drain_piece(0, may_save);
  drain_piece(0, may_save);
}

bool Daemon::mark_pressure() {
  // Without the marker, a crash before the next save would lose what the taken records gained
  // since the last one with nobody told: while it cannot be made (the state directory full or
  // read-only), no live record is taken (the map fills, and the kernel counts what it cannot
  // store), and each failure is counted.
  if (pressure_marked_) return true;
  // Created afresh, never through a link left at its name.
  const int fd = core::create_fresh(state_dir_fd_, kMarkerName, 0600);
  if (fd < 0) {
    if (marker_failures_++ % 60 == 0)
      spdlog::error("cannot create the pressure-drain marker {}/{}: {}; no live record is "
                    "taken until it can be ({} failures)",
                    cfg_.state_dir, kMarkerName, std::strerror(errno), marker_failures_);
    return false;
  }
  close(fd);
  pressure_marked_ = true;
  return true;
}

bool Daemon::drain_piece(int64_t deadline_ns, bool may_save) {
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  // Within half the piece's time (a ring full of names takes seconds), the walk has the rest:
  // what is left waits for the next piece; a record whose process's mark is among it stays in
  // the kernel until the ring is read past it (Drain::unknown).
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); },
                          deadline_ns == 0 ? 0 : t0 + std::max<int64_t>(deadline_ns - t0, 0) / 2);
  learn_uids();  // processes that arrived with these events, while they are alive
  // A pressure drain reads and deletes live records in one step: a crash before the next saved
  // state would lose what they gained since the last one. The marker, made before the first of
  // them is taken (mark_pressure), lets the next daemon say so (docs/daemon.md). Saves leave
  // live counts out while no live record can be taken (checkpoint()): once one may be, none is
  // taken until a save that holds them is on disk, gathered at the end of this round (its walk
  // has just refreshed them; a save before it would hold none after a restart), so that what a
  // crash can lose is what they gained since. Asked at each piece: a save gathered between two
  // pieces may leave them out.
  Drain::Rules rules;
  rules.now = t0;
  rules.deadline_ns = deadline_ns;
  rules.may_take_live = last_save_live_ || always_live_saves_;
  rules.may_take_now = [this] { return mark_pressure(); };
  const Drain::Piece piece = drain_->piece(*table_, rules);
  if (piece.live_save_due) live_save_due_ = true;
  if (piece.moved) state_dirty_ = true;
  const Drain::Round& round = drain_->round();
  if (!piece.round_ended) {
    // Names and records come faster than rounds end (a job making long-named files: 18 MB/s of
    // names held three times over until the round's fold; 30,000 new files a second, a round's
    // worth folded at its end in one piece of up to 0.9 s): fold as soon as a piece leaves
    // names or records at twice their bounds and records have left the kernel since the last
    // fold (before, there is nothing new to fold). Twice: a fold sorts every record of the job,
    // and a job of 200,000 short-named files folded at every piece took twice the CPU
    // (bench/README.md "Memory: one bound"). File records only: processes fold after a whole walk.
    if (round.walks.ok && drain_->removed_records() != removed_at_fold_ &&
        (table_->names_over_limits(2) || table_->records_over_limits(2)))
      fold_over_limits(true);
    drain_->account(clock_ns(CLOCK_MONOTONIC) - t0);
    return false;
  }
  // The round has ended: every record was read (unless a walk failed part way).
  last_drain_complete_ = round.walks.ok;
  if (!last_drain_complete_ && drain_failures_++ % 60 == 0)
    spdlog::error("drain: {} ({} drains incomplete)", round.walks.message, drain_failures_);
  // A walk that failed part way left records unread: no job is written or folded from it.
  if (last_drain_complete_) closable_.insert(round.closing.begin(), round.closing.end());
  drain_blocks(t0);
  drain_proc_losses(t0);
  drain_->forget_unknown(*table_, t0);
  if (last_drain_complete_) fold_over_limits();
  // Not forced by a pressure drain: saving a big job's state at every one of them would cost more
  // than the drains (a burst of new files); the marker stays until the next save. Forced only
  // once, when live records may be taken and the last save did not hold their counts.
  // After a failed save (a full or read-only disk), tried again at most once a second: under
  // pressure drains come every few ms.
  if (may_save && t0 - last_save_failed_mono_ >= kSaveRetryEvery) checkpoint(live_save_due_);
  drain_->account(clock_ns(CLOCK_MONOTONIC) - t0);
  last_drain_ = clock_ns(CLOCK_MONOTONIC);
  last_drain_us_ = static_cast<uint64_t>(round.work_ns) / 1000;
  last_round_pieces_ = round.pieces;
  last_round_longest_piece_ns_ = round.longest_piece_ns;
  ++drains_;
  drain_hist_.observe(static_cast<double>(round.work_ns) / 1e9);
  return true;
}

void Daemon::drain_blocks(int64_t now) {
  // The block layer's (process, device) records: a live process's are read again at each
  // drain; an exited one's are added to its job once and deleted from the kernel (a crash before
  // the next saved state loses those, docs/daemon.md). Records of processes in no job (after
  // the grace period of unknown ones) and of jobs already written are deleted.
  // Requests whose completion never reached block_rq_complete: counted once old enough that
  // no device still works on them (the block layer's own timeout is 30 s), so the in-flight
  // map does not keep them (lost.block_untimed).
  if (now - last_inflight_sweep_ >= kInflightSweepEvery) {
    // Each request swept is charged to its process's job, as the kernel charges the untimed
    // ones it finds (lost.block_untimed).
    std::vector<iolens_block_key> owners;
    loader_->sweep_block_inflight(kInflightStaleAfter, &owners);
    uint64_t no_job = 0;
    for (const iolens_block_key& k : owners)
      if (!table_->add_loss({k.tgid, k.pstart_ns}, IOLENS_STAT_BLOCK_UNTIMED_SWEPT)) ++no_job;
    count_no_job(no_job);
    if (!owners.empty()) state_dirty_ = true;  // lost_done is saved
    last_inflight_sweep_ = now;
  }
  std::vector<iolens_block_key> gone;
  for (const auto& r : loader_->read_blocks()) {
    const core::ProcKey p{r.key.tgid, r.key.pstart_ns};
    if (!table_->attributed(p)) {
      if (drain_->unknown(p, now) == Drain::Disposition::RemoveLive)
        gone.push_back(r.key);
      continue;
    }
    const bool final = table_->exited(p);
    if (!table_->on_block(r.key, r.counters, final) || final) gone.push_back(r.key);
  }
  if (gone.empty()) return;
  loader_->delete_blocks(gone);
  state_dirty_ = true;
}

void Daemon::drain_proc_losses(int64_t now) {
  // Kept as block records are: a live process's entry is read again at each drain; an exited
  // one's is taken out of the kernel (read and deleted in one step: nothing charged meanwhile
  // is lost) and added to its job once. Those of processes in no job (after the grace period of
  // unknown ones) are counted as no job's (lost.unattributed).
  std::vector<iolens_proc_key> take;
  const auto entries = loader_->read_proc_losses();
  proc_lost_entries_ = entries.size();
  for (const auto& [key, v] : entries) {
    const core::ProcKey p{key.tgid, key.pstart_ns};
    if (!table_->attributed(p)) {
      if (drain_->unknown(p, now) == Drain::Disposition::RemoveLive)
        take.push_back(key);
    } else if (table_->exited(p) || !table_->on_proc_lost(key, v, false)) {
      take.push_back(key);  // (the second: a job not in the table; none expected)
    }
  }
  if (take.empty()) return;
  uint64_t no_job = 0;
  for (const auto& [key, v] : loader_->take_proc_losses(take))
    if (!table_->on_proc_lost(key, v, true)) no_job += losses_in(v);
  count_no_job(no_job);
  state_dirty_ = true;
}

void Daemon::count_no_job(uint64_t n) {
  if (n == 0) return;
  if (Status s = loader_->add_user_stat(IOLENS_STAT_LOSSES_NO_JOB, n); !s)
    spdlog::warn("could not count {} losses of processes in no job: {}", n, s.message);
}

void Daemon::release_losses(const Job& job) {
  // Its live processes' entries hold what its `lost` already counts: they are taken out, and
  // what was charged since the last drain is no job's. A process that goes on (a daemon a run
  // left behind) makes a new entry, no job's too.
  if (job.lost_live.empty()) return;
  std::vector<iolens_proc_key> keys;
  for (const auto& [p, n] : job.lost_live) keys.push_back({p.pid, 0, p.start_ns});
  uint64_t since = 0;
  for (const auto& [key, v] : loader_->take_proc_losses(keys)) {
    const auto& had = job.lost_live.at(core::ProcKey{key.tgid, key.pstart_ns});
    iolens_proc_lost d{};
    for (std::size_t i = 0; i < had.size(); ++i) d.n[i] = v.n[i] > had[i] ? v.n[i] - had[i] : 0;
    since += losses_in(d);
  }
  count_no_job(since);
}

void Daemon::fold_over_limits(bool within_round) {
  // the mount table the folds give the records' file_not_aligned with (Job::folded_not_aligned)
  table_->set_alignment_table(records_->alignment());
  // A record read from the map has had its name sent before; folded before that name is read,
  // it would be folded unnamed (into the wrong class) and the name, arriving after, kept for
  // no record. So the ring is read to its end first when a deadline left it behind (as it was
  // read at every piece before reads were cut).
  if (loader_->events_cut_short())
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  removed_at_fold_ = drain_->removed_records();
  std::vector<core::FileIdentity> forgotten;
  if (table_->enforce_limits(&forgotten, within_round) > 0) state_dirty_ = true;
  // Folded records' names, and evicted node-wide name copies.
  for (const auto& f : forgotten) names_to_clear_.push_back({f.ino, f.dev, f.gen});
}

void Daemon::clear_names(int64_t deadline_ns) {
  std::vector<loader::Loader::NameId> slice;
  while (!names_to_clear_.empty()) {
    // ~0.6 ms by the kernel's program, ~1 ms of system calls for 256 by hand (asked each
    // slice: the kernel may refuse the program in the middle of a pass); then the clock.
    const std::size_t slice_size =
        loader_->forgets_by_program() ? IOLENS_FORGET_NAMES_MAX : 256;
    const auto end = names_to_clear_.begin() +
                     static_cast<std::ptrdiff_t>(std::min(slice_size, names_to_clear_.size()));
    slice.assign(names_to_clear_.begin(), end);
    loader_->forget_names(slice);
    names_to_clear_.erase(names_to_clear_.begin(), end);
    names_cleared_ += slice.size();
    if (deadline_ns != 0 && clock_ns(CLOCK_MONOTONIC) >= deadline_ns) break;
  }
}

}  // namespace iolens::daemon
