// SPDX-License-Identifier: Apache-2.0
/*
 * io_workload DIR MANIFEST_OUT
 *
 * A workload that knows its own ground truth. It does a fixed, deterministic mix of file I/O
 * inside DIR (which must exist and be on a disk file system) and writes, to MANIFEST_OUT ("-" =
 * stdout, which should be a pipe so the manifest itself is not file I/O), a JSON manifest of
 * what it did: per process (the parent and its two children; threads belong to their process),
 * per canonical absolute path, the Darshan-style counters iolens must report.
 *
 * The tallies are kept as each call is made, from the real return values, with the rules of
 * bpf/iolens_account.h (Darshan's POSIX module):
 *  - opens counts open* and dups; dups counts dup/dup2/fcntl(F_DUPFD*) (F_GETFD, F_SETFD and
 *    F_GETFL calls on the same file count as nothing);
 *  - reads/writes count calls returning >= 0 (a read returning 0 at EOF is a read);
 *  - an access at `off` returning `ret`: seq if off > last_byte, consec if off == last_byte + 1,
 *    then last_byte = off + ret - 1 and max_byte = max(max_byte, off + ret - 1);
 *  - last_byte_read/last_byte_written are reset to 0 by open (not by dup) and by any close;
 *  - rw_switches counts a read after a write or a write after a read on the record;
 *  - stats count stat/lstat/fstat/statx of a regular file (not of a symlink or a directory);
 *  - rename_sources/unlinks count the successful rename/unlink of the file (ckpt.tmp, scratch.tmp);
 *  - max_byte_* are written as -1 when nothing was read/written (the test maps that to the JSON's
 *    "none" value, 0: docs/counters.md);
 *  - access sizes and strides (Darshan's ACCESS1..4 and STRIDE1..4): every counted call's `ret`,
 *    and its stride (off - last_byte - 1 when off > 0, off > last_byte and last_byte != 0, else
 *    0, before last_byte moves), tallied in order of first arrival in a table of at most 32
 *    values as Darshan's tree is; the four shown are the most frequent non-zero values, ties to
 *    the larger. The manifest's counters have them as iolens keeps them (its first 32 values,
 *    the calls of any other value "untallied": Darshan's rule since ABI 16), and "darshan32"
 *    as Darshan keeps them (the same four).
 * See docs/counters.md for the definitions.
 *
 * What it does (DIR is canonicalised with realpath first; every path below is under it):
 *  parent: creates data/dNN/fNNNN (3000 files, varied sizes incl. 0, 1, 64 KiB multiples) and
 *          pread.dat (4 MiB + 1000 bytes); symlinks link3 -> data/d00/f0003, linkdir -> data/d00;
 *  fork 2 children, each with 2 pthreads; reader k (0..3) reads the files i % 4 == k front to
 *          back in 64 KiB read() calls until read() returns 0; child 0 then writes child0.dat;
 *          each child sends its tallies to the parent through a pipe (not file I/O);
 *  parent, meanwhile: 64 MiB ckpt.tmp in 1 MiB writes, fsync, close, rename to ckpt.pt;
 *          1000 pread() of 4 KiB at seeded random 4 KiB-aligned offsets of pread.dat;
 *          relative open after chdir(DIR); openat(dirfd, "sub/../data/d00/f0002");
 *          open through a file symlink and through a directory symlink; dup/fcntl/dup2 + fstat;
 *          lseek; stat/statx/lstat; mmap+munmap; misc.dat (write, pwrite, writev, fdatasync,
 *          ftruncate, O_RDWR read/write/pread); after the children: stat+lstat of child0.dat
 *          (never opened by the parent); finally scratch.tmp written, closed and unlinked.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workload_util.h"

#define NDATA 3000
#define CHUNK 65536
#define MIB (1024 * 1024)
#define CKPT_WRITES 64
#define NPREAD 1000
#define PREAD_SIZE (4 * MIB + 1000)

enum {
	F_PREAD = NDATA,
	F_CKPT,
	F_CKPT_NEW, /* only a name: ckpt.tmp's renamed_to */
	F_MISC,
	F_CHILD0,
	F_SCRATCH,
	NFILES
};

