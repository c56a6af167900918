// SPDX-License-Identifier: Apache-2.0
// Recorder::save and Recorder::load: the recorder's whole state as a checkpoint blob. The layout
// is docs/state-format.md; any change to it bumps kFormatVersion (a daemon refuses other
// versions and starts without the checkpoint).
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "core/binary_io.hpp"
#include "core/recorder.hpp"

namespace iolens::core {
namespace {

constexpr char kMagic[8] = {'I', 'O', 'L', 'E', 'N', 'S', 'R', 'C'};
constexpr uint32_t kFormatVersion = 2;
// Version 1 (before records were kept packed) is still read: an upgrade keeps its checkpoint.
constexpr uint32_t kOldestVersion = 1;
constexpr std::size_t kHeaderBytes = 24;  // magic, format version, kernel ABI, payload length
constexpr std::size_t kTrailerBytes = 4;  // CRC-32 of header and payload

// FileCounters are written as the kernel ABI struct's bytes: that is only little-endian on a
// little-endian host (x86-64, arm64, the hosts iolens builds for), and only the values if the
// struct has no padding (layout checked in iolens_abi.h and abi_check.cpp).
static_assert(std::endian::native == std::endian::little, "FileCounters are saved raw");
static_assert(std::has_unique_object_representations_v<FileCounters>, "no padding bytes");
static_assert(sizeof(FileCounters) == 1352 + 784);

// The least bytes one entry of each list takes: a count is refused when the bytes left cannot
// hold that many entries.
constexpr std::size_t kLostMin = 4 + 8;
constexpr std::size_t kProcMin = 12 + 12 + 1 + 4 + 4 + 8 + 1 + 8 + 8 + 1;
constexpr std::size_t kIdentityBytes = 16;
constexpr std::size_t kAccMin = 1 + 8 + 8 + 4;
constexpr std::size_t kFileMin = 28 + kAccMin;
constexpr std::size_t kOtherMin = 12 + 4 + kAccMin;
constexpr std::size_t kNameMin = kIdentityBytes + 4 + 1;
constexpr std::size_t kPathMin = 4 + kIdentityBytes;
constexpr std::size_t kForgottenBytes = 8 + kIdentityBytes;

constexpr uint8_t kHasFolded = 1, kHasLive = 2;     // FileAcc parts
constexpr uint8_t kCanonical = 1, kIncomplete = 2;  // Name flags

uint32_t crc32_of(std::string_view b) {
  return static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(b.data()), b.size()));
}

/// Reads a list's entries with `get(key)` and checks that the keys are strictly increasing (as
/// the sorted container they came from holds them), so that duplicates are refused and each
/// entry can be placed at the end.
template <class Key, class Get>
bool read_sorted(Reader& r, std::size_t min_entry, const char* what, Get get) {
  uint64_t n = 0;
  if (!r.count(n, min_entry)) return false;
  std::optional<Key> prev;
  for (uint64_t i = 0; i < n; ++i) {
    Key k{};
    if (!get(k)) return false;
    if (prev && !(*prev < k)) return r.fail(std::string(what) + " not strictly increasing");
    prev = std::move(k);
  }
  return true;
}

}  // namespace

template <class F>
void Recorder::for_each_forgotten(F f) const {
  // The merge a fold makes only now and then, walked: the big list's dead tombstones left out.
  std::vector<uint64_t> buried = buried_;
  std::sort(buried.begin(), buried.end());
  auto dead = [&](const ForgottenPath& e) {
    return e.id == FileIdentity{} && !std::binary_search(buried.begin(), buried.end(), e.hash);
  };
  auto i = forgotten_paths_.begin();
  auto j = recent_forgotten_.begin();
  while (i != forgotten_paths_.end() || j != recent_forgotten_.end()) {
    if (i != forgotten_paths_.end() && dead(*i)) {
      ++i;
    } else if (j == recent_forgotten_.end() ||
               (i != forgotten_paths_.end() && i->hash < j->hash)) {
      f(*i++);
    } else {
      f(*j++);
    }
  }
}

struct Recorder::Codec {
  // ---- keys ----
  static void put(ByteWriter& w, const ProcKey& k) {
    w.u32(k.pid);
    w.u64(k.start_ns);
  }
  static bool get(Reader& r, ProcKey& k) { return r.u32(k.pid) && r.u64(k.start_ns); }

