#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `iolens run` killed before the command starts: the command never runs untraced.

`iolens run` forks the command's process first, suspended before exec, and then loads its
programs (agent/cli/run_command.cpp: a small process forks cheaply). Killing iolens while it
loads must take the suspended process with it (PR_SET_PDEATHSIG), not leave it to run the
command untraced (a stopped orphan gets SIGCONT from the kernel when its process group is
orphaned; under nohup, where SIGHUP is ignored, it would have gone on to exec).

Each round: `iolens run -- touch MARKER` is started in its own session with SIGHUP ignored
(as nohup does), the test waits until iolens has a stopped child, SIGKILLs iolens, and then
checks that the child is gone and MARKER was never created. A round where the child was already
released when seen (it is not stopped) is not counted; at least 3 of 5 must be checked.
"""
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402


def stopped_child(ppid):
    """The pid of a stopped child of `ppid`, or None."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == ppid and fields[0] in ("T", "t"):
            return int(pid)
    return None


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("run_killed")
    tmp = E.disk_tempdir("killed")
    checked = 0
    for i in range(5):
        marker = os.path.join(tmp, "ran-%d" % i)
        p = subprocess.Popen([args.iolens, "run", "-q", "--local", "--", "touch", marker],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        child = None
        deadline = time.monotonic() + 10
        while child is None and p.poll() is None and time.monotonic() < deadline:
            child = stopped_child(p.pid)
            if child is None:
                time.sleep(0.002)
        if child is None:
            p.wait(timeout=30)
            E.log("round %d: no stopped child seen (iolens finished first)" % i)
            continue
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        gone = time.monotonic() + 5
        while alive(child) and time.monotonic() < gone:
            time.sleep(0.01)
        time.sleep(0.2)  # a command that did run would have created the marker by now
        ck.check(not alive(child), "round %d: the suspended command %d outlived iolens" %
                 (i, child))
        ck.check(not os.path.exists(marker),
                 "round %d: the command ran untraced after iolens was killed" % i)
        checked += 1
    ck.check(checked >= 3, "only %d of 5 rounds caught iolens while it loaded" % checked)
    E.log("%d rounds checked" % checked)
    ck.finish()


if __name__ == "__main__":
    main()
