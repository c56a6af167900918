// SPDX-License-Identifier: Apache-2.0
#include "core/recorder.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <set>
#include <tuple>

#include "core/paths.hpp"

namespace iolens::core {
namespace {

constexpr const char* kLostCauses[] = {"file_records",    "other_records",  "events",
                                       "path_events",     "process_events", "untraced_threads",
                                       "paths_truncated", "decode_errors"};

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

FileIdentity identity_of(const FileKey& k) { return FileIdentity{k.ino, k.dev, k.gen}; }

/// Faults in the whole pages of [p, p + bytes) in one system call, before they are written:
/// a snapshot's rows are fresh memory (~1 KB a row, 40 MB for a DataLoader job), and a page
/// fault each costs more than the kernel filling the range at once (bench/README.md "The run's
/// exit"). A hint: a kernel without MADV_POPULATE_WRITE (before 5.14) refuses it, and the pages
/// then fault in as they are written.
void prefault(void* p, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  static_cast<void>(p);
  static_cast<void>(bytes);
#endif
}

FileKey key_of(const FileIdentity& id, const ProcKey& p) {
  return FileKey{id.dev, id.ino, id.gen, p};
}

/// The kind of a record's last data call (IOLENS_IO_*); anything unexpected as none.
uint32_t io_kind(uint32_t t) { return t <= IOLENS_IO_WRITE ? t : uint32_t{IOLENS_IO_NONE}; }

/// FNV-1a, 64 bits: defined by its spec, unlike std::hash, so that the hashes a checkpoint holds
/// (docs/state-format.md) mean the same to a daemon built with another standard library.
uint64_t path_hash(const std::string& path) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : path) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t calls_of(const FileCounters& c) {
  return c.opens + c.reads + c.writes + c.seeks + c.stats + c.mmaps + c.fsyncs + c.fdsyncs +
         c.truncates + c.closes;
}

uint64_t last_activity_of(const FileCounters& c) {
  return std::max({c.open_end_ns, c.read_end_ns, c.write_end_ns, c.close_end_ns, c.meta_end_ns});
}

}  // namespace

FileKey file_key_of(const iolens_file_key& k) {
  return FileKey{k.dev, k.ino, k.gen, ProcKey{k.tgid, k.pstart_ns}};
}

std::string other_kind_name(uint64_t ifmt) {
  switch (ifmt) {
    case 001: return "pipe";
    case 002: return "char";
    case 004: return "dir";
    case 006: return "block";
    case 012: return "link";
    case 014: return "socket";
    case 0: return "anon";
    default: return "other";
  }
}

int exit_code_of_wait_status(int32_t status) {
  const int sig = status & 0x7f;
  if (sig != 0) return 128 + sig;
  return (status >> 8) & 0xff;
}

Recorder::Recorder(uint32_t root_pid, uint32_t tracer_pid)
    : root_pid_(root_pid), tracer_pid_(tracer_pid) {
  for (const char* c : kLostCauses) lost_[c] = 0;
}

// ---- FileAcc ----

FileCounters Recorder::FileAcc::folded() const {
  return has_folded_ ? folded_.unpack() : new_counters();
}

FileCounters Recorder::FileAcc::live() const {
  return has_live_ ? live_.unpack() : new_counters();
}

FileCounters Recorder::FileAcc::total() const {
  if (!has_folded_) return live();
  FileCounters t = folded_.unpack();
  if (has_live_) fold_counters(t, live_.unpack());
  return t;
}

void Recorder::FileAcc::set_live(const FileCounters& c) {
  live_.assign(c);
  has_live_ = true;
}

Recorder::FileAcc::Rank Recorder::FileAcc::rank_of(const FileCounters& c) {
  return Rank{c.bytes_read + c.bytes_written, calls_of(c), last_activity_of(c), has_activity(c)};
}

void Recorder::FileAcc::hold_folded(const FileCounters& f) {
  folded_ = PackedCounters(f);
  rank_ = rank_of(f);
  has_folded_ = true;
}

void Recorder::FileAcc::add_removed(const FileCounters& c) {
  if (has_folded_) {
    FileCounters f = folded_.unpack();
    fold_counters(f, c);
    hold_folded(f);
  } else {
    hold_folded(c);  // over the live copy, if any: the removed one is newer
  }
  live_ = PackedCounters();
  has_live_ = false;
}

void Recorder::FileAcc::set_folded(const FileCounters& c) {
  hold_folded(c);
  live_ = PackedCounters();
  has_live_ = false;
}

void Recorder::FileAcc::set_folded_last_io(uint32_t io) {
  FileCounters f = folded();
  f.last_io_type = io;
  hold_folded(f);
}

// ---- FoldedIds ----

namespace {
/// The two bit positions of (dev, ino) in a filter of `bits` (a power of two) bits.
std::pair<std::size_t, std::size_t> filter_bits(uint32_t dev, uint64_t ino, std::size_t bits) {
  const uint64_t h = FileIdentityHash{}(FileIdentity{ino, dev, 0});
  return {static_cast<std::size_t>(h) & (bits - 1),
          static_cast<std::size_t>(h >> 32 | h << 32) & (bits - 1)};  // its two halves
}
}  // namespace

bool Recorder::FoldedIds::may_hold(uint32_t dev, uint64_t ino) const {
  if (filter_.empty()) return false;
  const auto [a, b] = filter_bits(dev, ino, filter_.size() * 64);
  return (filter_[a / 64] >> (a % 64) & 1) && (filter_[b / 64] >> (b % 64) & 1);
}

void Recorder::FoldedIds::filter_add(uint32_t dev, uint64_t ino) {
  const auto [a, b] = filter_bits(dev, ino, filter_.size() * 64);
  filter_[a / 64] |= uint64_t{1} << (a % 64);
  filter_[b / 64] |= uint64_t{1} << (b % 64);
}

void Recorder::FoldedIds::rebuild_filter() {
  const std::size_t n = size();
  if (n == 0) {
    filter_.clear();
    return;
  }
  std::size_t words = 16;  // 1,024 bits at the least
  while (words * 64 < n * 16) words *= 2;
  filter_.assign(words, 0);
  for_each([&](const FileIdentity& id) { filter_add(id.dev, id.ino); });
}

std::optional<uint32_t> Recorder::FoldedIds::last_io(const FileIdentity& id) const {
  if (!may_hold(id.dev, id.ino)) return std::nullopt;
  for (uint32_t t = 0; t < by_last_io_.size(); ++t) {
    const auto& part = by_last_io_[t];
    if (std::binary_search(part.begin(), part.end(), id)) return t;
  }
  return std::nullopt;
}

void Recorder::FoldedIds::gens(uint32_t dev, uint64_t ino, std::vector<uint32_t>& out) const {
  if (!may_hold(dev, ino)) return;
  for (const auto& part : by_last_io_) {
    for (auto it = std::lower_bound(part.begin(), part.end(), FileIdentity{ino, dev, 1});
         it != part.end() && it->dev == dev && it->ino == ino; ++it)
      out.push_back(it->gen);
  }
}

