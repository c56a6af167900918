#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: SIGTERM stops iolensd cleanly: live jobs written as "interrupted", nothing left behind.

A cgroup rule P/stop/* (P = /iolens-e2e-<pid>). Job "done" runs job_workload to its end and its
cgroup is removed: it is written once, state "closed". Job "live" runs job_workload with
--gate-mid: it writes W bytes to one file, reports them on stdout and blocks (reading its stdin,
a pipe). As soon as the report arrives (no wait for a drain), the test sends SIGTERM.

Checks: iolensd exits 0 within STOP_LIMIT_S; the live job has exactly one record, with
job.state "interrupted", end_ns null, its process, and exactly the bytes, writes, opens and
closes the workload reported so far (which it cannot have changed since: it is blocked); the
"done" job still has exactly one record, state "closed" (not written again at the stop); no
record is left half-written (no .tmp-* file); the pin dir holds no pin and the socket file is
gone. The workload itself is untouched by the stop: it is still running, and once released it
finishes with exit 0.
"""
import os
import signal
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

STOP_LIMIT_S = 5.0
W_DONE = 777777
W_LIVE = 5 * 1048576 + 12345


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_stop")
    cg = D.Cgroups()
    work = D.tempdir("stop-work")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/stop/*"]}' % cg.prefix, tag="stop")
    d.start(ck)
    ck.check(d.pins(), "iolensd runs but its pin dir %s holds nothing (%r): the check for pins "
             "left behind would prove nothing" % (d.pin_dir, d.pins()))
    ck.check(os.path.exists(d.socket), "no socket file %s while iolensd runs" % d.socket)

    done_id = "cgroup" + cg.rel("stop/done")
    live_id = "cgroup" + cg.rel("stop/live")
    cg.mkdir("stop/done")
    cg.mkdir("stop/live")
    d.wait_live(ck, [done_id, live_id])

    p = D.run_in_cgroup(cg.abs("stop/done"), [args.workload, "io", work, "done", str(W_DONE),
                                              "0"])
    m_done = D.finish_workload(ck, p, "workload done")
    cg.rmdir("stop/done")
    doc_done = d.wait_record(ck, done_id)
    ck.check(doc_done is not None and doc_done["job"].get("state") == "closed",
             "job %s: state %r before the stop" %
             (done_id, doc_done and doc_done["job"].get("state")))

    live = D.run_in_cgroup(cg.abs("stop/live"), [args.workload, "io", work, "live", str(W_LIVE),
                                                 "0", "--gate-mid"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill the live workload", lambda: live.poll() is None and live.kill())
    progress = D.read_json_line(ck, live, "workload live (written)")
    ck.eq("workload live: bytes written before the stop (its own count)", W_LIVE,
          progress.get("bytes_written"))

    rc, secs = d.stop(signal.SIGTERM, timeout=30)
    D.log("iolensd exited %r %.2f s after SIGTERM" % (rc, secs))
    ck.eq("iolensd exit code after SIGTERM", 0, rc)
    ck.check(secs <= STOP_LIMIT_S, "iolensd took %.2f s to stop (limit %.1f s)" %
             (secs, STOP_LIMIT_S))
    ck.check(live.poll() is None, "the stop ended the job's process (exit %r)" % live.poll())
    ck.eq("pins left in %s" % d.pin_dir, None, d.pins() or None)
    ck.check(not os.path.lexists(d.socket), "socket file %s left behind" % d.socket)
    ck.check(not [n for n in os.listdir(d.output_dir) if n.startswith(".")],
             "half-written records left in %s: %s" % (d.output_dir, os.listdir(d.output_dir)))
    ck.check(any("written at stop" in line and live_id in line for line in d.log().splitlines()),
             "the log does not say that job %s was written at the stop:\n%s" % (live_id, d.log()))

    got = d.records_of(live_id)
    ck.eq("records of the live job", 1, len(got))
    if got:
        path, doc = got[0]
        if D.check_record_shape(ck, doc, live_id):
            job = doc["job"]
            ck.eq("live job state", "interrupted", job.get("state"))
            ck.eq("live job end_ns (it has not ended)", None, job.get("end_ns"))
            ck.eq("live job id", live_id, job.get("id"))
            ck.eq("live job cgroup", cg.rel("stop/live"), job.get("cgroup"))
            D.check_lost_zero(ck, doc, live_id)
            manifest = {"pid": live.pid, "files": [progress], "totals": progress}
            D.check_manifest_files(ck, doc, [manifest], live_id,
                                   moves=[(live.pid, cg.abs("stop/live"))])
            procs = {x.get("pid"): x for x in doc["processes"]}
            if live.pid in procs:
                ck.eq("live process end_ns (still running)", None, procs[live.pid].get("end_ns"))
    got = d.records_of(done_id)
    ck.eq("records of the job that ended before the stop", 1, len(got))
    if got:
        ck.eq("its state", "closed", got[0][1]["job"].get("state"))
        if m_done:
            D.check_manifest_files(ck, got[0][1], [m_done], done_id,
                                   moves=[(m_done["pid"], cg.abs("stop/done"))])

    live.stdin.close()
    live.stdin = None
    final = D.finish_workload(ck, live, "workload live (after the stop)")
    if final:
        ck.eq("the live workload's final bytes (unchanged since its report)", W_LIVE,
              final["totals"]["bytes_written"])
    ck.finish()


if __name__ == "__main__":
    main()
