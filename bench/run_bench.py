#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""iolens overhead benchmark: traced vs untraced, as ratios measured in one invocation.

Not a test: nothing here passes or fails on a timing. It prints a markdown table and writes the
raw samples and medians to --out (JSON). Must run as root (iolens loads BPF programs).

    /usr/bin/python3 bench/run_bench.py [--iolens PATH] [--rounds 9] [--quick] [--out FILE]

Cases (see bench/README.md):
  traced   io_loops (or the PyTorch job) run untraced vs under `iolens run -q -- ...`; the two
           alternate in every round, the order flipping each round (U T, T U, U T, ...).
  traced+trace (--trace) a third mode in the same rounds, `iolens run -q --trace T --json J --
           ...` (U T X, X T U, ...), against the same untraced runs (the traced runs then write
           --json J too); per run, the trace's records produced, in the file and lost, and its
           size. A workload that lost records to a full ring runs once more with a larger ring.
  darshan (--darshan PREFIX) a further mode in the same rounds: the loop or the PyTorch job run
           under Darshan's preload (LD_PRELOAD=PREFIX/lib/libdarshan.so, DARSHAN_ENABLE_NONMPI=1,
           its logs into a scratch directory emptied after each run), against the same untraced
           runs: the peer iolens replaces, measured beside it (bench/README.md "Darshan, the
           peer").
  timing-off (--timing-off) a further mode in the same rounds: `iolens run -q --timing off --
           ...` (no sys_enter program; docs/counters.md "Timing"); with the outside case, a
           second outside case, "outside, timing off", with the background iolens so started.
  outside  io_loops run untraced with no iolens at all vs while `iolens run -q -- sleep 600` is
           attached in the background (the loops are outside its traced tree). The background
           iolens is started and stopped once per round; each round runs one block of every loop
           without it and one block with it, the blocks' order flipping each round.
  variants (--variants) the same outside measurement with minimal BPF programs from
           bench/variants.bpf.c attached, to show what each layer costs every process.
  bpf-stats (--bpf-stats) an untimed traced run of each workload with kernel.bpf_stats_enabled:
           average ns per run of each iolens program.
Every timing is the loop's own (io_loops times only its loop); the PyTorch job's epoch time is the
interval between consecutive "epoch N:" lines as they arrive (epochs 1.., so process start, imports
and iolens' start and exit are excluded), plus the whole run's wall time for reference.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# `sudo run_bench.py`: the traced runs must run as the untraced ones do (as root), not as the
# user who ran sudo, which is what `iolens run` does under sudo.
for _var in ("SUDO_UID", "SUDO_GID", "SUDO_USER", "SUDO_COMMAND"):
    os.environ.pop(_var, None)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TORCH_JOB = os.path.join(REPO, "tests", "workloads", "torch_job.py")
PYTHON = "/usr/bin/python3"  # Debian's: has torch and numpy (a pyenv shim may not)

# Targets from the issue, for the README's "met?" column. Informative only: no exit status
# depends on them.
TARGETS = {
    ("traced", "read4k"): ("ratio", 1.35, "<= x1.35 (~250 ns per traced call)"),
    ("traced", "smallfiles"): ("ratio", 1.10, "<= x1.10"),
    ("traced", "torch_epoch"): ("ratio", 1.01, "< 1% per epoch"),
    ("outside", "getppid"): ("extra_ns", 60.0, "< +60 ns per syscall"),
    ("outside", "read4k"): ("extra_ns", 60.0, "< +60 ns per syscall"),
}


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# Extra options of every `iolens run` (--iolens-arg), e.g. --disable-program=NAME to measure
# what one optional program costs.
RUN_ARGS = []


def run_ok(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def find_iolens(arg):
    cands = [arg] if arg else []
    cands += [os.environ.get("IOLENS", ""), "/tmp/build-bench/agent/cli/iolens",
              os.path.join(REPO, "build", "agent", "cli", "iolens")]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("run_bench: no iolens binary; build it (see bench/README.md) and pass --iolens PATH")


def sync_disks():
    """Write back dirty pages so one run's writeback does not land in the next one's timing."""
    os.sync()


def bpf_progs():
    try:
        out = subprocess.run(["bpftool", "-j", "prog", "show"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=20).stdout
        return json.loads(out or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def prog_owners(pids=None):
    """prog id -> ["comm(pid)"...] of the processes holding it (a program or link fd), from
    /proc/PID/fdinfo (Debian's bpftool cannot show owners)."""
    owners = {}
    if pids is None:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    for pid in pids:
        base = "/proc/%d/fdinfo" % pid
        try:
            fds = os.listdir(base)
        except OSError:
            continue
        for fd in fds:
            try:
                with open(os.path.join(base, fd)) as f:
                    text = f.read()
            except OSError:
                continue
            m = re.search(r"^prog_id:\s*(\d+)", text, re.M)
            if m:
                owners.setdefault(int(m.group(1)), set()).add("%s(%d)" % (comm_of(pid), pid))
    return owners


def foreign_tracing_progs():
    """Syscall/kernel-hooking BPF programs held right now by a live process. Called only when
    none of this benchmark's own (iolens, variant loader) runs, so any found belong to someone
    else and tax the 'untraced' baselines too; the result records them per round. Programs no
    process holds are ignored: they are being freed after detach (or pinned, which is rare)."""
    progs = bpf_progs()
    if progs is None:
        return None
    kinds = {"tracing", "raw_tracepoint", "tracepoint", "kprobe", "perf_event"}
    hooked = {p["id"]: p for p in progs if p.get("type") in kinds}
    if not hooked:
        return []
    owners = prog_owners()
    return ["%s:%s %s" % (hooked[i].get("type"), hooked[i].get("name", "?"),
                          ",".join(sorted(owners[i]))) for i in sorted(hooked) if i in owners]


def cpu_busy(interval=0.5):
    """Fraction of all CPUs busy over `interval` (the benchmark itself is idle meanwhile)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(interval)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(limit, max_wait):
    """Waits (at most max_wait s) until other work leaves the CPUs mostly idle. Returns the
    busy fraction seen last. Lowers noise on a shared machine; interleaving does the rest."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy > limit and time.monotonic() < deadline:
        time.sleep(0.5)
        busy = cpu_busy()
    return busy


def round_env(case, r, a):
    busy = wait_quiet(a.quiet_busy, a.quiet_wait)
    foreign = foreign_tracing_progs()
    if foreign:
        log("warning: %s round %d: tracing BPF programs of other processes are loaded: %s"
            % (case, r, "; ".join(sorted(set(foreign)))))
    return {"case": case, "round": r, "loadavg": loadavg(), "cpu_busy_before": round(busy, 3),
            "foreign_tracing_progs": foreign}


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ---------------------------------------------------------------------------------------------
# io_loops

def build_io_loops(tmp):
    exe = os.path.join(tmp, "io_loops")
    run_ok(["gcc", "-O2", "-Wall", "-o", exe, os.path.join(HERE, "io_loops.c")])
    return exe


def run_loop(argv):
    """Runs one io_loops command (possibly wrapped by iolens); returns its JSON line."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError("%s printed no result: %r" % (" ".join(argv), p.stdout))
    return json.loads(lines[-1])


class Loop:
    """One io_loops workload. calls_per_op: syscalls per op, to turn ns/op into ns/call."""

    def __init__(self, name, argv, unit, calls_per_op, before=None, repeat=1):
        self.name, self.argv, self.unit, self.calls_per_op = name, argv, unit, calls_per_op
        self.before = before  # called (untimed) before every run, e.g. sync
        # Short loops (smallfiles: ~40 ms) run `repeat` untraced/traced pairs per round, so
        # that one preemption by another tenant cannot move the median.
        self.repeat = repeat

    def run(self, prefix):
        """One run with `prefix` (nothing, or `iolens run ... --`) in front; io_loops' JSON."""
        if self.before:
            self.before()
        return run_loop(prefix + self.argv)


def prepare_loops(exe, work, sizes, only):
    read_file = os.path.join(work, "read4k.dat")
    with open(read_file, "wb") as f:
        f.write(os.urandom(sizes["read_file_mb"] << 20))
    sf_dir = os.path.join(work, "sf")
    run_ok([exe, "mkfiles", sf_dir, str(sizes["smallfiles"]), "100"])
    ckpt_file = os.path.join(work, "ckpt.dat")
    os.sync()
    # Cache: read everything once (the loops measure cached reads).
    for path in [read_file] + [os.path.join(sf_dir, n) for n in sorted(os.listdir(sf_dir))]:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    loops = [
        Loop("read4k", [exe, "read4k", read_file, str(sizes["read4k_n"]), "pread"],
             "pread of 4 KiB", 1),
        Loop("randread", [exe, "read4k", read_file, str(sizes["read4k_n"]), "rand"],
             "pread of 4 KiB at a random offset", 1),
        Loop("getppid", [exe, "getppid", str(sizes["getppid_n"])], "getppid()", 1),
        Loop("smallfiles", [exe, "smallfiles", sf_dir, str(sizes["smallfiles"])],
             "file (open, read 100 KiB, read EOF, close)", 4, repeat=sizes["smallfiles_repeat"]),
        Loop("ckpt", [exe, "ckpt", ckpt_file, str(sizes["ckpt_mb"])], "1 MiB write (+fsync)",
             1, before=sync_disks),
    ]
    return [lp for lp in loops if lp.name in only]


# ---------------------------------------------------------------------------------------------
# Background processes: iolens tracing only a sleep, or a variant loader

def children_of(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm_of(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


class BackgroundIolens:
    """`iolens run -q -- sleep 600`: programs attached, tracing only the sleep."""

    def __init__(self, iolens, extra=()):
        self.iolens = iolens
        self.extra = list(extra)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.iolens, "run", "-q"] + RUN_ARGS + self.extra +
                                     ["--", "sleep", "600"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        # iolens attaches before it releases the command: once the child has exec'd sleep,
        # the programs are live.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("background iolens exited: %s" % self.proc.stderr.read())
            if any(comm_of(c) == "sleep" for c in children_of(self.proc.pid)):
                time.sleep(0.05)
                return
            time.sleep(0.01)
        self.stop()
        raise RuntimeError("background iolens did not start its command within 20 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # forwarded to sleep; iolens then exits
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class BackgroundVariant:
    """bench/variant_loader OBJ PROG...: minimal programs attached until stdin closes."""

    def __init__(self, loader, obj, progs):
        self.argv = [loader, obj] + list(progs)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            err = self.proc.stderr.read()
            self.proc.wait()
            raise RuntimeError("variant loader failed: %s %s" % (line, err))

    def stop(self):
        if self.proc:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        self.proc = None


# ---------------------------------------------------------------------------------------------
# PyTorch job

def self_cpu_s(pid):
    """utime + stime of the process itself (not its children), in seconds; None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def torch_run(argv, watch_self_cpu=False):
    """Runs the job; returns (wall_s, epoch intervals by line arrival, printed epoch times,
    CPU seconds of the top process itself: with iolens on top, the agent's own cost)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as errf:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, text=True, bufsize=1)
        cpu = [None]
        done = threading.Event()

        def watch():  # last sample before exit; misses at most the final 0.1 s
            while not done.is_set():
                v = self_cpu_s(p.pid)
                if v is not None:
                    cpu[0] = v
                done.wait(0.1)
        th = threading.Thread(target=watch, daemon=True) if watch_self_cpu else None
        if th:
            th.start()
        arrivals, printed = [], []
        for line in p.stdout:
            m = re.match(r"epoch (\d+):.*?, ([0-9.]+)s, saved", line)
            if m:
                arrivals.append(time.monotonic())
                printed.append(float(m.group(2)))
        rc = p.wait()
        wall = time.monotonic() - t0
        done.set()
        if th:
            th.join()
        if rc != 0:
            errf.seek(0)
            raise RuntimeError("torch job failed (%d): %s" % (rc, errf.read().strip()[-2000:]))
    intervals = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return wall, intervals, printed, cpu[0]


# ---------------------------------------------------------------------------------------------
# The traced case's modes, and trace mode (--trace): `iolens run -q --trace T --json J -- ...`

MODES = ("untraced", "traced", "traced+trace")
TRACE_MODE = MODES[2]
DARSHAN_MODE = "darshan"
TIMING_OFF_MODE = "timing-off"
TRACE_SLOT = 96  # ring bytes per record: the 88-byte record behind the ring's 8-byte header
TRACE_RING_MAX = 1 << 30  # iolens' largest --trace-ring-size


def flipped(modes, r):
    """A round's order: as given in even rounds, reversed in odd ones (U T X, X T U, ...)."""
    return tuple(modes) if r % 2 == 0 else tuple(reversed(modes))


def parse_size(text):
    """'16M' -> bytes (K, M, G are powers of 1024, as iolens reads them)."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise ValueError("not a size: %r" % text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def size_text(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, suffix)
    return str(n)


def trace_header(iolens, path):
    """The first line of `iolens convert PATH --to jsonl -o -` (losses, counts). The converter
    writes it only after reading the whole file and checking it (checksums, the trailer's counts
    against the records), so the op lines after it are not read: the converter is stopped."""
    with tempfile.TemporaryFile("w+") as errf:
        p = subprocess.Popen([iolens, "convert", path, "--to", "jsonl", "-o", "-"],
                             stdout=subprocess.PIPE, stderr=errf, text=True)
        line = p.stdout.readline()
        p.kill()
        p.wait()
        p.stdout.close()
        if not line:
            errf.seek(0)
            raise RuntimeError("iolens convert %s --to jsonl: %s" % (path, errf.read().strip()))
    head = json.loads(line)
    if head.get("type") != "trace":
        raise RuntimeError("iolens convert %s: first line is not the trace line: %r"
                           % (path, line[:200]))
    return head


def trace_problems(run):
    """What a traced+trace run lost or got wrong, in words; [] when every record is in the file."""
    out = []
    for key, what in (("ring_full", "ring full"), ("size_limit", "size limit"),
                      ("other", "other causes")):
        if run[key]:
            out.append("%d records LOST (%s)" % (run[key], what))
    if run["produced"] != run["in_file"] + run["ring_full"] + run["size_limit"] + run["other"]:
        out.append("produced %d != in file %d + lost" % (run["produced"], run["in_file"]))
    if (run["json_lost_trace_records"] or 0) != run["ring_full"] or \
            (run["json_lost_trace_size_limit"] or 0) != run["size_limit"]:
        out.append("the JSON record's lost.trace_records/trace_size_limit (%s/%s) differ from "
                   "the trailer's" % (run["json_lost_trace_records"],
                                      run["json_lost_trace_size_limit"]))
    if not run["complete"]:
        out.append("the trace file is not complete")
    return out


class Runner:
    """The command prefix of each mode, and what a traced+trace run's files hold. With trace
    mode on, the traced runs write the JSON record too, so that the two traced modes differ
    only by --trace (the PyTorch job's record is ~110 MB: seconds of the agent's time at exit)."""

    def __init__(self, iolens, work, ring, trace, darshan=None):
        self.iolens, self.ring, self.with_json = iolens, ring, trace
        self.trace = os.path.join(work, "run.trace")
        self.json = os.path.join(work, "run.json")
        self.darshan_lib = os.path.join(darshan, "lib", "libdarshan.so") if darshan else None
        self.darshan_logs = os.path.join(work, "darshan-logs")

    def prefix(self, mode, ring=None):
        if mode == "untraced":
            return []
        if mode == DARSHAN_MODE:
            # Darshan's non-MPI runtime, as its documentation runs it: preloaded, enabled by
            # DARSHAN_ENABLE_NONMPI; the log directory by both of its environment names
            os.makedirs(self.darshan_logs, exist_ok=True)
            return ["env", "LD_PRELOAD=" + self.darshan_lib, "DARSHAN_ENABLE_NONMPI=1",
                    "DARSHAN_LOG_DIR_PATH=" + self.darshan_logs,
                    "DARSHAN_LOGPATH=" + self.darshan_logs]
        json_opt = ["--json", self.json] if self.with_json else []
        if mode == "traced":
            return [self.iolens, "run", "-q"] + RUN_ARGS + json_opt + ["--"]
        if mode == TIMING_OFF_MODE:
            return [self.iolens, "run", "-q", "--timing", "off"] + RUN_ARGS + json_opt + ["--"]
        return [self.iolens, "run", "-q", "--trace", self.trace] + RUN_ARGS + json_opt + [
            "--trace-ring-size", ring or self.ring, "--"]

    def after(self, mode, what):
        """After a run (untimed): for traced+trace, its trace's numbers (collect); removes the
        run's files."""
        if mode == TRACE_MODE:
            return self.collect(what)
        if mode == DARSHAN_MODE:
            shutil.rmtree(self.darshan_logs, ignore_errors=True)
            return None
        if self.with_json and mode in ("traced", TIMING_OFF_MODE):
            os.unlink(self.json)
        return None

    def collect(self, what):
        """After a traced+trace run: records produced, in the file and lost (the trace's header
        as `iolens convert` reads it, and the JSON record's `lost`), the file's size. Removes
        both files; warns at once when records were lost."""
        try:
            size = os.path.getsize(self.trace)
            with open(self.json) as f:
                lost = json.load(f)["lost"]
            head = trace_header(self.iolens, self.trace)
        finally:
            for path in (self.trace, self.json):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        losses = head["losses"]
        run = {"produced": losses["produced"], "in_file": head["counts"]["ops"],
               "ring_full": losses["ring_full"], "size_limit": losses["size_limit"],
               "other": losses["other"], "json_lost_trace_records": lost.get("trace_records"),
               "json_lost_trace_size_limit": lost.get("trace_size_limit"),
               "file_bytes": size, "complete": head["complete"]}
        problems = trace_problems(run)
        if problems:
            log("WARNING: %s, traced+trace run: %s" % (what, "; ".join(problems)))
        return run


def trace_ring_retries(runner, trace_runs, loops, job):
    """For each workload that lost records to a full ring: one more traced+trace run with a
    ring that could have held its largest loss on top of the first ring (a power of two, at
    least 4x the first, at most iolens' 1 GiB)."""
    base = parse_size(runner.ring)
    by_name = {lp.name: lp for lp in loops}
    out = {}
    for name, runs in trace_runs.items():
        lost = max(x["ring_full"] for x in runs)
        if not lost:
            continue
        need = max(4 * base, base + lost * TRACE_SLOT)
        ring = size_text(min(1 << (need - 1).bit_length(), TRACE_RING_MAX))
        log("%s lost up to %d records with a %s ring: one run with --trace-ring-size %s"
            % (name, lost, runner.ring, ring))
        prefix = runner.prefix(TRACE_MODE, ring)
        if name == "torch":
            extra = {"loop_s": torch_run(prefix + job)[0]}
        else:
            res = by_name[name].run(prefix)
            extra = {"loop_s": res["ns"] / 1e9, "ops": res["ops"], "ns_per_op": res["ns_per_op"]}
        out[name] = dict(runner.collect("%s with a %s ring" % (name, ring)), ring=ring, **extra)
    return out


def trace_summary(name, runs, summaries, retry):
    """One workload's traced+trace runs: records (per run, per op, per second of the loop),
    losses, file size, and what trace mode adds to counters only: median traced+trace against
    median traced, per record (per op / records per op for io_loops; per run / records per run
    for the PyTorch job, whose 'loop' is the whole run)."""
    bench = "torch_wall" if name == "torch" else name
    med = {s["case"]: s["median_traced"] for s in summaries if s["bench"] == bench}
    t, x = med["traced"], med[TRACE_MODE]
    produced = [r["produced"] for r in runs]
    in_file = sum(r["in_file"] for r in runs)
    per_op = None
    if name == "torch":
        extra_ns = (x - t) * 1e9 / statistics.median(produced)
    else:
        per_op = statistics.median(r["produced"] / r["ops"] for r in runs)
        extra_ns = (x - t) / per_op if per_op >= 0.5 else None  # getppid: no I/O records
    rates = [r["produced"] / r["loop_s"] for r in runs]
    row = {"bench": name, "runs": len(runs), "records_median": statistics.median(produced),
           "records_per_op": per_op, "rate_median": statistics.median(rates),
           "rate_max": max(rates), "produced_sum": sum(produced), "in_file_sum": in_file,
           "ring_full_sum": sum(r["ring_full"] for r in runs),
           "size_limit_sum": sum(r["size_limit"] for r in runs),
           "other_sum": sum(r["other"] for r in runs),
           "runs_with_problems": sum(1 for r in runs if trace_problems(r)),
           "file_bytes_median": statistics.median(r["file_bytes"] for r in runs),
           "bytes_per_record": sum(r["file_bytes"] for r in runs) / in_file if in_file else None,
           "x_vs_traced": x / t, "extra_ns_per_record": extra_ns, "ring_retry": retry}
    if name == "torch":
        ep = {s["case"]: s["median_traced"] for s in summaries if s["bench"] == "torch_epoch"}
        row["x_vs_traced_epoch"] = ep[TRACE_MODE] / ep["traced"]
    return row


def fmt_bytes(n):
    return "%.2f MB" % (n / 1e6) if n >= 1e6 else "%.1f kB" % (n / 1e3)


def trace_table(rows):
    out = ["| loop | runs | records per run (median) | records per op | records/s of the loop "
           "(median / max) | in the files (all runs) | lost: ring full (runs with losses) | "
           "lost: size limit | file per run (median) | bytes per record | traced+trace vs "
           "traced (median) | extra ns per record |", "|" + "---|" * 12]
    for r in rows:
        vs = "x%.3f" % r["x_vs_traced"]
        if "x_vs_traced_epoch" in r:
            vs = "x%.3f per epoch, %s per run" % (r["x_vs_traced_epoch"], vs)
        out.append("| %s | %d | %s | %s | %s / %s | %s | %s (%d) | %s | %s | %s | %s | %s |" % (
            "torch (whole run)" if r["bench"] == "torch" else r["bench"], r["runs"],
            "{:,.0f}".format(r["records_median"]),
            "-" if r["records_per_op"] is None else "%.3f" % r["records_per_op"],
            "{:,.0f}".format(r["rate_median"]), "{:,.0f}".format(r["rate_max"]),
            "{:,}".format(r["in_file_sum"]), "{:,}".format(r["ring_full_sum"]),
            r["runs_with_problems"], "{:,}".format(r["size_limit_sum"]),
            fmt_bytes(r["file_bytes_median"]),
            "-" if r["bytes_per_record"] is None else "%.1f" % r["bytes_per_record"], vs,
            "-" if r["extra_ns_per_record"] is None else "%+.0f" % r["extra_ns_per_record"]))
    return "\n".join(out)


def trace_verdict(rows, ring):
    """Plain lines on losses: loud when any run lost records, with the larger ring's outcome."""
    lossy = [r for r in rows if r["runs_with_problems"]]
    if not lossy:
        return ["Trace mode: no record lost: every traced+trace run's file holds every record "
                "the kernel produced (%s records in %d runs, --trace-ring-size %s)."
                % ("{:,}".format(sum(r["in_file_sum"] for r in rows)),
                   sum(r["runs"] for r in rows), ring)]
    out = ["!" * 78, "!!! TRACE RECORDS LOST (--trace-ring-size %s): capture did not keep up"
           % ring]
    for r in lossy:
        out.append("!!! %s: %d of %d runs lost records: %s ring full, %s size limit, %s other "
                   "(of %s produced)" % (r["bench"], r["runs_with_problems"], r["runs"],
                                          "{:,}".format(r["ring_full_sum"]),
                                          "{:,}".format(r["size_limit_sum"]),
                                          "{:,}".format(r["other_sum"]),
                                          "{:,}".format(r["produced_sum"])))
        x = r["ring_retry"]
        if x:
            out.append("!!!   one run with --trace-ring-size %s: %s records, %s lost (ring full)"
                       "%s" % (x["ring"], "{:,}".format(x["produced"]),
                               "{:,}".format(x["ring_full"]),
                               ": that ring is enough here" if not trace_problems(x) else
                               ": still losing"))
    out.append("!" * 78)
    return out


# ---------------------------------------------------------------------------------------------
# --bpf-stats: where the traced time goes, per iolens program (kernel.bpf_stats_enabled)

def prog_stats_of(pid):
    ids = prog_owners([pid])
    if not ids:
        return {}
    progs = bpf_progs() or []
    return {p.get("name", "?"): (p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in progs
            if p.get("id") in ids}


def profile_run(argv):
    """Runs `iolens run -q -- ...` and samples its programs' run counters every 0.2 s; returns
    the last sample (bpf_stats_phase makes the command linger so that it is complete)."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    last = {}
    while p.poll() is None:
        st = prog_stats_of(p.pid)
        if st and sum(c for c, _ in st.values()) >= sum(c for c, _ in last.values()):
            last = st
        time.sleep(0.2)
    return last


def bpf_stats_phase(iolens, loops, torch_job):
    path = "/proc/sys/kernel/bpf_stats_enabled"
    with open(path) as f:
        old = f.read().strip()
    rows = []
    try:
        with open(path, "w") as f:
            f.write("1")
        work = [(lp.name, lp.argv) for lp in loops if lp.name != "ckpt"]
        if torch_job:
            work.append(("torch", torch_job))
        for name, argv in work:
            # The command lingers 0.5 s after the workload so that the last 0.2 s sample sees
            # its every call: the quick small-file loop ends in ~40 ms, before any sample.
            linger = ["sh", "-c", '"$@"; s=$?; sleep 0.5; exit $s', "sh"]
            st = profile_run([iolens, "run", "-q", "--"] + linger + argv)
            for prog, (cnt, ns) in sorted(st.items()):
                if cnt:
                    rows.append({"workload": name, "program": prog, "run_cnt": cnt,
                                 "run_time_ns": ns, "avg_ns": ns / cnt})
            log("bpf stats: %s done" % name)
    finally:
        with open(path, "w") as f:
            f.write(old)
    return rows


def stats_table(rows):
    out = ["| workload | program | runs | avg ns per run | total ms |", "|---|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %s | %d | %.0f | %.1f |" % (r["workload"], r["program"], r["run_cnt"],
                                                      r["avg_ns"], r["run_time_ns"] / 1e6))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Statistics and reporting

def summarize(case, name, unit, calls_per_op, untraced, traced):
    """untraced/traced: lists of per-run ns_per_op (or seconds for the torch job)."""
    mu, mt = statistics.median(untraced), statistics.median(traced)
    lo_u, lo_t = min(untraced), min(traced)
    paired = [t / u for u, t in zip(untraced, traced) if u > 0]
    s = {
        "case": case, "bench": name, "unit": unit, "calls_per_op": calls_per_op,
        "runs": len(untraced),  # per side
        "median_untraced": mu, "median_traced": mt, "ratio": mt / mu,
        "min_untraced": lo_u, "min_traced": lo_t, "min_ratio": lo_t / lo_u,
        "median_paired_ratio": statistics.median(paired) if paired else None,
        "extra_ns_per_call": (mt - mu) / calls_per_op if calls_per_op else None,
        "min_extra_ns_per_call": (lo_t - lo_u) / calls_per_op if calls_per_op else None,
        "samples_untraced": untraced, "samples_traced": traced,
    }
    tgt = TARGETS.get((case, name))
    if tgt:
        kind, limit, text = tgt
        value = s["ratio"] if kind == "ratio" else s["extra_ns_per_call"]
        s["target"] = text
        s["target_met_by_median"] = value <= limit if kind == "ratio" else value < limit
    return s


def fmt_num(v, unit):
    if unit == "s":
        return "%.3f s" % v
    if v >= 1e6:
        return "%.2f ms" % (v / 1e6)
    if v >= 1e4:
        return "%.1f us" % (v / 1e3)
    return "%.0f ns" % v


def table(summaries):
    head = ("| case | loop (one op) | runs | median untraced | median traced | ratio | "
            "extra ns/call | min untraced | min traced | min ratio | target (met by median?) |")
    rows = [head, "|" + "---|" * 11]
    for s in summaries:
        unit = "s" if s["bench"].startswith("torch") else "ns"
        if s["extra_ns_per_call"] is None:
            extra = "%+.1f ms/%s" % ((s["median_traced"] - s["median_untraced"]) * 1e3,
                                     "epoch" if s["bench"] == "torch_epoch" else "run")
        else:
            extra = "%+.0f" % s["extra_ns_per_call"]
            if s["calls_per_op"] != 1:
                extra += " (x%d calls/op)" % s["calls_per_op"]
        tgt = ""
        if "target" in s:
            tgt = "%s (%s)" % (s["target"], "yes" if s["target_met_by_median"] else "no")
        rows.append("| %s | %s: %s | %d | %s | %s | x%.3f | %s | %s | %s | x%.3f | %s |" % (
            s["case"], s["bench"], s["unit"], s["runs"],
            fmt_num(s["median_untraced"], unit), fmt_num(s["median_traced"], unit), s["ratio"],
            extra, fmt_num(s["min_untraced"], unit), fmt_num(s["min_traced"], unit),
            s["min_ratio"], tgt))
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iolens", help="iolens binary (default: $IOLENS, /tmp/build-bench, build/)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds for io_loops (default 9; "
                    "5 with --quick)")
    ap.add_argument("--torch-rounds", type=int, help="rounds for the PyTorch job (default 4; 2 "
                    "with --quick)")
    ap.add_argument("--quick", action="store_true", help="smaller loops and fewer rounds (<3 min)")
    ap.add_argument("--out", help="write results JSON here")
    ap.add_argument("--workdir", help="where test files go (default: a temp dir under /var/tmp, "
                    "a disk filesystem; removed at the end)")
    ap.add_argument("--clock", choices=("monotonic", "thread"), default="monotonic",
                    help="how io_loops times its loop: wall time (default) or the thread's own "
                    "CPU time, which leaves out the time other tenants of a shared VM hold the "
                    "CPU (IO_LOOPS_CLOCK); the PyTorch job is always wall time")
    ap.add_argument("--only", default="read4k,getppid,smallfiles,ckpt,torch",
                    help="comma-separated subset of read4k,getppid,smallfiles,ckpt,torch")
    ap.add_argument("--no-outside", action="store_true", help="skip the outside-the-tree case")
    ap.add_argument("--quiet-busy", type=float, default=0.3,
                    help="before each round, wait while other work keeps the CPUs busier than "
                    "this fraction of their total (default 0.3)")
    ap.add_argument("--quiet-wait", type=float,
                    help="... but at most this many seconds per round (default 15; 5 with "
                    "--quick; 0: never)")
    ap.add_argument("--bpf-stats", action="store_true",
                    help="also run each workload traced once with kernel.bpf_stats_enabled and "
                    "report run counts and average ns per iolens program (untimed diagnostic)")
    ap.add_argument("--variants", action="store_true",
                    help="also measure minimal BPF variants outside the tree (needs clang, libbpf)")
    ap.add_argument("--iolens-arg", action="append", default=[],
                    help="extra option of every `iolens run` (repeatable), e.g. "
                         "--iolens-arg=--disable-program=mm_filemap_get_pages")
    ap.add_argument("--trace", action="store_true",
                    help="add the mode traced+trace (iolens run --trace) to the traced case: "
                    "what trace mode costs, its records, losses and file size per loop")
    ap.add_argument("--timing-off", action="store_true",
                    help="add the mode timing-off (iolens run --timing off) to the same rounds, "
                    "and an outside case with the background iolens so started")
    ap.add_argument("--darshan", metavar="PREFIX",
                    help="add the mode darshan: each loop and the PyTorch job also run under "
                    "Darshan's non-MPI runtime preloaded from PREFIX/lib/libdarshan.so (built by "
                    "hand outside the repository: bench/README.md \"Darshan, the peer\")")
    ap.add_argument("--trace-ring-size", default="16M",
                    help="--trace-ring-size for traced+trace (default 16M, iolens' default)")
    a = ap.parse_args()
    # inherited by every io_loops run, traced (iolens run passes the environment on) or not
    os.environ["IO_LOOPS_CLOCK"] = a.clock
    RUN_ARGS.extend(a.iolens_arg)
    try:
        parse_size(a.trace_ring_size)
    except ValueError as e:
        sys.exit("run_bench: --trace-ring-size: %s" % e)

    if a.darshan and not os.path.isfile(os.path.join(a.darshan, "lib", "libdarshan.so")):
        sys.exit("run_bench: --darshan %s: no lib/libdarshan.so there" % a.darshan)
    if os.geteuid() != 0:
        sys.exit("run_bench: must run as root (iolens loads BPF programs)")
    quick = a.quick
    if a.quiet_wait is None:
        a.quiet_wait = 5 if quick else 15
    rounds = a.rounds or (5 if quick else 9)
    torch_rounds = a.torch_rounds or (2 if quick else 4)
    only = set(a.only.split(","))
    sizes = {
        "read_file_mb": 4,
        "read4k_n": 300_000 if quick else 1_000_000,
        "getppid_n": 1_000_000 if quick else 2_000_000,
        "smallfiles": 2000,
        "smallfiles_repeat": 3 if quick else 5,
        "ckpt_mb": 64 if quick else 256,
        "torch_files": 4000 if quick else 10000,
        "torch_epochs": 3 if quick else 4,
        "torch_workers": 2,
    }
    iolens = find_iolens(a.iolens)
    started = time.monotonic()
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel": platform.release(), "cpus": os.cpu_count(), "iolens": iolens,
        "iolens_version": run_ok([iolens, "--version"]).stdout.strip(),
        "iolens_built": datetime.datetime.fromtimestamp(
            os.path.getmtime(iolens), datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick, "rounds": rounds, "torch_rounds": torch_rounds, "sizes": sizes,
        "trace": a.trace, "trace_ring_size": a.trace_ring_size if a.trace else None,
        "darshan": a.darshan,
    }
    try:
        env["git"] = run_ok(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    log("iolens %s (built %s), kernel %s, %d CPUs, %d rounds"
        % (iolens, env["iolens_built"], env["kernel"], env["cpus"], rounds))

    tmp = tempfile.mkdtemp(prefix="iolens-bench-", dir=a.workdir or "/var/tmp")
    results = {"env": env, "summaries": [], "rounds": []}
    bg = None
    try:
        exe = build_io_loops(tmp)
        loops = prepare_loops(exe, tmp, sizes, only)
        summaries = []

        # --- traced vs untraced, interleaved per round, order flipping each round ---------
        # With --trace a third mode, traced+trace, joins each round: U T X, X T U, ...
        modes = MODES[:2] + ((TIMING_OFF_MODE,) if a.timing_off else ()) + (
            (DARSHAN_MODE,) if a.darshan else ()) + ((TRACE_MODE,) if a.trace else ())
        runner = Runner(iolens, tmp, a.trace_ring_size, a.trace, a.darshan)
        trace_runs = {}  # workload -> one dict per traced+trace run (Runner.collect)
        samples = {lp.name: {m: [] for m in modes} for lp in loops}
        for r in range(rounds):
            results["rounds"].append(round_env("traced", r, a))
            for lp in loops:
                for mode in flipped(modes, r) * lp.repeat:
                    res = lp.run(runner.prefix(mode))
                    samples[lp.name][mode].append(res["ns_per_op"])
                    got = runner.after(mode, lp.name)
                    if got:
                        trace_runs.setdefault(lp.name, []).append(dict(
                            got, round=r, ops=res["ops"], loop_s=res["ns"] / 1e9,
                            ns_per_op=res["ns_per_op"]))
            log("traced round %d/%d done" % (r + 1, rounds))
        for lp in loops:
            for mode in modes[1:]:
                summaries.append(summarize(mode, lp.name, lp.unit, lp.calls_per_op,
                                           samples[lp.name]["untraced"], samples[lp.name][mode]))

        # --- PyTorch job -------------------------------------------------------------------
        job = None
        if "torch" in only:
            if not os.path.exists(TORCH_JOB):
                log("no %s: PyTorch job skipped" % TORCH_JOB)
            else:
                data, ckpt = os.path.join(tmp, "torch_data"), os.path.join(tmp, "torch_ckpt")
                run_ok([PYTHON, TORCH_JOB, data, ckpt, "--make-data",
                        "--files", str(sizes["torch_files"])])
                os.sync()
                job = [PYTHON, TORCH_JOB, data, ckpt, "--files", str(sizes["torch_files"]),
                       "--epochs", str(sizes["torch_epochs"]),
                       "--workers", str(sizes["torch_workers"])]
                torch_run(job)  # warm-up: caches the dataset and torch's own files
                ep, wall_s = {m: [] for m in modes}, {m: [] for m in modes}
                raw, agent_cpu = [], {m: [] for m in modes[1:] if m != DARSHAN_MODE}
                for r in range(torch_rounds):
                    results["rounds"].append(round_env("torch", r, a))
                    for mode in flipped(modes, r):
                        traced = mode in ("traced", TRACE_MODE, TIMING_OFF_MODE)  # iolens
                        wall, intervals, printed, cpu = torch_run(runner.prefix(mode) + job,
                                                                  watch_self_cpu=traced)
                        ep[mode].append(statistics.median(intervals))
                        wall_s[mode].append(wall)
                        if traced and cpu is not None:
                            agent_cpu[mode].append(cpu)
                        raw.append({"round": r, "traced": mode != "untraced", "mode": mode,
                                    "wall_s": wall,
                                    "epoch_intervals_s": intervals, "epoch_printed_s": printed,
                                    "iolens_self_cpu_s": cpu if traced else None})
                        got = runner.after(mode, "torch")
                        if got:
                            trace_runs.setdefault("torch", []).append(dict(
                                got, round=r, loop_s=wall,
                                epoch_s=statistics.median(intervals)))
                    log("torch round %d/%d done" % (r + 1, torch_rounds))
                for mode in modes[1:]:
                    summaries.append(summarize(
                        mode, "torch_epoch",
                        "epoch (%d files, %d workers; median of epochs 1..%d)" % (
                            sizes["torch_files"], sizes["torch_workers"],
                            sizes["torch_epochs"] - 1),
                        None, ep["untraced"], ep[mode]))
                for mode in modes[1:]:
                    summaries.append(summarize(mode, "torch_wall",
                                               "whole run incl. start/exit (%d epochs)"
                                               % sizes["torch_epochs"], None,
                                               wall_s["untraced"], wall_s[mode]))
                results["torch_runs"] = raw
                if agent_cpu["traced"]:
                    results["torch_iolens_self_cpu_s_median"] = statistics.median(
                        agent_cpu["traced"])
                if agent_cpu.get(TIMING_OFF_MODE):
                    results["torch_iolens_self_cpu_s_median_timing_off"] = statistics.median(
                        agent_cpu[TIMING_OFF_MODE])
                if agent_cpu.get(TRACE_MODE):
                    results["torch_iolens_self_cpu_s_median_trace"] = statistics.median(
                        agent_cpu[TRACE_MODE])

        # --- trace mode: what each workload's records came to; a larger ring where lost ----
        trace_rows = []
        if a.trace:
            retries = trace_ring_retries(runner, trace_runs, loops, job)
            trace_rows = [trace_summary(name, runs, summaries, retries.get(name))
                          for name, runs in trace_runs.items()]
            results["trace_runs"], results["trace_summaries"] = trace_runs, trace_rows

        # --- outside the traced tree: no iolens vs iolens attached tracing a sleep ---------
        def outside_case(case, make_bg, names):
            nonlocal bg
            sel = [lp for lp in loops if lp.name in names]
            samp = {lp.name: ([], []) for lp in sel}
            for r in range(rounds):
                results["rounds"].append(round_env(case, r, a))
                order = (False, True) if r % 2 == 0 else (True, False)
                for with_bg in order:
                    if with_bg:
                        bg = make_bg()
                        bg.start()
                    try:
                        for lp in sel:
                            for _ in range(lp.repeat):
                                samp[lp.name][1 if with_bg else 0].append(
                                    run_loop(lp.argv)["ns_per_op"])
                    finally:
                        if with_bg:
                            bg.stop()
                            bg = None
                log("%s round %d/%d done" % (case, r + 1, rounds))
            return [summarize(case, lp.name, lp.unit, lp.calls_per_op, *samp[lp.name])
                    for lp in sel]

        outside_names = {"read4k", "getppid", "smallfiles"}
        if not a.no_outside:
            summaries += outside_case("outside", lambda: BackgroundIolens(iolens), outside_names)
            if a.timing_off:
                summaries += outside_case(
                    "outside, timing off",
                    lambda: BackgroundIolens(iolens, ["--timing", "off"]), outside_names)

        if a.variants:
            summaries += run_variants(tmp, rounds, outside_case, outside_names)

        stats_rows = []
        if a.bpf_stats:
            stats_rows = bpf_stats_phase(iolens, loops, job)
            results["bpf_stats"] = stats_rows

        results["summaries"] = summaries
        env["elapsed_s"] = round(time.monotonic() - started, 1)
        md = table(summaries)
        print("iolens overhead, %s, kernel %s, %d CPUs, iolens %s%s; %d rounds (PyTorch %d), "
              "%.0f s" % (env["date"], env["kernel"], env["cpus"], env["iolens_version"],
                          " (git %s)" % env["git"] if "git" in env else "", rounds, torch_rounds,
                          env["elapsed_s"]))
        print()
        print(md)
        foreign_rounds = [x for x in results["rounds"] if x["foreign_tracing_progs"]]
        if foreign_rounds:
            print("\nwarning: %d round(s) saw tracing BPF programs not started by this benchmark "
                  "(see 'rounds' in the JSON); baselines of those rounds were taxed too."
                  % len(foreign_rounds))
        if results.get("torch_iolens_self_cpu_s_median") is not None:
            print("\nPyTorch job: the iolens agent itself used %.2f s of CPU per traced run "
                  "(median; user+system, its own process only, %d epochs)."
                  % (results["torch_iolens_self_cpu_s_median"], sizes["torch_epochs"]))
        if results.get("torch_iolens_self_cpu_s_median_timing_off") is not None:
            print("With --timing off: %.2f s per run (median)."
                  % results["torch_iolens_self_cpu_s_median_timing_off"])
        if results.get("torch_iolens_self_cpu_s_median_trace") is not None:
            print("With --trace: %.2f s per run (median)."
                  % results["torch_iolens_self_cpu_s_median_trace"])
        if a.trace:
            print("\nTrace mode (traced = iolens run -q --json J, traced+trace = iolens run -q "
                  "--trace T --json J --trace-ring-size %s):\n" % a.trace_ring_size)
            print(trace_table(trace_rows))
            print()
            print("\n".join(trace_verdict(trace_rows, a.trace_ring_size)))
        if stats_rows:
            print("\nPer-program cost while traced (kernel.bpf_stats_enabled; sys_enter/sys_exit "
                  "runs include every other process's syscalls during the run):\n")
            print(stats_table(stats_rows))
        results["table_markdown"] = md
        if a.out:
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
            log("results written to %s" % a.out)
    finally:
        if bg:
            bg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


# ---------------------------------------------------------------------------------------------
# Variants: minimal programs, to show what each layer of the design costs every process

VARIANTS = [
    # (case name, programs to attach from variants.bpf.c)
    ("variant:empty_exit", ["empty_exit"]),
    ("variant:empty_enter_exit", ["empty_enter", "empty_exit"]),
    ("variant:taskstore_enter_exit", ["ts_enter", "ts_exit"]),
    ("variant:taskstore_ktime_first", ["ts_enter", "ts_exit_ktime_first"]),
    ("variant:pidhash_enter_exit", ["hash_enter", "hash_exit"]),
]


def run_variants(tmp, rounds, outside_case, names):
    clang = shutil.which("clang")
    if not clang:
        log("no clang: variants skipped")
        return []
    obj = os.path.join(tmp, "variants.bpf.o")
    loader = os.path.join(tmp, "variant_loader")
    try:
        multiarch = run_ok(["gcc", "-print-multiarch"]).stdout.strip()  # for asm/types.h
        run_ok([clang, "-O2", "-g", "-target", "bpf", "-I/usr/include/" + multiarch, "-c",
                os.path.join(HERE, "variants.bpf.c"), "-o", obj])
        run_ok(["gcc", "-O2", "-Wall", "-o", loader, os.path.join(HERE, "variant_loader.c"),
                "-lbpf"])
    except subprocess.CalledProcessError as e:
        log("variants not built (skipped): %s" % e.stderr.strip()[-500:])
        return []
    out = []
    for case, progs in VARIANTS:
        out += outside_case(case, lambda p=progs: BackgroundVariant(loader, obj, p), names)
    return out


if __name__ == "__main__":
    sys.exit(main())
