// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Aggregation of everything the kernel sends into per-process and per-file records. Pure:
/// fed by decoded events and map snapshots (from the loader or from tests), no clock of its own.

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/counters.hpp"
#include "core/events.hpp"
#include "core/packed_counters.hpp"
#include "core/snapshot.hpp"
#include "iolens_abi.h"

namespace iolens::core {

/// A file incarnation: (kernel dev_t, inode, generation); inode numbers are reused after an
/// unlink, generations are not. 16 bytes, ordered by (dev, ino, gen).
struct FileIdentity {
  uint64_t ino = 0;
  uint32_t dev = 0;  // kernel dev_t
  uint32_t gen = 0;  // inode generation; 0 = unknown (path-based stat)
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
  friend std::strong_ordering operator<=>(const FileIdentity& a, const FileIdentity& b) {
    return std::tie(a.dev, a.ino, a.gen) <=> std::tie(b.dev, b.ino, b.gen);
  }
};
static_assert(sizeof(FileIdentity) == 16);

/// For hashed sets of files: a daemon job's `named`, looked up for every record of every drain.
/// splitmix64's finalizer over the fields (inode numbers are dense; dev and gen vary little).
struct FileIdentityHash {
  std::size_t operator()(const FileIdentity& f) const {
    uint64_t h = f.ino ^ ((static_cast<uint64_t>(f.dev) << 32 | f.gen) * 0x9e3779b97f4a7c15ULL);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
};

struct FileKey {
  uint32_t dev = 0;  // kernel dev_t
  uint64_t ino = 0;
  uint32_t gen = 0;  // inode generation; 0 = unknown (path-based stat)
  ProcKey proc;
  auto operator<=>(const FileKey&) const = default;
};

FileKey file_key_of(const iolens_file_key& k);

/// Clock base of a run: wall = monotonic + offset.
struct ClockBase {
  uint64_t start_mono_ns = 0;
  int64_t mono_to_wall_ns = 0;
};

class Recorder {
 public:
  /// `root_pid`: the traced command; `tracer_pid`: the iolens process that created it, given
  /// as the root's parent (no fork event names it). `root_pid` 0: no root process (a daemon's
  /// job, whose processes started on their own); `tracer_pid` is then unused.
  Recorder(uint32_t root_pid, uint32_t tracer_pid);

  /// Turns a lexical path from a path-based call into a canonical one (realpath in the agent;
  /// nothing in tests). Used only for files never named from a struct file.
  using Canonicalizer = std::function<std::optional<std::string>(const std::string&)>;
  void set_canonicalizer(Canonicalizer c) { canonicalize_ = std::move(c); }

  void on_event(const Event& ev);
  /// A snapshot of a kernel record. `removed`: the loader deleted it from the kernel map after
  /// reading, so it is final for that incarnation; a later record of the same key is folded on.
  void on_file(const iolens_file_key& key, const FileCounters& c, bool removed);
  void on_other(const iolens_file_key& key, const FileCounters& c, bool removed);
  void add_lost(const std::string& cause, uint64_t n);
  void set_lost(const std::string& cause, uint64_t n);

  /// Whether the last thread of this process has exited (its kernel records are final).
  bool exited(const ProcKey& p) const;

  RunSnapshot snapshot(const ClockBase& clock) const;

  /// The sums over snapshot()'s processes that a job's line in `iolens jobs` shows, without
  /// building the snapshot (no rows, names or sorting): the Fold::Sum counters of their totals,
  /// their files (distinct (process, file) pairs) and folded files. A 30,000-record job's
  /// snapshot took 100-140 ms of the daemon's loop at every round's end while `jobs` was asked
  /// (bench/README.md "The drain at the default sizes").
  struct Summary {
    FileCounters totals{};  // Fold::Sum fields only (add_totals)
    uint64_t files = 0;
    uint64_t folded_files = 0;
  };
  Summary summary() const;

