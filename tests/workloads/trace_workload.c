/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Trace-mode ground truth: each mode does known calls and prints (or writes) a JSON manifest of
 * every call it made, in order, with the CLOCK_MONOTONIC time just before and just after it
 * (the kernel's sys_enter and sys_exit fall in between), its offset, size and result.
 * Between two recorded calls it makes no system call (clock_gettime is in the vDSO).
 *
 *   trace_workload seq DIR             one of each traced call on DIR/data.bin; manifest on stdout
 *   trace_workload phases DIR SECONDS  a 4 KiB pwrite and pread every 2 ms for SECONDS; manifest
 *                                      to DIR/manifest.json (a capture takes a window of it)
 *   trace_workload burst FILE N        N one-byte preads of FILE as fast as it can; prints N
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "workload_util.h"

static FILE *man;
static int nops;

static uint64_t mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* One manifest entry: offset -1 = none; size = bytes asked for (-1 = none). */
static void rec(const char *op, int fd, int64_t off, int64_t size, int64_t ret, uint64_t t0,
		uint64_t t1)
{
	fprintf(man,
		"%s{\"op\":\"%s\",\"fd\":%d,\"offset\":%lld,\"size\":%lld,\"ret\":%lld,"
		"\"t0\":%llu,\"t1\":%llu}\n",
		nops++ ? "," : "", op, fd, (long long)off, (long long)size, (long long)ret,
		(unsigned long long)t0, (unsigned long long)t1);
}

#define CALL(t0, t1, expr) (t0 = mono(), _r = (int64_t)(expr), t1 = mono(), _r)

static int64_t ret_of(int64_t r) { return r < 0 ? -errno : r; }

static void seq(const char *dir)
{
	char path[4096], path2[4096], buf[8192];
	uint64_t a, b;
	int64_t _r, r;
	int fd, fd2;
	struct stat st;
	void *m;

	snprintf(path, sizeof(path), "%s/data.bin", dir);
	snprintf(path2, sizeof(path2), "%s/renamed.bin", dir);
	memset(buf, 'x', sizeof(buf));
	man = stdout;
	printf("{\"pid\":%d,\"path\":\"%s\",\"path2\":\"%s\",\"ops\":[\n", (int)getpid(), path, path2);
	/* Buffered stdout: nothing is written until the end, so no write(1) falls among the ops. */
	r = CALL(a, b, open(path, O_CREAT | O_RDWR | O_TRUNC, 0644));
	if (r < 0)
		die("open %s", path);
	fd = (int)r;
	rec("open", fd, -1, -1, r, a, b);
	r = CALL(a, b, write(fd, buf, 4096));
	rec("write", fd, 0, 4096, ret_of(r), a, b);
	r = CALL(a, b, write(fd, buf, 100));
	rec("write", fd, 4096, 100, ret_of(r), a, b);
	r = CALL(a, b, pwrite(fd, buf, 512, 10000));
	rec("write", fd, 10000, 512, ret_of(r), a, b);
	r = CALL(a, b, lseek(fd, 0, SEEK_SET));
	rec("seek", fd, 0, -1, ret_of(r), a, b);
	r = CALL(a, b, read(fd, buf, 1000));
	rec("read", fd, 0, 1000, ret_of(r), a, b);
	r = CALL(a, b, pread(fd, buf, 300, 9000));
	rec("read", fd, 9000, 300, ret_of(r), a, b);
	r = CALL(a, b, fstat(fd, &st));
	rec("stat", fd, -1, -1, ret_of(r), a, b);
	a = mono();
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	b = mono();
	if (m == MAP_FAILED)
		die("mmap");
	rec("mmap", fd, -1, -1, (int64_t)(intptr_t)m, a, b); /* the record's ret is the address */
	r = CALL(a, b, fsync(fd));
	rec("fsync", fd, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, fdatasync(fd));
	rec("fdatasync", fd, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, ftruncate(fd, 8192));
	rec("truncate", fd, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, dup(fd));
	fd2 = (int)r;
	rec("dup", fd, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, close(fd2));
	rec("close", fd2, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, read(1000, buf, 10));
	rec("read", 1000, -1, 10, ret_of(r), a, b);
	r = CALL(a, b, pread(fd, buf, 8192, 0));
	rec("read", fd, 0, 8192, ret_of(r), a, b);
	r = CALL(a, b, close(fd));
	rec("close", fd, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, stat(path, &st));
	rec("stat", -1, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, rename(path, path2));
	rec("rename", -1, -1, -1, ret_of(r), a, b);
	r = CALL(a, b, unlink(path2));
	rec("unlink", -1, -1, -1, ret_of(r), a, b);
	munmap(m, 4096);
	printf("]}\n");
}

static void phases(const char *dir, int seconds)
{
	char path[4096], mpath[4096], buf[4096];
	uint64_t a, b, end;
	int64_t _r, r, off = 0;
	int fd;
	struct timespec nap = { 0, 2000000 };

	snprintf(path, sizeof(path), "%s/phases.bin", dir);
	snprintf(mpath, sizeof(mpath), "%s/manifest.json", dir);
	/* The manifest is kept in memory (a 64 MiB buffer) and written at the end, so that its
	 * own writes are not among the ops. */
	size_t cap = 64u << 20, len = 0;
	char *mem = malloc(cap);
	if (!mem)
		die("malloc");
	man = fmemopen(mem, cap, "w");
	if (!man)
		die("fmemopen");
	memset(buf, 'p', sizeof(buf));
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s", path);
	fprintf(man, "{\"pid\":%d,\"path\":\"%s\",\"ops\":[\n", (int)getpid(), path);
	end = mono() + (uint64_t)seconds * 1000000000ULL;
	while (mono() < end) {
		r = CALL(a, b, pwrite(fd, buf, sizeof(buf), off));
		rec("write", fd, off, sizeof(buf), ret_of(r), a, b);
		r = CALL(a, b, pread(fd, buf, sizeof(buf), off));
		rec("read", fd, off, sizeof(buf), ret_of(r), a, b);
		off = (off + 4096) % (1 << 20);
		nanosleep(&nap, NULL);
	}
	fprintf(man, "]}\n");
	fflush(man);
	len = strlen(mem);
	close(fd);
	FILE *f = fopen(mpath, "w");
	if (!f || fwrite(mem, 1, len, f) != len || fclose(f))
		die("write %s", mpath);
	unlink(path);
}

static void burst(const char *file, long n)
{
	char c;
	int fd = open(file, O_RDONLY);

	if (fd < 0)
		die("open %s", file);
	for (long i = 0; i < n; i++)
		if (pread(fd, &c, 1, 0) != 1)
			die("pread");
	close(fd);
	printf("%ld\n", n);
}

int main(int argc, char **argv)
{
	wl_name = "trace_workload";
	if (argc == 3 && !strcmp(argv[1], "seq"))
		seq(argv[2]);
	else if (argc == 4 && !strcmp(argv[1], "phases"))
		phases(argv[2], atoi(argv[3]));
	else if (argc == 4 && !strcmp(argv[1], "burst"))
		burst(argv[2], atol(argv[3]));
	else {
		fprintf(stderr, "usage: trace_workload seq DIR | phases DIR SECONDS | burst FILE N\n");
		return 2;
	}
	return 0;
}
