// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A Darshan log (format "3.41", POSIX module version 4) of a run, which Darshan's own tools
/// (darshan-parser, PyDarshan) read; and a reader of such logs. Layout: docs/darshan-log.md.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

struct DarshanJobInfo {
  int64_t uid = 0;
  int64_t jobid = 0;                                           // the root pid by default
  std::vector<std::pair<std::string, std::string>> mounts;   // (fstype, mount point)
};

/// Darshan's record id of a path: Jenkins lookup8 hash of its bytes, level 0.
uint64_t darshan_record_id(std::string_view path);

/// The whole log file. Each process of the run is a rank (in start order); each (process, file)
/// record a POSIX record of that rank.
std::string darshan_log(const core::RunSnapshot& run, const DarshanJobInfo& job);

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
  std::vector<DarshanPosixRecord> posix;
};

/// Parses a log. On failure returns false and says what is wrong and at which byte offset.
bool read_darshan_log(std::string_view bytes, DarshanLogContents& out, std::string& error);

/// Index of a POSIX counter by its Darshan name without the prefix ("READS", "F_READ_TIME").
int darshan_posix_counter_index(std::string_view name);
int darshan_posix_fcounter_index(std::string_view name);

}  // namespace iolens::exporters
