#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a file read by every process of a run, across processes (docs/run-json.md#by-file,
docs/darshan-log.md#shared-files).

A Python parent reads part of `shared.bin`, then forks three workers; each reads its own
share of `shared.bin` (different byte counts) and its own private file, in 4 KiB preads, and
exits. Every process counts its own preads and bytes and the parent prints them all (the ground
truth). Then, from `iolens run --json --darshan` of it:
  - the JSON record's `by_file` row of `shared.bin`: 4 processes, reads, bytes and opens the sums
    of the workload's own, the fastest and slowest processes among them with their own bytes,
    the population variance of the bytes over the four;
  - each private file's row: one process, its bytes;
  - every `by_file` row's sums equal the sums of the `files` rows of that file;
  - the Darshan log (read by darshan_test.py's independent reader): `shared.bin` is one record,
    rank -1, with the same sums, FASTEST_RANK_BYTES / SLOWEST_RANK_BYTES the bytes of those
    ranks' processes, F_VARIANCE_RANK_BYTES the variance; each private file is its worker's
    rank's record, and no other record has rank -1 (no other file did every process touch).
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402
import darshan_test as DT  # noqa: E402

WORKLOAD = r'''
import json, os, sys
data = sys.argv[1]
def read(path, nbytes):
    fd = os.open(path, os.O_RDONLY)
    reads = got = 0
    while got < nbytes:
        n = len(os.pread(fd, min(4096, nbytes - got), got))
        reads += 1
        got += n
        if n == 0:
            break
    os.close(fd)
    return {"reads": reads, "bytes_read": got}
shared = os.path.join(data, "shared.bin")
mine = {shared: read(shared, 10000)}
r, w = os.pipe()
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        own = {shared: read(shared, (i + 1) * 40000),
               os.path.join(data, "private%d.bin" % i): read(os.path.join(data, "private%d.bin" % i), 1 << 20)}
        os.write(w, (json.dumps({"pid": os.getpid(), "files": own}) + "\n").encode())
        os._exit(0)
    kids.append(pid)
os.close(w)
for pid in kids:
    os.waitpid(pid, 0)
lines = os.fdopen(r).read().split("\n")
procs = [{"pid": os.getpid(), "files": mine}] + [json.loads(l) for l in lines if l]
print(json.dumps(procs))
'''


def variance(values):
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / len(values)


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("by_file")
    tmp = E.disk_tempdir("by_file")
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    with open(os.path.join(data, "shared.bin"), "wb") as f:
        f.write(os.urandom(200000))
    sizes = {}
    for i in range(3):
        p = os.path.join(data, "private%d.bin" % i)
        with open(p, "wb") as f:
            f.write(os.urandom(5000 * (i + 1)))
        sizes[p] = 5000 * (i + 1)
    script = os.path.join(tmp, "workload.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    out_json = os.path.join(tmp, "run.json")
    out_log = os.path.join(tmp, "run.darshan")
    run = E.run_iolens(args.iolens, ["/usr/bin/python3", script, data], json_path=out_json,
                       extra=["--darshan", out_log], timeout=120)
    if run.rc != 0:
        ck.fatal("iolens exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    truth = json.loads(run.out.decode().strip().splitlines()[-1])
    doc = E.load_run(ck, run)
    shared = os.path.join(data, "shared.bin")

    # the ground truth, per process
    ck.eq("processes of the run", sorted(p["pid"] for p in truth),
          sorted(p["pid"] for p in doc["processes"]))
    shared_bytes = {p["pid"]: p["files"][shared]["bytes_read"] for p in truth}
    shared_reads = sum(p["files"][shared]["reads"] for p in truth)
    ck.eq("shared.bin bytes per process (the workload's)", [10000, 40000, 80000, 120000],
          sorted(shared_bytes.values()))

    rows = {r["path"]: r for r in doc.get("by_file", [])}
    ck.eq("by_file rows are one per distinct (dev, ino, path) of files[]",
          len({(f["dev"], f["ino"], f["path"]) for f in doc["files"]}), len(doc.get("by_file", [])))
    row = rows.get(shared)
    if ck.check(row is not None, "no by_file row for %s" % shared):
        c = row["counters"]
        ck.eq("shared.bin processes", 4, row["processes"])
        ck.eq("shared.bin opens", 4, c["opens"])
        ck.eq("shared.bin reads", shared_reads, c["reads"])
        ck.eq("shared.bin bytes_read", sum(shared_bytes.values()), c["bytes_read"])
        ck.eq("shared.bin max_byte_read", max(shared_bytes.values()) - 1, c["max_byte_read"])
        for which in ("fastest", "slowest"):
            share = row[which]
            ck.check(share["pid"] in shared_bytes, "%s pid %d is none of the workload's" %
                     (which, share["pid"]))
            ck.eq("%s process's bytes" % which, shared_bytes.get(share["pid"]), share["bytes"])
        ck.check(row["fastest"]["time_ns"] <= row["slowest"]["time_ns"],
                 "fastest %r slower than slowest %r" % (row["fastest"], row["slowest"]))
        want = variance(list(shared_bytes.values()))
        ck.check(abs(row["variance_bytes"] - want) <= 1e-9 * want,
                 "variance_bytes %r, workload's bytes give %r" % (row["variance_bytes"], want))
        ck.check("folded" not in row, "a run folds nothing, yet the row says folded")
    for p in truth[1:]:
        for path, t in p["files"].items():
            if path == shared:
                continue
            r = rows.get(path)
            if not ck.check(r is not None, "no by_file row for %s" % path):
                continue
            ck.eq("%s processes" % path, 1, r["processes"])
            ck.eq("%s bytes_read" % path, sizes[path], r["counters"]["bytes_read"])
            ck.eq("%s bytes_read (the workload's)" % path, t["bytes_read"],
                  r["counters"]["bytes_read"])
            ck.eq("%s fastest pid" % path, p["pid"], r["fastest"]["pid"])

    # each row's sums are the sums of its files[] rows
    sums = {}
    for f in doc["files"]:
        s = sums.setdefault((f["dev"], f["ino"], f["path"]), [0, 0, 0, set()])
        s[0] += f["counters"]["reads"]
        s[1] += f["counters"]["bytes_read"]
        s[2] += f["counters"]["opens"]
        s[3].add((f["pid"], f["proc_start_ns"]))
    for r in doc.get("by_file", []):
        s = sums.get((r["dev"], r["ino"], r["path"]))
        if not ck.check(s is not None, "by_file row %s has no files[] rows" % r["path"]):
            continue
        ck.eq("%s reads vs files[]" % r["path"], s[0], r["counters"]["reads"])
        ck.eq("%s bytes_read vs files[]" % r["path"], s[1], r["counters"]["bytes_read"])
        ck.eq("%s opens vs files[]" % r["path"], s[2], r["counters"]["opens"])
        ck.eq("%s processes vs files[]" % r["path"], len(s[3]), r["processes"])

    # the Darshan log
    with open(out_log, "rb") as f:
        log = DT.parse(ck, f.read())
    ranks = [p["pid"] for p in doc["processes"]]
    ck.eq("nprocs", 4, log["nprocs"])
    recs_of = {}
    for r in log["recs"]:
        recs_of.setdefault(log["names"].get(r["id"]), []).append(r)
    srecs = recs_of.get(shared, [])
    if ck.eq("records of shared.bin", 1, len(srecs)):
        r = srecs[0]
        ck.eq("shared.bin rank", -1, r["rank"])
        ck.eq("shared.bin BYTES_READ", sum(shared_bytes.values()), r["c"]["BYTES_READ"])
        ck.eq("shared.bin READS", shared_reads, r["c"]["READS"])
        ck.eq("shared.bin OPENS", 4, r["c"]["OPENS"])
        for which in ("FASTEST", "SLOWEST"):
            rank = r["c"][which + "_RANK"]
            if ck.check(0 <= rank < len(ranks), "%s_RANK %d out of range" % (which, rank)):
                ck.eq("%s_RANK_BYTES" % which, shared_bytes.get(ranks[rank]),
                      r["c"][which + "_RANK_BYTES"])
        want = variance(list(shared_bytes.values()))
        ck.check(abs(r["f"]["F_VARIANCE_RANK_BYTES"] - want) <= 1e-9 * want,
                 "F_VARIANCE_RANK_BYTES %r, workload's bytes give %r" %
                 (r["f"]["F_VARIANCE_RANK_BYTES"], want))
    for p in truth[1:]:
        for path in p["files"]:
            if path == shared:
                continue
            recs = recs_of.get(path, [])
            if ck.eq("records of %s" % path, 1, len(recs)):
                ck.eq("%s rank's pid" % path, p["pid"],
                      ranks[recs[0]["rank"]] if 0 <= recs[0]["rank"] < len(ranks) else None)
                ck.eq("%s BYTES_READ" % path, sizes[path], recs[0]["c"]["BYTES_READ"])
    shared_ids = [log["names"].get(r["id"]) for r in log["recs"] if r["rank"] == -1]
    ck.eq("files with a shared record", [shared], shared_ids)
    E.log("by_file: %d rows, %d Darshan records" % (len(doc.get("by_file", [])), len(log["recs"])))
    ck.finish()


if __name__ == "__main__":
    main()
