// SPDX-License-Identifier: Apache-2.0
// `iolens run` through iolensd (docs/run.md#through-iolensd): each run in a cgroup of its own, its
// job handed to its client.
#include "daemon/daemon_impl.hpp"

namespace iolens::daemon {

bool Daemon::setup_runs() {
  if (cfg_.runs.empty()) return true;
  std::string error;
  run_cg_ = RunCgroups::open(mount_, cfg_.runs, error);
  if (!run_cg_) {
    spdlog::error("{}", error);
    return false;
  }
  // Runs of an earlier daemon (a crash or a hand-over): nobody will end them. Empty ones go
  // now; populated ones stay jobs until their processes are gone (service_runs).
  for (const std::string& name : run_cg_->list()) {
    if (run_cg_->populated(name).value_or(true)) {
      run_orphans_.push_back(name);
      spdlog::info("run cgroup {}/{} left by an earlier iolensd: removed once empty", cfg_.runs,
                   name);
    } else if (Status s = run_cg_->remove(name); !s) {
      spdlog::warn("{}", s.message);
    }
  }
  spdlog::info("runs: iolens run may use {} (a cgroup per run)", cfg_.runs);
  return true;
}

nlohmann::json Daemon::start_run(const nlohmann::json& req, control::RequestContext& ctx) {
  if (!run_cg_)
    throw std::runtime_error("runs are off in this iolensd (no runs: in its configuration)");
  const auto pid_it = req.find("pid");
  if (pid_it == req.end() || !pid_it->is_number_unsigned() || pid_it->get<uint64_t>() == 0 ||
      pid_it->get<uint64_t>() > static_cast<uint64_t>(INT_MAX))
    throw control::BadRequest("'pid' must be a process id");
  const auto pid = static_cast<pid_t>(pid_it->get<uint64_t>());
  // The client's liveness: the read end of a pipe only the client can write. Its EOF ends the
  // run, so a killed client leaves no cgroup, job or hooks behind.
  struct stat st {};
  if (ctx.passed_fd.get() < 0 || fstat(ctx.passed_fd.get(), &st) != 0 || !S_ISFIFO(st.st_mode))
    throw control::BadRequest(
        "a run needs the read end of a pipe passed with the request (SCM_RIGHTS)" +
        (ctx.fd_refusal.empty() ? std::string() : ": " + ctx.fd_refusal));
  const std::string proc = "/proc/" + std::to_string(pid);
  const auto status = read_file(proc + "/status");
  if (!status) throw std::runtime_error("no process " + std::to_string(pid));
  if (std::string why = run_pid_refusal(*status, pid, ctx.peer.pid, ctx.peer.uid); !why.empty()) {
    ++runs_refused_;
    spdlog::warn("run refused for pid {} uid {}: {}", ctx.peer.pid, ctx.peer.uid, why);
    throw control::Denied(why);
  }
  std::size_t mine = 0;
  for (const auto& [id, r] : runs_) mine += r.uid == ctx.peer.uid;
  if (mine >= kMaxRunsPerUid || runs_.size() >= kMaxRuns) {
    ++runs_refused_;
    throw std::runtime_error(mine >= kMaxRunsPerUid
                                 ? "uid " + std::to_string(ctx.peer.uid) + " has " +
                                       std::to_string(mine) + " runs open (at most " +
                                       std::to_string(kMaxRunsPerUid) + ")"
                                 : "this iolensd has " + std::to_string(runs_.size()) +
                                       " runs open (at most " + std::to_string(kMaxRuns) + ")");
  }
  const auto cg_text = read_file(proc + "/cgroup");
  Run run;
  run.id = next_run_++;
  run.name = "run-" + std::to_string(getpid()) + "-" + std::to_string(run.id);
  run.path = cfg_.runs + "/" + run.name;
  run.uid = ctx.peer.uid;
  run.client = ctx.peer.pid;
  run.root = pid;
  run.origin = cg_text ? cgroup_v2_path(*cg_text).value_or("/") : "/";
  if (Status s = run_cg_->make(run.name, run.cgroup_id); !s) throw std::runtime_error(s.message);
  const auto now = static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC));
  // The job opens now, not when the mkdir event is read: the command must find it.
  apply(table_->on_cgroup(run.cgroup_id, run.path, true, now));
  const jobs::Classification c = sel_->classify(run.path);
  Job* job = c.identity ? table_->find(c.identity->id) : nullptr;
  const auto fail = [&](const std::string& why) {
    // Its mkdir event first, so that it cannot open the job again after the removal.
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
    run_cg_->remove(run.name);
    table_->on_cgroup_removed(run.cgroup_id, static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
    if (job) take_run_job(job->identity.id);
    throw std::runtime_error(why);
  };
  if (!job) fail("the run's cgroup " + run.path + " is not a job of this iolensd's rules");
  run.job_id = job->identity.id;
  // The same recorder as `iolens run` makes (the command's parent is the client). Without its
  // canonicalizer: realpath(3) of a name the command chose would run in this loop, as root,
  // and a path on the user's own FUSE file system whose server stops answering would stall
  // the daemon (docs/security.md). Names seen only by path stay as the kernel walked them, as
  // in every daemon job (docs/run.md).
  job->rec = std::make_unique<core::Recorder>(static_cast<uint32_t>(pid),
                                              static_cast<uint32_t>(ctx.peer.pid));
  if (auto u = status_uid(*status)) job->uid = *u;
  note_new_jobs();
  hooks_policy();  // the syscall hooks are attached before the command runs, never after
  if (!loader_->syscall_hooks()) fail("the syscall hooks could not be attached (see the log)");
  if (Status s = run_cg_->move(run.name, pid); !s) fail(s.message);
  // The move marked the command (the cgroup_attach_task program runs in that write); without
  // that program, the task iterator marks it. Its mark is read now, so the job has it.
  bool attach_prog = false;
  for (const auto& p : loader_->programs())
    if (p.name == "cgroup_attach_task") attach_prog = p.attached;
  if (!attach_prog)
    if (Status s = loader_->scan_tasks(); !s) spdlog::warn("{}", s.message);
  loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  if (job->procs.empty()) {
    run_cg_->evacuate(run.name, run.origin);
    fail("process " + std::to_string(pid) + " was moved into " + run.path +
         " but the kernel did not mark it traced");
  }
  run.alive = control::UniqueFd(ctx.passed_fd.release());
  ++runs_started_;
  spdlog::info("run {} for pid {} uid {}: command pid {} in {} (job {})", run.id, run.client,
               run.uid, pid, run.path, run.job_id);
  nlohmann::json answer = {{"run", run.id}, {"job", run.job_id}, {"cgroup", run.path}};
  runs_.emplace(run.id, std::move(run));
  return answer;
}

