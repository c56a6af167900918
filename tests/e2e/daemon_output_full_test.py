#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd's output directory full (ENOSPC) or read-only (EROFS) when a job's record is
written (docs/daemon.md#output-files): the failure is counted and said, nothing half-written is
left, the daemon goes on, and the next record is written exactly once there is room again.

The output directory is a small tmpfs (64 KiB). Ground truth is each workload's own tally
(`job_workload many DIR N SIZE`: N files created, written, read back, unlinked).
1. Job A (600 files: its compressed record is far over 64 KiB) closes: `status` counts the
   failure (`output.failed` 1, `written` 0), the log names the record and ENOSPC, no temporary
   file is left, `iolens jobs` still lists A as closed with the workload's totals, and `job`
   of A says its record could not be written.
2. The tmpfs remounted at 16 MiB: job B's record is written, with the workload's totals.
3. Remounted read-only: job C's record fails (EROFS), counted (`failed` 2) and logged.
4. Read-write again: job D's record is written, with the workload's totals; `written` 2.
"""
import os
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

SIZE = 100


def output(d):
    return (d.status() or {}).get("output") or {}


def remount(d, opts):
    subprocess.run(["mount", "-o", "remount," + opts, d.output_dir], check=True)


def run_job(ck, d, cg, args, data, sub, nfiles):
    job_id, p = D.start_many(ck, d, cg, args.workload, data, sub, nfiles, SIZE)
    m = D.finish_workload(ck, p, "job_workload many in " + sub, timeout=60)
    cg.rmdir(sub)
    return job_id, p.pid, m


def wait_failed(ck, d, n, what):
    ck.check(D.wait_for("%d failed records" % n, lambda: output(d).get("failed", 0) >= n, 30),
             "%s: output.failed is %r, not %d, 30 s after the job closed" %
             (what, output(d).get("failed"), n))
    ck.eq("%s: output.failed" % what, n, output(d).get("failed"))


def no_temporaries(ck, d, what):
    left = [n for n in os.listdir(d.output_dir) if n.startswith(".tmp-")]
    ck.eq("%s: temporary files left in the output directory" % what, [], left)


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_output_full")
    cg = D.Cgroups()
    data = D.tempdir("output-full", base="/dev/shm")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/of/*"]}' % cg.prefix, tag="of")
    D.mount_small_tmpfs(d.output_dir, "64k", 0o750)
    d.start(ck)

    # 1. No room: the record fails, counted and said; the job's line keeps its totals.
    a_id, a_pid, m_a = run_job(ck, d, cg, args, data, "of/a", 600)
    wait_failed(ck, d, 1, "full")
    ck.eq("full: output.written", 0, output(d).get("written"))
    with open(d.log_path, "rb") as f:
        log = f.read()
    ck.check(b"No space left on device" in log and a_id.encode() in log,
             "the daemon's log does not name job %s's record and ENOSPC" % a_id)
    no_temporaries(ck, d, "full")
    ck.eq("full: records in the output directory", [], d.record_files())
    line = next((j for j in (d.request({"cmd": "jobs"}).get("result") or {}).get("jobs", [])
                 if j.get("id") == a_id), None)
    if ck.check(line is not None, "job %s is not listed by `jobs` after its record failed" % a_id):
        ck.eq("full: job A's state", "closed", line.get("state"))
        t, got = (m_a or {}).get("totals", {}), line.get("totals") or {}
        for k in ("opens", "reads", "bytes_read"):
            ck.eq("full: job A's totals.%s (the workload's own)" % k, t.get(k), got.get(k))
        # the shell's write that moved it into the cgroup, if counted (as check_many_totals)
        mv = D.self_move_write(a_pid, cg.abs("of/a"))
        for k in ("writes", "bytes_written"):
            ck.check(got.get(k) in (t.get(k), (t.get(k) or 0) + mv[k]),
                     "full: job A's totals.%s %r, the workload's %r" % (k, got.get(k), t.get(k)))

    a = d.request({"cmd": "job", "id": a_id, "fd": True})
    ck.check(not a.get("ok") and "could not be written" in a.get("error", ""),
             "full: `job %s` answers %r, not that its record could not be written" % (a_id, a))

    # 2. Room again: the next record is written, exact.
    remount(d, "size=16m")
    b_id, b_pid, m_b = run_job(ck, d, cg, args, data, "of/b", 200)
    doc = d.wait_record(ck, b_id, timeout=30)
    if doc and m_b and D.check_record_shape(ck, doc, b_id):
        D.check_many_totals(ck, doc, m_b, b_pid, cg.abs("of/b"), "room again", 200)
        D.check_lost_zero(ck, doc, b_id)
    ck.eq("room again: output.written", 1, output(d).get("written"))

    # 3. Read-only: counted and said.
    remount(d, "ro")
    c_id, _, _ = run_job(ck, d, cg, args, data, "of/c", 50)
    wait_failed(ck, d, 2, "read-only")
    with open(d.log_path, "rb") as f:
        ck.check(b"Read-only file system" in f.read(),
                 "the daemon's log does not say EROFS for job %s" % c_id)

    # 4. Writable again.
    remount(d, "rw")
    d_id, d_pid, m_d = run_job(ck, d, cg, args, data, "of/d", 100)
    doc = d.wait_record(ck, d_id, timeout=30)
    if doc and m_d and D.check_record_shape(ck, doc, d_id):
        D.check_many_totals(ck, doc, m_d, d_pid, cg.abs("of/d"), "writable again", 100)
    ck.eq("writable again: output.written", 2, output(d).get("written"))
    no_temporaries(ck, d, "at the end")
    ck.check(d.proc.poll() is None, "iolensd is not running after the failed records")
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
