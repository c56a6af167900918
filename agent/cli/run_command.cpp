// SPDX-License-Identifier: Apache-2.0
#include "cli/run_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <variant>

#include <spdlog/spdlog.h>

#include "capture/trace_session.hpp"
#include "cli/child.hpp"
#include "cli/daemon_run.hpp"
#include "cli/forwarding.hpp"
#include "cli/invoker.hpp"
#include "cli/output_file.hpp"
#include "control/unique_fd.hpp"
#include "core/events.hpp"
#include "core/recorder.hpp"
#include "exporters/darshan_log.hpp"
#include "exporters/trace_replay.hpp"
#include "exporters/units.hpp"
#include "exporters/json_report.hpp"
#include "exporters/text_report.hpp"

#ifndef IOLENS_VERSION
#define IOLENS_VERSION "0.0.0"
#endif

namespace iolens::cli {
namespace {

// IOLENS_FREE_AT_EXIT: set by CMake for IOLENS_SANITIZE builds; else guessed from the compiler's
// own macros (GCC has none for -fsanitize=leak alone: such a build must define it).
#ifndef IOLENS_FREE_AT_EXIT
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define IOLENS_FREE_AT_EXIT 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define IOLENS_FREE_AT_EXIT 1
#endif
#endif

/// Leaves `p` to the process's exit instead of freeing it: `iolens run` returns to main, which
/// ends the process, right after the run's outputs are written, and freeing a big run's recorder
/// and snapshot an allocation at a time (~100,000 for 40,000 file records) added 30-40 ms to
/// the run's wall time (bench/README.md "The run's exit"). Sanitizer builds free it, so their
/// leak checks still see everything else.
template <typename T>
void leave_to_exit(std::unique_ptr<T>& p) {
#ifdef IOLENS_FREE_AT_EXIT
  p.reset();
#else
  static_cast<void>(p.release());
#endif
}

/// Waits up to `ms` or until the process of `pidfd` ends (-1: no pidfd, the whole nap). A
/// forwarded signal (EINTR) ends it early too. True if the pidfd said the process ended.
bool nap_ms(unsigned ms, int pidfd) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(ms));
    if (n > 0) return true;
    if (n == 0 || errno == EINTR) return false;
  }
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
  return false;
}

std::optional<std::string> realpath_of(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) return std::nullopt;
  return std::string(buf);
}

void error_line(const std::string& msg) { std::fprintf(stderr, "iolens: %s\n", msg.c_str()); }

/// One output file of the run; no path: not asked for.
struct Output {
  const char* option;
  const std::string& path;
  int fd = -1;
  bool created = false;
};

/// Every output asked for is checked (lstat) before any is created or emptied, then opened (see
/// cli/output_file.hpp), as the invoking user under sudo. On any refusal or error one line says
/// why, what was created is removed again, and false comes back: the command must not run.
bool open_outputs(const std::vector<Output*>& outputs, bool force,
                  const std::optional<Invoker>& invoker) {
  FileAccessAs as(invoker);
  if (!as.status()) {
    error_line(as.status().message);
    return false;
  }
  // (dev, ino) of each output that exists: two options naming one file are refused before
  // --force empties it.
  std::vector<std::pair<const Output*, struct stat>> existing;
  const auto same_file = [&](const Output& o, const struct stat& st) {
    for (const auto& [other, ost] : existing)
      if (other != &o && ost.st_dev == st.st_dev && ost.st_ino == st.st_ino) {
        error_line(std::string(o.option) + " " + o.path + ": the same file as " + other->option +
                   " " + other->path);
        return true;
      }
    return false;
  };
  for (const Output* o : outputs) {
    if (o->path.empty()) continue;
    if (const OutputError e = check_output(o->path, force); !e.message.empty()) {
      error_line(output_error_line(o->option + (" " + o->path), e));
      return false;
    }
    struct stat st {};
    if (lstat(o->path.c_str(), &st) != 0) continue;
    if (same_file(*o, st)) return false;
    existing.emplace_back(o, st);
  }
  existing.clear();
  const auto give_up = [&] {
    for (Output* o : outputs) {
      if (o->fd < 0) continue;
      if (o->created) remove_created_output(o->fd, o->path);
      close(o->fd);
      o->fd = -1;
    }
    return false;
  };
  for (Output* out : outputs) {
    Output& o = *out;
    if (o.path.empty()) continue;
    OutputError e;
    o.fd = open_output(o.path, force, o.created, e);
    struct stat st {};
    // A file this run just created or opened, under another spelling of its name?
    if ((o.fd >= 0 ? fstat(o.fd, &st) : lstat(o.path.c_str(), &st)) == 0 && same_file(o, st))
      return give_up();
    if (o.fd < 0) {
      error_line(output_error_line(o.option + (" " + o.path), e));
      return give_up();
    }
    existing.emplace_back(&o, st);
  }
  return true;
}

