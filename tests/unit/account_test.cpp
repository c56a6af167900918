// SPDX-License-Identifier: Apache-2.0
/*
 * The Darshan POSIX counter rules of bpf/iolens_account.h, checked without a kernel: the same C
 * the kernel programs run. Every expectation is a number computed by hand from the rules stated
 * in docs/counters.md (darshan-runtime/lib/darshan-posix.c, darshan-common.h), never the result
 * of another call of the code under test.
 */
#include <gtest/gtest.h>

#include <cstdint>

#include "core/counters.hpp"
#include "iolens_account.h"

namespace {

constexpr int kRead = 0;
constexpr int kWrite = 1;

/* A record as the kernel creates it: zeroed, then iolens_init_counters. */
struct iolens_file_counters fresh()
{
	struct iolens_file_counters c = {};

	iolens_init_counters(&c);
	return c;
}

void open_file(struct iolens_file_counters *c, __u64 t0 = 1, __u64 t1 = 2)
{
	iolens_account_open(c, 0, t0, t1);
}

/* A data call without timing: t0 = 0, so no time is added and no start timestamp is set. */
void rd(struct iolens_file_counters *c, __s64 off, __s64 ret)
{
	iolens_account_rw(c, kRead, off, ret, 0, 0);
}

void wr(struct iolens_file_counters *c, __s64 off, __s64 ret)
{
	iolens_account_rw(c, kWrite, off, ret, 0, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Fresh record                                                                               */

TEST(AccountInit, FreshRecordIsZeroExceptMaxBytes)
{
	struct iolens_file_counters c = fresh();

	EXPECT_EQ(c.max_byte_read, -1);
	EXPECT_EQ(c.max_byte_written, -1);
	EXPECT_EQ(c.opens, 0u);
	EXPECT_EQ(c.reads, 0u);
	EXPECT_EQ(c.last_byte_read, 0);
	EXPECT_EQ(c.last_byte_written, 0);
	EXPECT_EQ(c.last_io_type, (__u32)IOLENS_IO_NONE);
	EXPECT_EQ(c.first_io_type, (__u32)IOLENS_IO_NONE);
}

/* ------------------------------------------------------------------------------------------ */
/* Sequential / consecutive                                                                   */

TEST(AccountPattern, FrontToBackReadOfNChunksGivesNMinus1SeqAndConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	for (__s64 i = 0; i < 8; i++)
		rd(&c, i * 4096, 4096);
	EXPECT_EQ(c.reads, 8u);
	EXPECT_EQ(c.seq_reads, 7u);
	EXPECT_EQ(c.consec_reads, 7u);
	EXPECT_EQ(c.bytes_read, 32768u);
	EXPECT_EQ(c.max_byte_read, 32767);
	EXPECT_EQ(c.last_byte_read, 32767);
	EXPECT_EQ(c.size_read[2], 8u); /* 4096 is in (1024, 10240] */
	/* Nothing leaks into the write side. */
	EXPECT_EQ(c.writes, 0u);
	EXPECT_EQ(c.seq_writes, 0u);
	EXPECT_EQ(c.consec_writes, 0u);
	EXPECT_EQ(c.max_byte_written, -1);
}

TEST(AccountPattern, FrontToBackWriteOfNChunksGivesNMinus1SeqAndConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	for (__s64 i = 0; i < 5; i++)
		wr(&c, i * 1048576, 1048576);
	EXPECT_EQ(c.writes, 5u);
	EXPECT_EQ(c.seq_writes, 4u);
	EXPECT_EQ(c.consec_writes, 4u);
	EXPECT_EQ(c.bytes_written, 5242880u);
	EXPECT_EQ(c.max_byte_written, 5242879);
	EXPECT_EQ(c.size_write[4], 5u); /* 1 MiB is in (100K, 1M] */
	EXPECT_EQ(c.reads, 0u);
	EXPECT_EQ(c.max_byte_read, -1);
}

TEST(AccountPattern, FirstAccessAtOffset0AfterOpenIsNeitherSeqNorConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 10);
	EXPECT_EQ(c.seq_reads, 0u);
	EXPECT_EQ(c.consec_reads, 0u);
	EXPECT_EQ(c.last_byte_read, 9);

	wr(&c, 0, 10);
	EXPECT_EQ(c.seq_writes, 0u);
	EXPECT_EQ(c.consec_writes, 0u);
}

TEST(AccountPattern, FirstAccessAtOffset1AfterOpenIsSeqAndConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 1, 10); /* 1 > 0 and 1 == 0 + 1 */
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 1u);

	wr(&c, 1, 10);
	EXPECT_EQ(c.seq_writes, 1u);
	EXPECT_EQ(c.consec_writes, 1u);
}

TEST(AccountPattern, FirstAccessAtOffset2AfterOpenIsSeqOnly)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 2, 10);
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 0u);
}

TEST(AccountPattern, BackwardReadIsNeitherSeqNorConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 8192, 4096); /* 8192 > 0: seq; != 1: not consec; last = 12287 */
	rd(&c, 4096, 4096); /* 4096 <= 12287: neither; last = 8191 */
	rd(&c, 0, 4096);    /* 0 <= 8191: neither; last = 4095 */
	EXPECT_EQ(c.reads, 3u);
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 0u);
	EXPECT_EQ(c.max_byte_read, 12287);
	EXPECT_EQ(c.last_byte_read, 4095);
}

TEST(AccountPattern, RandomReads)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 100, 10);   /* 100 > 0 seq; last 109 */
	rd(&c, 50000, 10); /* seq; last 50009 */
	rd(&c, 20, 10);    /* neither; last 29 */
	rd(&c, 70000, 10); /* seq; last 70009 */
	rd(&c, 30, 10);    /* neither; last 39 */
	rd(&c, 40, 10);    /* 40 == 39 + 1: seq and consec; last 49 */
	EXPECT_EQ(c.reads, 6u);
	EXPECT_EQ(c.seq_reads, 4u);
	EXPECT_EQ(c.consec_reads, 1u);
	EXPECT_EQ(c.max_byte_read, 70009);
	EXPECT_EQ(c.bytes_read, 60u);
}

TEST(AccountPattern, StridedReadsAreSeqButNotConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	/* 100 bytes every 200: 0, 200, 400, 600, 800 */
	for (__s64 i = 0; i < 5; i++)
		rd(&c, i * 200, 100);
	EXPECT_EQ(c.seq_reads, 4u);
	EXPECT_EQ(c.consec_reads, 0u);
	EXPECT_EQ(c.max_byte_read, 899);
	EXPECT_EQ(c.bytes_read, 500u);
}

TEST(AccountPattern, StridedWritesAreSeqButNotConsec)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	wr(&c, 4096, 512);  /* seq (4096 > 0); last 4607 */
	wr(&c, 8192, 512);  /* seq; last 8703 */
	wr(&c, 12288, 512); /* seq; last 12799 */
	EXPECT_EQ(c.seq_writes, 3u);
	EXPECT_EQ(c.consec_writes, 0u);
	EXPECT_EQ(c.max_byte_written, 12799);
}

