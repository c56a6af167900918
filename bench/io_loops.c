// SPDX-License-Identifier: Apache-2.0
/*
 * io_loops: the micro-loops of iolens' overhead benchmark (bench/run_bench.py).
 *
 * Each mode times ONLY its loop with clock_gettime(CLOCK_MONOTONIC) (set-up such as opening the
 * file or allocating the buffer is outside the timed region) and prints one JSON line:
 *   {"mode":"read4k","ops":N,"ns":T,"ns_per_op":T/N, ...}
 *
 *   io_loops read4k FILE N [pread|read|rand]  N x 4 KiB pread (default) or read of a cached file,
 *                                     or pread at pseudo-random 4 KiB-aligned offsets (rand: a
 *                                     new stride nearly every call, past a record's 8 and
 *                                     Darshan's 32 values),
 *                                        wrapping to offset 0 at the end of the file; also
 *                                        "batch_median_ns_per_op": the median over batches of
 *                                        1,000 calls, which leaves the host's interruptions out
 *   io_loops mkfiles DIR [COUNT [KIB]]   create COUNT (2000) files of KIB (100) KiB (not timed
 *                                        for the benchmark; prints its own line anyway)
 *   io_loops smallfiles DIR [COUNT]      open / read to EOF / close over the COUNT (2000) files
 *                                        made by mkfiles; one op = one file (4 syscalls:
 *                                        openat, read of 100 KiB, read returning 0, close)
 *   io_loops ckpt FILE SIZE_MB           SIZE_MB x 1 MiB write, then fsync (file opened with
 *                                        O_TRUNC before the timer); one op = one 1 MiB write
 *   io_loops getppid N                   N x getppid(): a syscall that does no I/O, to measure
 *                                        what a hook on every syscall costs
 *   io_loops getfd FILE N                N x fcntl(F_GETFD) on FILE: a call iolens hooks but
 *                                        does not count (fcntl counts only as F_DUPFD*)
 *
 * IO_LOOPS_CLOCK=thread in the environment times with CLOCK_THREAD_CPUTIME_ID instead: the
 * thread's own CPU time, kernel and BPF programs included (bench/per_call_parts.py,
 * run_bench.py --clock thread).
 *
 * Exit status 0 on success, 2 on usage errors, 1 on I/O errors.
 * Build: gcc -O2 -o io_loops io_loops.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_PATH 4096

static clockid_t loop_clock = CLOCK_MONOTONIC;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(loop_clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void report(const char *mode, uint64_t ops, uint64_t ns, const char *extra)
{
	printf("{\"mode\":\"%s\",\"ops\":%llu,\"ns\":%llu,\"ns_per_op\":%.2f%s}\n", mode,
	       (unsigned long long)ops, (unsigned long long)ns,
	       ops ? (double)ns / (double)ops : 0.0, extra ? extra : "");
	fflush(stdout);
}

static int die(const char *what, const char *arg)
{
	fprintf(stderr, "io_loops: %s %s: %s\n", what, arg ? arg : "", strerror(errno));
	return 1;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: io_loops read4k FILE N [pread|read|rand]\n"
		"       io_loops mkfiles DIR [COUNT [KIB]]\n"
		"       io_loops smallfiles DIR [COUNT]\n"
		"       io_loops ckpt FILE SIZE_MB\n"
		"       io_loops getppid N\n"
		"       io_loops getfd FILE N\n"
		"environment: IO_LOOPS_CLOCK=monotonic (default) or thread (the thread's CPU time)\n");
	return 2;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || v == 0)
		return -1;
	*out = v;
	return 0;
}

#define BATCH 1000

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The median of n batch times (sorts them), or 0 when there are none. */
static double batch_median(uint64_t *t, uint64_t n)
{
	if (!n)
		return 0.0;
	qsort(t, n, sizeof(*t), cmp_u64);
	return n % 2 ? (double)t[n / 2] : ((double)t[n / 2 - 1] + (double)t[n / 2]) / 2.0;
}

