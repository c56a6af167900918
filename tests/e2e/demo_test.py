#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e_demo: the README's demo, traced end to end.

    demo_test.py --iolens PATH --demo tests/workloads/demo_train.py

Runs `iolens run --json OUT --trace T -- /usr/bin/python3 DEMO` (the demo makes its own dataset in a new
iolens-demo-* directory under $TMPDIR, set here to a private directory) and checks:
  - iolens exits 0 and the JSON's exit_code is 0, `lost` all 0;
  - the JSON has >= 500 dataset files (distinct paths under the demo's data/ directory, every
    one of them read) and exactly the demo's processes: the main python and its DataLoader
    workers, forked anew each epoch (1 + EPOCHS x WORKERS, read from the demo's own defaults),
    every worker a child of the main;
  - the human summary on stderr: names the run's processes with non-empty per-process totals
    (the root's pid, and byte amounts such as "1.5 KiB" / "6.0 MiB" that are not all zero),
    and lists top files whose paths are files of the JSON, among them the demo's own files;
  - the demo removed its directory;
  - `--trace`: the per-call trace lost nothing, converts to JSON lines and Perfetto, has a
    Perfetto track for every process that read, and for every (process, dataset file) as many
    reads and bytes as the run's counters.
Exit 0 pass, 1 fail (every problem printed), 77 skipped (not root).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

PY = "/usr/bin/python3"
MIN_FILES = 500


def demo_processes(demo):
    """1 + EPOCHS x WORKERS from the demo's own defaults (its module constants)."""
    with open(demo) as f:
        text = f.read()
    consts = {k: int(v) for k, v in re.findall(r"(?m)^(EPOCHS|WORKERS) = (\d+)$", text)}
    if set(consts) != {"EPOCHS", "WORKERS"}:
        raise SystemExit("demo_test: EPOCHS and WORKERS not found in %s" % demo)
    return 1 + consts["EPOCHS"] * consts["WORKERS"]

UNIT = re.compile(r"(\d+(?:\.\d+)?)\s?(B|KiB|MiB|GiB|TiB|bytes)\b")

CK = E.Checker("demo")  # e2e_common's failure collector, shared by every e2e test
fail = CK.fail


def lost_leaves(obj, prefix="lost"):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from lost_leaves(v, prefix + "." + k)
    else:
        yield prefix, obj


def check(a, tmp):
    iolens = os.path.abspath(a.iolens)
    demo = os.path.abspath(a.demo)
    out_json = os.path.join(tmp, "run.json")
    tmpdir = os.path.join(tmp, "tmpdir")
    os.makedirs(tmpdir)
    env = dict(os.environ, TMPDIR=tmpdir)
    out_trace = os.path.join(tmp, "run.iotrace")
    cmd = [iolens, "run", "--json", out_json, "--trace", out_trace, "--", PY, demo]
    print("$ TMPDIR=%s %s" % (tmpdir, " ".join(cmd)), flush=True)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", env=env, timeout=500)
    except subprocess.TimeoutExpired:
        fail("iolens run timed out after 500 s")
        return
    print("  -> exit %d in %.1fs" % (p.returncode, time.monotonic() - t0))
    print("---- stdout\n%s---- stderr\n%s----" % (p.stdout, p.stderr), flush=True)
    if p.returncode != 0:
        fail("iolens run exited %d, want 0 (the demo's exit status)" % p.returncode)
    left = glob.glob(os.path.join(tmpdir, "iolens-demo-*"))
    if left:
        fail("the demo did not remove its directory: %s" % left)
    m = re.search(r"wrote \d+ samples to (\S+)/data\b", p.stdout)
    if not m:
        fail("the demo's output does not name its work directory")
        return
    work = os.path.realpath(m.group(1)) if os.path.exists(m.group(1)) else m.group(1)
    data = os.path.join(work, "data") + "/"
    if not os.path.exists(out_json):
        fail("no JSON written at %s" % out_json)
        return
    with open(out_json) as f:
        doc = json.load(f)

    check_trace(iolens, out_trace, doc, data, tmp)

    # ---- JSON ------------------------------------------------------------------------------
    if doc.get("exit_code") != 0:
        fail("JSON exit_code %r, want 0" % doc.get("exit_code"))
    if doc.get("command") != [PY, demo]:
        fail("JSON command %r, want %r" % (doc.get("command"), [PY, demo]))
    # block_untimed: node-wide, not the job's to keep at zero (e2e_common.NOT_ZERO_CHECKED)
    nz = [(k, v) for k, v in lost_leaves(doc.get("lost", {}))
          if v != 0 and k not in E.NOT_ZERO_CHECKED]
    if nz:
        fail("lost counters not 0: %s" % nz)
    procs = {p["pid"]: p for p in doc.get("processes", [])}
    want_procs = demo_processes(demo)
    if len(procs) != want_procs:
        fail("%d processes in the JSON (%s), want %d (the main + its workers, each epoch's "
             "forked anew)" % (len(procs), sorted(procs), want_procs))
    roots = [p for p in procs.values() if p.get("ppid") not in procs]
    if len(roots) != 1:
        fail("want one root process, got %s" % [(p["pid"], p.get("ppid")) for p in roots])
        return
    root = roots[0]["pid"]
    strays = [(p["pid"], p.get("ppid")) for p in procs.values() if p["pid"] != root and
              p.get("ppid") != root]
    if strays:
        fail("processes that are not the main's workers (pid, ppid): %s" % strays)
    files = doc.get("files", [])
    dpaths = {f["path"] for f in files if f.get("path", "").startswith(data)}
    read = {f["path"] for f in files if f.get("path", "").startswith(data)
            and f.get("counters", {}).get("reads", 0) > 0 and f.get("pid") != root}
    print("JSON: %d processes, %d file records, %d dataset files (%d read by workers), root %d"
          % (len(procs), len(files), len(dpaths), len(read), root))
    if len(dpaths) < MIN_FILES:
        fail("%d dataset files under %s in the JSON, want >= %d" % (len(dpaths), data, MIN_FILES))
    if len(read) < MIN_FILES:
        fail("%d dataset files read by worker processes, want >= %d" % (len(read), MIN_FILES))
    readers = {f["pid"] for f in files if f.get("path", "").startswith(data)
               and f.get("counters", {}).get("reads", 0) > 0}
    if root in readers or len(readers) < 2:
        fail("dataset readers %s: want >= 2 worker processes and not the root %d"
             % (sorted(readers), root))
    # The checkpoints (the biggest files of the run) under their own names, written by the main.
    for e in range(2):
        ck = os.path.join(work, "ckpt", "model_epoch%d.pt" % e)
        recs = [f for f in files if f.get("path") == ck]
        if not recs:
            big = sorted(((f.get("counters", {}).get("bytes_written", 0), f.get("path"), f.get("pid"),
                           f.get("dev"), f.get("ino")) for f in files if f.get("pid") == root),
                         reverse=True)[:3]
            fail("checkpoint %s is not in the JSON; the root's most written files are "
                 "(bytes_written, path, pid, dev, ino): %s" % (ck, big))
        elif not any(f.get("pid") == root and f.get("counters", {}).get("bytes_written", 0) > 0
                     for f in recs):
            fail("checkpoint %s not written by the root %d: %s" % (ck, root, recs))

    # ---- the human summary -----------------------------------------------------------------
    err = p.stderr
    lines = err.splitlines()
    root_rows = [ln for ln in lines if ln.split()[:1] == [str(root)]]
    if not root_rows:
        fail("the summary on stderr has no row for the root process %d" % root)
    else:
        amounts = [float(x) for x, _ in UNIT.findall(root_rows[0])]
        if not amounts or not any(amounts):
            fail("the root's row shows no non-zero byte amount (B/KiB/MiB): %r" % root_rows[0])
    shown = [pid for pid in procs if any(ln.split()[:1] == [str(pid)] for ln in lines)]
    if len(shown) != len(procs):
        fail("the summary shows rows for %d processes (%s), want all %d of the JSON"
             % (len(shown), shown, len(procs)))
    if not re.search(r"\b(bytes|B|KiB|MiB|GiB)\b", err):
        fail("the summary mentions no byte units")
    if not re.search(r"(?i)\btop\b.*\bfiles?\b", err):
        fail("the summary has no top-files section")
    json_paths = {f.get("path") for f in files}
    listed = [ln.split()[-1] for ln in lines if ln.split() and ln.split()[-1].startswith("/")]
    listed = [x for x in listed if x in json_paths]
    if not listed:
        fail("the summary lists no file path of the JSON")
    if not any(x.startswith(work + "/") for x in listed):
        fail("the summary's top files name none of the demo's files (under %s): %s"
             % (work, listed))
    else:
        print("summary lists %d JSON paths, demo's: %s"
              % (len(listed), [x for x in listed if x.startswith(work + "/")]))


def check_trace(iolens, path, doc, data, tmp):
    """The per-call trace of the same run: nothing lost on this DL workload, a Perfetto track
    for every process, and, for every dataset file and process, as many reads and bytes as the
    kernel's counters of the run (two separate paths in the kernel: the ring of per-call records
    and the per-(process, file) counter map)."""
    outs = {}
    for to in ("jsonl", "perfetto"):
        outs[to] = os.path.join(tmp, "run." + to)
        p = subprocess.run([iolens, "convert", path, "--to", to, "-o", outs[to]],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            fail("iolens convert --to %s exited %d: %s" % (to, p.returncode, p.stderr.strip()))
            return
    with open(outs["jsonl"]) as f:
        lines = [json.loads(x) for x in f]
    head = lines[0]
    if head.get("losses", {}).get("total") != 0 or not head.get("complete"):
        fail("the demo's trace lost records or is incomplete: %r" % head.get("losses"))
    trace_reads = {}
    for x in lines:
        if x["type"] == "op" and x["op"] == "read" and str(x.get("path", "")).startswith(data) \
                and x["ret"] >= 0:
            t = trace_reads.setdefault((x["pid"], x["path"]), [0, 0])
            t[0] += 1
            t[1] += x["ret"]
    json_reads = {}
    for f in doc.get("files", []):
        if str(f.get("path", "")).startswith(data):
            c = f.get("counters", {})
            if c.get("reads"):
                json_reads[(f["pid"], f["path"])] = [c["reads"], c.get("bytes_read", 0)]
    if len(json_reads) < MIN_FILES:
        fail("the JSON has reads of %d dataset files, want >= %d" % (len(json_reads), MIN_FILES))
    diff = [(k, json_reads.get(k), trace_reads.get(k))
            for k in set(json_reads) | set(trace_reads) if json_reads.get(k) != trace_reads.get(k)]
    if diff:
        fail("%d (process, dataset file) pairs whose reads differ, JSON vs trace, e.g. %s"
             % (len(diff), diff[:3]))
    with open(outs["perfetto"]) as f:
        pf = json.load(f)
    slice_pids = {e.get("pid") for e in pf.get("traceEvents", []) if e.get("ph") == "X"}
    io_pids = {p["pid"] for p in doc.get("processes", []) if p.get("counters", {}).get("reads")}
    if not io_pids <= slice_pids:
        fail("processes that read with no Perfetto track: %s" % sorted(io_pids - slice_pids))
    print("trace: %d records, %d dataset (process, file) read pairs match the counters, "
          "Perfetto tracks for %d processes" % (head["counts"]["ops"], len(json_reads),
                                                 len(slice_pids)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolens", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: e2e_demo needs root (iolens loads eBPF programs)")
        return 77
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="iolens-e2e-demo-", dir="/var/tmp"))
    try:
        check(a, tmp)
    finally:
        if a.keep or CK.failures:
            print("(kept %s)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    CK.finish()  # prints the verdict; exits 1 on any failure, else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
