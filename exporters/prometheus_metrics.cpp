// SPDX-License-Identifier: Apache-2.0
#include "exporters/prometheus_metrics.hpp"

#include <cmath>
#include <cstdio>
#include <deque>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>

#include <prometheus/text_serializer.h>

namespace iolens::exporters {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<std::pair<std::string, std::string>>;

/// Bytes of the valid UTF-8 sequence starting at s[i], 0 if none (overlong forms, surrogates
/// and code points past U+10FFFF are invalid, as in RFC 3629).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t len;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/// The families in the order they are declared. A deque: family() hands out references that
/// must stay valid while later families are added.
class Builder {
 public:
  MetricFamily& family(const std::string& name, const std::string& help, MetricType type) {
    families_.push_back(MetricFamily{name, help, type, {}});
    return families_.back();
  }
  std::vector<MetricFamily> take() {
    return {std::make_move_iterator(families_.begin()), std::make_move_iterator(families_.end())};
  }

 private:
  std::deque<MetricFamily> families_;
};

ClientMetric with_labels(const Labels& labels) {
  ClientMetric m;
  for (const auto& [k, v] : labels)
    if (!v.empty()) m.label.push_back({k, prometheus_label_value(v)});
  return m;
}

Labels plus(Labels l, const std::string& k, const std::string& v) {
  l.emplace_back(k, v);
  return l;
}

void gauge(MetricFamily& f, const Labels& l, double v) {
  ClientMetric m = with_labels(l);
  m.gauge.value = v;
  f.metric.push_back(std::move(m));
}

void counter(MetricFamily& f, const Labels& l, double v) {
  ClientMetric m = with_labels(l);
  m.counter.value = v;
  f.metric.push_back(std::move(m));
}

/// `per_bucket`: counts of each bucket (not cumulative), bounds.size() + 1 of them, the last
/// one above every bound.
template <class Count>
void histogram(MetricFamily& f, const Labels& l, const std::vector<double>& bounds,
               const Count* per_bucket, double sum) {
  ClientMetric m = with_labels(l);
  uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += per_bucket[i];
    m.histogram.bucket.push_back({cumulative, bounds[i]});
  }
  cumulative += per_bucket[bounds.size()];
  m.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = sum;
  f.metric.push_back(std::move(m));
}

double d(uint64_t v) { return static_cast<double>(v); }

Labels job_labels(const core::JobMetrics& j, const std::string& node) {
  Labels l{{"job_id", j.id}, {"job_kind", j.kind}};
  for (const auto& [k, v] : j.labels) l.emplace_back(k, v);
  l.emplace_back("node", node);
  return l;
}

Labels group_labels(const Labels& job, const core::MetricsGroup& g) {
  Labels l = job;
  for (const auto& [k, v] : g.labels) l.emplace_back(k, v);
  return l;
}