/* Darshan's tree of common values: at most 32, in order of first arrival */
#define CV_MAX 32
#define CV_IOLENS 32 /* IOLENS_TALLY_SLOTS + IOLENS_TALLY_MORE_SLOTS: Darshan's (ABI 16) */
struct cv {
	int64_t n;       /* values held */
	int64_t dropped; /* calls of a value that came when CV_MAX were held */
	int64_t val[CV_MAX], cnt[CV_MAX];
};

struct tally {
	int64_t opens, dups, reads, writes, seeks, stats, mmaps, fsyncs, fdsyncs, truncates, closes;
	int64_t bytes_read, bytes_written, max_byte_read, max_byte_written;
	int64_t seq_reads, consec_reads, seq_writes, consec_writes, rw_switches;
	int64_t rename_sources, unlinks;
	int64_t mem_not_aligned; /* calls whose buffer is not 8-byte aligned (Darshan) */
	int64_t mode;            /* the mode of the last open with O_CREAT (Darshan's MODE) */
	struct cv access, stride;
	/* state, as in struct iolens_file_counters */
	int64_t last_byte_read, last_byte_written;
	int32_t last_io; /* 0 none, 1 read, 2 write */
	int32_t touched;
};

struct wire_entry {
	int32_t idx;
	int32_t pad;
	struct tally t;
};

static char g_dir[PATH_MAX];
static char *g_names[NFILES];
static struct tally g_tally[NFILES]; /* this process's tallies */


static char *xstrdup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		die("vasprintf");
	va_end(ap);
	return s;
}

static void tally_reset(void)
{
	memset(g_tally, 0, sizeof(g_tally));
	for (int i = 0; i < NFILES; i++) {
		g_tally[i].max_byte_read = -1;
		g_tally[i].max_byte_written = -1;
	}
}

static struct tally *T(int idx)
{
	g_tally[idx].touched = 1;
	return &g_tally[idx];
}

static void t_open(int idx)
{
	struct tally *t = T(idx);

	t->opens++;
	t->last_byte_read = 0;
	t->last_byte_written = 0;
}

static void t_dup(int idx)
{
	struct tally *t = T(idx);

	t->opens++;
	t->dups++;
}

static void t_close(int idx)
{
	struct tally *t = T(idx);

	t->closes++;
	t->last_byte_read = 0;
	t->last_byte_written = 0;
}

static void cv_add(struct cv *c, int64_t v)
{
	for (int64_t i = 0; i < c->n; i++) {
		if (c->val[i] == v) {
			c->cnt[i]++;
			return;
		}
	}
	if (c->n == CV_MAX) {
		c->dropped++;
		return;
	}
	c->val[c->n] = v;
	c->cnt[c->n++] = 1;
}

static void t_rw(int idx, int is_write, int64_t off, int64_t ret, const void *buf)
{
	struct tally *t = T(idx);
	const int64_t last = is_write ? t->last_byte_written : t->last_byte_read;

	if (ret >= 0) {
		cv_add(&t->access, ret);
		cv_add(&t->stride, off > 0 && off > last && last != 0 ? off - last - 1 : 0);
	}
	WL_TALLY_RW(t, is_write, off, ret);
	if ((uintptr_t)buf % 8 != 0)
		t->mem_not_aligned++;
}

/* A mode per file, so that each record's MODE says which open made it. */
static int create_mode(int idx)
{
	return 0600 | ((idx % 8) << 3);
}

/* ---- traced calls with their tallies ---- */

static int x_open(int idx, const char *path, int flags)
{
	int fd = open(path, flags, create_mode(idx));

	if (fd < 0)
		die("open %s", path);
	t_open(idx);
	if (flags & O_CREAT)
		T(idx)->mode = create_mode(idx);
	return fd;
}

static void x_close(int idx, int fd)
{
	if (close(fd) != 0)
		die("close %s", g_names[idx]);
	t_close(idx);
}

/* read() at the fd's position `*pos` (tracked by the caller, shared by dups). */
static ssize_t x_read(int idx, int fd, void *buf, size_t n, int64_t *pos)
{
	ssize_t r = read(fd, buf, n);

	if (r < 0)
		die("read %s", g_names[idx]);
	t_rw(idx, 0, *pos, r, buf);
	*pos += r;
	return r;
}

