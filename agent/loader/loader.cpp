// SPDX-License-Identifier: Apache-2.0
#include "loader/loader.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/clock.hpp"
#include "core/counters.hpp"
#include "iolens_bpf.skel.h"
#include "iolens_bpf_casts.skel.h"
#include "loader/core_btf.hpp"
#include "loader/phase_times.hpp"
#include "loader/preflight.hpp"

namespace iolens::loader {
namespace {

using core::clock_ns;

bool g_verbose = false;
// While the object loads: the first program libbpf names in a warning ("prog 'NAME': ..."),
// so that an optional program that fails to load can be left out and the rest loaded again.
std::string* g_failed_prog = nullptr;
std::string* g_failed_line = nullptr;
// libbpf's warnings while the object loads, held back: when an optional program is what failed,
// one line says so and the verifier's log goes to the debug log; otherwise they are all shown.
std::vector<std::string>* g_load_warnings = nullptr;

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG && !g_verbose) return 0;
  // Most messages are short; a verifier log (IOLENS_VERIFIER_LOG) comes as one message of
  // megabytes, formatted again at its length.
  char buf[2048];
  va_list again;
  va_copy(again, args);
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  std::string line;
  if (n >= static_cast<int>(sizeof(buf))) {
    line.resize(static_cast<std::size_t>(n) + 1);
    vsnprintf(line.data(), line.size(), fmt, again);
    line.resize(static_cast<std::size_t>(n));
  } else {
    line = n > 0 ? buf : "";
  }
  va_end(again);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (level == LIBBPF_WARN && g_failed_prog && g_failed_prog->empty()) {
    const auto at = line.find("prog '");
    const auto end = at == std::string::npos ? at : line.find('\'', at + 6);
    if (end != std::string::npos) {
      *g_failed_prog = line.substr(at + 6, end - at - 6);
      if (g_failed_line) *g_failed_line = line;
    }
  }
  if (level == LIBBPF_WARN && g_load_warnings)
    g_load_warnings->push_back(line);
  else
    // One log line per line: the log escapes newlines (verifier logs are many lines).
    for (std::size_t at = 0; at <= line.size();) {
      std::size_t end = line.find('\n', at);
      if (end == std::string::npos) end = line.size();
      if (level == LIBBPF_WARN)
        spdlog::warn("libbpf: {}", line.substr(at, end - at));
      else
        spdlog::debug("libbpf: {}", line.substr(at, end - at));
      at = end + 1;
    }
  return n;
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

/// One line per map and program of an object's ELF `bytes` (opened, not loaded): what the
/// shared skeleton assumes of both builds beyond the layout the build checks.
Status describe_object(std::span<const unsigned char> bytes, std::vector<std::string>& out) {
  // One object name for both: libbpf names the internal maps (.rodata...) after it.
  LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "iolens_bpf");
  bpf_object* obj = bpf_object__open_mem(bytes.data(), bytes.size(), &opts);
  if (!obj) return Status::Error("cannot open a build's object: " + errno_text(errno), errno);
  bpf_map* m = nullptr;
  bpf_object__for_each_map(m, obj) {
    out.push_back(std::string("map ") + bpf_map__name(m) + " type " +
                  std::to_string(bpf_map__type(m)) + " key " +
                  std::to_string(bpf_map__key_size(m)) + " value " +
                  std::to_string(bpf_map__value_size(m)) + " entries " +
                  std::to_string(bpf_map__max_entries(m)) + " flags " +
                  std::to_string(bpf_map__map_flags(m)));
  }
  bpf_program* p = nullptr;
  bpf_object__for_each_program(p, obj) {
    out.push_back(std::string("program ") + bpf_program__name(p) + " type " +
                  std::to_string(bpf_program__type(p)) + " attach " +
                  std::to_string(bpf_program__expected_attach_type(p)) + " section " +
                  bpf_program__section_name(p));
  }
  bpf_object__close(obj);
  return Status::Ok();
}

/// iolens_bpf__open_opts() with the bytes of either build: the two have one layout (maps,
/// programs, variables; bpf/CMakeLists.txt checks it at build time), so the skeleton of one
/// opens the other.
iolens_bpf* open_build(const bpf_object_open_opts* opts, std::span<const unsigned char> elf) {
  auto* obj = static_cast<iolens_bpf*>(calloc(1, sizeof(iolens_bpf)));
  if (!obj) {
    errno = ENOMEM;
    return nullptr;
  }
  int err = iolens_bpf__create_skeleton(obj);
  if (!err) {
    obj->skeleton->data = const_cast<unsigned char*>(elf.data());
    obj->skeleton->data_sz = elf.size();
    err = bpf_object__open_skeleton(obj->skeleton, opts);
  }
  if (err) {
    iolens_bpf__destroy(obj);
    errno = -err;
    return nullptr;
  }
  return obj;
}

/// What consume_events() hands the ring's callback for the duration of a call.
struct EventConsumer {
  const Loader::EventSink* sink = nullptr;
  int64_t deadline_ns = 0;  // CLOCK_MONOTONIC; 0: none
  int records = 0;
};

// Stops at the deadline (looked at every 64 records) by failing after a record: libbpf has
// then stored the consumer position past it and returns, and the rest waits in the ring.
constexpr int kConsumeDeadline = -EAGAIN;

// ctx points at Impl::consumer.
int ring_callback(void* ctx, void* data, size_t size) {
  auto* c = static_cast<EventConsumer*>(ctx);
  if (!c->sink) return 0;
  (*c->sink)(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size));
  ++c->records;
  if (c->deadline_ns != 0 && c->records % 64 == 0 && clock_ns(CLOCK_MONOTONIC) >= c->deadline_ns)
    return kConsumeDeadline;
  return 0;
}

// ctx points at Impl::current_trace_sink, which consume_trace() sets for the duration of a call.
int trace_callback(void* ctx, void* data, size_t size) {
  auto* const* sink = static_cast<const Loader::TraceSink* const*>(ctx);
  if (!*sink || size < sizeof(iolens_trace_record)) return 0;
  iolens_trace_record rec;
  std::memcpy(&rec, data, sizeof(rec));
  (**sink)(rec);
  return 0;
}

/// libbpf's consumer of one ring map; nullptr with `status` set if it cannot be made.
ring_buffer* new_consumer(bpf_map* map, ring_buffer_sample_fn fn, void* ctx, const char* what,
                          Status& status) {
  ring_buffer* rb = ring_buffer__new(bpf_map__fd(map), fn, ctx, nullptr);
  if (!rb) {
    const int e = errno;
    status = Status::Error(std::string("cannot set up the ") + what + ": " + errno_text(e), e);
  }
  return rb;
}

/// A BPF ring buffer's size: the kernel takes only a power of two that is a multiple of the page.
Status check_ring_size(const char* what, uint64_t bytes) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes >= page && (bytes & (bytes - 1)) == 0) return Status::Ok();
  return Status::Error(std::string(what) + " must be a power of two of at least the page size (" +
                           std::to_string(page) + " bytes), not " + std::to_string(bytes),
                       EINVAL);
}

/// The name a map is pinned under: its own, but bpffs refuses dots in names (reserved), which
/// internal maps have (".data.trace" is pinned as "data_trace").
std::string pin_name(const bpf_map* m) {
  std::string name = bpf_map__name(m);
  while (!name.empty() && name.front() == '.') name.erase(0, 1);
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

/// The kernel's description of the map pinned for `m` under `pin_dir`, if it is there.
std::optional<bpf_map_info> pinned_map_info(const std::string& pin_dir, const bpf_map* m) {
  const int fd = bpf_obj_get((pin_dir + "/" + pin_name(m)).c_str());
  if (fd < 0) return std::nullopt;
  bpf_map_info info{};
  __u32 len = sizeof(info);
  const bool ok = bpf_obj_get_info_by_fd(fd, &info, &len) == 0;
  close(fd);
  if (!ok) return std::nullopt;
  return info;
}

constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";
constexpr int kErrNotSupp = 524;  // the kernel's ENOTSUPP, not in user-space errno.h
constexpr long kBpfFsMagic = 0xcafe4a11;

/// When a program is attached: always, in daemon mode only, on demand (syscall hooks), or
/// where the kernel allows (Extra: every program not named in Loader::create's list; one that
/// cannot load or attach is reported and left out, the rest run).
enum class Group { Lifecycle, Jobs, Syscalls, Extra };

/// The programs iolens cannot run without; every other program of the object is an extra.
const std::set<std::string> kCorePrograms = {
    "sched_process_fork", "sched_process_exec", "sched_process_exit", "cgroup_mkdir",
    "cgroup_rmdir",       "cgroup_attach_task", "sys_enter",          "sys_exit",
    "close_enter",        "scan_tasks",         "forget_names"};

/// The tracepoint a tp_btf program attaches to, or "" for other programs.
std::string btf_tracepoint(const bpf_program* prog) {
  const std::string sec = bpf_program__section_name(prog);
  const std::string prefix = "tp_btf/";
  return sec.rfind(prefix, 0) == 0 ? sec.substr(prefix.size()) : "";
}


/// close_enter, a classic tracepoint program (timing off), attaches through tracefs, which
/// nodes often do not mount at boot. libbpf looks in debugfs's copy when debugfs is mounted,
/// else in /sys/kernel/tracing, where this mounts tracefs if nothing is there; then the
/// tracepoint must exist (a kernel without CONFIG_FTRACE_SYSCALLS has no syscalls events).
Status ensure_tracefs() {
  const bool debugfs = access("/sys/kernel/debug/tracing", F_OK) == 0;
  const std::string root = debugfs ? "/sys/kernel/debug/tracing" : "/sys/kernel/tracing";
  if (!debugfs && access((root + "/events").c_str(), F_OK) != 0 &&
      mount("nodev", root.c_str(), "tracefs", 0, nullptr) != 0) {
    const int e = errno;
    return Status::Error("cannot mount tracefs at " + root + ": " + errno_text(e), e);
  }
  const std::string id = root + "/events/syscalls/sys_enter_close/id";
  if (access(id.c_str(), R_OK) != 0) {
    const int e = errno;
    return Status::Error("no tracepoint syscalls:sys_enter_close (" + id + ": " + errno_text(e) +
                             "; a kernel without CONFIG_FTRACE_SYSCALLS?)",
                         e);
  }
  return Status::Ok();
}

/// Makes `dir` a directory on a bpffs, mounting bpffs at /sys/fs/bpf if nothing is there yet
/// (systemd mounts it at boot; minimal hosts and containers may not).
Status ensure_bpffs_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  struct statfs sfs {};
  if (statfs("/sys/fs/bpf", &sfs) == 0 && sfs.f_type != kBpfFsMagic &&
      dir.rfind("/sys/fs/bpf/", 0) == 0) {
    if (mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0) {
      const int e = errno;
      return Status::Error("cannot mount bpffs at /sys/fs/bpf: " + errno_text(e), e);
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create pin directory " + dir + ": " + ec.message());
  if (statfs(dir.c_str(), &sfs) != 0 || sfs.f_type != kBpfFsMagic)
    return Status::Error("pin directory " + dir + " is not on a bpf filesystem (mount -t bpf)");
  return Status::Ok();
}

/// While it lives, large allocations come from a heap range marked MADV_HUGEPAGE. libbpf reads
/// the kernel's BTF (5-6 MB) into two heap buffers at each load; faulting them in 4 KiB at a time
/// cost ~100 ms of start-up on a VM where a page fault takes 10-30 us (bench/README.md), a few
/// 2 MiB faults take ~10 ms. Without transparent huge pages (THP "never") nothing changes.
/// For `iolens run` only (a short-lived process): it leaves glibc's thresholds fixed, and the
/// daemon, which loads once, keeps glibc's own dynamic ones.
class HugePageHeap {
 public:
  /// `btf_bytes`: the size of the kernel's BTF.
  explicit HugePageHeap(std::size_t btf_bytes) {
    const std::size_t huge = 2u << 20;
    const std::size_t bytes = std::max<std::size_t>(3 * btf_bytes, 16u << 20);
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes + huge));  // from the heap, not mmap
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * bytes + huge));  // kept when freed
    void* p = malloc(bytes);  // grows the heap; freed at once, the range stays in the heap
    if (!p) return;
    const auto begin = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
    const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(huge - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
    free(p);
  }
  ~HugePageHeap() {
    // Where glibc's dynamic thresholds end up (a freed mmapped chunk raises them, to at most
    // 32 MiB and twice that): the run's later large buffers (drains, the report) reuse the
    // heap's pages instead of faulting in fresh ones.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
  }
  HugePageHeap(const HugePageHeap&) = delete;
  HugePageHeap& operator=(const HugePageHeap&) = delete;
};

