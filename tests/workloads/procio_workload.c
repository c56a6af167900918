// SPDX-License-Identifier: Apache-2.0
/*
 * procio_workload DIR
 *
 * Ground truth from the kernel itself: /proc/self/io. The parent forks one child and exits with
 * its status; the child does all the work:
 *  - file I/O on DIR/a.dat and DIR/b.dat with read/write/pread/pwrite/readv/writev/preadv/
 *    pwritev/preadv2/pwritev2 of many sizes (1 byte to 1 MiB, reads at and past EOF);
 *  - a little I/O on other descriptor kinds: /dev/null and /dev/zero (char), a pipe, a socketpair
 *    (read/write only: send/recv are not counted by the kernel's syscr/syscw), an eventfd (anon);
 *  - then ONE read() of /proc/self/io into a 4096-byte buffer, and ONE write() to stdout of a
 *    JSON line with the parsed syscr/syscw/rchar/wchar, the length of that read, and its own
 *    per-file tallies.
 *
 * Why a forked child and not the exec'd process: a new process's I/O accounting starts at zero at
 * fork (copy_process -> task_io_accounting_init), while an exec'd process's /proc/PID/io also
 * counts the kernel_read() calls of execve itself (ELF header, program headers, interpreter: 5
 * calls for a dynamic binary on 6.x) and whatever it did before exec; those are not read
 * syscalls and no syscall tracer can see them. The child never execs, so its /proc/self/io is
 * exactly the sum of its own read/write syscalls.
 *
 * The snapshot is taken by the kernel while the /proc read runs, before that read is accounted
 * (vfs_read: the ->read_iter fills the buffer, then add_rchar/inc_syscr), so it excludes that
 * read; the final write to stdout happens after it. procio_test.py does the arithmetic.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workload_util.h"

#define MIB (1024 * 1024)


struct tally {
	const char *name; /* path or descriptor kind */
	long long opens, reads, writes, bytes_read, bytes_written;
};

static struct tally t_a, t_b, t_char, t_pipe, t_sock, t_anon;

static ssize_t chk(struct tally *t, int is_write, ssize_t r, const char *what)
{
	if (r < 0)
		die("%s", what);
	if (is_write) {
		t->writes++;
		t->bytes_written += r;
	} else {
		t->reads++;
		t->bytes_read += r;
	}
	return r;
}

static int xopen(struct tally *t, const char *path, int flags)
{
	int fd = open(path, flags, 0644);

	if (fd < 0)
		die("open %s", path);
	if (t)
		t->opens++;
	return fd;
}

static char buf[2 * MIB];
static char src[2 * MIB];

static void files(const char *dir)
{
	char pa[4096], pb[4096];
	struct iovec iov[3];
	int fd;
	ssize_t r;
	static const size_t wsizes[] = { 1, 100, 4096, 65536, MIB, 3, 4095, 4097, 100000 };
	static const size_t rsizes[] = { 1, 100, 4096, 65536, MIB, 7, 333333 };

	snprintf(pa, sizeof(pa), "%s/a.dat", dir);
	snprintf(pb, sizeof(pb), "%s/b.dat", dir);

	fd = xopen(&t_a, pa, O_RDWR | O_CREAT | O_TRUNC);
	for (size_t i = 0; i < sizeof(wsizes) / sizeof(wsizes[0]); i++)
		chk(&t_a, 1, write(fd, src, wsizes[i]), "write");
	chk(&t_a, 1, pwrite(fd, src, 4096, 8192), "pwrite");
	iov[0] = (struct iovec){ src, 10 };
	iov[1] = (struct iovec){ src + 10, 20 };
	iov[2] = (struct iovec){ src + 30, 30 };
	chk(&t_a, 1, writev(fd, iov, 3), "writev");
	iov[0] = (struct iovec){ src, 1000 };
	iov[1] = (struct iovec){ src, 2000 };
	chk(&t_a, 1, pwritev(fd, iov, 2, 100000), "pwritev");
	iov[0] = (struct iovec){ src, 500 };
	chk(&t_a, 1, pwritev2(fd, iov, 1, -1, 0), "pwritev2 at the position");
	chk(&t_a, 1, pwritev2(fd, iov, 1, 0, 0), "pwritev2 at 0");
	if (lseek(fd, 0, SEEK_SET) != 0)
		die("lseek");
	/* read the whole file in varied sizes until EOF (the 0-byte read counts) */
	for (size_t i = 0;; i++) {
		r = chk(&t_a, 0, read(fd, buf, rsizes[i % (sizeof(rsizes) / sizeof(rsizes[0]))]),
			"read");
		if (r == 0)
			break;
	}
	chk(&t_a, 0, read(fd, buf, 10), "read at EOF again");
	chk(&t_a, 0, pread(fd, buf, 7, 3), "pread");
	chk(&t_a, 0, pread(fd, buf, 4096, 50 * MIB), "pread past EOF");
	if (lseek(fd, 5, SEEK_SET) != 5)
		die("lseek");
	iov[0] = (struct iovec){ buf, 1 };
	iov[1] = (struct iovec){ buf + 1, 4096 };
	iov[2] = (struct iovec){ buf + 8192, 65536 };
	chk(&t_a, 0, readv(fd, iov, 3), "readv");
	chk(&t_a, 0, preadv(fd, iov, 2, 12345), "preadv");
	chk(&t_a, 0, preadv2(fd, iov, 3, -1, 0), "preadv2 at the position");
	chk(&t_a, 0, preadv2(fd, iov, 1, 777, 0), "preadv2 at 777");
	if (fsync(fd) != 0)
		die("fsync");
	if (close(fd) != 0)
		die("close");

	fd = xopen(&t_b, pb, O_WRONLY | O_CREAT | O_TRUNC);
	chk(&t_b, 1, write(fd, src, MIB), "write b");
	if (close(fd) != 0)
		die("close");
	fd = xopen(&t_b, pb, O_RDONLY);
	while (chk(&t_b, 0, read(fd, buf, 512 * 1024), "read b") > 0)
		;
	if (close(fd) != 0)
		die("close");
}

