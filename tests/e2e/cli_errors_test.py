#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolens run's command line, errors, exit status, signals, hostile file names.

  1. `run -- /nonexistent/cmd`: non-zero, ONE non-empty stderr line, naming the command.
  2. `run` with no command: non-zero.
  3. `run --json /nonexistent-dir/x.json -- touch MARKER` (and with --darshan, --trace): non-zero,
     names the path, and the command never ran (MARKER absent): outputs are checked BEFORE
     starting the command.
  3c. --disable-program of a core or unknown program: exit 1, one line, the command never runs;
      a disabled optional program is said in the summary;
  3d. IOLENS_BPF_BUILD or IOLENS_VERIFIER_LOG with a bad value: exit 1, one line naming it, the
      command never runs;
  3b. bad --trace-ring-size / --trace-max-size, a --timing not exact/off, --trace with --timing
      off, a size out of range (--max-file-records 1, --fast-file-records beyond 16 Mi or
      negative, --drain-interval-ms 1) or an unknown option: exit 2, the error says what is
      wrong, the command never runs;
     `convert` of a missing file: exit 1, one line naming it.
  4. as an unprivileged user (setpriv to 65534): non-zero, stderr mentions root or CAP_BPF; the
     same user with only CAP_BPF + CAP_PERFMON (ambient) traces a command: exit 0, its output,
     and its open, read (the file's size) and close of /etc/hostname in the JSON, nothing lost.
  5. `run --btf /nonexistent/vmlinux -- true`: non-zero, names the BTF file.
  6. exit status: `sh -c 'exit 7'` -> 7; `sh -c 'kill -TERM $$'` -> 143 (128+15); the JSON's
     exit_code says the same.
  7. SIGTERM to iolens is forwarded: `run -- sleep 30`, SIGTERM to iolens once sleep runs: exit
     143 within a few seconds, JSON exit_code 143, the sleep process gone.
  8. hostile file names (newline, quotes, backslash, spaces, tab, control char, UTF-8, non-UTF-8
     bytes, also in a directory name): the JSON is valid UTF-8 JSON and has each file with exact
     counters. Valid UTF-8 names must come back exactly, with no `path_hex`. A name with bytes
     that are not UTF-8 as docs/run-json.md "Names" specifies: `path` with U+FFFD in place of
     each invalid byte, and `path_hex` the exact bytes in hex.
  9. the traced command inherits no descriptor of iolens's (the --json file is O_CLOEXEC).
 10. an output that cannot be written whole (--json, --darshan on a 4 KiB tmpfs): exit 1, one
     line naming the file and "No space left on device".
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402


def nonempty_lines(b):
    return [ln for ln in b.decode("utf-8", "replace").splitlines() if ln.strip()]


def simple(iolens, argv, timeout=60, **kw):
    p = subprocess.run([iolens] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


def case_nonexistent(ck, iolens):
    rc, out, err = simple(iolens, ["run", "--", "/nonexistent/cmd"])
    lines = nonempty_lines(err)
    E.log("[1] /nonexistent/cmd: rc %d, stderr %r" % (rc, err))
    ck.check(rc != 0, "run -- /nonexistent/cmd exited 0")
    ck.check(len(lines) == 1, "run -- /nonexistent/cmd: expected one stderr line, got %d: %r" %
             (len(lines), lines))
    ck.check(any("/nonexistent/cmd" in ln for ln in lines),
             "run -- /nonexistent/cmd: stderr does not name the command: %r" % lines)


def case_no_command(ck, iolens):
    for argv in (["run"], ["run", "--"]):
        rc, out, err = simple(iolens, argv)
        E.log("[2] %s: rc %d, stderr %r" % (" ".join(argv), rc, err[:300]))
        ck.check(rc != 0, "`iolens %s` (no command) exited 0" % " ".join(argv))
        ck.check(nonempty_lines(err), "`iolens %s` printed nothing on stderr" % " ".join(argv))


def case_bad_json(ck, iolens, tmp):
    marker = os.path.join(tmp, "marker-should-not-exist")
    for opt, bad in (("--json", "/nonexistent-dir/x.json"),
                     ("--darshan", "/nonexistent-dir/x.darshan"),
                     ("--trace", "/nonexistent-dir/x.iotrace")):
        rc, out, err = simple(iolens, ["run", opt, bad, "--", "touch", marker])
        E.log("[3] %s %s: rc %d, stderr %r" % (opt, bad, rc, err[:300]))
        ck.check(rc != 0, "run %s %s exited 0" % (opt, bad))
        ck.check(bad.encode() in err,
                 "run %s %s: stderr does not name the file: %r" % (opt, bad, err))
        ck.check(not os.path.exists(marker),
                 "run %s %s: the command ran (created %s) before the error" % (opt, bad, marker))


def case_bad_trace_options(ck, iolens, tmp):
    """Bad trace sizes: exit 2, one line naming the option, the command never runs; a trace
    file that does not exist: convert exits 1 with one line naming it."""
    marker = os.path.join(tmp, "marker-trace-options")
    tr = os.path.join(tmp, "opts.iotrace")
    for opt, bad in (("--trace-ring-size", "3M"), ("--trace-ring-size", "2K"),
                     ("--trace-max-size", "lots")):
        rc, out, err = simple(iolens, ["run", "--trace", tr, opt, bad, "--", "touch", marker])
        lines = nonempty_lines(err)
        E.log("[3b] %s %s: rc %d, stderr %r" % (opt, bad, rc, err[:300]))
        ck.eq("run %s %s exit code" % (opt, bad), 2, rc)
        ck.check(len(lines) == 1 and opt in lines[0] and bad in lines[0],
                 "run %s %s: not one line naming the option and value: %r" % (opt, bad, lines))
        ck.check(not os.path.exists(marker), "run %s %s: the command ran" % (opt, bad))
    # --timing: a value not exact/off, and --trace with timing off (a trace needs each call's
    # start and duration): exit 2, the command never runs, the line says what is wrong.
    for argv, words in ((["--timing", "sometimes"], ("--timing", "sometimes")),
                        (["--timing", "off", "--trace", tr], ("--trace", "--timing off"))):
        rc, out, err = simple(iolens, ["run"] + argv + ["--", "touch", marker])
        lines = nonempty_lines(err)
        E.log("[3b] %s: rc %d, stderr %r" % (" ".join(argv), rc, err[:300]))
        ck.eq("run %s exit code" % " ".join(argv), 2, rc)
        ck.check(lines and all(w in " ".join(lines) for w in words),
                 "run %s: the error does not name %s: %r" % (" ".join(argv), words, lines))
        ck.check(not os.path.exists(marker), "run %s: the command ran" % " ".join(argv))
    # Values out of range and unknown options, which the command-line parser checks: exit 2,
    # the first line names the option (and the value), the command never runs.
    for argv, words in ((["--max-file-records", "1"], ("--max-file-records", "1")),
                        (["--fast-file-records", "99999999"], ("--fast-file-records", "99999999")),
                        (["--fast-file-records", "-1"], ("--fast-file-records", "-1")),
                        (["--drain-interval-ms", "1"], ("--drain-interval-ms", "1")),
                        (["--max-block-records", "0"], ("--max-block-records", "0")),
                        (["--max-other-records", "0"], ("--max-other-records", "0")),
                        (["--max-inflight", "99999999"], ("--max-inflight", "99999999")),
                        (["--no-such-option"], ("--no-such-option",))):
        rc, out, err = simple(iolens, ["run"] + argv + ["--", "touch", marker])
        lines = nonempty_lines(err)
        E.log("[3b] %s: rc %d, stderr %r" % (" ".join(argv), rc, err[:300]))
        ck.eq("run %s exit code" % " ".join(argv), 2, rc)
        ck.check(lines and lines[0].startswith("iolens: ") and all(w in lines[0] for w in words),
                 "run %s: the first line does not name %s: %r" % (" ".join(argv), words, lines))
        ck.check(not os.path.exists(marker), "run %s: the command ran" % " ".join(argv))
    missing = os.path.join(tmp, "no-such.iotrace")
    rc, out, err = simple(iolens, ["convert", missing, "--to", "jsonl"])
    lines = nonempty_lines(err)
    ck.eq("convert of a missing file: exit code", 1, rc)
    ck.check(len(lines) == 1 and missing in lines[0],
             "convert of a missing file: not one line naming it: %r" % lines)


def case_unprivileged(ck, iolens, tmp):
    setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # A copy in the test's world-searchable directory: the build tree may sit under a directory
    # uid 65534 cannot enter (/root). The binary is self-contained (BPF object embedded).
    copy = os.path.join(tmp, "iolens-copy")
    shutil.copy2(iolens, copy)
    os.chmod(copy, 0o755)
    iolens = copy
    probe = subprocess.run(setpriv + ["test", "-x", iolens], stdin=subprocess.DEVNULL)
    if probe.returncode != 0:
        ck.fail("[4] cannot test as an unprivileged user: uid 65534 cannot execute %s "
                "(a directory on its path is not world-searchable?)" % iolens)
        return
    p = subprocess.run(setpriv + [iolens, "run", "--", "true"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    E.log("[4] as uid 65534: rc %d, stderr %r" % (p.returncode, p.stderr[:400]))
    ck.check(p.returncode != 0, "iolens run as uid 65534 exited 0")
    ck.check(re.search(rb"\broot\b|CAP_BPF", p.stderr, re.I),
             "iolens run as uid 65534: stderr mentions neither root nor CAP_BPF: %r" % p.stderr)

    # Least privilege: CAP_BPF + CAP_PERFMON alone (no root, no CAP_SYS_ADMIN) must be enough,
    # and the command then runs with them too (ambient), with its output traced.
    capped = setpriv + ["--inh-caps=+bpf,+perfmon", "--ambient-caps=+bpf,+perfmon"]
    out_dir = os.path.join(tmp, "least-privilege")
    os.mkdir(out_dir)
    os.chown(out_dir, 65534, 65534)
    out_json = os.path.join(out_dir, "run.json")
    p = subprocess.run(capped + [iolens, "run", "-q", "--json", out_json, "--", "cat",
                                 "/etc/hostname"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       timeout=60)
    E.log("[4b] uid 65534 with CAP_BPF+CAP_PERFMON: rc %d, stderr %r" %
          (p.returncode, p.stderr[:400]))
    ck.eq("iolens run with only CAP_BPF+CAP_PERFMON: exit status", 0, p.returncode)
    with open("/etc/hostname", "rb") as f:
        hostname = f.read()
    ck.eq("the command's output under CAP_BPF+CAP_PERFMON", hostname, p.stdout)
    # ... and traced: cat's read of the file, exactly, in the record
    if p.returncode == 0:
        doc = E.load_json_strict(out_json)
        E.check_lost_zero(ck, doc)
        real = os.path.realpath("/etc/hostname")
        recs = [f for f in doc.get("files", []) if f.get("path") == real]
        if ck.eq("least privilege: records of %s" % real, 1, len(recs)):
            c = recs[0]["counters"]
            E.expect_counter(ck, "least privilege", "bytes_read", len(hostname), c)
            E.expect_counter(ck, "least privilege", "opens", 1, c)
            E.expect_counter(ck, "least privilege", "closes", 1, c)


def case_bad_btf(ck, iolens):
    btf = "/nonexistent/vmlinux"
    rc, out, err = simple(iolens, ["run", "--btf", btf, "--", "true"])
    E.log("[5] --btf %s: rc %d, stderr %r" % (btf, rc, err[:300]))
    ck.check(rc != 0, "run --btf %s exited 0" % btf)
    ck.check(btf.encode() in err, "run --btf %s: stderr does not name the file: %r" % (btf, err))


def case_full_output(ck, iolens, tmp):
    full = os.path.join(tmp, "full")
    os.mkdir(full)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", full]).returncode != 0:
        ck.fail("[10] cannot mount a 4 KiB tmpfs at %s" % full)
        return
    try:
        for opt, name in (("--json", "r.json"), ("--darshan", "r.darshan")):
            path = os.path.join(full, name)
            rc, out, err = simple(iolens, ["run", "-q", "--local", opt, path, "--", "true"])
            lines = nonempty_lines(err)
            E.log("[10] %s on a full file system: rc %d, stderr %r" % (opt, rc, err[:300]))
            ck.eq("[10] %s on a full file system: exit status" % opt, 1, rc)
            ck.check(len(lines) == 1 and path in lines[0] and "No space left" in lines[0],
                     "[10] %s: expected one line naming %s and ENOSPC, got %r" % (opt, path, lines))
    finally:
        subprocess.run(["umount", full])


def case_exit_status(ck, iolens, tmp):
    for script, want in (("exit 7", 7), ("kill -TERM $$", 143), ("exit 0", 0)):
        js = os.path.join(tmp, "status.json")
        run = E.run_iolens(iolens, ["sh", "-c", script], json_path=js, timeout=60)
        E.log("[6] sh -c %r: rc %d" % (script, run.rc))
        ck.eq("iolens run -- sh -c %r exit status" % script, want, run.rc)
        try:
            doc = E.load_json_strict(js)
            ck.eq("sh -c %r: JSON exit_code" % script, want, doc.get("exit_code"))
        except (OSError, ValueError) as e:
            ck.fail("sh -c %r: no valid JSON: %s; stderr %r" % (script, e, run.err[:300]))
        if os.path.exists(js):
            os.unlink(js)


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append((int(d), s[s.index("(") + 1:s.rindex(")")]))
    return out


def case_sigterm(ck, iolens, tmp):
    js = os.path.join(tmp, "sigterm.json")
    info = {}

    def on_start(p):
        t0 = time.monotonic()
        sleep_pid = None
        while time.monotonic() - t0 < 30 and sleep_pid is None:
            for pid, comm in children_of(p.pid):
                if comm == "sleep":
                    sleep_pid = pid
            time.sleep(0.05)
        info["sleep_pid"] = sleep_pid
        if sleep_pid is None:
            ck.fail("[7] `sleep 30` did not start under iolens within 30 s")
        time.sleep(2)
        info["t_signal"] = time.monotonic()
        p.send_signal(signal.SIGTERM)

    run = E.run_iolens(iolens, ["sleep", "30"], json_path=js, timeout=90, on_start=on_start)
    dt = time.monotonic() - info["t_signal"]
    E.log("[7] SIGTERM to iolens: rc %d, %.2f s after the signal" % (run.rc, dt))
    ck.eq("iolens run -- sleep 30, SIGTERM to iolens: exit status", 143, run.rc)
    ck.check(dt < 10, "iolens took %.1f s to exit after SIGTERM (sleep 30 not interrupted?)" % dt)
    sp = info.get("sleep_pid")
    if sp:
        try:
            with open("/proc/%d/stat" % sp) as f:
                alive = ") Z" not in f.read()
        except OSError:
            alive = False
        ck.check(not alive, "the traced sleep (pid %d) is still running after iolens exited" % sp)
    try:
        doc = E.load_json_strict(js)
        ck.eq("SIGTERM: JSON exit_code", 143, doc.get("exit_code"))
    except (OSError, ValueError) as e:
        ck.fail("SIGTERM: no valid JSON: %s; stderr %r" % (e, run.err[:300]))


HOSTILE = r'''
import os, sys
d = os.fsencode(sys.argv[1])
names = [eval(x) for x in sys.argv[2:]]
for i, rel in enumerate(names):
    p = d + b"/" + rel
    parent = os.path.dirname(p)
    if not os.path.isdir(parent):
        os.mkdir(parent)
    data = bytes([65 + i % 26]) * (1000 + 37 * i)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    assert os.write(fd, data) == len(data)
    os.close(fd)
    fd = os.open(p, os.O_RDONLY)
    got = b""
    while True:
        b = os.read(fd, 1 << 20)
        got += b
        if not b:
            break
    os.close(fd)
    assert got == data
'''

HOSTILE_NAMES = [
    b"new\nline",
    b"trailing-newline\n",
    b'dq"uo"te',
    b"sq'uote",
    b"back\\slash\\",
    b"sp ace s",
    b"tab\there",
    b"ctl\x01\x1f\x7f",
    "utf8-\u00e9\u4e2d\U0001F600".encode(),
    b"bad-utf8-\xff\xfe",
    b"latin1-\xe9t\xe9",
    b"d ir\n\"x\"/inner\\file",
]


def check_hostile(ck, iolens, tmp):
    d = os.path.join(tmp, "hostile")
    os.mkdir(d)
    js = os.path.join(tmp, "hostile.json")
    run = E.run_iolens(iolens, ["/usr/bin/python3", "-c", HOSTILE, d] +
                       [repr(n) for n in HOSTILE_NAMES], json_path=js, timeout=60)
    E.log("[8] hostile names: rc %d" % run.rc)
    if not ck.eq("hostile-name workload exit status", 0, run.rc):
        E.log(run.err_text())
        return
    try:
        doc = E.load_json_strict(js)
    except (UnicodeDecodeError, ValueError) as e:
        ck.fail("hostile names: the JSON is not valid UTF-8 JSON: %s" % e)
        return
    root = [p for p in doc["processes"] if p.get("ppid") == run.pid]
    if not ck.eq("hostile names: one root process", 1, len(root)):
        return
    pid = root[0]["pid"]
    recs = [f for f in doc["files"] if f.get("pid") == pid and E.under(f.get("path"), d)]
    found = set()
    for i, rel in enumerate(HOSTILE_NAMES):
        full = os.fsencode(d) + b"/" + rel
        size = 1000 + 37 * i
        try:
            want_path, want_hex = full.decode("utf-8"), None
        except UnicodeDecodeError:
            want_path, want_hex = full.decode("utf-8", "replace"), full.hex()
        match = [f for f in recs if f.get("path") == want_path]
        if not ck.eq("hostile name %r: records at %r" % (rel, want_path), 1, len(match)):
            continue
        ck.eq("hostile name %r: path_hex" % rel, want_hex, match[0].get("path_hex"))
        found.add(id(match[0]))
        c = match[0]["counters"]
        for k, v in (("opens", 2), ("writes", 1), ("bytes_written", size), ("reads", 2),
                     ("bytes_read", size), ("closes", 2)):
            E.expect_counter(ck, "hostile name %r" % rel, k, v, c)
        st = os.stat(full)
        ck.eq("hostile name %r ino" % rel, st.st_ino, match[0].get("ino"))
    for f in recs:
        if id(f) not in found:
            ck.fail("hostile names: unexpected record %r" % f.get("path"))


def case_no_leaked_fd(ck, iolens, tmp):
    """The traced command must not inherit iolens's descriptor on the --json file."""
    js = os.path.join(tmp, "fds.json")
    p = subprocess.run([iolens, "run", "-q", "--json", js, "--", "ls", "-l", "/proc/self/fd"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       timeout=60)
    E.log("[9] fds seen by the command: %r" % p.stdout[:500])
    ck.eq("ls /proc/self/fd under iolens: exit status", 0, p.returncode)
    ck.check(js.encode() not in p.stdout,
             "the traced command inherited the --json file's descriptor: %r" % p.stdout)
    if os.path.exists(js):
        os.unlink(js)


def case_capture_usage(ck, iolens, tmp):
    """`iolens capture` refuses a bad command line with exit 2 and one line saying what is
    wrong, before it creates the output; no daemon: exit 1 naming the socket, no file left."""
    out = os.path.join(tmp, "cap.iolt")
    for argv, words in (
            (["capture", "-o", out], "one of --job"),
            (["capture", "--job", "a", "--pid", "3", "-o", out], "excludes"),
            (["capture", "--job", "a", "--max-size", "1Q", "-o", out], "--max-size"),
            (["capture", "--job", "a", "--duration", "30", "-o", out], "--duration"),
            (["capture", "--job", "a", "--duration", "0s", "-o", out], "--duration")):
        rc, _, err = simple(iolens, argv)
        text = err.decode("utf-8", "replace")
        ck.eq("`iolens %s` exit status" % " ".join(argv[:-2]), 2, rc)
        ck.check(words in text, "`iolens %s`: stderr does not say %r: %r" %
                 (" ".join(argv), words, text))
        ck.check(not os.path.exists(out), "`iolens %s` created %s" % (" ".join(argv), out))
    sock = os.path.join(tmp, "no-such.sock")
    rc, _, err = simple(iolens, ["capture", "--job", "a", "--socket", sock, "-o", out])
    text = err.decode("utf-8", "replace")
    ck.eq("iolens capture without a daemon: exit status", 1, rc)
    ck.check(sock in text and "cannot connect" in text,
             "iolens capture without a daemon: unclear error %r" % text)
    ck.check(not os.path.exists(out), "iolens capture without a daemon left %s behind" % out)


def case_bad_disable_program(ck, iolens, tmp):
    """--disable-program of a core or unknown program: exit 1 before the command runs, one line
    naming it (and, for an unknown one, the optional programs there are); a known optional one
    is left out and said in the summary."""
    marker = os.path.join(tmp, "marker-disable")
    for bad, why in (("sys_exit", "core program"), ("no_such_prog", "no optional program")):
        rc, out, err = simple(iolens, ["run", "--disable-program", bad, "--", "touch", marker])
        lines = nonempty_lines(err)
        E.log("[3c] --disable-program %s: rc %d, stderr %r" % (bad, rc, err[:300]))
        ck.eq("--disable-program %s exit code" % bad, 1, rc)
        ck.check(len(lines) == 1 and bad in lines[0] and why in lines[0],
                 "--disable-program %s: not one line saying %r: %r" % (bad, why, lines))
        ck.check(not os.path.exists(marker), "--disable-program %s: the command ran" % bad)
        if bad == "no_such_prog":
            ck.check(b"mm_filemap_get_pages" in err, "unknown program: optional ones not listed")
    rc, out, err = simple(iolens, ["run", "--disable-program", "mm_filemap_fault", "--", "true"])
    ck.eq("--disable-program mm_filemap_fault exit code", 0, rc)
    ck.check(b"not attached: mm_filemap_fault (disabled by configuration)" in err,
             "a disabled program is not said in the summary: %r" % err[-400:])


def case_bad_environment(ck, iolens, tmp):
    """IOLENS_BPF_BUILD not auto/casts/plain, IOLENS_VERIFIER_LOG not 1-7 (docs/run.md): exit 1
    before the command runs, one line naming the variable and the value."""
    marker = os.path.join(tmp, "marker-env")
    for var, bad, want in (("IOLENS_BPF_BUILD", "fast", "must be auto, casts or plain"),
                           ("IOLENS_VERIFIER_LOG", "9", "must be 1 to 7"),
                           ("IOLENS_VERIFIER_LOG", "x", "must be 1 to 7")):
        env = dict(os.environ, **{var: bad})
        rc, out, err = simple(iolens, ["run", "--local", "--", "touch", marker], env=env)
        lines = nonempty_lines(err)
        E.log("[3d] %s=%s: rc %d, stderr %r" % (var, bad, rc, err[:300]))
        ck.eq("%s=%s exit code" % (var, bad), 1, rc)
        ck.check(len(lines) == 1 and var in lines[0] and want in lines[0] and
                 '"%s"' % bad in lines[0],
                 "%s=%s: not one line naming it: %r" % (var, bad, lines))
        ck.check(not os.path.exists(marker), "%s=%s: the command ran" % (var, bad))


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("cli_errors")
    tmp = E.disk_tempdir("cli")
    os.chmod(tmp, 0o755)
    case_nonexistent(ck, args.iolens)
    case_no_command(ck, args.iolens)
    case_bad_json(ck, args.iolens, tmp)
    case_bad_trace_options(ck, args.iolens, tmp)
    case_bad_disable_program(ck, args.iolens, tmp)
    case_bad_environment(ck, args.iolens, tmp)
    case_unprivileged(ck, args.iolens, tmp)
    case_bad_btf(ck, args.iolens)
    case_full_output(ck, args.iolens, tmp)
    case_exit_status(ck, args.iolens, tmp)
    case_sigterm(ck, args.iolens, tmp)
    check_hostile(ck, args.iolens, tmp)
    case_no_leaked_fd(ck, args.iolens, tmp)
    case_capture_usage(ck, args.iolens, tmp)
    ck.finish()


if __name__ == "__main__":
    main()
