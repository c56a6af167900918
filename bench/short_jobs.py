#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Thousands of short jobs in a row under iolensd: what each costs the node and the daemon.

Not a test: nothing passes or fails. Root only (it starts iolensd, makes cgroups, runs jobs).

    sudo /usr/bin/python3 bench/short_jobs.py --iolensd BUILD/agent/daemon/iolensd \\
        --workload BUILD/tests/workloads/job_workload [--iolensd OTHER ...] [--jobs 10000] \\
        [--runs 2]

A job: `job_workload burst` makes a cgroup below the rule's parent, moves itself in, writes one
small file and exits; the benchmark removes the cgroup and starts the next. Per run, first the
same jobs with no daemon (the untraced baseline, same invocation), then under each iolensd
given (interleaved: A, B, A, B, ...; each a fresh daemon with the default configuration but a
free metrics port). Printed per daemon and run: the jobs' wall time and its ratio to the
untraced one, the daemon's CPU per job (loop, record writer and state saver together), how long
after the last job its last record appeared, its RSS at start, after the jobs and 5 s later,
its open descriptors at start and at the end, the records written, and the node's losses.

Uses the e2e harness (tests/e2e/daemon_common.py) to start the daemon and make the cgroups.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402


def run_jobs(workload, cg, work, n, tag):
    """n jobs one after the other below cg's `sj-<tag>` (made already); returns the wall
    time."""
    parent = "sj-" + tag
    t0 = time.monotonic()
    for i in range(n):
        sub = cg.abs("%s/j%d" % (parent, i))
        cg.created.append(sub)
        p = subprocess.run([workload, "burst", sub, work, "%s-%d" % (tag, i), str(1000 + i)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        if p.returncode != 0:
            sys.exit("job_workload burst exited %d: %s" % (p.returncode, p.stderr.decode()))
        os.rmdir(sub)
    return time.monotonic() - t0


def one(args, iolensd, cg, work, n, tag):
    ck = E.Checker("short_jobs")
    cg.mkdir("sj-" + tag)  # before the daemon: a watch root it reads at start
    d = D.Daemon(iolensd, '  - cgroup: {paths: ["%s/sj-%s/*"]}' % (cg.prefix, tag), tag=tag)
    d.start(ck)
    pid = d.proc.pid
    rss0 = D.read_rss_kib(pid)[0]
    fds0 = len(os.listdir("/proc/%d/fd" % pid))
    cpu0 = D.cpu_seconds(pid)
    wall = run_jobs(args.workload, cg, work, n, tag)
    t_last = time.monotonic()
    while len(d.record_files()) < n and time.monotonic() - t_last < 600:
        time.sleep(0.1)
    behind = time.monotonic() - t_last
    rss1 = D.read_rss_kib(pid)[0]
    cpu = D.cpu_seconds(pid) - cpu0
    time.sleep(5)
    rss2 = D.read_rss_kib(pid)[0]
    fds1 = len(os.listdir("/proc/%d/fd" % pid))
    st = d.status() or {}
    lost = {k: v for k, v in (st.get("lost") or {}).items() if v}
    written = (st.get("output") or {}).get("written")
    d.stop()
    return {"wall": wall, "cpu_ms_per_job": cpu * 1000 / n, "behind_s": behind,
            "rss_kib": (rss0, rss1, rss2), "fds": (fds0, fds1), "written": written, "lost": lost}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iolensd", action="append", required=True)
    p.add_argument("--workload", required=True)
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args()
    D.require_root()
    cg = D.Cgroups()
    work = D.tempdir("short-jobs", base="/dev/shm")
    try:
        for r in range(args.runs):
            cg.mkdir("sj-base%d" % r)
            base = run_jobs(args.workload, cg, work, args.jobs, "base%d" % r)
            print("run %d: %d jobs untraced in %.1f s (%.2f ms a job)" %
                  (r, args.jobs, base, base * 1000 / args.jobs), flush=True)
            for k, iolensd in enumerate(args.iolensd):
                m = one(args, iolensd, cg, work, args.jobs, "d%d-%d" % (k, r))
                print("  %s: jobs %.1f s (x%.2f untraced); iolensd CPU %.2f ms a job; last "
                      "record %.1f s after the last job; RSS %d -> %d -> %d KiB (start, after, "
                      "+5 s); fds %d -> %d; written %s; lost %s" %
                      (iolensd, m["wall"], m["wall"] / base, m["cpu_ms_per_job"], m["behind_s"],
                       m["rss_kib"][0], m["rss_kib"][1], m["rss_kib"][2], m["fds"][0],
                       m["fds"][1], m["written"], m["lost"] or "none"), flush=True)
                for f in os.listdir(work):
                    os.unlink(os.path.join(work, f))
    finally:
        cg.remove_all()


if __name__ == "__main__":
    main()
