#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""iolens start-up and exit cost (issue 20): what `iolens run` adds around a command.

Not a test: nothing here passes or fails on a timing. Must run as root.

    /usr/bin/python3 bench/startup.py --iolens BUILD_A [--iolens BUILD_B ...] [--runs 15]
        [--torch-files 500] [--torch-rounds 5] [--json] [--out FILE]

Parts (bench/README.md, "Start-up (issue 20)"):
  trivial   `iolens run -q -- true` against untraced `true`, interleaved: every round runs
            untraced `true` and each build once, the order reversed every other round. iolens'
            own wall time = median(traced) - median(untraced).
  phases    the same traced runs report their steps (IOLENS_TIMING=1, docs/run.md): medians per
            step. Builds without that instrumentation report none.
  programs  per loaded program: the verifier's instruction count (bpf_prog_info.verified_insns,
            read while `iolens run -- cat` waits on its stdin) and the load's duration
            (`strace -T` of BPF_PROG_LOAD, with --seccomp-bpf so only bpf() stops the process);
            per map the duration of BPF_MAP_CREATE. One untimed run each, per build.
  torch     a short PyTorch DataLoader job (tests/workloads/torch_job.py, --torch-files files,
            --torch-epochs epochs (1), 2 workers) untraced and under each build, interleaved:
            whole-run wall time, iolens' own CPU time (its `timing: cpu:` line) and exit steps.
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_bench import PYTHON, TORCH_JOB, loadavg, log, wait_quiet  # noqa: E402

SYS_BPF = 321  # x86-64
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
# struct bpf_prog_info (linux/bpf.h) offsets: load_time (boot-time ns when the load started),
# name[16], verified_insns (Linux 5.16+).
INFO_SIZE = 240
OFF_LOAD_TIME, OFF_NAME, OFF_VERIFIED = 40, 64, 216


def median_range(xs):
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt_ms(s):
    if not s:
        return "n/a"
    return "%.0f ms (%.0f-%.0f)" % (s["median"], s["min"], s["max"])


def timed(argv, env=None, stdin=None):
    """Wall time (ms) of one run, and its stderr."""
    t0 = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       env=env, stdin=stdin)
    ms = (time.monotonic() - t0) * 1000.0
    if p.returncode != 0:
        sys.exit("startup: %s exited %d: %s" % (" ".join(argv), p.returncode, p.stderr[-2000:]))
    return ms, p.stderr


def parse_timing(stderr):
    """{step: ms} from the `iolens: timing: start|exit: a=1.0 b=2.0` lines (IOLENS_TIMING=1),
    and iolens' own CPU time from the `iolens: timing: cpu: user= system=` line as cpu_user,
    cpu_system (builds since 2026-11-26)."""
    steps = {}
    for m in re.finditer(r"^iolens: timing: (\w+): (.*)$", stderr, re.M):
        for kv in m.group(2).split():
            k, _, v = kv.partition("=")
            if m.group(1) == "cpu":
                k = "cpu_" + k
            steps[k] = steps.get(k, 0.0) + float(v)
    return steps


def interleaved(cases, rounds, quiet_busy, quiet_wait, env):
    """cases: [(label, argv)]. Every round runs each once; the order reverses every other
    round. Returns {label: ([ms...], [timing dicts])}."""
    out = {label: ([], []) for label, _ in cases}
    for r in range(rounds):
        wait_quiet(quiet_busy, quiet_wait)
        order = cases if r % 2 == 0 else list(reversed(cases))
        for label, argv in order:
            ms, err = timed(argv, env=env)
            out[label][0].append(ms)
            out[label][1].append(parse_timing(err))
    return out


def prog_info(prog_id):
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 3)(prog_id, 0, 0)
    fd = libc.syscall(SYS_BPF, BPF_PROG_GET_FD_BY_ID, ctypes.byref(attr), 12)
    if fd < 0:
        return None
    try:
        info = ctypes.create_string_buffer(INFO_SIZE)
        req = (ctypes.c_uint64 * 2)(fd | (INFO_SIZE << 32), ctypes.addressof(info))
        if libc.syscall(SYS_BPF, BPF_OBJ_GET_INFO_BY_FD, ctypes.byref(req), 16) != 0:
            return None
        raw = info.raw
        return {"name": raw[OFF_NAME:OFF_NAME + 16].split(b"\0")[0].decode(),
                "verified_insns": int.from_bytes(raw[OFF_VERIFIED:OFF_VERIFIED + 4], "little"),
                "load_time_ns": int.from_bytes(raw[OFF_LOAD_TIME:OFF_LOAD_TIME + 8], "little")}
    finally:
        os.close(fd)


def held_prog_ids(pid):
    ids = set()
    base = "/proc/%d/fdinfo" % pid
    for fd in os.listdir(base):
        try:
            with open(os.path.join(base, fd)) as f:
                m = re.search(r"^prog_id:\s*(\d+)", f.read(), re.M)
        except OSError:
            continue
        if m:
            ids.add(int(m.group(1)))
    return ids