TEST(AccountPattern, ReadAndWriteKeepSeparateLastBytes)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 100);   /* last_byte_read 99 */
	wr(&c, 100, 100); /* compared with last_byte_written = 0: seq, not consec */
	rd(&c, 100, 50);  /* compared with last_byte_read = 99: seq and consec */
	wr(&c, 200, 10);  /* last_byte_written 199: seq and consec */
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 1u);
	EXPECT_EQ(c.seq_writes, 2u);
	EXPECT_EQ(c.consec_writes, 1u);
	EXPECT_EQ(c.last_byte_read, 149);
	EXPECT_EQ(c.last_byte_written, 209);
	EXPECT_EQ(c.max_byte_read, 149);
	EXPECT_EQ(c.max_byte_written, 209);
}

/* ------------------------------------------------------------------------------------------ */
/* Zero-byte and failed calls                                                                 */

TEST(AccountZeroAndFailed, ZeroByteReadAtEofCounts)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 100);  /* last 99 */
	rd(&c, 100, 0);  /* EOF: 100 > 99 seq, 100 == 99 + 1 consec; last = 100 + 0 - 1 = 99 */
	rd(&c, 100, 0);  /* same again */
	EXPECT_EQ(c.reads, 3u);
	EXPECT_EQ(c.bytes_read, 100u);
	EXPECT_EQ(c.seq_reads, 2u);
	EXPECT_EQ(c.consec_reads, 2u);
	EXPECT_EQ(c.last_byte_read, 99);
	EXPECT_EQ(c.max_byte_read, 99);
	EXPECT_EQ(c.size_read[0], 3u); /* 100 and 0 and 0 all in [0, 100] */
	for (int b = 1; b < IOLENS_NR_SIZE_BUCKETS; b++)
		EXPECT_EQ(c.size_read[b], 0u) << "bucket " << b;
}

TEST(AccountZeroAndFailed, ZeroByteReadOfEmptyFile)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 0); /* last_byte_read = -1; max stays "none" */
	EXPECT_EQ(c.reads, 1u);
	EXPECT_EQ(c.bytes_read, 0u);
	EXPECT_EQ(c.seq_reads, 0u);
	EXPECT_EQ(c.consec_reads, 0u);
	EXPECT_EQ(c.last_byte_read, -1);
	EXPECT_EQ(c.max_byte_read, -1);
	EXPECT_EQ(c.size_read[0], 1u);
	EXPECT_EQ(c.last_io_type, (__u32)IOLENS_IO_READ);

	rd(&c, 0, 0); /* 0 > -1: seq; 0 == -1 + 1: consec */
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 1u);
	EXPECT_EQ(c.max_byte_read, -1);
}

TEST(AccountZeroAndFailed, ZeroByteWriteCounts)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	iolens_account_rw(&c, kWrite, 50, 0, 10, 30); /* 50 > 0 seq; last 49; max 49 */
	EXPECT_EQ(c.writes, 1u);
	EXPECT_EQ(c.bytes_written, 0u);
	EXPECT_EQ(c.seq_writes, 1u);
	EXPECT_EQ(c.consec_writes, 0u);
	EXPECT_EQ(c.max_byte_written, 49);
	EXPECT_EQ(c.size_write[0], 1u);
	EXPECT_EQ(c.write_time_ns, 20u);
	EXPECT_EQ(c.max_write_time_ns, 20u);
	EXPECT_EQ(c.max_write_time_size, 0u);
}

TEST(AccountZeroAndFailed, FailedReadAndWriteAreIgnored)
{
	struct iolens_file_counters c = fresh();

	open_file(&c, 1, 2);
	iolens_account_rw(&c, kRead, 100, -11, 10, 20);   /* EAGAIN */
	iolens_account_rw(&c, kWrite, 100, -28, 30, 40);  /* ENOSPC */
	iolens_account_rw(&c, kRead, 0, -1, 50, 1000);    /* EPERM, slow */
	EXPECT_EQ(c.reads, 0u);
	EXPECT_EQ(c.writes, 0u);
	EXPECT_EQ(c.bytes_read, 0u);
	EXPECT_EQ(c.bytes_written, 0u);
	EXPECT_EQ(c.seq_reads, 0u);
	EXPECT_EQ(c.seq_writes, 0u);
	EXPECT_EQ(c.max_byte_read, -1);
	EXPECT_EQ(c.max_byte_written, -1);
	EXPECT_EQ(c.last_byte_read, 0);
	EXPECT_EQ(c.last_byte_written, 0);
	EXPECT_EQ(c.rw_switches, 0u);
	EXPECT_EQ(c.last_io_type, (__u32)IOLENS_IO_NONE);
	EXPECT_EQ(c.first_io_type, (__u32)IOLENS_IO_NONE);
	for (int b = 0; b < IOLENS_NR_SIZE_BUCKETS; b++) {
		EXPECT_EQ(c.size_read[b], 0u) << "bucket " << b;
		EXPECT_EQ(c.size_write[b], 0u) << "bucket " << b;
	}
	EXPECT_EQ(c.read_time_ns, 0u);
	EXPECT_EQ(c.write_time_ns, 0u);
	EXPECT_EQ(c.max_read_time_ns, 0u);
	EXPECT_EQ(c.max_write_time_ns, 0u);
	EXPECT_EQ(c.read_start_ns, 0u);
	EXPECT_EQ(c.read_end_ns, 0u);
	EXPECT_EQ(c.write_start_ns, 0u);
	EXPECT_EQ(c.write_end_ns, 0u);
	EXPECT_EQ(c.last_read_end_ns, 0u);
	EXPECT_EQ(c.last_write_end_ns, 0u);
	for (int b = 0; b < IOLENS_NR_LAT_BUCKETS; b++) {
		EXPECT_EQ(c.lat_read[b], 0u) << "bucket " << b;
		EXPECT_EQ(c.lat_write[b], 0u) << "bucket " << b;
	}
	EXPECT_EQ(c.lat_read_sum_ns, 0u);
	EXPECT_EQ(c.lat_write_sum_ns, 0u);

	/* The failed read at 100 did not move last_byte_read: offset 1 is still consecutive. */
	rd(&c, 1, 10);
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 1u);
}

/* ------------------------------------------------------------------------------------------ */
/* Size buckets                                                                               */

struct BucketCase {
	__u64 size;
	__u32 bucket;
};

/* Darshan's DARSHAN_BUCKET_INC: inclusive upper bounds. */
constexpr BucketCase kBuckets[] = {
	{0, 0},
	{1, 0},
	{100, 0},
	{101, 1},
	{1024, 1},
	{1025, 2},
	{10240, 2},
	{10241, 3},
	{102400, 3},
	{102401, 4},
	{1048576, 4},
	{1048577, 5},
	{4194304, 5},
	{4194305, 6},
	{10485760, 6},
	{10485761, 7},
	{104857600, 7},
	{104857601, 8},
	{1073741824, 8},
	{1073741825, 9},
	{4294967296ULL, 9},
};

