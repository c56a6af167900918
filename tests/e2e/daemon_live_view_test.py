#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a live job's view follows its records while the drain skips the unchanged ones.

iolensd's drain reads every live record in the kernel map at each round and hands on only those
that changed since it last did (core::UnchangedRecords): a record read again unchanged costs a
fingerprint and a look-up. This test proves the skip happens and loses no change.

Rule: a cgroup rule P/lv/*. In P/lv/a a Python writer opens one file and keeps it open (its
record stays in the kernel: a file open is never taken from the map), writing in three steps,
each when the test says so: 1000 bytes, then 2000 more, then the same 2000-byte block again over
the same offsets (pwrite at 1000: the byte count and the bytes written change, the file's size
does not). Ground truth: the writer's own tally, and the file's size.

Checks, for each step: `iolens job --json` of the live job shows exactly the bytes written so
far on that file within 10 s; between steps, the drain rounds find the records unchanged (status
`drain.records_unchanged` grows while the writer waits) and the view stays exact. At the end the
closed record has the three writes' bytes, 3 writes, and the file its 3000 bytes.
"""
import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

WRITER = r'''
import json, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
done = 0
def say(**kw):
    print(json.dumps(kw), flush=True)
say(step=0, written=0)
for step, (off, n) in enumerate([(0, 1000), (1000, 2000), (1000, 2000)], 1):
    sys.stdin.readline()
    done += os.pwrite(fd, b"y" * n, off)
    say(step=step, written=done)
sys.stdin.readline()
os.close(fd)
say(step="closed", written=done)
'''


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("daemon_live_view")
    cg = D.Cgroups()
    cg.mkdir("lv/a")
    work = D.tempdir("lv-work")
    path = os.path.join(work, "held.bin")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/lv/*"]}' % cg.rel(), tag="lv",
                 extra_config="syscall_hooks: always\n", iolens=args.iolens)
    d.start(ck)
    jid = "cgroup" + cg.rel("lv/a")
    p = D.run_in_cgroup(cg.abs("lv/a"), ["/usr/bin/python3", "-c", WRITER, path],
                        stdin=subprocess.PIPE)
    D.Cleanup.register("kill writer", lambda: p.poll() is None and p.kill())
    D.read_json_line(ck, p, "writer (opened)")

    def view_bytes():
        r = d.cli("job", jid, "--json")
        if r.returncode != 0:
            return None
        files = [f for f in json.loads(r.stdout).get("files", []) if f.get("path") == path]
        return files[0]["counters"].get("bytes_written") if len(files) == 1 else None

    def step(n):
        p.stdin.write(b"go\n")
        p.stdin.flush()
        said = D.read_json_line(ck, p, "writer step %s" % n)
        return said["written"] if said else None

    for n in (1, 2, 3):
        want = step(n)
        if want is None:
            break
        got = D.wait_for("the live view to show %d bytes written" % want,
                         lambda: view_bytes() == want, 10)
        ck.check(got, "step %d: `iolens job %s` shows %r bytes written on %s, the writer wrote "
                 "%d" % (n, jid, view_bytes(), path, want))
        # The writer waits: the next rounds read its record unchanged, and skip it.
        before = d.status()["drain"]
        ck.check(D.wait_for("drain rounds that find records unchanged",
                            lambda: d.status()["drain"]["records_unchanged"] >
                            before["records_unchanged"] + 1, 10),
                 "step %d: status drain.records_unchanged stayed at %d (read %d): the drain "
                 "hands every record on at every round" %
                 (n, before["records_unchanged"], before["records_read"]))
        ck.eq("step %d: the live view after unchanged rounds" % n, want, view_bytes())
    last = step("close")
    p.stdin.close()
    p.stdin = None
    ck.eq("writer exit code", 0, p.wait(timeout=30))
    cg.rmdir("lv/a")  # the job closes
    doc = d.wait_record(ck, jid)
    if doc is not None:
        files = [f for f in doc.get("files", []) if f.get("path") == path]
        if ck.eq("closed record: records of %s" % path, 1, len(files)):
            c = files[0]["counters"]
            ck.eq("closed record: bytes written", last, c.get("bytes_written"))
            ck.eq("closed record: writes", 3, c.get("writes"))
        D.check_lost_zero(ck, doc, "closed record")
    ck.eq("the file's size", 3000, os.path.getsize(path))
    ck.eq("bytes the writer wrote", 5000, last)
    d.stop()
    ck.finish()


if __name__ == "__main__":
    main()
