#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolens' per-process totals against the kernel's own /proc/PID/io.

tests/workloads/procio_workload.c forks a child that does file I/O (read/write/pread/pwrite/
readv/writev/preadv/pwritev/preadv2/pwritev2, 1 byte to 1 MiB, reads at and past EOF) plus one
read and one write on each other descriptor kind (char: /dev/null, /dev/zero; pipe; socket;
anon: eventfd), then reads /proc/self/io with ONE read() and prints one JSON line with ONE
write() to stdout (a pipe). It never execs, so its I/O accounting starts at 0 at fork and holds
exactly its own read/write syscalls (an exec'd process would also count the kernel_read() calls
of execve itself, invisible to a syscall tracer: see procio_workload.c).

The arithmetic, for the child's process record P (iolens) and the snapshot S (kernel):
  - S is taken inside the /proc read, before that read is accounted (vfs_read accounts after
    ->read_iter returns), so S counts every read/write syscall of the child except that read and
    the stdout write that follows it; iolens counts them all:
      reads:  P.counters.reads + sum(P.other_io[k].reads)  == S.syscr + 1
      bytes:  P.counters.bytes_read + sum(P.other_io[k].bytes_read) == S.rchar + proc_read_len
      writes: P.counters.writes + sum(P.other_io[k].writes) == S.syscw + 1
      bytes:  P.counters.bytes_written + sum(P.other_io[k].bytes_written)
                                                          == S.wchar + len(stdout line)
    (`counters` holds regular files, among them /proc/PID/io itself; other_io the rest.)
  - per record: a.dat and b.dat match the workload's own tallies (opens, reads, writes, bytes);
    /proc/PID/io has opens 1, reads 1, bytes_read proc_read_len; other_io char/socket/anon match
    the tallies and pipe = the tally + the stdout write; the child has no other file record.
The workload itself checks that its tallies equal the snapshot when run standalone.
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

KINDS = ("char", "pipe", "socket", "anon")
FIELDS = ("reads", "writes", "bytes_read", "bytes_written")


def main():
    args = E.parse_args(workload=True)
    E.require_root()
    ck = E.Checker("proc_io")
    tmp = E.disk_tempdir("procio")
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    out_json = os.path.join(tmp, "run.json")

    run = E.run_iolens(args.iolens, [args.workload, work], json_path=out_json, timeout=100)
    if run.rc != 0:
        ck.fatal("iolens run exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    line = run.out
    try:
        w = json.loads(line.decode())
    except ValueError as e:
        ck.fatal("workload output is not one JSON line: %s: %r" % (e, line))
    line_len = len(line)
    E.log("kernel snapshot of pid %d: syscr %d syscw %d rchar %d wchar %d; /proc read %d bytes; "
          "stdout line %d bytes" % (w["pid"], w["syscr"], w["syscw"], w["rchar"], w["wchar"],
                                    w["proc_read_len"], line_len))
    # the workload's own consistency: its tallies are what the kernel counted before the snapshot
    tallies = list(w["files"].values()) + list(w["other_io"].values())
    for k, f in (("syscr", "reads"), ("syscw", "writes"), ("rchar", "bytes_read"),
                 ("wchar", "bytes_written")):
        ck.eq("workload self-check: %s == sum of its own %s" % (k, f), w[k],
              sum(t[f] for t in tallies))

    doc = E.load_run(ck, run)
    ck.eq("top-level exit_code", 0, doc.get("exit_code"))
    E.check_lost_zero(ck, doc)
    procs = E.procs_by_pid(ck, doc)
    files = E.files_by_pid_path(ck, doc)
    pid = w["pid"]
    if pid not in procs:
        ck.fatal("no process record for the child pid %d" % pid)
    p = procs[pid]
    root = p.get("ppid")
    ck.check(root in procs and procs[root].get("ppid") == run.pid,
             "child %d's ppid %r is not the traced root (whose ppid must be iolens %d)" %
             (pid, root, run.pid))
    ck.eq("child exit_code", 0, p.get("exit_code"))
    pc = p.get("counters", {})
    oio = p.get("other_io", {})
    if not isinstance(oio, dict):
        ck.fatal("other_io of pid %d is not an object: %r" % (pid, oio))

    def total(field):
        return pc.get(field, 0) + sum(v.get(field, 0) for v in oio.values())

    ck.eq("pid %d reads: counters.reads %d + other_io reads %s == syscr + 1 (the /proc read)" %
          (pid, pc.get("reads", 0), {k: v.get("reads") for k, v in oio.items()}),
          w["syscr"] + 1, total("reads"))
    ck.eq("pid %d bytes read: counters + other_io == rchar + proc_read_len" % pid,
          w["rchar"] + w["proc_read_len"], total("bytes_read"))
    ck.eq("pid %d writes: counters.writes %d + other_io writes %s == syscw + 1 (the stdout "
          "write)" % (pid, pc.get("writes", 0), {k: v.get("writes") for k, v in oio.items()}),
          w["syscw"] + 1, total("writes"))
    ck.eq("pid %d bytes written: counters + other_io == wchar + len(stdout line)" % pid,
          w["wchar"] + line_len, total("bytes_written"))

    # per record
    proc_io = "/proc/%d/io" % pid
    expected_paths = set(w["files"]) | {proc_io}
    for path, t in w["files"].items():
        rec = files.get((pid, path))
        if not ck.check(rec is not None, "pid %d: no file record for %s" % (pid, path)):
            continue
        for f in ("opens",) + FIELDS:
            E.expect_counter(ck, "pid %d path %s" % (pid, path), f, t[f], rec["counters"])
    rec = files.get((pid, proc_io))
    if ck.check(rec is not None, "pid %d: no file record for %s (it is a regular file)" %
                (pid, proc_io)):
        for f, v in (("opens", 1), ("reads", 1), ("bytes_read", w["proc_read_len"]),
                     ("writes", 0)):
            E.expect_counter(ck, "pid %d path %s" % (pid, proc_io), f, v, rec["counters"])
    for (q, path) in sorted(k for k in files if k[0] == pid):
        ck.check(path in expected_paths,
                 "pid %d: unexpected file record %r (counters %s)" %
                 (pid, path, E.brief(files[(pid, path)].get("counters"))))
    for kind in KINDS:
        t = dict(w["other_io"][kind])
        if kind == "pipe":
            t["writes"] += 1
            t["bytes_written"] += line_len
        got = oio.get(kind)
        if not ck.check(got is not None, "pid %d: no other_io[%r] (expected %s)" %
                        (pid, kind, {f: t[f] for f in FIELDS})):
            continue
        for f in FIELDS:
            ck.eq("pid %d other_io[%s].%s" % (pid, kind, f), t[f], got.get(f))
    for kind in oio:
        ck.check(kind in KINDS, "pid %d: unexpected other_io kind %r: %s" % (pid, kind, oio[kind]))
    ck.finish()


if __name__ == "__main__":
    main()
