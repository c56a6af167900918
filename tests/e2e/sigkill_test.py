#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a SIGKILLed process keeps its records, exact, and reports exit_code 128+9.

tests/workloads/kill_workload.c: the parent forks a worker that writes and reads back 10 files of
100 KiB (25 writes of 4 KiB, lseek, 11 reads of 10 KiB incl. the 0 at EOF; the last file stays
open), sends its tallies through a pipe and pause()s; the parent SIGKILLs it, waits, prints a
manifest on stdout and exits 0. Checks: every counter of every worker file record; nothing else
under DIR; the worker's process record: ppid = parent, exit_code 137 (docs/run-json.md: 128+N if
killed by signal N), end_ns set; parent and top-level exit_code 0; `lost` all 0.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402


def main():
    args = E.parse_args(workload=True)
    E.require_root()
    ck = E.Checker("sigkill")
    tmp = E.disk_tempdir("kill")
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    out_json = os.path.join(tmp, "run.json")

    run = E.run_iolens(args.iolens, [args.workload, work], json_path=out_json, timeout=100)
    if run.rc != 0:
        ck.fatal("iolens run exited %d (the workload exits 0); stderr:\n%s" %
                 (run.rc, run.err_text()))
    m = E.parse_manifest(ck, run.out)
    d, parent, worker = m["dir"], m["parent"], m["worker"]
    ck.eq("manifest dir", os.path.realpath(work), d)
    ck.eq("worker's signal (the workload's own check)", 9, m["worker_signal"])

    doc = E.load_run(ck, run)
    ck.eq("top-level exit_code", 0, doc.get("exit_code"))
    E.check_lost_zero(ck, doc)
    procs = E.procs_by_pid(ck, doc)
    files = E.files_by_pid_path(ck, doc)
    if ck.check(parent in procs, "no process record for the parent %d" % parent):
        ck.eq("parent exit_code", 0, procs[parent].get("exit_code"))
        ck.eq("parent ppid (iolens)", run.pid, procs[parent].get("ppid"))
    if ck.check(worker in procs, "no process record for the killed worker %d" % worker):
        w = procs[worker]
        ck.eq("worker ppid", parent, w.get("ppid"))
        ck.eq("worker exit_code (128 + SIGKILL)", 128 + 9, w.get("exit_code"))
        ck.check(w.get("end_ns") is not None, "worker end_ns is null: its exit was not seen")
        E.check_process_sums(ck, doc, worker)

    expected = {}
    for f in m["files"]:
        expected[f["path"]] = f["counters"]
    for path, counters in sorted(expected.items()):
        rec = files.get((worker, path))
        where = "pid %d path %s" % (worker, path)
        if not ck.check(rec is not None, "%s: no file record" % where):
            continue
        for name, val in counters.items():
            E.expect_counter(ck, where, name, val, rec["counters"])
        st = os.stat(path)
        ck.eq("%s dev" % where, st.st_dev, rec.get("dev"))
        ck.eq("%s ino" % where, st.st_ino, rec.get("ino"))
    for (pid, path), rec in sorted(files.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if E.under(path, d) and not (pid == worker and path in expected):
            ck.fail("unexpected record under %s: pid %r path %r counters %s" %
                    (d, pid, path, E.brief(rec.get("counters"))))
    ck.finish()


if __name__ == "__main__":
    main()
