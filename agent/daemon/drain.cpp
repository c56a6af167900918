// SPDX-License-Identifier: Apache-2.0
#include "daemon/drain.hpp"

#include <time.h>

#include "core/clock.hpp"

namespace iolens::daemon {

using core::clock_ns;

/// A record of a process no event has attributed yet. Its mark may be in the ring behind the
/// drain (marked between the ring read and the map read, or not read yet by a read cut at its
/// deadline): kept for 3 s and until the ring is read past where it stood at first sight; a
/// process still unknown then is in no job (or its mark was dropped) and its records are
/// discarded, counted as unattributed.
Drain::Disposition Drain::unknown(const core::ProcKey& p, int64_t now) {
  auto [it, fresh] = unknown_since_.try_emplace(p, Unknown{now, maps_.ring_producer_pos()});
  if (fresh || now - it->second.since < 3'000'000'000LL) return Disposition::Skip;
  // The ring is read within deadlines: the mark may still be among the events unread, however
  // long ago the record was first seen. Kept until the ring has been read past where it stood
  // then.
  if (maps_.ring_consumer_pos() < it->second.ring_pos) return Disposition::Skip;
  return Disposition::RemoveLive;
}

Drain::Disposition Drain::file_disposition(JobTable& table, const Rules& rules, std::size_t fill,
                                           const iolens_file_key& k,
                                           const iolens_file_counters& c) {
  const core::ProcKey p{k.tgid, k.pstart_ns};
  const std::size_t max = maps_.max_file_records();
  if (pending_set_.count(k)) return Disposition::Skip;
  if (!table.attributed(p)) return unknown(p, rules.now);
  if (table.exited(p)) {
    // Kept in the kernel until a save holds it (up to the daemon's save interval), a final
    // record fills the map as a live one does: a DataLoader's workers re-forked every epoch
    // leave tens of thousands at each epoch's end, and the next epoch's records found the map
    // full (bench/README.md "The drain at the default sizes"). Under pressure it leaves at this
    // walk's end, as a taken live record does, under the same marker.
    if (fill * 2 > max && rules.may_take_live && rules.may_take_now()) {
      ++live_taken_;
      return Disposition::RemoveFinalNow;
    }
    return Disposition::RemoveFinal;
  }
  if (!rules.may_take_live ||
      !core::drain_evictable(k, c, fill, max, static_cast<uint64_t>(rules.now),
                             timing_off_ ? &idle_clock_ : nullptr))
    return Disposition::Keep;
  if (!rules.may_take_now()) return Disposition::Keep;  // before the loader takes it out
  ++live_taken_;
  return Disposition::RemoveLive;
}

Drain::Piece Drain::piece(JobTable& table, const Rules& rules) {
  Piece out;
  const uint32_t max = maps_.max_file_records();
  if (!round_.open) {
    round_ = Round{};
    round_.open = true;
    for (const std::string& id : table.closing())
      if (const Job* job = table.find(id)) round_.closing.emplace_back(id, job->cgroup_id);
    if (timing_off_) idle_clock_.begin();
    unchanged_.begin();
  }
  ++round_.pieces;
  ++pieces_;
  // The map's fill as the piece begins decides whether idle live records are taken, or the
  // drain under way (draining_) as the round began. A round that begins with the map over half
  // full, or after one that found it so, takes every idle record it reads, as if the map stayed
  // over half full to its end; until one has walked the whole map so (live records takable
  // throughout), the next does too. Taking only while the map stayed over half left it at the
  // half, and each round walked all of it to take the few thousand records made since the last
  // (at 10,000 new files a second: 15.6 s of CPU for 20 s of work in a Release build, each
  // record read about ten times; 11.2 s so: bench/README.md "Unchanged live records"). Then the
  // map refills for a while with only the interval's rounds.
  const std::size_t in_map = files_in_map(maps_.file_records_created());
  if (in_map * 2 > max) draining_ = true;
  if (round_.pieces == 1) round_.whole_drain = draining_;
  if (draining_ && !rules.may_take_live) {
    out.live_save_due = true;
    round_.whole_drain = false;
  }
  const std::size_t fill =
      round_.whole_drain ? std::max<std::size_t>(in_map, max / 2 + 1) : in_map;
  const std::size_t files_before = pending_files_.size();
  const std::size_t others_before = pending_others_.size();
  const bool walk_files = !round_.files_done;
  if (walk_files) {
    const Status read = maps_.drain_files(
        [&](const iolens_file_key& k, const iolens_file_counters& c) {
          return file_disposition(table, rules, fill, k, c);
        },
        [&](const iolens_file_key& k, const core::FileCounters& c, bool removed) {
          ++records_read_;
          if (removed) {
            unchanged_.removed(k);
            table.on_file(k, c, true);
            ++removed_records_;
            ++out.moved;
            return;
          }
          // A live record its job holds as it is: nothing to hand on (most of them, at every
          // round, while a job's records wait in the map to be taken).
          const uint64_t fp = core::UnchangedRecords::fingerprint(c);
          if (unchanged_.unchanged(k, fp)) {
            ++records_unchanged_;
            return;
          }
          if (table.on_file(k, c, false)) unchanged_.handed(k, fp);
        },
        &pending_files_, &round_.files, rules.deadline_ns);
    if (!read && round_.walks) round_.walks = read;
    if (!round_.files.resume) {
      round_.files_done = true;
      unchanged_.end();
      if (timing_off_) idle_clock_.end();
    }
  }
  // A piece that read no files batch reads at least one of others (the walk reads a batch before
  // it looks at the clock): else a piece whose events took longer than the deadline (a storm of
  // new processes) would never end the round.
  if (round_.files_done && (rules.deadline_ns == 0 || !walk_files ||
                            clock_ns(CLOCK_MONOTONIC) < rules.deadline_ns)) {
    const Status read = maps_.drain_others(
        [&](const iolens_file_key& k, const iolens_file_counters&) {
          const core::ProcKey p{k.tgid, k.pstart_ns};
          if (pending_set_.count(k)) return Disposition::Skip;
          if (!table.attributed(p)) return unknown(p, rules.now);
          return table.exited(p) ? Disposition::RemoveFinal : Disposition::Keep;
        },
        [&](const iolens_file_key& k, const core::FileCounters& c, bool removed) {
          table.on_other(k, c, removed);
          out.moved += removed;
        },
        &pending_others_, &round_.others, rules.deadline_ns);
    if (!read && round_.walks) round_.walks = read;
    if (!round_.others.resume) round_.open = false;  // both walks reached their end
  }
  // Reported final, kept in the kernel until a save holds them: later pieces and rounds skip
  // them. Only this piece's: the older ones are in the set already.
  pending_set_.insert(pending_files_.begin() + static_cast<std::ptrdiff_t>(files_before),
                      pending_files_.end());
  pending_set_.insert(pending_others_.begin() + static_cast<std::ptrdiff_t>(others_before),
                      pending_others_.end());
  if (round_.open) return out;
  // The round has ended: every record was read (unless a walk failed part way).
  out.round_ended = true;
  if (round_.whole_drain && round_.walks.ok) draining_ = false;
  return out;
}

void Drain::forget_unknown(const JobTable& table, int64_t now) {
  for (auto it = unknown_since_.begin(); it != unknown_since_.end();)
    it = table.attributed(it->first) || now - it->second.since > 60'000'000'000LL
             ? unknown_since_.erase(it)
             : std::next(it);
}

void Drain::released(std::size_t n_files, std::size_t n_others) {
  auto release = [](std::vector<iolens_file_key>& pending, std::size_t n, auto&& del) {
    n = std::min(n, pending.size());
    if (n == 0) return;
    if (n == pending.size()) {
      del(pending);
      pending.clear();
      return;
    }
    const std::vector<iolens_file_key> saved(pending.begin(),
                                             pending.begin() + static_cast<std::ptrdiff_t>(n));
    del(saved);
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
  };
  release(pending_files_, n_files,
          [&](const std::vector<iolens_file_key>& k) { maps_.delete_files(k); });
  release(pending_others_, n_others,
          [&](const std::vector<iolens_file_key>& k) { maps_.delete_others(k); });
  pending_set_.clear();
  pending_set_.insert(pending_files_.begin(), pending_files_.end());
  pending_set_.insert(pending_others_.begin(), pending_others_.end());
}

}  // namespace iolens::daemon
