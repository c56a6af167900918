#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a second iolensd must not take over the pin dir of a running one.

Two daemons, one pin dir: the first runs (its socket S1, pin dir PD); a second one is started
with another socket S2 and output dir but the same PD, as a copy-pasted config or a second
unit would. PD is how a restarted daemon continues the kernel state of one that died, so the
second one has to tell "left by a dead daemon" (continue) from "in use by a live one" (refuse).

A third one shares only the first one's state dir (its own pins, socket and output dir).

Checks: the second and the third iolensd exit non-zero within 5 s with a message naming PD,
the state dir respectively; afterwards the
first still answers, its pins are all there, and a job (cgroup rule P/pc/*, job_workload writing
W bytes) is recorded by the first daemon with exactly the workload's bytes. If the second one
keeps running, the test shows the damage before stopping it: which daemon's record got the job's
I/O (both drain the same maps and consume the same ring buffer), and whether stopping the second
one removed the first one's pins.
"""
import os
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

W = 333333


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_pin_conflict")
    cg = D.Cgroups()
    work = D.tempdir("pc-work")
    rules = '  - cgroup: {paths: ["%s/pc/*"]}' % cg.prefix
    d1 = D.Daemon(args.iolensd, rules, tag="pc1")
    d1.start(ck)
    pins = d1.pins()
    d2 = D.Daemon(args.iolensd, rules, tag="pc2")
    with open(d2.config) as f:
        text = f.read().replace("pin_dir: %s\n" % d2.pin_dir, "pin_dir: %s\n" % d1.pin_dir)
    with open(d2.config, "w") as f:
        f.write(text)
    d2.pin_dir = d1.pin_dir
    d2.spawn()
    try:
        rc2 = d2.proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - still running: the bug this test is about
        rc2 = None
    ck.check(rc2 is not None and 0 < rc2 < 128,
             "a second iolensd on the pin dir %s of a running one (pid %d) did not refuse: "
             "exit %r; its log:\n%s" % (d1.pin_dir, d1.proc.pid, rc2, d2.log()))
    if rc2 is not None:
        ck.check(d1.pin_dir in d2.log(), "the refusal does not name the pin dir:\n" + d2.log())

    # A third one shares only the state dir (its own pins, socket and output): it would save
    # over the first one's state, which a restart of the first would then load. Refused too.
    d3 = D.Daemon(args.iolensd, rules, tag="pc3")
    with open(d3.config) as f:
        text = f.read().replace("state_dir: %s\n" % d3.state_dir,
                                "state_dir: %s\n" % d1.state_dir)
    with open(d3.config, "w") as f:
        f.write(text)
    d3.spawn()
    try:
        rc3 = d3.proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - still running: sharing the state dir
        rc3 = None
    ck.check(rc3 is not None and 0 < rc3 < 128,
             "a second iolensd on the state dir %s of a running one did not refuse: exit %r; "
             "its log:\n%s" % (d1.state_dir, rc3, d3.log()))
    if rc3 is not None:
        ck.check(d1.state_dir in d3.log(), "the refusal does not name the state dir:\n" +
                 d3.log())
    ck.check(d1.status().get("pid") == d1.proc.pid, "the first daemon no longer answers")

    # A job while both (or only the first) run.
    cg.mkdir("pc/j")
    job_id = "cgroup" + cg.rel("pc/j")
    def listed(d):
        a = d.request({"cmd": "jobs"})
        return a.get("ok") and job_id in [j["id"] for j in a["result"]["jobs"]]
    if not D.wait_for("the first daemon to list " + job_id, lambda: listed(d1), 5):
        ck.fail("the first iolensd never learnt of job %s (its cgroup was created)%s" %
                (job_id, "; the second one did" if d2.alive() and
                 D.wait_for("", lambda: listed(d2), 1) else ""))
    D.wait_or_fail(ck, "hooks attached (or the second daemon alive)",
                   lambda: d1.status().get("syscall_hooks") == "attached" or d2.alive(), 5)
    p = D.run_in_cgroup(cg.abs("pc/j"), [args.workload, "io", work, "j", str(W), "0"])
    m = D.finish_workload(ck, p, "workload")
    cg.rmdir("pc/j")
    doc = d1.wait_record(ck, job_id, timeout=5)
    if doc and m:
        D.check_manifest_files(ck, doc, [m], "first daemon's record of " + job_id,
                               moves=[(p.pid, cg.abs("pc/j"))])
    if d2.alive():
        d2.stop()
        got = [(os.path.basename(path), [(f.get("path"), f["counters"].get("bytes_written"))
                                         for f in x["files"]])
               for path, x in d2.records().items() if x]
        D.log("the second daemon (stopped now) wrote: %s" % got)
    now = d1.pins() or []
    ck.check(set(pins) <= set(now), "pins of the first daemon gone at the end: %s (now: %s)" %
             (sorted(set(pins) - set(now)), now))
    st = d1.status()
    ck.check(st is not None and st.get("pid") == d1.proc.pid,
             "the first iolensd does not answer any more: %r" % st)
    rc, _ = d1.stop()
    ck.eq("first iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