void job_families(Builder& b, const core::MetricsSnapshot& s) {
  auto& bytes = b.family("iolens_job_io_bytes_total",
                         "Bytes read from / written to files by the job's read and write calls.",
                         MetricType::Counter);
  auto& ops = b.family("iolens_job_io_operations_total",
                       "Read and write calls on files that did not fail.", MetricType::Counter);
  auto& meta = b.family("iolens_job_metadata_operations_total",
                        "Successful metadata calls on files (open excludes dups).",
                        MetricType::Counter);
  auto& secs = b.family("iolens_job_io_seconds_total",
                        "Time in I/O calls (Darshan's read, write incl. fsync, and metadata time).",
                        MetricType::Counter);
  auto& sizes = b.family("iolens_job_request_size_bytes",
                         "Size of each read or write, in Darshan's access-size buckets.",
                         MetricType::Histogram);
  auto& lat = b.family("iolens_job_request_duration_seconds",
                       "Latency of each read or write call, entry to exit.", MetricType::Histogram);
  // Below the system calls (ABI 7, docs/counters.md): page cache, faults, O_DIRECT, io_uring,
  // dirtying and throttling, from the same sums.
  auto& pages = b.family("iolens_job_page_cache_pages_total",
                         "Pages by page-cache event: read (asked by buffered reads), read_miss "
                         "(inserted for them), fault, fault_miss, fault_around, prefetch, dirtied.",
                         MetricType::Counter);
  auto& ra = b.family("iolens_job_readahead_total", "Readahead decisions, by mode (sync, async).",
                      MetricType::Counter);
  auto& dbytes_io = b.family("iolens_job_direct_io_bytes_total",
                             "Bytes read / written with O_DIRECT (also in iolens_job_io_bytes_total "
                             "when made by a read/write call).",
                             MetricType::Counter);
  auto& dops_io = b.family("iolens_job_direct_io_operations_total",
                           "O_DIRECT reads and writes completed.", MetricType::Counter);
  auto& dsecs = b.family("iolens_job_direct_io_seconds_total",
                         "Time from O_DIRECT submission to completion, all directions.",
                         MetricType::Counter);
  auto& ubytes = b.family("iolens_job_io_uring_bytes_total",
                          "Bytes read / written by io_uring requests.", MetricType::Counter);
  auto& uops = b.family("iolens_job_io_uring_operations_total",
                        "io_uring requests on files completed, by op (read, write, open, close, "
                        "other).",
                        MetricType::Counter);
  auto& thr_secs = b.family("iolens_job_dirty_throttle_seconds_total",
                            "Time balance_dirty_pages paused the job's writers.",
                            MetricType::Counter);
  auto& thr = b.family("iolens_job_dirty_throttles_total", "Writer throttling pauses.",
                       MetricType::Counter);
  auto& wbw = b.family("iolens_job_writeback_waits_total",
                       "Waits on pages under writeback (fsync, rewrites).", MetricType::Counter);
  auto& file_na = b.family("iolens_job_file_not_aligned_operations_total",
                           "Reads and writes at an offset that is not a multiple of their file "
                           "system's block size (Darshan's FILE_NOT_ALIGNED), over the job's "
                           "files whose alignment is known.",
                           MetricType::Counter);
  auto& mem_na = b.family("iolens_job_mem_not_aligned_operations_total",
                          "Reads and writes whose user buffer is not 8-byte aligned (Darshan's "
                          "MEM_NOT_ALIGNED).",
                          MetricType::Counter);
  auto& files = b.family("iolens_job_files", "Distinct files the job touched.", MetricType::Gauge);
  auto& procs = b.family("iolens_job_processes", "Processes seen in the job.", MetricType::Gauge);
  auto& running = b.family("iolens_job_processes_running", "Processes of the job still running.",
                           MetricType::Gauge);
  auto& folded = b.family("iolens_job_folded_records_total",
                          "File records folded into other-files records to bound memory.",
                          MetricType::Counter);
  auto& folded_procs = b.family("iolens_job_folded_processes_total",
                                "Exited processes folded into the job's <other processes> row "
                                "to bound memory.",
                                MetricType::Counter);
  auto& job_lost = b.family("iolens_job_lost_total",
                            "What the kernel could not count of the job's processes, by cause "
                            "(docs/counters.md#lost); a series appears with its first loss.",
                            MetricType::Counter);
  auto& start = b.family("iolens_job_start_time_seconds", "When the job started (Unix time).",
                         MetricType::Gauge);
  auto& end = b.family("iolens_job_end_time_seconds",
                       "When the job ended (Unix time); only during the grace period.",
                       MetricType::Gauge);
  auto& info = b.family("iolens_job_info", "The job's identity (value 1).", MetricType::Gauge);
  auto& cbytes = b.family("iolens_job_class_io_bytes_total", "Bytes read / written, by file class.",
                          MetricType::Counter);
  auto& cops = b.family("iolens_job_class_io_operations_total",
                        "Read and write calls, by file class.", MetricType::Counter);
  auto& cmeta = b.family("iolens_job_class_metadata_operations_total",
                         "Metadata calls, by file class.", MetricType::Counter);
  auto& cfiles = b.family("iolens_job_class_files",
                          "Distinct files of the class the job touched (folded ones excluded).",
                          MetricType::Gauge);
  auto& dbytes = b.family("iolens_job_device_io_bytes_total",
                          "Bytes read / written, by the device (MAJ:MIN) of the files' file system.",
                          MetricType::Counter);
  auto& dops = b.family("iolens_job_device_io_operations_total",
                        "Read and write calls, by device.", MetricType::Counter);
  auto& tbytes = b.family("iolens_job_top_file_io_bytes",
                          "Bytes so far of the job's top files by bytes (metrics.top_files), and "
                          "of the rest as path=\"<other>\".",
                          MetricType::Gauge);
  auto& tops = b.family("iolens_job_top_file_io_operations",
                        "Read and write calls so far of the job's top files, and of the rest.",
                        MetricType::Gauge);

  auto& blk_bytes = b.family("iolens_block_bytes_total",
                             "Bytes of the job's bios that reached a block device, by device "
                             "(MAJ:MIN) and direction.",
                             MetricType::Counter);
  auto& blk_wb = b.family("iolens_block_writeback_bytes_total",
                          "Of the written bytes: written back by another thread (a flusher) for "
                          "pages the job dirtied.",
                          MetricType::Counter);
  auto& blk_reqs = b.family("iolens_block_requests_total",
                            "Requests issued to the device whose first bio is the job's.",
                            MetricType::Counter);
  auto& blk_queue = b.family("iolens_block_queue_duration_seconds",
                             "Time of the job's requests in the I/O scheduler queue (insert to "
                             "issue).",
                             MetricType::Histogram);
  auto& blk_dev = b.family("iolens_block_device_duration_seconds",
                           "Device time of the job's requests (issue to completion).",
                           MetricType::Histogram);

  for (const auto& j : s.jobs) {
    const Labels jl = job_labels(j, s.node);
    for (const auto& [dev, c] : j.block) {
      const Labels dl = plus(jl, "device", dev);
      const Labels rl = plus(dl, "op", "read"), wl = plus(dl, "op", "write");
      counter(blk_bytes, rl, d(c.read_bytes));
      counter(blk_bytes, wl, d(c.write_bytes));
      counter(blk_wb, dl, d(c.writeback_bytes));
      counter(blk_reqs, rl, d(c.read_reqs));
      counter(blk_reqs, wl, d(c.write_reqs));
      histogram(blk_queue, rl, request_duration_bounds(), c.queue_read,
                d(c.queue_read_sum_ns) / 1e9);
      histogram(blk_queue, wl, request_duration_bounds(), c.queue_write,
                d(c.queue_write_sum_ns) / 1e9);
      histogram(blk_dev, rl, request_duration_bounds(), c.dev_read, d(c.dev_read_sum_ns) / 1e9);
      histogram(blk_dev, wl, request_duration_bounds(), c.dev_write, d(c.dev_write_sum_ns) / 1e9);
    }
    for (const auto& g : j.groups) {
      const Labels gl = group_labels(jl, g);
      const core::FileCounters& c = g.totals;
      counter(bytes, plus(gl, "op", "read"), d(c.bytes_read));
      counter(bytes, plus(gl, "op", "write"), d(c.bytes_written));
      counter(ops, plus(gl, "op", "read"), d(c.reads));
      counter(ops, plus(gl, "op", "write"), d(c.writes));
      const std::pair<const char*, uint64_t> metas[] = {
          {"open", c.opens - c.dups}, {"dup", c.dups},           {"stat", c.stats},
          {"seek", c.seeks},          {"fsync", c.fsyncs},       {"fdatasync", c.fdsyncs},
          {"mmap", c.mmaps},          {"truncate", c.truncates}, {"close", c.closes}};
      for (const auto& [op, n] : metas) counter(meta, plus(gl, "op", op), d(n));
      // With timing off the calls' times were not measured: no series rather than zeros.
      if (s.daemon.timing_exact) {
        counter(secs, plus(gl, "op", "read"), d(c.read_time_ns) / 1e9);
        counter(secs, plus(gl, "op", "write"), d(c.write_time_ns) / 1e9);
        counter(secs, plus(gl, "op", "metadata"), d(c.meta_time_ns) / 1e9);
      }
      histogram(sizes, plus(gl, "op", "read"), request_size_bounds(), c.size_read,
                d(c.bytes_read));
      histogram(sizes, plus(gl, "op", "write"), request_size_bounds(), c.size_write,
                d(c.bytes_written));
      if (s.daemon.timing_exact) {
        histogram(lat, plus(gl, "op", "read"), request_duration_bounds(), c.lat_read,
                  d(c.lat_read_sum_ns) / 1e9);
        histogram(lat, plus(gl, "op", "write"), request_duration_bounds(), c.lat_write,
                  d(c.lat_write_sum_ns) / 1e9);
      }
      const std::pair<const char*, uint64_t> page_events[] = {
          {"read", c.cache_read_pages}, {"read_miss", c.cache_miss_pages},
          {"fault", c.fault_pages},     {"fault_miss", c.fault_miss_pages},
          {"fault_around", c.fault_around_pages}, {"prefetch", c.prefetch_pages},
          {"dirtied", c.dirtied_pages}};
      for (const auto& [ev, n] : page_events) counter(pages, plus(gl, "event", ev), d(n));
      counter(ra, plus(gl, "mode", "sync"), d(c.ra_sync));
      counter(ra, plus(gl, "mode", "async"), d(c.ra_async));
      counter(dbytes_io, plus(gl, "op", "read"), d(c.direct_bytes_read));
      counter(dbytes_io, plus(gl, "op", "write"), d(c.direct_bytes_written));
      counter(dops_io, plus(gl, "op", "read"), d(c.direct_reads));
      counter(dops_io, plus(gl, "op", "write"), d(c.direct_writes));
      counter(dsecs, gl, d(c.direct_read_time_ns + c.direct_write_time_ns) / 1e9);
      counter(ubytes, plus(gl, "op", "read"), d(c.uring_bytes_read));
      counter(ubytes, plus(gl, "op", "write"), d(c.uring_bytes_written));
      const std::pair<const char*, uint64_t> uring_ops[] = {
          {"read", c.uring_reads}, {"write", c.uring_writes}, {"open", c.uring_opens},
          {"close", c.uring_closes}, {"other", c.uring_other}};
      for (const auto& [op, n] : uring_ops) counter(uops, plus(gl, "op", op), d(n));
      counter(thr_secs, gl, d(c.throttle_ns) / 1e9);
      counter(thr, gl, d(c.throttles));
      counter(wbw, gl, d(c.wb_waits));
      counter(mem_na, gl, d(c.mem_not_aligned));
    }
    gauge(files, jl, d(j.files));
    gauge(procs, jl, d(j.processes));
    gauge(running, jl, d(j.processes_running));
    counter(folded, jl, d(j.folded_records));
    counter(file_na, jl, d(j.file_not_aligned));
    counter(folded_procs, jl, d(j.folded_processes));
    for (const auto& [cause, n] : j.lost) counter(job_lost, plus(jl, "cause", cause), d(n));
    gauge(start, jl, j.start_s);
    if (j.end_s) gauge(end, jl, *j.end_s);
    Labels il = plus(plus(jl, "rule", j.rule), "cgroup", j.cgroup);
    for (const auto& [k, v] : j.info_labels) il.emplace_back(k, v);
    gauge(info, il, 1);
    // Bytes and calls by direction of one class or device.
    auto split = [&](MetricFamily& bytes_f, MetricFamily& ops_f, const Labels& l,
                     const core::ClassTotals& t) {
      counter(bytes_f, plus(l, "op", "read"), d(t.bytes_read));
      counter(bytes_f, plus(l, "op", "write"), d(t.bytes_written));
      counter(ops_f, plus(l, "op", "read"), d(t.reads));
      counter(ops_f, plus(l, "op", "write"), d(t.writes));
    };
    for (const auto& [cls, t] : j.classes) {
      const Labels cl = plus(jl, "class", cls);
      split(cbytes, cops, cl, t);
      counter(cmeta, cl, d(t.metadata_ops));
      gauge(cfiles, cl, d(t.files));
    }
    for (const auto& [dev, t] : j.devices) split(dbytes, dops, plus(jl, "device", dev), t);
    auto top = [&](const core::TopFile& f) {
      const Labels fl = plus(jl, "path", f.path);
      gauge(tbytes, plus(fl, "op", "read"), d(f.bytes_read));
      gauge(tbytes, plus(fl, "op", "write"), d(f.bytes_written));
      gauge(tops, plus(fl, "op", "read"), d(f.reads));
      gauge(tops, plus(fl, "op", "write"), d(f.writes));
    };
    for (const auto& f : j.top_files) top(f);
    if (j.other_files) top(*j.other_files);
  }
}

