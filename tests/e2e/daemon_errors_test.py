#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd refuses what it cannot do, clearly, and leaves nothing behind.

1. `iolensd --check-config FILE`: exit 0 and "valid" for a good file; for each bad file, a
   non-zero exit and, on stderr, "FILE:LINE:COL: KEY: message" naming the offending key and its
   line: an unknown key (with its suggestion), a value of the wrong type, a bad duration, a YAML
   syntax error, an empty `jobs:` list, and a file with two errors (both reported at once). A
   nonexistent file is refused too. `iolensd -c` on a bad file refuses to start the same way.
2. `iolensd -c` with a cgroup_root that does not exist, is not cgroup2 (tmpfs) or is a cgroup v1
   hierarchy: a non-zero exit (not a signal) within seconds, a message naming cgroup_root and
   the path, and no pin dir and no socket file left.
3. A second iolensd with the config of a running one, and one sharing only its socket: each is
   refused with a message saying what is in use (the socket named in the second case), leaves
   no pin dir of its own; the first one still answers, its socket file and pins untouched.
4. Access to the control socket: as `nobody` (setpriv), `iolens status` is refused with
   "Permission denied" by the socket's mode (0660 root:root); with the socket opened to everyone
   (chmod 0666, as a misconfiguration would) the daemon itself refuses ("permission denied by
   iolensd") and logs the refused pid and uid; with `socket_group` set to a test group (groupadd,
   removed at the end), nobody with that group (supplementary, or primary) is answered, and
   nobody without it is still refused.