TEST(AccountBuckets, BucketFunctionBoundaries)
{
	for (const BucketCase &bc : kBuckets)
		EXPECT_EQ(iolens_size_bucket(bc.size), bc.bucket) << "size " << bc.size;
}

TEST(AccountBuckets, EveryReadBoundaryLandsInItsBucket)
{
	for (const BucketCase &bc : kBuckets) {
		struct iolens_file_counters c = fresh();

		open_file(&c);
		rd(&c, 0, (__s64)bc.size);
		for (__u32 b = 0; b < IOLENS_NR_SIZE_BUCKETS; b++) {
			EXPECT_EQ(c.size_read[b], b == bc.bucket ? 1u : 0u)
				<< "read size " << bc.size << " bucket " << b;
			EXPECT_EQ(c.size_write[b], 0u) << "read size " << bc.size << " bucket " << b;
		}
		EXPECT_EQ(c.bytes_read, bc.size);
		EXPECT_EQ(c.max_byte_read, (__s64)bc.size - 1);
	}
}

TEST(AccountBuckets, EveryWriteBoundaryLandsInItsBucket)
{
	for (const BucketCase &bc : kBuckets) {
		struct iolens_file_counters c = fresh();

		open_file(&c);
		wr(&c, 0, (__s64)bc.size);
		for (__u32 b = 0; b < IOLENS_NR_SIZE_BUCKETS; b++) {
			EXPECT_EQ(c.size_write[b], b == bc.bucket ? 1u : 0u)
				<< "write size " << bc.size << " bucket " << b;
			EXPECT_EQ(c.size_read[b], 0u) << "write size " << bc.size << " bucket " << b;
		}
		EXPECT_EQ(c.bytes_written, bc.size);
		EXPECT_EQ(c.max_byte_written, (__s64)bc.size - 1);
	}
}

TEST(AccountBuckets, AllBoundariesIntoOneRecord)
{
	struct iolens_file_counters c = fresh();
	/* counts per bucket of kBuckets: 0,1,100 | 101,1024 | 1025,10240 | ... | 1073741825,4G */
	const __u64 expect[IOLENS_NR_SIZE_BUCKETS] = {3, 2, 2, 2, 2, 2, 2, 2, 2, 2};
	__s64 off = 0;

	open_file(&c);
	for (const BucketCase &bc : kBuckets) {
		rd(&c, off, (__s64)bc.size);
		wr(&c, off, (__s64)bc.size);
		off += (__s64)bc.size;
	}
	for (int b = 0; b < IOLENS_NR_SIZE_BUCKETS; b++) {
		EXPECT_EQ(c.size_read[b], expect[b]) << "bucket " << b;
		EXPECT_EQ(c.size_write[b], expect[b]) << "bucket " << b;
	}
	EXPECT_EQ(c.reads, 21u);
	EXPECT_EQ(c.writes, 21u);
	/* sum of the sizes above */
	EXPECT_EQ(c.bytes_read, 6683850962ULL);
	EXPECT_EQ(c.bytes_written, 6683850962ULL);
	EXPECT_EQ(c.max_byte_read, 6683850961LL);
}

/* ------------------------------------------------------------------------------------------ */
/* Latency buckets                                                                            */

struct LatCase {
	__u64 ns;
	__u32 bucket;
};

/* Inclusive upper bounds 1us, 4us, 16us, ..., 1s (powers of 4 from 1 us), then above 1 s:
 * every bound exactly, and one nanosecond above it. */
constexpr LatCase kLatBuckets[] = {
	{0, 0},
	{1, 0},
	{1000, 0},
	{1001, 1},
	{4000, 1},
	{4001, 2},
	{16000, 2},
	{16001, 3},
	{64000, 3},
	{64001, 4},
	{256000, 4},
	{256001, 5},
	{1000000, 5},
	{1000001, 6},
	{4000000, 6},
	{4000001, 7},
	{16000000, 7},
	{16000001, 8},
	{64000000, 8},
	{64000001, 9},
	{256000000, 9},
	{256000001, 10},
	{1000000000, 10},
	{1000000001, 11},
	{3600000000000ULL, 11},
	{~0ULL, 11},
};

TEST(AccountLatency, BucketFunctionBoundaries)
{
	for (const LatCase &lc : kLatBuckets)
		EXPECT_EQ(iolens_lat_bucket(lc.ns), lc.bucket) << "ns " << lc.ns;
}

/* The bounds user space exports (agent/core/counters.hpp) are the ones the kernel buckets by. */
TEST(AccountLatency, UserSpaceBoundsMatchTheKernelFunction)
{
	ASSERT_EQ(iolens::core::kLatencyBoundsNs.size(), (size_t)IOLENS_NR_LAT_BUCKETS - 1);
	for (__u32 i = 0; i < iolens::core::kLatencyBoundsNs.size(); i++) {
		const __u64 bound = iolens::core::kLatencyBoundsNs[i];

		EXPECT_EQ(iolens_lat_bucket(bound), i) << "bound " << bound;
		EXPECT_EQ(iolens_lat_bucket(bound + 1), i + 1) << "bound " << bound << " + 1";
	}
}

TEST(AccountLatency, EveryReadBoundaryLandsInItsBucket)
{
	const __u64 t0 = 1000000; /* any non-zero start */

	for (const LatCase &lc : kLatBuckets) {
		if (lc.ns > ~0ULL - t0)
			continue; /* t1 would wrap */
		struct iolens_file_counters c = fresh();

		iolens_account_rw(&c, kRead, 0, 4096, t0, t0 + lc.ns);
		for (__u32 b = 0; b < IOLENS_NR_LAT_BUCKETS; b++) {
			EXPECT_EQ(c.lat_read[b], b == lc.bucket ? 1u : 0u)
				<< "read of " << lc.ns << " ns, bucket " << b;
			EXPECT_EQ(c.lat_write[b], 0u) << "read of " << lc.ns << " ns, bucket " << b;
		}
		EXPECT_EQ(c.lat_read_sum_ns, lc.ns);
		EXPECT_EQ(c.lat_write_sum_ns, 0u);
	}
}

TEST(AccountLatency, EveryWriteBoundaryLandsInItsBucket)
{
	const __u64 t0 = 1000000;

	for (const LatCase &lc : kLatBuckets) {
		if (lc.ns > ~0ULL - t0)
			continue;
		struct iolens_file_counters c = fresh();

		iolens_account_rw(&c, kWrite, 0, 4096, t0, t0 + lc.ns);
		for (__u32 b = 0; b < IOLENS_NR_LAT_BUCKETS; b++) {
			EXPECT_EQ(c.lat_write[b], b == lc.bucket ? 1u : 0u)
				<< "write of " << lc.ns << " ns, bucket " << b;
			EXPECT_EQ(c.lat_read[b], 0u) << "write of " << lc.ns << " ns, bucket " << b;
		}
		EXPECT_EQ(c.lat_write_sum_ns, lc.ns);
		EXPECT_EQ(c.lat_read_sum_ns, 0u);
	}
}

