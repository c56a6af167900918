#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""strace as an independent oracle for iolens' per-(process, file) counters.

Record a run with

    strace -f -y -s 0 -o TRACE -e trace=<STRACE_SYSCALLS> -- CMD...

(see strace_command()) and parse TRACE with parse_trace(). Every line of `-f -o FILE` output
starts with the thread id; -y annotates each descriptor argument and each descriptor returned
by open*/dup*/fcntl(F_DUPFD*) with the path of the file behind it (`3</data/x.npy>`), which is how
calls are attributed to files.

Counted per (process, path), following iolens' definitions (bpf/iolens_abi.h):
  opens          successful open/openat/openat2/creat (path of the returned descriptor)
  dups           successful dup/dup2/dup3/fcntl(F_DUPFD, F_DUPFD_CLOEXEC) (path of the source)
                 (iolens' own `opens` counter includes dups, Darshan-style: compare
                 iolens.opens with oracle opens + dups, see Tally.opens_with_dups)
  reads          read/pread64/readv/preadv/preadv2 returning >= 0 (0 included)
  bytes_read     the sum of their return values
  writes         write/pwrite64/writev/pwritev/pwritev2 returning >= 0
  bytes_written  the sum of their return values
  seeks          lseek returning >= 0
  closes         close returning 0
  stats          stat/lstat/fstat/newfstatat/statx returning 0: by descriptor (fstat, and the
                 *at calls with AT_EMPTY_PATH) on the descriptor's path; by path on the path
                 given, made absolute with the -y path of the directory descriptor (AT_FDCWD
                 included); a relative path of stat/lstat (no directory descriptor) is not
                 counted (a warning). Symlinks in a path are not resolved (iolens resolves them)
Failed calls (`= -1 ERRNO`) and calls that never returned (`= ?`) are not counted.
A call split by another thread's output (`... <unfinished ...>` then `<... NAME resumed>...`) is
joined back together before it is counted.

Processes: threads are folded into their thread-group leader using the CLONE_THREAD flag of the
clone/clone3 that created them, so the trace must include clone,clone3,fork,vfork (it does with
STRACE_SYSCALLS). The root process is the one of the first line (the traced command's execve).

Paths are strace's, i.e. the kernel's d_path of the open file (readlink /proc/PID/fd/N): absolute,
canonical, C-escaped by strace (decoded here), " (deleted)" appended for unlinked files
(strace prints `N</path>(deleted)`). Nothing
filters out non-regular descriptors (pipes show as `pipe:[N]`, sockets as `socket:[N]`); callers
select the paths they care about (e.g. everything under a dataset directory).

Command line:
    strace_oracle.py TRACE [--under DIR]...   per-file and per-process totals as JSON
    strace_oracle.py --self-test              check the parser against synthetic lines and a live
                                              strace of a program with known I/O (exit 0 / 1,
                                              77 if strace is missing)
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

STRACE_SYSCALLS = ",".join([
    "read", "pread64", "readv", "preadv", "preadv2",
    "write", "pwrite64", "writev", "pwritev", "pwritev2",
    "open", "openat", "openat2", "creat", "close",
    "dup", "dup2", "dup3", "fcntl", "lseek",
    "stat", "lstat", "fstat", "newfstatat", "statx",
    "clone", "clone3", "fork", "vfork", "execve", "execveat",
])

READS = {"read", "pread64", "readv", "preadv", "preadv2"}
WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2"}
OPENS = {"open", "openat", "openat2", "creat"}
DUPS = {"dup", "dup2", "dup3"}
FORKS = {"clone", "clone3", "fork", "vfork"}

FIELDS = ("opens", "dups", "reads", "bytes_read", "writes", "bytes_written", "seeks", "closes",
          "stats")
STATS = {"stat", "lstat", "fstat", "newfstatat", "statx"}


def strace_command(trace_file, cmd, strace="strace"):
    """The argv that records CMD (and all its descendants) for this oracle."""
    return [strace, "-f", "-y", "-s", "0", "-o", trace_file, "-e", "trace=" + STRACE_SYSCALLS,
            "--"] + list(cmd)


class Tally:
    __slots__ = FIELDS

    def __init__(self):
        for f in FIELDS:
            setattr(self, f, 0)

    def add(self, other):
        for f in FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))
        return self

    @property
    def opens_with_dups(self):
        return self.opens + self.dups

    def as_dict(self):
        return {f: getattr(self, f) for f in FIELDS}

    def __repr__(self):
        return "Tally(%s)" % ", ".join("%s=%d" % (f, getattr(self, f)) for f in FIELDS)


