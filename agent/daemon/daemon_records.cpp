// SPDX-License-Identifier: Apache-2.0
// Closed jobs' records: handed to the record writer once a save holds them, annotated with what
// the daemon knows of the job's losses, hooks, clock and restarts.
#include "daemon/daemon_impl.hpp"

namespace iolens::daemon {

/// A job that was live when this daemon took over from a dead one says how that went: what
/// the restart could not recover is counted in its `lost` (docs/daemon.md#restart-without-loss).
void Daemon::annotate_restart(const Job& job, nlohmann::json& record) {
  if (!restart_.value("resumed", false) ||
      (job.start_ns >= start_mono_ + mono_to_wall_ && !found_at_start_.count(job.identity.id)))
    return;
  record["restart"] = restart_;
  if (restart_.value("state", "") != "loaded") record["lost"]["restart_state_unusable"] = 1;
  if (auto it = restart_.find("lost"); it != restart_.end())
    for (auto l = it->begin(); l != it->end(); ++l) record["lost"]["restart_" + l.key()] = l.value();
}

void Daemon::annotate_clock(const Job& job, nlohmann::json& record) const {
  // The job's window in monotonic time (its wall times are by the clock now in force).
  const int64_t from = job.start_ns == 0 ? 0 : job.start_ns - mono_to_wall_;
  const std::optional<int64_t> to =
      job.end_ns ? std::optional<int64_t>(*job.end_ns - mono_to_wall_) : std::nullopt;
  const auto steps = wall_steps_.between(from, to);
  if (steps.empty()) return;
  nlohmann::json& out = record["wall_clock_steps"] = nlohmann::json::array();
  for (const auto& st : steps)
    out.push_back({{"seen_ns", st.at_mono + mono_to_wall_}, {"step_ns", st.delta_ns}});
}

void Daemon::annotate_hooks(const Job& job, nlohmann::json& record) const {
  record["lost"]["before_hooks"] = job.unhooked_since ? 1 : 0;
  if (!job.unhooked_since) return;
  auto wall = [&](uint64_t mono) { return static_cast<int64_t>(mono) + mono_to_wall_; };
  record["syscall_hooks"] = {
      {"first_selected_ns", wall(job.unhooked_since)},
      {"attached_ns", job.unhooked_until ? nlohmann::json(wall(job.unhooked_until))
                                         : nlohmann::json(nullptr)}};
}

void Daemon::job_losses(const std::string& id, nlohmann::json& out) {
  // The node's counts while the job was live: a non-zero one may concern another job.
  const loader::KernelStats now = loader_->stats();
  // A job the events of this drain opened, paged before note_new_jobs() saw it: from now (not
  // stored: note_new_jobs() sets its bases and labels).
  const auto b = job_loss_base_.find(id);
  const loader::KernelStats& base = b == job_loss_base_.end() ? now : b->second;
  loader::KernelStats delta{};
  for (size_t i = 0; i < now.size(); ++i) delta[i] = now[i] > base[i] ? now[i] - base[i] : 0;
  // (No decode base: a job this daemon loaded from a saved state, live since before it started.)
  const auto d = job_decode_base_.find(id);
  const uint64_t decode_errors =
      b == job_loss_base_.end() ? 0
                                : decode_errors_ - (d == job_decode_base_.end() ? 0 : d->second);
  nlohmann::json node = kernel_losses(delta);
  node["unattributed"] = unattributed_losses(delta);
  node["decode_errors"] = decode_errors;
  // The job's own: what the kernel charged its processes with (the last drain's values).
  nlohmann::json lost = nlohmann::json::object();
  const Job none;  // (every caller has its job; every cause is present all the same)
  const Job* job = table_->find(id);
  for (const auto& [cause, n] : own_losses_by_cause(job ? *job : none)) lost[cause] = n;
  // What no process can be charged with, while it was live: node-wide, may concern this job.
  lost["program_misses"] = delta[loader::kProgramMisses];
  lost["unattributed"] = node["unattributed"];
  lost["decode_errors"] = decode_errors;
  out["lost"] = std::move(lost);
  out["node_lost"] = std::move(node);
}

void Daemon::write_closed() {
  const std::set<std::pair<std::string, uint64_t>> ready = std::move(closable_);
  closable_.clear();
  for (const auto& [id, cgroup_id] : ready) {
    Job* job = table_->find(id);
    // Gone (written, or handed to a run's client), its id live again, or its cgroup made again
    // since (the next round that begins after that decides).
    if (!job || job->state != JobState::Closing || job->cgroup_id != cgroup_id) continue;
    // Its capture ends here, while its recorder can still name the files.
    captures_->job_ending(*table_, id);
    job->state = JobState::Closed;
    // Its series stay, final, for the grace period: the last values get scraped.
    if (metrics_) retain_metrics(*job);
    nlohmann::json overrides;
    job_losses(id, overrides);
    overrides["lost"]["untraced_cgroups"] = untraced_cgroups_of(*job);
    annotate_restart(*job, overrides);
    annotate_hooks(*job, overrides);
    annotate_clock(*job, overrides);
    submit_record(id, std::move(overrides), false);
    found_at_start_.erase(id);  // a later job of that id starts after this daemon
    job_loss_base_.erase(id);
    job_decode_base_.erase(id);
  }
}

void Daemon::submit_record(const std::string& id, nlohmann::json overrides, bool interrupted) {
  Job* job = table_->find(id);
  if (!job) return;
  // Its line in `iolens jobs` until written: what needs no snapshot (a big job's takes long).
  nlohmann::json line = job_head(*job);
  line["state"] = interrupted ? "interrupted" : "closed";
  line["writing"] = true;
  RecordJob r;
  r.basis = table_->record_basis();
  r.basis.alignment.reset();  // the writer's thread reads the mounts now (record_writer.cpp)
  r.overrides = std::move(overrides);
  r.interrupted = interrupted;
  r.darshan = cfg_.darshan_logs;
  r.node = node_;
  r.version = IOLENS_VERSION;
  drop_pages(id);
  r.job = table_->take(id);
  release_losses(*r.job);
  r.serial = ++record_serial_;
  writing_[r.serial] = Writing{std::move(line), r.job};
  // Not held: at a stop, which removes the state (nothing to wait for); and while its id is
  // live again or another job of its id waits to be written, as a save keeps one job an id
  // (JobTable::load), so no save would hold it.
  bool shadowed = table_->find(id) != nullptr;
  for (const auto& [serial, w] : writing_)
    shadowed = shadowed || (serial != r.serial && w.job && w.job->identity.id == id);
  if (interrupted || shadowed) {
    records_->submit(std::move(r));
    return;
  }
  held_.push_back(std::move(r));
  state_dirty_ = true;
}

void Daemon::collect_written(bool save) {
  for (RecordDone& d : records_->take_done()) {
    if (!d.darshan) spdlog::error("job {}: Darshan log: {}", d.id, d.darshan.message);
    if (!d.record) spdlog::error("job {}: {}", d.id, d.record.message);
    if (d.already)
      spdlog::info("job {}: written before the restart already: {}", d.id, d.path);
    else if (!d.path.empty())
      spdlog::info("job {} {}: {} ({:.1f} s)", d.id,
                   d.summary.value("state", "") == "interrupted" ? "written at stop (still running)"
                                                                 : "closed",
                   d.path, static_cast<double>(d.took_ns) / 1e9);
    auto w = writing_.find(d.serial);
    if (w != writing_.end()) {
      if (d.summary.is_null()) {  // the record could not even be made: its line stays
        d.summary = std::move(w->second.line);
        d.summary.erase("writing");
      }
      records_->dispose(std::move(w->second.job));
      writing_.erase(w);
    }
    closed_.push_back({d.id, Closed{std::move(d.summary), d.path}});
    while (closed_.size() > 256) closed_.pop_front();
    save_written_ = true;
  }
  // Saved once for all the jobs written (a save costs as much as the state is big), so that a
  // restart does not write them a second time. Not inside a request: its next pass does it.
  if (save && save_written_) {
    state_dirty_ = true;
    if (checkpoint(true)) save_written_ = false;  // else a save is under way: the next pass
  }
}

}  // namespace iolens::daemon
