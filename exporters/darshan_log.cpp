// SPDX-License-Identifier: Apache-2.0
#include "exporters/darshan_log.hpp"

#include <sched.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <zlib.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/by_file.hpp"
#include "core/common_values.hpp"
#include "core/paths.hpp"

namespace iolens::exporters {
namespace {

// Darshan's POSIX counters (darshan-posix-log-format.h, module version 4), in record order.
constexpr std::array<const char*, kDarshanPosixCounters> kCounterNames = {
    "OPENS", "FILENOS", "DUPS", "READS", "WRITES", "SEEKS", "STATS", "MMAPS", "FSYNCS",
    "FDSYNCS", "RENAME_SOURCES", "RENAME_TARGETS", "RENAMED_FROM", "MODE", "BYTES_READ",
    "BYTES_WRITTEN", "MAX_BYTE_READ", "MAX_BYTE_WRITTEN", "CONSEC_READS", "CONSEC_WRITES",
    "SEQ_READS", "SEQ_WRITES", "RW_SWITCHES", "MEM_NOT_ALIGNED", "MEM_ALIGNMENT",
    "FILE_NOT_ALIGNED", "FILE_ALIGNMENT", "MAX_READ_TIME_SIZE", "MAX_WRITE_TIME_SIZE",
    "SIZE_READ_0_100", "SIZE_READ_100_1K", "SIZE_READ_1K_10K", "SIZE_READ_10K_100K",
    "SIZE_READ_100K_1M", "SIZE_READ_1M_4M", "SIZE_READ_4M_10M", "SIZE_READ_10M_100M",
    "SIZE_READ_100M_1G", "SIZE_READ_1G_PLUS", "SIZE_WRITE_0_100", "SIZE_WRITE_100_1K",
    "SIZE_WRITE_1K_10K", "SIZE_WRITE_10K_100K", "SIZE_WRITE_100K_1M", "SIZE_WRITE_1M_4M",
    "SIZE_WRITE_4M_10M", "SIZE_WRITE_10M_100M", "SIZE_WRITE_100M_1G", "SIZE_WRITE_1G_PLUS",
    "STRIDE1_STRIDE", "STRIDE2_STRIDE", "STRIDE3_STRIDE", "STRIDE4_STRIDE", "STRIDE1_COUNT",
    "STRIDE2_COUNT", "STRIDE3_COUNT", "STRIDE4_COUNT", "ACCESS1_ACCESS", "ACCESS2_ACCESS",
    "ACCESS3_ACCESS", "ACCESS4_ACCESS", "ACCESS1_COUNT", "ACCESS2_COUNT", "ACCESS3_COUNT",
    "ACCESS4_COUNT", "FASTEST_RANK", "FASTEST_RANK_BYTES", "SLOWEST_RANK", "SLOWEST_RANK_BYTES"};

constexpr std::array<const char*, kDarshanPosixFCounters> kFCounterNames = {
    "F_OPEN_START_TIMESTAMP", "F_READ_START_TIMESTAMP", "F_WRITE_START_TIMESTAMP",
    "F_CLOSE_START_TIMESTAMP", "F_OPEN_END_TIMESTAMP", "F_READ_END_TIMESTAMP",
    "F_WRITE_END_TIMESTAMP", "F_CLOSE_END_TIMESTAMP", "F_READ_TIME", "F_WRITE_TIME",
    "F_META_TIME", "F_MAX_READ_TIME", "F_MAX_WRITE_TIME", "F_FASTEST_RANK_TIME",
    "F_SLOWEST_RANK_TIME", "F_VARIANCE_RANK_TIME", "F_VARIANCE_RANK_BYTES"};

// Darshan floating counters (seconds) and the iolens nanosecond counter each one comes from.
struct FCounterSource {
  const char* name;
  __u64 core::FileCounters::*member;  // nanoseconds
  bool timestamp = false;             // a point in time (DarshanJobInfo::timestamp_base_ns)
};
constexpr FCounterSource kFCounterSources[] = {
    {"F_OPEN_START_TIMESTAMP", &core::FileCounters::open_start_ns, true},
    {"F_READ_START_TIMESTAMP", &core::FileCounters::read_start_ns, true},
    {"F_WRITE_START_TIMESTAMP", &core::FileCounters::write_start_ns, true},
    {"F_CLOSE_START_TIMESTAMP", &core::FileCounters::close_start_ns, true},
    {"F_OPEN_END_TIMESTAMP", &core::FileCounters::open_end_ns, true},
    {"F_READ_END_TIMESTAMP", &core::FileCounters::read_end_ns, true},
    {"F_WRITE_END_TIMESTAMP", &core::FileCounters::write_end_ns, true},
    {"F_CLOSE_END_TIMESTAMP", &core::FileCounters::close_end_ns, true},
    {"F_READ_TIME", &core::FileCounters::read_time_ns},
    {"F_WRITE_TIME", &core::FileCounters::write_time_ns},
    {"F_META_TIME", &core::FileCounters::meta_time_ns},
    {"F_MAX_READ_TIME", &core::FileCounters::max_read_time_ns},
    {"F_MAX_WRITE_TIME", &core::FileCounters::max_write_time_ns},
};

constexpr std::size_t kMaxMods = 64;
constexpr std::size_t kMetadataLen = 1024;
constexpr std::size_t kJobRegionMax = 4095;  // the runtime's own limit: job + exe + mounts

void mix64(uint64_t& a, uint64_t& b, uint64_t& c) {
  a -= b; a -= c; a ^= (c >> 43);
  b -= c; b -= a; b ^= (a << 9);
  c -= a; c -= b; c ^= (b >> 8);
  a -= b; a -= c; a ^= (c >> 38);
  b -= c; b -= a; b ^= (a << 23);
  c -= a; c -= b; c ^= (b >> 5);
  a -= b; a -= c; a ^= (c >> 35);
  b -= c; b -= a; b ^= (a << 49);
  c -= a; c -= b; c ^= (b >> 11);
  a -= b; a -= c; a ^= (c >> 12);
  b -= c; b -= a; b ^= (a << 18);
  c -= a; c -= b; c ^= (b >> 22);
}

uint64_t le64(const unsigned char* p, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

template <class T>
void put(std::string& out, std::size_t off, T v) {
  std::memcpy(out.data() + off, &v, sizeof(v));
}

template <class T>
T get(std::string_view in, std::size_t off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof(v));
  return v;
}

std::string deflate_region(std::string_view raw) {
  uLongf len = compressBound(raw.size());
  std::string out(len, '\0');
  // compress2 writes a zlib-wrapped stream (window bits 15), what Darshan's reader inflates.
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &len,
                reinterpret_cast<const Bytef*>(raw.data()), raw.size(),
                Z_DEFAULT_COMPRESSION) != Z_OK)
    return {};
  out.resize(len);
  return out;
}