/// The size of the kernel's BTF (0 if unknown).
std::size_t vmlinux_btf_bytes() {
  struct stat st {};
  return stat(kVmlinuxBtf, &st) == 0 ? static_cast<std::size_t>(st.st_size) : 0;
}

void remove_pins(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code ec2;
    std::filesystem::remove(e.path(), ec2);
  }
}

/// A slot the kernel's copy fills: default construction leaves it uninitialised, so that growing
/// a buffer of 1,352-byte records does not first zero what the copy overwrites.
template <typename T>
struct Uninit {
  T v;
  Uninit() {}  // NOLINT(modernize-use-equals-default): no initialisation, on purpose
};
static_assert(sizeof(Uninit<iolens_file_counters>) == sizeof(iolens_file_counters),
              "the batch copy writes an array of values");

}  // namespace

struct Loader::Impl {
  iolens_bpf* skel = nullptr;
  ring_buffer* ring = nullptr;
  EventConsumer consumer;
  bool events_cut_short = false;  // the last consume_events() stopped at its deadline
  ring_buffer* trace_ring = nullptr;
  const TraceSink* current_trace_sink = nullptr;
  struct Prog {
    const char* name;
    bpf_program* prog;
    bpf_link** link;
    Group group;
  };
  std::vector<Prog> progs;
  std::deque<bpf_link*> extra_links;  // links of the Extra programs (the skeleton's are its own)
  // The ring's position pages, mapped by us (libbpf keeps its own mapping private).
  void* consumer_page = nullptr;
  void* producer_page = nullptr;
  uint64_t* ring_consumer = nullptr;
  const uint64_t* ring_producer = nullptr;
  int pin_lock = -1;
  // One batch of a drain (Loader::drain), kept from one drain to the next.
  std::vector<iolens_file_key> drain_keys;
  std::vector<Uninit<iolens_file_counters>> drain_values;
  // Side entries of file records (`tallies_more`, bpf/iolens.bpf.c), as the files drain read
  // them when it began: what a live record's snapshot takes.
  using KeySet = std::unordered_set<iolens_file_key, core::FileKeyHash, core::FileKeyEq>;
  std::unordered_map<iolens_file_key, iolens_more_tallies, core::FileKeyHash, core::FileKeyEq>
      sides;
  KeySet sides_matched;   // side keys a walk found a record for, since the walk began
  KeySet sides_deferred;  // side entries of final records whose deletion the caller deferred
  std::vector<iolens_file_key> side_keys;  // read_sides' buffers
  std::vector<iolens_more_tallies> side_values;
  core::FileCounters wide{};  // a record with its side slots, as handed to a sink
  bool wide_has_more = false;
  /// `record` with `more`'s slots (or none) in `wide`: the record is copied (1,352 bytes), the
  /// side slots only when some were there.
  const core::FileCounters& widen(const iolens_file_counters& record,
                                  const iolens_more_tallies* more) {
    static_cast<iolens_file_counters&>(wide) = record;
    if (more) {
      wide.more = *more;
      wide_has_more = true;
    } else if (wide_has_more) {
      wide.more = {};
      wide_has_more = false;
    }
    return wide;
  }
  ~Impl() {
    for (bpf_link* l : extra_links)
      if (l) bpf_link__destroy(l);
    if (pin_lock >= 0) close(pin_lock);
    const long page = sysconf(_SC_PAGESIZE);
    if (consumer_page) munmap(consumer_page, static_cast<size_t>(page));
    if (producer_page) munmap(producer_page, static_cast<size_t>(page));
    if (ring) ring_buffer__free(ring);
    if (trace_ring) ring_buffer__free(trace_ring);
    if (skel) iolens_bpf__destroy(skel);
  }
  /// libbpf maps a ring's data pages twice (for records that wrap), and all of them at once:
  /// a mapped ring counts twice its size in the daemon's RSS. The trace ring is used only while
  /// a trace runs, so it is mapped then (its kernel memory stays allocated, and its positions
  /// with it: records left unread are still there when it is mapped again).
  Status map_trace_ring() {
    if (trace_ring) return Status::Ok();
    Status status;
    trace_ring = new_consumer(skel->maps.trace, trace_callback, &current_trace_sink,
                              "trace ring buffer", status);
    return trace_ring ? Status::Ok() : status;
  }
  Prog* find(const std::string& name) {
    for (auto& p : progs)
      if (name == p.name) return &p;
    return nullptr;
  }
  /// Maps that carry state from one agent to the next (pinned in daemon mode). The trace maps
  /// are among them although a restarted agent starts with tracing off: the syscall programs
  /// it resumes read the previous agent's trace mode and write to its trace ring, so these must
  /// be the ones this agent controls and drains.
  std::vector<bpf_map*> persistent_maps() const {
    auto& m = skel->maps;
    return {m.task_state, m.files,        m.others,     m.seen_files, m.cgroup_sel, m.cgroup_excl,
            m.comm_sel,   m.events,       m.stats,      m.meta,       m.trace,
            m.trace_cgroup, m.trace_pids, m.data_trace, m.blocks,     m.proc_lost,
            m.tallies_more};
  }
};

Status program_builds_alike() {
  std::size_t n = 0;
  const void* plain = iolens_bpf__elf_bytes(&n);
  std::vector<std::string> a, b;
  if (Status s = describe_object({static_cast<const unsigned char*>(plain), n}, a); !s) return s;
  const void* casts = iolens_bpf_casts__elf_bytes(&n);
  if (Status s = describe_object({static_cast<const unsigned char*>(casts), n}, b); !s) return s;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "(none)";
    const std::string y = i < b.size() ? b[i] : "(none)";
    if (x != y) return Status::Error("plain build: " + x + "; casts build: " + y, EINVAL);
  }
  return Status::Ok();
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

std::unique_ptr<Loader> Loader::create(const Options& opts, Status& status) {
  // An extra program the kernel refuses is left out and the object loaded again without it,
  // as many times as there are extras; a core program's failure ends it.
  std::map<std::string, std::string> left_out;
  for (const auto& name : opts.disabled_programs) left_out[name] = "disabled by configuration";
  PhaseTimes times;
  Options o = opts;
  if (status = asked_build(opts.program_build, o.program_build); !status) return nullptr;
  std::string build_note;  // why the build loaded is not the one chosen first
  // An optional program the casts build could not load, tried in the plain build; set once that
  // showed an optional program's refusal was not the casts' (then such refusals leave it out).
  std::string plain_trial;
  bool casts_extras_checked = false;
  for (;;) {
    std::string failed_prog, failed_line, core_btf_file;
    bool casts_refused = false;
    auto loader = create_once(o, left_out, status, failed_prog, failed_line, times, core_btf_file,
                              casts_refused);
    if (!loader && !core_btf_file.empty()) {
      // A load that failed with the cached small BTF is tried again with the kernel's: a file
      // that parses but lacks a type a relocation needs would poison that program. Removed if
      // the kernel's BTF does better, so that the next run makes it again.
      spdlog::warn("the load failed with the small CO-RE BTF {} ({}): trying the kernel's BTF",
                   core_btf_file, status.message);
      o.core_btf_cache.clear();
      failed_prog.clear();
      failed_line.clear();
      loader = create_once(o, left_out, status, failed_prog, failed_line, times, core_btf_file,
                           casts_refused);
      if (loader && unlink(core_btf_file.c_str()) != 0 && errno != ENOENT)
        spdlog::warn("cannot remove {}: {}", core_btf_file, std::strerror(errno));
    }
    const bool optional = !failed_prog.empty() && !kCorePrograms.count(failed_prog);
    if (!loader && casts_refused && o.program_build == ProgramBuild::Auto &&
        !(optional && casts_extras_checked)) {
      // A kernel that names the kfuncs but refuses the build (a program type it does not give
      // them to, a verifier older than the build assumes): the plain build, said once.
      build_note = "the kernel refused the casts build (" +
                   (failed_prog.empty() ? status.message : failed_line) + ")";
      spdlog::warn("{}: loading the plain build", build_note);
      o.program_build = ProgramBuild::Plain;
      if (optional) plain_trial = failed_prog;
      continue;
    }
    if (!loader && !plain_trial.empty() && failed_prog == plain_trial) {
      // The plain build refuses that optional program too: not the casts' doing. Back to the
      // casts build without it, as any build would go on; later refusals of optional programs
      // are taken the same way.
      spdlog::warn("{} cannot load in either build: the casts build without it", failed_prog);
      o.program_build = ProgramBuild::Auto;
      casts_extras_checked = true;
      build_note.clear();
      plain_trial.clear();
    }
    if (loader && !build_note.empty()) loader->program_build_note_ = build_note;
    if (loader) loader->start_times_ = times;
    if (loader || failed_prog.empty() || kCorePrograms.count(failed_prog) ||
        left_out.count(failed_prog))
      return loader;
    spdlog::warn("optional program {} cannot load here, going on without it: {}", failed_prog,
                 failed_line);
    left_out[failed_prog] = "cannot load: " + failed_line;
  }
}

