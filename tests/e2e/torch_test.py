#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e_torch: iolens against strace on a PyTorch DataLoader job (tests/workloads/torch_job.py).

    torch_test.py --iolens PATH [--files N] [--keep]

1. Creates a dataset of N (2000) .npy files with `torch_job.py --make-data` (untraced).
2. Runs the same deterministic training job twice: once under strace (tests/e2e/strace_oracle.py,
   the oracle) and once under `iolens run --json OUT --`. The runs are separate; pids differ.
3. Compares, exactly:
   - every dataset file: opens (iolens counts dups in opens, so oracle opens + dups), dups,
     reads, bytes_read, writes, bytes_written, seeks, closes, stats (by descriptor and by path)
     summed over processes;
   - every dataset file appears in iolens' output;
   - the dataset is read only by DataLoader workers: processes other than the root python whose
     ppid chain leads to it; epochs x workers (4) of them, `workers` per epoch (ordered by
     start time, each epoch's workers read disjoint sets of files covering the dataset);
   - processes are matched across the two runs by role: main = the root; a worker is matched to
     the worker of the other run that read exactly the same set of files (the DataLoader hands
     batch b to worker b % W, so these sets are deterministic); per-worker per-file counters,
     per-role totals, process counts and exit codes must agree;
   - the checkpoints: written only by the main process, counters equal to strace's;
   - exit_code 0 and every `lost` counter 0.
Exit 0 pass, 1 fail (every mismatch printed), 77 skipped (not root).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402
import strace_oracle as so  # noqa: E402

PY = "/usr/bin/python3"
JOB = os.path.join(os.path.dirname(HERE), "workloads", "torch_job.py")
EPOCHS = 2
WORKERS = 2
# iolens field -> how the oracle computes it (iolens' `opens` includes dups, Darshan-style)
COMPARED = {
    "opens": lambda t: t.opens + t.dups,
    "dups": lambda t: t.dups,
    "reads": lambda t: t.reads,
    "bytes_read": lambda t: t.bytes_read,
    "writes": lambda t: t.writes,
    "bytes_written": lambda t: t.bytes_written,
    "seeks": lambda t: t.seeks,
    "closes": lambda t: t.closes,
    "stats": lambda t: t.stats,
}

CK = E.Checker("torch")  # e2e_common's failure collector, shared by every e2e test
fail = CK.fail


def info(msg):
    print(msg, flush=True)


def run(cmd, log_prefix, timeout, env=None):
    info("$ " + " ".join(cmd))
    t0 = time.monotonic()
    with open(log_prefix + ".out", "w") as out, open(log_prefix + ".err", "w") as err:
        try:
            p = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout, env=env)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = None
    info("  -> exit %s in %.1fs" % (rc, time.monotonic() - t0))
    return rc


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "(no %s)" % path
    return "\n".join("    | " + x for x in lines[-n:])


def io_totals(records):
    """Sum iolens counter dicts -> {field: value}; a missing field stays missing."""
    out = {}
    for c in records:
        for k in COMPARED:
            if k in c:
                out[k] = out.get(k, 0) + c[k]
    return out


def oracle_view(tally):
    return {k: f(tally) for k, f in COMPARED.items()}


def diff(what, got, want):
    """got: iolens dict, want: oracle dict. Returns a list of mismatch strings."""
    out = []
    for k in COMPARED:
        if k not in got:
            out.append("%s: iolens has no counter %r (strace: %d)" % (what, k, want[k]))
        elif got[k] != want[k]:
            out.append("%s: %s iolens=%d strace=%d" % (what, k, got[k], want[k]))
    return out


def report(mismatches, title, limit=40):
    if not mismatches:
        return
    fail("%s: %d mismatches" % (title, len(mismatches)))
    by_field = {}
    for m in mismatches:
        f = re.search(r": (\w+) iolens=", m)
        key = f.group(1) if f else "other"
        by_field[key] = by_field.get(key, 0) + 1
    info("  mismatches by counter: %s" % ", ".join("%s=%d" % kv for kv in sorted(by_field.items())))
    for m in mismatches[:limit]:
        info("  " + m)
    if len(mismatches) > limit:
        info("  ... %d more" % (len(mismatches) - limit))


