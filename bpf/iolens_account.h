/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Darshan's POSIX counter rules as plain C, compiled twice: into the kernel programs (where every
 * traced call updates its (process, file) record in place) and into the agent's unit tests (which
 * check the rules without a kernel). One implementation, so the tests prove what the kernel runs.
 *
 * The rules follow darshan-runtime/lib/darshan-posix.c (POSIX_RECORD_READ/WRITE, _POSIX_RECORD_OPEN,
 * close, lseek, fsync) and darshan-common.h (DARSHAN_BUCKET_INC, DARSHAN_TIMER_INC_NO_OVERLAP);
 * docs/counters.md states each one. Differences from Darshan, on purpose:
 *  - the offset of read/write is the kernel's real file position, not Darshan's per-record guess
 *    (Darshan shares one offset between every fd of a path, so two fds on one file confuse it);
 *  - a call whose end precedes the record's last end adds 0 time, never a negative amount.
 *
 * Counts and sums use atomic adds: threads of one process can hit one record at once (tracing
 * programs cannot take bpf_spin_lock). The pattern fields (last byte, max, first/last times) are
 * plain stores; concurrent calls on one record can race there, as they do in Darshan.
 */
#ifndef IOLENS_ACCOUNT_H
#define IOLENS_ACCOUNT_H

#include "iolens_abi.h"

#ifndef IOLENS_INLINE
#define IOLENS_INLINE static inline __attribute__((always_inline))
#endif

#define IOLENS_ADD(ptr, val) __sync_fetch_and_add((ptr), (val))

/*
 * Where iolens_account_rw gets its buckets. The kernel programs make these calls of global
 * functions, whose result the verifier does not know: it then walks the rest of the accounting
 * once for all buckets instead of once per bucket value. User space uses the inline functions.
 */
#ifndef IOLENS_SIZE_BUCKET
#define IOLENS_SIZE_BUCKET(size) iolens_size_bucket(size)
#endif
#ifndef IOLENS_LAT_BUCKET
#define IOLENS_LAT_BUCKET(ns) iolens_lat_bucket(ns)
#endif
#ifndef IOLENS_ALIGN_BUCKET
#define IOLENS_ALIGN_BUCKET(offset) iolens_align_bucket(offset)
#endif
#ifndef IOLENS_TALLY
#define IOLENS_TALLY(tally, v) iolens_tally_add(tally, v)
#endif
/*
 * Where a value `v` that found the slots of tally `t` full goes: to the record's side entry
 * (struct iolens_tally_more: `which` is IOLENS_SIDE_ACCESS or IOLENS_SIDE_STRIDE), through the
 * caller's `side` (the kernel: its call's context, which has the record's key; user space:
 * core::account_rw's FileCounters). By default, or with `side` 0, none: untallied.
 */
#define IOLENS_SIDE_ACCESS 0
#define IOLENS_SIDE_STRIDE 1
#ifndef IOLENS_TALLY_SIDE
#define IOLENS_TALLY_SIDE(side, t, which, v) ((void)(side), IOLENS_ADD(&(t)->untallied, 1))
#endif

/*
 * One call of value `v` into a tally (struct iolens_tally in iolens_abi.h), as Darshan's
 * darshan_track_common_val_counters does into its tree: a value already held counts once more;
 * a new one takes the first free slot. Returns 1, counting nothing, when all slots are taken
 * by other values: the caller goes on to the record's side entry (struct iolens_tally_more).
 * Slots are claimed by compare-and-swap so that two threads with a new value each never take
 * one slot, and fill in order, so a value is never held twice. A slot holds `key` = v + 1 (0
 * marks a free one; v, the bytes of one call or a gap between two 64-bit offsets, is below
 * 2^64 - 1). `n` is IOLENS_TALLY_SLOTS or IOLENS_TALLY_MORE_SLOTS: a side tally has the same
 * layout with more slots.
 */
