#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""iolensd's cost to processes OUTSIDE the selected jobs, as ns per syscall, in one invocation.

Not a test: nothing passes or fails on a timing. Must run as root (it starts iolensd and creates
cgroups). Prints a markdown table and writes every sample to --out (JSON).

    /usr/bin/python3 bench/daemon_bench.py [--iolensd PATH] [--rounds 9] [--quick] [--out FILE]

The loops (bench/io_loops.c: `read4k` = pread of 4 KiB from a cached file, `getppid` = a raw
getppid(), optionally `smallfiles`) always run in a cgroup that no job rule selects
(/iolens-dbench-<pid>/outside), in four modes:

  a. no daemon                   nothing of iolens loaded: the baseline
  b. daemon, no live job         iolensd running with on-demand syscall hooks; no job, so the
                                 sys_enter/sys_exit hooks are detached (checked via `status`)
  c. daemon, live job elsewhere  the same, with a job live in another cgroup (a `sleep` in
                                 /iolens-dbench-<pid>/jobs/job-1): hooks attached (checked)
  d. --syscall-hooks always      iolensd with the hooks attached for its whole life, no job

Every round runs all four modes, in an order that rotates and flips each round so that slow
drift does not land on one mode; each mode gets a freshly started daemon (b, c, d), stopped with
SIGTERM after its loops. Reported: medians (and minima) per mode, extra ns per syscall against
mode a, ratios, and whether the issue's target (< +60 ns per syscall for unselected processes)
is met by the median. See bench/README.md, "The daemon's cost outside the jobs".
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run_bench as RB  # noqa: E402  (io_loops build/run, quiet waits, foreign-program check)

TARGET_NS = 60.0  # the issue: < +60 ns per syscall for processes outside the traced jobs
MODES = [
    ("a", "no daemon"),
    ("b", "daemon, no live job (hooks detached)"),
    ("c", "daemon, live job elsewhere (hooks attached)"),
    ("d", "daemon --syscall-hooks always"),
]
log = RB.log


# ---------------------------------------------------------------------------------------------
# cgroups

def cgroup2_mount():
    """The cgroup2 mount iolensd's `cgroup_root: auto` picks: /sys/fs/cgroup if it is cgroup2,
    else /sys/fs/cgroup/unified (systemd's hybrid layout), else the first cgroup2 mount."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[0] == "cgroup2":
                mounts.append(left.split()[4])
    for pref in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if pref in mounts:
            return pref
    if mounts:
        return mounts[0]
    sys.exit("daemon_bench: no cgroup2 mount (iolensd selects jobs by cgroup v2)")


def kill_cgroup(path):
    """Kills what is left in a cgroup (cgroup.kill, Linux 5.14+; else SIGKILL per pid)."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
    except OSError:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        except OSError:
            pass


def remove_cgroup_tree(path):
    """Removes `path` and every cgroup below it, deepest first, killing what is still inside."""
    if not os.path.isdir(path):
        return
    dirs = [d for d, _, _ in os.walk(path)]
    for d in sorted(dirs, key=len, reverse=True):
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                kill_cgroup(d)
                time.sleep(0.05)


def in_cgroup(cg, argv):
    """argv run inside cgroup `cg`: a shell moves itself there and execs (as runc does)."""
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cg] + list(argv)


# ---------------------------------------------------------------------------------------------
# the daemon

def find_iolensd(arg):
    cands = [arg] if arg else []
    cands += [os.environ.get("IOLENSD", ""),
              os.path.join(REPO, "build-pkg", "agent", "daemon", "iolensd"),
              os.path.join(REPO, "build", "agent", "daemon", "iolensd"),
              "/tmp/build-bench/agent/daemon/iolensd"]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("daemon_bench: no iolensd binary; build it (see bench/README.md) and pass --iolensd")


