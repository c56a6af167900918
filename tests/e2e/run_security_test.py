#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `iolens run` (and `convert -o`, `capture -o`) as root must not be a way to write through
a symbolic link, clobber a file, or run a command as root for a user who was only given sudo
for iolens (issue 21, item 5; docs/run-json.md "Output files and sudo").

  1. a symlink planted at the --json, --darshan or --trace path, pointing at a victim file (and
     a dangling one, pointing where a file would be created): exit 2, one line naming the path,
     the victim unchanged (the dangling target not created), the command never run; the same
     with --force.
  2. an existing regular file at each path: exit 2 without --force (file unchanged, command not
     run); with --force replaced by the run's output. A FIFO is refused even with --force
     (without blocking); two options naming one file are refused.
  3. `convert -o` and `capture -o`: the same rules (a symlink or an existing file: exit 2,
     victim unchanged; convert --force replaces a regular file).
  4. under sudo (SUDO_UID/SUDO_GID/SUDO_USER of `nobody`, set by this test): the command's
     /proc/self/status Uid/Gid/Groups are nobody's, its own I/O (a known number of bytes
     written and read back) is in the JSON record, and the outputs belong to nobody; an output
     in a directory nobody cannot write is refused (created as nobody, not as root). With
     the SUDO_* variables unset (a root shell): Uid/Gid 0 and root's outputs; the option that
     once kept root under sudo (--keep-root: a root shell through a sudoers rule) is refused. A malformed SUDO_UID/SUDO_GID, or a SUDO_USER
     that is not SUDO_UID, is an error (exit 2, command not run), never root.
