#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a pressure drain empties the kernel map of idle records, not just down to half.

A drain round that begins with the kernel's files map over half full takes every idle record it
reads to its end (docs/daemon.md#restart-without-loss), even once the map is back under half in
the middle of the round. Taking only while the map stayed over half left it at the half, and
every later round walked all of it to take the few records made since (bench/README.md
"Unchanged live records").

Setup: a 4,096-entry map, drain pieces of 1 ms (a walk of it goes in many pieces, each deciding
on the fill as it begins), and a job of two live processes (`job_workload many DIR N 100
--gate-end`: N files created, written, read back, unlinked, then it waits): the first leaves
1,800 idle closed-file records (under half the map: nothing taken), the second then 400 more,
which brings the map over half (2,048) and under 3/4 (3,072, past which any foldable record is
taken).

Checks: bpftool (not iolens) counts the pinned map's entries below 1,024 (a quarter) within
15 s, while both processes still live (before the fix it stayed near 2,048); then the job's
record holds the two workloads' own totals exactly, and nothing is lost.
"""
import os
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

MAP = 4096
FIRST, SECOND = 1800, 400
SIZE = 100


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_pressure_round")
    cg = D.Cgroups()
    data = D.tempdir("pressure-round", base="/dev/shm")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/pr/*"]}' % cg.prefix, tag="pr",
                 extra_config="drain_piece: 1ms\nlimits:\n  kernel_file_records: %d\n" % MAP)
    d.start(ck)
    sub = "pr/a"
    job_id, p1 = D.start_many(ck, d, cg, args.workload, data, sub, FIRST, SIZE, gate_end=True)
    wd = os.path.join(data, "second")
    os.makedirs(wd)
    p2 = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", wd, str(SECOND), str(SIZE),
                                       "--gate-end"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill the second", lambda: p2.poll() is None and p2.kill())
    D.read_json_line(ck, p2, "the second job_workload many --gate-end", timeout=120)
    seen = []

    def entries():
        n = d.kernel_map_entries("files")
        seen.append(n)
        return n is not None and n < MAP // 4
    ck.check(D.wait_for("the map below a quarter full", entries, 15, interval=0.5),
             "bpftool counts %s entries in the kernel's files map (of %d) 15 s after a live "
             "live processes left %d idle records there: the pressure drain did not take them "
             "all (counts seen: %s)" % (seen[-1] if seen else None, MAP, FIRST + SECOND,
                                        seen[-8:]))
    ck.check(p1.poll() is None and p2.poll() is None,
             "a workload exited before the check: it proves nothing")
    ms = []
    for p, what in ((p1, "first"), (p2, "second")):
        p.stdin.write(b"\n")
        p.stdin.flush()
        ms.append(D.finish_workload(ck, p, "the %s job_workload many" % what, timeout=60))
    cg.rmdir(sub)
    doc = d.wait_record(ck, job_id, timeout=60)
    if None not in ms and doc is not None and D.check_record_shape(ck, doc, job_id):
        # The workloads' own totals, and each shell's move into the cgroup if the record holds
        # it (D.check_many_totals, for two processes).
        moves = [D.self_move_write(p.pid, cg.abs(sub)) for p in (p1, p2)]
        held = [mv for p, mv in zip((p1, p2), moves)
                if any(f.get("path") == mv["path"] and f.get("pid") == p.pid
                       for f in doc["files"])]
        for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
            ck.eq("job.totals.%s (the workloads' own counts)" % k,
                  sum(m["totals"][k] for m in ms) + sum(mv[k] for mv in held),
                  doc["job"]["totals"].get(k))
        D.check_lost_zero(ck, doc, "after the pressure drain")
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