  static void put(ByteWriter& w, const FileIdentity& id) {
    w.u32(id.dev);
    w.u64(id.ino);
    w.u32(id.gen);
  }
  static bool get(Reader& r, FileIdentity& id) {
    return r.u32(id.dev) && r.u64(id.ino) && r.u32(id.gen);
  }

  static void put(ByteWriter& w, const FileKey& k) {
    w.u32(k.dev);
    w.u64(k.ino);
    w.u32(k.gen);
    put(w, k.proc);
  }
  static bool get(Reader& r, FileKey& k) {
    return r.u32(k.dev) && r.u64(k.ino) && r.u32(k.gen) && get(r, k.proc);
  }

  // ---- values ----
  static void put(ByteWriter& w, const FileCounters& c) { w.bytes(&c, sizeof c); }
  static bool get(Reader& r, FileCounters& c) { return r.raw(c); }

  static void put(ByteWriter& w, const FileAcc& a, bool with_live) {
    // A part that is absent is new_counters() (accumulate and file_acc keep it so): only the
    // parts present are written, packed (version 2), as the record holds them.
    const bool live = with_live && a.has_live();
    w.u8((a.has_folded() ? kHasFolded : 0) | (live ? kHasLive : 0));
    if (a.has_folded()) w.string(a.folded_packed().bytes());
    if (live) w.string(a.live_packed().bytes());
    w.u64(a.rename_sources);
    w.u64(a.unlinks);
    w.string(a.renamed_to);
  }
  /// A part: whole counters (version 1) or packed ones (version 2, checked).
  static bool get_part(Reader& r, uint32_t version, PackedCounters& out) {
    if (version == 1) {
      FileCounters c = new_counters();
      if (!get(r, c)) return false;
      out = PackedCounters(c);
      return true;
    }
    std::string packed, why;
    if (!r.string(packed)) return false;
    auto p = PackedCounters::from_bytes(packed, why);
    if (!p) return r.fail(why);
    out = std::move(*p);
    return true;
  }
  static bool get(Reader& r, FileAcc& a, uint32_t version) {
    uint8_t parts = 0;
    if (!r.u8(parts)) return false;
    if (parts & ~(kHasFolded | kHasLive))
      return r.fail("unknown record parts " + std::to_string(parts));
    PackedCounters c;
    if (parts & kHasFolded) {
      if (!get_part(r, version, c)) return false;
      a.set_folded_packed(std::move(c));
    }
    if (parts & kHasLive) {
      if (!get_part(r, version, c)) return false;
      a.set_live_packed(std::move(c));
    }
    return r.u64(a.rename_sources) && r.u64(a.unlinks) && r.string(a.renamed_to);
  }

  static void put(ByteWriter& w, const Proc& p) {
    put(w, p.key);
    put(w, p.parent);
    w.u8(p.parent_known);
    w.string(p.comm);
    w.string(p.exe);
    w.u64(p.end_ns);
    w.u8(p.wait_status.has_value());
    if (p.wait_status) w.i32(*p.wait_status);
    w.u64(p.unlinks);
    w.u64(p.renames);
    w.u8(p.folded != nullptr);
    if (!p.folded) return;
    put(w, p.folded->counters);
    w.u64(p.folded->rename_sources);
    w.u64(p.folded->unlinks);
    for (const auto& part : p.folded->ids.parts()) {
      w.u64(part.size());
      for (const FileIdentity& id : part) put(w, id);
    }
  }
  static bool get(Reader& r, Proc& p) {
    bool has_status = false, has_folded = false;
    if (!(get(r, p.key) && get(r, p.parent) && r.boolean(p.parent_known) && r.string(p.comm) &&
          r.string(p.exe) && r.u64(p.end_ns) && r.boolean(has_status)))
      return false;
    if (has_status) {
      int32_t s = 0;
      if (!r.i32(s)) return false;
      p.wait_status = s;
    }
    if (!(r.u64(p.unlinks) && r.u64(p.renames) && r.boolean(has_folded))) return false;
    if (!has_folded) return true;
    auto f = std::make_unique<Folded>();
    if (!(get(r, f->counters) && r.u64(f->rename_sources) && r.u64(f->unlinks))) return false;
    std::array<std::vector<FileIdentity>, 3> parts;
    for (auto& part : parts) {
      uint64_t n = 0;
      if (!r.count(n, kIdentityBytes)) return false;
      part.resize(n);
      for (FileIdentity& id : part)
        if (!get(r, id)) return false;
    }
    if (!f->ids.restore(std::move(parts)))
      return r.fail("folded file ids of pid " + std::to_string(p.key.pid) +
                    " unsorted or duplicated");
    p.folded = std::move(f);
    return true;
  }