void Recorder::FoldedIds::insert(const std::vector<std::pair<FileIdentity, uint32_t>>& batch) {
  std::vector<FileIdentity> ids;
  ids.reserve(batch.size());
  for (const auto& [id, kind] : batch) ids.push_back(id);
  for (uint32_t t = 0; t < by_last_io_.size(); ++t) {
    auto& part = by_last_io_[t];
    // A file folded again moves to the kind its folded part now ends with.
    std::vector<FileIdentity> kept;
    kept.reserve(part.size());
    std::set_difference(part.begin(), part.end(), ids.begin(), ids.end(),
                        std::back_inserter(kept));
    std::vector<FileIdentity> added;
    for (const auto& [id, kind] : batch)
      if (kind == t) added.push_back(id);
    std::vector<FileIdentity> out;
    out.reserve(kept.size() + added.size());  // exact: these vectors are the bulk of the cost
    std::merge(kept.begin(), kept.end(), added.begin(), added.end(), std::back_inserter(out));
    part.swap(out);
  }
  // Grown past its 16 bits an id: made again twice the size (each id's bits set O(1) times
  // on average over the doublings), else the new ids' bits set.
  if (filter_.size() * 64 < size() * 16) {
    rebuild_filter();
  } else {
    for (const FileIdentity& id : ids) filter_add(id.dev, id.ino);
  }
}

bool Recorder::FoldedIds::restore(std::array<std::vector<FileIdentity>, 3> parts) {
  std::vector<FileIdentity> all;
  for (const auto& part : parts) {
    if (std::adjacent_find(part.begin(), part.end(), std::greater_equal<>()) != part.end())
      return false;
    all.insert(all.end(), part.begin(), part.end());
  }
  std::sort(all.begin(), all.end());
  if (std::adjacent_find(all.begin(), all.end()) != all.end()) return false;
  by_last_io_ = std::move(parts);
  rebuild_filter();
  return true;
}

std::size_t Recorder::FoldedIds::size() const {
  std::size_t n = 0;
  for (const auto& part : by_last_io_) n += part.size();
  return n;
}

// ---- records ----

Recorder::Proc& Recorder::proc(const ProcKey& k) {
  auto [it, inserted] = procs_.try_emplace(k);
  if (inserted) {
    it->second.key = k;
    if (root_pid_ != 0 && k.pid == root_pid_) {
      // The root was created by iolens itself, before tracing: no fork event names its parent.
      it->second.parent = ProcKey{tracer_pid_, 0};
      it->second.parent_known = true;
    }
  }
  return it->second;
}

Recorder::FileAcc& Recorder::file_acc(const FileKey& k, Proc& p) {
  auto [it, inserted] = files_.try_emplace(k);
  if (inserted && p.folded) {
    const auto io = p.folded->ids.last_io(identity_of(k));
    if (io && *io != IOLENS_IO_NONE) {
      // Seen again after fold_to took its earlier part: the new record goes on from where that
      // part ended, so a read/write switch between them is counted (fold_counters) as it would
      // have been in one record, and the process totals stay exact.
      it->second.set_folded_last_io(*io);
    }
  }
  return it->second;
}

void Recorder::accumulate(FileAcc& acc, const FileCounters& c, bool removed) {
  if (removed) {
    ++final_snapshots_;
    acc.add_removed(c);
  } else {
    acc.set_live(c);
  }
}

void Recorder::on_file(const iolens_file_key& key, const FileCounters& c, bool removed) {
  FileKey k = file_key_of(key);
  accumulate(file_acc(k, proc(k.proc)), c, removed);
}

void Recorder::on_other(const iolens_file_key& key, const FileCounters& c, bool removed) {
  ProcKey p{key.tgid, key.pstart_ns};
  proc(p);
  accumulate(others_[{p, static_cast<uint32_t>(key.ino)}], c, removed);
}

void Recorder::add_lost(const std::string& cause, uint64_t n) { lost_[cause] += n; }
void Recorder::set_lost(const std::string& cause, uint64_t n) { lost_[cause] = n; }

bool Recorder::exited(const ProcKey& p) const {
  auto it = procs_.find(p);
  return it != procs_.end() && it->second.wait_status.has_value();
}

// ---- names ----

void Recorder::set_name(FileIdentity id, std::string path, bool canonical, bool incomplete) {
  // One walk of the names: a new file's name goes where the search ended (nearly every name a
  // drain brings is new).
  auto it = names_.lower_bound(id);
  const bool known = it != names_.end() && it->first == id;
  if (known && it->second.canonical && !canonical) return;  // keep the better name
  if (!canonical && canonicalize_) {
    if (auto real = canonicalize_(path)) path = *real;
  }
  Name& n = known ? it->second : new_name(id, Name{}, it);
  index_path(path, id, &n);
  name_bytes_ -= n.path.size();
  name_bytes_ += path.size();
  n.path = std::move(path);
  n.canonical = canonical;
  n.incomplete = incomplete;
}

Recorder::Name& Recorder::new_name(const FileIdentity& id, Name n,
                                   std::optional<std::map<FileIdentity, Name>::iterator> hint) {
  Name& made = hint ? names_.emplace_hint(*hint, id, std::move(n))->second
                    : names_.emplace(id, std::move(n)).first->second;
  if (!unnamed_paths_.empty()) {
    if (auto u = unnamed_paths_.find(id); u != unnamed_paths_.end()) {
      made.paths = u->second;
      unnamed_paths_.erase(u);
    }
  }
  return made;
}

void Recorder::count_path(const FileIdentity& id, Name* named) {
  if (!named) {
    if (auto n = names_.find(id); n != names_.end()) named = &n->second;
  }
  if (named)
    ++named->paths;
  else
    ++unnamed_paths_[id];
}

void Recorder::uncount_path(const FileIdentity& id) {
  if (auto n = names_.find(id); n != names_.end()) {
    --n->second.paths;
  } else if (auto u = unnamed_paths_.find(id); u != unnamed_paths_.end() && --u->second == 0) {
    unnamed_paths_.erase(u);
  }
}

void Recorder::count_paths() {
  for (auto& [id, n] : names_) n.paths = 0;
  unnamed_paths_.clear();
  for (const auto& [path, id] : by_path_) count_path(id, nullptr);
}

bool Recorder::path_counts_exact() const {
  std::map<FileIdentity, uint32_t> counted;
  for (const auto& [path, id] : by_path_) ++counted[id];
  for (const auto& [id, n] : names_) {
    auto c = counted.find(id);
    if (n.paths != (c == counted.end() ? 0 : c->second)) return false;
    if (c != counted.end()) counted.erase(c);
  }
  if (counted.size() != unnamed_paths_.size()) return false;
  for (const auto& [id, c] : counted) {
    auto u = unnamed_paths_.find(id);
    if (u == unnamed_paths_.end() || u->second != c) return false;
  }
  return true;
}

