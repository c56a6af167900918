// SPDX-License-Identifier: Apache-2.0
/*
 * job_workload: the process the daemon e2e tests (tests/e2e/daemon_*_test.py) run inside a job
 * cgroup. It knows its own ground truth and prints it. Linked statically (tests/workloads/
 * CMakeLists.txt) so that, after exec, the process opens no file but its own: no ld.so.cache, no
 * libc.so, which would otherwise be job I/O the test would have to guess.
 *
 *   job_workload io DIR TAG WBYTES RBYTES [--gate-start] [--gate-mid]
 *       Writes WBYTES to DIR/TAG.out (created, truncated) in write() calls of at most 64 KiB,
 *       closes it; then reads exactly RBYTES of DIR/TAG.in (which the test made beforehand, at
 *       least RBYTES long) in read() calls of at most 32 KiB, closes it. RBYTES 0: TAG.in is not
 *       opened.
 *       --gate-start: before any file I/O, prints {"phase": "waiting", "pid": P} and reads stdin
 *       until a byte or EOF. --gate-mid: after the write, prints {"phase": "written", ...} with
 *       the tally so far and reads stdin until EOF before the read. Then prints the manifest.
 *
 *   job_workload burst CGDIR DIR TAG WBYTES
 *       The tightest short-lived job: creates cgroup directory CGDIR, moves itself in (writes
 *       its pid to CGDIR/cgroup.procs, keeps that descriptor open so no close follows), and at
 *       once writes WBYTES to DIR/TAG.out as `io` does: no fork or exec between the mkdir and
 *       the first write, only the move itself (which the kernel may stretch to milliseconds when
 *       it has to synchronise RCU). The test removes CGDIR after the exit.
 *
 *   job_workload many DIR NFILES SIZE [--gate-end] [--keep]
 *       Creates DIR/dNNN/fNNNNN (1000 files a directory, NFILES in all), each written with one
 *       write() of SIZE bytes; then reopens each and reads it with one read() of SIZE bytes; then
 *       unlinks them (and rmdirs the directories). Prints the manifest with the totals.
 *       --gate-end: prints {"phase": "done", ...} and waits on stdin before the manifest and exit.
 *       --keep: the files and directories are left (no unlink: each file makes one name event,
 *       none for an unlink).
 *
 *   job_workload loader DIR NFILES SIZE EPOCHS WORKERS [RATE]
 *       A DataLoader's epochs over files `many ... --keep` made (DIR/dNNN/fNNNNNN, each SIZE
 *       bytes): each epoch forks WORKERS children at once (re-forked every epoch, as PyTorch's
 *       DataLoader does without persistent_workers); child w reads files w, w+WORKERS, ...:
 *       open, one read() of SIZE bytes, close, each checked (a short read or a failure exits
 *       3), and exits 0. The parent waits for all, then starts the next epoch; it does no file
 *       I/O itself. The manifest's totals are the children's (NFILES x EPOCHS opens, reads and
 *       closes; SIZE x that in bytes), plus "processes": WORKERS x EPOCHS. RATE: at most that
 *       many files a second over all workers (each paces itself), to load a daemon at a known
 *       rate; unset or 0, as fast as they go.
 *
 *   job_workload forks DIR NPROCS SIZE
 *       The fork storm of a job running a short command in a loop: forks NPROCS children one
 *       after the other; each creates DIR/cNNNNNN, writes SIZE bytes to it with one write(),
 *       closes it and exits 0; the parent waits for each before the next. The manifest's totals
 *       are the children's (the parent itself does no file I/O), plus "processes": NPROCS.
 *
 * Stdout must be a pipe (so the manifest itself is not file I/O); stdin a pipe or /dev/null.
 * Manifest (one JSON line): {"pid": P, "files": [{"path", "opens", "closes", "reads", "writes",
 * "bytes_read", "bytes_written"}...], "totals": {same keys, "unlinks"}}. Every tally comes from
 * the real return value of each call; any failure exits 2 with a message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workload_util.h"

#define WCHUNK 65536
#define RCHUNK 32768

struct tally {
	int64_t opens, closes, reads, writes, bytes_read, bytes_written, unlinks;
};

static void add(struct tally *t, const struct tally *x)
{
	t->opens += x->opens;
	t->closes += x->closes;
	t->reads += x->reads;
	t->writes += x->writes;
	t->bytes_read += x->bytes_read;
	t->bytes_written += x->bytes_written;
	t->unlinks += x->unlinks;
}

static void print_tally(FILE *f, const struct tally *t)
{
	fprintf(f,
		"\"opens\": %lld, \"closes\": %lld, \"reads\": %lld, \"writes\": %lld, "
		"\"bytes_read\": %lld, \"bytes_written\": %lld",
		(long long)t->opens, (long long)t->closes, (long long)t->reads, (long long)t->writes,
		(long long)t->bytes_read, (long long)t->bytes_written);
}

static int64_t parse_count(const char *s)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < 0) {
		errno = EINVAL;
		die("bad number '%s'", s);
	}
	return v;
}

/* Blocks until stdin gives a byte or EOF: the test's gate. A pipe: not a file record. */
static void gate(void)
{
	char c;

	for (;;) {
		ssize_t r = read(0, &c, 1);

		if (r >= 0)
			return;
		if (errno != EINTR)
			die("read stdin");
	}
}