IOLENS_INLINE int iolens_tally_slots_add(__u64 *value, __u64 *count, int n, __u64 key)
{
	int i;

	for (i = 0; i < n; i++) {
		__u64 held = value[i];

		if (held == 0)
			held = __sync_val_compare_and_swap(&value[i], 0, key);
		if (held == 0 || held == key) {
			IOLENS_ADD(&count[i], 1);
			return 0;
		}
	}
	return 1;
}

IOLENS_INLINE int iolens_tally_add(struct iolens_tally *t, __u64 v)
{
	return iolens_tally_slots_add(t->value, t->count, IOLENS_TALLY_SLOTS, v + 1);
}

/*
 * The offset_lsb bucket of a read or write at `offset` (IOLENS_NR_ALIGN_BUCKETS in
 * iolens_abi.h): 0 when the offset is not a multiple of 512, k when its lowest set bit is
 * 2^(8+k); IOLENS_NR_ALIGN_BUCKETS (no bucket) for offset 0, a multiple of 16 MiB, or a negative
 * offset (none known). No loop: a binary search over the isolated bit.
 */
IOLENS_INLINE __u32 iolens_align_bucket(__s64 offset)
{
	__u64 low;
	__u32 b = 1;

	if (offset <= 0)
		return IOLENS_NR_ALIGN_BUCKETS;
	low = (__u64)offset & (~(__u64)offset + 1);
	if (low < (1ULL << IOLENS_ALIGN_MIN_SHIFT))
		return 0;
	if (low >= (1ULL << IOLENS_ALIGN_MAX_SHIFT))
		return IOLENS_NR_ALIGN_BUCKETS;
	/* low = 2^(8 + b) with b in 1..15 */
	if (low >= (1ULL << 17)) {
		b += 8;
		low >>= 8;
	}
	if (low >= (1ULL << 13)) {
		b += 4;
		low >>= 4;
	}
	if (low >= (1ULL << 11)) {
		b += 2;
		low >>= 2;
	}
	if (low >= (1ULL << 10))
		b += 1;
	return b;
}

/* Darshan's DARSHAN_BUCKET_INC: inclusive upper bounds 100, 1K, 10K, 100K, 1M, 4M, 10M, 100M, 1G. */
IOLENS_INLINE __u32 iolens_size_bucket(__u64 size)
{
	if (size <= 100)
		return 0;
	if (size <= 1024)
		return 1;
	if (size <= 10240)
		return 2;
	if (size <= 102400)
		return 3;
	if (size <= 1048576)
		return 4;
	if (size <= 4194304)
		return 5;
	if (size <= 10485760)
		return 6;
	if (size <= 104857600)
		return 7;
	if (size <= 1073741824)
		return 8;
	return 9;
}

/*
 * Latency bucket of one call of `ns` = t1 - t0 nanoseconds: inclusive upper bounds 1us, 4us, 16us,
 * 64us, 256us, 1ms, 4ms, 16ms, 64ms, 256ms, 1s (powers of 4 from 1 us), then above 1 s.
 * Powers of 4 keep 12 buckets across six decades, from a page-cache hit to a stalled NFS read; the
 * same bounds are kLatencyBoundsNs in agent/core/counters.hpp.
 */
IOLENS_INLINE __u32 iolens_lat_bucket(__u64 ns)
{
	if (ns <= 1000)
		return 0;
	if (ns <= 4000)
		return 1;
	if (ns <= 16000)
		return 2;
	if (ns <= 64000)
		return 3;
	if (ns <= 256000)
		return 4;
	if (ns <= 1000000)
		return 5;
	if (ns <= 4000000)
		return 6;
	if (ns <= 16000000)
		return 7;
	if (ns <= 64000000)
		return 8;
	if (ns <= 256000000)
		return 9;
	if (ns <= 1000000000)
		return 10;
	return 11;
}

/*
 * Size bucket of a block request of `bytes`: inclusive upper bounds 4K, 16K, 64K, 256K, 1M, 4M,
 * 16M (powers of 4 from a page), then above 16 MiB: requests are pages to a few MiB, where
 * Darshan's call-size bounds (100 B, 1K, 10K) would leave most buckets empty.
 */
