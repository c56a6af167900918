/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one ABI shared by the kernel programs (bpf/iolens.bpf.c) and the agent (agent/).
 *
 * Rules (see bpf/README.md):
 *  - fixed-width __u8..__u64 fields only, explicit padding, every struct a multiple of 8 bytes;
 *  - the unit of every field is in its comment; times are CLOCK_MONOTONIC nanoseconds
 *    (bpf_ktime_get_ns() and task_struct::start_time use that clock);
 *  - any change of layout or meaning bumps IOLENS_ABI_VERSION; the loader refuses an object whose
 *    .rodata abi_version differs from the one it was compiled with;
 *  - layout is checked three times: _Static_assert here (both sides), static_assert/offsetof in
 *    agent/core/abi_check.cpp, and a unit test comparing against the BTF of bpf/abi_btf.bpf.c.
 */
#ifndef IOLENS_ABI_H
#define IOLENS_ABI_H

#ifndef __bpf__
#include <linux/types.h>
#endif

#define IOLENS_ABI_VERSION 16

/* Darshan's ten access-size buckets, bounds in bytes (inclusive upper bounds). */
#define IOLENS_NR_SIZE_BUCKETS 10

/*
 * Reads and writes by the lowest set bit of their offset (ABI 14), from which user space finds
 * Darshan's FILE_NOT_ALIGNED for any power-of-two alignment from 512 B to 16 MiB once it knows
 * the file's (iolens_align_bucket in iolens_account.h; docs/counters.md "Alignment and mode"):
 * bucket 0: offsets that are not a multiple of 512; bucket k (1..15): multiples of 2^(8+k) but
 * not of 2^(9+k); multiples of 16 MiB (0 included) are in none.
 */
#define IOLENS_NR_ALIGN_BUCKETS 16
#define IOLENS_ALIGN_MIN_SHIFT 9  /* bucket 0 ends below 512 */
#define IOLENS_ALIGN_MAX_SHIFT 24 /* multiples of 16 MiB are in no bucket */

/*
 * Darshan's common access sizes and strides (ABI 15, 16; docs/counters.md "Common access sizes
 * and strides"). Darshan tallies the first 32 distinct values of each kind (0 included) in a
 * tree and keeps the four most frequent non-zero ones. Each record holds the first
 * IOLENS_TALLY_SLOTS of them, in the order they first came (iolens_tally_add in
 * iolens_account.h); the few records that see more get a side entry (struct
 * iolens_more_tallies, in the `tallies_more` map, keyed like the record and made on the first
 * value that finds the record's slots full) with the next IOLENS_TALLY_MORE_SLOTS: 32 in all,
 * Darshan's (ABI 16).
 */
#define IOLENS_TALLY_SLOTS 8
#define IOLENS_TALLY_MORE_SLOTS 24 /* Darshan's 32 (DARSHAN_COMMON_VAL_MAX_RUNTIME_COUNT) - 8 */

struct iolens_tally {
	__u64 value[IOLENS_TALLY_SLOTS]; /* the value + 1 (bytes); 0 = a free slot. Slots fill in
					  * order, each claimed by one compare-and-swap */
	__u64 count[IOLENS_TALLY_SLOTS]; /* calls of that value */
	__u64 untallied;                 /* calls whose value found all slots taken and no side
					  * entry (the `tallies_more` map full: IOLENS_STAT_TALLY_LOST) */
};

/* Slots 9..32 of one kind, in a record's side entry (ABI 16): filled as iolens_tally's. */
struct iolens_tally_more {
	__u64 value[IOLENS_TALLY_MORE_SLOTS];
	__u64 count[IOLENS_TALLY_MORE_SLOTS];
	__u64 untallied; /* calls whose value found all 32 slots taken (Darshan drops them too) */
};

/* The value of the `tallies_more` map: a record's side entry, both kinds. */
struct iolens_more_tallies {
	struct iolens_tally_more access;
	struct iolens_tally_more stride;
};

/*
 * Per-call latency buckets of reads and writes: inclusive upper bounds of t1 - t0 in ns, powers
 * of 4 from 1 us: 1us 4us 16us 64us 256us 1ms 4ms 16ms 64ms 256ms 1s, then everything above 1 s
 * (iolens_lat_bucket in iolens_account.h; kLatencyBoundsNs in agent/core/counters.hpp).
 */
#define IOLENS_NR_LAT_BUCKETS 12

/* Kind of the last data operation on a record, for rw_switches. */
enum iolens_io_type {
	IOLENS_IO_NONE = 0,
	IOLENS_IO_READ = 1,
	IOLENS_IO_WRITE = 2,
};

/*
 * Key of a per-(process, file) record. A file is (dev, ino); a process is (tgid, start time) so a
 * reused pid never merges into an older process's records.
 * For non-regular descriptors (pipes, sockets, ttys...) the same key is used in the `others` map
 * with dev = 0 and ino = the descriptor's S_IFMT bits >> 12.
 */
struct iolens_file_key {
	__u64 ino;       /* inode number (inode->i_ino) */
	__u32 dev;       /* kernel dev_t of the file as stat(2) gives it: the superblock's, a
			  * btrfs subvolume's (ABI 13) (MAJOR << 20 | MINOR) */
	__u32 tgid;      /* process id (thread-group id) */
	__u64 pstart_ns; /* process start (group leader start_time), CLOCK_MONOTONIC ns */
	__u32 gen;       /* inode->i_generation: a deleted file's inode number is reused by the
			  * next file created (ext4, xfs, tmpfs give each a new random generation);
			  * 0 when unknown (a path-based stat of a file not seen open yet) */
	__u32 pad;
};

