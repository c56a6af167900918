#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a process that outlives its job's cgroup: what its job's record says, and where its later
I/O goes (docs/daemon.md "A process that outlives its job").

A cgroup rule P/ol/*, jobs P/ol/a and P/ol/b. In a, a python parent writes file `a` (1000 bytes)
and forks a child, then exits. The child writes `b` (2000), moves itself into b's cgroup
(another job: it stays in a's job, docs/daemon.md "Job selection"), writes `c` (3000), then waits
on a pipe. The test removes a's cgroup (empty now), waits for a's record, then releases the
child, which writes `d` (4000) and exits. Then the test removes b's cgroup.

Checks, against the bytes the script wrote:
  - a's record, written at once: closed; the parent's `a` and the child's `b` and `c`, exact;
    the child listed with end_ns null and exit_code null, job.live_processes 1, job.processes 2
    (it is reported alive when its job ended);
  - `d`, written after a's record, is in no record: b's record holds no process and no file
    (the child never was b's);
  - the node's lost.unattributed_records grows with d's record once the child wrote it (its
    records belong to no job then: kept 3 s in case its mark is behind in the ring, then
    discarded, counted; the count is taken after b's and c's went that way).
"""
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

SCRIPT = r'''
import os, sys
work, other, gate = sys.argv[1], sys.argv[2], int(sys.argv[3])
def put(name, n):
    with open(os.path.join(work, name), "wb") as f:
        f.write(b"x" * n)
put("a", 1000)
pid = os.fork()
if pid == 0:
    put("b", 2000)
    with open(os.path.join(other, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    put("c", 3000)
    print(os.getpid(), flush=True)
    os.read(gate, 1)
    put("d", 4000)
    os._exit(0)
'''


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_outlive")
    cg = D.Cgroups()
    work = D.tempdir("ol-work")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/ol/*"]}' % cg.prefix, tag="ol")
    d.start(ck)
    try:
        cg.mkdir("ol/a")
        cg.mkdir("ol/b")
        ja, jb = "cgroup" + cg.rel("ol/a"), "cgroup" + cg.rel("ol/b")
        d.wait_live(ck, [ja, jb])
        r, w = os.pipe()
        p = subprocess.Popen(
            ["sh", "-c", 'echo $$ > %s/cgroup.procs; exec /usr/bin/python3 -c "$0" "$@"'
             % cg.abs("ol/a"), SCRIPT, work, cg.abs("ol/b"), str(r)],
            stdout=subprocess.PIPE, pass_fds=(r,))
        os.close(r)
        child = int(p.stdout.readline())
        p.wait()
        D.wait_or_fail(ck, "a's cgroup empty", lambda: not cg.procs("ol/a"), 10)
        cg.rmdir("ol/a")
        doc = d.wait_record(ck, ja, timeout=20)
        # The child's live records of b and c have no job now: discarded (and counted) 3 s after
        # the daemon first finds them so; only then is the count taken, so that what grows
        # after it is d's.
        time.sleep(4.0)
        before = d.status()["lost"].get("unattributed_records", 0)
        os.write(w, b"g")
        os.close(w)
        D.wait_or_fail(ck, "the child's exit", lambda: not os.path.exists("/proc/%d" % child), 10)
        # Records of a process in no job are kept 3 s (its mark may be behind in the ring),
        # then discarded and counted.
        D.wait_for("unattributed records counted",
                   lambda: d.status()["lost"].get("unattributed_records", 0) > before, 15)
        after = d.status()["lost"].get("unattributed_records", 0)
        cg.rmdir("ol/b")
        doc_b = d.wait_record(ck, jb, timeout=20)

        if doc is not None:
            ck.eq("a: state", "closed", doc["job"].get("state"))
            got = {(f["pid"], os.path.basename(f["path"])): f["counters"]["bytes_written"]
                   for f in doc["files"] if os.path.dirname(f.get("path") or "") == work}
            ck.eq("a: files and bytes", {(p.pid, "a"): 1000, (child, "b"): 2000,
                                         (child, "c"): 3000}, got)
            procs = {x["pid"]: x for x in doc["processes"]}
            ck.check(child in procs, "a: the child %d is not listed" % child)
            if child in procs:
                ck.eq("a: the child's end_ns", None, procs[child].get("end_ns"))
                ck.eq("a: the child's exit_code", None, procs[child].get("exit_code"))
            ck.eq("a: job.live_processes", 1, doc["job"].get("live_processes"))
            ck.eq("a: job.processes", 2, doc["job"].get("processes"))
        if doc_b is not None:
            ck.eq("b: processes", [], doc_b["processes"])
            ck.eq("b: files", [], doc_b["files"])
        for path, rec in d.records().items():
            for f in rec["files"]:
                ck.check(f.get("path") != os.path.join(work, "d"),
                         "%s holds d, written after a's record: %s" % (path, f))
        ck.check(after > before, "lost.unattributed_records did not grow when the child, out of "
                 "every job, exited (%d then %d)" % (before, after))
        rc, _ = d.stop()
        ck.eq("clean stop", 0, rc)
    finally:
        cg.remove_all()
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
