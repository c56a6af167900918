#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: the cgroup filesystem unmounted and mounted again under a running daemon (docs/daemon.md
"The cgroup filesystem remounted").

iolensd takes a job's cgroup for gone when its path no longer leads to it (a removal event the
ring dropped, checked every 2 s). While the cgroup filesystem is not mounted, every cgroup looks
gone that way: a daemon that took that at its word would close every live job, writing their
records early and losing what they do next. The daemon runs in a mount namespace of its own
(unshare -m, cgroup_root auto), so that the test can unmount the cgroup filesystem under it
without touching the machine's.

A cgroup rule P/cm/*. Jobs a and b are created (from the machine's mount) and their workloads
write a1 / b1 (1000 bytes) and wait. Then, in the daemon's namespace:
  1. the cgroup filesystem is unmounted for ~5 s (two checks), and mounted again where it was;
     job c is created while it is gone;
  2. it is unmounted again and mounted at another path: `auto` finds it there;
  3. it is unmounted from there and mounted back at once (one shell command): the move is
     found without an outage seen, and no job is taken for gone.
Then the workloads write a2 / b2 / c2 (2000 bytes) and exit, and the cgroups are removed.

Checks:
  - while it is gone: status cgroup_filesystem.mounted false, /metrics
    iolens_cgroup_filesystem_mounted 0, jobs a and b still live; after each mount: mounted
    again, outages 2 and moves 1 at the end, cgroup_root the new path;
  - each job has one record, closed, without end_estimated, with both files' bytes exact
    (what they wrote after the outages too), its end after the last mount.
"""
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

def in_ns(ck, pid, argv):
    r = subprocess.run(["nsenter", "-t", str(pid), "-m", "--"] + argv, capture_output=True,
                       text=True)
    if r.returncode != 0:
        ck.fail("%s in iolensd's mount namespace: %s" % (argv, r.stderr.strip()))
    return r.returncode == 0


def unmount(ck, pid, path):
    # The daemon may be walking it this moment (EBUSY): again, then detached.
    for _ in range(20):
        r = subprocess.run(["nsenter", "-t", str(pid), "-m", "--", "umount", path],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return
        time.sleep(0.1)
    in_ns(ck, pid, ["umount", "-l", path])


def fs_state(d):
    return d.status().get("cgroup_filesystem", {})


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_cgroup_remount")
    cg = D.Cgroups()
    work = D.tempdir("cm-work")
    moved_to = D.tempdir("cm-mnt")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/cm/*"]}' % cg.prefix, tag="cm",
                 extra_config="cgroup_root: auto\n", wrap=["unshare", "-m", "--propagation",
                                                           "private"])
    st = d.start(ck)
    first_root = st.get("cgroup_root")
    ck.eq("status cgroup_filesystem at start",
          {"mounted": True, "missing_s": 0.0, "outages": 0, "moves": 0},
          st.get("cgroup_filesystem"))
    pid = d.proc.pid
    workloads = {}
    try:
        def start(name):
            sub = "cm/" + name
            cg.mkdir(sub)
            jid = "cgroup" + cg.rel(sub)
            d.wait_live(ck, [jid])
            workloads[name] = D.start_gated_writer(ck, cg.abs(sub), work, name)
            return jid

        ids = {name: start(name) for name in ("a", "b")}

        def metric_is(what, want):
            # The page is built after drains, at most once a second.
            name = "iolens_cgroup_filesystem_mounted"
            D.wait_for(what, lambda: D.node_metric(ck, d, name) == want, 5)
            ck.eq(what, want, D.node_metric(ck, d, name))

        def outage(remount, what):
            unmount(ck, pid, first_root if fs_state(d).get("moves", 0) == 0 else moved_to)
            D.wait_or_fail(ck, what + ": status to say the cgroup filesystem is gone",
                           lambda: fs_state(d).get("mounted") is False, 10)
            metric_is(what + ": /metrics iolens_cgroup_filesystem_mounted", 0.0)
            time.sleep(4.5)  # two more checks (every 2 s), each of which finds no cgroup
            a = d.request({"cmd": "jobs"})
            live = {j["id"] for j in a.get("result", {}).get("jobs", [])
                    if j.get("state") == "live"}
            for name, jid in ids.items():
                ck.check(jid in live, "%s: job %s is not live while the cgroup filesystem is "
                         "unmounted (%s)" % (what, name, sorted(live)))
            remount()
            D.wait_or_fail(ck, what + ": status to say the cgroup filesystem is back",
                           lambda: fs_state(d).get("mounted") is True, 10)

        def same_place():
            in_ns(ck, pid, ["mount", "-t", "cgroup2", "none", first_root])
        outage_started = time.monotonic()
        # c is made while it is gone (the kernel's mkdir event names it).
        ids_before = dict(ids)

        def same_place_with_c():
            ids["c"] = start("c")
            same_place()
        outage(same_place_with_c, "unmounted, mounted again")
        ck.check(time.monotonic() - outage_started > 4, "the first outage was too short")
        ck.check(set(ids_before) < set(ids), "job c was not made")

        def elsewhere():
            in_ns(ck, pid, ["mount", "-t", "cgroup2", "none", moved_to])
        outage(elsewhere, "unmounted, mounted elsewhere")
        st = fs_state(d)
        ck.eq("status cgroup_filesystem outages, moves", (2, 1), (st.get("outages"),
                                                                 st.get("moves")))
        # Where `auto` finds it: the new mount, or another mount of the same root that the
        # daemon's namespace had (none on the machines this runs on).
        now_root = d.status().get("cgroup_root")
        D.log("cgroup_root after the move: %s" % now_root)
        ck.check(now_root != first_root, "status cgroup_root is still %s after the move" %
                 first_root)
        metric_is("/metrics iolens_cgroup_filesystem_mounted after the move", 1.0)

        # 3. Moved back at once (no look in between need see it gone): the jobs' paths are
        # then under the other mount, and must not be taken for gone either.
        in_ns(ck, pid, ["sh", "-c", "umount %s && mount -t cgroup2 none %s" %
                        (now_root, first_root)])
        D.wait_or_fail(ck, "the quick move back seen",
                       lambda: d.status().get("cgroup_root") == first_root, 10)
        time.sleep(4.5)  # two more checks
        a = d.request({"cmd": "jobs"})
        live = {j["id"] for j in a.get("result", {}).get("jobs", []) if j.get("state") == "live"}
        for name, jid in ids.items():
            ck.check(jid in live, "after the quick move back: job %s is not live (%s)" %
                     (name, sorted(live)))
        ck.eq("status jobs.closed_without_event", 0,
              d.status()["jobs"].get("closed_without_event"))
        ck.eq("status cgroup_filesystem moves after the quick move back", 2,
              fs_state(d).get("moves"))

        last_mount_wall = time.time_ns()
        for name, p in workloads.items():
            D.finish_gated_writer(ck, p, name)
        for name in ids:
            D.wait_or_fail(ck, name + "'s cgroup empty", lambda: not cg.procs("cm/" + name), 10)
            cg.rmdir("cm/" + name)
        for name, jid in ids.items():
            doc = d.wait_record(ck, jid, timeout=20)
            if doc is None:
                continue
            ck.eq(name + ": records of the job", 1, len(d.records_of(jid)))
            ck.eq(name + ": state", "closed", doc["job"].get("state"))
            ck.eq(name + ": end_estimated", None, doc["job"].get("end_estimated"))
            ck.check((doc["job"].get("end_ns") or 0) > last_mount_wall,
                     "%s: the job ended at %s, before its cgroup was removed (%d)" %
                     (name, doc["job"].get("end_ns"), last_mount_wall))
            got = D.gated_writer_files(doc, work, name)
            ck.eq(name + ": files and bytes", dict(zip((name + "1", name + "2"), D.GATED_WRITER_BYTES)), got)
            D.check_lost_zero(ck, doc, name)
        ck.check("the cgroup filesystem is not mounted at" in d.log(),
                 "iolensd's log does not say the cgroup filesystem went")
        D.stop_checked(ck, d)
    finally:
        cg.remove_all()
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
