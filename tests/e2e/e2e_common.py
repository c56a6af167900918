# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the end-to-end tests (plain python scripts, standard library only).

Exit codes of a test: 0 pass, 1 fail (every mismatch printed), 77 skip (not root).
"""
import argparse
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

SCHEMA = "iolens.run/1"
SKIP = 77

# Under `sudo ctest`, iolens would run the traced commands as the user who ran sudo and create
# its files as that user (docs/run-json.md, "Output files and sudo"), in the tests' root-owned directories.
# The tests run as root, as if logged in as root; run_security_test.py sets these itself.
SUDO_VARS = ("SUDO_UID", "SUDO_GID", "SUDO_USER", "SUDO_COMMAND")
for _var in SUDO_VARS:
    os.environ.pop(_var, None)

# Counters whose "none yet" value the workloads write as -1 (the kernel record's value before any
# access). docs/counters.md: max_byte_read/max_byte_written are "exported as Darshan does: 0 when
# no byte was read". Only these counters get this translation.
NONE_COUNTERS = ("max_byte_read", "max_byte_written")

# Counters of the page-cache, fault and writeback tracepoints (ABI 7, bpf/iolens_cache.bpf.h):
# not derived from the system calls, so a per-call trace's replay has none of them.
CACHE_COUNTERS = ("cache_read_pages", "cache_miss_pages", "ra_sync", "ra_async",
                  "prefetch_pages", "fault_pages", "fault_around_pages", "fault_miss_pages",
                  "dirtied_pages", "throttle_ns", "throttles", "wb_waits")
NONE_JSON_VALUE = 0


def log(msg):
    print(msg, flush=True)


def require_root():
    """Exit 77 (skip) unless running as root: iolens needs CAP_BPF + CAP_PERFMON (root here)."""
    if os.geteuid() != 0:
        log("SKIP: not root (euid %d): iolens needs root to load its BPF programs" % os.geteuid())
        sys.exit(SKIP)


def parse_args(workload=False, extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--iolens", required=True, help="path of the iolens binary")
    if workload:
        p.add_argument("--workload", required=True, help="path of the workload binary")
    for args, kw in extra or []:
        p.add_argument(*args, **kw)
    a = p.parse_args()
    a.iolens = os.path.realpath(a.iolens)
    if not os.access(a.iolens, os.X_OK):
        log("FAIL: iolens binary %s is not executable" % a.iolens)
        sys.exit(1)
    if workload:
        a.workload = os.path.realpath(a.workload)
        if not os.access(a.workload, os.X_OK):
            log("FAIL: workload %s is not executable" % a.workload)
            sys.exit(1)
    # The *_plain registrations (tests/e2e/CMakeLists.txt) choose a build of the programs by the
    # environment: this iolens must load that one, or they would test the other build again.
    build = os.environ.get("IOLENS_BPF_BUILD")
    if build in ("casts", "plain") and os.geteuid() == 0:
        p = subprocess.run([a.iolens, "run", "-v", "-q", "--local", "--", "true"],
                           capture_output=True, text=True, timeout=120)
        if "programs: the %s build" % build not in p.stderr:
            log("FAIL: IOLENS_BPF_BUILD=%s, but iolens run -v does not say it loaded that build "
                "(exit %d):\n%s" % (build, p.returncode, p.stderr[-2000:]))
            sys.exit(1)
        log("iolens loads the %s build (IOLENS_BPF_BUILD)" % build)
    return a


_TEMPDIRS = []


def _cleanup():
    if os.environ.get("IOLENS_E2E_KEEP"):
        for d in _TEMPDIRS:
            log("kept %s (IOLENS_E2E_KEEP set)" % d)
        return
    for d in _TEMPDIRS:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def disk_tempdir(tag):
    """A fresh directory on a disk file system (not tmpfs: (dev, ino) must be stable and
    real), canonical (realpath), removed at exit unless IOLENS_E2E_KEEP is set."""
    base = os.environ.get("IOLENS_E2E_TMP", "/var/tmp")
    d = os.path.realpath(tempfile.mkdtemp(prefix="iolens-e2e-%s-" % tag, dir=base))
    _TEMPDIRS.append(d)
    return d


def udev_settle():
    """Where udev runs, it probes a new or written block device (blkid): its reads are done
    before a test's /sys/block stat deltas begin."""
    if shutil.which("udevadm"):
        subprocess.run(["udevadm", "settle"], capture_output=True)