TEST(AccountLatency, HistogramAndSumsOfASequenceOfCalls)
{
	struct iolens_file_counters c = fresh();

	open_file(&c, 10, 20);
	iolens_account_rw(&c, kRead, 0, 4096, 100, 600);          /* 500 ns: bucket 0 */
	iolens_account_rw(&c, kRead, 4096, 4096, 1000, 3000);     /* 2 us: bucket 1 */
	iolens_account_rw(&c, kRead, 8192, 0, 5000, 6000);        /* 0-byte read, 1 us: bucket 0 */
	iolens_account_rw(&c, kRead, 8192, 10, 10000, 2010000);   /* 2 ms: bucket 6 */
	iolens_account_rw(&c, kRead, 0, 10, 20000000, 20000000);  /* 0 ns: bucket 0 */
	iolens_account_rw(&c, kWrite, 0, 100, 30000000, 30070000);      /* 70 us: bucket 4 */
	iolens_account_rw(&c, kWrite, 100, 100, 40000000, 1540000000);  /* 1.5 s: bucket 11 */
	/* Failed calls are not observed, however long they took. */
	iolens_account_rw(&c, kRead, 0, -5, 2000000000, 2500000000);
	iolens_account_rw(&c, kWrite, 0, -28, 3000000000, 3000000500);
	/* fsync is not a data call: not in the write histogram (but in write_time_ns). */
	iolens_account_meta(&c, IOLENS_META_FSYNC, 4000000000, 4000500000);
	iolens_account_meta(&c, IOLENS_META_FDSYNC, 5000000000, 5000000100);

	const __u64 lr[IOLENS_NR_LAT_BUCKETS] = {3, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
	const __u64 lw[IOLENS_NR_LAT_BUCKETS] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1};
	__u64 nr = 0, nw = 0;

	for (int b = 0; b < IOLENS_NR_LAT_BUCKETS; b++) {
		EXPECT_EQ(c.lat_read[b], lr[b]) << "bucket " << b;
		EXPECT_EQ(c.lat_write[b], lw[b]) << "bucket " << b;
		nr += c.lat_read[b];
		nw += c.lat_write[b];
	}
	EXPECT_EQ(nr, c.reads);
	EXPECT_EQ(nw, c.writes);
	EXPECT_EQ(c.reads, 5u);
	EXPECT_EQ(c.writes, 2u);
	EXPECT_EQ(c.fsyncs, 1u);
	EXPECT_EQ(c.fdsyncs, 1u);
	EXPECT_EQ(c.lat_read_sum_ns, 500u + 2000u + 1000u + 2000000u + 0u);
	EXPECT_EQ(c.lat_write_sum_ns, 70000u + 1500000000u);
	EXPECT_EQ(c.write_time_ns, 70000u + 1500000000u + 500000u + 100u);
}

/* Timing off (IOLENS_TIMING_OFF): sys_exit passes t0 = t1 = 0. Every count and byte is kept; no
 * time, timestamp or latency bucket moves, so the histogram is empty rather than claiming the
 * calls took under 1 us. */
TEST(AccountLatency, UntimedCallsCountButAreInNoBucket)
{
	struct iolens_file_counters c = fresh();

	iolens_account_open(&c, 0, 0, 0);
	iolens_account_rw(&c, kRead, 0, 4096, 0, 0);
	iolens_account_rw(&c, kRead, 4096, 100, 0, 0);
	iolens_account_rw(&c, kWrite, 0, 10, 0, 0);
	iolens_account_meta(&c, IOLENS_META_FSYNC, 0, 0);
	iolens_account_close(&c, 0, 0, 0);
	EXPECT_EQ(c.opens, 1u);
	EXPECT_EQ(c.reads, 2u);
	EXPECT_EQ(c.bytes_read, 4196u);
	EXPECT_EQ(c.writes, 1u);
	EXPECT_EQ(c.fsyncs, 1u);
	EXPECT_EQ(c.closes, 1u);
	EXPECT_EQ(c.consec_reads, 1u); /* offsets still follow the calls */
	for (int b = 0; b < IOLENS_NR_LAT_BUCKETS; b++) {
		EXPECT_EQ(c.lat_read[b], 0u) << "bucket " << b;
		EXPECT_EQ(c.lat_write[b], 0u) << "bucket " << b;
	}
	EXPECT_EQ(c.lat_read_sum_ns, 0u);
	EXPECT_EQ(c.lat_write_sum_ns, 0u);
	EXPECT_EQ(c.read_time_ns, 0u);
	EXPECT_EQ(c.write_time_ns, 0u);
	EXPECT_EQ(c.meta_time_ns, 0u);
	EXPECT_EQ(c.read_start_ns, 0u);
	EXPECT_EQ(c.read_end_ns, 0u);
	EXPECT_EQ(c.open_end_ns, 0u);
	EXPECT_EQ(c.close_end_ns, 0u);
}

TEST(AccountLatency, SumIncludesOverlapUnlikeReadTime)
{
	struct iolens_file_counters c = fresh();

	/* Two threads, reads [100, 300] and [200, 400]: 200 ns of wall time, 400 ns of calls. */
	iolens_account_rw(&c, kRead, 0, 10, 100, 300);
	iolens_account_rw(&c, kRead, 10, 10, 200, 400);
	EXPECT_EQ(c.read_time_ns, 300u);
	EXPECT_EQ(c.lat_read_sum_ns, 400u);
	EXPECT_EQ(c.lat_read[0], 2u);

	iolens_account_rw(&c, kWrite, 0, 10, 1000, 6000);
	iolens_account_rw(&c, kWrite, 10, 10, 2000, 3000); /* inside the first: adds 0 to the timer */
	EXPECT_EQ(c.write_time_ns, 5000u);
	EXPECT_EQ(c.lat_write_sum_ns, 6000u);
	EXPECT_EQ(c.lat_write[0], 1u);
	EXPECT_EQ(c.lat_write[2], 1u);
}

TEST(AccountLatency, UnknownStartCountsInTheFirstBucketWithNoTime)
{
	struct iolens_file_counters c = fresh();

	/* t0 == 0: the entry was not seen. Counted (the buckets add up to the calls), 0 ns. */
	iolens_account_rw(&c, kRead, 0, 10, 0, 5000000);
	iolens_account_rw(&c, kWrite, 0, 10, 0, 6000000);
	/* t1 < t0: no duration either. */
	iolens_account_rw(&c, kWrite, 0, 10, 7000000, 6000000);
	EXPECT_EQ(c.lat_read[0], 1u);
	EXPECT_EQ(c.lat_write[0], 2u);
	EXPECT_EQ(c.lat_read_sum_ns, 0u);
	EXPECT_EQ(c.lat_write_sum_ns, 0u);
}

/* ------------------------------------------------------------------------------------------ */
/* Extent                                                                                     */

