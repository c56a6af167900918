#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: CO-RE against the cached small BTF (agent/loader/core_btf.hpp).

`iolens run` relocates its programs against a small BTF that `bpftool gen min_core_btf` made
for this object on this kernel, kept in IOLENS_CACHE_DIR. The oracle is libbpf relocating the
same object against the kernel's whole BTF (IOLENS_CACHE_DIR=""): every instruction it patches
("relo #N: patched insn #K ... off A -> B" in its debug log) must be patched to the same value
with the small BTF, made or found. And every run, however the cache fares (made, found, no
bpftool, a damaged file), must count a `cat` of a file of known size exactly: its bytes and
its one open.
"""
import os
import re
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

SIZE = 3 * 1024 * 1024 + 123
PATCHED = re.compile(r"prog '[^']+': relo #\d+: patched insn #\d+ .*$", re.M)
TARGET = re.compile(r"CO-RE target: (.*)$", re.M)


def run(ck, args, tmp, tag, data, cache, bpftool=None):
    env = dict(os.environ, IOLENS_CACHE_DIR=cache)
    env.pop("IOLENS_BPFTOOL", None)
    if bpftool is not None:
        env["IOLENS_BPFTOOL"] = bpftool
    out = os.path.join(tmp, tag + ".json")
    r = E.run_iolens(args.iolens, ["/bin/cat", data], json_path=out,
                     extra=["-q", "--local", "-v"], env=env)
    err = r.err_text()
    if r.rc != 0:
        ck.fatal("%s: iolens run exited %d; stderr:\n%s" % (tag, r.rc, err[-3000:]))
    ck.eq("%s: bytes cat wrote" % tag, SIZE, len(r.out))
    doc = E.load_run(ck, r)
    files = [f for f in doc["files"] if f.get("path") == data]
    if ck.eq("%s: records of %s" % (tag, data), 1, len(files)):
        c = files[0].get("counters", {})
        ck.eq("%s: bytes_read" % tag, SIZE, c.get("bytes_read"))
        ck.eq("%s: opens" % tag, 1, c.get("opens"))
    m = TARGET.search(err)
    patched = sorted(PATCHED.findall(err))
    return (m.group(1) if m else None), patched


def tiny_btf():
    """A valid raw BTF file with one type, `int`."""
    types = struct.pack("<III", 1, 1 << 24, 4) + struct.pack("<I", 32)  # INT, 32 bits
    strings = b"\0int\0"
    hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return hdr + types + strings


def core_files(cache):
    if not os.path.isdir(cache):
        return []
    return sorted(n for n in os.listdir(cache) if n.startswith("core-") and n.endswith(".btf"))


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("core_btf")
    if not os.access("/usr/sbin/bpftool", os.X_OK):
        ck.fatal("/usr/sbin/bpftool is missing (Debian package bpftool, listed in .ci/setup)")
    tmp = E.disk_tempdir("core-btf")
    data = os.path.join(tmp, "data.bin")
    with open(data, "wb") as f:
        f.write(os.urandom(SIZE))
    cache = os.path.join(tmp, "cache")

    target, oracle = run(ck, args, tmp, "kernel", data, "")
    ck.check(target is None, "IOLENS_CACHE_DIR='' still used a cache: %r" % target)
    ck.check(len(oracle) > 100, "only %d patched instructions in libbpf's log against the "
             "kernel's BTF: the test cannot compare" % len(oracle))

    target, patched = run(ck, args, tmp, "made", data, cache)
    names = core_files(cache)
    if ck.eq("small BTF files made", 1, len(names)):
        path = os.path.join(cache, names[0])
        ck.eq("made: target", "made " + path, target)
        st = os.stat(path)
        ck.eq("mode of %s" % path, 0o644, st.st_mode & 0o7777)
        ck.eq("mode of %s" % cache, 0o755, os.stat(cache).st_mode & 0o7777)
        with open(path, "rb") as f:
            ck.eq("BTF magic of %s" % path, b"\x9f\xeb", f.read(2))
        kernel = os.stat("/sys/kernel/btf/vmlinux").st_size
        ck.check(st.st_size * 100 < kernel, "the small BTF is %d bytes, the kernel's %d"
                 % (st.st_size, kernel))
        ck.check(patched == oracle, "made: %d patched instructions differ from the kernel "
                 "BTF's: %s" % (len(set(patched) ^ set(oracle)),
                                sorted(set(patched) ^ set(oracle))[:6]))
        mtime = st.st_mtime_ns

        target, patched = run(ck, args, tmp, "found", data, cache)
        ck.eq("found: target", path, target)
        ck.check(patched == oracle, "found: %d patched instructions differ from the kernel "
                 "BTF's" % len(set(patched) ^ set(oracle)))
        ck.eq("found: mtime (not made again)", mtime, os.stat(path).st_mtime_ns)

        # A file that parses but lacks the types the relocations need: libbpf poisons the
        # instructions, the load fails, and iolens loads again with the kernel's BTF and
        # removes the file (the next run makes it again).
        with open(path, "wb") as f:
            f.write(tiny_btf())
        os.chmod(path, 0o644)
        out = os.path.join(tmp, "wrong.json")
        r = E.run_iolens(args.iolens, ["/bin/cat", data], json_path=out,
                         extra=["-q", "--local", "-v"], env=dict(os.environ, IOLENS_CACHE_DIR=cache))
        ck.eq("wrong types: exit code", 0, r.rc)
        ck.check("the load failed with the small CO-RE BTF %s" % path in r.err_text(),
                 "wrong types: no warning naming %s; stderr tail:\n%s" % (path, r.err_text()[-1500:]))
        ck.check(not os.path.exists(path), "wrong types: %s was not removed" % path)
        if r.rc == 0:
            doc = E.load_run(ck, r)
            got = [f.get("counters", {}).get("bytes_read") for f in doc["files"]
                   if f.get("path") == data]
            ck.eq("wrong types: bytes_read of %s" % data, [SIZE], got)
        target, patched = run(ck, args, tmp, "remade", data, cache)
        ck.eq("remade: target", "made " + path, target)
        ck.check(patched == oracle, "remade: relocations differ from the kernel BTF's")

        # A damaged file (the right magic, cut short) is made again, and said so.
        with open(path, "r+b") as f:
            f.truncate(30)
        target, patched = run(ck, args, tmp, "damaged", data, cache)
        ck.check(target is not None and target.startswith("made " + path)
                 and "the cached one was damaged" in target, "damaged: target %r" % target)
        ck.check(patched == oracle, "damaged: relocations differ from the kernel BTF's")

    # No bpftool: the kernel's BTF, the same counts, nothing left in the cache.
    cache2 = os.path.join(tmp, "cache2")
    target, patched = run(ck, args, tmp, "no-bpftool", data, cache2,
                          bpftool=os.path.join(tmp, "no-such-bpftool"))
    ck.check(target is not None and "(Debian package bpftool)" in target
             and "CO-RE uses the kernel's BTF" in target, "no bpftool: target %r" % target)
    ck.eq("no bpftool: files in the cache", [], os.listdir(cache2))
    ck.check(patched == oracle, "no bpftool: relocations differ from the kernel BTF's")

    # Under sudo the user's environment does not choose what root runs or where it writes:
    # IOLENS_BPFTOOL (a script that would leave a mark) and IOLENS_CACHE_DIR are ignored.
    marker = os.path.join(tmp, "marker")
    tool = os.path.join(tmp, "user-bpftool")
    with open(tool, "w") as f:
        f.write("#!/bin/sh\ntouch %s\nexit 1\n" % marker)
    os.chmod(tool, 0o755)
    cache3 = os.path.join(tmp, "cache3")
    # The default cache's files go first (a cache: the next run makes them again), so that a
    # bpftool must run: the default one, not the user's.
    for n in core_files("/var/cache/iolens"):
        os.unlink(os.path.join("/var/cache/iolens", n))
    env = dict(os.environ, SUDO_UID="65534", SUDO_GID="65534", SUDO_USER="nobody",
               IOLENS_BPFTOOL=tool, IOLENS_CACHE_DIR=cache3)
    r = E.run_iolens(args.iolens, ["/bin/true"], extra=["-q", "--local", "-v"], env=env)
    ck.eq("sudo: exit code", 0, r.rc)
    m = TARGET.search(r.err_text())
    ck.check(m is not None and m.group(1).startswith("made /var/cache/iolens/core-"),
             "sudo: CO-RE target %r, not made in the default cache" % (m.group(1) if m else None))
    ck.check(not os.path.exists(marker), "sudo: IOLENS_BPFTOOL was run")
    ck.check(not os.path.exists(cache3), "sudo: IOLENS_CACHE_DIR was used")
    ck.finish()


if __name__ == "__main__":
    main()
