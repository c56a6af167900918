// SPDX-License-Identifier: Apache-2.0
#include "core/counters.hpp"

#include "core/common_values.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>

namespace iolens::core {
namespace {

// Offsets into the kernel record, the base of FileCounters at its offset 0.
#define IOLENS_U(name, fold) CounterField{#name, offsetof(iolens_file_counters, name), false, Fold::fold}
#define IOLENS_S(name, fold) CounterField{#name, offsetof(iolens_file_counters, name), true, Fold::fold}
#define IOLENS_B(name, arr, i) CounterField{name, offsetof(iolens_file_counters, arr) + (i) * 8, false, Fold::Sum}

constexpr std::array kFields = {
    IOLENS_U(opens, Sum),
    IOLENS_U(dups, Sum),
    IOLENS_U(reads, Sum),
    IOLENS_U(writes, Sum),
    IOLENS_U(seeks, Sum),
    IOLENS_U(stats, Sum),
    IOLENS_U(mmaps, Sum),
    IOLENS_U(fsyncs, Sum),
    IOLENS_U(fdsyncs, Sum),
    IOLENS_U(truncates, Sum),
    IOLENS_U(closes, Sum),
    IOLENS_U(bytes_read, Sum),
    IOLENS_U(bytes_written, Sum),
    IOLENS_S(max_byte_read, Max),
    IOLENS_S(max_byte_written, Max),
    IOLENS_U(seq_reads, Sum),
    IOLENS_U(consec_reads, Sum),
    IOLENS_U(seq_writes, Sum),
    IOLENS_U(consec_writes, Sum),
    IOLENS_U(rw_switches, Sum),
    IOLENS_U(mem_not_aligned, Sum),
    IOLENS_U(mode, LastNonZero),
    IOLENS_B("size_read_0_100", size_read, 0),
    IOLENS_B("size_read_100_1k", size_read, 1),
    IOLENS_B("size_read_1k_10k", size_read, 2),
    IOLENS_B("size_read_10k_100k", size_read, 3),
    IOLENS_B("size_read_100k_1m", size_read, 4),
    IOLENS_B("size_read_1m_4m", size_read, 5),
    IOLENS_B("size_read_4m_10m", size_read, 6),
    IOLENS_B("size_read_10m_100m", size_read, 7),
    IOLENS_B("size_read_100m_1g", size_read, 8),
    IOLENS_B("size_read_1g_plus", size_read, 9),
    IOLENS_B("size_write_0_100", size_write, 0),
    IOLENS_B("size_write_100_1k", size_write, 1),
    IOLENS_B("size_write_1k_10k", size_write, 2),
    IOLENS_B("size_write_10k_100k", size_write, 3),
    IOLENS_B("size_write_100k_1m", size_write, 4),
    IOLENS_B("size_write_1m_4m", size_write, 5),
    IOLENS_B("size_write_4m_10m", size_write, 6),
    IOLENS_B("size_write_10m_100m", size_write, 7),
    IOLENS_B("size_write_100m_1g", size_write, 8),
    IOLENS_B("size_write_1g_plus", size_write, 9),
    IOLENS_U(read_time_ns, Sum),
    IOLENS_U(write_time_ns, Sum),
    IOLENS_U(meta_time_ns, Sum),
    IOLENS_U(max_read_time_ns, Max),
    IOLENS_U(max_write_time_ns, Max),
    IOLENS_U(max_read_time_size, Max),
    IOLENS_U(max_write_time_size, Max),
    IOLENS_B("lat_read_le_1us", lat_read, 0),
    IOLENS_B("lat_read_le_4us", lat_read, 1),
    IOLENS_B("lat_read_le_16us", lat_read, 2),
    IOLENS_B("lat_read_le_64us", lat_read, 3),
    IOLENS_B("lat_read_le_256us", lat_read, 4),
    IOLENS_B("lat_read_le_1ms", lat_read, 5),
    IOLENS_B("lat_read_le_4ms", lat_read, 6),
    IOLENS_B("lat_read_le_16ms", lat_read, 7),
    IOLENS_B("lat_read_le_64ms", lat_read, 8),
    IOLENS_B("lat_read_le_256ms", lat_read, 9),
    IOLENS_B("lat_read_le_1s", lat_read, 10),
    IOLENS_B("lat_read_gt_1s", lat_read, 11),
    IOLENS_B("lat_write_le_1us", lat_write, 0),
    IOLENS_B("lat_write_le_4us", lat_write, 1),
    IOLENS_B("lat_write_le_16us", lat_write, 2),
    IOLENS_B("lat_write_le_64us", lat_write, 3),
    IOLENS_B("lat_write_le_256us", lat_write, 4),
    IOLENS_B("lat_write_le_1ms", lat_write, 5),
    IOLENS_B("lat_write_le_4ms", lat_write, 6),
    IOLENS_B("lat_write_le_16ms", lat_write, 7),
    IOLENS_B("lat_write_le_64ms", lat_write, 8),
    IOLENS_B("lat_write_le_256ms", lat_write, 9),
    IOLENS_B("lat_write_le_1s", lat_write, 10),
    IOLENS_B("lat_write_gt_1s", lat_write, 11),
    IOLENS_U(lat_read_sum_ns, Sum),
    IOLENS_U(lat_write_sum_ns, Sum),
    IOLENS_U(open_start_ns, MinStart),
    IOLENS_U(open_end_ns, LastEnd),
    IOLENS_U(read_start_ns, MinStart),
    IOLENS_U(read_end_ns, LastEnd),
    IOLENS_U(write_start_ns, MinStart),
    IOLENS_U(write_end_ns, LastEnd),
    IOLENS_U(close_start_ns, MinStart),
    IOLENS_U(close_end_ns, LastEnd),
    IOLENS_U(meta_start_ns, MinStart),
    IOLENS_U(meta_end_ns, LastEnd),
    IOLENS_U(cache_read_pages, Sum),
    IOLENS_U(cache_miss_pages, Sum),
    IOLENS_U(ra_sync, Sum),
    IOLENS_U(ra_async, Sum),
    IOLENS_U(prefetch_pages, Sum),
    IOLENS_U(fault_pages, Sum),
    IOLENS_U(fault_around_pages, Sum),
    IOLENS_U(fault_miss_pages, Sum),
    IOLENS_U(direct_reads, Sum),
    IOLENS_U(direct_writes, Sum),
    IOLENS_U(direct_bytes_read, Sum),
    IOLENS_U(direct_bytes_written, Sum),
    IOLENS_U(direct_read_time_ns, Sum),
    IOLENS_U(direct_write_time_ns, Sum),
    IOLENS_U(direct_max_time_ns, Max),
    IOLENS_U(uring_reads, Sum),
    IOLENS_U(uring_writes, Sum),
    IOLENS_U(uring_bytes_read, Sum),
    IOLENS_U(uring_bytes_written, Sum),
    IOLENS_U(uring_opens, Sum),
    IOLENS_U(uring_closes, Sum),
    IOLENS_U(uring_other, Sum),
    IOLENS_U(dirtied_pages, Sum),
    IOLENS_U(throttle_ns, Sum),
    IOLENS_U(throttles, Sum),
    IOLENS_U(wb_waits, Sum),
};

#undef IOLENS_U
#undef IOLENS_S
#undef IOLENS_B

// The bucket bounds of the header and of iolens_lat_bucket, checked where both are visible.
static_assert(kLatencyBoundsNs.size() == IOLENS_NR_LAT_BUCKETS - 1);
static_assert(std::is_sorted(kLatencyBoundsNs.begin(), kLatencyBoundsNs.end()));

// `off` is into the kernel record (the base).
uint64_t& u64_at(FileCounters& c, std::size_t off) {
  return *reinterpret_cast<uint64_t*>(
      reinterpret_cast<char*>(static_cast<iolens_file_counters*>(&c)) + off);
}
uint64_t u64_at(const FileCounters& c, std::size_t off) {
  uint64_t v;
  std::memcpy(&v,
              reinterpret_cast<const char*>(static_cast<const iolens_file_counters*>(&c)) + off,
              sizeof(v));
  return v;
}

}  // namespace

std::span<const CounterField> counter_fields() { return kFields; }

int64_t counter_value(const FileCounters& c, const CounterField& f) {
  auto v = static_cast<int64_t>(u64_at(c, f.offset));
  if (f.is_signed && v < 0) return 0;  // "none": Darshan prints 0
  return v;
}

FileCounters from_kernel(const iolens_file_counters& record, const iolens_more_tallies* more) {
  FileCounters c{};
  static_cast<iolens_file_counters&>(c) = record;
  if (more) c.more = *more;
  return c;
}

FileCounters new_counters() {
  FileCounters c{};
  c.max_byte_read = -1;
  c.max_byte_written = -1;
  return c;
}

void combine_counters(FileCounters& into, const FileCounters& other) {
  // Not exported as such (file_alignment.hpp turns them into FILE_NOT_ALIGNED), but summed.
  for (int i = 0; i < IOLENS_NR_ALIGN_BUCKETS; ++i) into.offset_lsb[i] += other.offset_lsb[i];
  // Tallies of values (common_values.hpp turns them into ACCESS1..4 and STRIDE1..4)
  merge_tallies(into, other);
  // The max-time sizes follow their times, so fold them before the times are overwritten.
  if (other.max_read_time_ns > into.max_read_time_ns)
    into.max_read_time_size = other.max_read_time_size;
  if (other.max_write_time_ns > into.max_write_time_ns)
    into.max_write_time_size = other.max_write_time_size;
  for (const auto& f : kFields) {
    if (f.name == "max_read_time_size" || f.name == "max_write_time_size") continue;
    uint64_t& a = u64_at(into, f.offset);
    const uint64_t b = u64_at(other, f.offset);
    switch (f.fold) {
      case Fold::Sum: a += b; break;
      case Fold::Max:
        if (f.is_signed) {
          if (static_cast<int64_t>(b) > static_cast<int64_t>(a)) a = b;
        } else {
          a = std::max(a, b);
        }
        break;
      case Fold::MinStart:
        if (b != 0 && (a == 0 || b < a)) a = b;
        break;
      case Fold::LastEnd: a = std::max(a, b); break;
      case Fold::LastNonZero:
        if (b != 0) a = b;
        break;
    }
  }
}

void fold_counters(FileCounters& earlier, const FileCounters& later) {
  combine_counters(earlier, later);
  // Darshan counts a switch when a read follows a write on the record; the split hid it.
  if (earlier.last_io_type != IOLENS_IO_NONE && later.first_io_type != IOLENS_IO_NONE &&
      earlier.last_io_type != later.first_io_type)
    earlier.rw_switches += 1;
  if (earlier.first_io_type == IOLENS_IO_NONE) earlier.first_io_type = later.first_io_type;
  if (later.last_io_type != IOLENS_IO_NONE) earlier.last_io_type = later.last_io_type;
  earlier.last_byte_read = later.last_byte_read;
  earlier.last_byte_written = later.last_byte_written;
  earlier.last_read_end_ns = std::max(earlier.last_read_end_ns, later.last_read_end_ns);
  earlier.last_write_end_ns = std::max(earlier.last_write_end_ns, later.last_write_end_ns);
  earlier.last_meta_end_ns = std::max(earlier.last_meta_end_ns, later.last_meta_end_ns);
  earlier.open_fds += later.open_fds;
}

void add_totals(FileCounters& total, const FileCounters& c) {
  for (int i = 0; i < IOLENS_NR_ALIGN_BUCKETS; ++i) total.offset_lsb[i] += c.offset_lsb[i];
  for (const auto& f : kFields) {
    if (f.fold != Fold::Sum) continue;
    u64_at(total, f.offset) += u64_at(c, f.offset);
  }
}

bool has_activity(const FileCounters& c) {
  return c.opens || c.reads || c.writes || c.seeks || c.stats || c.mmaps || c.fsyncs ||
         c.fdsyncs || c.truncates || c.closes || below_syscalls(c);
}

bool below_syscalls(const FileCounters& c) {
  return c.cache_read_pages || c.cache_miss_pages || c.ra_sync || c.ra_async ||
         c.prefetch_pages || c.fault_pages || c.fault_around_pages || c.fault_miss_pages ||
         c.direct_reads || c.direct_writes || c.uring_reads || c.uring_writes || c.uring_opens ||
         c.uring_closes || c.uring_other || c.dirtied_pages || c.throttles || c.wb_waits;
}

bool foldable(const iolens_file_counters& c) {
  if (c.reads == 0 && c.writes == 0) return c.open_fds <= 0;
  return c.opens > 0 && c.open_fds == 0;
}

namespace {
constexpr uint64_t kPageBytes = 4096;  // the kernel's base page on x86-64 (the ABI's unit)

double hit_ratio(uint64_t misses, uint64_t asked) {
  if (asked == 0) return -1;
  return misses >= asked ? 0.0 : 1.0 - static_cast<double>(misses) / static_cast<double>(asked);
}
}  // namespace

ReadCoverage read_coverage(const FileCounters& c) {
  ReadCoverage r;
  r.uring_bytes = c.uring_bytes_read;
  r.syscall_bytes = c.bytes_read > c.uring_bytes_read ? c.bytes_read - c.uring_bytes_read : 0;
  r.direct_bytes = c.direct_bytes_read;
  r.fault_bytes = c.fault_pages * kPageBytes;
  r.cache_hit_ratio = hit_ratio(c.cache_miss_pages, c.cache_read_pages);
  r.fault_hit_ratio = hit_ratio(c.fault_miss_pages, c.fault_pages);
  return r;
}

uint64_t last_activity_ns(const iolens_file_counters& c) {
  // The last_*_end_ns state fields also see the calls without an exported end time (fsync,
  // fdatasync, mmap, dup).
  return std::max({c.open_end_ns, c.read_end_ns, c.write_end_ns, c.close_end_ns, c.meta_end_ns,
                   c.last_read_end_ns, c.last_write_end_ns, c.last_meta_end_ns});
}

bool live_evictable(const iolens_file_counters& c, std::size_t in_map, std::size_t max, uint64_t now_ns,
                    std::optional<uint64_t> last_ns) {
  if (in_map * 2 <= max || !foldable(c)) return false;
  if (in_map * 4 > max * 3) return true;
  const uint64_t last = last_ns ? *last_ns : last_activity_ns(c);
  return now_ns > last && now_ns - last >= kEvictIdleNs;
}

namespace {
/// A fingerprint of counters a whole number of u64 words long, padding-free (the ABI's layout
/// checks): word by word, in two lanes mixed by multiplies, so that a change of any bit of any
/// word changes it (but for a collision, which would only let a record be taken one drain
/// early, or leave a live record's copy one change behind until it changes again or leaves
/// the map). ~200 words; a byte at a time (FNV-1a) was a chain of 1,352 multiplies a record.
template <typename Counters>
uint64_t words_fingerprint(const Counters& c) {
  static_assert(sizeof(Counters) % 8 == 0);
  static_assert(std::has_unique_object_representations_v<Counters>);
  constexpr std::size_t kWords = sizeof(Counters) / 8;
  uint64_t w[kWords];
  std::memcpy(w, &c, sizeof w);
  uint64_t h = 0x9e3779b97f4a7c15ULL, g = 0;
  for (std::size_t i = 0; i < kWords; i += 2) {
    h = (h ^ w[i]) * 0xff51afd7ed558ccdULL;
    if (i + 1 < kWords) g = (g ^ w[i + 1]) * 0xc4ceb9fe1a85ec53ULL;
    h = std::rotl(h, 31);
    g = std::rotl(g, 29);
  }
  h ^= std::rotl(g, 17);
  h ^= h >> 33;
  return h * 0xff51afd7ed558ccdULL;
}
}  // namespace

std::size_t FileKeyHash::operator()(const iolens_file_key& k) const {
  // Field by field, a word at a time: ~2.5 ns a key here, where FNV-1a a byte at a time over
  // the 28 bytes (a chain of 28 multiplies) took ~24 ns, and a drain looks up every record it
  // reads in several hashed sets. Each step is a bijection of the running value, so keys that
  // differ in one field always hash apart; the last steps spread every bit over the low ones.
  uint64_t h = (k.ino ^ 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
  h = std::rotl(h, 29) ^ (static_cast<uint64_t>(k.dev) << 32 | k.gen);
  h = (h * 0x94d049bb133111ebULL);
  h = std::rotl(h, 29) ^ (static_cast<uint64_t>(k.tgid) * 0x9e3779b97f4a7c15ULL);
  h = (h ^ k.pstart_ns) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 31)) * 0x94d049bb133111ebULL;
  return static_cast<std::size_t>(h ^ (h >> 29));
}

