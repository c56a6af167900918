#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd's block layer per job and device (iolens_block_*, docs/metrics.md).

One daemon, a cgroup rule P/blk/* (P = /iolens-e2e-<pid>), two jobs at once on the device of a
disk temp dir (stat(2) gives its MAJ:MIN):
  A  P/blk/a: O_DIRECT reads of a pre-written, fsync'ed 32 MiB file in 1 MiB reads;
  B  P/blk/b: 16 MiB written with write() then fsync().
Each prints "done" and waits on stdin, so its job stays live. Then /metrics must show, within
15 s: A read 32..33 MiB and wrote < 1 MiB; B wrote 16..24 MiB (the journal is jbd2's: no job's)
and read < 1 MiB; each has requests. After both exit (their records are final: added once to
the job and deleted from the kernel), the values are the same again (not added twice).
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

MiB = 1 << 20
PY = "/usr/bin/python3"
WORKLOAD = r"""
import mmap, os, sys
mode, path = sys.argv[1], sys.argv[2]
if mode == "read":
    buf = mmap.mmap(-1, 1 << 20)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    while os.readv(fd, [buf]) > 0:
        pass
else:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(int(sys.argv[3])):
        os.write(fd, b"w" * (1 << 20))
    os.fsync(fd)
os.close(fd)
print("done", flush=True)
sys.stdin.read()
"""
SERIES = re.compile(r'^(iolens_block_[a-z_]+)\{([^}]*)\} (\S+)$')


def scrape(d):
    m = (d.status() or {}).get("metrics", {})
    if not m.get("ports"):
        return None
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % m["ports"][0], timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        s = SERIES.match(line)
        if s:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', s.group(2)))
            key = (s.group(1), labels.get("job_id"), labels.get("device"), labels.get("op"))
            out[key] = float(s.group(3))
    return out


def values(d, jobs, dev):
    m = scrape(d) or {}
    v = {}
    for tag, jid in jobs.items():
        for name in ("iolens_block_bytes_total", "iolens_block_requests_total"):
            for op in ("read", "write"):
                v[(tag, name, op)] = m.get((name, jid, dev, op), 0)
    return v


def expected(v):
    """Whether the job values are within bounds (bytes) and have requests."""
    ok = (32 * MiB <= v[("a", "iolens_block_bytes_total", "read")] <= 33 * MiB and
          v[("a", "iolens_block_bytes_total", "write")] < MiB and
          16 * MiB <= v[("b", "iolens_block_bytes_total", "write")] <= 24 * MiB and
          v[("b", "iolens_block_bytes_total", "read")] < MiB)
    return ok and v[("a", "iolens_block_requests_total", "read")] >= 32 and \
        v[("b", "iolens_block_requests_total", "write")] >= 4


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("daemon_block")
    cg = D.Cgroups()
    tmp = E.disk_tempdir("dblock")
    st = os.stat(tmp)
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    src = os.path.join(tmp, "data32")
    with open(src, "wb") as f:
        f.write(os.urandom(32 * MiB))
        f.flush()
        os.fsync(f.fileno())
    os.sync()

    cg.mkdir("blk/a")
    cg.mkdir("blk/b")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/blk/*"]}' % cg.prefix, tag="block")
    d.start(ck)
    jobs = {"a": "cgroup" + cg.rel("blk/a"), "b": "cgroup" + cg.rel("blk/b")}
    d.wait_live(ck, list(jobs.values()))
    pa = D.run_in_cgroup(cg.abs("blk/a"), [PY, "-c", WORKLOAD, "read", src],
                         stdin=subprocess.PIPE)
    pb = D.run_in_cgroup(cg.abs("blk/b"), [PY, "-c", WORKLOAD, "write",
                                           os.path.join(tmp, "ckpt"), "16"],
                         stdin=subprocess.PIPE)
    for p, tag in ((pa, "a"), (pb, "b")):
        line = p.stdout.readline().decode().strip()
        ck.eq("job %s workload" % tag, "done", line)

    live = D.wait_for("block metrics of the live jobs", lambda: expected(values(d, jobs, dev)), 15)
    v = values(d, jobs, dev)
    D.log("live: %s" % v)
    ck.check(live, "live jobs' block metrics out of bounds on %s: %s" % (dev, v))

    for p in (pa, pb):
        p.stdin.close()
        p.wait(timeout=30)
    # The exits reach the daemon, which adds the final records once and deletes them: two
    # completed drains after the exits (the first may have begun before the exit events).
    base = d.status()["drain"]["count"]
    ck.check(D.wait_for("two drains after the exits",
                        lambda: d.status()["drain"]["count"] >= base + 2, 15),
             "iolensd did not complete two drains within 15 s")
    v2 = values(d, jobs, dev)
    D.log("after exit: %s" % v2)
    ck.check(expected(v2), "block metrics after the exits out of bounds: %s" % v2)
    for k in v:
        ck.check(v2[k] >= v[k] and v2[k] - v[k] < MiB,
                 "%s: %d live, %d after the exit (counted twice or lost?)" % (k, v[k], v2[k]))
    # The exited processes' records left the kernel's pinned map (it would fill otherwise).
    pin = os.path.join(d.pin_dir, "blocks")
    if ck.check(os.path.exists(pin), "no pinned blocks map at %s (pins: %s)" % (pin, d.pins())):
        dump = subprocess.run(["bpftool", "-j", "map", "dump", "pinned", pin],
                              capture_output=True, timeout=30)
        left = [e for e in json.loads(dump.stdout or b"[]")
                if e.get("key", {}).get("tgid") in (pa.pid, pb.pid)]
        ck.eq("records of the exited workloads still in the kernel", [], left)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
