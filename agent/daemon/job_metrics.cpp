// SPDX-License-Identifier: Apache-2.0
#include "daemon/job_metrics.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "core/block.hpp"
#include "core/paths.hpp"
#include "daemon/job_table.hpp"
#include "loader/loader.hpp"

namespace iolens::daemon {
namespace {

/// Identity labels put on every series of the job (low cardinality, what operators filter on);
/// the others go on iolens_job_info only.
bool series_label(const std::string& kind, const std::string& key) {
  if (kind == "kubernetes") return key == "namespace" || key == "pod";
  if (kind == "slurm") return key == "slurm_job" || key == "slurm_uid";
  return false;
}

/// The labels of a process's part of the job: its container or Slurm step.
std::map<std::string, std::string> group_labels(const std::map<std::string, std::string>& sub) {
  std::map<std::string, std::string> out;
  if (auto it = sub.find("container_id"); it != sub.end()) out["container"] = it->second;
  if (auto it = sub.find("slurm_step"); it != sub.end()) out["slurm_step"] = it->second;
  return out;
}

}  // namespace

FileClassifier::FileClassifier(std::vector<jobs::FileClass> classes)
    : classes_(std::move(classes)) {
  for (const auto& c : classes_) names_.push_back(c.name);
  names_.push_back("other");
}

std::size_t FileClassifier::classify(const std::string* path) const {
  if (path != nullptr)
    for (std::size_t i = 0; i < classes_.size(); ++i)
      for (const auto& prefix : classes_[i].prefixes)
        if (path->compare(0, prefix.size(), prefix) == 0) return i;
  return classes_.size();
}

uint64_t metadata_ops(const core::FileCounters& c) {
  return c.opens + c.stats + c.seeks + c.fsyncs + c.fdsyncs + c.mmaps + c.truncates + c.closes;
}

void add_class_totals(core::ClassTotals& a, const core::ClassTotals& b) {
  a.bytes_read += b.bytes_read;
  a.bytes_written += b.bytes_written;
  a.reads += b.reads;
  a.writes += b.writes;
  a.metadata_ops += b.metadata_ops;
  a.files += b.files;
}

uint64_t not_aligned_of(const core::Recorder& rec, const core::Recorder::RecordView& r,
                        core::AlignmentLookup* align) {
  if (!align || r.other_files || !r.path) return 0;
  bool incomplete = false;
  if (!rec.file_name(r.file, &incomplete) || incomplete) return 0;
  const auto n = core::file_not_aligned(r.counters, align->of(*r.path));
  return n ? static_cast<uint64_t>(*n) : 0;
}

void add_record(core::ClassTotals& t, const core::FileCounters& c) {
  t.bytes_read += c.bytes_read;
  t.bytes_written += c.bytes_written;
  t.reads += c.reads;
  t.writes += c.writes;
  t.metadata_ops += metadata_ops(c);
}

std::vector<std::pair<std::string, uint64_t>> own_losses_by_cause(const Job& job) {
  loader::KernelStats own{};
  const auto a = job.own_losses();
  std::copy(a.begin(), a.end(), own.begin());
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [cause, n] : loader::kernel_losses(own))
    if (cause != "program_misses") out.emplace_back(std::move(cause), n);
  out.emplace_back("job_events", own[IOLENS_STAT_JOB_EVENTS_LOST]);
  return out;
}