/// Inflates a region: one or more concatenated zlib streams (Darshan ranks append theirs).
bool inflate_region(std::string_view in, std::string& out, std::string& error) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) {
    error = "zlib init failed";
    return false;
  }
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  char buf[65536];
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    const int r = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (r == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);
      continue;
    }
    if (r != Z_OK) {
      error = "corrupt compressed data at region byte " + std::to_string(zs.total_in);
      inflateEnd(&zs);
      return false;
    }
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      error = "compressed region ends in the middle of a stream";
      inflateEnd(&zs);
      return false;
    }
  }
  inflateEnd(&zs);
  return true;
}

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

/// The uncompressed DXT_POSIX region: per record, the 104-byte struct dxt_file_record
/// {uint64 id; int64 rank; int64 shared_record; char hostname[64]; int64 write_count;
/// int64 read_count}, then its write segments, then its read segments. Empty if no record.
std::string dxt_region(const DarshanDxt& dxt) {
  const std::size_t seg_size = darshan_dxt_segment_size(dxt.version);
  std::string out;
  if (seg_size == 0) return out;
  for (const auto& r : dxt.records) {
    std::string rec(kDarshanDxtHeaderSize + seg_size * (r.writes.size() + r.reads.size()), '\0');
    put<uint64_t>(rec, 0, darshan_record_id(r.path));
    put<int64_t>(rec, 8, r.rank);
    put<int64_t>(rec, 16, 0);  // shared_record: a record belongs to one rank
    std::memcpy(rec.data() + 24, r.hostname.data(),
                std::min(r.hostname.size(), kDarshanDxtHostnameSize - 1));
    put<int64_t>(rec, 88, static_cast<int64_t>(r.writes.size()));
    put<int64_t>(rec, 96, static_cast<int64_t>(r.reads.size()));
    std::size_t off = kDarshanDxtHeaderSize;
    for (const auto* segs : {&r.writes, &r.reads}) {
      for (const DxtSegment& g : *segs) {
        put<int64_t>(rec, off, g.offset);
        put<int64_t>(rec, off + 8, g.length);
        put<double>(rec, off + 16, g.start);
        put<double>(rec, off + 24, g.end);
        if (seg_size == 40) put<int64_t>(rec, off + 32, g.thread);
        off += seg_size;
      }
    }
    out += rec;
  }
  return out;
}

/// Parses a DXT_POSIX region (see dxt_region); names from the name region.
bool parse_dxt_region(std::string_view raw, uint32_t version,
                      const std::map<uint64_t, std::string>& names,
                      std::vector<DarshanDxtRecord>& out, std::string& error) {
  const std::size_t seg_size = darshan_dxt_segment_size(version);
  for (std::size_t pos = 0; pos < raw.size();) {
    if (raw.size() - pos < kDarshanDxtHeaderSize) {
      error = "DXT_POSIX region: " + std::to_string(raw.size() - pos) +
              " stray bytes at region byte " + std::to_string(pos);
      return false;
    }
    DarshanDxtRecord r;
    r.id = get<uint64_t>(raw, pos);
    r.rank = get<int64_t>(raw, pos + 8);
    r.hostname.assign(raw.data() + pos + 24, strnlen(raw.data() + pos + 24, kDarshanDxtHostnameSize));
    const int64_t nw = get<int64_t>(raw, pos + 88);
    const int64_t nr = get<int64_t>(raw, pos + 96);
    const std::size_t left = (raw.size() - pos - kDarshanDxtHeaderSize) / seg_size;
    if (nw < 0 || nr < 0 || static_cast<uint64_t>(nw) > left ||
        static_cast<uint64_t>(nr) > left - static_cast<uint64_t>(nw)) {
      error = "DXT_POSIX record at region byte " + std::to_string(pos) + ": " +
              std::to_string(nw) + " writes and " + std::to_string(nr) +
              " reads do not fit the region";
      return false;
    }
    if (auto n = names.find(r.id); n != names.end()) r.path = n->second;
    std::size_t off = pos + kDarshanDxtHeaderSize;
    for (auto [segs, count] : {std::pair{&r.writes, nw}, std::pair{&r.reads, nr}}) {
      for (int64_t i = 0; i < count; ++i) {
        DxtSegment g;
        g.offset = get<int64_t>(raw, off);
        g.length = get<int64_t>(raw, off + 8);
        g.start = get<double>(raw, off + 16);
        g.end = get<double>(raw, off + 24);
        if (seg_size == 40) g.thread = get<int64_t>(raw, off + 32);
        segs->push_back(g);
        off += seg_size;
      }
    }
    out.push_back(std::move(r));
    pos = off;
  }
  return true;
}

}  // namespace