TEST(AccountExtent, MaxByteIsTheHighestOffsetTouched)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	wr(&c, 1000, 10); /* 1009 */
	EXPECT_EQ(c.max_byte_written, 1009);
	wr(&c, 0, 10); /* 9 < 1009: unchanged */
	EXPECT_EQ(c.max_byte_written, 1009);
	wr(&c, 1005, 10); /* 1014 */
	EXPECT_EQ(c.max_byte_written, 1014);
	EXPECT_EQ(c.max_byte_read, -1);

	rd(&c, 5000, 1); /* byte 5000 exactly */
	EXPECT_EQ(c.max_byte_read, 5000);
	rd(&c, 0, 4096); /* 4095 */
	EXPECT_EQ(c.max_byte_read, 5000);
	EXPECT_EQ(c.max_byte_written, 1014);
}

TEST(AccountExtent, OneByteAtOffset0GivesMax0)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 1);
	EXPECT_EQ(c.max_byte_read, 0);
}

TEST(AccountExtent, LargeOffsets)
{
	struct iolens_file_counters c = fresh();
	const __s64 tib = 1099511627776LL; /* 2^40 */

	open_file(&c);
	wr(&c, tib, 4096);
	EXPECT_EQ(c.max_byte_written, 1099511631871LL);
	EXPECT_EQ(c.seq_writes, 1u);
	wr(&c, tib + 4096, 4096);
	EXPECT_EQ(c.consec_writes, 1u);
	EXPECT_EQ(c.max_byte_written, 1099511635967LL);
}

/* ------------------------------------------------------------------------------------------ */
/* Read/write switches                                                                        */

TEST(AccountSwitches, ReadWriteReadIsTwoSwitches)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 10);
	EXPECT_EQ(c.rw_switches, 0u);
	wr(&c, 10, 10);
	EXPECT_EQ(c.rw_switches, 1u);
	rd(&c, 20, 10);
	EXPECT_EQ(c.rw_switches, 2u);
	EXPECT_EQ(c.first_io_type, (__u32)IOLENS_IO_READ);
	EXPECT_EQ(c.last_io_type, (__u32)IOLENS_IO_READ);
}

TEST(AccountSwitches, RunsOfTheSameKindDoNotSwitch)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	wr(&c, 0, 10);
	wr(&c, 10, 10);
	rd(&c, 0, 10);
	rd(&c, 10, 10);
	rd(&c, 20, 10);
	wr(&c, 20, 10);
	EXPECT_EQ(c.rw_switches, 2u);
	EXPECT_EQ(c.first_io_type, (__u32)IOLENS_IO_WRITE);
	EXPECT_EQ(c.last_io_type, (__u32)IOLENS_IO_WRITE);
}

TEST(AccountSwitches, LastIoTypeSurvivesOpenAndClose)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 10);
	iolens_account_close(&c, 0, 5, 6);
	open_file(&c, 7, 8);
	wr(&c, 0, 10); /* Darshan never resets last_io_type: still a switch */
	EXPECT_EQ(c.rw_switches, 1u);
}

TEST(AccountSwitches, MetadataCallsDoNotSwitch)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 10);
	iolens_account_meta(&c, IOLENS_META_FSYNC, 10, 20);
	iolens_account_meta(&c, IOLENS_META_SEEK, 30, 40);
	rd(&c, 10, 10);
	EXPECT_EQ(c.rw_switches, 0u);
}

/* ------------------------------------------------------------------------------------------ */
/* Open, dup, close                                                                           */

TEST(AccountOpen, OpenResetsLastByteButDupDoesNot)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 100);   /* neither; last 99 */
	rd(&c, 100, 100); /* seq+consec; last 199 */
	wr(&c, 0, 50);    /* neither; last_w 49 */
	iolens_account_open(&c, 1, 3, 4); /* dup: keeps last bytes */
	EXPECT_EQ(c.last_byte_read, 199);
	EXPECT_EQ(c.last_byte_written, 49);
	rd(&c, 200, 100); /* 200 == 199 + 1: seq+consec; last 299 */
	wr(&c, 50, 50);   /* 50 == 49 + 1: seq+consec */
	EXPECT_EQ(c.seq_reads, 2u);
	EXPECT_EQ(c.consec_reads, 2u);
	EXPECT_EQ(c.seq_writes, 1u);
	EXPECT_EQ(c.consec_writes, 1u);

	open_file(&c, 5, 6); /* open: last bytes back to 0 */
	EXPECT_EQ(c.last_byte_read, 0);
	EXPECT_EQ(c.last_byte_written, 0);
	rd(&c, 300, 100); /* 300 > 0: seq; 300 != 1: not consec */
	rd(&c, 0, 100);   /* 0 <= 399: neither */
	EXPECT_EQ(c.seq_reads, 3u);
	EXPECT_EQ(c.consec_reads, 2u);

	EXPECT_EQ(c.opens, 3u); /* opens include dups (Darshan) */
	EXPECT_EQ(c.dups, 1u);
	EXPECT_EQ(c.open_fds, 3);
	/* max_byte is not reset by anything */
	EXPECT_EQ(c.max_byte_read, 399);
	EXPECT_EQ(c.max_byte_written, 99);
}

TEST(AccountOpen, OpenCountsMetaTimeAndTimestamps)
{
	struct iolens_file_counters c = fresh();

	iolens_account_open(&c, 0, 100, 130);
	iolens_account_open(&c, 1, 200, 205); /* dup */
	iolens_account_open(&c, 0, 50, 300);  /* started earlier, ended last */
	EXPECT_EQ(c.opens, 3u);
	EXPECT_EQ(c.dups, 1u);
	/* 30 + 5 + (300 - 205), overlap of the third with the second not counted twice */
	EXPECT_EQ(c.meta_time_ns, 130u);
	EXPECT_EQ(c.open_start_ns, 50u);
	EXPECT_EQ(c.open_end_ns, 300u);
	/* open timestamps are not the generic meta ones */
	EXPECT_EQ(c.meta_start_ns, 0u);
	EXPECT_EQ(c.meta_end_ns, 0u);
}

/* ------------------------------------------------------------------------------------------ */
/* Memory alignment and mode (ABI 14): darshan-posix.c, POSIX_RECORD_READ/WRITE (a successful
 * call whose buffer is not aligned counts once) and _POSIX_RECORD_OPEN (`if (mode) MODE = mode`) */

TEST(AccountAlignment, OnlySuccessfulCallsWithAnUnalignedBufferCount)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 10);
	iolens_account_mem_unaligned(&c, 10);   /* a read into buf + 3 */
	wr(&c, 10, 0);
	iolens_account_mem_unaligned(&c, 0);    /* a 0-byte write counts: it succeeded */
	rd(&c, 10, -14);
	iolens_account_mem_unaligned(&c, -14);  /* EFAULT: counts nothing */
	rd(&c, 10, 10);                         /* aligned: the kernel makes no call */
	EXPECT_EQ(c.mem_not_aligned, 2u);
	EXPECT_EQ(c.reads, 2u);
	EXPECT_EQ(c.writes, 1u);
}

