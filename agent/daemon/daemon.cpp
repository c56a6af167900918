// SPDX-License-Identifier: Apache-2.0
// iolensd's loop: start-up, job selection from the cgroup events, metrics, the loop itself and
// the stop. The other parts of class Daemon (daemon_impl.hpp) are in daemon_*.cpp.
#include "daemon/daemon_impl.hpp"

namespace iolens::daemon {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? st.st_ino : 0;
}

void walk_cgroups(const std::string& mount, const std::string& rel,
                  const std::function<void(uint64_t, const std::string&)>& visit, int depth) {
  const std::string abs = mount + (rel == "/" ? "" : rel);
  const uint64_t id = inode_of(abs);
  if (id == 0 || depth > 64) return;
  visit(id, rel);
  DIR* d = opendir(abs.c_str());
  if (!d) return;
  std::vector<std::string> subdirs;
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0)
      continue;
    subdirs.emplace_back(e->d_name);
  }
  closedir(d);
  for (const auto& s : subdirs) walk_cgroups(mount, (rel == "/" ? "" : rel) + "/" + s, visit, depth + 1);
}

nlohmann::json kernel_losses(const loader::KernelStats& st) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [cause, n] : loader::kernel_losses(st)) out[cause] = n;
  out["job_events"] = st[IOLENS_STAT_JOB_EVENTS_LOST];
  return out;
}

uint64_t unattributed_losses(const loader::KernelStats& st) {
  return st[IOLENS_STAT_LOSSES_UNATTRIBUTED] + st[IOLENS_STAT_LOSSES_NO_JOB];
}

uint64_t losses_in(const iolens_proc_lost& v) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < IOLENS_NR_STATS; ++i)
    if (i != IOLENS_STAT_PATH_EVENTS_LOST && i != IOLENS_STAT_PROC_EVENTS_LOST &&
        i != IOLENS_STAT_JOB_EVENTS_LOST && i != IOLENS_STAT_PATHS_TRUNCATED)
      n += v.n[i];
  return n;
}

