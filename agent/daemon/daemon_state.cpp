// SPDX-License-Identifier: Apache-2.0
// Restart without loss (docs/daemon.md#restart-without-loss): the state saved, and read back by
// the next daemon; the wall clock followed.
#include "daemon/daemon_impl.hpp"

namespace iolens::daemon {

bool Daemon::checkpoint(bool force) {
  collect_saved();
  if (!state_dirty_ && !live_save_due_ && drain_->pending_files().empty() &&
      drain_->pending_others().empty())
    return true;
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  // Saving costs (a recorder holds ~700 bytes a record): at most every kCheckpointEvery,
  // unless the ring has run far enough that a replay could no longer reach the saved point.
  const uint64_t ring_run = loader_->ring_consumer_pos() - last_checkpoint_pos_;
  if (!force && t0 - last_checkpoint_mono_ < kCheckpointEvery &&
      ring_run < loader_->ring_size() / 2)
    return true;
  if (save_under_way_) return false;  // one at a time: what changed since waits for the next
  nlohmann::json st;
  st["format"] = 1;
  st["abi"] = IOLENS_ABI_VERSION;
  st["pins_created_wall_ns"] = loader_->pin_state().created_wall_ns;
  st["ring_pos"] = loader_->ring_consumer_pos();
  // By the offset the table is saved with (a step since the loop's last look waits for it).
  st["saved_wall_ns"] = clock_ns(CLOCK_MONOTONIC) + table_->clock().mono_to_wall_ns;
  st["kernel_lost"] = kernel_losses(loader_->stats());
  // Jobs whose record is being written are saved too, as closing: killed before the record is
  // written, the next daemon writes it; saved again once it is, they are not.
  std::vector<const Job*> handed_over;
  for (const auto& [serial, w] : writing_) handed_over.push_back(w.job.get());
  // The live records' counts are in the kernel's pinned map, which a restart reads again: they
  // are saved only while a drain may take live records out of it (the map over half full, or
  // rounds draining it since it was). A 50,000-record live job's save fell from 0.5-1.3 s of
  // the loop to ~60 ms (bench/README.md "The daemon's answers while it writes a record").
  const bool with_live =
      live_save_due_ || always_live_saves_ || drain_->draining() ||
      drain_->files_in_map(loader_->file_records_created()) * 2 > loader_->max_file_records();
  st["table"] = table_->save(handed_over, with_live, &spare_blobs_);
  spare_blobs_.clear();  // those of jobs gone since go
  st["pending_files"] = entries_binary(drain_->pending_files());
  st["pending_others"] = entries_binary(drain_->pending_others());
  static_assert(sizeof(loader::Loader::NameId) == 16, "docs/state-format.md: names_to_clear");
  st["names_to_clear"] = entries_binary(names_to_clear_);
  nlohmann::json bases = nlohmann::json::object();
  for (const auto& [id, b] : job_loss_base_) bases[id] = b;
  st["job_loss_base"] = bases;
  // What changes from here on is for the next save; this one's outcome is taken by
  // collect_saved(). A save without the live counts on its way: no live record is taken from
  // now (the one on disk may hold them, the next will not).
  save_under_way_ = SaveUnderWay{with_live,
                                 drain_->pending_files().size(),
                                 drain_->pending_others().size(),
                                 drain_->live_taken(),
                                 st["ring_pos"].get<uint64_t>(), t0, 0, record_serial_};
  if (!with_live) last_save_live_ = false;
  state_dirty_ = false;
  saver_->submit(std::move(st));
  save_under_way_->gather_ns = clock_ns(CLOCK_MONOTONIC) - t0;
  return true;
}

void Daemon::collect_saved() {
  if (!save_under_way_) return;
  std::optional<StateSaved> r = saver_->take();
  if (!r) return;  // still being written
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  spare_blobs_ = std::move(r->buffers);
  const SaveUnderWay s = *save_under_way_;
  save_under_way_.reset();
  if (!r->ok) {
    // Without a saved state, deleting the records would risk them: they stay in the kernel,
    // and what the save held is saved by the next (after a failure, at most once a second).
    state_dirty_ = true;
    last_save_failed_mono_ = t0;
    if (checkpoint_failures_++ % 60 == 0)
      spdlog::error("cannot save state to {}: {}", state_path(), r->error);
    // Records are not kept waiting on a state that cannot be saved: written now, a kill before
    // the next save may write one of them again (as before saves came first).
    release_held(true);
    return;
  }
  ++checkpoints_;
  saved_serial_ = std::max(saved_serial_, s.record_serial);
  release_held(false);
  // The next save is timed from this one's gathering, and the ring's run from what it holds:
  // only once it is on disk (after a failure, the next drain tries again).
  last_checkpoint_mono_ = s.gathered_mono;
  last_checkpoint_pos_ = s.ring_pos;
  if (s.with_live) {
    last_save_live_ = true;
    live_save_due_ = false;
  }
  // Every live record taken before the gathering is in the saved state: the marker's window
  // is closed, unless records were taken since (then the next save closes it).
  if (pressure_marked_ && drain_->live_taken() == s.live_taken) {
    unlinkat(state_dir_fd_, kMarkerName, 0);
    pressure_marked_ = false;
  }
  // The final records this save holds leave the kernel now; those reported final since wait
  // for the next save.
  drain_->released(s.pending_files, s.pending_others);
  last_checkpoint_us_ = static_cast<uint64_t>(r->finished_ns - s.gathered_mono) / 1000;
  last_save_gather_us_ = static_cast<uint64_t>(s.gather_ns) / 1000;
  last_save_collect_us_ = static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC) - t0) / 1000;
  last_save_loop_us_ = last_save_gather_us_ + last_save_collect_us_;
}

