// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A Darshan log (format "3.41", POSIX module version 4, optionally DXT_POSIX) of a run, which
/// Darshan's own tools (darshan-parser, darshan-dxt-parser, PyDarshan) read; and a reader of
/// such logs. Layout: docs/darshan-log.md.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/file_alignment.hpp"
#include "core/snapshot.hpp"

namespace iolens::exporters {

inline constexpr std::size_t kDarshanHeaderSize = 1328;
inline constexpr std::size_t kDarshanJobSize = 1080;
inline constexpr std::size_t kDarshanPosixRecordSize = 704;
inline constexpr int kDarshanPosixCounters = 69;
inline constexpr int kDarshanPosixFCounters = 17;
inline constexpr int kDarshanPosixModule = 1;
inline constexpr uint32_t kDarshanPosixVersion = 4;
inline constexpr int64_t kDarshanMagic = 6567223;
// DXT_POSIX (darshan-dxt-log-format.h): module 10 of format 3.41's module list. Version 1 has
// 32-byte segments (Darshan <= 3.5); version 2 (Darshan 3.6) adds an 8-byte thread id.
inline constexpr int kDarshanDxtPosixModule = 10;
inline constexpr uint32_t kDarshanDxtPosixVersion = 2;
inline constexpr std::size_t kDarshanDxtHeaderSize = 104;  // id, rank, shared, hostname[64], 2 counts
inline constexpr std::size_t kDarshanDxtHostnameSize = 64;

/// Bytes of one DXT segment in a DXT_POSIX module version: 32 (v1), 40 (v2); 0 if unknown.
std::size_t darshan_dxt_segment_size(uint32_t version);

struct DarshanJobInfo {
  int64_t uid = 0;
  int64_t jobid = 0;                                           // the root pid by default
  /// The job region's exe line; "" = the run's command line.
  std::string exe;
  /// Where the snapshot's timestamps start from, on their own clock: Darshan's count from the
  /// job start (RunSnapshot::start_ns), so this is subtracted from every timestamp that is set
  /// (a result below 0, I/O before an estimated start, stays negative). 0 for a snapshot taken
  /// from the run start, as `iolens run` takes it; iolensd's count from boot.
  uint64_t timestamp_base_ns = 0;
  std::vector<std::pair<std::string, std::string>> mounts;   // (fstype, mount point)
  /// Extra "key=value" lines of the job metadata, after lib_ver and producer (newlines in them
  /// become spaces; lines that do not fit Darshan's 1,023 bytes are left out).
  std::vector<std::pair<std::string, std::string>> metadata;
};

/// One read or write of a DXT trace (Darshan's segment_info).
struct DxtSegment {
  int64_t offset = 0;  // bytes; -1 = unknown
  int64_t length = 0;  // bytes transferred (the call's return value)
  double start = 0;    // seconds since the job start
  double end = 0;
  /// Version 2's thread field (Darshan: pthread_self()). iolens writes the Linux thread id;
  /// -1 = unknown (what a version 1 record reads as).
  int64_t thread = -1;
};

/// The DXT_POSIX record of one (rank, file): its writes, then its reads, each in call order.
struct DarshanDxtRecord {
  std::string path;      // writing: the file (its record id is darshan_record_id(path));
                         // reading: the name of `id` in the name region, "" if none
  uint64_t id = 0;       // reading only: the record id
  int64_t rank = 0;
  std::string hostname;  // cut to 63 bytes
  std::vector<DxtSegment> writes, reads;
};

/// What the DXT_POSIX module of a log holds.
struct DarshanDxt {
  uint32_t version = kDarshanDxtPosixVersion;  // 1 or 2
  std::vector<DarshanDxtRecord> records;
  bool partial = false;  // records were lost: the module's bit of the header's partial_flag
};

/// Darshan's job id for a job whose own id is `id`: that number when `id` is one (such as a
/// Slurm job id: decimal digits, at most 18), else `fallback` (a process id).
int64_t darshan_jobid(std::string_view id, int64_t fallback);

/// The (fstype, mount point) of each line of a mounts file (`/proc/self/mounts`), for
/// DarshanJobInfo::mounts; empty when it cannot be read. The kernel's octal escapes (\040 for a
/// space, \011, \012, \134) are decoded, as getmntent() decodes them for Darshan.
std::vector<std::pair<std::string, std::string>> read_mounts(const std::string& path);

/// Darshan's alignment table of those mounts (core::darshan_alignment_table), each block size
/// from statfs() of its point now. The points are asked all at once, each on a thread of its
/// own; one that has not answered within kStatfsWaitMs (a hung NFS server, a FUSE server that
/// never answers) is taken as failed, as Darshan takes a failed one (4096), and logged: the
/// caller (iolensd's record writer, `iolens run`) is held a second at most, however many hang.
/// The thread of such a point is left waiting, holding no descriptor; a point whose statfs() is
/// still waiting is not asked again (no second thread, no second warning) until it answers.
std::vector<core::AlignmentMount> alignment_table(
    const std::vector<std::pair<std::string, std::string>>& mounts);
inline constexpr int kStatfsWaitMs = 1000;

/// This process's alignment table now, as a trace file's header keeps it (trace::Meta).
std::vector<std::pair<std::string, int64_t>> alignment_mounts_now();

/// Darshan's record id of a path: Jenkins lookup8 hash of its bytes, level 0.
uint64_t darshan_record_id(std::string_view path);

/// The whole log file. Each process of the run is a rank (in start order); each (process, file)
/// record a POSIX record of that rank. Records folded to bound memory (`run.folded_records`)
/// are in none: the POSIX module is then marked partial, as Darshan marks a module that ran out
/// of records.
std::string darshan_log(const core::RunSnapshot& run, const DarshanJobInfo& job);

/// The same log plus a DXT_POSIX module (its own zlib region after POSIX's) holding `dxt`'s
/// records; with no records, exactly the log above.
std::string darshan_log(const core::RunSnapshot& run, const DarshanJobInfo& job,
                        const DarshanDxt& dxt);

/// A log read back (for tests and tools).
struct DarshanPosixRecord {
  uint64_t id = 0;
  int64_t rank = 0;
  std::array<int64_t, kDarshanPosixCounters> counters{};
  std::array<double, kDarshanPosixFCounters> fcounters{};
};

struct DarshanLogContents {
  std::string version;
  int64_t uid = 0, start_sec = 0, start_nsec = 0, end_sec = 0, end_nsec = 0, nprocs = 0, jobid = 0;
  std::string metadata;
  std::string exe;
  std::vector<std::pair<std::string, std::string>> mounts;
  std::map<uint64_t, std::string> names;
  uint64_t partial_flag = 0;
  std::vector<DarshanPosixRecord> posix;
  uint32_t dxt_posix_version = 0;  // 0: no DXT_POSIX module
  std::vector<DarshanDxtRecord> dxt_posix;
};

/// Parses a log. On failure returns false and says what is wrong and at which byte offset.
bool read_darshan_log(std::string_view bytes, DarshanLogContents& out, std::string& error);

/// Index of a POSIX counter by its Darshan name without the prefix ("READS", "F_READ_TIME").
int darshan_posix_counter_index(std::string_view name);
int darshan_posix_fcounter_index(std::string_view name);

}  // namespace iolens::exporters