"""
import grp
import json
import os
import re
import stat
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NOBODY = 65534


def check_config_cases(ck, args, tmp):
    good = "output_dir: /var/tmp/x/out\njobs:\n  - kubernetes: {}\n  - slurm: {}\n"
    cases = [
        # name, text, [(line, [substrings])...]
        ("unknown-key", "output_dir: /var/tmp/x/out\noutptu_dir: /var/tmp/x\njobs:\n"
         "  - kubernetes: {}\n", [(2, ["outptu_dir", "unknown key", "output_dir"])]),
        ("bad-type", "output_dir: /var/tmp/x/out\nlimits:\n  max_files_per_job: lots\njobs:\n"
         "  - kubernetes: {}\n", [(3, ["limits.max_files_per_job", "lots"])]),
        ("bad-duration", "output_dir: /var/tmp/x/out\ndrain_interval: 5 parsecs\njobs:\n"
         "  - kubernetes: {}\n", [(2, ["drain_interval", "5 parsecs"])]),
        # the flow map opened on line 3 is never closed: the parser notices on line 4
        ("yaml-syntax", "output_dir: /var/tmp/x/out\njobs:\n  - cgroup: {paths: [\"/a/*\"]\n"
         "  - slurm: {}\n", [((3, 4), ["invalid YAML"])]),
        ("empty-jobs", "output_dir: /var/tmp/x/out\njobs: []\n", [(2, ["jobs", "no rule"])]),
        # a memory bound below what the daemon and its default rings take (docs/daemon.md#memory-bound)
        ("memory-too-small", "output_dir: /var/tmp/x/out\nlimits:\n  memory: 64MiB\njobs:\n"
         "  - kubernetes: {}\n", [(2, ["limits.memory", "64.0 MiB", "raise it"])]),
        ("two-errors", "output_dir: /var/tmp/x/out\nsocket: 12\njobs:\n"
         "  - cgroup: {paths: \"/a/*\"}\n",
         [(2, ["socket", "absolute path"]), (4, ["jobs[0].cgroup.paths", "list"])]),
    ]
    path = os.path.join(tmp, "good.yaml")
    with open(path, "w") as f:
        f.write(good)
    r = subprocess.run([args.iolensd, "--check-config", path], capture_output=True, text=True,
                       timeout=20)
    ck.eq("--check-config good.yaml exit code", 0, r.returncode)
    ck.check("valid" in r.stdout and "2 job rule" in r.stdout,
             "--check-config good.yaml says %r %r" % (r.stdout, r.stderr))
    for name, text, expect in cases:
        path = os.path.join(tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([args.iolensd, "--check-config", path], capture_output=True,
                           text=True, timeout=20)
        ck.check(r.returncode not in (0, None) and 0 < r.returncode < 128,
                 "--check-config %s: exit %r (expected a non-zero exit, not a signal)" %
                 (name, r.returncode))
        lines = [x for x in r.stderr.splitlines() if x.startswith(path + ":")]
        ck.eq("--check-config %s: number of errors" % name, len(expect), len(lines))
        for line_no, words in expect:
            ok_lines = (line_no,) if isinstance(line_no, int) else line_no
            hit = [x for x in lines
                   if re.match(re.escape(path) + r":(%s):\d+: " % "|".join(map(str, ok_lines)), x)
                   and all(w in x for w in words)]
            ck.check(hit, "--check-config %s: no error at line %s naming %s; stderr:\n%s" %
                     (name, line_no, words, r.stderr))
    r = subprocess.run([args.iolensd, "--check-config", os.path.join(tmp, "missing.yaml")],
                       capture_output=True, text=True, timeout=20)
    ck.check(r.returncode != 0 and "missing.yaml" in r.stderr and "No such file" in r.stderr,
             "--check-config missing.yaml: exit %d, stderr %r" % (r.returncode, r.stderr))


def start_fails(ck, args, what, config_text, pin_dir, sock, words, timeout=15, prefix=(),
                extra=()):
    """`iolensd -c` (run as `prefix`, with `extra` flags) must exit non-zero (not by a signal)
    with `words` on stderr, leaving neither the pin dir nor the socket file."""
    path = os.path.join(os.path.dirname(sock), "bad.yaml")
    with open(path, "w") as f:
        f.write(config_text)
    os.chmod(path, 0o644)
    t0 = time.monotonic()
    try:
        r = subprocess.run(list(prefix) + [args.iolensd, "-c", path] + list(extra),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        ck.fail("%s: iolensd still runs after %d s (it should refuse to start)" % (what, timeout))
        return
    secs = time.monotonic() - t0
    ck.check(0 < r.returncode < 128, "%s: exit %d (expected non-zero, not a signal)" %
             (what, r.returncode))
    ck.check(all(w in r.stderr for w in words), "%s: stderr does not name %s:\n%s" %
             (what, words, r.stderr))
    ck.check(not os.path.exists(pin_dir), "%s: pin dir %s left behind (%s)" %
             (what, pin_dir, os.listdir(pin_dir) if os.path.isdir(pin_dir) else "?"))
    ck.check(not os.path.lexists(sock), "%s: socket file %s left behind" % (what, sock))
    D.log("%s: exit %d in %.2f s: %s" % (what, r.returncode, secs, r.stderr.strip()))


def bad_start_cases(ck, args, tmp):
    pin_dir = "%s/iolens-e2e-%d-bad" % (D.BPFFS, os.getpid())
    D.Cleanup.register("remove " + pin_dir, lambda: subprocess.run(["rm", "-rf", pin_dir]))
    sock = os.path.join(tmp, "bad.sock")
    common = ("output_dir: %s/bad-out\nstate_dir: %s/bad-state\npin_dir: %s\nsocket: %s\n" %
              (tmp, tmp, pin_dir, sock))
    start_fails(ck, args, "iolensd -c with an unknown key", common + "outptu_dir: /x\njobs:\n"
                "  - kubernetes: {}\n", pin_dir, sock, ["outptu_dir", "1 error(s)"])
    # A limit on the command line that the config's memory bound cannot hold.
    start_fails(ck, args, "--max-files-per-job over limits.memory", common +
                "limits:\n  memory: 256MiB\njobs:\n  - kubernetes: {}\n", pin_dir, sock,
                ["--max-files-per-job", "limits.memory: the limits given need", "256 MiB"],
                extra=["--max-files-per-job", "1000000"])
    for root, words in (("/nonexistent/cgroup2", ["cgroup_root", "/nonexistent/cgroup2",
                                                  "not a mount point"]),
                        ("/dev/shm", ["cgroup_root", "/dev/shm", "not cgroup2"])):
        start_fails(ck, args, "cgroup_root %s" % root, common + "cgroup_root: %s\njobs:\n"
                    "  - kubernetes: {}\n" % root, pin_dir, sock, words)
    # A cgroup v1 hierarchy of the test's own (named, no controller: any kernel with cgroup v1
    # mounts one, hybrid or pure-v2 host alike), not the host's /sys/fs/cgroup/cpu, which a
    # pure-v2 host does not have.
    v1 = os.path.join(tmp, "cgroup-v1")
    os.makedirs(v1, exist_ok=True)
    r = subprocess.run(["mount", "-t", "cgroup", "-o", "none,name=iolens-e2e-%d" % os.getpid(),
                        "cgroup", v1], capture_output=True, text=True)
    if r.returncode != 0:
        D.log("SKIP the cgroup v1 case: cannot mount a named cgroup v1 hierarchy: %s" %
              r.stderr.strip())
    else:
        try:
            start_fails(ck, args, "cgroup_root %s (cgroup v1)" % v1, common + "cgroup_root: "
                        "%s\njobs:\n  - kubernetes: {}\n" % v1, pin_dir, sock,
                        ["cgroup_root", v1, "v1"])
        finally:
            subprocess.run(["umount", v1], check=False)
    good = common + "jobs:\n  - kubernetes: {}\n"
    # Without privileges: the reason, before anything is created (no output dir, no socket).
    os.chmod(tmp, 0o755)
    start_fails(ck, args, "iolensd as an unprivileged user", good, pin_dir, sock,
                ["permission denied", "CAP_BPF", "CAP_PERFMON"], prefix=as_nobody())
    ck.check(not os.path.exists(os.path.join(tmp, "bad-out")),
             "the unprivileged iolensd created its output dir before failing")
    start_fails(ck, args, "iolensd --btf of a missing file", good, pin_dir, sock,
                ["kernel BTF not found", "/nonexistent/vmlinux"],
                extra=["--btf", "/nonexistent/vmlinux"])
    notbtf = os.path.join(tmp, "not-btf")
    with open(notbtf, "wb") as f:
        f.write(b"\x7fELF not btf")
    start_fails(ck, args, "iolensd --btf of a file that is not BTF", good, pin_dir, sock,
                ["not a BTF file", notbtf], extra=["--btf", notbtf])


def second_daemon_case(ck, args, cg):
    d1 = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/e/*"]}' % cg.prefix, tag="first",
                  iolens=args.iolens)
    d1.start(ck)
    pins_before = d1.pins()
    ino_before = os.stat(d1.socket).st_ino
    text1 = open(d1.config).read()
    # a: the very same config (socket, pin dir, state dir); b: only the socket in common
    d2a = D.Daemon(args.iolensd, config_text=text1, tag="second-same")
    d2a.pin_dir = d1.pin_dir
    d2b = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/e/*"]}' % cg.prefix,
                   tag="second-socket")
    with open(d2b.config) as f:
        text = f.read().replace("socket: %s\n" % d2b.socket, "socket: %s\n" % d1.socket)
    with open(d2b.config, "w") as f:
        f.write(text)
    for what, d2, words in (("the same config", d2a, None),
                            ("the same socket only", d2b, ["another process is listening",
                                                           d1.socket])):
        d2.spawn()
        try:
            rc = d2.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            rc = None
            d2.proc.kill()
            d2.proc.wait()
        log2 = d2.log()
        D.log("second iolensd (%s): exit %r: %s" % (what, rc, log2.strip()))
        ck.check(rc is not None and 0 < rc < 128, "second iolensd with %s as a running one: "
                 "exit %r (expected it to refuse: a non-zero exit)" % (what, rc))
        if words:
            ck.check(all(w in log2 for w in words),
                     "second iolensd (%s): the refusal does not name %s:\n%s" %
                     (what, words, log2))
        else:
            ck.check("in use" in log2 or "another process is listening" in log2,
                     "second iolensd (%s): the refusal does not say what is in use:\n%s" %
                     (what, log2))
        if d2 is d2b:
            ck.check(not os.path.exists(d2b.pin_dir), "second iolensd (%s) left its pin dir %s" %
                     (what, d2b.pin_dir))
        st = d1.status()
        ck.check(st is not None and st.get("pid") == d1.proc.pid,
                 "the first iolensd no longer answers after the second one (%s): %r" %
                 (what, st))
        ck.eq("the first iolensd's pins after the refused second one (%s)" % what,
              pins_before, d1.pins())
        ck.check(os.path.exists(d1.socket) and os.stat(d1.socket).st_ino == ino_before,
                 "the first iolensd's socket file was replaced or removed (%s)" % what)
    return d1


def as_nobody(extra_groups=(), gid=NOBODY):
    argv = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % gid]
    if extra_groups:
        argv.append("--groups=" + ",".join(str(g) for g in extra_groups))
    else:
        argv.append("--clear-groups")
    return argv


def permission_cases(ck, args, cg, d1):
    # a. the socket's mode refuses nobody before the daemon sees it
    st = os.stat(d1.socket)
    ck.eq("socket mode", 0o660, stat.S_IMODE(st.st_mode))
    r = d1.cli("status", user=as_nobody())
    ck.check(r.returncode != 0 and "Permission denied" in r.stderr,
             "iolens status as nobody (socket 0660 root:root): exit %d, stderr %r" %
             (r.returncode, r.stderr))
    D.log("nobody, socket 0660: exit %d: %s" % (r.returncode, r.stderr.strip()))
    # b. the socket opened to all: the daemon's own peer check refuses, and logs who
    os.chmod(d1.socket, 0o666)
    argv = as_nobody() + [args.iolens, "status", "--socket", d1.socket]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=20)
    ck.check(p.returncode != 0 and "permission denied" in err.lower() and "iolensd" in err,
             "iolens status as nobody (socket 0666): exit %d, stderr %r" % (p.returncode, err))
    ck.check("uid 65534" in err, "the refusal does not say which uid was refused: %r" % err)
    D.log("nobody, socket 0666: exit %d: %s" % (p.returncode, err.strip()))
    logged = D.wait_for("the refusal in iolensd's log", lambda: [
        x for x in d1.log().splitlines() if "refused" in x and "pid %d " % p.pid in x and
        "uid 65534" in x], 5)
    ck.check(logged, "iolensd's log has no line with the refused pid %d and uid 65534:\n%s" %
             (p.pid, d1.log()[-2000:]))
    os.chmod(d1.socket, 0o660)

    # c. socket_group: a member of the group is answered
    group = "iolens-e2e-%d" % os.getpid()
    r = subprocess.run(["groupadd", group], capture_output=True, text=True)
    if r.returncode != 0:
        ck.fail("groupadd %s: %s" % (group, r.stderr))
        return
    D.Cleanup.register("groupdel " + group, lambda: subprocess.run(["groupdel", group]))
    gid = grp.getgrnam(group).gr_gid
    d3 = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/g/*"]}' % cg.prefix,
                  extra_config="socket_group: %s\n" % group, tag="group", iolens=args.iolens)
    d3.start(ck)
    st = os.stat(d3.socket)
    ck.eq("socket group (socket_group: %s)" % group, gid, st.st_gid)
    ck.eq("socket mode with socket_group", 0o660, stat.S_IMODE(st.st_mode))
    for what, user in (("supplementary", as_nobody(extra_groups=[gid])),
                       ("primary", as_nobody(gid=gid))):
        r = d3.cli("status", "--json", user=user)
        ok = r.returncode == 0
        if ck.check(ok, "iolens status as nobody with group %s (%s): exit %d, stderr %r" %
                    (group, what, r.returncode, r.stderr)):
            ck.eq("status pid (answered to nobody, %s group)" % what, d3.proc.pid,
                  json.loads(r.stdout).get("pid"))
    r = d3.cli("status", user=as_nobody())
    ck.check(r.returncode != 0 and "Permission denied" in r.stderr,
             "iolens status as nobody without group %s: exit %d, stderr %r" %
             (group, r.returncode, r.stderr))
    rc, _ = d3.stop()
    ck.eq("iolensd (socket_group) exit code", 0, rc)
    ck.check(not os.path.lexists(d3.socket), "socket %s left after the stop" % d3.socket)


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("daemon_errors")
    tmp = D.tempdir("errors")
    cg = D.Cgroups()
    check_config_cases(ck, args, tmp)
    bad_start_cases(ck, args, tmp)
    d1 = second_daemon_case(ck, args, cg)
    permission_cases(ck, args, cg, d1)
    rc, _ = d1.stop()
    ck.eq("first iolensd exit code", 0, rc)
    ck.eq("first iolensd's pins after its stop", None, d1.pins() or None)
    ck.finish()


if __name__ == "__main__":
    main()