void Daemon::release_held(bool all) {
  while (!held_.empty() && (all || held_.front().serial <= saved_serial_)) {
    records_->submit(std::move(held_.front()));
    held_.pop_front();
  }
}

void Daemon::finish_save() {
  if (!save_under_way_) return;
  saver_->wait();
  collect_saved();
}

void Daemon::resume() {
  const auto& pins = loader_->pin_state();
  restart_["resumed"] = pins.resumed;
  restart_["at_ns"] = clock_ns(CLOCK_REALTIME);
  if (!pins.discarded.empty()) restart_["discarded"] = pins.discarded;
  if (!pins.resumed) {
    struct stat saved {};
    if (pins.discarded.empty() && fstatat(state_dir_fd_, kStateName, &saved, 0) == 0) {
      // An earlier daemon's state, but no pinned kernel state to continue: the pins were
      // removed, or the node restarted (bpffs does not survive it). What that daemon had not
      // written in records yet is gone: said, not silent.
      restart_["state"] = "unusable: " + state_path() + " of an earlier iolensd, but no pinned "
                          "kernel state in " + cfg_.pin_dir + " to continue (removed, or the "
                          "node restarted): its jobs' counts not yet in records are lost";
      spdlog::warn("{}", restart_["state"].get<std::string>());
    }
    unlinkat(state_dir_fd_, kStateName, 0);  // it described kernel state that no longer exists
    unlinkat(state_dir_fd_, kMarkerName, 0);
    return;
  }
  // The names the previous daemon had are not in its state (its node-wide cache of them can be
  // megabytes), whatever the state: the kernel sends each file's name again with its next new
  // record. Without this, a file named before a restart stayed "<unknown dev:ino>" in every
  // later job's record (what the replayed ring held aside).
  const std::size_t renamed = loader_->forget_all_names();
  restart_["names_to_send_again"] = renamed;
  nlohmann::json lost = nlohmann::json::object();
  const auto text = core::read_file_at(state_dir_fd_, kStateName);
  nlohmann::json st;
  std::string error;
  // decode_state checks every field this function reads, and JobTable::load the table's; the
  // catch is defence in depth: nothing in a file may keep the daemon from starting.
  try {
    if (!text) {
      restart_["state"] = "none: the previous daemon saved no state";
    } else if (!decode_state(*text, st, error)) {
      restart_["state"] = "corrupt: " + state_path() + " is not a usable saved state (" + error +
                          ")" + move_state_aside(error);
    } else if (st["pins_created_wall_ns"].get<uint64_t>() != pins.created_wall_ns) {
      restart_["state"] = "stale: saved for other kernel maps";
    } else if (!table_->load(st.at("table"), error)) {
      restart_["state"] = "corrupt: " + state_path() + " holds an unreadable job table (" + error +
                          ")" + move_state_aside(error);
    } else {
      restart_["state"] = "loaded";
      restart_["saved_wall_ns"] = st["saved_wall_ns"].get<int64_t>();
      // The syscall hooks since the save (before the ring's records are replayed against the
      // times they were detached): attached now, a window the save left open ends now (when
      // the dead daemon attached them is unknown: the later end); detached now while the save
      // had them attached, they count as detached from the save on.
      // By the saving daemon's clock: the table holds its offset, and its jobs' wall times by
      // it. A step of the wall clock since (while no daemon ran) moves them as a live daemon
      // would have, counted as seen at the save.
      const int64_t saved_mono =
          st["saved_wall_ns"].get<int64_t>() - table_->clock().mono_to_wall_ns;
      wall_steps_ = core::WallClockSteps(table_->clock().mono_to_wall_ns);
      if (const auto step = wall_steps_.observe(mono_to_wall_, std::max<int64_t>(saved_mono, 0))) {
        table_->rebase_wall(*step);
        restart_["wall_clock_stepped_ns"] = *step;
        spdlog::warn("the wall clock was stepped by {:+.3f} s since the saved state: the resumed "
                     "jobs' wall times are moved with it", static_cast<double>(*step) / 1e9);
      }
      if (loader_->syscall_hooks()) {
        // Attached from the dead daemon's link pins: bpffs stamped the pin when it attached
        // them, so a window the save left open ends then, not now (a job started after that
        // attach is not flagged). Kept within [the save, now] (a clock step).
        const int64_t now_mono = clock_ns(CLOCK_MONOTONIC);
        int64_t at = now_mono;
        if (const auto wall = loader_->syscall_hooks_pinned_wall_ns())
          at = std::clamp(*wall - mono_to_wall_, std::clamp<int64_t>(saved_mono, 0, now_mono),
                          now_mono);
        table_->hooks_attached(static_cast<uint64_t>(at));
      } else
        table_->hooks_detached(static_cast<uint64_t>(std::max<int64_t>(saved_mono, 0)));
      for (auto b = st["job_loss_base"].begin(); b != st["job_loss_base"].end(); ++b) {
        loader::KernelStats base{};  // a shorter array (an older version's) leaves zeros
        for (size_t i = 0; i < b.value().size() && i < base.size(); ++i)
          base[i] = b.value()[i].get<uint64_t>();
        job_loss_base_[b.key()] = base;
      }
      // Records the previous daemon held as final but had not deleted yet.
      loader_->delete_files(binary_entries<iolens_file_key>(st.at("pending_files")));
      loader_->delete_others(binary_entries<iolens_file_key>(st.at("pending_others")));
      // Names the previous daemon folded and had not had the kernel forget yet.
      if (st.contains("names_to_clear"))
        loader_->forget_names(binary_entries<loader::Loader::NameId>(st["names_to_clear"]));
      // Replay what the previous daemon consumed after it saved.
      const uint64_t pos = st["ring_pos"].get<uint64_t>();
      const uint64_t replay = loader_->ring_consumer_pos() - pos;
      if (Status s = loader_->rewind_ring(pos); s) {
        restart_["replayed_bytes"] = replay;
      } else {
        restart_["replay"] = s.message;
        lost["events_not_replayed"] = replay;
      }
      // Kernel drops while no daemon read the ring (it filled up): counted by the kernel.
      const nlohmann::json now = kernel_losses(loader_->stats());
      const nlohmann::json& before = st["kernel_lost"];
      for (auto v = now.begin(); v != now.end(); ++v) {
        const uint64_t was = before.value(v.key(), uint64_t{0});
        const uint64_t d = v.value().get<uint64_t>() - was;
        if (d) lost[v.key()] = d;
      }
    }
  } catch (const std::exception& e) {
    // Whatever was taken from the file is dropped: the jobs continue as after a corrupt state.
    new_table();
    job_loss_base_.clear();
    job_decode_base_.clear();
    lost = nlohmann::json::object();
    restart_.erase("saved_wall_ns");
    restart_.erase("replayed_bytes");
    restart_["state"] = "corrupt: " + state_path() + " could not be used (" + e.what() + ")" +
                        move_state_aside(e.what());
  }
  struct stat marker {};
  if (fstatat(state_dir_fd_, kMarkerName, &marker, AT_SYMLINK_NOFOLLOW) == 0) {
    lost["interrupted_pressure_drain"] = 1;
    always_live_saves_ = true;
    restart_["pressure_drain"] =
        "the previous daemon died while moving idle records out of the full kernel map; the "
        "counts those records gained since the state saved before it are lost";
    unlinkat(state_dir_fd_, kMarkerName, 0);
  }
  restart_["lost"] = lost;
  spdlog::info("resumed: state {}, {}", restart_.value("state", "?"), restart_.dump());
}

