#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: file identity on btrfs (docs/counters.md "Files"), where stat(2) reports a file's
subvolume's device, not the superblock's, and inode numbers start again in every subvolume.

A btrfs made on a loop device of the test's, with a subvolume `sub`: `top` (in the top-level
subvolume) and `sub/f` are the first file of their subvolumes, so they have the same inode
number (the test checks this premise, and that their st_dev differ from each other and from
the superblock's device in /proc/self/mountinfo). A traced workload opens each, reads 4 KiB of
it cold (page cache dropped), fstats it, closes it, then stats it by path. Each file must have
exactly one record, under the identity stat(2) gives it (st_dev, st_ino), with its own path and
exact counts: 1 open, 1 read of 4,096 bytes, 2 stats (the fstat, and the stat by path joined to
the record), its page-cache read pages; and no record of the run names no file (an
`<unknown>` record with the superblock's device would be the page cache counted apart).
Before iolens took a btrfs file's device from its subvolume, the two files were one record (the
superblock's device and the same inode number) and each stat by path a record of its own.
Where the kernel's BTF lacks btrfs's types (btrfs a module the relocation does not see), the
programs must still load and fall back to the superblock's device: the same workload with
`--btf` a small BTF of the object's types (bpftool gen min_core_btf) in which `btrfs_inode` is
renamed loads every program, and gives the documented fallback: one record of both files, under
the superblock's device (docs/counters.md).
Exit 0 pass, 1 fail, 77 skipped (not root).
"""
import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

PY = "/usr/bin/python3"
MiB = 1 << 20

WORKLOAD = r"""
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    if len(os.read(fd, 4096)) != 4096:
        raise SystemExit("short read of " + p)
    os.fstat(fd)
    os.close(fd)
    os.stat(p)
"""


def mount_dev(mnt):
    """The superblock's device of the mount at `mnt` (mountinfo's MAJ:MIN), as a dev_t."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            v = line.split()
            if v[4] == mnt:
                major, minor = v[2].split(":")
                return os.makedev(int(major), int(minor))
    return None


def main():
    args = E.parse_args(extra=[(("--object",), {"required": True,
                                                "help": "the BPF object iolens embeds"})])
    E.require_root()
    ck = E.Checker("btrfs")
    for tool in ("mkfs.btrfs", "btrfs", "losetup"):
        if not shutil.which(tool):
            ck.fatal("%s is not installed (btrfs-progs, mount: listed in .ci/setup)" % tool)
    with open("/proc/filesystems") as f:
        if "btrfs" not in f.read().split():
            ck.fatal("this kernel has no btrfs (built in or loaded): cannot test its identities")
    work = E.disk_tempdir("btrfs")
    loop, _ = E.loop_device(work, "btrfs", 256 * MiB)
    subprocess.run(["mkfs.btrfs", "-q", "-f", loop], check=True, capture_output=True)
    mnt = os.path.join(work, "mnt")
    os.mkdir(mnt)
    subprocess.run(["mount", "-t", "btrfs", loop, mnt], check=True)
    E.unmount_at_exit(mnt)
    subprocess.run(["btrfs", "-q", "subvolume", "create", os.path.join(mnt, "sub")], check=True)
    files = [os.path.join(mnt, "top"), os.path.join(mnt, "sub", "f")]
    for p in files:
        with open(p, "wb") as f:
            f.write(os.urandom(64 << 10))
    subprocess.run(["sync", "-f", mnt], check=True)
    st = {p: os.stat(p) for p in files}
    sb = mount_dev(mnt)
    E.log("superblock %s; %s" % (sb, {p: (s.st_dev, s.st_ino) for p, s in st.items()}))
    # The premise: one inode number, two st_dev, neither the superblock's.
    ck.eq("the two files' inode numbers (the first of each subvolume)", st[files[0]].st_ino,
          st[files[1]].st_ino)
    ck.check(len({st[files[0]].st_dev, st[files[1]].st_dev, sb}) == 3,
             "st_dev %d and %d and the superblock's %s are not three devices" %
             (st[files[0]].st_dev, st[files[1]].st_dev, sb))
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    out = os.path.join(work, "run.json")
    run = E.run_iolens(args.iolens, [PY, "-S", "-c", WORKLOAD] + files, json_path=out)
    if run.rc != 0:
        ck.fatal("iolens run exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    doc = E.load_run(ck, run)
    E.check_lost_zero(ck, doc)
    ours = {(s.st_dev, s.st_ino) for s in st.values()} | {(sb, st[files[0]].st_ino)}
    for p in files:
        s = st[p]
        recs = [f for f in doc["files"] if (f.get("dev"), f.get("ino")) == (s.st_dev, s.st_ino)]
        if not ck.eq("%s: records under its stat identity (%d, %d)" % (p, s.st_dev, s.st_ino), 1,
                     len(recs)):
            E.log("records of the run: %s" % json.dumps(
                [(f.get("path"), f.get("dev"), f.get("ino")) for f in doc["files"]]))
            continue
        r = recs[0]
        c = r["counters"]
        ck.eq("%s: path" % p, p, r.get("path"))
        ck.eq("%s: opens, reads, bytes_read, stats" % p, (1, 1, 4096, 2),
              (c.get("opens"), c.get("reads"), c.get("bytes_read"), c.get("stats")))
        ck.check(c.get("cache_read_pages", 0) >= 1 and c.get("cache_miss_pages", 0) >= 1,
                 "%s: a cold 4 KiB read with no page-cache read or miss on its record: %s" %
                 (p, {k: v for k, v in c.items() if k.startswith("cache_")}))
    idents = {(s.st_dev, s.st_ino) for s in st.values()}
    strays = [(f.get("path"), f.get("dev"), f.get("ino")) for f in doc["files"]
              if (f.get("dev"), f.get("ino")) in ours - idents]
    ck.eq("records under the superblock's device (the two files as one, or page cache apart)",
          [], strays)
    without_btrfs_types(ck, args, work, files, st, sb)
    ck.finish()


def without_btrfs_types(ck, args, work, files, st, sb):
    bpftool = "/usr/sbin/bpftool"
    if not os.access(bpftool, os.X_OK):
        ck.fail("no %s (Debian package bpftool, in .ci/setup): the fallback is not checked" %
                bpftool)
        return
    small = os.path.join(work, "core.btf")
    subprocess.run([bpftool, "gen", "min_core_btf", "/sys/kernel/btf/vmlinux", small,
                    args.object], check=True, capture_output=True)
    with open(small, "rb") as f:
        data = f.read()
    # BTF strings are deduplicated whole: one "btrfs_inode" string names the struct.
    ck.eq("the small BTF names btrfs_inode once", 1, data.count(b"\0btrfs_inode\0"))
    blind = os.path.join(work, "core-without-btrfs.btf")
    with open(blind, "wb") as f:
        f.write(data.replace(b"\0btrfs_inode\0", b"\0btrfs_inodX\0"))
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    out = os.path.join(work, "run-blind.json")
    run = E.run_iolens(args.iolens, [PY, "-S", "-c", WORKLOAD] + files, json_path=out,
                       extra=["--btf", blind, "-v"])
    if run.rc != 0:
        ck.fatal("--btf without btrfs_inode: iolens run exited %d; stderr:\n%s" %
                 (run.rc, run.err_text()))
    doc = E.load_run(ck, run)
    ck.eq("--btf without btrfs_inode: programs not attached", {}, doc.get("not_attached"))
    ck.check("cannot load here" not in run.err_text(),
             "--btf without btrfs_inode: a program did not load:\n%s" % run.err_text())
    ino = st[files[0]].st_ino
    recs = [f for f in doc["files"] if f.get("ino") == ino and
            f.get("dev") in (sb, st[files[0]].st_dev, st[files[1]].st_dev)]
    ck.eq("--btf without btrfs_inode: the fallback, one record of both files under the "
          "superblock's device (dev, opens, reads)", [(sb, 2, 2)],
          [(f.get("dev"), f["counters"].get("opens"), f["counters"].get("reads")) for f in recs
           if f["counters"].get("opens")])


if __name__ == "__main__":
    main()
