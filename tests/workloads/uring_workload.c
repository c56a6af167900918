/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io_uring through the raw system calls (no liburing): ROUNDS times, on the file argv[1],
 * IORING_OP_OPENAT, IORING_OP_READ of BLOCK bytes at offset 0, IORING_OP_FSYNC and
 * IORING_OP_CLOSE, one request at a time. No other call touches the file. Prints one JSON
 * line with what completed: {"opens":N,"reads":N,"bytes_read":N,"fsyncs":N,"closes":N}.
 * With a second argument `direct-eof`: the file is opened O_DIRECT and each round reads
 * DIRECT_LEN bytes at 0 and DIRECT_LEN at DIRECT_LEN (no fsync), so that on a file shorter than
 * DIRECT_LEN the first read ends at end of file (short: io_uring may retry the rest, which
 * finds end of file) and the second starts past it (0 bytes).
 * Used by tests/e2e/direct_uring_test.py (the uring_* open/close/other counters, O_DIRECT
 * at end of file).
 *
 * `uring_workload FILE open-batch N` (N at most 16): N IORING_OP_OPENAT requests of FILE
 * submitted together in one io_uring_enter that waits for all N, so that they are in flight
 * at once; then each descriptor closed with close(2). Prints {"opens":N} (opens that
 * completed with a descriptor). Used by tests/e2e/lost_maps_test.py (uring_inflight).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "workload_util.h"

#define ROUNDS 3
#define BLOCK 4096
#define DIRECT_LEN 16384

struct ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array;
	unsigned *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static void ring_setup(struct ring *r, unsigned entries)
{
	struct io_uring_params p;
	char *sq, *cq;

	memset(&p, 0, sizeof(p));
	r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
	if (r->fd < 0)
		die("io_uring_setup");
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
	r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED)
		die("mmap of the rings");
	r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)(sq + p.sq_off.array);
	r->cq_head = (unsigned *)(cq + p.cq_off.head);
	r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
}

/* Submits one request and waits for its completion; returns cqe->res. */
static int ring_do(struct ring *r, const struct io_uring_sqe *sqe)
{
	unsigned tail = *r->sq_tail, idx = tail & *r->sq_mask, head;
	int res;

	r->sqes[idx] = *sqe;
	r->sq_array[idx] = idx;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		die("io_uring_enter");
	head = *r->cq_head;
	if (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
		errno = EAGAIN;
		die("no completion after io_uring_enter");
	}
	res = r->cqes[head & *r->cq_mask].res;
	__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

/* ring_do(), dying on a failed completion. */
static int ring_must(struct ring *r, const struct io_uring_sqe *sqe, const char *what)
{
	int res = ring_do(r, sqe);

	if (res < 0) {
		errno = -res;
		die("%s", what);
	}
	return res;
}

/* IORING_OP_READ of `len` bytes at `off` into `buf`: the bytes read. */
static long ring_read(struct ring *r, int fd, void *buf, unsigned len, long off)
{
	struct io_uring_sqe sqe;

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = IORING_OP_READ;
	sqe.fd = fd;
	sqe.addr = (unsigned long)buf;
	sqe.len = len;
	sqe.off = (unsigned long)off;
	return ring_must(r, &sqe, "IORING_OP_READ");
}

/* The open-batch mode (see the top of the file). */
static int open_batch(const char *path, const char *count)
{
	struct ring r;
	unsigned tail, head, i, n = (unsigned)atoi(count);
	long opens = 0;

	if (n < 1 || n > 16) {
		fprintf(stderr, "uring_workload: open-batch N: N from 1 to 16\n");
		return 2;
	}
	ring_setup(&r, 16);
	tail = *r.sq_tail;
	for (i = 0; i < n; i++) {
		unsigned idx = (tail + i) & *r.sq_mask;

		memset(&r.sqes[idx], 0, sizeof(r.sqes[idx]));
		r.sqes[idx].opcode = IORING_OP_OPENAT;
		r.sqes[idx].fd = AT_FDCWD;
		r.sqes[idx].addr = (unsigned long)path;
		r.sqes[idx].open_flags = O_RDONLY;
		r.sq_array[idx] = idx;
	}
	__atomic_store_n(r.sq_tail, tail + n, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, r.fd, n, n, IORING_ENTER_GETEVENTS, NULL, 0) != (long)n)
		die("io_uring_enter of %u opens", n);
	for (i = 0; i < n; i++) {
		int res;

		head = *r.cq_head;
		if (head == __atomic_load_n(r.cq_tail, __ATOMIC_ACQUIRE)) {
			errno = EAGAIN;
			die("%u completions of %u", i, n);
		}
		res = r.cqes[head & *r.cq_mask].res;
		__atomic_store_n(r.cq_head, head + 1, __ATOMIC_RELEASE);
		if (res < 0) {
			errno = -res;
			die("IORING_OP_OPENAT %s", path);
		}
		opens++;
		if (close(res) != 0)
			die("close");
	}
	printf("{\"opens\":%ld}\n", opens);
	return 0;
}

int main(int argc, char **argv)
{
	static char buf[DIRECT_LEN] __attribute__((aligned(4096))); /* as O_DIRECT wants */
	struct io_uring_sqe sqe;
	struct ring r;
	long opens = 0, reads = 0, bytes = 0, fsyncs = 0, closes = 0;
	int i, fd, direct;

	wl_name = "uring_workload";
	if (argc == 4 && strcmp(argv[2], "open-batch") == 0)
		return open_batch(argv[1], argv[3]);
	direct = argc == 3 && strcmp(argv[2], "direct-eof") == 0;
	if (argc != 2 && !direct) {
		fprintf(stderr, "usage: uring_workload FILE [direct-eof | open-batch N]\n");
		return 2;
	}
	ring_setup(&r, 4);
	for (i = 0; i < ROUNDS; i++) {
		memset(&sqe, 0, sizeof(sqe));
		sqe.opcode = IORING_OP_OPENAT;
		sqe.fd = AT_FDCWD;
		sqe.addr = (unsigned long)argv[1];
		sqe.open_flags = O_RDONLY | (direct ? O_DIRECT : 0);
		fd = ring_must(&r, &sqe, "IORING_OP_OPENAT");
		opens++;

		if (direct) {
			long off;

			for (off = 0; off <= DIRECT_LEN; off += DIRECT_LEN) {
				bytes += ring_read(&r, fd, buf, DIRECT_LEN, off);
				reads++;
			}
		} else {
			bytes += ring_read(&r, fd, buf, BLOCK, 0);
			reads++;

			memset(&sqe, 0, sizeof(sqe));
			sqe.opcode = IORING_OP_FSYNC;
			sqe.fd = fd;
			ring_must(&r, &sqe, "IORING_OP_FSYNC");
			fsyncs++;
		}

		memset(&sqe, 0, sizeof(sqe));
		sqe.opcode = IORING_OP_CLOSE;
		sqe.fd = fd;
		ring_must(&r, &sqe, "IORING_OP_CLOSE");
		closes++;
	}
	printf("{\"opens\":%ld,\"reads\":%ld,\"bytes_read\":%ld,\"fsyncs\":%ld,\"closes\":%ld}\n",
	       opens, reads, bytes, fsyncs, closes);
	return 0;
}
