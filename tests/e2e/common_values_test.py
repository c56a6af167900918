#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: Darshan's common access sizes and strides (ACCESS1..4, STRIDE1..4; issue 19) from the
kernel's tallies, with threads racing on one record, in `iolens run`'s JSON record and its
Darshan log (read by darshan_test's independent reader).

The workload (Python, /usr/bin/python3) knows what it did:
  - "race": 4 threads pread one shared descriptor at once, thread t always 100 + t bytes at
    offsets of its own, N calls each (os.pread lets go of the GIL inside the call, so the
    kernel's programs run on both CPUs at once): 4 values whose slots the threads claim at about
    the same moment; each must be held once, with exactly N calls, none untallied. All four are
    shown (the creating 1 MiB write, once, is the fifth value): a value held twice would show
    as two smaller counts. (Two claims of one slot in the same instant are rare on 2 CPUs:
    tests/unit/common_values_test.cpp races the same code harder.)
  - "many": one thread, sizes 1..40 in that order (9 and 30 three times, 33 five times), each
    read after a gap of its own size (its stride; the first read's is 0): 40 distinct sizes and
    strides, past the record's 8 slots (the side entry holds the next 24, Darshan's 32 in all)
    and past Darshan's 32 (the calls of the values after them untallied, as Darshan drops
    them); the expected four come from Darshan's rule applied here to the workload's own
    sequence;
  - "strides": forward gaps of 10, 10, 10, 20, 20, 30 bytes between 4-byte reads, then a read
    back at 0 (stride 0) and a reopen (the next read's stride is 0 again).
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402
import darshan_test as DT  # noqa: E402

N = 400
THREADS = 4

WORKLOAD = r'''
import os, sys, threading
race, many, strides, n, threads = sys.argv[1:4] + [int(sys.argv[4]), int(sys.argv[5])]
with open(race, "wb") as f:
    f.write(b"r" * (1 << 20))
with open(many, "wb") as f:
    f.write(b"m" * 4096)
with open(strides, "wb") as f:
    f.write(b"s" * 4096)
fd = os.open(race, os.O_RDONLY)
start = threading.Barrier(threads)
def reader(t):
    start.wait()
    for i in range(n):
        assert len(os.pread(fd, 100 + t, (t * n + i) * 256)) == 100 + t
ts = [threading.Thread(target=reader, args=(t,)) for t in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
os.close(fd)
fd = os.open(many, os.O_RDONLY)
off = 0
first = True
for size in range(1, 41):
    for _ in range({9: 3, 30: 3, 33: 5}.get(size, 1)):
        if not first:
            off += size  # a gap of `size` bytes: stride `size`
        first = False
        assert len(os.pread(fd, size, off)) == size
        off += size
os.close(fd)
fd = os.open(strides, os.O_RDONLY)
off = 0
for gap in (None, 10, 10, 10, 20, 20, 30):
    if gap is not None:
        off += gap
    assert len(os.pread(fd, 4, off)) == 4
    off += 4
assert len(os.pread(fd, 4, 0)) == 4
os.close(fd)
fd = os.open(strides, os.O_RDONLY)
assert len(os.pread(fd, 4, 100)) == 4  # after an open: stride 0
os.close(fd)
'''


def four(pairs):
    """Darshan's four from (value, count) pairs: non-zero values, by count then value."""
    top = sorted((p for p in pairs if p[0] != 0), key=lambda p: (-p[1], -p[0]))[:4]
    return top + [(0, 0)] * (4 - len(top))


def darshan32(values):
    """Darshan's tally of `values` in order (darshan_track_common_val_counters): the first 32
    distinct ones (0 included) with their counts, and the calls of the others, dropped."""
    held, dropped = {}, 0
    for v in values:
        if v in held:
            held[v] += 1
        elif len(held) < 32:
            held[v] = 1
        else:
            dropped += 1
    return list(held.items()), dropped


def check_row(ck, where, c, rec, kind, what, want, untallied):
    got = [(c["%s%d_%s" % (kind, i, what)], c["%s%d_count" % (kind, i)]) for i in range(1, 5)]
    ck.eq("%s %s four" % (where, kind), want, got)
    ck.eq("%s %s_untallied" % (where, kind), untallied, c.get(kind + "_untallied"))
    if rec is not None:
        got = [(rec["c"]["%s%d_%s" % (kind.upper(), i, what.upper())],
                rec["c"]["%s%d_COUNT" % (kind.upper(), i)]) for i in range(1, 5)]
        ck.eq("%s %s four in the Darshan log" % (where, kind), want, got)


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("common_values")
    work = E.disk_tempdir("common_values")
    race, many, strides = (os.path.join(work, n) for n in ("race", "many", "strides"))
    out_json = os.path.join(work, "run.json")
    out_log = os.path.join(work, "run.darshan")
    run = E.run_iolens(args.iolens, ["/usr/bin/python3", "-c", WORKLOAD, race, many, strides,
                                     str(N), str(THREADS)],
                       json_path=out_json, extra=["--darshan", out_log], timeout=120)
    if run.rc != 0:
        ck.fatal("iolens exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    doc = E.load_run(ck, run)
    with open(out_log, "rb") as f:
        log = DT.parse(ck, f.read())
    ranks = [p["pid"] for p in doc["processes"]]
    recs = {(ranks[r["rank"]], log["names"].get(r["id"])): r for r in log["recs"]
            if 0 <= r["rank"] < len(ranks)}
    rows = {f["path"]: f for f in doc["files"] if f["path"] in (race, many, strides)}
    for path in (race, many, strides):
        if not ck.check(path in rows, "no record of %s: %s" % (path, sorted(rows))):
            ck.fatal("records missing")

    # race: writes of the file's creation (1 MiB in one call), then the threads' preads
    c = rows[race]["counters"]
    rec = recs.get((rows[race]["pid"], race))
    ck.check(rec is not None, "no Darshan record of %s" % race)
    ck.eq("race reads", THREADS * N, c["reads"])
    sizes = [(100 + t, N) for t in range(THREADS)] + [(1 << 20, 1)]
    check_row(ck, "race", c, rec, "access", "access", four(sizes), 0)

    # many: 40 sizes and strides, past the record's 8 slots and Darshan's 32
    c = rows[many]["counters"]
    rec = recs.get((rows[many]["pid"], many))
    ck.check(rec is not None, "no Darshan record of %s" % many)
    sizes = [s for s in range(1, 41) for _ in range({9: 3, 30: 3, 33: 5}.get(s, 1))]
    held, dropped = darshan32([4096] + sizes)  # the creating write first
    ck.eq("many: values held", 32, len(held))
    check_row(ck, "many", c, rec, "access", "access", four(held), dropped)
    ck.eq("many: sizes dropped by Darshan", 1 + 5 + 7, dropped)  # 32, 33 x5, 34..40
    # strides by Darshan's rule (darshan-posix.c: off - last_byte - 1 when off > 0, off >
    # last_byte and last_byte != 0, else 0; last_byte 0 after an open) over the workload's
    # offsets: the write's 0, then the reads (the second's 0 too: the first, 1 byte at offset
    # 0, leaves last_byte 0)
    stride_seq, last, off = [0], 0, 0
    for i, size in enumerate(sizes):
        if i:
            off += size
        stride_seq.append(off - last - 1 if off > 0 and off > last and last != 0 else 0)
        last = off + size - 1
        off += size
    held, dropped = darshan32(stride_seq)
    ck.check(len(held) == 32 and dropped > 0, "many: strides do not pass Darshan's 32")
    check_row(ck, "many", c, rec, "stride", "stride", four(held), dropped)

    # strides: 0 (first), 10 x3, 20 x2, 30, then the read back (0) and, reopened, 0
    c = rows[strides]["counters"]
    rec = recs.get((rows[strides]["pid"], strides))
    ck.check(rec is not None, "no Darshan record of %s" % strides)
    check_row(ck, "strides", c, rec, "stride", "stride", four([(10, 3), (20, 2), (30, 1)]), 0)
    check_row(ck, "strides", c, rec, "access", "access", four([(4096, 1), (4, 9)]), 0)
    E.log("common_values: %s" % json.dumps({p: {k: v for k, v in rows[p]["counters"].items()
                                                if k.startswith(("access", "stride"))}
                                            for p in (race,)}))
    ck.finish()


if __name__ == "__main__":
    main()