static ssize_t x_pread(int idx, int fd, void *buf, size_t n, int64_t off)
{
	ssize_t r = pread(fd, buf, n, off);

	if (r < 0)
		die("pread %s", g_names[idx]);
	t_rw(idx, 0, off, r, buf);
	return r;
}

static void x_write_all(int idx, int fd, const char *buf, size_t n, int64_t *pos)
{
	while (n > 0) {
		ssize_t r = write(fd, buf, n);

		if (r < 0)
			die("write %s", g_names[idx]);
		t_rw(idx, 1, *pos, r, buf);
		*pos += r;
		buf += r;
		n -= (size_t)r;
	}
}

/* Read the whole file from the position to EOF in `chunk` calls; the read returning 0 counts. */
static int64_t x_read_to_eof(int idx, int fd, char *buf, size_t chunk, int64_t *pos)
{
	int64_t total = 0;
	ssize_t r;

	do {
		r = x_read(idx, fd, buf, chunk, pos);
		total += r;
	} while (r > 0);
	return total;
}

static void x_stat(int idx, const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		die("stat %s", path);
	if (!S_ISREG(st.st_mode))
		die("stat %s: not a regular file", path);
	T(idx)->stats++;
}

/* ---- the data set ---- */

static int64_t data_size(int i)
{
	switch (i % 100) {
	case 0:
		return 0;
	case 1:
		return (int64_t)CHUNK * (1 + i % 3);
	case 2:
		return 1;
	case 3:
		return CHUNK - 1;
	case 4:
		return CHUNK + 1;
	default:
		return 1 + ((int64_t)i * 7919 + 13) % 100003;
	}
}

static size_t data_write_chunk(int i)
{
	return i % 3 == 0 ? CHUNK : (size_t)(40000 + (i % 7) * 1000);
}

static char g_pattern[MIB + 4096];

static void create_file(int idx, int64_t size, size_t chunk)
{
	int fd = x_open(idx, g_names[idx], O_WRONLY | O_CREAT | O_TRUNC);
	int64_t pos = 0;

	while (pos < size) {
		size_t n = (size_t)(size - pos) < chunk ? (size_t)(size - pos) : chunk;

		x_write_all(idx, fd, g_pattern + (pos % 4096), n, &pos);
	}
	x_close(idx, fd);
}

/* ---- children ---- */

struct reader_arg {
	int k;
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	char *buf = malloc(CHUNK + 8);

	if (!buf)
		die("malloc");
	for (int i = a->k; i < NDATA; i += 4) {
		int fd = x_open(i, g_names[i], O_RDONLY);
		int64_t pos = 0;
		/* every fifth file into a buffer 3 bytes off malloc's alignment (MEM_NOT_ALIGNED) */
		int64_t got = x_read_to_eof(i, fd, buf + (i % 5 == 0 ? 3 : 0), CHUNK, &pos);

		if (got != data_size(i)) {
			errno = 0;
			die("%s: read %lld bytes, expected %lld", g_names[i], (long long)got,
			    (long long)data_size(i));
		}
		x_close(i, fd);
	}
	free(buf);
	return NULL;
}

static void send_tallies(int wfd)
{
	struct wire_entry *e = calloc(NFILES, sizeof(*e));
	size_t n = 0, len;
	const char *p;

	if (!e)
		die("calloc");
	for (int i = 0; i < NFILES; i++) {
		if (!g_tally[i].touched)
			continue;
		e[n].idx = i;
		e[n].t = g_tally[i];
		n++;
	}
	p = (const char *)e;
	len = n * sizeof(*e);
	while (len > 0) {
		ssize_t r = write(wfd, p, len);

		if (r < 0)
			die("write tally pipe");
		p += r;
		len -= (size_t)r;
	}
	free(e);
}

