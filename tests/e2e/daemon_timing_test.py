#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd with `timing: off` (docs/counters.md#timing): no sys_enter program, counts exact,
no time measured, and every output says so.

One daemon (`timing: off`, `syscall_hooks: always`, a process rule `comm: job_workload`) and one
job_workload run that writes a known number of bytes to its own file, reads it back and closes
it (its manifest, tallied from its calls' return values, is the ground truth).

Checks:
  - `iolens status`: timing "off"; the program `close_enter` attached, `sys_exit` attached and
    no `sys_enter` among the programs (not loaded);
  - the job's record: "timing": "off"; the workload's files and bytes exactly as its manifest
    says (opens, closes, reads, writes, bytes: close counted although no sys_enter runs); every
    time counter of its file records 0 and no latency bucket set;
  - /metrics: `iolens_timing_exact 0`, no `iolens_job_io_seconds_total` and no
    `iolens_job_request_duration_seconds` series, while `iolens_job_io_bytes_total` has the
    job's bytes;
  - `iolens capture` is refused with a message naming the timing, and a non-zero exit;
  - `iolens run --daemon --json` (the daemon's run root): the record says "timing": "off" and
    "collector" iolensd, with the workload's bytes and no read time;
  - a process moved into a job's cgroup (rule `cgroup`) by the test while it spins in user mode
    (no system call in flight) has its very next calls counted: its open, its 10 preads and its
    close of a file (timing off skips the exit of the call a task was marked inside only);
  - killed (SIGKILL: its pins stay) and restarted with `timing: exact`, iolensd does not resume
    programs attached for the other timing: status says restart.note "timing changed (off ->
    exact)", timing "exact", and sys_enter attached.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

WRITE, READ = 3 * 65536 + 100, 40000
PY = "/usr/bin/python3"
# Prints "spinning", computes for about a second with no system call, then opens argv[1],
# preads 100 bytes 10 times and closes it.
SPIN = r'''
import os, sys
print("spinning", flush=True)
n = 0
for i in range(20000000):
    n += i
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(10):
    os.pread(fd, 100, 0)
os.close(fd)
print("done")
'''

def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_timing")
    work = D.tempdir("timing-work")
    cg = D.Cgroups()
    cg.mkdir("")
    D.Cleanup.register("remove the run root", lambda: cg.remove_tree("runs"))
    rules = ('  - process: {comm: job_workload}\n'
             '  - cgroup: {paths: ["%s/jobs/*"]}' % cg.prefix)
    d = D.Daemon(args.iolensd, rules, tag="tm",
                 extra_config="timing: off\nsyscall_hooks: always\nruns: %s\n" % cg.rel("runs"),
                 iolens=args.iolens)
    d.start(ck)

    st = d.status()
    ck.eq("status timing", "off", st.get("timing"))
    progs = {p.get("name"): p for p in st.get("programs", [])}
    ck.check(progs.get("close_enter", {}).get("attached") is True,
             "close_enter is not attached: %r" % progs.get("close_enter"))
    ck.check(progs.get("sys_exit", {}).get("attached") is True,
             "sys_exit is not attached: %r" % progs.get("sys_exit"))
    ck.check("sys_enter" not in progs, "sys_enter is listed with timing off: %r" %
             progs.get("sys_enter"))

    D.make_input(os.path.join(work, "tm.in"), READ)
    p = subprocess.Popen([args.workload, "io", work, "tm", str(WRITE), str(READ)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    D.Cleanup.register("kill workload", lambda: p.poll() is None and p.kill())
    m = D.finish_workload(ck, p, "workload")
    if not m:
        ck.fatal("the workload did not run as expected")

    def holding():
        return [doc for doc in d.records().values()
                if doc and any(pr.get("pid") == p.pid for pr in doc.get("processes", []))]

    D.wait_or_fail(ck, "the job's record", holding, 15)
    docs = holding()
    ck.eq("records holding the workload", 1, len(docs))
    if docs:
        doc = docs[0]
        ck.eq("record timing", "off", doc.get("timing"))
        D.check_lost_zero(ck, doc, "job")
        D.check_manifest_files(ck, doc, [m], "job")
        mine = [f for f in doc.get("files", []) if E.under(f.get("path"), work)]
        ck.check(mine, "no file record under %s" % work)
        for f in mine:
            c = f.get("counters", {})
            where = "file %s" % f.get("path")
            ck.check(c.get("closes", 0) >= 1, "%s: closes %r (close_enter)" % (where,
                                                                           c.get("closes")))
            for k in E.SYSCALL_TIMES:
                ck.eq("%s %s" % (where, k), 0, c.get(k))
            lat = sum(v for k, v in c.items() if k.startswith("lat_") and not k.endswith("_ns"))
            ck.eq("%s latency buckets" % where, 0, lat)
        written = sum(f.get("counters", {}).get("bytes_written", 0) for f in mine)
        ck.eq("bytes written under %s" % work, m["totals"]["bytes_written"], written)

    ports = st.get("metrics", {}).get("ports") or []
    if ck.check(len(ports) == 1, "status.metrics.ports: %r" % st.get("metrics")):
        def scrape():
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % ports[0],
                                          timeout=10).read().decode()
            return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]

        # The page follows the daemon's state at its next publication (each drain).
        D.wait_for("the job's series on /metrics",
                   lambda: any(ln.startswith("iolens_job_io_bytes_total") for ln in scrape()),
                   15)
        lines = scrape()
        gauge = [ln for ln in lines if re.match(r"iolens_timing_exact(\{[^}]*\})? ", ln)]
        ck.check(len(gauge) == 1 and gauge[0].split()[-1] == "0",
                 "iolens_timing_exact: %r, expected one series of value 0" % gauge)
        for fam in ("iolens_job_io_seconds_total", "iolens_job_request_duration_seconds"):
            got = [ln for ln in lines if ln.startswith(fam)]
            ck.eq("series of %s with timing off" % fam, [], got[:3])
        ck.check(any(ln.startswith("iolens_job_io_bytes_total") for ln in lines),
                 "no iolens_job_io_bytes_total series (is the job on the page?):\n%s" %
                 "\n".join(ln for ln in lines if ln.startswith("iolens_job"))[:2000])

    out = os.path.join(work, "capture.iotrace")
    r = d.cli("capture", "--pid", str(os.getpid()), "--duration", "1s", "-o", out)
    ck.check(r.returncode != 0, "capture with timing off exited 0")
    ck.check("timing" in r.stderr, "capture's error does not name the timing: %r" % r.stderr)

    # iolens run counted by the daemon: its record is timed the daemon's way.
    D.make_input(os.path.join(work, "rn.in"), READ)
    rj = os.path.join(work, "run.json")
    r = subprocess.run([args.iolens, "run", "-q", "--daemon", "--socket", d.socket, "--json", rj,
                        "--", args.workload, "io", work, "rn", str(WRITE), str(READ)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    ck.eq("iolens run --daemon exit (stderr %r)" % r.stderr[-300:], 0, r.returncode)
    if r.returncode == 0:
        with open(rj) as f:
            run = json.load(f)
        ck.eq("run record collector", "iolensd", run.get("collector", {}).get("path"))
        ck.eq("run record timing", "off", run.get("timing"))
        rin = [x for x in run.get("files", []) if x.get("path") == os.path.join(work, "rn.in")]
        ck.eq("run: records of rn.in", 1, len(rin))
        if rin:
            ck.eq("run: rn.in bytes_read", READ, rin[0]["counters"].get("bytes_read"))
            ck.eq("run: rn.in read_time_ns", 0, rin[0]["counters"].get("read_time_ns"))

    # Moved while in user mode: nothing of the next calls may be skipped.
    spin_in = os.path.join(work, "spin.in")
    D.make_input(spin_in, 4096)
    cg.mkdir("jobs/spin")
    sp = subprocess.Popen([PY, "-c", SPIN, spin_in], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    D.Cleanup.register("kill the spinner", lambda: sp.poll() is None and sp.kill())
    ck.eq("spinner ready", "spinning", sp.stdout.readline().strip())
    time.sleep(0.2)  # well inside its ~1 s of pure computation
    with open(os.path.join(cg.abs("jobs/spin"), "cgroup.procs"), "w") as f:
        f.write(str(sp.pid))
    out, err = sp.communicate(timeout=60)
    ck.eq("spinner exit (stderr %r)" % err[-300:], 0, sp.returncode)
    ck.eq("spinner output", "done", out.strip())
    cg.rmdir("jobs/spin")

    def spin_records():
        return [doc for doc in d.records().values()
                if doc and any(pr.get("pid") == sp.pid for pr in doc.get("processes", []))]

    D.wait_or_fail(ck, "the spinner's job record", spin_records, 15)
    for doc in spin_records()[:1]:
        recs = [f for f in doc.get("files", []) if f.get("path") == spin_in]
        ck.eq("spinner: records of spin.in", 1, len(recs))
        for f in recs:
            c = f.get("counters", {})
            for k, v in (("opens", 1), ("reads", 10), ("bytes_read", 1000), ("closes", 1)):
                ck.eq("spinner spin.in %s" % k, v, c.get(k))
    # A restart with the other timing starts afresh: the pinned programs count the other way.
    d.kill9()
    with open(d.config) as f:
        text = f.read()
    with open(d.config, "w") as f:
        f.write(text.replace("timing: off\n", "timing: exact\n"))
    st2 = d.restart(ck)
    st2 = d.status()
    ck.eq("restart note", "timing changed (off -> exact)", st2.get("restart", {}).get("note"))
    ck.eq("status timing after the restart", "exact", st2.get("timing"))
    progs2 = {p.get("name"): p for p in st2.get("programs", [])}
    ck.check(progs2.get("sys_enter", {}).get("attached") is True,
             "sys_enter not attached after the restart: %r" % progs2.get("sys_enter"))
    ck.check("close_enter" not in progs2, "close_enter listed with timing exact")
    d.stop()
    ck.finish()


if __name__ == "__main__":
    main()