std::unique_ptr<Loader> Loader::create_once(const Options& opts,
                                            const std::map<std::string, std::string>& left_out,
                                            Status& status, std::string& failed_prog,
                                            std::string& failed_line, PhaseTimes& times,
                                            std::string& core_btf_file, bool& casts_refused) {
  casts_refused = false;
  g_verbose = opts.verbose;
  libbpf_set_print(libbpf_log);

  if (status = check_ring_size("the ring size", opts.ring_bytes); !status) return nullptr;
  if (status = check_ring_size("the trace ring size", opts.trace_ring_bytes); !status)
    return nullptr;
  if (opts.fast_file_records > 0 && opts.fast_file_records < opts.max_file_records &&
      (opts.select_jobs || !opts.pin_dir.empty())) {
    // The daemon drains in pieces and pins its maps: its one tier is `files` (preallocated
    // whole or not at all).
    status = Status::Error("two tiers of file records are for a run: not with job selection or "
                           "pinned maps", EINVAL);
    return nullptr;
  }
  if (status = check_privileges(); !status) return nullptr;
  if (status = check_btf(opts.btf_path); !status) return nullptr;
  if (opts.btf_path != kVmlinuxBtf) {
    // tp_btf attaches by the running kernel's own BTF; a custom file only helps CO-RE.
    if (status = check_btf(kVmlinuxBtf); !status) return nullptr;
  }

  // Features the programs cannot do without: say which one is missing instead of a verifier dump.
  if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr) != 1) {
    status = Status::Error("this kernel lacks BPF task-local storage (Linux 5.11+ needed)", ENOTSUP);
    return nullptr;
  }
  if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, nullptr) != 1) {
    status = Status::Error("this kernel lacks the bpf_loop helper (Linux 5.17+ needed)", ENOTSUP);
    return nullptr;
  }

  times.mark("checks");
  // Which build of the programs (bpf/README.md "Two builds").
  BuildChoice build;
  if (status = choose_build(kVmlinuxBtf, opts.program_build, build); !status) return nullptr;
  const bool casts = build.casts;
  std::span<const unsigned char> elf;
  {
    std::size_t n = 0;
    const void* bytes = casts ? iolens_bpf_casts__elf_bytes(&n) : iolens_bpf__elf_bytes(&n);
    elf = {static_cast<const unsigned char*>(bytes), n};
  }
  times.mark("build");
  // CO-RE against a small BTF made for this object on this kernel (loader/core_btf.hpp): the
  // search of the kernel's whole BTF for each struct was ~40 ms of every start.
  CoreBtf core;
  // A module whose types the programs read (btrfs: a file's device) has them in its own BTF,
  // which libbpf searches only when CO-RE targets the kernel's: correct identities first.
  const std::vector<std::string> modules = modules_needing_kernel_btf("/sys/kernel/btf");
  if (!modules.empty())
    spdlog::debug("CO-RE target: the kernel's BTF (types of module {} needed)", modules.front());
  if (opts.btf_path == kVmlinuxBtf && !opts.core_btf_cache.empty() && modules.empty()) {
    // Under sudo the invoking user's environment must not choose what root runs or where it
    // writes (docs/security.md section 5): the defaults then.
    const bool sudo = std::getenv("SUDO_UID") != nullptr;
    const char* env_cache = sudo ? nullptr : std::getenv("IOLENS_CACHE_DIR");
    const char* env_bpftool = sudo ? nullptr : std::getenv("IOLENS_BPFTOOL");
    const std::string cache = env_cache ? env_cache : opts.core_btf_cache;
    if (!cache.empty()) {
      core = core_btf(cache, elf, kVmlinuxBtf, env_bpftool ? env_bpftool : opts.bpftool,
                      "/sys/kernel/notes");
      spdlog::debug("CO-RE target: {}", core.note);
    }
  }
  times.mark("core_btf");
  auto impl = std::make_unique<Impl>();
  LIBBPF_OPTS(bpf_object_open_opts, open_opts);
  // IOLENS_VERIFIER_LOG=N: the verifier's log of every program at level N (1, 2, 4 or a sum),
  // printed with libbpf's debug output (-v): for tests/e2e/verifier_walks_test.py and for
  // reading what the verifier walks.
  if (const char* lvl = std::getenv("IOLENS_VERIFIER_LOG")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(lvl, &end, 10);
    if (end == lvl || *end || v == 0 || v > 7) {
      status = Status::Error("IOLENS_VERIFIER_LOG must be 1 to 7, not \"" + std::string(lvl) +
                                 "\"",
                             EINVAL);
      return nullptr;
    }
    open_opts.kernel_log_level = static_cast<__u32>(v);
  }
  // The default is libbpf's own choice: naming it would make libbpf read it as a custom file.
  if (opts.btf_path != kVmlinuxBtf) open_opts.btf_custom_path = opts.btf_path.c_str();
  else if (!core.path.empty()) open_opts.btf_custom_path = core.path.c_str();
  impl->skel = open_build(&open_opts, elf);
  if (!impl->skel) {
    const int e = errno;
    status = Status::Error("cannot open the BPF object: " + errno_text(e), e);
    return nullptr;
  }
  iolens_bpf* skel = impl->skel;
  if (skel->rodata->abi_version != IOLENS_ABI_VERSION) {
    status = Status::Error("BPF object ABI " + std::to_string(skel->rodata->abi_version) +
                           " does not match the agent's ABI " +
                           std::to_string(IOLENS_ABI_VERSION));
    return nullptr;
  }
  skel->rodata->kid_task_struct = build.task_struct;
  skel->rodata->kid_address_space = build.address_space;
  skel->rodata->kid_kiocb = build.kiocb;
  skel->rodata->kid_folio = build.folio;
  bpf_map__set_max_entries(skel->maps.files, opts.max_file_records);
  uint32_t fast = std::min(opts.fast_file_records, opts.max_file_records);
  if (fast > 0) {
    // Preallocated: the kernel builds the elements at creation (1-2 ms for 8,192 of ~1 KiB on
    // the benchmark VM, bench/README.md) and a new record takes a ready one.
    bpf_map__set_max_entries(skel->maps.files, fast);
    bpf_map__set_map_flags(skel->maps.files, 0);
    if (opts.max_file_records > fast) {
      bpf_map__set_max_entries(skel->maps.files_spill, opts.max_file_records - fast);
      skel->rodata->file_spill = 1;
    }
  }
  bpf_map__set_max_entries(skel->maps.others, opts.max_other_records);
  // Derived from `files`, whose size the pin meta checks: a resumed daemon finds the same.
  bpf_map__set_max_entries(skel->maps.tallies_more, opts.max_tally_records
                                                        ? opts.max_tally_records
                                                        : std::max(256u, opts.max_file_records / 16));
  bpf_map__set_max_entries(skel->maps.blocks, opts.max_block_records);
  if (opts.max_inflight)
    for (bpf_map* m : {skel->maps.rq_inflight, skel->maps.dio_inflight, skel->maps.uring_inflight})
      bpf_map__set_max_entries(m, opts.max_inflight);
  bpf_map__set_max_entries(skel->maps.cgroup_excl, opts.max_cgroup_exclusions);
  if (!opts.select_jobs) {
    // Job selection is the daemon's (select_jobs in .rodata turns its code off): its maps are
    // never written and its programs never attached, so they cost one entry and no load.
    for (bpf_map* m : {skel->maps.cgroup_sel, skel->maps.cgroup_excl, skel->maps.comm_sel})
      bpf_map__set_max_entries(m, 1);
    for (bpf_program* p : {skel->progs.cgroup_mkdir, skel->progs.cgroup_rmdir,
                           skel->progs.cgroup_attach_task, skel->progs.scan_tasks,
                           skel->progs.forget_names})
      bpf_program__set_autoload(p, false);
  }
  if (!opts.select_jobs && opts.pin_dir.empty()) {
    // A run (short-lived, bounded): seen_files becomes a hash whose memory follows use. The
    // kernel preallocates an LRU map whole, and linking its 262,144 entries was the largest
    // part of map creation (45-75 ms of iolens run's start, bench/README.md). Up to its size
    // the two behave the same (nothing is evicted); past it the LRU forgets its oldest files
    // where the hash refuses new ones, and either way a file not in it only has its name sent
    // again with its next new record (the agent keeps one) and its path stats joined by the
    // agent (Recorder: generation 0). The daemon, which runs for months, keeps the LRU.
    bpf_map__set_type(skel->maps.seen_files, BPF_MAP_TYPE_HASH);
    bpf_map__set_map_flags(skel->maps.seen_files, BPF_F_NO_PREALLOC);
    if (skel->rodata->file_spill) {
      // Two tiers, as `files`: the first `fast` files in a preallocated hash (~0.3 ms to make
      // 8,192 entries), the rest in one whose memory follows use, 262,144 in all as before.
      const uint32_t seen_max = bpf_map__max_entries(skel->maps.seen_files);
      const uint32_t seen_fast = std::min(fast, seen_max / 2);
      bpf_map__set_map_flags(skel->maps.seen_files, 0);
      bpf_map__set_max_entries(skel->maps.seen_files, seen_fast);
      bpf_map__set_max_entries(skel->maps.seen_spill, seen_max - seen_fast);
    }
    // `dirtiers` likewise (12-27 ms of preallocated LRU): up to its 65,536 files a run sees no
    // difference; past it the hash refuses the new dirtiers (lost.dirtiers, their writeback
    // charged to no job) where the LRU would forget the oldest, whose pages a run's flushers
    // have long written back.
    bpf_map__set_type(skel->maps.dirtiers, BPF_MAP_TYPE_HASH);
    bpf_map__set_map_flags(skel->maps.dirtiers, BPF_F_NO_PREALLOC);
    // The in-flight maps (one entry per O_DIRECT call, io_uring request, block request in
    // flight; 2-5 ms each to preallocate): entries are made at submission, in process context,
    // and a failed one is counted (direct_inflight, uring_inflight, block_inflight). Deleting at
    // completion, in interrupt context, needs no allocation.
    for (bpf_map* m : {skel->maps.rq_inflight, skel->maps.dio_inflight, skel->maps.uring_inflight})
      bpf_map__set_map_flags(m, BPF_F_NO_PREALLOC);
  }
  bpf_map__set_max_entries(skel->maps.events, opts.ring_bytes);
  bpf_map__set_max_entries(skel->maps.trace, opts.trace_ring_bytes);
  skel->rodata->select_jobs = opts.select_jobs ? 1 : 0;
  skel->rodata->trace_calls = opts.trace_calls ? 1 : 0;
  // Timing: sys_enter on every system call of the machine, or (off) close's classic tracepoint
  // alone. The program not used is not loaded.
  iolens_timing timing = opts.timing;
  std::string timing_note;
  if (timing == IOLENS_TIMING_OFF) {
    if (Status t = ensure_tracefs(); !t) {
      timing = IOLENS_TIMING_EXACT;
      timing_note = "timing off needs close's classic tracepoint: " + t.message;
      spdlog::warn("{}; timing calls exactly instead", timing_note);
    }
  }
  bpf_program__set_autoload(
      timing == IOLENS_TIMING_OFF ? skel->progs.sys_enter : skel->progs.close_enter, false);

  PinState pins;
  if (!opts.pin_dir.empty()) {
    if (status = ensure_bpffs_dir(opts.pin_dir); !status) return nullptr;
    // Pins left by a dead agent are continued; pins of a live one must not be touched. The
    // lock goes with the process, whatever way it ends.
    impl->pin_lock = open(opts.pin_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (impl->pin_lock < 0 || flock(impl->pin_lock, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      status = Status::Error("pin directory " + opts.pin_dir + " is in use by another running " +
                             "agent (" + errno_text(e) + "): give each daemon its own pin_dir", e);
      return nullptr;
    }
    // A previous agent's maps are reused only if they were made for this ABI and these sizes.
    const std::string meta_path = opts.pin_dir + "/meta";
    const bool any_pin = !std::filesystem::is_empty(opts.pin_dir);
    if (any_pin) {
      iolens_pin_meta old{};
      const int fd = bpf_obj_get(meta_path.c_str());
      const __u32 zero = 0;
      // Another ABI's meta may be of another size: read it whole, use what both have (the ABI
      // version comes first in every one).
      bpf_map_info info{};
      __u32 info_len = sizeof(info);
      std::vector<uint8_t> value;
      bool readable = fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &info_len) == 0 &&
                      info.value_size >= sizeof(old.abi_version);
      if (readable) {
        value.resize(std::max<size_t>(info.value_size, sizeof(old)));
        readable = bpf_map_lookup_elem(fd, &zero, value.data()) == 0;
        std::memcpy(&old, value.data(), std::min<size_t>(info.value_size, sizeof(old)));
      }
      if (fd >= 0) close(fd);
      std::string resized;
      auto size_changed = [&resized](const char* what, uint32_t was, uint32_t now) {
        if (was == now) return;
        resized += std::string(resized.empty() ? "" : ", ") + what + " " + std::to_string(was) +
                   " -> " + std::to_string(now);
      };
      size_changed("files", old.files_max, opts.max_file_records);
      size_changed("others", old.others_max, opts.max_other_records);
      size_changed("ring", old.ring_bytes, opts.ring_bytes);
      size_changed("trace ring", old.trace_ring_bytes, opts.trace_ring_bytes);
      size_changed("cgroup exclusions", old.cgroup_excl_max, opts.max_cgroup_exclusions);
      // Whether `files` is preallocated is the pinned map's own flag (the kernel refuses to
      // reuse a map whose flags differ from the object's): read it from the pin.
      const bool want_prealloc = fast > 0;
      bool files_prealloc = want_prealloc;
      if (const auto files = pinned_map_info(opts.pin_dir, skel->maps.files))
        files_prealloc = !(files->map_flags & BPF_F_NO_PREALLOC);
      // `blocks` has no field in the meta map (its size became configurable in ABI 12): the
      // pinned map's own size is the reference (libbpf refuses to reuse a map of another size).
      if (const auto blocks = pinned_map_info(opts.pin_dir, skel->maps.blocks))
        size_changed("block records", blocks->max_entries, opts.max_block_records);
      const char* timing_names[] = {"exact", "off"};
      const bool timing_changed = old.timing != static_cast<uint32_t>(timing);
      if (!readable) {
        pins.discarded = "pins without a readable meta map";
      } else if (old.abi_version != IOLENS_ABI_VERSION || info.value_size != sizeof(old)) {
        pins.discarded = "made for ABI " + std::to_string(old.abi_version) + ", this agent has " +
                         std::to_string(IOLENS_ABI_VERSION);
      } else if (!resized.empty()) {
        pins.discarded = "map sizes changed (" + resized + ")";
      } else if (files_prealloc != want_prealloc && !opts.file_records_follow_pins) {
        pins.discarded = std::string("file records ") +
                         (files_prealloc ? "preallocated" : "made on demand") + " -> " +
                         (want_prealloc ? "preallocated" : "made on demand");
      } else if (timing_changed) {
        // The programs attached count for the timing they were attached with (sys_enter or
        // close_enter), and the live threads' enter_ns means one thing or the other.
        pins.discarded = std::string("timing changed (") +
                         (old.timing < 2 ? timing_names[old.timing] : "unknown") + " -> " +
                         timing_names[timing] + ")";
      } else {
        pins.resumed = true;
        pins.mono_to_wall_ns = static_cast<int64_t>(old.mono_to_wall_ns);
        pins.created_wall_ns = old.created_wall_ns;
      }
      if (pins.resumed && files_prealloc != want_prealloc) {
        // Resumed although `files` was made the other way: the configuration did not ask
        // (file_records_follow_pins, checked above), so the previous agent's kind of map is
        // kept with its state (an upgrade to a release whose default differs keeps its jobs).
        fast = files_prealloc ? opts.max_file_records : 0;
        bpf_map__set_map_flags(skel->maps.files, files_prealloc ? 0 : BPF_F_NO_PREALLOC);
      }
      if (!pins.resumed) remove_pins(opts.pin_dir);
    }
    for (bpf_map* m : impl->persistent_maps()) {
      const std::string path = opts.pin_dir + "/" + pin_name(m);
      if (int err = bpf_map__set_pin_path(m, path.c_str()); err) {
        status = Status::Error("cannot set pin path " + path + ": " + errno_text(err), -err);
        return nullptr;
      }
    }
  }

  times.mark("open");
  // Extras the kernel cannot have (a tracepoint it lacks) or that an earlier try could not load.
  std::vector<std::pair<std::string, std::string>> extras_off;
  {
    std::set<std::string> extras;
    bpf_program* q = nullptr;
    bpf_object__for_each_program(q, skel->obj) {
      if (!kCorePrograms.count(bpf_program__name(q))) extras.insert(bpf_program__name(q));
    }
    for (const auto& name : opts.disabled_programs) {
      if (extras.count(name)) continue;
      std::string known;
      for (const auto& e : extras) known += (known.empty() ? "" : ", ") + e;
      status = Status::Error(
          kCorePrograms.count(name)
              ? name + " is a core program and cannot be disabled"
              : "no optional program named " + name + " (they are: " + known + ")",
          EINVAL);
      return nullptr;
    }
  }
  {
    // Extras on a tracepoint the kernel lacks (readahead and filemap fault events are recent)
    // are left out before trying: a failed load would load everything again. The kernel's BTF
    // names its tracepoints; its strings are read, not parsed (libbpf parses it once, in load).
    std::set<std::string> wanted, present;
    bpf_program* p = nullptr;
    bpf_object__for_each_program(p, skel->obj) {
      const std::string name = bpf_program__name(p);
      const std::string tp = btf_tracepoint(p);
      if (!kCorePrograms.count(name) && !left_out.count(name) && !tp.empty())
        wanted.insert("btf_trace_" + tp);
    }
    // Unreadable: every extra is tried (libbpf then says what it lacks).
    if (!wanted.empty() && !btf_strings_present(kVmlinuxBtf, wanted, present))
      present = wanted;
    bpf_object__for_each_program(p, skel->obj) {
      const std::string name = bpf_program__name(p);
      if (kCorePrograms.count(name)) continue;
      std::string why;
      const std::string tp = btf_tracepoint(p);
      if (auto it = left_out.find(name); it != left_out.end()) why = it->second;
      else if (!tp.empty() && !present.count("btf_trace_" + tp))
        why = "tracepoint " + tp + " is not in this kernel";
      if (why.empty()) continue;
      bpf_program__set_autoload(p, false);
      extras_off.emplace_back(name, why);
    }
  }

  times.mark("extras_check");
  std::vector<std::string> warnings;
  g_failed_prog = &failed_prog;
  g_failed_line = &failed_line;
  g_load_warnings = &warnings;
  int load_err;
  // Without the O_DIRECT completion program, io_uring's CQE counts all a request moved
  // (bpf/iolens_direct.bpf.h io_uring_complete).
  skel->rodata->dio_complete_loaded = bpf_program__autoload(skel->progs.iomap_dio_complete) ? 1 : 0;
  {
    std::optional<HugePageHeap> heap;
    if (!opts.select_jobs && opts.pin_dir.empty()) heap.emplace(vmlinux_btf_bytes());
    load_err = iolens_bpf__load(skel);
  }
  times.mark("load");
  g_failed_prog = nullptr;
  g_failed_line = nullptr;
  g_load_warnings = nullptr;
  const bool extra_failed = !failed_prog.empty() && !kCorePrograms.count(failed_prog) &&
                            !left_out.count(failed_prog);
  // A relocation the small BTF could not resolve (libbpf names it in its warnings): create()
  // loads again with the kernel's BTF, and these warnings are only debug output.
  const bool core_btf_failed =
      load_err && !core.path.empty() &&
      std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
        return w.find("CO-RE relocation") != std::string::npos;
      });
  // The casts build refused under auto is loaded again as the plain one (Loader::create): its
  // verifier log is for -v, the retry's own failure is what to show.
  const bool retried_plain = casts && opts.program_build == ProgramBuild::Auto &&
                             load_err != -EPERM;
  for (const auto& w : warnings) {
    if (load_err && !extra_failed && !core_btf_failed && !retried_plain)
      spdlog::warn("libbpf: {}", w);
    else
      spdlog::debug("libbpf: {}", w);
  }
  if (int err = load_err; err) {
    if (core_btf_failed) core_btf_file = core.file;  // Loader::create tries again
    // Loader::create tries the plain build (not for a lack of privileges, which it shares;
    // the verifier's own refusals are EACCES: a kfunc not allowed here, a pointer it types
    // otherwise)
    casts_refused = casts && err != -EPERM;
    std::string msg = "cannot load the BPF programs: " + errno_text(err);
    if (err == -EPERM || err == -EACCES) msg += std::string(" (") + privilege_hint() + ")";
    else msg += " (run with -v for the verifier's log)";
    status = Status::Error(msg, -err);
    return nullptr;
  }

  if (!opts.pin_dir.empty() && !pins.resumed) {
    const int64_t wall = clock_ns(CLOCK_REALTIME);
    iolens_pin_meta meta{IOLENS_ABI_VERSION,
                         opts.max_file_records,
                         opts.max_other_records,
                         opts.ring_bytes,
                         static_cast<uint64_t>(wall),
                         static_cast<uint64_t>(wall - clock_ns(CLOCK_MONOTONIC)),
                         opts.trace_ring_bytes,
                         opts.max_cgroup_exclusions,
                         static_cast<uint32_t>(timing),
                         0};
    const __u32 zero = 0;
    bpf_map_update_elem(bpf_map__fd(skel->maps.meta), &zero, &meta, BPF_ANY);
    pins.mono_to_wall_ns = static_cast<int64_t>(meta.mono_to_wall_ns);
    pins.created_wall_ns = meta.created_wall_ns;
  }

  impl->progs = {
      {"sched_process_fork", skel->progs.sched_process_fork, &skel->links.sched_process_fork,
       Group::Lifecycle},
      {"sched_process_exec", skel->progs.sched_process_exec, &skel->links.sched_process_exec,
       Group::Lifecycle},
      {"sched_process_exit", skel->progs.sched_process_exit, &skel->links.sched_process_exit,
       Group::Lifecycle},
      {"cgroup_mkdir", skel->progs.cgroup_mkdir, &skel->links.cgroup_mkdir, Group::Jobs},
      {"cgroup_rmdir", skel->progs.cgroup_rmdir, &skel->links.cgroup_rmdir, Group::Jobs},
      {"cgroup_attach_task", skel->progs.cgroup_attach_task, &skel->links.cgroup_attach_task,
       Group::Jobs},
      {"sys_enter", skel->progs.sys_enter, &skel->links.sys_enter, Group::Syscalls},
      {"close_enter", skel->progs.close_enter, &skel->links.close_enter, Group::Syscalls},
      {"sys_exit", skel->progs.sys_exit, &skel->links.sys_exit, Group::Syscalls},
  };
  // Before any syscall hook attaches (a resumed agent's pins were made with the same timing).
  skel->data_trace->timing_mode = static_cast<__u32>(timing);
  auto loader = std::unique_ptr<Loader>(new Loader(std::move(impl)));
  loader->max_file_records_ = opts.max_file_records;
  loader->fast_file_records_ = fast;
  loader->max_cgroup_exclusions_ = opts.max_cgroup_exclusions;
  loader->pin_state_ = pins;
  loader->pin_dir_ = opts.pin_dir;
  loader->timing_ = timing;
  loader->timing_note_ = timing_note;
  loader->program_build_ = casts ? "casts" : "plain";
  loader->program_build_note_ = build.note;
  // Attach one by one so that each failure is named. Lifecycle and job programs are required;
  // in daemon mode the syscall hooks wait for set_syscall_hooks(true), unless a previous agent
  // left them attached (resumed), in which case its links are kept: re-attaching would leave a
  // gap or count calls twice.
  for (const auto& p : loader->impl_->progs) {
    const std::string link_pin = opts.pin_dir + "/link_" + p.name;
    const bool pinned_link = pins.resumed && access(link_pin.c_str(), F_OK) == 0;
    if (p.group == Group::Jobs && !opts.select_jobs) continue;
    if (!bpf_program__autoload(p.prog)) continue;  // the other timing's entry program
    if (p.group == Group::Syscalls && opts.select_jobs && !pinned_link) {
      loader->programs_.push_back(ProgramState{p.name, false, ""});
      continue;
    }
    if (status = loader->attach_one(p.name, !opts.pin_dir.empty()); !status) return nullptr;
  }
  if (pins.resumed) {
    // The earlier agent's optional programs are kept through their pinned links only while
    // this agent loads the same ones. They share state that is not pinned (the in-flight maps
    // of O_DIRECT, io_uring and block requests, made anew by each agent) and settings in their
    // .rodata (io_uring_complete counts a whole O_DIRECT request at its CQE when iomap_dio_complete
    // is not loaded): an old begin beside a new completion never meets, an old CQE program beside
    // a new completion program counts twice. So when the set differs, every optional program is
    // attached afresh (their pins removed: the earlier agent's programs detach), a moment of
    // their events not counted; a disabled one stops running.
    std::vector<std::string> pinned_extras, changed;
    bpf_program* q = nullptr;
    bpf_object__for_each_program(q, skel->obj) {
      const std::string name = bpf_program__name(q);
      if (kCorePrograms.count(name)) continue;
      const bool pinned = access((opts.pin_dir + "/link_" + name).c_str(), F_OK) == 0;
      if (pinned) pinned_extras.push_back(name);
      if (pinned != bpf_program__autoload(q))
        changed.push_back(name + (pinned ? " (not loaded now)" : " (loaded now)"));
    }
    if (!changed.empty()) {
      for (const auto& name : pinned_extras) unlink((opts.pin_dir + "/link_" + name).c_str());
      spdlog::info("optional programs attached afresh, the set changed since the earlier agent: {}",
                   fmt::join(changed, ", "));
    }
  }
  // Extras: attached where the kernel lets them, each failure named and counted as not attached
  // (`iolens run` prints them, iolensd reports them in status and metrics).
  {
    bpf_program* p = nullptr;
    bpf_object__for_each_program(p, skel->obj) {
      const char* name = bpf_program__name(p);
      if (kCorePrograms.count(name) || !bpf_program__autoload(p)) continue;
      loader->impl_->extra_links.push_back(nullptr);
      loader->impl_->progs.push_back(
          {name, p, &loader->impl_->extra_links.back(), Group::Extra});
      if (Status s = loader->attach_one(name, !opts.pin_dir.empty()); !s)
        spdlog::warn("{} (going on without it)", s.message);
    }
    for (const auto& [name, why] : extras_off) loader->set_program_state(name, false, why);
  }
  times.mark("attach");

  loader->impl_->ring = new_consumer(skel->maps.events, ring_callback,
                                     &loader->impl_->consumer, "ring buffer", status);
  if (!loader->impl_->ring) return nullptr;
  {
    // The kernel's layout: the consumer position page (writable), then the producer's.
    const int fd = bpf_map__fd(skel->maps.events);
    const long page = sysconf(_SC_PAGESIZE);
    Impl& im = *loader->impl_;
    im.consumer_page = mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    im.producer_page = mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_SHARED, fd, page);
    if (im.consumer_page == MAP_FAILED || im.producer_page == MAP_FAILED) {
      const int e = errno;
      if (im.consumer_page == MAP_FAILED) im.consumer_page = nullptr;
      if (im.producer_page == MAP_FAILED) im.producer_page = nullptr;
      status = Status::Error("cannot map the ring buffer's positions: " + errno_text(e), e);
      return nullptr;
    }
    im.ring_consumer = static_cast<uint64_t*>(im.consumer_page);
    im.ring_producer = static_cast<const uint64_t*>(im.producer_page);
  }
  // The trace ring is mapped only while a trace runs (set_trace_mode), not here.
  if (pins.resumed) {
    // The previous agent's capture ends with it: whatever it left running or unread goes.
    loader->set_trace_mode(IOLENS_TRACE_OFF);
    if (status = loader->impl_->map_trace_ring(); !status) return nullptr;
    const int stale = loader->consume_trace([](const iolens_trace_record&) {});
    if (stale > 0) spdlog::info("discarded {} trace records a previous agent left unread", stale);
  }
  times.mark("rings");
  status = Status::Ok();
  return loader;
}