  /// A record as visit_records() shows it: no copy of names, no sorting (the metrics' view).
  struct RecordView {
    const ProcKey& proc;
    FileIdentity file;            // {} for a process's "other files" record
    const FileCounters& counters; // everything so far, folded parts included
    const std::string* path;      // nullptr: no name received (or the "other files" record)
    bool other_files;             // the process's "other files" record (Recorder::fold_to)
  };
  /// Every file record and every process's "other files" record, in no given order. Their
  /// Fold::Sum counters add up to the process totals of snapshot().
  using RecordVisitor = std::function<void(const RecordView&)>;
  void visit_records(const RecordVisitor& fn) const;
  /// The name received for a file incarnation (a generation-less id: any incarnation's), or
  /// nullptr: none received yet, or forgotten by fold_to. `incomplete`: cut or unreachable.
  const std::string* file_name(const FileIdentity& id, bool* incomplete = nullptr) const;
  /// A process as the recorder knows it, for trace files' process tables.
  struct ProcessView {
    const ProcKey& key;
    const ProcKey* parent;  // nullptr: not known
    const std::string& comm;
    const std::string& exe;
    uint64_t end_ns;                     // 0: still running
    std::optional<int32_t> wait_status;  // set once it exited
  };
  void visit_processes(const std::function<void(const ProcessView&)>& fn) const;
  /// Distinct (dev, ino) among the records, folded ones included.
  std::size_t distinct_files() const;

  std::size_t file_records() const { return files_.size(); }

  /// Bounds memory (a daemon's long-lived job). When more than `max_file_records` file records
  /// are held, folds the least useful ones into their process's "other files" record until at
  /// most 9/10 of `max_file_records` remain (hysteresis: call it after every drain, it works
  /// only every 10% of growth). Least useful first: fewest bytes read + written, then fewest
  /// calls, then the oldest last activity. Only records entirely out of the kernel are folded
  /// (every kernel snapshot of them was `removed`: a live one would be sent again); when too
  /// few are, folds what there is. Process totals and distinct-file counts stay exact, and a
  /// folded file seen again starts a new record. Names no record refers to any more are
  /// forgotten; their identities are appended to `forgotten` (when given) so the caller can
  /// make the kernel send those names again (the kernel sends each file's name only once:
  /// delete `seen_files[(dev, ino)]` when its generation is `gen`). Returns the records folded.
  /// One walk of the n records held, no counters unpacked but the folded ones', and a partial
  /// sort of the k taken (O(n log k); the whole sort only when the names' bound asks for
  /// more than the count); plus, when a file whose name is forgotten has a path other than its
  /// name's (a hard link, a rename target), a walk of the paths (path_walks()).
  /// docs/counters.md#folded-records.
  /// `max_name_bytes`: the same for name_bytes(): records are folded until both fit.
  /// `on_fold`: called with each file record the fold takes, before it goes (its name and
  /// counters as visit_records() shows them), so that a caller keeping sums by name (iolensd's
  /// folded classes) adds what moved in O(records folded) instead of walking every record twice.
  std::size_t fold_to(std::size_t max_file_records,
                      std::vector<FileIdentity>* forgotten = nullptr,
                      std::size_t max_name_bytes = SIZE_MAX, const RecordVisitor* on_fold = nullptr);

  /// File records folded by fold_to so far.
  uint64_t folded_records() const { return folded_records_; }

  /// Bytes of the names held: paths of names and of the path index, rename targets. What
  /// `max_name_bytes` of fold_to bounds (kept up to date: O(1)).
  std::size_t name_bytes() const { return name_bytes_; }

  /// Folds that walked every path held to find those of the files whose names they forgot:
  /// only when such a file had a path other than its name's (a hard link, a rename target, a
  /// name replaced by a better one). A cost counter (tests, benchmarks); not saved.
  uint64_t path_walks() const { return path_walks_; }
  /// Whether each file's count of the paths leading to it, which folds rely on, equals a count
  /// from scratch. O(paths held); for tests.
  bool path_counts_exact() const;
  /// Tests only: folds forget names as they did before those counts, walking every path each
  /// time and merging all forgotten paths into one sorted list. Same behaviour, more work: a
  /// twin to compare against. Not saved.
  void set_reference_forget(bool on) { reference_forget_ = on; }

