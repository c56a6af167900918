#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a job whose cgroup-removal event was dropped (ring buffer full) is still closed.

The ring buffer that carries cgroup mkdir/rmdir, process and name events is bounded; when the
daemon falls behind (a busy node, a metadata-heavy job), the kernel drops events and counts
them (status lost.events, lost.job_events). The counters in the kernel map are unaffected. This
test makes that happen deterministically: a cgroup rule P/me/*, job "j" live (hooks attached);
iolensd is stopped (SIGSTOP); `job_workload many` creates, writes, reads and unlinks NFILES small
files in the job (each new file sends a name event: far more than the ring holds); the job's
cgroup is removed while the ring is still full; iolensd continues (SIGCONT).

Checks: the kernel did drop events (status lost.events > 0, else the test proves nothing);
within 20 s iolensd writes the job's record, state "closed" (it must notice that the cgroup is
gone without the event); the record's job totals (opens, reads, writes, bytes) are exactly the
workload's: the kernel map (262,144 records here; the job needs one per file) kept counting
while the daemon slept; the record says events were lost.
"""
import os
import signal
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NFILES = 100000  # about 150 bytes of name event each: well over the 8 MiB ring
SIZE = 100


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_missed_events")
    cg = D.Cgroups()
    data = D.tempdir("me-data", base=os.environ.get("IOLENS_E2E_MANY_TMP", "/dev/shm"))
    # a kernel map that holds every record of the job (one per file) while the daemon sleeps
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/me/*"]}' % cg.prefix, tag="me",
                 extra_config="limits:\n  kernel_file_records: 262144\n")
    d.start(ck)
    sub = "me/j"
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])
    lost0 = d.status()["lost"]

    d.proc.send_signal(signal.SIGSTOP)
    D.Cleanup.register("SIGCONT iolensd", lambda: d.alive() and d.proc.send_signal(signal.SIGCONT))
    try:
        p = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", data, str(NFILES), str(SIZE)])
        manifest = D.finish_workload(ck, p, "job_workload many", timeout=60)
        cg.rmdir(sub)
    finally:
        d.proc.send_signal(signal.SIGCONT)
    if manifest is None:
        ck.finish()

    st = D.wait_for("iolensd to answer again", d.status, 10)
    lost = {k: v - lost0.get(k, 0) for k, v in (st or {}).get("lost", {}).items()}
    D.log("lost while iolensd was stopped: %s" % {k: v for k, v in lost.items() if v})
    ck.check(lost.get("events", 0) > 0, "the ring buffer did not overflow (lost %s): this test "
             "proves nothing; raise NFILES" % lost)
    doc = d.wait_record(ck, job_id, timeout=20)
    if doc is None:
        listed = [j.get("state") for j in d.request({"cmd": "jobs"})["result"]["jobs"]
                  if j["id"] == job_id]
        ck.fail("job %s: its cgroup was removed while the ring buffer was full (lost.job_events "
                "%s); 20 s later iolensd still lists it as %s and has written no record: a job "
                "whose removal event is dropped is never closed" %
                (job_id, lost.get("job_events"), listed))
        ck.finish()
    if not D.check_record_shape(ck, doc, job_id):
        ck.finish()
    ck.eq("job state", "closed", doc["job"].get("state"))
    totals = doc["job"].get("totals", {})
    for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
        ck.eq("job.totals.%s (kept in the kernel map while iolensd slept)" % k,
              manifest["totals"][k], totals.get(k))
    ck.check((doc.get("lost") or {}).get("events", 0) > 0,
             "the record does not say that events were lost while the job ran: lost %s" %
             doc.get("lost"))
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
