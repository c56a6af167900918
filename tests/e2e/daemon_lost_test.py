#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `lost` in a job record means the same in a closed and an interrupted record: the
node's kernel loss counts while the job was live (issue 16, item 7).

A daemon with a 512-entry kernel files map (limits.kernel_file_records). Job A runs
`job_workload many DIR 1000 SIZE` whole while iolensd is stopped (SIGSTOP): nobody drains the
map, so the kernel cannot store most of A's records and counts them (lost.file_records). A's
closed record says so (lost.file_records > 0). Then job B starts, makes 5 files and stays alive
(--gate-end); iolensd is stopped (SIGTERM) with B live, so B's record is written "interrupted":
no loss happened while B was live, so its `lost` is all zero (an interrupted record used to
carry the node's counts since the kernel state was made, A's losses included), and its totals
are the workload's own.
"""
import os
import signal
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

SIZE = 100


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_lost")
    cg = D.Cgroups()
    data = D.tempdir("lost", base="/dev/shm")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/dl/*"]}' % cg.prefix, tag="dl",
                 extra_config="limits:\n  kernel_file_records: 512\n")
    d.start(ck)

    # A: losses while it runs (the daemon stopped, the map full).
    cg.mkdir("dl/a")
    job_a = "cgroup" + cg.rel("dl/a")
    d.wait_live(ck, [job_a])
    os.makedirs(os.path.join(data, "a"))
    d.proc.send_signal(signal.SIGSTOP)
    try:
        p = D.run_in_cgroup(cg.abs("dl/a"), [args.workload, "many", os.path.join(data, "a"),
                                             "1000", str(SIZE)])
        D.finish_workload(ck, p, "job_workload many (A)", timeout=60)
    finally:
        d.proc.send_signal(signal.SIGCONT)
    cg.rmdir("dl/a")
    doc = d.wait_record(ck, job_a, timeout=30)
    if doc is not None:
        got = (doc.get("lost") or {}).get("file_records", 0)
        ck.check(got > 0, "A: lost.file_records %r: the kernel's 512-entry map could not hold "
                 "1,000 records with nobody draining it" % got)

    # B: live when iolensd stops; no loss while it was live.
    job_b, pb = D.start_many(ck, d, cg, args.workload, data, "dl/b", 5, SIZE, gate_end=True)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    pb.stdin.write(b"\n")
    pb.stdin.flush()
    m = D.finish_workload(ck, pb, "job_workload many --gate-end (B)", timeout=60)
    docs = d.records_of(job_b)
    ck.eq("B: records written", 1, len(docs))
    if docs and m is not None:
        doc = docs[0][1]
        ck.eq("B: state", "interrupted", doc["job"].get("state"))
        D.check_lost_zero(ck, doc, "B (interrupted)")
        D.check_many_totals(ck, doc, m, pb.pid, cg.abs("dl/b"), "B", nfiles=5)
    ck.finish()


if __name__ == "__main__":
    main()