  /// Bounds the processes held (a daemon's job that forks without end). When more than
  /// `max_processes` are held, folds the exited ones whose records are all out of the kernel,
  /// the earliest exit first, into one "<other processes>" row until at most 9/10 of
  /// `max_processes` remain (or no such process is left): their file and other records go with
  /// them, their sums (totals, files, other I/O, unlinks, renames) are kept in that row, so the
  /// snapshot's totals stay exact. Names no record refers to any more are forgotten as by
  /// fold_to (appended to `forgotten`). Returns the processes folded, whose keys the caller
  /// must forget too (a later record of one of them is not theirs any more).
  /// `on_fold`: as for fold_to, each file record of the processes folded.
  /// `max_folded_ids`: the same past that many folded_file_ids(): exited processes are folded
  /// (earliest exit first) until both fit in 9/10 of their bounds.
  std::vector<ProcKey> fold_processes_to(std::size_t max_processes,
                                         std::vector<FileIdentity>* forgotten = nullptr,
                                         const RecordVisitor* on_fold = nullptr,
                                         std::size_t max_folded_ids = SIZE_MAX);
  /// Ids of the files fold_to took, over every process held: one per (process, file) folded,
  /// kept so that file counts stay exact. O(processes).
  std::size_t folded_file_ids() const;
  /// Processes folded by fold_processes_to so far.
  uint64_t folded_processes() const { return folded_procs_.processes; }
  /// Processes held (not folded).
  std::size_t processes() const { return procs_.size(); }

  /// Everything this recorder holds except the canonicalizer (set it again after load()), as a
  /// versioned, checksummed binary blob for the daemon's checkpoint (docs/state-format.md).
  /// Deterministic: equal recorders give equal bytes. Without `with_live`, the records' live
  /// parts (copies of what the kernel's map holds now) are left out, all else kept: iolensd's
  /// checkpoint, whose restart reads them from the kernel again (docs/daemon.md#restart-without-loss).
  std::string save(bool with_live = true) const;
  /// The same bytes as save(), made in the container a JSON binary value holds (iolensd's
  /// state file takes it without a copy: one copy less of a big job's blob in memory).
  std::vector<uint8_t> save_bytes(bool with_live = true) const;
  /// The same bytes written into `out` (its contents replaced, its capacity used): iolensd
  /// gathers its state into the buffers of the last save, whose pages are already there (a
  /// fresh buffer's first touch of each page cost the loop 10-30 us a page on the VM).
  void save_into(std::vector<uint8_t>& out, bool with_live = true) const;
  /// A recorder equal in every observable way to the one that saved `bytes`: same snapshot(),
  /// memory() and behaviour for every later call. nullptr and `error` when the blob is
  /// malformed, truncated, of another format or kernel ABI version, fails its CRC, or
  /// contradicts itself (unsorted or duplicate keys, records of unknown processes). No length
  /// or count in the blob is trusted before it is checked against the bytes left.
  static std::unique_ptr<Recorder> load(std::string_view bytes, std::string& error);

  /// What the recorder holds, for the daemon's own metrics and for tests.
  struct Memory {
    std::size_t file_records = 0;
    std::size_t other_records = 0;    // (process, descriptor kind) of non-file descriptors
    std::size_t processes = 0;
    std::size_t names = 0;            // file names kept (one per file incarnation)
    std::size_t paths = 0;            // path -> file entries for rename/unlink attribution
    std::size_t folded_files = 0;     // (process, file) identities folded, 16 bytes each
    std::size_t forgotten_paths = 0;  // hashed paths of forgotten names, 24 bytes each
    /// Size of all the entries above, the records' packed and live counters included (string
    /// contents and allocator overhead not): an order of magnitude, not an exact figure.
    std::size_t approx_bytes = 0;
  };
  Memory memory() const;

 private:
  /// The distinct files of one process that were folded, sorted, 16 bytes each. Split by the
  /// kind of the last data call of the folded part (none, read, write): when the process
  /// touches the file again, Darshan's rw_switches counts a switch from that kind, and the
  /// process totals must count it as the unfolded record would have.
  class FoldedIds {
   public:
    /// The last data-call kind of `id`'s folded part; empty if `id` was never folded.
    std::optional<uint32_t> last_io(const FileIdentity& id) const;
    /// Appends the non-zero generations folded for (dev, ino).
    void gens(uint32_t dev, uint64_t ino, std::vector<uint32_t>& out) const;
    /// Adds or moves ids; `batch` sorted by id, each id once.
    void insert(const std::vector<std::pair<FileIdentity, uint32_t>>& batch);
    std::size_t size() const;
    /// The ids by last data-call kind, each part sorted (save()).
    const std::array<std::vector<FileIdentity>, 3>& parts() const { return by_last_io_; }
    /// Replaces the parts (load()); false, and nothing changed, unless each part is strictly
    /// increasing and no id is in two parts, as insert() keeps them.
    bool restore(std::array<std::vector<FileIdentity>, 3> parts);
    template <class F>
    void for_each(F f) const {
      for (const auto& part : by_last_io_)
        for (const FileIdentity& id : part) f(id);
    }
    /// Bytes of the filter below (Recorder::memory()).
    std::size_t filter_bytes() const { return filter_.size() * sizeof(uint64_t); }

