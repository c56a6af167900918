#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a bad state file never keeps iolensd from starting (issue 21, item 4).

One iolensd with a live job, SIGKILLed (its pins stay, so the next one resumes and reads
state.cbor). The state it saves is zstd's (magic IOLSTAT2); the hostile files below are in the
zlib format of earlier builds (IOLSTAT1, still read: Python has no zstd here) but for the last.
Before each restart state.cbor is replaced by a hostile file:
  1. the right magic, a correct raw length and valid zlib data, but CBOR whose fields have the
     wrong types ({"format": 1, "pins_created_wall_ns": "x", "table": []}): the unfixed daemon
     threw nlohmann's type_error from resume() and aborted (SIGABRT, exit 134) at every start;
  2. 25 bytes: the magic, a raw length of 4 GiB, 9 bytes of "compressed" data: the unfixed
     daemon allocated (and zeroed) 4 GiB before calling the file corrupt;
  3. the same under the zstd magic, with a zstd frame's magic in the 9 bytes.
Each time: iolensd starts and answers (not killed by a signal), its peak RSS (VmHWM) stays
under 200 MB, status says restart.state "corrupt: ...", the file is moved aside as
state.cbor.corrupt-* (kept for inspection) with one log line naming it, and state.cbor is gone
until the next save. At the end the job's record says the restart state was unusable
(lost.restart_state_unusable = 1, restart.state "corrupt: ...").
"""
import os
import signal
import struct
import sys
import zlib

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

MAGIC = b"IOLSTAT1"  # earlier builds' (zlib)
MAGIC_ZSTD = b"IOLSTAT2"  # what iolensd writes
MAX_HWM_KB = 200 * 1024


def cbor_text(s):
    b = s.encode()
    assert len(b) < 24
    return bytes([0x60 + len(b)]) + b


def wrong_type_state():
    # {"format": 1, "pins_created_wall_ns": "x", "table": []}, hand-encoded (RFC 8949)
    raw = (b"\xa3" + cbor_text("format") + b"\x01" + cbor_text("pins_created_wall_ns") +
           cbor_text("x") + cbor_text("table") + b"\x80")
    return MAGIC + struct.pack("<Q", len(raw)) + zlib.compress(raw)


def huge_claim_state():
    data = MAGIC + struct.pack("<Q", 4 << 30) + b"\x78\x9c" + b"\x00" * 7
    assert len(data) == 25
    return data


def huge_claim_zstd_state():
    data = MAGIC_ZSTD + struct.pack("<Q", 4 << 30) + b"\x28\xb5\x2f\xfd" + b"\x00" * 5
    assert len(data) == 25
    return data


def vm_hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def moved_aside(d):
    return sorted(n for n in os.listdir(d.state_dir) if n.startswith("state.cbor.corrupt-"))


def restart_on(ck, d, what, data, n_aside):
    """Replaces state.cbor with `data`, starts iolensd again and checks it copes. Leaves it
    running (True) or reports why it did not come up (False)."""
    path = os.path.join(d.state_dir, "state.cbor")
    ck.check(os.path.exists(path), "%s: the killed daemon saved no state.cbor to replace" % what)
    with open(path, "wb") as f:
        f.write(data)
    d.spawn()
    st = D.wait_for("iolensd to answer status", d._status_or_exit, 30)
    if st is None or d.proc.poll() is not None:
        rc = d.proc.poll()
        hwm = vm_hwm_kb(d.proc.pid) if rc is None else None
        ck.fail("%s: iolensd did not start (exit %r%s%s); log tail:\n%s" %
                (what, rc, ", killed by signal %d" % -rc if rc is not None and rc < 0 else "",
                 ", still not answering with VmHWM %d kB" % hwm if hwm else "",
                 "\n".join(d.log().splitlines()[-8:])))
        if d.proc.poll() is None:
            d.kill9()
        return False
    hwm = vm_hwm_kb(d.proc.pid)
    D.log("%s: started, VmHWM %s kB" % (what, hwm))
    ck.check(hwm is not None and hwm < MAX_HWM_KB,
             "%s: peak RSS %s kB (limit %d kB): the claimed length was allocated" %
             (what, hwm, MAX_HWM_KB))
    restart = st.get("restart", {})
    ck.eq("%s: status restart.resumed" % what, True, restart.get("resumed"))
    ck.check(str(restart.get("state", "")).startswith("corrupt"),
             "%s: status restart.state %r, expected corrupt: ..." % (what, restart.get("state")))
    aside = moved_aside(d)
    ck.eq("%s: files moved aside" % what, n_aside, len(aside))
    if aside:
        with open(os.path.join(d.state_dir, aside[-1]), "rb") as f:
            ck.eq("%s: the moved file's bytes" % what, data, f.read())
        ck.check(aside[-1] in d.log(), "%s: the log does not name %s" % (what, aside[-1]))
    return True


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_state_corrupt")
    cg = D.Cgroups()
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/sc/*"]}' % cg.prefix, tag="sc")
    d.start(ck)
    job_id = "cgroup" + cg.rel("sc/j")
    cg.mkdir("sc/j")
    d.wait_live(ck, [job_id])
    state = os.path.join(d.state_dir, "state.cbor")
    if not D.wait_for("a saved state", lambda: os.path.exists(state), 15):
        ck.fatal("iolensd saved no state in %s" % d.state_dir)
    with open(state, "rb") as f:
        ck.eq("the saved state's magic and zstd frame magic (docs/state-format.md)",
              MAGIC_ZSTD + b"\x28\xb5\x2f\xfd", (lambda b: b[:8] + b[16:20])(f.read(20)))

    n = 0
    for what, data in (("wrong-type state", wrong_type_state()),
                       ("25-byte state claiming 4 GiB", huge_claim_state()),
                       ("25-byte zstd state claiming 4 GiB", huge_claim_zstd_state())):
        if d.proc.poll() is None:  # the previous case's daemon came up
            rc, _ = d.kill9()
            ck.eq("%s: exit after SIGKILL" % what, -signal.SIGKILL, rc)
        n += 1
        if restart_on(ck, d, what, data, n):
            # The next save gives the next case a state.cbor to replace.
            D.wait_or_fail(ck, "a new saved state", lambda: os.path.exists(state), 15)
        else:
            with open(state, "wb") as f:
                f.write(b"")  # the next case writes its own
    if d.proc.poll() is not None:
        ck.fatal("no iolensd running for the record check")
    cg.rmdir("sc/j")
    rec = d.wait_record(ck, job_id) or {}
    lost = rec.get("lost", {})
    ck.eq("record lost.restart_state_unusable", 1, lost.get("restart_state_unusable"))
    ck.check(str(rec.get("restart", {}).get("state", "")).startswith("corrupt"),
             "record restart.state %r, expected corrupt: ..." % rec.get("restart", {}).get("state"))
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
