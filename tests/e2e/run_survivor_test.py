#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a process that outlives the command is reported with what it did, live.

A drain runs each time a process exits and moves the exited processes' records out of the
kernel; the live ones stay there and are read again at the end (agent/cli/run_command.cpp).
The command here is a shell that
  1. starts a background Python that writes N bytes to FILE in one write(), keeps it open,
     prints its pid and sleeps for 6 s (it outlives the command);
  2. runs /bin/true (a process exits: a drain runs while the Python is live, after its write);
  3. sleeps 1.5 s (past the drain interval) and exits.
Checks, against what the test itself made the Python do: the Python's record of FILE has
writes = 1, bytes_written = N, opens = 1, closes = 0; its process record has no exit code (it
was alive); /bin/true's process record exited 0.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

N = 12345
PY = "/usr/bin/python3"
SURVIVOR = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * int(sys.argv[2]))
print(os.getpid(), flush=True)
time.sleep(6)
"""


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("run_survivor")
    tmp = E.disk_tempdir("survivor")
    target = os.path.join(tmp, "survivor.dat")
    pidfile = os.path.join(tmp, "survivor.pid")
    out_json = os.path.join(tmp, "run.json")
    script = ("%s -c '%s' %s %d > %s 2>&1 < /dev/null & sleep 0.7; /bin/true; sleep 1.5"
              % (PY, SURVIVOR, target, N, pidfile))
    run = E.run_iolens(args.iolens, ["/bin/sh", "-c", script], json_path=out_json, timeout=60)
    if run.rc != 0:
        ck.fatal("iolens run exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    doc = E.load_run(ck, run)
    with open(pidfile) as f:
        survivor = int(f.read().split()[0])
    ck.check(os.path.exists("/proc/%d" % survivor),
             "the survivor %d was gone before iolens reported: the test proves nothing" % survivor)

    procs = E.procs_by_pid(ck, doc)
    p = procs.get(survivor)
    if ck.check(p is not None, "no process record of the survivor %d" % survivor):
        ck.eq("survivor exit_code (alive at the end)", None, p.get("exit_code"))
    trues = [q for q in doc["processes"] if q.get("comm") == "true"]
    ck.check(len(trues) == 1 and trues[0].get("exit_code") == 0,
             "/bin/true: expected one process record that exited 0, got %s" % trues)

    recs = [f for f in doc["files"] if f.get("path") == target]
    if ck.check(len(recs) == 1, "expected one record of %s, got %d" % (target, len(recs))):
        f = recs[0]
        ck.eq("record's pid", survivor, f.get("pid"))
        c = f["counters"]
        for k, want in (("writes", 1), ("bytes_written", N), ("opens", 1), ("closes", 0),
                        ("reads", 0)):
            ck.eq("survivor file %s" % k, want, c.get(k))
    E.check_lost_zero(ck, doc)
    # Not left behind: the test's own survivor.
    try:
        os.kill(survivor, 9)
    except OSError:
        pass
    time.sleep(0.1)
    ck.finish()


if __name__ == "__main__":
    main()