Recorder::ForgottenPath* Recorder::forgotten_path(const std::string& path, bool* recent) {
  if (forgotten_paths_.empty() && recent_forgotten_.empty()) return nullptr;
  const uint64_t h = path_hash(path);
  auto find = [h](std::vector<ForgottenPath>& v) -> ForgottenPath* {
    auto it = std::lower_bound(v.begin(), v.end(), h,
                               [](const ForgottenPath& e, uint64_t x) { return e.hash < x; });
    return it != v.end() && it->hash == h ? &*it : nullptr;
  };
  // A hash in the recent list is absent from the big one or a tombstone there: the later.
  ForgottenPath* f = find(recent_forgotten_);
  const bool in_recent = f != nullptr;
  if (!f) f = find(forgotten_paths_);
  if (!f || f->id == FileIdentity{}) return nullptr;
  if (recent) *recent = in_recent;
  return f;
}

void Recorder::bury(ForgottenPath& f, bool recent) {
  f.id = FileIdentity{};
  // The recent list drops its tombstones at the next fold; the big one keeps them, dead.
  if (!recent) buried_.push_back(f.hash);
}

std::optional<FileIdentity> Recorder::file_by_path(const std::string& path) {
  if (auto it = by_path_.find(path); it != by_path_.end()) return it->second;
  bool recent = false;
  ForgottenPath* f = forgotten_path(path, &recent);
  if (!f) return std::nullopt;
  // A name fold_to forgot: the rename or unlink is attributed as it would have been, and the
  // record it creates is named by this path (the file's last known name).
  const FileIdentity id = f->id;
  bury(*f, recent);
  Name* n = nullptr;
  if (auto it = names_.find(id); it != names_.end()) {
    n = &it->second;
  } else {
    n = &new_name(id, Name{path, false, false});
    name_bytes_ += path.size();
  }
  index_path(path, id, n);
  return id;
}

void Recorder::on_path(const PathEvent& p) {
  Proc& pr = proc(p.proc);
  const bool incomplete = (p.flags & (IOLENS_PATH_TRUNCATED | IOLENS_PATH_UNREACHED)) != 0;
  switch (p.op) {
    case IOLENS_PATH_FILE:
      set_name({p.ino, p.dev, p.gen}, path_from_walk(p.walk), true, incomplete);
      break;
    case IOLENS_PATH_LOOKUP:
      set_name({p.ino, p.dev, p.gen}, resolve_argument(p.walk, p.str1), false, incomplete);
      break;
    case IOLENS_PATH_EXE:
      pr.exe = path_from_walk(p.walk);
      pr.comm = p.comm;
      break;
    case IOLENS_PATH_UNLINK: {
      ++pr.unlinks;
      const auto id = file_by_path(resolve_argument(p.walk, p.str1));
      if (!id) break;
      // The record itself may reach us only at the next drain: create the entry now.
      ++file_acc(key_of(*id, p.proc), pr).unlinks;
      ++final_snapshots_;  // a record fold_to may take
      break;
    }
    case IOLENS_PATH_RENAME: {
      ++pr.renames;
      const std::string from = resolve_argument(p.walk, p.str1);
      const std::string to = resolve_argument(p.walk2, p.str2);
      const auto id = file_by_path(from);
      if (!id) break;
      FileAcc& f = file_acc(key_of(*id, p.proc), pr);
      ++f.rename_sources;
      name_bytes_ += to.size();
      name_bytes_ -= f.renamed_to.size();
      f.renamed_to = to;
      ++final_snapshots_;
      // The old name no longer leads to this file, nor to a forgotten one.
      if (auto e = by_path_.find(from); e != by_path_.end()) {
        uncount_path(e->second);
        by_path_.erase(e);
        name_bytes_ -= from.size();
      }
      bool recent = false;
      if (ForgottenPath* f = forgotten_path(from, &recent)) bury(*f, recent);
      index_path(to, *id);
      break;
    }
    default:
      break;
  }
}

void Recorder::on_event(const Event& ev) {
  std::visit(Overloaded{
                 [&](const ForkEvent& e) {
                   Proc& p = proc(e.proc);
                   p.parent = e.parent;
                   p.parent_known = true;
                   if (p.comm.empty()) p.comm = e.comm;
                 },
                 [&](const ExitEvent& e) {
                   Proc& p = proc(e.proc);
                   p.end_ns = e.ts_ns;
                   p.wait_status = e.wait_status;
                 },
                 [&](const PathEvent& e) { on_path(e); },
             },
             ev);
}

const Recorder::Name* Recorder::name_of(const FileKey& k) const {
  auto n = names_.find(identity_of(k));
  if (n != names_.end()) return &n->second;
  // A generation-less record (path-based stat): any incarnation's name, the last one sent.
  auto lo = names_.lower_bound(FileIdentity{k.ino, k.dev, 0});
  const Name* found = nullptr;
  for (; lo != names_.end() && lo->first.dev == k.dev && lo->first.ino == k.ino; ++lo)
    found = &lo->second;
  return k.gen == 0 ? found : nullptr;
}

Recorder::StatMatch Recorder::stat_match(uint32_t dev, uint64_t ino, const ProcKey& proc,
                                         const FoldedIds* folded) const {
  std::vector<uint32_t> gens;
  for (auto j = files_.lower_bound(FileKey{dev, ino, 1, {}});
       j != files_.end() && j->first.dev == dev && j->first.ino == ino; ++j)
    if (j->first.proc == proc) gens.push_back(j->first.gen);
  if (folded) folded->gens(dev, ino, gens);
  std::sort(gens.begin(), gens.end());
  gens.erase(std::unique(gens.begin(), gens.end()), gens.end());
  StatMatch m;
  m.n = gens.size();
  if (m.n == 1) {
    m.gen = gens[0];
    const FileKey k{dev, ino, gens[0], proc};
    if (files_.count(k)) m.kept = k;
  }
  return m;
}

// ---- bounded memory ----

bool Recorder::referenced(const FileIdentity& id) const {
  auto has = [&](uint32_t gen) {
    auto it = files_.lower_bound(FileKey{id.dev, id.ino, gen, {}});
    return it != files_.end() && it->first.dev == id.dev && it->first.ino == id.ino &&
           it->first.gen == gen;
  };
  // A generation-less record takes its name from any incarnation (name_of).
  return has(id.gen) || has(0);
}

