// SPDX-License-Identifier: Apache-2.0
// The control socket's requests (docs/control.md), answered between the loop's pieces of work, and
// the answers published for its front thread.
#include "daemon/daemon_impl.hpp"

namespace iolens::daemon {

nlohmann::json Daemon::status_json() {
  nlohmann::json j;
  j["version"] = IOLENS_VERSION;
  j["pid"] = getpid();
  j["uptime_s"] = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - start_mono_) / 1e9;
  j["cgroup_root"] = mount_;
  j["cgroup_filesystem"] = {
      {"mounted", cgroup_root_missing_since_ == 0},
      {"missing_s", cgroup_root_missing_since_ == 0
                        ? 0.0
                        : static_cast<double>(clock_ns(CLOCK_MONOTONIC) -
                                              cgroup_root_missing_since_) / 1e9},
      {"outages", cgroup_root_outages_},
      {"moves", cgroup_root_moves_}};
  j["watch_roots"] = sel_->watch_roots();
  j["syscall_hooks"] = loader_->syscall_hooks() ? "attached" : "detached";
  j["syscall_hooks_mode"] = opts_.syscall_hooks;
  j["timing"] = loader_->timing() == IOLENS_TIMING_OFF ? "off" : "exact";
  if (!loader_->timing_note().empty()) j["timing_note"] = loader_->timing_note();
  j["program_build"] = loader_->program_build();
  nlohmann::json progs = nlohmann::json::array();
  std::map<std::string, uint64_t> misses;
  for (const auto& [name, n] : loader_->program_misses()) misses[name] = n;
  for (const auto& p : loader_->programs())
    progs.push_back({{"name", p.name},
                     {"attached", p.attached},
                     {"error", p.error},
                     {"state", p.attached ? "attached" : p.error.empty() ? "detached" : "failed"},
                     {"misses", misses.count(p.name) ? misses[p.name] : 0}});
  j["programs"] = progs;
  const loader::Loader::SelectionEntries sel = loader_->selection_entries();
  j["maps"] = nlohmann::json::array(
      {{{"name", "files"},
        {"entries", drain_->files_in_map(loader_->file_records_created())},
        {"max", loader_->max_file_records()}},
       {{"name", "cgroup_sel"}, {"entries", sel.traced.size()}, {"max", IOLENS_CGROUP_TRACE_MAX}},
       {{"name", "cgroup_excl"}, {"entries", sel.excluded.size()},
        {"max", loader_->max_cgroup_exclusions()}},
       {{"name", "proc_lost"}, {"entries", proc_lost_entries_}, {"max", IOLENS_PROC_LOST_MAX}}});
  const loader::KernelStats kst = loader_->stats();
  nlohmann::json lost = kernel_losses(kst);
  const TableStats& ts = table_->stats();
  lost["decode_errors"] = decode_errors_;
  // Node-level: every loss is the node's; these are the ones no job was charged with.
  lost["unattributed"] = unattributed_losses(kst);
  lost["unattributed_records"] = ts.unattributed_records;
  lost["untraced_cgroups"] = untraced_cgroups_;
  lost["unexcluded_cgroups"] = unexcluded_cgroups_;
  // Selection entries waiting for room in their kernel map (retried as cgroups go away).
  j["selection_pending"] = sel_pending_.size();
  j["lost"] = lost;
  j["unattributed_processes"] = ts.unattributed_processes;
  j["unattributed_held"] = table_->unattributed_held();  // bounded; exited ones leave
  j["jobs"] = {{"live", table_->active_jobs()},
               {"closed", ts.jobs_closed},
               {"closed_without_event", jobs_closed_by_reconcile_},
               {"before_hooks", table_->jobs_unhooked()}};
  j["records"] = {{"files", table_->file_records()},
                  {"folded", ts.folded_records},
                  {"processes_folded", ts.folded_processes},
                  {"names_to_clear", names_to_clear_.size()},
                  {"names_cleared", names_cleared_},
                  {"names_cleared_by_hand", loader_->names_cleared_by_hand()}};
  j["drain"] = {{"last_us", last_drain_us_},
                {"count", drains_},
                {"incomplete", drain_failures_},
                {"pieces", drain_->pieces()},
                {"records_read", drain_->records_read()},
                {"records_unchanged", drain_->records_unchanged()},
                {"last_pieces", last_round_pieces_},
                {"last_longest_piece_us", last_round_longest_piece_ns_ / 1000}};
  j["output"] = {{"dir", writer_->dir()}, {"written", writer_->written()},
                 {"writing", writing_.size()}, {"waiting_for_save", held_.size()},
                 {"compression", cfg_.record_compression},
                 {"rotated", writer_->rotated()}, {"failed", writer_->failed()},
                 {"already_written", writer_->already_written()},
                 {"unidentified", writer_->unidentified()},
                 {"stale_temporaries_removed", writer_->stale_temporaries_removed()},
                 {"darshan_logs", {{"enabled", cfg_.darshan_logs},
                                   {"written", writer_->darshan_written()},
                                   {"failed", writer_->darshan_failed()}}}};
  const auto& pins = loader_->pin_state();
  j["restart"] = restart_;
  j["restart"]["note"] = pins.discarded;
  j["wall_clock"] = {{"mono_to_wall_ns", mono_to_wall_},
                     {"steps", wall_steps_.steps()},
                     {"stepped_ns", wall_steps_.stepped_ns()}};
  if (!wall_steps_.kept().empty())
    j["wall_clock"]["last_step"] = {
        {"seen_ns", wall_steps_.kept().back().at_mono + mono_to_wall_},
        {"step_ns", wall_steps_.kept().back().delta_ns}};
  j["state"] = {{"path", state_path()}, {"saves", checkpoints_}, {"failures", checkpoint_failures_},
                {"last_us", last_checkpoint_us_}, {"last_in_loop_us", last_save_loop_us_},
                {"last_gather_us", last_save_gather_us_},
                {"last_collect_us", last_save_collect_us_},
                {"under_way", save_under_way_.has_value()},
                {"marker_failures", marker_failures_}};
  if (metrics_)
    j["metrics"] = {{"listen", cfg_.metrics.listen}, {"ports", metrics_->ports()},
                    {"scrapes", metrics_->scrapes()}, {"jobs_retained", retained_.size()},
                    {"jobs_evicted", retained_evicted_}};
  else
    j["metrics"] = {{"listen", ""}};
  // How `status` and `jobs` were answered by the front thread: stale ones while the loop was
  // in a piece of work longer than control::kFreshAnswerWait.
  const AnswerBoard::Counts answers = board_.counts();
  const LivePages::Counts pages = live_pages_.counts();
  j["control"] = {{"answered_fresh", answers.fresh},
                  {"answered_stale", answers.stale},
                  {"oldest_stale_ms", answers.oldest_stale_ms},
                  // `job` of live jobs (docs/control.md#live-jobs)
                  {"live_pages", {{"snapshots", pages.snapshots},
                                  {"last_snapshot_ms", pages.last_snapshot_us / 1000},
                                  {"held_rows", pages.held_rows},
                                  {"pages_held", pages.pages_held},
                                  {"retry_busy", pages.retry_busy},
                                  {"retry_gone", pages.retry_gone}}}};
  j["runs"] = {{"root", run_cg_ ? run_cg_->rel() : ""}, {"live", runs_.size()},
               {"orphans", run_orphans_.size()}, {"started", runs_started_},
               {"ended", runs_ended_}, {"abandoned", runs_abandoned_},
               {"refused", runs_refused_}};
  return j;
}