/*
 * Darshan-style counters of one (process, file) record, updated in the kernel by
 * bpf/iolens_account.h. The fields after `state` are bookkeeping, not counters.
 */
struct iolens_file_counters {
	/* operation counts (calls) */
	__u64 opens;     /* open/openat/openat2/creat + dups (Darshan: OPENS includes dups) */
	__u64 dups;      /* dup/dup2/dup3/fcntl(F_DUPFD*) */
	__u64 reads;     /* read/pread64/readv/preadv/preadv2 returning >= 0 */
	__u64 writes;    /* write/pwrite64/writev/pwritev/pwritev2 returning >= 0 */
	__u64 seeks;     /* lseek returning >= 0 */
	__u64 stats;     /* stat/lstat/fstat/newfstatat/statx returning 0 */
	__u64 mmaps;     /* mmap of this file returning a mapping */
	__u64 fsyncs;    /* fsync returning 0 */
	__u64 fdsyncs;   /* fdatasync returning 0 */
	__u64 truncates; /* ftruncate returning 0 (iolens extra) */
	__u64 closes;    /* close returning 0 (iolens extra) */
	/* volume (bytes) and extent (byte offsets) */
	__u64 bytes_read;
	__u64 bytes_written;
	__s64 max_byte_read;    /* highest offset read: offset + ret - 1; -1 = none */
	__s64 max_byte_written; /* highest offset written; -1 = none */
	/* access pattern (calls), Darshan's rules */
	__u64 seq_reads;
	__u64 consec_reads;
	__u64 seq_writes;
	__u64 consec_writes;
	__u64 rw_switches;
	__u64 size_read[IOLENS_NR_SIZE_BUCKETS];  /* calls per size bucket */
	__u64 size_write[IOLENS_NR_SIZE_BUCKETS]; /* calls per size bucket */
	/* time (ns), overlapping calls of one record not double counted */
	__u64 read_time_ns;
	__u64 write_time_ns; /* includes fsync/fdatasync, as Darshan does */
	__u64 meta_time_ns;  /* open, close, lseek, stat, mmap, ftruncate, dup */
	__u64 max_read_time_ns;
	__u64 max_write_time_ns;
	__u64 max_read_time_size;  /* bytes of the slowest read */
	__u64 max_write_time_size; /* bytes of the slowest write */
	/* per-call latency (calls, ns): every counted read/write, full t1 - t0 of each call */
	__u64 lat_read[IOLENS_NR_LAT_BUCKETS];  /* read calls per latency bucket (see iolens_lat_bucket) */
	__u64 lat_write[IOLENS_NR_LAT_BUCKETS]; /* write calls per latency bucket */
	__u64 lat_read_sum_ns;  /* sum of the latencies of the reads counted in lat_read (overlap NOT removed, unlike read_time_ns) */
	__u64 lat_write_sum_ns; /* the same for writes (fsync/fdatasync not included) */
	/* first start / last end of each kind of call, CLOCK_MONOTONIC ns, 0 = never */
	__u64 open_start_ns;
	__u64 open_end_ns;
	__u64 read_start_ns;
	__u64 read_end_ns;
	__u64 write_start_ns;
	__u64 write_end_ns;
	__u64 close_start_ns;
	__u64 close_end_ns;
	__u64 meta_start_ns; /* first start of any metadata call (stat, seek, ...) */
	__u64 meta_end_ns;
	/*
	 * ---- below the system calls (ABI 7; docs/counters.md "Page cache, mmap, O_DIRECT,
	 * io_uring, writeback"): counted by the filemap, readahead, writeback, iomap and io_uring
	 * tracepoints of bpf/iolens_cache.bpf.h and bpf/iolens_direct.bpf.h. Pages are the
	 * kernel's base pages (4 KiB on x86-64); a large folio counts as its number of pages.
	 */
	/* page cache under buffered reads (read family, sendfile/splice/copy_file_range, io_uring) */
	__u64 cache_read_pages;  /* pages buffered reads asked of the page cache
				  * (mm_filemap_get_pages: each call's range counted once) */
	__u64 cache_miss_pages;  /* pages this process's reads inserted into the page cache
				  * (mm_filemap_add_to_page_cache while reading): misses plus the
				  * readahead done for them */
	__u64 ra_sync;           /* synchronous readahead decisions (page_cache_sync_ra): a read
				  * or fault missed */
	__u64 ra_async;          /* asynchronous readahead (page_cache_async_ra): a read reached
				  * the readahead mark of a sequential stream */
	__u64 prefetch_pages;    /* pages inserted by neither a read, a write nor a fault of the
				  * process: fadvise(WILLNEED), madvise, readahead(2) */
	/* mmap: file-backed page faults */
	__u64 fault_pages;       /* faults that entered filemap_fault (mm_filemap_fault): each a
				  * page the page tables did not have */
	__u64 fault_around_pages;/* pages offered to fault-around (mm_filemap_map_pages ranges):
				  * those already cached were mapped without a fault of their own */
	__u64 fault_miss_pages;  /* pages faults inserted into the page cache (read from the
				  * device, the fault's read-around included) */
	/* O_DIRECT (iomap_dio_rw_begin .. iomap_dio_complete): also counted as the read/write
	 * calls they are (reads, bytes_read, ...) when made by a system call or io_uring */
	__u64 direct_reads;
	__u64 direct_writes;
	__u64 direct_bytes_read;     /* bytes the completions returned */
	__u64 direct_bytes_written;
	__u64 direct_read_time_ns;   /* sum of begin-to-completion times */
	__u64 direct_write_time_ns;
	__u64 direct_max_time_ns;    /* the slowest direct read or write */
	/* io_uring: requests whose completion this process received; the reads and writes are
	 * also counted like their system-call twins (reads, bytes_read, sizes, times ...) */
	__u64 uring_reads;
	__u64 uring_writes;
	__u64 uring_bytes_read;      /* bytes from the completions */
	__u64 uring_bytes_written;
	__u64 uring_opens;           /* IORING_OP_OPENAT/OPENAT2 (also counted in opens) */
	__u64 uring_closes;          /* IORING_OP_CLOSE (also counted in closes) */
	__u64 uring_other;           /* other requests on the file (fsync, statx, ...), not counted elsewhere */
	/* writes through the page cache */
	__u64 dirtied_pages;     /* pages of this file the process dirtied (writeback_dirty_folio):
				  * new dirt only, rewriting a dirty page adds nothing */
	__u64 throttle_ns;       /* time balance_dirty_pages paused the process right after it
				  * dirtied this file (writer throttling) */
	__u64 throttles;         /* those pauses */
	__u64 wb_waits;          /* waits on this file's pages under writeback
				  * (folio_wait_writeback: fsync, rewrites of pages being written) */
	/* ---- state: bookkeeping for the rules above, not exported ---- */
	__s64 last_byte_read;    /* Darshan's last_byte_read: reset to 0 at open */
	__s64 last_byte_written; /* Darshan's last_byte_written: reset to 0 at open */
	__u64 last_read_end_ns;  /* for no-overlap time accounting */
	__u64 last_write_end_ns;
	__u64 last_meta_end_ns;
	__u32 last_io_type;  /* enum iolens_io_type */
	__u32 first_io_type; /* enum iolens_io_type of the first data op, for merging folds */
	__s64 open_fds;      /* opens+dups-closes seen on this record; <= 0 means idle */
	__u32 named;         /* the file's name was sent for this record (a record that a
			      * page-cache or io_uring hook created has no struct file to name
			      * it from: the next system call on it sends the name) */
	__u32 map_flags;     /* IOLENS_MAPPED_*: how the process mmap()ed this file */
	/*
	 * ---- Darshan's alignment and mode (ABI 14; docs/counters.md "Alignment and mode"),
	 * after the state so that no earlier word moved ----
	 */
	__u64 mem_not_aligned; /* counted reads/writes whose user buffer is not aligned to
				* IOLENS_MEM_ALIGNMENT bytes (a vector call: any iov_base) */
	__u64 mode;            /* the mode argument of the last open that created (O_CREAT,
				* creat) with a non-zero mode; 0 = none */
	__u64 offset_lsb[IOLENS_NR_ALIGN_BUCKETS]; /* counted reads/writes by the lowest set bit
						    * of their offset (IOLENS_NR_ALIGN_BUCKETS) */
	/* ---- Darshan's common access sizes and strides (ABI 15; the values past
	 * IOLENS_TALLY_SLOTS in the record's side entry since ABI 16) ---- */
	struct iolens_tally access; /* bytes each counted read and write returned (0 included) */
	struct iolens_tally stride; /* Darshan's stride of each counted read and write: the gap
				     * from the end of the last one of the same direction, 0 when
				     * none or not forward (reads and writes in one tally) */
};