static int mode_read4k(int argc, char **argv)
{
	static char buf[4096] __attribute__((aligned(4096)));
	uint64_t n, i, t0, t1, tb, nbatch, *batch;
	off_t size, off = 0;
	struct stat st;
	int use_read = 0, use_rand = 0, fd;
	uint64_t lcg = 2463;
	char extra[128];

	if (argc < 4 || parse_u64(argv[3], &n))
		return usage();
	if (argc >= 5) {
		if (!strcmp(argv[4], "read"))
			use_read = 1;
		else if (!strcmp(argv[4], "rand"))
			use_rand = 1;
		else if (strcmp(argv[4], "pread"))
			return usage();
	}
	fd = open(argv[2], O_RDONLY);
	if (fd < 0)
		return die("open", argv[2]);
	if (fstat(fd, &st))
		return die("fstat", argv[2]);
	size = st.st_size & ~(off_t)4095;
	if (size < 4096) {
		fprintf(stderr, "io_loops: %s is smaller than 4 KiB\n", argv[2]);
		return 1;
	}
	/* one time per batch of BATCH calls as well: the median batch is what a call costs with
	 * the host's interruptions (a vCPU descheduled for milliseconds) left out */
	nbatch = n / BATCH;
	batch = nbatch ? calloc(nbatch, sizeof(*batch)) : NULL;
	if (nbatch && !batch)
		return die("calloc", NULL);
	t0 = now_ns();
	tb = t0;
	for (i = 0; i < n; i++) {
		ssize_t r;

		if (batch && i && i % BATCH == 0 && i / BATCH <= nbatch) {
			uint64_t t = now_ns();

			batch[i / BATCH - 1] = t - tb;
			tb = t;
		}
		if (use_read) {
			if (off == size) {
				lseek(fd, 0, SEEK_SET); /* rewind: one extra syscall per wrap */
				off = 0;
			}
			r = read(fd, buf, sizeof(buf));
		} else {
			if (use_rand) {
				lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
				off = (off_t)((lcg >> 33) % (uint64_t)(size / 4096)) * 4096;
			}
			if (off == size)
				off = 0;
			r = pread(fd, buf, sizeof(buf), off);
		}
		if (r != (ssize_t)sizeof(buf))
			return die("read", argv[2]);
		off += r;
	}
	t1 = now_ns();
	if (batch && n == nbatch * BATCH)
		batch[nbatch - 1] = t1 - tb;
	close(fd);
	snprintf(extra, sizeof(extra),
		 ",\"call\":\"%s\",\"bytes\":%llu,\"batch_median_ns_per_op\":%.2f",
		 use_read ? "read" : use_rand ? "random pread" : "pread",
		 (unsigned long long)(n * sizeof(buf)),
		 batch_median(batch, nbatch) / BATCH);
	free(batch);
	report("read4k", n, t1 - t0, extra);
	return 0;
}

static int mode_mkfiles(int argc, char **argv)
{
	uint64_t count = 2000, kib = 100, i, t0, t1;
	char path[MAX_PATH], *data;
	size_t len;

	if (argc < 3 || (argc >= 4 && parse_u64(argv[3], &count)) ||
	    (argc >= 5 && parse_u64(argv[4], &kib)))
		return usage();
	len = (size_t)kib * 1024;
	data = malloc(len);
	if (!data)
		return die("malloc", NULL);
	for (i = 0; i < len; i++)
		data[i] = (char)('a' + i % 26);
	if (mkdir(argv[2], 0755) && errno != EEXIST)
		return die("mkdir", argv[2]);
	t0 = now_ns();
	for (i = 0; i < count; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/f%05llu", argv[2], (unsigned long long)i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			return die("open", path);
		if (write(fd, data, len) != (ssize_t)len)
			return die("write", path);
		close(fd);
	}
	t1 = now_ns();
	free(data);
	report("mkfiles", count, t1 - t0, NULL);
	return 0;
}

