#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd's output directory full (ENOSPC) or read-only (EROFS) when a job's record is
written (docs/daemon.md#output-files): the failure is counted and said, nothing half-written is
left, the daemon goes on, and the next record is written exactly once there is room again.

The output directory is a small tmpfs (64 KiB). Ground truth is each workload's own tally
(`job_workload many DIR N SIZE`: N files created, written, read back, unlinked).
1. Job A (2,000 files: its compressed record is over 5 times 64 KiB) closes: `status` counts the
   failure (`output.failed` 1, `written` 0), the log names the record and ENOSPC, no temporary
   file is left, `iolens jobs` still lists A as closed with the workload's totals, and `job`
   of A says its record could not be written.
2. The tmpfs remounted at 16 MiB: job B (the same work as A) has its record written, with the
   workload's totals, and bigger than twice 64 KiB (so A's could not have fitted).
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
# A's and B's jobs: a compressed record of ~180 bytes a file, 2,000 files: ~360 KB, over 5
# times the 64 KiB file system (B's record, written once there is room, checks it).
NFILES_A = 2000


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


def wait_written(ck, d, n, what):
    # counted once renamed into place: a moment after the file appears
    D.wait_for("%d records written" % n, lambda: output(d).get("written", 0) >= n, 10)
    ck.eq("%s: output.written" % what, n, output(d).get("written"))


def log_line(d, job_id, error):
    """Whether one line of the daemon's log names the job's record and `error`."""
    with open(d.log_path, "rb") as f:
        return any(("job %s: " % job_id).encode() in line and error in line
                   for line in f.read().splitlines())


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
    a_id, a_pid, m_a = run_job(ck, d, cg, args, data, "of/a", NFILES_A)
    wait_failed(ck, d, 1, "full")
    ck.eq("full: output.written", 0, output(d).get("written"))
    # The loop logs it when it takes the writer's outcome, after the count: wait for the line.
    ck.check(D.wait_for("the failure logged", lambda: log_line(d, a_id, b"No space left on device"),
                        15), "the daemon's log has no line naming job %s and ENOSPC" % a_id)
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
    b_id, b_pid, m_b = run_job(ck, d, cg, args, data, "of/b", NFILES_A)
    doc = d.wait_record(ck, b_id, timeout=30)
    if doc and m_b and D.check_record_shape(ck, doc, b_id):
        D.check_many_totals(ck, doc, m_b, b_pid, cg.abs("of/b"), "room again", NFILES_A)
        D.check_lost_zero(ck, doc, b_id)
    wait_written(ck, d, 1, "room again")
    # B did what A did: A's record would not have fitted in 64 KiB either
    size = sum(os.path.getsize(p) for p in d.record_files())
    ck.check(size > 2 * 65536, "job B's record is %d bytes: too small to prove that A's could "
             "not fit in the 64 KiB file system" % size)

    # 3. Read-only: counted and said.
    remount(d, "ro")
    c_id, _, _ = run_job(ck, d, cg, args, data, "of/c", 50)
    wait_failed(ck, d, 2, "read-only")
    ck.check(D.wait_for("the failure logged", lambda: log_line(d, c_id, b"Read-only file system"),
                        15), "the daemon's log has no line naming job %s and EROFS" % c_id)

    # 4. Writable again.
    remount(d, "rw")
    d_id, d_pid, m_d = run_job(ck, d, cg, args, data, "of/d", 100)
    doc = d.wait_record(ck, d_id, timeout=30)
    if doc and m_d and D.check_record_shape(ck, doc, d_id):
        D.check_many_totals(ck, doc, m_d, d_pid, cg.abs("of/d"), "writable again", 100)
    wait_written(ck, d, 2, "writable again")
    no_temporaries(ck, d, "at the end")
    ck.check(d.proc.poll() is None, "iolensd is not running after the failed records")
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
