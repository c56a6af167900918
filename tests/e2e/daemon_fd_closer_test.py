#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a descriptor passed with a control request cannot stall iolensd by its close.

close(2) of a file on a FUSE file system waits, with no timeout, for the server's answer to
FLUSH; fuse_stall.py with hold_flush never answers it. Any member of the socket group who can
mount FUSE (fusermount3 is setuid) can pass such a file with any request. Before the fix the
daemon closed the descriptors it did not keep on its loop: the first `status` that carried one
was never answered, and nothing else was either.

  1. `status` with a descriptor of the FUSE file: answered, and every later `status` too
     (within the 5 s `iolens` gives a request) while the daemon's closer thread waits in FLUSH.
  2. More such requests than the closer's queue holds (64): all answered; then the daemon takes
     no descriptors at all (the kernel drops them, no FLUSH): a normal capture into a regular
     file is refused with "the daemon is not taking descriptors now: N closes pending", and the
     log says so.
  3. The FUSE connection aborted: the closer empties, descriptors are taken again, a capture
     works.
  4. Stop while the closer is stuck again: iolensd leaves its loop and exits after waiting a
     bounded time for the closer (kCloserStopWait, 5 s); the process is reaped once the FUSE
     connection ends, exit code 0.
Skipped (exit 77, with a message) only where FUSE cannot be mounted.
"""
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402
import fuse_stall  # noqa: E402

CLIENT_TIMEOUT_S = 5.0  # what `iolens` gives one request
QUEUE = 64  # kCloserCapacity (agent/control/closer.hpp)


def mount_stall(tag):
    mnt = D.tempdir(tag)
    fs = fuse_stall.StallFs(mnt, hold_flush=True)
    D.Cleanup.register("stop the FUSE server " + tag, fs.stop)
    return fs


def open_stall(fs):
    """The FUSE file, kept open until the connection is aborted: the test's own close would wait
    in FLUSH too, and so would any process it starts meanwhile (a new process closes inherited
    descriptors), so the test starts none while it holds one."""
    return os.open(fs.path(), os.O_WRONLY)


def close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass  # ENOTCONN: the connection is aborted


def ask(ck, d, req, what, fds=()):
    """One request within CLIENT_TIMEOUT_S; None (a failure noted) when it is not answered."""
    try:
        return D.control(d.socket, req, timeout=CLIENT_TIMEOUT_S, fds=fds)
    except (OSError, ValueError) as e:
        ck.fail("%s: not answered within %.0f s: %s" % (what, CLIENT_TIMEOUT_S, e))
        return None


def flush_held(fs):
    return D.wait_for("a FLUSH held by the FUSE server", lambda: fuse_stall.FLUSH in fs.held, 5)


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("daemon_fd_closer")
    if not os.path.exists("/dev/fuse"):
        D.log("SKIP: no /dev/fuse: FUSE cannot be mounted here")
        sys.exit(77)
    try:
        fs = mount_stall("closer-fuse")
    except (OSError, subprocess.CalledProcessError) as e:
        D.log("SKIP: cannot mount a FUSE file system: %s" % e)
        sys.exit(77)
    cg = D.Cgroups()
    work = D.tempdir("fd-closer")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/g/*"]}' % cg.prefix, tag="closer",
                 iolens=args.iolens)
    d.start(ck)
    job_id = "cgroup" + cg.rel("g/a")
    cg.mkdir("g/a")
    d.wait_live(ck, [job_id])
    loop = "while :; do dd if=/dev/zero of=%s/f bs=512 count=200 status=none; sleep 0.1; done" \
        % work
    job = D.run_in_cgroup(cg.abs("g/a"), ["/bin/sh", "-c", loop])
    D.Cleanup.register("kill job", lambda: job.poll() is None and job.kill())

    # 1. One descriptor of the FUSE file with a status request.
    fd = open_stall(fs)
    a = ask(ck, d, {"cmd": "status"}, "status with a FUSE file's descriptor", fds=[fd])
    if a is None:
        fs.stop()  # frees the daemon (the FLUSH fails), so that the log can be read
        close_quietly(fd)
        ck.finish()
    ck.check(a.get("ok"), "status with a FUSE file's descriptor: %r" % a)
    ck.check(flush_held(fs), "the daemon never closed the FUSE file: the test proves nothing")
    for i in range(3):
        a = ask(ck, d, {"cmd": "status"}, "status %d while a close waits for FLUSH" % i)
        ck.check(a and a.get("ok"), "status while a close waits: %r" % a)

    # 2. More than the closer's queue holds.
    answered = 0
    for i in range(QUEUE + 6):
        a = ask(ck, d, {"cmd": "status"}, "status %d with a FUSE descriptor" % i, fds=[fd])
        if a is None:
            break
        answered += a.get("ok") is True
    ck.eq("status requests with a FUSE descriptor answered", QUEUE + 6, answered)
    a = ask(ck, d, {"cmd": "status"}, "status with the closer's queue full")
    ck.check(a and a.get("ok"), "status with the closer's queue full: %r" % a)
    out = os.path.join(work, "refused.iotrace")
    with open(out, "wb") as f:
        a = ask(ck, d, {"cmd": "capture", "job": job_id, "duration_ms": 1000},
                "capture with the closer's queue full", fds=[f.fileno()])
    ck.check(a and not a.get("ok") and
             "the daemon is not taking descriptors now" in a.get("error", "") and
             "closes pending" in a.get("error", ""),
             "capture with the closer's queue full not refused clearly: %r" % a)
    D.log("capture refused: %r" % a)
    logged = D.wait_for("the refusal in iolensd's log", lambda: [
        x for x in d.log().splitlines() if "not taking descriptors" in x], 5)
    ck.check(logged, "iolensd's log does not say it takes no descriptors:\n%s" % d.log()[-2000:])
    D.log("log: %r" % logged)

    # 3. The FUSE connection aborted: the closes end, descriptors are taken again.
    fs.stop()
    close_quietly(fd)
    f = os.path.join(work, "after.iotrace")
    deadline = time.monotonic() + 20
    while True:
        r = d.cli("capture", "--job", job_id, "--duration", "1s", "-o", f, timeout=60)
        if r.returncode == 0 or time.monotonic() > deadline or \
                "not taking descriptors" not in r.stderr:
            break
        time.sleep(0.5)
    ck.eq("capture after the abort: exit code (%s)" % r.stderr.strip(), 0, r.returncode)
    ck.check("ended by duration" in r.stderr, "capture after the abort: %r" % r.stderr)
    ck.check(os.path.getsize(f) > 0 if os.path.exists(f) else False, "no capture file")

    # 4. Stop while the closer waits in FLUSH again.
    fs2 = mount_stall("closer-fuse2")
    fd2 = open_stall(fs2)
    a = ask(ck, d, {"cmd": "status"}, "status with a 2nd FUSE descriptor", fds=[fd2])
    ck.check(a and a.get("ok") and flush_held(fs2), "the 2nd FUSE close did not start: %r" % a)
    pid = d.proc.pid
    t0 = time.monotonic()
    d.proc.send_signal(15)

    def leader_gone():
        # The main thread exits (a zombie leader) while the closer thread still waits in FLUSH.
        try:
            with open("/proc/%d/stat" % pid) as st:
                return st.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True
    left = D.wait_for("iolensd's main thread to exit", leader_gone, 20)
    D.log("iolensd's main thread ended %.1f s after SIGTERM with a close stuck" %
          (time.monotonic() - t0))
    ck.check(left, "iolensd did not exit within 20 s of SIGTERM while its closer was stuck")
    fs2.stop()
    close_quietly(fd2)
    rc, _ = d.stop(timeout=20)
    ck.eq("iolensd exit code (SIGTERM, closer stuck)", 0, rc)
    job.kill()
    job.wait()
    ck.finish()


if __name__ == "__main__":
    main()
