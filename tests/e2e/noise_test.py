#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: only the traced tree is recorded, whatever runs beside it.

A noise driver is started OUTSIDE iolens: a python loop doing continuous file I/O (write, read,
stat, rename, unlink) in a noise directory, which also runs io_workload over and over in fresh
subdirectories of it (same binary and comm as the traced command: iolens must not select by
name). While it runs, `iolens run -- io_workload TRACED_DIR -` is traced. Checks:
  - no file record under the noise directory, no process record for any noise pid (the driver,
    and each noise io_workload with its two children, as their manifests report);
  - every process in the JSON descends from the traced root (ppid chain), the root's ppid is
    iolens;
  - the traced io_workload's records are still exact (the same checks as c_workload_test.py).
"""
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

NOISE = r'''
import json, os, subprocess, sys, time
noise, wl, pidlog, stop = sys.argv[1:5]
def log(*pids):
    with open(pidlog, "a") as f:
        f.write(" ".join(str(p) for p in pids) + "\n")
log(os.getpid())
i = 0
blob = os.urandom(65536)
while not os.path.exists(stop):
    # plain file I/O
    for k in range(20):
        p = os.path.join(noise, "n%d-%d" % (i, k))
        with open(p, "wb") as f:
            for _ in range(4):
                f.write(blob)
        with open(p, "rb") as f:
            while f.read(16384):
                pass
        os.stat(p)
        os.rename(p, p + ".r")
        os.unlink(p + ".r")
    # the traced workload's binary, untraced
    d = os.path.join(noise, "run%d" % i)
    os.mkdir(d)
    r = subprocess.run([wl, d, "-"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if r.returncode == 0:
        m = json.loads(r.stdout)
        log(m["parent"], *m["children"])
    else:
        log(-r.returncode)
    subprocess.run(["rm", "-rf", d])
    i += 1
    if i == 1:
        open(os.path.join(os.path.dirname(pidlog), "noise-ready"), "w").close()
'''


def main():
    args = E.parse_args(workload=True)
    E.require_root()
    ck = E.Checker("noise")
    tmp = E.disk_tempdir("noise-test")
    noise = os.path.join(tmp, "noise")
    traced = os.path.join(tmp, "traced")
    os.mkdir(noise)
    os.mkdir(traced)
    pidlog = os.path.join(tmp, "noise-pids")
    stop = os.path.join(tmp, "noise-stop")
    ready = os.path.join(tmp, "noise-ready")
    out_json = os.path.join(tmp, "run.json")

    drv = subprocess.Popen([sys.executable, "-c", NOISE, noise, args.workload, pidlog, stop],
                           stdin=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while not os.path.exists(ready):
            if drv.poll() is not None:
                ck.fatal("the noise driver exited early with %d" % drv.returncode)
            if time.monotonic() - t0 > 60:
                ck.fatal("the noise driver did not complete an iteration in 60 s")
            time.sleep(0.1)
        run = E.run_iolens(args.iolens, [args.workload, traced, "-"], json_path=out_json,
                           timeout=150)
        E.log("traced run: rc %d, %.1f s, noise still running: %s" %
              (run.rc, run.elapsed, drv.poll() is None))
        ck.check(drv.poll() is None, "the noise driver stopped before the traced run ended")
    finally:
        open(stop, "w").close()
        try:
            drv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            drv.kill()
            drv.wait()

    noise_pids = set()
    with open(pidlog) as f:
        for line in f:
            noise_pids.update(int(x) for x in line.split())
    if any(p < 0 for p in noise_pids):
        ck.fail("a noise io_workload failed (exit %s)" % sorted(-p for p in noise_pids if p < 0))
    noise_pids = {p for p in noise_pids if p > 0}
    E.log("noise pids: %d (driver %d)" % (len(noise_pids), drv.pid))

    if run.rc != 0:
        ck.fatal("iolens run exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    manifest = E.parse_manifest(ck, run.out)
    doc = E.load_run(ck, run)
    ck.eq("top-level exit_code", 0, doc.get("exit_code"))
    E.check_lost_zero(ck, doc)
    procs = E.procs_by_pid(ck, doc)
    for pid, p in sorted(procs.items()):
        ck.check(pid not in noise_pids, "process record for noise pid %d (comm %r)" %
                 (pid, p.get("comm")))
    for f in doc["files"]:
        ck.check(not E.under(f.get("path"), noise),
                 "file record under the noise dir: pid %r path %r" % (f.get("pid"), f.get("path")))
        ck.check(f.get("pid") not in noise_pids,
                 "file record of noise pid %r: %r" % (f.get("pid"), f.get("path")))
    E.ancestry_ok(ck, procs, manifest["parent"])
    E.check_io_manifest(ck, doc, manifest, iolens_pid=run.pid)
    ck.finish()


if __name__ == "__main__":
    main()