TEST(AccountAlignment, ModeIsTheLastNonZeroModeOfAnOpen)
{
	struct iolens_file_counters c = fresh();

	EXPECT_EQ(c.mode, 0u);
	iolens_account_open(&c, 0, 1, 2);
	iolens_account_mode(&c, 0640);  /* open(O_CREAT, 0640) */
	EXPECT_EQ(c.mode, 0640u);
	iolens_account_open(&c, 0, 3, 4);
	iolens_account_mode(&c, 0);     /* open(O_RDONLY): the mode stays */
	EXPECT_EQ(c.mode, 0640u);
	iolens_account_open(&c, 0, 5, 6);
	iolens_account_mode(&c, 0600);  /* creat(0600) */
	EXPECT_EQ(c.mode, 0600u);
	EXPECT_EQ(c.opens, 3u);
}

TEST(AccountClose, CloseResetsLastByte)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 100);  /* last_r 99 */
	wr(&c, 0, 100);  /* last_w 99 */
	iolens_account_close(&c, 0, 10, 20);
	EXPECT_EQ(c.last_byte_read, 0);
	EXPECT_EQ(c.last_byte_written, 0);
	rd(&c, 100, 10); /* would be consecutive without the reset: 100 > 0 seq only */
	wr(&c, 100, 10);
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 0u);
	EXPECT_EQ(c.seq_writes, 1u);
	EXPECT_EQ(c.consec_writes, 0u);
	EXPECT_EQ(c.closes, 1u);
	EXPECT_EQ(c.open_fds, 0);
}

TEST(AccountClose, FailedCloseResetsAndTimesButIsNotCounted)
{
	struct iolens_file_counters c = fresh();

	open_file(&c, 1, 2);
	rd(&c, 0, 100);
	iolens_account_close(&c, -5, 10, 25); /* EIO: the descriptor is gone all the same */
	EXPECT_EQ(c.closes, 0u);
	EXPECT_EQ(c.open_fds, 0);
	EXPECT_EQ(c.last_byte_read, 0);
	EXPECT_EQ(c.meta_time_ns, 1u + 15u);
	EXPECT_EQ(c.close_start_ns, 10u);
	EXPECT_EQ(c.close_end_ns, 25u);
}

TEST(AccountClose, CloseTimestampsAndMetaTime)
{
	struct iolens_file_counters c = fresh();

	open_file(&c, 10, 20);
	iolens_account_open(&c, 1, 30, 31);
	iolens_account_close(&c, 0, 100, 110);
	iolens_account_close(&c, 0, 90, 95); /* earlier start, but the last call: end = 95 */
	EXPECT_EQ(c.closes, 2u);
	EXPECT_EQ(c.close_start_ns, 90u);
	EXPECT_EQ(c.close_end_ns, 95u);
	/* 10 + 1 + 10 + 0 (90..95 lies before the last meta end 110) */
	EXPECT_EQ(c.meta_time_ns, 21u);
	EXPECT_EQ(c.last_meta_end_ns, 110u);
}

/* ------------------------------------------------------------------------------------------ */
/* Time                                                                                       */

TEST(AccountTime, SequentialCallsSum)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kRead, 0, 10, 10, 20);
	iolens_account_rw(&c, kRead, 10, 10, 30, 45);
	iolens_account_rw(&c, kRead, 20, 10, 50, 51);
	EXPECT_EQ(c.read_time_ns, 26u); /* 10 + 15 + 1 */

	iolens_account_rw(&c, kWrite, 0, 10, 1000, 1100);
	iolens_account_rw(&c, kWrite, 10, 10, 1100, 1150); /* starts exactly at the last end */
	EXPECT_EQ(c.write_time_ns, 150u);
	EXPECT_EQ(c.read_time_ns, 26u);
}

TEST(AccountTime, OverlappingCallsOfTwoThreadsAreNotDoubleCounted)
{
	struct iolens_file_counters c = fresh();

	/* thread A reads 100..200, thread B 150..250: wall time 150, not 200 */
	iolens_account_rw(&c, kRead, 0, 10, 100, 200);
	iolens_account_rw(&c, kRead, 10, 10, 150, 250);
	EXPECT_EQ(c.read_time_ns, 150u);
	EXPECT_EQ(c.last_read_end_ns, 250u);

	iolens_account_rw(&c, kWrite, 0, 10, 1000, 2000);
	iolens_account_rw(&c, kWrite, 0, 10, 1999, 2001);
	EXPECT_EQ(c.write_time_ns, 1001u);
}

TEST(AccountTime, CallInsideAPreviousOneAddsZero)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kRead, 0, 10, 100, 300);
	iolens_account_rw(&c, kRead, 10, 10, 150, 200);
	EXPECT_EQ(c.read_time_ns, 200u);
	EXPECT_EQ(c.last_read_end_ns, 300u); /* not pulled back to 200 */
	EXPECT_EQ(c.reads, 2u);
	/* a later call starting before 300 adds only its part after 300 */
	iolens_account_rw(&c, kRead, 20, 10, 250, 400);
	EXPECT_EQ(c.read_time_ns, 300u);
	/* and the end timestamp is the last call's end */
	EXPECT_EQ(c.read_end_ns, 400u);
}

TEST(AccountTime, ZeroStartAddsNoTimeButCountsTheOp)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kRead, 0, 10, 0, 500);
	EXPECT_EQ(c.reads, 1u);
	EXPECT_EQ(c.bytes_read, 10u);
	EXPECT_EQ(c.read_time_ns, 0u);
	EXPECT_EQ(c.max_read_time_ns, 0u);
	EXPECT_EQ(c.max_read_time_size, 0u);
	EXPECT_EQ(c.read_start_ns, 0u);
	EXPECT_EQ(c.read_end_ns, 500u);
	EXPECT_EQ(c.last_read_end_ns, 0u); /* not advanced: the next call is timed in full */
	iolens_account_rw(&c, kRead, 10, 10, 100, 200);
	EXPECT_EQ(c.read_time_ns, 100u);
	EXPECT_EQ(c.read_start_ns, 100u);

	iolens_account_open(&c, 0, 0, 700);
	EXPECT_EQ(c.opens, 1u);
	EXPECT_EQ(c.meta_time_ns, 0u);
	EXPECT_EQ(c.open_start_ns, 0u);
	EXPECT_EQ(c.open_end_ns, 700u);

	iolens_account_meta(&c, IOLENS_META_FSYNC, 0, 800);
	EXPECT_EQ(c.fsyncs, 1u);
	EXPECT_EQ(c.write_time_ns, 0u);

	iolens_account_meta(&c, IOLENS_META_SEEK, 0, 900);
	EXPECT_EQ(c.seeks, 1u);
	EXPECT_EQ(c.meta_time_ns, 0u);
	EXPECT_EQ(c.meta_start_ns, 0u);
	EXPECT_EQ(c.meta_end_ns, 900u);
}

TEST(AccountTime, EndBeforeStartAddsNothing)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kWrite, 0, 10, 500, 400);
	EXPECT_EQ(c.writes, 1u);
	EXPECT_EQ(c.write_time_ns, 0u);
	EXPECT_EQ(c.max_write_time_ns, 0u);
	EXPECT_EQ(c.last_write_end_ns, 0u);
}

