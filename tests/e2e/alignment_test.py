#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: Darshan's FILE_ALIGNMENT, FILE_NOT_ALIGNED and MODE on file systems of different block
sizes (issue 19), in `iolens run`'s JSON record, its Darshan log, and the Darshan log and JSON
that `iolens convert` makes of its trace.

File systems, each with the alignment Darshan's rule gives its files (known here, and checked
against an implementation of the rule written in e2e_common.py from Darshan's source):
  - the work directory on the root disk (ext4, 4 KiB blocks);
  - an ext4 loop file system made with 1 KiB blocks, mounted under it ("small");
  - a tmpfs mounted inside "small": Darshan leaves tmpfs out of its table, so its files take
    the enclosing mount's block size, 1 KiB;
  - a directory "smallish" beside "small" on the root disk: Darshan matches mount points as
    string prefixes, so "<work>/small" is taken for "<work>/smallish/f" (1 KiB), as Darshan does.
The workload writes and reads each file at offsets the test chose (every one counted: pwrite
and pread return >= 0 here), creating it with its own mode; the expected FILE_NOT_ALIGNED is
the test's count of those offsets that are not multiples of the alignment.
"""
import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402
import darshan_test as DT  # noqa: E402

MiB = 1 << 20
# Offsets of the writes, then of the reads (each call 10 bytes); 0 is aligned to everything.
WRITES = [0, 100, 512, 1024, 1536, 2048, 4096, 4097, 8192, 65536, 65600, MiB, 3 * MiB]
READS = [0, 1000, 1024, 3072, 4096, 12288, 2 * MiB + 512]

WORKLOAD = r'''
import json, os, sys
writes, reads = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for path, mode in json.loads(sys.argv[3]):
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, mode)
    for off in writes:
        assert os.pwrite(fd, b"x" * 10, off) == 10
    for off in reads:
        os.pread(fd, 10, off)
    os.close(fd)
'''


def not_aligned(alignment):
    return sum(1 for off in WRITES + READS if off % alignment)


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("alignment")
    work = E.disk_tempdir("alignment")
    small = os.path.join(work, "small")
    os.mkdir(small)
    dev, _ = E.loop_device(work, "small", 64 * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "1024", dev], check=True)
    subprocess.run(["mount", dev, small], check=True)
    E.unmount_at_exit(small)
    shm = os.path.join(small, "shm")
    os.mkdir(shm)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", shm], check=True)
    E.unmount_at_exit(shm)
    smallish = os.path.join(work, "smallish")
    os.mkdir(smallish)

    root_bsize = os.statvfs(work).f_bsize
    files = [  # (path, mode, the alignment Darshan gives it)
        (os.path.join(work, "disk.bin"), 0o640, root_bsize),
        (os.path.join(small, "small.bin"), 0o600, 1024),
        (os.path.join(shm, "tmpfs.bin"), 0o604, 1024),
        (os.path.join(smallish, "prefix.bin"), 0o660, 1024),
    ]
    ck.eq("the loop file system's block size (mkfs -b 1024)", 1024, os.statvfs(small).f_bsize)
    for path, _, want in files:
        # The rule as e2e_common.py implements it agrees with what this test expects.
        ck.eq("Darshan's rule (e2e_common) for %s" % path, want, E.darshan_file_alignment(path))

    script = os.path.join(work, "workload.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    out_json = os.path.join(work, "run.json")
    out_log = os.path.join(work, "run.darshan")
    out_trace = os.path.join(work, "run.iotrace")
    cmd = ["/usr/bin/python3", script, json.dumps(WRITES), json.dumps(READS),
           json.dumps([[p, m] for p, m, _ in files])]
    run = E.run_iolens(args.iolens, cmd, json_path=out_json,
                       extra=["-q", "--darshan", out_log, "--trace", out_trace], timeout=120)
    if run.rc != 0:
        ck.fatal("iolens exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    doc = E.load_run(ck, run)
    rows = {f["path"]: f for f in doc["files"]}

    # The run's own JSON record and Darshan log.
    with open(out_log, "rb") as f:
        log = DT.parse(ck, f.read(), dxt=True)
    recs = {log["names"].get(r["id"]): r for r in log["recs"]}
    for path, mode, want in files:
        row = rows.get(path)
        if not ck.check(row is not None, "no JSON record of %s" % path):
            continue
        c = row["counters"]
        ck.eq("%s writes" % path, len(WRITES), c["writes"])
        ck.eq("%s reads" % path, len(READS), c["reads"])
        ck.eq("%s file_alignment" % path, want, c["file_alignment"])
        ck.eq("%s file_not_aligned" % path, not_aligned(want), c["file_not_aligned"])
        ck.eq("%s mode" % path, mode, c["mode"])
        r = recs.get(path)
        if ck.check(r is not None, "no Darshan record of %s" % path):
            ck.eq("%s FILE_ALIGNMENT" % path, want, r["c"]["FILE_ALIGNMENT"])
            ck.eq("%s FILE_NOT_ALIGNED" % path, not_aligned(want), r["c"]["FILE_NOT_ALIGNED"])
            ck.eq("%s MODE" % path, mode, r["c"]["MODE"])
    ck.check(not_aligned(1024) != not_aligned(root_bsize) or root_bsize == 1024,
             "the offsets tell 1 KiB from the root disk's alignment")

    # The trace, converted: its header keeps the mount table, the replay the offsets.
    conv_log = os.path.join(work, "conv.darshan")
    conv_json = os.path.join(work, "conv.json")
    for to, out in (("darshan", conv_log), ("json", conv_json)):
        p = subprocess.run([args.iolens, "convert", out_trace, "--to", to, "-o", out],
                           capture_output=True, timeout=120)
        ck.eq("convert --to %s exit status (stderr: %s)" % (to, p.stderr.decode(errors="replace")),
              0, p.returncode)
    with open(conv_log, "rb") as f:
        clog = DT.parse(ck, f.read(), dxt=True)
    crecs = {clog["names"].get(r["id"]): r for r in clog["recs"]}
    with open(conv_json) as f:
        cdoc = json.load(f)
    crows = {f["path"]: f for f in cdoc["files"]}
    for path, mode, want in files:
        r = crecs.get(path)
        if ck.check(r is not None, "no Darshan record of %s in the converted log" % path):
            ck.eq("converted %s FILE_ALIGNMENT" % path, want, r["c"]["FILE_ALIGNMENT"])
            ck.eq("converted %s FILE_NOT_ALIGNED" % path, not_aligned(want),
                  r["c"]["FILE_NOT_ALIGNED"])
            ck.eq("converted %s MODE" % path, mode, r["c"]["MODE"])
        row = crows.get(path)
        if ck.check(row is not None, "no row of %s in the converted JSON" % path):
            ck.eq("converted %s file_not_aligned" % path, not_aligned(want),
                  row["counters"]["file_not_aligned"])
    E.log("alignment: %d files on %s" % (len(files), ", ".join(
        "%s (%d)" % (os.path.relpath(p, work), a) for p, _, a in files)))
    ck.finish()


if __name__ == "__main__":
    main()