core::JobMetrics job_metrics(const Job& job, const FileClassifier& fc, uint32_t top_files,
                             const std::vector<core::AlignmentMount>* alignment) {
  core::JobMetrics m;
  m.kind = job.identity.kind;
  m.id = job.identity.id;
  m.rule = job.rule;
  m.cgroup = job.identity.job_cgroup;
  for (const auto& [k, v] : job.identity.labels)
    (series_label(m.kind, k) ? m.labels : m.info_labels)[k] = v;
  m.processes = job.procs.size() + job.rec->folded_processes();
  m.folded_processes = job.rec->folded_processes();
  m.processes_running = job.live.size();
  m.start_s = static_cast<double>(job.start_ns) / 1e9;
  if (job.end_ns) m.end_s = static_cast<double>(*job.end_ns) / 1e9;
  m.folded_records = job.rec->folded_records();
  m.files = job.rec->distinct_files();

  std::map<std::map<std::string, std::string>, core::FileCounters> groups;
  const std::map<std::string, std::string> none;
  std::vector<core::ClassTotals> classes(fc.names().size());
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> class_files(fc.names().size());
  std::map<uint32_t, core::ClassTotals> devices;
  std::map<uint32_t, std::vector<uint64_t>> device_files;
  std::unordered_map<std::string, core::TopFile> per_path;
  core::TopFile unnamed{"", 0, 0, 0, 0};
  std::optional<core::AlignmentLookup> align;
  if (alignment) align.emplace(*alignment);
  m.file_not_aligned = job.folded_not_aligned;  // the kept records' below, then the high mark
  job.rec->visit_records([&](const core::Recorder::RecordView& r) {
    m.file_not_aligned += not_aligned_of(*job.rec, r, align ? &*align : nullptr);
    auto pl = job.proc_labels.find(r.proc);
    const auto key = group_labels(pl != job.proc_labels.end() ? pl->second : none);
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) it->second = core::FileCounters{};
    core::add_totals(it->second, r.counters);
    if (!r.other_files) {  // folded records' classes are in folded_classes
      const std::size_t ci = fc.classify(r.path);
      add_record(classes[ci], r.counters);
      class_files[ci].emplace_back(r.file.dev, r.file.ino);
      add_record(devices[r.file.dev], r.counters);
      device_files[r.file.dev].push_back(r.file.ino);
    }
    if (top_files == 0) return;
    core::TopFile* t = &unnamed;  // no name, or folded: among "the rest"
    if (r.path != nullptr) {
      t = &per_path[*r.path];
      t->path = *r.path;
    }
    t->bytes_read += r.counters.bytes_read;
    t->bytes_written += r.counters.bytes_written;
    t->reads += r.counters.reads;
    t->writes += r.counters.writes;
  });
  m.file_not_aligned = std::max(m.file_not_aligned, job.not_aligned_shown);
  job.not_aligned_shown = m.file_not_aligned;
  for (auto& [labels, totals] : groups) m.groups.push_back({labels, totals});
  for (std::size_t i = 0; i < classes.size(); ++i) {
    auto& ids = class_files[i];
    std::sort(ids.begin(), ids.end());
    classes[i].files = static_cast<uint64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
    if (auto f = job.folded_classes.find(fc.names()[i]); f != job.folded_classes.end()) {
      core::ClassTotals folded = f->second;
      folded.files = 0;  // distinct files of the class: kept records only (docs/metrics.md)
      add_class_totals(classes[i], folded);
    }
    m.classes.emplace_back(fc.names()[i], classes[i]);
  }
  // Folded records of classes no longer configured (a restart with other classes): "other".
  for (const auto& [name, t] : job.folded_classes) {
    if (std::find(fc.names().begin(), fc.names().end(), name) != fc.names().end()) continue;
    core::ClassTotals folded = t;
    folded.files = 0;
    add_class_totals(m.classes.back().second, folded);
  }

  for (const auto& [dev, t] : job.folded_devices) {
    core::ClassTotals folded = t;
    folded.files = 0;
    add_class_totals(devices[dev], folded);
  }
  for (auto& [dev, t] : devices) {
    auto& inos = device_files[dev];
    std::sort(inos.begin(), inos.end());
    t.files = static_cast<uint64_t>(std::unique(inos.begin(), inos.end()) - inos.begin());
    m.devices.emplace_back(std::to_string(core::kernel_dev_major(dev)) + ":" +
                               std::to_string(core::kernel_dev_minor(dev)),
                           t);
  }

  for (const auto& [cause, n] : own_losses_by_cause(job))
    if (n) m.lost.emplace_back(cause, n);

  std::map<uint32_t, iolens_block_counters> block = job.block_done;
  for (const auto& [proc, devs] : job.block_live)
    for (const auto& [dev, c] : devs) core::add_block_counters(block[dev], c);
  for (const auto& [dev, c] : block)
    m.block.emplace_back(std::to_string(core::kernel_dev_major(dev)) + ":" +
                             std::to_string(core::kernel_dev_minor(dev)),
                         c);

  if (top_files > 0) {
    std::vector<core::TopFile> all;
    all.reserve(per_path.size());
    for (auto& [path, t] : per_path) all.push_back(std::move(t));
    auto bigger = [](const core::TopFile& a, const core::TopFile& b) {
      const uint64_t ab = a.bytes_read + a.bytes_written, bb = b.bytes_read + b.bytes_written;
      if (ab != bb) return ab > bb;
      const uint64_t ao = a.reads + a.writes, bo = b.reads + b.writes;
      if (ao != bo) return ao > bo;
      return a.path < b.path;  // a stable choice among equals, scrape after scrape
    };
    const std::size_t k = std::min<std::size_t>(top_files, all.size());
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), bigger);
    core::TopFile other{"<other>", unnamed.bytes_read, unnamed.bytes_written, unnamed.reads,
                        unnamed.writes};
    for (std::size_t i = k; i < all.size(); ++i) {
      other.bytes_read += all[i].bytes_read;
      other.bytes_written += all[i].bytes_written;
      other.reads += all[i].reads;
      other.writes += all[i].writes;
    }
    all.resize(k);
    m.top_files = std::move(all);
    m.other_files = other;
  }
  return m;
}

}  // namespace iolens::daemon
