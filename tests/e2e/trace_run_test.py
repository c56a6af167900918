#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `iolens run --trace` and `iolens convert`, against the workload's own timed manifest.

1. `iolens run --trace T --json J -- trace_workload seq DIR`: the workload makes one of each
   traced call (open, write, pwrite, lseek, read, pread, fstat, mmap, fsync, fdatasync,
   ftruncate, dup, close, a read of a bad fd, stat, rename, unlink) and prints each with the
   CLOCK_MONOTONIC time just before and after it. Between two of them it makes no system call,
   so the trace's records of its pid that start after its first call and end before its last
   are exactly its calls: same order, operation, descriptor, offset, bytes asked, result, and
   each record's [start, end] inside the manifest's [t0, t1]. Nothing lost. The run's time
   counters of data.bin against the same brackets (check_time_counters: totals within the sums,
   longest calls within the longest, timestamp distances within the brackets' distances).
2. convert --to jsonl: the records above, read back (round trip: native -> JSON lines).
   convert --to perfetto: the trace event format: every event has the keys its "ph" needs,
   "X" events' ts/dur are the records' times in microseconds from baseTimeNanoseconds, ts
   never decreases on a (pid, tid) track, every pid and tid has its name event.
   convert --to darshan: the header, the POSIX record of data.bin equals the same run's JSON
   record counters, and the DXT_POSIX segments of data.bin are the workload's reads and writes
   (offset, length), writes first, in order; regions inflate with zlib.
   `iolens run --darshan` beside `--trace`: the run's own log passes the same checks (DXT too).
   convert --to json: the POSIX counters replayed from the trace equal the run's own record.
3. Loss path: `--trace-ring-size 4K` and 200,000 one-byte preads: the trailer's counts add up
   (produced = records in the file + ring_full), ring_full > 0, produced = 200,000 + the calls
   the same workload makes with 0 preads (counted by `strace -f` on a run of its own: the system
   calls the trace records, docs/trace-format.md), the run's JSON record shows
   lost.trace_records = ring_full, and the workload's preads in the file are at most 200,000
   and at least 200,000 - ring_full.
   `--trace-max-size 64K` and 20,000 preads: produced = 20,000 + the same other calls, no
   ring loss, size_limit = produced - the records in the file = lost.trace_size_limit, and the
   file passes 64 KiB by one OPS block at most (every OPS block begins below it).
4. Damage: the trace cut in the middle of a block: convert fails with the byte offset; with
   --partial it converts the records before the damage. A foreign file: one clear error.
"""
import json
import os
import struct
import subprocess
import sys

sys.dont_write_bytecode = True
import darshan_test as DT  # noqa: E402  (its independent Darshan reader pieces)
import e2e_common as E  # noqa: E402

KEYS = ("op", "fd", "offset", "ret")

# The system calls the kernel programs trace (bpf/iolens_syscalls.h, iolens_syscall_wanted):
# each makes one trace record, except an anonymous mmap, an fcntl that is not F_DUPFD*, an
# unlinkat of a directory (none), and the copies (two; this test's workload makes none).
TRACED_CALLS = ("read", "write", "open", "close", "stat", "fstat", "lstat", "lseek", "mmap",
                "pread64", "pwrite64", "readv", "writev", "dup", "dup2", "sendfile", "fcntl",
                "fsync", "fdatasync", "ftruncate", "rename", "creat", "unlink", "openat",
                "splice", "newfstatat", "unlinkat", "renameat", "dup3", "preadv", "pwritev",
                "renameat2", "copy_file_range", "preadv2", "pwritev2", "statx", "openat2")


def convert(ck, iolens, trace, to, out, extra=()):
    p = subprocess.run([iolens, "convert", trace, "--to", to, "-o", out] + list(extra),
                       capture_output=True, timeout=120)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def strace_traced_calls(ck, argv, out):
    """How many trace records the command's own system calls make, counted by `strace -f` on
    a run of its own (independent of iolens)."""
    r = subprocess.run(["strace", "-f", "-qq", "-o", out, "-e",
                        "trace=" + ",".join(TRACED_CALLS), "--"] + list(argv),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        ck.fatal("strace of %s: exit %d: %s" % (argv, r.returncode, r.stderr.strip()))
    n = 0
    with open(out) as f:
        for line in f:
            body = line.split(None, 1)[1] if line[:1].isdigit() else line
            name = body.split("(", 1)[0]
            if name not in TRACED_CALLS:
                ck.fail("strace: an unexpected line: %r" % line)
                continue
            if name in ("sendfile", "splice", "copy_file_range"):
                ck.fail("strace: the workload made a copy (%r): two records, not counted here"
                        % line)
            elif name == "mmap" and "MAP_ANONYMOUS" in body:
                continue
            elif name == "fcntl" and "F_DUPFD" not in body:
                continue
            elif name == "unlinkat" and "AT_REMOVEDIR" in body:
                continue
            n += 1
    return n


def jsonl(path):
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().decode("utf-8").splitlines()]


def expected_ops(man):
    """The manifest as the trace should show it."""
    out = []
    for m in man["ops"]:
        e = {"op": m["op"], "fd": m["fd"], "ret": m["ret"], "t0": m["t0"], "t1": m["t1"]}
        if m["op"] in ("read", "write"):
            e["offset"] = m["offset"] if m["ret"] >= 0 else None
            e["requested"] = m["size"]
        elif m["op"] == "seek":
            e["offset"] = m["ret"]  # lseek: the resulting position
        if m["op"] in ("dup",):
            e["fd"] = m["ret"]      # the record's fd is the new descriptor
        out.append(e)
    return out


def check_seq_ops(ck, lines, man):
    ops = [x for x in lines if x["type"] == "op" and x["pid"] == man["pid"]]
    t_first, t_last = man["ops"][0]["t0"], man["ops"][-1]["t1"]
    mine = [x for x in ops if x["ts_ns"] >= t_first and x["ts_ns"] + x["dur_ns"] <= t_last]
    exp = expected_ops(man)
    ck.eq("records of the workload within its sequence", len(exp), len(mine))
    for i, (e, g) in enumerate(zip(exp, mine)):
        where = "call %d (%s)" % (i, e["op"])
        ck.eq(where + " op", e["op"], g["op"])
        if e["op"] in ("open", "dup"):
            ck.eq(where + " fd", e["ret"], g["fd"])
        elif e["fd"] >= 0:
            ck.eq(where + " fd", e["fd"], g["fd"])
        ck.eq(where + " ret", e["ret"], g["ret"])
        if "offset" in e and e["offset"] is not None:
            ck.eq(where + " offset", e["offset"], g["offset"])
        if "requested" in e:
            ck.eq(where + " bytes asked", e["requested"], g.get("requested", g.get("arg")))
        ck.check(e["t0"] <= g["ts_ns"] and g["ts_ns"] + g["dur_ns"] <= e["t1"],
                 "%s: record [%d, %d] outside the workload's [%d, %d]" %
                 (where, g["ts_ns"], g["ts_ns"] + g["dur_ns"], e["t0"], e["t1"]))
        if e["op"] not in ("stat", "rename", "unlink") or e["fd"] >= 0:
            if e["fd"] == 1000:
                ck.check("path" not in g or g.get("path") in ("", None) or g["flags"] & 2,
                         "%s: a bad descriptor names no file: %r" % (where, g))
            else:
                ck.eq(where + " path", man["path"], g.get("path"))
    return mine


def check_perfetto(ck, doc, lines):
    evs = doc.get("traceEvents")
    ck.check(isinstance(evs, list) and evs, "no traceEvents list")
    base = doc.get("baseTimeNanoseconds", 0)
    need = {"X": ("name", "ts", "dur", "pid", "tid"), "M": ("name", "pid", "args"),
            "C": ("name", "ts", "pid", "args"), "i": ("name", "ts"), "I": ("name", "ts")}
    last = {}
    names = set()
    xs = []
    for ev in evs:
        ph = ev.get("ph")
        ck.check(ph in need, "event with unknown ph %r" % ev)
        for k in need.get(ph, ()):
            ck.check(k in ev, "a %r event without %r: %r" % (ph, k, ev))
        if ph == "M":
            names.add((ev.get("name"), ev.get("pid"), ev.get("tid")))
        if ph == "X":
            xs.append(ev)
            track = (ev["pid"], ev["tid"])
            ck.check(ev["ts"] >= last.get(track, float("-inf")),
                     "ts decreases on track %s: %r" % (track, ev))
            last[track] = ev["ts"]
    ops = [x for x in lines if x["type"] == "op"]
    ck.eq("one X event per record", len(ops), len(xs))
    # Every record's start, in µs from the wall-clock base, is an X event's ts (1 ns rounding).
    xs_ts = sorted((ev["pid"], ev["tid"], ev["ts"], ev["dur"]) for ev in xs)
    exp_ts = sorted((x["pid"], x["tid"], (x["ts_wall_ns"] - base) / 1000.0, x["dur_ns"] / 1000.0)
                    for x in ops)
    bad = [(a, b) for a, b in zip(xs_ts, exp_ts)
           if a[:2] != b[:2] or abs(a[2] - b[2]) > 0.002 or abs(a[3] - b[3]) > 0.002]
    ck.check(not bad, "X events' ts/dur differ from the records' times: %r" % bad[:3])
    for pid, tid, _, _ in xs_ts:
        ck.check(("process_name", pid, None) in names or any(
            n == "process_name" and p == pid for n, p, _ in names),
            "pid %d has no process_name" % pid)
        ck.check(any(n == "thread_name" and p == pid and t == tid for n, p, t in names),
                 "tid %d has no thread_name" % tid)


def darshan_modules(ck, blob):
    mod_map = [struct.unpack_from("<QQ", blob, 48 + 16 * i) for i in range(64)]
    mod_ver = struct.unpack_from("<64I", blob, 1072)
    return mod_map, mod_ver


def check_darshan(ck, blob, man, run_doc, mine):
    ck.eq("Darshan magic", 6567223, struct.unpack_from("<q", blob, 8)[0])
    mod_map, mod_ver = darshan_modules(ck, blob)
    ck.eq("POSIX module version", 4, mod_ver[1])
    ck.eq("DXT_POSIX module version", 2, mod_ver[10])
    names_off, names_len = struct.unpack_from("<QQ", blob, 32)
    names = {}
    raw = DT.inflate(blob[names_off:names_off + names_len])
    pos = 0
    while pos < len(raw):
        (rid,) = struct.unpack_from("<Q", raw, pos)
        end = raw.index(b"\0", pos + 8)
        names[rid] = raw[pos + 8:end].decode("utf-8", "surrogateescape")
        pos = end + 1
    data_id = DT.lookup8(man["path"].encode())
    ck.eq("data.bin's record id is lookup8 of its path", man["path"], names.get(data_id))
    off, ln = mod_map[1]
    raw = DT.inflate(blob[off:off + ln])
    posix = {}
    for p in range(0, len(raw) - len(raw) % 704, 704):
        vals = struct.unpack_from("<Qq69q17d", raw, p)
        posix[vals[0]] = dict(zip(DT.COUNTERS, vals[2:71]))
    rec = posix.get(data_id)
    ck.check(rec is not None, "no POSIX record for data.bin")
    mine_json = [f for f in run_doc["files"] if f.get("path") == man["path"]]
    ck.eq("the run's JSON record has data.bin once", 1, len(mine_json))
    if rec and mine_json:
        c = mine_json[0]["counters"]
        for k in ("opens", "reads", "writes", "bytes_read", "bytes_written", "seeks", "stats",
                  "mmaps", "fsyncs", "fdsyncs", "seq_reads", "consec_reads", "seq_writes",
                  "consec_writes", "rw_switches", "dups"):
            dk = k.upper()
            if dk in rec:
                ck.eq("Darshan %s of data.bin = the run's JSON %s" % (dk, k), c.get(k), rec[dk])
    off, ln = mod_map[10]
    raw = DT.inflate(blob[off:off + ln])
    pos, segs = 0, {}
    while pos + 104 <= len(raw):
        rid, rank, shared = struct.unpack_from("<Qqq", raw, pos)
        wc, rc = struct.unpack_from("<qq", raw, pos + 88)
        pos += 104
        s = []
        for _ in range(wc + rc):
            s.append(struct.unpack_from("<qqdd", raw, pos))
            pos += 40
        segs[rid] = (s[:wc], s[wc:])
    ck.eq("DXT region is whole records", len(raw), pos)
    w, r = segs.get(data_id, ([], []))
    exp_w = [(m["offset"], m["ret"]) for m in man["ops"] if m["op"] == "write" and m["ret"] >= 0]
    exp_r = [(m["offset"], m["ret"]) for m in man["ops"]
             if m["op"] == "read" and m["ret"] >= 0 and m["fd"] != 1000]
    ck.eq("DXT write segments of data.bin (offset, length)", exp_w, [(x[0], x[1]) for x in w])
    ck.eq("DXT read segments of data.bin (offset, length)", exp_r, [(x[0], x[1]) for x in r])
    for x in w + r:
        ck.check(0 <= x[2] <= x[3], "DXT segment times not ordered: %r" % (x,))


def check_time_counters(ck, man, run_doc):
    """The run's time counters of data.bin against the workload's own CLOCK_MONOTONIC bracket
    [t0, t1] of each call (taken just before and after it in user space, so the kernel's
    entry-to-exit time of the call lies inside): a no-overlap time is at most the sum of its
    calls' brackets (one thread: no overlap) and at least its longest call; a longest-call time
    is at most the longest bracket; the distance between a first start and a last end lies
    between the brackets' inner and outer distances (the timestamps' base, the run's start,
    is not in the record, so only their differences are checked). docs/counters.md "Time"."""
    recs = [f for f in run_doc.get("files", []) if f.get("path") == man["path"]]
    if not ck.eq("time counters: records of data.bin", 1, len(recs)):
        return
    c = recs[0]["counters"]
    ops = man["ops"]

    def calls(*kinds, ok=True):
        return [m for m in ops if m["op"] in kinds and m["fd"] != 1000 and (m["ret"] >= 0 or
                                                                            not ok)]

    def span(ms):
        return sum(m["t1"] - m["t0"] for m in ms)

    def longest(ms):
        return max(m["t1"] - m["t0"] for m in ms)

    reads, writes = calls("read"), calls("write")
    timers = (("read_time_ns", reads, "max_read_time_ns"),
              ("write_time_ns", writes + calls("fsync", "fdatasync"), "max_write_time_ns"),
              ("meta_time_ns", calls("open", "dup", "seek", "stat", "truncate") +
               calls("close", ok=False), None))
    for name, ms, max_name in timers:
        got = c.get(name, 0)
        ck.check(0 < got <= span(ms), "%s %d not in (0, %d], the sum of the workload's brackets "
                 "of its %d calls" % (name, got, span(ms), len(ms)))
        if max_name:
            kind = [m for m in ms if m["op"] in ("read", "write")]
            mx = c.get(max_name, 0)
            ck.check(0 < mx <= longest(kind), "%s %d not in (0, %d], the longest bracket" %
                     (max_name, mx, longest(kind)))
            ck.check(mx <= got, "%s %d > %s %d (one thread: the total holds the longest call)"
                     % (max_name, mx, name, got))
            size = c.get(max_name.replace("_ns", "_size"))
            ck.check(size in [m["ret"] for m in kind], "%s %r is not the size of any of the "
                     "calls %s" % (max_name.replace("_ns", "_size"), size,
                                   [m["ret"] for m in kind]))
    for prefix, ms in (("read", reads), ("write", writes), ("open", calls("open", "dup")),
                       ("close", calls("close", ok=False))):
        first, last = ms[0], ms[-1]
        got = c.get(prefix + "_end_ns", 0) - c.get(prefix + "_start_ns", 0)
        lo, hi = last["t0"] - first["t1"], last["t1"] - first["t0"]
        ck.check(max(lo, 0) <= got <= hi, "%s_end_ns - %s_start_ns = %d, not within [%d, %d] "
                 "(the first and last calls' brackets)" % (prefix, prefix, got, lo, hi))
    # across kinds: the first write started after the open, by at most the brackets' distance
    first_open, first_write = calls("open")[0], writes[0]
    got = c.get("write_start_ns", 0) - c.get("open_start_ns", 0)
    lo = first_write["t0"] - first_open["t1"]
    hi = first_write["t1"] - first_open["t0"]
    ck.check(lo <= got <= hi, "write_start_ns - open_start_ns = %d, not within [%d, %d]" %
             (got, lo, hi))


def main():
    args = E.parse_args(workload=True)
    E.require_root()
    ck = E.Checker("trace_run")
    d = E.disk_tempdir("trace")
    tr, js = os.path.join(d, "seq.iolt"), os.path.join(d, "seq.json")
    run_darshan = os.path.join(d, "seq.run.darshan")
    run = E.run_iolens(args.iolens, [args.workload, "seq", d], js,
                       extra=["--trace", tr, "--darshan", run_darshan, "-q"])
    ck.eq("iolens run exit code", 0, run.rc)
    if run.rc != 0:
        E.log(run.err_text())
        ck.finish()
    man = json.loads(run.out.decode())
    run_doc = E.load_json_strict(js)
    E.check_lost_zero(ck, run_doc)
    check_time_counters(ck, man, run_doc)

    rc, err = convert(ck, args.iolens, tr, "jsonl", os.path.join(d, "seq.jsonl"))
    ck.eq("convert --to jsonl exit code (%s)" % err.strip(), 0, rc)
    lines = jsonl(os.path.join(d, "seq.jsonl"))
    head = lines[0]
    ck.eq("first line is the trace header", "trace", head.get("type"))
    ck.check(head.get("complete", True), "the trace is not complete: %r" % head)
    mine = check_seq_ops(ck, lines, man)
    losses = head.get("losses", {})
    ck.eq("records lost to a full ring", 0, losses.get("ring_full"))
    ck.eq("produced = records in the file", head["counts"]["ops"], losses.get("produced"))
    procs = [x for x in lines if x["type"] == "process"]
    ck.check(any(p["pid"] == man["pid"] for p in procs), "the workload's process is not listed")

    rc, err = convert(ck, args.iolens, tr, "perfetto", os.path.join(d, "seq.perfetto.json"))
    ck.eq("convert --to perfetto exit code (%s)" % err.strip(), 0, rc)
    check_perfetto(ck, E.load_json_strict(os.path.join(d, "seq.perfetto.json")), lines)

    rc, err = convert(ck, args.iolens, tr, "darshan", os.path.join(d, "seq.darshan"))
    ck.eq("convert --to darshan exit code (%s)" % err.strip(), 0, rc)
    with open(os.path.join(d, "seq.darshan"), "rb") as f:
        check_darshan(ck, f.read(), man, run_doc, mine)
    # iolens run --darshan with --trace: the live counters, and DXT from the trace.
    with open(run_darshan, "rb") as f:
        check_darshan(ck, f.read(), man, run_doc, mine)

    rc, err = convert(ck, args.iolens, tr, "json", os.path.join(d, "seq.replayed.json"))
    ck.eq("convert --to json exit code (%s)" % err.strip(), 0, rc)
    rep = E.load_json_strict(os.path.join(d, "seq.replayed.json"))
    got = [f for f in rep["files"] if f.get("path") == man["path"]]
    want = [f for f in run_doc["files"] if f.get("path") == man["path"]]
    if got and want:
        for k, v in want[0]["counters"].items():
            if k.endswith("_ns") or "time" in k or k.startswith("lat_"):
                continue  # times are relative to different starts
            if k in E.CACHE_COUNTERS:
                continue  # below the system calls: not in a trace (docs/trace-convert.md)
            if k in ("unlinks", "rename_sources"):
                # The kernel's unlink/rename records name no file (it sees only a path string;
                # the live run matches it to the file by name afterwards): docs/trace-convert.md.
                continue
            ck.eq("replayed counter %s of data.bin" % k, v, got[0]["counters"].get(k))
    else:
        ck.fail("data.bin missing: replayed %d, run %d" % (len(got), len(want)))

    # Damage: cut in the middle; a foreign file.
    size = os.path.getsize(tr)
    cut = os.path.join(d, "cut.iolt")
    with open(tr, "rb") as f, open(cut, "wb") as g:
        g.write(f.read(size * 2 // 3))
    rc, err = convert(ck, args.iolens, cut, "jsonl", os.path.join(d, "cut.jsonl"))
    ck.eq("convert of a cut file fails", 1, rc)
    ck.check("byte" in err and "truncated" in err, "the error names no offset: %r" % err)
    rc, err = convert(ck, args.iolens, cut, "jsonl", os.path.join(d, "cut.jsonl"), ["--partial"])
    ck.eq("convert --partial of a cut file", 0, rc)
    part = [x for x in jsonl(os.path.join(d, "cut.jsonl")) if x["type"] == "op"]
    full = [x for x in lines if x["type"] == "op"]
    ck.check(len(part) <= len(full), "--partial gave more records than the whole file")
    foreign = os.path.join(d, "foreign")
    with open(foreign, "wb") as f:
        f.write(b"\x7fELF" + b"\0" * 200)
    rc, err = convert(ck, args.iolens, foreign, "jsonl", os.path.join(d, "foreign.jsonl"))
    ck.eq("convert of a foreign file fails", 1, rc)
    ck.check("not an iolens trace" in err or "magic" in err, "unclear error: %r" % err)

    # Loss path: a one-page ring and a burst of tiny preads.
    src = os.path.join(d, "one.bin")
    with open(src, "wb") as f:
        f.write(b"x")
    n = 200000
    tr2, js2 = os.path.join(d, "burst.iolt"), os.path.join(d, "burst.json")
    run2 = E.run_iolens(args.iolens, [args.workload, "burst", src, str(n)], js2,
                        extra=["--trace", tr2, "--trace-ring-size", "4K", "-q"])
    ck.eq("burst run exit code", 0, run2.rc)
    rc, err = convert(ck, args.iolens, tr2, "jsonl", os.path.join(d, "burst.jsonl"))
    ck.eq("convert of the burst trace (%s)" % err.strip(), 0, rc)
    bl = jsonl(os.path.join(d, "burst.jsonl"))
    bh = bl[0]
    bl_ops = [x for x in bl if x["type"] == "op"]
    bloss = bh.get("losses", {})
    ck.check(bloss.get("ring_full", 0) > 0, "a 4 KiB ring lost nothing under %d preads: the "
             "loss path is not exercised" % n)
    ck.eq("produced = records in the file + ring_full + size_limit", bloss.get("produced"),
          len(bl_ops) + bloss.get("ring_full", 0) + bloss.get("size_limit", 0))
    mine2 = [x for x in bl_ops if x.get("path") == src and x["op"] == "read"]
    ck.check(n - bloss.get("ring_full", 0) <= len(mine2) <= n,
             "the workload's %d preads: %d in the file, %d lost in all" %
             (n, len(mine2), bloss.get("ring_full", 0)))
    # What the kernel produced, from the workload's side: the same workload with 0 preads makes
    # k traced calls besides them (the loader's opens, reads and mmaps of libc, its file's
    # open and close, the result's write), counted by strace, so produced = k + n.
    k = strace_traced_calls(ck, [args.workload, "burst", src, "0"],
                            os.path.join(d, "burst0.strace"))
    ck.check(k > 0, "strace counted no traced call of the burst workload")
    ck.eq("produced = the workload's %d preads + its %d other calls (strace)" % (n, k), n + k,
          bloss.get("produced"))
    doc2 = E.load_json_strict(js2)
    ck.eq("the run's JSON record: lost.trace_records = the trailer's ring_full",
          bloss.get("ring_full"), (doc2.get("lost") or {}).get("trace_records"))
    E.log("burst: %d produced, %d in the file, %d lost (ring full)" %
          (bloss.get("produced", 0), len(bl_ops), bloss.get("ring_full", 0)))

    # Size limit: the same workload, 20,000 preads, a 64 KiB file at most (a record is ~88
    # bytes: ~700 fit) and the default ring, which holds them all.
    n3 = 20000
    tr3, js3 = os.path.join(d, "limit.iolt"), os.path.join(d, "limit.json")
    run3 = E.run_iolens(args.iolens, [args.workload, "burst", src, str(n3)], js3,
                        extra=["--trace", tr3, "--trace-max-size", "64K", "-q"])
    ck.eq("size-limited run exit code", 0, run3.rc)
    rc, err = convert(ck, args.iolens, tr3, "jsonl", os.path.join(d, "limit.jsonl"))
    ck.eq("convert of the size-limited trace (%s)" % err.strip(), 0, rc)
    ll = jsonl(os.path.join(d, "limit.jsonl"))
    lloss = ll[0].get("losses", {}) if ll else {}
    l_ops = [x for x in ll if x["type"] == "op"]
    ck.eq("size limit: produced = the workload's %d preads + its %d other calls" % (n3, k),
          n3 + k, lloss.get("produced"))
    ck.eq("size limit: nothing lost to the ring (16 MiB)", 0, lloss.get("ring_full"))
    ck.eq("size limit: size_limit = produced - the records in the file",
          (lloss.get("produced") or 0) - len(l_ops), lloss.get("size_limit"))
    ck.check(0 < len(l_ops) < n3, "size limit: %d records in a 64 KiB file" % len(l_ops))
    doc3 = E.load_json_strict(js3)
    ck.eq("the run's JSON record: lost.trace_size_limit = the trailer's size_limit",
          lloss.get("size_limit"), (doc3.get("lost") or {}).get("trace_size_limit"))
    # The file passes the limit by the one OPS block that crossed it (docs/capture.md): every
    # OPS block begins below 64 KiB (its calls were taken while the file was under), and only
    # names, processes and the trailer follow the last one.
    blocks = trace_blocks(tr3)
    E.log("size limit: %d bytes, %d records, %d left out; blocks (offset, kind, count, bytes) "
          "%s" % (os.path.getsize(tr3), len(l_ops), lloss.get("size_limit", 0), blocks))
    ops_blocks = [b for b in blocks if b[1] == 4]
    ck.eq("size limit: OPS blocks that begin at or past 64 KiB", [],
          [b for b in ops_blocks if b[0] >= 64 << 10])
    after = blocks[blocks.index(ops_blocks[-1]) + 1:] if ops_blocks else []
    ck.eq("size limit: block kinds after the last OPS block (FILES, PROCESSES, TRAILER)", [],
          [b for b in after if b[1] not in (2, 3, 5)])
    ck.eq("size limit: records in the OPS blocks = records converted", len(l_ops),
          sum(b[2] for b in ops_blocks))
    ck.finish()


def trace_blocks(path):
    """The blocks of a trace file (docs/trace-format.md: a 16-byte file header, then blocks of
    a 28-byte header and stored_len bytes): [(offset, kind, count, stored_len)]."""
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], 16
    while off + 28 <= len(data):
        kind, _codec, _flags, _seq, count, stored = struct.unpack_from("<BBHIII", data, off)
        out.append((off, kind, count, stored))
        off += 28 + stored
    return out


if __name__ == "__main__":
    main()
