// SPDX-License-Identifier: Apache-2.0
#include "daemon/job_table.hpp"

#include <algorithm>
#include <cstring>
#include <variant>

#include "core/block.hpp"
#include "core/by_file.hpp"
#include "daemon/job_metrics.hpp"
#include "daemon/job_record.hpp"
#include "exporters/json_report.hpp"
#include "iolens_abi.h"

namespace iolens::daemon {
namespace {

std::size_t event_bytes(const core::PathEvent& e) {
  return e.walk.size() + e.str1.size() + e.walk2.size() + e.str2.size() + e.comm.size();
}

bool under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          (root == "/" || path[root.size()] == '/'));
}

std::string parent_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

}  // namespace

std::string job_state_name(JobState s) {
  switch (s) {
    case JobState::Live: return "live";
    case JobState::Closing: return "closing";
    case JobState::Closed: return "closed";
  }
  return "unknown";
}

std::map<std::string, std::string> sub_labels(const jobs::Selector& sel, const std::string& path) {
  const jobs::Classification c = sel.classify(path);
  if (c.verdict != jobs::Verdict::Job || !c.identity) return {};
  return c.identity->sub;
}

JobTable::JobTable(jobs::Selector selector, jobs::Limits limits, int64_t mono_to_wall_ns)
    : selector_(std::move(selector)), limits_(limits), mono_to_wall_(mono_to_wall_ns) {}

void JobTable::set_file_classes(std::vector<jobs::FileClass> classes) {
  classes_ = std::move(classes);
}

std::size_t JobTable::fold_job(Job& job, std::size_t limit, std::size_t byte_limit,
                               std::vector<core::FileIdentity>* forgotten, bool procs) {
  core::Recorder& rec = *job.rec;
  const std::size_t max_procs = procs ? limits_.max_processes_per_job : SIZE_MAX;
  const std::size_t max_ids = procs ? limits_.max_folded_files_per_job : SIZE_MAX;
  // Both folds work only past their limits: nothing to set up below them.
  if (rec.file_records() <= limit && rec.processes() <= max_procs &&
      (byte_limit == SIZE_MAX || rec.name_bytes() <= byte_limit) &&
      (max_ids == SIZE_MAX || rec.folded_file_ids() <= max_ids))
    return 0;
  // What the folds take leaves the records the metrics classify: its sums go to the job's
  // folded classes and devices as each record goes. (Sums of every record before and after the
  // fold cost two walks of the whole job per fold: with names folded within drain pieces, a
  // 150,000-file job spent a quarter of the daemon's time there, in pieces of up to 1.2 s.)
  std::optional<FileClassifier> fc;
  if (classes_) fc.emplace(*classes_);
  std::optional<core::AlignmentLookup> align;
  if (alignment_) align.emplace(*alignment_);
  const core::Recorder::RecordVisitor moved = [&](const core::Recorder::RecordView& r) {
    if (fc) {
      add_record(job.folded_classes[fc->names()[fc->classify(r.path)]], r.counters);
      add_record(job.folded_devices[r.file.dev], r.counters);
    }
    job.folded_not_aligned += not_aligned_of(rec, r, align ? &*align : nullptr);
  };
  const core::Recorder::RecordVisitor* on_fold = fc || align ? &moved : nullptr;
  const std::size_t n = rec.fold_to(limit, forgotten, byte_limit, on_fold);
  const std::vector<core::ProcKey> gone =
      procs ? rec.fold_processes_to(max_procs, forgotten, on_fold, max_ids)
            : std::vector<core::ProcKey>{};
  // A folded process leaves every per-process map: that is what bounds them. A record of it
  // that still came (none should: only exited processes whose records are all final fold)
  // is counted as unattributed.
  for (const core::ProcKey& p : gone) {
    job.procs.erase(p);
    job.live.erase(p);
    job.proc_labels.erase(p);
    job.block_live.erase(p);
    job.lost_live.erase(p);  // (exited: the round's drain made it final before this fold)
    proc_job_.erase(p);
  }
  stats_.folded_processes += gone.size();
  return n;
}

core::ClockBase JobTable::clock() const { return core::ClockBase{0, mono_to_wall_}; }

void JobTable::rebase_wall(int64_t delta_ns) {
  mono_to_wall_ += delta_ns;
  for (auto& [id, job] : jobs_) {
    if (job->start_ns != 0) job->start_ns += delta_ns;  // 0: not known yet
    if (job->end_ns) *job->end_ns += delta_ns;
  }
}

bool JobTable::parent_excluded(const std::string& path) const {
  if (path == "/") return false;
  const std::string parent = parent_of(path);
  if (selector_.classify(parent).verdict != jobs::Verdict::Excluded) return false;
  for (const auto& root : selector_.watch_roots())
    if (under(parent, root)) return true;  // the parent has its entry, or its own parent
  return false;
}

