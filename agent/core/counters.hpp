// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Names, order and folding of the per-file counters (the kernel ABI struct is the storage).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <span>
#include <string_view>

#include "iolens_abi.h"

namespace iolens::core {

/// A record's counters as user space holds them: the kernel's record, which stores every
/// counter, and its side entry's tally slots 9..32 (iolens_more_tallies, iolens_abi.h; all 0
/// for the records that have none, nearly all). Trivially copyable, whole 64-bit words: a
/// PackedCounters holds the words of both. The record is the base, at offset 0, so that the
/// kernel's accounting functions (iolens_account.h) take it as they are.
struct FileCounters : iolens_file_counters {
  iolens_more_tallies more;
};

/// A record read from the kernel, with its side entry if it has one.
FileCounters from_kernel(const iolens_file_counters& record, const iolens_more_tallies* more);

/// Inclusive upper bounds, in ns, of the finite per-call latency buckets `lat_read[i]` /
/// `lat_write[i]` (i < 11); the last bucket holds everything above 1 s. The kernel's
/// iolens_lat_bucket (bpf/iolens_account.h) uses the same bounds. For exporters that turn the
/// buckets into cumulative histograms (Prometheus `le`, in seconds: bound / 1e9).
inline constexpr std::array<uint64_t, IOLENS_NR_LAT_BUCKETS - 1> kLatencyBoundsNs = {
    1'000,       4'000,       16'000,        64'000,        256'000,      1'000'000,
    4'000'000,   16'000'000,  64'000'000,    256'000'000,   1'000'000'000,
};

/// How a counter combines when two partial records of one (process, file) are folded together.
/// LastNonZero: the later part's value unless it is 0 (Darshan's MODE: the last non-zero mode).
enum class Fold { Sum, Max, MinStart, LastEnd, LastNonZero };

/// One exported counter: its JSON/Darshan-style name, where it lives, and how it folds.
struct CounterField {
  std::string_view name;
  std::size_t offset;  // into FileCounters
  bool is_signed;
  Fold fold;
};

/// Every exported counter, in documentation order (docs/counters.md).
std::span<const CounterField> counter_fields();

/// The value of one counter as exported. max_byte_* read -1 ("none") internally and are
/// exported as Darshan does: 0 when nothing was read/written.
int64_t counter_value(const FileCounters& c, const CounterField& f);

/// A fresh record, as the kernel creates it.
FileCounters new_counters();

/// Combine the counters of `other` into `into`, field by field as the Fold of each says: sums
/// add, maxima take the max (a max_*_time_size follows its time), starts the earliest non-zero,
/// ends the latest, the mode `other`'s when not 0, the tallies of access sizes and strides
/// merged (`other`'s values after `into`'s: merge_tally). No state is carried over: for records
/// of different files (a process's "other files" record), where sums must stay exact sums.
void combine_counters(FileCounters& into, const FileCounters& other);

/// Fold `later` (a record of the same (process, file) created after `earlier` was removed from
/// the kernel map) into `earlier`: combine_counters, plus one rw switch when the later part
/// begins with the other direction, and the later part's pattern state.
void fold_counters(FileCounters& earlier, const FileCounters& later);

/// Add `c`'s count, byte and time counters into `total` (for per-process sums).
void add_totals(FileCounters& total, const FileCounters& c);

/// Whether the record saw any operation at all.
bool has_activity(const FileCounters& c);

/// Whether the record saw anything of the layers below the system calls (page cache, faults,
/// O_DIRECT, io_uring, dirtying, writeback waits).
bool below_syscalls(const FileCounters& c);

/// Whether a live record can be moved out of the kernel and a fresh one started without changing
/// any counter: no descriptor of it is open (its opens were all closed), or it never saw a data
/// call (stats only). A record read through an inherited descriptor (opens 0, reads > 0) is not:
/// its pattern state (last byte) would restart.
bool foldable(const iolens_file_counters& c);

/// How a file's bytes were read, path by path (issue "coverage"): the exporters' summary of
/// the counters below the system calls. Reads by O_DIRECT are also reads of a system call or
/// of io_uring, so `direct_bytes` overlaps those two; the others do not overlap.
struct ReadCoverage {
  uint64_t syscall_bytes = 0;  // read family and copies (bytes_read less io_uring's)
  uint64_t uring_bytes = 0;    // io_uring reads
  uint64_t direct_bytes = 0;   // of the two above, those that bypassed the page cache
  uint64_t fault_bytes = 0;    // mmap: pages faulted in, as bytes (fault-around not included)
  /// Share of the pages buffered reads asked for that were already in the page cache:
  /// 1 - cache_miss_pages / cache_read_pages, clamped to [0, 1]; < 0 when no buffered read
  /// reached the page cache (nothing to say).
  double cache_hit_ratio = -1;
  /// The same for faults: 1 - fault_miss_pages / fault_pages, clamped; < 0 without faults.
  double fault_hit_ratio = -1;
};

/// The coverage of one record (a file's, or a process's or a run's sums).
ReadCoverage read_coverage(const FileCounters& c);

/// The end of the latest call counted in the record (CLOCK_MONOTONIC ns, 0 = none).
uint64_t last_activity_ns(const iolens_file_counters& c);

/// How long a foldable record must have been idle before a drain takes it out of the kernel map
/// while its process lives, unless the map is nearly full. Long enough for a file closed and
/// opened again at once; short enough that a burst of new files (10,000 a second) keeps few
/// records back: 200 ms held back 2,000 and overflowed a 4,096-record map under load.
inline constexpr uint64_t kEvictIdleNs = 10'000'000;

/// Whether a drain should read and delete this live record to make room in the kernel map,
/// which holds `in_map` of `max` records. Only when the map is over half full, and only a
/// foldable record. A BPF program updates a record through the pointer it looked up: an update
/// that began just before the delete lands in the deleted copy and is lost. So while the map has
/// room (up to 3/4 full) only records idle for kEvictIdleNs are taken: a file closed and opened
/// again at once (written, then read back) keeps its record. Beyond 3/4, any foldable record
/// is taken: a full map (records not created, counted, and every later call on those files
/// lost) is worse than a call racing its record's eviction. `last_ns`: when the record was last
/// active, if not its own end times (last_activity_ns; timing off: IdleClock::since).
bool live_evictable(const iolens_file_counters& c, std::size_t in_map, std::size_t max, uint64_t now_ns,
                    std::optional<uint64_t> last_ns = std::nullopt);

/// Hash and equality of a kernel file key by its fields (not its padding), for the hashed
/// containers of a drain: one lookup per record per drain (a daemon's drain reads every record
/// in the map each round, tens of thousands for a DataLoader job).
struct FileKeyHash {
  std::size_t operator()(const iolens_file_key& k) const;
};
struct FileKeyEq {
  bool operator()(const iolens_file_key& a, const iolens_file_key& b) const;
};

/// Timing off: no record has an end time (docs/counters.md#timing), so a drain tells an idle
/// record by its counters not having changed since an earlier drain saw them as they are: it
/// has been idle since that drain at least. Per drain: begin(), since() for each record that
/// may be evicted, end(); a record not asked about in a drain is forgotten.
class IdleClock {
 public:
  void begin() { next_.clear(); }
  /// The time of the first drain that saw `c` as it is now (now_ns if this one is the first).
  uint64_t since(const iolens_file_key& k, const iolens_file_counters& c, uint64_t now_ns);
  void end() { prev_.swap(next_); }
  std::size_t tracked() const { return prev_.size(); }

