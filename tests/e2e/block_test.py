#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: the block layer per device (docs/counters.md "Block layer (ABI 7)") against known I/O.

Files live on a disk file system (e2e_common.disk_tempdir); the run's `block` entry of that
file system's device must show:
  (a) O_DIRECT read of a pre-written, fsync'ed 32 MiB file in 1 MiB reads:
      32 MiB <= read_bytes <= 33 MiB (the slack: metadata the run may read);
  (b) checkpoint: 64 MiB written with write() then fsync(), in the process:
      64 MiB <= write_bytes <= 72 MiB (the journal is written by jbd2, a kernel thread: not
      charged);
  (c) writeback: 32 MiB written without fsync, then sync(1) run by a traced child: flusher
      kworkers write the pages, charged through the dirtiers map:
      write_bytes >= 32 MiB and writeback_bytes >= 32 MiB, write_bytes <= 40 MiB;
  (d) (a) and (b) again while an untraced process outside iolens reads and writes another
      64 MiB with O_DIRECT in a loop: the same bounds (the neighbour is not charged);
  (e) flushes: a traced process fsyncs a loop device of the test's (over a file in the temp
      dir; the disk itself may not be opened here) N times; each fsync of a block device sends
      one empty write bio with a cache flush (blkdev_issue_flush) from the caller: flush_bios =
      N and write_bios = N with write_bytes 0 when the device has a volatile write cache
      ("write back" in its queue/write_cache), and 0 when it has none (the kernel drops the
      flush before the block layer's queue tracepoint).
  (f) a quiet device: a loop device of the test's, which nothing else uses, written and read
      with O_DIRECT (8 x 1 MiB each way) by a traced process: read/write bytes and requests are
      exactly the device's own /sys/block/loopN/stat deltas (sectors x 512, I/Os completed).
  In (a) nothing is written: write_bios, writeback_bios and flush_bios are 0. In (c) the
  flushers' bios are writeback bios, each of at least one page: 1 <= writeback_bios <=
  writeback_bytes / 4096, and writeback_bios <= write_bios.
Also: requests were counted, and as many device latencies as requests, less those the run
counts in lost.block_untimed (a completion the kernel did not run block_rq_complete for: seen
on this VM's 6.18 kernel for completions in some softirq contexts).
"""
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

MiB = 1 << 20
PY = "/usr/bin/python3"

# The workloads, run by `python3 -c SCRIPT MODE PATH [MiB]`.
WORKLOAD = r"""
import mmap, os, sys
mode, path = sys.argv[1], sys.argv[2]
buf = mmap.mmap(-1, 1 << 20)  # page aligned, as O_DIRECT wants
if mode == "direct_read":
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    while os.readv(fd, [buf]) > 0:
        pass
    os.close(fd)
elif mode in ("write_fsync", "write_nosync"):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    chunk = b"x" * (1 << 20)
    for _ in range(int(sys.argv[3])):
        os.write(fd, chunk)
    if mode == "write_fsync":
        os.fsync(fd)
    os.close(fd)
elif mode == "direct_rw":
    # MiB x 1 MiB O_DIRECT writes, then as many reads, of a raw block device
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    buf.write(b"r" * (1 << 20))
    for i in range(int(sys.argv[3])):
        os.pwritev(fd, [buf], i << 20)
    for i in range(int(sys.argv[3])):
        os.preadv(fd, [buf], i << 20)
    os.close(fd)
elif mode == "neighbour":
    # O_DIRECT writes then reads of a 64 MiB file, over and over, until killed.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    buf.write(b"n" * (1 << 20))
    while True:
        for i in range(64):
            os.pwritev(fd, [buf], i << 20)
        for i in range(64):
            os.preadv(fd, [buf], i << 20)
"""


def device_of(path):
    st = os.stat(path)
    return "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))


def block_entry(ck, doc, dev, what):
    entries = doc.get("block")
    if not ck.check(isinstance(entries, list), "%s: no top-level block array" % what):
        return None
    for e in entries:
        if e.get("dev") == dev:
            return e
    ck.fail("%s: no block entry for device %s (entries: %s)" %
            (what, dev, [x.get("dev") for x in entries]))
    return None


def run_case(ck, args, tmp, name, cmd):
    out_json = os.path.join(tmp, name + ".json")
    run = E.run_iolens(args.iolens, cmd, json_path=out_json, timeout=120)
    if run.rc != 0:
        ck.fatal("%s: iolens run exited %d; stderr:\n%s" % (name, run.rc, run.err_text()))
    E.load_run(ck, run)
    # Nothing else lost: block_untimed is checked against the requests (check_requests), and
    # program_misses (a completion nested in another on one CPU) is the kernel's to decide.
    for k, v in (run.doc.get("lost") or {}).items():
        if k not in ("block_untimed", "program_misses"):
            ck.eq("%s: lost.%s" % (name, k), 0, v)
    text = run.err_text()
    # the summary's block line of each device: its name and the record's request counts
    for e in (run.doc or {}).get("block") or []:
        c = e.get("counters", {})
        want = "block  %s: read " % e.get("device")
        lines = [ln for ln in text.splitlines() if ln.startswith(want)]
        if not ck.eq("%s: summary lines for block device %s" % (name, e.get("device")), 1,
                     len(lines)):
            continue
        m = re.search(r": read [^,;]* in ([\d,]+) requests, write [^,;]* in ([\d,]+) requests",
                      lines[0])
        if not ck.check(m, "%s: the block line is not 'read X in N requests, write Y in M "
                        "requests': %r" % (name, lines[0])):
            continue
        for op, shown in (("read", m.group(1)), ("write", m.group(2))):
            ck.eq("%s: %s %s requests in the summary" % (name, e.get("device"), op),
                  "{:,}".format(c.get(op + "_reqs", -1)), shown)
    return run.doc


def in_range(ck, what, value, lo, hi):
    ck.check(lo <= value <= hi, "%s = %d (%.2f MiB), expected [%.2f, %.2f] MiB" %
             (what, value, value / MiB, lo / MiB, hi / MiB))


def check_requests(ck, what, c, op, untimed):
    """Every request counted once per size bucket and, unless the run counted it as untimed
    (lost.block_untimed: its completion never reached the program, or it was still in flight
    at the end), once per device latency bucket. The run's only device here is this one."""
    reqs = c[op + "_reqs"]
    timed = sum(v for k, v in c.items() if k.startswith("dev_%s_" % op) and "sum" not in k)
    sizes = sum(v for k, v in c.items() if k.startswith("size_%s_" % op))
    ck.check(reqs > 0, "%s: no %s requests counted" % (what, op))
    ck.eq("%s: %s requests per size bucket" % (what, op), reqs, sizes)
    ck.check(timed <= reqs <= timed + untimed,
             "%s: %d %s requests, %d with a device latency, %d untimed (lost.block_untimed)"
             % (what, reqs, op, timed, untimed))
    if untimed:
        E.log("%s: %d request(s) untimed, counted in lost.block_untimed" % (what, untimed))
    ck.check(c["dev_%s_sum_ns" % op] > 0, "%s: no %s device time" % (what, op))


def untimed_of(ck, doc, what):
    lost = doc.get("lost", {})
    ck.check("block_untimed" in lost, "%s: lost has no block_untimed: %s" % (what, lost))
    ck.check("program_misses" in lost, "%s: lost has no program_misses: %s" % (what, lost))
    return lost.get("block_untimed", 0)


def direct_read(ck, args, tmp, src, dev, tag):
    what = "(%s) O_DIRECT read" % tag
    doc = run_case(ck, args, tmp, "read_" + tag, [PY, "-c", WORKLOAD, "direct_read", src])
    e = block_entry(ck, doc, dev, what)
    if e:
        c = e["counters"]
        E.log("%s: %s" % (what, {k: v for k, v in c.items() if v and "_le_" not in k}))
        in_range(ck, what + " read_bytes", c["read_bytes"], 32 * MiB, 33 * MiB)
        ck.check(c["read_reqs"] >= 32, "%s: %d read requests, expected >= 32" %
                 (what, c["read_reqs"]))
        check_requests(ck, what, c, "read", untimed_of(ck, doc, what))
        for k in ("write_bios", "writeback_bios", "flush_bios"):
            ck.eq("%s: %s (the run writes nothing)" % (what, k), 0, c.get(k))


def write_fsync(ck, args, tmp, dev, tag):
    what = "(%s) write+fsync" % tag
    dst = os.path.join(tmp, "ckpt_" + tag)
    doc = run_case(ck, args, tmp, "ckpt_" + tag, [PY, "-c", WORKLOAD, "write_fsync", dst, "64"])
    e = block_entry(ck, doc, dev, what)
    if e:
        c = e["counters"]
        E.log("%s: %s" % (what, {k: v for k, v in c.items() if v and "_le_" not in k}))
        in_range(ck, what + " write_bytes", c["write_bytes"], 64 * MiB, 72 * MiB)
        check_requests(ck, what, c, "write", untimed_of(ck, doc, what))
    os.unlink(dst)


def write_sync(ck, args, tmp, dev):
    what = "(c) write, then sync by a child"
    dst = os.path.join(tmp, "wb")
    script = "%s -c '%s' write_nosync %s 32 && sync" % (PY, WORKLOAD.replace("'", "'\\''"), dst)
    doc = run_case(ck, args, tmp, "writeback", ["/bin/sh", "-c", script])
    e = block_entry(ck, doc, dev, what)
    if e:
        c = e["counters"]
        E.log("%s: %s" % (what, {k: v for k, v in c.items() if v and "_le_" not in k}))
        in_range(ck, what + " write_bytes", c["write_bytes"], 32 * MiB, 40 * MiB)
        in_range(ck, what + " writeback_bytes", c["writeback_bytes"], 32 * MiB, 40 * MiB)
        ck.check(1 <= c["writeback_bios"] <= c["writeback_bytes"] // 4096,
                 "%s: %d writeback bios for %d bytes: expected at least 1, at most one a page" %
                 (what, c["writeback_bios"], c["writeback_bytes"]))
        ck.check(c["writeback_bios"] <= c["write_bios"],
                 "%s: %d writeback bios but %d write bios (writeback bios are write bios)" %
                 (what, c["writeback_bios"], c["write_bios"]))
    # One file dirtied: its dirtier was remembered (lost.dirtiers counts those that were not).
    ck.eq(what + ": lost.dirtiers", 0, doc.get("lost", {}).get("dirtiers"))
    os.unlink(dst)


def flushes(ck, args, tmp):
    what = "(e) fsync of a block device"
    n = 5
    loop, dev = E.loop_device(tmp, "flush", 16 * MiB)
    with open("/sys/block/%s/queue/write_cache" % os.path.basename(loop)) as f:
        cache = f.read().strip()
    want = n if cache == "write back" else 0
    E.log("%s: %s, write cache %r: %d flush bios expected" % (what, loop, cache, want))
    script = ("import os\nfd = os.open(%r, os.O_RDONLY)\nfor _ in range(%d):\n"
              "    os.fsync(fd)\nos.close(fd)\n" % (loop, n))
    doc = run_case(ck, args, tmp, "flush", [PY, "-c", script])
    got = {"flush_bios": 0, "write_bios": 0, "write_bytes": 0}
    for e in doc.get("block") or []:
        if e.get("dev") == dev:
            got = {k: e["counters"].get(k) for k in got}
    ck.eq(what, {"flush_bios": want, "write_bios": want, "write_bytes": 0}, got)


def device_stat(loop):
    """(read I/Os, read sectors, write I/Os, write sectors) completed (Documentation/block/
    stat.rst)."""
    with open("/sys/block/%s/stat" % os.path.basename(loop)) as f:
        v = [int(x) for x in f.read().split()]
    return v[0], v[2], v[4], v[6]


def quiet_device(ck, args, tmp):
    what = "(f) a quiet loop device"
    loop, dev = E.loop_device(tmp, "quiet", 8 * MiB)
    before = device_stat(loop)
    doc = run_case(ck, args, tmp, "quiet", [PY, "-c", WORKLOAD, "direct_rw", loop, "8"])
    after = device_stat(loop)
    d = [a - b for a, b in zip(after, before)]
    E.log("%s: %s: stat deltas %s" % (what, loop, d))
    ck.eq(what + ": the device's own bytes (8 MiB each way)", [8 * MiB, 8 * MiB],
          [d[1] * 512, d[3] * 512])
    e = block_entry(ck, doc, dev, what)
    if e:
        c = e["counters"]
        ck.eq(what + ": read/write bytes and requests against the device's stat",
              {"read_bytes": d[1] * 512, "read_reqs": d[0], "write_bytes": d[3] * 512,
               "write_reqs": d[2]},
              {k: c.get(k) for k in ("read_bytes", "read_reqs", "write_bytes", "write_reqs")})


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("block")
    tmp = E.disk_tempdir("block")
    dev = device_of(tmp)
    E.log("temp dir %s on device %s" % (tmp, dev))

    src = os.path.join(tmp, "data32")
    with open(src, "wb") as f:
        f.write(os.urandom(32 * MiB))
        f.flush()
        os.fsync(f.fileno())
    os.sync()  # nothing of ours left dirty for the runs to write

    direct_read(ck, args, tmp, src, dev, "a")
    write_fsync(ck, args, tmp, dev, "b")
    write_sync(ck, args, tmp, dev)
    flushes(ck, args, tmp)
    quiet_device(ck, args, tmp)

    # (d) the same with an untraced neighbour doing O_DIRECT I/O on the same device.
    noise = subprocess.Popen([PY, "-c", WORKLOAD, "neighbour", os.path.join(tmp, "noise")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        ck.check(noise.poll() is None, "(d) the neighbour died at once")
        direct_read(ck, args, tmp, src, dev, "d-read")
        write_fsync(ck, args, tmp, dev, "d-ckpt")
        ck.check(noise.poll() is None, "(d) the neighbour was not running throughout")
    finally:
        noise.kill()
        noise.wait()
    ck.finish()


if __name__ == "__main__":
    main()
