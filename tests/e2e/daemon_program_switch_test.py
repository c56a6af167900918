#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a restarted iolensd that loads another set of optional programs than the one it
continues counts each io_uring O_DIRECT read once.

io_uring_complete counts a whole O_DIRECT request at its CQE when the agent has no
iomap_dio_complete program (bpf/iolens_direct.bpf.h, its .rodata); a resumed agent keeps the
earlier agent's pinned links. So the restart removes the pinned links of optional programs it
does not load, and attaches io_uring_complete afresh when iomap_dio_complete came or went
(agent/loader/loader.cpp). Here: a daemon with `disabled_programs: [iomap_dio_complete]`,
SIGKILLed, restarted without it; then SIGKILLed again and restarted with it. After each start a
job reads a 10,000-byte sparse file with io_uring O_DIRECT (uring_workload direct-eof: 3 rounds of
a 16 KiB read at 0 and one past the end; the hole's read issues no bio, so io_uring retries
the rest every round): the job's record must hold exactly 3 direct reads of 30,000 bytes (not
6: counted at the completion and again at the CQE; not 0), and status must list
iomap_dio_complete attached or not as configured. The file is the same each time: its record
must carry its path after each restart (the kernel sends a file's name once for the node, and a
restarted daemon, which does not inherit the names, has it send them again).
"""
import os
import re
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

DISABLED = "disabled_programs: [iomap_dio_complete]\n"


def job(ck, d, cg, args, work, name):
    # The same file each time: its name, sent once before the restarts, must be sent again
    # after each (a restarted daemon has the kernel forget which names it sent).
    sparse = os.path.join(work, "hole.dat")
    if not os.path.exists(sparse):
        with open(sparse, "wb") as f:
            f.truncate(10000)
    sub = "ps/" + name
    job_id = "cgroup" + cg.rel(sub)
    cg.mkdir(sub)
    d.wait_live(ck, [job_id])
    p = D.run_in_cgroup(cg.abs(sub), [args.uring_workload, sparse, "direct-eof"])
    out, err = p.communicate(timeout=60)
    if p.returncode != 0:
        ck.fatal("%s: uring_workload exited %d: %s" % (name, p.returncode, err.decode()))
    cg.rmdir(sub)
    doc = d.wait_record(ck, job_id, timeout=20)
    if doc is None:
        return
    c = {}
    for f in doc["files"]:
        if f.get("path") == sparse:
            for k, v in f["counters"].items():
                if isinstance(v, int):
                    c[k] = c.get(k, 0) + v
    D.log("%s: %s" % (name, E.brief(c)))
    ck.check(c, "%s: no record of %s by its path (records: %s)" %
             (name, sparse, [f.get("path") for f in doc["files"]]))
    ck.eq("%s: direct_reads" % name, 3, c.get("direct_reads"))
    ck.eq("%s: direct_bytes_read" % name, 30000, c.get("direct_bytes_read"))
    ck.eq("%s: reads (the workload's 6)" % name, 6, c.get("reads"))


def attached(d, name):
    for p in (d.status() or {}).get("programs", []):
        if p.get("name") == name:
            return p.get("attached")
    return None


def main():
    args = D.parse_args(extra=[(("--uring-workload",),
                                {"required": True, "help": "tests/workloads/uring_workload"})])
    D.require_root()
    ck = E.Checker("daemon_program_switch")
    cg = D.Cgroups()
    work = D.tempdir("ps-work")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/ps/*"]}' % cg.prefix, tag="ps",
                 extra_config=DISABLED)
    try:
        d.start(ck)
        ck.eq("first start: iomap_dio_complete attached", False, attached(d, "iomap_dio_complete"))
        job(ck, d, cg, args, work, "without")
        with open(d.config) as f:
            text = f.read()
        for rnd, (keep, what) in enumerate(((False, "with"), (True, "without-again"))):
            d.kill9()
            text = text.replace(DISABLED, "") if not keep else DISABLED + text
            with open(d.config, "w") as f:
                f.write(text)
            st = d.restart(ck)
            ck.check(st.get("restart", {}).get("resumed"), "restart %d did not resume the pins"
                     % rnd)
            ck.eq("restart %d: iomap_dio_complete attached" % rnd, not keep,
                  attached(d, "iomap_dio_complete"))
            ck.check(re.search(r"optional programs attached afresh, the set changed since the "
                               r"earlier agent: iomap_dio_complete \((not )?loaded now\)",
                               d.log()[d.log_start:]),
                     "restart %d: the log does not say the optional programs were attached "
                     "afresh" % rnd)
            job(ck, d, cg, args, work, what)
        rc, _ = d.stop()
        ck.eq("clean stop", 0, rc)
    finally:
        cg.remove_all()
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