IOLENS_INLINE __u32 iolens_blk_size_bucket(__u64 bytes)
{
	__u64 bound = 4096;
	__u32 i;

	for (i = 0; i < IOLENS_NR_BLK_SIZE_BUCKETS - 1; i++, bound <<= 2)
		if (bytes <= bound)
			return i;
	return IOLENS_NR_BLK_SIZE_BUCKETS - 1;
}

/*
 * DARSHAN_TIMER_INC_NO_OVERLAP: time of calls on one record that overlap (threads) is counted once.
 * A call with an unknown start (t0 == 0: its sys_enter was not seen) adds no time.
 */
IOLENS_INLINE void iolens_time_no_overlap(__u64 *timer, __u64 t0, __u64 t1, __u64 *last_end)
{
	if (t0 == 0 || t1 < t0)
		return;
	if (t0 > *last_end)
		IOLENS_ADD(timer, t1 - t0);
	else if (t1 > *last_end)
		IOLENS_ADD(timer, t1 - *last_end);
	if (t1 > *last_end)
		*last_end = t1;
}

/* Darshan's start timestamps keep the smallest non-zero start; end timestamps the last call's end. */
IOLENS_INLINE void iolens_mark_start(__u64 *start, __u64 t0)
{
	if (t0 != 0 && (*start == 0 || *start > t0))
		*start = t0;
}

IOLENS_INLINE void iolens_init_counters(struct iolens_file_counters *c)
{
	c->max_byte_read = -1;
	c->max_byte_written = -1;
}

/*
 * One read (is_write = 0) or write (is_write = 1) that returned `ret` >= 0 bytes at file offset
 * `offset`, entered at t0 and returned at t1. Calls returning < 0 are not counted (Darshan).
 * `with_tallies`: also tally its size and stride (0 for the records of pipes, sockets and
 * ttys, whose tallies nothing reports: their calls skip that work). A value that finds the
 * record's slots full goes to IOLENS_TALLY_SIDE with `side`.
 */
