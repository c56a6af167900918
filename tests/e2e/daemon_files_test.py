#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd, root, never writes, chmods or chowns through a link in its directories
(issue 21, item 5).

1. Directories refused at start, each with a non-zero exit (not a signal), a message naming the
   path and the reason, no pin dir and no socket left, and the link's target untouched (mode
   0755 kept: the unfixed daemon chmodded it 0700 or 0750 and ran):
   a symlinked state_dir, output_dir and socket directory; a world-writable state_dir (0777),
   a sticky world-writable one (01777, as /tmp), a group-writable output_dir (0775).
2. Links planted in the daemon's (otherwise valid) directories, pointing at victim files:
   - state_dir/lock a dangling symlink: start refused naming it, nothing created at its target
     (the unfixed daemon created the target, as root);
   - state_dir/state.cbor.tmp a symlink to a victim: after the daemon has saved its state the
     victim is byte for byte unchanged and state.cbor is a regular file (the unfixed daemon
     truncated the victim and wrote the state into it);
   - output_dir/.tmp-<record name> a hard link to a victim, for each second the job may start
     in: the victim is unchanged and the record is written (the unfixed daemon wrote the record
     into the victim through the link);
   - state_dir/pressure-drain a symlink to a victim, planted while the daemon runs, then a
     pressure drain (kernel_file_records 64, a job touching 200 files and staying alive): the
     victim is unchanged
     (the unfixed daemon truncated it).