def lost_leaves(obj, prefix="lost"):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from lost_leaves(v, prefix + "." + k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from lost_leaves(v, "%s[%d]" % (prefix, i))
    else:
        yield prefix, obj


def job_lines(path):
    """The job's epoch lines without the timing and the checkpoint directory."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("epoch "):
                line = re.sub(r", [0-9.]+s, saved .*/", ", saved ", line.strip())
                out.append(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolens", required=True)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: e2e_torch needs root (iolens loads eBPF programs)")
        return 77
    iolens = os.path.abspath(a.iolens)
    if not os.access(iolens, os.X_OK):
        fail("iolens binary %s is not executable" % iolens)
        return 1
    if shutil.which("strace") is None:
        fail("strace is not installed: the oracle needs it")
        return 1

    # The oracle checks itself first: a mismatch below must be iolens', not the parser's.
    info("== strace oracle self-test")
    if so.self_test() != 0:
        fail("strace oracle self-test failed: not comparing against a broken oracle")
        return 1

    tmp = os.path.realpath(tempfile.mkdtemp(prefix="iolens-e2e-torch-", dir="/var/tmp"))
    info("== work directory %s" % tmp)
    try:
        compare(a, iolens, tmp)
    finally:
        if a.keep or CK.failures:
            info("(kept %s)" % tmp)
            if not a.keep:
                # keep logs and JSON for diagnosis, not the 2000-file dataset
                shutil.rmtree(os.path.join(tmp, "data"), ignore_errors=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    CK.finish()  # prints the verdict; exits 1 on any failure, else 0
    return 0


def compare(a, iolens, tmp):
    data = os.path.join(tmp, "data")
    ck_s, ck_i = os.path.join(tmp, "ckpt-strace"), os.path.join(tmp, "ckpt-iolens")
    trace, out_json = os.path.join(tmp, "strace.trace"), os.path.join(tmp, "iolens.json")
    expected_files = {os.path.join(data, "sample_%05d.npy" % i) for i in range(a.files)}
    ckpt_names = ["ckpt_epoch%d.pt" % e for e in range(EPOCHS)]

    info("== dataset (untraced)")
    rc = run([PY, JOB, data, ck_s, "--make-data", "--files", str(a.files)],
             os.path.join(tmp, "make-data"), 300)
    if rc != 0:
        fail("torch_job.py --make-data exited %s:\n%s" % (rc, tail(os.path.join(tmp, "make-data.err"))))
        return

    job = ["--files", str(a.files), "--epochs", str(EPOCHS), "--workers", str(WORKERS)]
    info("== run 1: under strace (oracle)")
    rc = run(so.strace_command(trace, [PY, JOB, data, ck_s] + job), os.path.join(tmp, "strace"), 400)
    if rc != 0:
        fail("job under strace exited %s:\n%s" % (rc, tail(os.path.join(tmp, "strace.err"))))
        return
    info("== run 2: under iolens")
    icmd = [PY, JOB, data, ck_i] + job
    rc = run([iolens, "run", "--json", out_json, "--"] + icmd, os.path.join(tmp, "iolens"), 400)
    if rc != 0:
        fail("iolens run exited %s (expected the job's 0):\n%s" % (rc, tail(os.path.join(tmp, "iolens.err"))))
    if not os.path.exists(out_json):
        fail("iolens wrote no JSON at %s" % out_json)
        return

    # The premise: both runs did the same thing.
    ls, li = job_lines(os.path.join(tmp, "strace.out")), job_lines(os.path.join(tmp, "iolens.out"))
    if ls != li or len(ls) != EPOCHS:
        fail("the job is not deterministic between the runs (or did not finish):\n  strace: %s\n"
             "  iolens: %s" % (ls, li))
    for n in ckpt_names:
        for d in (ck_s, ck_i):
            if not os.path.exists(os.path.join(d, n)):
                fail("checkpoint %s missing" % os.path.join(d, n))

    tr = so.parse_trace(trace)
    if tr.warnings:
        fail("strace oracle could not parse %d trace lines, e.g.: %s"
             % (len(tr.warnings), tr.warnings[:3]))
    with open(out_json) as f:
        doc = json.load(f)

    # ---- top level -------------------------------------------------------------------------
    if doc.get("schema") != "iolens.run/1":
        fail("schema %r, want 'iolens.run/1'" % doc.get("schema"))
    if doc.get("exit_code") != 0:
        fail("JSON exit_code %r, want 0" % doc.get("exit_code"))
    if doc.get("command") != icmd:
        fail("JSON command %r, want %r" % (doc.get("command"), icmd))
    lost = doc.get("lost")
    if not isinstance(lost, dict):
        fail("JSON has no `lost` object")
    else:
        # block_untimed: node-wide, not the job's to keep at zero (e2e_common.NOT_ZERO_CHECKED)
        nz = [(k, v) for k, v in lost_leaves(lost) if v != 0 and k not in E.NOT_ZERO_CHECKED]
        if nz:
            fail("lost counters not 0: %s" % nz)

    procs = {p["pid"]: p for p in doc.get("processes", [])}
    roots = [p for p in procs.values() if p.get("ppid") not in procs]
    if len(roots) != 1:
        fail("expected exactly one root process (ppid outside the traced tree), got %s"
             % [(p["pid"], p.get("ppid"), p.get("comm")) for p in roots])
        return
    iroot = roots[0]["pid"]
    if roots[0].get("exit_code") != 0:
        fail("root process exit_code %r" % roots[0].get("exit_code"))
    sroot = tr.root
    info("roots: iolens pid %d (%s), strace pid %d" % (iroot, roots[0].get("exe"), sroot))

    def iol_ancestors(pid):
        out, seen = [], set()
        p = procs.get(pid, {}).get("ppid")
        while p in procs and p not in seen:
            out.append(p)
            seen.add(p)
            p = procs[p].get("ppid")
        return out

    in_data = lambda p: p.startswith(data + "/")
    in_ck_i = lambda p: p.startswith(ck_i + "/")
    in_ck_s = lambda p: p.startswith(ck_s + "/")

    # ---- per-file totals over all processes: dataset -------------------------------------
    ifiles = {}   # path -> [counters]
    iproc_files = {}  # pid -> {path: counters}
    for r in doc.get("files", []):
        path, c = r.get("path", ""), r.get("counters", {})
        ifiles.setdefault(path, []).append(c)
        iproc_files.setdefault(r.get("pid"), {}).setdefault(path, []).append(c)
    idata = {p: io_totals(cs) for p, cs in ifiles.items() if in_data(p)}
    sdata = tr.per_file(in_data)

    missing = sorted(expected_files - set(idata))
    extra = sorted(set(idata) - expected_files)
    if missing:
        fail("%d of the %d dataset files are missing from iolens' output, e.g. %s"
             % (len(missing), len(expected_files), missing[:5]))
    if extra:
        fail("iolens reports unexpected paths in the dataset dir: %s" % extra[:10])
    if set(sdata) != expected_files:
        fail("strace saw %d dataset files, want %d (missing %s)"
             % (len(sdata), len(expected_files), sorted(expected_files - set(sdata))[:5]))
    mism = []
    for path in sorted(expected_files):
        if path in idata and path in sdata:
            mism += diff(path, idata[path], oracle_view(sdata[path]))
    report(mism, "per-file totals of the dataset files (iolens vs strace)")
    tot_i = io_totals(idata.values())
    tot_s = oracle_view(sum_tallies(sdata.values()))
    info("dataset totals  iolens: %s\n                strace: %s" % (tot_i, tot_s))
    report(diff("dataset total", tot_i, tot_s), "dataset totals")

    # ---- processes and roles ---------------------------------------------------------------
    # Readers of the dataset: processes with reads > 0 on dataset files.
    iworkers = sorted(pid for pid, fs in iproc_files.items()
                      if any(in_data(p) and c.get("reads", 0) > 0 for p, cs in fs.items() for c in cs))
    sworkers = sorted(pid for pid, t in tr.per_process(in_data).items() if t.reads > 0)
    want_workers = EPOCHS * WORKERS
    for name, root, workers, anc in (("iolens", iroot, iworkers, iol_ancestors),
                                     ("strace", sroot, sworkers, tr.ancestors)):
        if root in workers:
            fail("%s: the main process %d itself read dataset files (the workers should)"
                 % (name, root))
        ws = [w for w in workers if w != root]
        if len(ws) != want_workers:
            fail("%s: %d worker processes read the dataset (%s), want %d (%d epochs x %d workers,"
                 " persistent_workers=False)" % (name, len(ws), ws, want_workers, EPOCHS, WORKERS))
        for w in ws:
            chain = anc(w)
            if root not in chain:
                fail("%s: worker %d's ppid chain %s does not lead to the main process %d"
                     % (name, w, chain, root))
    if len(procs) != len(tr.processes()):
        fail("process count: iolens %d (%s), strace %d (%s)"
             % (len(procs), sorted(procs), len(tr.processes()), tr.processes()))

    # Epochs: iolens workers by start time, WORKERS per epoch, partitioning the dataset.
    iw = [w for w in iworkers if w != iroot]
    no_start = [w for w in iw if procs.get(w, {}).get("start_ns") is None]
    if no_start:
        # every process record carries its start time: without it the epochs cannot be told
        fail("workers without start_ns in iolens's process records: %s" % no_start)
    elif len(iw) == want_workers:  # else the worker count check above failed already
        iw.sort(key=lambda w: procs[w]["start_ns"])
        for e in range(EPOCHS):
            group = iw[e * WORKERS:(e + 1) * WORKERS]
            sets = [{p for p in iproc_files[w] if in_data(p)} for w in group]
            union = set().union(*sets)
            overlap = sum(len(s) for s in sets) - len(union)
            if union != expected_files or overlap:
                fail("epoch %d workers %s (by start_ns) do not partition the dataset: %d files "
                     "covered, %d read by both" % (e, group, len(union), overlap))
            else:
                info("epoch %d: workers %s read %s files" % (e, group, [len(s) for s in sets]))

    # Match workers across the runs by the exact set of files they read.
    def fileset(files):
        return frozenset(p for p in files if in_data(p))
    iset = {w: fileset(iproc_files[w]) for w in iw}
    sset = {w: fileset(tr.files_of(w, in_data)) for w in sworkers if w != sroot}
    match = {}
    for sw, fs in sorted(sset.items()):
        cands = [w for w, s in iset.items() if s == fs]
        if len(cands) != 1:
            best = max(iset, key=lambda w: len(iset[w] & fs), default=None)
            fail("strace worker %d (%d files) matches %d iolens workers by file set; closest is "
                 "%s with %d common files of %d" % (sw, len(fs), len(cands), best,
                                                    len(iset[best] & fs) if best else 0,
                                                    len(iset[best]) if best else 0))
        else:
            match[sw] = cands[0]
    info("workers matched (strace -> iolens): %s" % match)
    mism = []
    for sw, w in sorted(match.items()):
        ifs = {p: io_totals(cs) for p, cs in iproc_files[w].items() if in_data(p)}
        sfs = tr.files_of(sw, in_data)
        for p in sorted(set(ifs) | set(sfs)):
            mism += diff("worker %d/%d %s" % (w, sw, p), ifs.get(p, {k: 0 for k in COMPARED}),
                         oracle_view(sfs.get(p, so.Tally())))
        ie = procs[w].get("exit_code")
        se = tr.exit_of(sw)
        if se != "exited with %s" % ie:
            fail("worker exit: iolens pid %d exit_code %r, strace pid %d %r" % (w, ie, sw, se))
        if procs[w].get("ppid") != iroot or tr.ppid(sw) != sroot:
            fail("worker parent: iolens %d -> ppid %r (root %d), strace %d -> ppid %r (root %d)"
                 % (w, procs[w].get("ppid"), iroot, sw, tr.ppid(sw), sroot))
    report(mism, "per-worker per-file counters (workers matched by file set)")

    # Per-role totals: main and workers, dataset and checkpoints.
    def itot(pids, keep):
        return io_totals([c for pid in pids for p, cs in iproc_files.get(pid, {}).items()
                          if keep(p) for c in cs])

    def stot(pids, keep):
        t = so.Tally()
        for pid in pids:
            for p, x in tr.files_of(pid, keep).items():
                t.add(x)
        return oracle_view(t)
    zero = {k: 0 for k in COMPARED}
    roles = [
        ("main/dataset", itot([iroot], in_data), stot([sroot], in_data)),
        ("workers/dataset", itot(iw, in_data), stot([w for w in sworkers if w != sroot], in_data)),
        ("main/checkpoints", itot([iroot], in_ck_i), stot([sroot], in_ck_s)),
        ("workers/checkpoints", itot(iw, in_ck_i),
         stot([w for w in sworkers if w != sroot], in_ck_s)),
    ]
    for role, ti, ts in roles:
        ti = {**zero, **ti} if not ti else ti
        info("role %-20s iolens %s\n     %-20s strace %s" % (role, ti, "", ts))
        report(diff("role " + role, ti, ts), "per-role totals: " + role)
    if any(roles[0][2].values()):
        fail("strace: the main process touched dataset files: %s" % roles[0][2])

    # ---- checkpoints ----------------------------------------------------------------------
    mism = []
    for n in ckpt_names:
        pi, ps = os.path.join(ck_i, n), os.path.join(ck_s, n)
        recs = [r for r in doc.get("files", []) if r.get("path") == pi]
        if not recs:
            fail("checkpoint %s missing from iolens' output" % pi)
            continue
        writers = sorted({r["pid"] for r in recs if r.get("counters", {}).get("writes", 0)})
        if writers != [iroot]:
            fail("checkpoint %s written by %s, want the main process [%d]" % (n, writers, iroot))
        swriters = sorted({pid for (pid, p), t in tr.records.items() if p == ps and t.writes})
        if swriters != [sroot]:
            fail("strace: checkpoint %s written by %s, want [%d]" % (n, swriters, sroot))
        got = io_totals([r["counters"] for r in recs])
        want = oracle_view(tr.per_file(lambda p: p == ps).get(ps, so.Tally()))
        mism += diff(n, got, want)
        size = os.path.getsize(pi) if os.path.exists(pi) else None
        if got.get("bytes_written") != size:
            fail("checkpoint %s: bytes_written %r but the file has %r bytes"
                 % (n, got.get("bytes_written"), size))
        info("checkpoint %s: iolens %s" % (n, got))
    report(mism, "checkpoint counters (iolens vs strace)")


def sum_tallies(ts):
    t = so.Tally()
    for x in ts:
        t.add(x)
    return t


if __name__ == "__main__":
    sys.exit(main())