std::vector<SelectionChange> JobTable::on_cgroup(uint64_t id, const std::string& path,
                                                 bool created, uint64_t ts_mono) {
  std::vector<SelectionChange> out;
  Cgroup& cg = cgroups_[id];
  cg.path = path;
  for (const auto& root : selector_.watch_roots()) {
    if (path == root) {
      out.push_back({id, IOLENS_CGROUP_TRACE, path});
      break;
    }
  }
  const jobs::Classification c = selector_.classify(path);
  switch (c.verdict) {
    case jobs::Verdict::Job: {
      // A cgroup found by a scan was created before anyone saw it: its job starts when first
      // seen (ts_mono), or at its first process's if none is given; flagged as estimated.
      Job& job = open_job(*c.identity, c.rule, ts_mono ? wall(ts_mono) : 0);
      if (!created && job.procs.empty()) job.start_estimated = true;
      if (created) job.start_estimated = false;
      cg.job_id = job.identity.id;
      if (path == job.identity.job_cgroup) job.cgroup_id = id;
      break;
    }
    case jobs::Verdict::Container:
      break;
    case jobs::Verdict::Excluded: {
      // Only a cgroup inside a traced root needs an entry: elsewhere nothing is traced anyway.
      // And only the top of an excluded subtree: below it the kernel finds the parent's entry
      // (the nearest decides), so a user who may create cgroups in an excluded subtree (a
      // delegated systemd user slice) cannot fill the exclusion map from there.
      bool in_root = false;
      for (const auto& root : selector_.watch_roots()) in_root = in_root || under(path, root);
      if (in_root && out.empty() && !parent_excluded(path))
        out.push_back({id, IOLENS_CGROUP_EXCLUDE, path});
      break;
    }
  }
  return out;
}

void JobTable::on_cgroup_removed(uint64_t id, uint64_t ts_mono) {
  auto it = cgroups_.find(id);
  if (it == cgroups_.end()) return;
  const std::string job_id = it->second.job_id;
  cgroups_.erase(it);
  if (job_id.empty()) return;
  Job* job = find(job_id);
  if (job && job->cgroup_id == id && job->state == JobState::Live) {
    job->state = JobState::Closing;
    job->end_ns = wall(ts_mono);
  }
}

Job& JobTable::open_job(const jobs::Identity& id, const std::string& rule, int64_t start_ns) {
  auto& slot = jobs_[id.id];
  if (!slot) {
    slot = std::make_unique<Job>();
    slot->identity = id;
    slot->rule = rule;
    slot->start_ns = start_ns;
    slot->rec = std::make_unique<core::Recorder>(0, 0);
  } else if (slot->start_ns == 0 || (start_ns != 0 && start_ns < slot->start_ns)) {
    if (start_ns != 0) slot->start_ns = start_ns;
  }
  return *slot;
}

Job* JobTable::find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Job* JobTable::job_of_cgroup(uint64_t cgroup_id) {
  auto it = cgroups_.find(cgroup_id);
  if (it == cgroups_.end() && resolve_) {
    if (auto path = resolve_(cgroup_id)) {
      on_cgroup(cgroup_id, *path, false, 0);
      it = cgroups_.find(cgroup_id);
    }
  }
  if (it == cgroups_.end()) {
    ++stats_.unknown_cgroups;
    return nullptr;
  }
  if (it->second.job_id.empty()) return nullptr;
  Job* job = find(it->second.job_id);
  // A closed job's cgroup id is gone from cgroups_; a Closing one still takes late records.
  return job;
}

void JobTable::hooks_detached(uint64_t at_mono) {
  if (!unhooked_.empty() && unhooked_.back().second == UINT64_MAX) return;  // already
  unhooked_.emplace_back(at_mono, UINT64_MAX);
}

void JobTable::hooks_attached(uint64_t at_mono) {
  if (unhooked_.empty() || unhooked_.back().second != UINT64_MAX) return;  // already
  unhooked_.back().second = at_mono;
  // Jobs selected meanwhile: their window ends here.
  for (auto& [id, job] : jobs_)
    if (job->unhooked_since && !job->unhooked_until) job->unhooked_until = at_mono;
  while (!unhooked_.empty() && unhooked_.front().second != UINT64_MAX &&
         at_mono - unhooked_.front().second > kUnhookedKeep)
    unhooked_.erase(unhooked_.begin());
}

void JobTable::attribute(Job& job, const core::ProcKey& p, const core::ProcKey& parent,
                         const std::string& comm, uint64_t cgroup_id, uint64_t ts) {
  // Selected while the hooks were detached (the event is read later: by its time).
  for (const auto& [from, to] : unhooked_) {
    if (ts < from || ts >= to) continue;
    if (!job.unhooked_since) ++jobs_unhooked_;
    if (!job.unhooked_since || ts < job.unhooked_since) {
      job.unhooked_since = ts;
      job.unhooked_until = to == UINT64_MAX ? 0 : to;
    }
    break;
  }
  proc_job_[p] = job.identity.id;
  job.procs.insert(p);
  job.live.insert(p);
  if (job.start_ns == 0) job.start_ns = wall(ts);
  const std::string path = cgroup_path(cgroup_id);
  if (!path.empty()) {
    auto labels = sub_labels(selector_, path);
    if (!labels.empty()) job.proc_labels[p] = std::move(labels);
  }
  job.rec->on_event(core::ForkEvent{p, parent, ts, comm, cgroup_id});
}

