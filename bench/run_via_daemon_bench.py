#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`iolens run -q -- true` counted by iolensd (docs/run.md) against the local path and an
untraced `true`: wall time from start to exit, medians of N interleaved rounds.

Starts a private iolensd (temporary dirs, pin dir /sys/fs/bpf/iolens-bench-run-<pid>, run root
/iolens-bench-run-<pid>.runs), twice: with `hooks_idle: 30s` (the syscall hooks stay attached
between runs, the usual case on a node where runs follow each other) and with `hooks_idle: 0s`
(every run attaches them: the first run on an idle node). Root only.

    sudo /usr/bin/python3 bench/run_via_daemon_bench.py --iolens build/agent/cli/iolens \
        --iolensd build/agent/daemon/iolensd -n 30 [--torch-files 500 --torch-rounds 5]

With --torch-rounds R > 0, also a short PyTorch DataLoader job (tests/workloads/torch_job.py,
--torch-files files, --torch-epochs (1) epochs, 2 workers, ~2-3 s of work at the defaults):
untraced, `iolens run -q` via the daemon (hooks attached) and `iolens run -q --local`, R
interleaved rounds, whole-run wall time (issue 20's goal: within +5% of untraced), and the
daemon's own CPU time during each run via the daemon, as a share of one core over the run
(issue 14's goal for the agent: under 1%).

With --smallfiles-rounds R > 0, what a new (process, file) record costs inside a job of the
daemon: bench/io_loops.c `smallfiles` (open, read 100 KiB, read EOF, close of each of
--smallfiles cached files: every file a new record) untraced and via two daemons (started
after the others stop, `hooks_idle: 0s`, every run waiting until both have their syscall hooks
detached), one with `limits.kernel_file_records_preallocated: true` and one with `false`; R
interleaved rounds of io_loops' own time per file (iolens' start and exit left out).
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_bench  # noqa: E402  (its control-socket request)
import run_bench as RB  # noqa: E402  (io_loops' build and its JSON line)

TORCH_JOB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                         "workloads", "torch_job.py")
PYTHON = "/usr/bin/python3"  # Debian's: has torch and numpy


def start_daemon(iolensd, work, tag, hooks_idle, extra=""):
    d = os.path.join(work, tag)
    os.makedirs(os.path.join(d, "sock"), mode=0o755)
    pin = "/sys/fs/bpf/iolens-bench-run-%d-%s" % (os.getpid(), tag)
    cfg = os.path.join(d, "iolensd.yaml")
    with open(cfg, "w") as f:
        f.write("output_dir: %s/out\nstate_dir: %s/state\npin_dir: %s\nsocket: %s/sock/s\n"
                "metrics:\n  listen: \"\"\nhooks_idle: %s\nruns: /iolens-bench-run-%d-%s.runs\n"
                "%sjobs:\n  - cgroup: {paths: [\"/iolens-bench-run-%d-%s.jobs/*\"]}\n" %
                (d, d, pin, d, hooks_idle, os.getpid(), tag, extra, os.getpid(), tag))
    log = open(os.path.join(d, "iolensd.log"), "wb")
    p = subprocess.Popen([iolensd, "-c", cfg], stdout=log, stderr=subprocess.STDOUT)
    sock = os.path.join(d, "sock", "s")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            s.close()
            return p, sock, pin
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("iolensd did not start; see %s" % os.path.join(d, "iolensd.log"))


