#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`iolens run -q -- true` counted by iolensd (docs/run.md) against the local path and an
untraced `true`: wall time from start to exit, medians of N interleaved rounds.

Starts a private iolensd (temporary dirs, pin dir /sys/fs/bpf/iolens-bench-run-<pid>, run root
/iolens-bench-run-<pid>.runs), twice: with `hooks_idle: 30s` (the syscall hooks stay attached
between runs, the usual case on a node where runs follow each other) and with `hooks_idle: 0s`
(every run attaches them: the first run on an idle node). Root only.

    sudo /usr/bin/python3 bench/run_via_daemon_bench.py --iolens build/agent/cli/iolens \
        --iolensd build/agent/daemon/iolensd -n 30
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time


def start_daemon(iolensd, work, tag, hooks_idle):
    d = os.path.join(work, tag)
    os.makedirs(os.path.join(d, "sock"), mode=0o755)
    pin = "/sys/fs/bpf/iolens-bench-run-%d-%s" % (os.getpid(), tag)
    cfg = os.path.join(d, "iolensd.yaml")
    with open(cfg, "w") as f:
        f.write("output_dir: %s/out\nstate_dir: %s/state\npin_dir: %s\nsocket: %s/sock/s\n"
                "metrics:\n  listen: \"\"\nhooks_idle: %s\nruns: /iolens-bench-run-%d-%s.runs\n"
                "jobs:\n  - cgroup: {paths: [\"/iolens-bench-run-%d-%s.jobs/*\"]}\n" %
                (d, d, pin, d, hooks_idle, os.getpid(), tag, os.getpid(), tag))
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolens", required=True)
    ap.add_argument("--iolensd", required=True)
    ap.add_argument("-n", type=int, default=20)
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
        res = {k: [] for k in cmds}
        for _ in range(a.n):
            for k, c in cmds.items():
                t = time.perf_counter()
                r = subprocess.run(c, stdout=subprocess.DEVNULL)
                res[k].append((time.perf_counter() - t) * 1000)
                if r.returncode != 0:
                    raise SystemExit("%s: exit %d" % (k, r.returncode))
        base = statistics.median(res["true (untraced)"])
        print("%-34s %9s %9s %9s %12s" % ("command", "median", "min", "max", "minus true"))
        for k, v in res.items():
            m = statistics.median(v)
            print("%-34s %7.1f ms %6.1f ms %6.1f ms %9.1f ms" % (k, m, min(v), max(v), m - base))
        print("(%d interleaved rounds; load average %s)" % (a.n, os.getloadavg()))
    finally:
        for p, _, pin in daemons:
            p.send_signal(signal.SIGTERM)
            p.wait()
            shutil.rmtree(pin, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