bool FileKeyEq::operator()(const iolens_file_key& a, const iolens_file_key& b) const {
  return a.ino == b.ino && a.dev == b.dev && a.gen == b.gen && a.tgid == b.tgid &&
         a.pstart_ns == b.pstart_ns;
}

bool drain_evictable(const iolens_file_key& k, const iolens_file_counters& c, std::size_t in_map,
                     std::size_t max, uint64_t now_ns, IdleClock* idle) {
  if (!idle) return live_evictable(c, in_map, max, now_ns);
  if (in_map * 2 <= max || !foldable(c)) return false;
  return live_evictable(c, in_map, max, now_ns, idle->since(k, c, now_ns));
}

uint64_t IdleClock::since(const iolens_file_key& k, const iolens_file_counters& c, uint64_t now_ns) {
  const uint64_t fp = words_fingerprint(c);
  uint64_t since_ns = now_ns;
  if (auto it = prev_.find(k); it != prev_.end() && it->second.fingerprint == fp)
    since_ns = it->second.since_ns;
  next_[k] = Seen{fp, since_ns};
  return since_ns;
}

uint64_t UnchangedRecords::fingerprint(const FileCounters& c) {
  static_assert(std::has_unique_object_representations_v<iolens_more_tallies>);
  return words_fingerprint(c);
}

bool UnchangedRecords::unchanged(const iolens_file_key& k, uint64_t fp) {
  auto it = seen_.find(k);
  if (it == seen_.end() || it->second.fingerprint != fp) return false;
  it->second.walk = walk_;
  return true;
}

void UnchangedRecords::end() {
  std::erase_if(seen_, [this](const auto& kv) { return kv.second.walk != walk_; });
}

}  // namespace iolens::core