bool JobTable::on_mark(const core::MarkEvent& m) {
  if (m.reason == IOLENS_MARK_UNTRACED) return true;  // stays in its job; no longer traced
  if (proc_job_.count(m.proc)) return true;           // moved within the selection
  Job* job = job_of_cgroup(m.cgroup_id);
  if (!job) {
    note_unattributed(m.proc);
    return false;
  }
  attribute(*job, m.proc, m.parent, m.comm, m.cgroup_id, m.ts_ns);
  return true;
}

void JobTable::add_process_job(const core::MarkEvent& m, const std::string& rule) {
  jobs::Identity id;
  id.kind = "process";
  id.id = "process/" + rule + "/" + std::to_string(m.proc.pid) + "-" +
          std::to_string(m.proc.start_ns);
  id.labels["rule"] = rule;
  id.labels["pid"] = std::to_string(m.proc.pid);
  id.labels["comm"] = m.comm;
  Job& job = open_job(id, rule, wall(m.ts_ns));
  attribute(job, m.proc, m.parent, m.comm, m.cgroup_id, m.ts_ns);
}

void JobTable::on_event(const core::Event& ev) {
  if (const auto* f = std::get_if<core::ForkEvent>(&ev)) {
    // The child's cgroup decides when it is a job's (clone into another job's cgroup); else
    // the parent's job, which also covers process-rule jobs.
    Job* job = nullptr;
    auto pj = proc_job_.find(f->parent);
    if (pj == proc_job_.end() || find(pj->second)->identity.kind != "process")
      job = job_of_cgroup(f->cgroup_id);
    if (!job && pj != proc_job_.end()) job = find(pj->second);
    if (!job) {
      note_unattributed(f->proc);
      return;
    }
    attribute(*job, f->proc, f->parent, f->comm, f->cgroup_id, f->ts_ns);
    return;
  }
  core::ProcKey p;
  if (const auto* x = std::get_if<core::ExitEvent>(&ev)) p = x->proc;
  const auto* path = std::get_if<core::PathEvent>(&ev);
  if (path) {
    p = path->proc;
    if (path->op == IOLENS_PATH_FILE) {
      core::PathEvent& slot = names_[{path->dev, path->ino, path->gen}];
      names_bytes_ -= std::min(names_bytes_, event_bytes(slot));
      slot = *path;
      names_bytes_ += event_bytes(slot);
    }
  }
  auto it = proc_job_.find(p);
  if (it == proc_job_.end()) {
    // Counted once when it came; an exited one need not be remembered any more.
    if (std::holds_alternative<core::ExitEvent>(ev)) unattributed_.erase(p);
    return;
  }
  Job* job = find(it->second);
  if (!job) return;
  job->rec->on_event(ev);
  if (path && path->op == IOLENS_PATH_FILE)
    job->named.insert(core::FileIdentity{.ino = path->ino, .dev = path->dev, .gen = path->gen});
  if (const auto* x = std::get_if<core::ExitEvent>(&ev)) {
    job->live.erase(p);
    if (job->identity.kind == "process" && job->live.empty() && job->state == JobState::Live) {
      job->state = JobState::Closing;
      job->end_ns = wall(x->ts_ns);
    }
  }
}

void JobTable::note_unattributed(const core::ProcKey& p) {
  if (!unattributed_.insert(p).second) return;
  ++stats_.unattributed_processes;
  if (unattributed_.size() <= kMaxUnattributed) return;
  // Exits can be missed (a process no longer traced sends none): past the bound the earliest
  // started go, down to 9/10 of it. One of them marked again would be counted again.
  std::vector<core::ProcKey> by_age(unattributed_.begin(), unattributed_.end());
  const std::size_t drop = by_age.size() - kMaxUnattributed / 10 * 9;
  auto older = [](const core::ProcKey& a, const core::ProcKey& b) {
    return std::tie(a.start_ns, a.pid) < std::tie(b.start_ns, b.pid);
  };
  std::nth_element(by_age.begin(), by_age.begin() + static_cast<std::ptrdiff_t>(drop),
                   by_age.end(), older);
  for (std::size_t i = 0; i < drop; ++i) unattributed_.erase(by_age[i]);
  stats_.unattributed_forgotten += drop;
}

bool JobTable::give_name(Job& job, const iolens_file_key& key) {
  const core::FileIdentity file{.ino = key.ino, .dev = key.dev, .gen = key.gen};
  if (job.named.count(file)) return true;
  auto n = names_.find({key.dev, key.ino, key.gen});
  if (n == names_.end()) return false;
  core::PathEvent ev = n->second;
  ev.proc = core::ProcKey{key.tgid, key.pstart_ns};
  job.rec->on_event(ev);
  job.named.insert(file);
  return true;
}

