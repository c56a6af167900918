// SPDX-License-Identifier: Apache-2.0
#include "daemon/job_record.hpp"

#include <algorithm>
#include <map>
#include <memory>

#include "core/counters.hpp"
#include "core/file_alignment.hpp"

namespace iolens::daemon {

core::RunSnapshot job_snapshot(const Job& job, const RecordBasis& basis) {
  core::RunSnapshot snap = job.rec->snapshot(core::ClockBase{0, basis.mono_to_wall_ns});
  snap.start_ns = job.start_ns;
  snap.end_ns = job.end_ns.value_or(0);
  snap.timing = basis.timing;
  if (basis.alignment) core::set_file_alignments(snap, *basis.alignment);
  return snap;
}

nlohmann::json job_head(const Job& job) {
  nlohmann::json j;
  j["id"] = job.identity.id;
  j["kind"] = job.identity.kind;
  j["rule"] = job.rule;
  j["cgroup"] = job.identity.job_cgroup;
  j["labels"] = job.identity.labels;
  j["state"] = job_state_name(job.state);
  j["start_ns"] = job.start_ns;
  j["end_ns"] = job.end_ns ? nlohmann::json(*job.end_ns) : nlohmann::json(nullptr);
  if (job.end_estimated) j["end_estimated"] = true;
  if (job.start_estimated) j["start_estimated"] = true;
  j["processes"] = job.procs.size() + job.rec->folded_processes();  // folded ones included
  j["live_processes"] = job.live.size();
  j["folded_processes"] = job.rec->folded_processes();
  return j;
}

nlohmann::json job_summary(const Job& job, const core::Recorder::Summary& sum,
                           uint64_t folded_records) {
  nlohmann::json j = job_head(job);
  const core::FileCounters& t = sum.totals;
  j["files"] = sum.files;
  j["folded_files"] = sum.folded_files;  // distinct (process, file) pairs folded
  j["folded_records"] = folded_records;  // records folded (a file can fold more than once)
  j["totals"] = {{"reads", t.reads},     {"writes", t.writes}, {"bytes_read", t.bytes_read},
                 {"bytes_written", t.bytes_written}, {"opens", t.opens}, {"stats", t.stats},
                 {"seeks", t.seeks},     {"fsyncs", t.fsyncs + t.fdsyncs}};
  return j;
}

nlohmann::json job_summary(const Job& job, const core::RunSnapshot& snap) {
  core::Recorder::Summary sum;
  for (const auto& p : snap.processes) {
    core::add_totals(sum.totals, p.totals);
    sum.files += p.files;
    sum.folded_files += p.folded_files;
  }
  return job_summary(job, sum, snap.folded_records);
}

exporters::RecordEdits job_record_edits(const Job& job, nlohmann::json summary,
                                        nlohmann::json overrides) {
  exporters::RecordEdits e;
  const bool ended = job.end_ns.has_value();
  e.head = [ended, summary = std::move(summary),
            overrides = std::move(overrides)](nlohmann::json& j) {
    j["schema"] = "iolens.job/1";
    j.erase("command");
    j.erase("exit_code");
    if (!ended) j["end_ns"] = nullptr;
    j["job"] = summary;
    for (auto it = overrides.begin(); it != overrides.end(); ++it) j[it.key()] = it.value();
  };
  // Per-process labels below the job: the container or Slurm step each process ran in. By pid
  // (the record's processes carry no start time on the monotonic clock); one map, not a scan
  // of the labels per process.
  auto by_pid = std::make_shared<std::map<uint32_t, std::map<std::string, std::string>>>();
  for (const auto& [pk, labels] : job.proc_labels) by_pid->try_emplace(pk.pid, labels);
  if (!by_pid->empty()) {
    e.process = [by_pid](nlohmann::json& p) {
      auto it = by_pid->find(p.value("pid", 0u));
      if (it != by_pid->end() && p.value("folded_processes", 0u) == 0) p["labels"] = it->second;
    };
  }
  return e;
}

exporters::DarshanJobInfo darshan_job_info(const Job& job, const core::RunSnapshot& snap,
                                           const std::string& node, int64_t mono_to_wall_ns) {
  exporters::DarshanJobInfo info;
  info.uid = job.uid;
  // Rank 0, the job's first process, stands for the job as Darshan's rank 0 does.
  const core::ProcessSnapshot* first = snap.processes.empty() ? nullptr : &snap.processes.front();
  const auto slurm = job.identity.labels.find("slurm_job");
  info.jobid = exporters::darshan_jobid(
      slurm == job.identity.labels.end() ? std::string() : slurm->second, first ? first->pid : 0);
  if (first) info.exe = first->exe.empty() ? first->comm : first->exe;
  // The job start on the recorder's clock (job_snapshot's timestamps count from boot).
  info.timestamp_base_ns =
      static_cast<uint64_t>(std::max<int64_t>(0, job.start_ns - mono_to_wall_ns));
  info.metadata = {{"job_id", job.identity.id},
                   {"job_kind", job.identity.kind},
                   {"job_rule", job.rule},
                   {"job_cgroup", job.identity.job_cgroup},
                   {"node", node}};
  if (job.start_estimated) info.metadata.emplace_back("start_estimated", "1");
  if (job.end_estimated) info.metadata.emplace_back("end_estimated", "1");
  for (const auto& [key, value] : job.identity.labels) info.metadata.emplace_back(key, value);
  return info;
}

}  // namespace iolens::daemon