"""
import os
import stat
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

VICTIM_TEXT = b"root's file: must never change\n"


def victim(path):
    with open(path, "wb") as f:
        f.write(VICTIM_TEXT)
    os.chmod(path, 0o644)
    return path


def victim_intact(ck, what, path):
    try:
        with open(path, "rb") as f:
            got = f.read()
    except OSError as e:
        ck.fail("%s: victim %s: %s" % (what, path, e))
        return
    ck.check(got == VICTIM_TEXT, "%s: victim %s was written through the link: now %d bytes %r" %
             (what, path, len(got), got[:60]))


def config(tmp, out, state, sock, pin_dir, extra=""):
    return ("output_dir: %s\nstate_dir: %s\npin_dir: %s\nsocket: %s\n"
            'metrics:\n  listen: "127.0.0.1:0"\n%sjobs:\n  - cgroup: {paths: ["/iolens-e2e-none/*"]}\n' %
            (out, state, pin_dir, sock, extra))


def start_refused(ck, args, tmp, what, out, state, sock, words, pin_dir):
    path = os.path.join(tmp, "refused.yaml")
    with open(path, "w") as f:
        f.write(config(tmp, out, state, sock, pin_dir))
    try:
        r = subprocess.run([args.iolensd, "-c", path], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        ck.fail("%s: iolensd still runs after 10 s (it should refuse to start)" % what)
        subprocess.run(["rm", "-rf", pin_dir])
        if os.path.lexists(sock):
            os.unlink(sock)
        return
    ck.check(0 < r.returncode < 128, "%s: exit %d (expected non-zero, not a signal)" %
             (what, r.returncode))
    ck.check(all(w in r.stderr for w in words), "%s: stderr does not name %s:\n%s" %
             (what, words, r.stderr))
    ck.check(not os.path.exists(pin_dir), "%s: pin dir %s left behind" % (what, pin_dir))
    ck.check(not os.path.lexists(sock), "%s: socket file %s left behind" % (what, sock))
    D.log("%s: exit %d: %s" % (what, r.returncode, r.stderr.strip().splitlines()[-1:]))


def directory_cases(ck, args, tmp, pin_dir):
    def fresh(name, mode=0o755):
        d = os.path.join(tmp, name)
        os.mkdir(d)
        os.chmod(d, mode)
        return d

    def link(name, target):
        p = os.path.join(tmp, name)
        os.symlink(target, p)
        return p

    sockdir = fresh("sockdir")
    sock = os.path.join(sockdir, "sock")
    # Symlinked directories: refused, their targets' modes kept.
    target = fresh("state-target")
    start_refused(ck, args, tmp, "symlinked state_dir", os.path.join(tmp, "out1"),
                  link("state-link", target), sock,
                  ["state directory", os.path.join(tmp, "state-link"), "symbolic link"], pin_dir)
    ck.eq("symlinked state_dir: its target's mode", "0o755",
          oct(stat.S_IMODE(os.stat(target).st_mode)))
    target = fresh("out-target")
    start_refused(ck, args, tmp, "symlinked output_dir", link("out-link", target),
                  os.path.join(tmp, "state1"), sock,
                  ["output directory", os.path.join(tmp, "out-link"), "symbolic link"], pin_dir)
    ck.eq("symlinked output_dir: its target's mode", "0o755",
          oct(stat.S_IMODE(os.stat(target).st_mode)))
    target = fresh("sock-target")
    start_refused(ck, args, tmp, "symlinked socket directory", os.path.join(tmp, "out2"),
                  os.path.join(tmp, "state2"), os.path.join(link("sock-link", target), "sock"),
                  ["control socket directory", os.path.join(tmp, "sock-link"), "symbolic link"],
                  pin_dir)
    ck.eq("symlinked socket directory: files in its target", [], os.listdir(target))
    # Directories others may write to.
    for name, mode, which in (("state-777", 0o777, "state"), ("state-1777", 0o1777, "state"),
                              ("out-775", 0o775, "out"), ("sock-1777", 0o1777, "sock")):
        d = fresh(name, mode)
        out = d if which == "out" else os.path.join(tmp, "out3")
        state = d if which == "state" else os.path.join(tmp, "state3")
        s = os.path.join(d, "sock") if which == "sock" else sock
        start_refused(ck, args, tmp, "%s directory mode %o" % (which, mode), out, state, s,
                      [d, "group- or world-writable"], pin_dir)
        ck.eq("%s: mode kept" % name, oct(mode), oct(stat.S_IMODE(os.stat(d).st_mode)))
    # A dangling symlink at state_dir/lock: nothing created through it.
    state = fresh("state-lock", 0o700)
    created = os.path.join(tmp, "created-through-lock")
    os.symlink(created, os.path.join(state, "lock"))
    start_refused(ck, args, tmp, "symlinked lock", os.path.join(tmp, "out4"), state, sock,
                  [os.path.join(state, "lock"), "symbolic link"], pin_dir)
    ck.check(not os.path.lexists(created), "symlinked lock: %s was created through it" % created)


def planted_cases(ck, args, cg):
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/fl/*"]}' % cg.prefix, tag="fl",
                 extra_config="limits:\n  kernel_file_records: 64\n")
    os.makedirs(d.state_dir, mode=0o700)
    os.makedirs(d.output_dir, mode=0o750)
    v_state = victim(os.path.join(d.dir, "victim-state"))
    os.symlink(v_state, os.path.join(d.state_dir, "state.cbor.tmp"))
    d.start(ck)
    state = os.path.join(d.state_dir, "state.cbor")

    # The record's temporary, as a hard link to a victim, for each second the job may start in.
    job_id = "cgroup" + cg.rel("fl/j")
    v_rec = victim(os.path.join(d.dir, "victim-record"))
    t0 = int(time.time())
    safe = job_id.replace("/", "_")
    for t in range(t0 - 1, t0 + 4):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))
        for suffix in (".json", ".json.zst"):  # record_compression none or zstd (the default)
            os.link(v_rec, os.path.join(d.output_dir, ".tmp-%s_%s%s" % (stamp, safe, suffix)))
    cg.mkdir("fl/j")
    d.wait_live(ck, [job_id])
    if not D.wait_for("a saved state", lambda: os.path.exists(state) and
                      not os.path.islink(state), 15):
        ck.fail("no state.cbor saved in %s: %s" % (d.state_dir, os.listdir(d.state_dir)))
    victim_intact(ck, "symlinked state.cbor.tmp", v_state)
    ck.check(os.path.isfile(state) and not os.path.islink(state),
             "state.cbor is not a regular file of its own")

    # A pressure drain with a link at its marker's name.
    v_marker = victim(os.path.join(d.dir, "victim-marker"))
    os.symlink(v_marker, os.path.join(d.state_dir, "pressure-drain"))
    work = D.tempdir("files-work")
    # Alive with its records (the marker is made only when live records are taken out).
    p = D.run_in_cgroup(cg.abs("fl/j"), [args.workload, "many", work, "200", "1", "--gate-end"],
                        stdin=subprocess.PIPE)
    D.Cleanup.register("kill many", lambda: p.poll() is None and p.kill())
    D.read_json_line(ck, p, "many")
    # The map's fill makes the next drain a pressure drain: it takes the marker's name (a fresh
    # file in place of the link), or, unfixed, writes through the link.
    marker = os.path.join(d.state_dir, "pressure-drain")

    def marker_used():
        with open(v_marker, "rb") as f:
            return not os.path.islink(marker) or f.read() != VICTIM_TEXT
    if not D.wait_for("a pressure drain", marker_used, 10):
        ck.fail("no pressure drain happened (kernel map of 64, 200 files): the case tested nothing")
    victim_intact(ck, "symlinked pressure-drain marker", v_marker)
    D.log("state dir after the pressure drain: %s" % sorted(os.listdir(d.state_dir)))
    p.stdin.write(b"\n")
    p.stdin.flush()
    D.finish_workload(ck, p, "many")

    cg.rmdir("fl/j")
    rec = d.wait_record(ck, job_id)
    ck.check(rec is not None, "the record was not written (its temporary was a link)")
    victim_intact(ck, "hard-linked record temporary", v_rec)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_files")
    tmp = D.tempdir("files")
    os.chmod(tmp, 0o755)
    pin_dir = "%s/iolens-e2e-%d-files" % (D.BPFFS, os.getpid())
    D.Cleanup.register("remove " + pin_dir, lambda: subprocess.run(["rm", "-rf", pin_dir]))
    cg = D.Cgroups()
    directory_cases(ck, args, tmp, pin_dir)
    planted_cases(ck, args, cg)
    ck.finish()


if __name__ == "__main__":
    main()
