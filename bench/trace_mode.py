#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What trace mode costs: io_loops read4k and smallfiles untraced, traced with trace mode off,
and traced with trace mode on (every call a record, drained every 10 ms), in interleaved rounds
whose order flips each round; prints medians, minima and ratios. Run as root from the source
tree after building bench/trace_mode (see its header) and io_loops:
    gcc -O2 -o /tmp/io_loops bench/io_loops.c
    sudo /usr/bin/python3 bench/trace_mode.py --trace-mode ./trace_mode --io-loops /tmp/io_loops
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODES = ["untraced", "off", "all"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace-mode", required=True, help="the bench/trace_mode binary")
    ap.add_argument("--io-loops", required=True, help="the bench/io_loops binary")
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="iolens-trace-bench-", dir="/var/tmp")
    data = os.path.join(work, "read4k.dat")
    with open(data, "wb") as f:
        f.write(os.urandom(4 << 20))
    small = os.path.join(work, "small")
    subprocess.run([a.io_loops, "mkfiles", small], check=True, capture_output=True)
    loops = {"read4k": [a.io_loops, "read4k", data, "300000"],
             "smallfiles": [a.io_loops, "smallfiles", small]}
    ns = {loop: {m: [] for m in MODES} for loop in loops}
    for r in range(a.rounds):
        order = MODES if r % 2 == 0 else MODES[::-1]
        for loop, argv in loops.items():
            for m in order:
                out = subprocess.run([a.trace_mode, m, "--"] + argv, check=True,
                                     capture_output=True, text=True).stdout
                ns[loop][m].append(json.loads(out.strip().splitlines()[-1])["ns_per_op"])
    print("| loop | untraced | trace mode off | trace mode on | on / off | on / untraced | min off / on |")
    print("|---|---|---|---|---|---|---|")
    for loop in loops:
        med = {m: statistics.median(ns[loop][m]) for m in MODES}
        low = {m: min(ns[loop][m]) for m in MODES}
        print(f"| {loop} | {med['untraced']:.0f} ns | {med['off']:.0f} ns | {med['all']:.0f} ns "
              f"| x{med['all'] / med['off']:.3f} (+{med['all'] - med['off']:.0f} ns) "
              f"| x{med['all'] / med['untraced']:.3f} | {low['off']:.0f} / {low['all']:.0f} ns |")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
