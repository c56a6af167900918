#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a mount whose statfs(2) never answers (a hung NFS server; here a FUSE server that holds
STATFS, tests/e2e/fuse_stall.py) stalls neither `iolens run`'s outputs nor iolensd's records.

Both read Darshan's mount table, statfs() of every mount point, for the files' FILE_ALIGNMENT:
`iolens run` at its end, iolensd's record writer thread for every job record. A statfs that has
not answered within a second is taken as failed (exporters::alignment_table). Checked:
  - the stall is real: `stat -f` of the mount point is still waiting after 2 s;
  - with four such mounts, `iolens run --json --darshan` of a command writing and reading a
    file writes both outputs within 3.5 s (the mounts are asked at once: one second's wait, not
    four), names each mount, the file's record exact (bytes written and read) and its file_alignment
    Darshan's for its path (the work directory's file system, not the hung one). Its exit then
    waits for the kernel, as any process's would: FUSE waits for the answer to a request it
    has sent even past SIGKILL, so the thread left in statfs() holds the process until the
    connection is aborted; once aborted, iolens exits 0 and has said which mount did not answer;
  - iolensd, with such a mount made after it started, writes the records of two jobs that end
    one after the other, each within 15 s, exact, and logs the mount once (its statfs is not
    asked again while it has not answered).
"""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402
import fuse_stall  # noqa: E402

JOB = "i=0; while [ $i -lt 8 ]; do echo 0123456789abcdef >> %s; i=$((i+1)); done; cat %s > /dev/null"


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("statfs_stall")
    if not os.path.exists("/dev/fuse"):
        ck.fatal("no /dev/fuse: this test needs FUSE (the CI machine has it)")
    work = D.tempdir("statfs-stall", base="/var/tmp")
    mnt = os.path.join(work, "hung")
    os.mkdir(mnt)
    f = os.path.join(work, "run.dat")
    # Darshan's alignment of f, by the test's own reading of the mount table: before the hung
    # mount is made (that reading, statfs of every mount, would hang on it)
    want_alignment = E.darshan_file_alignment(f)
    fs = fuse_stall.StallFs(mnt, hold_statfs=True)
    D.Cleanup.register("stop the FUSE server", fs.stop)
    # Three more hung mounts: asked one after the other they would cost a second each
    more = []
    for k in range(3):
        m = os.path.join(work, "hung-%d" % k)
        os.mkdir(m)
        more.append(fuse_stall.StallFs(m, hold_statfs=True))
        D.Cleanup.register("stop FUSE server %d" % k, more[-1].stop)
    # The stall is real: statfs of the mount point waits (not even SIGKILL ends it).
    st = subprocess.Popen(["stat", "-f", mnt], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    time.sleep(2)
    ck.check(st.poll() is None, "stat -f of the hung mount returned %r" % st.poll())

    # iolens run
    out_json, out_log = os.path.join(work, "run.json"), os.path.join(work, "run.darshan")
    t0 = time.monotonic()
    run = subprocess.Popen([args.iolens, "run", "--json", out_json, "--darshan", out_log, "--",
                            "/bin/sh", "-c", JOB % (f, f)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, start_new_session=True)
    doc = D.wait_for("iolens run's JSON record", lambda: load_or_none(out_json), 20)
    took = time.monotonic() - t0
    ck.check(doc is not None, "no complete JSON record within 20 s with a hung mount")
    # (iolens opens its outputs at its start: the log is there, empty, from then on)
    ck.check(D.wait_for("iolens run's Darshan log", lambda: os.path.getsize(out_log) > 0, 5),
             "no Darshan log written")
    if doc is not None:
        D.log("statfs_stall: iolens run's record after %.1f s" % took)
        # four hung mounts, asked at once: one second's wait, not four
        ck.check(took < 3.5, "iolens run's record took %.1f s with four hung mounts" % took)
        # the shell's appends and cat's read: a record each
        rows = [r["counters"] for r in doc["files"] if r["path"] == f]
        ck.eq("run: bytes written", 8 * 17, sum(c["bytes_written"] for c in rows))
        ck.eq("run: bytes read", 8 * 17, sum(c["bytes_read"] for c in rows))
        for c in rows:
            ck.eq("run: file_alignment (Darshan's rule)", want_alignment, c["file_alignment"])
    for x in [fs] + more:
        x.abort()  # frees the threads left in statfs(): iolens's and stat's
    try:
        _, err = run.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        run.kill()
        _, err = run.communicate()
        ck.fail("iolens run did not exit once the hung mount was aborted")
    ck.eq("iolens run's exit code", 0, run.returncode)
    err = err.decode("utf-8", "replace")
    ck.check("statfs(%s) did not answer" % mnt in err,
             "iolens run does not say which mount did not answer; stderr:\n%s" % err)
    for k, x in enumerate(more):
        ck.check("statfs(%s) did not answer" % x.mountpoint in err,
                 "iolens run does not name hung mount %d" % k)
    st.wait(timeout=30)
    for x in [fs] + more:
        x.stop()

    # iolensd, with a hung mount made after it started (its writer reads the mounts anew for
    # each record)
    cg = D.Cgroups()
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/s/*"]}' % cg.prefix, tag="statfs",
                 extra_config="syscall_hooks: always\n", iolens=args.iolens)
    d.start(ck)
    mnt = os.path.join(work, "hung2")
    os.mkdir(mnt)
    fs2 = fuse_stall.StallFs(mnt, hold_statfs=True)
    D.Cleanup.register("stop the second FUSE server", fs2.stop)
    for name in ("a", "b"):
        job_id = "cgroup" + cg.rel("s/" + name)
        cg.mkdir("s/" + name)
        d.wait_live(ck, [job_id])
        jf = os.path.join(work, name + ".dat")
        p = D.run_in_cgroup(cg.abs("s/" + name), ["/bin/sh", "-c", JOB % (jf, jf)])
        _, perr = p.communicate(timeout=60)
        ck.eq("job %s's exit code (%s)" % (name, perr.decode("utf-8", "replace").strip()), 0,
              p.returncode)
        cg.rmdir("s/" + name)
        t0 = time.monotonic()
        rec = d.wait_record(ck, job_id, timeout=15)
        if rec is None:
            continue
        D.log("statfs_stall: job %s's record %.1f s after its cgroup went" %
              (name, time.monotonic() - t0))
        rows = [r["counters"] for r in rec.get("files", []) if r.get("path") == jf]
        ck.eq("job %s: bytes written" % name, 8 * 17, sum(c["bytes_written"] for c in rows))
        ck.eq("job %s: bytes read" % name, 8 * 17, sum(c["bytes_read"] for c in rows))
    warned = d.log().count("statfs(%s) did not answer" % mnt)
    ck.eq("iolensd's warnings about the hung mount (asked once while it hangs)", 1, warned)
    fs2.abort()  # first: the daemon's thread left in statfs() would hold its exit
    d.stop()
    fs2.stop()
    ck.finish()


def load_or_none(path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    main()
