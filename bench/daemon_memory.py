#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""iolensd's memory over one big job: its RSS while the job runs, its peak, what it keeps after.

Not a test: nothing passes or fails. Root only (it starts iolensd, makes cgroups, runs a job).

    sudo /usr/bin/python3 bench/daemon_memory.py --iolensd BUILD/agent/daemon/iolensd \\
        --workload BUILD/tests/workloads/job_workload [--iolensd OTHER ...] [--files 200000] \\
        [--runs 2] [--defaults]

For each run, and in it each iolensd given (interleaved: A, B, A, B, ...): a job cgroup runs
`job_workload many DIR N 100` on /dev/shm (N files created, written, read back, unlinked), the
cgroup is removed and the record awaited. Sampled every 250 ms from the job's start to 4 s after
the record: the daemon's RSS, its last drain round's duration (`status`) and the
`iolens_metrics_snapshot_duration_seconds` it exports. Printed per run: the RSS at start (with
the rings mapped), the largest while the job ran, VmHWM, the RSS 4 s after the record (what it
keeps: the closed job freed and given back), the daemon's CPU time, the longest drain round and
metrics snapshot seen, and what it counted as lost. Without --defaults the kernel map and ring
are sized for the burst as `e2e_daemon_limits` does (262,144 records, 64 MiB: nothing lost);
with it, the defaults (the job then outruns them on 2 CPUs and losses are counted).

Uses the e2e harness (tests/e2e/daemon_common.py) to start the daemon and make the cgroups.
"""
import argparse
import os
import re
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

SNAPSHOT = re.compile(r"^iolens_metrics_snapshot_duration_seconds(?:\{[^}]*\})? (\S+)", re.M)


def measure(iolensd, workload, nfiles, defaults):
    ck = E.Checker("daemon_memory")
    cg = D.Cgroups()
    data = D.tempdir("memory", base="/dev/shm")
    rules = '  - cgroup: {paths: ["%s/a/*"]}' % cg.prefix
    extra = "" if defaults else "limits:\n  kernel_file_records: 262144\n  ring_size: 64MiB\n"
    d = D.Daemon(iolensd, rules, tag="memory", extra_config=extra)
    d.start(ck)
    pid = d.proc.pid
    ports = d.status().get("metrics", {}).get("ports") or []
    cg.mkdir("a/big")
    job_id = "cgroup" + cg.rel("a/big")
    d.wait_live(ck, [job_id])
    rss0 = D.read_rss_kib(pid)[0]
    samples, drains, snaps = [], [], []
    stop = [False]

    def poll():
        while not stop[0]:
            samples.append((time.monotonic(), D.read_rss_kib(pid)[0]))
            try:
                drains.append(d.status()["drain"]["last_us"] / 1e3)
                if ports:
                    url = "http://127.0.0.1:%d/metrics" % ports[0]
                    m = SNAPSHOT.search(urllib.request.urlopen(url, timeout=5).read().decode())
                    if m:
                        snaps.append(float(m.group(1)) * 1e3)
            except (OSError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.25)

    th = threading.Thread(target=poll)
    th.start()
    t0 = time.monotonic()
    cpu0 = D.cpu_seconds(pid)
    p = D.run_in_cgroup(cg.abs("a/big"), [workload, "many", data, str(nfiles), "100"])
    D.finish_workload(ck, p, "job_workload many", timeout=600)
    t_rm = time.monotonic()
    cg.rmdir("a/big")
    if d.wait_record_file(600) is None:
        ck.fatal("no record 600 s after the job's cgroup was removed; log tail:\n%s" %
                 d.log()[-3000:])
    t_rec = time.monotonic()
    time.sleep(4)
    stop[0] = True
    th.join()
    out = {"job_s": t_rm - t0, "record_s": t_rec - t_rm, "cpu_s": D.cpu_seconds(pid) - cpu0,
           "rss0": rss0 / 1024, "run_max": max([r for t, r in samples if t < t_rm] or [0]) / 1024,
           "hwm": D.read_rss_kib(pid)[1] / 1024, "rest": D.read_rss_kib(pid)[0] / 1024,
           "drain": max(drains or [0]), "snap": max(snaps or [0]),
           "lost": {k: v for k, v in d.status().get("lost", {}).items() if v}}
    d.stop()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolensd", action="append", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--files", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--defaults", action="store_true",
                    help="the default kernel map and ring (losses expected on 2 CPUs)")
    a = ap.parse_args()
    D.require_root()
    print("| iolensd | run | job | RSS at start | RSS while the job ran (max) | VmHWM | RSS 4 s "
          "after the record | daemon CPU | longest drain round | longest metrics snapshot | "
          "lost |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in range(a.runs):
        for b in a.iolensd:
            r = measure(b, a.workload, a.files, a.defaults)
            print("| %s | %d | %d files, %.1f s; record after %.1f s | %.0f MiB | %.0f MiB | "
                  "%.0f MiB | %.0f MiB | %.1f s | %.0f ms | %.0f ms | %s |" %
                  (b, run + 1, a.files, r["job_s"], r["record_s"], r["rss0"], r["run_max"],
                   r["hwm"], r["rest"], r["cpu_s"], r["drain"], r["snap"], r["lost"] or "none"),
                  flush=True)


if __name__ == "__main__":
    main()