  // ---- the recorder ----
  static void put(ByteWriter& w, const Recorder& rec, bool with_live) {
    w.u32(rec.root_pid_);
    w.u32(rec.tracer_pid_);
    w.u64(rec.folded_records_);
    w.u64(rec.final_snapshots_);
    w.u8(rec.short_at_.has_value());
    if (rec.short_at_) w.u64(*rec.short_at_);

    w.u64(rec.lost_.size());
    for (const auto& [cause, n] : rec.lost_) {
      w.string(cause);
      w.u64(n);
    }
    w.u64(rec.procs_.size());
    for (const auto& [k, p] : rec.procs_) put(w, p);
    w.u64(rec.files_.size());
    for (const auto& [k, a] : rec.files_) {
      put(w, k);
      put(w, a, with_live);
    }
    w.u64(rec.others_.size());
    for (const auto& [k, a] : rec.others_) {
      put(w, k.first);
      w.u32(k.second);
      put(w, a, with_live);
    }
    w.u64(rec.names_.size());
    for (const auto& [id, n] : rec.names_) {
      put(w, id);
      w.string(n.path);
      w.u8((n.canonical ? kCanonical : 0) | (n.incomplete ? kIncomplete : 0));
    }
    // Sorted by path, so that equal recorders give equal bytes (the hash map's order is not
    // part of the state).
    std::vector<const std::pair<const std::string, FileIdentity>*> paths;
    paths.reserve(rec.by_path_.size());
    for (const auto& e : rec.by_path_) paths.push_back(&e);
    std::sort(paths.begin(), paths.end(), [](auto* a, auto* b) { return a->first < b->first; });
    w.u64(paths.size());
    for (const auto* e : paths) {
      w.string(e->first);
      put(w, e->second);
    }
    // Counted by the same walk that writes them: the count can never disagree with the entries.
    std::size_t forgotten = 0;
    rec.for_each_forgotten([&](const ForgottenPath&) { ++forgotten; });
    w.u64(forgotten);
    rec.for_each_forgotten([&](const ForgottenPath& f) {
      w.u64(f.hash);
      put(w, f.id);
    });
    // The folded processes' row, at the end and only when a process was folded: a state
    // without one is the same bytes as before the row existed (docs/state-format.md).
    const FoldedProcs& fp = rec.folded_procs_;
    if (fp.processes == 0) return;
    w.u64(fp.processes);
    put(w, fp.totals);
    put(w, fp.combined);
    for (uint64_t v : {fp.files, fp.unlinks, fp.renames, fp.rename_sources, fp.file_unlinks,
                       fp.first_start_ns, fp.last_end_ns})
      w.u64(v);
    w.u64(fp.other_io.size());
    for (const auto& [kind, v] : fp.other_io) {
      w.u32(kind);
      for (uint64_t x : v) w.u64(x);
    }
  }

