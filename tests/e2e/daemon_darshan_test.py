#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd with `darshan_logs: true` writes each finished job's Darshan log next to its JSON
record, rotates the two together, and counts a log it cannot write without losing the record.

Rules: a cgroup rule P/dj/* and a Slurm rule rooted at P/slurm (P = /iolens-e2e-<pid>);
`rotation.max_size: 1` so that every write removes every other job's files.

  - Job A (P/dj/a), two processes, one after the other: a1 runs job_workload as uid 65534
    (started outside the job by setpriv, gated, then moved into the job's cgroup by the test,
    as runc moves a container's first process), a2 as root (its shell moves itself in). Each
    writes and reads known byte counts in known call counts (64 KiB writes, 32 KiB reads). The
    test waits until iolensd counts a1 alive before releasing it (the daemon reads a job's uid
    from its first process it finds alive).
  - Job B (P/slurm/uid_0/job_777, a Slurm cgroup/v1 job): one process, gated as a1 is until
    iolensd counts it (ungated, it could exit before the daemon read its uid); its log's jobid
    is the Slurm job id.
  - Job C (P/dj/c): its log cannot be written (the test puts a directory where the log's
    temporary file goes).

Checks, on the bytes of each log (the independent reader of tests/e2e/darshan_test.py: header
version, magic, zlib, partial flag 0, only the POSIX module at version 4, regions contiguous to
the end of the file, record ids = lookup8 of the paths): the log is `<record stem>.darshan`;
nprocs = the record's processes, rank i = processes[i]; uid 65534 for A (a1's), 0 for B; jobid
= rank 0's pid for A, 777 for B; start/end = the record's start_ns/end_ns; exe = rank 0's exe
(or comm); metadata names the job (job_id, job_kind, job_cgroup, node, its labels); a mount
entry for /; one POSIX record per file record of the JSON, every mapped counter equal to the
record's, every counter the workload tallied (opens, reads, writes, bytes) equal to its own
count and to the expected call counts; times equal the record's in seconds; timestamps count
from the job start (the record's count from boot): within the job, and equal to the record's
shifted by the job start. Rotation: when B is written, A's record and log both go; when C is,
B's both go (status output.rotated 1, then 2). C: its JSON record is written and complete, no
log, no temporary left; status output.darshan_logs {enabled, written 2, failed 1}; /metrics
iolens_darshan_logs_written_total 2, iolens_darshan_logs_failed_total 1; the log says why; the
daemon goes on (a job after C gets its log) and stops cleanly.
"""
import os
import shutil
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import darshan_test as DT  # noqa: E402  (its independent Darshan reader)
import e2e_common as E  # noqa: E402

NOBODY = 65534
WCHUNK, RCHUNK = 65536, 32768
# tag -> (bytes written, bytes read)
SIZES = {"a1": (300007, 100003), "a2": (3 * WCHUNK + 17, 0), "b": (WCHUNK, 5 * RCHUNK),
         "c": (4242, 0), "d": (1000, 0)}


def job_file_stem(job_id, start_ns):
    """agent/daemon/job_writer.cpp job_file_name() without its ".json"."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start_ns // 10**9))
    safe = "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "._-") else "_"
                   for b in job_id.encode())
    if not safe or safe.startswith("."):
        safe = "_" + safe
    return stamp + "_" + safe[:200]


def output_status(d):
    st = d.status() or {}
    return st.get("output", {})


def scrape(d, ck):
    m = (d.status() or {}).get("metrics", {})
    if not m.get("ports"):
        ck.fail("iolensd has no metrics port: %s" % m)
        return {}
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % m["ports"][0], timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("iolens_darshan_logs_") or line.startswith("iolens_job_records_"):
            series, value = line.rsplit(" ", 1)
            out[series.split("{")[0]] = float(value)  # the daemon's series: one each
    return out


def check_log(ck, d, doc, json_path, manifests, want):
    """The .darshan beside `json_path` against its record `doc` and the workloads' own counts."""
    jid = doc["job"]["id"]
    log_path = D.record_stem(json_path) + ".darshan"
    if not ck.check(os.path.exists(log_path), "%s: no Darshan log %s beside its record (dir: %s)"
                    % (jid, log_path, sorted(os.listdir(d.output_dir)))):
        return
    with open(log_path, "rb") as f:
        blob = f.read()
    ck.eq("%s: log mode" % jid, 0o640, os.stat(log_path).st_mode & 0o777)
    log = DT.parse(ck, blob)

    procs = doc["processes"]
    ranks = [p["pid"] for p in procs]  # ranks are processes in start order
    ck.eq("%s nprocs" % jid, len(procs), log["nprocs"])
    ck.eq("%s uid" % jid, want["uid"], log["uid"])
    ck.eq("%s jobid" % jid, want["jobid"], log["jobid"])
    start, end = doc["start_ns"], doc["end_ns"]
    ck.eq("%s start (sec, nsec)" % jid, (start // 10**9, start % 10**9), log["start"])
    ck.eq("%s end (sec, nsec)" % jid, (end // 10**9, end % 10**9), log["end"])
    ck.eq("%s exe (rank 0's)" % jid, procs[0].get("exe") or procs[0].get("comm"), log["exe"])
    meta = dict(line.split("=", 1) for line in log["meta"].splitlines() if "=" in line)
    for k, v in [("job_id", jid), ("job_kind", doc["job"]["kind"]),
                 ("job_cgroup", doc["job"]["cgroup"]), ("producer", "iolens")] + \
            sorted(doc["job"]["labels"].items()):
        ck.eq("%s metadata %s" % (jid, k), v, meta.get(k))
    ck.check(meta.get("node"), "%s: metadata has no node: %r" % (jid, log["meta"]))
    ck.check(any(m.endswith("\t/") for m in log["mounts"]), "%s: no mount entry for /: %r" %
             (jid, log["mounts"][:5]))
    for rid, path in log["names"].items():
        ck.eq("%s record id of %s" % (jid, path), DT.lookup8(path.encode("utf-8",
                                                                          "surrogateescape")), rid)

    by_key = {}
    for r in log["recs"]:
        # the jobs' workloads share no file among all their processes: no rank -1 record here
        # (tests/e2e/by_file_test.py checks those)
        if not ck.check(0 <= r["rank"] < len(ranks), "%s: rank %d out of range" %
                        (jid, r["rank"])):
            continue
        by_key[(ranks[r["rank"]], log["names"].get(r["id"]))] = r
    ck.eq("%s: one POSIX record per JSON file record" % jid, len(doc["files"]), len(log["recs"]))

    # The record's timestamps count from boot (CLOCK_MONOTONIC); the log's from the job start.
    mono_to_wall = time.time_ns() - time.monotonic_ns()
    base_s = (start - mono_to_wall) / 1e9
    duration_s = (end - start) / 1e9
    for f in doc["files"]:
        w = "%s pid %d %s" % (jid, f["pid"], f["path"])
        r = by_key.get((f["pid"], f["path"]))
        if not ck.check(r is not None, "%s: no POSIX record" % w):
            continue
        for name, dname in DT.JSON_TO_DARSHAN.items():
            ck.eq("%s %s = the record's %s" % (w, dname, name), f["counters"][name], r["c"][dname])
        for name, dname in DT.JSON_TO_DARSHAN_F.items():
            ns = f["counters"][name]
            got = r["f"][dname]
            if not dname.endswith("_TIMESTAMP"):
                ck.check(abs(got - ns / 1e9) <= 1e-9 * max(1.0, ns / 1e9),
                         "%s %s: %r s, the record's %d ns" % (w, dname, got, ns))
            elif ns == 0:
                ck.eq("%s %s (never)" % (w, dname), 0.0, got)
            else:
                # 50 ms: the two clocks' offset read here vs in the daemon, plus scheduling.
                ck.check(abs(got - (ns / 1e9 - base_s)) < 0.05 and -0.05 < got < duration_s + 0.05,
                         "%s %s: %r s, expected %.6f s after the job start (job %.3f s long; "
                         "the record's %d ns from boot)" %
                         (w, dname, got, ns / 1e9 - base_s, duration_s, ns))
        DT.check_alignment(ck, w, f, r)

    # Ground truth: the workloads' own tallies and the call counts their sizes imply.
    for m in manifests:
        for mf in m["files"]:
            w = "%s pid %d %s" % (jid, m["pid"], mf["path"])
            r = by_key.get((m["pid"], mf["path"]))
            if not ck.check(r is not None, "%s: no POSIX record for a workload file" % w):
                continue
            for name in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
                ck.eq("%s %s = the workload's count" % (w, name.upper()), mf[name],
                      r["c"][name.upper()])
            tag = os.path.basename(mf["path"]).split(".")[0]
            wbytes, rbytes = SIZES[tag]
            if mf["path"].endswith(".out"):
                ck.eq("%s BYTES_WRITTEN" % w, wbytes, r["c"]["BYTES_WRITTEN"])
                ck.eq("%s WRITES (64 KiB calls)" % w, -(-wbytes // WCHUNK), r["c"]["WRITES"])
            else:
                ck.eq("%s BYTES_READ" % w, rbytes, r["c"]["BYTES_READ"])
                ck.eq("%s READS (32 KiB calls)" % w, -(-rbytes // RCHUNK), r["c"]["READS"])
            ck.eq("%s OPENS" % w, 1, r["c"]["OPENS"])
    E.log("%s: Darshan log %s: %d bytes, %d ranks, %d records checked" %
          (jid, os.path.basename(log_path), len(blob), log["nprocs"], len(log["recs"])))


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_darshan")
    cg = D.Cgroups()
    P = cg.prefix
    work = D.tempdir("darshan-work")
    os.chown(work, NOBODY, NOBODY)  # a1 writes there as uid 65534
    # A copy uid 65534 can execute (the build tree may be below a directory it cannot enter).
    workload = os.path.join(work, "job_workload")
    shutil.copy2(args.workload, workload)
    os.chmod(workload, 0o755)
    for tag, (_, r) in SIZES.items():
        if r:
            D.make_input(os.path.join(work, tag + ".in"), r)

    rules = ('  - cgroup: {paths: ["%s/dj/*"]}\n'
             '  - slurm: {roots: ["%s/slurm"]}' % (P, P))
    d = D.Daemon(args.iolensd, rules, tag="darshan", iolens=args.iolens,
                 extra_config="darshan_logs: true\nrotation:\n  max_size: 1\n")
    d.start(ck)
    st = output_status(d)
    ck.eq("status output.darshan_logs at start", {"enabled": True, "written": 0, "failed": 0},
          st.get("darshan_logs"))

    def io(tag):
        w, r = SIZES[tag]
        return [workload, "io", work, tag, str(w), str(r)]

    # --- job A: a1 as uid 65534, moved in from outside; then a2 as root -----------------------
    a_id = "cgroup" + cg.rel("dj/a")
    cg.mkdir("dj/a")
    d.wait_live(ck, [a_id])
    a1 = subprocess.Popen(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                           "--clear-groups"] + io("a1") + ["--gate-start"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    D.Cleanup.register("kill workload a1", lambda: a1.poll() is None and a1.kill())
    ck.eq("a1 waiting (as uid 65534)", "waiting", D.read_json_line(ck, a1, "a1").get("phase"))
    with open(os.path.join(cg.abs("dj/a"), "cgroup.procs"), "w") as f:
        f.write(str(a1.pid))  # as runc moves a container's first process

    def counted(job_id):
        for j in d.request({"cmd": "jobs"})["result"]["jobs"]:
            if j["id"] == job_id and j.get("live_processes") == 1:
                return True
        return False
    if D.wait_for("iolensd to count a1 in job A", lambda: counted(a_id), 10) is None:
        ck.fatal("job %s never counted the process moved into it; log:\n%s" %
                 (a_id, d.log()[-3000:]))
    a1.stdin.close()
    a1.stdin = None
    m_a1 = D.finish_workload(ck, a1, "workload a1")
    a2 = D.run_in_cgroup(cg.abs("dj/a"), io("a2"))
    m_a2 = D.finish_workload(ck, a2, "workload a2")
    cg.rmdir("dj/a")
    doc_a = d.wait_record(ck, a_id)
    got = d.records_of(a_id)
    if doc_a and D.check_record_shape(ck, doc_a, a_id) and m_a1 and m_a2:
        D.check_lost_zero(ck, doc_a, a_id)
        D.check_manifest_files(ck, doc_a, [m_a1, m_a2], a_id,
                               moves=[(a2.pid, cg.abs("dj/a"))])
        ck.eq("A: ranks in start order", [a1.pid, a2.pid], [p["pid"] for p in doc_a["processes"]])
        check_log(ck, d, doc_a, got[0][0], [m_a1, m_a2], {"uid": NOBODY, "jobid": a1.pid})
    a_files = [os.path.basename(got[0][0]), os.path.basename(D.record_stem(got[0][0])) + ".darshan"
               ] if got else []

    # --- job B: a Slurm job; writing it rotates A's pair away ---------------------------------
    b_sub = "slurm/uid_0/job_777"
    b_id = "slurm/777"
    cg.mkdir(b_sub + "/step_0/task_0")
    d.wait_live(ck, [b_id])
    # Gated as a1 is: the uid is read from the job's first process found alive, and b, ungated,
    # could exit before (its log's uid -1: seen under load).
    b = D.run_in_cgroup(cg.abs(b_sub + "/step_0/task_0"), io("b") + ["--gate-start"],
                        stdin=subprocess.PIPE)
    D.Cleanup.register("kill workload b", lambda: b.poll() is None and b.kill())
    ck.eq("b waiting", "waiting", D.read_json_line(ck, b, "b").get("phase"))
    if D.wait_for("iolensd to count b in job B", lambda: counted(b_id), 10) is None:
        ck.fatal("job %s never counted its process; log:\n%s" % (b_id, d.log()[-3000:]))
    b.stdin.close()
    b.stdin = None
    m_b = D.finish_workload(ck, b, "workload b")
    cg.remove_tree(b_sub)
    doc_b = d.wait_record(ck, b_id)
    got = d.records_of(b_id)
    if doc_b and D.check_record_shape(ck, doc_b, b_id) and m_b:
        D.check_manifest_files(ck, doc_b, [m_b], b_id,
                               moves=[(b.pid, cg.abs(b_sub + "/step_0/task_0"))])
        ck.eq("B labels", {"slurm_job": "777", "slurm_uid": "0"}, doc_b["job"].get("labels"))
        check_log(ck, d, doc_b, got[0][0], [m_b], {"uid": 0, "jobid": 777})
    names = sorted(os.listdir(d.output_dir))
    for n in a_files:
        ck.check(n not in names, "rotation (max_size 1) kept %s of job A after B was written: %s"
                 % (n, names))
    b_files = [os.path.basename(got[0][0]), os.path.basename(D.record_stem(got[0][0])) + ".darshan"
               ] if got else []
    for n in b_files:
        ck.check(n in names, "job B's %s is missing: %s" % (n, names))
    ck.eq("status output.rotated after B (A's record and log: one job)", 1,
          output_status(d).get("rotated"))

    # --- job C: its log cannot be written; its record is ---------------------------------------
    c_id = "cgroup" + cg.rel("dj/c")
    cg.mkdir("dj/c")
    d.wait_live(ck, [c_id])
    c_start = next(j["start_ns"] for j in d.request({"cmd": "jobs"})["result"]["jobs"]
                   if j["id"] == c_id)
    stem = job_file_stem(c_id, c_start)
    blocker = os.path.join(d.output_dir, ".tmp-" + stem + ".darshan")
    os.mkdir(blocker)  # open(2) of the log's temporary file fails: EISDIR
    c = D.run_in_cgroup(cg.abs("dj/c"), io("c"))
    m_c = D.finish_workload(ck, c, "workload c")
    cg.rmdir("dj/c")
    doc_c = d.wait_record(ck, c_id)
    got = d.records_of(c_id)
    if doc_c and D.check_record_shape(ck, doc_c, c_id) and m_c:
        ck.eq("C's record file (record_compression: zstd, the default)", stem + ".json.zst",
              os.path.basename(got[0][0]))
        ck.eq("C state", "closed", doc_c["job"].get("state"))
        D.check_manifest_files(ck, doc_c, [m_c], c_id, moves=[(c.pid, cg.abs("dj/c"))])
    names = sorted(os.listdir(d.output_dir))
    ck.check(stem + ".darshan" not in names, "C has a log though it could not be written: %s" %
             names)
    ck.eq("files left starting with '.' (the test's blocker only)", [os.path.basename(blocker)],
          [n for n in names if n.startswith(".")])
    for n in b_files:
        ck.check(n not in names, "rotation kept %s of job B after C was written: %s" % (n, names))
    st = output_status(d)
    ck.eq("status output.darshan_logs after C", {"enabled": True, "written": 2, "failed": 1},
          st.get("darshan_logs"))
    ck.eq("status output.written after C", 3, st.get("written"))
    ck.eq("status output.failed after C (the records all written)", 0, st.get("failed"))
    ck.eq("status output.rotated after C", 2, st.get("rotated"))
    r = d.cli("status", "--json")
    ck.check(r.returncode == 0 and '"darshan_logs"' in r.stdout,
             "iolens status --json (rc %d) does not show output.darshan_logs: %s%s" %
             (r.returncode, r.stdout[-500:], r.stderr))

    def metrics_counted():
        got = scrape(d, ck)
        return got if got.get("iolens_darshan_logs_failed_total") == 1 else None
    got = D.wait_for("/metrics to count the failed log", metrics_counted, 10) or scrape(d, ck)
    ck.eq("iolens_darshan_logs_written_total", 2, got.get("iolens_darshan_logs_written_total"))
    ck.eq("iolens_darshan_logs_failed_total", 1, got.get("iolens_darshan_logs_failed_total"))
    ck.eq("iolens_job_records_failed_total", 0, got.get("iolens_job_records_failed_total"))
    ck.check(any("Darshan log" in line and c_id in line and "cannot write" in line
                 for line in d.log().splitlines()),
             "the daemon's log does not say why C's Darshan log was not written:\n%s" %
             d.log()[-3000:])

    # --- the daemon goes on: job D gets its log -------------------------------------------------
    d_id = "cgroup" + cg.rel("dj/d")
    cg.mkdir("dj/d")
    d.wait_live(ck, [d_id])
    p = D.run_in_cgroup(cg.abs("dj/d"), io("d"))
    D.finish_workload(ck, p, "workload d")
    cg.rmdir("dj/d")
    d.wait_record(ck, d_id)
    got = d.records_of(d_id)
    if got:
        ck.check(os.path.exists(D.record_stem(got[0][0]) + ".darshan"), "job D after the failure has no "
                 "log: %s" % sorted(os.listdir(d.output_dir)))
    ck.eq("status output.darshan_logs at the end", {"enabled": True, "written": 3, "failed": 1},
          output_status(d).get("darshan_logs"))
    rc, secs = d.stop()
    ck.eq("iolensd exit code after SIGTERM", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