 private:
  struct Seen {
    uint64_t fingerprint;
    uint64_t since_ns;
  };
  std::unordered_map<iolens_file_key, Seen, FileKeyHash, FileKeyEq> prev_, next_;
};

/// Which live records a drain has handed on exactly as they are now. A daemon's drain reads
/// every record in the kernel map at each round, and most live ones did not change since the
/// last: handing one on again (its job and process looked up, two tree look-ups in the job's
/// recorder, ~1.6 KB of counters packed to find them equal) was over a quarter of iolensd's CPU
/// at 10,000 new files a second, where each record was read about ten times before it left the
/// map (bench/README.md "Unchanged live records"). With this, an unchanged one costs a
/// fingerprint and a hash look-up.
///
/// Per walk of the map: begin(); for each live record read, unchanged(), and handed() once it
/// was handed on; removed() for each record handed on as removed (a later record of the same
/// key starts afresh, and may equal the old one with timing off); end() forgets the records
/// the walk did not read (gone from the map some other way). What was handed on must stay
/// held until removed(): a holder that drops live parts (none does: folds and process folds
/// take only records out of the kernel) would have to clear() it.
class UnchangedRecords {
 public:
  /// Every byte of the counters, the side entry's too (a live record's side entry is read as
  /// the walk begins, so it can be newer at a later walk though the record is not).
  static uint64_t fingerprint(const FileCounters& c);
  void begin() { ++walk_; }
  /// Whether `k` was handed on with fingerprint `fp` and has not been removed since; if so it
  /// counts as read by this walk.
  bool unchanged(const iolens_file_key& k, uint64_t fp);
  void handed(const iolens_file_key& k, uint64_t fp) { seen_[k] = Seen{fp, walk_}; }
  void removed(const iolens_file_key& k) { seen_.erase(k); }
  void end();
  void clear() { seen_.clear(); }
  std::size_t size() const { return seen_.size(); }

 private:
  struct Seen {
    uint64_t fingerprint;
    uint64_t walk;  // the last walk that read it
  };
  std::unordered_map<iolens_file_key, Seen, FileKeyHash, FileKeyEq> seen_;
  uint64_t walk_ = 0;
};

/// live_evictable in a drain: the record's last activity is its own end times, or with `idle`
/// (timing off) the first drain that saw it as it is.
bool drain_evictable(const iolens_file_key& k, const iolens_file_counters& c, std::size_t in_map,
                     std::size_t max, uint64_t now_ns, IdleClock* idle);

}  // namespace iolens::core