  static bool get_folded_procs(Reader& r, FoldedProcs& fp) {
    if (!(r.u64(fp.processes) && get(r, fp.totals) && get(r, fp.combined))) return false;
    for (uint64_t* v : {&fp.files, &fp.unlinks, &fp.renames, &fp.rename_sources,
                        &fp.file_unlinks, &fp.first_start_ns, &fp.last_end_ns})
      if (!r.u64(*v)) return false;
    if (fp.processes == 0) return r.fail("a folded processes' row of no process");
    uint64_t n = 0;
    if (!r.count(n, 4 + 4 * 8)) return false;
    std::optional<uint32_t> prev;
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t kind = 0;
      std::array<uint64_t, 4> v{};
      if (!(r.u32(kind) && r.u64(v[0]) && r.u64(v[1]) && r.u64(v[2]) && r.u64(v[3])))
        return false;
      if (prev && !(*prev < kind)) return r.fail("folded other I/O not strictly increasing");
      prev = kind;
      fp.other_io.emplace_hint(fp.other_io.end(), kind, v);
    }
    return true;
  }

  static std::unique_ptr<Recorder> get(Reader& r, uint32_t version) {
    uint32_t root = 0, tracer = 0;
    if (!(r.u32(root) && r.u32(tracer))) return nullptr;
    auto rec = std::make_unique<Recorder>(root, tracer);
    bool has_short = false;
    if (!(r.u64(rec->folded_records_) && r.u64(rec->final_snapshots_) && r.boolean(has_short)))
      return nullptr;
    if (has_short) {
      uint64_t v = 0;
      if (!r.u64(v)) return nullptr;
      rec->short_at_ = v;
    }

    // Over the constructor's causes, each at 0: a cause added by a later build stays present.
    auto lost = [&](std::string& cause) {
      uint64_t n = 0;
      if (!(r.string(cause) && r.u64(n))) return false;
      rec->lost_[cause] = n;
      return true;
    };
    auto process = [&](ProcKey& k) {
      Proc p;
      if (!get(r, p)) return false;
      k = p.key;
      rec->procs_.emplace_hint(rec->procs_.end(), k, std::move(p));
      return true;
    };
    auto file = [&](FileKey& k) {
      FileAcc a;
      if (!(get(r, k) && get(r, a, version))) return false;
      // fold_to and snapshot() look the process up: every record's process exists.
      if (!rec->procs_.count(k.proc))
        return r.fail("file record of unknown process " + std::to_string(k.proc.pid));
      rec->files_.emplace_hint(rec->files_.end(), k, std::move(a));
      return true;
    };
    auto other = [&](std::pair<ProcKey, uint32_t>& k) {
      FileAcc a;
      if (!(get(r, k.first) && r.u32(k.second) && get(r, a, version))) return false;
      if (!rec->procs_.count(k.first))
        return r.fail("other record of unknown process " + std::to_string(k.first.pid));
      rec->others_.emplace_hint(rec->others_.end(), k, std::move(a));
      return true;
    };
    auto name = [&](FileIdentity& id) {
      Name n;
      uint8_t flags = 0;
      if (!(get(r, id) && r.string(n.path) && r.u8(flags))) return false;
      if (flags & ~(kCanonical | kIncomplete))
        return r.fail("unknown name flags " + std::to_string(flags));
      n.canonical = flags & kCanonical;
      n.incomplete = flags & kIncomplete;
      rec->names_.emplace_hint(rec->names_.end(), id, std::move(n));
      return true;
    };
    if (!(read_sorted<std::string>(r, kLostMin, "lost causes", lost) &&
          read_sorted<ProcKey>(r, kProcMin, "processes", process) &&
          read_sorted<FileKey>(r, kFileMin, "file records", file) &&
          read_sorted<std::pair<ProcKey, uint32_t>>(r, kOtherMin, "other records", other) &&
          read_sorted<FileIdentity>(r, kNameMin, "names", name)))
      return nullptr;
    {
      uint64_t n = 0;
      if (!r.count(n, kPathMin)) return nullptr;
      rec->by_path_.reserve(n);  // bounded: n entries of at least kPathMin bytes are there
      std::string prev;
      for (uint64_t i = 0; i < n; ++i) {
        std::string path;
        FileIdentity id;
        if (!(r.string(path) && get(r, id))) return nullptr;
        if (i > 0 && !(prev < path)) {
          r.fail("paths not strictly increasing");
          return nullptr;
        }
        prev = path;
        rec->by_path_.emplace(std::move(path), id);
      }
    }
    {
      uint64_t n = 0;
      if (!r.count(n, kForgottenBytes)) return nullptr;
      rec->forgotten_paths_.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        ForgottenPath& f = rec->forgotten_paths_[i];
        if (!(r.u64(f.hash) && get(r, f.id))) return nullptr;
        // forgotten_path() binary-searches them by hash, each hash once.
        if (i > 0 && !(rec->forgotten_paths_[i - 1].hash < f.hash)) {
          r.fail("forgotten paths not strictly increasing");
          return nullptr;
        }
        // Saved before the next fold dropped it: kept until the next fold here too.
        if (f.id == FileIdentity{}) rec->buried_.push_back(f.hash);
      }
    }
    if (r.remaining() > 0 && !get_folded_procs(r, rec->folded_procs_)) return nullptr;
    rec->name_bytes_ = rec->count_name_bytes();
    rec->count_paths();
    return rec;
  }
};