   private:
    /// Whether some generation of (dev, ino) may be here: false is sure. A process that folded
    /// records asks this for every new record it makes, and nearly all are of files never
    /// folded: one bit test instead of three binary searches of up to ~200,000 ids (5% of a
    /// job's records and folds, bench/recorder_bench's creator).
    bool may_hold(uint32_t dev, uint64_t ino) const;
    void filter_add(uint32_t dev, uint64_t ino);
    /// Sized for the ids held (16 bits each, two bits set an id: ~1.4% false yes), from them.
    void rebuild_filter();

    std::array<std::vector<FileIdentity>, 3> by_last_io_;
    std::vector<uint64_t> filter_;  // a Bloom filter of (dev, ino); empty when nothing is held
  };
  /// A process's "other files" record: everything fold_to took from its file records.
  struct Folded {
    FileCounters counters = new_counters();  // combine_counters of the folded records
    uint64_t rename_sources = 0, unlinks = 0;
    FoldedIds ids;
  };
  struct Proc {
    ProcKey key;
    ProcKey parent;
    bool parent_known = false;
    std::string comm, exe;
    uint64_t end_ns = 0;
    std::optional<int32_t> wait_status;
    uint64_t unlinks = 0, renames = 0;
    std::unique_ptr<Folded> folded;  // only once fold_to took one of its records
  };
  /// What the drains reported of one record: the sum of its copies removed from the kernel
  /// ("folded") and the newest copy still there ("live"). A part that is absent reads as
  /// new_counters(). Both are kept packed (PackedCounters: ~100-200 bytes for a file read
  /// once, against 1,352). The live part is replaced at every drain while the kernel holds the
  /// record; packing it costs a pack and a compare per drain (most live records did not change
  /// since the last one, and then nothing is written), and saves ~800 bytes for each of up to
  /// `limits.kernel_file_records` live records (bench/README.md "Memory: one bound").
  class FileAcc {
   public:
    bool has_folded() const { return has_folded_; }
    bool has_live() const { return has_live_; }
    FileCounters folded() const;
    FileCounters live() const;
    FileCounters total() const;
    /// The newest live copy replaces the previous one.
    void set_live(const FileCounters& c);
    /// A copy removed from the kernel (final, or moved out idle): folded in; no live part left.
    void add_removed(const FileCounters& c);
    /// Everything replaced by one folded part (a stat joined into a record, a restored state).
    void set_folded(const FileCounters& c);
    /// The parts as held (a state blob writes them as they are), and their restore.
    const PackedCounters& folded_packed() const { return folded_; }
    const PackedCounters& live_packed() const { return live_; }
    void set_folded_packed(PackedCounters p) {
      rank_ = rank_of(p.unpack());
      folded_ = std::move(p);
      live_ = PackedCounters();
      has_live_ = false;
      has_folded_ = true;
    }
    void set_live_packed(PackedCounters p) {
      live_ = std::move(p);
      has_live_ = true;
    }
    /// Sets the folded part's last data-call kind (created empty if absent): the record goes
    /// on from a part fold_to took earlier (file_acc).
    void set_folded_last_io(uint32_t io);
    /// Heap bytes held besides the object itself (Recorder::memory()).
    std::size_t heap_bytes() const { return folded_.heap_bytes() + live_.heap_bytes(); }