def settled(sock, after=None, timeout=15.0):
    """Until the daemon at `sock` has no state save under way and, with `after`, has finished
    one since it had `after` saves; returns its saves then. The records of a run's exited
    processes leave the kernel only once a save holds them (docs/daemon.md, restart without
    loss), at most every 5 s, and until then every drain reads them again: a run's cost to the
    daemon ends there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = daemon_bench.ask(sock, "status").get("state", {})
        n = st.get("saves", 0)
        if (after is None or n > after) and not st.get("under_way", False):
            if after is not None:
                time.sleep(0.2)  # the deletions follow the save's collection in the loop
            return n
        time.sleep(0.1)
    raise SystemExit("the daemon at %s made no state save within %.0f s" % (sock, timeout))


def rounds(cmds, n, reverse_odd=False, cpu_of=None):
    """{label: [wall ms...]}: every round runs each command once (reversed every other round
    with reverse_odd). cpu_of {label: (pid, socket)}: also the CPU time (ms) that daemon used
    for each run of that label, from the run's start until its first state save after the run
    (settled()), in res[label + " cpu"]."""
    cpu_of = cpu_of or {}
    res = {k: [] for k in cmds}
    for k in cpu_of:
        res[k + " cpu"] = []
    for r in range(n):
        order = list(cmds.items())
        if reverse_odd and r % 2:
            order.reverse()
        for k, c in order:
            if k in cpu_of:
                pid, sock = cpu_of[k]
                s0 = settled(sock)
                c0 = RB.self_cpu_s(pid)
            t = time.perf_counter()
            p = subprocess.run(c, stdout=subprocess.DEVNULL)
            res[k].append((time.perf_counter() - t) * 1000)
            if p.returncode != 0:
                raise SystemExit("%s: exit %d" % (k, p.returncode))
            if k in cpu_of:
                settled(sock, after=s0)
                c1 = RB.self_cpu_s(pid)
                if c0 is None or c1 is None:
                    raise SystemExit("%s: the daemon (pid %d) is gone" % (k, pid))
                res[k + " cpu"].append((c1 - c0) * 1000)
    return res


def torch_rounds(a, work, sock, daemon_pid):
    data = os.path.join(work, "torch-data")
    subprocess.run([PYTHON, TORCH_JOB, data, os.path.join(work, "ckpt"), "--make-data",
                    "--files", str(a.torch_files)], check=True, stdout=subprocess.DEVNULL)
    job = [PYTHON, TORCH_JOB, data, os.path.join(work, "ckpt"), "--files", str(a.torch_files),
           "--epochs", str(a.torch_epochs), "--workers", "2"]
    via = "via iolensd (hooks attached)"
    cmds = {
        "untraced": job,
        via: [a.iolens, "run", "-q", "--daemon", "--socket", sock, "--"] + job,
        "local programs": [a.iolens, "run", "-q", "--local", "--"] + job,
    }
    res = rounds(cmds, a.torch_rounds, reverse_odd=True, cpu_of={via: (daemon_pid, sock)})
    cpu = res.pop(via + " cpu")
    base = statistics.median(res["untraced"])
    print("\nPyTorch job, %d files, %d epoch(s), 2 workers (%d interleaved rounds; load average "
          "%s)" % (a.torch_files, a.torch_epochs, a.torch_rounds, os.getloadavg()))
    print("%-30s %9s %9s %9s %8s" % ("run", "median", "min", "max", "ratio"))
    for k, v in res.items():
        m = statistics.median(v)
        print("%-30s %7.0f ms %6.0f ms %6.0f ms  x%.3f" % (k, m, min(v), max(v), m / base))
    # The daemon's own CPU (user + system, its threads; the kernel programs run in the job's
    # threads and are in the job's time) from the run's start to its first state save after
    # the run (the run's exited records then leave the kernel), against the run's wall time:
    # the share of one core the node agent took for this job.
    share = [c / w for c, w in zip(cpu, res[via])]
    print("iolensd's CPU per run via the daemon (up to its next state save): median %.0f ms "
          "(%s ms), %.2f%% of a core over the run (min %.2f%%, max %.2f%%)" % (statistics.median(cpu),
                                                  ", ".join("%.0f" % c for c in cpu),
                                                  100 * statistics.median(share),
                                                  100 * min(share), 100 * max(share)))


def hooks_attached(sock):
    """Whether the daemon at `sock` has its syscall hooks attached (`status`, docs/control.md)."""
    return daemon_bench.ask(sock, "status").get("syscall_hooks") == "attached"


def wait_detached(socks):
    """Until no daemon of `socks` has its syscall hooks attached (hooks_idle: 0s detaches them
    when a run's job ends), so that no run pays another daemon's hooks."""
    deadline = time.monotonic() + 10
    while any(hooks_attached(x) for x in socks):
        if time.monotonic() > deadline:
            raise SystemExit("a daemon kept its syscall hooks attached for 10 s")
        time.sleep(0.02)


def smallfiles_rounds(a, work, daemons):
    """io_loops smallfiles untraced and via each of `daemons` ({label: socket}, each with
    hooks_idle: 0s), interleaved; every run starts with all their hooks detached."""
    exe = RB.build_io_loops(work)
    data = os.path.join(work, "sf")
    RB.run_ok([exe, "mkfiles", data, str(a.smallfiles), "100"])
    loop = [exe, "smallfiles", data, str(a.smallfiles)]
    cmds = {"untraced": loop}
    for label, sock in daemons.items():
        cmds[label] = [a.iolens, "run", "-q", "--daemon", "--socket", sock, "--"] + loop
    res = {k: [] for k in cmds}
    for r in range(a.smallfiles_rounds):
        order = list(cmds.items())
        if r % 2:
            order.reverse()
        for k, c in order:
            wait_detached(daemons.values())
            res[k].append(RB.run_loop(c)["ns_per_op"])
    base = statistics.median(res["untraced"])
    print("\nsmall files via iolensd: %d files a run, each a new record (%d interleaved rounds; "
          "load average %s)" % (a.smallfiles, a.smallfiles_rounds, os.getloadavg()))
    print("%-44s %10s %10s %8s %10s" % ("run", "median", "min", "ratio", "extra"))
    for k, v in res.items():
        m = statistics.median(v)
        print("%-44s %7.2f us %7.2f us  x%.3f %+7.2f us" % (k, m / 1000, min(v) / 1000, m / base,
                                                           (m - base) / 1000))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolens", required=True)
    ap.add_argument("--iolensd", required=True)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--torch-files", type=int, default=500)
    ap.add_argument("--torch-rounds", type=int, default=0)
    ap.add_argument("--torch-epochs", type=int, default=1)
    ap.add_argument("--smallfiles", type=int, default=2000)
    ap.add_argument("--smallfiles-rounds", type=int, default=0)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="iolens-bench-run-", dir="/var/tmp")
    os.chmod(work, 0o755)
    daemons = []
    try:
        warm = start_daemon(a.iolensd, work, "warm", "30s")
        cold = start_daemon(a.iolensd, work, "cold", "0s")
        daemons = [warm, cold]
        cmds = {
            "true (untraced)": ["true"],
            "iolens --version": [a.iolens, "--version"],
            "run via iolensd, hooks attached": [a.iolens, "run", "-q", "--daemon", "--socket",
                                                warm[1], "--", "true"],
            "run via iolensd, hooks detached": [a.iolens, "run", "-q", "--daemon", "--socket",
                                                cold[1], "--", "true"],
            "run, local programs": [a.iolens, "run", "-q", "--local", "--", "true"],
        }
        res = rounds(cmds, a.n)
        base = statistics.median(res["true (untraced)"])
        print("%-34s %9s %9s %9s %12s" % ("command", "median", "min", "max", "minus true"))
        for k, v in res.items():
            m = statistics.median(v)
            print("%-34s %7.1f ms %6.1f ms %6.1f ms %9.1f ms" % (k, m, min(v), max(v), m - base))
        print("(%d interleaved rounds; load average %s)" % (a.n, os.getloadavg()))
        if a.torch_rounds > 0:
            torch_rounds(a, work, warm[1], warm[0].pid)
        if a.smallfiles_rounds > 0:
            # Only these two daemons, hooks detached between runs: the untraced runs pay no
            # daemon's hooks, a traced run only its own.
            for p, _, pin in daemons:
                p.send_signal(signal.SIGTERM)
                p.wait()
                shutil.rmtree(pin, ignore_errors=True)
            daemons = []
            pre = start_daemon(a.iolensd, work, "pre", "0s",
                               "limits:\n  kernel_file_records_preallocated: true\n")
            daemons.append(pre)
            ondemand = start_daemon(a.iolensd, work, "ondemand", "0s",
                                    "limits:\n  kernel_file_records_preallocated: false\n")
            daemons.append(ondemand)
            smallfiles_rounds(a, work, {"via iolensd, records preallocated": pre[1],
                                        "via iolensd, records made on demand": ondemand[1]})
    finally:
        for p, _, pin in daemons:
            p.send_signal(signal.SIGTERM)
            p.wait()
            shutil.rmtree(pin, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