static void others(void)
{
	int fd, p[2], s[2];
	uint64_t one = 1, v;

	fd = xopen(NULL, "/dev/null", O_WRONLY);
	chk(&t_char, 1, write(fd, src, 1000), "write /dev/null");
	close(fd);
	fd = xopen(NULL, "/dev/zero", O_RDONLY);
	chk(&t_char, 0, read(fd, buf, 4096), "read /dev/zero");
	close(fd);

	if (pipe(p) != 0)
		die("pipe");
	chk(&t_pipe, 1, write(p[1], src, 123), "write pipe");
	chk(&t_pipe, 0, read(p[0], buf, 4096), "read pipe");
	close(p[0]);
	close(p[1]);

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0)
		die("socketpair");
	chk(&t_sock, 1, write(s[0], src, 77), "write socket");
	chk(&t_sock, 0, read(s[1], buf, 4096), "read socket");
	close(s[0]);
	close(s[1]);

	fd = eventfd(0, 0);
	if (fd < 0)
		die("eventfd");
	chk(&t_anon, 1, write(fd, &one, sizeof(one)), "write eventfd");
	chk(&t_anon, 0, read(fd, &v, sizeof(v)), "read eventfd");
	close(fd);
}

static long long field(const char *text, const char *name)
{
	const char *p = strstr(text, name);

	if (!p) {
		errno = 0;
		die("/proc/self/io has no %s", name);
	}
	return strtoll(p + strlen(name), NULL, 10);
}

static int tally_json(char *out, size_t cap, const struct tally *t)
{
	return snprintf(out, cap,
			"\"%s\": {\"opens\": %lld, \"reads\": %lld, \"writes\": %lld, "
			"\"bytes_read\": %lld, \"bytes_written\": %lld}",
			t->name, t->opens, t->reads, t->writes, t->bytes_read, t->bytes_written);
}

static void child(const char *dir)
{
	static char io[4096];
	static char out[16384];
	char pa[4096], pb[4096];
	int fd, len = 0;
	ssize_t n, w;

	snprintf(pa, sizeof(pa), "%s/a.dat", dir);
	snprintf(pb, sizeof(pb), "%s/b.dat", dir);
	t_a.name = pa;
	t_b.name = pb;
	t_char.name = "char";
	t_pipe.name = "pipe";
	t_sock.name = "socket";
	t_anon.name = "anon";

	files(dir);
	others();

	fd = open("/proc/self/io", O_RDONLY);
	if (fd < 0)
		die("open /proc/self/io");
	n = read(fd, io, sizeof(io) - 1); /* the one read: the snapshot excludes it */
	if (n <= 0)
		die("read /proc/self/io");
	io[n] = 0;

	len += snprintf(out + len, sizeof(out) - len,
			"{\"pid\": %d, \"syscr\": %lld, \"syscw\": %lld, \"rchar\": %lld, "
			"\"wchar\": %lld, \"proc_read_len\": %zd, \"files\": {",
			(int)getpid(), field(io, "syscr: "), field(io, "syscw: "),
			field(io, "rchar: "), field(io, "wchar: "), n);
	len += tally_json(out + len, sizeof(out) - len, &t_a);
	len += snprintf(out + len, sizeof(out) - len, ", ");
	len += tally_json(out + len, sizeof(out) - len, &t_b);
	len += snprintf(out + len, sizeof(out) - len, "}, \"other_io\": {");
	len += tally_json(out + len, sizeof(out) - len, &t_char);
	len += snprintf(out + len, sizeof(out) - len, ", ");
	len += tally_json(out + len, sizeof(out) - len, &t_pipe);
	len += snprintf(out + len, sizeof(out) - len, ", ");
	len += tally_json(out + len, sizeof(out) - len, &t_sock);
	len += snprintf(out + len, sizeof(out) - len, ", ");
	len += tally_json(out + len, sizeof(out) - len, &t_anon);
	len += snprintf(out + len, sizeof(out) - len, "}}\n");
	if (len >= (int)sizeof(out)) {
		errno = 0;
		die("output too long");
	}
	w = write(1, out, (size_t)len); /* the one write after the snapshot */
	if (w != len)
		die("write stdout: %zd of %d", w, len);
	_exit(0);
}

int main(int argc, char **argv)
{
	wl_name = "procio_workload";
	pid_t pid;
	int status;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (char)('A' + i % 23);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		child(argv[1]);
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