void Loader::set_program_state(const std::string& name, bool attached, const std::string& error) {
  for (auto& ps : programs_) {
    if (ps.name == name) {
      ps.attached = attached;
      ps.error = error;
      return;
    }
  }
  programs_.push_back(ProgramState{name, attached, error});
}

Status Loader::attach_one(const std::string& name, bool pin) {
  Impl::Prog* p = impl_->find(name);
  if (!p) return Status::Error("no program " + name);
  if (*p->link) return Status::Ok();
  const std::string link_pin = pin_dir_ + "/link_" + name;
  if (pin && pin_state_.resumed && access(link_pin.c_str(), F_OK) == 0) {
    *p->link = bpf_link__open(link_pin.c_str());
    if (*p->link) {
      set_program_state(name, true, "");
      return Status::Ok();
    }
    std::filesystem::remove(link_pin);  // unusable: attach afresh
  }
  *p->link = bpf_program__attach(p->prog);
  if (!*p->link) {
    const int e = errno;
    set_program_state(name, false, errno_text(e));
    std::string msg = "cannot attach " + name + ": " + errno_text(e);
    if (e == EPERM || e == EACCES) msg += std::string(" (") + privilege_hint() + ")";
    return Status::Error(msg, e);
  }
  if (pin) {
    if (int err = bpf_link__pin(*p->link, link_pin.c_str()); err)
      spdlog::warn("cannot pin {}: {} (a restart would detach it)", link_pin, errno_text(err));
  }
  set_program_state(name, true, "");
  return Status::Ok();
}