"""
import json
import os
import pwd
import stat
import subprocess
import sys

sys.dont_write_bytecode = True
import e2e_common as E  # noqa: E402

VICTIM = b"victim: must not change\n"
OUTPUTS = ("--json", "--darshan", "--trace")

# Prints its credentials, then writes N known bytes to argv[1] and reads them back.
WORKLOAD = r'''
import os, sys
with open("/proc/self/status") as f:
    for ln in f:
        if ln.startswith(("Uid:", "Gid:", "Groups:")):
            sys.stdout.write(ln)
data = bytes(i % 251 for i in range(int(sys.argv[2])))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
assert os.write(fd, data) == len(data)
os.close(fd)
fd = os.open(sys.argv[1], os.O_RDONLY)
got = os.read(fd, len(data) + 1)
os.close(fd)
assert got == data
'''
NBYTES = 12345


def one_line(err):
    return [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]


def iolens(argv, env=None, cwd=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, env=full_env, cwd=cwd, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def read(path):
    with open(path, "rb") as f:
        return f.read()


def expect_bytes(ck, what, want, path):
    got = read(path)
    ck.check(got == want, "%s: %s changed: %d bytes now, starting %r" % (what, path, len(got),
                                                                         got[:60]))


def expect_refused(ck, what, rc, err, path, words, marker=None):
    lines = one_line(err)
    E.log("%s: rc %d, stderr %r" % (what, rc, err[:300]))
    ck.eq("%s: exit code" % what, 2, rc)
    ck.check(len(lines) == 1 and path in lines[0] and words in lines[0],
             "%s: not one line naming %s and saying %r: %r" % (what, path, words, lines))
    if marker is not None:
        ck.check(not os.path.exists(marker), "%s: the command ran" % what)


def case_symlinks(ck, bin_, tmp):
    victim = os.path.join(tmp, "victim")
    marker = os.path.join(tmp, "marker-symlink")
    for opt in OUTPUTS:
        for force in ([], ["--force"]):
            with open(victim, "wb") as f:
                f.write(VICTIM)
            link = os.path.join(tmp, "link" + opt)
            os.symlink(victim, link)
            what = "[1] %s %s -> victim" % (" ".join([opt] + force), link)
            rc, _, err = iolens([bin_, "run", "-q", opt, link] + force + ["--", "touch", marker])
            expect_refused(ck, what, rc, err, link, "symbolic link", marker)
            expect_bytes(ck, what, VICTIM, victim)
            ck.check(os.path.islink(link) and os.readlink(link) == victim,
                     "%s: the symlink was replaced" % what)
            os.unlink(link)
            # Dangling: the old O_CREAT would have created the target.
            target = os.path.join(tmp, "created-through-link")
            os.symlink(target, link)
            rc, _, err = iolens([bin_, "run", "-q", opt, link] + force + ["--", "touch", marker])
            expect_refused(ck, what + " (dangling)", rc, err, link, "symbolic link", marker)
            ck.check(not os.path.lexists(target), "%s: the dangling link's target was created" %
                     what)
            os.unlink(link)


def case_existing(ck, bin_, tmp):
    marker = os.path.join(tmp, "marker-existing")
    old = b"an earlier run's file\n"
    for opt in OUTPUTS:
        path = os.path.join(tmp, "existing" + opt.strip("-"))
        with open(path, "wb") as f:
            f.write(old)
        what = "[2] %s existing file" % opt
        rc, _, err = iolens([bin_, "run", "-q", opt, path, "--", "touch", marker])
        expect_refused(ck, what, rc, err, path, "--force", marker)
        expect_bytes(ck, what + " without --force", old, path)
        rc, _, err = iolens([bin_, "run", "-q", opt, path, "--force", "--", "touch", marker])
        E.log("%s --force: rc %d, stderr %r" % (what, rc, err[:300]))
        ck.eq("%s --force: exit code" % what, 0, rc)
        ck.check(os.path.exists(marker), "%s --force: the command did not run" % what)
        new = read(path)
        ck.check(new != old and len(new) > 100, "%s --force: not replaced (%d bytes)" %
                 (what, len(new)))
        if opt == "--json":
            ck.eq("%s --force: the JSON's command" % what, ["touch", marker],
                  json.loads(new).get("command"))
        if opt == "--trace":
            rc, out, err = iolens([bin_, "convert", path, "--to", "jsonl", "-o", "-"])
            ck.eq("%s --force: the new trace converts (%s)" % (what, err[-200:]), 0, rc)
        if os.path.exists(marker):
            os.unlink(marker)

    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    rc, _, err = iolens([bin_, "run", "-q", "--force", "--trace", fifo, "--", "touch", marker],
                        timeout=30)
    expect_refused(ck, "[2] --force --trace FIFO", rc, err, fifo, "not a regular file", marker)

    same = os.path.join(tmp, "same.out")
    rc, _, err = iolens([bin_, "run", "-q", "--json", same, "--darshan", "./" +
                         os.path.basename(same), "--", "touch", marker], cwd=tmp)
    expect_refused(ck, "[2] --json and --darshan one file", rc, err, same, "same file", marker)
    ck.check(not os.path.exists(same), "[2] one file twice: %s left behind" % same)


def case_convert_capture(ck, bin_, tmp):
    victim = os.path.join(tmp, "victim")
    with open(victim, "wb") as f:
        f.write(VICTIM)
    tr = os.path.join(tmp, "for-convert.iotrace")
    rc, _, err = iolens([bin_, "run", "-q", "--trace", tr, "--", "true"])
    if not ck.eq("[3] a trace to convert: exit code (%r)" % err[-200:], 0, rc):
        return
    link = os.path.join(tmp, "convert-link")
    os.symlink(victim, link)
    for force in ([], ["--force"]):
        rc, _, err = iolens([bin_, "convert", tr, "--to", "jsonl", "-o", link] + force)
        expect_refused(ck, "[3] convert -o symlink %s" % force, rc, err, link, "symbolic link")
        expect_bytes(ck, "[3] convert -o symlink %s" % force, VICTIM, victim)
    existing = os.path.join(tmp, "convert-existing")
    with open(existing, "wb") as f:
        f.write(VICTIM)
    rc, _, err = iolens([bin_, "convert", tr, "--to", "jsonl", "-o", existing])
    expect_refused(ck, "[3] convert -o existing", rc, err, existing, "--force")
    expect_bytes(ck, "[3] convert -o existing", VICTIM, existing)
    rc, _, err = iolens([bin_, "convert", tr, "--to", "jsonl", "-o", existing, "--force"])
    ck.eq("[3] convert -o existing --force: exit code (%r)" % err[-200:], 0, rc)
    ck.check(read(existing).startswith(b"{"), "[3] convert --force did not write the JSON lines")
    # capture: checked before the daemon is asked (there is none here).
    sock = os.path.join(tmp, "no-daemon.sock")
    for path, words in ((link, "symbolic link"), (existing, "--force")):
        rc, _, err = iolens([bin_, "capture", "--job", "x", "--socket", sock, "-o", path])
        expect_refused(ck, "[3] capture -o %s" % path, rc, err, path, words)
    expect_bytes(ck, "[3] capture -o symlink", VICTIM, victim)


def status_ids(out, key):
    for ln in out.decode().splitlines():
        if ln.startswith(key + ":"):
            return [int(x) for x in ln.split()[1:]]
    return None


def case_sudo(ck, bin_, tmp):
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        ck.fail("[4] no user `nobody` to play the one who ran sudo")
        return
    uid, gid = user.pw_uid, user.pw_gid
    sudo = {"SUDO_UID": str(uid), "SUDO_GID": str(gid), "SUDO_USER": "nobody",
            "SUDO_COMMAND": bin_}
    home = os.path.join(tmp, "nobody-dir")  # the user's own directory
    os.mkdir(home)
    os.chown(home, uid, gid)
    want_groups = sorted(set(os.getgrouplist("nobody", gid)))

    for keep in (False, True):
        tag = "root" if keep else "sudo"
        outs = {o: os.path.join(home, tag + "." + o.strip("-")) for o in OUTPUTS}
        data = os.path.join(home, tag + ".data")
        argv = [bin_, "run", "-q"]
        for o, p in outs.items():
            argv += [o, p]
        argv += ["--", "/usr/bin/python3", "-c", WORKLOAD, data, str(NBYTES)]
        # keep: a root shell with no SUDO_* (iolens() adds only the variables it is given).
        rc, out, err = iolens(argv, env=None if keep else sudo, cwd=home)
        E.log("[4] %s: rc %d, stdout %r, stderr %r" % (tag, rc, out, err[-300:]))
        if not ck.eq("[4] %s: exit code" % tag, 0, rc):
            continue
        want_uid, want_gid = (0, 0) if keep else (uid, gid)
        ck.eq("[4] %s: the command's Uid (real, effective, saved, fs)" % tag, [want_uid] * 4,
              status_ids(out, "Uid"))
        ck.eq("[4] %s: the command's Gid (real, effective, saved, fs)" % tag, [want_gid] * 4,
              status_ids(out, "Gid"))
        if not keep:
            ck.eq("[4] sudo: the command's groups (nobody's)", want_groups,
                  sorted(set(status_ids(out, "Groups") or [])))
        st = os.stat(data)
        ck.eq("[4] %s: the data file's owner (made by the command)" % tag, (want_uid, want_gid),
              (st.st_uid, st.st_gid))
        for o, p in outs.items():
            st = os.lstat(p)
            ck.check(stat.S_ISREG(st.st_mode), "[4] %s: %s is not a regular file" % (tag, o))
            ck.eq("[4] %s: owner of the %s file" % (tag, o), (want_uid, want_gid),
                  (st.st_uid, st.st_gid))
        # The run's record still has the command's own I/O.
        doc = E.load_json_strict(outs["--json"])
        recs = [f for f in doc.get("files", []) if f.get("path") == data]
        for k in ("bytes_written", "bytes_read"):
            ck.eq("[4] %s: %s of %s in the JSON record" % (tag, k, data), NBYTES,
                  sum(f["counters"].get(k, 0) for f in recs))

    # No way back to root under sudo: the old --keep-root made `sudo iolens run --keep-root -- sh`
    # a root shell through a sudoers rule for iolens.
    marker_kr = os.path.join(tmp, "marker-keep-root")
    rc, _, err = iolens([bin_, "run", "-q", "--keep-root", "--", "touch", marker_kr], env=sudo,
                        cwd=home)
    ck.check(rc != 0, "[4] sudo --keep-root accepted (exit %d)" % rc)
    ck.check(not os.path.exists(marker_kr), "[4] sudo --keep-root: the command ran")

    # Created as nobody: not where nobody may not write.
    closed = os.path.join(tmp, "root-only")
    os.mkdir(closed, 0o700)
    marker = os.path.join(home, "marker-sudo")
    path = os.path.join(closed, "x.json")
    rc, _, err = iolens([bin_, "run", "-q", "--json", path, "--", "touch", marker], env=sudo,
                        cwd=home)
    expect_refused(ck, "[4] sudo, --json in a root-only directory", rc, err, path,
                   "Permission denied", marker)
    ck.check(not os.path.exists(path), "[4] sudo: %s created in a root-only directory" % path)

    # Malformed: an error, not root.
    bad = [({"SUDO_UID": "abc"}, "SUDO_UID"), ({"SUDO_UID": "-1"}, "SUDO_UID"),
           ({"SUDO_UID": ""}, "SUDO_UID"), ({"SUDO_UID": "65534x"}, "SUDO_UID"),
           ({"SUDO_UID": "99999999999"}, "SUDO_UID"), ({"SUDO_GID": "nogroup"}, "SUDO_GID"),
           ({"SUDO_GID": None}, "SUDO_GID"), ({"SUDO_USER": "root"}, "SUDO_USER"),
           ({"SUDO_USER": "no-such-user-iolens"}, "SUDO_USER")]
    for change, words in bad:
        env = dict(os.environ)
        env.update(sudo)
        for k, v in change.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        p = subprocess.run([bin_, "run", "-q", "--", "touch", marker], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=home,
                           timeout=60)
        what = "[4] bad sudo variables %r" % change
        lines = one_line(p.stderr)
        E.log("%s: rc %d, stderr %r" % (what, p.returncode, p.stderr[:300]))
        ck.eq("%s: exit code" % what, 2, p.returncode)
        ck.check(len(lines) == 1 and words in lines[0], "%s: not one line naming %s: %r" %
                 (what, words, lines))
        ck.check(not os.path.exists(marker), "%s: the command ran" % what)


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("run_security")
    tmp = E.disk_tempdir("runsec")
    os.chmod(tmp, 0o755)
    case_symlinks(ck, args.iolens, tmp)
    case_existing(ck, args.iolens, tmp)
    case_convert_capture(ck, args.iolens, tmp)
    case_sudo(ck, args.iolens, tmp)
    ck.finish()


if __name__ == "__main__":
    main()