def ask(sock_path, cmd, timeout=5.0):
    """One control-socket request (docs/control.md): a JSON line each way."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
        s.sendall((json.dumps({"cmd": cmd}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    ans = json.loads(buf.decode())
    if not ans.get("ok"):
        raise RuntimeError("iolensd answered %s: %s" % (ans.get("code"), ans.get("error")))
    return ans["result"]


def self_cpu_s(pid):
    return RB.self_cpu_s(pid)


class Daemon:
    """iolensd with a temporary config; start() returns once `status` answers (the socket
    exists before the programs are loaded, so its presence alone is not readiness)."""

    def __init__(self, exe, work, cg_rel, pin_dir, hooks, hooks_idle_s):
        self.exe, self.work, self.pin_dir = exe, work, pin_dir
        self.sock = os.path.join(work, "iolensd.sock")
        self.cfg = os.path.join(work, "iolensd.yaml")
        self.log_path = os.path.join(work, "iolensd.log")
        self.hooks, self.hooks_idle_s = hooks, hooks_idle_s
        with open(self.cfg, "w") as f:
            f.write("# written by bench/daemon_bench.py\n"
                    "output_dir: %s\nstate_dir: %s\npin_dir: %s\nsocket: %s\n"
                    "log_level: warn\n"
                    "jobs:\n  - name: bench\n    cgroup:\n      paths: [\"%s/jobs/job-*\"]\n"
                    % (os.path.join(work, "out"), os.path.join(work, "state"), pin_dir,
                       self.sock, cg_rel))
        self.proc = None
        self.logf = None

    def start(self):
        self.logf = open(self.log_path, "a")
        argv = [self.exe, "--config", self.cfg, "--syscall-hooks", self.hooks,
                "--hooks-idle-s", str(self.hooks_idle_s)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=self.logf)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("iolensd exited (%d) at start; its log %s:\n%s" % (
                    self.proc.returncode, self.log_path, self.tail()))
            try:
                return ask(self.sock, "status", timeout=1.0)
            except (OSError, ValueError, RuntimeError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("iolensd did not answer `status` within 30 s:\n" + self.tail())

    def wait_status(self, pred, what, timeout=20):
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            st = ask(self.sock, "status")
            if pred(st):
                return st
            time.sleep(0.05)
        raise RuntimeError("iolensd: %s not reached within %d s; last status: %s"
                           % (what, timeout, json.dumps(st)[:2000]))

    def cpu_s(self):
        return self_cpu_s(self.proc.pid) if self.proc else None

    def stop(self):
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                rc = "killed"
        elif self.proc:
            rc = self.proc.returncode
        self.proc = None
        if self.logf:
            self.logf.close()
            self.logf = None
        # A clean stop removes its pins; anything left (a kill) would keep programs attached.
        if os.path.isdir(self.pin_dir):
            shutil.rmtree(self.pin_dir, ignore_errors=True)
        return rc

    def tail(self, n=20):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


# ---------------------------------------------------------------------------------------------
# the loops

def prepare_loops(exe, work, sizes, only):
    """run_bench's loops, minus the checkpoint one, making only the files they need."""
    loops = []
    if "read4k" in only:
        path = os.path.join(work, "read4k.dat")
        with open(path, "wb") as f:
            f.write(os.urandom(sizes["read_file_mb"] << 20))
        with open(path, "rb") as f:  # cached: the loop measures cached reads
            while f.read(1 << 20):
                pass
        loops.append(RB.Loop("read4k", [exe, "read4k", path, str(sizes["read4k_n"]), "pread"],
                             "pread of 4 KiB", 1))
    if "getppid" in only:
        loops.append(RB.Loop("getppid", [exe, "getppid", str(sizes["getppid_n"])], "getppid()",
                             1))
    if "smallfiles" in only:
        sf = os.path.join(work, "sf")
        RB.run_ok([exe, "mkfiles", sf, str(sizes["smallfiles"]), "100"])
        for n in sorted(os.listdir(sf)):
            with open(os.path.join(sf, n), "rb") as f:
                f.read()
        loops.append(RB.Loop("smallfiles", [exe, "smallfiles", sf, str(sizes["smallfiles"])],
                             "file (open, read 100 KiB, read EOF, close)", 4))
    if not loops:
        sys.exit("daemon_bench: --only names no known loop (read4k, getppid, smallfiles)")
    return loops