void Daemon::relearn_processes() {
  // The ring first: the scan below writes a mark per traced process into it, and a ring that
  // filled while no daemon read it would drop them (counted, but each dropped mark leaves a
  // process the saved state does not know, and its records, out of its job). What it holds is
  // read in order, as the loop would, with the job table the initial scan completed.
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  // Processes the saved state does not know (it was older, or absent, or the marks the dead
  // daemon read after its save could not be replayed) are relearned here; the hooks first if a
  // job is live, so that they count from their mark.
  hooks_policy();
  if (Status s = loader_->scan_tasks(true); !s) spdlog::warn("{}", s.message);
  // The scan's marks now (the iterator wrote them as it ran): a job they reopen (a process
  // rule's, marked at the scan's time) is then among the jobs found at start, whose records say
  // what the restart could not recover.
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
}

std::string Daemon::move_state_aside(const std::string& why) {
  // <unix seconds>.<9-digit nanoseconds>, never over another: two daemons that start within a
  // second (a crash loop) must both leave their file for inspection.
  std::string name;
  int moved = -1;
  for (int attempt = 0; attempt < 8 && moved != 0; ++attempt) {
    const int64_t now = clock_ns(CLOCK_REALTIME);
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%09lld", static_cast<long long>(now % 1000000000));
    name = kCorruptPrefix + std::to_string(now / 1000000000) + frac;
    moved = renameat2(state_dir_fd_, kStateName, state_dir_fd_, name.c_str(), RENAME_NOREPLACE);
    if (moved != 0 && (errno == EINVAL || errno == ENOSYS) &&
        linkat(state_dir_fd_, kStateName, state_dir_fd_, name.c_str(), 0) == 0)
      moved = unlinkat(state_dir_fd_, kStateName, 0);
    if (moved != 0 && errno != EEXIST) break;
  }
  if (moved != 0) {
    const int e = errno;
    spdlog::error("state file {} is unusable ({}) and cannot be moved aside: {}; starting "
                  "without it", state_path(), why, std::strerror(e));
    unlinkat(state_dir_fd_, kStateName, 0);
    return "";
  }
  spdlog::error("state file {} is unusable ({}): moved to {}/{} for inspection; starting without "
                "it (jobs it held are marked lost.restart_state_unusable)",
                state_path(), why, cfg_.state_dir, name);
  // The newest few are kept: a state that goes bad at every start must not fill the disk.
  std::vector<std::string> kept;
  const int list_fd = fcntl(state_dir_fd_, F_DUPFD_CLOEXEC, 0);
  if (DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr) {
    while (const dirent* e = readdir(d))
      if (std::strncmp(e->d_name, kCorruptPrefix, std::strlen(kCorruptPrefix)) == 0)
        kept.emplace_back(e->d_name);
    closedir(d);
  } else if (list_fd >= 0) {
    close(list_fd);
  }
  // Same-length decimal seconds (and fixed-width nanoseconds) sort as times; a shorter (older)
  // name sorts by length first, as does one of an older version (seconds only).
  std::sort(kept.begin(), kept.end(), [](const std::string& x, const std::string& y) {
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  for (std::size_t i = 0; i + kCorruptKept < kept.size(); ++i)
    unlinkat(state_dir_fd_, kept[i].c_str(), 0);
  return "; moved to " + name;
}

/// Cgroup events can be dropped (the ring full): what they would have said is checked against
/// the cgroup filesystem. A job whose cgroup is gone is closed; after a drop, the watched roots
/// are walked again for cgroups nobody named.
void Daemon::reconcile() {
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  const uint64_t dropped = loader_->stat(IOLENS_STAT_JOB_EVENTS_LOST);
  if (now - last_reconcile_ < 2'000'000'000LL && dropped == reconciled_job_events_lost_) return;
  last_reconcile_ = now;
  // While the cgroup filesystem is not mounted, every cgroup looks gone: nothing is closed for
  // that, and the walk below waits for it. Looked at first, every time (so that an outage or
  // a move is seen with no job live too, and the paths below are under the mount as it is).
  if (!cgroup_root_present()) return;
  auto not_at_path = [this](const std::pair<uint64_t, std::string>& g) {
    const Job* job = table_->find(g.second);
    return job && job->state == JobState::Live && job->cgroup_id == g.first &&
           inode_of(mount_ + job->identity.job_cgroup) != g.first;
  };
  std::vector<std::pair<uint64_t, std::string>> gone;
  for (const auto& [id, job] : table_->jobs())
    if (job->cgroup_id != 0 && not_at_path({job->cgroup_id, id})) gone.emplace_back(job->cgroup_id, id);
  if (!gone.empty()) {
    // Its removal event may only be unread: the kernel sends it before rmdir returns, but the
    // ring is read in pieces behind a burst of names (a loader job's), and the marks of the
    // job's last processes may be in it too. Closed now, the job would end early and those
    // processes' records go to no job (seen in e2e_daemon_soak). Read the ring (for at most a
    // drain piece: a full ring waits for the next look): what is still live after that, and
    // still not at its path with the filesystem still there (not unmounted and mounted again
    // between the looks), lost its event.
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); },
                            now + static_cast<int64_t>(cfg_.drain_piece_ms) * 1000000LL);
    if (loader_->events_cut_short()) return;
    const std::string mount = mount_;
    std::erase_if(gone, [&](const auto& g) { return !not_at_path(g); });
    if (!cgroup_root_present() || mount_ != mount) return;
  }
  for (const auto& [cgid, id] : gone) {
    spdlog::warn("job {}: its cgroup is gone but no removal event arrived ({} job events "
                 "dropped): closing it now", id, dropped);
    table_->on_cgroup_removed(cgid, static_cast<uint64_t>(now));
    if (Job* job = table_->find(id)) job->end_estimated = true;
    ++jobs_closed_by_reconcile_;
    drain_soon_ = true;
  }
  if (dropped != reconciled_job_events_lost_) {
    reconciled_job_events_lost_ = dropped;
    for (const auto& root : sel_->watch_roots())
      walk_cgroups(mount_, root, [&](uint64_t id, const std::string& rel) {
        if (table_->cgroup_path(id).empty())
          apply(table_->on_cgroup(id, rel, false, static_cast<uint64_t>(now)));
      });
  }
}

