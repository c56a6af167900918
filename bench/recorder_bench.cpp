// SPDX-License-Identifier: Apache-2.0
// recorder_bench: the agent's user-space costs on a DataLoader job's records, without a kernel.
// A core::Recorder is fed what `tests/workloads/torch_job.py` makes (FILES sample files, a main
// process, WORKERS workers per epoch, each reading its share of the files once an epoch, every
// record final when it arrives, as the drains of exited processes hand them over), then:
//   names      the name events, one per file
//   records    on_file() of every (process, file) record
//   snapshot   snapshot(), what `iolens run` does at its exit
//   free       destroying the snapshot
//   daemon     the same records handed over in drains of DRAIN records, each followed by
//              fold_to(MAX) as iolensd does for a job at its bound (max_files_per_job)
//   creator    a daemon's job of one process making CREATED files, one path each: each drain
//              brings DRAIN names and their final records, then fold_to(MAX); the folds forget
//              the names of ~MAX/10 files each time (Recorder::forget_names), and the job's
//              forgotten paths grow to nearly CREATED. Its folds' time is shown apart.
// Prints one line per round; the medians last. No timing is asserted anywhere: compare two
// builds' numbers in one invocation each, alternately (bench/README.md "The run's exit").
// Built with the project (target `recorder_bench`, BUILD/bench/recorder_bench); measure a
// Release build. To compare two commits, build each (or this file against each one's headers
// and libiolens_core.a).
// Usage: recorder_bench [--rounds N] [--files N] [--workers N] [--epochs N] [--max N] [--drain N]
//                       [--created N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/recorder.hpp"

