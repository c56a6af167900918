#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: the wall clock stepped under a running daemon and while none runs (docs/daemon.md
"Wall-clock steps").

The kernel stamps events with the monotonic clock; records give wall times. A daemon that took
the wall clock's offset once at start would write every later time off by each step since (an
NTP client stepping a node's clock at boot, a VM resumed, an admin's `date -s`). This test steps
the real clock (CLOCK_REALTIME, as root) by an hour, so it runs alone (RUN_SERIAL). The clock is
put back from the monotonic clock at the end, and by a detached guard process if the test dies
first, so that nothing else on the machine sees the step for longer than the test.

A cgroup rule P/ck/*:
  - job a: created, a python workload in it writes a1 (1000 bytes) and waits; the clock is set an
    hour forward; the workload writes a2 (2000) and exits; the cgroup is removed;
  - job b: created, its workload writes b1 and waits; the daemon is stopped with SIGUSR2 (its
    state saved, b in it); the clock is set an hour back (while no daemon runs); a new daemon
    resumes; the workload writes b2 and exits; the cgroup is removed.

Checks, against the test's own clock readings (wall = monotonic + the offset after the step):
  - each record's job.start_ns lies between the test's readings just before and after it made
    the cgroup, and end_ns between those around the rmdir (50 ms slack for the daemon's
    reading), on the clock as it is now set; so the job lasts what the monotonic clock says;
  - its processes start and end inside the job; bytes exact (a1, a2, b1, b2);
  - a's record lists the step (`wall_clock_steps`, +1 h within 5 ms, seen after the step);
    b's lists the step made while no daemon ran, and `restart.wall_clock_stepped_ns` -1 h;
  - status `wall_clock.steps` and /metrics `iolens_wall_clock_steps_total` count them (1 for
    each daemon).
"""
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

HOUR = 3600 * 10**9
SLACK = 50 * 10**6       # the daemon's and the test's readings of the offset, and their lag
STEP_SLACK = 5 * 10**6   # a step as the daemon measured it against the one the test made

# Puts the clock back when the test's process is gone (killed by a ctest timeout, say), from the
# monotonic clock: wall = base wall + monotonic time since the base.
GUARD = r'''
import os, sys, time
pid, wall0, mono0 = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + 1800
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.2)
want = wall0 + time.clock_gettime_ns(time.CLOCK_MONOTONIC) - mono0
if abs(time.clock_gettime_ns(time.CLOCK_REALTIME) - want) > 100 * 10**6:
    time.clock_settime_ns(time.CLOCK_REALTIME, want)
'''


class Clock:
    """The real wall clock, stepped and put back."""

    def __init__(self):
        self.wall0 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        self.mono0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.guard = subprocess.Popen(
            ["/usr/bin/python3", "-c", GUARD, str(os.getpid()), str(self.wall0), str(self.mono0)],
            start_new_session=True, stdin=subprocess.DEVNULL)
        D.Cleanup.register("put the wall clock back", self.restore)

    @staticmethod
    def offset():
        """wall - monotonic, read as the daemon reads it (between two monotonic readings)."""
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        w = time.clock_gettime_ns(time.CLOCK_REALTIME)
        m2 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        return w - (m1 + m2) // 2

    @staticmethod
    def mono():
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def step(self, delta):
        time.clock_settime_ns(time.CLOCK_REALTIME,
                              time.clock_gettime_ns(time.CLOCK_REALTIME) + delta)
        D.log("wall clock stepped by %+d s" % (delta // 10**9))

    def restore(self):
        want = self.wall0 + self.mono() - self.mono0
        if abs(time.clock_gettime_ns(time.CLOCK_REALTIME) - want) > 10**6:
            time.clock_settime_ns(time.CLOCK_REALTIME, want)


def start_job(ck, cg, d, sub, work, name):
    m0 = Clock.mono()
    cg.mkdir(sub)
    m1 = Clock.mono()
    job = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job])
    p = D.start_gated_writer(ck, cg.abs(sub), work, name)
    return job, p, (m0, m1)


def end_job(ck, cg, sub, p, name):
    D.finish_gated_writer(ck, p, name)
    D.wait_or_fail(ck, name + "'s cgroup empty", lambda: not cg.procs(sub), 10)
    m2 = Clock.mono()
    cg.rmdir(sub)
    return m2, Clock.mono()


def check_record(ck, doc, work, name, pid, start, end, offset, step, seen_after):
    """`start`, `end`: the test's monotonic readings around mkdir and rmdir; `offset`: the wall
    clock's offset now; `step`: the step the record must list, seen after `seen_after` (wall)."""
    if doc is None:
        return
    job = doc["job"]
    lo, hi = start[0] + offset - SLACK, start[1] + offset + SLACK
    ck.check(lo <= job["start_ns"] <= hi,
             "%s: job.start_ns %d is not when its cgroup was made by the clock now set: %+.3f s "
             "from the window [%d, %d]" % (name, job["start_ns"],
                                           (job["start_ns"] - start[0] - offset) / 1e9, lo, hi))
    lo, hi = end[0] + offset - SLACK, end[1] + offset + SLACK
    ck.check(job["end_ns"] is not None and lo <= job["end_ns"] <= hi,
             "%s: job.end_ns %s is not when its cgroup was removed by the clock now set "
             "(window [%d, %d])" % (name, job["end_ns"], lo, hi))
    ck.eq(name + ": top-level start_ns, end_ns as job's", (job["start_ns"], job["end_ns"]),
          (doc.get("start_ns"), doc.get("end_ns")))
    procs = [p for p in doc["processes"] if p["pid"] == pid]
    if ck.check(len(procs) == 1, "%s: the workload %d is not listed once: %s" %
                (name, pid, [p["pid"] for p in doc["processes"]])):
        p = procs[0]
        ck.check(job["start_ns"] - SLACK <= p["start_ns"] and p["end_ns"] is not None and
                 p["end_ns"] <= job["end_ns"] + SLACK,
                 "%s: the workload ran [%s, %s], outside its job [%d, %d]" %
                 (name, p["start_ns"], p["end_ns"], job["start_ns"], job["end_ns"]))
    got = D.gated_writer_files(doc, work, name)
    ck.eq(name + ": files and bytes", dict(zip((name + "1", name + "2"), D.GATED_WRITER_BYTES)), got)
    steps = doc.get("wall_clock_steps") or []
    if ck.check(len(steps) == 1, "%s: wall_clock_steps %r, not one step" % (name, steps)):
        ck.check(abs(steps[0]["step_ns"] - step) <= STEP_SLACK,
                 "%s: the step is %d ns, not %d" % (name, steps[0]["step_ns"], step))
        ck.check(steps[0]["seen_ns"] >= seen_after - SLACK,
                 "%s: the step was seen at %d, before it was made (%d)" %
                 (name, steps[0]["seen_ns"], seen_after))


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_clock_step")
    cg = D.Cgroups()
    work = D.tempdir("ck-work")
    clock = Clock()
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/ck/*"]}' % cg.prefix, tag="ck")
    d.start(ck)
    try:
        # a: stepped forward under the daemon.
        ja, pa, start_a = start_job(ck, cg, d, "ck/a", work, "a")
        before = Clock.offset()
        clock.step(HOUR)
        after = Clock.offset()
        stepped_at_a = Clock.mono() + after
        ck.check(abs(after - before - HOUR) < STEP_SLACK,
                 "the clock did not step: offset %d then %d" % (before, after))
        D.wait_or_fail(ck, "status to count the step",
                       lambda: d.status()["wall_clock"]["steps"] == 1, 10)
        st = d.status()["wall_clock"]
        ck.check(abs(st["mono_to_wall_ns"] - after) <= SLACK,
                 "status wall_clock.mono_to_wall_ns %d, the clock's offset %d" %
                 (st["mono_to_wall_ns"], after))
        ck.check(abs(st.get("last_step", {}).get("step_ns", 0) - HOUR) <= STEP_SLACK,
                 "status wall_clock.last_step %r" % st.get("last_step"))
        end_a = end_job(ck, cg, "ck/a", pa, "a")
        doc_a = d.wait_record(ck, ja, timeout=20)
        check_record(ck, doc_a, work, "a", pa.pid, start_a, end_a, Clock.offset(), HOUR,
                     stepped_at_a)
        ck.eq("/metrics iolens_wall_clock_steps_total", 1.0,
              D.node_metric(ck, d, "iolens_wall_clock_steps_total"))

        # b: stepped back while no daemon runs.
        jb, pb, start_b = start_job(ck, cg, d, "ck/b", work, "b")
        # Handed over (SIGUSR2: the state saved, with b in it, the programs left counting), so
        # that the saved state surely holds b; the next daemon loads it as after a crash.
        rc, _ = d.stop(signal.SIGUSR2)
        ck.eq("iolensd exit after SIGUSR2", 0, rc)
        saved_before = Clock.mono() + Clock.offset()  # the save was before the exit
        clock.step(-HOUR)
        st = d.restart(ck) or {}
        ck.check(abs(st.get("restart", {}).get("wall_clock_stepped_ns", 0) + HOUR) <= STEP_SLACK,
                 "status restart.wall_clock_stepped_ns %r, not -1 h" %
                 st.get("restart", {}).get("wall_clock_stepped_ns"))
        ck.eq("status restart.state", "loaded", st.get("restart", {}).get("state"))
        ck.eq("status wall_clock.steps after the restart", 1, st["wall_clock"]["steps"])
        end_b = end_job(ck, cg, "ck/b", pb, "b")
        doc_b = d.wait_record(ck, jb, timeout=20)
        # The step was made after the save, which is only known to be before the stop: it is
        # dated at the save, which is after the job's start and before the stop.
        check_record(ck, doc_b, work, "b", pb.pid, start_b, end_b, Clock.offset(), -HOUR,
                     start_b[0] + Clock.offset())
        if doc_b is not None:
            seen = (doc_b.get("wall_clock_steps") or [{}])[0].get("seen_ns", 0)
            ck.check(seen <= saved_before - HOUR + SLACK,
                     "b: the step made while no daemon ran is dated %d, after the stop (%d)" %
                     (seen, saved_before - HOUR))
            ck.eq("b: restart.wall_clock_stepped_ns in the record is the status's",
                  st.get("restart", {}).get("wall_clock_stepped_ns"),
                  doc_b.get("restart", {}).get("wall_clock_stepped_ns"))
        ck.eq("/metrics iolens_wall_clock_steps_total after the restart", 1.0,
              D.node_metric(ck, d, "iolens_wall_clock_steps_total"))
        D.stop_checked(ck, d)
    finally:
        clock.restore()
        cg.remove_all()
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