Status Loader::set_syscall_hooks(bool attached) {
  // Timing off: tasks marked inside a call while sys_exit was detached wait for that call's
  // exit (enter_ns 0), which may have come and gone unseen; the settle scan lets those no
  // longer inside a call count their next one (bpf/iolens.bpf.c scan_tasks).
  if (attached && timing_ == IOLENS_TIMING_OFF && !syscall_hooks() &&
      bpf_program__autoload(impl_->skel->progs.scan_tasks)) {
    impl_->skel->bss->scan_settle = 1;
    const Status s = scan_tasks();
    impl_->skel->bss->scan_settle = 0;
    if (!s) return s;
  }
  for (const char* name : {"sys_enter", "close_enter", "sys_exit"}) {
    Impl::Prog* p = impl_->find(name);
    if (!bpf_program__autoload(p->prog)) continue;  // the other timing's entry program
    if (attached) {
      if (Status s = attach_one(name, !pin_dir_.empty()); !s) return s;
    } else if (*p->link) {
      if (bpf_link__pin_path(*p->link)) bpf_link__unpin(*p->link);
      bpf_link__destroy(*p->link);
      *p->link = nullptr;
      set_program_state(name, false, "");
    }
  }
  return Status::Ok();
}

bool Loader::syscall_hooks() const {
  const auto& l = impl_->skel->links;
  return (timing_ == IOLENS_TIMING_OFF ? l.close_enter : l.sys_enter) != nullptr &&
         l.sys_exit != nullptr;
}

std::optional<int64_t> Loader::syscall_hooks_pinned_wall_ns() const {
  if (pin_dir_.empty() || !pin_state_.resumed || !syscall_hooks()) return std::nullopt;
  struct stat st {};
  // sys_exit is attached last (set_syscall_hooks): its pin is the moment both were attached.
  if (::stat((pin_dir_ + "/link_sys_exit").c_str(), &st) != 0) return std::nullopt;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

void Loader::unpin_all() {
  if (pin_dir_.empty()) return;
  for (auto& p : impl_->progs)
    if (*p.link && bpf_link__pin_path(*p.link)) bpf_link__unpin(*p.link);
  for (bpf_map* m : impl_->persistent_maps()) bpf_map__unpin(m, nullptr);
  remove_pins(pin_dir_);
  rmdir(pin_dir_.c_str());
}

Status Loader::select_cgroup(uint64_t id, uint32_t action) {
  const bool trace = action == IOLENS_CGROUP_TRACE;
  if (!trace && action != IOLENS_CGROUP_EXCLUDE)
    return Status::Error("cannot select cgroup " + std::to_string(id) + ": unknown action " +
                             std::to_string(action), EINVAL);
  const auto& m = impl_->skel->maps;
  const int fd = bpf_map__fd(trace ? m.cgroup_sel : m.cgroup_excl);
  if (bpf_map_update_elem(fd, &id, &action, BPF_ANY)) {
    const int e = errno;
    std::string msg = "cannot " + std::string(trace ? "trace" : "exclude") + " cgroup " +
                      std::to_string(id) + ": " + errno_text(e);
    if (e == E2BIG)
      msg += trace ? " (more traced cgroups than " + std::to_string(IOLENS_CGROUP_TRACE_MAX) + ")"
                   : " (the exclusion map's " + std::to_string(max_cgroup_exclusions_) +
                         " entries are taken: limits.kernel_cgroup_exclusions)";
    return Status::Error(msg, e);
  }
  // At most one entry per cgroup: a stale one in the other map would decide first.
  bpf_map_delete_elem(bpf_map__fd(trace ? m.cgroup_excl : m.cgroup_sel), &id);
  return Status::Ok();
}

Status Loader::unselect_cgroup(uint64_t id) {
  for (bpf_map* map : {impl_->skel->maps.cgroup_sel, impl_->skel->maps.cgroup_excl}) {
    if (bpf_map_delete_elem(bpf_map__fd(map), &id) && errno != ENOENT) {
      const int e = errno;
      return Status::Error("cannot unselect cgroup " + std::to_string(id) + ": " + errno_text(e), e);
    }
  }
  return Status::Ok();
}

Status Loader::select_comm(const std::string& comm) {
  char key[IOLENS_COMM_LEN] = {};
  if (comm.empty() || comm.size() >= sizeof(key))
    return Status::Error("a comm has 1 to 15 bytes: '" + comm + "'", EINVAL);
  std::memcpy(key, comm.data(), comm.size());
  const __u32 one = 1;
  if (bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.comm_sel), key, &one, BPF_ANY)) {
    const int e = errno;
    return Status::Error("cannot select comm " + comm + ": " + errno_text(e), e);
  }
  return Status::Ok();
}

Status Loader::scan_tasks(bool report_all) {
  if (!bpf_program__autoload(impl_->skel->progs.scan_tasks))
    return Status::Error("the task scan is loaded only with job selection (daemon mode)", EINVAL);
  impl_->skel->bss->scan_report_all = report_all ? 1 : 0;
  bpf_link* link = bpf_program__attach_iter(impl_->skel->progs.scan_tasks, nullptr);
  if (!link) {
    const int e = errno;
    return Status::Error("cannot attach the task iterator: " + errno_text(e), e);
  }
  const int fd = bpf_iter_create(bpf_link__fd(link));
  if (fd < 0) {
    const int e = errno;
    bpf_link__destroy(link);
    return Status::Error("cannot run the task iterator: " + errno_text(e), e);
  }
  // The program writes nothing to the seq file; reading to the end runs it over every task.
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
  }
  const int e = n < 0 ? errno : 0;
  close(fd);
  bpf_link__destroy(link);
  impl_->skel->bss->scan_report_all = 0;
  if (e) return Status::Error("task iterator failed: " + errno_text(e), e);
  return Status::Ok();
}

int64_t Loader::map_entries(const std::string& name) const {
  bpf_map* m = bpf_object__find_map_by_name(impl_->skel->obj, name.c_str());
  if (!m) return -1;
  // Hash maps do not report their size: count keys, a syscall each (iolensd does it once, at
  // start; its status and metrics follow the kernel's creation count instead).
  const int fd = bpf_map__fd(m);
  const uint32_t key_size = bpf_map__key_size(m);
  std::vector<uint8_t> key(key_size), next(key_size);
  int64_t n = 0;
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    ++n;
    key.swap(next);
    prev = key.data();
  }
  return n;
}

Status Loader::untrace_process(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    return Status::Error("pidfd_open(" + std::to_string(pid) + "): " + errno_text(e), e);
  }
  const int err = bpf_map_delete_elem(bpf_map__fd(impl_->skel->maps.task_state), &pidfd);
  const int e = errno;
  close(pidfd);
  if (err && e != ENOENT)
    return Status::Error("cannot untrace process " + std::to_string(pid) + ": " + errno_text(e), e);
  return Status::Ok();
}

Status Loader::trace_process(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    return Status::Error("pidfd_open(" + std::to_string(pid) + "): " + errno_text(e), e);
  }
  // enter_ns 0: with timing off, the process's next system call exit is not counted, as it may
  // have been entered untraced (iolens run's child, stopped in raise(SIGSTOP), next returns
  // from glibc's rt_sigprocmask, which is not counted anyway).
  iolens_task_state st{};
  const int err = bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.task_state), &pidfd, &st,
                                      BPF_NOEXIST);
  const int e = errno;
  close(pidfd);
  if (err) return Status::Error("cannot mark process " + std::to_string(pid) + " as traced: " +
                                    errno_text(e), e);
  return Status::Ok();
}

