// SPDX-License-Identifier: Apache-2.0
#include "exporters/text_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "core/by_file.hpp"
#include "exporters/json_report.hpp"
#include "exporters/units.hpp"

namespace iolens::exporters {
namespace {

std::string fmt(const char* f, auto... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof(buf), f, args...);
  if (n < static_cast<int>(sizeof(buf))) return buf;
  std::string out(static_cast<size_t>(n) + 1, '\0');  // long paths: never cut a row
  std::snprintf(out.data(), out.size(), f, args...);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string join_command(const std::vector<std::string>& cmd) {
  std::string out;
  for (const auto& a : cmd) {
    if (!out.empty()) out += ' ';
    out += printable(a);
  }
  return out;
}

std::string percent(double ratio) { return ratio < 0 ? "-" : fmt("%.0f%%", ratio * 100); }

/// Where the bytes read came from, below the system calls: the run's line and the files with
/// the most bytes read (only when something below them was seen: page cache, faults, O_DIRECT,
/// io_uring).
std::string read_paths(const core::RunSnapshot& run, std::vector<const core::FileSnapshot*> files,
                       const TextOptions& opts) {
  core::FileCounters all{};
  for (const auto& p : run.processes) core::add_totals(all, p.totals);
  if (!core::below_syscalls(all)) return "";
  const core::ReadCoverage t = core::read_coverage(all);
  std::string out = "\nhow bytes were read: ";
  out += fmt("system calls %s (page cache hits %s), io_uring %s, of those O_DIRECT %s; "
             "mmap faults %s (pages already cached %s)\n",
             human_bytes(t.syscall_bytes).c_str(), percent(t.cache_hit_ratio).c_str(),
             human_bytes(t.uring_bytes).c_str(), human_bytes(t.direct_bytes).c_str(),
             human_bytes(t.fault_bytes).c_str(), percent(t.fault_hit_ratio).c_str());
  if (all.dirtied_pages || all.throttles)
    out += fmt("writes through the page cache: %s dirtied, throttled %s times for %s\n",
               human_bytes(all.dirtied_pages * 4096).c_str(), human_count(all.throttles).c_str(),
               human_duration(all.throttle_ns).c_str());
  // Files by bytes moved below the system calls' view: read, faulted in, dirtied.
  auto moved = [](const core::FileCounters& c) {
    return c.bytes_read + (c.fault_pages + c.dirtied_pages) * 4096;
  };
  std::sort(files.begin(), files.end(),
            [&](const auto* a, const auto* b) { return moved(a->counters) > moved(b->counters); });
  out += fmt("%10s %10s %10s %10s %7s %10s %7s %8s  %s\n", "SYSCALL", "IO_URING", "DIRECT",
             "FAULTED", "HIT", "DIRTIED", "THROTTLE", "PID", "PATH");
  for (std::size_t i = 0; i < files.size() && i < opts.top_files; ++i) {
    const auto& c = files[i]->counters;
    if (moved(c) == 0) break;
    const core::ReadCoverage r = core::read_coverage(c);
    out += fmt("%10s %10s %10s %10s %7s %10s %7s %8u  %s\n", human_bytes(r.syscall_bytes).c_str(),
               human_bytes(r.uring_bytes).c_str(), human_bytes(r.direct_bytes).c_str(),
               human_bytes(r.fault_bytes).c_str(), percent(r.cache_hit_ratio).c_str(),
               human_bytes(c.dirtied_pages * 4096).c_str(), human_duration(c.throttle_ns).c_str(),
               files[i]->pid, printable(files[i]->path).c_str());
  }
  return out;
}

}  // namespace

std::string printable(const std::string& s) {
  const bool utf8 = is_valid_utf8(s);
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f || (!utf8 && c >= 0x80)) {
      out += fmt("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

namespace {

/// "<= 4ms" for the bucket of quantile q of a latency histogram, "-" when it is empty.
std::string latency_quantile(const __u64* buckets, double q) {
  const int b = core::histogram_quantile_bucket(buckets, IOLENS_NR_LAT_BUCKETS, q);
  if (b < 0) return "-";
  if (static_cast<size_t>(b) >= core::kLatencyBoundsNs.size()) return "> 1s";
  const uint64_t ns = core::kLatencyBoundsNs[static_cast<size_t>(b)];
  return ns >= 1'000'000 ? fmt("<= %llums", static_cast<unsigned long long>(ns / 1'000'000))
                         : fmt("<= %lluus", static_cast<unsigned long long>(ns / 1'000));
}

}  // namespace

std::string block_summary(const std::vector<core::BlockDeviceSnapshot>& devices) {
  std::string out;
  for (const auto& d : devices) {
    const auto& c = d.counters;
    out += fmt("block  %s: read %s in %s requests, write %s in %s requests", d.name.c_str(),
               human_bytes(c.read_bytes).c_str(), human_count(c.read_reqs).c_str(),
               human_bytes(c.write_bytes).c_str(), human_count(c.write_reqs).c_str());
    if (c.writeback_bytes)
      out += fmt(" (%s by writeback)", human_bytes(c.writeback_bytes).c_str());
    out += fmt("; device latency read p50 %s p99 %s, write p50 %s p99 %s\n",
               latency_quantile(c.dev_read, 0.5).c_str(), latency_quantile(c.dev_read, 0.99).c_str(),
               latency_quantile(c.dev_write, 0.5).c_str(),
               latency_quantile(c.dev_write, 0.99).c_str());
  }
  return out;
}

std::string run_summary(const core::RunSnapshot& run, const TextOptions& opts) {
  std::string out;
  uint64_t bytes_read = 0, bytes_written = 0, reads = 0, writes = 0;
  for (const auto& p : run.processes) {
    bytes_read += p.totals.bytes_read;
    bytes_written += p.totals.bytes_written;
    reads += p.totals.reads;
    writes += p.totals.writes;
  }
  // Distinct files of the run: those with a row, plus those only in folded records.
  std::map<std::pair<uint64_t, uint64_t>, bool> distinct;
  for (const auto& f : run.files) distinct[{f.dev, f.ino}] = true;
  const uint64_t wall = run.end_ns > run.start_ns ? static_cast<uint64_t>(run.end_ns - run.start_ns) : 0;

  out += "\n== iolens: " + join_command(run.command) + "\n";
  out += fmt("exit %s after %s: %zu processes, %s files, read %s in %s calls, wrote %s in %s calls\n",
             run.exit_code ? std::to_string(*run.exit_code).c_str() : "?",
             human_duration(wall).c_str(), run.processes.size(),
             human_count(distinct.size() + run.folded_only_files).c_str(),
             human_bytes(bytes_read).c_str(), human_count(reads).c_str(),
             human_bytes(bytes_written).c_str(), human_count(writes).c_str());
  if (run.folded_records > 0)
    out += fmt("%s file records folded into per-process (other files) records to bound memory "
               "(totals exact; the file lists below lack them)\n",
               human_count(run.folded_records).c_str());

  out += "\nper process (file I/O; pipes, sockets and ttys apart under OTHER)\n";
  out += fmt("%8s %8s %-15s %10s %10s %10s %10s %7s %7s %6s %10s %10s %s\n", "PID", "PPID",
             "COMM", "READS", "READ", "WRITES", "WRITTEN", "OPENS", "STATS", "FILES", "IO TIME",
             "OTHER", "EXIT");
  std::size_t shown = 0;
  for (const auto& p : run.processes) {
    if (shown++ == opts.max_processes) {
      out += fmt("  ... %zu more processes (see --json)\n", run.processes.size() - opts.max_processes);
      break;
    }
    uint64_t other = 0;
    for (const auto& [k, o] : p.other_io) other += o.bytes_read + o.bytes_written;
    const uint64_t io_time = p.totals.read_time_ns + p.totals.write_time_ns + p.totals.meta_time_ns;
    out += fmt("%8u %8u %-15s %10s %10s %10s %10s %7s %7s %6s %10s %10s %s\n", p.pid, p.ppid,
               printable(p.comm).c_str(), human_count(p.totals.reads).c_str(),
               human_bytes(p.totals.bytes_read).c_str(), human_count(p.totals.writes).c_str(),
               human_bytes(p.totals.bytes_written).c_str(), human_count(p.totals.opens).c_str(),
               human_count(p.totals.stats).c_str(), human_count(p.files).c_str(),
               run.timing == "off" ? "-" : human_duration(io_time).c_str(),
               human_bytes(other).c_str(),
               p.exit_code ? std::to_string(*p.exit_code).c_str() : "running");
  }

  // Files across processes (docs/run-json.md#by-file): a dataset file every DataLoader worker
  // read is one line with its total, not one line per worker.
  const core::FilesAcrossProcesses by_file(run);
  std::vector<std::pair<uint64_t, std::size_t>> ranked;  // (bytes, index): reduced only if top_n
  for (std::size_t i = 0; i < by_file.size(); ++i) ranked.emplace_back(by_file.bytes(i), i);
  const std::size_t top_n = std::min(opts.top_files, ranked.size());
  // ties by by_file's order (by path): the same run always prints the same way
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(top_n),
                    ranked.end(), [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  out += fmt("\ntop %zu files by bytes (all processes)\n", top_n);
  out += fmt("%10s %10s %8s %8s %6s  %s\n", "READ", "WRITTEN", "READS", "WRITES", "PROCS", "PATH");
  for (std::size_t k = 0; k < top_n; ++k) {
    const core::FileAcrossProcesses f = by_file.at(ranked[k].second);
    out += fmt("%10s %10s %8s %8s %6s  %s\n", human_bytes(f.counters.bytes_read).c_str(),
               human_bytes(f.counters.bytes_written).c_str(),
               human_count(f.counters.reads).c_str(), human_count(f.counters.writes).c_str(),
               human_count(f.processes).c_str(), printable(f.file->path).c_str());
  }

  std::vector<const core::FileSnapshot*> files;
  for (const auto& f : run.files) files.push_back(&f);

  // Where the bytes went, by directory: a dataset directory, a checkpoint directory and Python's
  // own files separate at a glance.
  struct DirTotals {
    uint64_t bytes_read = 0, bytes_written = 0, ops = 0;
    std::map<std::pair<uint64_t, uint64_t>, bool> files;
  };
  std::map<std::string, DirTotals> dirs;
  for (const auto& f : run.files) {
    const auto slash = f.path.rfind('/');
    DirTotals& d = dirs[slash == std::string::npos || slash == 0 ? "/" : f.path.substr(0, slash)];
    d.bytes_read += f.counters.bytes_read;
    d.bytes_written += f.counters.bytes_written;
    d.ops += f.counters.reads + f.counters.writes + f.counters.opens + f.counters.stats +
             f.counters.seeks + f.counters.mmaps + f.counters.fsyncs + f.counters.fdsyncs;
    d.files[{f.dev, f.ino}] = true;
  }
  std::vector<std::pair<std::string, const DirTotals*>> dir_list;
  for (const auto& [name, d] : dirs) dir_list.emplace_back(name, &d);
  std::sort(dir_list.begin(), dir_list.end(), [](const auto& a, const auto& b) {
    const uint64_t x = a.second->bytes_read + a.second->bytes_written;
    const uint64_t y = b.second->bytes_read + b.second->bytes_written;
    return x != y ? x > y : a.first < b.first;
  });
  out += fmt("\ntop %zu directories by bytes (all processes)\n",
             std::min(opts.top_files, dir_list.size()));
  out += fmt("%10s %10s %8s %8s  %s\n", "READ", "WRITTEN", "OPS", "FILES", "DIRECTORY");
  for (std::size_t i = 0; i < dir_list.size() && i < opts.top_files; ++i) {
    const DirTotals& d = *dir_list[i].second;
    out += fmt("%10s %10s %8s %8s  %s\n", human_bytes(d.bytes_read).c_str(),
               human_bytes(d.bytes_written).c_str(), human_count(d.ops).c_str(),
               human_count(d.files.size()).c_str(), printable(dir_list[i].first).c_str());
  }

  out += read_paths(run, files, opts);
  if (!run.block.empty()) out += "\n" + block_summary(run.block);

  std::string lost;
  for (const auto& [cause, n] : run.lost) {
    if (n == 0 || cause == "paths_truncated") continue;
    lost += fmt(" %s=%s", cause.c_str(), human_count(n).c_str());
  }
  const auto trunc = run.lost.find("paths_truncated");
  if (trunc != run.lost.end() && trunc->second)
    lost += fmt(" paths_truncated=%s", human_count(trunc->second).c_str());
  out += "\nlost:" + (lost.empty() ? std::string(" nothing") : lost) + "\n";
  for (const auto& [prog, why] : run.not_attached)
    out += fmt("not attached: %s (%s): not seen in this run\n", prog.c_str(), why.c_str());
  if (run.timing == "off")
    out += "timing: off: calls were not timed (IO TIME and every time counter are not "
           "measured; counts and bytes are exact)\n";
  else if (!run.timing_note.empty())
    out += "timing: exact, not off as asked: " + printable(run.timing_note) + "\n";
  if (run.collector == "iolensd")
    out += "counted by: iolensd (job " + printable(run.collector_note) + ")\n";
  else if (!run.collector.empty())
    out += "counted by: iolens's own programs" +
           (run.collector_note.empty() ? std::string() : " (" + printable(run.collector_note) + ")") +
           "\n";
  return out;
}

}  // namespace iolens::exporters