/* Darshan's default memory alignment (its --with-mem-align, 8): what mem_not_aligned checks */
#define IOLENS_MEM_ALIGNMENT 8

/* iolens_file_counters::map_flags. A file the process mapped executable (ld.so mapping a
 * library's text) gives its forked children no record of their own when they fault on it
 * (bpf/iolens_cache.bpf.h inherited_record). */
#define IOLENS_MAPPED_EXEC 0x1

/*
 * Per-thread state, in BPF task-local storage. Its presence on a task is the tracing filter:
 * only tasks of the traced tree have one (created for the root by the agent, inherited at fork).
 */
struct iolens_task_state {
	/* IOLENS_TIMING_EXACT: CLOCK_MONOTONIC ns at sys_enter of the current syscall (0 between
	 * calls). IOLENS_TIMING_OFF (no sys_enter): 0 while the call the thread was inside when
	 * it was traced has not returned (its exit is not counted), then 1 plus its accounted
	 * calls; it tells one call's page-cache events from the next call's (gp_enter) */
	__u64 enter_ns;
	__u64 pstart_ns; /* start_time of the thread-group leader, 0 = not yet known */
	__u64 close_ino; /* for close(): the file behind the fd, captured at sys_enter */
	__u32 close_dev;
	__u32 close_kind; /* 0 none, 1 regular file, 2 another kind: close_ino = S_IFMT bits >> 12,
			   * close_dev = close_gen = 0 (for trace mode) */
	__u32 close_gen;
	__u32 cache_mode; /* identity cache: the last file this thread did I/O on ... */
	__u64 cache_file; /* its struct file * (0 = empty) */
	__u64 cache_inode; /* its struct inode *, checked again at each use */
	__u64 cache_ino;
	__u32 cache_dev;
	__u32 cache_gen;
	__u32 origin; /* enum iolens_mark_reason: why this task is traced */
	__u32 io_ctx; /* enum iolens_io_ctx: what the thread does now, to tell whom a page-cache
		       * insertion serves */
	/* mm_filemap_get_pages fires once per batch of one read with the read's whole remaining
	 * range: the last range seen, so that each read's pages count once */
	__u64 gp_ino;
	__u64 gp_first;  /* first page index of the last event */
	__u64 gp_last;   /* last page index (inclusive) of the last event */
	__u64 gp_enter;  /* enter_ns of the system call it came in (0 = none) */
	__u32 gp_dev;
	/* the file this thread last dirtied a page of: balance_dirty_pages (no file argument)
	 * charges its pause there */
	__u32 dirty_dev;
	__u64 dirty_ino;
	__u32 dirty_gen;
	/* set by sys_enter of a close whose regular file was never named: sys_exit sends its name
	 * from cache_file (the struct file lives until the close's task work, after sys_exit) */
	__u32 close_name;
};