static void child_main(int c, int wfd)
{
	pthread_t th[2];
	struct reader_arg args[2];

	tally_reset();
	for (int j = 0; j < 2; j++) {
		args[j].k = 2 * c + j;
		errno = pthread_create(&th[j], NULL, reader, &args[j]);
		if (errno)
			die("pthread_create");
	}
	for (int j = 0; j < 2; j++) {
		errno = pthread_join(th[j], NULL);
		if (errno)
			die("pthread_join");
	}
	if (c == 0) {
		int fd = x_open(F_CHILD0, g_names[F_CHILD0], O_WRONLY | O_CREAT | O_TRUNC);
		int64_t pos = 0;

		for (int j = 0; j < 3; j++)
			x_write_all(F_CHILD0, fd, g_pattern, 10000, &pos);
		x_close(F_CHILD0, fd);
	}
	send_tallies(wfd);
	close(wfd);
	_exit(0);
}

static void recv_tallies(int rfd, struct tally *out)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		die("malloc");
	for (;;) {
		ssize_t r;

		if (len == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			if (!buf)
				die("realloc");
		}
		r = read(rfd, buf + len, cap - len);
		if (r < 0)
			die("read tally pipe");
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (len % sizeof(struct wire_entry) != 0) {
		errno = 0;
		die("tally pipe: %zu bytes is not a whole number of entries", len);
	}
	for (int i = 0; i < NFILES; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].max_byte_read = -1;
		out[i].max_byte_written = -1;
	}
	for (size_t off = 0; off < len; off += sizeof(struct wire_entry)) {
		struct wire_entry e;

		memcpy(&e, buf + off, sizeof(e));
		if (e.idx < 0 || e.idx >= NFILES) {
			errno = 0;
			die("tally pipe: bad index %d", e.idx);
		}
		out[e.idx] = e.t;
	}
	free(buf);
}

/* ---- parent phases ---- */

static void phase_checkpoint(void)
{
	int fd = x_open(F_CKPT, g_names[F_CKPT], O_WRONLY | O_CREAT | O_TRUNC);
	int64_t pos = 0;

	for (int j = 0; j < CKPT_WRITES; j++) {
		ssize_t r = write(fd, g_pattern, MIB);

		if (r != MIB)
			die("ckpt write %d returned %zd", j, r);
		t_rw(F_CKPT, 1, pos, r, g_pattern);
		pos += r;
	}
	if (fsync(fd) != 0)
		die("fsync ckpt");
	T(F_CKPT)->fsyncs++;
	x_close(F_CKPT, fd);
	if (rename(g_names[F_CKPT], g_names[F_CKPT_NEW]) != 0)
		die("rename ckpt");
	T(F_CKPT)->rename_sources++;
}

static uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static void phase_pread(void)
{
	char buf[4096];
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	int fd = x_open(F_PREAD, g_names[F_PREAD], O_RDONLY);
	int64_t pages = PREAD_SIZE / 4096 + 1; /* the last page is partial: 1000 bytes */

	for (int j = 0; j < NPREAD; j++) {
		int64_t off = (int64_t)(xorshift64(&seed) % (uint64_t)pages) * 4096;
		ssize_t r = x_pread(F_PREAD, fd, buf, sizeof(buf), off);
		int64_t want = PREAD_SIZE - off < 4096 ? PREAD_SIZE - off : 4096;

		if (r != want) {
			errno = 0;
			die("pread at %lld returned %zd, expected %lld", (long long)off, r,
			    (long long)want);
		}
	}
	x_close(F_PREAD, fd);
}

static void read_whole(int idx, const char *how, int fd, char *buf)
{
	int64_t pos = 0;
	int64_t got = x_read_to_eof(idx, fd, buf, CHUNK, &pos);

	if (got != data_size(idx)) {
		errno = 0;
		die("%s (%s): read %lld bytes, expected %lld", g_names[idx], how, (long long)got,
		    (long long)data_size(idx));
	}
	x_close(idx, fd);
}