# ---------------------------------------------------------------------------------------------
# kernel state checks

def syscall_hook_links(own_pid=None):
    """tp_btf/raw-tracepoint links on sys_enter/sys_exit attached right now (pinned ones
    included: a SIGKILLed iolensd's links keep running with no process holding them), other
    than those of the programs process `own_pid` (our daemon) holds."""
    try:
        out = subprocess.run(["bpftool", "-j", "link", "show"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=20).stdout
        links = json.loads(out or "[]")
        progs = {p["id"]: p for p in json.loads(subprocess.run(
            ["bpftool", "-j", "prog", "show"], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, timeout=20).stdout or "[]")}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    own = set(RB.prog_owners([own_pid])) if own_pid else set()
    found = []
    for ln in links:
        if ln.get("prog_id") in own:
            continue
        tp = ln.get("tp_name") or ""
        name = progs.get(ln.get("prog_id"), {}).get("name", "")
        if tp in ("sys_enter", "sys_exit") or name in ("sys_enter", "sys_exit"):
            found.append("link %s prog %s (%s)" % (ln.get("id"), ln.get("prog_id"), name or tp))
    return found


# ---------------------------------------------------------------------------------------------

def summarize(mode, lp, base, samples):
    mu, mb = statistics.median(samples), statistics.median(base)
    lo, lob = min(samples), min(base)
    paired = [s / b for s, b in zip(samples, base) if b > 0]
    extra = (mu - mb) / lp.calls_per_op
    s = {"mode": mode, "bench": lp.name, "unit": lp.unit, "calls_per_op": lp.calls_per_op,
         "runs": len(samples), "median": mu, "median_base": mb, "ratio": mu / mb,
         "extra_ns_per_call": extra, "min": lo, "min_base": lob, "min_ratio": lo / lob,
         "min_extra_ns_per_call": (lo - lob) / lp.calls_per_op,
         "median_paired_ratio": statistics.median(paired) if paired else None,
         "samples": samples}
    if mode != "a":
        s["target_met_by_median"] = extra < TARGET_NS
    return s


def paired_extra(base, samples, calls_per_op):
    """Median over rounds of (mode - no daemon) within the same round, clean samples only (each
    side averaged over the round's runs): drift between rounds cancels out."""
    def per_round(xs):
        by = {}
        for x in xs:
            if not x["foreign_hooks"]:
                by.setdefault(x["round"], []).append(x["ns"])
        return {r: statistics.mean(v) for r, v in by.items()}
    b, m = per_round(base), per_round(samples)
    diffs = [(m[r] - b[r]) / calls_per_op for r in m if r in b]
    return statistics.median(diffs) if diffs else None


def table(summaries):
    rows = ["| mode | loop (one op) | runs | median | vs no daemon | extra ns per syscall | "
            "paired extra ns | min | min extra ns | < +60 ns per syscall? |", "|" + "---|" * 10]
    names = dict(MODES)
    for s in summaries:
        per = "" if s["calls_per_op"] == 1 else " (x%d calls/op)" % s["calls_per_op"]
        met = "" if s["mode"] == "a" else ("yes" if s["target_met_by_median"] else "**no**")
        pe = s.get("paired_extra_ns_per_call")
        rows.append("| %s. %s | %s: %s | %d | %s | x%.3f | %s%s | %s | %s | %s | %s |" % (
            s["mode"], names[s["mode"]], s["bench"], s["unit"], s["runs"],
            RB.fmt_num(s["median"], "ns"), s["ratio"],
            "-" if s["mode"] == "a" else "%+.0f" % s["extra_ns_per_call"], per,
            "-" if s["mode"] == "a" or pe is None else "%+.0f" % pe,
            RB.fmt_num(s["min"], "ns"),
            "-" if s["mode"] == "a" else "%+.0f" % s["min_extra_ns_per_call"], met))
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iolensd", help="iolensd binary (default: $IOLENSD, build-pkg/, build/)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 9; --quick: 3)")
    ap.add_argument("--quick", action="store_true", help="shorter loops, 3 rounds (~1 min)")
    ap.add_argument("--only", default="read4k,getppid",
                    help="comma-separated subset of read4k,getppid,smallfiles (default "
                    "read4k,getppid)")
    ap.add_argument("--modes", default="a,b,c,d", help="comma-separated subset of a,b,c,d")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each loop per mode per round (default 1)")
    ap.add_argument("--foreign-wait", type=float, default=120,
                    help="before each round, wait at most this many seconds while another "
                    "tracer's sys_enter/sys_exit programs are attached (default 120)")
    ap.add_argument("--out", help="write results JSON here")
    ap.add_argument("--workdir", help="where test files go (default: a temp dir under /var/tmp)")
    ap.add_argument("--quiet-busy", type=float, default=0.3,
                    help="before each round, wait while other work keeps the CPUs busier than "
                    "this fraction (default 0.3)")
    ap.add_argument("--quiet-wait", type=float,
                    help="... at most this many seconds per round (default 15; --quick 5)")
    a = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("daemon_bench: must run as root (it starts iolensd and creates cgroups)")
    quick = a.quick
    if a.quiet_wait is None:
        a.quiet_wait = 5 if quick else 15
    rounds = a.rounds or (3 if quick else 9)
    only = set(a.only.split(","))
    modes = [m for m, _ in MODES if m in set(a.modes.split(","))]
    if "a" not in modes:
        sys.exit("daemon_bench: mode a (no daemon) is the baseline and cannot be left out")
    sizes = {
        "read_file_mb": 4,
        "read4k_n": 300_000 if quick else 1_000_000,
        "getppid_n": 1_000_000 if quick else 2_000_000,
        "smallfiles": 2000,
    }
    iolensd = find_iolensd(a.iolensd)
    mount = cgroup2_mount()
    tag = "iolens-dbench-%d" % os.getpid()
    cg_rel = "/" + tag
    cg = mount + cg_rel
    outside = cg + "/outside"
    pin_dir = "/sys/fs/bpf/" + tag
    started = time.monotonic()
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel": platform.release(), "cpus": os.cpu_count(), "iolensd": iolensd,
        "iolensd_version": RB.run_ok([iolensd, "--version"]).stdout.strip(),
        "iolensd_built": datetime.datetime.fromtimestamp(
            os.path.getmtime(iolensd), datetime.timezone.utc).isoformat(timespec="seconds"),
        "cgroup_mount": mount, "quick": quick, "rounds": rounds, "sizes": sizes,
        "modes": dict(MODES),
    }
    try:
        env["git"] = RB.run_ok(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]).stdout.strip()
        dirty = RB.run_ok(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
        env["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    log("iolensd %s (built %s), kernel %s, %d CPUs, %d rounds, modes %s"
        % (iolensd, env["iolensd_built"], env["kernel"], env["cpus"], rounds, ",".join(modes)))

    tmp = tempfile.mkdtemp(prefix="iolens-dbench-", dir=a.workdir or "/var/tmp")
    results = {"env": env, "summaries": [], "rounds": [], "daemon": []}
    daemon = None
    sleeper = None

    def on_signal(signo, _frame):
        raise KeyboardInterrupt("signal %d" % signo)
    signal.signal(signal.SIGTERM, on_signal)

    try:
        if os.path.exists(pin_dir):
            shutil.rmtree(pin_dir, ignore_errors=True)
        os.makedirs(outside)
        os.makedirs(cg + "/jobs")
        exe = RB.build_io_loops(tmp)
        loops = prepare_loops(exe, tmp, sizes, only)
        for lp in loops:
            lp.argv = in_cgroup(outside, lp.argv)
        samples = {(m, lp.name): [] for m in modes for lp in loops}

        def run_block(mode, r):
            nonlocal daemon, sleeper
            rec = {"round": r, "mode": mode}
            if mode != "a":
                daemon = Daemon(iolensd, tmp, cg_rel, pin_dir,
                                "always" if mode == "d" else "on-demand", 30)
                t0 = time.monotonic()
                daemon.start()
                if mode == "c":
                    job = cg + "/jobs/job-1"
                    os.makedirs(job, exist_ok=True)
                    sleeper = subprocess.Popen(in_cgroup(job, ["sleep", "100000"]))
                    st = daemon.wait_status(
                        lambda s: s.get("syscall_hooks") == "attached"
                        and s.get("jobs", {}).get("live", 0) >= 1,
                        "a live job with the hooks attached")
                else:
                    want = "attached" if mode == "d" else "detached"
                    st = daemon.wait_status(lambda s: s.get("syscall_hooks") == want,
                                            "syscall hooks " + want)
                rec["ready_s"] = round(time.monotonic() - t0, 2)
                rec["hooks_before"] = st.get("syscall_hooks")
                rec["cpu_before_s"] = daemon.cpu_s()
            own = daemon.proc.pid if daemon else None
            try:
                for lp in loops:
                    for _ in range(lp.repeat * a.repeat):
                        if lp.before:
                            lp.before()
                        before = syscall_hook_links(own)
                        v = RB.run_loop(lp.argv)["ns_per_op"]
                        foreign = sorted(set(before or []) | set(syscall_hook_links(own) or []))
                        samples[(mode, lp.name)].append({"ns": v, "round": r,
                                                         "foreign_hooks": foreign})
                        if foreign:
                            rec.setdefault("foreign_hooks", []).extend(foreign)
            finally:
                if mode != "a":
                    st = ask(daemon.sock, "status")
                    rec["hooks_after"] = st.get("syscall_hooks")
                    rec["jobs_after"] = st.get("jobs")
                    rec["unattributed_processes"] = st.get("unattributed_processes")
                    cpu = daemon.cpu_s()
                    if cpu is not None and rec.get("cpu_before_s") is not None:
                        rec["daemon_cpu_during_loops_s"] = round(cpu - rec["cpu_before_s"], 3)
                    if sleeper:
                        sleeper.kill()
                        sleeper.wait()
                        sleeper = None
                        remove_cgroup_tree(cg + "/jobs/job-1")
                    rec["stop_rc"] = daemon.stop()
                    daemon = None
                    want = {"b": "detached", "c": "attached", "d": "attached"}[mode]
                    if rec["hooks_before"] != want or rec["hooks_after"] != want:
                        log("warning: round %d mode %s: hooks %s/%s, expected %s"
                            % (r, mode, rec["hooks_before"], rec["hooks_after"], want))
                    results["daemon"].append(rec)

        for r in range(rounds):
            # Another tracer's sys_enter/sys_exit programs tax every mode alike and hide the
            # difference being measured: wait (bounded) until there are none.
            t0 = time.monotonic()
            while True:
                hooks = syscall_hook_links()
                while hooks and time.monotonic() - t0 < a.foreign_wait:
                    time.sleep(2)
                    hooks = syscall_hook_links()
                env_r = RB.round_env("daemon", r, a)  # quiet wait + foreign programs
                hooks = syscall_hook_links()
                if not hooks or time.monotonic() - t0 >= a.foreign_wait:
                    break
            waited = round(time.monotonic() - t0, 1)
            env_r["syscall_hook_links_before"] = hooks
            env_r["foreign_hooks_waited_s"] = waited
            if hooks:
                log("warning: round %d: sys_enter/sys_exit programs of another tracer are "
                    "attached (held by a process, or pinned): %s" % (r, "; ".join(hooks)))
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            if r % 2:
                order.reverse()
            env_r["order"] = "".join(order)
            results["rounds"].append(env_r)
            for m in order:
                run_block(m, r)
            log("round %d/%d done (order %s)" % (r + 1, rounds, "".join(order)))

        # Samples taken while another tracer's syscall hooks were attached are left out when
        # enough clean ones remain for every mode (each of them paid an unknown extra).
        need = max(3, (rounds * a.repeat + 1) // 2)
        summaries = []
        for lp in loops:
            clean = {m: [x["ns"] for x in samples[(m, lp.name)] if not x["foreign_hooks"]]
                     for m in modes}
            use_clean = all(len(v) >= need for v in clean.values())
            for m in modes:
                pick = clean if use_clean else {
                    k: [x["ns"] for x in samples[(k, lp.name)]] for k in modes}
                sm = summarize(m, lp, pick["a"], pick[m])
                sm["samples_used"] = "clean" if use_clean else "all"
                sm["samples_left_out"] = len(samples[(m, lp.name)]) - len(pick[m])
                sm["samples_all"] = samples[(m, lp.name)]
                sm["paired_extra_ns_per_call"] = paired_extra(
                    samples[("a", lp.name)], samples[(m, lp.name)], lp.calls_per_op)
                summaries.append(sm)
        results["summaries"] = summaries
        env["elapsed_s"] = round(time.monotonic() - started, 1)
        md = table(summaries)
        results["table_markdown"] = md
        print("iolensd cost to processes outside the jobs, %s, kernel %s, %d CPUs, iolensd %s%s; "
              "%d rounds, %.0f s" % (env["date"], env["kernel"], env["cpus"],
                                     env["iolensd_version"],
                                     " (git %s%s)" % (env["git"], "+dirty" if env.get(
                                         "git_dirty") else "") if "git" in env else "",
                                     rounds, env["elapsed_s"]))
        print()
        print(md)
        cpu = [d["daemon_cpu_during_loops_s"] for d in results["daemon"]
               if "daemon_cpu_during_loops_s" in d]
        ready = [d["ready_s"] for d in results["daemon"] if "ready_s" in d]
        if cpu:
            print("\niolensd itself: %.3f s of CPU per mode block (median; its own process, while "
                  "the loops ran); start to ready %.2f s (median)." % (
                      statistics.median(cpu), statistics.median(ready)))
        bad = [x for x in results["daemon"] if x.get("hooks_before") != x.get("hooks_after")]
        if bad:
            print("\nwarning: %d block(s) saw the hooks change state during the loops" % len(bad))
        left = sum(x["samples_left_out"] for x in summaries)
        dirty = sum(1 for x in summaries if x["samples_used"] == "all"
                    for y in x["samples_all"] if y["foreign_hooks"])
        if left:
            print("\nnote: %d sample(s) taken while another tracer's sys_enter/sys_exit programs "
                  "were attached were left out (see 'samples_all' in the JSON)." % left)
        if dirty:
            print("\nwarning: too few clean samples: %d sample(s) above were taken while another "
                  "tracer's sys_enter/sys_exit programs were attached; every mode paid for them, "
                  "and the differences shrink." % dirty)
        taxed = [x for x in results["rounds"] if x.get("syscall_hook_links_before")]
        other = [x for x in results["rounds"]
                 if x.get("foreign_tracing_progs") and not x.get("syscall_hook_links_before")]
        if taxed:
            print("\nnote: %d round(s) started while another tracer's sys_enter/sys_exit programs "
                  "were attached (after waiting up to --foreign-wait s)." % len(taxed))
        if other:
            print("\nnote: %d round(s) saw other tracing programs loaded (no syscall hooks: "
                  "fork/exec/cgroup hooks, which these loops do not exercise)." % len(other))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
            log("results written to %s" % a.out)
    except KeyboardInterrupt as e:
        log("interrupted (%s): cleaning up" % (str(e) or "SIGINT"))
        return 130
    finally:
        if sleeper:
            sleeper.kill()
            sleeper.wait()
        if daemon:
            daemon.stop()
        remove_cgroup_tree(cg)
        if os.path.exists(pin_dir):
            shutil.rmtree(pin_dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