/*
 * What a traced thread is doing, set by sys_enter (read and write families), io_uring issue and
 * page faults, and reset at sys_exit: a page inserted into the page cache in its context is a
 * read miss, a fault miss, a page for a write, or a prefetch.
 */
enum iolens_io_ctx {
	IOLENS_CTX_NONE = 0,  /* no read or write: an insertion is a prefetch (fadvise, madvise) */
	IOLENS_CTX_READ = 1,  /* a read family call, the input of a copy, an io_uring read */
	IOLENS_CTX_WRITE = 2, /* a write family call, a copy's output, an io_uring write */
	IOLENS_CTX_FAULT = 3, /* a file-backed page fault (filemap_fault) */
};

/* Ring-buffer events: rare, per process or per new file, never per I/O call. */
enum iolens_event_type {
	IOLENS_EV_FORK = 1, /* a traced process created a process */
	IOLENS_EV_EXEC = 2, /* a traced process exec'd; path = executable */
	IOLENS_EV_EXIT = 3, /* the last thread of a traced process exited */
	IOLENS_EV_PATH = 4, /* a path: name of a file, or the argument of a path-based call */
	IOLENS_EV_CGROUP = 5, /* a cgroup v2 directory was created or removed (daemon mode) */
	IOLENS_EV_MARK = 6,   /* a task started or stopped being traced by a selection rule */
};

struct iolens_event_header {
	__u32 type;      /* enum iolens_event_type */
	__u32 tgid;      /* process the event belongs to */
	__u64 pstart_ns; /* its start time (CLOCK_MONOTONIC ns) */
	__u64 ts_ns;     /* when the event happened (CLOCK_MONOTONIC ns) */
	__u64 cgroup_id; /* cgroup v2 id (the cgroup directory's inode number) of the process */
};

#define IOLENS_COMM_LEN 16

struct iolens_fork_event {
	struct iolens_event_header hdr; /* the new process */
	__u32 ppid;                     /* parent tgid */
	__u32 pad;
	__u64 parent_pstart_ns;
	char comm[IOLENS_COMM_LEN];
};

struct iolens_exit_event {
	struct iolens_event_header hdr;
	__s32 exit_code; /* raw wait status of the process (exit code << 8 | signal) */
	__u32 pad;
};

/* IOLENS_EV_CGROUP: the header's cgroup_id is the cgroup's; tgid/pstart_ns are the caller's. */
enum iolens_cgroup_op {
	IOLENS_CGROUP_MKDIR = 1,
	IOLENS_CGROUP_RMDIR = 2,
};

#define IOLENS_CGROUP_PATH_MAX 1024

struct iolens_cgroup_event {
	struct iolens_event_header hdr;
	__u32 op;       /* enum iolens_cgroup_op */
	__u32 level;    /* depth below the root (the root is 0) */
	__u32 path_len; /* bytes of path, its NUL included; the path is cut at IOLENS_CGROUP_PATH_MAX */
	__u32 flags;    /* IOLENS_PATH_TRUNCATED */
	char path[IOLENS_CGROUP_PATH_MAX]; /* relative to the cgroup2 mount, "/a/b" */
};

/* Why a task is traced (iolens_task_state::origin) or why a mark event was sent. */
enum iolens_mark_reason {
	IOLENS_MARK_PID = 0,       /* marked by the agent through a pidfd (`iolens run`) */
	IOLENS_MARK_FORK = 1,      /* created straight into a selected cgroup (CLONE_INTO_CGROUP) */
	IOLENS_MARK_ATTACH = 2,    /* moved into a selected cgroup (a write to cgroup.procs) */
	IOLENS_MARK_SCAN = 3,      /* found in a selected cgroup by the task iterator */
	IOLENS_MARK_COMM = 4,      /* exec'd a program whose comm a process rule selects */
	IOLENS_MARK_MOVED = 5,     /* a traced task moved to another selected cgroup */
	IOLENS_MARK_UNTRACED = 6,  /* a traced task moved out of the selection: no longer traced */
};

