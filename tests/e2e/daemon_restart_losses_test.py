#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: what a restart cannot recover is counted, case by case (docs/daemon.md, the table of
"Restart without loss"). daemon_restart_test.py proves the lossless case; daemon_state_corrupt_test.py
the corrupt state; this test provokes the others, each in a job whose workload (job_workload,
its own tally) runs across the restart:

  1. no state: iolensd SIGKILLed after a save, its state.cbor deleted, restarted: status
     restart.state "none: ...", and the job's record lost.restart_state_unusable = 1 with the
     restart object; the workload's live records were still in the kernel, so the job's byte
     totals are still the workload's own.
  2. stale state: a state saved by an earlier daemon over other pins (its pins were removed by a
     clean stop, a new daemon made new ones), put in place of the current one after a SIGKILL:
     restart.state "stale: ...", lost.restart_state_unusable = 1, totals the workload's.
  3. killed during a pressure drain: a small kernel map (limits.kernel_file_records 512) filled
     by a job making 2,000 files while iolensd is stopped (SIGSTOP) and then staying alive, so
     that its first drain after SIGCONT moves live records out of the kernel under its marker
     state_dir/pressure-drain; it is SIGKILLed the moment the marker exists (a real kill inside
     the window the marker covers, until the next save): restart.pressure_drain is said,
     status restart.lost.interrupted_pressure_drain = 1, the marker is gone once the restarted
     daemon has saved, and the job's record has lost.restart_interrupted_pressure_drain = 1.
  4. the ring overrun while no daemon read it (a 4 KiB ring, drains every 200 ms): after a
     save, a first process makes M files (job_workload many --keep: one name event each) whose
     names the daemon reads, then iolensd is SIGKILLed before it saves again; a second process
     makes N files while no daemon runs, so the ring fills and the kernel drops the rest of
     their names. The restarted daemon cannot replay what the dead one read after its save
     (the producer ran past the saved position by more than the ring): status
     restart.lost.events_not_replayed > 0, the record's lost.restart_events_not_replayed the
     same, and the first process's M files have no name (path_unknown). The kernel's drops are
     exact: every one of the second process's files without a name had its name sent and
     dropped three times (at its first open, and again at each of its two closes, since none
     had reached user space; the reopen finds the record named), so lost.restart_events =
     lost.restart_path_events = 3 x those files, with the other files named. Every file's
     counts are the workload's own either way, the first process's included (its marks were
     not replayed either: the restarted daemon reads the full ring before its report-all task
     scan, whose marks would otherwise be dropped and the process left out of its job).
  5. pins removed: a job's workload writes, gated, while its iolensd's pin directory is
     removed under it (rm -r): the daemon goes on counting (it holds the maps and links: the
     job's live totals reach the workload's written bytes); then SIGKILL (a state was saved
     with the job) and a restart: no pins to continue, so status restart.resumed false and restart.state
     "unusable: ..." (the earlier daemon's state is not used, and says why), never silence.
Exit 0 pass, 1 fail, 77 skipped (not root).
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

W, R = 5 * 65536 + 11, 3 * 32768 + 7


def gated_job(ck, d, cg, args, work, name):
    """A job with one workload stopped halfway (written W bytes, R to read): (job id, process)."""
    cg.mkdir("rl/" + name)
    job_id = "cgroup" + cg.rel("rl/" + name)
    d.wait_live(ck, [job_id])
    D.make_input(os.path.join(work, name + ".in"), R)
    p = D.run_in_cgroup(cg.abs("rl/" + name), [args.workload, "io", work, name, str(W), str(R),
                                                "--gate-mid"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill " + name, lambda: p.poll() is None and p.kill())
    D.read_json_line(ck, p, name + " (written)")
    return job_id, p


def finish_job(ck, d, cg, name, job_id, p):
    """Lets the workload read and exit, removes the job's cgroup: (record, manifest)."""
    p.stdin.close()
    p.stdin = None
    m = D.finish_workload(ck, p, name)
    cg.rmdir("rl/" + name)
    return d.wait_record(ck, job_id), m


def saved(ck, d, what):
    """Waits for a state save after now (the loop answers status between drains)."""
    base = d.status()["state"]["saves"]
    D.wait_or_fail(ck, "a state saved (%s)" % what,
                   lambda: d.status()["state"]["saves"] >= base + 1, 20)


def totals(doc):
    t = {"bytes_written": 0, "bytes_read": 0}
    for f in doc.get("files", []):
        for k in t:
            t[k] += f.get("counters", {}).get(k, 0)
    return t


def check_unusable(ck, doc, job_id, state_prefix, manifest):
    ck.eq("%s: lost.restart_state_unusable" % job_id, 1,
          doc.get("lost", {}).get("restart_state_unusable"))
    st = doc.get("restart", {}).get("state", "")
    ck.check(st.startswith(state_prefix), "%s: record restart.state %r, want %r..." %
             (job_id, st, state_prefix))
    if manifest:
        ck.eq("%s: byte totals (the workload's, its live records stayed in the kernel)" % job_id,
              {"bytes_written": manifest["totals"]["bytes_written"],
               "bytes_read": manifest["totals"]["bytes_read"]}, totals(doc))


def restart_without_state(ck, d, cg, name, job_id, p, prefix):
    """Restarts the (SIGKILLed) daemon, whose state file the case has removed or replaced, then
    finishes the job: the restart and the job's record must say `prefix` and count the loss."""
    st = d.restart(ck)
    rs = (st or {}).get("restart", {})
    ck.eq("%s restart.resumed" % prefix, True, rs.get("resumed"))
    ck.check(str(rs.get("state", "")).startswith(prefix), "%s restart.state %r" %
             (prefix, rs.get("state")))
    doc, m = finish_job(ck, d, cg, name, job_id, p)
    if doc:
        check_unusable(ck, doc, job_id, prefix, m)
    rc, _ = d.stop()
    ck.eq("%s iolensd exit code" % prefix, 0, rc)


def case_no_state(ck, args, cg, work):
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/rl/*"]}' % cg.prefix, tag="rl-none")
    d.start(ck)
    job_id, p = gated_job(ck, d, cg, args, work, "none")
    saved(ck, d, "with the job")
    d.kill9()
    state = os.path.join(d.state_dir, "state.cbor")
    ck.check(os.path.exists(state), "no state.cbor after a save: %s" % os.listdir(d.state_dir))
    os.unlink(state)
    restart_without_state(ck, d, cg, "none", job_id, p, "none:")


def case_stale_state(ck, args, cg, work):
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/rl/*"]}' % cg.prefix, tag="rl-stale")
    d.start(ck)
    old_id, old_p = gated_job(ck, d, cg, args, work, "old")
    saved(ck, d, "over the first pins")
    old_state = os.path.join(work, "old-state.cbor")
    shutil.copyfile(os.path.join(d.state_dir, "state.cbor"), old_state)
    finish_job(ck, d, cg, "old", old_id, old_p)
    rc, _ = d.stop()  # clean: the pins go, the next daemon makes new ones
    ck.eq("stale: first iolensd exit code", 0, rc)
    ck.eq("stale: pins after the clean stop", None, d.pins() or None)
    st = d.restart(ck)
    ck.eq("stale: the second daemon starts afresh", False,
          (st or {}).get("restart", {}).get("resumed"))
    job_id, p = gated_job(ck, d, cg, args, work, "stale")
    saved(ck, d, "over the second pins")
    d.kill9()
    shutil.copyfile(old_state, os.path.join(d.state_dir, "state.cbor"))
    restart_without_state(ck, d, cg, "stale", job_id, p, "stale:")


def case_pressure_drain(ck, args, cg, work):
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/rl/*"]}' % cg.prefix, tag="rl-press",
                 extra_config="limits:\n  kernel_file_records: 512\n")
    d.start(ck)
    cg.mkdir("rl/press")
    job_id = "cgroup" + cg.rel("rl/press")
    d.wait_live(ck, [job_id])
    marker = os.path.join(d.state_dir, "pressure-drain")
    # The daemon stopped (SIGSTOP) while the job makes 2,000 files and stays alive (gated): the
    # kernel map fills with its live records (512; what does not fit is counted), so the first
    # drain after SIGCONT takes live records out of the kernel (the map over three quarters
    # full). The marker is made before the first of them is taken, and lasts until a save holds
    # them. (Records of an exited process are not taken that way: they leave the kernel only
    # once a save holds them, and make no marker.)
    many = os.path.join(work, "many")
    os.makedirs(many)
    d.proc.send_signal(signal.SIGSTOP)
    try:
        p = D.run_in_cgroup(cg.abs("rl/press"), [args.workload, "many", many, "2000", "64",
                                                 "--gate-end"], stdin=subprocess.PIPE)
        D.Cleanup.register("kill press", lambda p=p: p.poll() is None and p.kill())
        D.read_json_line(ck, p, "press", timeout=120)
    finally:
        d.proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 15
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.001)
    if not ck.check(os.path.exists(marker), "no pressure drain within 15 s of SIGCONT with the "
                    "512-entry map full of live records"):
        d.stop()
        return
    d.kill9()  # the marker is there: a drain moved records since the last save
    ck.check(os.path.exists(marker), "the marker went with the SIGKILL")
    st = d.restart(ck)
    rs = (st or {}).get("restart", {})
    ck.eq("pressure: restart.state", "loaded", rs.get("state"))
    ck.eq("pressure: restart.lost.interrupted_pressure_drain", 1,
          (rs.get("lost") or {}).get("interrupted_pressure_drain"))
    ck.check(rs.get("pressure_drain"), "pressure: no restart.pressure_drain text: %r" % rs)
    # The restarted daemon counts the marker and removes it; if its own first drains still find
    # the map over half full and take live records, they mark again, until its next save.
    ck.check(D.wait_for("the marker gone after a save",
                        lambda: not os.path.exists(marker) and
                        (d.status() or {}).get("state", {}).get("saves", 0) >= 1, 15),
             "pressure: the marker is still there after the restart and a save")
    p.stdin.write(b"\n")
    p.stdin.flush()
    D.finish_workload(ck, p, "press", timeout=60)
    cg.rmdir("rl/press")
    doc = d.wait_record(ck, job_id, timeout=30)
    if doc:
        ck.eq("pressure: record lost.restart_interrupted_pressure_drain", 1,
              doc.get("lost", {}).get("restart_interrupted_pressure_drain"))
    rc, _ = d.stop()
    ck.eq("pressure: iolensd exit code", 0, rc)


def many_files(ck, root, nfiles):
    """The files `job_workload many DIR N ... --keep` left: {ino: path}."""
    out = {}
    for i in range(nfiles):
        path = os.path.join(root, "d%03d" % (i // 1000), "f%06d" % i)
        out[os.stat(path).st_ino] = path
    return out


def case_ring(ck, args, cg, work):
    m, n, size = 5, 200, 64
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/rl/*"]}' % cg.prefix, tag="rl-ring",
                 extra_config="limits:\n  ring_size: 4KiB\n")
    d.start(ck)
    cg.mkdir("rl/ring")
    job_id = "cgroup" + cg.rel("rl/ring")
    d.wait_live(ck, [job_id])
    procs = []
    first = None
    # A save, then the first process's names read by the daemon before its next save (at most
    # every 5 s, or once the ring has run half its size: 5 names are far less). A round that
    # saw a save in between is repeated with a new first process (its names saved: not lost).
    quiet_round = False
    for attempt in range(3):
        saved(ck, d, "before the first names")
        t0 = time.monotonic()
        saves = d.status()["state"]["saves"]
        first = os.path.join(work, "ring-first-%d" % attempt)
        os.makedirs(first)
        p1 = D.run_in_cgroup(cg.abs("rl/ring"), [args.workload, "many", first, str(m), str(size),
                                                  "--gate-end", "--keep"],
                             stdin=subprocess.PIPE)
        D.Cleanup.register("kill ring-first", lambda p=p1: p.poll() is None and p.kill())
        procs.append(p1)
        D.read_json_line(ck, p1, "ring: first process")
        drains = d.status()["drain"]["count"]
        D.wait_or_fail(ck, "ring: two drains after the first names",
                       lambda: d.status()["drain"]["count"] >= drains + 2, 10)
        if d.status()["state"]["saves"] == saves and time.monotonic() - t0 < 4:
            quiet_round = True
            break
        D.log("ring: a save came before the kill (round %d): again" % attempt)
    if not quiet_round:
        ck.fatal("ring: in 3 rounds a state save always came between the save waited for and "
                 "the kill (saves at most every 5 s: the loop is far slower than expected)")
    names_read_wall = time.time_ns()  # the first process's names were read by now
    d.kill9()
    second = os.path.join(work, "ring-second")
    os.makedirs(second)
    p2 = D.run_in_cgroup(cg.abs("rl/ring"), [args.workload, "many", second, str(n), str(size),
                                              "--gate-end", "--keep"], stdin=subprocess.PIPE)
    D.Cleanup.register("kill ring-second", lambda: p2.poll() is None and p2.kill())
    procs.append(p2)
    D.read_json_line(ck, p2, "ring: second process")
    st = d.restart(ck)
    rs = (st or {}).get("restart", {})
    ck.eq("ring: restart.state", "loaded", rs.get("state"))
    rlost = rs.get("lost") or {}
    # A save between the last status and the kill (a few ms in a 5 s period) would hold the
    # first names: then nothing is lost to replay, and the case proves nothing. Said as such.
    if (rs.get("saved_wall_ns") or 0) >= names_read_wall:
        ck.fatal("ring: a state save came between the status check and the kill (saved %r, "
                 "names read by %d): the case is void, not failed by iolensd; run it again" %
                 (rs.get("saved_wall_ns"), names_read_wall))
    ck.check(rlost.get("events_not_replayed", 0) > 0,
             "ring: no events_not_replayed although the dead daemon read names after its save "
             "and the ring then filled: %r" % rs)
    for p in procs:
        p.stdin.close()
        p.stdin = None
    manifests = [D.finish_workload(ck, p, "ring workload") for p in procs]
    cg.rmdir("rl/ring")
    doc = d.wait_record(ck, job_id, timeout=30)
    rc, _ = d.stop()
    ck.eq("ring: iolensd exit code", 0, rc)
    if not doc:
        return
    lost = doc.get("lost", {})
    D.log("ring: record lost %r, restart %r" % (lost, doc.get("restart")))
    by_ino = {}
    for f in doc["files"]:
        by_ino.setdefault(f.get("ino"), []).append(f)
    ck.eq("ring: job totals of the workloads", sum(x["totals"]["bytes_written"] for x in manifests),
          doc["job"]["totals"].get("bytes_written"))

    def check_files(where, files, named_ok):
        unknown = 0
        for ino, path in sorted(files.items()):
            recs = by_ino.get(ino, [])
            if not ck.eq("%s: records of %s" % (where, path), 1, len(recs)):
                continue
            r = recs[0]
            c = r.get("counters", {})
            ck.eq("%s: %s counts" % (where, path), (2, 1, 1, size, size),
                  (c.get("opens"), c.get("writes"), c.get("reads"), c.get("bytes_written"),
                   c.get("bytes_read")))
            if r.get("path_unknown"):
                unknown += 1
            elif named_ok:
                ck.eq("%s: name of inode %d" % (where, ino), path, r.get("path"))
            else:
                ck.fail("%s: %s named %r, although its name event was read after the save and "
                        "could not be replayed" % (where, path, r.get("path")))
        return unknown

    check_files("ring: first process", many_files(ck, first, m), False)
    unnamed = check_files("ring: second process", many_files(ck, second, n), True)
    ck.check(0 < unnamed < n, "ring: %d of %d names of the second process lost: the 4 KiB ring "
             "should hold a few and drop the rest" % (unnamed, n))
    ck.eq("ring: lost.restart_path_events (each unnamed file: its first open, its two closes)",
          3 * unnamed, lost.get("restart_path_events"))
    ck.eq("ring: lost.restart_events (path events only: nothing else was dropped)",
          3 * unnamed, lost.get("restart_events"))
    for k in ("events", "path_events"):
        ck.eq("ring: lost.%s (the same drops, charged to the job's processes)" % k,
              3 * unnamed, lost.get(k))
    for k, v in lost.items():
        if k not in ("events", "path_events", "restart_events", "restart_path_events",
                     "restart_events_not_replayed") and k != "before_hooks":
            ck.eq("ring: lost." + k, 0, v)
    ck.eq("ring: record lost.restart_events_not_replayed (status's)",
          rlost.get("events_not_replayed"), lost.get("restart_events_not_replayed"))


def case_pins_removed(ck, args, cg, work):
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/rl/*"]}' % cg.prefix, tag="rl-pins")
    d.start(ck)
    job_id, p = gated_job(ck, d, cg, args, work, "pins")
    saved(ck, d, "with the job")
    shutil.rmtree(d.pin_dir)
    ck.check(not os.path.exists(d.pin_dir), "the pin directory is still there")
    # Still counting: the live job's totals reach what the workload wrote (its manifest line).
    D.wait_or_fail(ck, "the job's writes counted with the pins gone", lambda: any(
        j.get("id") == job_id and (j.get("totals") or {}).get("bytes_written") == W
        for j in (d.request({"cmd": "jobs"}).get("result") or {}).get("jobs", [])), 10)
    d.kill9()
    ck.check(os.path.exists(os.path.join(d.state_dir, "state.cbor")), "no state.cbor to find")
    st = d.restart(ck)
    rs = (st or {}).get("restart", {})
    ck.eq("pins: restart.resumed", False, rs.get("resumed"))
    ck.check(str(rs.get("state", "")).startswith("unusable: "),
             "pins: restart.state %r, want 'unusable: ...' (a state without pins)" %
             rs.get("state"))
    ck.check(any("unusable: " in x for x in d.log().splitlines()),
             "pins: no warning in the log about the unusable state")
    p.stdin.close()
    p.stdin = None
    D.finish_workload(ck, p, "pins")
    cg.rmdir("rl/pins")
    rc, _ = d.stop()
    ck.eq("pins: iolensd exit code", 0, rc)


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_restart_losses")
    cg = D.Cgroups()
    work = D.tempdir("restart-losses")
    case_no_state(ck, args, cg, work)
    case_stale_state(ck, args, cg, work)
    case_pressure_drain(ck, args, cg, work)
    case_ring(ck, args, cg, work)
    case_pins_removed(ck, args, cg, work)
    ck.finish()


if __name__ == "__main__":
    main()