static void wait_eof(void)
{
	char buf[256];

	for (;;) {
		ssize_t r = read(0, buf, sizeof(buf));

		if (r == 0)
			return;
		if (r < 0 && errno != EINTR)
			die("read stdin");
	}
}

static int do_io(int argc, char **argv)
{
	static char buf[WCHUNK];
	char dir[PATH_MAX], out[PATH_MAX + 64], in[PATH_MAX + 64];
	struct tally w = {0}, r = {0}, total = {0};
	int gate_start = 0, gate_mid = 0;
	int64_t wbytes, rbytes, done;
	int fd;

	if (argc < 6) {
		fprintf(stderr, "usage: %s io DIR TAG WBYTES RBYTES [--gate-start] [--gate-mid]\n",
			argv[0]);
		return 2;
	}
	for (int i = 6; i < argc; i++) {
		if (!strcmp(argv[i], "--gate-start"))
			gate_start = 1;
		else if (!strcmp(argv[i], "--gate-mid"))
			gate_mid = 1;
		else {
			errno = EINVAL;
			die("unknown option %s", argv[i]);
		}
	}
	if (!realpath(argv[2], dir))
		die("realpath %s", argv[2]);
	snprintf(out, sizeof(out), "%s/%s.out", dir, argv[3]);
	snprintf(in, sizeof(in), "%s/%s.in", dir, argv[3]);
	wbytes = parse_count(argv[4]);
	rbytes = parse_count(argv[5]);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)('a' + i % 26);

	if (gate_start) {
		printf("{\"phase\": \"waiting\", \"pid\": %d}\n", (int)getpid());
		fflush(stdout);
		gate();
	}

	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("open %s", out);
	w.opens++;
	for (done = 0; done < wbytes;) {
		size_t n = (size_t)(wbytes - done < WCHUNK ? wbytes - done : WCHUNK);
		ssize_t k = write(fd, buf, n);

		if (k <= 0)
			die("write %s", out);
		w.writes++;
		w.bytes_written += k;
		done += k;
	}
	if (close(fd) != 0)
		die("close %s", out);
	w.closes++;

	if (gate_mid) {
		printf("{\"phase\": \"written\", \"pid\": %d, \"path\": \"%s\", ", (int)getpid(), out);
		print_tally(stdout, &w);
		printf("}\n");
		fflush(stdout);
		wait_eof();
	}

	if (rbytes > 0) {
		fd = open(in, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			die("open %s", in);
		r.opens++;
		for (done = 0; done < rbytes;) {
			size_t n = (size_t)(rbytes - done < RCHUNK ? rbytes - done : RCHUNK);
			ssize_t k = read(fd, buf, n);

			if (k < 0)
				die("read %s", in);
			if (k == 0) {
				errno = 0;
				die("%s ends after %lld bytes, %lld wanted", in, (long long)done,
				    (long long)rbytes);
			}
			r.reads++;
			r.bytes_read += k;
			done += k;
		}
		if (close(fd) != 0)
			die("close %s", in);
		r.closes++;
	}

	add(&total, &w);
	add(&total, &r);
	printf("{\"pid\": %d, \"files\": [{\"path\": \"%s\", ", (int)getpid(), out);
	print_tally(stdout, &w);
	printf("}");
	if (rbytes > 0) {
		printf(", {\"path\": \"%s\", ", in);
		print_tally(stdout, &r);
		printf("}");
	}
	printf("], \"totals\": {");
	print_tally(stdout, &total);
	printf(", \"unlinks\": 0}}\n");
	return fflush(stdout) == 0 ? 0 : 2;
}