CaptureRunner::Setting Daemon::capture_setting() const {
  CaptureRunner::Setting s;
  s.producer = std::string("iolens ") + IOLENS_VERSION;
  s.node = node_;
  s.cgroup_mount = mount_;
  s.timing_off = loader_->timing() == IOLENS_TIMING_OFF;
  s.alignment = records_->alignment();
  return s;
}

nlohmann::json Daemon::jobs_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [id, job] : table_->jobs()) list.push_back(table_->job_summary(*job));
  for (const auto& [id, c] : closed_) list.push_back(c.summary);
  for (const auto& [serial, w] : writing_) list.push_back(w.line);
  return {{"jobs", list}};
}

nlohmann::json Daemon::live_job_page(const Job& job, const PageRequest& r) {
  const std::string& id = job.identity.id;
  auto now = LivePages::Clock::now();
  // Pages of the snapshot held for the job: the front thread answers them unless it is past
  // its reuse window (or the front thread is not running).
  if (auto pages = live_pages_.usable(id, r.snapshot, now))
    return pages->page(r.offset, r.limit, now);
  if (r.snapshot) {
    live_pages_.count_retry(true);
    throw control::Retry("the snapshot " + std::to_string(*r.snapshot) + " of job " + id +
                             " that these pages come from is no longer held (a newer one was "
                             "taken, or it was not asked for in " +
                             std::to_string(live_pages_.policy().idle_drop / std::chrono::seconds(1)) +
                             " s): ask again from offset 0",
                         std::chrono::milliseconds(0));
  }
  if (const auto wait = live_pages_.wait_for_new(now); wait > LivePages::Clock::duration::zero()) {
    // Snapshots take a bounded share of the loop's time, and one being paged is kept a while:
    // the job's own held snapshot answers meanwhile, however old (its age_ms says so).
    if (auto pages = live_pages_.usable(id, std::nullopt, now, true))
      return pages->page(r.offset, r.limit, now);
    live_pages_.count_retry(false);
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wait);
    throw control::Retry("iolensd holds a snapshot of a live job that a client is reading, or "
                         "took one (" +
                             std::to_string(live_pages_.counts().last_snapshot_us / 1000) +
                             " ms long) a moment ago and spends at most 1/" +
                             std::to_string(live_pages_.policy().budget_factor) +
                             " of its time on them: ask again in " + std::to_string(ms.count()) +
                             " ms",
                         ms);
  }
  // The members the daemon adds to a job's record: its losses so far (the last drain's), as
  // its record will have them, and what a restart or late hooks left out.
  nlohmann::json members = nlohmann::json::object();
  job_losses(id, members);
  members["lost"]["untraced_cgroups"] = untraced_cgroups_of(job);
  annotate_restart(job, members);
  annotate_hooks(job, members);
  annotate_clock(job, members);
  // The one held goes first (freed on the writer's thread meanwhile): a big job's snapshot is
  // hundreds of MB, and two are never held at once.
  dispose_pages(live_pages_.release());
  const uint64_t serial = live_pages_.next_serial();
  // Darshan's mount table as the record writer's thread read it last (never read here).
  table_->set_alignment_table(records_->alignment());
  auto pages = table_->job_pages(job, IOLENS_VERSION, serial, std::move(members), now);
  const auto end = LivePages::Clock::now();
  nlohmann::json page = pages->page(r.offset, r.limit, end);
  dispose_pages(live_pages_.hold(pages, end - now, end));
  return page;
}