void Recorder::forget_names(std::vector<FileIdentity> ids, std::vector<FileIdentity>* forgotten) {
  std::erase_if(ids, [&](const FileIdentity& id) { return referenced(id); });
  if (ids.empty()) return;
  // Every path that leads to a forgotten file (its name, hard links, rename targets) moves to
  // the hashed index: a later rename or unlink by that path is still attributed. A file whose
  // one path is its name's moves it at once; only files with other paths need a walk of every
  // path held (at each fold, that walk was 15% of iolensd's main thread on a job at its bound).
  std::vector<ForgottenPath> moved;
  moved.reserve(ids.size());
  std::vector<FileIdentity> walk;  // sorted, as `ids` is
  for (const FileIdentity& id : ids) {
    uint32_t paths = 0;
    if (auto n = names_.find(id); n != names_.end()) {
      paths = n->second.paths;
      if (paths == 1 && !reference_forget_) {
        if (auto p = by_path_.find(n->second.path); p != by_path_.end() && p->second == id) {
          moved.push_back({path_hash(p->first), id});
          name_bytes_ -= p->first.size();
          by_path_.erase(p);
          paths = 0;
        }
      }
      name_bytes_ -= n->second.path.size();
      names_.erase(n);
    } else if (!unnamed_paths_.empty()) {
      if (auto u = unnamed_paths_.find(id); u != unnamed_paths_.end()) {
        paths = u->second;
        unnamed_paths_.erase(u);
      }
    }
    if (paths > 0 || reference_forget_) walk.push_back(id);
  }
  if (!walk.empty()) {
    ++path_walks_;
    for (auto it = by_path_.begin(); it != by_path_.end();) {
      if (std::binary_search(walk.begin(), walk.end(), it->second)) {
        moved.push_back({path_hash(it->first), it->second});
        name_bytes_ -= it->first.size();
        it = by_path_.erase(it);
      } else {
        ++it;
      }
    }
  }
  auto by_hash = [](const ForgottenPath& a, const ForgottenPath& b) { return a.hash < b.hash; };
  std::sort(moved.begin(), moved.end(), by_hash);
  // Two paths with one 64-bit hash (about n^2 / 2^65 for n paths): one of them is kept.
  moved.erase(std::unique(moved.begin(), moved.end(),
                          [](const auto& a, const auto& b) { return a.hash == b.hash; }),
              moved.end());
  add_forgotten(std::move(moved));
  if (forgotten) forgotten->insert(forgotten->end(), ids.begin(), ids.end());
}

void Recorder::add_forgotten(std::vector<ForgottenPath> moved) {
  auto by_hash = [](const ForgottenPath& a, const ForgottenPath& b) { return a.hash < b.hash; };
  // A path forgotten again replaces its entry: one in the big list becomes a dead tombstone.
  for (const ForgottenPath& m : moved) {
    auto it = std::lower_bound(forgotten_paths_.begin(), forgotten_paths_.end(), m, by_hash);
    if (it != forgotten_paths_.end() && it->hash == m.hash && it->id != FileIdentity{}) {
      it->id = FileIdentity{};
      ++dead_forgotten_;
    }
  }
  // One list drops every tombstone at each merge: those buried since the last are dead now.
  dead_forgotten_ += buried_.size();
  buried_.clear();
  std::vector<ForgottenPath> out;
  out.reserve(recent_forgotten_.size() + moved.size());
  auto a = recent_forgotten_.begin();
  auto b = moved.begin();
  while (a != recent_forgotten_.end() || b != moved.end()) {
    if (b == moved.end() || (a != recent_forgotten_.end() && a->hash < b->hash)) {
      if (a->id != FileIdentity{}) out.push_back(*a);  // tombstones (revived) go
      ++a;
    } else {
      if (a != recent_forgotten_.end() && a->hash == b->hash) ++a;  // the later entry wins
      out.push_back(*b++);
    }
  }
  recent_forgotten_.swap(out);
  if (!reference_forget_ &&
      (recent_forgotten_.size() + dead_forgotten_) * 8 <= forgotten_paths_.size())
    return;
  // Into the big list, without its tombstones (all dead now; a hash of the recent list is one).
  out.clear();
  out.reserve(forgotten_count());
  auto i = forgotten_paths_.begin();
  auto j = recent_forgotten_.begin();
  while (i != forgotten_paths_.end() || j != recent_forgotten_.end()) {
    if (i != forgotten_paths_.end() && i->id == FileIdentity{}) {
      ++i;
    } else if (j == recent_forgotten_.end() ||
               (i != forgotten_paths_.end() && i->hash < j->hash)) {
      out.push_back(*i++);
    } else {
      out.push_back(*j++);
    }
  }
  forgotten_paths_.swap(out);
  recent_forgotten_.clear();
  dead_forgotten_ = 0;
}

std::size_t Recorder::forgotten_count() const {
  return forgotten_paths_.size() - dead_forgotten_ + recent_forgotten_.size();
}

void Recorder::index_path(const std::string& path, const FileIdentity& id, Name* named) {
  auto [it, inserted] = by_path_.try_emplace(path, id);
  if (inserted) {
    name_bytes_ += path.size();
  } else {
    if (it->second == id) return;
    uncount_path(it->second);  // the path led to another file
    it->second = id;
  }
  count_path(id, named);
}

std::size_t Recorder::count_name_bytes() const {
  std::size_t n = 0;
  for (const auto& [id, name] : names_) n += name.path.size();
  for (const auto& [path, id] : by_path_) n += path.size();
  for (const auto& [k, a] : files_) n += a.renamed_to.size();
  return n;
}