void Daemon::follow_wall_clock() {
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  const auto step = wall_steps_.observe(core::mono_to_wall_now(), now);
  if (!step) return;
  rebase_wall(*step);
  spdlog::warn("the wall clock was stepped by {:+.3f} s: wall times in records and metrics are "
               "by the new clock from now on, for jobs already live too ({} step(s) since start)",
               static_cast<double>(*step) / 1e9, wall_steps_.steps());
}

void Daemon::rebase_wall(int64_t delta_ns) {
  mono_to_wall_ += delta_ns;
  table_->rebase_wall(delta_ns);
  for (TraceGap& g : trace_gaps_) {
    g.from_wall += delta_ns;
    if (g.to_wall != 0) g.to_wall += delta_ns;
  }
  const double d = static_cast<double>(delta_ns) / 1e9;
  for (Retained& r : retained_) {
    r.metrics.start_s += d;
    if (r.metrics.end_s) *r.metrics.end_s += d;
  }
  // Closed jobs held for a save are still the loop's (not the writer's yet): their record is
  // made when they are handed over, by the clock as it is then. Those with the writer already
  // are as they were when handed over.
  for (RecordJob& r : held_) {
    Job& job = const_cast<Job&>(*r.job);  // only the loop holds it until submitted
    if (job.start_ns != 0) job.start_ns += delta_ns;
    if (job.end_ns) *job.end_ns += delta_ns;
    r.basis.mono_to_wall_ns += delta_ns;
    if (auto w = writing_.find(r.serial); w != writing_.end()) {
      w->second.line["start_ns"] = job.start_ns;
      if (job.end_ns) w->second.line["end_ns"] = *job.end_ns;
    }
  }
  for (const char* key : {"at_ns", "saved_wall_ns"})
    if (auto it = restart_.find(key); it != restart_.end() && it->is_number_integer())
      *it = it->get<int64_t>() + delta_ns;
  // The page of an ended job's series says when it ended: published anew at once.
  last_publish_mono_ = -1;
}

}  // namespace iolens::daemon