/* IOLENS_EV_MARK: the header names the task's process and its (new) cgroup. */
struct iolens_mark_event {
	struct iolens_event_header hdr;
	__u32 reason;  /* enum iolens_mark_reason */
	__u32 threads; /* threads of the process when it was marked; only the one marked is traced
			* until the agent runs the task iterator (IOLENS_MARK_ATTACH of a group) */
	__u32 ppid;    /* parent tgid */
	__u32 pad;
	__u64 parent_pstart_ns;
	char comm[IOLENS_COMM_LEN];
};

/*
 * Values of the cgroup selection maps: the nearest ancestor (or self) with an entry decides.
 * ABI 8: TRACE entries live in `cgroup_sel`, EXCLUDE entries in their own map `cgroup_excl`, so
 * that excluded cgroups (which users with a delegated subtree can create by the thousand) can
 * never take the slot of a traced one.
 */
enum iolens_cgroup_action {
	IOLENS_CGROUP_TRACE = 1,   /* trace every task at or below this cgroup (cgroup_sel) */
	IOLENS_CGROUP_EXCLUDE = 2, /* trace none at or below it (a non-job subtree of a traced one;
				    * cgroup_excl) */
};

/* Entries of `cgroup_sel`: the watched roots of the configuration (iolensd refuses more). */
#define IOLENS_CGROUP_TRACE_MAX 1024

/*
 * A file whose name iolensd forgot (a fold): the kernel is to send its name again on next use.
 * iolensd hands an array of these to the `forget_names` program (BPF_PROG_TEST_RUN; args[0] the
 * array, args[1] its length), which clears each one's `named` in one system call per slice
 * where a lookup and an update per name took two each.
 */
struct iolens_name_id {
	__u64 ino;
	__u32 dev;
	__u32 gen; /* cleared only while the kernel's entry is still this incarnation's */
};

/* The most names one run of `forget_names` takes (bounds its time with preemption off). */
#define IOLENS_FORGET_NAMES_MAX 4096

/*
 * Daemon mode keeps its maps pinned in bpffs so a restarted daemon continues them. This record,
 * in the pinned `meta` map, says what they were created with; a daemon that finds another ABI or
 * other sizes discards them (and says so) instead of misreading them.
 */
struct iolens_pin_meta {
	__u32 abi_version;
	__u32 files_max;
	__u32 others_max;
	__u32 ring_bytes;
	__u64 created_wall_ns; /* CLOCK_REALTIME ns when the maps were created */
	__u64 mono_to_wall_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC then (signed, stored as u64) */
	__u32 trace_ring_bytes; /* size of the `trace` ring (pinned too: ABI 6) */
	__u32 cgroup_excl_max;  /* entries of the `cgroup_excl` map (ABI 8) */
	__u32 timing;           /* enum iolens_timing the programs were attached for (ABI 10) */
	__u32 pad;
};

/* What an IOLENS_EV_PATH event names. */
enum iolens_path_op {
	IOLENS_PATH_FILE = 1,   /* canonical name of (dev, ino): walked from the struct file */
	IOLENS_PATH_EXE = 2,    /* executable after exec, walked; comm in `comm` */
	IOLENS_PATH_LOOKUP = 3, /* name of (dev, ino) seen by a stat: base dir walked + user string */
	IOLENS_PATH_UNLINK = 4, /* unlink/unlinkat that succeeded: base + user string */
	IOLENS_PATH_RENAME = 5, /* rename* that succeeded: base + old string, base2 + new string */
};

/* Flags of a path event */
#define IOLENS_PATH_TRUNCATED 0x1 /* the walk hit its depth limit or a component was cut */
#define IOLENS_PATH_UNREACHED 0x2 /* the walk did not reach a root (detached, lazily unmounted) */

/*
 * A path event. `data` holds, in order:
 *  - walk:  `walk_len` bytes, the components of a walked path from leaf to root, each
 *           NUL-terminated (an empty walk is the root "/");
 *  - str1:  `str1_len` bytes, a NUL-terminated user string (path argument), or nothing;
 *  - walk2 and str2: the same for the second argument of rename.
 * A user string that starts with '/' is absolute: its walk is empty and ignored. A relative one
 * is joined to its walk (the directory fd or the working directory) by the reader.
 */
#define IOLENS_PATH_DATA_MAX 12288

struct iolens_path_event {
	struct iolens_event_header hdr;
	__u64 ino;   /* inode of the file named (FILE, EXE, LOOKUP), else 0 */
	__u32 dev;   /* kernel dev_t, as in iolens_file_key */
	__u32 gen;   /* inode generation, as in iolens_file_key */
	__u16 op;    /* enum iolens_path_op */
	__u16 flags; /* IOLENS_PATH_* */
	__u16 walk_len;
	__u16 str1_len;
	__u16 walk2_len;
	__u16 str2_len;
	__u32 pad;
	char comm[IOLENS_COMM_LEN]; /* for EXE events */
	char data[IOLENS_PATH_DATA_MAX];
};

/*
 * Trace mode (`iolens run --trace`, `iolens capture`): one record per traced call, through the
 * separate `trace` ring buffer (so a busy capture never crowds out names and exits), submitted
 * without wakeups and drained by the agent on a timer. Off unless the agent turns it on.
 */
/*
 * How calls are timed (the `timing_mode` global of .data.trace, set by the agent before the
 * system call hooks attach; docs/counters.md "Timing").
 */
