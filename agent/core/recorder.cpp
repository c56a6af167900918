// SPDX-License-Identifier: Apache-2.0
#include "core/recorder.hpp"

#include <algorithm>
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

FileCounters Recorder::FileAcc::total() const {
  if (!has_folded) return live;
  FileCounters t = folded;
  if (has_live) fold_counters(t, live);
  return t;
}

Recorder::Proc& Recorder::proc(const ProcKey& k) {
  auto [it, inserted] = procs_.try_emplace(k);
  if (inserted) {
    it->second.key = k;
    if (k.pid == root_pid_) {
      // The root was created by iolens itself, before tracing: no fork event names its parent.
      it->second.parent = ProcKey{tracer_pid_, 0};
      it->second.parent_known = true;
    }
  }
  return it->second;
}

void Recorder::accumulate(FileAcc& acc, const FileCounters& c, bool removed) {
  if (removed) {
    if (acc.has_folded) {
      fold_counters(acc.folded, c);
    } else {
      acc.folded = c;
      acc.has_folded = true;
    }
    acc.has_live = false;
    acc.live = new_counters();
  } else {
    acc.live = c;
    acc.has_live = true;
  }
}

void Recorder::on_file(const iolens_file_key& key, const FileCounters& c, bool removed) {
  FileKey k = file_key_of(key);
  proc(k.proc);
  accumulate(files_[k], c, removed);
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

void Recorder::set_name(FileId id, std::string path, bool canonical, bool incomplete) {
  auto it = names_.find(id);
  if (it != names_.end() && it->second.canonical && !canonical) return;  // keep the better name
  if (!canonical && canonicalize_) {
    if (auto real = canonicalize_(path)) path = *real;
  }
  by_path_[path] = id;
  names_[id] = Name{std::move(path), canonical, incomplete};
}

void Recorder::on_path(const PathEvent& p) {
  Proc& pr = proc(p.proc);
  const bool incomplete = (p.flags & (IOLENS_PATH_TRUNCATED | IOLENS_PATH_UNREACHED)) != 0;
  switch (p.op) {
    case IOLENS_PATH_FILE:
      set_name({p.dev, p.ino, p.gen}, path_from_walk(p.walk), true, incomplete);
      break;
    case IOLENS_PATH_LOOKUP:
      set_name({p.dev, p.ino, p.gen}, resolve_argument(p.walk, p.str1), false, incomplete);
      break;
    case IOLENS_PATH_EXE:
      pr.exe = path_from_walk(p.walk);
      pr.comm = p.comm;
      break;
    case IOLENS_PATH_UNLINK: {
      ++pr.unlinks;
      auto it = by_path_.find(resolve_argument(p.walk, p.str1));
      if (it == by_path_.end()) break;
      // The record itself may reach us only at the next drain: create the entry now.
      const auto& [dev, ino, gen] = it->second;
      ++files_[FileKey{dev, ino, gen, p.proc}].unlinks;
      break;
    }
    case IOLENS_PATH_RENAME: {
      ++pr.renames;
      const std::string from = resolve_argument(p.walk, p.str1);
      const std::string to = resolve_argument(p.walk2, p.str2);
      auto it = by_path_.find(from);
      if (it == by_path_.end()) break;
      const FileId id = it->second;
      FileAcc& f = files_[FileKey{std::get<0>(id), std::get<1>(id), std::get<2>(id), p.proc}];
      ++f.rename_sources;
      f.renamed_to = to;
      by_path_.erase(from);  // the old name no longer leads to this file
      by_path_[to] = id;
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
  auto n = names_.find({k.dev, k.ino, k.gen});
  if (n != names_.end()) return &n->second;
  // A generation-less record (path-based stat): any incarnation's name, the last one sent.
  auto lo = names_.lower_bound({k.dev, k.ino, 0});
  const Name* found = nullptr;
  for (; lo != names_.end() && std::get<0>(lo->first) == k.dev && std::get<1>(lo->first) == k.ino;
       ++lo)
    found = &lo->second;
  return k.gen == 0 ? found : nullptr;
}

RunSnapshot Recorder::snapshot(const ClockBase& clock) const {
  RunSnapshot s;
  s.lost = lost_;
  auto wall = [&](uint64_t mono) { return static_cast<int64_t>(mono) + clock.mono_to_wall_ns; };
  auto relative = [&](uint64_t mono) -> uint64_t {
    return mono > clock.start_mono_ns ? mono - clock.start_mono_ns : 0;
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

  // A stat by path before the file was seen open has no generation (gen 0). When the process
  // has exactly one other incarnation of that (dev, ino), the stat belongs to it: fold it in.
  std::map<FileKey, FileAcc> files = files_;
  for (auto it = files.begin(); it != files.end();) {
    if (it->first.gen != 0) {
      ++it;
      continue;
    }
    auto match = files.end();
    int n = 0;
    for (auto j = files.lower_bound(FileKey{it->first.dev, it->first.ino, 1, {}});
         j != files.end() && j->first.dev == it->first.dev && j->first.ino == it->first.ino; ++j) {
      if (j->first.proc == it->first.proc) {
        match = j;
        ++n;
      }
    }
    if (n != 1) {
      ++it;
      continue;
    }
    FileAcc& into = match->second;
    FileCounters merged = it->second.total();
    FileCounters target = into.total();
    fold_counters(merged, target);  // the stat came first
    into.folded = merged;
    into.has_folded = true;
    into.has_live = false;
    into.rename_sources += it->second.rename_sources;
    into.unlinks += it->second.unlinks;
    if (into.renamed_to.empty()) into.renamed_to = it->second.renamed_to;
    it = files.erase(it);
  }

  for (const auto& [k, acc] : files) {
    FileSnapshot f;
    FileCounters c = acc.total();
    if (!has_activity(c) && acc.rename_sources == 0 && acc.unlinks == 0) continue;
    for (const auto& field : counter_fields()) {
      if (field.fold != Fold::MinStart && field.fold != Fold::LastEnd) continue;
      auto* v = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(&c) + field.offset);
      *v = *v ? relative(*v) : 0;
    }
    if (const Name* n = name_of(k)) {
      f.path = n->path;
      f.path_incomplete = n->incomplete;
    } else {
      f.path_known = false;
      f.path = "<unknown " + std::to_string(kernel_dev_major(k.dev)) + ":" +
               std::to_string(kernel_dev_minor(k.dev)) + ":" + std::to_string(k.ino) + ">";
    }
    f.dev = kernel_dev_to_user(k.dev);
    f.ino = k.ino;
    f.pid = k.proc.pid;
    f.proc_start_ns = k.proc.start_ns ? wall(k.proc.start_ns) : 0;
    f.counters = c;
    f.rename_sources = acc.rename_sources;
    f.unlinks = acc.unlinks;
    f.renamed_to = acc.renamed_to;
    auto pi = index.find(k.proc);
    if (pi != index.end()) {
      ProcessSnapshot& ps = s.processes[pi->second];
      add_totals(ps.totals, c);
      ps.files += 1;
    }
    s.files.push_back(std::move(f));
  }
  std::sort(s.files.begin(), s.files.end(), [](const FileSnapshot& a, const FileSnapshot& b) {
    return std::tie(a.pid, a.proc_start_ns, a.path) < std::tie(b.pid, b.proc_start_ns, b.path);
  });

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
  return s;
}

}  // namespace iolens::core