_ESC = re.compile(r'\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)', re.S)
_SIMPLE_ESC = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "a": 7, "b": 8, "e": 27}


def unescape(s):
    """Decode strace's C-style escaping of a path (octal \\303, \\xNN, \\n, \\\\, \\")."""
    if "\\" not in s:
        return s
    out = bytearray()
    pos = 0
    for m in _ESC.finditer(s):
        out += s[pos:m.start()].encode("utf-8", "surrogateescape")
        e = m.group(1)
        if e[0] == "x" and len(e) == 3:
            out.append(int(e[1:], 16))
        elif e[0] in "01234567":
            out.append(int(e, 8) & 0xFF)
        elif e in _SIMPLE_ESC:
            out.append(_SIMPLE_ESC[e])
        else:
            out += e.encode("utf-8", "surrogateescape")
        pos = m.end()
    out += s[pos:].encode("utf-8", "surrogateescape")
    return out.decode("utf-8", "surrogateescape")


# A descriptor with its -y annotation, at the start of the argument list or of the return value.
_FD = re.compile(r'(-?\d+)(?:<((?:[^>\\]|\\.)*)>(\(deleted\))?)?')
_LINE = re.compile(r'^(\d+)\s+(.*)$')
_CALL = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)\((.*)$', re.S)
_RET = re.compile(r'^(-?\d+|\?|0x[0-9a-fA-F]+)(?:<((?:[^>\\]|\\.)*)>(\(deleted\))?)?(?:\s.*)?$',
                  re.S)
_RESUMED = re.compile(r'^<\.\.\. ([A-Za-z_][A-Za-z0-9_]*) resumed>(.*)$', re.S)
_FLAGS = re.compile(r'flags=([A-Z0-9_|]+)')
# The first string argument (a path; strace prints file names whole whatever -s says).
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
# A directory descriptor (a number or AT_FDCWD) with its -y annotation.
_DIRFD = re.compile(r'(-?\d+|AT_FDCWD)(?:<((?:[^>\\]|\\.)*)>(\(deleted\))?)?')
_EXIT = re.compile(r'^\+\+\+ (exited with (\d+)|killed by (SIG\w+)).*\+\+\+$')


def _path(annotation, deleted):
    """The path of an -y annotation; strace 6 writes `N</path>(deleted)` for an unlinked file,
    kept here as "/path (deleted)" (what readlink /proc/PID/fd/N says)."""
    if annotation is None:
        return None
    return unescape(annotation) + (" (deleted)" if deleted else "")


def split_call(body):
    """'name(args) = ret...' -> (name, args, ret, ret_path) or None if not a complete call."""
    m = _CALL.match(body)
    if not m:
        return None
    name, rest = m.group(1), m.group(2)
    # The return value follows the last ") = " whose tail looks like a return value.
    pos = len(rest)
    while True:
        pos = rest.rfind(")", 0, pos)
        if pos < 0:
            return None
        tail = rest[pos + 1:]
        t = tail.lstrip(" ")
        if t.startswith("= "):
            r = _RET.match(t[2:].lstrip(" "))
            if r:
                return name, rest[:pos], r.group(1), _path(r.group(2), r.group(3))


def first_fd(args):
    """(fd, path) of the first argument, path None if not annotated."""
    m = _FD.match(args)
    if not m:
        return None, None
    return int(m.group(1)), _path(m.group(2), m.group(3))


def _int_ret(ret):
    if ret == "?":
        return None
    try:
        return int(ret, 0)
    except ValueError:
        return None


class Trace:
    """The parsed trace. Counts are per (tgid, path) in self.records."""

    def __init__(self):
        self.records = {}        # (tgid, path) -> Tally
        self.root = None         # tid (= tgid) of the first line
        self.thread_parent = {}  # tid -> tid that created it with CLONE_THREAD
        self.proc_parent = {}    # pid -> pid of its parent process (as a tid; see ppid())
        self.exit_status = {}    # tid -> "exited with N" / "killed by SIG"
        self.warnings = []       # lines that could not be understood
        self._tid_records = {}   # (tid, path) -> Tally, before folding threads
        self._pending = {}       # tid -> text of an <unfinished ...> call
        self.tids = set()
        self.lines = 0

    # -- processes ---------------------------------------------------------------------------
    def tgid(self, tid):
        seen = set()
        while tid in self.thread_parent and tid not in seen:
            seen.add(tid)
            tid = self.thread_parent[tid]
        return tid

    def ppid(self, pid):
        """Parent process (tgid) of process pid, None for the root / unknown."""
        p = self.proc_parent.get(self.tgid(pid))
        return None if p is None else self.tgid(p)

    def processes(self):
        return sorted({self.tgid(t) for t in self.tids})

    def ancestors(self, pid):
        out, seen = [], set()
        p = self.ppid(pid)
        while p is not None and p not in seen:
            out.append(p)
            seen.add(p)
            p = self.ppid(p)
        return out

    def exit_of(self, pid):
        return self.exit_status.get(pid)

    # -- totals ------------------------------------------------------------------------------
    def per_file(self, keep=lambda path: True):
        """path -> Tally summed over processes."""
        out = {}
        for (pid, path), t in self.records.items():
            if keep(path):
                out.setdefault(path, Tally()).add(t)
        return out

    def per_process(self, keep=lambda path: True):
        """pid -> Tally summed over the kept files."""
        out = {}
        for (pid, path), t in self.records.items():
            if keep(path):
                out.setdefault(pid, Tally()).add(t)
        return out

    def files_of(self, pid, keep=lambda path: True):
        """path -> Tally of one process."""
        return {path: t for (p, path), t in self.records.items() if p == pid and keep(path)}

    # -- parsing -----------------------------------------------------------------------------
    def _tally(self, tid, path):
        key = (tid, path)
        t = self._tid_records.get(key)
        if t is None:
            t = self._tid_records[key] = Tally()
        return t

    def feed(self, line):
        line = line.rstrip("\n")
        if not line:
            return
        self.lines += 1
        m = _LINE.match(line)
        if not m:
            self.warnings.append("no pid prefix: " + line)
            return
        tid, body = int(m.group(1)), m.group(2)
        self.tids.add(tid)
        if self.root is None:
            self.root = tid
        if body.startswith("+++"):
            e = _EXIT.match(body)
            if e:
                self.exit_status[tid] = e.group(1)
            return
        if body.startswith("---"):  # a signal
            return
        if body.endswith("<unfinished ...>"):
            if tid in self._pending:
                self.warnings.append("unfinished call replaced: " + self._pending[tid])
            self._pending[tid] = body[:-len("<unfinished ...>")].rstrip(" ")
            return
        r = _RESUMED.match(body)
        if r:
            head = self._pending.pop(tid, None)
            if head is None or not head.startswith(r.group(1) + "("):
                self.warnings.append("resumed without its start: " + line)
                return
            sep = "" if head.endswith("(") else " "
            body = head + sep + r.group(2).lstrip(" ")
        call = split_call(body)
        if call is None:
            self.warnings.append("not a call: " + line)
            return
        self._account(tid, *call)

    def _account(self, tid, name, args, ret, ret_path):
        rv = _int_ret(ret)
        if rv is None or rv < 0:
            return  # failed, or never returned (process died / restarted: strace shows it again)
        if name in FORKS:
            if rv > 0:
                fm = _FLAGS.search(args)
                flags = set(fm.group(1).split("|")) if fm else set()
                if "CLONE_THREAD" in flags:
                    self.thread_parent[rv] = tid
                elif "CLONE_PARENT" in flags:
                    self.proc_parent[rv] = self.proc_parent.get(self.tgid(tid))
                else:
                    self.proc_parent[rv] = tid
                self.tids.add(rv)
            return
        if name in STATS:
            if rv == 0:
                path = self._stat_path(tid, name, args)
                if path is not None:
                    self._tally(tid, path).stats += 1
            return
        if name in OPENS:
            if ret_path is None:
                self.warnings.append("open without -y path: %d %s" % (tid, name))
                return
            self._tally(tid, ret_path).opens += 1
            return
        fd, path = first_fd(args)
        if fd is None:
            return
        if path is None:
            if name in READS or name in WRITES or name in DUPS or name in ("close", "lseek"):
                self.warnings.append("descriptor without -y path: %d %s(%s" % (tid, name, args))
            return
        if name in READS:
            t = self._tally(tid, path)
            t.reads += 1
            t.bytes_read += rv
        elif name in WRITES:
            t = self._tally(tid, path)
            t.writes += 1
            t.bytes_written += rv
        elif name in DUPS:
            self._tally(tid, path).dups += 1
        elif name == "fcntl":
            parts = args.split(",")
            if len(parts) >= 2 and parts[1].strip() in ("F_DUPFD", "F_DUPFD_CLOEXEC"):
                self._tally(tid, path).dups += 1
        elif name == "close":
            if rv == 0:
                self._tally(tid, path).closes += 1
        elif name == "lseek":
            self._tally(tid, path).seeks += 1

    def _stat_path(self, tid, name, args):
        """The file a successful stat call named, or None (a warning when it cannot be told)."""
        if name == "fstat":
            return first_fd(args)[1]
        m = _STR.search(args)
        if m is None:
            self.warnings.append("stat without a path argument: %d %s(%s" % (tid, name, args))
            return None
        given = unescape(m.group(1))
        if name in ("stat", "lstat"):
            if given.startswith("/"):
                return given
            self.warnings.append("relative path of %s not counted: %d %r" % (name, tid, given))
            return None
        base = _DIRFD.match(args)
        if given == "" and "AT_EMPTY_PATH" in args:
            return _path(base.group(2), base.group(3)) if base else None
        if given.startswith("/"):
            return given
        if base is None or base.group(2) is None:
            self.warnings.append("relative path without a -y directory: %d %s(%s" %
                                 (tid, name, args))
            return None
        return os.path.normpath(os.path.join(_path(base.group(2), None), given))

    def finish(self):
        for tid, head in self._pending.items():
            self.warnings.append("never resumed: %d %s" % (tid, head))
        self._pending = {}
        self.records = {}
        for (tid, path), t in self._tid_records.items():
            key = (self.tgid(tid), path)
            self.records.setdefault(key, Tally()).add(t)
        return self


def parse_lines(lines):
    tr = Trace()
    for line in lines:
        tr.feed(line)
    return tr.finish()


def parse_trace(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return parse_lines(f)


# ---------------------------------------------------------------------------------------------
# Self-test

_SYNTHETIC = r"""
100   execve("/usr/bin/prog", ["prog"], 0x7ffc /* 5 vars */) = 0
100   openat(AT_FDCWD</w>, "/d/a", O_RDONLY|O_CLOEXEC) = 3</d/a>
100   read(3</d/a>, ""..., 4096)        = 4096
100   read(3</d/a>,  <unfinished ...>
100   <... read resumed>""..., 4096)    = 10
100   read(3</d/a>, "", 4096)           = 0
100   read(3</d/a>, ""..., 4096)        = -1 EINTR (Interrupted system call)
100   read(3</d/a>, 0x7f00, 4096)       = ? ERESTARTSYS (To be restarted if SA_RESTART is set)
100   fcntl(3</d/a>, F_GETFL)           = 0x8000 (flags O_RDONLY|O_LARGEFILE)
100   fcntl(3</d/a>, F_DUPFD_CLOEXEC, 0) = 4</d/a>
100   dup2(3</d/a>, 9</d/b>)            = 9</d/a>
100   lseek(4</d/a>, 0, SEEK_CUR)       = 4106
100   newfstatat(3</d/a>, "", {st_mode=S_IFREG|0644, st_size=4106, ...}, AT_EMPTY_PATH) = 0
100   fstat(4</d/a>, {st_mode=S_IFREG|0644, st_size=4106, ...}) = 0
100   newfstatat(AT_FDCWD</w>, "/d/a", {st_mode=S_IFREG|0644, st_size=4106, ...}, 0) = 0
100   statx(AT_FDCWD</d>, "a", AT_STATX_SYNC_AS_STAT, STATX_ALL, {stx_mask=STATX_ALL, ...}) = 0
100   newfstatat(AT_FDCWD</w>, "/d/none", 0x7ffd, 0) = -1 ENOENT (No such file or directory)
100   lseek(4</d/a>, -1, SEEK_SET)      = -1 EINVAL (Invalid argument)
100   close(4</d/a>)                    = 0
100   close(9</d/a>)                    = 0
100   clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS|CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID, child_tid=0x7f, parent_tid=0x7f, exit_signal=0, stack=0x7f, stack_size=0x7fff80, tls=0x7f} => {parent_tid=[101]}, 88) = 101
101   pread64(3</d/a>, ""..., 100, 5 <unfinished ...>
100   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>
102   openat(AT_FDCWD</w>, "/d/sp ace>x", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 5</d/sp ace\76x>
101   <... pread64 resumed>)            = 100
100   <... clone resumed>, child_tidptr=0x7f42969dc310) = 102
102   write(5</d/sp ace\76x>, ""..., 7)  = 7
102   writev(5</d/sp ace\76x>, [{iov_base=""..., iov_len=3}, {iov_base=""..., iov_len=4}], 2) = 7
102   pwrite64(5</d/sp ace\76x>, ""..., 0, 0) = 0
102   write(5</d/sp ace\76x>, ""..., 7)  = -1 ENOSPC (No space left on device)
102   close(5</d/sp ace\76x>)            = 0
102   openat(AT_FDCWD</w>, "/d/\303\251", O_RDONLY) = 6</d/\303\251>
102   readv(6</d/\303\251>, [{iov_base=""..., iov_len=8}], 1) = 8
102   read(6</d/\303\251>, ""..., 8 <unfinished ...>
102   +++ killed by SIGKILL +++
101   read(7<pipe:[1234]>, ""..., 10)   = 2
101   fcntl(17</dev/shm/t_1>(deleted), F_DUPFD_CLOEXEC, 0) = 18</dev/shm/t_1>(deleted)
101   close(17</dev/shm/t_1>(deleted) <unfinished ...>
100   dup(3</d/a>)                      = -1 EMFILE (Too many open files)
101   <... close resumed>)              = 0
101   fcntl(12</dev/shm/t_2>(deleted), F_DUPFD_CLOEXEC, 0 <unfinished ...>
100   read(3</d/a>, ""..., 1)           = 1
101   <... fcntl resumed>)              = 13</dev/shm/t_2>(deleted)
101   +++ exited with 0 +++
100   openat(AT_FDCWD</w>, "/d/none", O_RDONLY) = -1 ENOENT (No such file or directory)
100   close(3</d/a>)                    = 0
100   --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=102} ---
100   +++ exited with 0 +++
"""


def _expect(errors, what, got, want):
    if got != want:
        errors.append("%s: got %r, want %r" % (what, got, want))


def _self_test_synthetic(errors):
    lines = _SYNTHETIC.strip("\n").split("\n")
    tr = parse_lines(lines)
    # The last read of 102 never returned (killed): one warning, nothing counted.
    _expect(errors, "synthetic warnings", [w for w in tr.warnings if "never resumed" not in w], [])
    _expect(errors, "synthetic root", tr.root, 100)
    _expect(errors, "synthetic processes", tr.processes(), [100, 102])
    _expect(errors, "synthetic tgid(101)", tr.tgid(101), 100)
    _expect(errors, "synthetic ppid(102)", tr.ppid(102), 100)
    _expect(errors, "synthetic ppid(100)", tr.ppid(100), None)
    _expect(errors, "synthetic exit(102)", tr.exit_of(102), "killed by SIGKILL")
    a = tr.records.get((100, "/d/a"), Tally()).as_dict()
    _expect(errors, "synthetic /d/a", a, dict(opens=1, dups=2, reads=5, bytes_read=4096 + 10 + 100 + 1,
                                              writes=0, bytes_written=0, seeks=1, closes=3,
                                              stats=4))
    b = tr.records.get((102, "/d/sp ace>x"), Tally()).as_dict()
    _expect(errors, "synthetic /d/sp ace>x", b, dict(opens=1, dups=0, reads=0, bytes_read=0,
                                                     writes=3, bytes_written=14, seeks=0,
                                                     closes=1, stats=0))
    c = tr.records.get((102, "/d/\u00e9"), Tally()).as_dict()
    _expect(errors, "synthetic /d/e-acute", c, dict(opens=1, dups=0, reads=1, bytes_read=8,
                                                    writes=0, bytes_written=0, seeks=0, closes=0,
                                                    stats=0))
    _expect(errors, "synthetic pipe", tr.records.get((100, "pipe:[1234]"), Tally()).reads, 1)
    _expect(errors, "synthetic deleted", tr.records.get((100, "/dev/shm/t_1 (deleted)"),
                                                        Tally()).as_dict(),
            dict(opens=0, dups=1, reads=0, bytes_read=0, writes=0, bytes_written=0, seeks=0,
                 closes=1, stats=0))
    _expect(errors, "synthetic deleted 2", tr.records.get((100, "/dev/shm/t_2 (deleted)"),
                                                          Tally()).dups, 1)
    _expect(errors, "synthetic /d/none", (100, "/d/none") in tr.records, False)
    _expect(errors, "synthetic /d/b", (100, "/d/b") in tr.records, False)


# A program whose regular-file I/O is known exactly; ran under strace by the live self-test.
# Threads and a forked child make strace split calls (<unfinished ...> / <... resumed>).
_LIVE_PROG = r'''
import fcntl, os, sys, threading
d = sys.argv[1]
A, B, C = d + "/a.bin", d + "/b>b\u00e9.bin", d + "/fifo"
fd = os.open(A, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)     # A: open 1
for _ in range(3):
    os.write(fd, b"x" * 1000)                                      # A: 3 writes, 3000 bytes
os.write(fd, b"")                                                  # A: 1 write, 0 bytes
os.pwrite(fd, b"y" * 96, 3000)                                     # A: 1 write, 96 bytes
os.writev(fd, [b"ab", b"cd"])                                      # A: 1 write, 4 bytes
try:
    os.read(fd, 10)                                                # EBADF: not counted
except OSError:
    pass
os.close(fd)                                                       # A: close 1 (pwrite, then writev at 3000: size 3096)
fd = os.open(A, os.O_RDONLY)                                       # A: open 2
os.read(fd, 1000)                                                  # A: read 1, 1000
os.lseek(fd, 3000, os.SEEK_SET)                                    # A: seek 1
os.fstat(fd)                                                       # A: stat 1 (descriptor)
os.stat(A)                                                         # A: stat 2 (path)
try:
    os.stat(d + "/none")                                           # ENOENT: not counted
except OSError:
    pass
os.read(fd, 1000)                                                  # A: read 2, 96 (size 3096)
os.read(fd, 1000)                                                  # A: read 3, 0
os.pread(fd, 50, 10)                                               # A: read 4, 50
os.readv(fd, [bytearray(5), bytearray(5)])                         # A: read 5, 0 (at EOF)
os.preadv(fd, [bytearray(5), bytearray(5)], 0)                     # A: read 6, 10
e = os.dup(fd)                                                     # A: dup 1
f = fcntl.fcntl(fd, fcntl.F_DUPFD, 0)                              # A: dup 2
os.dup2(fd, 50)                                                    # A: dup 3
try:
    os.lseek(e, -5, os.SEEK_SET)                                   # EINVAL: not counted
except OSError:
    pass
for x in (e, f, 50, fd):
    os.close(x)                                                    # A: closes 4 (total 5)
try:
    os.close(fd)                                                   # EBADF, no path anyway
except OSError:
    pass
with open(B, "wb") as g:                                           # B: open 1, close 1
    g.write(b"z" * 20000)                                          # B: 1 write (> buffer)

def reader(n):
    for _ in range(n):
        h = os.open(B, os.O_RDONLY)                                # B: opens, closes
        while os.read(h, 7000):                                    # B: 4 reads, 20000 bytes
            pass
        os.close(h)

def fifo_reader():
    h = os.open(C, os.O_RDONLY)                                    # blocks: unfinished
    os.read(h, 10)
    os.close(h)

threads = [threading.Thread(target=reader, args=(50,)) for _ in range(2)]
threads.append(threading.Thread(target=fifo_reader))
for t in threads:
    t.start()
w = os.open(C, os.O_WRONLY)
os.write(w, b"hi")
os.close(w)
pid = os.fork()
if pid == 0:
    reader(3)                                                      # child: 3 opens/12 reads of B
    os._exit(0)
reader(1)
for t in threads:
    t.join()
os.waitpid(pid, 0)
'''


def _self_test_live(errors):
    strace = shutil.which("strace")
    if strace is None:
        return False
    with tempfile.TemporaryDirectory(prefix="iolens-oracle-") as d:
        d = os.path.realpath(d)
        os.mkfifo(d + "/fifo")
        prog = d + "/prog.py"
        with open(prog, "w") as f:
            f.write(_LIVE_PROG)
        trace = d + "/trace"
        cmd = strace_command(trace, [sys.executable, prog, d], strace=strace)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        if p.returncode != 0:
            errors.append("live: strace run failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
            return True
        tr = parse_trace(trace)
        _expect(errors, "live warnings", tr.warnings, [])
        root = tr.root
        A, B = d + "/a.bin", d + "/b>b\u00e9.bin"
        procs = tr.processes()
        _expect(errors, "live process count", len(procs), 2)
        child = [p for p in procs if p != root]
        if len(child) == 1:
            _expect(errors, "live child's parent", tr.ppid(child[0]), root)
            _expect(errors, "live child's B",
                    tr.records.get((child[0], B), Tally()).as_dict(),
                    dict(opens=3, dups=0, reads=12, bytes_read=60000, writes=0, bytes_written=0,
                         seeks=0, closes=3, stats=0))
        _expect(errors, "live root's A", tr.records.get((root, A), Tally()).as_dict(),
                dict(opens=2, dups=3, reads=6, bytes_read=1156, writes=6, bytes_written=3100,
                     seeks=1, closes=5, stats=2))
        # root: 1 write + 101 reader loops (2 threads x 50 + 1). Python's open() of B for
        # writing adds its own seeks (lseek for tell()), counted as strace saw them.
        rb = tr.records.get((root, B), Tally())
        _expect(errors, "live root's B opens", rb.opens, 102)
        _expect(errors, "live root's B reads", (rb.reads, rb.bytes_read), (404, 2020000))
        _expect(errors, "live root's B writes", (rb.writes, rb.bytes_written), (1, 20000))
        _expect(errors, "live root's B closes", rb.closes, 102)
        fifo = tr.records.get((root, d + "/fifo"), Tally())
        _expect(errors, "live fifo", (fifo.opens, fifo.reads, fifo.bytes_read, fifo.writes),
                (2, 1, 2, 1))
        split = sum(1 for line in open(trace, errors="replace") if "resumed>" in line)
        if split == 0:
            errors.append("live: no <unfinished>/<resumed> pair was produced (expected the fifo)")
    return True


def self_test():
    errors = []
    _self_test_synthetic(errors)
    ran = _self_test_live(errors)
    for e in errors:
        print("strace_oracle self-test FAIL:", e)
    if errors:
        return 1
    if not ran:
        print("strace_oracle self-test: synthetic OK; strace not found, live test SKIPPED")
        return 77
    print("strace_oracle self-test: OK (synthetic and live)")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--under", action="append", default=[],
                    help="only paths under this directory (repeatable)")
    a = ap.parse_args(argv[1:])
    tr = parse_trace(a.trace)
    unders = [os.path.join(os.path.realpath(u), "") for u in a.under]

    def keep(p):
        return not unders or any(p.startswith(u) for u in unders)

    out = {
        "root": tr.root,
        "processes": [{"pid": p, "ppid": tr.ppid(p), "exit": tr.exit_of(p),
                       "totals": tr.per_process(keep).get(p, Tally()).as_dict()}
                      for p in tr.processes()],
        "files": [{"path": path, "pid": pid, "counters": t.as_dict()}
                  for (pid, path), t in sorted(tr.records.items()) if keep(path)],
        "warnings": tr.warnings,
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