static int do_burst(int argc, char **argv)
{
	static char buf[WCHUNK];
	char procs[PATH_MAX + 32], out[PATH_MAX + 64], dir[PATH_MAX], pid[32];
	struct tally w = {0};
	int64_t wbytes, done;
	int cfd, fd, n;

	if (argc != 6) {
		fprintf(stderr, "usage: %s burst CGDIR DIR TAG WBYTES\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[3], dir))
		die("realpath %s", argv[3]);
	snprintf(out, sizeof(out), "%s/%s.out", dir, argv[4]);
	wbytes = parse_count(argv[5]);
	memset(buf, 'b', sizeof(buf));
	if (mkdir(argv[2], 0755) != 0)
		die("mkdir %s", argv[2]);
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", argv[2]);
	cfd = open(procs, O_WRONLY | O_CLOEXEC);
	if (cfd < 0)
		die("open %s", procs);
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (write(cfd, pid, (size_t)n) != n)
		die("write %s", procs);
	/* cfd stays open: closed by exit, not by a close() the job would count */

	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("open %s", out);
	w.opens++;
	for (done = 0; done < wbytes;) {
		size_t k0 = (size_t)(wbytes - done < WCHUNK ? wbytes - done : WCHUNK);
		ssize_t k = write(fd, buf, k0);

		if (k <= 0)
			die("write %s", out);
		w.writes++;
		w.bytes_written += k;
		done += k;
	}
	if (close(fd) != 0)
		die("close %s", out);
	w.closes++;
	printf("{\"pid\": %d, \"files\": [{\"path\": \"%s\", ", (int)getpid(), out);
	print_tally(stdout, &w);
	printf("}], \"totals\": {");
	print_tally(stdout, &w);
	printf(", \"unlinks\": 0}}\n");
	return fflush(stdout) == 0 ? 0 : 2;
}

static int do_many(int argc, char **argv)
{
	static char buf[1 << 20];
	char dir[PATH_MAX], p[PATH_MAX + 64];
	struct tally t = {0};
	int64_t nfiles, size, ndirs;
	int gate_end = 0, keep = 0;

	for (int i = 5; i < argc; i++) {
		if (!strcmp(argv[i], "--gate-end"))
			gate_end = 1;
		else if (!strcmp(argv[i], "--keep"))
			keep = 1;
		else
			argc = 0; /* usage below */
	}
	if (argc < 5) {
		fprintf(stderr, "usage: %s many DIR NFILES SIZE [--gate-end] [--keep]\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[2], dir))
		die("realpath %s", argv[2]);
	nfiles = parse_count(argv[3]);
	size = parse_count(argv[4]);
	if (size > (int64_t)sizeof(buf)) {
		errno = EINVAL;
		die("SIZE at most %zu", sizeof(buf));
	}
	memset(buf, 'x', sizeof(buf));
	ndirs = (nfiles + 999) / 1000;
	for (int64_t d = 0; d < ndirs; d++) {
		snprintf(p, sizeof(p), "%s/d%03lld", dir, (long long)d);
		if (mkdir(p, 0755) != 0)
			die("mkdir %s", p);
	}
	for (int64_t i = 0; i < nfiles; i++) {
		int fd;
		ssize_t k;

		snprintf(p, sizeof(p), "%s/d%03lld/f%06lld", dir, (long long)(i / 1000), (long long)i);
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			die("open %s", p);
		t.opens++;
		k = write(fd, buf, (size_t)size);
		if (k != size)
			die("write %s", p);
		t.writes++;
		t.bytes_written += k;
		if (close(fd) != 0)
			die("close %s", p);
		t.closes++;
	}
	for (int64_t i = 0; i < nfiles; i++) {
		int fd;
		ssize_t k;

		snprintf(p, sizeof(p), "%s/d%03lld/f%06lld", dir, (long long)(i / 1000), (long long)i);
		fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			die("open %s", p);
		t.opens++;
		k = read(fd, buf, (size_t)size);
		if (k != size)
			die("read %s", p);
		t.reads++;
		t.bytes_read += k;
		if (close(fd) != 0)
			die("close %s", p);
		t.closes++;
	}
	for (int64_t i = 0; i < nfiles && !keep; i++) {
		snprintf(p, sizeof(p), "%s/d%03lld/f%06lld", dir, (long long)(i / 1000), (long long)i);
		if (unlink(p) != 0)
			die("unlink %s", p);
		t.unlinks++;
	}
	for (int64_t d = 0; d < ndirs && !keep; d++) {
		snprintf(p, sizeof(p), "%s/d%03lld", dir, (long long)d);
		if (rmdir(p) != 0)
			die("rmdir %s", p);
	}
	/* Alive with every file's record still the process's own (not final), until told. */
	if (gate_end) {
		printf("{\"phase\": \"done\", \"pid\": %d}\n", (int)getpid());
		fflush(stdout);
		gate();
	}
	printf("{\"pid\": %d, \"files\": [], \"totals\": {", (int)getpid());
	print_tally(stdout, &t);
	printf(", \"unlinks\": %lld}}\n", (long long)t.unlinks);
	return fflush(stdout) == 0 ? 0 : 2;
}

static int do_forks(int argc, char **argv)
{
	static char buf[1 << 16];
	char dir[PATH_MAX], p[PATH_MAX + 64];
	struct tally t = {0};
	int64_t nprocs, size;

	if (argc != 5) {
		fprintf(stderr, "usage: %s forks DIR NPROCS SIZE\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[2], dir))
		die("realpath %s", argv[2]);
	nprocs = parse_count(argv[3]);
	size = parse_count(argv[4]);
	if (size > (int64_t)sizeof(buf)) {
		errno = EINVAL;
		die("SIZE at most %zu", sizeof(buf));
	}
	memset(buf, 'x', sizeof(buf));
	fflush(stdout);  /* nothing buffered may be written twice by a child */
	for (int64_t i = 0; i < nprocs; i++) {
		pid_t pid;
		int status;

		snprintf(p, sizeof(p), "%s/c%06lld", dir, (long long)i);
		pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

			if (fd < 0 || write(fd, buf, (size_t)size) != size || close(fd) != 0)
				_exit(3);
			_exit(0);
		}
		if (waitpid(pid, &status, 0) != pid)
			die("waitpid");
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			errno = EIO;
			die("child %lld failed on %s", (long long)i, p);
		}
		t.opens++;
		t.writes++;
		t.bytes_written += size;
		t.closes++;
	}
	printf("{\"pid\": %d, \"files\": [], \"totals\": {", (int)getpid());
	print_tally(stdout, &t);
	printf(", \"processes\": %lld}}\n", (long long)nprocs);
	return fflush(stdout) == 0 ? 0 : 2;
}

static int do_loader(int argc, char **argv)
{
	static char buf[1 << 16];
	char dir[PATH_MAX], p[PATH_MAX + 64];
	struct tally t = {0};
	int64_t nfiles, size, epochs, workers, rate = 0;

	if (argc != 7 && argc != 8) {
		fprintf(stderr, "usage: %s loader DIR NFILES SIZE EPOCHS WORKERS [RATE]\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[2], dir))
		die("realpath %s", argv[2]);
	nfiles = parse_count(argv[3]);
	size = parse_count(argv[4]);
	epochs = parse_count(argv[5]);
	workers = parse_count(argv[6]);
	if (argc == 8)
		rate = parse_count(argv[7]);
	if (size > (int64_t)sizeof(buf) || workers < 1) {
		errno = EINVAL;
		die("SIZE at most %zu, WORKERS at least 1", sizeof(buf));
	}
	fflush(stdout);  /* nothing buffered may be written twice by a child */
	for (int64_t e = 0; e < epochs; e++) {
		for (int64_t w = 0; w < workers; w++) {
			pid_t pid = fork();

			if (pid < 0)
				die("fork");
			if (pid != 0)
				continue;
			struct timespec t0;

			clock_gettime(CLOCK_MONOTONIC, &t0);
			for (int64_t i = w, k = 0; i < nfiles; i += workers, k++) {
				int fd;

				/* RATE files a second over all workers: each opens its k-th file no sooner
				 * than k * WORKERS / RATE seconds after its start (checked every 32). */
				if (rate > 0 && k % 32 == 0) {
					const int64_t due = k * workers * 1000000000LL / rate;
					struct timespec now;

					clock_gettime(CLOCK_MONOTONIC, &now);
					const int64_t ahead = due - ((now.tv_sec - t0.tv_sec) * 1000000000LL +
								     (now.tv_nsec - t0.tv_nsec));
					if (ahead > 0) {
						struct timespec d = {ahead / 1000000000LL, ahead % 1000000000LL};

						nanosleep(&d, NULL);
					}
				}

				snprintf(p, sizeof(p), "%s/d%03lld/f%06lld", dir, (long long)(i / 1000),
					 (long long)i);
				fd = open(p, O_RDONLY | O_CLOEXEC);
				if (fd < 0 || read(fd, buf, (size_t)size) != size || close(fd) != 0)
					_exit(3);
			}
			_exit(0);
		}
		for (int64_t w = 0; w < workers; w++) {
			int status;

			if (wait(&status) < 0)
				die("wait");
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				errno = EIO;
				die("a worker of epoch %lld failed", (long long)e);
			}
		}
	}
	/* Every worker checked each of its calls: the totals are what they did. */
	t.opens = t.reads = t.closes = nfiles * epochs;
	t.bytes_read = nfiles * epochs * size;
	printf("{\"pid\": %d, \"files\": [], \"totals\": {", (int)getpid());
	print_tally(stdout, &t);
	printf(", \"processes\": %lld}}\n", (long long)(workers * epochs));
	return fflush(stdout) == 0 ? 0 : 2;
}

int main(int argc, char **argv)
{
	wl_name = "job_workload";
	if (argc >= 2 && !strcmp(argv[1], "io"))
		return do_io(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "burst"))
		return do_burst(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "many"))
		return do_many(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "forks"))
		return do_forks(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "loader"))
		return do_loader(argc, argv);
	fprintf(stderr, "usage: %s io|burst|many|forks|loader ...\n", argv[0]);
	return 2;
}