std::size_t Recorder::fold_to(std::size_t max_file_records, std::vector<FileIdentity>* forgotten,
                              std::size_t max_name_bytes, const RecordVisitor* on_fold) {
  // Names count in bytes too: 60,000 files with 3.5 KB paths weigh as much as far more files.
  const bool by_bytes = max_name_bytes != SIZE_MAX;
  std::size_t bytes = by_bytes ? name_bytes_ : 0;
  if (files_.size() <= max_file_records && bytes <= max_name_bytes) return 0;
  // The last fold took every candidate and fell short, and no record has left the kernel since
  // (a daemon calls this after every drain): nothing new to fold, spare the O(n log n) pass.
  if (short_at_ && *short_at_ == final_snapshots_) return 0;
  const std::size_t target = max_file_records / 10 * 9 + max_file_records % 10 * 9 / 10;
  const std::size_t byte_target = max_name_bytes / 10 * 9;
  std::set<FileIdentity> unnamed;  // names counted as gone by the estimate below
  using It = std::map<FileKey, FileAcc>::iterator;

  auto stored = [](const FileAcc& a) {
    return a.folded();  // has_live() is false for every candidate: the folded part is all
  };
  auto eligible = [&](const FileAcc& a) {
    // A live record is still in the kernel map: the next drain would send it again.
    if (a.has_live()) return false;
    // A record without any counted call (a failed close) is not a file of the process, but a
    // stat by path can still join it (stat_match): rare, so simply kept.
    return a.folded_rank().active || a.rename_sources != 0 || a.unlinks != 0;
  };

  // A stat by path (generation 0) joins the process's only other incarnation of the file in
  // the snapshot. When that one is kept, the stat is folded with it, not before it: the kept
  // record's row stays whole. One walk of the records finds both: a stat comes before its
  // incarnation in key order (dev, ino, then generation, 0 first). (Two walks were a fifth of
  // a daemon's folds, bench/README.md "iolensd's folds".)
  std::map<FileKey, It> stat_of;  // the kept incarnation -> its stat record
  struct Candidate {
    uint64_t bytes = 0, calls = 0, last = 0;
    It it;
    std::optional<It> stat;  // folded with it
  };
  std::vector<Candidate> cands;
  cands.reserve(files_.size());
  for (It it = files_.begin(); it != files_.end(); ++it) {
    if (!eligible(it->second)) continue;
    if (it->first.gen == 0) {
      const Proc& p = procs_.at(it->first.proc);
      const auto next = std::next(it);
      // quick no, for a process with nothing folded: the next record in key order is another file
      if (p.folded || (next != files_.end() && next->first.dev == it->first.dev &&
                       next->first.ino == it->first.ino)) {
        const StatMatch m = stat_match(it->first.dev, it->first.ino, it->first.proc,
                                       p.folded ? &p.folded->ids : nullptr);
        if (m.kept) {
          stat_of.emplace(*m.kept, it);
          continue;  // a candidate with its incarnation, not alone
        }
      }
    }
    Candidate c;
    c.it = it;
    const FileAcc::Rank& t = it->second.folded_rank();
    c.bytes = t.bytes;
    c.calls = t.calls;
    c.last = t.last;
    if (!stat_of.empty()) {
      if (auto s = stat_of.find(it->first); s != stat_of.end()) {
        c.stat = s->second;
        const FileAcc::Rank& st = s->second->second.folded_rank();
        c.bytes += st.bytes;
        c.calls += st.calls;
        c.last = std::max(c.last, st.last);
      }
    }
    cands.push_back(c);
  }
  const auto least_useful = [](const Candidate& a, const Candidate& b) {
    if (std::tie(a.bytes, a.calls, a.last) != std::tie(b.bytes, b.calls, b.last))
      return std::tie(a.bytes, a.calls, a.last) < std::tie(b.bytes, b.calls, b.last);
    return a.it->first < b.it->first;
  };
  // Only the least useful are taken, usually a tenth: those are ordered first (a partial sort,
  // O(n log k) instead of the whole sort), and the rest only if the names' bytes need more.
  // The order is total (ties go by key), so the records taken are those a whole sort gives.
  std::size_t sorted = std::min(cands.size(), files_.size() - std::min(files_.size(), target));
  std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(sorted), cands.end(),
                    least_useful);

  std::map<ProcKey, std::vector<std::pair<FileIdentity, uint32_t>>> batches;
  std::vector<FileIdentity> touched;
  std::size_t folded = 0;
  auto fold_one = [&](It it) {
    Proc& p = procs_.at(it->first.proc);
    if (!p.folded) p.folded = std::make_unique<Folded>();
    const FileAcc& a = it->second;
    const FileCounters c = stored(a);
    // Its name is still held: forget_names runs after the last fold_one.
    if (on_fold) show_record(*on_fold, it->first, c);
    combine_counters(p.folded->counters, c);
    p.folded->rename_sources += a.rename_sources;
    p.folded->unlinks += a.unlinks;
    const FileIdentity id = identity_of(it->first);
    batches[it->first.proc].emplace_back(id, io_kind(c.last_io_type));
    touched.push_back(id);
    if (by_bytes) bytes -= std::min(bytes, a.renamed_to.size());
    name_bytes_ -= a.renamed_to.size();
    files_.erase(it);
    ++folded;
    // An estimate of what forget_names will free (its name and its path index entry): exact
    // unless hard links or a rename gave the file other paths. Only while the names are over
    // their target: under it, the count alone decides when to stop (and the two look-ups a
    // record were a tenth of a fold of short-named files).
    if (by_bytes && bytes > byte_target && !referenced(id) && unnamed.insert(id).second)
      if (auto n = names_.find(id); n != names_.end())
        bytes -= std::min(bytes, 2 * n->second.path.size());
  };
  for (std::size_t i = 0; i < cands.size(); ++i) {
    if (files_.size() <= target && bytes <= byte_target) break;
    if (i == sorted) {
      std::sort(cands.begin() + static_cast<std::ptrdiff_t>(i), cands.end(), least_useful);
      sorted = cands.size();
    }
    const Candidate& c = cands[i];
    if (c.stat) fold_one(*c.stat);
    fold_one(c.it);
  }

  for (auto& [pk, batch] : batches) {
    std::sort(batch.begin(), batch.end());
    procs_.at(pk).folded->ids.insert(batch);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  forget_names(std::move(touched), forgotten);
  folded_records_ += folded;
  short_at_.reset();
  if (files_.size() > target || (by_bytes && name_bytes_ > byte_target))
    short_at_ = final_snapshots_;
  return folded;
}

std::size_t Recorder::folded_file_ids() const {
  std::size_t n = 0;
  for (const auto& [k, p] : procs_)
    if (p.folded) n += p.folded->ids.size();
  return n;
}