bool Daemon::setup() {
  {
    // Blocked first: threads started later (the metrics server's) inherit the mask, so these
    // signals reach the loop's signalfd and never kill the process from another thread.
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR2}) sigaddset(&mask, s);
    pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  }
  // Before anything is created (directories, the socket): a daemon that cannot load its
  // programs must fail with the reason, not with a side effect of running unprivileged.
  if (Status s = loader::check_privileges(); !s) {
    spdlog::error("{}", s.message);
    return false;
  }
  if (Status s = loader::check_btf(opts_.btf_path); !s) {
    spdlog::error("{}", s.message);
    return false;
  }
  const auto mountinfo = read_file(opts_.mountinfo_path);
  if (!mountinfo) {
    spdlog::error("cannot read {}: {}", opts_.mountinfo_path, std::strerror(errno));
    return false;
  }
  const jobs::RootResult root = jobs::resolve_cgroup_root(cfg_.cgroup_root, *mountinfo);
  if (!root.error.empty()) {
    spdlog::error("cgroup root: {}", root.error);
    return false;
  }
  mount_ = root.path;
  if (access(mount_.c_str(), R_OK | X_OK) != 0) {
    spdlog::error("cannot read the cgroup root {}: {}", mount_, std::strerror(errno));
    return false;
  }
  mount_ino_ = inode_of(mount_);
  try {
    sel_.emplace(cfg_.rules);
  } catch (const std::exception& e) {
    spdlog::error("bad job rule: {}", e.what());
    return false;
  }
  if (sel_->watch_roots().size() > IOLENS_CGROUP_TRACE_MAX) {
    spdlog::error("the rules watch {} cgroup roots; the kernel's selection map holds {}",
                  sel_->watch_roots().size(), IOLENS_CGROUP_TRACE_MAX);
    return false;
  }
  writer_ = std::make_unique<JobWriter>(cfg_.output_dir, cfg_.rotation.max_bytes,
                                        cfg_.rotation.max_age_s,
                                        cfg_.record_compression == "zstd");
  if (Status s = writer_->prepare(); !s) {
    spdlog::error("{}", s.message);
    return false;
  }
  records_ = std::make_unique<RecordWriter>(*writer_);
  {
    // One daemon per state directory: a second one would overwrite the first one's state.
    // Checked, then used only through its descriptor: no file of it is ever followed through a
    // link (docs/daemon-config.md#the-daemons-directories).
    std::string error;
    state_dir_fd_ = core::open_private_dir(cfg_.state_dir, 0700, true, "state directory", error);
    if (state_dir_fd_ < 0) {
      spdlog::error("{}", error);
      return false;
    }
    state_lock_ = openat(state_dir_fd_, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat lock_st {};
    if (state_lock_ < 0 && errno == ELOOP) {
      spdlog::error("{}/lock is a symbolic link: refusing to open it (remove it)", cfg_.state_dir);
      return false;
    }
    if (state_lock_ >= 0 && (fstat(state_lock_, &lock_st) != 0 || !S_ISREG(lock_st.st_mode))) {
      spdlog::error("{}/lock is not a regular file: refusing it (remove it)", cfg_.state_dir);
      return false;
    }
    if (state_lock_ < 0 || flock(state_lock_, LOCK_EX | LOCK_NB) != 0) {
      spdlog::error("state directory {} is in use by another running iolensd ({})",
                    cfg_.state_dir, std::strerror(errno));
      return false;
    }
    saver_ = std::make_unique<StateSaver>(state_dir_fd_, kStateTmpName, kStateName);
  }
  // This daemon's state is its own now: a killed predecessor's temporaries in the output
  // directory can go (a writer's are flock'd: never taken).
  writer_->remove_stale_temporaries();
  if (const uint64_t n = writer_->stale_temporaries_removed())
    spdlog::warn("{}: removed {} temporary file(s) of a record a killed daemon was writing",
                 cfg_.output_dir, n);
  std::optional<gid_t> group;
  if (!cfg_.socket_group.empty()) {
    std::string err;
    group = control::group_id(cfg_.socket_group, err);
    if (!group) {
      spdlog::error("socket_group: {}", err);
      return false;
    }
  }
  std::string err;
  server_ = control::Server::listen(cfg_.socket_path, group, err);
  if (!server_) {
    spdlog::error("control socket: {}", err);
    return false;
  }
  // `status` and `jobs` are answered by the server's front thread from what the loop published
  // last, so that a loop busy with a big job never keeps them waiting (docs/control.md).
  control::Server* server = server_.get();
  if (!server_->start_front(
          [this, server](const nlohmann::json& req, AnswerBoard::Clock::time_point arrived)
              -> std::optional<nlohmann::json> {
            const std::string cmd = req.value("cmd", "");
            if (cmd == "capture_status") {
              // The last capture's, as the loop published it; another one's (an older id, or
              // one started since the last publish) is the loop's to answer.
              auto a = board_.answer(cmd, arrived, [server] { server->wake_loop(); });
              if (a && req.contains("id") && a->value("id", nlohmann::json()) != req["id"])
                return std::nullopt;
              return a;
            }
            if (cmd == "job") {
              // A live job's page from the snapshot held for it, when it may answer (the loop
              // decides the rest: a new snapshot, a closed job, a refusal).
              const PageRequest r = parse_page_request(req);
              const auto now = LivePages::Clock::now();
              if (auto pages = live_pages_.usable(r.id, r.snapshot, now))
                return pages->page(r.offset, r.limit, now);
              return std::nullopt;
            }
            return board_.answer(cmd, arrived, [server] { server->wake_loop(); });
          },
          err))
    spdlog::warn("control socket: {}; the loop answers every request", err);
  // The node's name: the metrics' node label, and in captures and Darshan logs.
  node_ = cfg_.metrics.node;
  if (node_.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) node_ = host;
  }
  if (!cfg_.metrics.listen.empty()) {
    metrics_ = MetricsServer::start(cfg_.metrics, err);
    if (!metrics_) {
      spdlog::error("{}", err);
      return false;
    }
    classifier_ = FileClassifier(cfg_.metrics.classes);
    spdlog::info("metrics on {} (port {}){}{}", cfg_.metrics.listen,
                 metrics_->ports().empty() ? 0 : metrics_->ports().front(),
                 cfg_.metrics.username.empty() ? "" : ", basic auth",
                 cfg_.metrics.tls_cert_file.empty() ? "" : ", TLS");
  }

  {
    // Checked with the config (and the command line): here only said, with how it is spent.
    jobs::Limits l = cfg_.limits;
    jobs::MemoryPlan plan;
    if (std::string why = jobs::apply_memory_bound(l, &plan); !why.empty()) {
      spdlog::error("{}", why);
      return false;
    }
    memory_bound_ = plan.bound;
    const std::string spent = fmt::format(
        "the daemon {}, rings {} (mapped twice) and the names they bring {}, writing a record "
        "of {} files {}, {} records {}, names {}",
        core::human_bytes(plan.daemon), core::human_bytes(plan.rings),
        core::human_bytes(plan.ring_names), l.max_files_per_job,
        core::human_bytes(plan.writing), l.max_records, core::human_bytes(plan.records),
        core::human_bytes(plan.names));
    if (plan.implied)
      spdlog::warn("the limits given need {} of memory, more than the default bound of {}: the "
                   "bound is {} ({}); set limits.memory to say so",
                   core::human_bytes(plan.bound), core::human_bytes(jobs::Limits{}.memory),
                   core::human_bytes(plan.bound), spent);
    else
      spdlog::info("memory bound {}: {}", core::human_bytes(plan.bound), spent);
    // Said, as a build without jemalloc (IOLENS_JEMALLOC=OFF) spends more CPU on each record
    // and keeps up with fewer new files a second (docs/daemon.md#memory-allocator).
    spdlog::info("memory allocator: {}", core::heap_allocator());
  }

  loader::Options lo;
  lo.btf_path = opts_.btf_path;
  lo.verbose = opts_.verbose;
  lo.select_jobs = true;
  // No small BTF for CO-RE (loader/core_btf.hpp): it saves ~40 ms of a load, which the daemon
  // does once per start, and a root service should not run bpftool or write /var/cache (its
  // systemd unit makes it read-only).
  lo.core_btf_cache.clear();
  lo.pin_dir = cfg_.pin_dir;
  lo.max_file_records = cfg_.limits.kernel_file_records;
  // One tier, preallocated whole or made on demand (the loader gives two tiers to a run only).
  // Unless the config says, a daemon that resumes pinned state keeps its kind of map (an
  // upgrade must not lose the live jobs), and before Linux 6.1 the map is made on demand:
  // there a preallocated map hands a deleted record's element to the next new one at once,
  // where the on-demand map waited for an RCU grace period (bpf/README.md "Two tiers").
  bool prealloc = cfg_.limits.kernel_file_records_preallocated;
  std::string prealloc_why = "limits.kernel_file_records_preallocated";
  if (!cfg_.limits.given.kernel_file_records_preallocated) {
    const auto kernel = loader::running_kernel();
    if (!kernel) {
      prealloc = false;
      prealloc_why = "the default when the kernel's version is unknown";
    } else if (!kernel->at_least(6, 1)) {
      prealloc = false;
      prealloc_why = "the default before Linux 6.1";
    } else {
      prealloc_why = "the default";
    }
    lo.file_records_follow_pins = true;
  }
  lo.fast_file_records = prealloc ? cfg_.limits.kernel_file_records : 0;
  lo.max_cgroup_exclusions = cfg_.limits.kernel_cgroup_exclusions;
  lo.max_block_records = cfg_.limits.kernel_block_records;
  lo.max_inflight = cfg_.limits.kernel_inflight;
  lo.ring_bytes = cfg_.limits.ring_bytes;
  lo.trace_ring_bytes = cfg_.limits.trace_ring_bytes;
  lo.disabled_programs = cfg_.disabled_programs;
  lo.timing = cfg_.timing == "off" ? IOLENS_TIMING_OFF : IOLENS_TIMING_EXACT;
  Status st;
  loader_ = loader::Loader::create(lo, st);
  if (!loader_) {
    spdlog::error("{}", st.message);
    return false;
  }
  drain_ = std::make_unique<Drain>(*loader_, loader_->timing() == IOLENS_TIMING_OFF);
  captures_ = std::make_unique<CaptureRunner>(*loader_, [this] {
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); });
  });
  const auto& pins = loader_->pin_state();
  if (!pins.discarded.empty())
    spdlog::warn("discarded the kernel state a previous iolensd left in {}: {}", cfg_.pin_dir,
                 pins.discarded);
  if (pins.resumed) spdlog::info("continuing the kernel state left in {}", cfg_.pin_dir);
  spdlog::info("programs: the {} build ({})", loader_->program_build(),
               loader_->program_build_note());
  // A preallocated element: the key, the value, the hash map's own header (~48 bytes) and a
  // 16-byte bucket (what the kernel charges, its memlock: 90.5 MiB for 65,536 with ABI 15's
  // 1,352-byte counters).
  if (loader_->fast_file_records() != (prealloc ? cfg_.limits.kernel_file_records : 0)) {
    prealloc_why = "the kernel state resumed";
    if (loader_->fast_file_records() > 0 && !prealloc)
      spdlog::warn("kept the preallocated file records of the kernel state resumed, where this "
                   "kernel's default is records made on demand (a preallocated map reuses a "
                   "deleted record's element at once before Linux 6.1): set "
                   "limits.kernel_file_records_preallocated to choose");
  }
  if (loader_->fast_file_records() > 0)
    spdlog::info("kernel file records: {} preallocated (~{} of kernel memory; {})",
                 cfg_.limits.kernel_file_records,
                 core::human_bytes(uint64_t{cfg_.limits.kernel_file_records} *
                                   (sizeof(iolens_file_counters) + sizeof(iolens_file_key) + 48 + 16)),
                 prealloc_why);
  else
    spdlog::info("kernel file records: up to {}, made as files are opened ({})",
                 cfg_.limits.kernel_file_records, prealloc_why);

  start_mono_ = clock_ns(CLOCK_MONOTONIC);
  mono_to_wall_ = core::mono_to_wall_now();
  wall_steps_ = core::WallClockSteps(mono_to_wall_);
  if (!setup_runs()) return false;
  new_table();
  resume();
  // The creation count first: a record made during the walk then makes the fill look higher
  // than it is, never lower (Drain::files_untaken).
  const uint64_t created = loader_->file_records_created();
  const int64_t in_map = loader_->map_entries("files");
  drain_->set_baseline(created, static_cast<uint64_t>(in_map > 0 ? in_map : 0));

  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR2}) sigaddset(&mask, s);
  sigfd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  signal(SIGPIPE, SIG_IGN);
  return true;
}