namespace {

using iolens::core::ClockBase;
using iolens::core::FileCounters;
using iolens::core::PathEvent;
using iolens::core::Recorder;
using iolens::core::RunSnapshot;

struct Options {
  int rounds = 5;
  uint64_t files = 10000, workers = 2, epochs = 4, max = 12700, drain = 1000;
  uint64_t created = 200000;
};

constexpr uint32_t kDev = (8u << 20) | 1;
constexpr uint32_t kGen = 7;
constexpr uint32_t kMainPid = 100;

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

/// Sample i's inode: not in the order of its name, as on a real file system.
uint64_t ino_of(uint64_t i, uint64_t files) { return 5000 + (i * 7919) % files * 3; }

PathEvent name_of(uint64_t i, uint64_t files) {
  PathEvent p;
  p.proc = {kMainPid, 1};
  p.op = IOLENS_PATH_FILE;
  p.dev = kDev;
  p.ino = ino_of(i, files);
  p.gen = kGen;
  char leaf[32];
  std::snprintf(leaf, sizeof leaf, "sample_%05llu.npy", static_cast<unsigned long long>(i));
  // The kernel's walk: leaf first, each component NUL-terminated.
  p.walk = std::string(leaf) + '\0' + "iolens-prof-data" + '\0' + "tmp" + '\0' + "var" + '\0';
  return p;
}

/// File i of the creator job: /scratch/job/out/part_NNNNNN.bin (a struct file's walk).
PathEvent created_name(uint64_t i, uint64_t files) {
  PathEvent p;
  p.proc = {kMainPid, 1};
  p.op = IOLENS_PATH_FILE;
  p.dev = kDev;
  p.ino = ino_of(i, files);
  p.gen = kGen;
  char leaf[32];
  std::snprintf(leaf, sizeof leaf, "part_%06llu.bin", static_cast<unsigned long long>(i));
  p.walk = std::string(leaf) + '\0' + "out" + '\0' + "job" + '\0' + "scratch" + '\0';
  return p;
}

/// One np.load of a sample: what the kernel's record holds when the worker has exited.
FileCounters sample_read(uint64_t t) {
  FileCounters c = iolens::core::new_counters();
  c.opens = c.closes = 1;
  c.reads = 2;
  c.seeks = 7;
  c.stats = 5;
  c.bytes_read = 3201;
  c.max_byte_read = 3200;
  c.seq_reads = c.consec_reads = 1;
  c.size_read[2] = 2;
  c.open_start_ns = t;
  c.open_end_ns = t + 2000;
  c.read_start_ns = t + 3000;
  c.read_end_ns = t + 9000;
  c.close_start_ns = t + 10000;
  c.close_end_ns = t + 11000;
  c.read_time_ns = 4000;
  c.meta_time_ns = 5000;
  c.first_io_type = c.last_io_type = IOLENS_IO_READ;
  return c;
}

struct Record {
  iolens_file_key key;
  FileCounters counters;
};

/// Every record of the job, in the order the drains hand them over (a worker's at its exit).
std::vector<Record> job_records(const Options& o) {
  std::vector<Record> out;
  uint64_t t = 1'000'000;
  uint32_t pid = 200;
  for (uint64_t e = 0; e < o.epochs; ++e) {
    for (uint64_t w = 0; w < o.workers; ++w, ++pid) {
      for (uint64_t j = w; j < o.files; j += o.workers) {
        const uint64_t i = (j * 4099 + e * 13) % o.files;  // a shuffled epoch
        Record r{};
        r.key.ino = ino_of(i, o.files);
        r.key.dev = kDev;
        r.key.gen = kGen;
        r.key.tgid = pid;
        r.key.pstart_ns = 1000 + pid;
        r.counters = sample_read(t += 20000);
        out.push_back(r);
      }
    }
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (i + 1 >= argc) return false;
    const long long v = std::atoll(argv[++i]);
    if (v <= 0) return false;
    if (!std::strcmp(a, "--rounds")) o.rounds = static_cast<int>(v);
    else if (!std::strcmp(a, "--files")) o.files = static_cast<uint64_t>(v);
    else if (!std::strcmp(a, "--workers")) o.workers = static_cast<uint64_t>(v);
    else if (!std::strcmp(a, "--epochs")) o.epochs = static_cast<uint64_t>(v);
    else if (!std::strcmp(a, "--max")) o.max = static_cast<uint64_t>(v);
    else if (!std::strcmp(a, "--drain")) o.drain = static_cast<uint64_t>(v);
    else if (!std::strcmp(a, "--created")) o.created = static_cast<uint64_t>(v);
    else return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: recorder_bench [--rounds N] [--files N] [--workers N] [--epochs N] "
                 "[--max N] [--drain N] [--created N] (each a positive integer)\n");
    return 2;
  }
  const std::vector<Record> recs = job_records(o);
  std::vector<double> names_ms, records_ms, snapshot_ms, free_ms, daemon_ms, creator_ms, folds_ms;
  std::size_t rows = 0, kept = 0, forgotten_paths = 0;
  for (int round = 0; round < o.rounds; ++round) {
    {
      Recorder r(kMainPid, 1);
      auto t0 = std::chrono::steady_clock::now();
      for (uint64_t i = 0; i < o.files; ++i) r.on_event(name_of(i, o.files));
      names_ms.push_back(ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      for (const Record& rec : recs) r.on_file(rec.key, rec.counters, true);
      records_ms.push_back(ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      auto snap = std::make_unique<RunSnapshot>(r.snapshot(ClockBase{}));
      snapshot_ms.push_back(ms_since(t0));
      rows = snap->files.size();
      t0 = std::chrono::steady_clock::now();
      snap.reset();
      free_ms.push_back(ms_since(t0));
    }
    {
      Recorder r(0, 0);  // a daemon's job: no root process
      for (uint64_t i = 0; i < o.files; ++i) r.on_event(name_of(i, o.files));
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < recs.size(); ++i) {
        r.on_file(recs[i].key, recs[i].counters, true);
        if ((i + 1) % o.drain == 0 || i + 1 == recs.size()) r.fold_to(o.max);
      }
      daemon_ms.push_back(ms_since(t0));
      kept = r.file_records();
    }
    {
      // The files' names and records as they arrive, one drain at a time; inodes not in the
      // order of the names (created_name).
      Recorder r(0, 0);
      double folds = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (uint64_t first = 0; first < o.created; first += o.drain) {
        const uint64_t end = std::min(o.created, first + o.drain);
        for (uint64_t i = first; i < end; ++i) r.on_event(created_name(i, o.created));
        for (uint64_t i = first; i < end; ++i) {
          iolens_file_key k{};
          k.ino = ino_of(i, o.created);
          k.dev = kDev;
          k.gen = kGen;
          k.tgid = kMainPid;
          k.pstart_ns = 1;
          r.on_file(k, sample_read(1'000'000 + 20000 * i), true);
        }
        const auto f0 = std::chrono::steady_clock::now();
        r.fold_to(o.max);
        folds += ms_since(f0);
      }
      creator_ms.push_back(ms_since(t0));
      folds_ms.push_back(folds);
      forgotten_paths = r.memory().forgotten_paths;
    }
    std::printf("round %d: names %.1f ms, records %.1f ms, snapshot %.1f ms (%zu rows), free %.1f "
                "ms, daemon (records + folds to %llu) %.1f ms (%zu kept), creator of %llu files "
                "%.1f ms (folds %.1f ms, %zu forgotten paths)\n",
                round + 1, names_ms.back(), records_ms.back(), snapshot_ms.back(), rows,
                free_ms.back(), static_cast<unsigned long long>(o.max), daemon_ms.back(), kept,
                static_cast<unsigned long long>(o.created), creator_ms.back(), folds_ms.back(),
                forgotten_paths);
  }
  std::printf("median of %d: names %.1f ms, records %.1f ms (%.2f us each), snapshot %.1f ms, "
              "free %.1f ms, daemon %.1f ms (%.2f us a record), creator %.1f ms (folds %.1f ms)\n",
              o.rounds, median(names_ms), median(records_ms),
              median(records_ms) * 1000 / static_cast<double>(recs.size()), median(snapshot_ms),
              median(free_ms), median(daemon_ms),
              median(daemon_ms) * 1000 / static_cast<double>(recs.size()), median(creator_ms),
              median(folds_ms));
  return 0;
}
