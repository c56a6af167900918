#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd SIGKILLed mid-job and restarted continues the job with exact counts.

A cgroup rule P/rs/*, one job "r". Three processes of the job, each job_workload (statically
linked, it prints its own tally of every call):
  A  --gate-mid: writes WA bytes before the crash, reads RA bytes while no daemon runs;
  B  started while no daemon runs, --gate-start: blocks, released after the restart, writes WB;
  C  runs whole while no daemon runs (created, wrote WC, exited).
Between the SIGKILL and the restart the kernel programs, pinned in bpffs, keep counting; the
restarted daemon loads its saved state, replays the ring records it consumed after saving, and
relearns the rest; its first answers already hold A's and C's counts (it reads the kernel's map
before answering: the saved state leaves live records' counts there). Then the job's cgroup is
removed.

Checks: after the SIGKILL the pins are still there (the programs still count); the restarted
daemon reports restart.resumed and restart.state "loaded"; the job has exactly one record, state
"closed", holding exactly A's, B's and C's files and calls (their own tallies), the three pids
and nothing else; its lost counts are zero, restart ones included. Then a hand-over (SIGUSR2,
as for an upgrade): a process that runs whole between the two daemons is in its job's record,
exactly. A final clean stop removes the pins.
"""
import os
import re
import signal
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

WA, RA = 3 * 65536 + 17, 2 * 32768 + 5
WB = 1048576 + 3
WC = 4 * 65536 + 99
ON_DEMAND_KEY = "  kernel_file_records_preallocated: false"


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_restart")
    cg = D.Cgroups()
    work = D.tempdir("restart-work")
    # Records made on demand, said in the config (as iolensd made them before its default
    # became preallocated, on Linux 6.1+): the hand-over below is the upgrade to a config that
    # does not say, which must keep that map and its jobs.
    # (Into the limits an IOLENS_E2E_DAEMON_CONFIG may bring: a key given twice is an error.)
    env_extra = os.environ.get("IOLENS_E2E_DAEMON_CONFIG", "")
    if re.search(r"(^|\\n|\n)limits:(\\n|\n)", env_extra):
        os.environ["IOLENS_E2E_DAEMON_CONFIG"] = re.sub(
            r"(^|\\n|\n)limits:(\\n|\n)", lambda m: m.group(0) + ON_DEMAND_KEY + "\n",
            env_extra, count=1)
        extra = ""
    else:
        extra = "limits:\n" + ON_DEMAND_KEY + "\n"
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/rs/*"]}' % cg.prefix, tag="rs",
                 extra_config=extra)
    d.start(ck)
    job_id = "cgroup" + cg.rel("rs/r")
    cg.mkdir("rs/r")
    d.wait_live(ck, [job_id])
    D.make_input(os.path.join(work, "a.in"), RA)

    a = D.run_in_cgroup(cg.abs("rs/r"), [args.workload, "io", work, "a", str(WA), str(RA),
                                          "--gate-mid"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill A", lambda: a.poll() is None and a.kill())
    progress = D.read_json_line(ck, a, "A (written)")
    ck.eq("A: bytes written before the crash", WA, progress.get("bytes_written"))
    # A state saved with A known, so that the restart has it to load: a save after this status
    # answer comes after a drain that read A's events (the loop answers between drains; A's
    # process changed the state, so the next save is at most a save interval away).
    base = d.status()["state"]["saves"]
    ck.check(D.wait_for("a state saved with A known",
                        lambda: d.status()["state"]["saves"] >= base + 1, 20),
             "iolensd saved no state within 20 s")

    rc, _ = d.kill9()
    ck.eq("iolensd exit after SIGKILL", -signal.SIGKILL, rc)
    ck.check(d.pins(), "no pins left after SIGKILL: nothing could have counted meanwhile")

    # While no daemon runs: A reads, C runs whole, B starts and waits.
    a.stdin.close()
    a.stdin = None
    m_a = D.finish_workload(ck, a, "A")
    c = D.run_in_cgroup(cg.abs("rs/r"), [args.workload, "io", work, "c", str(WC), "0"])
    m_c = D.finish_workload(ck, c, "C")
    b = D.run_in_cgroup(cg.abs("rs/r"), [args.workload, "io", work, "b", str(WB), "0",
                                          "--gate-start"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill B", lambda: b.poll() is None and b.kill())
    D.read_json_line(ck, b, "B (waiting)")

    st = d.restart(ck)
    restart = (st or {}).get("restart", {})
    ck.eq("status restart.resumed", True, restart.get("resumed"))
    ck.eq("status restart.state", "loaded", restart.get("state"))
    ck.eq("status restart.lost", {}, restart.get("lost"))
    D.log("restart: %s" % restart)
    # The first answers already hold what the kernel counted: A's records (live when the state
    # was saved, which leaves live counts to the kernel's map) and C's (never seen by the first
    # daemon). Totals that went down after a restart would read as a counter reset.
    lines = [j for j in (d.request({"cmd": "jobs"}).get("result") or {}).get("jobs", [])
             if j.get("id") == job_id]
    totals = (lines[-1].get("totals") or {}) if lines else {}
    ck.check(totals.get("bytes_written", 0) >= WA + WC and totals.get("bytes_read", 0) >= RA,
             "the first `jobs` after the restart: totals %s, below A's and C's own (written %d, "
             "read %d)" % (totals, WA + WC, RA))

    b.stdin.close()
    b.stdin = None
    m_b = D.finish_workload(ck, b, "B")
    cg.rmdir("rs/r")
    doc = d.wait_record(ck, job_id)
    got = d.records_of(job_id)
    ck.eq("records of the job", 1, len(got))
    if doc and D.check_record_shape(ck, doc, job_id):
        ck.eq("job state", "closed", doc["job"].get("state"))
        D.check_lost_zero(ck, doc, job_id)
        ck.eq("record restart.state", "loaded", doc.get("restart", {}).get("state"))
        manifests = [m for m in (m_a, m_b, m_c) if m]
        ck.eq("workloads that reported", 3, len(manifests))
        D.check_manifest_files(ck, doc, manifests, job_id,
                               moves=[(m["pid"], cg.abs("rs/r")) for m in manifests])

    # Hand-over (an upgrade): SIGUSR2 saves and leaves the programs counting; the next daemon
    # continues the same job, and what ran in between is in its record.
    job2 = "cgroup" + cg.rel("rs/h")
    cg.mkdir("rs/h")
    d.wait_live(ck, [job2])
    e = D.run_in_cgroup(cg.abs("rs/h"), [args.workload, "io", work, "e", str(WB), "0",
                                          "--gate-start"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill E", lambda: e.poll() is None and e.kill())
    D.read_json_line(ck, e, "E (waiting)")
    rc, _ = d.stop(signal.SIGUSR2)
    ck.eq("iolensd exit after SIGUSR2 (hand-over)", 0, rc)
    ck.check(d.pins(), "no pins left after the hand-over")
    e.stdin.close()
    e.stdin = None
    m_e = D.finish_workload(ck, e, "E")  # runs whole between the two daemons
    with open(d.config) as f:
        text = f.read()
    ck.check(ON_DEMAND_KEY + "\n" in text, "the config does not hold %r" % ON_DEMAND_KEY)
    with open(d.config, "w") as f:
        f.write(text.replace(ON_DEMAND_KEY + "\n", ""))  # the upgraded config: the default
    st = d.restart(ck)
    ck.eq("after the hand-over: restart.state", "loaded",
          (st or {}).get("restart", {}).get("state"))
    # On Linux 6.1+ the default is preallocated: the daemon kept the pinned map for the jobs.
    why = "the kernel state resumed" if D.default_preallocated() else \
        "the default before Linux 6.1"
    ck.check(re.search(r"kernel file records: up to \d+, made as files are opened \(%s\)" % why,
                       d.log()[d.log_start:]) is not None,
             "after the upgrade the daemon did not keep the pinned map made on demand (%s)" % why)
    cg.rmdir("rs/h")
    doc = d.wait_record(ck, job2)
    if doc and m_e and D.check_record_shape(ck, doc, job2):
        D.check_lost_zero(ck, doc, job2)
        D.check_manifest_files(ck, doc, [m_e], job2, moves=[(m_e["pid"], cg.abs("rs/h"))])

    rc, _ = d.stop(signal.SIGTERM)
    ck.eq("iolensd exit after SIGTERM", 0, rc)
    ck.eq("pins after the clean stop", None, d.pins() or None)
    ck.finish()


if __name__ == "__main__":
    main()
