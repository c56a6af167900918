# SPDX-License-Identifier: Apache-2.0
"""Harness of the iolensd end-to-end tests (tests/e2e/daemon_*_test.py), standard library only.

What it gives a test:
  - parse_args(): --iolensd, --iolens, --workload (tests/workloads/job_workload, static);
  - Cgroups: a private tree /iolens-e2e-<pid> under the cgroup2 mount (found in
    /proc/self/mountinfo), created on demand and always removed, deepest first, with every
    process still in it killed (cgroup.kill) first;
  - Daemon: iolensd with a temporary config, output dir, state dir, socket and a pin dir
    /sys/fs/bpf/iolens-e2e-<pid>[-N]; started, waited for (its socket answers `status`), queried,
    stopped (SIGTERM) or killed (SIGKILL, see Daemon.kill9 / Daemon.restart for the restart test);
    its job records read from the output dir;
  - run_in_cgroup(): a workload started the way runc/slurmstepd start one: a shell moves itself
    into the cgroup (`echo $$ > CG/cgroup.procs`) and execs the workload;
  - Cleanup.register(): everything created is undone at exit, pass, fail, exception or SIGTERM
    (ctest's timeout), in reverse order: daemons killed and their pin dirs removed, workloads
    killed, cgroups removed, temp dirs removed (kept with IOLENS_E2E_KEEP=1), groups deleted.

Environment: IOLENS_E2E_KEEP=1 keeps the temp dirs (configs, logs, records);
IOLENS_E2E_DAEMON_CONFIG adds settings to every generated config (e.g. 'log_level: debug', or
'limits:\n  kernel_file_records: 262144' with a literal \n); IOLENS_E2E_TMP: where the temp dirs
go (default /var/tmp).

Every wait has a deadline; none of these helpers sleeps for a fixed long time.
"""
import argparse
import atexit
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True
import e2e_common as E  # noqa: E402

JOB_SCHEMA = "iolens.job/1"
BPFFS = "/sys/fs/bpf"
log = E.log
SKIP = E.SKIP


def require_root():
    if os.geteuid() != 0:
        log("SKIP: not root (euid %d): iolensd needs root to load its BPF programs and to "
            "create cgroups" % os.geteuid())
        sys.exit(SKIP)


def parse_args(extra=None, workload=True):
    p = argparse.ArgumentParser()
    p.add_argument("--iolens", required=True, help="path of the iolens CLI")
    p.add_argument("--iolensd", required=True, help="path of the iolensd daemon")
    if workload:
        p.add_argument("--workload", required=True, help="path of tests/workloads/job_workload")
    for args, kw in extra or []:
        p.add_argument(*args, **kw)
    a = p.parse_args()
    names = ["iolens", "iolensd"] + (["workload"] if workload else [])
    for name in names:
        path = os.path.realpath(getattr(a, name))
        if not os.access(path, os.X_OK):
            log("FAIL: %s binary %s is not executable" % (name, path))
            sys.exit(1)
        setattr(a, name, path)
    return a


# --- cleanup ------------------------------------------------------------------------------------


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def record_json_bytes(data):
    """A job record's JSON bytes from the bytes iolensd wrote: one zstd frame (its default
    `record_compression: zstd`, decompressed here by the zstd tool, an independent reader) or
    the JSON itself (`none`)."""
    if data[:4] != ZSTD_MAGIC:
        return data
    try:
        r = subprocess.run(["zstd", "-dcq"], input=data, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, check=False)
    except OSError as e:  # not FileNotFoundError to callers: that means "rotated away" there
        raise RuntimeError("cannot run the zstd tool to read a job record (apt-get install "
                           "zstd; .ci/setup does): %s" % e)
    if r.returncode != 0:
        raise ValueError("zstd -d failed: %s" % r.stderr.decode("utf-8", "replace").strip())
    return r.stdout


def record_stem(path):
    """A job record's path without its ".json" or ".json.zst" (its Darshan log is the stem's
    ".darshan")."""
    for suffix in (".json.zst", ".json"):
        if path.endswith(suffix):
            return path[:-len(suffix)]
    raise ValueError("%s is not named like a job record" % path)


def load_record(path):
    """A job record file (`.json` or `.json.zst`) as a document: valid UTF-8, valid JSON; a
    compressed one must be named `.json.zst` and a plain one `.json`."""
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".json.zst") != (raw[:4] == ZSTD_MAGIC):
        raise ValueError("%s: the name does not say what the file is (zstd magic: %s)" %
                         (path, raw[:4] == ZSTD_MAGIC))
    return json.loads(record_json_bytes(raw).decode("utf-8"))


