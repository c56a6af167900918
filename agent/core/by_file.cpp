// SPDX-License-Identifier: Apache-2.0
#include "core/by_file.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>

namespace iolens::core {

namespace {

uint64_t io_time(const FileCounters& c) { return c.read_time_ns + c.write_time_ns + c.meta_time_ns; }

/// Population variance of `values` (n of them, mean subtracted first: the sums of squares of
/// byte counts in the TB overflow nothing in double, and no catastrophic cancellation).
double variance(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) /
                      static_cast<double>(values.size());
  double sum = 0;
  for (double v : values) sum += (v - mean) * (v - mean);
  return sum / static_cast<double>(values.size());
}

}  // namespace

FilesAcrossProcesses::FilesAcrossProcesses(const RunSnapshot& run, Grouping grouping)
    : run_(&run) {
  const auto& files = run.files;
  if (files.size() >= std::numeric_limits<uint32_t>::max()) {
    // Not reachable with the record bounds (iolensd's max_records); say nothing rather than
    // group a prefix.
    return;
  }
  order_.resize(files.size());
  std::iota(order_.begin(), order_.end(), 0u);
  // Within a file, by process start: ties of fastest/slowest go to the earlier process (the
  // lower rank in a Darshan log).
  const bool by_path = grouping == Grouping::Path;
  std::sort(order_.begin(), order_.end(), [&](uint32_t i, uint32_t j) {
    const FileSnapshot& a = files[i];
    const FileSnapshot& b = files[j];
    if (by_path)
      return std::tie(a.path, a.proc_start_ns, a.pid, a.dev, a.ino, i) <
             std::tie(b.path, b.proc_start_ns, b.pid, b.dev, b.ino, j);
    return std::tie(a.path, a.dev, a.ino, a.proc_start_ns, a.pid, i) <
           std::tie(b.path, b.dev, b.ino, b.proc_start_ns, b.pid, j);
  });
  for (std::size_t p = 0; p < order_.size(); ++p) {
    const FileSnapshot& f = files[order_[p]];
    if (p == 0) {
      starts_.push_back(0);
      continue;
    }
    const FileSnapshot& prev = files[order_[p - 1]];
    if (f.path != prev.path || (!by_path && (f.dev != prev.dev || f.ino != prev.ino)))
      starts_.push_back(static_cast<uint32_t>(p));
  }
  if (!order_.empty()) starts_.push_back(static_cast<uint32_t>(order_.size()));
}

uint64_t FilesAcrossProcesses::bytes(std::size_t i) const {
  uint64_t sum = 0;
  for (const uint32_t r : rows(i)) sum += run_->files[r].counters.bytes_read + run_->files[r].counters.bytes_written;
  return sum;
}

FileAcrossProcesses FilesAcrossProcesses::at(std::size_t i) const {
  const auto& files = run_->files;
  FileAcrossProcesses out;
  out.counters = new_counters();
  const uint32_t begin = starts_.at(i), end = starts_.at(i + 1);
  out.file = &files[order_[begin]];
  out.rows = end - begin;
  std::vector<ProcessShare> shares;
  for (uint32_t p = begin; p < end; ++p) {
    const FileSnapshot& f = files[order_[p]];
    combine_counters(out.counters, f.counters);
    out.rename_sources += f.rename_sources;
    out.unlinks += f.unlinks;
    // A process's rows are adjacent (sorted by process within the file): one share each.
    // (With Grouping::Path a process may hold two inodes of the path: still one share.)
    if (shares.empty() || shares.back().pid != f.pid ||
        shares.back().proc_start_ns != f.proc_start_ns)
      shares.push_back(ProcessShare{f.pid, f.proc_start_ns, 0, 0});
    shares.back().bytes += f.counters.bytes_read + f.counters.bytes_written;
    shares.back().time_ns += io_time(f.counters);
  }
  out.processes = shares.size();
  // Darshan compares the time alone (posix_record_reduction_op: strict < and >).
  const auto faster = [](const ProcessShare& a, const ProcessShare& b) {
    return a.time_ns < b.time_ns;
  };
  const auto slower = [](const ProcessShare& a, const ProcessShare& b) {
    return a.time_ns > b.time_ns;
  };
  // min_element keeps the first of equals: shares are in process order, so ties go to the
  // earlier process.
  out.fastest = *std::min_element(shares.begin(), shares.end(), faster);
  out.slowest = *std::min_element(shares.begin(), shares.end(), slower);
  std::vector<double> times, bytes;
  for (const auto& s : shares) {
    times.push_back(static_cast<double>(s.time_ns) / 1e9);
    bytes.push_back(static_cast<double>(s.bytes));
  }
  out.variance_time_s2 = variance(times);
  out.variance_bytes = variance(bytes);
  out.folded = std::binary_search(run_->folded_files.begin(), run_->folded_files.end(),
                                  std::make_pair(out.file->dev, out.file->ino));
  return out;
}

}  // namespace iolens::core
