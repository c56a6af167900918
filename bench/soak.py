#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The soak of issue 16 item 5 at full size: e2e_daemon_soak (tests/e2e/daemon_soak_test.py)
with 1,000,000 files, its figures gathered. Not a test of its own: it runs that test, whose
checks (exact totals, the memory bound, no descriptor or memory growth between rounds) pass or
fail as in CI, and prints a table of what it measured. Root only.

    sudo /usr/bin/python3 bench/soak.py --build BUILD [--files 1000000] [--rounds 2] \\
        [--short 60] [--kernel-records 2097152 | --defaults] [--rate FILES_PER_S] \\
        [--drain-interval 1s]

BUILD: a build directory (a Release one for figures: bench/README.md "Soak"). The kernel map is
sized for the burst unless --kernel-records says otherwise (the loader reads ~100,000 files a
second here; at the defaults the kernel drops most of them, counted: issue 16 item 2). Needs
about 5 GiB of /dev/shm for 1,000,000 files (a page each). --defaults: the default kernel map
and ring; --rate: the loader paced to that many files a second (the rate the drain keeps up
with at the defaults is issue 16 item 2's figure: bench/README.md "Soak"); --drain-interval: the
daemon's `drain_interval` (the tests' 200 ms unless given; the default config's is 1 s).
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = os.path.join(HERE, "..", "tests", "e2e", "daemon_soak_test.py")

ROUND = re.compile(r"^round (\d+): loader ([\d.]+) s \((\d+) files/s\), records after ([\d.]+) s; "
                   r"iolensd fds (\d+), rss (\d+) KiB, peak (\d+) KiB, cpu ([\d.]+) s; status "
                   r"answers: (\d+), longest (\d+) ms")
SUMMARY = re.compile(r"^iolensd: ([\d.]+) s of CPU; peak RSS (\d+) KiB \(bound (\d+) KiB\); (\d+) "
                     r"status answers: median ([\d.]+) ms, 99th ([\d.]+) ms, longest ([\d.]+) ms")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--files", type=int, default=1000000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--short", type=int, default=60)
    p.add_argument("--kernel-records", type=int, default=2097152)
    p.add_argument("--defaults", action="store_true",
                   help="the default kernel_file_records and ring_size")
    p.add_argument("--rate", type=int, default=0, help="the loader's files a second (0: unpaced)")
    p.add_argument("--drain-interval", default="",
                   help="iolensd's drain_interval, e.g. 1s (default: the tests' 200ms)")
    a = p.parse_args()
    if a.drain_interval and not re.fullmatch(r"\d+(ms|s)", a.drain_interval):
        p.error("--drain-interval: a number with ms or s, e.g. 1s")
    b = os.path.realpath(a.build)
    env = dict(os.environ, IOLENS_E2E_SOAK_FILES=str(a.files), IOLENS_E2E_SOAK_ROUNDS=str(a.rounds),
               IOLENS_E2E_SOAK_SHORT=str(a.short),
               IOLENS_E2E_SOAK_KERNEL_RECORDS="0" if a.defaults else str(a.kernel_records),
               IOLENS_E2E_SOAK_RATE=str(a.rate))
    if a.drain_interval:
        extra = os.environ.get("IOLENS_E2E_DAEMON_CONFIG", "")
        env["IOLENS_E2E_DAEMON_CONFIG"] = "drain_interval: %s\n%s" % (a.drain_interval, extra)
    t0 = time.monotonic()
    r = subprocess.run(["/usr/bin/python3", TEST, "--iolens", b + "/agent/cli/iolens",
                        "--iolensd", b + "/agent/daemon/iolensd",
                        "--workload", b + "/tests/workloads/job_workload"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = r.stdout.splitlines()
    print("%d files x 2 epochs x 4 workers a round%s, %d rounds, %d short jobs a round, "
          "kernel_file_records %s, drain_interval %s: %s in %.0f s" %
          (a.files, " at %d files/s" % a.rate if a.rate else "", a.rounds, a.short,
           "default" if a.defaults else a.kernel_records, a.drain_interval or "200ms",
           "passed" if r.returncode == 0 else "FAILED (exit %d)" % r.returncode,
           time.monotonic() - t0))
    print("| round | loader s | files/s | records after s | fds | RSS MiB | peak MiB | CPU s "
          "| longest status ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for line in lines:
        m = ROUND.match(line)
        if m:
            g = m.groups()
            print("| %s | %s | %s | %s | %s | %.0f | %.0f | %s | %s |" %
                  (g[0], g[1], g[2], g[3], g[4], int(g[5]) / 1024, int(g[6]) / 1024, g[7], g[9]))
    for line in lines:
        m = SUMMARY.match(line)
        if m:
            g = m.groups()
            print("CPU %s s; peak RSS %.0f MiB of a bound of %.0f MiB; %s status answers: median "
                  "%s ms, 99th %s ms, longest %s ms" %
                  (g[0], int(g[1]) / 1024, int(g[2]) / 1024, g[3], g[4], g[5], g[6]))
    for line in lines:
        if line.startswith(("MISMATCH", "FAIL", "data set", "Traceback")):
            print(line[:300])
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