def verified_insns(iolens, extra=()):
    """{program: verified_insns} of a live `iolens run -q EXTRA -- cat` (it waits on our pipe)."""
    p = subprocess.Popen([iolens, "run", "-q"] + list(extra) + ["--", "cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Attached once its child has exec'd cat (iolens attaches before it releases it).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kids = subprocess.run(["pgrep", "-P", str(p.pid)], stdout=subprocess.PIPE,
                                  text=True).stdout.split()
            try:
                if kids and os.path.basename(os.readlink("/proc/%s/exe" % kids[0])) == "cat":
                    break
            except OSError:
                pass  # a child that was gone by the time we looked (a fork not yet the command)
            time.sleep(0.02)
        rows = {}
        for i in sorted(held_prog_ids(p.pid)):
            info = prog_info(i)
            if info and info["name"]:
                rows[info["name"]] = info["verified_insns"]
        return rows
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def strace_bpf(iolens, tmp):
    """Per program its BPF_PROG_LOAD time, per map its BPF_MAP_CREATE time (ms), from one
    `strace -T --seccomp-bpf -e trace=bpf` run: only bpf() stops the process, and -T is the
    time spent in the kernel for that call."""
    out = os.path.join(tmp, "strace.txt")
    subprocess.run(["strace", "-f", "--seccomp-bpf", "-T", "-e", "trace=bpf", "-o", out,
                    iolens, "run", "-q", "--", "true"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progs, maps = {}, {}
    with open(out) as f:
        for line in f:
            t = re.search(r"<([0-9.]+)>\s*$", line)
            if not t:
                continue
            ms = float(t.group(1)) * 1000.0
            m = re.search(r"BPF_PROG_LOAD.*prog_name=\"([^\"]*)\"", line)
            if m and m.group(1) and " = -1 " not in line:
                progs[m.group(1)] = progs.get(m.group(1), 0.0) + ms
            m = re.search(r"BPF_MAP_CREATE.*map_name=\"([^\"]*)\"", line)
            if m and m.group(1) and " = -1 " not in line:
                maps[m.group(1)] = maps.get(m.group(1), 0.0) + ms
    return progs, maps


def torch_data(tmp, files):
    data = os.path.join(tmp, "data")
    subprocess.run([PYTHON, TORCH_JOB, data, os.path.join(tmp, "ckpt"), "--make-data",
                    "--files", str(files)], check=True)
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iolens", action="append", required=True,
                    help="an iolens binary (repeat to compare builds in the same rounds)")
    ap.add_argument("--runs", type=int, default=15, help="rounds of the trivial case")
    ap.add_argument("--torch-files", type=int, default=500, help="files of the PyTorch job")
    ap.add_argument("--torch-rounds", type=int, default=5, help="rounds of the PyTorch job (0: none)")
    ap.add_argument("--torch-epochs", type=int, default=1, help="epochs of the PyTorch job")
    ap.add_argument("--json", action="store_true",
                    help="traced runs also write --json (a temporary file): its cost is in the exit")
    ap.add_argument("--no-programs", action="store_true", help="skip the per-program part")
    ap.add_argument("--quiet-busy", type=float, default=0.3)
    ap.add_argument("--quiet-wait", type=float, default=5.0)
    ap.add_argument("--out", help="write every sample and summary as JSON")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("startup: run as root (iolens loads BPF programs)")
    builds = []
    for i, path in enumerate(a.iolens):
        if not os.access(path, os.X_OK):
            sys.exit("startup: not an executable: %s" % path)
        builds.append(("B%d" % i if len(a.iolens) > 1 else "iolens", os.path.abspath(path)))
    env = dict(os.environ, IOLENS_TIMING="1")
    for var in ("SUDO_UID", "SUDO_GID", "SUDO_USER", "SUDO_COMMAND"):
        env.pop(var, None)
    tmp = tempfile.mkdtemp(prefix="iolens-startup-")
    result = {"builds": dict(builds), "loadavg_start": loadavg(), "runs": a.runs}
    try:
        def traced(path, cmd, tag):
            argv = [path, "run", "-q"]
            if a.json:
                argv += ["--force", "--json", os.path.join(tmp, "%s.json" % tag)]
            return argv + ["--"] + cmd

        # Trivial command.
        true = shutil.which("true")
        cases = [("untraced", [true])] + [(b, traced(p, [true], b)) for b, p in builds]
        log("trivial: %d rounds of %s" % (a.runs, ", ".join(c[0] for c in cases)))
        triv = interleaved(cases, a.runs, a.quiet_busy, a.quiet_wait, env)
        base = statistics.median(triv["untraced"][0])
        result["trivial"] = {}
        print("\n## `iolens run -q -- true` (%d interleaved rounds; ms)\n" % a.runs)
        print("| run | wall median (min-max) | iolens' own (median - untraced median) |")
        print("|---|---|---|")
        print("| untraced `true` | %s | |" % fmt_ms(median_range(triv["untraced"][0])))
        for b, p in builds:
            s = median_range(triv[b][0])
            result["trivial"][b] = {"wall_ms": s, "own_ms": s["median"] - base,
                                    "samples": triv[b][0]}
            print("| %s `%s` | %s | %.0f ms |" % (b, p, fmt_ms(s), s["median"] - base))
        result["trivial"]["untraced"] = {"wall_ms": median_range(triv["untraced"][0]),
                                         "samples": triv["untraced"][0]}

        # Phases (from the same runs).
        steps = []
        for b, _ in builds:
            for t in triv[b][1]:
                steps += [k for k in t if k not in steps]
        if steps:
            print("\n## Steps of iolens' own time (IOLENS_TIMING=1, medians, ms)\n")
            print("| step | " + " | ".join(b for b, _ in builds) + " |")
            print("|---|" + "---|" * len(builds))
            result["steps"] = {}
            for k in steps:
                row = []
                for b, _ in builds:
                    vals = [t[k] for t in triv[b][1] if k in t]
                    row.append("%.1f" % statistics.median(vals) if vals else "-")
                    result["steps"].setdefault(b, {})[k] = median_range(vals)
                print("| %s | %s |" % (k, " | ".join(row)))

        # Programs and maps.
        if not a.no_programs:
            result["programs"] = {}
            for b, p in builds:
                vi = verified_insns(p)
                loads, maps = strace_bpf(p, tmp)
                result["programs"][b] = {"verified_insns": vi, "load_ms": loads, "map_ms": maps}
                print("\n## %s: programs (verified_insns; BPF_PROG_LOAD ms under strace -T)\n" % b)
                print("| program | verified_insns | load ms |")
                print("|---|---|---|")
                for name in sorted(set(vi) | set(loads), key=lambda n: -loads.get(n, 0.0)):
                    print("| %s | %s | %.1f |" % (name, vi.get(name, "-"), loads.get(name, 0.0)))
                print("| **total** (%d programs) | %d | %.1f |"
                      % (len(set(vi) | set(loads)), sum(vi.values()), sum(loads.values())))
                print("\nmaps (BPF_MAP_CREATE ms, total %.1f): %s" % (
                    sum(maps.values()),
                    ", ".join("%s %.1f" % (n, v) for n, v in
                              sorted(maps.items(), key=lambda kv: -kv[1]) if v >= 0.1)))

        # Short PyTorch job.
        if a.torch_rounds > 0:
            data = torch_data(tmp, a.torch_files)
            job = [PYTHON, TORCH_JOB, data, os.path.join(tmp, "ckpt"), "--files",
                   str(a.torch_files), "--epochs", str(a.torch_epochs), "--workers", "2"]
            cases = [("untraced", job)] + [(b, traced(p, job, b)) for b, p in builds]
            log("torch: %d rounds, %d files" % (a.torch_rounds, a.torch_files))
            tj = interleaved(cases, a.torch_rounds, a.quiet_busy, a.quiet_wait, env)
            base = statistics.median(tj["untraced"][0])
            result["torch"] = {"files": a.torch_files,
                               "untraced": {"wall_ms": median_range(tj["untraced"][0]),
                                            "samples": tj["untraced"][0]}}
            print("\n## PyTorch job, %d files, %d epochs, 2 workers (%d interleaved rounds)\n"
                  % (a.torch_files, a.torch_epochs, a.torch_rounds))
            print("| run | wall median (min-max) | vs untraced | iolens' own CPU (median, ms) "
                  "| exit steps (medians, ms) |")
            print("|---|---|---|---|---|")
            print("| untraced | %s | | | |" % fmt_ms(median_range(tj["untraced"][0])))
            for b, _ in builds:
                s = median_range(tj[b][0])
                exit_steps = {}
                for k in ("final_drain", "trace_finish", "snapshot", "summary", "darshan",
                          "json"):
                    vals = [t[k] for t in tj[b][1] if k in t]
                    if vals:
                        exit_steps[k] = statistics.median(vals)
                cpu = [t["cpu_user"] + t["cpu_system"] for t in tj[b][1] if "cpu_user" in t]
                result["torch"][b] = {"wall_ms": s, "ratio": s["median"] / base,
                                      "exit_steps_ms": exit_steps, "samples": tj[b][0],
                                      "cpu_ms": median_range(cpu) if cpu else None}
                print("| %s | %s | x%.3f | %s | %s |" % (
                    b, fmt_ms(s), s["median"] / base, fmt_ms(median_range(cpu)) if cpu else "-",
                    ", ".join("%s %.1f" % kv for kv in exit_steps.items()) or "n/a"))
        result["loadavg_end"] = loadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        log("wrote %s" % a.out)


if __name__ == "__main__":
    main()