void Daemon::dispose_pages(std::shared_ptr<const JobPages> pages) {
  if (!pages) return;
  const std::size_t rows = pages->rows();
  records_->dispose(std::move(pages), rows);
}

void Daemon::drop_pages(const std::string& id) {
  dispose_pages(live_pages_.drop(id, LivePages::Clock::now()));
}

void Daemon::publish_answers(Publish which) {
  using std::chrono::seconds;
  const auto is_due = [&](const char* cmd, std::optional<AnswerBoard::Clock::duration> asked) {
    return which == Publish::all || board_.wanted(cmd) ||
           (which == Publish::wanted_or_due && board_.due(cmd, seconds(1), asked));
  };
  // `status` is a few map reads and counters: kept at most a second old (plus the loop's piece
  // of work) at every round's end. `jobs` sums every live job's records (Recorder::summary):
  // only while somebody asks (within a minute).
  if (is_due("status", std::nullopt)) {
    const auto at = AnswerBoard::Clock::now();
    board_.publish("status", status_json(), at);
  }
  if (is_due("jobs", seconds(60))) {
    const auto at = AnswerBoard::Clock::now();
    collect_written(false);  // a record on disk is a closed job's, as `jobs` in the loop says
    board_.publish("jobs", jobs_json(), at);
  }
  // The last capture's status: while a client polls it (`iolens capture` asks every half
  // second or so), and again at each round's end once a second old.
  if (captures_->last() && is_due("capture_status", seconds(60))) {
    const auto at = AnswerBoard::Clock::now();
    board_.publish("capture_status", captures_->status(clock_ns(CLOCK_MONOTONIC)), at);
  }
}