void daemon_families(Builder& b, const core::MetricsSnapshot& s, double last_scrape_s) {
  const core::DaemonHealth& h = s.daemon;
  gauge(b.family("iolens_build_info", "iolensd's version and kernel ABI version (value 1).",
                 MetricType::Gauge),
        {{"version", h.version}, {"abi_version", std::to_string(h.abi_version)}}, 1);
  auto& lost = b.family("iolens_lost_total",
                        "Everything lost, by cause (docs/metrics.md); events includes "
                        "path_events, process_events and job_events.",
                        MetricType::Counter);
  for (const auto& [cause, n] : h.lost) counter(lost, {{"cause", cause}}, d(n));
  counter(b.family("iolens_paths_truncated_total", "File names cut at the kernel walk's depth.",
                   MetricType::Counter),
          {}, d(h.paths_truncated));
  auto& entries = b.family("iolens_map_entries", "Entries in a kernel map.", MetricType::Gauge);
  auto& cap = b.family("iolens_map_capacity_entries", "Size of a kernel map.", MetricType::Gauge);
  auto& fill = b.family("iolens_map_fill_ratio", "Entries / size of a kernel map.",
                        MetricType::Gauge);
  for (const auto& m : h.maps) {
    if (m.entries >= 0) gauge(entries, {{"map", m.name}}, static_cast<double>(m.entries));
    gauge(cap, {{"map", m.name}}, d(m.capacity));
    if (m.entries >= 0 && m.capacity > 0)
      gauge(fill, {{"map", m.name}}, static_cast<double>(m.entries) / d(m.capacity));
  }
  auto& drain = b.family("iolens_drain_duration_seconds", "Duration of each drain of the kernel maps.",
                         MetricType::Histogram);
  if (h.drain.counts.size() == h.drain.bounds.size() + 1)
    histogram(drain, {}, h.drain.bounds, h.drain.counts.data(), h.drain.sum);
  auto& attached = b.family("iolens_program_attached", "1 when the kernel program is attached.",
                            MetricType::Gauge);
  auto& failed = b.family("iolens_program_failed", "1 when the kernel program failed to attach.",
                          MetricType::Gauge);
  for (const auto& p : h.programs) {
    gauge(attached, {{"program", p.name}}, p.attached ? 1 : 0);
    gauge(failed, {{"program", p.name}}, p.failed ? 1 : 0);
  }
  gauge(b.family("iolens_syscall_hooks_attached", "1 while the syscall hooks are attached.",
                 MetricType::Gauge),
        {}, h.syscall_hooks_attached ? 1 : 0);
  gauge(b.family("iolens_timing_exact",
                 "1 when calls are timed (timing: exact); 0 with timing off, where "
                 "iolens_job_io_seconds_total and iolens_job_request_duration_seconds are "
                 "left out.",
                 MetricType::Gauge),
        {}, h.timing_exact ? 1 : 0);
  auto& jobs = b.family("iolens_jobs", "Jobs tracked now, by state.", MetricType::Gauge);
  gauge(jobs, {{"state", "live"}}, d(h.jobs_live));
  gauge(jobs, {{"state", "closing"}}, d(h.jobs_closing));
  counter(b.family("iolens_jobs_closed_total", "Jobs ended since the daemon started.",
                   MetricType::Counter),
          {}, d(h.jobs_closed_total));
  gauge(b.family("iolens_metrics_jobs", "Jobs with series on this page.", MetricType::Gauge), {},
        d(s.jobs.size()));
  gauge(b.family("iolens_metrics_jobs_dropped", "Jobs left off this page by metrics.max_jobs.",
                 MetricType::Gauge),
        {}, d(h.jobs_dropped));
  counter(b.family("iolens_metrics_ended_jobs_evicted_total",
                   "Ended jobs whose series went before grace_period was over: more ended "
                   "within it than metrics.max_jobs.",
                   MetricType::Counter),
          {}, d(h.ended_jobs_evicted));
  gauge(b.family("iolens_cgroup_filesystem_mounted",
                 "1 while the cgroup filesystem is mounted where iolensd found it (or moved to); "
                 "0 while it is not: jobs are then not closed for their cgroup's absence.",
                 MetricType::Gauge),
        {}, h.cgroup_filesystem_mounted ? 1 : 0);
  counter(b.family("iolens_wall_clock_steps_total",
                   "Steps of the wall clock (settimeofday, an NTP step) since the daemon started: "
                   "wall times are by the clock after each, the durations by the monotonic clock.",
                   MetricType::Counter),
          {}, d(h.wall_clock_steps));
  gauge(b.family("iolens_memory_bound_bytes",
                 "limits.memory: the bound on iolensd's RSS the record limits are derived from.",
                 MetricType::Gauge),
        {}, d(h.memory_bound_bytes));
  if (h.resident_bytes)
    gauge(b.family("iolens_resident_memory_bytes", "iolensd's RSS at the last metrics snapshot.",
                   MetricType::Gauge),
          {}, d(h.resident_bytes));
  gauge(b.family("iolens_file_records", "(process, file) records held in user space.",
                 MetricType::Gauge),
        {}, d(h.file_records));
  counter(b.family("iolens_records_folded_total", "Records folded to bound memory, all jobs.",
                   MetricType::Counter),
          {}, d(h.records_folded_total));
  counter(b.family("iolens_processes_folded_total",
                   "Exited processes folded to bound memory, all jobs.", MetricType::Counter),
          {}, d(h.processes_folded_total));
  gauge(b.family("iolens_unattributed_processes", "Traced processes that belong to no job.",
                 MetricType::Gauge),
        {}, d(h.unattributed_processes));
  counter(b.family("iolens_job_records_written_total", "Job records written to output_dir.",
                   MetricType::Counter),
          {}, d(h.records_written));
  counter(b.family("iolens_job_records_failed_total", "Job records that could not be written.",
                   MetricType::Counter),
          {}, d(h.records_failed));
  counter(b.family("iolens_job_records_unidentified_total",
                   "Job records written where the filesystem refused their identity attribute "
                   "(a daemon killed before its next state save writes them again).",
                   MetricType::Counter),
          {}, d(h.records_unidentified));
  counter(b.family("iolens_darshan_logs_written_total",
                   "Job Darshan logs written to output_dir (darshan_logs).", MetricType::Counter),
          {}, d(h.darshan_logs_written));
  counter(b.family("iolens_darshan_logs_failed_total",
                   "Job Darshan logs that could not be written (darshan_logs).",
                   MetricType::Counter),
          {}, d(h.darshan_logs_failed));
  counter(b.family("iolens_state_saves_total", "Restart checkpoints saved.", MetricType::Counter),
          {}, d(h.state_saves));
  counter(b.family("iolens_state_save_failures_total", "Restart checkpoints that failed.",
                   MetricType::Counter),
          {}, d(h.state_save_failures));
  counter(b.family("iolens_jobs_before_hooks_total",
                   "Jobs with a process selected while the on-demand syscall hooks were detached "
                   "(their calls until the attach were not counted).",
                   MetricType::Counter),
          {}, d(h.jobs_before_hooks));
  counter(b.family("iolens_state_marker_failures_total",
                   "Pressure-drain markers that could not be created (no live record taken then).",
                   MetricType::Counter),
          {}, d(h.state_marker_failures));
  gauge(b.family("iolens_metrics_snapshot_duration_seconds",
                 "Time the last metrics snapshot took to build.", MetricType::Gauge),
        {}, h.snapshot_duration_s);
  gauge(b.family("iolens_scrape_duration_seconds",
                 "Time the previous scrape of /metrics took to render.", MetricType::Gauge),
        {}, last_scrape_s);
}

}  // namespace