void Daemon::new_table() {
  table_ = std::make_unique<JobTable>(*sel_, cfg_.limits, mono_to_wall_);
  if (metrics_) table_->set_file_classes(cfg_.metrics.classes);
  table_->set_cgroup_resolver([this](uint64_t id) { return resolve_cgroup(id); });
  if (loader_) table_->set_timing(loader_->timing() == IOLENS_TIMING_OFF ? "off" : "exact");
  // Detached (on-demand, no job yet): a process selected before the first attach says so.
  if (loader_ && !loader_->syscall_hooks()) table_->hooks_detached(0);
}

std::optional<std::string> Daemon::resolve_cgroup(uint64_t id) {
  std::optional<std::string> found;
  for (const auto& root : sel_->watch_roots()) {
    if (found) break;
    walk_cgroups(mount_, root, [&](uint64_t cid, const std::string& rel) {
      if (cid == id && !found) found = rel;
    });
  }
  return found;
}

void Daemon::apply(const std::vector<SelectionChange>& changes) {
  for (const auto& c : changes) {
    Status s = c.action ? loader_->select_cgroup(c.cgroup_id, c.action)
                        : loader_->unselect_cgroup(c.cgroup_id);
    if (!s && c.action) selection_failed(c, s);
    else if (!s) spdlog::warn("{}", s.message);
    else if (c.action) selection_stored(c);
    spdlog::debug("cgroup {} ({}): {}", c.path, c.cgroup_id,
                  c.action == IOLENS_CGROUP_TRACE ? "trace" : c.action ? "exclude" : "removed");
    scan_needed_ = true;  // tasks already in it must be (un)marked
  }
}