bool JobTable::on_file(const iolens_file_key& key, const core::FileCounters& c, bool removed) {
  auto it = proc_job_.find(core::ProcKey{key.tgid, key.pstart_ns});
  Job* job = it == proc_job_.end() ? nullptr : find(it->second);
  if (!job) {
    if (removed) ++stats_.unattributed_records;
    return false;
  }
  const bool named = give_name(*job, key);
  job->rec->on_file(key, c, removed);
  return named;
}

void JobTable::on_other(const iolens_file_key& key, const core::FileCounters& c, bool removed) {
  auto it = proc_job_.find(core::ProcKey{key.tgid, key.pstart_ns});
  Job* job = it == proc_job_.end() ? nullptr : find(it->second);
  if (!job) {
    if (removed) ++stats_.unattributed_records;
    return;
  }
  job->rec->on_other(key, c, removed);
}

bool JobTable::exited(const core::ProcKey& p) const {
  auto it = proc_job_.find(p);
  if (it == proc_job_.end()) return false;
  auto j = jobs_.find(it->second);
  return j != jobs_.end() && j->second->rec->exited(p);
}

bool JobTable::attributed(const core::ProcKey& p) const { return proc_job_.count(p) != 0; }

bool JobTable::names_over_limits(std::size_t times) const {
  auto over = [times](std::size_t bytes, uint64_t bound) { return bytes / times > bound; };
  if (over(names_bytes_, limits_.max_path_bytes)) return true;
  std::size_t bytes = 0;
  for (const auto& [id, job] : jobs_) {
    const std::size_t b = job->rec->name_bytes();
    if (over(b, limits_.max_path_bytes_per_job)) return true;
    bytes += b;
  }
  return over(bytes, limits_.max_path_bytes);
}

bool JobTable::records_over_limits(std::size_t times) const {
  for (const auto& [id, job] : jobs_)
    if (job->rec->file_records() / times > limits_.max_files_per_job) return true;
  return file_records() / times > limits_.max_records;
}

std::array<uint64_t, IOLENS_NR_STATS> Job::own_losses() const {
  std::array<uint64_t, IOLENS_NR_STATS> out = lost_done;
  for (const auto& [p, v] : lost_live)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += v[i];
  return out;
}

Job* JobTable::job_of_process(const core::ProcKey& p) {
  auto it = proc_job_.find(p);
  if (it == proc_job_.end()) return nullptr;
  auto j = jobs_.find(it->second);
  return j == jobs_.end() ? nullptr : j->second.get();  // none: written and taken
}

bool JobTable::on_proc_lost(const iolens_proc_key& key, const iolens_proc_lost& v, bool final) {
  const core::ProcKey p{key.tgid, key.pstart_ns};
  Job* jp = job_of_process(p);
  if (!jp) return false;
  Job& job = *jp;
  std::array<uint64_t, IOLENS_NR_STATS> n{};
  std::copy(std::begin(v.n), std::end(v.n), n.begin());
  if (!final) {
    job.lost_live[p] = n;
    return true;
  }
  for (std::size_t i = 0; i < n.size(); ++i) job.lost_done[i] += n[i];
  job.lost_live.erase(p);
  return true;
}

bool JobTable::add_loss(const core::ProcKey& p, uint32_t stat) {
  Job* job = job_of_process(p);
  if (!job || stat >= IOLENS_NR_STATS) return false;
  ++job->lost_done[stat];
  return true;
}

bool JobTable::on_block(const iolens_block_key& key, const iolens_block_counters& c, bool final) {
  const core::ProcKey p{key.tgid, key.pstart_ns};
  Job* jp = job_of_process(p);
  if (!jp) return false;  // in no job, or its job was written and taken: nothing to add to
  Job& job = *jp;
  if (!final) {
    job.block_live[p][key.dev] = c;
    return true;
  }
  core::add_block_counters(job.block_done[key.dev], c);
  if (auto l = job.block_live.find(p); l != job.block_live.end()) {
    l->second.erase(key.dev);
    if (l->second.empty()) job.block_live.erase(l);
  }
  return true;
}