enum iolens_timing {
	/* sys_enter on every system call reads the clock at entry: Darshan's times exact */
	IOLENS_TIMING_EXACT = 0,
	/* no sys_enter program (close's entry from its classic tracepoint): counts, bytes,
	 * offsets and sizes as exact, no clock read, every time counter 0 */
	IOLENS_TIMING_OFF = 1,
};

enum iolens_trace_mode {
	IOLENS_TRACE_OFF = 0,
	IOLENS_TRACE_ALL = 1,    /* every traced task (`iolens run --trace`) */
	IOLENS_TRACE_CGROUP = 2, /* traced tasks at or below the cgroup in trace_cgroup[0] */
	IOLENS_TRACE_PIDS = 3,   /* traced tasks of the processes in trace_pids (children join at fork) */
};

/* What a trace record is; each maps onto one accounting call of bpf/iolens_account.h. */
enum iolens_trace_op_kind {
	IOLENS_OP_READ = 1,      /* read, pread64, readv, preadv, preadv2; the input side of a copy */
	IOLENS_OP_WRITE = 2,     /* write, pwrite64, writev, pwritev, pwritev2; a copy's output side */
	IOLENS_OP_OPEN = 3,      /* open, openat, openat2, creat */
	IOLENS_OP_DUP = 4,       /* dup, dup2, dup3, fcntl(F_DUPFD*) */
	IOLENS_OP_CLOSE = 5,
	IOLENS_OP_SEEK = 6,      /* lseek */
	IOLENS_OP_STAT = 7,      /* fstat, stat, lstat, newfstatat, statx */
	IOLENS_OP_MMAP = 8,      /* mmap of a file (anonymous mappings are not file I/O: no record) */
	IOLENS_OP_FSYNC = 9,
	IOLENS_OP_FDATASYNC = 10,
	IOLENS_OP_TRUNCATE = 11, /* ftruncate */
	IOLENS_OP_UNLINK = 12,   /* unlink, unlinkat (not AT_REMOVEDIR): IOLENS_TRACE_F_NOFILE; the
				  * name is in the IOLENS_PATH_UNLINK event (same tgid, ts_ns ==
				  * end_ns) when the call succeeded */
	IOLENS_OP_RENAME = 13,   /* rename, renameat, renameat2: IOLENS_TRACE_F_NOFILE; names in
				  * the IOLENS_PATH_RENAME event as for unlink */
	IOLENS_NR_OPS,
};

/* Flags of a trace record */
#define IOLENS_TRACE_F_OTHER 0x1  /* not a regular file (pipe, socket, tty...): ino = S_IFMT >> 12, dev = 0 */
#define IOLENS_TRACE_F_NOFILE 0x2 /* no file could be named (a failed call, a bad descriptor) */
#define IOLENS_TRACE_F_COPY 0x4   /* one side of sendfile/splice/copy_file_range */
#define IOLENS_TRACE_F_MEM_UNALIGNED 0x8 /* a read/write whose user buffer (a vector call: any
					  * iov_base) is not IOLENS_MEM_ALIGNMENT-aligned (ABI 14) */

/*
 * One traced call. A copy between two descriptors gives two records (READ then WRITE) with the
 * same times; every other call gives one. Failed calls are recorded too (ret < 0), and counted by
 * no counter, as the counters do. The file is the one behind the descriptor at sys_exit (for
 * close: at sys_enter; for a path stat: the identity the stat returned); a failed call still
 * names the file when its descriptor resolves, else IOLENS_TRACE_F_NOFILE.
 */
struct iolens_trace_record {
	__u64 start_ns;  /* sys_enter, CLOCK_MONOTONIC ns */
	__u64 end_ns;    /* sys_exit */
	__u64 pstart_ns; /* the process's start time (with tgid, names the process) */
	__u64 ino;       /* the file, as in iolens_file_key (0 when IOLENS_TRACE_F_NOFILE) */
	__u32 dev;
	__u32 gen;
	__s64 offset;    /* byte offset where a read/write started (-1 = none or unknown): the one
			  * the call named (p* calls, a copy's offset pointer; as given, even if
			  * invalid), else the file position before the call (a failed call did not
			  * move it); -1 for a non-regular file. For lseek, the resulting position
			  * (-1 if it failed). -1 for every other call */
	__s64 ret;       /* the call's return value: bytes, a descriptor, 0, an address (mmap), or
			  * -errno */
	__s64 arg;       /* bytes asked for by a read/write (its count, a copy's len; -1 for the
			  * vector calls); lseek's whence; the new fd of a dup (-1 if it failed);
			  * an open's mode when it may create (O_CREAT, creat; ABI 14), else 0;
			  * 0 otherwise */
	__u32 tgid;
	__u32 tid;
	__u16 op;        /* enum iolens_trace_op_kind */
	__u16 nr;        /* the x86-64 syscall number */
	__u32 flags;     /* IOLENS_TRACE_F_* */
	__s32 fd;        /* the descriptor the call used (the new one for open/dup; -1 if the call
			  * failed to make one; for a stat, the one stat'd), -1 if none (path calls) */
	__u32 pad;
};

/*
 * ---- block layer (ABI 7): bytes, requests and latency per (process, device), counted by the
 * block tracepoints of bpf/iolens_block.bpf.h (docs/counters.md "Block layer").
 */