int darshan_posix_counter_index(std::string_view name) {
  for (int i = 0; i < kDarshanPosixCounters; ++i)
    if (name == kCounterNames[static_cast<std::size_t>(i)]) return i;
  return -1;
}

int darshan_posix_fcounter_index(std::string_view name) {
  for (int i = 0; i < kDarshanPosixFCounters; ++i)
    if (name == kFCounterNames[static_cast<std::size_t>(i)]) return i;
  return -1;
}

int64_t darshan_jobid(std::string_view id, int64_t fallback) {
  if (id.empty() || id.size() > 18 ||
      !std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c); }))
    return fallback;
  return std::stoll(std::string(id));
}

std::vector<std::pair<std::string, std::string>> read_mounts(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(path);
  std::string dev, point, type, rest;
  while (in >> dev >> point >> type && std::getline(in, rest))
    out.emplace_back(core::unescape_mount_field(type), core::unescape_mount_field(point));
  return out;
}

std::vector<std::pair<std::string, int64_t>> alignment_mounts_now() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto& m : alignment_table(read_mounts("/proc/self/mounts")))
    out.emplace_back(std::move(m.point), m.block_size);
  return out;
}

namespace {

/// statfs() of one point on a thread of its own, waited for at most kStatfsWaitMs. The state is
/// shared with the thread, which outlives a wait that gave up.
struct StatfsCall {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  core::MountStatfs result;
};

/// The points whose statfs() is under way (or hung). Made once and never destroyed: a thread
/// left in statfs() may come back while the process exits, after static destructors ran.
struct Waiting {
  std::mutex mu;
  std::set<std::string> points;
};
Waiting& waiting() {
  static Waiting* w = new Waiting;  // NOLINT: never deleted, on purpose (above)
  return *w;
}

core::MountStatfs statfs_now(const std::string& point) {
  struct statfs st {};
  core::MountStatfs out;
  if (statfs(point.c_str(), &st) == 0) {
    out.ok = true;
    out.f_type = static_cast<int64_t>(st.f_type);
    out.f_bsize = static_cast<int64_t>(st.f_bsize);
  }
  return out;
}

/// statfs() of every point, all at once, each on a thread of its own, against one deadline
/// kStatfsWaitMs away: N hung mounts cost one wait, not N. A point whose call has not answered
/// by then is failed ({}) and logged, its thread left waiting (detached); a point still waiting
/// since an earlier call is failed at once, without a second thread or a second warning.
std::map<std::string, core::MountStatfs> statfs_all(const std::vector<std::string>& points) {
  Waiting& w = waiting();
  struct Asked {
    std::string point;
    std::shared_ptr<StatfsCall> call;
    std::thread worker;
  };
  std::map<std::string, core::MountStatfs> out;
  std::vector<Asked> asked;
  asked.reserve(points.size());
  for (const std::string& point : points) {
    if (out.count(point)) continue;
    {
      std::lock_guard<std::mutex> lock(w.mu);
      if (!w.points.insert(point).second) {
        out[point] = {};  // still waiting since an earlier table: failed, as then
        continue;
      }
    }
    try {
      auto call = std::make_shared<StatfsCall>();
      std::thread worker([call, point, &w] {
        // Its own descriptor table, emptied: a thread left in statfs() holds no descriptor of
        // the process (iolensd's state lock among them) while it waits
        if (unshare(CLONE_FILES) == 0) close_range(0, ~0U, 0);
        const core::MountStatfs result = statfs_now(point);
        {
          std::lock_guard<std::mutex> lock(w.mu);
          w.points.erase(point);  // answered, in time or at last
        }
        std::lock_guard<std::mutex> lock(call->mu);
        call->result = result;
        call->done = true;
        call->done_cv.notify_all();
      });
      asked.push_back({point, std::move(call), std::move(worker)});
    } catch (const std::exception&) {
      // No thread (or no memory) to be had: asked here, unbounded, as before
      {
        std::lock_guard<std::mutex> lock(w.mu);
        w.points.erase(point);
      }
      out[point] = statfs_now(point);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kStatfsWaitMs);
  for (Asked& a : asked) {
    std::unique_lock<std::mutex> lock(a.call->mu);
    if (a.call->done_cv.wait_until(lock, deadline, [&] { return a.call->done; })) {
      out[a.point] = a.call->result;
      lock.unlock();
      a.worker.join();  // it has answered: joined, not left to end after this process's checks
      continue;
    }
    lock.unlock();
    a.worker.detach();  // left in statfs(): it ends when the mount answers (its state is shared)
    out[a.point] = {};
    spdlog::warn("statfs({}) did not answer within {} ms: its files' Darshan alignment is taken "
                 "as 4096, as Darshan takes a failed statfs", a.point, kStatfsWaitMs);
  }
  return out;
}

}  // namespace

std::vector<core::AlignmentMount> alignment_table(
    const std::vector<std::pair<std::string, std::string>>& mounts) {
  // The points the table asks about: its rules choose them, not the answers
  std::vector<std::string> points;
  core::darshan_alignment_table(mounts, [&](const std::string& point) {
    points.push_back(point);
    return core::MountStatfs{};
  });
  const std::map<std::string, core::MountStatfs> answers = statfs_all(points);
  return core::darshan_alignment_table(mounts, [&](const std::string& point) {
    const auto it = answers.find(point);
    return it != answers.end() ? it->second : core::MountStatfs{};
  });
}

uint64_t darshan_record_id(std::string_view path) {
  // Bob Jenkins' lookup8 hash (public domain), as Darshan uses it: level 0, bytes read
  // little-endian whatever the host, the length added into c before the tail.
  const auto* k = reinterpret_cast<const unsigned char*>(path.data());
  std::size_t len = path.size();
  uint64_t a = 0, b = 0, c = 0x9e3779b97f4a7c13ULL;
  while (len >= 24) {
    a += le64(k, 8);
    b += le64(k + 8, 8);
    c += le64(k + 16, 8);
    mix64(a, b, c);
    k += 24;
    len -= 24;
  }
  c += path.size();
  // The tail: c's lowest byte holds the length, so its bytes go in from the second byte up.
  if (len > 16) c += le64(k + 16, len - 16) << 8;
  if (len > 8) b += le64(k + 8, std::min<std::size_t>(len - 8, 8));
  a += le64(k, std::min<std::size_t>(len, 8));
  mix64(a, b, c);
  return c;
}

std::size_t darshan_dxt_segment_size(uint32_t version) {
  switch (version) {
    case 1: return 32;  // offset, length, start_time, end_time
    case 2: return 40;  // ... and the thread id
    default: return 0;
  }
}

std::string darshan_log(const core::RunSnapshot& run, const DarshanJobInfo& info) {
  return darshan_log(run, info, DarshanDxt{});
}

std::string darshan_log(const core::RunSnapshot& run, const DarshanJobInfo& info,
                        const DarshanDxt& dxt) {
  // Ranks: processes in start order; then, each a rank of its own, the processes a file row
  // names that the run does not list (their events lost): rank -1 means a shared record.
  std::map<std::pair<uint32_t, int64_t>, int64_t> rank_of;
  for (std::size_t i = 0; i < run.processes.size(); ++i)
    rank_of[{run.processes[i].pid, run.processes[i].start_ns}] = static_cast<int64_t>(i);
  for (const auto& f : run.files)
    rank_of.try_emplace({f.pid, f.proc_start_ns}, static_cast<int64_t>(rank_of.size()));
  const int64_t nprocs = std::max<int64_t>(1, static_cast<int64_t>(rank_of.size()));

  // Job region: struct darshan_job, then the command line, then "\n<fstype>\t<mountpoint>".
  std::string job(kDarshanJobSize, '\0');
  put<int64_t>(job, 0, info.uid);
  put<int64_t>(job, 8, run.start_ns / 1000000000);
  put<int64_t>(job, 16, run.start_ns % 1000000000);
  put<int64_t>(job, 24, run.end_ns / 1000000000);
  put<int64_t>(job, 32, run.end_ns % 1000000000);
  put<int64_t>(job, 40, nprocs);
  put<int64_t>(job, 48, info.jobid);
  // lib_ver names the Darshan runtime whose log format this is; the producer is said apart.
  std::string metadata = "lib_ver=3.5.0\nproducer=iolens\n";
  // Timing off: the POSIX time counters and timestamps are 0 because they were not measured
  // (docs/counters.md "Timing"), which a reader of the log must be told.
  if (run.timing == "off") metadata += "iolens_timing=off\n";
  for (const auto& [key, value] : info.metadata) {
    std::string line = key + "=" + value;
    std::replace(line.begin(), line.end(), '\n', ' ');  // one line per key
    if (metadata.size() + line.size() + 1 > kMetadataLen - 1) continue;
    metadata += line + "\n";
  }
  std::memcpy(job.data() + 56, metadata.data(), std::min(metadata.size(), kMetadataLen - 1));
  std::string exe;
  for (const auto& a : run.command) {
    if (!exe.empty()) exe += ' ';
    exe += a;
  }
  if (!info.exe.empty()) exe = info.exe;
  std::replace(exe.begin(), exe.end(), '\n', ' ');  // a newline would start a mount entry
  if (exe.empty()) exe = "<unknown>";
  std::string region = job;
  region += exe.substr(0, kJobRegionMax - kDarshanJobSize - 1);
  for (const auto& [type, point] : info.mounts) {
    const std::string entry = "\n" + type + "\t" + point;
    if (type.empty() || point.empty() || type.find_first_of(" \t\n") != std::string::npos ||
        point.find_first_of(" \t\n") != std::string::npos)
      continue;  // the reader scans "%s\t%s": whitespace would break it
    if (region.size() + entry.size() + 1 > kJobRegionMax) break;
    region += entry;
  }
  region += '\0';

  // Darshan's RENAME_TARGETS and RENAMED_FROM (darshan-posix.c's rename wrapper): Darshan
  // keeps a record per path, so a successful rename gives the new path's record of that rank
  // one more target, and its first source's record id. iolens keeps a record per file, named
  // by its path before the rename (`renamed_to`: the last new name, `rename_sources` the
  // renames): the new path's record is that rank's row of the path, if it has one, else a
  // record of its own with these two counters alone. Of a file renamed twice by one process,
  // only the last name is known (docs/darshan-log.md#renames).
  struct RenameTarget {
    uint64_t renames = 0;
    uint64_t from = 0;              // record id of the source: the earliest opened
    uint64_t from_open_ns = UINT64_MAX;
    std::optional<int64_t> alignment;  // the source's: a rename stays on one file system
    bool placed = false;               // given to a row of the path
  };
  std::map<std::pair<int64_t, std::string>, RenameTarget> rename_targets;
  for (const auto& f : run.files) {
    if (f.rename_sources == 0 || f.renamed_to.empty()) continue;
    RenameTarget& t = rename_targets[{rank_of.at({f.pid, f.proc_start_ns}), f.renamed_to}];
    ++t.renames;
    const uint64_t opened = f.counters.open_start_ns ? f.counters.open_start_ns : UINT64_MAX - 1;
    if (t.from == 0 || opened < t.from_open_ns) {
      t.from = darshan_record_id(f.path);
      t.from_open_ns = opened;
      t.alignment = f.file_alignment;
    }
  }

  // Name region: (id, path, NUL) packed; one entry per distinct path.
  std::map<uint64_t, std::string> names;
  for (const auto& f : run.files) names.emplace(darshan_record_id(f.path), f.path);
  for (const auto& [key, t] : rename_targets) names.emplace(darshan_record_id(key.second), key.second);
  for (const auto& r : dxt.records) names.emplace(darshan_record_id(r.path), r.path);
  std::string name_region;
  for (const auto& [id, path] : names) {
    std::string entry(8, '\0');
    put<uint64_t>(entry, 0, id);
    name_region += entry;
    name_region += path;
    name_region += '\0';
  }

  // POSIX region: 704-byte records. A file every process of the log has a row of (two
  // processes at least) gets one shared record, rank -1, reduced as Darshan reduces a file all
  // MPI ranks opened (docs/darshan-log.md#shared-files); the others one record per (process,
  // file). Shared records come last, as Darshan writes them.
  struct Extremes {
    int64_t fastest_rank, slowest_rank;
    uint64_t fastest_bytes, slowest_bytes, fastest_ns, slowest_ns;
    double variance_time_s2 = 0, variance_bytes = 0;
  };
  struct Renames {
    uint64_t sources = 0, targets = 0, renamed_from = 0;
  };
  auto posix_record = [&](const std::string& path, const core::FileCounters& c,
                          const Renames& renames, std::optional<int64_t> alignment, int64_t rank,
                          const Extremes& x) {
    std::string rec(kDarshanPosixRecordSize, '\0');
    int64_t v[kDarshanPosixCounters] = {};
    auto set = [&](const char* name, int64_t value) { v[darshan_posix_counter_index(name)] = value; };
    // iolens's counters carry Darshan's names and semantics (docs/counters.md): each one whose
    // upper-cased name is a POSIX counter goes there (max bytes exported as Darshan prints them).
    for (const auto& field : core::counter_fields()) {
      std::string name(field.name);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
      const int idx = darshan_posix_counter_index(name);
      if (idx >= 0) v[idx] = core::counter_value(c, field);
    }
    set("RENAME_SOURCES", static_cast<int64_t>(renames.sources));
    set("RENAME_TARGETS", static_cast<int64_t>(renames.targets));
    set("RENAMED_FROM", static_cast<int64_t>(renames.renamed_from));
    // MEM_NOT_ALIGNED (and MODE) came by name above; the alignment it checks is Darshan's
    // default. The file's alignment is its mount's (file_alignment.hpp); without a mount table
    // (a converted trace without one), or for an alignment the offsets' buckets cannot tell,
    // -1: Darshan's mark for a counter it did not collect.
    set("MEM_ALIGNMENT", IOLENS_MEM_ALIGNMENT);
    const std::optional<int64_t> not_aligned =
        alignment ? core::file_not_aligned(c, *alignment) : std::nullopt;
    set("FILE_ALIGNMENT", alignment ? *alignment : -1);
    set("FILE_NOT_ALIGNED", not_aligned ? *not_aligned : -1);
    // Darshan's four most common access sizes and strides, from the record's tallies
    // (common_values.hpp; a shared record's are its processes' tallies merged, not Darshan's
    // reduction of each rank's four: docs/counters.md "Common access sizes and strides").
    static const char* const kAccess[4][2] = {{"ACCESS1_ACCESS", "ACCESS1_COUNT"},
                                              {"ACCESS2_ACCESS", "ACCESS2_COUNT"},
                                              {"ACCESS3_ACCESS", "ACCESS3_COUNT"},
                                              {"ACCESS4_ACCESS", "ACCESS4_COUNT"}};
    static const char* const kStride[4][2] = {{"STRIDE1_STRIDE", "STRIDE1_COUNT"},
                                              {"STRIDE2_STRIDE", "STRIDE2_COUNT"},
                                              {"STRIDE3_STRIDE", "STRIDE3_COUNT"},
                                              {"STRIDE4_STRIDE", "STRIDE4_COUNT"}};
    const core::CommonValues accesses = core::common_accesses(c);
    const core::CommonValues strides = core::common_strides(c);
    for (std::size_t i = 0; i < 4; ++i) {
      set(kAccess[i][0], accesses[i].value);
      set(kAccess[i][1], accesses[i].count);
      set(kStride[i][0], strides[i].value);
      set(kStride[i][1], strides[i].count);
    }
    // What the source did not record (a trace of ABI 13 or before): not collected.
    for (const std::string& name : run.not_recorded) {
      if (name == "mem_not_aligned") {
        set("MEM_NOT_ALIGNED", -1);
        set("MEM_ALIGNMENT", -1);
      } else if (name == "mode") {
        set("MODE", -1);
      }
    }
    set("FASTEST_RANK", x.fastest_rank);
    set("FASTEST_RANK_BYTES", static_cast<int64_t>(x.fastest_bytes));
    set("SLOWEST_RANK", x.slowest_rank);
    set("SLOWEST_RANK_BYTES", static_cast<int64_t>(x.slowest_bytes));

    double fv[kDarshanPosixFCounters] = {};
    auto fset = [&](const char* name, double value) { fv[darshan_posix_fcounter_index(name)] = value; };
    for (const auto& [name, member, stamp] : kFCounterSources) {
      // Timestamps (0 = never) count from the job start; times are durations.
      const uint64_t ns = c.*member;
      fset(name, stamp && ns != 0
                     ? static_cast<double>(static_cast<int64_t>(ns - info.timestamp_base_ns)) / 1e9
                     : seconds(ns));
    }
    fset("F_FASTEST_RANK_TIME", seconds(x.fastest_ns));
    fset("F_SLOWEST_RANK_TIME", seconds(x.slowest_ns));
    fset("F_VARIANCE_RANK_TIME", x.variance_time_s2);
    fset("F_VARIANCE_RANK_BYTES", x.variance_bytes);

    put<uint64_t>(rec, 0, darshan_record_id(path));
    put<int64_t>(rec, 8, rank);
    std::memcpy(rec.data() + 16, v, sizeof(v));
    std::memcpy(rec.data() + 16 + sizeof(v), fv, sizeof(fv));
    return rec;
  };
  // By path, as Darshan keys records (its id is a hash of the path).
  const core::FilesAcrossProcesses by_file(run, core::Grouping::Path);
  std::vector<bool> in_shared(run.files.size(), false);
  std::string shared;
  const auto rank_of_share = [&](const core::ProcessShare& s) {
    const auto r = rank_of.find({s.pid, s.proc_start_ns});
    return r == rank_of.end() ? int64_t{-1} : r->second;
  };
  for (std::size_t i = 0; i < by_file.size(); ++i) {
    const core::FileAcrossProcesses f = by_file.at(i);
    // Every rank of the log (every row has a rank, so distinct processes are distinct ranks).
    if (nprocs < 2 || f.processes != static_cast<uint64_t>(nprocs)) continue;
    const auto rows = by_file.rows(i);
    for (const uint32_t r : rows) in_shared[r] = true;
    const Extremes x{rank_of_share(f.fastest), rank_of_share(f.slowest), f.fastest.bytes,
                     f.slowest.bytes, f.fastest.time_ns, f.slowest.time_ns,
                     f.variance_time_s2, f.variance_bytes};
    shared += posix_record(f.file->path, f.counters, Renames{f.rename_sources, 0, 0},
                           f.file->file_alignment, -1, x);
  }
  // One record per (rank, path), as Darshan keys them: a process's rows of one path (files
  // replaced at it: a checkpoint written to ckpt.tmp and renamed away each epoch) are folded
  // into one, in the order they were opened, as Darshan's one record would have counted them.
  std::map<std::pair<int64_t, std::string>, std::vector<uint32_t>> rows_of;
  std::vector<std::pair<int64_t, std::string>> order;
  for (std::size_t r = 0; r < run.files.size(); ++r) {
    if (in_shared[r]) continue;
    const core::FileSnapshot& f = run.files[r];
    std::pair<int64_t, std::string> key{rank_of.at({f.pid, f.proc_start_ns}), f.path};
    auto [it, fresh] = rows_of.try_emplace(key);
    if (fresh) order.push_back(key);
    it->second.push_back(static_cast<uint32_t>(r));
  }
  std::string posix;
  posix.reserve(order.size() * kDarshanPosixRecordSize);
  for (const auto& key : order) {
    auto& rows = rows_of.at(key);
    const core::FileSnapshot& first = run.files[rows.front()];
    core::FileCounters c = first.counters;
    Renames renames{first.rename_sources, 0, 0};
    if (rows.size() > 1) {
      const auto opened = [&](uint32_t r) {
        const uint64_t t = run.files[r].counters.open_start_ns;
        return t ? t : UINT64_MAX;  // never opened (stats only): last
      };
      std::stable_sort(rows.begin(), rows.end(),
                       [&](uint32_t a, uint32_t b) { return opened(a) < opened(b); });
      c = run.files[rows.front()].counters;
      renames.sources = 0;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (i > 0) core::fold_counters(c, run.files[rows[i]].counters);
        renames.sources += run.files[rows[i]].rename_sources;
      }
    }
    // A record of one rank has no rank extremes: Darshan sets them only while reducing a
    // shared record (darshan-posix.c, posix_mpi_redux), so they stay 0 in every other record,
    // and its tools derive a rank's own from its counters (docs/darshan-log.md).
    if (auto t = rename_targets.find(key); t != rename_targets.end()) {
      renames.targets = t->second.renames;
      renames.renamed_from = t->second.from;
      t->second.placed = true;
    }
    posix += posix_record(key.second, c, renames, first.file_alignment, key.first,
                          Extremes{0, 0, 0, 0, 0, 0});
  }
  // New paths no row of their rank has: a record of the renames alone, as Darshan makes one
  // (fresh counters: max bytes 0, the alignments its file system's).
  for (const auto& [key, t] : rename_targets) {
    if (t.placed) continue;
    posix += posix_record(key.second, core::new_counters(), Renames{0, t.renames, t.from},
                          t.alignment, key.first, Extremes{0, 0, 0, 0, 0, 0});
  }
  posix += shared;