/// Everything the kernel counted as lost, under the names docs/counters.md uses.
void record_kernel_stats(core::Recorder& rec, const loader::KernelStats& st) {
  for (const auto& [cause, n] : loader::kernel_losses(st)) rec.set_lost(cause, n);
}

/// The block layer per device for the processes of this run (the recorder's), read now.
std::vector<core::BlockDeviceSnapshot> run_block_devices(loader::Loader& loader,
                                                         const core::Recorder& rec) {
  std::set<std::pair<uint32_t, uint64_t>> procs;
  std::set<uint32_t> start_unknown;
  rec.visit_processes([&](const core::Recorder::ProcessView& p) {
    procs.emplace(p.key.pid, p.key.start_ns);
    if (p.key.start_ns == 0) start_unknown.insert(p.key.pid);
  });
  return core::rollup_blocks(
      loader.read_blocks(),
      [&](uint32_t tgid, uint64_t pstart) {
        return procs.count({tgid, pstart}) > 0 || start_unknown.count(tgid) > 0;
      },
      [](uint32_t major, uint32_t minor) { return core::block_device_name("/sys", major, minor); });
}

}  // namespace

int run_traced(const RunOptions& opts) {
  if (opts.command.empty()) {
    error_line("no command given: iolens run [options] -- CMD [ARGS...]");
    return 2;
  }
  std::string resolved;
  if (Status s = resolve_command(opts.command[0], resolved); !s) {
    error_line(s.message);
    return 127;
  }
  // Under sudo, the command runs as (and the outputs belong to) the user who ran sudo, with no
  // option to keep root: sudo sets SUDO_UID itself, so a sudoers rule for iolens can never be
  // turned into a root shell. A root shell opened by sudo unsets SUDO_* to trace as root.
  std::optional<Invoker> invoker;
  if (Status s = find_invoker(invoker); !s) {
    error_line(s.message);
    return 2;
  }
  // Open the outputs first: a bad path must fail before the job runs, not after.
  Output json{"--json", opts.json_path}, darshan{"--darshan", opts.darshan_path},
      trace_out{"--trace", opts.trace_path};
  std::vector<Output*> outputs{&json, &darshan, &trace_out};
  if (!open_outputs(outputs, opts.force, invoker)) return 2;
  int& json_fd = json.fd;
  int& darshan_fd = darshan.fd;
  int& trace_fd = trace_out.fd;
  struct FdCloser {
    int& fd;
    ~FdCloser() {
      if (fd >= 0) close(fd);
    }
  } json_closer{json_fd}, darshan_closer{darshan_fd}, trace_closer{trace_fd};

  // Counted by the node's iolensd when one answers: no program to load (cli/daemon_run.hpp).
  std::string no_daemon;  // why not, for -v and the record
  if (opts.daemon != DaemonUse::Never) {
    if (auto code = run_via_daemon(opts, invoker, json_fd, darshan_fd, no_daemon)) return *code;
    if (opts.daemon == DaemonUse::Require) {
      error_line("--daemon: " + no_daemon);
      return 1;
    }
    spdlog::debug("not counted by iolensd: {}; loading iolens's own programs", no_daemon);
  } else {
    no_daemon = "--local";
  }

  // The command's process first, suspended before exec: forked while iolens is small, before
  // the load's maps and buffers, its fork copies few page tables and leaves no page of the
  // load to copy on write (each such fault is 10-30 us on the test VM, bench/README.md).
  loader::PhaseTimes run_times;  // the child's start and iolens' exit (IOLENS_TIMING)
  SuspendedChild child;
  if (Status s = child.spawn(opts.command, invoker); !s) {
    error_line(s.message);
    return 1;
  }
  run_times.mark("child_start");
  Status st;
  auto loader = loader::Loader::create(opts.loader, st);
  if (!loader) {
    error_line(st.message);
    return 1;  // ~SuspendedChild kills and reaps the command, which never ran
  }
  spdlog::debug("programs: the {} build ({})", loader->program_build(),
                loader->program_build_note());
  run_times.restart();

  int64_t start_wall = 0;
  const core::ClockBase clock = run_clock_now(start_wall);

  install_forwarding();
  if (Status s = loader->trace_process(child.pid()); !s) {
    error_line(s.message);
    return 1;  // ~SuspendedChild kills and reaps the command, which never ran
  }
  const pid_t child_pid = child.pid();
  auto rec_owner = std::make_unique<core::Recorder>(static_cast<uint32_t>(child_pid),
                                                    static_cast<uint32_t>(getpid()));
  core::Recorder& rec = *rec_owner;
  rec.set_canonicalizer(realpath_of);
  // The trace: every call of the command's tree, from its first instruction (it is still
  // suspended), in the file opened above.
  std::unique_ptr<capture::TraceSession> trace;
  if (trace_fd >= 0) {
    trace::Meta meta;
    meta.producer = std::string("iolens ") + IOLENS_VERSION;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) meta.node = host;
    meta.target = "run";
    meta.job_kind = "run";
    meta.job_id = std::to_string(child_pid);
    meta.command = opts.command;
    meta.window_start_ns = clock.start_mono_ns;
    meta.mono_to_wall_ns = clock.mono_to_wall_ns;
    meta.ring_bytes = loader->trace_ring_size();
    meta.alignment_mounts = exporters::alignment_mounts_now();
    capture::SessionOptions so;
    so.max_bytes = opts.trace_max_bytes;
    Status ts;
    trace = capture::TraceSession::open_fd(trace_fd, meta, so, ts);
    if (!trace) {
      error_line("cannot write --trace " + opts.trace_path + ": " + ts.message);
      return 1;
    }
    if (Status s = loader->set_trace_mode(IOLENS_TRACE_ALL); !s) {
      error_line(s.message);
      return 1;
    }
  }
  std::vector<iolens_trace_record> trace_batch;
  uint64_t last_trace_sync = clock.start_mono_ns;
  const auto drain_trace = [&](uint64_t now, bool sync) {
    if (!trace) return;
    trace_batch.clear();
    loader->consume_trace([&](const iolens_trace_record& r) { trace_batch.push_back(r); });
    trace->on_ops(trace_batch);
    // Names and processes about once a second, so a file cut short names what it holds.
    if (sync || now - last_trace_sync >= 1000000000ULL) {
      last_trace_sync = now;
      trace->sync(rec);
    }
  };
  set_forwarded_child(child.pid());
  if (Status s = child.release(); !s) {
    set_forwarded_child(-1);
    error_line("cannot run '" + opts.command[0] + "': " + s.message);
    return s.err == ENOENT ? 127 : 126;
  }
  run_times.mark("child_start");

  uint64_t exits_pending = 0;  // processes that exited since the last drain
  const auto on_event = [&](std::span<const uint8_t> bytes) {
    core::DecodeResult r = core::decode_event(bytes);
    if (!r.ok) {
      rec.add_lost("decode_errors", 1);
      return;
    }
    if (r.job) return;  // job selection events: only the daemon selects jobs
    exits_pending += std::holds_alternative<core::ExitEvent>(r.event);
    rec.on_event(r.event);
  };
  uint64_t removed_records = 0;  // taken out of the kernel's files map by us
  // The map's fill: the kernel counts what it created, we what we took (never below 0: a failed
  // read of the count gives 0).
  auto map_fill = [&]() -> uint64_t {
    const uint64_t created = loader->stat(IOLENS_STAT_FILE_RECORDS_CREATED);
    return created > removed_records ? created - removed_records : 0;
  };
  // Timing off: records have no end times; idleness is told by unchanged counters.
  core::IdleClock idle_clock;
  core::IdleClock* idle = loader->timing() == IOLENS_TIMING_OFF ? &idle_clock : nullptr;
  // `last`: the drains at the end, which hand the recorder the live records too. Before them a
  // live record is left unread (Skip): `run` reports once, at the end, and the recorder would
  // only replace its copy at every drain (a tree lookup and a pack per record per drain, ~a
  // tenth of the agent's CPU on a DataLoader job, bench/README.md "The run's exit").
  const auto drain = [&](bool last) {
    loader->consume_events(on_event);  // exits and names first: they decide what to remove
    exits_pending = 0;
    // Records of exited processes are final: move them out of the kernel. When the map is half
    // full, also fold records that are idle (core::live_evictable): nothing is lost by refolding
    // them.
    using D = loader::Loader::Disposition;
    const D live = last ? D::Keep : D::Skip;
    const uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    const std::size_t in_map = map_fill();  // as the drain begins
    auto remove = [&](const iolens_file_key& k, const iolens_file_counters& c) {
      if (rec.exited(core::ProcKey{k.tgid, k.pstart_ns})) return D::RemoveFinal;
      if (core::drain_evictable(k, c, in_map, loader->max_file_records(), t0, idle))
        return D::RemoveLive;
      return live;
    };
    const uint64_t removed_before = removed_records;
    std::size_t seen = 0;
    if (idle) idle->begin();
    const Status read = loader->drain_files(remove, [&](const auto& k, const auto& c, bool removed) {
      rec.on_file(k, c, removed);
      removed_records += removed;
      ++seen;
    });
    if (!read) spdlog::warn("{}: some file records were not read in this drain", read.message);
    if (idle) idle->end();
    spdlog::debug("drain: {} file records read, {} moved out, {} us", seen,
                  removed_records - removed_before, (now_ns(CLOCK_MONOTONIC) - t0) / 1000);
    loader->drain_others(
        [&](const iolens_file_key& k, const iolens_file_counters&) {
          return rec.exited(core::ProcKey{k.tgid, k.pstart_ns}) ? D::RemoveFinal : live;
        },
        [&](const auto& k, const auto& c, bool removed) { rec.on_other(k, c, removed); });
  };

  int wait_status = 0;
  bool reaped = false;
  uint64_t last_drain = now_ns(CLOCK_MONOTONIC);
  // Readable once the command's process ends: the loop sees it at once, not at its next nap's
  // end (up to 10 ms of every run, ~8 of the ~15 ms a trivial command's own time had beyond
  // its steps, bench/README.md). Our child (not reaped before the loop does it), so the pid
  // names it. Linux 5.3+; without, naps.
  control::UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, child.pid(), 0)));
  bool ended = false;  // the pidfd said so at the last nap
  for (;;) {
    // Signals are held while the child is reaped, so none is forwarded to a reused pid.
    sigset_t hold, old;
    sigemptyset(&hold);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&hold, sig);
    sigprocmask(SIG_BLOCK, &hold, &old);
    const pid_t r = waitpid(child.pid(), &wait_status, WNOHANG);
    const int wait_errno = errno;
    if (r == child.pid()) set_forwarded_child(-1);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (r == child.pid()) {
      reaped = true;
      break;
    }
    if (r == 0 && ended) {
      // Ended but not ours to reap yet (a tracer such as strace -f collects it first): the
      // pidfd stays readable, and polling it would spin. Naps from here.
      pidfd.reset();
    }
    if (r < 0 && wait_errno != EINTR) {
      error_line(std::string("cannot wait for the command: ") + std::strerror(wait_errno));
      break;
    }
    loader->consume_events(on_event);
    const uint64_t now = now_ns(CLOCK_MONOTONIC);
    drain_trace(now, false);
    // Drain on the clock when processes have exited (their records are final and leave the
    // kernel), and at once when the kernel map is half full: a burst of new files between two
    // drains must not find it full. Live records are read only at the end: `run` reports once,
    // and reading them every second cost the agent as much CPU as the job's programs.
    const uint64_t in_map = map_fill();
    if ((exits_pending > 0 && now - last_drain >= opts.drain_interval_ms * 1000000ULL) ||
        in_map * 2 > loader->max_file_records()) {
      drain(false);
      last_drain = now;
    }
    // Poll faster while the map is filling, so a burst of new files is drained in time.
    ended = nap_ms(in_map * 4 > loader->max_file_records() ? 1 : 10, pidfd.get());
  }
  set_forwarded_child(-1);
  const uint64_t end_mono = now_ns(CLOCK_MONOTONIC);
  run_times.restart();
  drain(true);
  drain(true);  // the first pass may have learnt of exits; the second moves their records out
  // Block requests of the run counted but not timed now (still in flight, or their completion
  // never reached block_rq_complete): lost.block_untimed, so that requests = timed + untimed.
  loader->sweep_block_inflight(0);
  record_kernel_stats(rec, loader->stats());
  run_times.mark("final_drain");
  std::string trace_note;  // said after the summary
  int trace_read_fd = -1;  // the trace file, open for reading, for the Darshan log's DXT
  FdCloser trace_read_closer{trace_read_fd};
  if (trace) {
    drain_trace(end_mono, false);
    trace::Losses losses;
    losses.produced = loader->stat(IOLENS_STAT_TRACE_RECORDS);
    losses.ring_full = loader->stat(IOLENS_STAT_TRACE_LOST);
    rec.set_lost("trace_records", losses.ring_full);
    const Status ts = trace->finish(rec, losses, end_mono);
    // The Darshan log's DXT reads the trace back: through this descriptor's file, never again
    // through the path (which may name something else by now).
    if (ts && darshan_fd >= 0)
      trace_read_fd = open(("/proc/self/fd/" + std::to_string(trace_fd)).c_str(),
                           O_RDONLY | O_CLOEXEC);
    if (!ts || close(trace_fd) != 0) {
      trace_fd = -1;
      error_line("writing --trace " + opts.trace_path + " failed: " +
                 (ts ? std::string(std::strerror(errno)) : ts.message));
      return 1;
    }
    trace_fd = -1;
    rec.set_lost("trace_size_limit", trace->ops_dropped());  // present, 0 included
    if (!opts.quiet)
      trace_note = ("trace: " + exporters::human_count(trace->ops_written()) + " calls, " +
                 exporters::human_bytes(trace->bytes_written()) + " in " + opts.trace_path +
                 "; lost: " + exporters::human_count(losses.ring_full) + " (ring full), " +
                 exporters::human_count(trace->ops_dropped()) + " (size limit)");
  }

  if (trace) run_times.mark("trace_finish");
  auto snap_owner = std::make_unique<core::RunSnapshot>(rec.snapshot(clock));
  core::RunSnapshot& snap = *snap_owner;
  snap.block = run_block_devices(*loader, rec);
  snap.command = opts.command;
  snap.collector = "local";
  snap.collector_note = no_daemon;
  snap.kernel_records = {loader->fast_file_records(),
                         loader->stat(IOLENS_STAT_FILE_RECORDS_CREATED),
                         loader->stat(IOLENS_STAT_FILE_RECORDS_SPILLED)};
  snap.timing = loader->timing() == IOLENS_TIMING_OFF ? "off" : "exact";
  snap.timing_note = loader->timing_note();
  for (const auto& p : loader->programs())
    if (!p.attached) snap.not_attached[p.name] = p.error.empty() ? "not attached" : p.error;
  if (reaped)
    snap.exit_code =
        WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  snap.start_ns = start_wall;
  snap.end_ns = static_cast<int64_t>(end_mono) + clock.mono_to_wall_ns;
  run_times.mark("snapshot");

  RunOutputExtras extras;
  extras.note = trace_note;
  extras.mark = [&](const char* step) { run_times.mark(step); };
  if (!opts.trace_path.empty()) {
    // With --trace, the log also has DXT_POSIX: every read and write, from the trace file
    // just written (read back whole: the file is the one copy of the records).
    extras.dxt = [&]() -> std::optional<exporters::DarshanDxt> {
      trace::ReadResult tr;
      if (trace_read_fd >= 0)
        tr = trace::read_trace_fd(trace_read_fd);
      else
        tr.status = Status::Error("it could not be opened again");
      if (tr.status) return exporters::dxt_of_trace(tr.trace, snap);
      error_line("--darshan " + opts.darshan_path + " without DXT: cannot read back --trace " +
                 opts.trace_path + ": " + tr.status.message);
      return std::nullopt;
    };
  }
  const int status =
      write_run_outputs(opts, snap, invoker, child_pid, json_fd, darshan_fd, extras);
  if (loader::PhaseTimes::wanted()) {
    const std::string start = loader->start_times().line();
    loader.reset();  // what the return would do: detach and close everything, timed
    run_times.mark("teardown");
    // iolens' own CPU (its threads only, not the command's: RUSAGE_SELF), after teardown
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    const auto ms = [](const timeval& t) { return t.tv_sec * 1000.0 + t.tv_usec / 1000.0; };
    std::fprintf(stderr,
                 "iolens: timing: start: %s\niolens: timing: exit: %s\n"
                 "iolens: timing: cpu: user=%.2f system=%.2f\n",
                 start.c_str(), run_times.line().c_str(), ms(ru.ru_utime), ms(ru.ru_stime));
  }
  leave_to_exit(snap_owner);
  leave_to_exit(rec_owner);
  return status;
}

}  // namespace iolens::cli
