#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a process rule (comm matched in the kernel at exec, cmdline regex in the daemon) makes a
job of the matching process wherever it runs, and of nothing else.

Rule: `process: {comm: job_workload, cmdline: "tag-x"}`. Outside every cgroup rule, two
job_workload processes run (--gate-start: each waits until released, so the daemon has read its
cmdline): X with TAG "tag-x" (matches), Y with TAG "tag-y" (same comm, the cmdline does not
match). Each writes a known number of bytes (its own tally is the ground truth).

Checks: exactly one record of kind "process" holds X's pid, with exactly X's files and bytes
(no other file, no other process), labels rule/comm, state "closed" once X has exited (a
process-rule job closes with its last process); no record holds Y's pid or Y's files.
"""
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

WX, WY = 123457, 76543


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_process")
    work = D.tempdir("proc-work")
    d = D.Daemon(args.iolensd, '  - process: {comm: job_workload, cmdline: "tag-x"}', tag="pr",
                 extra_config="syscall_hooks: always\n")
    d.start(ck)

    def run(tag, n):
        p = subprocess.Popen([args.workload, "io", work, tag, str(n), "0", "--gate-start"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        D.Cleanup.register("kill " + tag, lambda: p.poll() is None and p.kill())
        D.read_json_line(ck, p, tag + " (waiting)")
        return p

    x = run("tag-x", WX)
    y = run("tag-y", WY)
    # The daemon reads the cmdline when the exec's mark event arrives: give it that moment.
    D.wait_or_fail(ck, "the daemon to list the process job",
               lambda: any(j.get("kind") == "process" for j in
                           (d.request({"cmd": "jobs"}).get("result") or {}).get("jobs", [])),
               10)
    for p in (x, y):
        p.stdin.close()
        p.stdin = None
    m_x = D.finish_workload(ck, x, "X")
    m_y = D.finish_workload(ck, y, "Y")

    def holding(pid):
        return [(path, doc) for path, doc in d.records().items()
                if doc and any(pr.get("pid") == pid for pr in doc.get("processes", []))]

    D.wait_or_fail(ck, "X's job record", lambda: holding(x.pid), 15)
    got = holding(x.pid)
    ck.eq("records holding X", 1, len(got))
    if got:
        doc = got[0][1]
        job = doc["job"]
        ck.eq("X's job kind", "process", job.get("kind"))
        ck.eq("X's job state", "closed", job.get("state"))
        ck.eq("X's job label rule", "process", job.get("labels", {}).get("rule"))
        ck.eq("X's job label comm", "job_workload", job.get("labels", {}).get("comm"))
        ck.check(str(job.get("id", "")).startswith("process/process/%d-" % x.pid),
                 "X's job id %r" % job.get("id"))
        D.check_lost_zero(ck, doc, "X's job")
        if m_x:
            D.check_manifest_files(ck, doc, [m_x], "X's job")
    # Two completed drains after Y exited (the first may have begun before its exit event):
    # Y's records, had they been attributed to any job, would have been written by then.
    base = d.status()["drain"]["count"]
    ck.check(D.wait_for("two drains after Y exited",
                        lambda: d.status()["drain"]["count"] >= base + 2, 10),
             "iolensd did not complete two drains within 10 s")
    ck.eq("records holding Y (its cmdline does not match)", [], [p for p, _ in holding(y.pid)])
    for path, doc in d.records().items():
        for f in (doc or {}).get("files", []):
            ck.check(not str(f.get("path", "")).endswith("tag-y.out"),
                     "%s holds Y's file %s" % (path, f.get("path")))
    ck.check(m_y is not None and m_y["totals"]["bytes_written"] == WY,
             "Y did not run as expected: %r" % (m_y and m_y.get("totals")))
    d.stop()
    ck.finish()


if __name__ == "__main__":
    main()
