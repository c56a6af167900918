#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd finds Kubernetes, Slurm and cgroup-rule jobs and records exactly their I/O.

One daemon, three rules (kubernetes and slurm with `roots:` under a private prefix P =
/iolens-e2e-<pid>, and a cgroup rule P/batch/*). Five jobs, built the way kubelet (systemd and
cgroupfs drivers), Slurm (cgroup/v2 and cgroup/v1 plugins) and a batch system lay them out:

  A  P/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice with two
     container scopes cri-containerd-<64 hex>.scope: the pod and container 1 exist (and container
     1's process runs) BEFORE the daemon starts; container 2 is created after;
  B  P/kubepods/besteffort/pod<uid>/<64 hex>                      (created after the start)
  C  P/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0  (after)
  D  P/slurm/uid_1000/job_4343/step_0/task_0                      (before; its process after)
  E  P/batch/jobE, its process in P/batch/jobE/sub created once the job is live

Each job's process is tests/workloads/job_workload (static: it opens no file but its own),
started by `sh -c 'echo $$ > CG/cgroup.procs; exec ...'`; it writes W bytes to TAG.out and reads
R bytes of TAG.in, W and R different for every process, and prints what it did. Noise runs all
along: a python loop doing file I/O and running job_workload itself, in three places: outside
every watched root, directly in the kubepods root (traced by the kernel, in no job), and in a
cgroup under the kubepods root that is no pod (excluded).

Checks, per job: the record (iolens.job/1) exists once, with kind, id, labels (pod_uid with
dashes, qos_class, slurm_job, slurm_uid), job cgroup and state "closed"; its processes are
exactly the job's workload pids, each with its own labels (container_id and runtime per
container, slurm_step and slurm_task); every workload file has exactly the workload's opens,
closes, reads, writes, bytes and dev/ino; no other file (not even the write to cgroup.procs
that moved the shell in: its entry was not traced); job totals equal the workload sums;
`lost` is all zero. No record anywhere holds a noise file or a noise pid. While the workloads
are paused halfway, `iolens jobs --json` lists the five jobs live with their process counts, and
`iolens job ID --json` returns job A's live record with the bytes written so far.
"""
import json
import os
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NOISE = r'''
import os, subprocess, sys
noise, wl, pidlog, stop = sys.argv[1:5]
def note(*pids):
    with open(pidlog, "a") as f:
        f.write(" ".join(str(p) for p in pids) + "\n")
note(os.getpid())
blob = os.urandom(65536)
i = 0
while not os.path.exists(stop):
    p = os.path.join(noise, "n%d" % (i % 8))
    with open(p, "wb") as f:
        f.write(blob)
    with open(p, "rb") as f:
        f.read()
    if i % 10 == 0:
        r = subprocess.Popen([wl, "io", noise, "wl%d" % (i % 4), "100000", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        note(r.pid)
        r.communicate()
    if i == 20:
        open(os.path.join(noise, "ready"), "w").close()
    i += 1
'''


def hex64():
    return (uuid.uuid4().hex + uuid.uuid4().hex)[:64]


def front_answers(ck, d, n=10):
    """`status` and `jobs` are answered by the control socket's front thread from what the loop
    built (docs/control.md#answer-times): each answer says how old it is, other requests are
    the loop's and carry no age, and `status` counts every front answer. Between a fresh first
    `status` and a fresh last one (built after they were asked: age_ms under FRESH_ANSWER_MS,
    which a stale answer never has, since it waited that long), every request sent is counted:
    the first `status` (counted after it was built), the n in between and each `status` asked
    before the last, until it was fresh (the daemon is idle here: at once, unless the machine
    is loaded)."""
    def ask(cmd):
        a = d.request({"cmd": cmd})
        return a.get("result") or {}

    def fresh_status():
        """The first fresh `status`, and how many stale ones were asked before it."""
        deadline = time.monotonic() + 20
        stale = 0
        while True:
            st = ask("status")
            if st.get("age_ms", 10 ** 9) < D.FRESH_ANSWER_MS or time.monotonic() > deadline:
                return st, stale
            stale += 1
            time.sleep(0.05)
    first, _ = fresh_status()
    between = [ask("jobs" if i % 2 else "status") for i in range(n)]
    last, stale = fresh_status()
    ages = [r.get("age_ms") for r in [first, last] + between]
    ck.check(all(isinstance(x, int) and x >= 0 for x in ages),
             "every status and jobs answer says how old it is (age_ms): %r" % ages)

    def answered(st):
        c = st.get("control") or {}
        return c.get("answered_fresh", 0) + c.get("answered_stale", 0)
    ck.eq("front answers counted between two fresh statuses (the first, %d between, %d stale "
          "before the last)" % (n, stale), 1 + n + stale, answered(last) - answered(first))
    other = d.request({"cmd": "job", "id": "no-such-job"})
    ck.check("age_ms" not in json.dumps(other),
             "a request the loop answers carries no age_ms: %r" % other)
    ck.eq("job of an unknown id, answered by the loop", "failed", other.get("code"))


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_jobs")
    cg = D.Cgroups()
    P = cg.prefix
    work = D.tempdir("jobs-work")

    uid_a, uid_b = str(uuid.uuid4()), str(uuid.uuid4())
    ctr1, ctr2, ctr3 = hex64(), hex64(), hex64()
    pod_a = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice" % \
        uid_a.replace("-", "_")
    pod_b = "kubepods/besteffort/pod%s" % uid_b
    slurm_c = "system.slice/slurmstepd.scope/job_4242"
    slurm_d = "slurm/uid_1000/job_4343"
    job_e = "batch/jobE"

    # id, kind, job cgroup, job labels
    jobs = {
        "A": ("k8s/" + uid_a, "kubernetes", pod_a, {"pod_uid": uid_a, "qos_class": "burstable"}),
        "B": ("k8s/" + uid_b, "kubernetes", pod_b, {"pod_uid": uid_b, "qos_class": "besteffort"}),
        "C": ("slurm/4242", "slurm", slurm_c, {"slurm_job": "4242"}),
        "D": ("slurm/4343", "slurm", slurm_d, {"slurm_job": "4343", "slurm_uid": "1000"}),
        "E": ("cgroup" + cg.rel(job_e), "cgroup", job_e, {}),
    }
    # process tag -> (job, cgroup it runs in, its labels, W, R)
    procs = {
        "a1": ("A", pod_a + "/cri-containerd-%s.scope" % ctr1,
               {"container_id": ctr1, "runtime": "containerd"}, 1000003, 200001),
        "a2": ("A", pod_a + "/cri-containerd-%s.scope" % ctr2,
               {"container_id": ctr2, "runtime": "containerd"}, 300007, 50003),
        "b": ("B", pod_b + "/" + ctr3, {"container_id": ctr3}, 2000011, 700001),
        "c": ("C", slurm_c + "/step_0/user/task_0", {"slurm_step": "0", "slurm_task": "0"},
              1500013, 100019),
        "d": ("D", slurm_d + "/step_0/task_0", {"slurm_step": "0", "slurm_task": "0"},
              400021, 900023),
        "e": ("E", job_e + "/sub", {}, 123457, 65537),
    }
    for tag, (_, _, _, _, r) in procs.items():
        D.make_input(os.path.join(work, tag + ".in"), r + 4096)

    rules = ('  - kubernetes: {roots: ["%s/kubepods.slice", "%s/kubepods"]}\n'
             '  - slurm: {roots: ["%s/system.slice/slurmstepd.scope", "%s/slurm"]}\n'
             '  - cgroup: {paths: ["%s/batch/*"]}' % (P, P, P, P, P))
    d = D.Daemon(args.iolensd, rules, tag="jobs", iolens=args.iolens)

    # Before the daemon: pod A with container 1 and its (gated) process; Slurm job D's tree.
    running = {}

    def start(tag):
        job, sub, _, w, r = procs[tag]
        cg.mkdir(sub)
        p = D.run_in_cgroup(cg.abs(sub), [args.workload, "io", work, tag, str(w), str(r),
                                          "--gate-start", "--gate-mid"],
                            stdin=subprocess.PIPE)
        D.Cleanup.register("kill workload " + tag, lambda: p.poll() is None and p.kill())
        msg = D.read_json_line(ck, p, "workload " + tag)
        ck.eq("workload %s waiting" % tag, "waiting", msg.get("phase"))
        running[tag] = p
        return p

    start("a1")
    cg.mkdir(procs["d"][1])

    # Noise, all along.
    noise_dirs = {}
    noise_procs = []
    stopfile = os.path.join(work, "noise-stop")
    pidlog = os.path.join(work, "noise-pids")
    noise_cgroups = {"outside": None, "in-root": "kubepods.slice",
                     "excluded": "kubepods.slice/noise.slice"}
    for name, sub in noise_cgroups.items():
        nd = os.path.join(work, "noise-" + name)
        os.mkdir(nd)
        noise_dirs[name] = nd
        argv = [sys.executable, "-c", NOISE, nd, args.workload, pidlog, stopfile]
        if sub is None:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        else:
            cg.mkdir(sub)
            p = D.run_in_cgroup(cg.abs(sub), argv, stdout=None, stderr=None)
        D.Cleanup.register("kill noise " + name, lambda p=p: p.poll() is None and p.kill())
        noise_procs.append(p)
    D.Cleanup.register("stop noise", lambda: open(stopfile, "w").close())
    for name, nd in noise_dirs.items():
        if not D.wait_for("noise %s ready" % name,
                          lambda nd=nd: os.path.exists(os.path.join(nd, "ready")), 30):
            ck.fatal("noise %s did not start" % name)

    t0 = time.monotonic()
    d.start(ck)
    # After the start: the rest of the trees, nested children included.
    for tag in ("a2", "b", "c", "d"):
        start(tag)
    cg.mkdir(job_e)
    d.wait_live(ck, [jobs[j][0] for j in jobs if j != "E"] + [jobs["E"][0]])
    start("e")  # its own cgroup P/batch/jobE/sub is created now, below the live job

    # Every workload is in its cgroup (its shell wrote cgroup.procs): the daemon must count it.
    want_procs = {jobs[j][0]: sum(1 for t in procs if procs[t][0] == j) for j in jobs}

    def live_counts():
        return {j["id"]: j.get("live_processes")
                for j in d.request({"cmd": "jobs"})["result"]["jobs"]}

    def counted():
        got = live_counts()
        return got if all(got.get(k) == v for k, v in want_procs.items()) else None
    t1 = time.monotonic()
    if D.wait_for("every job to count its process(es)", counted, 10) is None:
        got = live_counts()
        ck.fail("live_processes per job: expected %s, got %s (10 s after the workloads joined "
                "their cgroups)" % (want_procs, got))
    else:
        D.log("every job counted its processes %.3f s after the last one joined" %
              (time.monotonic() - t1))

    # Open the gates: every workload writes, then reports and waits.
    written = {}
    for tag, p in running.items():
        p.stdin.write(b"g")
        p.stdin.flush()
    for tag, p in running.items():
        written[tag] = D.read_json_line(ck, p, "workload %s (written)" % tag)
        ck.eq("workload %s bytes written so far" % tag, procs[tag][3],
              written[tag].get("bytes_written"))

    # Live queries.
    r = d.cli("jobs", "--json")
    if ck.eq("iolens jobs --json exit code", 0, r.returncode):
        listed = {j["id"]: j for j in json.loads(r.stdout)["jobs"]}
        for j, (jid, kind, sub, _) in jobs.items():
            if not ck.check(jid in listed, "iolens jobs does not list live job %s (lists %s)" %
                            (jid, sorted(listed))):
                continue
            ck.eq("iolens jobs: %s state" % jid, "live", listed[jid].get("state"))
            ck.eq("iolens jobs: %s kind" % jid, kind, listed[jid].get("kind"))
            ck.eq("iolens jobs: %s cgroup" % jid, cg.rel(sub), listed[jid].get("cgroup"))
            nprocs = sum(1 for t in procs if procs[t][0] == j)
            ck.eq("iolens jobs: %s live processes" % jid, nprocs,
                  listed[jid].get("live_processes"))
    else:
        ck.fail("iolens jobs stderr: %s" % r.stderr)
    r = d.cli("jobs")
    ck.check(r.returncode == 0 and all(jobs[j][0] in r.stdout for j in jobs),
             "plain `iolens jobs` (rc %d) does not name every live job:\n%s%s" %
             (r.returncode, r.stdout, r.stderr))

    jid_a = jobs["A"][0]
    # what pod A's two workloads reported so far: (pid, path) -> bytes written
    want_a = {(written[t]["pid"], written[t]["path"]): written[t]["bytes_written"]
              for t in ("a1", "a2")}

    def live_a():
        r = d.cli("job", jid_a, "--json")
        if r.returncode != 0:
            return None
        doc = json.loads(r.stdout)
        got = {(f.get("pid"), f.get("path")): f["counters"].get("bytes_written")
               for f in doc.get("files", [])}
        return doc if all(got.get(k) == v for k, v in want_a.items()) else None
    live = D.wait_for("iolens job %s to show the bytes written so far" % jid_a, live_a, 10)
    last = None
    if live is None:
        r = d.cli("job", jid_a, "--json")
        try:
            last = json.loads(r.stdout)
            last = {"totals": last["job"].get("totals"),
                    "processes": [(p.get("pid"), p.get("comm")) for p in last["processes"]],
                    "files": [(f.get("pid"), f.get("path"), E.brief(f.get("counters")))
                              for f in last["files"]]}
        except (ValueError, KeyError):
            last = (r.returncode, r.stdout[:500], r.stderr[:500])
    if ck.check(live is not None, "iolens job %s --json never showed the bytes written so far "
                "%s; last answer: %s" % (jid_a, want_a, last)):
        ck.eq("live record schema", D.JOB_SCHEMA, live.get("schema"))
        ck.eq("live record job.state", "live", live["job"].get("state"))
        ck.eq("live record job.end_ns", None, live["job"].get("end_ns"))
        ck.eq("live record pids", sorted([running["a1"].pid, running["a2"].pid]),
              sorted(p["pid"] for p in live["processes"]))
    r = d.cli("job", "k8s/no-such-pod", "--json")
    ck.check(r.returncode != 0 and "no job" in r.stderr,
             "iolens job for an unknown id: rc %d stderr %r" % (r.returncode, r.stderr))

    # Let them finish; then remove each job's cgroups, deepest first.
    manifests = {}
    for tag, p in running.items():
        p.stdin.close()
        p.stdin = None  # communicate() must not flush it again
    for tag, p in running.items():
        manifests[tag] = D.finish_workload(ck, p, "workload " + tag)
        if manifests[tag]:
            ck.eq("workload %s pid (the shell's, kept through exec)" % tag, p.pid,
                  manifests[tag]["pid"])
    for j, (_, _, sub, _) in jobs.items():
        cg.remove_tree(sub)
    records = {}
    for j, (jid, _, _, _) in jobs.items():
        records[j] = d.wait_record(ck, jid)
    log_elapsed = time.monotonic() - t0

    # Stop the noise and collect its pids.
    open(stopfile, "w").close()
    for p in noise_procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    noise_pids = set(p.pid for p in noise_procs)
    with open(pidlog) as f:
        for line in f:
            noise_pids.update(int(x) for x in line.split())
    # the noise checks below prove something only if the noise did run, in all three places
    ck.check(len(noise_pids) >= 3 + 3 * 2, "only %d noise pids logged: the noise barely ran" %
             len(noise_pids))
    for name, nd in noise_dirs.items():
        ck.check(len(os.listdir(nd)) >= 8, "noise %s made only %s" % (name, os.listdir(nd)))
    D.log("noise: %d pids (3 loops and the job_workload runs they started)" % len(noise_pids))

    # Per job.
    for j, (jid, kind, sub, labels) in jobs.items():
        doc = records[j]
        if doc is None or not D.check_record_shape(ck, doc, jid):
            continue
        job = doc["job"]
        ck.eq("%s kind" % jid, kind, job.get("kind"))
        ck.eq("%s id" % jid, jid, job.get("id"))
        ck.eq("%s cgroup" % jid, cg.rel(sub), job.get("cgroup"))
        ck.eq("%s labels" % jid, labels, job.get("labels"))
        ck.eq("%s state" % jid, "closed", job.get("state"))
        ck.check(isinstance(job.get("end_ns"), int) and isinstance(job.get("start_ns"), int)
                 and 0 < job["start_ns"] <= job["end_ns"],
                 "%s start_ns %r / end_ns %r" % (jid, job.get("start_ns"), job.get("end_ns")))
        D.check_lost_zero(ck, doc, jid)
        tags = [t for t in procs if procs[t][0] == j]
        ms = [manifests[t] for t in tags if manifests.get(t)]
        D.check_manifest_files(ck, doc, ms, jid,
                               moves=[(running[t].pid, cg.abs(procs[t][1])) for t in tags])
        by_pid = {p.get("pid"): p for p in doc["processes"]}
        for t in tags:
            pid = running[t].pid
            if pid in by_pid:
                ck.eq("%s pid %d (%s) labels" % (jid, pid, t), procs[t][2] or None,
                      by_pid[pid].get("labels") or None)
                ck.eq("%s pid %d comm" % (jid, pid), "job_workload", by_pid[pid].get("comm"))
        ck.eq("%s job.processes" % jid, len(tags), job.get("processes"))

    # Noise: in no record at all.
    for path, doc in d.records().items():
        if doc is None:
            ck.fail("record %s is not valid JSON" % path)
            continue
        for p in doc.get("processes", []):
            ck.check(p.get("pid") not in noise_pids, "%s: noise pid %r (comm %r) in job %s" %
                     (os.path.basename(path), p.get("pid"), p.get("comm"), doc["job"].get("id")))
        for f in doc.get("files", []):
            for name, nd in noise_dirs.items():
                ck.check(not E.under(f.get("path"), nd), "%s: noise (%s) file %r in job %s" %
                         (os.path.basename(path), name, f.get("path"), doc["job"].get("id")))
            ck.check(f.get("pid") not in noise_pids, "%s: file record of noise pid %r" %
                     (os.path.basename(path), f.get("pid")))
    suffix = D.expected_record_suffix()  # record_compression of the config (zstd or none)
    for path in d.record_files():
        ck.check(path.endswith(suffix), "record %s is not named *%s" % (path, suffix))
    ck.eq("status output.compression", "none" if suffix == ".json" else "zstd",
          ((d.status() or {}).get("output") or {}).get("compression"))
    ids = sorted(doc["job"]["id"] for doc in d.records().values() if doc)
    ck.eq("job records written (one per job, none for the noise cgroups)",
          sorted(v[0] for v in jobs.values()), ids)
    st = d.status()
    D.log("status: jobs %s, unattributed_processes %s, lost %s" %
          (st.get("jobs"), st.get("unattributed_processes"), st.get("lost")))
    ck.check(st.get("unattributed_processes", 0) >= 1,
             "status.unattributed_processes is %r: the noise in the kubepods root was traced "
             "and should be counted" % st.get("unattributed_processes"))
    front_answers(ck, d)
    rc, secs = d.stop()
    ck.eq("iolensd exit code after SIGTERM", 0, rc)
    D.log("jobs phase %.1f s, stop %.2f s" % (log_elapsed, secs))
    ck.finish()


if __name__ == "__main__":
    main()
