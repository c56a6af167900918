#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Where a traced call's cost goes, by removal: the same `pread` loop (4 KiB of a cached file)
untraced, under the bare hooks (empty tp_btf programs on raw sys_enter/sys_exit, from
bench/variants.bpf.c), under iolens, and under iolens with parts taken away (an optional program
switched off with --disable-program, or a patched build given with --case). Each case's extra
time per call over the untraced loop is what that configuration costs; differences between
cases are what a part costs. Removal measures a part with everything around it (cache lines,
the tracepoint's slow path, the glue), which bpf_stats, whose own clock reads add ~50-100 ns per
program run on this VM, does not.

    sudo /usr/bin/python3 bench/per_call_parts.py --iolens build/agent/cli/iolens [--rounds 10] \\
        [--without mm_filemap_get_pages] [--case 'LABEL=ENV=VALUE /path/to/iolens'] [--json FILE]
        [--loop pread|rand|getfd|getppid] [--stat batch|mean] [--timing-off]

--loop rand preads 4 KiB at pseudo-random 4 KiB-aligned offsets (a new stride nearly every call:
the tallies past a record's 8 values and Darshan's 32). --loop getfd times fcntl(F_GETFD), a call iolens hooks but does not count; getppid, a call that
is no I/O at all. For pread, each run's figure is the median over batches of 1,000 calls
(--stat batch, io_loops' batch_median_ns_per_op), which leaves the host's interruptions out.

A --case is a command prefix run as `PREFIX run -q -- LOOP` (leading NAME=VALUE words set the
environment), for a build patched to leave a part out. The loop is timed with the thread's own CPU
time (io_loops' IO_LOOPS_CLOCK=thread; --clock monotonic for the wall clock); rounds are
interleaved, their order reversed every other round, and each case is paired with an untraced
run just before it: the median of those differences ("paired") is the steadiest figure when the
host's speed drifts between runs (±150 ns per call here). Needs root.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_bench as R  # noqa: E402


def build_variants(tmp):
    """variants.bpf.o and variant_loader in tmp, or exits with the reason."""
    clang = shutil.which("clang")
    if not clang:
        sys.exit("per_call_parts: clang is needed for the empty-hook cases")
    obj = os.path.join(tmp, "variants.bpf.o")
    loader = os.path.join(tmp, "variant_loader")
    multiarch = R.run_ok(["gcc", "-print-multiarch"]).stdout.strip()
    R.run_ok([clang, "-O2", "-g", "-target", "bpf", "-I/usr/include/" + multiarch, "-c",
              os.path.join(HERE, "variants.bpf.c"), "-o", obj])
    R.run_ok(["gcc", "-O2", "-Wall", "-o", loader, os.path.join(HERE, "variant_loader.c"),
              "-lbpf"])
    return loader, obj


def parse_case(text):
    """'LABEL=[NAME=VALUE ...] PREFIX...' -> (label, env additions, argv prefix)."""
    label, sep, rest = text.partition("=")
    words = shlex.split(rest)
    if not sep or not label or not words:
        sys.exit("per_call_parts: --case wants LABEL=[NAME=VALUE ...] IOLENS, got %r" % text)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("/"):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    if not words:
        sys.exit("per_call_parts: --case %r names no iolens binary" % text)
    return label, env, words


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iolens", required=True, help="the iolens binary (a Release build)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=1000000, help="preads per run")
    ap.add_argument("--without", action="append", default=[],
                    help="also run iolens with this optional program disabled (repeatable)")
    ap.add_argument("--timing-off", action="store_true",
                    help="also run iolens with --timing off (no sys_enter program)")
    ap.add_argument("--case", action="append", default=[],
                    help="LABEL=[NAME=VALUE ...] IOLENS: a further build to run (repeatable)")
    ap.add_argument("--clock", choices=("thread", "monotonic"), default="thread",
                    help="io_loops' clock (IO_LOOPS_CLOCK): the thread's CPU time (default, as "
                    "bench/README.md's table) or the wall clock")
    ap.add_argument("--loop", choices=("pread", "rand", "getfd", "getppid"), default="pread",
                    help="the call: 4 KiB pread of a cached file (default), fcntl(F_GETFD) "
                    "(hooked, not counted), getppid (not an I/O call)")
    ap.add_argument("--stat", choices=("batch", "mean"), default="batch",
                    help="per run: the median over batches of 1,000 calls (default; leaves the "
                    "host's interruptions out) or the mean over the whole loop")
    ap.add_argument("--json", help="write every sample here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("per_call_parts: needs root (it loads BPF programs)")
    iolens = R.find_iolens(a.iolens)

    tmp = tempfile.mkdtemp(prefix="iolens-parts-")
    try:
        exe = R.build_io_loops(tmp)
        loader, obj = build_variants(tmp)
        data = os.path.join(tmp, "read4k.dat")
        with open(data, "wb") as f:
            f.write(os.urandom(8 << 20))
        with open(data, "rb") as f:  # cached: the loop measures cached reads
            while f.read(1 << 20):
                pass
        loop = {"pread": [exe, "read4k", data, str(a.calls), "pread"],
                "rand": [exe, "read4k", data, str(a.calls), "rand"],
                "getfd": [exe, "getfd", data, str(a.calls)],
                "getppid": [exe, "getppid", str(a.calls)]}[a.loop]
        env = dict(os.environ, IO_LOOPS_CLOCK=a.clock)

        def plain(prefix=(), extra_env=None):
            e = dict(env, **(extra_env or {}))
            p = subprocess.run(list(prefix) + loop, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=e)
            if p.returncode != 0:
                raise RuntimeError("%s: exit %d: %s" % (" ".join(list(prefix) + loop),
                                                        p.returncode, p.stderr.strip()))
            return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])

        def hooked(progs):
            v = R.BackgroundVariant(loader, obj, progs)
            v.start()
            try:
                return plain()
            finally:
                v.stop()

        cases = [
            ("untraced", lambda: plain()),
            ("empty tp_btf on sys_exit", lambda: hooked(["empty_exit"])),
            ("empty tp_btf on sys_enter and sys_exit",
             lambda: hooked(["empty_enter", "empty_exit"])),
            ("iolens", lambda: plain([iolens, "run", "-q", "--"])),
        ]
        for prog in a.without:
            cases.append(("iolens without %s" % prog,
                          lambda p=prog: plain([iolens, "run", "-q", "--disable-program", p,
                                                "--"])))
        if a.timing_off:
            cases.append(("iolens --timing off",
                          lambda: plain([iolens, "run", "-q", "--timing", "off", "--"])))
        for text in a.case:
            label, extra, prefix = parse_case(text)
            cases.append((label, lambda x=extra, p=prefix: plain(p + ["run", "-q", "--"], x)))

        # only read4k times batches
        key = ("batch_median_ns_per_op" if a.stat == "batch" and a.loop in ("pread", "rand")
               else "ns_per_op")
        samples = {name: [] for name, _ in cases}
        paired = {name: [] for name, _ in cases}
        for r in range(a.rounds):
            for name, fn in (cases if r % 2 == 0 else list(reversed(cases))):
                if name == "untraced":
                    samples[name].append(fn()[key])
                    continue
                # an untraced run right before each case: the difference of the two is
                # what the case costs under the host's speed of that moment
                base = plain()[key]
                samples["untraced"].append(base)
                v = fn()[key]
                samples[name].append(v)
                paired[name].append(v - base)
            R.log("round %d/%d done (load %s)" % (r + 1, a.rounds, R.loadavg()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base_med = statistics.median(samples["untraced"])
    base_min = min(samples["untraced"])
    print("| case | median ns per %s | extra (median) | min | extra (min) " % a.loop +
          "| extra, paired (median; quartiles) |")
    print("|---|---|---|---|---|---|")
    for name, _ in cases:
        s = samples[name]
        pq = ""
        if paired[name]:
            q = statistics.quantiles(paired[name], n=4) if len(paired[name]) > 1 else \
                paired[name] * 3
            pq = "%+.0f (%+.0f, %+.0f)" % (statistics.median(paired[name]), q[0], q[2])
        print("| %s | %.0f | %+.0f | %.0f | %+.0f | %s |" % (
            name, statistics.median(s), statistics.median(s) - base_med, min(s),
            min(s) - base_min, pq))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"calls": a.calls, "rounds": a.rounds, "stat": key, "samples": samples,
                       "paired": paired}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