nlohmann::json Daemon::handle(const nlohmann::json& req, control::RequestContext& ctx) {
  const std::string cmd = req.value("cmd", "");
  if (cmd == "status") return status_json();
  if (cmd == "capture" || cmd == "capture_status" || cmd == "capture_stop") {
    const auto at = AnswerBoard::Clock::now();
    nlohmann::json out =
        cmd == "capture"
            ? captures_->start(req, ctx, *table_, capture_setting(), clock_ns(CLOCK_MONOTONIC))
            : captures_->status_or_stop(cmd == "capture_stop", req, ctx.peer.uid, geteuid(),
                                        *table_, clock_ns(CLOCK_MONOTONIC));
    // Each answers the capture's status: the front thread answers the next capture_status
    // with it.
    board_.publish("capture_status", out, at);
    return out;
  }
  if (cmd == "run") return start_run(req, ctx);
  if (cmd == "run_end") return end_run(req, ctx);
  // A record on disk is a closed job's (saved at the loop's next pass, not in the request).
  if (cmd == "jobs" || cmd == "job") collect_written(false);
  if (cmd == "jobs") return jobs_json();
  if (cmd == "job") {
    // One page per request (docs/control.md#job): the answer's size and the memory it holds
    // are bounded by the page.
    const PageRequest r = parse_page_request(req);
    const std::string& id = r.id;
    const uint64_t offset = r.offset, limit = r.limit;
    if (Job* job = table_->find(id)) return live_job_page(*job, r);
    if (std::any_of(writing_.begin(), writing_.end(),
                    [&](const auto& w) { return w.second.job->identity.id == id; }))
      // `iolens job` waits and asks again (a client paging the live job when it closed too).
      throw control::Retry("job " + id + " has ended and its record is being written: ask "
                           "again once `iolens jobs` no longer says it is writing",
                           std::chrono::milliseconds(500));
    const auto fd_it = req.find("fd");
    if (fd_it != req.end() && !fd_it->is_boolean())
      throw control::BadRequest("'fd' must be true or false");
    const bool hand_fd = fd_it != req.end() && fd_it->get<bool>();
    for (auto it = closed_.rbegin(); it != closed_.rend(); ++it) {
      if (it->first != id) continue;
      const std::string& path = it->second.path;
      if (path.empty())
        throw std::runtime_error("job " + id + " has ended and its record could not be written "
                                 "(iolens status: output.failed; the daemon's log says why)");
      const std::string unreadable =
          "job " + id + " has ended and its record " + path + " cannot be read (rotated away?)";
      // Through the output directory's descriptor, never following a link left at the name.
      uint64_t size = 0;
      control::UniqueFd rfd(
          core::open_regular_at(writer_->dir_fd(), path.substr(path.rfind('/') + 1), &size));
      if (rfd.get() < 0) throw std::runtime_error(unreadable);
      if (hand_fd && !ctx.reply_fd_allowed)
        throw std::runtime_error(
            "too many records handed to uid " + std::to_string(ctx.peer.uid) +
            " and not read by their clients yet: try again once they are read");
      if (hand_fd) {
        // The client reads the record itself: parsing a big one here held every other client
        // (6 s a request for a 163 MB record, bench/README.md).
        ctx.reply_fd = std::move(rfd);
        return {{"id", id}, {"state", "closed"}, {"record", path}, {"bytes", size}};
      }
      const auto too_big = [&](const std::string& how_big) {
        return std::runtime_error(
            "job " + id + " has ended and its record " + path + " is " + how_big +
            ": pages are cut here only from records up to " +
            std::to_string(kJobPageInLoopMaxBytes >> 20) +
            " MiB of JSON; ask with \"fd\": true for the record itself (iolens job does)");
      };
      if (size > kJobPageInLoopMaxBytes) throw too_big(std::to_string(size >> 20) + " MiB");
      // The descriptor already open: the file is read once, through it.
      if (auto bytes = core::read_all(rfd.get())) {
        // A compressed record is inflated only up to the bound the loop allows itself.
        std::string error;
        bool over = false;
        const auto text =
            core::text_of_record(std::move(*bytes), kJobPageInLoopMaxBytes, error, &over);
        if (over)
          throw too_big("over " + std::to_string(kJobPageInLoopMaxBytes >> 20) + " MiB of JSON");
        if (!text) throw std::runtime_error(unreadable + ": " + error);
        if (auto j = record_page(*text, offset, limit)) return *j;
      }
      throw std::runtime_error(unreadable);
    }
    throw std::runtime_error("no job '" + id + "' (see iolens jobs)");
  }
  throw control::BadRequest("unknown command '" + cmd + "'");
}

}  // namespace iolens::daemon
