#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolens run on tests/workloads/io_workload.c, compared counter by counter.

io_workload prints (on stdout, a pipe: not a file record) a manifest of everything it did, per
process and per canonical path, tallied from the real return values of its calls with the rules
of bpf/iolens_account.h (see the header of io_workload.c). This test runs

    iolens run --json OUT -- io_workload DIR -

and checks, for every (pid, path) of the manifest, every counter for exact equality; that no
record under DIR exists that the manifest lacks (and none for another pid); the process tree
(parent = root, ppid = iolens; two children with ppid = parent; exit codes 0); the checkpoint
(64 writes, 64 MiB, 1 fsync, renamed_to .../ckpt.pt); the symlink recorded under its target;
all 3000 data files present; dev/ino equal to stat(2); process counters = sums of its files;
top-level exit_code 0 and every `lost` value 0.

With `--timing off` (registered as e2e_c_workload_timing_off: no sys_enter program, close's
entry from its classic tracepoint, page-cache context from the saved registers), every counter
must be just as exact, the record must say "timing": "off", and every time the kernel's syscall
hooks measure (read/write/meta times, open/read/write/close/meta timestamps, the slowest calls,
the latency histogram) must be 0, where with exact timing the workload's reads and writes have
them set.

With `--max-file-records N` (registered as e2e_c_workload_small_map with N = 4096, under the
6,000 records the workload's processes hold at its peak), the kernel map would overflow unless
the agent drains early and folds idle records: every counter must still be exact with nothing
lost.

With `--fast-file-records 64` (registered as e2e_c_workload_spill), the first 64 records are made
in the preallocated tier and the ~6,000 others in the spill tier (bpf/README.md "Two tiers of
records"), from three processes at once: every counter and name must still be exact.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402


def check_times(ck, doc, work, timing):
    """timing off: every syscall-hook time and latency bucket of the workload's records is 0.
    exact: each record with reads (writes) has a read (write) time and a bucket per call."""
    rows = [f for f in doc["files"] if E.under(f.get("path"), work)]
    ck.check(len(rows) > 3000, "only %d records under %s" % (len(rows), work))
    timed = 0
    for f in rows:
        c = f.get("counters", {})
        where = "pid %r path %r" % (f.get("pid"), f.get("path"))
        lat = {k: v for k, v in c.items() if k.startswith("lat_") and not k.endswith("_ns")}
        if timing == "off":
            for k in E.SYSCALL_TIMES:
                ck.eq("%s %s (timing off)" % (where, k), 0, c.get(k))
            ck.eq("%s latency buckets (timing off)" % where, 0, sum(lat.values()))
            continue
        for kind, calls in (("read", "reads"), ("write", "writes")):
            if c.get(calls, 0) > 0:
                timed += 1
                ck.check(c.get("%s_time_ns" % kind, 0) > 0, "%s: %s > 0 but %s_time_ns is %r" %
                         (where, calls, kind, c.get("%s_time_ns" % kind)))
                ck.eq("%s %s latency buckets" % (where, kind), c[calls],
                      sum(v for k, v in lat.items() if k.startswith("lat_%s_" % kind)))
    if timing == "exact":
        ck.check(timed > 3000, "only %d timed records" % timed)


def check_tiers(ck, doc, manifest, args):
    """The run's kernel records (collector.file_records): the preallocated tier's size as
    asked, at least one record made per (pid, path) of the manifest, none spilled while the
    tier was never full, and with a 64-record tier most of the ~6,000 spilled (the processes
    hold them until they exit)."""
    rec = doc.get("collector", {}).get("file_records", {})
    maximum = args.max_file_records or 65536
    fast = args.fast_file_records if args.fast_file_records is not None else 8192
    ck.eq("collector.file_records.preallocated", min(fast, maximum), rec.get("preallocated"))
    pairs = sum(len(p["files"]) for p in manifest["processes"])
    made, spilled = rec.get("made", 0), rec.get("spilled", -1)
    ck.check(made >= pairs, "collector.file_records.made %r < %d manifest records" % (made, pairs))
    if made <= min(fast, maximum) or maximum <= fast or fast == 0:
        ck.eq("collector.file_records.spilled (the tier never full, or one tier)", 0, spilled)
    elif fast == 64:
        ck.check(made // 2 < spilled <= made - 64,
                 "collector.file_records.spilled %r of %r made" % (spilled, made))


def main():
    args = E.parse_args(workload=True, extra=[
        (("--max-file-records",), {"type": int, "default": 0,
                                    "help": "pass this kernel map size to iolens"}),
        (("--fast-file-records",), {"type": int, "default": None,
                                     "help": "pass this preallocated tier size to iolens"}),
        (("--timing",), {"choices": ("exact", "off"), "default": "exact",
                         "help": "pass this --timing to iolens"})])
    E.require_root()
    ck = E.Checker("c_workload")
    tmp = E.disk_tempdir("cwl")
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    out_json = os.path.join(tmp, "run.json")

    extra = ["--max-file-records", str(args.max_file_records)] if args.max_file_records else []
    if args.fast_file_records is not None:
        extra += ["--fast-file-records", str(args.fast_file_records)]
    extra += ["--timing", args.timing]
    run = E.run_iolens(args.iolens, [args.workload, work, "-"], json_path=out_json, extra=extra,
                       timeout=240)
    E.log("iolens exited %d after %.1f s" % (run.rc, run.elapsed))
    if run.rc != 0:
        ck.fatal("iolens run exited %d (expected the workload's 0); stderr:\n%s" %
                 (run.rc, run.err_text()))
    manifest = E.parse_manifest(ck, run.out)
    ck.eq("manifest dir", os.path.realpath(work), manifest["dir"])
    doc = E.load_run(ck, run)
    ck.eq("top-level exit_code", 0, doc.get("exit_code"))
    E.check_lost_zero(ck, doc)
    ck.eq("command", [args.workload, work, "-"], doc.get("command"))
    E.check_io_manifest(ck, doc, manifest, iolens_pid=run.pid)
    ck.eq("timing", args.timing, doc.get("timing"))
    check_tiers(ck, doc, manifest, args)
    check_times(ck, doc, os.path.realpath(work), args.timing)
    procs = E.procs_by_pid(ck, doc)
    if manifest["parent"] in procs:
        ck.eq("root exe", os.path.realpath(args.workload), procs[manifest["parent"]].get("exe"))
        E.ancestry_ok(ck, procs, manifest["parent"])
    E.log("manifest: %d processes, %d (pid, path) records" %
          (len(manifest["processes"]), sum(len(p["files"]) for p in manifest["processes"])))
    ck.finish()


if __name__ == "__main__":
    main()
