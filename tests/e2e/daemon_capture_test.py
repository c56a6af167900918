#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `iolens capture` takes a window of a running job through iolensd, and only that.

One daemon with a cgroup rule P/cap/*. Two jobs, A (P/cap/a) and B (P/cap/b), each running
`trace_workload phases DIR 12`: a 4 KiB pwrite and pread every 2 ms, each logged with the
CLOCK_MONOTONIC time just before and after it (the ground truth, written to DIR/manifest.json
when it ends). While they run, four captures, one after the other:

  1. `--cgroup P/cap/a --duration 2s`, on a terminal (a pty): the progress line shows records,
     bytes, lost and time left. While it runs, a second capture (of B) is refused with one
     clear line, exit 1, and no file left behind; so is one by `nobody` (not permitted on the
     control socket).
  2. `--job A --duration 60s`, stopped by SIGINT (Ctrl-C) after about a second: exit 0, ended
     by "stopped", long before its 60 s.
  3. `--job A --max-size 24K`: ends by "size limit"; the calls left out are counted.
  4. `--pid B --duration 60s`: ends when job B ends (its process exits, its cgroup goes).

Each file is converted to JSON lines (`iolens convert --to jsonl`) and checked against the
workload's manifest: every record lies inside the capture window (header window_start_ns,
trailer window_end_ns); every call the workload made inside the window is in the file, in order,
with its op, descriptor, offset, size asked and result; no record of the other job's process;
produced = records in the file + lost (ring full) + left out (size limit), and lies between the
workload's calls inside the window and those touching it; the window lies within the test's own
CLOCK_MONOTONIC times of the capture client (and ends after the SIGINT, or the job's last call).
"""
import bisect
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

SECONDS = 12


def jsonl(ck, iolens, path, what):
    out = path + ".jsonl"
    p = subprocess.run([iolens, "convert", path, "--to", "jsonl", "-o", out],
                       capture_output=True, text=True, timeout=60)
    if not ck.check(p.returncode == 0, "%s: convert --to jsonl exit %d: %s" %
                    (what, p.returncode, p.stderr.strip())):
        return None
    with open(out, "rb") as f:
        return [json.loads(line) for line in f.read().decode("utf-8").splitlines()]


def check_window(ck, lines, man, other_pid, what, cover="window"):
    """The file against the manifest: all inside the window, and all of the window inside.
    `cover`: which calls must be in the file: "window" those inside the window, "to_end" every
    one from its start on (the job ended inside it), "prefix" those up to the last record (the
    size limit cut the rest)."""
    head = lines[0]
    ck.eq("%s: first line type" % what, "trace", head.get("type"))
    ws, we = head.get("window_start_ns"), head.get("window_end_ns")
    if not ck.check(isinstance(ws, int) and isinstance(we, int) and ws < we,
                    "%s: window [%r, %r]" % (what, ws, we)):
        return head
    ops = [x for x in lines if x["type"] == "op"]
    ck.check(ops, "%s: no op records" % what)
    ck.eq("%s: records of the other job's process" % what, 0,
          len([x for x in ops if x["pid"] == other_pid]))
    outside = [x for x in ops if x["ts_ns"] < ws or x["ts_ns"] + x["dur_ns"] > we]
    ck.eq("%s: records outside the window" % what, [], outside[:3])
    mine = sorted((x for x in ops if x["pid"] == man["pid"]), key=lambda x: x["ts_ns"])
    ck.eq("%s: records of other processes" % what, [], [x for x in ops if x["pid"] != man["pid"]
                                                         and x["pid"] != other_pid][:3])
    calls = man["ops"]
    # Which call each record is: the one whose [t0, t1] holds it (a thread's calls do not
    # overlap in time).
    t0s = [c["t0"] for c in calls]
    matched = []
    if cover == "to_end":
        # After its last logged call the workload closes its file and writes the manifest.
        tail = [g for g in mine if g["ts_ns"] > calls[-1]["t1"]]
        ck.check(len(tail) <= 8, "%s: %d records after the workload's last call" %
                 (what, len(tail)))
        mine = [g for g in mine if g["ts_ns"] <= calls[-1]["t1"]]
    for g in mine:
        i = bisect.bisect_right(t0s, g["ts_ns"]) - 1
        if i < 0 or not (calls[i]["t0"] <= g["ts_ns"] and
                         g["ts_ns"] + g["dur_ns"] <= calls[i]["t1"]):
            ck.fail("%s: record %r is no call of the workload" % (what, g))
            return head
        matched.append(i)
    ck.eq("%s: each call once, in order" % what, sorted(set(matched)), matched)
    inside = [i for i, c in enumerate(calls) if c["t0"] >= ws and c["t1"] <= we]
    if cover == "to_end":
        inside = [i for i, c in enumerate(calls) if c["t0"] >= ws]
    elif cover == "prefix" and matched:
        inside = [i for i in inside if i <= matched[-1]]
    missing = sorted(set(inside) - set(matched))
    ck.eq("%s: calls inside the window missing from the file (of %d)" % (what, len(inside)),
          [], [calls[i] for i in missing[:3]])
    ck.check(len(inside) >= 20, "%s: only %d calls inside the window: the check proves little"
             % (what, len(inside)))
    for g, i in zip(mine, matched):
        c = calls[i]
        where = "%s: call %d (%s at %d)" % (what, i, c["op"], c["offset"])
        if not (ck.eq(where + " op", c["op"], g["op"]) and ck.eq(where + " fd", c["fd"], g["fd"])
                and ck.eq(where + " offset", c["offset"], g["offset"])
                and ck.eq(where + " bytes asked", c["size"], g.get("requested"))
                and ck.eq(where + " result", c["ret"], g["ret"])
                and ck.eq(where + " path", man["path"], g.get("path"))):
            break
    trailer = head.get("losses") or {}
    produced = trailer.get("produced")
    ck.eq("%s: produced = records + ring full + size limit" % what, produced,
          len(ops) + trailer.get("ring_full", 0) + trailer.get("size_limit", 0))
    # produced against the workload's own log (docs/capture.md: it counts the calls of the
    # window, those that start and end inside it). The kernel times a call inside the
    # workload's [t0, t1] of it: every call logged inside the window is produced, and nothing
    # is produced but calls logged overlapping it (within its loop the workload makes no other
    # traced call), plus with "to_end" the few calls after its last logged one (its close,
    # the manifest's open, write and close, the unlink: the tail allowance above).
    if ck.check(isinstance(produced, int), "%s: trailer produced %r" % (what, produced)):
        low = len([c for c in calls if c["t0"] >= ws and c["t1"] <= we])
        high = len([c for c in calls if c["t1"] >= ws and c["t0"] <= we]) + \
            (8 if cover == "to_end" else 0)
        D.log("%s: produced %d; the workload logged %d calls inside the window, %d touching "
              "it" % (what, produced, low, high))
        ck.check(low <= produced <= high, "%s: produced %d, but the workload logged %d calls "
                 "inside the window and %d touching it" % (what, produced, low, high))
    return head


def check_span(ck, head, cap, what, after=None):
    """The window lies within the test's own CLOCK_MONOTONIC times of the capture: from before
    `iolens capture` started to after it exited (and, with `after`, ends after that time)."""
    ws, we = head.get("window_start_ns"), head.get("window_end_ns")
    if not (isinstance(ws, int) and isinstance(we, int)):
        return None  # check_window said so
    ck.check(cap.t_start_ns <= ws and we <= cap.t_end_ns,
             "%s: window [%d, %d] is not within the capture's run [%d, %d] (CLOCK_MONOTONIC)" %
             (what, ws, we, cap.t_start_ns, cap.t_end_ns))
    if after is not None:
        ck.check(we >= after, "%s: window ends at %d, before %d" % (what, we, after))
    D.log("%s: window %.3f s, %.3f s after the client started, %.3f s before it exited" %
          (what, (we - ws) / 1e9, (ws - cap.t_start_ns) / 1e9, (cap.t_end_ns - we) / 1e9))
    return (we - ws) / 1e9


class Capture:
    """`iolens capture ...` in the background; stderr on a pty when `tty`."""

    def __init__(self, d, args, out, tty=False):
        self.out = out
        argv = [d.iolens_path, "capture"] + list(args) + ["-o", out, "--socket", d.socket]
        # CLOCK_MONOTONIC (time.monotonic on Linux), the clock of the file's window
        self.t_start_ns = time.monotonic_ns()
        self.t_end_ns = None
        self.tty_text = b""
        if tty:
            master, slave = pty.openpty()
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=slave)
            os.close(slave)

            def pump():
                while True:
                    try:
                        b = os.read(master, 4096)
                    except OSError:
                        break
                    if not b:
                        break
                    self.tty_text += b
                os.close(master)
            self.reader = threading.Thread(target=pump, daemon=True)
            self.reader.start()
        else:
            self.reader = None
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
        D.Cleanup.register("kill capture", lambda: self.p.poll() is None and self.p.kill())

    def wait(self, ck, what, timeout):
        try:
            _, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            _, err = self.p.communicate()
            ck.fail("%s: iolens capture still running after %d s" % (what, timeout))
        self.t_end_ns = time.monotonic_ns()
        if self.reader:
            self.reader.join(5)
            err = self.tty_text
        return self.p.returncode, (err or b"").decode("utf-8", "replace")


def workloads_counted(d, job_ids):
    """Every job of job_ids lists a live process and its reads and writes in `jobs`."""
    a = d.request({"cmd": "jobs"})
    lines = {j.get("id"): j for j in (a.get("result") or {}).get("jobs", [])}
    for job_id in job_ids:
        j = lines.get(job_id) or {}
        t = j.get("totals") or {}
        if not (j.get("state") == "live" and j.get("live_processes", 0) >= 1 and
                t.get("writes", 0) > 0 and t.get("reads", 0) > 0):
            return None
    return True


def capture_produced(d):
    a = d.request({"cmd": "capture_status"})
    return (a.get("result") or {}).get("produced", 0) if a.get("ok") else 0


def capture_running(d):
    a = d.request({"cmd": "capture_status"})
    return a.get("ok") and a["result"].get("state") == "running"


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_capture")
    cg = D.Cgroups()
    work = D.tempdir("capture-work")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/cap/*"]}' % cg.prefix, tag="cap",
                 extra_config="syscall_hooks: always\n", iolens=args.iolens)
    d.start(ck)
    a_id, b_id = "cgroup" + cg.rel("cap/a"), "cgroup" + cg.rel("cap/b")
    cg.mkdir("cap/a")
    cg.mkdir("cap/b")
    d.wait_live(ck, [a_id, b_id])
    dirs = {}
    procs = {}
    for name in ("a", "b"):
        dirs[name] = os.path.join(work, name)
        os.mkdir(dirs[name])
        procs[name] = D.run_in_cgroup(cg.abs("cap/" + name),
                                      [args.workload, "phases", dirs[name], str(SECONDS)])
        D.Cleanup.register("kill " + name, lambda p=procs[name]: p.poll() is None and p.kill())
    pa, pb = procs["a"].pid, procs["b"].pid
    # Both workloads known to the daemon before the captures: each job lists its one process
    # live (capture 4's --pid needs pb in job B's live processes: job_head's live_processes is
    # that set's size, and pb is the only process of B) and counts its first pwrites and
    # preads (drained: the shell's move into the cgroup is not counted, so these are the
    # workload's own).
    D.wait_or_fail(ck, "both workloads live and counted in `jobs`",
                   lambda: workloads_counted(d, (a_id, b_id)), 30)

    # 1. A window by cgroup, with progress on a terminal; a second capture is refused.
    f1 = os.path.join(work, "c1.iotrace")
    c1 = Capture(d, ["--cgroup", cg.abs("cap/a"), "--duration", "2s"], f1, tty=True)
    D.wait_or_fail(ck, "capture 1 running", lambda: capture_running(d), 10)
    # capture_status is answered by the socket's front thread from what the loop published, with
    # its age (docs/control.md#answer-times); another capture's id is the loop's to answer.
    a = d.request({"cmd": "capture_status"})
    ck.check(a.get("ok") and "age_ms" in a["result"] and a["result"].get("state") == "running",
             "capture_status not answered by the front thread: %r" % a)
    cap1 = a["result"].get("id") if a.get("ok") else None
    a = d.request({"cmd": "capture_status", "id": cap1})
    ck.check(a.get("ok") and a["result"].get("id") == cap1 and "age_ms" in a["result"],
             "capture_status of capture %r by its id: %r" % (cap1, a))
    a = d.request({"cmd": "capture_status", "id": 999999})
    ck.check(not a.get("ok") and "no such capture" in a.get("error", ""),
             "capture_status of a capture that never was: %r" % a)
    f2 = os.path.join(work, "c2.iotrace")
    r2 = d.cli("capture", "--job", b_id, "-o", f2)
    ck.eq("a second capture's exit code (one at a time)", 1, r2.returncode)
    ck.check("running already" in r2.stderr and r2.stderr.count("\n") == 1,
             "the refusal is not one clear line: %r" % r2.stderr)
    ck.check(not os.path.exists(f2), "the refused capture left %s behind" % f2)
    rc, err = c1.wait(ck, "capture 1", 30)
    ck.eq("capture 1 exit code (%s)" % err.strip()[-300:], 0, rc)
    ck.check("capturing " + a_id in err and "records" in err and "lost" in err and
             "s left" in err, "no progress line on the terminal: %r" % err[-500:])
    ck.check("ended by duration" in err, "capture 1 not ended by its duration: %r" % err[-300:])

    # Only permitted users: nobody is refused by the socket's mode, and with the socket opened
    # to all, by the daemon's own peer check; no capture starts, no file is left.
    nobody_dir = D.tempdir("capture-nobody")
    os.chmod(nobody_dir, 0o777)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    for mode in (0o660, 0o666):
        os.chmod(d.socket, mode)
        fn = os.path.join(nobody_dir, "n%o.iotrace" % mode)
        r = d.cli("capture", "--job", a_id, "--duration", "1s", "-o", fn, user=nobody)
        ck.check(r.returncode == 1 and "permission denied" in r.stderr.lower(),
                 "capture as nobody (socket %o): exit %d, stderr %r" % (mode, r.returncode,
                                                                        r.stderr))
        ck.check(not os.path.exists(fn), "the refused capture left %s behind" % fn)
        ck.check(not capture_running(d), "a capture runs after nobody's request")
    os.chmod(d.socket, 0o660)

    # 2. Ctrl-C.
    f3 = os.path.join(work, "c3.iotrace")
    c3 = Capture(d, ["--job", a_id, "--duration", "60s"], f3)
    D.wait_or_fail(ck, "capture 2 running", lambda: capture_running(d), 10)
    # Some calls in its window before the stop (check_window wants at least 20): the status's
    # `produced` counts the window's calls as the trace ring is drained.
    D.wait_or_fail(ck, "capture 2 holding 100 calls", lambda: capture_produced(d) >= 100, 20)
    t_int = time.monotonic()
    t_int_ns = time.monotonic_ns()
    c3.p.send_signal(signal.SIGINT)
    rc, err = c3.wait(ck, "capture 2 (SIGINT)", 20)
    ck.eq("capture 2 exit code after SIGINT (%s)" % err.strip()[-300:], 0, rc)
    ck.check("ended by stopped" in err, "capture 2 not ended by the stop: %r" % err[-300:])
    D.log("capture 2 ended %.2f s after SIGINT" % (time.monotonic() - t_int))

    # 3. The size limit.
    f4 = os.path.join(work, "c4.iotrace")
    c4 = Capture(d, ["--job", a_id, "--max-size", "24K", "--duration", "60s"], f4)
    rc, err = c4.wait(ck, "capture 3 (size limit)", 30)
    ck.eq("capture 3 exit code (%s)" % err.strip()[-300:], 0, rc)
    ck.check("ended by size limit" in err, "capture 3 not ended by the size limit: %r" % err)
    ck.check(procs["a"].poll() is None, "job A ended before capture 3 reached its size limit: "
             "the test proves nothing")

    # 4. The job ends.
    f5 = os.path.join(work, "c5.iotrace")
    c5 = Capture(d, ["--pid", str(pb), "--duration", "60s"], f5)
    D.wait_or_fail(ck, "capture 4 running", lambda: capture_running(d), 10)
    for name, p in procs.items():
        try:
            p.wait(timeout=SECONDS + 30)
        except subprocess.TimeoutExpired:
            ck.fatal("workload %s did not end" % name)
        ck.eq("workload %s exit code (%s)" % (name, p.stderr.read().decode()), 0, p.returncode)
    cg.rmdir("cap/a")
    cg.rmdir("cap/b")
    rc, err = c5.wait(ck, "capture 4 (job end)", 30)
    ck.eq("capture 4 exit code (%s)" % err.strip()[-300:], 0, rc)
    ck.check("ended by job ended" in err, "capture 4 not ended by the job's end: %r" % err)

    mans = {}
    for name in ("a", "b"):
        with open(os.path.join(dirs[name], "manifest.json")) as f:
            mans[name] = json.load(f)
        ck.eq("manifest %s pid" % name, procs[name].pid, mans[name]["pid"])

    lines = jsonl(ck, args.iolens, f1, "capture 1")
    if lines:
        head = check_window(ck, lines, mans["a"], pb, "capture 1 (cgroup, 2 s)")
        span = check_span(ck, head, c1, "capture 1")
        ck.check(span is None or span >= 2.0, "capture 1's window is %.2f s, asked 2 s" % span)
        ck.eq("capture 1 job id", a_id, head.get("job_id"))
        ck.eq("capture 1 lost (ring full)", 0, head["losses"].get("ring_full"))
    lines = jsonl(ck, args.iolens, f3, "capture 2")
    if lines:
        head = check_window(ck, lines, mans["a"], pb, "capture 2 (SIGINT)")
        # ended by the SIGINT: after it, and before the client's exit
        check_span(ck, head, c3, "capture 2", after=t_int_ns)
    lines = jsonl(ck, args.iolens, f4, "capture 3")
    if lines:
        head = check_window(ck, lines, mans["a"], pb, "capture 3 (size limit)", cover="prefix")
        check_span(ck, head, c4, "capture 3")
        ck.check(head["losses"].get("size_limit", 0) > 0,
                 "capture 3: no calls counted as left out by the size limit: %r" % head["losses"])
    lines = jsonl(ck, args.iolens, f5, "capture 4")
    if lines:
        head = check_window(ck, lines, mans["b"], pa, "capture 4 (pid, to the job's end)",
                            cover="to_end")
        # ended by the job's end: after the workload's last logged call
        check_span(ck, head, c5, "capture 4", after=mans["b"]["ops"][-1]["t1"])
    ck.check(not [n for n in os.listdir(work) if n.endswith(".iotrace") and
                  os.path.getsize(os.path.join(work, n)) == 0], "an empty trace file")
    ck.finish()


if __name__ == "__main__":
    main()