std::string prometheus_label_value(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size();) {
    if (raw[i] == '\\') {
      // Doubled, so that a name holding the text "\xff" and one holding the byte 0xff get
      // different label values.
      out += "\\\\";
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence(raw, i);
    if (n == 0) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(raw[i]));
      out += buf;
      ++i;
    } else {
      out.append(raw.substr(i, n));
      i += n;
    }
  }
  return out;
}

const std::vector<double>& request_size_bounds() {
  static const std::vector<double> b{100,     1024,     10240,     102400,    1048576,
                                     4194304, 10485760, 104857600, 1073741824};
  static_assert(IOLENS_NR_SIZE_BUCKETS == 10);
  return b;
}

const std::vector<double>& request_duration_bounds() {
  static const std::vector<double> b = [] {
    std::vector<double> v;
    for (uint64_t ns : core::kLatencyBoundsNs) v.push_back(static_cast<double>(ns) / 1e9);
    return v;
  }();
  return b;
}

std::vector<MetricFamily> metric_families(const core::MetricsSnapshot& s, double last_scrape_s) {
  Builder b;
  job_families(b, s);
  daemon_families(b, s, last_scrape_s);
  std::vector<MetricFamily> out = b.take();
  // The daemon's own series carry the node too, so that one selector filters a whole node (the
  // per-job ones, iolens_job_* and iolens_block_*, have it from job_labels already).
  if (!s.node.empty())
    for (auto& f : out) {
      if (f.name.rfind("iolens_job_", 0) == 0 || f.name.rfind("iolens_block_", 0) == 0) continue;
      for (auto& m : f.metric) m.label.push_back({"node", prometheus_label_value(s.node)});
    }
  return out;
}

std::string prometheus_text(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace iolens::exporters