static void phase_paths(char *buf)
{
	int fd, dirfd;
	char *p;

	if (chdir(g_dir) != 0)
		die("chdir %s", g_dir);

	/* relative path */
	fd = open("data/d00/f0001", O_RDONLY);
	if (fd < 0)
		die("open data/d00/f0001");
	t_open(1);
	read_whole(1, "relative", fd, buf);

	/* openat with a directory fd and a "sub/../" component */
	dirfd = open(g_dir, O_RDONLY | O_DIRECTORY);
	if (dirfd < 0)
		die("open %s", g_dir);
	fd = openat(dirfd, "sub/../data/d00/f0002", O_RDONLY);
	if (fd < 0)
		die("openat sub/../data/d00/f0002");
	t_open(2);
	read_whole(2, "openat", fd, buf);
	if (close(dirfd) != 0)
		die("close dirfd");

	/* through a file symlink (absolute path) and a directory symlink (relative path) */
	p = xstrdup_printf("%s/link3", g_dir);
	fd = open(p, O_RDONLY);
	if (fd < 0)
		die("open %s", p);
	free(p);
	t_open(3);
	read_whole(3, "symlink", fd, buf);
	fd = open("linkdir/f0004", O_RDONLY);
	if (fd < 0)
		die("open linkdir/f0004");
	t_open(4);
	read_whole(4, "dir symlink", fd, buf);
}

static void phase_dup(char *buf)
{
	int idx = 5;
	int fd = x_open(idx, g_names[idx], O_RDONLY);
	int64_t pos = 0; /* shared by all the dups: one open file description */
	struct stat st;
	int fd2, fd3, fd4;

	if (fstat(fd, &st) != 0)
		die("fstat");
	T(idx)->stats++;
	fd2 = dup(fd);
	if (fd2 < 0)
		die("dup");
	t_dup(idx);
	fd3 = fcntl(fd, F_DUPFD_CLOEXEC, 50);
	if (fd3 < 0)
		die("fcntl F_DUPFD_CLOEXEC");
	t_dup(idx);
	/* fcntl's other commands on the same file count as nothing (sys_enter drops them) */
	if (fcntl(fd3, F_GETFD) != FD_CLOEXEC || fcntl(fd3, F_SETFD, 0) != 0 ||
	    fcntl(fd, F_GETFL) < 0)
		die("fcntl F_GETFD/F_SETFD/F_GETFL");
	x_read(idx, fd2, buf, 1000, &pos);
	x_read_to_eof(idx, fd3, buf, CHUNK, &pos);
	fd4 = dup2(fd, 60);
	if (fd4 != 60)
		die("dup2");
	t_dup(idx);
	x_read(idx, fd4, buf, CHUNK, &pos); /* at EOF: returns 0 */
	if (pos != data_size(idx)) {
		errno = 0;
		die("dup reads: %lld bytes, expected %lld", (long long)pos,
		    (long long)data_size(idx));
	}
	x_close(idx, fd);
	x_close(idx, fd2);
	x_close(idx, fd3);
	x_close(idx, fd4);
}

static void phase_seek(char *buf)
{
	int idx = 30;
	int fd = x_open(idx, g_names[idx], O_RDONLY);
	int64_t size = data_size(idx), pos;

	if (size < 5000) {
		errno = 0;
		die("%s too small for the seek phase", g_names[idx]);
	}
	if (lseek(fd, 1000, SEEK_SET) != 1000)
		die("lseek");
	T(idx)->seeks++;
	pos = 1000;
	x_read(idx, fd, buf, CHUNK, &pos);
	if (lseek(fd, 0, SEEK_SET) != 0)
		die("lseek");
	T(idx)->seeks++;
	pos = 0;
	x_read(idx, fd, buf, 4096, &pos);
	x_read(idx, fd, buf, 4096, &pos);
	if (lseek(fd, 0, SEEK_END) != size)
		die("lseek end");
	T(idx)->seeks++;
	pos = size;
	x_read(idx, fd, buf, 4096, &pos); /* 0 at EOF */
	x_close(idx, fd);
}

static void phase_stat(void)
{
	char *p = xstrdup_printf("%s/link3", g_dir);
	struct stat st;
	struct statx stx;

	x_stat(10, g_names[10]);
	x_stat(3, p);
	/* lstat of the symlink itself: not a regular file, not counted */
	if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode))
		die("lstat %s", p);
	free(p);
	/* statx with a relative path (cwd is DIR) */
	if (statx(AT_FDCWD, "data/d00/f0011", 0, STATX_BASIC_STATS, &stx) != 0)
		die("statx");
	T(11)->stats++;
	/* stat of a directory: not counted */
	if (stat(g_dir, &st) != 0 || !S_ISDIR(st.st_mode))
		die("stat dir");
}

