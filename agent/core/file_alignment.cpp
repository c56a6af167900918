// SPDX-License-Identifier: Apache-2.0
#include "core/file_alignment.hpp"

#include <algorithm>
#include <array>
#include <bit>

namespace iolens::core {
namespace {

// darshan-runtime/lib/darshan.h: DARSHAN_MAX_MNTS, DARSHAN_MAX_MNT_PATH (strncpy of 255 bytes).
constexpr std::size_t kMaxMounts = 64;
constexpr std::size_t kMaxPoint = 255;
constexpr int64_t kLustreMagic = 0x0BD00BD0;  // LL_SUPER_MAGIC: Darshan takes 1 MiB there

// darshan-core.c fs_exclusions[]
constexpr std::array<std::string_view, 13> kExcluded = {
    "tmpfs", "proc",  "sysfs", "devpts",     "binfmt_misc", "fusectl",
    "debugfs", "securityfs", "nfsd", "none", "rpc_pipefs",  "hugetlbfs", "cgroup"};

}  // namespace

std::vector<AlignmentMount> darshan_alignment_table(
    const std::vector<std::pair<std::string, std::string>>& mounts,
    const std::function<MountStatfs(const std::string& point)>& statfs_of) {
  struct Entry {
    AlignmentMount m;
    std::string type;
    std::size_t order;
  };
  std::vector<Entry> table;
  const auto add = [&](const std::string& type, const std::string& point) {
    const std::string p = point.substr(0, kMaxPoint);
    const std::string t = type.substr(0, 31);  // DARSHAN_MAX_MNT_TYPE
    for (const Entry& e : table)
      if (e.m.point == p && e.type == t) return;
    const MountStatfs st = statfs_of(point);
    const int64_t bs = !st.ok ? 4096 : st.f_type == kLustreMagic ? 1024 * 1024 : st.f_bsize;
    table.push_back(Entry{AlignmentMount{p, bs}, t, table.size()});
  };
  // Two passes, as Darshan makes them: every mount but nfs (and the excluded types), then nfs.
  for (const auto& [type, point] : mounts) {
    if (table.size() >= kMaxMounts) break;
    if (type == "nfs" || std::find(kExcluded.begin(), kExcluded.end(), type) != kExcluded.end())
      continue;
    add(type, point);
  }
  for (const auto& [type, point] : mounts) {
    if (table.size() >= kMaxMounts) break;
    if (type == "nfs") add(type, point);
  }
  std::sort(table.begin(), table.end(), [](const Entry& a, const Entry& b) {
    if (a.m.point.size() != b.m.point.size()) return a.m.point.size() > b.m.point.size();
    return a.order > b.order;
  });
  std::vector<AlignmentMount> out;
  out.reserve(table.size());
  for (Entry& e : table) out.push_back(std::move(e.m));
  return out;
}

int64_t darshan_file_alignment(const std::vector<AlignmentMount>& table, std::string_view path) {
  for (const AlignmentMount& m : table)
    if (path.starts_with(m.point)) return m.block_size;
  return -1;
}

int64_t AlignmentLookup::of(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return darshan_file_alignment(table_, path);
  const std::string_view dir = path.substr(0, slash);
  auto it = by_dir_.find(dir);
  if (it == by_dir_.end()) {
    bool shared = true;
    for (const AlignmentMount& m : table_)
      if (m.point.size() > dir.size() && std::string_view(m.point).starts_with(dir)) shared = false;
    std::optional<int64_t> a;
    if (shared) a = darshan_file_alignment(table_, dir);
    it = by_dir_.emplace(std::string(dir), a).first;
  }
  return it->second ? *it->second : darshan_file_alignment(table_, path);
}

void set_file_alignments(RunSnapshot& run, const std::vector<AlignmentMount>& table) {
  // A path cut by the kernel's walk holds only its last components: no mount can be told.
  for (FileSnapshot& f : run.files)
    f.file_alignment = f.path_known && !f.path_incomplete
                           ? std::optional<int64_t>(darshan_file_alignment(table, f.path))
                           : std::nullopt;
}

std::optional<int64_t> file_not_aligned(const FileCounters& c, int64_t alignment) {
  if (alignment <= 0 || alignment == 1) return 0;
  const auto a = static_cast<uint64_t>(alignment);
  if (!std::has_single_bit(a)) return std::nullopt;
  const int shift = std::countr_zero(a);
  if (shift < IOLENS_ALIGN_MIN_SHIFT || shift > IOLENS_ALIGN_MAX_SHIFT) return std::nullopt;
  // Not a multiple of 2^shift: the lowest set bit is below it, buckets 0 .. shift - 9.
  uint64_t n = 0;
  for (int k = 0; k <= shift - IOLENS_ALIGN_MIN_SHIFT; ++k) n += c.offset_lsb[k];
  return static_cast<int64_t>(n);
}

}  // namespace iolens::core