/*
 * Request size buckets (bytes of a request at issue), inclusive upper bounds, powers of 4 from
 * 4 KiB: 4K 16K 64K 256K 1M 4M 16M, then everything above 16 MiB (iolens_blk_size_bucket in
 * iolens_account.h; kBlockSizeBoundsBytes in agent/core/block.hpp).
 */
#define IOLENS_NR_BLK_SIZE_BUCKETS 8

/* A block device as one process used it. */
struct iolens_block_key {
	__u32 tgid;      /* process id */
	__u32 dev;       /* kernel dev_t (MAJOR << 20 | MINOR) of the bio's block device
			  * (bio->bi_bdev->bd_dev: the partition, if any) */
	__u64 pstart_ns; /* process start (group leader start_time), CLOCK_MONOTONIC ns */
};

/*
 * A charged block request between insert (or issue) and completion, the value of the
 * `rq_inflight` map (key: the struct request pointer). In the ABI because the agent sweeps the
 * map for requests whose completion never came (Loader::sweep_block_inflight).
 */
struct iolens_rq_inflight {
	struct iolens_block_key key;
	__u64 rq_start_ns; /* request->start_time_ns when seen: tells a reused request apart */
	__u64 insert_ns;   /* block_rq_insert, CLOCK_MONOTONIC ns; 0 = issued without it */
	__u64 issue_ns;    /* block_rq_issue (the last one, after a requeue); 0 = not yet */
	__u32 write;       /* 1 = a write request */
	__u32 counted;     /* 1 = counted at its first issue: a requeued request issued again is
			    * not counted twice (its device time restarts at the last issue) */
};

/*
 * Counters of one (process, device). Bios are charged when they are queued
 * (block_bio_queue); requests (what the device executes: one or more merged bios) when they
 * are issued to the driver, to the owner of their first bio.
 */
struct iolens_block_counters {
	__u64 read_bytes;      /* bytes of read bios charged here */
	__u64 write_bytes;     /* bytes of write bios charged here */
	__u64 read_bios;       /* read bios charged here */
	__u64 write_bios;      /* write bios charged here */
	__u64 writeback_bytes; /* of write_bytes: issued by a thread not of this process (flusher,
				* another process) for pages this process dirtied (dirtiers map) */
	__u64 writeback_bios;  /* of write_bios: the same */
	__u64 flush_bios;      /* cache flushes asked: REQ_OP_FLUSH bios and bios with REQ_PREFLUSH */
	__u64 discard_bios;    /* REQ_OP_DISCARD bios (not in read/write) */
	__u64 discard_bytes;
	__u64 read_reqs;       /* read requests issued to the device whose first bio is charged here */
	__u64 write_reqs;      /* write requests, the same */
	__u64 unqueued_reqs;   /* of read_reqs + write_reqs: issued without passing the I/O
				* scheduler queue (direct issue): no queue time */
	__u64 size_read[IOLENS_NR_BLK_SIZE_BUCKETS];  /* read requests per size bucket */
	__u64 size_write[IOLENS_NR_BLK_SIZE_BUCKETS]; /* write requests per size bucket */
	/* queue latency: block_rq_insert to block_rq_issue (requests per iolens_lat_bucket, ns) */
	__u64 queue_read[IOLENS_NR_LAT_BUCKETS];
	__u64 queue_write[IOLENS_NR_LAT_BUCKETS];
	__u64 queue_read_sum_ns;
	__u64 queue_write_sum_ns;
	/* device latency: block_rq_issue to block_rq_complete (requests per bucket, ns) */
	__u64 dev_read[IOLENS_NR_LAT_BUCKETS];
	__u64 dev_write[IOLENS_NR_LAT_BUCKETS];
	__u64 dev_read_sum_ns;
	__u64 dev_write_sum_ns;
	__u64 dev_errors;      /* requests that completed with an error */
};