std::size_t JobTable::enforce_limits(std::vector<core::FileIdentity>* forgotten,
                                     bool within_round) {
  std::vector<core::FileIdentity> mine;
  if (!forgotten) forgotten = &mine;
  const std::size_t before = forgotten->size();
  std::size_t folded = 0;
  const std::size_t files_limit = limits_.max_files_per_job;
  const bool procs = !within_round;
  for (auto& [id, job] : jobs_)
    folded += fold_job(*job, files_limit, limits_.max_path_bytes_per_job, forgotten, procs);
  // Over the node-wide budget: shrink the biggest jobs first, each to its share.
  std::size_t total = file_records();
  if (total > limits_.max_records && !jobs_.empty()) {
    std::vector<Job*> by_size;
    for (auto& [id, job] : jobs_) by_size.push_back(job.get());
    std::sort(by_size.begin(), by_size.end(), [](const Job* a, const Job* b) {
      return a->rec->file_records() > b->rec->file_records();
    });
    const std::size_t share = std::max<std::size_t>(1, limits_.max_records / by_size.size());
    for (Job* job : by_size) {
      if (total <= limits_.max_records) break;
      const std::size_t before = job->rec->file_records();
      if (before <= share) continue;
      folded += fold_job(*job, share, limits_.max_path_bytes_per_job, forgotten, procs);
      total -= before - job->rec->file_records();
    }
  }
  // The same for the bytes of names over all jobs (long paths weigh as more files would).
  if (!jobs_.empty()) {
    std::vector<std::pair<std::size_t, Job*>> by_bytes;
    std::size_t total_bytes = 0;
    for (auto& [id, job] : jobs_) {
      by_bytes.emplace_back(job->rec->name_bytes(), job.get());
      total_bytes += by_bytes.back().first;
    }
    if (total_bytes > limits_.max_path_bytes) {
      std::sort(by_bytes.begin(), by_bytes.end(),
                [](const auto& a, const auto& b) { return a.first > b.first; });
      const std::size_t share = std::max<std::size_t>(1, limits_.max_path_bytes / by_bytes.size());
      for (auto& [bytes, job] : by_bytes) {
        if (total_bytes <= limits_.max_path_bytes) break;
        if (bytes <= share) continue;
        folded += fold_job(*job, files_limit, share, forgotten, procs);
        total_bytes -= bytes - std::min(bytes, job->rec->name_bytes());
      }
    }
  }
  stats_.folded_records += folded;
  // The node-wide name copies are bounded too: evicted ones are forgotten by the kernel as well,
  // so it sends a file's name again when the file is next used.
  if (names_.size() > limits_.max_records || names_bytes_ > limits_.max_path_bytes) {
    while (!names_.empty() && (names_.size() > limits_.max_records * 9 / 10 ||
                               names_bytes_ > limits_.max_path_bytes / 10 * 9)) {
      const auto& [dev, ino, gen] = names_.begin()->first;
      forgotten->push_back(core::FileIdentity{ino, dev, gen});
      names_bytes_ -= std::min(names_bytes_, event_bytes(names_.begin()->second));
      names_.erase(names_.begin());
    }
  }
  // A forgotten name must be given again if its file is used again: forget that it was given
  // (to every job: the id alone does not say which job forgot it), and drop the node-wide
  // copy, which only the kernel's re-sent name refreshes.
  // Each job is walked from its smaller side: a fold of a big job forgets tens of thousands of
  // names, and the other live jobs (short ones, most of them) were named a few files each; one
  // erase per forgotten name and job cost a tenth of such a fold with 11 jobs live.
  const std::size_t n_forgotten = forgotten->size() - before;
  std::vector<core::FileIdentity> sorted;
  for (auto& [jid, job] : jobs_) {
    if (job->named.empty() || n_forgotten == 0) continue;
    if (job->named.size() >= n_forgotten) {
      for (std::size_t i = before; i < forgotten->size(); ++i) job->named.erase((*forgotten)[i]);
      continue;
    }
    if (sorted.empty()) {
      sorted.assign(forgotten->begin() + static_cast<std::ptrdiff_t>(before), forgotten->end());
      std::sort(sorted.begin(), sorted.end());
    }
    std::erase_if(job->named, [&](const core::FileIdentity& f) {
      return std::binary_search(sorted.begin(), sorted.end(), f);
    });
  }
  for (std::size_t i = before; i < forgotten->size(); ++i) {
    const auto& f = (*forgotten)[i];
    const std::tuple<uint32_t, uint64_t, uint32_t> id{f.dev, f.ino, f.gen};
    if (auto n = names_.find(id); n != names_.end()) {
      names_bytes_ -= std::min(names_bytes_, event_bytes(n->second));
      names_.erase(n);
    }
  }
  return folded;
}

std::vector<std::string> JobTable::closing() const {
  std::vector<std::string> out;
  for (const auto& [id, job] : jobs_)
    if (job->state == JobState::Closing) out.push_back(id);
  return out;
}

std::unique_ptr<Job> JobTable::take(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return nullptr;
  std::unique_ptr<Job> job = std::move(it->second);
  jobs_.erase(it);
  for (const auto& p : job->procs) proc_job_.erase(p);
  for (auto c = cgroups_.begin(); c != cgroups_.end();) {
    if (c->second.job_id == id) c = cgroups_.erase(c);
    else ++c;
  }
  job->state = JobState::Closed;
  ++stats_.jobs_closed;
  return job;
}

std::size_t JobTable::file_records() const {
  std::size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->rec->file_records();
  return n;
}

std::size_t JobTable::active_jobs() const {
  std::size_t n = 0;
  for (const auto& [id, job] : jobs_)
    if (job->state == JobState::Live) ++n;
  return n;
}

std::string JobTable::cgroup_path(uint64_t id) const {
  auto it = cgroups_.find(id);
  return it == cgroups_.end() ? std::string() : it->second.path;
}

nlohmann::json JobTable::job_summary(const Job& job) const {
  return daemon::job_summary(job, job.rec->summary(), job.rec->folded_records());
}