  const std::string zjob = deflate_region(region);
  const std::string znames = deflate_region(name_region);
  const std::string zposix = posix.empty() ? std::string() : deflate_region(posix);
  const std::string raw_dxt = dxt_region(dxt);
  const std::string zdxt = raw_dxt.empty() ? std::string() : deflate_region(raw_dxt);

  std::string out(kDarshanHeaderSize, '\0');
  std::memcpy(out.data(), "3.41", 4);
  put<int64_t>(out, 8, kDarshanMagic);
  out[16] = 0;  // zlib
  // partial_flag: POSIX is incomplete when records were folded (iolensd's limits; `iolens run`
  // has none); DXT is when the trace it comes from lost records.
  uint64_t partial = !zdxt.empty() && dxt.partial ? uint64_t{1} << kDarshanDxtPosixModule : 0;
  if (run.folded_records > 0) partial |= uint64_t{1} << kDarshanPosixModule;
  put<uint64_t>(out, 24, partial);
  const uint64_t names_off = kDarshanHeaderSize + zjob.size();
  put<uint64_t>(out, 32, names_off);
  put<uint64_t>(out, 40, znames.size());
  const std::size_t mod_map = 48;
  if (!zposix.empty()) {
    put<uint64_t>(out, mod_map + 16 * kDarshanPosixModule, names_off + znames.size());
    put<uint64_t>(out, mod_map + 16 * kDarshanPosixModule + 8, zposix.size());
  }
  const std::size_t mod_ver = mod_map + 16 * kMaxMods;
  put<uint32_t>(out, mod_ver + 4 * kDarshanPosixModule, kDarshanPosixVersion);
  if (!zdxt.empty()) {
    // Regions follow in increasing module id: DXT_POSIX (10) after POSIX (1).
    put<uint64_t>(out, mod_map + 16 * kDarshanDxtPosixModule,
                  names_off + znames.size() + zposix.size());
    put<uint64_t>(out, mod_map + 16 * kDarshanDxtPosixModule + 8, zdxt.size());
    put<uint32_t>(out, mod_ver + 4 * kDarshanDxtPosixModule, dxt.version);
  }
  out += zjob;
  out += znames;
  out += zposix;
  out += zdxt;
  return out;
}