static int mode_smallfiles(int argc, char **argv)
{
	uint64_t count = 2000, i, t0, t1, syscalls = 0, bytes = 0;
	char (*paths)[256];
	char extra[96];
	char *buf;
	const size_t bufsz = 128 * 1024; /* larger than a file: read-all = 1 read + 1 read at EOF */

	if (argc < 3 || (argc >= 4 && parse_u64(argv[3], &count)))
		return usage();
	buf = malloc(bufsz);
	paths = malloc(count * sizeof(*paths));
	if (!buf || !paths)
		return die("malloc", NULL);
	if (strlen(argv[2]) > 240) {
		fprintf(stderr, "io_loops: DIR path too long (240 characters at most)\n");
		return 2;
	}
	for (i = 0; i < count; i++) /* names built before the timer */
		snprintf(paths[i], sizeof(paths[i]), "%s/f%05llu", argv[2], (unsigned long long)i);
	t0 = now_ns();
	for (i = 0; i < count; i++) {
		int fd = open(paths[i], O_RDONLY);
		ssize_t r;

		if (fd < 0)
			return die("open", paths[i]);
		syscalls++;
		do {
			r = read(fd, buf, bufsz);
			syscalls++;
			if (r < 0)
				return die("read", paths[i]);
			bytes += (uint64_t)r;
		} while (r > 0);
		close(fd);
		syscalls++;
	}
	t1 = now_ns();
	snprintf(extra, sizeof(extra), ",\"syscalls\":%llu,\"bytes\":%llu",
		 (unsigned long long)syscalls, (unsigned long long)bytes);
	report("smallfiles", count, t1 - t0, extra);
	free(buf);
	free(paths);
	return 0;
}

static int mode_ckpt(int argc, char **argv)
{
	const size_t chunk = 1 << 20;
	uint64_t mb, i, t0, t1;
	char *buf;
	char extra[64];
	int fd;

	if (argc < 4 || parse_u64(argv[3], &mb))
		return usage();
	buf = malloc(chunk);
	if (!buf)
		return die("malloc", NULL);
	for (i = 0; i < chunk; i++)
		buf[i] = (char)(i * 7);
	fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return die("open", argv[2]);
	t0 = now_ns();
	for (i = 0; i < mb; i++)
		if (write(fd, buf, chunk) != (ssize_t)chunk)
			return die("write", argv[2]);
	if (fsync(fd))
		return die("fsync", argv[2]);
	t1 = now_ns();
	close(fd);
	free(buf);
	snprintf(extra, sizeof(extra), ",\"bytes\":%llu", (unsigned long long)(mb * chunk));
	report("ckpt", mb, t1 - t0, extra);
	return 0;
}

static int mode_getppid(int argc, char **argv)
{
	uint64_t n, i, t0, t1;
	long sink = 0;

	if (argc < 3 || parse_u64(argv[2], &n))
		return usage();
	t0 = now_ns();
	for (i = 0; i < n; i++)
		sink += syscall(SYS_getppid); /* the raw syscall: glibc must not cache it */
	t1 = now_ns();
	if (sink == 0)
		fprintf(stderr, "io_loops: getppid returned 0\n");
	report("getppid", n, t1 - t0, NULL);
	return 0;
}

/* fcntl(F_GETFD) on a regular file: a call iolens hooks but does not count (only F_DUPFD*). */
static int mode_getfd(int argc, char **argv)
{
	uint64_t n, i, t0, t1;
	int fd;

	if (argc < 4 || parse_u64(argv[3], &n))
		return usage();
	fd = open(argv[2], O_RDONLY);
	if (fd < 0)
		return die("open", argv[2]);
	t0 = now_ns();
	for (i = 0; i < n; i++)
		if (fcntl(fd, F_GETFD) < 0)
			return die("fcntl F_GETFD", argv[2]);
	t1 = now_ns();
	close(fd);
	report("getfd", n, t1 - t0, NULL);
	return 0;
}

int main(int argc, char **argv)
{
	const char *clock_name = getenv("IO_LOOPS_CLOCK");

	if (clock_name && !strcmp(clock_name, "thread"))
		loop_clock = CLOCK_THREAD_CPUTIME_ID;
	else if (clock_name && strcmp(clock_name, "monotonic")) {
		fprintf(stderr, "io_loops: IO_LOOPS_CLOCK is '%s'; it must be monotonic or thread\n",
			clock_name);
		return 2;
	}
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "read4k"))
		return mode_read4k(argc, argv);
	if (!strcmp(argv[1], "mkfiles"))
		return mode_mkfiles(argc, argv);
	if (!strcmp(argv[1], "smallfiles"))
		return mode_smallfiles(argc, argv);
	if (!strcmp(argv[1], "ckpt"))
		return mode_ckpt(argc, argv);
	if (!strcmp(argv[1], "getppid"))
		return mode_getppid(argc, argv);
	if (!strcmp(argv[1], "getfd"))
		return mode_getfd(argc, argv);
	return usage();
}