RecordBasis JobTable::record_basis() const {
  return RecordBasis{mono_to_wall_, timing_, alignment_};
}

core::RunSnapshot JobTable::job_snapshot(const Job& job) const {
  return daemon::job_snapshot(job, record_basis());
}

nlohmann::json JobTable::job_json(const Job& job, const std::string& version) const {
  return job_json(job, job_snapshot(job), version);
}

nlohmann::json JobTable::job_json(const Job& job, const core::RunSnapshot& snap,
                                  const std::string& version) const {
  nlohmann::json j = exporters::run_to_json(snap, version);
  const exporters::RecordEdits e = job_record_edits(job, daemon::job_summary(job, snap));
  e.head(j);
  if (e.process)
    for (auto& p : j["processes"]) e.process(p);
  return j;
}

std::shared_ptr<const JobPages> JobTable::job_pages(const Job& job, const std::string& version,
                                                    uint64_t serial, nlohmann::json overrides,
                                                    JobPages::Clock::time_point now,
                                                    std::size_t max_rows) const {
  core::RunSnapshot snap = job_snapshot(job);
  nlohmann::json summary = daemon::job_summary(job, snap);  // from the whole snapshot
  exporters::RecordEdits edits = job_record_edits(job, std::move(summary), std::move(overrides));
  return std::make_shared<const JobPages>(job.identity.id, serial, std::move(snap),
                                          std::move(edits), version, now, max_rows);
}

