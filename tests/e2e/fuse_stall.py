# SPDX-License-Identifier: Apache-2.0
"""A FUSE file system that never answers a write: the hostile server of the capture tests.

Speaks the kernel's FUSE protocol on /dev/fuse directly (standard library only; no libfuse on
the test machines). The mount holds one regular file, `f`. LOOKUP, GETATTR, OPEN, RELEASE and
FLUSH and INIT are answered; WRITE and FSYNC are read and never answered (what a user's own
FUSE server can do to any process that writes to it), and FLUSH too with `hold_flush` (every
close(2) of the file then waits), STATFS with `hold_statfs` (statfs(2) of the mount then
waits: a hung NFS server's effect), and LOOKUPs of `f` after the first `lookups` with that
argument (entries are valid for 0 s, so every path walk to `f` asks again: a process that
walks it later hangs); everything else gets ENOSYS. The connection is
aborted by stop() (unmount, close of the server's end), which fails the requests left waiting.
"""
import errno
import os
import select
import struct
import subprocess
import threading
import time

IN_HEADER = struct.Struct("<IIQQIIIHH")   # len, opcode, unique, nodeid, uid, gid, pid, ext, pad
OUT_HEADER = struct.Struct("<IiQ")        # len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # struct fuse_attr (88 bytes)
LOOKUP, GETATTR, OPEN, WRITE, STATFS, RELEASE, FSYNC, FLUSH, INIT, INTERRUPT = (
    1, 3, 14, 16, 17, 18, 20, 25, 26, 36)
FORGET, BATCH_FORGET, DESTROY = 2, 42, 38
HELD = (WRITE, FSYNC)


def _attr(ino, mode):
    return ATTR.pack(ino, 0, 0, 0, 0, 0, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)


class StallFs:
    def __init__(self, mountpoint, hold_flush=False, lookups=None, hold_statfs=False):
        self.mountpoint = mountpoint
        self.lookups = lookups  # LOOKUPs of f answered before the others are held (None: all)
        self.hold = HELD + ((FLUSH,) if hold_flush else ()) + ((STATFS,) if hold_statfs else ())
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        self.held = []  # opcodes read and never answered
        self.mounted = False
        self.stopping = False
        # Serving before the mount: mount(8) looks at the mount point, which needs INIT answered.
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        subprocess.run(["mount", "-t", "fuse.iolens-stall", "-o",
                        "fd=%d,rootmode=40000,user_id=0,group_id=0" % self.fd, "iolens-stall",
                        mountpoint], check=True, pass_fds=[self.fd])
        self.mounted = True
        self.conn = os.minor(os.stat(mountpoint).st_dev)  # /sys/fs/fuse/connections/N

    def _reply(self, unique, error=0, body=b""):
        try:
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)
        except OSError:
            pass

    def _serve(self):
        while not self.stopping:
            # A read blocked in the kernel would keep the connection alive past stop().
            if not select.select([self.fd], [], [], 0.1)[0] and self.mounted:
                continue
            try:
                req = os.read(self.fd, 1 << 21)
            except OSError as e:
                if e.errno in (errno.EINTR, errno.ENOENT):
                    continue
                if e.errno == errno.EPERM and not self.mounted:
                    time.sleep(0.01)  # not mounted yet
                    continue
                return  # ENODEV: aborted or unmounted
            _, op, unique, node, *_ = IN_HEADER.unpack_from(req)
            body = req[IN_HEADER.size:]
            if op == INIT:
                major, minor = struct.unpack_from("<II", body)
                out = struct.pack("<IIIIHHIIHHI7I", 7, 31, 0, 0, 16, 12, 1 << 17, 1, 32, 0, 0,
                                  *([0] * 7))
                self._reply(unique, 0, out)
            elif op == LOOKUP:
                name = body.split(b"\0", 1)[0]
                if name != b"f":
                    self._reply(unique, errno.ENOENT)
                elif self.lookups is not None and self.lookups <= 0:
                    self.held.append(op)  # never answered
                else:
                    if self.lookups is not None:
                        self.lookups -= 1
                    self._reply(unique, 0, struct.pack("<QQQQII", 2, 0, 0, 0, 0, 0) +
                                _attr(2, 0o100666))
            elif op == GETATTR:
                mode = 0o40755 if node == 1 else 0o100666
                self._reply(unique, 0, struct.pack("<QII", 0, 0, 0) + _attr(node, mode))
            elif op == OPEN:
                self._reply(unique, 0, struct.pack("<QIi", 1, 0, 0))
            elif op == RELEASE:
                self._reply(unique)
            elif op in self.hold:
                self.held.append(op)  # never answered
            elif op in (FORGET, BATCH_FORGET, INTERRUPT, DESTROY):
                pass  # no reply expected (INTERRUPT: ignored, as a hostile server would)
            else:
                self._reply(unique, errno.ENOSYS)

    def path(self):
        return os.path.join(self.mountpoint, "f")

    def abort(self):
        """Fails every request the server holds, at once: a held FLUSH would otherwise stall
        even the umount below (a new process closes inherited descriptors, each close a FLUSH)."""
        if not self.mounted:
            return
        ctl = "/sys/fs/fuse/connections"
        if not os.path.exists(os.path.join(ctl, str(self.conn))):
            subprocess.run(["mount", "-t", "fusectl", "fusectl", ctl], capture_output=True)
        try:
            with open(os.path.join(ctl, str(self.conn), "abort"), "w") as f:
                f.write("1")
        except OSError:
            pass  # no fusectl: the close of the server's end below aborts it

    def stop(self):
        """Unmounts and closes the server's end: the kernel aborts the connection, so every
        request still waiting fails (ENOTCONN) and its caller goes on."""
        self.abort()
        self.stopping = True
        self.thread.join(5)
        self.mounted = False
        subprocess.run(["umount", "-l", self.mountpoint], capture_output=True)
        try:
            os.close(self.fd)
        except OSError:
            pass
