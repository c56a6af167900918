#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: excluded cgroups cannot blind iolensd (issue 21, item 3: blinding).

Rule: a cgroup rule with two globs, P/users/*/job-* and P/batch/* (P = /iolens-e2e-<pid>). The
directory P/users/alice stands for a user's delegated cgroup: every child of it that is not a
job-* is an excluded cgroup directly below a traced one, so each needs its own exclusion entry
in the kernel. The attacker creates them by the thousand.

Phase 1, default sizes. 17,000 excluded cgroups P/users/alice/junk-N are made after the daemon
started: more than the 16,384 entries of the single selection map iolensd had, which they used
to fill, so that a watched root created later (P/batch) got no trace entry and its jobs ran
untraced (PROCS 0, FILES 0, `lost` all zero). Then:
  - a process doing I/O in P/users/alice/junk-7: its exclusion must hold (it is not traced: the
    daemon's unattributed_processes does not move);
  - the new root P/batch and a job P/batch/job-1 running job_workload (known I/O), and a job
    P/users/alice/job-2 likewise: each record must hold exactly the workload's process and file
    counters with `lost` all zero;
  - status: lost.untraced_cgroups = lost.unexcluded_cgroups = 0, cgroup_excl = 17,000 entries
    (one per junk cgroup: junk-N/sub cgroups below them need none), cgroup_sel = the 2 roots;
  - after the junk cgroups are removed, their entries are gone (cgroup_excl = 0).

Phase 2, `limits.kernel_cgroup_exclusions: 1000` and 1,500 junk cgroups: 500 exclusions cannot be
stored. They must be counted (status lost.unexcluded_cgroups = 500, selection_pending = 500,
iolens_lost_total{cause="unexcluded_cgroups"} 500 on /metrics), a job P/batch/job-3 is still
traced exactly, a process in an unexcluded cgroup (junk-1400) is traced but found in no job
(unattributed_processes + 1: the documented fallback), and when 100 junk cgroups go away, 100
pending exclusions take their slots (selection_pending = 400, the count stays 500).
"""
import os
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

OLD_MAP = 16384
JUNK = OLD_MAP + 616  # 17,000
SMALL = 1000
JUNK_SMALL = 1500


def make_junk(cg, n, sub_every=0):
    t0 = time.monotonic()
    for i in range(n):
        os.mkdir(cg.abs("users/alice/junk-%d" % i))
        if sub_every and i % sub_every == 0:
            os.mkdir(cg.abs("users/alice/junk-%d/sub" % i))  # covered by its parent's entry
    D.log("made %d excluded cgroups in %.1f s" % (n, time.monotonic() - t0))


def remove_junk(cg, rng):
    for i in rng:
        d = cg.abs("users/alice/junk-%d" % i)
        if os.path.isdir(d + "/sub"):
            os.rmdir(d + "/sub")
        if os.path.isdir(d):
            os.rmdir(d)


def map_entries(st, name):
    for m in st.get("maps", []):
        if m.get("name") == name:
            return m.get("entries")
    return None


def barrier(ck, d, cg, sub):
    """A job cgroup made after everything before it: once the daemon lists its job, it has read
    every cgroup event made before (the ring is in order)."""
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id], timeout=60, hooks=False)
    cg.rmdir(sub)
    d.wait_record(ck, job_id, timeout=30)


def run_job(ck, d, cg, args, work, sub, wbytes):
    """A job running job_workload in cgroup `sub`: its record must hold exactly its I/O."""
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    # Started once the daemon lists the job: it has then stored its root's trace entry (or
    # failed to, which is what this test is about). A process started before that is found by
    # the scan that follows the entry only if it still runs (docs/daemon.md#how-jobs-are-found).
    d.wait_live(ck, [job_id], timeout=60, hooks=False)
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "io", work, sub.replace("/", "_"),
                                      str(wbytes), "0"])
    m = D.finish_workload(ck, p, sub)
    cg.rmdir(sub)
    doc = d.wait_record(ck, job_id, timeout=30)
    if m is None or doc is None or not D.check_record_shape(ck, doc, job_id):
        return
    D.log("%s: %d process(es), %d file(s), lost %s" %
          (job_id, len(doc["processes"]), len(doc["files"]),
           {k: v for k, v in doc["lost"].items() if v}))
    ck.check(doc["processes"], "%s: no process recorded: the job ran untraced" % job_id)
    D.check_lost_zero(ck, doc, job_id)
    ck.check("untraced_cgroups" in doc["lost"], "%s: lost has no untraced_cgroups" % job_id)
    D.check_manifest_files(ck, doc, [m], job_id, moves=[(p.pid, cg.abs(sub))])


def run_outside(ck, cg, args, work, sub):
    """I/O in an excluded cgroup (no job)."""
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "io", work, "outside", "4096", "0"])
    D.finish_workload(ck, p, "process in " + sub)


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_selection")
    cg = D.Cgroups()
    work = D.tempdir("sel-work")
    rules = '  - cgroup: {paths: ["%s/users/*/job-*", "%s/batch/*"]}' % (cg.prefix, cg.prefix)
    cg.mkdir("users/alice")
    D.Cleanup.register("remove the junk cgroups",
                       lambda: remove_junk(cg, range(JUNK)))

    # ---- phase 1: more excluded cgroups than the old map held
    d = D.Daemon(args.iolensd, rules, args=["--syscall-hooks", "always"], tag="sel",
                 iolens=args.iolens)
    d.start(ck)
    make_junk(cg, JUNK, sub_every=100)
    barrier(ck, d, cg, "users/alice/job-barrier")
    st = d.status()
    unattributed = st.get("unattributed_processes")
    run_outside(ck, cg, args, work, "users/alice/junk-7")
    run_job(ck, d, cg, args, work, "batch/job-1", 300001)
    run_job(ck, d, cg, args, work, "users/alice/job-2", 200003)
    st = d.status()
    ck.eq("phase 1: unattributed_processes after a process ran in an excluded cgroup "
          "(its exclusion held: not traced)", unattributed, st.get("unattributed_processes"))
    lost = st.get("lost", {})
    ck.eq("phase 1: status lost.untraced_cgroups", 0, lost.get("untraced_cgroups"))
    ck.eq("phase 1: status lost.unexcluded_cgroups", 0, lost.get("unexcluded_cgroups"))
    ck.eq("phase 1: cgroup_excl entries (one per junk cgroup, none for junk-N/sub)", JUNK,
          map_entries(st, "cgroup_excl"))
    ck.eq("phase 1: cgroup_sel entries (the two roots)", 2, map_entries(st, "cgroup_sel"))
    remove_junk(cg, range(JUNK))
    got = D.wait_for("the exclusions of removed cgroups to go",
                     lambda: map_entries(d.status(), "cgroup_excl") == 0, 60)
    ck.check(got, "phase 1: cgroup_excl still holds %r entries after every junk cgroup was "
             "removed" % map_entries(d.status(), "cgroup_excl"))
    rc, _ = d.stop()
    ck.eq("phase 1: iolensd exit code", 0, rc)

    # ---- phase 2: a small exclusion map, overfilled: counted, retried, jobs still traced
    d = D.Daemon(args.iolensd, rules, args=["--syscall-hooks", "always"], tag="sel-small",
                 iolens=args.iolens,
                 extra_config="limits:\n  kernel_cgroup_exclusions: %d\n" % SMALL)
    d.start(ck)
    make_junk(cg, JUNK_SMALL)
    barrier(ck, d, cg, "users/alice/job-barrier2")
    st = d.status()
    unattributed = st.get("unattributed_processes")
    ck.eq("phase 2: status lost.unexcluded_cgroups", JUNK_SMALL - SMALL,
          st.get("lost", {}).get("unexcluded_cgroups"))
    ck.eq("phase 2: status lost.untraced_cgroups", 0, st.get("lost", {}).get("untraced_cgroups"))
    ck.eq("phase 2: selection_pending", JUNK_SMALL - SMALL, st.get("selection_pending"))
    ck.eq("phase 2: cgroup_excl entries", SMALL, map_entries(st, "cgroup_excl"))
    ck.check("unexcluded" in d.log(), "phase 2: the daemon log says nothing of the exclusions "
             "it could not store")
    run_job(ck, d, cg, args, work, "batch/job-3", 100005)
    # junk-1400 came after the map was full: its tasks are traced, then found in no job.
    run_outside(ck, cg, args, work, "users/alice/junk-1400")
    barrier(ck, d, cg, "users/alice/job-barrier3")
    ck.eq("phase 2: unattributed_processes after a process ran in an unexcluded cgroup",
          unattributed + 1, d.status().get("unattributed_processes"))
    v = D.wait_for("iolens_lost_total{cause=unexcluded_cgroups} on /metrics",
                   lambda: D.metric(ck, d, "iolens_lost_total",
                                  {"cause": "unexcluded_cgroups"}) == JUNK_SMALL - SMALL, 10)
    ck.check(v, "phase 2: iolens_lost_total{cause=\"unexcluded_cgroups\"} is %r, expected %d" %
             (D.metric(ck, d, "iolens_lost_total", {"cause": "unexcluded_cgroups"}),
              JUNK_SMALL - SMALL))
    v = D.metric(ck, d, "iolens_map_capacity_entries", {"map": "cgroup_excl"})
    ck.eq("phase 2: iolens_map_capacity_entries{map=cgroup_excl}", SMALL, v)
    # 100 stored exclusions go: 100 pending ones take their slots.
    remove_junk(cg, range(100))
    got = D.wait_for("100 pending exclusions stored",
                     lambda: d.status().get("selection_pending") == JUNK_SMALL - SMALL - 100, 30)
    st = d.status()
    ck.check(got, "phase 2: selection_pending %r after 100 excluded cgroups were removed, "
             "expected %d" % (st.get("selection_pending"), JUNK_SMALL - SMALL - 100))
    ck.eq("phase 2: cgroup_excl entries after the retry", SMALL, map_entries(st, "cgroup_excl"))
    ck.eq("phase 2: lost.unexcluded_cgroups counts each cgroup once", JUNK_SMALL - SMALL,
          st.get("lost", {}).get("unexcluded_cgroups"))
    remove_junk(cg, range(JUNK_SMALL))
    rc, _ = d.stop()
    ck.eq("phase 2: iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