class _Cleanup:
    """Undo actions run in reverse order of registration, once, each guarded."""

    def __init__(self):
        self.actions = []
        self.done = False

    def register(self, what, fn):
        self.actions.append((what, fn))

    def run(self):
        if self.done:
            return
        self.done = True
        for what, fn in reversed(self.actions):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup must go on
                log("cleanup: %s: %s" % (what, e))


Cleanup = _Cleanup()
atexit.register(Cleanup.run)


def _on_signal(signo, _frame):
    log("interrupted by signal %d: cleaning up" % signo)
    Cleanup.run()
    os._exit(128 + signo)


signal.signal(signal.SIGTERM, _on_signal)  # ctest kills a test that times out with SIGTERM


def tempdir(tag, base=None):
    """A fresh directory (on disk unless base says otherwise), canonical, world-traversable
    (0755: tests run clients as another user), removed at exit unless IOLENS_E2E_KEEP."""
    base = base or os.environ.get("IOLENS_E2E_TMP", "/var/tmp")
    d = os.path.realpath(tempfile.mkdtemp(prefix="iolens-e2e-%s-" % tag, dir=base))
    os.chmod(d, 0o755)
    if not os.environ.get("IOLENS_E2E_KEEP"):
        Cleanup.register("remove " + d, lambda: shutil.rmtree(d, ignore_errors=True))
    else:
        Cleanup.register("keep " + d, lambda: log("kept %s (IOLENS_E2E_KEEP set)" % d))
    return d