int Loader::events_fd() const { return ring_buffer__epoll_fd(impl_->ring); }

int Loader::consume_events(const EventSink& sink, int64_t deadline_ns) {
  impl_->consumer = EventConsumer{&sink, deadline_ns, 0};
  const int r = ring_buffer__consume(impl_->ring);
  const int n = impl_->consumer.records;
  impl_->consumer = EventConsumer{};
  impl_->events_cut_short = r == kConsumeDeadline;
  return r == kConsumeDeadline ? n : r;
}

bool Loader::events_cut_short() const { return impl_->events_cut_short; }

Status Loader::set_trace_mode(iolens_trace_mode mode, int cgroup_fd) {
  const int cg_map = bpf_map__fd(impl_->skel->maps.trace_cgroup);
  const __u32 zero = 0;
  if (mode != IOLENS_TRACE_OFF && !impl_->skel->rodata->trace_calls)
    return Status::Error("this agent loaded its programs without trace mode's code (the loader's "
                         "trace_calls option)", EINVAL);
  if (mode != IOLENS_TRACE_OFF && timing_ == IOLENS_TIMING_OFF)
    return Status::Error("a trace needs each call's start and duration, and this agent runs "
                         "with timing off (timing: exact)", EINVAL);
  if (mode != IOLENS_TRACE_OFF)
    if (Status mapped = impl_->map_trace_ring(); !mapped) return mapped;
  switch (mode) {
    case IOLENS_TRACE_OFF:
    case IOLENS_TRACE_ALL:
    case IOLENS_TRACE_PIDS:
      if (cgroup_fd >= 0)
        return Status::Error("a cgroup is given only with trace mode CGROUP", EINVAL);
      break;
    case IOLENS_TRACE_CGROUP: {
      // bpf_current_task_under_cgroup() looks at the default (v2) hierarchy only: a v1 cgroup
      // of a hybrid host would never match.
      struct statfs sfs {};
      if (cgroup_fd < 0 || fstatfs(cgroup_fd, &sfs) != 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)
        return Status::Error("trace mode CGROUP needs an open cgroup v2 directory (under the "
                             "cgroup2 mount: /sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid "
                             "hosts)", EINVAL);
      const auto fd = static_cast<__u32>(cgroup_fd);
      if (bpf_map_update_elem(cg_map, &zero, &fd, BPF_ANY) != 0) {
        const int e = errno;
        return Status::Error("cannot set the trace cgroup: " + errno_text(e), e);
      }
      break;
    }
    default:
      return Status::Error("unknown trace mode " + std::to_string(static_cast<int>(mode)), EINVAL);
  }
  __atomic_store_n(&impl_->skel->data_trace->trace_mode, static_cast<__u32>(mode),
                   __ATOMIC_RELEASE);
  if (mode != IOLENS_TRACE_CGROUP) bpf_map_delete_elem(cg_map, &zero);  // ENOENT when empty
  if (mode != IOLENS_TRACE_PIDS) {
    __atomic_store_n(&impl_->skel->data_trace->trace_follow_pids, 0u, __ATOMIC_RELEASE);
    clear_trace_pids();
  }
  return Status::Ok();
}

iolens_trace_mode Loader::trace_mode() const {
  return static_cast<iolens_trace_mode>(
      __atomic_load_n(&impl_->skel->data_trace->trace_mode, __ATOMIC_ACQUIRE));
}

void Loader::clear_trace_pids() {
  const int fd = bpf_map__fd(impl_->skel->maps.trace_pids);
  __u32 key = 0;
  while (bpf_map_get_next_key(fd, nullptr, &key) == 0)
    if (bpf_map_delete_elem(fd, &key) != 0) break;
}

Status Loader::add_trace_pid(uint32_t tgid) {
  if (tgid == 0 || tgid > static_cast<uint32_t>(INT32_MAX))
    return Status::Error("not a process id: " + std::to_string(tgid), EINVAL);
  auto* ctl = impl_->skel->data_trace;
  if (__atomic_load_n(&ctl->trace_follow_pids, __ATOMIC_ACQUIRE) == 0) {
    // A new list: entries of an old one (a fork racing its end) must not name reused pids.
    clear_trace_pids();
    __atomic_store_n(&ctl->trace_follow_pids, 1u, __ATOMIC_RELEASE);
  }
  const int fd = bpf_map__fd(impl_->skel->maps.trace_pids);
  const __u8 one = 1;
  if (bpf_map_update_elem(fd, &tgid, &one, BPF_ANY) != 0) {
    const int e = errno;
    return Status::Error("cannot add process " + std::to_string(tgid) + " to the trace list: " +
                             (e == E2BIG ? std::string("the list is full") : errno_text(e)),
                         e);
  }
  // Checked after the insert: from now on its exit removes it. Before, it might have exited
  // unseen and left an entry for whoever gets its pid next. pidfd_open also refuses a thread id.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(tgid), 0));
  if (pidfd < 0) {
    const int e = errno;
    bpf_map_delete_elem(fd, &tgid);
    // Kernels refuse a thread's id with EINVAL (before 6.9) or ENOENT.
    return Status::Error("cannot trace process " + std::to_string(tgid) + ": " +
                             (e == EINVAL || e == ENOENT
                                  ? std::string("not a process id (a thread's id?)")
                                  : errno_text(e)),
                         e);
  }
  close(pidfd);
  return Status::Ok();
}

int Loader::consume_trace(const TraceSink& sink) {
  if (!impl_->trace_ring) return 0;  // no trace since the last one was read to its end
  impl_->current_trace_sink = &sink;
  const int n = ring_buffer__consume(impl_->trace_ring);
  impl_->current_trace_sink = nullptr;
  if (n >= 0 && trace_mode() == IOLENS_TRACE_OFF) {
    // The trace's last read: the ring is unmapped until the next trace (Impl::map_trace_ring).
    ring_buffer__free(impl_->trace_ring);
    impl_->trace_ring = nullptr;
  }
  return n;
}

int Loader::trace_fd() const {
  return impl_->trace_ring ? ring_buffer__epoll_fd(impl_->trace_ring) : -1;
}

uint64_t Loader::trace_ring_size() const { return bpf_map__max_entries(impl_->skel->maps.trace); }

namespace {

/// How a walk of a map in batches ended.
enum class BatchWalk {
  Done,         // every record visited
  Unsupported,  // the kernel refused the first batch: nothing visited (walk the keys instead)
  Failed,       // a later batch failed: the records before it were visited, the rest not
  Paused,       // `stop` said so between two batches: `from` holds where to go on
};

/// Largest batch a walk asks for once it has grown: ~1.4 MB of file records (1,352 bytes each).
constexpr __u32 kMaxBatch = 1024;

/// Walks a hash map a batch per syscall (BPF_MAP_LOOKUP_BATCH, Linux 5.6+), handing each batch
/// to `visit(n)` (the first n of `keys` and `values`) before reading the next, so that the
/// buffers hold one batch whatever the map holds. Deleting records of a batch already read is
/// safe: the kernel's token is the next bucket to read. After each batch `stop()` may pause the
/// walk: `from` then holds the token a later walk goes on from (a hash map never resizes, so
/// every record present throughout is visited exactly once across the pieces).
template <typename Key, typename Value, typename Visit, typename Stop>
BatchWalk walk_batches(int fd, std::vector<Key>& keys, std::vector<Value>& values,
                       Loader::WalkPosition& from, Visit&& visit, Stop&& stop) {
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  // Small first, then larger: most drains of `iolens run` read a handful of records, and 1024
  // file records (~1 MB) would be fresh memory (page faults) at every drain.
  __u32 batch = 64;
  __u32 in = from.token, out = 0;  // hash maps' batch token: a bucket index
  bool first = !from.resume;
  from = {};
  for (;;) {
    if (keys.size() < batch) {
      // Fresh buffers, not grown ones: growing would copy records about to be overwritten.
      std::vector<Key>(batch).swap(keys);
      std::vector<Value>(batch).swap(values);
    }
    __u32 count = batch;
    const int err = bpf_map_lookup_batch(fd, first ? nullptr : &in, &out, keys.data(),
                                         values.data(), &count, &opts);
    if (err == -ENOSPC && count == 0) {
      batch *= 2;  // one bucket holds more records than a batch
      continue;
    }
    if (err && err != -ENOENT) return first ? BatchWalk::Unsupported : BatchWalk::Failed;
    if (count > 0) visit(static_cast<std::size_t>(count));
    if (err == -ENOENT) return BatchWalk::Done;  // the last batch
    in = out;
    first = false;
    if (stop()) {
      from = {true, in};
      return BatchWalk::Paused;
    }
    batch = std::max(batch, std::min<__u32>(batch * 2, kMaxBatch));
  }
}

template <typename Key, typename Value, typename Visit>
BatchWalk walk_batches(int fd, std::vector<Key>& keys, std::vector<Value>& values, Visit&& visit) {
  Loader::WalkPosition whole;
  return walk_batches(fd, keys, values, whole, visit, [] { return false; });
}

/// Every record of a hash map, in batches. Returns false when the kernel cannot do batches (or
/// failed part way), with `keys` and `values` as they were: the caller walks the keys instead.
template <typename Key, typename Value>
bool read_batched(int fd, std::vector<Key>& keys, std::vector<Value>& values) {
  const std::size_t base = keys.size();
  std::vector<Key> bk;
  std::vector<Value> bv;
  const BatchWalk w = walk_batches(fd, bk, bv, [&](std::size_t n) {
    keys.insert(keys.end(), bk.begin(), bk.begin() + static_cast<std::ptrdiff_t>(n));
    values.insert(values.end(), bv.begin(), bv.begin() + static_cast<std::ptrdiff_t>(n));
  });
  if (w == BatchWalk::Done) return true;
  keys.resize(base);
  values.resize(base);
  return false;
}

template <typename Key, typename Value>
void read_one_by_one(int fd, std::vector<Key>& keys, std::vector<Value>& values) {
  Key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    values.emplace_back();
    if (bpf_map_lookup_elem(fd, &next, &values.back()) == 0)
      keys.push_back(next);
    else
      values.pop_back();
    key = next;
    prev = &key;
  }
}

/// Every record of a hash map: in batches while the kernel allows (`batch_ok` is cleared the
/// first time it refuses), else key by key.
template <typename Key, typename Value>
void read_map(int fd, std::vector<Key>& keys, std::vector<Value>& values, bool& batch_ok) {
  if (!batch_ok || !read_batched(fd, keys, values)) {
    batch_ok = false;
    read_one_by_one(fd, keys, values);
  }
}

template <typename Key>
void delete_batched(int map_fd, const std::vector<Key>& keys, bool batch_ok) {
  size_t done = 0;
  if (batch_ok && !keys.empty()) {
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    __u32 count = static_cast<__u32>(keys.size());
    if (bpf_map_delete_batch(map_fd, keys.data(), &count, &opts) == 0) return;
    done = count;  // the batch stops at the first failure; finish one by one
  }
  for (size_t i = done; i < keys.size(); ++i) bpf_map_delete_elem(map_fd, &keys[i]);
}

}  // namespace

void Loader::delete_keys(int map_fd, const std::vector<iolens_file_key>& keys) {
  delete_batched(map_fd, keys, batch_ok_);
}

std::vector<core::BlockRecord> Loader::read_blocks() {
  const int fd = bpf_map__fd(impl_->skel->maps.blocks);
  std::vector<iolens_block_key> keys;
  std::vector<iolens_block_counters> values;
  read_map(fd, keys, values, batch_ok_);
  std::vector<core::BlockRecord> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = {keys[i], values[i]};
  return out;
}