TEST(AccountTime, MaxTimeAndItsSize)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kRead, 0, 100, 10, 15); /* 5 */
	EXPECT_EQ(c.max_read_time_ns, 5u);
	EXPECT_EQ(c.max_read_time_size, 100u);
	iolens_account_rw(&c, kRead, 0, 200, 20, 40); /* 20: new max */
	EXPECT_EQ(c.max_read_time_ns, 20u);
	EXPECT_EQ(c.max_read_time_size, 200u);
	iolens_account_rw(&c, kRead, 0, 300, 50, 70); /* 20 again: not strictly greater */
	EXPECT_EQ(c.max_read_time_ns, 20u);
	EXPECT_EQ(c.max_read_time_size, 200u);
	iolens_account_rw(&c, kRead, 0, 400, 80, 81); /* 1 */
	EXPECT_EQ(c.max_read_time_ns, 20u);
	EXPECT_EQ(c.max_read_time_size, 200u);
	/* max time is the call's own duration, even when overlap removes most of it from the sum */
	iolens_account_rw(&c, kRead, 0, 500, 60, 90); /* 30, only 90 - 81 = 9 new in the sum */
	EXPECT_EQ(c.max_read_time_ns, 30u);
	EXPECT_EQ(c.max_read_time_size, 500u);
	EXPECT_EQ(c.read_time_ns, 5u + 20u + 20u + 1u + 9u);

	EXPECT_EQ(c.max_write_time_ns, 0u);
	EXPECT_EQ(c.max_write_time_size, 0u);
	iolens_account_rw(&c, kWrite, 0, 7, 100, 107);
	iolens_account_rw(&c, kWrite, 0, 9, 200, 203);
	EXPECT_EQ(c.max_write_time_ns, 7u);
	EXPECT_EQ(c.max_write_time_size, 7u);
	EXPECT_EQ(c.max_read_time_ns, 30u);
}

TEST(AccountTime, ReadWriteAndMetaTimersAreIndependent)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kRead, 0, 10, 100, 200);
	iolens_account_rw(&c, kWrite, 0, 10, 150, 250);
	iolens_account_meta(&c, IOLENS_META_STAT, 120, 260);
	EXPECT_EQ(c.read_time_ns, 100u);
	EXPECT_EQ(c.write_time_ns, 100u);
	EXPECT_EQ(c.meta_time_ns, 140u);
}

TEST(AccountTime, StartIsSmallestNonZeroStartEndIsLastCallsEnd)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kRead, 0, 10, 300, 400);
	iolens_account_rw(&c, kRead, 0, 10, 200, 450);
	iolens_account_rw(&c, kRead, 0, 10, 500, 600);
	EXPECT_EQ(c.read_start_ns, 200u);
	EXPECT_EQ(c.read_end_ns, 600u);
	iolens_account_rw(&c, kRead, 0, 10, 250, 420); /* last call: end overwritten, not max */
	EXPECT_EQ(c.read_start_ns, 200u);
	EXPECT_EQ(c.read_end_ns, 420u);

	iolens_account_rw(&c, kWrite, 0, 10, 700, 800);
	iolens_account_rw(&c, kWrite, 0, 10, 650, 660);
	EXPECT_EQ(c.write_start_ns, 650u);
	EXPECT_EQ(c.write_end_ns, 660u);
	/* reads untouched by writes */
	EXPECT_EQ(c.read_start_ns, 200u);
	EXPECT_EQ(c.read_end_ns, 420u);
}

/* ------------------------------------------------------------------------------------------ */
/* Metadata calls                                                                             */

TEST(AccountMeta, FsyncAndFdatasyncTimeIsWriteTime)
{
	struct iolens_file_counters c = fresh();

	iolens_account_rw(&c, kWrite, 0, 4096, 100, 200);
	iolens_account_meta(&c, IOLENS_META_FSYNC, 300, 500);
	EXPECT_EQ(c.fsyncs, 1u);
	EXPECT_EQ(c.fdsyncs, 0u);
	EXPECT_EQ(c.write_time_ns, 300u); /* 100 + 200 */
	iolens_account_meta(&c, IOLENS_META_FDSYNC, 450, 600); /* overlaps the fsync: +100 */
	EXPECT_EQ(c.fdsyncs, 1u);
	EXPECT_EQ(c.fsyncs, 1u);
	EXPECT_EQ(c.write_time_ns, 400u);
	EXPECT_EQ(c.last_write_end_ns, 600u);
	/* not meta time, not a write, no timestamps moved */
	EXPECT_EQ(c.meta_time_ns, 0u);
	EXPECT_EQ(c.writes, 1u);
	EXPECT_EQ(c.write_start_ns, 100u);
	EXPECT_EQ(c.write_end_ns, 200u);
	EXPECT_EQ(c.meta_start_ns, 0u);
	EXPECT_EQ(c.meta_end_ns, 0u);
	/* not a data operation: no max time, no switch */
	EXPECT_EQ(c.max_write_time_ns, 100u);
	EXPECT_EQ(c.max_write_time_size, 4096u);
	EXPECT_EQ(c.rw_switches, 0u);
	/* a write overlapping the fdatasync adds only its part after 600 */
	iolens_account_rw(&c, kWrite, 4096, 4096, 550, 650);
	EXPECT_EQ(c.write_time_ns, 450u);
}

TEST(AccountMeta, MmapCountsWithoutTime)
{
	struct iolens_file_counters c = fresh();

	iolens_account_meta(&c, IOLENS_META_MMAP, 100, 200);
	iolens_account_meta(&c, IOLENS_META_MMAP, 300, 400);
	EXPECT_EQ(c.mmaps, 2u);
	EXPECT_EQ(c.meta_time_ns, 0u);
	EXPECT_EQ(c.read_time_ns, 0u);
	EXPECT_EQ(c.write_time_ns, 0u);
	EXPECT_EQ(c.meta_start_ns, 0u);
	EXPECT_EQ(c.meta_end_ns, 0u);
	EXPECT_EQ(c.last_meta_end_ns, 0u);
	/* so a following seek inside the mmap's interval is timed in full */
	iolens_account_meta(&c, IOLENS_META_SEEK, 150, 160);
	EXPECT_EQ(c.meta_time_ns, 10u);
}

TEST(AccountMeta, SeekStatTruncateAddMetaTime)
{
	struct iolens_file_counters c = fresh();

	iolens_account_meta(&c, IOLENS_META_SEEK, 10, 20);
	iolens_account_meta(&c, IOLENS_META_STAT, 30, 35);
	iolens_account_meta(&c, IOLENS_META_TRUNCATE, 40, 60);
	iolens_account_meta(&c, IOLENS_META_SEEK, 70, 72);
	iolens_account_meta(&c, IOLENS_META_STAT, 5, 8); /* earliest start, last call */
	EXPECT_EQ(c.seeks, 2u);
	EXPECT_EQ(c.stats, 2u);
	EXPECT_EQ(c.truncates, 1u);
	/* 10 + 5 + 20 + 2 + 0 (5..8 ends before the last meta end 72) */
	EXPECT_EQ(c.meta_time_ns, 37u);
	EXPECT_EQ(c.meta_start_ns, 5u);
	EXPECT_EQ(c.meta_end_ns, 8u);
	EXPECT_EQ(c.last_meta_end_ns, 72u);
	/* none is an open, a close or data */
	EXPECT_EQ(c.opens, 0u);
	EXPECT_EQ(c.closes, 0u);
	EXPECT_EQ(c.open_start_ns, 0u);
	EXPECT_EQ(c.close_start_ns, 0u);
	EXPECT_EQ(c.reads, 0u);
	EXPECT_EQ(c.writes, 0u);
	EXPECT_EQ(c.write_time_ns, 0u);
}