void Daemon::selection_failed(const SelectionChange& c, const Status& s) {
  if (!sel_pending_.try_emplace(c.cgroup_id, c).second) return;  // counted when it first failed
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  if (c.action == IOLENS_CGROUP_TRACE) {
    ++untraced_cgroups_;
    if (trace_gaps_.size() >= kMaxTraceGaps) trace_gaps_.pop_front();
    trace_gaps_.push_back({c.path, clock_ns(CLOCK_MONOTONIC) + mono_to_wall_, 0});
    spdlog::error("watched root {}: {}; jobs below it run untraced until it can be stored "
                  "(lost.untraced_cgroups)", c.path, s.message);
    return;
  }
  ++unexcluded_cgroups_;
  unexcluded_last_ = c.path + ": " + s.message;
  log_unexcluded(now);
}

void Daemon::log_unexcluded(int64_t now, bool force) {
  // A user who can create cgroups makes as many of these as he likes: one line at most every
  // 10 s, with the count since the last one.
  if (unexcluded_cgroups_ == unexcluded_logged_) return;
  if (!force && unexcluded_log_mono_ != 0 && now - unexcluded_log_mono_ < 10'000'000'000LL)
    return;
  spdlog::warn("{} excluded cgroup(s) without a kernel exclusion ({} in all, {} waiting), the "
               "last {}; their processes are traced until the daemon finds them in no job "
               "(lost.unexcluded_cgroups, unattributed_processes)",
               unexcluded_cgroups_ - unexcluded_logged_, unexcluded_cgroups_, sel_pending_.size(),
               unexcluded_last_);
  unexcluded_logged_ = unexcluded_cgroups_;
  unexcluded_log_mono_ = now;
}

void Daemon::selection_stored(const SelectionChange& c) {
  if (!sel_pending_.erase(c.cgroup_id)) return;
  if (c.action != IOLENS_CGROUP_TRACE) return;
  for (TraceGap& g : trace_gaps_)
    if (g.path == c.path && g.to_wall == 0) g.to_wall = clock_ns(CLOCK_MONOTONIC) + mono_to_wall_;
  spdlog::info("watched root {} is traced again", c.path);
}

bool Daemon::cgroup_root_present() {
  auto is_root = [this](const std::string& path) {
    struct statfs fs {};
    return statfs(path.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC &&
           inode_of(path) == mount_ino_;
  };
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  // Missing: looked for at most every 2 s (it reads the mount table), whoever asks.
  if (cgroup_root_missing_since_ != 0 && now - cgroup_root_looked_ < 2'000'000'000LL) return false;
  cgroup_root_looked_ = now;
  auto back = [&](const char* how) {
    if (cgroup_root_missing_since_ == 0) return;
    spdlog::info("the cgroup filesystem is {} {} after {:.1f} s: jobs are checked against it "
                 "again", how, mount_, static_cast<double>(now - cgroup_root_missing_since_) / 1e9);
    cgroup_root_missing_since_ = 0;
  };
  if (is_root(mount_)) {
    back("back at");
    return true;
  }
  // Mounted again elsewhere (cgroup_root auto), or the configured mount point again.
  if (const auto mountinfo = read_file(opts_.mountinfo_path)) {
    const jobs::RootResult root = jobs::resolve_cgroup_root(cfg_.cgroup_root, *mountinfo);
    if (root.error.empty() && root.path != mount_ && is_root(root.path)) {
      spdlog::warn("the cgroup filesystem moved from {} to {}: paths are taken there from now on",
                   mount_, root.path);
      mount_ = root.path;
      ++cgroup_root_moves_;
      back("mounted at");
      return true;
    }
  }
  if (cgroup_root_missing_since_ == 0) {
    cgroup_root_missing_since_ = now;
    ++cgroup_root_outages_;
    spdlog::warn("the cgroup filesystem is not mounted at {} any more: until it is back, no job "
                 "is closed because its cgroup is not found (the kernel's removal events still "
                 "close them) and selections wait; looked for every 2 s", mount_);
  }
  return false;
}

void Daemon::retry_selection() {
  log_unexcluded(clock_ns(CLOCK_MONOTONIC));  // the failures the last line did not tell
  if (!sel_retry_) return;
  sel_retry_ = false;
  bool excl_full = false;
  for (auto it = sel_pending_.begin(); it != sel_pending_.end();) {
    const SelectionChange c = it->second;
    ++it;  // c may leave sel_pending_ below
    // First: once the map is full, the rest wait without a stat(2) each (an rmdir loop by a
    // user must not cost a pass over every pending cgroup's path at every round).
    if (excl_full && c.action == IOLENS_CGROUP_EXCLUDE) continue;
    // Its removal event may have been dropped: a dead cgroup's entry would hold a slot forever.
    // Not found because the cgroup filesystem is not mounted: it waits.
    const std::string rel = c.path == "/" ? "" : c.path;
    if (inode_of(mount_ + rel) != c.cgroup_id) {
      const std::string mount = mount_;
      if (!cgroup_root_present()) {
        sel_retry_ = true;
        break;
      }
      if (mount_ == mount || inode_of(mount_ + rel) != c.cgroup_id) {  // not just moved
        sel_pending_.erase(c.cgroup_id);
        continue;
      }
    }
    if (Status s = loader_->select_cgroup(c.cgroup_id, c.action); !s) {
      excl_full = excl_full || (s.err == E2BIG && c.action == IOLENS_CGROUP_EXCLUDE);
      continue;
    }
    selection_stored(c);
    scan_needed_ = true;  // tasks already there must be (un)marked
  }
}

uint64_t Daemon::untraced_cgroups_of(const Job& job) const {
  if (job.cgroup_id == 0) return 0;  // a process rule's job: selected by comm, not by cgroup
  const std::string& cg = job.identity.job_cgroup;
  uint64_t n = 0;
  for (const TraceGap& g : trace_gaps_) {
    const bool covers = cg == g.path || g.path == "/" ||
                        (cg.size() > g.path.size() && cg.compare(0, g.path.size(), g.path) == 0 &&
                         cg[g.path.size()] == '/');
    const bool overlaps = (g.to_wall == 0 || g.to_wall > job.start_ns) &&
                          (!job.end_ns || g.from_wall < *job.end_ns);
    if (covers && overlaps) ++n;
  }
  return n;
}

void Daemon::initial_scan() {
  std::vector<SelectionChange> wanted;
  for (const auto& root : sel_->watch_roots()) {
    walk_cgroups(mount_, root, [&](uint64_t id, const std::string& rel) {
      auto changes = table_->on_cgroup(id, rel, false, static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
      apply(changes);
      wanted.insert(wanted.end(), changes.begin(), changes.end());
    });
  }
  // A resumed daemon's maps may hold entries this scan did not ask for: a cgroup removed while
  // no program watched, or a root of an older configuration. They would decide for tasks.
  std::set<uint64_t> keep;
  for (const auto& c : wanted) keep.insert(c.cgroup_id);
  const loader::Loader::SelectionEntries had = loader_->selection_entries();
  std::size_t pruned = 0;
  for (const auto* ids : {&had.traced, &had.excluded})
    for (uint64_t id : *ids)
      if (!keep.count(id) && loader_->unselect_cgroup(id)) ++pruned;
  if (pruned) spdlog::info("removed {} stale cgroup selection entries", pruned);
  for (const auto& comm : sel_->process_comms())
    if (Status s = loader_->select_comm(comm); !s) spdlog::warn("{}", s.message);
  scan_needed_ = true;
}

void Daemon::on_cgroup_event(const core::CgroupEvent& c) {
  if (c.created) {
    if (c.truncated) spdlog::warn("cgroup path longer than {} bytes cut: {}", c.path.size(), c.path);
    apply(table_->on_cgroup(c.id, c.path, true, c.ts_ns));
  } else {
    table_->on_cgroup_removed(c.id, c.ts_ns);
    drain_soon_ = true;
    // Its entry, if it had one, is gone (the kernel's rmdir program): room for a pending one.
    if (auto it = sel_pending_.find(c.id); it != sel_pending_.end()) {
      selection_stored(it->second);  // a root that is gone no longer leaves its jobs untraced
      sel_pending_.erase(c.id);
    }
    sel_retry_ = !sel_pending_.empty();
  }
}

void Daemon::on_mark_event(const core::MarkEvent& m) {
  if (m.reason == IOLENS_MARK_COMM) {
    const auto cmdline = read_file("/proc/" + std::to_string(m.proc.pid) + "/cmdline");
    std::optional<std::string> rule;
    if (cmdline) {
      rule = sel_->match_process(m.comm, *cmdline);
    } else {
      // Gone before its cmdline could be read (it ran for less than the daemon's reaction
      // time): judged by its comm alone, the part the kernel matched, and logged.
      for (const auto& r : sel_->rules())
        if (r.kind == jobs::RuleKind::Process && r.comm == m.comm) {
          rule = r.name;
          break;
        }
      spdlog::info("process {} ({}) exited before its cmdline was read: rule {} by comm alone",
                   m.proc.pid, m.comm, rule.value_or("?"));
    }
    if (rule) {
      table_->add_process_job(m, *rule);
    } else {
      loader_->untrace_process(static_cast<pid_t>(m.proc.pid));
    }
    return;
  }
  if (!table_->on_mark(m)) {
    loader_->untrace_process(static_cast<pid_t>(m.proc.pid));
    return;
  }
  // A whole thread group moved: only its leader was marked; the iterator marks the others.
  if (m.reason == IOLENS_MARK_ATTACH && m.threads > 1) scan_needed_ = true;
}

void Daemon::on_record(std::span<const uint8_t> bytes) {
  state_dirty_ = true;
  core::DecodeResult r = core::decode_event(bytes);
  if (!r.ok) {
    ++decode_errors_;
    return;
  }
  if (r.job) {
    if (const auto* c = std::get_if<core::CgroupEvent>(&*r.job)) on_cgroup_event(*c);
    if (const auto* m = std::get_if<core::MarkEvent>(&*r.job)) on_mark_event(*m);
    return;
  }
  table_->on_event(r.event);
}

void Daemon::note_new_jobs() {
  for (const auto& [id, job] : table_->jobs()) {
    if (job_loss_base_.count(id)) continue;
    job_loss_base_[id] = loader_->stats();
    job_decode_base_[id] = decode_errors_;
    // Optional enrichment: the pod's namespace and name, from the kubelet's log directory.
    auto& labels = job->identity.labels;
    if (job->identity.kind == "kubernetes" && labels.count("pod_uid") && !labels.count("pod")) {
      if (auto nn = jobs::pod_name_from_log_dir(opts_.pod_log_dir, labels["pod_uid"])) {
        labels["namespace"] = nn->first;
        labels["pod"] = nn->second;
      }
    }
    spdlog::info("job {} ({}) opened: cgroup {}", id, job->identity.kind, job->identity.job_cgroup);
  }
}

void Daemon::learn_uids() {
  if (!cfg_.darshan_logs) return;
  for (const auto& [id, job] : table_->jobs()) {
    if (job->uid >= 0 || job->live.empty()) continue;
    // The earliest started first: rank 0 when it is still alive.
    std::vector<core::ProcKey> live(job->live.begin(), job->live.end());
    std::sort(live.begin(), live.end(), [](const core::ProcKey& a, const core::ProcKey& b) {
      return std::tie(a.start_ns, a.pid) < std::tie(b.start_ns, b.pid);
    });
    for (const core::ProcKey& p : live) {
      const auto status = read_file("/proc/" + std::to_string(p.pid) + "/status");
      if (!status) continue;  // exited, its exit not read yet
      if (const auto uid = control::real_uid_from_proc_status(*status)) {
        job->uid = *uid;
        state_dirty_ = true;
        break;
      }
    }
  }
}

core::DaemonHealth Daemon::health() {
  core::DaemonHealth h;
  h.version = IOLENS_VERSION;
  h.abi_version = IOLENS_ABI_VERSION;
  const loader::KernelStats st = loader_->stats();
  const nlohmann::json kernel = kernel_losses(st);
  for (auto it = kernel.begin(); it != kernel.end(); ++it)
    if (it.key() != "paths_truncated") h.lost[it.key()] = it.value().get<uint64_t>();
  const TableStats& ts = table_->stats();
  h.lost["decode_errors"] = decode_errors_;
  h.lost["unattributed"] = unattributed_losses(st);
  h.lost["unattributed_records"] = ts.unattributed_records;
  h.lost["untraced_cgroups"] = untraced_cgroups_;
  h.lost["unexcluded_cgroups"] = unexcluded_cgroups_;
  // Captures' losses (node-wide, not a job's counters): records the trace ring had no room for,
  // and children trace mode PIDS could not follow.
  h.lost["trace_records"] = st[IOLENS_STAT_TRACE_LOST];
  h.lost["trace_pids"] = st[IOLENS_STAT_TRACE_PIDS_LOST];
  h.paths_truncated = st[IOLENS_STAT_PATHS_TRUNCATED];
  // The files map's fill from the kernel's own creation count; the selection maps are small
  // enough to count.
  h.maps.push_back(
      {"files", static_cast<int64_t>(drain_->files_in_map(st[IOLENS_STAT_FILE_RECORDS_CREATED])),
       loader_->max_file_records()});
  const loader::Loader::SelectionEntries sel = loader_->selection_entries();
  h.maps.push_back({"cgroup_sel", static_cast<int64_t>(sel.traced.size()), IOLENS_CGROUP_TRACE_MAX});
  h.maps.push_back({"cgroup_excl", static_cast<int64_t>(sel.excluded.size()),
                    loader_->max_cgroup_exclusions()});
  h.maps.push_back({"proc_lost", static_cast<int64_t>(proc_lost_entries_), IOLENS_PROC_LOST_MAX});
  h.drain = drain_hist_;
  for (const auto& p : loader_->programs())
    h.programs.push_back({p.name, p.attached, !p.attached && !p.error.empty()});
  h.syscall_hooks_attached = loader_->syscall_hooks();
  h.timing_exact = loader_->timing() == IOLENS_TIMING_EXACT;
  for (const auto& [id, job] : table_->jobs()) {
    if (job->state == JobState::Live) ++h.jobs_live;
    if (job->state == JobState::Closing) ++h.jobs_closing;
  }
  h.jobs_closed_total = ts.jobs_closed;
  h.file_records = table_->file_records();
  h.records_folded_total = ts.folded_records;
  h.processes_folded_total = ts.folded_processes;
  h.unattributed_processes = ts.unattributed_processes;
  h.records_written = writer_->written();
  h.records_failed = writer_->failed();
  h.darshan_logs_written = writer_->darshan_written();
  h.darshan_logs_failed = writer_->darshan_failed();
  h.records_unidentified = writer_->unidentified();
  h.state_saves = checkpoints_;
  h.state_save_failures = checkpoint_failures_;
  h.state_marker_failures = marker_failures_;
  h.memory_bound_bytes = memory_bound_;
  h.resident_bytes = resident_bytes();
  h.jobs_before_hooks = table_->jobs_unhooked();
  h.wall_clock_steps = wall_steps_.steps();
  h.cgroup_filesystem_mounted = cgroup_root_missing_since_ == 0;
  h.snapshot_duration_s = last_snapshot_s_;
  return h;
}

void Daemon::retain_metrics(const Job& job) {
  retained_.push_back({job_metrics(job, classifier_, cfg_.metrics.top_files,
                                   table_->alignment_table()),
                       clock_ns(CLOCK_MONOTONIC) + static_cast<int64_t>(cfg_.grace_s) * 1000000000LL});
  // No page shows more than max_jobs jobs: ended ones past that many are never shown, and
  // thousands of short jobs within a grace period held ~8 KiB each (bench/README.md
  // "Thousands of short jobs"). The earliest ended go first.
  while (retained_.size() > cfg_.metrics.max_jobs) {
    retained_.pop_front();
    ++retained_evicted_;
  }
}

/// A new snapshot for the scrapes: every job of the table, and the ended ones in their grace
/// period (docs/metrics.md). Built after each drain, so a scrape never waits for the loop.
void Daemon::publish_metrics(bool force) {
  if (!metrics_) return;
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  // A drain under pressure comes every few ms; the snapshot walks every record, and scrapes
  // come every few seconds: at most one a second is enough.
  if (!force && last_publish_mono_ >= 0 && t0 - last_publish_mono_ < kPublishEvery) return;
  last_publish_mono_ = t0;
  std::erase_if(retained_, [&](const Retained& r) { return r.until_mono <= t0; });
  auto s = std::make_shared<core::MetricsSnapshot>();
  s->node = node_;
  // Darshan's mount table as the record writer's thread read it last (never read here), for
  // the jobs' file_not_aligned
  table_->set_alignment_table(records_->alignment());
  uint64_t dropped = 0;
  const std::size_t max = cfg_.metrics.max_jobs;
  for (const auto& [id, job] : table_->jobs()) {
    if (s->jobs.size() >= max) {
      ++dropped;
      continue;
    }
    s->jobs.push_back(
        job_metrics(*job, classifier_, cfg_.metrics.top_files, table_->alignment_table()));
  }
  for (const Retained& r : retained_) {
    if (table_->find(r.metrics.id)) continue;  // the id is live again: the live job's series
    if (s->jobs.size() >= max) {
      ++dropped;
      continue;
    }
    s->jobs.push_back(r.metrics);
  }
  std::sort(s->jobs.begin(), s->jobs.end(),
            [](const core::JobMetrics& a, const core::JobMetrics& b) { return a.id < b.id; });
  s->daemon = health();
  s->daemon.jobs_dropped = dropped;
  s->daemon.ended_jobs_evicted = retained_evicted_;
  last_snapshot_s_ = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - t0) / 1e9;
  s->daemon.snapshot_duration_s = last_snapshot_s_;
  metrics_->publish(std::move(s));
}

void Daemon::hooks_policy() {
  const int64_t now = clock_ns(CLOCK_MONOTONIC);
  const bool always = opts_.syscall_hooks == "always";
  const bool active = table_->active_jobs() > 0;
  if (active) last_active_ = now;
  const bool attached = loader_->syscall_hooks();
  if ((always || active) && !attached) {
    if (Status s = loader_->set_syscall_hooks(true); !s) {
      spdlog::error("{}", s.message);
      return;
    }
    hooks_since_mono_ = now;
    table_->hooks_attached(static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC)));
    state_dirty_ = true;  // the saved state keeps when they were detached
    ++hooks_attach_count_;
    spdlog::info("syscall hooks attached ({} live job(s))", table_->active_jobs());
  } else if (attached && !always && !active &&
             now - last_active_ > static_cast<int64_t>(opts_.hooks_idle_s) * 1000000000LL) {
    table_->hooks_detached(static_cast<uint64_t>(now));
    state_dirty_ = true;
    loader_->set_syscall_hooks(false);
    hooks_since_mono_ = -1;
    spdlog::info("syscall hooks detached (no live job for {} s)", opts_.hooks_idle_s);
  }
}

void Daemon::stop_clean() {
  log_unexcluded(clock_ns(CLOCK_MONOTONIC), true);
  captures_->end_for_stop(*table_);
  // Runs end with the daemon: their cgroups go, their jobs are written below as closed ones
  // (their clients' run_end then fails and says so).
  for (auto& [id, run] : runs_) close_run_cgroup(run);
  runs_.clear();
  drain();
  drain();  // the first pass may have learnt of exits; the second moves their records out
  write_closed();
  release_held(true);  // the stop writes every closed job; the state goes below
  // Live jobs: what is held so far, marked as cut short by the stop.
  std::vector<std::string> live;
  for (const auto& [id, job] : table_->jobs()) live.push_back(id);
  for (const std::string& id : live) {
    const Job& job = *table_->find(id);
    nlohmann::json overrides;
    job_losses(id, overrides);
    overrides["lost"]["untraced_cgroups"] = untraced_cgroups_of(job);
    annotate_restart(job, overrides);
    annotate_hooks(job, overrides);
    annotate_clock(job, overrides);
    submit_record(id, std::move(overrides), true);
  }
  records_->wait_idle();
  collect_written(false);  // no save: the state goes below
  finish_save();  // the saver's rename must not bring it back after the unlink
  loader_->unpin_all();
  unlinkat(state_dir_fd_, kStateName, 0);  // it described kernel state that is gone now
  if (run_cg_) {
    const std::string root = mount_ + run_cg_->rel();
    run_cg_.reset();
    rmdir(root.c_str());  // only when empty: another daemon's runs or orphans keep it
  }
}

int Daemon::run() {
  if (!setup()) return 1;
  initial_scan();
  if (restart_.value("resumed", false)) {
    relearn_processes();
    for (const auto& [id, job] : table_->jobs()) found_at_start_.insert(id);
    // The saved state leaves the live records' counts to the kernel's map (checkpoint()): they
    // are read before anything is answered or published, or a job's totals (and its Prometheus
    // counters) would go down after a restart and back up at the first drain.
    drain(false);
  }
  // The start-up's big buffers (the kernel's BTF read twice, the programs, the first scans)
  // are freed by now: given back, or jemalloc keeps them for its decay time (~13 MiB of RSS
  // more at the start than on glibc's malloc, which unmaps big blocks as they are freed).
  core::heap_release();
  publish_metrics(true);
  publish_answers(Publish::all);  // from now on the front thread answers `status` and `jobs`
  spdlog::info("iolensd {} started: cgroup root {}, watching {}, {} job(s) found", IOLENS_VERSION,
               mount_, fmt::join(sel_->watch_roots(), ", "), table_->jobs().size());
  const int64_t interval = static_cast<int64_t>(cfg_.drain_interval_ms) * 1000000LL;
  last_drain_ = clock_ns(CLOCK_MONOTONIC);
  for (;;) {
    follow_wall_clock();
    if (scan_needed_) {
      scan_needed_ = false;
      // The hooks first, if a job is live: a task the scan marks is then counted from its mark
      // (marked while they are detached, its job would say calls may be missing: before_hooks).
      hooks_policy();
      if (Status s = loader_->scan_tasks(); !s) spdlog::warn("{}", s.message);
    }
    // The ring and the names to clear, together for at most half a drain piece's time (a burst
    // of new files makes tens of thousands of name events, and its folds as many names to
    // clear); the piece below has its whole time, so that the map is drained as fast as before.
    // A pass of the loop is then at most about two pieces: answers wait at most that long.
    const int64_t piece = static_cast<int64_t>(cfg_.drain_piece_ms) * 1000000LL;
    const int64_t events_until = clock_ns(CLOCK_MONOTONIC) + piece / 2;
    loader_->consume_events([this](std::span<const uint8_t> b) { on_record(b); }, events_until);
    clear_names(events_until);
    collect_saved();
    // A save that does not end (a state directory on a mount whose server does not answer)
    // must not keep records from being written: after kHeldSaveWait they go without it.
    if (!held_.empty() && save_under_way_ &&
        clock_ns(CLOCK_MONOTONIC) - save_under_way_->gathered_mono >= kHeldSaveWait) {
      if (held_released_unsaved_++ == 0)
        spdlog::warn("a state save has been under way for {} s: closed jobs are written without "
                     "waiting for it", kHeldSaveWait / 1000000000);
      release_held(true);
    }
    // No live record is taken until a save holds their counts: one that was due while another
    // save was under way is started as soon as that one is done, not at the next round's end.
    if ((live_save_due_ || !held_.empty()) && !save_under_way_ &&
        clock_ns(CLOCK_MONOTONIC) - last_save_failed_mono_ >= kSaveRetryEvery)
      checkpoint(true);
    reconcile();
    retry_selection();
    captures_->service(*table_, clock_ns(CLOCK_MONOTONIC));
    service_runs();
    note_new_jobs();
    learn_uids();
    collect_written();
    hooks_policy();
    const int64_t now = clock_ns(CLOCK_MONOTONIC);
    const uint64_t in_map = drain_->files_untaken(loader_->file_records_created());
    // A round under way goes on; a new one when asked, each interval, or under pressure (the
    // map over half full; a drain of it still due under half waits for the interval). Not
    // while the save that must hold the live counts before any is taken is being written: such
    // a round could take nothing, and would read the whole map again and again until the save
    // was done.
    const bool pressure =
        in_map * 2 > loader_->max_file_records() && !waiting_for_live_save();
    if (drain_->round_open() || drain_soon_ || now - last_drain_ >= interval || pressure) {
      if (!drain_->round_open()) drain_soon_ = false;  // asked during a round: the next sees it
      if (drain_piece(now + piece, true)) {
        if (last_drain_complete_) write_closed();
        if (!held_.empty() && !save_under_way_ &&  // what they wait for
            clock_ns(CLOCK_MONOTONIC) - last_save_failed_mono_ >= kSaveRetryEvery)
          checkpoint(true);
        publish_metrics();
        // What the front thread answers during a long piece of work is then at most about a
        // second older than that piece (docs/control.md#answer-times).
        publish_answers(Publish::wanted_or_due);
      }
    }
    drop_pages("");  // a live job's snapshot nobody pages any more
    // The trace ring wakes us once half full (and is drained every round anyway).
    const bool capturing = captures_->window_open();
    std::vector<pollfd> fds = {{loader_->events_fd(), POLLIN, 0}, {server_->fd(), POLLIN, 0},
                               {sigfd_, POLLIN, 0},
                               {capturing ? loader_->trace_fd() : -1, POLLIN, 0}};
    // A run's client that dies wakes us: its run ends at once (service_runs).
    for (const auto& [id, run] : runs_)
      if (run.alive.get() >= 0) fds.push_back({run.alive.get(), POLLIN, 0});
    // Short naps while the map fills fast; otherwise the ring wakes us for what matters.
    // A round under way: no nap, only what is pending is answered before its next piece.
    // Events left in the ring by a deadline, or names to clear: no nap (most events do not wake
    // the reader; those that arrive meanwhile wait for the timer, as before).
    const bool behind = !names_to_clear_.empty() || loader_->events_cut_short();
    const int timeout = drain_->round_open() || behind                        ? 0
                        : in_map * 4 > loader_->max_file_records() ? 2
                        : capturing                                  ? 50
                                                                     : 100;
    const int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      break;
    }
    if (fds[1].revents & POLLIN) {
      server_->serve_pending([this](const nlohmann::json& req, control::RequestContext& ctx) {
        return handle(req, ctx);
      });
    }
    // Answers the front thread waits for (control::kFreshAnswerWait at most).
    publish_answers(Publish::wanted);
    if (fds[2].revents & POLLIN) {
      signalfd_siginfo si{};
      if (read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        if (si.ssi_signo == SIGHUP) {
          spdlog::info("SIGHUP: nothing to reload; restart iolensd to apply a new config");
          continue;
        }
        if (si.ssi_signo == SIGUSR2) {
          // Hand-over (an upgrade): save everything, leave the programs counting for the next
          // daemon, which continues the same jobs.
          spdlog::info("SIGUSR2: saving state and leaving the kernel programs to the next iolensd");
          log_unexcluded(clock_ns(CLOCK_MONOTONIC), true);
          captures_->end_for_stop(*table_);  // a capture does not survive the hand-over
          drain();
          clear_names(0);
          release_held(true);
          records_->wait_idle();  // the next daemon would write them a second time
          collect_written(false);
          finish_save();
          state_dirty_ = true;
          checkpoint(true);
          finish_save();  // on disk before the next daemon reads it
          return 0;
        }
        spdlog::info("signal {}: stopping", strsignal(static_cast<int>(si.ssi_signo)));
        stop_clean();
        return 0;
      }
    }
  }
  stop_clean();
  return 1;
}

int run_daemon(const DaemonOptions& opts) {
  Daemon d(opts);
  return d.run();
}

}  // namespace iolens::daemon