    /// What fold_to filters and ranks a record by, of its folded part, kept beside the packed
    /// counters: a daemon's job at its bound is folded every 10% of growth, each fold looks at
    /// every record the job holds, and unpacking each one was most of a fold's time
    /// (bench/README.md "iolensd's folds").
    struct Rank {
      uint64_t bytes = 0;   // read + written
      uint64_t calls = 0;   // calls_of()
      uint64_t last = 0;    // the end of the latest call (0: not timed)
      bool active = false;  // has_activity()
    };
    const Rank& folded_rank() const { return rank_; }
    static Rank rank_of(const FileCounters& c);

    uint64_t rename_sources = 0, unlinks = 0;
    std::string renamed_to;

   private:
    /// Holds `f` as the folded part (packed, and its rank).
    void hold_folded(const FileCounters& f);

    PackedCounters folded_;  // when has_folded_
    Rank rank_;              // of folded_ (of new_counters() when !has_folded_)
    PackedCounters live_;    // when has_live_: the kernel holds the record
    bool has_folded_ = false;
    bool has_live_ = false;
  };
  struct Name {
    std::string path;
    bool canonical = false;  // walked from a struct file (vs. lexical from a lookup)
    bool incomplete = false;
    /// by_path_ entries leading to this file, exact: when it is 1 and `path` is that entry,
    /// forget_names finds the file's only path without walking by_path_. In the padding.
    uint32_t paths = 0;
  };
  static_assert(sizeof(Name) <= sizeof(std::string) + 8, "a name's count costs no memory");
  /// A path of a forgotten name, for rename/unlink attribution: 64-bit hash of the path
  /// (FNV-1a, not std::hash: the hashes are saved in checkpoints read by other builds).
  struct ForgottenPath {
    uint64_t hash = 0;
    FileIdentity id;  // FileIdentity{} once revived (a tombstone until the next fold_to)
  };
  /// How a generation-less record (a stat by path) joins the process's other records of the
  /// same (dev, ino): it does when exactly one other generation exists, kept or folded.
  struct StatMatch {
    std::size_t n = 0;            // distinct generations != 0, kept or folded
    uint32_t gen = 0;             // when n == 1: that generation
    std::optional<FileKey> kept;  // when n == 1 and that generation has a kept record
  };

  /// The "<other processes>" row: the sums of the processes fold_processes_to took.
  struct FoldedProcs {
    uint64_t processes = 0;
    FileCounters totals{};                    // add_totals of their records (Fold::Sum fields)
    FileCounters combined = new_counters();   // combine_counters of their records
    uint64_t files = 0;                       // their distinct files, summed over processes
    uint64_t unlinks = 0, renames = 0;        // the processes' own counts
    uint64_t rename_sources = 0, file_unlinks = 0;  // their records' counts
    uint64_t first_start_ns = 0, last_end_ns = 0;   // monotonic; 0: none
    std::map<uint32_t, std::array<uint64_t, 4>> other_io;  // kind -> reads, writes, bytes r/w
  };

  struct Codec;  // save() and load(), in recorder_state.cpp