std::optional<nlohmann::json> record_page(std::string_view text, std::size_t offset,
                                          std::size_t limit) {
  using E = nlohmann::json::parse_event_t;
  std::string key;  // the top-level key whose value is being parsed
  std::size_t processes = 0, files = 0, by_file = 0;
  auto keep = [&](int depth, E ev, nlohmann::json& parsed) {
    if (depth == 1 && ev == E::key) {
      key = parsed.is_string() ? parsed.get<std::string>() : std::string();
      return true;
    }
    if (depth != 2 || ev != E::object_end) return true;  // an element ends at depth 2
    std::size_t* n = key == "processes" ? &processes
                     : key == "files"   ? &files
                     : key == "by_file" ? &by_file
                                        : nullptr;
    if (!n) return true;
    const std::size_t i = (*n)++;
    return i >= offset && i - offset < limit;
  };
  nlohmann::json j = nlohmann::json::parse(text, keep, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  j["page"] = page_json(offset, limit, processes, files, by_file);
  return j;
}

nlohmann::json page_json(std::size_t offset, std::size_t limit, std::size_t processes,
                         std::size_t files, std::size_t by_file) {
  const std::size_t end = offset + limit;
  const bool more = limit > 0 && end > offset && end < std::max({processes, files, by_file});
  return {{"offset", offset},
          {"limit", limit},
          {"processes", processes},
          {"files", files},
          {"by_file", by_file},
          {"next", more ? nlohmann::json(end) : nlohmann::json(nullptr)}};
}

exporters::DarshanJobInfo JobTable::darshan_job_info(const Job& job, const core::RunSnapshot& snap,
                                                     const std::string& node) const {
  return daemon::darshan_job_info(job, snap, node, mono_to_wall_);
}

namespace {

nlohmann::json proc_json(const core::ProcKey& p) { return {p.pid, p.start_ns}; }
core::ProcKey proc_of(const nlohmann::json& j) {
  return core::ProcKey{j.at(0).get<uint32_t>(), j.at(1).get<uint64_t>()};
}

}  // namespace

nlohmann::json JobTable::save(const std::vector<const Job*>& handed_over, bool with_live,
                              std::map<std::string, std::vector<uint8_t>>* buffers) const {
  nlohmann::json j;
  j["format"] = 1;
  j["mono_to_wall_ns"] = mono_to_wall_;
  auto& cgs = j["cgroups"] = nlohmann::json::array();
  for (const auto& [id, c] : cgroups_) cgs.push_back({id, c.path, c.job_id});
  auto& js = j["jobs"] = nlohmann::json::array();
  // Handed-over jobs first: load() keeps the last job of an id, and a job whose id came back
  // while its predecessor's record is written is live, so it must win (the predecessor's
  // record is then only lost if the daemon is killed before it is written).
  std::vector<const Job*> all(handed_over.begin(), handed_over.end());
  for (const auto& [id, job] : jobs_) all.push_back(job.get());
  for (const Job* job : all) {
    nlohmann::json o;
    o["kind"] = job->identity.kind;
    o["id"] = job->identity.id;
    o["job_cgroup"] = job->identity.job_cgroup;
    o["labels"] = job->identity.labels;
    o["sub"] = job->identity.sub;
    o["rule"] = job->rule;
    o["cgroup_id"] = job->cgroup_id;
    // A job handed over to be written is closing for the daemon that loads this: it writes it.
    const bool handed = jobs_.find(job->identity.id) == jobs_.end() ||
                        jobs_.find(job->identity.id)->second.get() != job;
    o["state"] = static_cast<int>(handed ? JobState::Closing : job->state);
    o["start_ns"] = job->start_ns;
    o["end_ns"] = job->end_ns ? nlohmann::json(*job->end_ns) : nlohmann::json(nullptr);
    o["end_estimated"] = job->end_estimated;
    o["start_estimated"] = job->start_estimated;
    o["uid"] = job->uid;
    o["unhooked"] = {job->unhooked_since, job->unhooked_until};
    auto& procs = o["procs"] = nlohmann::json::array();
    for (const auto& p : job->procs) procs.push_back(proc_json(p));
    auto& live = o["live"] = nlohmann::json::array();
    for (const auto& p : job->live) live.push_back(proc_json(p));
    auto& pl = o["proc_labels"] = nlohmann::json::array();
    for (const auto& [p, labels] : job->proc_labels) pl.push_back({proc_json(p), labels});
    auto& fcj = o["folded_classes"] = nlohmann::json::object();
    for (const auto& [name, t] : job->folded_classes)
      fcj[name] = {t.bytes_read, t.bytes_written, t.reads, t.writes, t.metadata_ops};
    o["folded_not_aligned"] = job->folded_not_aligned;
    o["not_aligned_shown"] = job->not_aligned_shown;
    auto& fdj = o["folded_devices"] = nlohmann::json::array();
    for (const auto& [dev, t] : job->folded_devices)
      fdj.push_back({dev, t.bytes_read, t.bytes_written, t.reads, t.writes, t.metadata_ops});
    o["lost_done"] = job->lost_done;
    auto& bdj = o["block_done"] = nlohmann::json::array();
    for (const auto& [dev, c] : job->block_done) {
      const auto* b = reinterpret_cast<const uint8_t*>(&c);
      bdj.push_back({dev, nlohmann::json::binary(std::vector<uint8_t>(b, b + sizeof(c)))});
    }
    // A handed-over job's processes are no longer the table's: a restart would not read their
    // records from the kernel into it again, so its live parts are saved whatever `with_live`.
    // The job's buffer of the last save (the first of two jobs of one id takes it).
    std::vector<uint8_t> blob;
    if (buffers)
      if (auto b = buffers->find(job->identity.id); b != buffers->end()) {
        blob = std::move(b->second);
        buffers->erase(b);
      }
    job->rec->save_into(blob, with_live || handed);
    o["recorder"] = nlohmann::json::binary(std::move(blob));
    js.push_back(std::move(o));
  }
  auto& uh = j["unhooked"] = nlohmann::json::array();
  for (const auto& [from, to] : unhooked_) uh.push_back({from, to});
  auto& pj = j["proc_job"] = nlohmann::json::array();
  for (const auto& [p, id] : proc_job_) pj.push_back({proc_json(p), id});
  auto& un = j["unattributed"] = nlohmann::json::array();
  for (const auto& p : unattributed_) un.push_back(proc_json(p));
  j["stats"] = {stats_.unattributed_processes, stats_.unattributed_records, stats_.unknown_cgroups,
                stats_.folded_records, stats_.jobs_closed, stats_.folded_processes,
                stats_.unattributed_forgotten};
  return j;
}

bool JobTable::load(const nlohmann::json& j, std::string& error) {
  try {
    if (j.at("format").get<int>() != 1) {
      error = "unknown state format " + j.at("format").dump();
      return false;
    }
    std::map<uint64_t, Cgroup> cgroups;
    for (const auto& c : j.at("cgroups"))
      cgroups[c.at(0).get<uint64_t>()] = Cgroup{c.at(1).get<std::string>(), c.at(2).get<std::string>()};
    std::map<std::string, std::unique_ptr<Job>> jobs;
    for (const auto& o : j.at("jobs")) {
      auto job = std::make_unique<Job>();
      job->restored = true;
      job->identity.kind = o.at("kind").get<std::string>();
      job->identity.id = o.at("id").get<std::string>();
      job->identity.job_cgroup = o.at("job_cgroup").get<std::string>();
      job->identity.labels = o.at("labels").get<std::map<std::string, std::string>>();
      job->identity.sub = o.at("sub").get<std::map<std::string, std::string>>();
      job->rule = o.at("rule").get<std::string>();
      job->cgroup_id = o.at("cgroup_id").get<uint64_t>();
      const int state = o.at("state").get<int>();
      if (state < 0 || state > static_cast<int>(JobState::Closed)) throw std::out_of_range("state");
      job->state = static_cast<JobState>(state);
      job->start_ns = o.at("start_ns").get<int64_t>();
      if (!o.at("end_ns").is_null()) job->end_ns = o.at("end_ns").get<int64_t>();
      job->end_estimated = o.value("end_estimated", false);
      job->start_estimated = o.value("start_estimated", false);
      job->uid = o.value("uid", int64_t{-1});  // absent in older states
      if (auto u = o.find("unhooked"); u != o.end()) {  // absent in older states
        job->unhooked_since = u->at(0).get<uint64_t>();
        job->unhooked_until = u->at(1).get<uint64_t>();
      }
      for (const auto& p : o.at("procs")) job->procs.insert(proc_of(p));
      for (const auto& p : o.at("live")) job->live.insert(proc_of(p));
      for (const auto& pl : o.at("proc_labels"))
        job->proc_labels[proc_of(pl.at(0))] = pl.at(1).get<std::map<std::string, std::string>>();
      if (auto fna = o.find("folded_not_aligned"); fna != o.end())  // absent in older states
        job->folded_not_aligned = fna->get<uint64_t>();
      if (auto nas = o.find("not_aligned_shown"); nas != o.end())  // absent in older states
        job->not_aligned_shown = nas->get<uint64_t>();
      if (auto fcj = o.find("folded_classes"); fcj != o.end())  // absent in older states
        for (auto c = fcj->begin(); c != fcj->end(); ++c) {
          core::ClassTotals& t = job->folded_classes[c.key()];
          t.bytes_read = c.value().at(0).get<uint64_t>();
          t.bytes_written = c.value().at(1).get<uint64_t>();
          t.reads = c.value().at(2).get<uint64_t>();
          t.writes = c.value().at(3).get<uint64_t>();
          t.metadata_ops = c.value().at(4).get<uint64_t>();
        }
      if (auto fdj = o.find("folded_devices"); fdj != o.end())
        for (const auto& d : *fdj) {
          core::ClassTotals& t = job->folded_devices[d.at(0).get<uint32_t>()];
          t.bytes_read = d.at(1).get<uint64_t>();
          t.bytes_written = d.at(2).get<uint64_t>();
          t.reads = d.at(3).get<uint64_t>();
          t.writes = d.at(4).get<uint64_t>();
          t.metadata_ops = d.at(5).get<uint64_t>();
        }
      if (auto ld = o.find("lost_done"); ld != o.end()) {  // absent in older states
        if (!ld->is_array() || ld->size() > IOLENS_NR_STATS) throw std::out_of_range("lost_done");
        for (std::size_t i = 0; i < ld->size(); ++i) job->lost_done[i] = ld->at(i).get<uint64_t>();
      }
      if (auto bdj = o.find("block_done"); bdj != o.end())  // absent in older states
        for (const auto& d : *bdj) {
          const auto& raw = d.at(1).get_binary();
          if (raw.size() != sizeof(iolens_block_counters)) throw std::out_of_range("block_done");
          std::memcpy(&job->block_done[d.at(0).get<uint32_t>()], raw.data(), raw.size());
        }
      const auto& bin = o.at("recorder").get_binary();
      std::string rec_error;
      job->rec = core::Recorder::load(std::string_view(reinterpret_cast<const char*>(bin.data()), bin.size()),
                                      rec_error);
      if (!job->rec) {
        error = "job " + job->identity.id + ": " + rec_error;
        return false;
      }
      const std::string id = job->identity.id;
      jobs[id] = std::move(job);
    }
    std::map<core::ProcKey, std::string> proc_job;
    for (const auto& p : j.at("proc_job")) {
      const std::string id = p.at(1).get<std::string>();
      // A process of no loaded job would be followed to a null job at its first fork.
      if (!jobs.count(id)) throw std::runtime_error("a process of unknown job '" + id + "'");
      proc_job[proc_of(p.at(0))] = id;
    }
    std::set<core::ProcKey> unattributed;
    for (const auto& p : j.at("unattributed")) unattributed.insert(proc_of(p));
    const auto& st = j.at("stats");
    // By name, in save()'s order (not the struct's: its fields grew in the middle).
    TableStats stats;
    stats.unattributed_processes = st.at(0).get<uint64_t>();
    stats.unattributed_records = st.at(1).get<uint64_t>();
    stats.unknown_cgroups = st.at(2).get<uint64_t>();
    stats.folded_records = st.at(3).get<uint64_t>();
    stats.jobs_closed = st.at(4).get<uint64_t>();
    // Absent in older states.
    if (st.size() > 5) stats.folded_processes = st.at(5).get<uint64_t>();
    if (st.size() > 6) stats.unattributed_forgotten = st.at(6).get<uint64_t>();
    // The hooks' detached times (absent in older states: none known).
    std::vector<std::pair<uint64_t, uint64_t>> unhooked;
    if (auto uh = j.find("unhooked"); uh != j.end())
      for (const auto& i : *uh) unhooked.emplace_back(i.at(0).get<uint64_t>(), i.at(1).get<uint64_t>());
    // Read before anything is replaced: a bad field leaves the table as it was.
    const int64_t mono_to_wall = j.at("mono_to_wall_ns").get<int64_t>();
    cgroups_ = std::move(cgroups);
    jobs_ = std::move(jobs);
    proc_job_ = std::move(proc_job);
    unattributed_ = std::move(unattributed);
    unhooked_ = std::move(unhooked);
    stats_ = stats;
    mono_to_wall_ = mono_to_wall;
    return true;
  } catch (const std::exception& e) {
    error = std::string("malformed state: ") + e.what();
    return false;
  }
}

}  // namespace iolens::daemon