static void phase_mmap(void)
{
	int idx = 20;
	int64_t size = data_size(idx);
	int fd = x_open(idx, g_names[idx], O_RDONLY);
	volatile const unsigned char *m;
	unsigned sum = 0;

	m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		die("mmap");
	T(idx)->mmaps++;
	for (int64_t o = 0; o < size; o += 4096)
		sum += m[o];
	if (munmap((void *)m, (size_t)size) != 0)
		die("munmap");
	x_close(idx, fd);
	if (sum == 0xFFFFFFFFu) /* keep the loop */
		fprintf(stderr, "unlikely\n");
}

static void phase_misc(char *buf)
{
	int idx = F_MISC;
	int fd = x_open(idx, g_names[idx], O_WRONLY | O_CREAT | O_TRUNC);
	int64_t pos = 0;
	struct iovec iov[2] = {
		{ .iov_base = g_pattern, .iov_len = 300 },
		{ .iov_base = g_pattern + 300, .iov_len = 200 },
	};
	ssize_t r;

	for (int j = 0; j < 3; j++)
		x_write_all(idx, fd, g_pattern, 1000, &pos);
	r = pwrite(fd, g_pattern, 500, 500);
	if (r != 500)
		die("pwrite");
	t_rw(idx, 1, 500, r, g_pattern);
	r = writev(fd, iov, 2);
	if (r != 500)
		die("writev");
	/* a vector call is not aligned when any iov_base is not (Darshan): 300 is 4 mod 8 */
	t_rw(idx, 1, pos, r, (uintptr_t)iov[0].iov_base % 8 ? iov[0].iov_base : iov[1].iov_base);
	pos += r;
	if (fdatasync(fd) != 0)
		die("fdatasync");
	T(idx)->fdsyncs++;
	if (ftruncate(fd, 2000) != 0)
		die("ftruncate");
	T(idx)->truncates++;
	x_close(idx, fd);

	fd = x_open(idx, g_names[idx], O_RDWR);
	pos = 0;
	if (x_read(idx, fd, buf, 4096, &pos) != 2000) {
		errno = 0;
		die("misc read after ftruncate");
	}
	x_write_all(idx, fd, g_pattern, 10, &pos);
	x_pread(idx, fd, buf, 100, 0);
	x_close(idx, fd);
}

static void phase_scratch(void)
{
	int fd = x_open(F_SCRATCH, g_names[F_SCRATCH], O_WRONLY | O_CREAT | O_TRUNC);
	int64_t pos = 0;

	x_write_all(F_SCRATCH, fd, g_pattern, 4096, &pos);
	x_close(F_SCRATCH, fd);
	if (unlink(g_names[F_SCRATCH]) != 0)
		die("unlink scratch");
	T(F_SCRATCH)->unlinks++;
}

/* ---- manifest ---- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/*
 * The four most frequent non-zero values among the first `held` of the table (count
 * descending, ties to the larger value), as `, "<kind>1_<what>": v, ...` members; with
 * `untallied`, also the calls of the values past them.
 */
static void json_common(FILE *f, const char *kind, const char *what, const struct cv *c,
			int64_t held, int untallied, int *first)
{
	int64_t top_v[4] = {0}, top_c[4] = {0};
	int64_t rest = c->dropped;

	for (int64_t i = held; i < c->n && i < CV_MAX; i++)
		rest += c->cnt[i];
	for (int64_t i = 0; i < c->n && i < held; i++) {
		if (c->val[i] == 0)
			continue;
		for (int k = 0; k < 4; k++) {
			if (top_c[k] < c->cnt[i] || (top_c[k] == c->cnt[i] && top_v[k] < c->val[i])) {
				for (int j = 3; j > k; j--) {
					top_v[j] = top_v[j - 1];
					top_c[j] = top_c[j - 1];
				}
				top_v[k] = c->val[i];
				top_c[k] = c->cnt[i];
				break;
			}
		}
	}
	for (int k = 0; k < 4; k++) {
		fprintf(f, "%s\"%s%d_%s\": %lld", *first ? "" : ", ", kind, k + 1, what,
			(long long)top_v[k]);
		*first = 0;
	}
	for (int k = 0; k < 4; k++)
		fprintf(f, ", \"%s%d_count\": %lld", kind, k + 1, (long long)top_c[k]);
	if (untallied)
		fprintf(f, ", \"%s_untallied\": %lld", kind, (long long)rest);
}

