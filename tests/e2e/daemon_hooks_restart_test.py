#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a restart does not flag a job whose processes all ran with the syscall hooks attached
(lost.before_hooks, docs/counters.md), when the saved state had the hooks detached.

`hooks_idle: 0`: the on-demand hooks detach as soon as no job is live. Job A runs and ends; the
hooks detach and a save holds them detached. Job B's cgroup is made, the hooks attach (waited
for), B's workload runs whole (`job_workload many`: its own tally is the ground truth), and
iolensd is killed (SIGKILL) at once, before a save holds the attach. The restarted daemon finds
the hooks attached from the dead daemon's link pins; the window the save left open must end when
they were attached (the pin's time), not at the restart: B's record has lost.before_hooks 0
and the workload's totals. (Before, it ended at the restart, and B was flagged: a CI run of
daemon_responsive failed on it.)
"""
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402


def status(d):
    return d.status() or {}


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_hooks_restart")
    cg = D.Cgroups()
    data = D.tempdir("hooks-restart", base="/dev/shm")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/hr/*"]}' % cg.prefix, tag="hr",
                 extra_config="hooks_idle: 0\n")
    d.start(ck)

    # A: the hooks attach for it and detach after it; a save then holds them detached.
    a_id, p = D.start_many(ck, d, cg, args.workload, data, "hr/a", 20, 100)
    D.finish_workload(ck, p, "job_workload many in hr/a", timeout=60)
    cg.rmdir("hr/a")
    d.wait_record(ck, a_id, timeout=30)
    ck.check(D.wait_for("the hooks detached", lambda: status(d).get("syscall_hooks") == "detached",
                        15), "the hooks did not detach with no live job (hooks_idle 0)")
    saves = (status(d).get("state") or {}).get("saves", 0)
    ck.check(D.wait_for("a save with the hooks detached",
                        lambda: (status(d).get("state") or {}).get("saves", 0) > saves, 15),
             "no state save within 15 s of the hooks' detach")

    # B: runs whole with the hooks attached; killed before a save holds the attach.
    t0 = time.monotonic()
    b_id, p = D.start_many(ck, d, cg, args.workload, data, "hr/b", 50, 100)  # waits for the hooks
    m = D.finish_workload(ck, p, "job_workload many in hr/b", timeout=60)
    d.kill9()
    D.log("job B ran and iolensd was killed %.2f s after its cgroup was made" %
          (time.monotonic() - t0))
    d.restart(ck)
    st = status(d)
    ck.eq("restart.state", "loaded", (st.get("restart") or {}).get("state"))
    cg.rmdir("hr/b")
    doc = d.wait_record(ck, b_id, timeout=30)
    if doc and m and D.check_record_shape(ck, doc, b_id):
        D.check_many_totals(ck, doc, m, p.pid, cg.abs("hr/b"), "job B", 50)
        ck.eq("job B lost.before_hooks (its processes ran with the hooks attached)", 0,
              (doc.get("lost") or {}).get("before_hooks"))
        ck.check("syscall_hooks" not in doc, "job B's record has syscall_hooks: %r" %
                 doc.get("syscall_hooks"))
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
