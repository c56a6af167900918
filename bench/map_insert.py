#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What making one new entry of a BPF hash map costs, preallocated or not, by value size.

iolens makes one 936-byte record per new (process, file) and one small `seen_files` entry per
new file (bpf/README.md "Two tiers of records"). This measures, in one invocation with
interleaved rounds, a tp_btf program on raw sys_enter that inserts one new key per getppid() of
the measuring process (bench/map_insert.bpf.c, run by bench/map_insert.c), against the same
program inserting nothing; and how long the kernel takes to make such a map whole
(preallocated) or empty (BPF_F_NO_PREALLOC), the start-up side of the choice.

    sudo /usr/bin/python3 bench/map_insert.py [--rounds 5] [--calls 20000]

Prints a Markdown table: median ns per getppid, and the extra of each case over the baseline.
Needs root, clang, gcc and libbpf-dev.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (8, 64, 256, 936)


def run_ok(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("map_insert: %s failed (%d): %s" % (" ".join(argv), r.returncode,
                                                     r.stderr.strip()[-2000:]))
    return r


def build(tmp):
    clang = shutil.which("clang")
    if not clang:
        sys.exit("map_insert: clang is needed")
    multiarch = run_ok(["gcc", "-print-multiarch"]).stdout.strip()  # for asm/types.h
    objs = {}
    for size in SIZES:
        objs[size] = os.path.join(tmp, "map_insert_%d.bpf.o" % size)
        run_ok([clang, "-O2", "-g", "-target", "bpf", "-I/usr/include/" + multiarch,
                "-DVALUE_SIZE=%d" % size, "-c", os.path.join(HERE, "map_insert.bpf.c"),
                "-o", objs[size]])
    exe = os.path.join(tmp, "map_insert")
    run_ok(["gcc", "-O2", "-Wall", "-o", exe, os.path.join(HERE, "map_insert.c"), "-lbpf"])
    return exe, objs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=8192,
                    help="getppid() calls (new entries) per run, and the map's size (default "
                         "8192: iolens run's preallocated tier)")
    a = ap.parse_args()
    if a.rounds < 1 or not 1 <= a.calls <= 1000000:
        sys.exit("map_insert: --rounds at least 1, --calls 1 to 1000000")
    if os.geteuid() != 0:
        sys.exit("map_insert: run as root (it loads BPF programs)")
    with tempfile.TemporaryDirectory(prefix="iolens-map-insert-") as tmp:
        exe, objs = build(tmp)
        cases = [("no insert", objs[936], 0, 0)]
        for size in SIZES:
            cases.append(("%d B, memory follows use" % size, objs[size], 0, 1))
            cases.append(("%d B, preallocated" % size, objs[size], 1, 1))
        times = {c[0]: [] for c in cases}
        for r in range(a.rounds):
            for name, obj, prealloc, insert in cases:
                out = run_ok([exe, obj, str(prealloc), str(insert), str(a.calls)]).stdout
                times[name].append(float(out))
            print("round %d/%d done" % (r + 1, a.rounds), file=sys.stderr, flush=True)
        creates = {}
        for entries in (8192, 65536):
            for prealloc in (0, 1):
                ms = [float(run_ok([exe, "--create", str(entries), "936", str(prealloc)]).stdout)
                      for _ in range(a.rounds)]
                creates[(entries, prealloc)] = statistics.median(ms)
    base = statistics.median(times["no insert"])
    print("| case | ns per getppid (median of %d) | extra per new entry |" % a.rounds)
    print("|---|---|---|")
    for name, *_ in cases:
        m = statistics.median(times[name])
        print("| %s | %.0f | %s |" % (name, m, "" if name == "no insert" else "+%.0f" % (m - base)))
    print()
    print("| making a hash of 936-byte values | memory follows use | preallocated |")
    print("|---|---|---|")
    for entries in (8192, 65536):
        print("| %d entries | %.2f ms | %.2f ms |" % (entries, creates[(entries, 0)],
                                                     creates[(entries, 1)]))


if __name__ == "__main__":
    main()