static void json_process(FILE *f, int pid, int ppid, int renames, int unlinks,
			 const struct tally *t, int last)
{
	int first = 1;

	fprintf(f, "    {\"pid\": %d, \"ppid\": %d, \"renames\": %d, \"unlinks\": %d, \"files\": [\n",
		pid, ppid, renames, unlinks);
	for (int i = 0; i < NFILES; i++) {
		const struct tally *x = &t[i];

		if (!x->touched)
			continue;
		fprintf(f, "%s      {\"path\": ", first ? "" : ",\n");
		first = 0;
		json_str(f, g_names[i]);
		if (i == F_CKPT) {
			fprintf(f, ", \"renamed_to\": ");
			json_str(f, g_names[F_CKPT_NEW]);
		}
		if (i < NDATA)
			fprintf(f, ", \"size\": %lld", (long long)data_size(i));
		fprintf(f,
			", \"counters\": {\"opens\": %lld, \"dups\": %lld, \"reads\": %lld, "
			"\"writes\": %lld, \"seeks\": %lld, \"stats\": %lld, \"mmaps\": %lld, "
			"\"fsyncs\": %lld, \"fdsyncs\": %lld, \"truncates\": %lld, \"closes\": %lld, "
			"\"bytes_read\": %lld, \"bytes_written\": %lld, \"max_byte_read\": %lld, "
			"\"max_byte_written\": %lld, \"seq_reads\": %lld, \"consec_reads\": %lld, "
			"\"seq_writes\": %lld, \"consec_writes\": %lld, \"rw_switches\": %lld, "
			"\"rename_sources\": %lld, \"unlinks\": %lld, \"mem_not_aligned\": %lld, "
			"\"mode\": %lld",
			(long long)x->opens, (long long)x->dups, (long long)x->reads,
			(long long)x->writes, (long long)x->seeks, (long long)x->stats,
			(long long)x->mmaps, (long long)x->fsyncs, (long long)x->fdsyncs,
			(long long)x->truncates, (long long)x->closes, (long long)x->bytes_read,
			(long long)x->bytes_written, (long long)x->max_byte_read,
			(long long)x->max_byte_written, (long long)x->seq_reads,
			(long long)x->consec_reads, (long long)x->seq_writes,
			(long long)x->consec_writes, (long long)x->rw_switches,
			(long long)x->rename_sources, (long long)x->unlinks,
			(long long)x->mem_not_aligned, (long long)x->mode);
		int more = 0, first = 1;

		json_common(f, "access", "access", &x->access, CV_IOLENS, 1, &more);
		json_common(f, "stride", "stride", &x->stride, CV_IOLENS, 1, &more);
		fprintf(f, "}, \"darshan32\": {");
		json_common(f, "access", "access", &x->access, CV_MAX, 0, &first);
		json_common(f, "stride", "stride", &x->stride, CV_MAX, 0, &first);
		fprintf(f, "}}");
	}
	fprintf(f, "\n    ]}%s\n", last ? "" : ",");
}