IOLENS_INLINE void iolens_account_rw_tally(struct iolens_file_counters *c, int is_write,
					   __s64 offset, __s64 ret, __u64 t0, __u64 t1, int with_tallies,
					   void *side)
{
	__s64 *last_byte = is_write ? &c->last_byte_written : &c->last_byte_read;
	__s64 *max_byte = is_write ? &c->max_byte_written : &c->max_byte_read;
	__u64 elapsed = (t0 != 0 && t1 >= t0) ? t1 - t0 : 0;
	__u32 this_type = is_write ? IOLENS_IO_WRITE : IOLENS_IO_READ;
	__u64 stride = 0;
	__u32 bucket;

	if (ret < 0)
		return;
	/* Darshan's stride: from the end of the last access of this direction (exclusive) to this
	 * offset; 0 after an open or close (last byte 0), and when not forward. In unsigned
	 * arithmetic: a replayed trace's offsets can be anything, and the gap then still fits. */
	if (offset > 0 && offset > *last_byte && *last_byte != 0)
		stride = (__u64)offset - (__u64)*last_byte - 1;
	/* The value a record saw first is nearly always the one it sees again (a loop's size,
	 * stride 0): checked here, without the call and loop of IOLENS_TALLY (~40 ns a call,
	 * bench/README.md "Issue 19: common access sizes and strides") */
	if (with_tallies) {
		if (c->stride.value[0] == stride + 1)
			IOLENS_ADD(&c->stride.count[0], 1);
		else if (IOLENS_TALLY(&c->stride, stride))
			IOLENS_TALLY_SIDE(side, &c->stride, IOLENS_SIDE_STRIDE, stride);
		if (c->access.value[0] == (__u64)ret + 1)
			IOLENS_ADD(&c->access.count[0], 1);
		else if (IOLENS_TALLY(&c->access, (__u64)ret))
			IOLENS_TALLY_SIDE(side, &c->access, IOLENS_SIDE_ACCESS, (__u64)ret);
	}
	if (is_write) {
		IOLENS_ADD(&c->writes, 1);
		IOLENS_ADD(&c->bytes_written, (__u64)ret);
	} else {
		IOLENS_ADD(&c->reads, 1);
		IOLENS_ADD(&c->bytes_read, (__u64)ret);
	}
	if (offset > *last_byte)
		IOLENS_ADD(is_write ? &c->seq_writes : &c->seq_reads, 1);
	if (offset == *last_byte + 1)
		IOLENS_ADD(is_write ? &c->consec_writes : &c->consec_reads, 1);
	*last_byte = offset + ret - 1;
	if (*max_byte < offset + ret - 1)
		*max_byte = offset + ret - 1;

	if (c->last_io_type != IOLENS_IO_NONE && c->last_io_type != this_type)
		IOLENS_ADD(&c->rw_switches, 1);
	if (c->first_io_type == IOLENS_IO_NONE)
		c->first_io_type = this_type;
	c->last_io_type = this_type;

	/* Darshan's FILE_NOT_ALIGNED looks at the offset of every counted call, 0 bytes included:
	 * kept by its lowest set bit, for an alignment known only in user space */
	bucket = IOLENS_ALIGN_BUCKET(offset);
	if (bucket < IOLENS_NR_ALIGN_BUCKETS)
		IOLENS_ADD(&c->offset_lsb[bucket], 1);

	bucket = IOLENS_SIZE_BUCKET((__u64)ret);
	/* The explicit bound lets the verifier see the index is in range. */
	if (bucket < IOLENS_NR_SIZE_BUCKETS) {
		if (is_write)
			IOLENS_ADD(&c->size_write[bucket], 1);
		else
			IOLENS_ADD(&c->size_read[bucket], 1);
	}

	/*
	 * Latency histogram: every counted call, its full duration (no overlap removed, so the sum
	 * can exceed read_time_ns/write_time_ns). A call whose entry was not seen (t0 == 0) has
	 * elapsed 0 and lands in the first bucket, so that the buckets always add up to the calls.
	 * A call not timed at all (timing off: t1 == 0) is in no bucket: its latency is unknown.
	 */
	bucket = IOLENS_LAT_BUCKET(elapsed);
	/* Same explicit bound as above, for the verifier. */
	if (t1 != 0 && bucket < IOLENS_NR_LAT_BUCKETS) {
		if (is_write) {
			IOLENS_ADD(&c->lat_write[bucket], 1);
			IOLENS_ADD(&c->lat_write_sum_ns, elapsed);
		} else {
			IOLENS_ADD(&c->lat_read[bucket], 1);
			IOLENS_ADD(&c->lat_read_sum_ns, elapsed);
		}
	}

	if (is_write) {
		iolens_mark_start(&c->write_start_ns, t0);
		c->write_end_ns = t1;
		iolens_time_no_overlap(&c->write_time_ns, t0, t1, &c->last_write_end_ns);
		if (elapsed > c->max_write_time_ns) {
			c->max_write_time_ns = elapsed;
			c->max_write_time_size = (__u64)ret;
		}
	} else {
		iolens_mark_start(&c->read_start_ns, t0);
		c->read_end_ns = t1;
		iolens_time_no_overlap(&c->read_time_ns, t0, t1, &c->last_read_end_ns);
		if (elapsed > c->max_read_time_ns) {
			c->max_read_time_ns = elapsed;
			c->max_read_time_size = (__u64)ret;
		}
	}
}

/* iolens_account_rw_tally of a regular file's call: every counter, the tallies too (a value
 * that finds the slots full is untallied: no side entry). */
IOLENS_INLINE void iolens_account_rw(struct iolens_file_counters *c, int is_write, __s64 offset,
				     __s64 ret, __u64 t0, __u64 t1)
{
	iolens_account_rw_tally(c, is_write, offset, ret, t0, t1, 1, (void *)0);
}

