#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd's state directory full (ENOSPC): the save fails, is counted, and nothing is lost.

The state is saved by a thread of its own (docs/daemon.md#restart-without-loss); the records of
exited processes leave the kernel's map only once a save that holds them is on disk. Here the
state directory is a small tmpfs, filled up (a filler file) while jobs run; ground truth is each
workload's own tally (`job_workload many DIR N SIZE`: N files created, written, read, unlinked).

1. Filled, a job runs whole (its process exits): the next saves fail. `status` counts them
   (`state.failures`), the log says so, and the exited process's final records stay in the
   kernel (bpftool counts the pinned map: at least N entries). Space freed, a save succeeds and
   deletes them (the map back under N). The job's record holds the workload's totals exactly.
2. Filled again, a second job runs whole, saves fail, and iolensd is killed (SIGKILL) before any
   succeeds; space freed and restarted, the new daemon finds the records still in the kernel and
   writes the job's record with the workload's totals exactly.
3. Another daemon, a 512-entry kernel map and a non-empty directory planted at the pressure-drain
   marker's name: with a live process holding 450 idle closed-file records (over 3/4 of the map,
   which a pressure drain takes at once), none is taken while the marker cannot be made (bpftool:
   the map keeps them), the refusals are counted and logged, and the record is exact.
"""
import os
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NFILES = 300
SIZE = 100
MARKER_FILES = 450


def fill(path):
    """Writes a filler file into `path` until the file system is full."""
    filler = os.path.join(path, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def failures(d):
    return ((d.status() or {}).get("state") or {}).get("failures", 0)


def saves(d):
    return ((d.status() or {}).get("state") or {}).get("saves", 0)


def job_while_full(ck, d, cg, args, data, sub):
    """The state directory filled, a job run whole, and a failed save waited for: (the filler,
    job id, pid, manifest)."""
    filler = fill(d.state_dir)
    job_id, p = D.start_many(ck, d, cg, args.workload, data, sub, NFILES, SIZE)
    pid, m = p.pid, D.finish_workload(ck, p, "job_workload many in " + sub, timeout=60)
    # Two drain rounds after the exit: the process's records have been read as final (the
    # first round may have begun before the exit was known). A save that fails after them
    # held them.
    drains = lambda: ((d.status() or {}).get("drain") or {}).get("count", 0)  # noqa: E731
    base = drains()
    ck.check(D.wait_for("two drains", lambda: drains() >= base + 2, 30),
             "%s: iolensd did not complete 2 drains within 30 s" % sub)
    base = failures(d)
    ck.check(D.wait_for("a failed save", lambda: failures(d) > base, 30),
             "%s: no failed save counted within 30 s with the state directory full" % sub)
    return filler, job_id, pid, m


def check_record(ck, d, cg, job_id, pid, sub, m, where, nfiles=NFILES):
    doc = d.wait_record(ck, job_id, timeout=60)
    if m is None or doc is None or not D.check_record_shape(ck, doc, job_id):
        return
    D.check_many_totals(ck, doc, m, pid, cg.abs(sub), where, nfiles)


def marker_refused(ck, cg, args, data):
    """3. The pressure-drain marker cannot be made (a non-empty directory planted at its name):
    no live record is taken, and each refusal is counted. A 512-entry map and a live process
    holding MARKER_FILES closed-file records (over 3/4 of the map: taken at once otherwise)."""
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/sm/*"]}' % cg.prefix, tag="sm",
                 extra_config="limits:\n  kernel_file_records: 512\n")
    os.makedirs(os.path.join(d.state_dir, "pressure-drain", "planted"))
    d.start(ck)
    sub = "sm/a"
    job_id, p = D.start_many(ck, d, cg, args.workload, data, sub, MARKER_FILES, SIZE,
                             gate_end=True)
    refusals = lambda: ((d.status() or {}).get("state") or {}).get("marker_failures", 0)  # noqa
    ck.check(D.wait_for("a refused marker", lambda: refusals() > 0, 30),
             "no marker failure counted within 30 s with the map over 3/4 full of idle records")
    entries = d.kernel_map_entries("files")
    ck.check(entries is not None and entries >= MARKER_FILES,
             "marker refused: %s entries in the kernel's map, fewer than the live process's %d "
             "records (taken with no marker)" % (entries, MARKER_FILES))
    with open(d.log_path, "rb") as f:
        ck.check(b"cannot create the pressure-drain marker" in f.read(),
                 "no 'cannot create the pressure-drain marker' in the daemon's log")
    p.stdin.write(b"\n")
    p.stdin.flush()
    m = D.finish_workload(ck, p, "job_workload many --gate-end", timeout=60)
    cg.rmdir(sub)
    check_record(ck, d, cg, job_id, p.pid, sub, m, "marker refused", nfiles=MARKER_FILES)
    rc, _ = d.stop()
    ck.eq("iolensd exit code (marker refused)", 0, rc)


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_state_full")
    cg = D.Cgroups()
    data = D.tempdir("state-full", base="/dev/shm")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/sf/*"]}' % cg.prefix, tag="sf")
    D.mount_small_tmpfs(d.state_dir, "2m", 0o700)
    d.start(ck)

    # 1. Saves fail while the directory is full; the final records wait in the kernel.
    sub = "sf/a"
    filler, job_id, pid, m = job_while_full(ck, d, cg, args, data, sub)
    entries = d.kernel_map_entries("files")
    ck.check(entries is not None and entries >= NFILES,
             "full: %s entries in the kernel's map, fewer than the exited process's %d records "
             "(deleted without a save that holds them)" % (entries, NFILES))
    with open(d.log_path, "rb") as f:
        ck.check(b"cannot save state" in f.read(), "no 'cannot save state' in the daemon's log")
    os.unlink(filler)
    base_saves = saves(d)
    ck.check(D.wait_for("a save after the space came back", lambda: saves(d) > base_saves, 30),
             "no save within 30 s of freeing the state directory")
    ck.check(D.wait_for("the final records deleted",
                        lambda: (d.kernel_map_entries("files") or 0) < NFILES, 30),
             "the exited process's records still in the kernel 30 s after a save")
    cg.rmdir(sub)
    check_record(ck, d, cg, job_id, pid, sub, m, "after a failed save")

    # 2. Killed while saves fail: the restarted daemon finds the records in the kernel.
    sub = "sf/b"
    filler, job_id, pid, m = job_while_full(ck, d, cg, args, data, sub)
    d.kill9()
    os.unlink(filler)
    d.restart(ck)
    cg.rmdir(sub)
    check_record(ck, d, cg, job_id, pid, sub, m, "killed while saves failed")
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    marker_refused(ck, cg, args, data)
    ck.finish()


if __name__ == "__main__":
    main()