int main(int argc, char **argv)
{
	wl_name = "io_workload";
	static struct tally child_tally[2][NFILES];
	pid_t kids[2];
	int pipes[2][2];
	char *buf;
	FILE *out;

	if (argc != 3) {
		fprintf(stderr, "usage: %s DIR MANIFEST_OUT|-\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[1], g_dir))
		die("realpath %s", argv[1]);
	for (int i = 0; i < NDATA; i++)
		g_names[i] = xstrdup_printf("%s/data/d%02d/f%04d", g_dir, i / 100, i);
	g_names[F_PREAD] = xstrdup_printf("%s/pread.dat", g_dir);
	g_names[F_CKPT] = xstrdup_printf("%s/ckpt.tmp", g_dir);
	g_names[F_CKPT_NEW] = xstrdup_printf("%s/ckpt.pt", g_dir);
	g_names[F_MISC] = xstrdup_printf("%s/misc.dat", g_dir);
	g_names[F_CHILD0] = xstrdup_printf("%s/child0.dat", g_dir);
	g_names[F_SCRATCH] = xstrdup_printf("%s/scratch.tmp", g_dir);
	for (int i = 0; i < MIB + 4096; i++)
		g_pattern[i] = (char)('a' + (i * 31 + i / 4096) % 26);
	buf = malloc(CHUNK);
	if (!buf)
		die("malloc");
	tally_reset();

	/* directories and symlinks: not file records */
	{
		char *p = xstrdup_printf("%s/data", g_dir);

		if (mkdir(p, 0755) != 0)
			die("mkdir %s (DIR must be empty)", p);
		free(p);
		for (int d = 0; d < NDATA / 100; d++) {
			p = xstrdup_printf("%s/data/d%02d", g_dir, d);
			if (mkdir(p, 0755) != 0)
				die("mkdir %s", p);
			free(p);
		}
		p = xstrdup_printf("%s/sub", g_dir);
		if (mkdir(p, 0755) != 0)
			die("mkdir %s", p);
		free(p);
		p = xstrdup_printf("%s/link3", g_dir);
		if (symlink("data/d00/f0003", p) != 0)
			die("symlink %s", p);
		free(p);
		p = xstrdup_printf("%s/linkdir", g_dir);
		if (symlink("data/d00", p) != 0)
			die("symlink %s", p);
		free(p);
	}

	/* creation: part of the parent's ground truth */
	for (int i = 0; i < NDATA; i++)
		create_file(i, data_size(i), data_write_chunk(i));
	create_file(F_PREAD, PREAD_SIZE, MIB);

	/* readers */
	for (int c = 0; c < 2; c++) {
		if (pipe(pipes[c]) != 0)
			die("pipe");
	}
	fflush(NULL);
	for (int c = 0; c < 2; c++) {
		kids[c] = fork();
		if (kids[c] < 0)
			die("fork");
		if (kids[c] == 0) {
			for (int o = 0; o < 2; o++) {
				close(pipes[o][0]);
				if (o != c)
					close(pipes[o][1]);
			}
			child_main(c, pipes[c][1]);
		}
	}
	for (int c = 0; c < 2; c++)
		close(pipes[c][1]);

	/* the parent's own I/O, while the children read */
	phase_checkpoint();
	phase_pread();
	phase_paths(buf);
	phase_dup(buf);
	phase_seek(buf);
	phase_stat();
	phase_mmap();
	phase_misc(buf);

	for (int c = 0; c < 2; c++) {
		int status;

		recv_tallies(pipes[c][0], child_tally[c]);
		close(pipes[c][0]);
		if (waitpid(kids[c], &status, 0) != kids[c])
			die("waitpid");
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			errno = 0;
			die("child %d failed: status %#x", (int)kids[c], status);
		}
	}

	/* a file the parent never opened: child 0 created it */
	{
		struct stat st;

		x_stat(F_CHILD0, g_names[F_CHILD0]);
		if (lstat("child0.dat", &st) != 0 || !S_ISREG(st.st_mode))
			die("lstat child0.dat");
		T(F_CHILD0)->stats++;
	}
	phase_scratch();

	if (strcmp(argv[2], "-") == 0) {
		out = stdout;
	} else {
		out = fopen(argv[2], "w");
		if (!out)
			die("fopen %s", argv[2]);
	}
	fprintf(out, "{\n  \"schema\": \"io_workload/1\",\n  \"dir\": ");
	json_str(out, g_dir);
	fprintf(out, ",\n  \"parent\": %d,\n  \"children\": [%d, %d],\n  \"processes\": [\n",
		(int)getpid(), (int)kids[0], (int)kids[1]);
	json_process(out, (int)getpid(), (int)getppid(), 1, 1, g_tally, 0);
	json_process(out, (int)kids[0], (int)getpid(), 0, 0, child_tally[0], 0);
	json_process(out, (int)kids[1], (int)getpid(), 0, 0, child_tally[1], 1);
	fprintf(out, "  ]\n}\n");
	if (fflush(out) != 0 || (out != stdout && fclose(out) != 0))
		die("write manifest");
	return 0;
}
