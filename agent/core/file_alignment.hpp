// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Darshan's file alignment (POSIX_FILE_ALIGNMENT) and FILE_NOT_ALIGNED, found the way Darshan
/// finds them: the alignment from the mount table by path prefix (darshan-core.c
/// darshan_get_exe_and_mounts, add_entry, darshan_fs_info_from_path), the count from the
/// kernel's offsets by lowest set bit (iolens_file_counters::offset_lsb). Pure: the block size
/// of a mount comes from the caller (statfs is I/O). Rules and source lines: docs/counters.md
/// "Alignment and mode".

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/counters.hpp"
#include "core/snapshot.hpp"

namespace iolens::core {

/// One entry of Darshan's mount table: a mount point and the alignment of files under it.
struct AlignmentMount {
  std::string point;
  int64_t block_size = 0;
  bool operator==(const AlignmentMount&) const = default;
};

/// What statfs() said of a mount point, as Darshan reads it.
struct MountStatfs {
  bool ok = false;        // statfs() succeeded
  int64_t f_type = 0;     // the file system's magic
  int64_t f_bsize = 0;
};

/// Darshan's mount table from the mounts (fstype, mount point) in /etc/mtab's order: the
/// excluded types left out (tmpfs, proc, sysfs, devpts, binfmt_misc, fusectl, debugfs,
/// securityfs, nfsd, none, rpc_pipefs, hugetlbfs, cgroup), nfs mounts after all others, a
/// (point, type) seen before skipped, at most 64, each point cut to 255 bytes; the block size
/// statfs's f_bsize, 1 MiB on Lustre, 4096 when statfs fails; sorted by path length, longest
/// first (where Darshan's qsort leaves equal lengths in no set order, the later mount first:
/// the one a path resolves to when two share a point).
std::vector<AlignmentMount> darshan_alignment_table(
    const std::vector<std::pair<std::string, std::string>>& mounts,
    const std::function<MountStatfs(const std::string& point)>& statfs_of);

/// Darshan's FILE_ALIGNMENT of a file: the block size of the first (longest) table entry whose
/// point is a string prefix of the path (not only at a '/': "/data" is a prefix of "/data2/x",
/// as in Darshan), -1 when none is.
int64_t darshan_file_alignment(const std::vector<AlignmentMount>& table, std::string_view path);

/// darshan_file_alignment for the many paths of a job's records, each directory searched once:
/// the files of a directory that no mount point extends (none is longer than the directory and
/// begins with it) share its answer, as a mount point that is a prefix of one of them is then a
/// prefix of the directory. The others (a mount point below the directory, or that begins like
/// a file's name: "/d/a" is a prefix of "/d/ab" in Darshan's rule) are searched each time.
class AlignmentLookup {
 public:
  explicit AlignmentLookup(const std::vector<AlignmentMount>& table) : table_(table) {}
  int64_t of(std::string_view path);

 private:
  const std::vector<AlignmentMount>& table_;
  // Looked up by string_view (no string made for a directory seen before)
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::optional<int64_t>, Hash, std::equal_to<>>
      by_dir_;  // nullopt: not shared
};

/// Darshan's FILE_NOT_ALIGNED for `alignment`: the counted reads and writes whose offset is not
/// a multiple of it. 0 for an alignment of -1 or below (Darshan checks nothing then) and of 1;
/// nullopt when the buckets cannot tell: an alignment that is not a power of two, or is
/// 2-256 B, or above 16 MiB.
std::optional<int64_t> file_not_aligned(const FileCounters& c, int64_t alignment);

/// Sets every row's file_alignment from the table (its path); nullopt (not known) for a row
/// whose path is unknown or incomplete.
void set_file_alignments(RunSnapshot& run, const std::vector<AlignmentMount>& table);

}  // namespace iolens::core