/* Global counters in a per-CPU array: everything that was dropped or failed is counted here. */
enum iolens_stat {
	IOLENS_STAT_FILE_RECORDS_LOST = 0, /* ops not counted: files map full */
	IOLENS_STAT_OTHER_RECORDS_LOST,    /* ops on non-regular fds not counted: map full */
	IOLENS_STAT_EVENTS_LOST,           /* ring-buffer events dropped (ring full) */
	IOLENS_STAT_PATH_EVENTS_LOST,      /* of which path events */
	IOLENS_STAT_PROC_EVENTS_LOST,      /* of which fork/exec/exit events */
	IOLENS_STAT_TASK_STATE_FAILED,     /* threads that could not get task storage (untraced!) */
	IOLENS_STAT_PATHS_TRUNCATED,       /* path walks cut at the depth limit */
	IOLENS_STAT_NAME_LOOKUPS,          /* path events emitted */
	IOLENS_STAT_FILE_RECORDS_CREATED,  /* records inserted into `files` or, in a run,
					    * `files_spill` (not a loss: the agent drains early when
					    * the maps are half full) */
	IOLENS_STAT_JOB_EVENTS_LOST,       /* of EVENTS_LOST: cgroup and mark events */
	IOLENS_STAT_TRACE_RECORDS,         /* trace records produced (sent or lost) */
	IOLENS_STAT_TRACE_LOST,            /* of which lost: the trace ring was full */
	IOLENS_STAT_TRACE_PIDS_LOST,       /* trace mode PIDS: new processes of listed ones that
					    * could not be listed (trace_pids full): their calls
					    * are not traced */
	IOLENS_STAT_DIRECT_INFLIGHT_LOST,  /* O_DIRECT calls not counted: in-flight map full */
	IOLENS_STAT_URING_INFLIGHT_LOST,   /* io_uring requests not timed (in-flight map full):
					    * still counted, with zero time */
	IOLENS_STAT_BLOCK_RECORDS_LOST,    /* block I/O not counted: block records map full */
	IOLENS_STAT_BLOCK_INFLIGHT_LOST,   /* block requests not timed: in-flight map full */
	IOLENS_STAT_DIRTIER_LOST,          /* files whose dirtier could not be remembered
					    * (dirtiers map full): their writeback is charged to
					    * no job */
	IOLENS_STAT_BLOCK_UNTIMED,         /* (ABI 9) counted block requests dropped from the
					    * in-flight map without their completion: the kernel
					    * did not run block_rq_complete for them (seen on
					    * 6.18 for completions in some softirq contexts,
					    * without a recursion miss) and their address was
					    * reused; not in the device latency histograms */
	IOLENS_STAT_BLOCK_UNTIMED_SWEPT,   /* (ABI 9) the same, found by the agent's sweep of
					    * the in-flight map (written by user space only) */
	IOLENS_STAT_LOSSES_UNATTRIBUTED,   /* (ABI 11) losses counted here but not in
					    * `proc_lost`: its entry could not be made (map full,
					    * or the map busy in an interrupt) */
	IOLENS_STAT_LOSSES_NO_JOB,         /* (ABI 11) `proc_lost` losses of processes in no job,
					    * or of a job already written (written by user space
					    * only) */
	IOLENS_STAT_FILE_RECORDS_SPILLED,  /* (ABI 12) of FILE_RECORDS_CREATED: made in
					    * `files_spill` because the preallocated `files` was
					    * full (iolens run; bpf/README.md "Two tiers") */
	IOLENS_STAT_FILE_RECORDS_TWICE,    /* (ABI 12) keys made in both tiers at once by two
					    * threads (a race while `files` was full), counted by
					    * one or both makers: the agent folds the spilled copy
					    * into the other */
	IOLENS_STAT_TALLY_LOST,            /* (ABI 16) values of reads/writes not tallied because
					    * their record's slots were full and its side entry
					    * could not be made (`tallies_more` full): in the
					    * record's access/stride `untallied` */
	IOLENS_STAT_TALLY_ORPHANS,         /* (ABI 16) side entries the agent found without their
					    * record (a call that raced its record's removal from
					    * the map made it again) and deleted (written by user
					    * space only) */
	IOLENS_NR_STATS,
};

/*
 * Losses by process (ABI 11). Each loss above that happens while counting for a known process
 * is also charged to that process in the `proc_lost` hash, so that the agent can give every job
 * its own losses (docs/counters.md#lost): the process whose call, record, event or block request
 * was not counted (for a fork, the parent; for a mark, the task marked). Indexed by enum
 * iolens_stat; only the causes a process can be charged with are used. The agent reads the
 * entries at each drain and deletes an exited process's once it has added it to its job.
 */
#define IOLENS_PROC_LOST_MAX 4096
struct iolens_proc_key {
	__u32 tgid;
	__u32 pad;
	__u64 pstart_ns; /* group leader start_time, CLOCK_MONOTONIC ns, as in iolens_file_key */
};

struct iolens_proc_lost {
	__u64 n[IOLENS_NR_STATS]; /* losses by enum iolens_stat */
};

#ifdef __cplusplus
#define IOLENS_STATIC_ASSERT static_assert
#else
#define IOLENS_STATIC_ASSERT _Static_assert
#endif

IOLENS_STATIC_ASSERT(sizeof(struct iolens_file_key) == 32, "file key layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_file_counters) % 8 == 0, "counters multiple of 8");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_tally) == (2 * IOLENS_TALLY_SLOTS + 1) * 8, "tally layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_tally_more) == (2 * IOLENS_TALLY_MORE_SLOTS + 1) * 8,
		     "side tally layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_more_tallies) == 784, "side entry layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_file_counters) == 720 + 45 * 8 + 2 * 136, "counters layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_task_state) == 136, "task state layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_event_header) == 32, "event header layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_fork_event) == 64, "fork event layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_exit_event) == 40, "exit event layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_path_event) == 80 + IOLENS_PATH_DATA_MAX,
		     "path event layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_cgroup_event) == 48 + IOLENS_CGROUP_PATH_MAX,
		     "cgroup event layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_mark_event) == 72, "mark event layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_pin_meta) == 48, "pin meta layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_name_id) == 16, "name id layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_trace_record) == 88, "trace record layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_rq_inflight) == 48, "rq inflight layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_block_key) == 16, "block key layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_proc_key) == 16, "proc key layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_proc_lost) == IOLENS_NR_STATS * 8, "proc lost layout");
IOLENS_STATIC_ASSERT(sizeof(struct iolens_block_counters) ==
			     (12 + 2 * IOLENS_NR_BLK_SIZE_BUCKETS + 4 * IOLENS_NR_LAT_BUCKETS + 5) * 8,
		     "block counters layout");

#endif /* IOLENS_ABI_H */