void Daemon::close_run_cgroup(Run& run) {
  if (const std::size_t left = run_cg_->evacuate(run.name, run.origin))
    spdlog::info("run {}: {} process(es) still running moved back to {} (not counted further)",
                 run.id, left, run.origin);
  if (Status s = run_cg_->remove(run.name); !s) spdlog::warn("run {}: {}", run.id, s.message);
  // Closed at once, not when the rmdir event is read (a lost event would leave it live).
  table_->on_cgroup_removed(run.cgroup_id, static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
  drain_soon_ = true;
}

void Daemon::take_run_job(const std::string& id) {
  Job* job = table_->find(id);
  if (!job) return;
  captures_->job_ending(*table_, id);
  job->state = JobState::Closed;
  if (metrics_) retain_metrics(*job);
  drop_pages(id);
  if (auto taken = table_->take(id)) release_losses(*taken);
  job_loss_base_.erase(id);
  job_decode_base_.erase(id);
  state_dirty_ = true;  // saved with the next checkpoint: a restart must not find it live
}

nlohmann::json Daemon::end_run(const nlohmann::json& req, control::RequestContext& ctx) {
  const auto id_it = req.find("run");
  if (id_it == req.end() || !id_it->is_number_unsigned())
    throw control::BadRequest("'run' must be a run id");
  const auto it = runs_.find(id_it->get<uint64_t>());
  if (it == runs_.end())
    throw std::runtime_error("no run " + id_it->dump() + " in this iolensd (restarted?)");
  Run& run = it->second;
  // Only the client that started it ends it: the same process (run ids start again at 1 in a
  // restarted daemon, so another client's id may name this run), of the same uid.
  if (ctx.peer.pid != run.client || (ctx.peer.uid != 0 && ctx.peer.uid != run.uid))
    throw control::Denied("run " + std::to_string(run.id) + " was started by pid " +
                          std::to_string(run.client) + " uid " + std::to_string(run.uid) +
                          ", not pid " + std::to_string(ctx.peer.pid) + " uid " +
                          std::to_string(ctx.peer.uid));
  // The counts go into a memfd the client made: writing it never waits for anyone (a pipe, or
  // a file on a FUSE mount, could stall the loop). Only shmem files answer F_GET_SEALS.
  const int out = ctx.passed_fd.get();
  if (out < 0 || fcntl(out, F_GET_SEALS) < 0)
    throw control::BadRequest("run_end needs a memfd passed with the request (SCM_RIGHTS)" +
                              (ctx.fd_refusal.empty() ? std::string() : ": " + ctx.fd_refusal));
  close_run_cgroup(run);
  // Not saved here: a save (and its fsync) would make the client wait; the loop saves soon.
  drain(false);
  drain(false);  // the first pass may have learnt of exits; the second moves their records out
  Job* job = table_->find(run.job_id);
  if (!job) {
    runs_.erase(it);
    throw std::runtime_error("the run's job " + run.job_id + " was already written");
  }
  const std::vector<uint8_t> blob = job->rec->save_bytes();
  std::size_t done = 0;
  while (done < blob.size()) {
    const ssize_t n = pwrite(out, blob.data() + done, blob.size() - done,
                             static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(n < 0 ? errno : ENOSPC);
      take_run_job(run.job_id);
      runs_.erase(it);
      throw std::runtime_error("cannot write the run's counts to the client's memfd: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  // The run's losses, as any job's (docs/counters.md#lost).
  nlohmann::json losses;
  job_losses(run.job_id, losses);
  nlohmann::json lost = std::move(losses["lost"]);
  lost["untraced_cgroups"] = untraced_cgroups_of(*job);
  nlohmann::json block = nlohmann::json::array();
  auto add_block = [&](uint32_t dev, const iolens_block_counters& c) {
    const auto* words = reinterpret_cast<const uint64_t*>(&c);
    block.push_back({{"dev", dev},
                     {"counters", std::vector<uint64_t>(words, words + sizeof(c) / 8)}});
  };
  for (const auto& [dev, c] : job->block_done) add_block(dev, c);
  for (const auto& [p, devs] : job->block_live)
    for (const auto& [dev, c] : devs) add_block(dev, c);
  nlohmann::json not_attached = nlohmann::json::object();
  for (const auto& p : loader_->programs())
    if (!p.attached) not_attached[p.name] = p.error.empty() ? "not attached" : p.error;
  nlohmann::json answer = {{"run", run.id},
                           {"job", run.job_id},
                           {"abi", IOLENS_ABI_VERSION},
                           {"recorder_bytes", blob.size()},
                           {"lost", lost},
                           {"block", block},
                           {"not_attached", not_attached},
                           {"timing", loader_->timing() == IOLENS_TIMING_OFF ? "off" : "exact"}};
  spdlog::info("run {} ended: job {} sent to pid {} ({} bytes)", run.id, run.job_id,
               ctx.peer.pid, blob.size());
  take_run_job(run.job_id);
  runs_.erase(it);
  ++runs_ended_;
  return answer;
}

void Daemon::service_runs() {
  for (auto it = runs_.begin(); it != runs_.end();) {
    Run& run = it->second;
    pollfd p{run.alive.get(), POLLIN, 0};
    if (poll(&p, 1, 0) <= 0 || p.revents == 0) {
      ++it;
      continue;
    }
    // The client is gone (its pipe's write end closed): nobody will ask for these counts. The
    // job is written as any job's, so nothing counted is lost.
    spdlog::warn("run {}: its client pid {} is gone; ending it (job {} written to {})", run.id,
                 run.client, run.job_id, cfg_.output_dir);
    close_run_cgroup(run);
    ++runs_abandoned_;
    it = runs_.erase(it);
  }
  const int64_t t = clock_ns(CLOCK_MONOTONIC);
  if (run_orphans_.empty() || t - orphans_checked_ < 1'000'000'000LL) return;
  orphans_checked_ = t;
  std::erase_if(run_orphans_, [&](const std::string& name) {
    if (run_cg_->populated(name).value_or(true)) return false;
    if (Status s = run_cg_->remove(name); !s) {
      spdlog::warn("{}", s.message);
      return false;
    }
    drain_soon_ = true;  // its rmdir event closes its job
    return true;
  });
}

}  // namespace iolens::daemon
