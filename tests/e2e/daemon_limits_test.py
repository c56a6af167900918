#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a job with 200,000 files stays exact in its totals while iolensd bounds its records.

iolensd --max-files-per-job 50000, a cgroup rule P/lim/* (P = /iolens-e2e-<pid>). One job runs
`job_workload many DIR 200000 SIZE` on tmpfs (/dev/shm, or IOLENS_E2E_MANY_TMP): it creates
200,000 files with one write of SIZE bytes each, reads each back with one read, and unlinks them
(ground truth: 400,000 opens and closes, 200,000 writes and reads, 200,000 * SIZE bytes each
way, 200,000 unlinks). The daemon is sized for the burst (kernel map of 262,144 records, ring of
64 MiB: at the defaults it cannot keep up with this job on 2 CPUs, and counts what it drops); it
must drain fast enough to lose nothing and fold records to keep at most 50,000.

Checks: the record's job totals (opens, reads, writes, bytes) are exactly the workload's; the
job counts 200,000 distinct files; job.folded_files is at least the files not kept as rows; the
record holds at most 50,000 file records, and the process's file records plus its folded "other
files" record add up to its totals (opens, closes, reads, writes, bytes); the process's unlinks
are 200,000; `lost` is all zero (nothing dropped in the kernel). The daemon's RSS is sampled
all along and printed; its peak (VmHWM) must stay under RSS_LIMIT_MIB, a bound that 200,000
records kept unfolded would break (see the note at RSS_LIMIT_MIB), and once the job's memory is
freed its RSS must come back to within RESTING_LIMIT_MIB of its RSS at start.
"""
import os
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NFILES = 200000
SIZE = 100
MAX_FILES = 50000
# The bound on the daemon's peak RSS (VmHWM). Measured on the dev VM (2 CPUs, kernel 6.18,
# RelWithDebInfo): about 130-190 MiB while the job runs, then a peak near 600 MiB when the job
# record (50,000 file records at most) is built and written, the same for 100,000 and 200,000
# files: the peak follows the limit, not the file count. Records are about 13 KiB each at that
# moment (20,000 unfolded records peak near 290 MiB), so 200,000 records kept unfolded would
# need about 2.6 GiB: the bound is between the two.
# Since the counters carry latency histograms (720 bytes instead of 512) and the daemon builds
# a metrics snapshot after each drain, measured: 650-720 MiB while the job runs, VmHWM 870 MiB
# after the record, once 1.1 GiB in a full-suite run. Still well under the unfolded 2.6 GiB.
# Since the state is written as it is encoded (no whole CBOR nor whole compressed copy on the
# saver thread) and the recorder blobs are made where the state holds them (issue 16, item 2):
# about 520 MiB while the job runs and VmHWM 590-660 MiB after the record; with records kept
# packed too, 406-460 and 473-518 MiB (bench/daemon_memory.py), here with the rings of this
# test (64 MiB + 16 MiB, each mapped twice: 160 MiB of the RSS from the start).
RSS_LIMIT_MIB = int(os.environ.get("IOLENS_E2E_RSS_LIMIT_MIB", "1024"))
# After the record is written and the job's memory freed, the daemon's RSS must come back to
# within this of its RSS at start: freed memory is given back to the system (malloc_trim on the
# threads that free a closed job and a saved state). Measured: +110-120 MiB (the node-wide
# cache of 200,000 names and what the allocator keeps); +370 MiB when nothing was given back.
RESTING_LIMIT_MIB = int(os.environ.get("IOLENS_E2E_RESTING_LIMIT_MIB", "224"))
# IOLENS_E2E_DAEMON_NICE: run iolensd at this nice value (default 0, as installed). Measured on
# the 2-CPU dev VM when the workload runs fast (6-11 s for the 200,000 files): at nice 0 and
# -10 alike the kernel dropped 30,000-230,000 of this job's file records (map of 65,536) and
# 100,000-180,000 ring events (names and unlinks), and sometimes the job's cgroup-removal event
# (lost.job_events: the job then stays live and is never written). With
# IOLENS_E2E_DAEMON_CONFIG='limits:\n  kernel_file_records: 262144' no file record was lost,
# but the ring still overflowed (unlinks short, and the removal event lost in 3 of 4 runs).
DAEMON_NICE = int(os.environ.get("IOLENS_E2E_DAEMON_NICE", "0"))
# The record came 3-6 s after the cgroup removal whenever it came at all.
RECORD_WAIT_S = 30
SUMS = ("opens", "closes", "reads", "writes", "bytes_read", "bytes_written")


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_limits")
    cg = D.Cgroups()
    base = os.environ.get("IOLENS_E2E_MANY_TMP", "/dev/shm")
    data = D.tempdir("many", base=base)
    rules = '  - cgroup: {paths: ["%s/lim/*"]}' % cg.prefix
    # Sized for the burst (docs/daemon.md#sizing): this workload creates ~30,000 files a second
    # on the 2-CPU VM, faster than iolensd drains the default 65,536-record map (it drops, and
    # says so); a kernel map that holds the records made between two drains and a ring that
    # holds the names of a few seconds of new files keep it exact.
    d = D.Daemon(args.iolensd, rules, args=["--max-files-per-job", str(MAX_FILES)], tag="lim",
                 extra_config="limits:\n  kernel_file_records: 262144\n  ring_size: 64MiB\n")
    d.start(ck)
    if DAEMON_NICE:
        os.setpriority(os.PRIO_PROCESS, d.proc.pid, DAEMON_NICE)
    rss0 = D.read_rss_kib(d.proc.pid)
    sub = "lim/big"
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])

    t0 = time.monotonic()
    cpu0 = D.cpu_seconds(d.proc.pid)
    load0 = os.getloadavg()[0]
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", data, str(NFILES), str(SIZE)])
    samples = []
    while p.poll() is None:
        samples.append(D.read_rss_kib(d.proc.pid))
        time.sleep(0.2)
        if time.monotonic() - t0 > 120:
            break
    manifest = D.finish_workload(ck, p, "job_workload many", timeout=60)
    run_s = time.monotonic() - t0
    if manifest is None:
        ck.finish()
    if not d.alive():
        ck.fatal("iolensd died while the job ran (exit %r); log tail:\n%s" %
                 (d.proc.returncode, d.log()[-3000:]))
    hwm_run = D.read_rss_kib(d.proc.pid)[1]
    cpu_run = D.cpu_seconds(d.proc.pid) - cpu0
    cg.rmdir(sub)
    doc = d.wait_record(ck, job_id, timeout=RECORD_WAIT_S)
    if doc is None and d.alive():
        # Why not? A job whose cgroup is gone but that iolensd still lists live lost its
        # cgroup-removal event (status lost.job_events): nothing would ever close it.
        try:
            st = d.status()
            listed = [j for j in d.request({"cmd": "jobs"})["result"]["jobs"]
                      if j["id"] == job_id]
        except (OSError, ValueError, KeyError, TypeError) as e:
            st, listed = {}, "no answer: %r" % e
        ck.fail("%d s after its cgroup was removed, iolensd lists job %s as %s (%.1f s of CPU "
                "used so far); status lost: %s" %
                (RECORD_WAIT_S, job_id,
                 [j.get("state") for j in listed] if isinstance(listed, list) else listed,
                 D.cpu_seconds(d.proc.pid),
                 {k: v for k, v in (st or {}).get("lost", {}).items() if v}))
    written_s = time.monotonic() - t0
    ck.check(d.alive(), "iolensd died while it closed the job (exit %r)" % d.proc.poll())
    rss1 = D.read_rss_kib(d.proc.pid)
    D.log("workload: %d files in %.1f s; record after %.1f s; iolensd used %.1f s of CPU "
          "while it ran; load average %.1f before, %.1f after (%d CPUs)" %
          (NFILES, run_s, written_s, cpu_run, load0, os.getloadavg()[0], os.cpu_count()))
    D.log("iolensd RSS: start %d KiB; while the job ran: peak sampled %d KiB, VmHWM %d KiB "
          "(%d samples); after the record: RSS %d KiB, VmHWM %d KiB" %
          (rss0[0], max([x[0] for x in samples] or [0]), hwm_run, len(samples), rss1[0],
           rss1[1]))
    ck.check(rss1[1] < RSS_LIMIT_MIB * 1024, "iolensd peak RSS (VmHWM) %d KiB is over %d MiB" %
             (rss1[1], RSS_LIMIT_MIB))
    # The closed job's memory is freed and given back on the record writer's thread once the
    # loop has taken the record: wait for it (a few seconds at most), then compare with start.
    deadline = time.monotonic() + 15
    rss2 = D.read_rss_kib(d.proc.pid)
    while rss2[0] - rss0[0] >= RESTING_LIMIT_MIB * 1024 and time.monotonic() < deadline:
        time.sleep(0.5)
        rss2 = D.read_rss_kib(d.proc.pid)
    D.log("iolensd RSS once the job's memory is freed: %d KiB (%+d KiB from start)" %
          (rss2[0], rss2[0] - rss0[0]))
    ck.check(rss2[0] - rss0[0] < RESTING_LIMIT_MIB * 1024,
             "iolensd RSS %d KiB 15 s after the record is %d KiB over its start (%d KiB): the "
             "closed job's memory was not given back (limit %d MiB)" %
             (rss2[0], rss2[0] - rss0[0], rss0[0], RESTING_LIMIT_MIB))
    if doc is None or not D.check_record_shape(ck, doc, job_id):
        ck.finish()

    t = manifest["totals"]
    ck.eq("workload opens (its own count)", 2 * NFILES, t["opens"])
    ck.eq("workload bytes_written (its own count)", NFILES * SIZE, t["bytes_written"])
    D.check_lost_zero(ck, doc, job_id)
    lost = doc.get("lost") or {}
    if lost.get("file_records") or lost.get("events"):
        ck.fail("the kernel dropped %s file records and %s events: iolensd did not drain its "
                "maps and ring buffer as fast as the job filled them (it used %.1f s of CPU in "
                "%.1f s; load average %.1f on %d CPUs); the totals below are short by what was "
                "dropped" % (lost.get("file_records"), lost.get("events"), cpu_run, run_s,
                             os.getloadavg()[0], os.cpu_count()))
    job = doc["job"]
    # The shell's write to cgroup.procs (which moved it in) must not be counted.
    mv = D.self_move_write(p.pid, cg.abs(sub))
    files = doc["files"]
    mv_rec = [f for f in files if f.get("path") == mv["path"]]
    ck.check(not mv_rec, "the shell's write to %s (which moved it into the job) is counted: %s"
             % (mv["path"], mv_rec))
    extra = {k: (mv[k] if mv_rec else 0) for k in SUMS}  # so the sums below stay meaningful
    totals = job.get("totals", {})
    for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
        ck.eq("job.totals.%s" % k, t[k] + extra[k], totals.get(k))
    ck.eq("job.files (distinct files)", NFILES + len(mv_rec), job.get("files"))
    # Each file the job made is a row of the record or was folded (one process: a folded
    # (process, file) pair is a folded file), so the rows not kept must be counted as folded.
    made = NFILES + len(mv_rec)
    ck.check(isinstance(job.get("folded_files"), int) and
             job["folded_files"] >= max(1, made - len(files)),
             "job.folded_files is %r: of the %d files the job made the record keeps %d rows, "
             "so at least %d must be folded" %
             (job.get("folded_files"), made, len(files), made - len(files)))
    ck.check(len(files) <= MAX_FILES, "the record holds %d file records, over the limit %d" %
             (len(files), MAX_FILES))
    D.log("record: %d file records, job.folded_files %s, folded_records %s" %
          (len(files), job.get("folded_files"), doc.get("folded_records")))

    procs = doc["processes"]
    ck.eq("process pids", [p.pid], [x.get("pid") for x in procs])
    if procs:
        pr = procs[0]
        pc = pr.get("counters", {})
        folded = (pr.get("folded") or {}).get("counters", {})
        ck.check(pr.get("folded") is not None, "the process has no folded record")
        for k in SUMS:
            ck.eq("process counters.%s" % k, t[k] + extra[k], pc.get(k))
            ck.eq("process: sum of its %d file records + folded.%s" % (len(files), k),
                  pc.get(k), sum(f["counters"].get(k, 0) for f in files) + folded.get(k, 0))
        ck.eq("process unlinks", NFILES, pr.get("unlinks", pc.get("unlinks")))
        ck.eq("process files (distinct)", NFILES + len(mv_rec), pc.get("files"))
    rc, secs = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