void Loader::delete_blocks(const std::vector<iolens_block_key>& keys) {
  delete_batched(bpf_map__fd(impl_->skel->maps.blocks), keys, batch_ok_);
}

std::vector<std::pair<iolens_proc_key, iolens_proc_lost>> Loader::read_proc_losses() {
  std::vector<iolens_proc_key> keys;
  std::vector<iolens_proc_lost> values;
  read_map(bpf_map__fd(impl_->skel->maps.proc_lost), keys, values, batch_ok_);
  std::vector<std::pair<iolens_proc_key, iolens_proc_lost>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = {keys[i], values[i]};
  return out;
}

std::vector<std::pair<iolens_proc_key, iolens_proc_lost>> Loader::take_proc_losses(
    const std::vector<iolens_proc_key>& keys) {
  const int fd = bpf_map__fd(impl_->skel->maps.proc_lost);
  std::vector<std::pair<iolens_proc_key, iolens_proc_lost>> out;
  out.reserve(keys.size());
  for (const iolens_proc_key& k : keys) {
    iolens_proc_lost v{};
    // Hash maps have had LOOKUP_AND_DELETE since 5.14, below the kernels iolens loads on (5.17).
    if (bpf_map_lookup_and_delete_elem(fd, &k, &v) == 0) out.emplace_back(k, v);
  }
  return out;
}

namespace {

/// Whether a record may have a side entry: the kernel makes one only for a value that found
/// all of a tally's slots taken, the last of them included.
bool may_have_side(const iolens_file_counters& c) {
  return c.access.value[IOLENS_TALLY_SLOTS - 1] != 0 || c.stride.value[IOLENS_TALLY_SLOTS - 1] != 0;
}

}  // namespace

void Loader::read_sides() {
  Impl& im = *impl_;
  im.sides.clear();
  im.side_keys.clear();
  im.side_values.clear();
  read_map(bpf_map__fd(im.skel->maps.tallies_more), im.side_keys, im.side_values, batch_ok_);
  for (std::size_t i = 0; i < im.side_keys.size(); ++i)
    im.sides.emplace(im.side_keys[i], im.side_values[i]);
}

void Loader::sweep_sides() {
  Impl& im = *impl_;
  const int files_fd = bpf_map__fd(im.skel->maps.files);
  const int spill_fd = bpf_map__fd(im.skel->maps.files_spill);
  const int side_fd = bpf_map__fd(im.skel->maps.tallies_more);
  iolens_file_counters record{};
  uint64_t orphans = 0;
  for (const auto& [k, side] : im.sides) {
    if (im.sides_matched.count(k) || im.sides_deferred.count(k)) continue;
    // Made after the walk passed its record, or for a record made meanwhile: still owned.
    if (bpf_map_lookup_elem(files_fd, &k, &record) == 0) continue;
    if (im.skel->rodata->file_spill && bpf_map_lookup_elem(spill_fd, &k, &record) == 0) continue;
    // No record: a call that raced its record's removal made the entry again after the drain
    // took the one it had. Its values belong to no record left; counted, then deleted.
    iolens_more_tallies gone{};
    if (bpf_map_lookup_and_delete_elem(side_fd, &k, &gone) == 0) ++orphans;
  }
  im.sides_matched.clear();
  if (orphans == 0) return;
  if (Status st = add_user_stat(IOLENS_STAT_TALLY_ORPHANS, orphans); !st)
    spdlog::warn("could not count {} orphaned tally side entries: {}", orphans, st.message);
}

Status Loader::drain(int map_fd, const RemovePredicate& remove, const RecordSink& sink,
                     std::vector<iolens_file_key>* deferred, WalkPosition* at,
                     int64_t deadline_ns, bool sides) {
  Impl& im = *impl_;
  const int side_fd = bpf_map__fd(im.skel->maps.tallies_more);
  std::vector<iolens_file_key> final_keys, final_sides, now_keys, now_sides;
  iolens_more_tallies side{};
  // The side entry a record has as of now (for a record removed: nothing can change it after),
  // or nullptr.
  auto side_now = [&](const iolens_file_key& k, const iolens_file_counters& v,
                      bool take) -> const iolens_more_tallies* {
    if (!sides || !may_have_side(v)) return nullptr;
    const int rc = take ? bpf_map_lookup_and_delete_elem(side_fd, &k, &side)
                        : bpf_map_lookup_elem(side_fd, &k, &side);
    if (take) im.sides.erase(k);  // gone: no later record of this drain may take the copy
    if (rc != 0) return nullptr;
    im.sides_matched.insert(k);
    return &side;
  };
  // The side entry as read when the drain began, for a live record's snapshot.
  auto side_cached = [&](const iolens_file_key& k,
                         const iolens_file_counters& v) -> const iolens_more_tallies* {
    if (!sides || !may_have_side(v)) return nullptr;
    const auto it = im.sides.find(k);
    if (it == im.sides.end()) return nullptr;
    im.sides_matched.insert(k);
    return &it->second;
  };
  auto visit = [&](const iolens_file_key* keys, const Uninit<iolens_file_counters>* values,
                   std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto& k = keys[i];
      const iolens_file_counters& v = values[i].v;
      const Disposition d = remove(k, v);
      switch (d) {
        case Disposition::Keep:
          sink(k, im.widen(v, side_cached(k, v)), false);
          break;
        case Disposition::RemoveFinal:
        case Disposition::RemoveFinalNow: {
          // Its process has exited: read its side entry now (the drain's copy may be older
          // than its last calls), delete it with the record.
          const iolens_more_tallies* m = side_now(k, v, false);
          sink(k, im.widen(v, m), true);
          const bool now = d == Disposition::RemoveFinalNow;
          (now ? now_keys : final_keys).push_back(k);
          if (m) (now ? now_sides : final_sides).push_back(k);
          break;
        }
        case Disposition::Skip:
          side_cached(k, v);  // its side entry is still owned (for the sweep)
          break;
        case Disposition::RemoveLive: {
          iolens_file_counters value{};  // 1,352 bytes: copied only here, not for every record
          // The batch copy may be old: the file may have been reopened since. Ask again on the
          // current value, so a record in use is not taken from under the program updating it.
          if (bpf_map_lookup_elem(map_fd, &k, &value) != 0) break;
          if (const Disposition again = remove(k, value); again != Disposition::RemoveLive) {
            // Busy again: left in the kernel, and reported as the caller says of such a record
            // (a run's drains before the last leave live records unread).
            if (again == Disposition::Skip) side_cached(k, value);
            else sink(k, im.widen(value, side_cached(k, value)), false);
            break;
          }
          // Read and delete in one step so no update between the read and the delete is lost.
          // The side entry after the record: a call still on the record until its delete
          // finds the side entry there (a call after the side's delete makes a new one, which
          // the sweep finds without its record).
          bool taken = bpf_map_lookup_and_delete_elem(map_fd, &k, &value) == 0;
          if (!taken && (errno == kErrNotSupp || errno == EINVAL || errno == EOPNOTSUPP)) {
            // Kernels before 5.14 cannot lookup-and-delete hash maps: read, then delete.
            taken = bpf_map_lookup_elem(map_fd, &k, &value) == 0 &&
                    bpf_map_delete_elem(map_fd, &k) == 0;
          }
          if (taken) sink(k, im.widen(value, side_now(k, value, true)), true);
          break;
        }
      }
    }
  };
  // Each batch is handled before the next is read: the buffers hold one batch (~1 MB), not the
  // map (a burst's 60 MiB, grown by copies while it filled: a fifth of the daemon's time in a
  // 50,000-file burst, bench/README.md "The daemon's answers while it writes a record"), and
  // they are kept from one drain to the next so a drain touches no fresh memory.
  auto& keys = impl_->drain_keys;
  auto& values = impl_->drain_values;
  BatchWalk walk = BatchWalk::Unsupported;
  WalkPosition whole;
  WalkPosition& pos = at ? *at : whole;
  if (batch_ok_)
    walk = walk_batches(
        map_fd, keys, values, pos, [&](std::size_t n) { visit(keys.data(), values.data(), n); },
        [&] { return at && deadline_ns > 0 && clock_ns(CLOCK_MONOTONIC) >= deadline_ns; });
  if (walk == BatchWalk::Unsupported) {
    pos = {};  // never paused: this walk is whole
    batch_ok_ = false;
    // Key by key, the whole map first: deleting the key a walk stands on restarts the walk.
    std::vector<iolens_file_key> all_keys;
    std::vector<Uninit<iolens_file_counters>> all_values;
    read_one_by_one(map_fd, all_keys, all_values);
    visit(all_keys.data(), all_values.data(), all_keys.size());
  }
  const int walk_errno = errno;
  delete_keys(map_fd, now_keys);
  delete_batched(side_fd, now_sides, batch_ok_);
  for (const auto& k : now_sides) im.sides.erase(k);
  if (deferred) {
    deferred->insert(deferred->end(), final_keys.begin(), final_keys.end());
    im.sides_deferred.insert(final_sides.begin(), final_sides.end());
  } else {
    delete_keys(map_fd, final_keys);
    delete_batched(side_fd, final_sides, batch_ok_);
    for (const auto& k : final_sides) im.sides.erase(k);
  }
  // The records not read wait for the next drain.
  if (walk == BatchWalk::Failed)
    return Status::Error("reading the kernel's records failed part way: " +
                         errno_text(walk_errno), walk_errno);
  return Status::Ok();
}

Status Loader::drain_files(const RemovePredicate& remove, const RecordSink& sink,
                           std::vector<iolens_file_key>* deferred, WalkPosition* at,
                           int64_t deadline_ns) {
  const int files_fd = bpf_map__fd(impl_->skel->maps.files);
  // The side entries as a walk begins, for its live records (a walk in pieces reads them
  // once, not at each piece: a live record's side slots may then be a round older than its
  // own, which the next round mends; removed records read theirs afresh). A walk that begins
  // forgets which it matched, and one that reaches the map's end sweeps those it did not
  // (sweep_sides).
  if (!at || !at->resume) {
    read_sides();
    impl_->sides_matched.clear();
  }
  if (!impl_->skel->rodata->file_spill) {
    Status status = drain(files_fd, remove, sink, deferred, at, deadline_ns, true);
    if (status && (!at || !at->resume)) sweep_sides();
    return status;
  }
  // Two tiers: a run's, which drains whole (Loader::create refuses two tiers to the daemon,
  // which drains in pieces and defers its deletions).
  if (deferred || at)
    return Status::Error("a drain in pieces or with deferred deletions has one tier", EINVAL);
  // The spill tier first. A key in both (two threads made it at once, counted in
  // FILE_RECORDS_TWICE) is counted in `files` from then on: its spilled copy is taken out as a
  // live record is (read and deleted in one system call, so no update between a read and a
  // separate delete is lost) and handed over as removed. First, because a removed copy ends
  // the live part the sink holds for the key (Recorder::FileAcc::add_removed), which the
  // `files` copy then sets. Looked for only after such a race.
  const uint64_t twice = stat(IOLENS_STAT_FILE_RECORDS_TWICE);
  const bool look = twice != twice_seen_;
  iolens_file_counters other{};
  auto spill_remove = [&](const iolens_file_key& k, const iolens_file_counters& c) {
    if (look && bpf_map_lookup_elem(files_fd, &k, &other) == 0) return Disposition::RemoveLive;
    return remove(k, c);
  };
  Status spill = drain(bpf_map__fd(impl_->skel->maps.files_spill), spill_remove, sink, nullptr,
                       nullptr, 0, true);
  if (spill) twice_seen_ = twice;  // else looked for again at the next drain
  Status status = drain(files_fd, remove, sink, nullptr, nullptr, 0, true);
  if (spill && status) sweep_sides();
  return spill ? status : spill;
}

