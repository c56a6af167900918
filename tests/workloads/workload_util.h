/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the C test workloads: fatal errors, and Darshan's read/write pattern rule applied to
 * a workload's own tally (its ground truth, kept from the real return values of its calls).
 * The rule is written out here independently of bpf/iolens_account.h on purpose: the tests
 * compare the two.
 */
#ifndef IOLENS_WORKLOAD_UTIL_H
#define IOLENS_WORKLOAD_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Set by each workload's main(): the name its errors start with. */
static const char *wl_name = "workload";

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fprintf(stderr, "%s[%d]: ", wl_name, (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", strerror(e));
	_exit(2);
}

/*
 * One read (is_write 0) or write (1) of `ret` bytes at `off` on tally `t`, any struct with the
 * fields reads, writes, bytes_read, bytes_written, max_byte_read, max_byte_written, seq_reads,
 * consec_reads, seq_writes, consec_writes, rw_switches, last_byte_read, last_byte_written and
 * last_io (0 none, 1 read, 2 write). Darshan: a failed call (ret < 0) is not counted;
 * sequential = offset past the last byte, consecutive = right after it.
 */
#define WL_TALLY_RW(t, is_write, off, ret)                                                      \
	do {                                                                                     \
		int64_t *last_ = (is_write) ? &(t)->last_byte_written : &(t)->last_byte_read;  \
		int64_t *max_ = (is_write) ? &(t)->max_byte_written : &(t)->max_byte_read;     \
		int type_ = (is_write) ? 2 : 1;                                                 \
		int64_t off_ = (off), ret_ = (ret);                                             \
		if (ret_ < 0)                                                                   \
			break;                                                                  \
		if (is_write) {                                                                 \
			(t)->writes++;                                                          \
			(t)->bytes_written += ret_;                                             \
		} else {                                                                        \
			(t)->reads++;                                                           \
			(t)->bytes_read += ret_;                                                \
		}                                                                               \
		if (off_ > *last_)                                                              \
			(*((is_write) ? &(t)->seq_writes : &(t)->seq_reads))++;                 \
		if (off_ == *last_ + 1)                                                         \
			(*((is_write) ? &(t)->consec_writes : &(t)->consec_reads))++;           \
		*last_ = off_ + ret_ - 1;                                                       \
		if (*max_ < off_ + ret_ - 1)                                                    \
			*max_ = off_ + ret_ - 1;                                                \
		if ((t)->last_io != 0 && (t)->last_io != type_)                                 \
			(t)->rw_switches++;                                                     \
		(t)->last_io = type_;                                                           \
	} while (0)

#endif /* IOLENS_WORKLOAD_UTIL_H */
