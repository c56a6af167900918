#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shipped unit (packaging/systemd/iolensd.service) runs iolensd with its default metrics
endpoint (packaging/systemd/README.md#how-the-unit-is-tested).

systemd is not PID 1 on the machines these tests run on, so the unit cannot be started. What
is checked instead:

1. `systemd-analyze verify` accepts a copy of the unit whose ExecStart= runs the built daemon.
2. iolensd runs under the unit's process restrictions, read from the unit file and applied the
   way systemd applies them:
   - CapabilityBoundingSet= and NoNewPrivileges= (uid 0, `setpriv --bounding-set`, as systemd
     does for a root service);
   - SystemCallFilter=, SystemCallErrorNumber=, SystemCallArchitectures=native and
     RestrictAddressFamilies=: one seccomp filter built here from the unit's lists (syscall
     groups expanded by `systemd-analyze syscall-filter`, numbers from <asm/unistd_64.h>);
     socket(2) of another family fails with EAFNOSUPPORT, another syscall with the unit's
     errno, another architecture is killed, as with systemd;
   - PrivateNetwork=: a new network namespace (`unshare -n`).
   Under them the daemon must start with the default metrics listen address family (IPv4
   loopback; and IPv6 loopback when civetweb has IPv6), answer `status` on its socket and
   `/metrics` from the host, attach its syscall hooks for a job, and stop cleanly on SIGTERM.
   The mount-namespace directives (ProtectSystem=, ReadWritePaths=, StateDirectory=, ...) are
   not reproduced here: the daemon's directories are the test's temporary ones.

Before the fix the unit had RestrictAddressFamilies=AF_UNIX and PrivateNetwork=yes: the daemon
could not open its metrics socket (a restart loop under systemd), and with that allowed, the
endpoint would have lived in a private network namespace that nothing can scrape.
"""
import ctypes
import os
import re
import shlex
import subprocess
import sys
import urllib.request

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

log = E.log
HERE = os.path.dirname(os.path.abspath(__file__))
UNIT = os.path.join(HERE, "..", "..", "packaging", "systemd", "iolensd.service")
UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"

# --- the unit file ------------------------------------------------------------------------------


def unit_directives(path):
    """{key: [values...]} of the [Service] section; a key set twice accumulates, an empty
    assignment resets (systemd's rule for list settings)."""
    out, section = {}, None
    for line in open(path):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section != "[Service]" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        if v == "":
            out[k] = []
        else:
            out.setdefault(k, []).append(v)
    return out


def words(directives, key):
    return [w for v in directives.get(key, []) for w in v.split()]


def yes(directives, key):
    v = directives.get(key, [])
    return bool(v) and v[-1].lower() in ("yes", "true", "1", "on")


# --- seccomp, as systemd builds it --------------------------------------------------------------


def syscall_groups():
    """{"@group": [names and @groups]} from `systemd-analyze syscall-filter`."""
    text = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                          check=True).stdout
    groups, cur = {}, None
    for line in text.splitlines():
        if line.startswith("@"):
            cur = line.strip()
            groups[cur] = []
        elif cur and line.strip() and not line.strip().startswith("#"):
            groups[cur].append(line.strip())
    return groups


def expand(items, groups, seen=None):
    seen = set() if seen is None else seen
    out = set()
    for it in items:
        if it.startswith("@"):
            if it in seen:
                continue
            seen.add(it)
            out |= expand(groups[it], groups, seen)
        else:
            out.add(it)
    return out


def syscall_numbers():
    nums = {}
    for line in open(UNISTD):
        m = re.match(r"#define __NR_(\w+)\s+(\d+)", line)
        if m:
            nums[m.group(1)] = int(m.group(2))
    return nums


def family_number(name):
    import socket
    return int(getattr(socket, name))


def errno_number(name):
    import errno
    return int(name) if name.isdigit() else getattr(errno, name)


SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
AUDIT_ARCH_X86_64 = 0xC000003E
LD_ABS_W, JEQ_K, RET_K = 0x20, 0x15, 0x06


def build_filter(allowed_nrs, families, err):
    """Classic BPF: the native architecture only; socket(2) with a family of `families` or
    EAFNOSUPPORT; a syscall of `allowed_nrs` or errno `err`."""
    import errno
    prog = [(LD_ABS_W, 0, 0, 4),                       # arch
            (JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
            (RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
            (LD_ABS_W, 0, 0, 0)]                       # nr
    fam = [(LD_ABS_W, 0, 0, 16)]                       # args[0], low half (little endian)
    for f in families:
        fam += [(JEQ_K, 0, 1, f), (RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    fam.append((RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT))
    prog.append((JEQ_K, 0, len(fam), syscall_numbers()["socket"]))
    prog += fam
    for nr in sorted(allowed_nrs):
        prog += [(JEQ_K, 0, 1, nr), (RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    prog.append((RET_K, 0, 0, SECCOMP_RET_ERRNO | err))
    return prog


def exec_filtered(argv):
    """--exec-filtered ALLOWED_NRS FAMILIES ERRNO -- PROGRAM ARGS: installs the filter and
    execs PROGRAM (the capabilities were set by setpriv before)."""
    sep = argv.index("--")
    nrs = [int(x) for x in argv[0].split(",")]
    fams = [int(x) for x in argv[1].split(",")]
    prog = build_filter(nrs, fams, int(argv[2]))

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    arr = (SockFilter * len(prog))(*[SockFilter(*i) for i in prog])
    fprog = SockFprog(len(prog), arr)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit("prctl(PR_SET_NO_NEW_PRIVS): errno %d" % ctypes.get_errno())
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit("prctl(PR_SET_SECCOMP): errno %d" % ctypes.get_errno())
    os.execv(argv[sep + 1], argv[sep + 1:])


def wrapper_for(directives, iolensd, tmp):
    """A script that runs iolensd the way the unit does (as far as this test can, see above)."""
    for key in ("SystemCallFilter", "RestrictAddressFamilies"):
        if any(w.startswith("~") for w in words(directives, key)):
            raise SystemExit("%s= deny lists are not handled by this test" % key)
    if words(directives, "SystemCallArchitectures") not in ([], ["native"]):
        raise SystemExit("SystemCallArchitectures= other than native is not handled")
    groups = syscall_groups()
    names = expand(words(directives, "SystemCallFilter"), groups)
    nums = syscall_numbers()
    nrs = sorted({nums[n] for n in names if n in nums})
    fams = [family_number(f) for f in words(directives, "RestrictAddressFamilies")]
    err = errno_number((words(directives, "SystemCallErrorNumber") or ["EPERM"])[-1])
    caps = [c.lower().replace("cap_", "") for c in words(directives, "CapabilityBoundingSet")]
    argv = []
    if yes(directives, "PrivateNetwork"):
        argv += ["unshare", "-n"]
    argv += ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--inh-caps=-all",
             "--bounding-set=" + ",".join(["-all"] + ["+" + c for c in caps])]
    if yes(directives, "NoNewPrivileges"):
        argv.append("--no-new-privs")
    argv += ["/usr/bin/python3", os.path.abspath(__file__), "--exec-filtered",
             ",".join(map(str, nrs)), ",".join(map(str, fams)), str(err), "--", iolensd]
    path = os.path.join(tmp, "iolensd-as-the-unit")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec %s \"$@\"\n" % " ".join(shlex.quote(a) for a in argv))
    os.chmod(path, 0o755)
    log("running iolensd as: %s" % " ".join(argv))
    log("%d syscalls allowed, families %s, errno %d, capabilities %s" %
        (len(nrs), words(directives, "RestrictAddressFamilies"), err, caps))
    return path


# --- the test -----------------------------------------------------------------------------------


def verify(ck, iolensd, tmp):
    unit = open(UNIT).read()
    unit = re.sub(r"^ExecStart=.*$", "ExecStart=%s --config %s/iolensd.yaml" % (iolensd, tmp),
                  unit, flags=re.M)
    path = os.path.join(tmp, "iolensd.service")
    with open(path, "w") as f:
        f.write(unit)
    r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
    mine = [ln for ln in (r.stdout + r.stderr).splitlines() if "iolensd.service" in ln]
    log("systemd-analyze verify: exit %d%s" % (r.returncode, "".join("\n  " + m for m in mine)))
    ck.eq("systemd-analyze verify exit status", 0, r.returncode)
    ck.eq("systemd-analyze verify: lines about the unit", [], mine)


def scrape(port, host):
    with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=10) as r:
        return r.status, r.read().decode("utf-8")


def run_as_unit(ck, args, wrapper, listen, host):
    cg = D.Cgroups(tag="unit%d" % (1 if "." in host else 2))
    cg.mkdir("")
    rules = '  - cgroup: {paths: ["%s/*"]}' % cg.rel()
    d = D.Daemon(wrapper, rules=rules, extra_config='metrics:\n  listen: "%s"\n' % listen,
                 tag="unit")
    st = d.start(ck)
    ports = st.get("metrics", {}).get("ports") or []
    if not ck.eq("%s: metrics ports" % listen, 1, len(ports)):
        log("status.metrics: %r; log:\n%s" % (st.get("metrics"), d.log()))
        d.stop()
        return
    try:
        status, body = scrape(ports[0], host)
    except OSError as e:
        status, body = None, str(e)
    ck.eq("%s: /metrics from the host" % listen, 200, status)
    ck.check("iolens_build_info{" in body, "%s: no iolens_build_info: %s" % (listen, body[:300]))
    # A job, so that the on-demand syscall hooks are attached under the filter too.
    job = cg.mkdir("job-1")
    p = D.run_in_cgroup(job, ["/bin/sleep", "20"])
    D.Cleanup.register("kill the job", p.kill)
    d.wait_live(ck, ["cgroup" + cg.rel("job-1")])
    p.kill()
    p.wait()
    rc, _ = d.stop()
    ck.eq("%s: exit status after SIGTERM" % listen, 0, rc)
    text = d.log()
    for bad in ("Operation not permitted", "Address family not supported", "cannot serve"):
        ck.check(bad not in text, "%s: %r in the log:\n%s" % (listen, bad, text[-2000:]))


def civetweb_has_ipv6():
    """civetweb's feature bit 8 (IPv6); Debian 12's civetweb 1.15 is built without it."""
    try:
        return ctypes.CDLL("libcivetweb.so.1").mg_check_feature(8) != 0
    except OSError:
        return False


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--exec-filtered":
        exec_filtered(sys.argv[2:])
        return
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("systemd_unit")
    for tool in ("systemd-analyze", "setpriv", "unshare"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            log("SKIP: %s not installed" % tool)
            sys.exit(D.SKIP)
    pid1 = open("/proc/1/comm").read().strip()
    log("PID 1 is %r: %s" % (pid1, "the unit could be started, but this test emulates it "
                             "anyway" if pid1 == "systemd" else "the unit cannot be started"))
    tmp = D.tempdir("unit")
    verify(ck, os.path.abspath(args.iolensd), tmp)
    directives = unit_directives(UNIT)
    wrapper = wrapper_for(directives, os.path.abspath(args.iolensd), tmp)
    run_as_unit(ck, args, wrapper, "127.0.0.1:0", "127.0.0.1")
    if civetweb_has_ipv6():
        run_as_unit(ck, args, wrapper, "[::1]:0", "[::1]")
    else:
        log("not tried: listen [::1]:0 (this civetweb is built without IPv6, so iolensd cannot "
            "serve an IPv6 address under any unit)")
    ck.finish()


if __name__ == "__main__":
    main()