TEST(AccountMeta, OpenCloseAndSeekShareTheMetaTimer)
{
	struct iolens_file_counters c = fresh();

	iolens_account_open(&c, 0, 100, 200);
	iolens_account_meta(&c, IOLENS_META_SEEK, 150, 250); /* +50 */
	iolens_account_close(&c, 0, 240, 300);               /* +50 */
	EXPECT_EQ(c.meta_time_ns, 200u);
}

TEST(AccountMeta, SeekDoesNotChangeThePattern)
{
	struct iolens_file_counters c = fresh();

	open_file(&c);
	rd(&c, 0, 100);
	iolens_account_meta(&c, IOLENS_META_SEEK, 10, 20); /* the new position shows in the next offset */
	rd(&c, 100, 100);
	EXPECT_EQ(c.last_byte_read, 199);
	EXPECT_EQ(c.seq_reads, 1u);
	EXPECT_EQ(c.consec_reads, 1u);
}

TEST(AccountMeta, UnknownOpChangesNothing)
{
	struct iolens_file_counters c = fresh();

	iolens_account_meta(&c, 0, 10, 20);
	iolens_account_meta(&c, 99, 10, 20);
	EXPECT_EQ(c.seeks + c.stats + c.mmaps + c.fsyncs + c.fdsyncs + c.truncates, 0u);
	EXPECT_EQ(c.meta_time_ns, 0u);
	EXPECT_EQ(c.write_time_ns, 0u);
	EXPECT_EQ(c.meta_start_ns, 0u);
	EXPECT_EQ(c.meta_end_ns, 0u);
	EXPECT_EQ(c.last_meta_end_ns, 0u);
}

/* ------------------------------------------------------------------------------------------ */
/* A whole session, every counter checked                                                     */

TEST(AccountSession, CheckpointWriteThenReadBack)
{
	struct iolens_file_counters c = fresh();

	/* open 1000..1010, 3 x 1 MiB writes, fsync, close; reopen, stat, read it back in 2 MiB
	 * reads plus the EOF read, seek to 0, read 4 KiB, close */
	iolens_account_open(&c, 0, 1000, 1010);
	iolens_account_rw(&c, kWrite, 0, 1048576, 1100, 1300);
	iolens_account_rw(&c, kWrite, 1048576, 1048576, 1400, 1500);
	iolens_account_rw(&c, kWrite, 2097152, 1048576, 1600, 1650);
	iolens_account_meta(&c, IOLENS_META_FSYNC, 1700, 2700);
	iolens_account_close(&c, 0, 2800, 2805);
	iolens_account_open(&c, 0, 3000, 3020);
	iolens_account_meta(&c, IOLENS_META_STAT, 3030, 3032);
	iolens_account_rw(&c, kRead, 0, 2097152, 3100, 3400);
	iolens_account_rw(&c, kRead, 2097152, 1048576, 3500, 3600);
	iolens_account_rw(&c, kRead, 3145728, 0, 3700, 3701);
	iolens_account_meta(&c, IOLENS_META_SEEK, 3800, 3801);
	iolens_account_rw(&c, kRead, 0, 4096, 3900, 3910);
	iolens_account_close(&c, 0, 4000, 4004);

	EXPECT_EQ(c.opens, 2u);
	EXPECT_EQ(c.dups, 0u);
	EXPECT_EQ(c.reads, 4u);
	EXPECT_EQ(c.writes, 3u);
	EXPECT_EQ(c.seeks, 1u);
	EXPECT_EQ(c.stats, 1u);
	EXPECT_EQ(c.mmaps, 0u);
	EXPECT_EQ(c.fsyncs, 1u);
	EXPECT_EQ(c.fdsyncs, 0u);
	EXPECT_EQ(c.truncates, 0u);
	EXPECT_EQ(c.closes, 2u);
	EXPECT_EQ(c.bytes_read, 3149824u);
	EXPECT_EQ(c.bytes_written, 3145728u);
	EXPECT_EQ(c.max_byte_read, 3145727);
	EXPECT_EQ(c.max_byte_written, 3145727);
	/* writes: 0 (neither), 1M (seq+consec), 2M (seq+consec) */
	EXPECT_EQ(c.seq_writes, 2u);
	EXPECT_EQ(c.consec_writes, 2u);
	/* reads after reopen: 0 (neither), 2M (both), 3M EOF (both), 0 (neither) */
	EXPECT_EQ(c.seq_reads, 2u);
	EXPECT_EQ(c.consec_reads, 2u);
	EXPECT_EQ(c.rw_switches, 1u);
	const __u64 sr[IOLENS_NR_SIZE_BUCKETS] = {1, 0, 1, 0, 1, 1, 0, 0, 0, 0};
	const __u64 sw[IOLENS_NR_SIZE_BUCKETS] = {0, 0, 0, 0, 3, 0, 0, 0, 0, 0};
	for (int b = 0; b < IOLENS_NR_SIZE_BUCKETS; b++) {
		EXPECT_EQ(c.size_read[b], sr[b]) << "bucket " << b;
		EXPECT_EQ(c.size_write[b], sw[b]) << "bucket " << b;
	}
	EXPECT_EQ(c.read_time_ns, 300u + 100u + 1u + 10u);
	EXPECT_EQ(c.write_time_ns, 200u + 100u + 50u + 1000u);
	EXPECT_EQ(c.meta_time_ns, 10u + 5u + 20u + 2u + 1u + 4u);
	EXPECT_EQ(c.max_read_time_ns, 300u);
	EXPECT_EQ(c.max_read_time_size, 2097152u);
	EXPECT_EQ(c.max_write_time_ns, 200u);
	EXPECT_EQ(c.max_write_time_size, 1048576u);
	EXPECT_EQ(c.open_start_ns, 1000u);
	EXPECT_EQ(c.open_end_ns, 3020u);
	EXPECT_EQ(c.read_start_ns, 3100u);
	EXPECT_EQ(c.read_end_ns, 3910u);
	EXPECT_EQ(c.write_start_ns, 1100u);
	EXPECT_EQ(c.write_end_ns, 1650u);
	EXPECT_EQ(c.close_start_ns, 2800u);
	EXPECT_EQ(c.close_end_ns, 4004u);
	EXPECT_EQ(c.meta_start_ns, 3030u);
	EXPECT_EQ(c.meta_end_ns, 3801u);
	EXPECT_EQ(c.open_fds, 0);
}

} // namespace