def wait_for(what, cond, timeout, interval=0.02):
    """Polls cond() until it returns a true value (returned) or `timeout` s pass (None)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            log("waited %.1f s for %s: not reached" % (timeout, what))
            return None
        time.sleep(interval)


def wait_or_fail(ck, what, cond, timeout, interval=0.02):
    """wait_for, and a failed check when `what` is not reached in time: a test that goes on
    after a wait that timed out checks a state it never reached."""
    v = wait_for(what, cond, timeout, interval)
    if not v:
        ck.fail("%s: not reached within %s s" % (what, timeout))
    return v


# --- cgroups ------------------------------------------------------------------------------------

def make_group(ck, tag):
    """A new system group iolens-e2e-<tag>-<pid> (groupadd), deleted at exit; its gid."""
    import grp
    group = "iolens-e2e-%s-%d" % (tag, os.getpid())
    r = subprocess.run(["groupadd", group], capture_output=True, text=True)
    if r.returncode != 0:
        ck.fatal("groupadd %s: %s" % (group, r.stderr))
    Cleanup.register("groupdel " + group, lambda: subprocess.run(["groupdel", group]))
    return group, grp.getgrnam(group).gr_gid


def cgroup2_mount():
    """The cgroup2 mount iolensd's `auto` picks: /sys/fs/cgroup if cgroup2, else
    /sys/fs/cgroup/unified (systemd's hybrid layout), else the first cgroup2 mount."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if "-" not in fields:
                continue
            dash = fields.index("-")
            point = fields[4].encode().decode("unicode_escape")
            mounts.append((point, fields[dash + 1]))
    visible = {}
    for point, fstype in mounts:
        visible[point] = fstype  # a later mount on the same point hides the earlier ones
    for cand in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if visible.get(cand) == "cgroup2":
            return cand
    for point, fstype in visible.items():
        if fstype == "cgroup2":
            return point
    return None


class Cgroups:
    """A private cgroup tree /iolens-e2e-<pid>[-tag] under the cgroup2 mount. Paths given to
    its methods are relative to the prefix ("kubepods/besteffort/pod..."); rel() gives the path
    relative to the mount (what iolensd and its job records use), abs() the directory."""

    def __init__(self, tag=""):
        self.mount = cgroup2_mount()
        if self.mount is None:
            log("FAIL: no cgroup2 mount in /proc/self/mountinfo")
            sys.exit(1)
        self.prefix = "/iolens-e2e-%d%s" % (os.getpid(), "-" + tag if tag else "")
        self.created = []
        Cleanup.register("remove cgroups under " + self.prefix, self.remove_all)

    def rel(self, sub=""):
        return self.prefix + ("/" + sub.strip("/") if sub else "")

    def abs(self, sub=""):
        return self.mount + self.rel(sub)

    def mkdir(self, sub):
        """Creates the cgroup and any missing parent; returns its absolute directory."""
        parts = [p for p in sub.strip("/").split("/") if p]
        cur = ""
        for p in [""] + parts:
            cur = cur + "/" + p if p else cur
            d = self.abs(cur)
            try:
                os.mkdir(d)
                self.created.append(d)
            except FileExistsError:
                pass
        return self.abs(sub)

    def procs(self, sub):
        try:
            with open(os.path.join(self.abs(sub), "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []

    def rmdir(self, sub, timeout=5.0):
        """Removes one (empty of processes, childless) cgroup; retries EBUSY while the last
        task finishes exiting. Returns the time rmdir succeeded (monotonic)."""
        d = self.abs(sub)
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(d)
                return time.monotonic()
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def remove_tree(self, sub):
        """Kills every process below `sub`, removes it and every cgroup below, deepest first."""
        top = self.abs(sub)
        if not os.path.isdir(top):
            return
        kill = os.path.join(top, "cgroup.kill")
        if os.path.exists(kill):
            try:
                with open(kill, "w") as f:
                    f.write("1")
            except OSError as e:
                log("cleanup: cgroup.kill %s: %s" % (top, e))
        dirs = []
        for root, subdirs, _ in os.walk(top):
            dirs.append(root)
        for d in sorted(dirs, key=lambda p: p.count("/"), reverse=True):
            deadline = time.monotonic() + 5
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno == errno.EBUSY and time.monotonic() < deadline:
                        time.sleep(0.02)
                        continue
                    log("cleanup: cannot remove cgroup %s: %s" % (d, e))
                    break

    def remove_all(self):
        self.remove_tree("")


def run_in_cgroup(cg_abs, argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, cwd=None):
    """Starts `argv` inside cgroup directory `cg_abs` the way container runtimes and slurmstepd
    do: `sh -c 'echo $$ > CG/cgroup.procs; exec WORKLOAD'` (the shell moves itself, then execs:
    the workload keeps the shell's pid). Returns the Popen."""
    script = 'echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@"'
    return subprocess.Popen(["/bin/sh", "-c", script, "sh", cg_abs] + list(argv), stdin=stdin,
                            stdout=stdout, stderr=stderr, cwd=cwd)


# A writer with a gate: writes <name>1 (1000 bytes) in `work`, says {"ready": true}, waits for a
# byte on stdin, writes <name>2 (2000 bytes), exits. For tests that change the world around a
# live job (the clock, the mounts) and then check its record against these sizes.
GATED_WRITER = r'''
import os, sys
work, name = sys.argv[1], sys.argv[2]
def put(n, size):
    with open(os.path.join(work, n), "wb") as f:
        f.write(b"x" * size)
put(name + "1", 1000)
print('{"ready": true}', flush=True)
sys.stdin.read(1)
put(name + "2", 2000)
print('{"done": true}', flush=True)
'''
GATED_WRITER_BYTES = (1000, 2000)


def start_gated_writer(ck, cg_abs, work, name):
    """GATED_WRITER in cgroup `cg_abs`, once it has written its first file."""
    p = run_in_cgroup(cg_abs, ["/usr/bin/python3", "-c", GATED_WRITER, work, name],
                      stdin=subprocess.PIPE)
    Cleanup.register("kill " + name, lambda: p.poll() is None and p.kill())
    read_json_line(ck, p, name + " (ready)")
    return p


def finish_gated_writer(ck, p, name):
    p.stdin.write(b"g")
    p.stdin.close()
    p.stdin = None
    finish_workload(ck, p, name)


def gated_writer_files(doc, work, name):
    """{basename: bytes_written} of a GATED_WRITER's files in a record."""
    return {os.path.basename(f["path"]): f["counters"]["bytes_written"] for f in doc["files"]
            if os.path.dirname(f.get("path") or "") == work
            and os.path.basename(f["path"]).startswith(name)}


def finish_workload(ck, p, what, timeout=60):
    """Waits for a run_in_cgroup workload; returns its parsed manifest (last stdout line)."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        ck.fail("%s did not finish within %d s" % (what, timeout))
        return None
    if p.returncode != 0:
        ck.fail("%s exited %d (97: could not join its cgroup); stderr: %s" %
                (what, p.returncode, err.decode("utf-8", "replace")))
        return None
    lines = [x for x in out.decode().splitlines() if x.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError) as e:
        ck.fail("%s: no manifest on stdout (%s): %r" % (what, e, out[-500:]))
        return None


def read_json_line(ck, p, what, timeout=30):
    """One JSON line from a workload's stdout (a gate message), with a deadline."""
    import select
    deadline = time.monotonic() + timeout
    buf = b""
    fd = p.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or p.poll() is not None and not select.select([fd], [], [], 0)[0]:
            ck.fatal("%s: no line on stdout within %d s (exit %r; stderr %r)" %
                     (what, timeout, p.poll(), p.stderr.read() if p.poll() is not None else ""))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 1)  # byte by byte: the rest stays for communicate()
            if not chunk:
                continue
            buf += chunk
    return json.loads(buf.decode())


# --- the daemon ---------------------------------------------------------------------------------

# How long a test waits for one answer. `status` and `jobs` come from the control socket's front
# thread within two 40 ms waits whatever the loop does (docs/control.md#answer-times; asserted
# by e2e_daemon_responsive, with the answers' age). `job` (a closed job, or a live job's first
# page), `capture*` and `run*` are answered by the loop between its pieces of work, and a piece
# that drains a full kernel map or snapshots a 100,000-file job took seconds on a loaded 2-CPU
# machine (seen in CI: two tests failed at 5 s while other builds ran). The tests that use this
# check what the daemon answers; how fast is e2e_daemon_responsive's and e2e_daemon_metrics_slow's.
CONTROL_TIMEOUT_S = 30.0
# An answer from the control socket's front thread at least this old was built before it was
# asked (control::kFreshAnswerWait, docs/control.md#answer-times).
FRESH_ANSWER_MS = 40


def control(sock, req, timeout=CONTROL_TIMEOUT_S, fds=(), received=None):
    """One request over the control socket (docs/control.md): returns the decoded answer
    ({"ok": true, "result": ...} or {"ok": false, "code", "error"}); raises OSError if the
    socket does not answer. `fds`: descriptors sent with it (SCM_RIGHTS), as `iolens capture`
    sends its output file. `received`: a list that gets the descriptors the daemon sends with
    its answer (the caller closes them); without it they are closed here."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    got = []
    try:
        s.connect(sock)
        line = (json.dumps(req) + "\n").encode()
        if fds:
            socket.send_fds(s, [line], list(fds))
        else:
            s.sendall(line)
        data = b""
        while b"\n" not in data:
            chunk, new_fds, _, _ = socket.recv_fds(s, 1 << 20, 4)
            got.extend(new_fds)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
        if received is None:
            for fd in got:
                os.close(fd)
        else:
            received.extend(got)
    return json.loads(data.split(b"\n", 1)[0].decode())


def default_preallocated():
    """iolensd's file records when its config does not say: preallocated on Linux 6.1 and later
    (a preallocated map reuses a deleted element at once before, bpf/README.md)."""
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (6, 1)


_kernel_has_casts = []


def expected_program_build():
    """The build of the programs iolensd must say it loaded (status.program_build; bpf/README.md
    "Two builds"): IOLENS_BPF_BUILD's when it names one, else casts where the kernel's BTF has
    the kfuncs bpf_rdonly_cast, bpf_task_from_pid and bpf_task_release (bpftool's dump, read
    once), else plain."""
    asked = os.environ.get("IOLENS_BPF_BUILD", "auto")
    if asked in ("casts", "plain"):
        return asked
    if not _kernel_has_casts:
        out = subprocess.run(["/usr/sbin/bpftool", "btf", "dump", "file",
                              "/sys/kernel/btf/vmlinux"], capture_output=True, text=True,
                             check=True).stdout
        funcs = set(re.findall(r"^\[\d+\] FUNC '(bpf_rdonly_cast|bpf_task_from_pid|"
                               r"bpf_task_release)'", out, re.M))
        _kernel_has_casts.append(len(funcs) == 3)
    return "casts" if _kernel_has_casts[0] else "plain"


def read_text(path):
    """A log file's text ("" if it is not there), undecodable bytes replaced."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


_daemon_serial = [0]


class Daemon:
    """One iolensd with its own config, dirs, socket and pin dir.

    `rules`: the YAML text of the `jobs:` list items (already indented by two spaces, e.g.
    "  - cgroup: {paths: [\"/x/*\"]}"), or a full `config_text` for the error tests."""

    def __init__(self, iolensd, rules=None, extra_config="", args=(), tag="d", config_text=None,
                 iolens=None, wrap=()):
        _daemon_serial[0] += 1
        n = _daemon_serial[0]
        self.iolensd = iolensd
        self.iolens_path = iolens  # the CLI, for cli()
        self.dir = tempdir("daemon-%s" % tag)
        self.output_dir = os.path.join(self.dir, "out")
        self.state_dir = os.path.join(self.dir, "state")
        self.socket = os.path.join(self.dir, "sock")
        self.pin_dir = "%s/iolens-e2e-%d%s" % (BPFFS, os.getpid(), "" if n == 1 else "-%d" % n)
        self.config = os.path.join(self.dir, "iolensd.yaml")
        self.log_path = os.path.join(self.dir, "iolensd.log")
        self.args = list(args)
        self.wrap = list(wrap)  # a command that execs iolensd (e.g. unshare): same pid
        self.proc = None
        self.rc = None
        if config_text is None:
            # IOLENS_E2E_DAEMON_CONFIG: extra settings for every daemon, e.g. "log_level: debug"
            extra_config += os.environ.get("IOLENS_E2E_DAEMON_CONFIG", "").replace("\\n", "\n")
            if extra_config and not extra_config.endswith("\n"):
                extra_config += "\n"
            # Never the default metrics port (127.0.0.1:9464): tests run in parallel and next
            # to a real daemon. Port 0 = any free one (status.metrics.ports says which).
            if not re.search(r"^metrics:", extra_config, re.M):
                extra_config += 'metrics:\n  listen: "127.0.0.1:0"\n'
            # Rounds every 200 ms unless the extra settings give the interval (bench/soak.py
            # --drain-interval: the figures at the default, 1 s).
            interval = ("" if re.search(r"^drain_interval(_ms)?:", extra_config, re.M)
                        else "drain_interval: 200ms\n")
            config_text = ("output_dir: %s\nstate_dir: %s\npin_dir: %s\nsocket: %s\n"
                           "%s%sjobs:\n%s\n" %
                           (self.output_dir, self.state_dir, self.pin_dir, self.socket,
                            interval, extra_config, rules))
        with open(self.config, "w") as f:
            f.write(config_text)
        Cleanup.register("stop iolensd " + self.pin_dir, self._cleanup)

    # starting and stopping

    def start(self, ck, timeout=30):
        """Starts iolensd and waits until its socket answers `status` (fatal otherwise)."""
        self.spawn()
        t0 = time.monotonic()
        st = wait_for("iolensd to answer status", lambda: self._status_or_exit(), timeout)
        if st is None or self.proc.poll() is not None:
            rc = self.proc.poll()
            ck.fatal("iolensd did not come up within %d s (exit %r); log:\n%s" %
                     (timeout, rc, self.log()))
        log("iolensd pid %d ready in %.2f s (hooks %s, %s build)" %
            (self.proc.pid, time.monotonic() - t0, st.get("syscall_hooks"),
             st.get("program_build")))
        ck.check(st.get("program_build") == expected_program_build(),
                 "iolensd loaded the %r build of the programs, not %r" %
                 (st.get("program_build"), expected_program_build()))
        # Its file records as the config asks (limits.kernel_file_records_preallocated; the
        # *_timing_off registrations say false), or the default when it does not say and no
        # earlier daemon's pins are resumed (preallocated on Linux 6.1+): this start's log line.
        with open(self.config) as f:
            text = f.read()
        said = re.search(r"^\s*kernel_file_records_preallocated:\s*(\S+)\s*(#.*)?$", text,
                         re.M)
        if said or not st.get("restart", {}).get("resumed"):
            prealloc = said.group(1).lower() == "true" if said else default_preallocated()
            want = r"kernel file records: \d+ preallocated \(" if prealloc else \
                r"kernel file records: up to \d+, made as files are opened"
            ck.check(re.search(want, self.log()[self.log_start:]) is not None,
                     "iolensd's log of this start does not say /%s/" % want)
        return st

    def spawn(self):
        """Starts iolensd without waiting for it (tests of refusals wait for its exit)."""
        self.log_start = len(self.log())  # where this start's lines begin (read_text: text)
        self.logf = open(self.log_path, "ab")
        argv = self.wrap + [self.iolensd, "-c", self.config] + self.args
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        self.rc = None

    def _status_or_exit(self):
        if self.proc.poll() is not None:
            return {"exited": self.proc.returncode}
        try:
            a = control(self.socket, {"cmd": "status"}, timeout=2)
        except (OSError, ValueError):
            return None
        return a.get("result") if a.get("ok") else None

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Sends `sig` and waits; returns (exit code, seconds until exit)."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else None), 0.0
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.rc = self.proc.wait()
            log("iolensd did not exit within %d s of signal %d: killed" % (timeout, sig))
            return None, time.monotonic() - t0
        return self.rc, time.monotonic() - t0

    def kill9(self):
        """SIGKILL, as a crash: pins, state and the socket file stay behind for a restart."""
        return self.stop(signal.SIGKILL)

    def restart(self, ck, timeout=30):
        """Starts a new iolensd on the same config (so the same pin dir, state dir, socket and
        output dir): the SIGKILL-restart test (to come with the state checkpoint) does
        kill9() ... restart() and then checks that the jobs continue with exact counts."""
        if self.proc is not None and self.proc.poll() is None:
            ck.fatal("restart() while iolensd still runs")
        return self.start(ck, timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kernel_map_entries(self, name="files"):
        """Entries of one of the daemon's pinned maps, counted by bpftool (not by iolens);
        None if bpftool could not."""
        out = subprocess.run(["bpftool", "-j", "map", "dump", "pinned",
                              os.path.join(self.pin_dir, name)], capture_output=True, timeout=120)
        try:
            return len(json.loads(out.stdout))
        except ValueError:
            log("bpftool map dump: exit %d, %s" % (out.returncode, out.stderr[-500:]))
            return None

    def _cleanup(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.pin_dir, ignore_errors=True)
        if os.path.exists(self.pin_dir):
            subprocess.run(["rm", "-rf", self.pin_dir])

    # queries

    def request(self, req, timeout=CONTROL_TIMEOUT_S):
        return control(self.socket, req, timeout)

    def closed_record(self, job_id, timeout=CONTROL_TIMEOUT_S):
        """`job` of a closed job asked with "fd": the answer, and the record read from the
        descriptor the daemon sent with it (None if none came)."""
        fds = []
        a = control(self.socket, {"cmd": "job", "id": job_id, "fd": True}, timeout, received=fds)
        doc = None
        for fd in fds:
            with os.fdopen(fd, "rb") as f:
                if doc is None:
                    doc = json.loads(record_json_bytes(f.read()).decode("utf-8"))
        return a, doc

    def status(self, fresh_within=10.0):
        """`status` as the loop sees it now. The front thread answers at once, from what the
        loop built last when the loop is busy (age_ms at least FRESH_ANSWER_MS: docs/control.md
        #answer-times): asked again then, for up to `fresh_within` seconds, since checks here compare
        the daemon's state after an action with the test's own truth. The last answer if none
        was fresh by then (a daemon without the front thread has no age_ms: always fresh)."""
        deadline = time.monotonic() + fresh_within
        while True:
            a = self.request({"cmd": "status"})
            st = a["result"] if a.get("ok") else None
            if (st is None or st.get("age_ms", 0) < FRESH_ANSWER_MS or
                    time.monotonic() >= deadline):
                return st
            time.sleep(0.02)

    def cli(self, *args, user=None, timeout=20):
        """Runs `iolens ARGS --socket S` (as `user`: a setpriv prefix list); returns
        CompletedProcess with text output."""
        argv = list(user or []) + [self.iolens_path] + list(args) + ["--socket", self.socket]
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def log(self):
        return read_text(self.log_path)

    def pins(self):
        try:
            return sorted(os.listdir(self.pin_dir))
        except FileNotFoundError:
            return None

    # job records

    def record_files(self):
        try:
            names = os.listdir(self.output_dir)
        except FileNotFoundError:
            return []
        return sorted(os.path.join(self.output_dir, n) for n in names
                      if n.endswith((".json", ".json.zst")) and not n.startswith("."))

    def records(self):
        """Every job record in the output dir: {path: doc}. The daemon writes a record under a
        dot name and renames it into place, so a *.json that does not parse is a bug: raised
        (the test fails with the file and the error), never dropped."""
        out = {}
        for p in self.record_files():
            try:
                out[p] = load_record(p)
            except FileNotFoundError:
                continue  # rotated away between the listing and the read
            except (OSError, ValueError, UnicodeDecodeError) as e:
                raise RuntimeError("job record %s cannot be read as strict JSON: %s" % (p, e))
        return out

    def records_of(self, job_id):
        return [(p, d) for p, d in self.records().items()
                if d and d.get("job", {}).get("id") == job_id]

    def wait_record_file(self, timeout, poll=0.01):
        """The name of the first record file to appear in the output directory (a job's JSON,
        plain or zstd; not a temporary), or None after `timeout` s. Not parsed: a benchmark
        times its appearance without holding the interpreter on a big record."""
        deadline = time.monotonic() + timeout
        while True:
            for f in os.listdir(self.output_dir):
                if f.endswith((".json", ".json.zst")) and not f.startswith("."):
                    return f
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)

    def wait_record(self, ck, job_id, timeout=15):
        """The one record of `job_id` (fatal if none appears in time)."""
        got = wait_for("the record of job %s" % job_id, lambda: self.records_of(job_id), timeout)
        if not got:
            ck.fail("no record of job %s in %s within %d s (files: %s); iolensd log tail:\n%s" %
                    (job_id, self.output_dir, timeout,
                     [os.path.basename(p) for p in self.record_files()], self.log()[-3000:]))
            return None
        if len(got) > 1:
            ck.fail("job %s has %d records: %s" % (job_id, len(got), [p for p, _ in got]))
        return got[0][1]

    def wait_live(self, ck, job_ids, timeout=10, hooks=True):
        """Waits until every job of `job_ids` is listed live (and, with hooks, the syscall
        hooks are attached): only then does job I/O count under the on-demand policy."""
        def ready():
            a = self.request({"cmd": "jobs"})
            if not a.get("ok"):
                return None
            live = {j["id"] for j in a["result"]["jobs"] if j.get("state") == "live"}
            if not set(job_ids) <= live:
                return None
            if hooks and self.status().get("syscall_hooks") != "attached":
                return None
            return live
        if wait_for("jobs %s live" % sorted(job_ids), ready, timeout) is None:
            a = self.request({"cmd": "jobs"})
            ck.fatal("jobs %s not all live within %d s; iolensd lists %s; log tail:\n%s" %
                     (sorted(job_ids), timeout,
                      [(j["id"], j["state"]) for j in a.get("result", {}).get("jobs", [])],
                      self.log()[-3000:]))


# --- checks on job records ----------------------------------------------------------------------

def expected_timing():
    """The timing every generated config asks for: "off" when IOLENS_E2E_DAEMON_CONFIG sets it
    (the *_timing_off registrations), else the default "exact"."""
    extra = os.environ.get("IOLENS_E2E_DAEMON_CONFIG", "").replace("\\n", "\n")
    return "off" if re.search(r"^timing:\s*off\s*$", extra, re.M) else "exact"


def expected_record_suffix():
    """The name of every record the generated configs make: ".json" when
    IOLENS_E2E_DAEMON_CONFIG sets record_compression: none, else ".json.zst" (the default)."""
    extra = os.environ.get("IOLENS_E2E_DAEMON_CONFIG", "").replace("\\n", "\n")
    return ".json" if re.search(r"^record_compression:\s*none\s*$", extra, re.M) else ".json.zst"


def check_record_shape(ck, doc, job_id):
    ck.eq("%s schema" % job_id, JOB_SCHEMA, doc.get("schema"))
    ck.eq("%s timing" % job_id, expected_timing(), doc.get("timing"))
    for k in ("job", "processes", "files", "lost"):
        if not ck.check(k in doc, "%s: record has no %r" % (job_id, k)):
            return False
    return True


def stop_checked(ck, d, node_lost_zero=False):
    """Stops iolensd (SIGTERM), which must exit 0; with `node_lost_zero`, its status's node-wide
    `lost` counts are checked to be zero first."""
    if node_lost_zero:
        for k, v in sorted(d.status()["lost"].items()):
            ck.eq("node lost.%s" % k, 0, v)
    rc, _ = d.stop()
    ck.eq("clean stop", 0, rc)


def check_lost_zero(ck, doc, where):
    # block_untimed: node-wide, and not a workload's to keep at zero (e2e_common.NOT_ZERO_CHECKED)
    for k, v in sorted((doc.get("lost") or {}).items()):
        if isinstance(v, (int, float)) and k != "block_untimed":
            ck.eq("%s lost.%s" % (where, k), 0, v)


def self_move_write(pid, cg_abs):
    """The one write a run_in_cgroup shell makes to its new cgroup's cgroup.procs: the write
    that moves it into the job. The task is selected inside that write, so its sys_exit finds
    it traced though its sys_enter was not: iolensd must not count it (bpf/iolens.bpf.c sys_exit:
    a call whose entry was not seen is not counted). As a manifest entry, for the messages."""
    n = len(str(pid)) + 1
    return {"path": os.path.join(cg_abs, "cgroup.procs"), "opens": 0, "closes": 0, "reads": 0,
            "writes": 1, "bytes_read": 0, "bytes_written": n}


def mount_small_tmpfs(path, size, mode):
    """A tmpfs of `size` ("64k", "2m") at `path` (created with `mode`), unmounted at exit: a
    daemon directory that fills up or goes read-only (mount -o remount,...) when a test says."""
    os.makedirs(path, mode=mode)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=%o" % (size, mode), "tmpfs", path],
                   check=True)
    Cleanup.register("unmount the tmpfs at " + path,
                     lambda: subprocess.run(["umount", "-l", path]))


def start_many(ck, d, cg, workload, data, sub, nfiles, size, gate_end=False):
    """A live job cgroup `sub` running `job_workload many` (nfiles files of `size` bytes
    created, written, read back, unlinked) in a fresh directory below `data`: (job id, process).
    With gate_end, returns once the work is done, the process alive until its stdin says."""
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])
    wd = os.path.join(data, sub.replace("/", "_"))
    os.makedirs(wd)
    argv = [workload, "many", wd, str(nfiles), str(size)] + (["--gate-end"] if gate_end else [])
    p = run_in_cgroup(cg.abs(sub), argv,
                      stdin=subprocess.PIPE if gate_end else subprocess.DEVNULL)
    if gate_end:
        read_json_line(ck, p, "job_workload many --gate-end in " + sub, timeout=120)
    return job_id, p