std::vector<ProcKey> Recorder::fold_processes_to(std::size_t max_processes,
                                                 std::vector<FileIdentity>* forgotten,
                                                 const RecordVisitor* on_fold,
                                                 std::size_t max_folded_ids) {
  std::vector<ProcKey> out;
  const std::size_t ids = max_folded_ids == SIZE_MAX ? 0 : folded_file_ids();
  if (procs_.size() <= max_processes && ids <= max_folded_ids) return out;
  auto nine_tenths = [](std::size_t m) { return m / 10 * 9 + m % 10 * 9 / 10; };
  const std::size_t target = std::min(procs_.size(), nine_tenths(max_processes));
  const std::size_t ids_target = nine_tenths(max_folded_ids);
  // A record still in the kernel map would be sent again, to a process no longer held.
  std::set<ProcKey> busy;
  for (const auto& [k, a] : files_)
    if (a.has_live()) busy.insert(k.proc);
  for (const auto& [k, a] : others_)
    if (a.has_live()) busy.insert(k.first);
  std::vector<const Proc*> cands;
  for (const auto& [k, p] : procs_)
    if (p.wait_status && !busy.count(k)) cands.push_back(&p);
  // The earliest exits first: the least likely to get a late record, the least looked at.
  // Until both the processes and the ids of their folded files fit: the ids (16 bytes a
  // (process, file) pair folded, kept so that a process's files and the job's distinct files
  // stay exact) grow with files x processes, a DataLoader's workers re-forked each epoch over
  // a million files hold a million a epoch; the "<other processes>" row keeps only counts.
  std::sort(cands.begin(), cands.end(), [](const Proc* a, const Proc* b) {
    return std::tie(a->end_ns, a->key) < std::tie(b->end_ns, b->key);
  });
  std::size_t held = ids;
  for (const Proc* c : cands) {
    if (procs_.size() - out.size() <= target && held <= ids_target) break;
    out.push_back(c->key);
    if (c->folded) held -= std::min(held, c->folded->ids.size());
  }
  if (out.empty()) return out;
  std::sort(out.begin(), out.end());
  auto folding = [&](const ProcKey& k) { return std::binary_search(out.begin(), out.end(), k); };

  FoldedProcs& fp = folded_procs_;
  auto take = [&](const FileCounters& c) {
    add_totals(fp.totals, c);
    combine_counters(fp.combined, c);
  };
  std::map<ProcKey, std::vector<std::pair<uint32_t, uint64_t>>> files_of;
  std::vector<FileIdentity> touched;
  for (auto it = files_.begin(); it != files_.end();) {
    if (!folding(it->first.proc)) {
      ++it;
      continue;
    }
    const FileAcc& a = it->second;
    const FileCounters c = a.total();
    if (on_fold) show_record(*on_fold, it->first, c);
    take(c);
    fp.rename_sources += a.rename_sources;
    fp.file_unlinks += a.unlinks;
    // Counted as snapshot() counts a row: a record without any call is no file of the process.
    if (has_activity(c) || a.rename_sources != 0 || a.unlinks != 0)
      files_of[it->first.proc].emplace_back(it->first.dev, it->first.ino);
    touched.push_back(identity_of(it->first));
    name_bytes_ -= a.renamed_to.size();
    it = files_.erase(it);
  }
  for (auto it = others_.begin(); it != others_.end();) {
    if (!folding(it->first.first)) {
      ++it;
      continue;
    }
    const FileCounters c = it->second.total();
    auto& o = fp.other_io[it->first.second];
    o[0] += c.reads;
    o[1] += c.writes;
    o[2] += c.bytes_read;
    o[3] += c.bytes_written;
    it = others_.erase(it);
  }
  for (const ProcKey& k : out) {
    auto it = procs_.find(k);
    const Proc& p = it->second;
    auto& ids = files_of[k];
    if (p.folded) {
      take(p.folded->counters);
      fp.rename_sources += p.folded->rename_sources;
      fp.file_unlinks += p.folded->unlinks;
      p.folded->ids.for_each([&](const FileIdentity& id) { ids.emplace_back(id.dev, id.ino); });
    }
    std::sort(ids.begin(), ids.end());
    fp.files += static_cast<uint64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
    fp.unlinks += p.unlinks;
    fp.renames += p.renames;
    if (k.start_ns && (fp.first_start_ns == 0 || k.start_ns < fp.first_start_ns))
      fp.first_start_ns = k.start_ns;
    fp.last_end_ns = std::max(fp.last_end_ns, p.end_ns);
    ++fp.processes;
    procs_.erase(it);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  forget_names(std::move(touched), forgotten);
  return out;
}

Recorder::Memory Recorder::memory() const {
  Memory m;
  m.file_records = files_.size();
  m.other_records = others_.size();
  m.processes = procs_.size();
  m.names = names_.size();
  m.paths = by_path_.size();
  m.forgotten_paths = forgotten_count();
  std::size_t folded_procs = 0, filters = 0;
  for (const auto& [k, p] : procs_) {
    if (!p.folded) continue;
    ++folded_procs;
    m.folded_files += p.folded->ids.size();
    filters += p.folded->ids.filter_bytes();
  }
  constexpr std::size_t kTreeNode = 32;  // a std::map node's links and colour
  constexpr std::size_t kHashNode = 16;  // an unordered_map node's link and cached hash
  m.approx_bytes =
      m.file_records * (kTreeNode + sizeof(FileKey) + sizeof(FileAcc)) +
      m.other_records * (kTreeNode + sizeof(std::pair<ProcKey, uint32_t>) + sizeof(FileAcc)) +
      m.processes * (kTreeNode + sizeof(ProcKey) + sizeof(Proc)) + folded_procs * sizeof(Folded) +
      m.names * (kTreeNode + sizeof(FileIdentity) + sizeof(Name)) +
      m.paths * (kHashNode + sizeof(void*) + sizeof(std::string) + sizeof(FileIdentity)) +
      m.folded_files * sizeof(FileIdentity) + filters + m.forgotten_paths * sizeof(ForgottenPath);
  for (const auto& [k, a] : files_) m.approx_bytes += a.heap_bytes();
  for (const auto& [k, a] : others_) m.approx_bytes += a.heap_bytes();
  return m;
}

RunSnapshot Recorder::snapshot(const ClockBase& clock) const {
  RunSnapshot s;
  s.lost = lost_;
  s.folded_records = folded_records_;
  auto wall = [&](uint64_t mono) {
    // Modular, so that no timestamp (a checkpoint's included) can overflow a signed sum.
    return static_cast<int64_t>(mono + static_cast<uint64_t>(clock.mono_to_wall_ns));
  };
  auto relative = [&](uint64_t mono) -> uint64_t {
    return mono > clock.start_mono_ns ? mono - clock.start_mono_ns : 0;
  };
  auto make_relative = [&](FileCounters& c) {
    for (const auto& field : counter_fields()) {
      if (field.fold != Fold::MinStart && field.fold != Fold::LastEnd) continue;
      auto* v = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(&c) + field.offset);
      *v = *v ? relative(*v) : 0;
    }
  };

  std::map<ProcKey, std::size_t> index;
  std::vector<const Proc*> ordered;
  for (const auto& [k, p] : procs_) ordered.push_back(&p);
  std::sort(ordered.begin(), ordered.end(), [](const Proc* a, const Proc* b) {
    return std::tie(a->key.start_ns, a->key.pid) < std::tie(b->key.start_ns, b->key.pid);
  });
  for (const Proc* p : ordered) {
    ProcessSnapshot ps;
    ps.pid = p->key.pid;
    ps.ppid = p->parent_known ? p->parent.pid : 0;
    ps.start_ns = p->key.start_ns ? wall(p->key.start_ns) : 0;
    if (p->wait_status) {
      ps.end_ns = wall(p->end_ns);
      ps.exit_code = exit_code_of_wait_status(*p->wait_status);
    }
    ps.comm = p->comm;
    ps.exe = p->exe;
    ps.unlinks = p->unlinks;
    ps.renames = p->renames;
    index[p->key] = s.processes.size();
    s.processes.push_back(std::move(ps));
  }

  // The file records, in the tree's order, walked once: its nodes are scattered, and a walk
  // costs a cache miss a node (two walks were a fifth of the snapshot of a 40,000-record run,
  // bench/README.md "The run's exit").
  struct Entry {
    const FileKey* key;
    const FileAcc* acc;
  };
  std::vector<Entry> entries;
  entries.reserve(files_.size());
  for (const auto& [k, acc] : files_) entries.push_back({&k, &acc});

  // A stat by path before the file was seen open has no generation (gen 0). When the process
  // has exactly one other incarnation of that (dev, ino), kept or folded, the stat belongs to
  // it: fold it into that record, or into the process's folded record.
  std::map<FileKey, FileAcc> merged;            // kept records with their stat folded in
  std::vector<char> joined(entries.size(), 0);  // by entry: the stat records so folded
  struct StatsIntoFolded {
    FileCounters counters = new_counters();
    uint64_t rename_sources = 0, unlinks = 0;
  };
  std::map<ProcKey, StatsIntoFolded> into_folded;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const FileKey& k = *entries[i].key;
    const FileAcc& acc = *entries[i].acc;
    if (k.gen != 0) continue;
    const StatMatch m = stat_match(k.dev, k.ino, k.proc, folded_ids_of(k.proc));
    if (m.n != 1) continue;
    joined[i] = 1;
    if (!m.kept) {
      StatsIntoFolded& f = into_folded[k.proc];
      combine_counters(f.counters, acc.total());
      f.rename_sources += acc.rename_sources;
      f.unlinks += acc.unlinks;
      continue;
    }
    FileAcc& into = merged.try_emplace(*m.kept, files_.at(*m.kept)).first->second;
    FileCounters stat = acc.total();
    fold_counters(stat, into.total());  // the stat came first
    into.set_folded(stat);
    into.rename_sources += acc.rename_sources;
    into.unlinks += acc.unlinks;
    if (into.renamed_to.empty()) into.renamed_to = acc.renamed_to;
  }

  // The rows' order (by pid, process start and path; ties in the tree's order) is found on
  // small entries first, and each row is then made once, in place: rows are ~1 KB, and moving
  // them into order after they were made copied each again (bench/README.md "The run's exit").
  // Names are found by walking names_ beside the entries, both being ordered by (dev, ino,
  // gen), instead of a tree lookup a row.
  struct Order {
    uint32_t pid;
    int64_t start;
    const std::string* path;
    const Name* name;  // nullptr: no name received
    uint32_t entry;
    uint32_t rank;     // of *path among the rows' paths
  };
  std::vector<Order> order;
  order.reserve(entries.size());
  std::deque<std::string> unknown;  // the rows' "<unknown dev:ino>" paths
  auto cursor = names_.begin();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (joined[i]) continue;
    const FileKey& k = *entries[i].key;
    const Name* n = nullptr;
    if (k.gen == 0) {
      n = name_of(k);  // any incarnation's name (the range's last): looked up
    } else {
      const FileIdentity id = identity_of(k);
      while (cursor != names_.end() && cursor->first < id) ++cursor;
      if (cursor != names_.end() && cursor->first == id) n = &cursor->second;
    }
    const std::string* path = n ? &n->path : &unknown.emplace_back(unknown_path(k.dev, k.ino));
    order.push_back({k.proc.pid, k.proc.start_ns ? wall(k.proc.start_ns) : 0, path, n,
                     static_cast<uint32_t>(i), 0});
  }
  // Paths compared once per distinct name, not in every comparison of the rows' sort (a
  // DataLoader job's 40,000 rows share 10,000 names, and their long common prefixes made string
  // compares most of that sort): each path is given its rank among the distinct paths (equal
  // strings, of two incarnations, the same rank), and the rows are sorted on integers.
  {
    // Pointers to unrelated strings are ordered with std::less (a total order; `<` on them is
    // unspecified).
    const std::less<const std::string*> before;
    std::vector<const std::string*> paths;
    paths.reserve(order.size());
    for (const Order& o : order) paths.push_back(o.path);
    std::sort(paths.begin(), paths.end(), before);
    paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
    std::vector<std::pair<const std::string*, uint32_t>> by_text(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) by_text[i] = {paths[i], 0};
    std::sort(by_text.begin(), by_text.end(),
              [](const auto& a, const auto& b) { return *a.first < *b.first; });
    uint32_t rank = 0;
    for (std::size_t i = 0; i < by_text.size(); ++i) {
      if (i > 0 && *by_text[i].first != *by_text[i - 1].first) ++rank;
      by_text[i].second = rank;
    }
    // by pointer, for the look-ups below
    const auto by_pointer = [&](const auto& a, const auto& b) { return before(a.first, b.first); };
    std::sort(by_text.begin(), by_text.end(), by_pointer);
    for (Order& o : order)
      o.rank = std::lower_bound(by_text.begin(), by_text.end(),
                                std::pair<const std::string*, uint32_t>{o.path, 0}, by_pointer)
                   ->second;
  }
  std::sort(order.begin(), order.end(), [](const Order& a, const Order& b) {
    return std::tie(a.pid, a.start, a.rank, a.entry) < std::tie(b.pid, b.start, b.rank, b.entry);
  });

  std::map<ProcKey, uint64_t> rows_also_folded;  // files folded, then seen again
  std::vector<std::pair<uint32_t, uint64_t>> row_files;
  row_files.reserve(order.size());
  s.files.reserve(order.size());
  prefault(s.files.data(), s.files.capacity() * sizeof(FileSnapshot));
  for (const Order& o : order) {
    const FileKey& k = *entries[o.entry].key;
    const FileAcc* acc = entries[o.entry].acc;
    if (!merged.empty())
      if (auto mi = merged.find(k); mi != merged.end()) acc = &mi->second;
    FileCounters c = acc->total();
    if (!has_activity(c) && acc->rename_sources == 0 && acc->unlinks == 0) continue;
    make_relative(c);
    FileSnapshot& f = s.files.emplace_back();
    f.path = *o.path;
    if (o.name) {
      f.path_incomplete = o.name->incomplete;
    } else {
      f.path_known = false;
    }
    f.dev = kernel_dev_to_user(k.dev);
    f.ino = k.ino;
    f.pid = k.proc.pid;
    f.proc_start_ns = o.start;
    f.counters = c;
    f.rename_sources = acc->rename_sources;
    f.unlinks = acc->unlinks;
    f.renamed_to = acc->renamed_to;
    auto pi = index.find(k.proc);
    if (pi != index.end()) {
      ProcessSnapshot& ps = s.processes[pi->second];
      add_totals(ps.totals, c);
      ps.files += 1;
      if (const FoldedIds* ids = folded_ids_of(k.proc); ids && ids->last_io(identity_of(k)))
        ++rows_also_folded[k.proc];
    }
    row_files.emplace_back(k.dev, k.ino);
  }

  // The folded records: counters into the totals, files counted once whether folded, kept,
  // or both (folded, then seen again), with stats by path joined as above.
  std::vector<std::pair<uint32_t, uint64_t>> folded_files;
  for (const auto& [pk, p] : procs_) {
    if (!p.folded) continue;
    const Folded& fo = *p.folded;
    const FoldedCount fc = count_folded(
        pk, fo.ids, [&](const FileIdentity& id) { folded_files.emplace_back(id.dev, id.ino); });
    ProcessSnapshot& ps = s.processes[index.at(pk)];
    ps.files += fc.n - rows_also_folded[pk] - fc.stats_joined;
    ps.folded_files = fc.n - fc.stats_joined_folded;
    FileCounters c = fo.counters;
    ps.folded_rename_sources = fo.rename_sources;
    ps.folded_unlinks = fo.unlinks;
    if (auto st = into_folded.find(pk); st != into_folded.end()) {
      combine_counters(c, st->second.counters);
      ps.folded_rename_sources += st->second.rename_sources;
      ps.folded_unlinks += st->second.unlinks;
    }
    add_totals(ps.totals, c);
    make_relative(c);
    ps.folded = c;
  }
  std::sort(row_files.begin(), row_files.end());
  std::sort(folded_files.begin(), folded_files.end());
  folded_files.erase(std::unique(folded_files.begin(), folded_files.end()), folded_files.end());
  for (const auto& f : folded_files)
    s.folded_only_files += !std::binary_search(row_files.begin(), row_files.end(), f);
  s.folded_files.reserve(folded_files.size());
  for (const auto& [dev, ino] : folded_files) s.folded_files.emplace_back(kernel_dev_to_user(dev), ino);
  // kernel_dev_to_user keeps the order of distinct devices only by chance: sort again
  std::sort(s.folded_files.begin(), s.folded_files.end());

  for (const auto& [k, acc] : others_) {
    auto pi = index.find(k.first);
    if (pi == index.end()) continue;
    FileCounters c = acc.total();
    OtherIo& o = s.processes[pi->second].other_io[other_kind_name(k.second)];
    o.reads += c.reads;
    o.writes += c.writes;
    o.bytes_read += c.bytes_read;
    o.bytes_written += c.bytes_written;
  }

  if (folded_procs_.processes > 0) {
    // Last, after the processes in start order: the row of the processes folded away.
    const FoldedProcs& fp = folded_procs_;
    ProcessSnapshot ps;
    ps.comm = "<other processes>";
    ps.start_ns = fp.first_start_ns ? wall(fp.first_start_ns) : 0;
    if (fp.last_end_ns) ps.end_ns = wall(fp.last_end_ns);
    ps.totals = fp.totals;
    ps.files = fp.files;
    ps.folded_files = fp.files;
    FileCounters c = fp.combined;
    make_relative(c);
    ps.folded = c;
    ps.folded_rename_sources = fp.rename_sources;
    ps.folded_unlinks = fp.file_unlinks;
    ps.unlinks = fp.unlinks;
    ps.renames = fp.renames;
    for (const auto& [kind, v] : fp.other_io) {
      OtherIo& o = ps.other_io[other_kind_name(kind)];
      o.reads += v[0];
      o.writes += v[1];
      o.bytes_read += v[2];
      o.bytes_written += v[3];
    }
    ps.folded_processes = fp.processes;
    s.processes.push_back(std::move(ps));
  }
  return s;
}

}  // namespace iolens::core

