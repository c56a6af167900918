# SPDX-License-Identifier: Apache-2.0
"""e2e: the page-cache, mmap-fault and dirtying counters (ABI 7, bpf/iolens_cache.bpf.h) on
workloads whose page-level behaviour the test knows: cold and warm buffered reads, every read
family (read, p*, *v, sendfile, splice, copy_file_range), random and
sequential numpy memmap reads, fadvise(WILLNEED), a checkpoint-style write, and a write under
lowered vm.dirty_bytes (restored after).
Files live on a disk file system (tmpfs has no filemap events). Needs root (exit 77 otherwise).

With `--timing off` (e2e_page_cache_timing_off) iolens runs no sys_enter program, and the page-
cache hooks tell a read's miss from a fault's or a prefetch's by the call the thread's saved
registers name (bpf/iolens_cache.bpf.h io_ctx_now): every expectation is the same.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as E  # noqa: E402

PY = "/usr/bin/python3"
PAGE = 4096
MIB = 1 << 20

# The traced workloads: one script, the mode in argv[1]. Each touches its file in a known way.
WORKLOAD = r'''
import mmap, os, sys
mode = sys.argv[1]
if mode == "read":
    # the file is the inherited descriptor argv[2]: no open in the traced process, so its
    # record is created by the page-cache hook and named by the first read's sys_exit
    fd, n = int(sys.argv[2]), 0
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        n += len(b)
    print(n)
elif mode == "mmap_random":
    import numpy as np
    path, first, step, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)
    a = np.frombuffer(m, dtype=np.uint8)
    s = 0
    for i in range(count):
        s += int(a[(first + i * step) * 4096])
    del a
    m.close()
    os.close(fd)
    print(s)
elif mode == "mmap_fork":
    # a DataLoader-style worker: the parent maps the file, a forked child reads it by faults
    path, first, step, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)
    pid = os.fork()
    if pid == 0:
        s = 0
        for i in range(count):
            s += m[(first + i * step) * 4096]
        os._exit(0 if s >= 0 else 1)
    print(os.getpid(), pid)
    _, status = os.waitpid(pid, 0)
    m.close()
    os.close(fd)
    sys.exit(os.waitstatus_to_exitcode(status))
elif mode == "mmap_seq":
    import numpy as np
    a = np.memmap(sys.argv[2], dtype=np.uint8, mode="r")
    print(int(a[::4096].sum()))
elif mode == "willneed":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    os.close(fd)
elif mode == "copy_mmap":
    # write() straight from a mapping of another file: the source faults inside the write
    src = os.open(sys.argv[2], os.O_RDONLY)
    m = mmap.mmap(src, os.fstat(src).st_size, prot=mmap.PROT_READ)
    out = os.open(sys.argv[3], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done = 0
    while done < len(m):
        done += os.write(out, memoryview(m)[done:])
    os.close(out)
    m.close()
    os.close(src)
elif mode == "families":
    # one file per read family, each read whole in 256 KiB calls from offset 0 (the call size
    # divides the file, so every call asks exactly its own pages), then one call at EOF
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    d, CH = sys.argv[2], 256 << 10
    devnull = os.open("/dev/null", os.O_WRONLY)
    r, w = os.pipe()
    import fcntl
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, CH)  # so that one splice moves a whole call's bytes

    def whole(name, step):
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        off = 0
        while True:
            n = step(fd, off)
            if n < 0:
                sys.exit("%s: errno %d" % (name, ctypes.get_errno()))
            if n == 0:
                break
            off += n
        os.close(fd)

    def preadv(fd, off):  # Python's os.preadv calls preadv2
        buf = ctypes.create_string_buffer(CH)
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), CH)
        return libc.preadv(fd, iov, 1, ctypes.c_long(off))

    def splice(fd, off):  # into the pipe, emptied by a read of the pipe
        n = os.splice(fd, w, CH, offset_src=off)
        left = n
        while left:
            left -= len(os.read(r, left))
        return n

    out = os.open(os.path.join(d, "copy.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    whole("read", lambda fd, off: len(os.read(fd, CH)))
    whole("pread64", lambda fd, off: len(os.pread(fd, CH, off)))
    whole("readv", lambda fd, off: os.readv(fd, [bytearray(CH // 2), bytearray(CH // 2)]))
    whole("preadv", preadv)
    whole("preadv2", lambda fd, off: os.preadv(fd, [bytearray(CH)], off))
    whole("sendfile", lambda fd, off: os.sendfile(devnull, fd, off, CH))
    whole("splice", splice)
    whole("copy_file_range", lambda fd, off: os.copy_file_range(fd, out, CH, offset_src=off))
elif mode == "write":
    path, mib = sys.argv[2], int(sys.argv[3])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = b"\xa5" * (1 << 20)
    for _ in range(mib):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
'''


def make_file(path, size):
    """A file of `size` bytes, on disk and out of the page cache."""
    with open(path, "wb") as f:
        chunk = os.urandom(MIB)
        for _ in range(size // MIB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    drop_cache(path)


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # clean pages only are dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class dirty_limits:
    """Sets vm.dirty_bytes / vm.dirty_background_bytes for a block, restores them after (a
    *_bytes value of 0 means the *_ratio is in force: writing the ratio back restores that)."""
    KEYS = ("dirty_bytes", "dirty_ratio", "dirty_background_bytes", "dirty_background_ratio")

    def __init__(self, limit, background):
        self.limit, self.background = limit, background

    @staticmethod
    def _rw(name, value=None):
        with open("/proc/sys/vm/" + name, "r" if value is None else "w") as f:
            return f.read().strip() if value is None else f.write(str(value))

    def __enter__(self):
        self.saved = {k: self._rw(k) for k in self.KEYS}
        self._rw("dirty_background_bytes", self.background)
        self._rw("dirty_bytes", self.limit)

    def __exit__(self, *exc):
        for kind in ("dirty", "dirty_background"):
            if self.saved[kind + "_bytes"] != "0":
                self._rw(kind + "_bytes", self.saved[kind + "_bytes"])
            else:
                self._rw(kind + "_ratio", self.saved[kind + "_ratio"])
        return False


def traced(a, ck, tag, args, **kw):
    """Runs the workload with `args` (mode first) under iolens; returns (run, JSON document)."""
    json_path = os.path.join(a.tmp, "%s.json" % tag)
    kw["extra"] = list(kw.get("extra", [])) + ["--timing", a.timing]
    run = E.run_iolens(a.iolens, [PY, "-c", WORKLOAD] + [str(x) for x in args], json_path,
                       **kw)
    if run.rc != 0:
        ck.fatal("%s: iolens run exited %d; stderr:\n%s" % (tag, run.rc, run.err_text()))
    doc = E.load_run(ck, run)
    ck.eq("%s timing" % tag, a.timing, doc.get("timing"))
    # Nothing lost: the page-cache counters this test checks exactly would otherwise be short
    # for a reason the test does not see (a record, a dirtier or a name that did not fit).
    E.check_lost_zero(ck, doc)
    return run, doc


def file_counters(ck, tag, doc, path):
    """The counters of the one record of `path` (one traced process touches it)."""
    recs = [f for f in doc["files"] if f.get("path") == path]
    if not ck.check(len(recs) == 1, "%s: expected one record of %s, got %d (paths: %s)" %
                    (tag, path, len(recs), sorted({str(f.get("path")) for f in doc["files"]}))):
        return {}
    c = recs[0]["counters"]
    E.log("%s: %s" % (tag, E.brief(c)))
    return c


class FileMapping:
    """A shared read-only mapping of a whole file in this (untraced) test process, through libc
    (Python's mmap gives no address): for mincore and mlock."""

    def __init__(self, path):
        import ctypes
        import mmap

        self.ct = ctypes
        self.libc = libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        for name in ("mincore", "mlock", "munmap"):
            getattr(libc, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t] + (
                [ctypes.c_void_p] if name == "mincore" else [])
        self.size = os.path.getsize(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.addr = libc.mmap(None, self.size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        finally:
            os.close(fd)
        if self.addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap " + path)

    def _call(self, name, *args):
        if getattr(self.libc, name)(self.addr, self.size, *args) != 0:
            raise OSError(self.ct.get_errno(), name)

    def cached(self):
        vec = (self.ct.c_ubyte * ((self.size + PAGE - 1) // PAGE))()
        self._call("mincore", vec)
        return sum(v & 1 for v in vec)

    def lock(self):
        """Reads in and pins every page: reclaim cannot evict them while mapped."""
        self._call("mlock")

    def close(self):
        self._call("munmap")


def cached_pages(path):
    """Pages of `path` in the page cache now (mincore on a mapping that is never touched)."""
    m = FileMapping(path)
    try:
        return m.cached()
    finally:
        m.close()


def proc_counters(ck, tag, doc, run_pid):
    """The counters of the traced command's process record (the child of iolens)."""
    procs = [p for p in doc["processes"] if p.get("ppid") == run_pid]
    if not ck.check(len(procs) == 1, "%s: expected one process under iolens, got %d" %
                    (tag, len(procs))):
        return {}
    return procs[0].get("counters", {})


def fault_around_pages_per_fault():
    """fault_around_bytes / PAGE (debugfs; the kernel default 64 KiB when not readable)."""
    try:
        with open("/sys/kernel/debug/fault_around_bytes") as f:
            return int(f.read()) // PAGE
    except OSError:
        return 65536 // PAGE


def test_read(a, ck):
    """a. Cold then warm buffered read of the whole file in 1 MiB read() calls."""
    n_mib = 16
    pages = n_mib * MIB // PAGE
    path = os.path.join(a.tmp, "cold.bin")
    make_file(path, n_mib * MIB)
    for tag in ("cold", "warm"):
        pin = FileMapping(path)
        try:
            if tag == "warm":
                # a shared node under memory pressure evicted some pages between the runs
                # (54 of 4096 once here): pinned, the warm run finds every page cached
                pin.lock()
            before = pin.cached()
            if tag == "cold" and not ck.check(before == 0, "cold: %d pages still cached after "
                                              "fsync + FADV_DONTNEED" % before):
                return
            fd = os.open(path, os.O_RDONLY)
            try:
                run, doc = traced(a, ck, tag, ["read", fd], pass_fds=(fd,))
            finally:
                os.close(fd)
        finally:
            pin.close()
        # the record was created by mm_filemap_get_pages (the descriptor was inherited, never
        # opened here) and still has its path: file_counters finds it by path
        c = file_counters(ck, tag, doc, path)
        ck.eq(tag + " bytes_read", n_mib * MIB, c.get("bytes_read"))
        # each page asked exactly once: the batches of one read() are counted once, and the
        # read() at EOF stops before asking the page cache
        ck.eq(tag + " cache_read_pages", pages, c.get("cache_read_pages"))
        # every page not cached before is inserted once, inside a read() (sync and async
        # readahead both run in the reader's context): misses are exactly those pages
        ck.eq(tag + " cache_miss_pages", pages - before, c.get("cache_miss_pages"))
        ck.eq(tag + " prefetch_pages", 0, c.get("prefetch_pages"))
        if tag == "cold":
            ck.check(c.get("ra_sync", 0) >= 1, "cold: ra_sync %r, expected >= 1 (the first "
                     "read misses)" % c.get("ra_sync"))
        else:
            ck.eq("warm ra_sync (no miss, no readahead decision)", 0, c.get("ra_sync"))
            ck.eq("warm hit ratio", 1.0, 1 - c.get("cache_miss_pages", 0) /
                  max(1, c.get("cache_read_pages", 0)))
        pc = proc_counters(ck, tag, doc, run.pid)
        ck.check(pc.get("cache_read_pages", 0) >= pages, "%s: process cache_read_pages %r < "
                 "the file's %d" % (tag, pc.get("cache_read_pages"), pages))


def test_read_families(a, ck):
    """a2. Every read family (the input of a copy too) reads a file whole: each page is asked
    once, whichever kernel path (filemap_read, filemap_splice_read) asked it, and the calls and
    bytes are each family's own."""
    families = ("read", "pread64", "readv", "preadv", "preadv2", "sendfile", "splice",
                "copy_file_range")
    size = 2 * MIB
    d = os.path.join(a.tmp, "families")
    os.makedirs(d, exist_ok=True)
    for name in families:
        make_file(os.path.join(d, name), size)
    run, doc = traced(a, ck, "families", ["families", d])
    for name in families:
        c = file_counters(ck, name, doc, os.path.join(d, name))
        ck.eq(name + " bytes_read", size, c.get("bytes_read"))
        # 8 calls of 256 KiB, then one at EOF, which asks nothing
        ck.eq(name + " reads", size // (256 << 10) + 1, c.get("reads"))
        ck.eq(name + " cache_read_pages", size // PAGE, c.get("cache_read_pages"))


def test_mmap(a, ck):
    """b. numpy over a mapping: K random page touches (MADV_RANDOM), then a sequential pass."""
    pages, first, step, k = 1024, 5, 64, 16
    path = os.path.join(a.tmp, "mmap.bin")
    make_file(path, pages * PAGE)
    before = cached_pages(path)
    run, doc = traced(a, ck, "mmap_random", ["mmap_random", path, first, step, k])
    c = file_counters(ck, "mmap_random", doc, path)
    ck.check(c.get("mmaps", 0) >= 1, "mmap_random: mmaps %r" % c.get("mmaps"))
    # MADV_RANDOM: no read-around, so each touched (uncached) page faults into filemap_fault
    # once and inserts just itself; the pages are >= 32 apart so no fault-around maps one
    # touched page for another
    ck.eq("mmap_random fault_pages", k, c.get("fault_pages"))
    ck.eq("mmap_random fault_miss_pages", k - before, c.get("fault_miss_pages"))
    # each fault first tries fault-around on its aligned window of fault_around_bytes (none
    # cached, the windows lie inside the mapping): one window per fault
    ck.eq("mmap_random fault_around_pages", k * fault_around_pages_per_fault(),
          c.get("fault_around_pages"))
    ck.eq("mmap_random cache_read_pages (no read())", 0, c.get("cache_read_pages"))

    drop_cache(path)
    before = cached_pages(path)
    run, doc = traced(a, ck, "mmap_seq", ["mmap_seq", path])
    c = file_counters(ck, "mmap_seq", doc, path)
    ck.check(c.get("mmaps", 0) >= 1, "mmap_seq: mmaps %r" % c.get("mmaps"))
    # every uncached page is inserted once, by a fault's read-around or the async readahead a
    # fault starts: all in fault context
    ck.eq("mmap_seq fault_miss_pages", pages - before, c.get("fault_miss_pages"))
    # how many faults reach filemap_fault depends on readahead sizes (1 to a few here); every
    # page is mapped by a fault or by fault-around, whose ranges are an upper bound
    ck.check(c.get("fault_pages", 0) >= 1, "mmap_seq: fault_pages %r" % c.get("fault_pages"))
    ck.check(c.get("fault_pages", 0) + c.get("fault_around_pages", 0) >= pages,
             "mmap_seq: fault_pages + fault_around_pages = %r < %d pages" %
             (c.get("fault_pages", 0) + c.get("fault_around_pages", 0), pages))


def test_mmap_fork(a, ck):
    """A forked child faulting on a file its parent mapped (a DataLoader worker over a memmapped
    dataset): the child gets a record of its own at its first real fault."""
    pages, first, step, k = 1024, 3, 48, 12
    path = os.path.join(a.tmp, "mmap-fork.bin")
    make_file(path, pages * PAGE)
    before = cached_pages(path)
    run, doc = traced(a, ck, "mmap_fork", ["mmap_fork", path, first, step, k])
    recs = {f.get("pid"): f["counters"] for f in doc["files"] if f.get("path") == path}
    procs = [p for p in doc["processes"] if p.get("ppid") == run.pid]
    if not ck.check(len(procs) == 1, "mmap_fork: expected one process under iolens, got %d" %
                    len(procs)):
        return
    parent = procs[0]["pid"]
    children = [p["pid"] for p in doc["processes"] if p.get("ppid") == parent]
    if not ck.check(len(children) == 1 and sorted(recs) == sorted([parent] + children),
                    "mmap_fork: records of %s by pids %s, parent %d, children %s" %
                    (path, sorted(recs), parent, children)):
        return
    pc, cc = recs[parent], recs[children[0]]
    E.log("mmap_fork parent: %s" % E.brief(pc))
    E.log("mmap_fork child: %s" % E.brief(cc))
    ck.check(pc.get("mmaps", 0) >= 1, "mmap_fork parent: mmaps %r" % pc.get("mmaps"))
    ck.eq("mmap_fork parent fault_pages", 0, pc.get("fault_pages"))
    ck.eq("mmap_fork parent fault_miss_pages", 0, pc.get("fault_miss_pages"))
    # the child inherits the mapping (MADV_RANDOM included) but not the page tables: as in
    # mmap_random, each touched page faults into filemap_fault once and inserts itself
    ck.eq("mmap_fork child mmaps", 0, cc.get("mmaps"))
    ck.eq("mmap_fork child fault_pages", k, cc.get("fault_pages"))
    ck.eq("mmap_fork child fault_miss_pages", k - before, cc.get("fault_miss_pages"))
    ck.eq("mmap_fork child fault_around_pages", k * fault_around_pages_per_fault(),
          cc.get("fault_around_pages"))


def test_prefetch(a, ck):
    """fadvise(WILLNEED) by the traced process: its insertions are prefetches."""
    pages = 256
    path = os.path.join(a.tmp, "willneed.bin")
    make_file(path, pages * PAGE)
    before = cached_pages(path)
    run, doc = traced(a, ck, "willneed", ["willneed", path])
    c = file_counters(ck, "willneed", doc, path)
    ck.eq("willneed prefetch_pages", pages - before, c.get("prefetch_pages"))
    ck.eq("willneed cache_miss_pages", 0, c.get("cache_miss_pages"))


def test_write(a, ck):
    """c. A checkpoint: W MiB of fresh pages by write(), then fsync; then the same under lowered
    dirty limits, where balance_dirty_pages throttles the writer."""
    path = os.path.join(a.tmp, "ckpt.bin")
    run, doc = traced(a, ck, "write", ["write", path, 32])
    c = file_counters(ck, "write", doc, path)
    # a fresh file: every page dirtied exactly once (large folios count their pages)
    ck.eq("write dirtied_pages", 32 * MIB // PAGE, c.get("dirtied_pages"))
    ck.eq("write cache_miss_pages (new pages of a write are no misses)", 0,
          c.get("cache_miss_pages"))
    # fsync writes the dirty pages and waits for the ones still under writeback
    ck.check(c.get("wb_waits", 0) >= 1, "write: wb_waits %r, expected >= 1 (fsync)" %
             c.get("wb_waits"))
    for f in ("throttle_ns", "throttles"):
        ck.check(f in c, "write: no %s in the record" % f)

    path = os.path.join(a.tmp, "ckpt-throttled.bin")
    with dirty_limits(1 * MIB, 512 * 1024):
        run, doc = traced(a, ck, "throttled", ["write", path, 64])
    c = file_counters(ck, "throttled", doc, path)
    ck.eq("throttled dirtied_pages", 64 * MIB // PAGE, c.get("dirtied_pages"))
    # 64 MiB against a 1 MiB limit: the writer sleeps in balance_dirty_pages (63-69 pauses of
    # one jiffy in 8 of 8 runs here; a 4 MiB limit gave 0-18, too unreliable). Each pause is
    # >= 1 jiffy (>= 1 ms at HZ <= 1000) and all of them are sleeps inside the run.
    thr, ns = c.get("throttles", 0), c.get("throttle_ns", 0)
    ck.check(thr >= 1, "throttled: throttles %r, expected >= 1" % thr)
    ck.check(ns >= thr * 1000000, "throttled: throttle_ns %r < throttles %r x 1 ms" % (ns, thr))
    ck.check(ns <= run.elapsed * 1e9, "throttled: throttle_ns %r > the run's %.3f s" %
             (ns, run.elapsed))


def test_copy_from_mapping(a, ck):
    """write() from a file mapping: the faults inside the write must not turn the output's new
    pages into fault misses."""
    pages = 2048
    src = os.path.join(a.tmp, "copy-src.bin")
    out = os.path.join(a.tmp, "copy-out.bin")
    make_file(src, pages * PAGE)
    run, doc = traced(a, ck, "copy_mmap", ["copy_mmap", src, out])
    co = file_counters(ck, "copy_mmap out", doc, out)
    cs = file_counters(ck, "copy_mmap src", doc, src)
    ck.eq("copy_mmap out dirtied_pages", pages, co.get("dirtied_pages"))
    for f in ("fault_miss_pages", "cache_miss_pages", "prefetch_pages"):
        ck.eq("copy_mmap out " + f, 0, co.get(f))
    ck.check(cs.get("fault_pages", 0) >= 1, "copy_mmap src: fault_pages %r, expected >= 1 "
             "(the write faults the source in)" % cs.get("fault_pages"))
    # the source's pages come in while the thread is in a write: counted nowhere (documented)
    ck.eq("copy_mmap src fault_miss_pages", 0, cs.get("fault_miss_pages"))


def main():
    a = E.parse_args(extra=[(("--timing",), {"choices": ("exact", "off"), "default": "exact",
                                             "help": "pass this --timing to iolens"})])
    E.require_root()
    ck = E.Checker("e2e_page_cache")
    a.tmp = E.disk_tempdir("pagecache")
    test_read(a, ck)
    test_read_families(a, ck)
    test_mmap(a, ck)
    test_mmap_fork(a, ck)
    test_prefetch(a, ck)
    test_write(a, ck)
    test_copy_from_mapping(a, ck)
    ck.finish()


if __name__ == "__main__":
    main()