bool read_darshan_log(std::string_view in, DarshanLogContents& out, std::string& error) {
  if (in.size() < kDarshanHeaderSize) {
    error = "truncated: " + std::to_string(in.size()) + " bytes, a Darshan header is " +
            std::to_string(kDarshanHeaderSize);
    return false;
  }
  out.version.assign(in.data(), strnlen(in.data(), 8));
  if (out.version != "3.41") {
    error = "unsupported version string at offset 0: '" + out.version + "' (expected 3.41)";
    return false;
  }
  if (get<int64_t>(in, 8) != kDarshanMagic) {
    error = "bad magic number at offset 8";
    return false;
  }
  out.partial_flag = get<uint64_t>(in, 24);
  if (in[16] != 0) {
    error = "unsupported compression type " + std::to_string(static_cast<int>(in[16])) +
            " at offset 16 (only zlib)";
    return false;
  }
  auto region = [&](uint64_t off, uint64_t len, const char* what, std::string& raw) {
    if (off > in.size() || len > in.size() - off) {
      error = std::string(what) + " region [" + std::to_string(off) + ", +" +
              std::to_string(len) + ") lies past the end of the file (" +
              std::to_string(in.size()) + " bytes)";
      return false;
    }
    std::string why;
    if (!inflate_region(in.substr(off, len), raw, why)) {
      error = std::string(what) + " region at offset " + std::to_string(off) + ": " + why;
      return false;
    }
    return true;
  };
  const uint64_t names_off = get<uint64_t>(in, 32);
  const uint64_t names_len = get<uint64_t>(in, 40);
  if (names_off < kDarshanHeaderSize) {
    error = "name region offset " + std::to_string(names_off) + " overlaps the header";
    return false;
  }
  std::string job;
  if (!region(kDarshanHeaderSize, names_off - kDarshanHeaderSize, "job", job)) return false;
  if (job.size() <= kDarshanJobSize) {
    error = "job region too short: " + std::to_string(job.size()) + " bytes";
    return false;
  }
  out.uid = get<int64_t>(job, 0);
  out.start_sec = get<int64_t>(job, 8);
  out.start_nsec = get<int64_t>(job, 16);
  out.end_sec = get<int64_t>(job, 24);
  out.end_nsec = get<int64_t>(job, 32);
  out.nprocs = get<int64_t>(job, 40);
  out.jobid = get<int64_t>(job, 48);
  out.metadata.assign(job.data() + 56, strnlen(job.data() + 56, kMetadataLen));
  std::string rest(job.data() + kDarshanJobSize, strnlen(job.data() + kDarshanJobSize,
                                                         job.size() - kDarshanJobSize));
  const auto nl = rest.find('\n');
  out.exe = rest.substr(0, nl);
  for (std::size_t pos = nl; pos != std::string::npos;) {
    const auto next = rest.find('\n', pos + 1);
    const std::string entry = rest.substr(pos + 1, next == std::string::npos ? std::string::npos
                                                                             : next - pos - 1);
    const auto tab = entry.find('\t');
    if (tab == std::string::npos) {
      error = "malformed mount entry in the job region: '" + entry + "'";
      return false;
    }
    out.mounts.emplace_back(entry.substr(0, tab), entry.substr(tab + 1));
    pos = next;
  }

  std::string names;
  if (names_len && !region(names_off, names_len, "name", names)) return false;
  for (std::size_t pos = 0; pos < names.size();) {
    if (names.size() - pos < 9) {
      error = "name region: " + std::to_string(names.size() - pos) + " stray bytes at its end";
      return false;
    }
    const uint64_t id = get<uint64_t>(names, pos);
    const std::size_t len = strnlen(names.data() + pos + 8, names.size() - pos - 8);
    if (pos + 8 + len >= names.size()) {
      error = "name region: unterminated name at byte " + std::to_string(pos + 8);
      return false;
    }
    out.names.emplace(id, std::string(names.data() + pos + 8, len));
    pos += 8 + len + 1;
  }

  const std::size_t mod_map = 48;
  const uint64_t poff = get<uint64_t>(in, mod_map + 16 * kDarshanPosixModule);
  const uint64_t plen = get<uint64_t>(in, mod_map + 16 * kDarshanPosixModule + 8);
  const uint32_t pver = get<uint32_t>(in, mod_map + 16 * kMaxMods + 4 * kDarshanPosixModule);
  if (plen) {
    if (pver == 0 || pver > kDarshanPosixVersion) {
      error = "POSIX module version " + std::to_string(pver) + " not supported (1.." +
              std::to_string(kDarshanPosixVersion) + ")";
      return false;
    }
    std::string raw;
    if (!region(poff, plen, "POSIX", raw)) return false;
    if (raw.size() % kDarshanPosixRecordSize != 0) {
      error = "POSIX region: " + std::to_string(raw.size()) + " bytes is not a whole number of " +
              std::to_string(kDarshanPosixRecordSize) + "-byte records";
      return false;
    }
    for (std::size_t pos = 0; pos < raw.size(); pos += kDarshanPosixRecordSize) {
      DarshanPosixRecord r;
      r.id = get<uint64_t>(raw, pos);
      r.rank = get<int64_t>(raw, pos + 8);
      std::memcpy(r.counters.data(), raw.data() + pos + 16, sizeof(int64_t) * kDarshanPosixCounters);
      std::memcpy(r.fcounters.data(), raw.data() + pos + 16 + sizeof(int64_t) * kDarshanPosixCounters,
                  sizeof(double) * kDarshanPosixFCounters);
      out.posix.push_back(r);
    }
  }

  const uint64_t xoff = get<uint64_t>(in, mod_map + 16 * kDarshanDxtPosixModule);
  const uint64_t xlen = get<uint64_t>(in, mod_map + 16 * kDarshanDxtPosixModule + 8);
  const uint32_t xver = get<uint32_t>(in, mod_map + 16 * kMaxMods + 4 * kDarshanDxtPosixModule);
  if (xlen) {
    if (darshan_dxt_segment_size(xver) == 0) {
      error = "DXT_POSIX module version " + std::to_string(xver) + " not supported (1.." +
              std::to_string(kDarshanDxtPosixVersion) + ")";
      return false;
    }
    std::string raw;
    if (!region(xoff, xlen, "DXT_POSIX", raw)) return false;
    out.dxt_posix_version = xver;
    if (!parse_dxt_region(raw, xver, out.names, out.dxt_posix, error)) return false;
  }
  return true;
}

}  // namespace iolens::exporters
