#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `iolens run` counted by a running iolensd (docs/run.md#through-iolensd).

One daemon with `runs: P/runs` (P = the test's private cgroup prefix) and `socket_group` set to
a test group. The workload is tests/workloads/job_workload `io` (static: it opens no file but its
own), which prints what it did: W bytes written to TAG.out, R bytes read of TAG.in.

1. Daemon path, as root (`--daemon`): exit 0; the JSON says `collector.path` "iolensd" with the
   job id, the summary says "counted by: iolensd"; the record has exactly the workload's process
   (pid, ppid = iolens) and its two files with exactly the manifest's opens, closes, reads,
   writes and bytes, and no other file; `lost` all zero; its --darshan log (read by
   darshan_test.py's independent reader) has one rank and the same counts. `strace -f -e trace=bpf` of the CLI
   shows no bpf() call at all (no program loaded, no map created). (The node's count of loaded
   programs is no proof: other tests load theirs meanwhile.) The run's cgroup is gone after the
   run, the daemon wrote no record of it (its client got the counts). Then 80 runs of `true` in
   a row (more than the 64 runs a uid may have open): all exit 0 through the daemon, no cgroup
   left, status.runs.ended counts them. Then a run that stats a file on a FUSE file system
   (fuse_stall.py) whose server answers that one lookup and holds every later one: once the stat
   returned, the daemon completes two drain rounds (its name event handled) and the server holds
   no LOOKUP (nobody walked the name again), status is answered within 5 s and the run exits 0
   (a daemon that walked the name again with realpath(3) hung in that lookup; seen failing
   before the fix).
2. The same command with `--local`: same counts; `collector.path` "local", `collector.daemon`
   "--local"; strace shows program loads.
3. As nobody with the socket's group (no root, no CAP_BPF): the daemon path counts it exactly
   too (a user without privileges gets `iolens run`).
4. Fallback: `--socket` of no daemon: the run is counted locally, exactly, with
   `collector.daemon` saying why, and iolens makes one process (strace), the command's; a socket
   file nobody listens on falls back the same way; `--daemon` with no socket fails (exit 1, one
   line) and does not run the command.
5. Refusal: a `run` request (raw, on the socket) for pid 1, which is not the peer's child, is
   answered `denied`; one without the pipe descriptor is `bad_request`; a `run_end` of an
   unknown run is `failed`; a `run_end` of a live run by another process than its client is
   `denied` and the run goes on. Nothing was created in the run root.
6. Cleanup: a run whose client is killed (SIGKILL) while its command waits: the daemon moves
   the command back to where it came from, removes the run's cgroup, writes the job's record to
   its output directory (nothing counted is lost) and counts it in status.runs.abandoned.
7. The daemon killed (SIGKILL) mid-run and restarted: the run's cgroup is an orphan of the new
   daemon, removed once the command ends, and its record (exact counts) written to the output
   directory; the client exits 1 saying it has no counts.
8. The daemon stopped (SIGTERM) mid-run: the run's cgroup is removed, its job written as a
   closed record with what was counted; the client exits 1; no run root is left.
"""
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import darshan_test as DT  # noqa: E402  (its independent Darshan log reader)
import e2e_common as E  # noqa: E402
import fuse_stall  # noqa: E402

W, R = 300000, 200000
LOOP = 80


def file_rows(doc, pid):
    return {f["path"]: f["counters"] for f in doc.get("files", []) if f.get("pid") == pid}


def check_counts(ck, what, doc, manifest, ppid=None):
    """The record has exactly the manifest's process and files."""
    pid = manifest["pid"]
    procs = doc.get("processes", [])
    ck.eq("%s: process pids" % what, [pid], [p.get("pid") for p in procs])
    if ppid is not None and procs:
        ck.eq("%s: ppid of the command" % what, ppid, procs[0].get("ppid"))
    rows = file_rows(doc, pid)
    ck.eq("%s: files" % what, sorted(f["path"] for f in manifest["files"]), sorted(rows))
    for f in manifest["files"]:
        got = rows.get(f["path"], {})
        for k in ("opens", "closes", "reads", "writes", "bytes_read", "bytes_written"):
            ck.eq("%s: %s %s" % (what, os.path.basename(f["path"]), k), f[k], got.get(k))
    E.check_lost_zero(ck, doc)
    ck.eq("%s: exit_code" % what, 0, doc.get("exit_code"))


def run_cli(ck, d, argv, user=None, strace_out=None, socket=None, timeout=60):
    """iolens run ARGV (as `user`), stdout a pipe (the manifest); returns (rc, stdout, stderr)."""
    pre = list(user or [])
    if strace_out:
        pre += ["strace", "-f", "-qq", "-e", "trace=bpf", "-o", strace_out]
    argv = pre + [d.iolens_path, "run", "--socket", socket or d.socket] + argv
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check_fallback(ck, d, data, what, sock, why, workload):
    """A run of `workload` (-- ARGV) given `sock`, where no daemon answers: counted on the local
    path, exactly, with `collector.daemon` saying it could not connect and `why`."""
    path = os.path.join(data, what.replace(" ", "_") + ".json")
    rc, out, err = run_cli(ck, d, ["--json", path] + workload, socket=sock)
    ck.eq("%s: exit (stderr %r)" % (what, err[-500:]), 0, rc)
    m, doc = manifest_of(ck, what, out), load(ck, what, path)
    if m and doc:
        col = doc.get("collector", {})
        ck.eq("%s: collector.path" % what, "local", col.get("path"))
        said = col.get("daemon", "")
        ck.check("cannot connect" in said and why in said,
                 "%s: collector.daemon %r does not say why (%s)" % (what, said, why))
        check_counts(ck, what, doc, m)


def manifest_of(ck, what, out):
    lines = [x for x in out.splitlines() if x.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        ck.fail("%s: no manifest on stdout: %r" % (what, out[-300:]))
        return None


def load(ck, what, path):
    try:
        return E.load_json_strict(path)
    except (OSError, ValueError) as e:
        ck.fail("%s: no JSON record %s: %s" % (what, path, e))
        return None


def strace_calls(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    return {c: text.count(c) for c in ("BPF_PROG_LOAD", "BPF_MAP_CREATE", "bpf(")}


def run_children(cg_abs):
    try:
        return sorted(n for n in os.listdir(cg_abs) if n.startswith("run-"))
    except FileNotFoundError:
        return []


def drain_count(d):
    """status drain.count from an answer the loop built after this request came (Daemon.status
    asks again while the front thread answers with an older one): rounds done by now."""
    return ((d.status() or {}).get("drain") or {}).get("count")


def fuse_name(ck, d):
    """A run stats a file on the user's own FUSE file system whose server answers that one
    lookup and never another: the daemon must not walk the name again (realpath in its loop
    hung it: status went unanswered until the server went away). Skipped without FUSE."""
    if not os.path.exists("/dev/fuse"):
        D.log("SKIP the FUSE part: no /dev/fuse")
        return
    mnt = D.tempdir("run-fuse")
    try:
        fs = fuse_stall.StallFs(mnt, lookups=1)
    except (OSError, subprocess.CalledProcessError) as e:
        D.log("SKIP the FUSE part: cannot mount a FUSE file system: %s" % e)
        return
    D.Cleanup.register("stop the FUSE server", fs.stop)
    # The command says when its stat has returned, then waits for EOF on stdin: the run stays
    # live while the daemon's drains handle the stat's name event.
    cmd = [d.iolens_path, "run", "-q", "--daemon", "--socket", d.socket, "--",
           "/usr/bin/python3", "-c",
           "import os, sys; os.stat(sys.argv[1]); print('statted', flush=True); "
           "sys.stdin.read()", fs.path()]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.PIPE)
    D.Cleanup.register("end the FUSE run", lambda: p.poll() is None and p.kill())
    held_lookups = lambda: [op for op in fs.held if op == fuse_stall.LOOKUP]  # noqa: E731
    line = D.wait_or_fail(ck, "the run's stat of the FUSE file", lambda: select_line(p), 30)
    if line:
        ck.eq("the run's command after its stat", "statted", line.strip())
        # The stat's name event is in the ring now: handled within the two drain rounds that
        # begin after it (docs/control.md, status `drain`). A loop hung walking the name again
        # completes no round.
        base = drain_count(d)
        if ck.check(isinstance(base, int), "status has no drain.count: %r" % base):
            D.wait_or_fail(ck, "two drain rounds after the run's FUSE stat (drain.count >= %d)"
                           % (base + 2), lambda: (drain_count(d) or 0) >= base + 2, 20)
        # Ground truth from the FUSE server: the stat's one LOOKUP was answered, and nobody
        # asked for the name again (a walk of it would be a LOOKUP held forever).
        ck.eq("FUSE LOOKUPs of the file answered (the run's stat)", 0, fs.lookups)
        ck.eq("FUSE LOOKUPs of the file held after the daemon handled the stat's name "
              "(a walk of the name again)", [], held_lookups())
        D.log("FUSE stat: drain.count %d -> %r" % (base, drain_count(d)))
    try:
        a = d.request({"cmd": "status"}, timeout=5)
    except (OSError, ValueError) as e:
        a = {"error": "no answer within 5 s: %s" % e}
    ck.check(a.get("ok"), "status while a run's FUSE name cannot be walked again: %r" % a)
    try:
        _, err = p.communicate(input="", timeout=30)
        ck.eq("run with a FUSE stat: exit (stderr %r)" % err[-300:], 0, p.returncode)
    except subprocess.TimeoutExpired:
        ck.fail("run with a FUSE stat: no exit within 30 s")
    ck.eq("FUSE LOOKUPs of the file held after the run ended", [], held_lookups())
    fs.stop()
    p.wait()


def select_line(p):
    """One line of p's stdout if one is ready within 0.2 s, else None (p still running)."""
    if select.select([p.stdout], [], [], 0.2)[0]:
        return p.stdout.readline() or None
    return None


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_run")
    cg = D.Cgroups()
    cg.mkdir("")
    runs_rel = cg.rel("runs")
    runs_abs = cg.abs("runs")
    # The daemon makes the run root; the tree's cleanup must find it (and any run left).
    D.Cleanup.register("remove " + runs_abs, lambda: cg.remove_tree("runs"))

    group, gid = D.make_group(ck, "run")

    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/jobs/*"]}' % cg.prefix,
                 extra_config="runs: %s\nsocket_group: %s\n" % (runs_rel, group), tag="run",
                 iolens=args.iolens)
    st = d.start(ck)
    ck.eq("status.runs.root", runs_rel, st.get("runs", {}).get("root"))
    ck.check(os.path.isdir(runs_abs), "run root %s not created" % runs_abs)

    data = D.tempdir("run-data")
    os.chmod(data, 0o777)  # nobody writes there too
    for tag in ("a", "b", "c", "f", "k", "r", "s"):
        with open(os.path.join(data, tag + ".in"), "wb") as f:
            f.write(os.urandom(R))
    os.chmod(data, 0o755)
    nobody_dir = os.path.join(data, "nobody")
    os.mkdir(nobody_dir)
    with open(os.path.join(nobody_dir, "c.in"), "wb") as f:
        f.write(os.urandom(R))
    os.chown(nobody_dir, 65534, gid)
    os.chown(os.path.join(nobody_dir, "c.in"), 65534, gid)

    def wl(dirpath, tag, *extra):
        return ["--", args.workload, "io", dirpath, tag, str(W), str(R)] + list(extra)

    # 1. The daemon path, as root.
    j1 = os.path.join(data, "a.json")
    dl1 = os.path.join(data, "a.darshan")
    trace1 = os.path.join(data, "a.strace")
    rc, out, err = run_cli(ck, d, ["--daemon", "--json", j1, "--darshan", dl1] + wl(data, "a"),
                           strace_out=trace1)
    ck.eq("daemon path: exit (stderr %r)" % err[-500:], 0, rc)
    m1 = manifest_of(ck, "daemon path", out)
    doc1 = load(ck, "daemon path", j1)
    if m1 and doc1:
        col = doc1.get("collector", {})
        ck.eq("daemon path: collector.path", "iolensd", col.get("path"))
        ck.check(str(col.get("job", "")).startswith("cgroup/" + runs_rel.lstrip("/") + "/run-"),
                 "daemon path: collector.job %r is not a job of the run root" % col.get("job"))
        ck.check("counted by: iolensd" in err, "daemon path: summary has no 'counted by: iolensd'")
        check_counts(ck, "daemon path", doc1, m1)
        # The Darshan log, read by the independent reader: one rank, the manifest's counts.
        with open(dl1, "rb") as f:
            log = DT.parse(ck, f.read())
        ck.eq("daemon path: Darshan nprocs", 1, log["nprocs"])
        by_path = {log["names"].get(r["id"]): r["c"] for r in log["recs"]}
        for f in m1["files"]:
            c = by_path.get(f["path"], {})
            for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
                ck.eq("daemon path: Darshan %s POSIX_%s" % (os.path.basename(f["path"]),
                                                           k.upper()),
                      f[k], c.get(k.upper()))
    calls = strace_calls(trace1)
    if ck.check(calls is not None, "no strace output %s" % trace1):
        ck.eq("daemon path: bpf() calls of iolens (strace)", 0, calls["bpf("])
    ck.eq("daemon path: run cgroups left", [], run_children(runs_abs))
    # Runs in a loop, more than the 64 a uid may have open at once and than the server's 64
    # held descriptors: each run's resources go with it.
    fails = []
    for i in range(LOOP):
        rc, _, err = run_cli(ck, d, ["-q", "--daemon", "--", "true"])
        if rc != 0:
            fails.append((i, rc, err[-200:]))
    ck.eq("%d runs of true in a row through the daemon: failures" % LOOP, [], fails[:3])
    ck.eq("run cgroups left after the loop", [], run_children(runs_abs))
    st = d.status()
    ck.eq("status.runs.ended after the daemon-path runs", 1 + LOOP, st["runs"]["ended"])
    ck.eq("status.runs.live", 0, st["runs"]["live"])
    ck.eq("records written by the daemon for runs its clients ended", [], d.record_files())

    fuse_name(ck, d)

    # 2. The same with --local: the same counts, another collector.
    j2 = os.path.join(data, "b.json")
    trace2 = os.path.join(data, "b.strace")
    rc, out, err = run_cli(ck, d, ["--local", "--json", j2] + wl(data, "b"), strace_out=trace2)
    ck.eq("--local: exit (stderr %r)" % err[-500:], 0, rc)
    m2, doc2 = manifest_of(ck, "--local", out), load(ck, "--local", j2)
    if m2 and doc2:
        col = dict(doc2.get("collector", {}))
        records = col.pop("file_records", {})
        ck.eq("--local: collector", {"path": "local", "daemon": "--local"}, col)
        # the local path's kernel records: the default preallocated tier, none spilled
        ck.eq("--local: collector.file_records.preallocated", 8192, records.get("preallocated"))
        ck.eq("--local: collector.file_records.spilled", 0, records.get("spilled"))
        # Each (process, file) row of the run is a kernel record made at least once (made
        # counts a record again when it is taken out of the kernel and made again: not exact).
        # Seen: made 2 for the workload's 2 files.
        ck.check(records.get("made", 0) >= len(m2["files"]),
                 "--local: collector.file_records.made %r, fewer than the workload's %d files" %
                 (records.get("made"), len(m2["files"])))
        check_counts(ck, "--local", doc2, m2)
    calls = strace_calls(trace2)
    if calls is not None:
        ck.check(calls["BPF_PROG_LOAD"] > 0, "--local: strace shows no BPF_PROG_LOAD")

    # 3. As nobody, with the socket's group: no privilege needed.
    j3 = os.path.join(nobody_dir, "c.json")
    nobody = ["setpriv", "--reuid=65534", "--regid=%d" % gid, "--clear-groups"]
    rc, out, err = run_cli(ck, d, ["--daemon", "--json", j3] + wl(nobody_dir, "c"), user=nobody)
    ck.eq("as nobody: exit (stderr %r)" % err[-500:], 0, rc)
    m3, doc3 = manifest_of(ck, "as nobody", out), load(ck, "as nobody", j3)
    if m3 and doc3:
        ck.eq("as nobody: collector.path", "iolensd", doc3.get("collector", {}).get("path"))
        check_counts(ck, "as nobody", doc3, m3)

    # 4. Fallback: no daemon at that socket.
    nosock = os.path.join(data, "no.sock")
    check_fallback(ck, d, data, "fallback", nosock, "No such file", wl(data, "f"))
    # Without a socket file the command's process is made once, for the local path: strace's
    # count of the processes iolens made (no spare one made and killed for the daemon path).
    forks = os.path.join(data, "forks.strace")
    # No CO-RE cache: bpftool, run to make it, would be a process of iolens' too.
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=clone,clone3,fork,vfork", "-o", forks,
                        d.iolens_path, "run", "-q", "--socket", nosock, "--", "/bin/true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60,
                       env=dict(os.environ, IOLENS_CACHE_DIR=""))
    ck.eq("fallback under strace: exit (stderr %r)" % p.stderr[-300:], 0, p.returncode)
    with open(forks) as f:
        made = [x for x in f if re.search(r"\b(clone3?|v?fork)\(", x) and "CLONE_THREAD" not in x]
    ck.eq("fallback: processes iolens made (%r)" % made, 1, len(made))
    # A socket file nobody listens on (a daemon that died): connect is refused, and the
    # command runs on the local path as well, counted exactly.
    stale = os.path.join(data, "stale.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(stale)
    srv.close()
    check_fallback(ck, d, data, "stale socket", stale, "refused", wl(data, "f"))
    rc, out, err = run_cli(ck, d, ["--daemon"] + wl(data, "g"), socket=nosock)
    ck.eq("--daemon without a daemon: exit", 1, rc)
    ck.check("--daemon:" in err and "cannot connect" in err,
             "--daemon without a daemon: stderr %r" % err)
    ck.check(not os.path.exists(os.path.join(data, "g.out")),
             "--daemon without a daemon ran the command")
    j5 = os.path.join(data, "t.json")
    rc, out, err = run_cli(ck, d, ["--trace", os.path.join(data, "t.trace"), "--json", j5] +
                           wl(data, "f"))
    ck.eq("--trace: exit (stderr %r)" % err[-300:], 0, rc)
    doc5 = load(ck, "--trace", j5)
    if doc5:
        col = dict(doc5.get("collector", {}))
        col.pop("file_records", None)
        ck.eq("--trace: collector", {"path": "local",
                                     "daemon": "--trace needs iolens's own programs"}, col)

    # 5. Refusals, on the raw socket.
    rd, wr = os.pipe()
    try:
        a = D.control(d.socket, {"cmd": "run", "pid": 1}, fds=[rd])
        ck.eq("run of pid 1 (not the peer's child): code", "denied", a.get("code"))
        ck.check("not a child" in a.get("error", ""), "run of pid 1: error %r" % a.get("error"))
        a = d.request({"cmd": "run", "pid": os.getpid()})
        ck.eq("run without the pipe: code", "bad_request", a.get("code"))
        a = D.control(d.socket, {"cmd": "run_end", "run": 999999}, fds=[rd])
        ck.eq("run_end of no run: code", "failed", a.get("code"))
    finally:
        os.close(rd)
        os.close(wr)
    ck.eq("run cgroups after refusals", [], run_children(runs_abs))
    ck.check(d.status()["runs"]["refused"] >= 1, "status.runs.refused did not count pid 1")

    # 6. The client killed mid-run: the daemon cleans up and keeps the counts.
    p = subprocess.Popen([d.iolens_path, "run", "--daemon", "--socket", d.socket, "-q"] +
                         wl(data, "k", "--gate-mid"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = D.read_json_line(ck, p, "killed client's workload gate")
    kids = D.wait_for("the killed client's run cgroup", lambda: run_children(runs_abs), 10)
    wl_pid = line.get("pid") if line else None
    if line and kids:
        # Another process (this test, root) may not end it, nor take its counts.
        run_id = int(kids[0].rsplit("-", 1)[1])
        mfd = os.memfd_create("t")
        try:
            a = D.control(d.socket, {"cmd": "run_end", "run": run_id}, fds=[mfd])
        finally:
            os.close(mfd)
        ck.eq("run_end of another process's run: code (%r)" % a.get("error"), "denied",
              a.get("code"))
        ck.eq("the run after another's run_end", kids, run_children(runs_abs))
        p.send_signal(signal.SIGKILL)
        p.wait()
        ck.check(D.wait_for("the run cgroup to go", lambda: not run_children(runs_abs), 10),
                 "run cgroup %s left after its client was killed" % kids)
        with open("/proc/%d/cgroup" % wl_pid) as f:
            now_in = f.read()
        with open("/proc/self/cgroup") as f:
            mine = f.read()
        ck.eq("the command's cgroup after its client died (back where it came from)", mine,
              now_in)
        rec = D.wait_for("the killed run's record", lambda: d.records(), 15)
        ck.check(rec, "no job record written for the killed client's run")
        if rec:
            doc = list(rec.values())[0]
            rows = file_rows(doc, wl_pid)
            got = rows.get(os.path.join(data, "k.out"), {}).get("bytes_written")
            ck.eq("killed client's run: bytes written before the kill, in the daemon's record",
                  W, got)
        ck.eq("status.runs.abandoned", 1, d.status()["runs"]["abandoned"])
    else:
        ck.fail("the killed-client case did not start (gate %r, cgroups %r); log:\n%s" %
                (line, kids, d.log()[-2000:]))
    p.stdin.close()  # the workload goes on (untraced now) and ends
    p.stdout.read()

    # 7. The daemon killed (SIGKILL) during a run and started again: the run's cgroup stays a
    # job of the new daemon (the pinned programs counted on), which removes it once the command
    # is gone and writes its record with exact counts; the client says it has no counts.
    before = set(d.record_files())
    p = subprocess.Popen([d.iolens_path, "run", "--daemon", "--socket", d.socket, "-q"] +
                         wl(data, "r", "--gate-mid"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = D.read_json_line(ck, p, "restart case's workload gate")
    kids = run_children(runs_abs)
    d.kill9()
    d.restart(ck)
    ck.eq("run cgroups kept by the restarted daemon", kids, run_children(runs_abs))
    ck.eq("status.runs.orphans after the restart", 1, d.status()["runs"]["orphans"])
    p.stdin.close()
    out, err = p.stdout.read(), p.stderr.read()
    p.wait(timeout=60)
    m7 = manifest_of(ck, "restart case", out.decode())
    ck.eq("restart case: iolens exit (no counts from the new daemon)", 1, p.returncode)
    ck.check(b"could not be had" in err, "restart case: stderr %r" % err[-300:])
    new = D.wait_for("the restart case's record",
                     lambda: set(d.record_files()) - before, 15)
    ck.eq("run cgroups after the orphan's command ended", [], run_children(runs_abs))
    if ck.check(new, "no record of the run after the daemon's restart") and m7 and line:
        doc = D.load_record(sorted(new)[0])
        rows = file_rows(doc or {}, m7["pid"])
        for f in m7["files"]:
            got = rows.get(f["path"], {})
            for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
                ck.eq("restart case: %s %s" % (os.path.basename(f["path"]), k), f[k],
                      got.get(k))
    ck.eq("status.runs.orphans at the end", 0, d.status()["runs"]["orphans"])

    # 8. The daemon stopped (SIGTERM) during a run: the run's cgroup goes with it, its job is
    # written as a closed record with what was counted (the write before the gate); the client
    # exits 1 saying it has no counts.
    before = set(d.record_files())
    p = subprocess.Popen([d.iolens_path, "run", "--daemon", "--socket", d.socket, "-q"] +
                         wl(data, "s", "--gate-mid"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = D.read_json_line(ck, p, "stop case's workload gate")
    rc, _ = d.stop()
    ck.eq("iolensd exit", 0, rc)
    p.stdin.close()
    out, err = p.stdout.read(), p.stderr.read()
    p.wait(timeout=60)
    ck.eq("stop case: iolens exit", 1, p.returncode)
    ck.check(b"could not be had" in err, "stop case: stderr %r" % err[-300:])
    new = set(d.record_files()) - before
    if ck.check(new, "no record of the run the stop ended") and line:
        doc = D.load_record(sorted(new)[0]) or {}
        ck.eq("stop case: record state", "closed", doc.get("job", {}).get("state"))
        rows = file_rows(doc, line.get("pid"))
        ck.eq("stop case: bytes written before the stop",
              W, rows.get(os.path.join(data, "s.out"), {}).get("bytes_written"))
    ck.check(not os.path.exists(runs_abs), "run root %s left after the stop" % runs_abs)
    ck.finish()


if __name__ == "__main__":
    main()