  Proc& proc(const ProcKey& k);
  /// by_path_[path] = id, counting the path's bytes when it is new, and the path for `id`
  /// (moved from the file it led to before). `named`: id's name, when the caller has it.
  void index_path(const std::string& path, const FileIdentity& id, Name* named = nullptr);
  /// A name made for `id`, taking over the paths counted for it unnamed. `hint`: where names_
  /// has it (its lower_bound), when the caller searched already.
  Name& new_name(const FileIdentity& id, Name n,
                 std::optional<std::map<FileIdentity, Name>::iterator> hint = std::nullopt);
  /// One by_path_ entry more, or less, leading to `id` (Name::paths, or unnamed_paths_).
  void count_path(const FileIdentity& id, Name* named);
  void uncount_path(const FileIdentity& id);
  /// Name::paths and unnamed_paths_ counted from scratch (load()).
  void count_paths();
  /// `f` (an entry forgotten_path() found) no longer leads anywhere.
  void bury(ForgottenPath& f, bool recent);
  /// Adds `moved` (sorted by hash, each hash once) to the forgotten paths, the later entry
  /// winning, and drops the tombstones, as one merge into a sorted list would.
  void add_forgotten(std::vector<ForgottenPath> moved);
  /// The forgotten paths as one list sorted by hash would hold them (save(), memory()).
  std::size_t forgotten_count() const;
  template <class F>
  void for_each_forgotten(F f) const;
  /// name_bytes() counted from scratch (load()).
  std::size_t count_name_bytes() const;
  FileAcc& file_acc(const FileKey& k, Proc& p);
  void accumulate(FileAcc& acc, const FileCounters& c, bool removed);
  void on_path(const PathEvent& p);
  void set_name(FileIdentity id, std::string path, bool canonical, bool incomplete);
  /// The file a path leads to (by_path_, else a forgotten path, which is then revived).
  std::optional<FileIdentity> file_by_path(const std::string& path);
  /// The forgotten entry that `path` leads to (not a tombstone), or nullptr; `recent`: it is
  /// in recent_forgotten_.
  ForgottenPath* forgotten_path(const std::string& path, bool* recent = nullptr);
  const Name* name_of(const FileKey& k) const;
  /// Calls `fn` with the file record `k` as visit_records() shows it, `c` its counters.
  void show_record(const RecordVisitor& fn, const FileKey& k, const FileCounters& c) const;
  StatMatch stat_match(uint32_t dev, uint64_t ino, const ProcKey& proc,
                       const FoldedIds* folded) const;
  /// The process's folded file identities, or nullptr when it has folded none.
  const FoldedIds* folded_ids_of(const ProcKey& k) const;
  /// A process's folded identities as its snapshot row counts them (snapshot(), summary()):
  /// how many, and how many are stats by path joined to another incarnation (of those, how
  /// many to a folded one). `each`, when given, sees every identity.
  struct FoldedCount {
    uint64_t n = 0, stats_joined = 0, stats_joined_folded = 0;
  };
  FoldedCount count_folded(const ProcKey& pk, const FoldedIds& ids,
                           const std::function<void(const FileIdentity&)>& each = {}) const;
  bool referenced(const FileIdentity& id) const;
  void forget_names(std::vector<FileIdentity> ids, std::vector<FileIdentity>* forgotten);

  Canonicalizer canonicalize_;
  uint32_t root_pid_;
  uint32_t tracer_pid_;
  std::map<ProcKey, Proc> procs_;
  std::map<FileKey, FileAcc> files_;
  std::map<std::pair<ProcKey, uint32_t>, FileAcc> others_;
  std::map<FileIdentity, Name> names_;
  std::unordered_map<std::string, FileIdentity> by_path_;
  /// by_path_ entries leading to a file without a name: none unless a loaded state had such
  /// entries (this build names every file it indexes a path for, and forgets both at once).
  std::unordered_map<FileIdentity, uint32_t, FileIdentityHash> unnamed_paths_;
  /// The forgotten paths, as one list sorted by hash, each hash once, would hold them: the
  /// entries of recent_forgotten_, and those of forgotten_paths_ but its dead ones. Each fold
  /// merges its paths into the small recent list, and that into the big one only once it holds
  /// 1/8 as many (with the dead): a fold costs O(n) only every O(n/8) paths forgotten, not
  /// every time. A hash in the recent list is absent from the big one, or a tombstone there.
  std::vector<ForgottenPath> forgotten_paths_;  // sorted by hash, each hash once
  std::vector<ForgottenPath> recent_forgotten_;  // sorted by hash, each hash once
  /// forgotten_paths_'s tombstones that one list would have dropped by now (revived before the
  /// last fold, or replaced by a later entry): all its tombstones but those in buried_.
  std::size_t dead_forgotten_ = 0;
  /// Hashes of forgotten_paths_'s entries buried since the last fold that forgot names: one
  /// list would hold their tombstones until the next one.
  std::vector<uint64_t> buried_;
  uint64_t path_walks_ = 0;
  bool reference_forget_ = false;
  std::map<std::string, uint64_t> lost_;
  uint64_t folded_records_ = 0;
  FoldedProcs folded_procs_;
  std::size_t name_bytes_ = 0;  // name_bytes()
  uint64_t final_snapshots_ = 0;          // kernel records that became final (fold candidates)
  std::optional<uint64_t> short_at_;     // final_snapshots_ when fold_to last fell short
};

/// "pipe", "socket", ... for the S_IFMT >> 12 value the kernel stores in others' ino.
std::string other_kind_name(uint64_t ifmt_shifted);

/// 128+N for a signal, the exit code otherwise (shells' convention).
int exit_code_of_wait_status(int32_t status);

}  // namespace iolens::core