/* A successful open (is_dup = 0) or dup (is_dup = 1). Opens reset the pattern state; dups don't. */
IOLENS_INLINE void iolens_account_open(struct iolens_file_counters *c, int is_dup, __u64 t0,
				       __u64 t1)
{
	IOLENS_ADD(&c->opens, 1);
	IOLENS_ADD(&c->open_fds, 1);
	if (is_dup) {
		IOLENS_ADD(&c->dups, 1);
	} else {
		c->last_byte_read = 0;
		c->last_byte_written = 0;
	}
	iolens_mark_start(&c->open_start_ns, t0);
	c->open_end_ns = t1;
	iolens_time_no_overlap(&c->meta_time_ns, t0, t1, &c->last_meta_end_ns);
}

/* A close of a descriptor of this record. Darshan resets the pattern state whatever close returned. */
IOLENS_INLINE void iolens_account_close(struct iolens_file_counters *c, __s64 ret, __u64 t0,
					__u64 t1)
{
	if (ret == 0)
		IOLENS_ADD(&c->closes, 1);
	IOLENS_ADD(&c->open_fds, -1);
	c->last_byte_read = 0;
	c->last_byte_written = 0;
	iolens_mark_start(&c->close_start_ns, t0);
	c->close_end_ns = t1;
	iolens_time_no_overlap(&c->meta_time_ns, t0, t1, &c->last_meta_end_ns);
}

/*
 * Beside iolens_account_rw, for the same call: its user buffer was not aligned to
 * IOLENS_MEM_ALIGNMENT bytes (a vector call: any iov_base). Darshan counts a call once, and only
 * a successful one.
 */
IOLENS_INLINE void iolens_account_mem_unaligned(struct iolens_file_counters *c, __s64 ret)
{
	if (ret >= 0)
		IOLENS_ADD(&c->mem_not_aligned, 1);
}

/*
 * Beside iolens_account_open, for an open (not a dup): the mode argument of an open that may
 * create a file (O_CREAT, creat), else 0. A non-zero one replaces the record's: Darshan keeps
 * the last non-zero mode it saw.
 */
IOLENS_INLINE void iolens_account_mode(struct iolens_file_counters *c, __u64 mode)
{
	if (mode)
		c->mode = mode;
}

enum iolens_meta_op {
	IOLENS_META_SEEK = 1,
	IOLENS_META_STAT,
	IOLENS_META_MMAP,
	IOLENS_META_FSYNC,
	IOLENS_META_FDSYNC,
	IOLENS_META_TRUNCATE,
};

/* A successful metadata call. fsync/fdatasync time is write time and mmap has none (Darshan). */
IOLENS_INLINE void iolens_account_meta(struct iolens_file_counters *c, int op, __u64 t0, __u64 t1)
{
	switch (op) {
	case IOLENS_META_SEEK:
		IOLENS_ADD(&c->seeks, 1);
		break;
	case IOLENS_META_STAT:
		IOLENS_ADD(&c->stats, 1);
		break;
	case IOLENS_META_MMAP:
		IOLENS_ADD(&c->mmaps, 1);
		return;
	case IOLENS_META_FSYNC:
	case IOLENS_META_FDSYNC:
		IOLENS_ADD(op == IOLENS_META_FSYNC ? &c->fsyncs : &c->fdsyncs, 1);
		iolens_time_no_overlap(&c->write_time_ns, t0, t1, &c->last_write_end_ns);
		return;
	case IOLENS_META_TRUNCATE:
		IOLENS_ADD(&c->truncates, 1);
		break;
	default:
		return;
	}
	iolens_mark_start(&c->meta_start_ns, t0);
	c->meta_end_ns = t1;
	iolens_time_no_overlap(&c->meta_time_ns, t0, t1, &c->last_meta_end_ns);
}

#endif /* IOLENS_ACCOUNT_H */