namespace iolens::core {

const std::string* Recorder::file_name(const FileIdentity& id, bool* incomplete) const {
  const Name* n = name_of(FileKey{id.dev, id.ino, id.gen, {}});
  if (incomplete) *incomplete = n && n->incomplete;
  return n ? &n->path : nullptr;
}

void Recorder::visit_processes(const std::function<void(const ProcessView&)>& fn) const {
  for (const auto& [k, p] : procs_)
    fn(ProcessView{k, p.parent_known ? &p.parent : nullptr, p.comm, p.exe, p.end_ns,
                   p.wait_status});
}

void Recorder::show_record(const RecordVisitor& fn, const FileKey& k,
                           const FileCounters& c) const {
  const Name* n = name_of(k);
  fn(RecordView{k.proc, identity_of(k), c, n ? &n->path : nullptr, false});
}

void Recorder::visit_records(const RecordVisitor& fn) const {
  for (const auto& [k, acc] : files_) show_record(fn, k, acc.total());
  for (const auto& [pk, p] : procs_) {
    if (!p.folded) continue;
    fn(RecordView{pk, FileIdentity{}, p.folded->counters, nullptr, true});
  }
  // The folded processes' row, as an "other files" record of process {0, 0}.
  static const ProcKey kFoldedProcesses{};
  if (folded_procs_.processes > 0)
    fn(RecordView{kFoldedProcesses, FileIdentity{}, folded_procs_.combined, nullptr, true});
}

const Recorder::FoldedIds* Recorder::folded_ids_of(const ProcKey& k) const {
  auto it = procs_.find(k);
  return it != procs_.end() && it->second.folded ? &it->second.folded->ids : nullptr;
}

Recorder::FoldedCount Recorder::count_folded(
    const ProcKey& pk, const FoldedIds& ids,
    const std::function<void(const FileIdentity&)>& each) const {
  FoldedCount c;
  c.n = ids.size();
  ids.for_each([&](const FileIdentity& id) {
    if (each) each(id);
    if (id.gen != 0) return;
    const StatMatch m = stat_match(id.dev, id.ino, pk, &ids);
    if (m.n != 1) return;
    ++c.stats_joined;
    if (ids.last_io(FileIdentity{id.ino, id.dev, m.gen})) ++c.stats_joined_folded;
  });
  return c;
}

Recorder::Summary Recorder::summary() const {
  Summary s;
  // The rows snapshot() makes, their totals and the folded records', in one walk of the records
  // (each unpacked once). A stat by path joined to its process's one other incarnation is no
  // row of its own: joined to a kept record, it makes one row with it; to the folded record, it
  // goes into that. A row with no activity, renames or unlinks (its stat included) is left out.
  // Keys order (dev, ino) before the generation, 0 first: a stat comes before its incarnation.
  struct Stat {
    FileCounters totals{};  // its Fold::Sum counters
    bool shown = false;
  };
  std::map<FileKey, Stat> stat_of;               // by the kept record it joins
  std::map<ProcKey, uint64_t> rows_also_folded;  // files folded, then seen again
  for (const auto& [k, acc] : files_) {
    const FileCounters c = acc.total();
    const bool shown = acc.rename_sources != 0 || acc.unlinks != 0 || has_activity(c);
    if (k.gen == 0) {
      const StatMatch m = stat_match(k.dev, k.ino, k.proc, folded_ids_of(k.proc));
      if (m.n == 1) {
        if (!m.kept) {
          add_totals(s.totals, c);  // into the folded record
        } else {
          Stat& st = stat_of[*m.kept];
          add_totals(st.totals, c);
          st.shown = shown;
        }
        continue;
      }
    }
    const auto st = stat_of.find(k);
    const bool stat_shown = st != stat_of.end() && st->second.shown;
    if (!shown && !stat_shown) continue;
    add_totals(s.totals, c);
    if (st != stat_of.end()) add_totals(s.totals, st->second.totals);
    ++s.files;
    if (const FoldedIds* ids = folded_ids_of(k.proc); ids && ids->last_io(identity_of(k)))
      ++rows_also_folded[k.proc];
  }
  for (const auto& [pk, p] : procs_) {
    if (!p.folded) continue;
    add_totals(s.totals, p.folded->counters);
    const FoldedCount fc = count_folded(pk, p.folded->ids);
    s.files += fc.n - rows_also_folded[pk] - fc.stats_joined;
    s.folded_files += fc.n - fc.stats_joined_folded;
  }
  add_totals(s.totals, folded_procs_.totals);  // the "<other processes>" row's
  s.files += folded_procs_.files;
  s.folded_files += folded_procs_.files;
  return s;
}

std::size_t Recorder::distinct_files() const {
  std::vector<std::pair<uint32_t, uint64_t>> ids;
  ids.reserve(files_.size());
  for (const auto& [k, acc] : files_) ids.emplace_back(k.dev, k.ino);
  for (const auto& [pk, p] : procs_)
    if (p.folded) p.folded->ids.for_each([&](const FileIdentity& id) { ids.emplace_back(id.dev, id.ino); });
  std::sort(ids.begin(), ids.end());
  // A folded process's files are counted as its row counts them (not merged with others').
  return static_cast<std::size_t>(std::unique(ids.begin(), ids.end()) - ids.begin()) +
         folded_procs_.files;
}

}  // namespace iolens::core
