// SPDX-License-Identifier: Apache-2.0
/*
 * kill_workload DIR
 *
 * The parent forks a worker, which, in DIR:
 *  - for i in 0..9: creates wNN.dat (O_RDWR), writes 100 KiB in 25 write() calls of 4 KiB,
 *    lseek()s back to 0, reads it back in 10 KiB read() calls until read() returns 0 (11 reads),
 *    and closes it; except the last file, which stays open (closed by the kernel at exit, so it
 *    has no counted close);
 *  - sends its tallies (JSON) through a pipe, closes the pipe (= ready) and blocks in pause().
 * The parent reads the pipe to EOF, SIGKILLs the worker, waits for it (it must have died of
 * SIGKILL), and prints on stdout (a pipe: not a file record) a JSON manifest:
 *   {"dir", "parent", "worker", "worker_signal": 9, "files": [{"path", "counters"}...]}
 * and exits 0. The counters follow bpf/iolens_account.h (see io_workload.c for the rules).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workload_util.h"

#define NFILES 10
#define FILE_SIZE (100 * 1024)
#define WCHUNK 4096
#define RCHUNK 10240


struct tally {
	int64_t opens, reads, writes, seeks, closes, bytes_read, bytes_written;
	int64_t max_byte_read, max_byte_written, seq_reads, consec_reads, seq_writes, consec_writes;
	int64_t rw_switches;
	int64_t last_byte_read, last_byte_written;
	int last_io;
};

static void t_rw(struct tally *t, int is_write, int64_t off, int64_t ret)
{
	WL_TALLY_RW(t, is_write, off, ret);
}

static char g_dir[PATH_MAX];
static struct tally g_t[NFILES];

static char *name(int i)
{
	static char p[PATH_MAX + 32];

	snprintf(p, sizeof(p), "%s/w%02d.dat", g_dir, i);
	return p;
}

static void worker(int wfd)
{
	static char buf[RCHUNK];
	static char out[65536];
	char data[WCHUNK];
	int len = 0;

	for (int j = 0; j < WCHUNK; j++)
		data[j] = (char)('0' + j % 10);
	for (int i = 0; i < NFILES; i++) {
		struct tally *t = &g_t[i];
		int64_t pos = 0;
		ssize_t r;
		int fd = open(name(i), O_RDWR | O_CREAT | O_TRUNC, 0644);

		t->max_byte_read = t->max_byte_written = -1;
		if (fd < 0)
			die("open %s", name(i));
		t->opens++;
		t->last_byte_read = t->last_byte_written = 0;
		for (int k = 0; k < FILE_SIZE / WCHUNK; k++) {
			r = write(fd, data, WCHUNK);
			if (r != WCHUNK)
				die("write");
			t_rw(t, 1, pos, r);
			pos += r;
		}
		if (lseek(fd, 0, SEEK_SET) != 0)
			die("lseek");
		t->seeks++;
		pos = 0;
		do {
			r = read(fd, buf, RCHUNK);
			if (r < 0)
				die("read");
			t_rw(t, 0, pos, r);
			pos += r;
		} while (r > 0);
		if (pos != FILE_SIZE) {
			errno = 0;
			die("read back %lld bytes", (long long)pos);
		}
		if (i < NFILES - 1) {
			if (close(fd) != 0)
				die("close");
			t->closes++;
			t->last_byte_read = t->last_byte_written = 0;
		}
	}
	len += snprintf(out + len, sizeof(out) - len, "[");
	for (int i = 0; i < NFILES; i++) {
		const struct tally *t = &g_t[i];

		len += snprintf(out + len, sizeof(out) - len,
				"%s{\"path\": \"%s\", \"counters\": {\"opens\": %lld, \"dups\": 0, "
				"\"reads\": %lld, \"writes\": %lld, \"seeks\": %lld, \"closes\": %lld, "
				"\"bytes_read\": %lld, \"bytes_written\": %lld, \"max_byte_read\": %lld, "
				"\"max_byte_written\": %lld, \"seq_reads\": %lld, \"consec_reads\": %lld, "
				"\"seq_writes\": %lld, \"consec_writes\": %lld, \"rw_switches\": %lld, "
				"\"stats\": 0, \"mmaps\": 0, \"fsyncs\": 0}}",
				i ? ", " : "", name(i), (long long)t->opens, (long long)t->reads,
				(long long)t->writes, (long long)t->seeks, (long long)t->closes,
				(long long)t->bytes_read, (long long)t->bytes_written,
				(long long)t->max_byte_read, (long long)t->max_byte_written,
				(long long)t->seq_reads, (long long)t->consec_reads,
				(long long)t->seq_writes, (long long)t->consec_writes,
				(long long)t->rw_switches);
	}
	len += snprintf(out + len, sizeof(out) - len, "]");
	if (len >= (int)sizeof(out)) {
		errno = 0;
		die("tallies too long");
	}
	for (int off = 0; off < len;) {
		ssize_t r = write(wfd, out + off, (size_t)(len - off));

		if (r < 0)
			die("write ready pipe");
		off += (int)r;
	}
	close(wfd); /* ready */
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	wl_name = "kill_workload";
	static char tallies[65536];
	size_t n = 0;
	int p[2], status;
	pid_t pid;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[1], g_dir))
		die("realpath %s", argv[1]);
	if (pipe(p) != 0)
		die("pipe");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(p[0]);
		worker(p[1]);
	}
	close(p[1]);
	for (;;) {
		ssize_t r = read(p[0], tallies + n, sizeof(tallies) - 1 - n);

		if (r < 0)
			die("read ready pipe");
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(p[0]);
	tallies[n] = 0;
	if (n == 0) {
		errno = 0;
		die("the worker sent nothing");
	}
	if (kill(pid, SIGKILL) != 0)
		die("kill");
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
		errno = 0;
		die("the worker was not killed by SIGKILL: status %#x", status);
	}
	printf("{\"dir\": \"%s\", \"parent\": %d, \"worker\": %d, \"worker_signal\": %d, "
	       "\"files\": %s}\n",
	       g_dir, (int)getpid(), (int)pid, WTERMSIG(status), tallies);
	return fflush(stdout) == 0 ? 0 : 2;
}
