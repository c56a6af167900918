#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd SIGKILLed at each step of writing a job's record and of the state save after
it writes the job's record and Darshan log exactly once, complete and exact, after a restart.

The steps are the daemon's crash points (agent/core/crash_point.hpp, docs/daemon.md
#crash-points): with IOLENS_CRASH_AT=<point> in its environment, iolensd SIGKILLs itself the
first time it reaches <point>; for the two save steps also IOLENS_CRASH_AFTER=record_renamed,
so that it is the save that follows the record (the one that would drop the job from the saved
state) that is cut. Per point, a daemon of its own (`darshan_logs: true`, zstd records, a rule
P/cp/*):
  1. a job P/cp/<point>: job_workload writes W bytes (W different per point) and exits; the
     test removes the cgroup;
  2. iolensd must die by SIGKILL (exit -9) at the point: what it left is checked to be what
     that step makes (a `.tmp-` temporary of the log or the record; the log alone; the record
     and log in place);
  3. restarted without the crash point on the same pins and directories, it must end with
     exactly one record of the job and one log with the same stem (none at a `.1` stem), the
     record holding exactly the workload's own counts (its manifest), no temporary left, and
     its status output counters saying what it found: stale_temporaries_removed 1 where a
     temporary was left, already_written 1 where the record was in place but the saved state
     still held the job (record_renamed, state_written); where the state without the job was
     renamed into place (state_renamed), the job is gone from the state and nothing is written;
  4. a clean stop.
Also: an unknown crash point is refused at start with exit 2 and the list of points.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

cg_ids = {}  # point -> its job's cgroup id

POINTS = ("darshan_written", "darshan_renamed", "record_written", "record_renamed",
          "state_written", "state_renamed")


def stem_of(name):
    for suffix in (".json.zst", ".json", ".darshan"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def one_point(ck, args, cg, work, point, wbytes):
    rules = '  - cgroup: {paths: ["%s/cp/*"]}' % cg.prefix
    d = D.Daemon(args.iolensd, rules, tag="cp-" + point, extra_config="darshan_logs: true\n")
    os.environ["IOLENS_CRASH_AT"] = point
    if point.startswith("state_"):
        os.environ["IOLENS_CRASH_AFTER"] = "record_renamed"
    try:
        d.start(ck)
    finally:
        os.environ.pop("IOLENS_CRASH_AT", None)
        os.environ.pop("IOLENS_CRASH_AFTER", None)
    sub = "cp/" + point
    job_id = "cgroup" + cg.rel(sub)
    cg.mkdir(sub)
    cg_ids[point] = os.stat(cg.abs(sub)).st_ino  # a cgroup2 directory's inode is its id
    d.wait_live(ck, [job_id])
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "io", work, point, str(wbytes), "0"])
    manifest = D.finish_workload(ck, p, point)
    cg.rmdir(sub)
    try:
        rc = d.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        ck.fail("%s: iolensd did not reach its crash point within 30 s; log tail:\n%s" %
                (point, d.log()[-3000:]))
        d.stop()
        return
    ck.eq("%s: iolensd's exit (killed by its own SIGKILL)" % point, -signal.SIGKILL, rc)
    # The stem the job's files take (job_file_name: start stamp, '_', the id with '/' as '_').
    prefix_part = "_" + job_id.replace("/", "_")
    names = sorted(os.listdir(d.output_dir))
    recs = [n for n in names if prefix_part in n and n.endswith((".json", ".json.zst"))
            and not n.startswith(".")]
    logs = [n for n in names if prefix_part in n and n.endswith(".darshan")
            and not n.startswith(".")]
    tmps = [n for n in names if n.startswith(".tmp-")]
    D.log("%s: left %s" % (point, names))
    for n in names:
        try:
            D.log("  %s: %r" % (n, os.getxattr(os.path.join(d.output_dir, n), "user.iolens.job")))
        except OSError as e:
            D.log("  %s: %s" % (n, e))
    left = {
        "darshan_written": (0, 0, 1),
        "darshan_renamed": (0, 1, 0),
        "record_written": (0, 1, 1),
        "record_renamed": (1, 1, 0),
        "state_written": (1, 1, 0),
        "state_renamed": (1, 1, 0),
    }[point]
    ck.eq("%s: (records, logs, temporaries) the kill left" % point, left,
          (len(recs), len(logs), len(tmps)))

    st = d.restart(ck)
    doc = d.wait_record(ck, job_id, timeout=20)
    if doc is not None:
        D.check_lost_zero(ck, doc, point)
        D.check_manifest_files(ck, doc, [manifest], point, moves=[(p.pid, cg.abs(sub))])
        ck.eq("%s: job state" % point, "closed", doc["job"].get("state"))
    # The restarted daemon closes the job it took from the state (after a complete drain
    # round) and hands it to its writer: wait until `jobs` lists it closed and written. Where
    # the state without the job was renamed into place, it never lists it: checked after a
    # few drain rounds (200 ms each).
    def listed():
        a = d.request({"cmd": "jobs"})
        return {j["id"]: j for j in a["result"]["jobs"]} if a.get("ok") else {}
    # A state save is gathered at each drain: the state the kill cut (state_*) is the first
    # one renamed after the record, which usually no longer holds the job, but may have been
    # gathered before the record was handed back (then it still holds it). Either way the job
    # ends written once: found written (already_written 1) or not there to write.
    in_state = True
    if point == "state_renamed":
        time.sleep(1.5)
        in_state = job_id in listed()
        D.log("%s: the restarted daemon %s the job" % (point, "lists" if in_state else
                                                       "does not list"))
    if in_state:
        D.wait_or_fail(ck, "%s: the job listed closed and written" % point,
                       lambda: (lambda j: j and j.get("state") == "closed" and
                                not j.get("writing"))(listed().get(job_id)), 20)
    names = sorted(os.listdir(d.output_dir))
    recs = [n for n in names if prefix_part in n and n.endswith((".json", ".json.zst"))]
    logs = [n for n in names if prefix_part in n and n.endswith(".darshan")]
    tmps = [n for n in names if n.startswith(".")]
    ck.eq("%s: the job's records after the restart" % point, 1, len(recs))
    ck.eq("%s: the job's Darshan logs after the restart" % point, 1, len(logs))
    ck.eq("%s: temporaries after the restart" % point, [], tmps)
    if len(recs) == 1 and len(logs) == 1:
        ck.eq("%s: the record's and the log's stem" % point, stem_of(recs[0]), stem_of(logs[0]))
        ck.check(re.search(r"\.\d+$", stem_of(recs[0])) is None,
                 "%s: the job's files took a second stem (.N): %s" % (point, recs[0]))
        # the log is a Darshan log (its magic at the start of the zlib-compressed header is
        # checked by the darshan tests; here: not empty, written whole by the rename)
        ck.check(os.path.getsize(os.path.join(d.output_dir, logs[0])) > 0,
                 "%s: the Darshan log is empty" % point)
        # both files name this job (its cgroup's id, its id), as final records
        cg_id = cg_ids[point]
        for n in (recs[0], logs[0]):
            try:
                ident = os.getxattr(os.path.join(d.output_dir, n), "user.iolens.job").decode()
            except OSError as e:
                ident = "(none: %s)" % e
            ck.eq("%s: %s's user.iolens.job" % (point, n), "%s %s closed" % (cg_id, job_id),
                  ident)
    out = (d.status() or {}).get("output", {})
    expect_stale = 1 if point in ("darshan_written", "record_written") else 0
    expect_already = 1 if point in ("record_renamed", "state_written") or \
        (point == "state_renamed" and in_state) else 0
    ck.eq("%s: status output.stale_temporaries_removed" % point, expect_stale,
          out.get("stale_temporaries_removed"))
    ck.eq("%s: status output.already_written" % point, expect_already,
          out.get("already_written"))
    ck.eq("%s: status output.unidentified" % point, 0, out.get("unidentified"))
    # written by this daemon: the records it wrote itself (none when it found it written)
    ck.eq("%s: status output.written" % point,
          0 if expect_already or point == "state_renamed" else 1, out.get("written"))
    if expect_stale:
        ck.check("temporary file(s) of a record a killed daemon was writing" in
                 d.log()[d.log_start:], "%s: the restart did not log the removed temporary" %
                 point)
    if expect_already:
        ck.check("written before the restart already" in d.log()[d.log_start:],
                 "%s: the restart did not log the job found written" % point)
    D.log("%s: restart %s; output %s" % (point, json.dumps(st.get("restart")), json.dumps(out)))
    rc, _ = d.stop()
    ck.eq("%s: clean stop" % point, 0, rc)


def check_unknown_point(ck, args, cg):
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/cp/*"]}' % cg.prefix, tag="cp-bad")
    os.environ["IOLENS_CRASH_AT"] = "record_renamd"
    try:
        d.spawn()
    finally:
        os.environ.pop("IOLENS_CRASH_AT", None)
    rc = d.proc.wait(timeout=20)
    ck.eq("unknown crash point: exit", 2, rc)
    ck.check("IOLENS_CRASH_AT=record_renamd: no such crash point (they are: darshan_written"
             in d.log(), "unknown crash point: the refusal does not name the points:\n%s" %
             d.log()[-1000:])


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_crash_points")
    cg = D.Cgroups()
    work = D.tempdir("cp-work")
    try:
        check_unknown_point(ck, args, cg)
        for i, point in enumerate(POINTS):
            one_point(ck, args, cg, work, point, 100000 + 4099 * i)
    finally:
        cg.remove_all()
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