Status Loader::drain_others(const RemovePredicate& remove, const RecordSink& sink,
                            std::vector<iolens_file_key>* deferred, WalkPosition* at,
                            int64_t deadline_ns) {
  return drain(bpf_map__fd(impl_->skel->maps.others), remove, sink, deferred, at, deadline_ns,
               false);
}

void Loader::delete_files(const std::vector<iolens_file_key>& keys) {
  delete_keys(bpf_map__fd(impl_->skel->maps.files), keys);
  // Their side entries, after the records (as a drain does): those the drains handed over,
  // and those the side map holds now (a restarted daemon deletes the records its predecessor
  // handed over, whose side entries no drain of its own has seen).
  Impl& im = *impl_;
  if (keys.empty()) return;
  read_sides();
  std::vector<iolens_file_key> sides;
  for (const auto& k : keys) {
    const bool deferred = im.sides_deferred.erase(k) > 0;
    if (deferred || im.sides.erase(k)) sides.push_back(k);
  }
  delete_batched(bpf_map__fd(im.skel->maps.tallies_more), sides, batch_ok_);
}

static_assert(sizeof(Loader::NameId) == sizeof(iolens_name_id) &&
              offsetof(Loader::NameId, dev) == offsetof(iolens_name_id, dev) &&
              offsetof(Loader::NameId, gen) == offsetof(iolens_name_id, gen));

bool Loader::forgets_by_program() const {
  return forget_run_ok_ && bpf_program__autoload(impl_->skel->progs.forget_names);
}

std::size_t Loader::forget_all_names() {
  struct SeenKey {  // as in forget_names
    uint64_t ino;
    uint32_t dev, pad;
  };
  struct SeenFile {
    uint32_t gen, named;
  };
  const int fd = bpf_map__fd(impl_->skel->maps.seen_files);
  std::vector<SeenKey> keys;
  std::vector<SeenFile> values;
  std::vector<NameId> named;
  const BatchWalk r = walk_batches(fd, keys, values, [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      if (values[i].named) named.push_back({keys[i].ino, keys[i].dev, values[i].gen});
  });
  if (r == BatchWalk::Unsupported) {
    // One entry at a time (a kernel without batch reads of this map type).
    SeenKey k{}, next{};
    const SeenKey* at = nullptr;
    while (bpf_map_get_next_key(fd, at, &next) == 0) {
      SeenFile v{};
      if (bpf_map_lookup_elem(fd, &next, &v) == 0 && v.named) named.push_back({next.ino, next.dev, v.gen});
      k = next;
      at = &k;
    }
  }
  // As folded names are forgotten: in place, by the program where it runs (4,096 a call), and
  // only for the generation read (an inode reused meanwhile keeps its new entry).
  forget_names(named);
  return named.size();
}

void Loader::forget_names(std::span<const NameId> ids, bool by_program) {
  // bpf/iolens.bpf.c's seen_key and seen_file: (ino, dev, pad) -> (gen, named).
  struct SeenKey {
    uint64_t ino;
    uint32_t dev, pad;
  };
  struct SeenFile {
    uint32_t gen, named;
  };
  // The daemon's (one tier: seen_spill is a run's).
  const int fd = bpf_map__fd(impl_->skel->maps.seen_files);
  auto by_hand = [&](const NameId& id) {
    const SeenKey k{id.ino, id.dev, 0};
    SeenFile v{};
    // Cleared, not deleted: a path-based stat still finds the generation here.
    if (bpf_map_lookup_elem(fd, &k, &v) == 0 && v.gen == id.gen && v.named) {
      v.named = 0;
      bpf_map_update_elem(fd, &k, &v, BPF_EXIST);
    }
  };
  std::size_t done = 0;
  if (by_program && forgets_by_program()) {
    const int prog_fd = bpf_program__fd(impl_->skel->progs.forget_names);
    while (done < ids.size()) {
      const std::size_t n = std::min<std::size_t>(ids.size() - done, IOLENS_FORGET_NAMES_MAX);
      uint64_t args[2] = {reinterpret_cast<uintptr_t>(ids.data() + done), n};
      LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = args, .ctx_size_in = sizeof args);
      if (bpf_prog_test_run_opts(prog_fd, &run) != 0) {
        const int e = errno;
        // Out of memory or interrupted: this call's names by hand, the program next time.
        if (e == ENOMEM || e == EINTR || e == EAGAIN) break;
        forget_run_ok_ = false;
        spdlog::warn("the kernel refused to run forget_names ({}): folded names are cleared "
                     "with two system calls each from now on", errno_text(e));
        break;
      }
      done += std::min<std::size_t>(run.retval, n);
      if (run.retval < n) {
        // The program could not read this entry of the array (not expected: it is ours and
        // resident): that one by hand, counted, and the program goes on after it.
        if (forget_short_runs_++ == 0)
          spdlog::warn("forget_names could not read entry {} of {}; cleared by hand (counted "
                       "in names_cleared_by_hand)", done, ids.size());
        by_hand(ids[done++]);
        ++names_cleared_by_hand_;
      }
    }
  }
  for (const auto& id : ids.subspan(done)) by_hand(id);
  if (by_program) names_cleared_by_hand_ += ids.size() - done;
}

Loader::SelectionEntries Loader::selection_entries() const {
  SelectionEntries out;
  std::vector<uint32_t> values;
  bool batch_ok = batch_ok_;  // counted every second for the metrics: batches, not a key a call
  read_map(bpf_map__fd(impl_->skel->maps.cgroup_sel), out.traced, values, batch_ok);
  values.clear();
  read_map(bpf_map__fd(impl_->skel->maps.cgroup_excl), out.excluded, values, batch_ok);
  return out;
}

void Loader::delete_others(const std::vector<iolens_file_key>& keys) {
  delete_keys(bpf_map__fd(impl_->skel->maps.others), keys);
}

uint64_t Loader::ring_size() const { return bpf_map__max_entries(impl_->skel->maps.events); }

uint64_t Loader::ring_consumer_pos() const {
  return __atomic_load_n(impl_->ring_consumer, __ATOMIC_ACQUIRE);
}

uint64_t Loader::ring_producer_pos() const {
  return __atomic_load_n(impl_->ring_producer, __ATOMIC_ACQUIRE);
}

Status Loader::rewind_ring(uint64_t pos) {
  const uint64_t prod = ring_producer_pos();
  const uint64_t cons = ring_consumer_pos();
  if (pos > cons) return Status::Error("cannot rewind the ring forward", EINVAL);
  if (prod - pos > ring_size())
    return Status::Error("the ring ran " + std::to_string(prod - pos - ring_size()) +
                         " bytes past the saved position: records were overwritten", ERANGE);
  __atomic_store_n(impl_->ring_consumer, pos, __ATOMIC_RELEASE);
  return Status::Ok();
}

uint64_t Loader::stat(uint32_t index) const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0 || index >= IOLENS_NR_STATS) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  if (bpf_map_lookup_elem(bpf_map__fd(impl_->skel->maps.stats), &index, per_cpu.data()) != 0)
    return 0;
  uint64_t sum = 0;
  for (auto v : per_cpu) sum += v;
  return sum;
}

KernelStats Loader::stats() const {
  KernelStats out{};
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  const int fd = bpf_map__fd(impl_->skel->maps.stats);
  for (uint32_t i = 0; i < IOLENS_NR_STATS; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (auto v : per_cpu) out[i] += v;
  }
  for (const auto& [name, n] : program_misses()) out[kProgramMisses] += n;
  return out;
}

std::vector<std::pair<std::string, uint64_t>> kernel_losses(const KernelStats& st) {
  return {{"file_records", st[IOLENS_STAT_FILE_RECORDS_LOST]},
          {"other_records", st[IOLENS_STAT_OTHER_RECORDS_LOST]},
          {"events", st[IOLENS_STAT_EVENTS_LOST]},
          {"path_events", st[IOLENS_STAT_PATH_EVENTS_LOST]},
          {"process_events", st[IOLENS_STAT_PROC_EVENTS_LOST]},
          {"untraced_threads", st[IOLENS_STAT_TASK_STATE_FAILED]},
          {"paths_truncated", st[IOLENS_STAT_PATHS_TRUNCATED]},
          {"direct_inflight", st[IOLENS_STAT_DIRECT_INFLIGHT_LOST]},
          {"uring_inflight", st[IOLENS_STAT_URING_INFLIGHT_LOST]},
          {"block_records", st[IOLENS_STAT_BLOCK_RECORDS_LOST]},
          {"block_inflight", st[IOLENS_STAT_BLOCK_INFLIGHT_LOST]},
          {"dirtiers", st[IOLENS_STAT_DIRTIER_LOST]},
          {"tally_slots", st[IOLENS_STAT_TALLY_LOST]},
          {"tally_orphans", st[IOLENS_STAT_TALLY_ORPHANS]},
          {"block_untimed", st[IOLENS_STAT_BLOCK_UNTIMED] + st[IOLENS_STAT_BLOCK_UNTIMED_SWEPT]},
          {"program_misses", st[kProgramMisses]}};
}

uint64_t Loader::sweep_block_inflight(uint64_t min_age_ns, std::vector<iolens_block_key>* owners) {
  const int fd = bpf_map__fd(impl_->skel->maps.rq_inflight);
  if (fd < 0) return 0;
  std::vector<uint64_t> stale;
  {
    uint64_t key = 0, next = 0;
    bool first = true;
    iolens_rq_inflight f{};
    const uint64_t now = static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC));
    while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
      first = false;
      key = next;
      if (bpf_map_lookup_elem(fd, &key, &f) == 0 && core::block_request_untimed(f, now, min_age_ns))
        stale.push_back(key);
    }
  }
  uint64_t swept = 0;
  for (uint64_t key : stale) {
    iolens_rq_inflight f{};
    if (bpf_map_lookup_and_delete_elem(fd, &key, &f) != 0) continue;  // completed meanwhile
    const uint64_t now = static_cast<uint64_t>(clock_ns(CLOCK_MONOTONIC));
    if (core::block_request_untimed(f, now, min_age_ns)) {
      ++swept;
      if (owners) owners->push_back(f.key);
    } else {
      // A new request took the address between the two reads: give its entry back (unless
      // the kernel already made a newer one).
      bpf_map_update_elem(fd, &key, &f, BPF_NOEXIST);
    }
  }
  if (swept == 0) return 0;
  if (Status s = add_user_stat(IOLENS_STAT_BLOCK_UNTIMED_SWEPT, swept); !s)
    spdlog::warn("could not count {} untimed block requests: {}", swept, s.message);
  return swept;
}

Status Loader::add_user_stat(uint32_t index, uint64_t n) {
  if (index != IOLENS_STAT_BLOCK_UNTIMED_SWEPT && index != IOLENS_STAT_LOSSES_NO_JOB &&
      index != IOLENS_STAT_TALLY_ORPHANS)
    return Status::Error("stat " + std::to_string(index) + " is the kernel's to write", EINVAL);
  // The kernel never writes these slots, so adding to CPU 0's value cannot race with it.
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return Status::Error("cannot count the CPUs", EINVAL);
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  const int sfd = bpf_map__fd(impl_->skel->maps.stats);
  if (bpf_map_lookup_elem(sfd, &index, per_cpu.data()) != 0) {
    const int e = errno;
    return Status::Error(errno_text(e), e);
  }
  per_cpu[0] += n;
  if (bpf_map_update_elem(sfd, &index, per_cpu.data(), BPF_ANY) != 0) {
    const int e = errno;
    return Status::Error(errno_text(e), e);
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, uint64_t>> Loader::program_misses() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& p : impl_->progs) {
    const int fd = bpf_program__fd(p.prog);
    if (fd < 0) continue;  // left out or not loaded
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    out.emplace_back(p.name, info.recursion_misses);
  }
  return out;
}

}  // namespace iolens::loader