std::vector<uint8_t> Recorder::save_bytes(bool with_live) const {
  std::vector<uint8_t> out;
  save_into(out, with_live);
  return out;
}

void Recorder::save_into(std::vector<uint8_t>& out, bool with_live) const {
  out.clear();
  // The bulk: the records' packed parts and the names. Growth would double the buffer and copy
  // it (fresh memory, page faults, and twice the blob at the peak: 44 MB for a job of 3 KB
  // paths, heaptrack on e2e_daemon_memory_bound), so their bytes are counted and reserved for:
  // the parts as held, the names' strings (name_bytes(): paths, the path index, rename targets).
  std::size_t counters = 0;
  auto count = [&](const auto& records) {
    for (const auto& [k, a] : records)
      counters += 4 + a.folded_packed().heap_bytes() +
                  (with_live && a.has_live() ? 4 + a.live_packed().heap_bytes() : 0);
  };
  count(files_);
  count(others_);
  // What fold_to and fold_processes_to made: each "other files" record's counters (whole) and
  // the ids of its files, 16 bytes each (a job over its limits holds many).
  for (const auto& [k, p] : procs_)
    if (p.folded) counters += sizeof(FileCounters) + 64 + 16 * p.folded->ids.size();
  out.reserve(kHeaderBytes + kTrailerBytes + name_bytes_ + 32 * names_.size() +
              32 * by_path_.size() + counters + 64 * (files_.size() + others_.size()) +
              128 * procs_.size() +
              24 * forgotten_count());
  ByteWriter w(out);
  w.bytes(kMagic, sizeof kMagic);
  w.u32(kFormatVersion);
  w.u32(IOLENS_ABI_VERSION);
  w.u64(0);  // payload length, patched below
  Codec::put(w, *this, with_live);
  w.patch_u64(16, out.size() - kHeaderBytes);
  w.u32(crc32_of(std::string_view(reinterpret_cast<const char*>(out.data()), out.size())));
}

std::string Recorder::save(bool with_live) const {
  const std::vector<uint8_t> b = save_bytes(with_live);
  return std::string(b.begin(), b.end());
}

std::unique_ptr<Recorder> Recorder::load(std::string_view bytes, std::string& error) {
  auto refuse = [&](const std::string& why) -> std::unique_ptr<Recorder> {
    error = "recorder state: " + why;
    return nullptr;
  };
  // Magic and version first, at fixed offsets in every version: a blob of another version is
  // named as such, whatever its layout.
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return refuse("not a recorder state (no IOLENSRC magic; " + std::to_string(bytes.size()) +
                  " bytes)");
  if (bytes.size() < kHeaderBytes + kTrailerBytes)
    return refuse("truncated header (" + std::to_string(bytes.size()) + " bytes)");
  Reader h(bytes.substr(sizeof kMagic, kHeaderBytes - sizeof kMagic));
  uint32_t version = 0, abi = 0;
  uint64_t payload = 0;
  h.u32(version);
  h.u32(abi);
  h.u64(payload);
  if (version < kOldestVersion || version > kFormatVersion)
    return refuse("format version " + std::to_string(version) + ", this build reads versions " +
                  std::to_string(kOldestVersion) + " to " + std::to_string(kFormatVersion));
  if (abi != IOLENS_ABI_VERSION)
    return refuse("saved with kernel ABI version " + std::to_string(abi) +
                  ", this build has version " + std::to_string(IOLENS_ABI_VERSION));
  const std::size_t held = bytes.size() - kHeaderBytes - kTrailerBytes;
  if (payload != held)
    return refuse("header says " + std::to_string(payload) + " payload bytes, the blob holds " +
                  std::to_string(held) + " (truncated or extended)");
  Reader t(bytes.substr(bytes.size() - kTrailerBytes));
  uint32_t crc = 0;
  t.u32(crc);
  const uint32_t actual = crc32_of(bytes.substr(0, bytes.size() - kTrailerBytes));
  if (crc != actual) return refuse("CRC mismatch (damaged)");

  Reader r(bytes.substr(kHeaderBytes, held));
  auto rec = Codec::get(r, version);
  if (!rec) return refuse(r.ok() ? "malformed" : r.error());
  if (r.remaining() != 0)
    return refuse(std::to_string(r.remaining()) + " unread bytes at the end of the payload");
  return rec;
}

}  // namespace iolens::core