def loop_device(work, name, size):
    """A loop device over a sparse `size`-byte image in `work`: (its /dev path, "MAJ:MIN"),
    detached at exit (atexit runs last-registered first: after what uses it, such as a mount
    registered later with unmount_at_exit, and before the temporary directories go)."""
    image = os.path.join(work, name + ".img")
    with open(image, "wb") as f:
        f.truncate(size)
    dev = subprocess.run(["losetup", "--find", "--show", image], check=True,
                         capture_output=True, text=True).stdout.strip()
    atexit.register(lambda: subprocess.run(["losetup", "-d", dev]))
    udev_settle()
    st = os.stat(dev)
    return dev, "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))


def unmount_at_exit(mnt):
    """Unmounts `mnt` at exit, before a loop device registered earlier is detached."""
    atexit.register(lambda: subprocess.run(["umount", mnt]))


class Run:
    """One finished `iolens run`: rc, stdout/stderr bytes, iolens's pid, the parsed JSON."""

    def __init__(self, rc, out, err, pid, json_path, elapsed):
        self.rc, self.out, self.err, self.pid = rc, out, err, pid
        self.json_path, self.elapsed = json_path, elapsed
        self.doc = None

    def err_text(self):
        return self.err.decode("utf-8", "replace")


def run_iolens(iolens, cmd, json_path=None, extra=(), timeout=300, cwd=None, stdin=None,
               on_start=None, env=None, pass_fds=()):
    """Runs `iolens run [--json json_path] EXTRA -- CMD`. `on_start(popen)` is called once the
    process is started (e.g. to send it a signal). `pass_fds`: descriptors the command inherits
    (open before tracing starts). Kills the whole run on timeout."""
    import time
    argv = [iolens, "run"]
    if json_path is not None:
        argv += ["--json", json_path]
    argv += list(extra) + ["--"] + list(cmd)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=stdin if stdin is not None else subprocess.DEVNULL, cwd=cwd,
                         env=env, start_new_session=True, pass_fds=pass_fds)
    if on_start:
        on_start(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        log("FAIL: %s did not finish within %d s; stderr:\n%s" %
            (" ".join(argv), timeout, err.decode("utf-8", "replace")))
        sys.exit(1)
    return Run(p.returncode, out, err, p.pid, json_path, time.monotonic() - t0)


def load_json_strict(path):
    """The JSON file as a document: the bytes must be valid UTF-8 and valid JSON."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")  # raises on invalid UTF-8
    return json.loads(text)


class Checker:
    """Collects failures; every mismatch is printed, the test fails at the end if any."""

    def __init__(self, name):
        self.name = name
        self.failures = 0
        self.checks = 0

    def fail(self, msg):
        self.failures += 1
        log("MISMATCH: " + msg)

    def check(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)
        return bool(cond)

    def eq(self, what, expected, got):
        self.checks += 1
        if expected != got:
            self.fail("%s: expected %r, got %r" % (what, expected, got))
            return False
        return True

    def fatal(self, msg):
        self.fail(msg)
        self.finish()

    def finish(self):
        if self.failures:
            log("FAIL %s: %d mismatch(es) out of %d checks" % (self.name, self.failures,
                                                                self.checks))
            sys.exit(1)
        log("PASS %s: %d checks" % (self.name, self.checks))
        sys.exit(0)


def load_run(ck, run):
    """Parses run.json_path into run.doc and checks the top-level shape. Fatal if unusable."""
    if not os.path.exists(run.json_path):
        ck.fatal("iolens wrote no JSON file at %s (rc %d); stderr:\n%s" %
                 (run.json_path, run.rc, run.err_text()))
    try:
        doc = load_json_strict(run.json_path)
    except (UnicodeDecodeError, ValueError) as e:
        ck.fatal("%s is not valid UTF-8 JSON: %s" % (run.json_path, e))
    if not isinstance(doc, dict):
        ck.fatal("JSON top level is not an object")
    ck.eq("schema", SCHEMA, doc.get("schema"))
    for k in ("processes", "files", "lost", "exit_code", "command"):
        if k not in doc:
            ck.fatal("JSON has no top-level %r" % k)
    run.doc = doc
    return doc


# Lost causes a workload cannot keep at zero: block_untimed counts block requests still in
# flight when a run ends (writeback after the job) and completions this VM's kernel does not run
# block_rq_complete for; e2e_block checks it exactly (requests = timed + untimed).
# program_misses counts the node's runs of iolens's programs the kernel skipped because the same
# program was running on that CPU (a block completion nested in another): the kernel's choice.
NOT_ZERO_CHECKED = {"lost.block_untimed", "lost.program_misses"}


def check_lost_zero(ck, doc):
    def walk(prefix, v):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(prefix + "." + k, x)
        elif prefix not in NOT_ZERO_CHECKED:
            ck.eq(prefix, 0, v)
    walk("lost", doc.get("lost"))


def procs_by_pid(ck, doc):
    out = {}
    for p in doc["processes"]:
        pid = p.get("pid")
        if pid in out:
            # a reused pid would be a second record with another start; our runs are short
            ck.fail("two process records with pid %r" % pid)
        out[pid] = p
    return out


def files_by_pid_path(ck, doc):
    out = {}
    for f in doc["files"]:
        k = (f.get("pid"), f.get("path"))
        if k in out:
            ck.fail("two file records for pid %r path %r" % k)
        out[k] = f
    return out


def brief(counters):
    """The non-zero count and byte counters of a record, for messages."""
    return json.dumps({k: v for k, v in sorted((counters or {}).items())
                       if v and not k.endswith("_ns") and not k.startswith(("size_", "lat_"))})


def under(path, d):
    return isinstance(path, str) and (path == d or path.startswith(d.rstrip("/") + "/"))


def ancestry_ok(ck, procs, root_pid):
    """Every process's ppid chain reaches root_pid (the traced command)."""
    for pid, p in procs.items():
        seen = set()
        cur = pid
        while cur != root_pid:
            if cur in seen or cur not in procs:
                ck.fail("process %r (comm %r) does not descend from the traced root %d "
                        "(ppid chain stops at %r)" % (pid, p.get("comm"), root_pid, cur))
                break
            seen.add(cur)
            cur = procs[cur].get("ppid")


def expect_counter(ck, where, name, expected, counters):
    if name not in counters:
        ck.fail("%s: counter %r missing from the JSON record (expected %r)" %
                (where, name, expected))
        return
    got = counters[name]
    if name in NONE_COUNTERS and expected == -1:
        expected = NONE_JSON_VALUE
    ck.eq("%s counter %s" % (where, name), expected, got)


# docs/counters.md "Process counters": the sums over the process's file records.
_BUCKETS = ("0_100", "100_1k", "1k_10k", "10k_100k", "100k_1m", "1m_4m", "4m_10m", "10m_100m",
            "100m_1g", "1g_plus")
# docs/counters.md "Latency histogram": per-bucket (not cumulative) counts, then the sums.
LAT_BUCKETS = ("le_1us", "le_4us", "le_16us", "le_64us", "le_256us", "le_1ms", "le_4ms",
               "le_16ms", "le_64ms", "le_256ms", "le_1s", "gt_1s")
PROCESS_SUMS = (("opens", "dups", "reads", "writes", "seeks", "stats", "mmaps", "fsyncs",
                 "fdsyncs", "truncates", "closes", "bytes_read", "bytes_written", "seq_reads",
                 "consec_reads", "seq_writes", "consec_writes", "rw_switches",
                 "mem_not_aligned") +
                tuple("size_read_" + b for b in _BUCKETS) +
                tuple("size_write_" + b for b in _BUCKETS) +
                ("read_time_ns", "write_time_ns", "meta_time_ns") +
                tuple("lat_read_" + b for b in LAT_BUCKETS) +
                tuple("lat_write_" + b for b in LAT_BUCKETS) +
                ("lat_read_sum_ns", "lat_write_sum_ns"))


# The times the syscall hooks measure (docs/counters.md "Timing"); O_DIRECT's and the writer
# throttling's come from other programs, with their own clock, in both modes.
SYSCALL_TIMES = ("read_time_ns", "write_time_ns", "meta_time_ns", "max_read_time_ns",
                 "max_write_time_ns", "lat_read_sum_ns", "lat_write_sum_ns") + tuple(
    "%s_%s_ns" % (op, edge) for op in ("open", "read", "write", "close", "meta")
    for edge in ("start", "end"))


def check_latency(ck, doc):
    """Every file record: the latency buckets add up to the counted calls (to none with timing
    off: untimed calls are in no bucket), and the sum of the call durations is at least the
    no-overlap read time (write time also holds fsyncs)."""
    untimed = doc.get("timing") == "off"
    for f in doc["files"]:
        c = f.get("counters", {})
        where = "pid %r path %r" % (f.get("pid"), f.get("path"))
        for kind, calls in (("read", "reads"), ("write", "writes")):
            keys = ["lat_%s_%s" % (kind, b) for b in LAT_BUCKETS] + ["lat_%s_sum_ns" % kind]
            missing = [k for k in keys if k not in c]
            if missing:
                ck.fail("%s: counters lack %s" % (where, missing))
                continue
            ck.eq("%s sum(lat_%s_*) == %s" % (where, kind, "0 (timing off)" if untimed else calls),
                  0 if untimed else c.get(calls), sum(c[k] for k in keys[:-1]))
        if "lat_read_sum_ns" in c and "read_time_ns" in c:
            ck.check(c["lat_read_sum_ns"] >= c["read_time_ns"],
                     "%s: lat_read_sum_ns %d < read_time_ns %d" %
                     (where, c["lat_read_sum_ns"], c["read_time_ns"]))


def check_process_sums(ck, doc, pid):
    """Process counters are the sums of its file records; `files` is their number."""
    p = next((x for x in doc["processes"] if x.get("pid") == pid), None)
    if p is None:
        return
    recs = [f for f in doc["files"] if f.get("pid") == pid]
    pc = p.get("counters", {})
    for k in PROCESS_SUMS:
        if k not in pc:
            ck.fail("pid %d: process counters lack %r" % (pid, k))
            continue
        ck.eq("pid %d process counters.%s == sum over its %d file records" % (pid, k, len(recs)),
              sum(f["counters"].get(k, 0) for f in recs), pc[k])
    if "files" in pc:
        ck.eq("pid %d process counters.files" % pid, len(recs), pc["files"])
    else:
        ck.fail("pid %d: process counters lack 'files'" % pid)


def check_io_manifest(ck, doc, manifest, iolens_pid=None, root_is_parent=True):
    """Exact comparison of an io_workload manifest with an iolens.run/1 document.

    Checks every (pid, path) counter of the manifest, that nothing under the workload's DIR is
    reported that the manifest lacks, the process tree, the checkpoint, dev/ino of every record
    against stat(2), the 3000 data files, and the process sums."""
    d = manifest["dir"]
    parent = manifest["parent"]
    children = manifest["children"]
    procs = procs_by_pid(ck, doc)
    files = files_by_pid_path(ck, doc)
    mpids = {p["pid"] for p in manifest["processes"]}

    # processes
    ck.eq("number of distinct workload processes", 3, len({parent, *children}))
    for pid in [parent] + children:
        if not ck.check(pid in procs, "no process record for workload pid %d" % pid):
            continue
        p = procs[pid]
        ck.eq("pid %d exit_code" % pid, 0, p.get("exit_code"))
        ck.eq("pid %d comm" % pid, "io_workload", p.get("comm"))
        ck.check(p.get("end_ns") is not None, "pid %d end_ns is null (it exited)" % pid)
    for c in children:
        if c in procs:
            ck.eq("child %d ppid" % c, parent, procs[c].get("ppid"))
    if root_is_parent and parent in procs and iolens_pid is not None:
        ck.eq("root %d ppid (the iolens process)" % parent, iolens_pid, procs[parent].get("ppid"))
    for mp in manifest["processes"]:
        pid = mp["pid"]
        if pid in procs:
            for k in ("renames", "unlinks"):
                ck.eq("pid %d %s" % (pid, k), mp[k], procs[pid].get(k))

    # file records: every counter of every manifest entry
    expected = {}
    for mp in manifest["processes"]:
        for mf in mp["files"]:
            expected[(mp["pid"], mf["path"])] = mf
    for (pid, path), mf in sorted(expected.items()):
        rec = files.get((pid, path))
        where = "pid %d path %s" % (pid, path)
        if rec is None:
            others = sorted(p2 for (q, p2) in files if q == pid and os.path.basename(p2) ==
                            os.path.basename(path))
            ck.fail("%s: no file record%s" % (where, (" (same name under: %s)" % others)
                                               if others else ""))
            continue
        c = rec.get("counters", {})
        for name, val in mf["counters"].items():
            expect_counter(ck, where, name, val, c)
        if "renamed_to" in mf:
            ck.eq("%s renamed_to" % where, mf["renamed_to"], rec.get("renamed_to"))
        else:
            ck.check("renamed_to" not in rec or rec["renamed_to"] in (None, ""),
                     "%s: unexpected renamed_to %r" % (where, rec.get("renamed_to")))
        # identity: dev/ino as stat(2) reports them (the file's current name)
        cur = mf.get("renamed_to", path)
        if os.path.exists(cur):
            st = os.stat(cur)
            ck.eq("%s dev (st_dev)" % where, st.st_dev, rec.get("dev"))
            ck.eq("%s ino (st_ino)" % where, st.st_ino, rec.get("ino"))
        if pid in procs:
            ck.eq("%s proc_start_ns == process start_ns" % where, procs[pid].get("start_ns"),
                  rec.get("proc_start_ns"))

    # nothing under DIR that the workload did not do
    for (pid, path), rec in sorted(files.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if under(path, d) and (pid, path) not in expected:
            ck.fail("unexpected file record under %s: pid %r path %r counters %s" %
                    (d, pid, path, brief(rec.get("counters"))))
        if under(path, d) and pid not in mpids:
            ck.fail("file record under %s for pid %r, not a workload process" % (d, pid))

    # the checkpoint
    ckpt = files.get((parent, d + "/ckpt.tmp"))
    if ck.check(ckpt is not None, "no checkpoint record %s/ckpt.tmp for pid %d" % (d, parent)):
        c = ckpt["counters"]
        ck.eq("checkpoint writes", 64, c.get("writes"))
        ck.eq("checkpoint bytes_written", 64 << 20, c.get("bytes_written"))
        ck.eq("checkpoint fsyncs", 1, c.get("fsyncs"))
        ck.check(str(ckpt.get("renamed_to", "")).endswith("/ckpt.pt"),
                 "checkpoint renamed_to %r does not end with /ckpt.pt" % ckpt.get("renamed_to"))

    # the symlink: recorded under its target
    link_rec = files.get((parent, d + "/data/d00/f0003"))
    if ck.check(link_rec is not None, "no record for the symlink target %s/data/d00/f0003" % d):
        # opened twice by the parent: at creation and through DIR/link3
        ck.eq("symlink target opens (creation + open through link3)", 2,
              link_rec["counters"].get("opens"))
    for (pid, path) in files:
        if under(path, d) and ("link" in os.path.basename(path) or "/linkdir/" in path or
                               "/sub/" in path or "/../" in path):
            ck.fail("record under a non-canonical name: pid %r path %r" % (pid, path))

    # all data files
    data = [d + "/data/d%02d/f%04d" % (i // 100, i) for i in range(3000)]
    missing_parent = [p for p in data if (parent, p) not in files]
    ck.check(not missing_parent, "%d data files have no record for the parent (first: %s)" %
             (len(missing_parent), missing_parent[:3]))
    for p in data:
        readers = [c for c in children if (c, p) in files]
        if len(readers) != 1:
            ck.fail("data file %s: expected a record in exactly one child, got %s" % (p, readers))

    for pid in [parent] + children:
        check_process_sums(ck, doc, pid)
    check_latency(ck, doc)


def parse_manifest(ck, out):
    try:
        return json.loads(out.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        ck.fatal("the workload's manifest (stdout) is not JSON: %s\n%r" % (e, out[:2000]))


# Darshan's FILE_ALIGNMENT, written here from Darshan 3.5.0's source (darshan-core.c
# darshan_get_exe_and_mounts, add_entry, darshan_fs_info_from_path) independently of iolens'
# C++ (agent/core/file_alignment.cpp): the mounts of /etc/mtab (here /proc/self/mounts,
# escapes decoded) but the excluded types, nfs after the others, a (point, type) once, at most
# 64; the block size statfs's f_bsize; the longest mount point that is a string prefix of the
# path; -1 when none is. (Lustre's 1 MiB and statfs failures do not occur in these tests.)
# Python's os.statvfs gives statfs's f_bsize as its f_bsize.
_DARSHAN_EXCLUDED = {"tmpfs", "proc", "sysfs", "devpts", "binfmt_misc", "fusectl", "debugfs",
                     "securityfs", "nfsd", "none", "rpc_pipefs", "hugetlbfs", "cgroup"}


def _unescape_mount(s):
    return re.sub(r"\\([0-3][0-7][0-7])", lambda m: chr(int(m.group(1), 8)), s)


def darshan_file_alignment(path):
    with open("/proc/self/mounts") as f:
        mounts = [(_unescape_mount(p[2]), _unescape_mount(p[1]))
                  for p in (line.split() for line in f) if len(p) >= 3]
    table = []
    for nfs_pass in (False, True):
        for typ, point in mounts:
            if len(table) >= 64:
                break
            if (typ == "nfs") != nfs_pass or typ in _DARSHAN_EXCLUDED:
                continue
            if any(point == p and typ == t for p, t, _ in table):
                continue
            table.append((point, typ, os.statvfs(point).f_bsize))
    # Longest first; Darshan's qsort leaves equal lengths in no set order: the later mount (the
    # one a shared point shows) first, as iolens takes it.
    order = sorted(range(len(table)), key=lambda i: (-len(table[i][0]), -i))
    for point, _, bsize in (table[i] for i in order):
        if path.startswith(point):
            return bsize
    return -1