def check_many_totals(ck, doc, manifest, pid, cg_abs, where, nfiles=None):
    """A `job_workload many` job's record against the workload's own totals (its manifest
    lists no files), the shell's move into the cgroup included if the record holds it; with
    nfiles, its distinct files too. Returns (totals, the move's write, moved records)."""
    t = manifest["totals"]
    mv = self_move_write(pid, cg_abs)
    moved = [f for f in doc["files"] if f.get("path") == mv["path"]]
    for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
        ck.eq("%s: job.totals.%s (the workload's own count)" % (where, k),
              t[k] + (mv[k] if moved else 0), doc["job"]["totals"].get(k))
    if nfiles is not None:
        ck.eq("%s: distinct files" % where, nfiles + len(moved), doc["job"].get("files"))
    return t, mv, moved


def check_manifest_files(ck, doc, manifests, where, strict=True, moves=()):
    """Every file of every manifest has exactly its counters; with `strict`, the record holds
    no other file and no process but the manifests' and the job totals equal their sums.
    `moves`: (pid, cgroup dir) of shells that moved themselves in: the write that moved each
    (self_move_write) must not be in the record (with `strict` it would fail anyway, as an
    unexpected file; this names the cause)."""
    files = {}
    for f in doc["files"]:
        k = (f.get("pid"), f.get("path"))
        if k in files:
            ck.fail("%s: two file records for pid %r path %r" % ((where,) + k))
        files[k] = f
    expected = {}
    tot = {k: 0 for k in ("opens", "reads", "writes", "bytes_read", "bytes_written")}
    for m in manifests:
        for mf in m["files"]:
            expected[(m["pid"], mf["path"])] = mf
        for k in tot:
            tot[k] += m["totals"][k]
    for pid, cg_abs in moves:
        mv = self_move_write(pid, cg_abs)
        rec = files.pop((pid, mv["path"]), None)
        ck.check(rec is None, "%s: pid %d's write to %s, the write that moved it into the job "
                 "(its entry happened before it was traced), is counted as job I/O: %s" %
                 (where, pid, mv["path"], E.brief(rec and rec.get("counters"))))
    for (pid, path), mf in sorted(expected.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rec = files.get((pid, path))
        w = "%s pid %d %s" % (where, pid, path)
        if not ck.check(rec is not None, "%s: no file record (records: %s)" %
                        (w, sorted(files)[:10])):
            continue
        c = rec.get("counters", {})
        for name in ("opens", "closes", "reads", "writes", "bytes_read", "bytes_written"):
            ck.eq("%s %s" % (w, name), mf[name], c.get(name))
        if os.path.exists(path):
            st = os.stat(path)
            ck.eq("%s dev" % w, st.st_dev, rec.get("dev"))
            ck.eq("%s ino" % w, st.st_ino, rec.get("ino"))
    if strict:
        for (pid, path), rec in sorted(files.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
            if (pid, path) not in expected:
                ck.fail("%s: unexpected file record pid %r path %r counters %s" %
                        (where, pid, path, E.brief(rec.get("counters"))))
        pids = sorted(p.get("pid") for p in doc["processes"])
        ck.eq("%s process pids" % where, sorted(m["pid"] for m in manifests), pids)
        totals = doc["job"].get("totals", {})
        for k, v in tot.items():
            ck.eq("%s job.totals.%s" % (where, k), v, totals.get(k))


def make_input(path, size):
    """The input file a workload reads, written by the test (outside every job)."""
    with open(path, "wb") as f:
        f.write(os.urandom(min(size, 1 << 16)) * (size // (1 << 16) + 1))
        f.truncate(size)


def cpu_seconds(pid):
    """User + system CPU time a process has used so far, in seconds (0 once reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_rss_kib(pid):
    """(VmRSS, VmHWM) of a process, in KiB; (0, 0) once it has exited."""
    rss = hwm = 0
    try:
        f = open("/proc/%d/status" % pid)
    except FileNotFoundError:
        return rss, hwm
    with f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def node_metric(ck, d, name):
    """The value of the daemon's own series `name` on its /metrics (one series: its labels, if
    any, are the node's); None if it has none."""
    port = (d.status().get("metrics") or {}).get("ports", [None])[0]
    if not port:
        ck.fail("status has no metrics port")
        return None
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for line in r.read().decode().splitlines():
            m = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
            if m:
                return float(m.group(2))
    return None


def metric(ck, d, name, labels):
    """The value of the first series `name` on the daemon's /metrics whose labels include
    `labels`; None if there is none."""
    st = d.status()
    port = (st.get("metrics") or {}).get("ports", [None])[0]
    if not port:
        ck.fail("status has no metrics port")
        return None
    # The page is rebuilt after drains, at most once a second.
    pat = re.compile(r'^%s\{([^}]*)\} (\S+)$' % re.escape(name))
    want = set('%s="%s"' % kv for kv in labels.items())

    def value():
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            for line in r.read().decode().splitlines():
                m = pat.match(line)
                if m and want <= set(m.group(1).split(",")):
                    return float(m.group(2))
        return None
    return value()
