// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * iolens kernel programs: per-(process, file) Darshan counters of a traced process tree,
 * aggregated in the kernel. See bpf/README.md for the design and docs/counters.md for the rules.
 *
 * Hooks (all tp_btf: no tracefs needed, ~60 ns of glue per call instead of ~210 ns for classic
 * syscall tracepoints, see bench/README.md):
 *   sys_enter / sys_exit              every syscall; a task-storage lookup rejects untraced tasks
 *   sched_process_fork/exec/exit      follow the tree; task storage is inherited at fork
 * Only rare events (process lifecycle, first sight of a file, path-based metadata calls) go to
 * the ring buffer; I/O calls only update maps.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "iolens_abi.h"

/* The accounting's buckets as global functions (see iolens_account.h). */
int size_bucket(__u64 size);
int lat_bucket(__u64 ns);
int align_bucket(__s64 offset);
int tally(struct iolens_tally *t, __u64 v);
/* barrier_var: the compiler sees the function's range and would drop the bounds checks that
 * the verifier needs */
#define IOLENS_SIZE_BUCKET(size)                                                                  \
	({                                                                                         \
		__u32 b_ = size_bucket(size);                                                      \
		barrier_var(b_);                                                                   \
		b_;                                                                                \
	})
#define IOLENS_LAT_BUCKET(ns)                                                                      \
	({                                                                                         \
		__u32 b_ = lat_bucket(ns);                                                         \
		barrier_var(b_);                                                                   \
		b_;                                                                                \
	})
#define IOLENS_ALIGN_BUCKET(offset)                                                                \
	({                                                                                         \
		__u32 b_ = align_bucket(offset);                                                   \
		barrier_var(b_);                                                                   \
		b_;                                                                                \
	})
/* A global function too: its loop verified once, not at each of its four calls */
#define IOLENS_TALLY(t, v) tally(t, v)
/* The side entry's (tally_more): `side` is the call's struct call_ctx, with the record's key */
struct call_ctx;
int tally_more(struct call_ctx *cx, struct iolens_tally *t, int which, __u64 v);
#define IOLENS_TALLY_SIDE(side, t, which, v) tally_more(side, t, which, v)
#include "iolens_account.h"
#include "iolens_syscalls.h"

/*
 * Untrusted loads (bpf/README.md "Cheap to verify"). Every direct load of a pointer field through
 * a trusted BTF pointer costs the verifier up to four linear searches of the kernel's BTF by
 * name. The object built with IOLENS_UNTRUSTED_LOADS (for kernels with the kfuncs
 * bpf_rdonly_cast and bpf_task_from_pid, Linux 6.2+) first casts such a base pointer to an
 * untrusted one of the same type: the load is then a PROBE_MEM load, as fast as a direct one,
 * and the verifier searches nothing. The loader sets the kernel's BTF ids of the cast types
 * (kid_*, read from .rodata as constants by the verifier). The other object loads directly.
 */
const volatile __u32 kid_task_struct = 0;
const volatile __u32 kid_address_space = 0;
const volatile __u32 kid_kiocb = 0;
const volatile __u32 kid_folio = 0;
#ifdef IOLENS_UNTRUSTED_LOADS
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
#define UNTRUSTED(type, p) ((struct type *)bpf_rdonly_cast((p), kid_##type))
#else
#define UNTRUSTED(type, p) (p)
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The loader refuses an object built against another ABI (see iolens_abi.h). */
const volatile __u32 abi_version = IOLENS_ABI_VERSION;
/* Daemon mode: report cgroup creation/removal and select tasks by cgroup and comm. */
const volatile __u32 select_jobs = 0;
/* Records that find `files` full go to `files_spill` (iolens run; see the maps). 0: one tier,
 * and the verifier drops the second tier's code. */
const volatile __u32 file_spill = 0;
/* 0: this agent never turns trace mode on (iolens run without --trace), and the verifier drops
 * sys_exit's call of trace_call(); one that checks global functions only where they are called
 * (Linux 6.8+) skips trace_call() and trace_record(), a quarter of what it walks there. */
const volatile __u32 trace_calls = 1;
/* Set by the agent before it runs the task iterator: also report every process already traced
 * (a restarted daemon relearns which processes are traced). */
__u32 scan_report_all = 0;
/* Set by the agent before it runs the task iterator to settle the traced tasks' entry state
 * (timing off, before sys_exit attaches: Loader::set_syscall_hooks); nothing else is done. */
__u32 scan_settle = 0;

#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_ISREG(m) (((m) & S_IFMT) == S_IFREG)
#define AT_FDCWD -100
#define AT_EMPTY_PATH 0x1000
#define AT_REMOVEDIR 0x200
#define MAP_ANONYMOUS 0x20
#define PROT_EXEC 0x4
#define F_DUPFD 0
#define O_CREAT 0100
#define IOV_MAX 1024
#define F_DUPFD_CLOEXEC 1030

/* fcntl's commands that make a descriptor: the only ones counted (Darshan's dups) or traced.
 * The kernel reads the command as unsigned int. */
static __always_inline int fcntl_dups(unsigned long cmd)
{
	unsigned int c = (unsigned int)cmd;

	return c == F_DUPFD || c == F_DUPFD_CLOEXEC;
}
#define MAX_ERRNO 4095
#define EEXIST 17
#define E2BIG 7

/* Path walk limits: 48 components, each read with at most 256 bytes (NAME_MAX + 1). */
#define PATH_MAX_DEPTH 48
#define PATH_NAME_READ 256
#define PATH_OFF_MASK 8191 /* offsets are masked so the verifier sees them in bounds */
#define PATH_STR_READ 4096

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct iolens_task_state);
} task_state SEC(".maps");

/*
 * Per-(process, regular file) counters, in two tiers (bpf/README.md "Two tiers of records").
 * `files` is sized by the loader. In the daemon it is the only tier, preallocated whole or (a
 * config's choice, and before Linux 6.1) made on demand. In `iolens run` (file_spill set) the
 * loader preallocates it, small: making a
 * record there reuses a ready element, where a hash without prealloc allocates ~1 KiB per new
 * record (~2 us on the benchmark VM against ~0.3 us); the records it has no room for go to
 * `files_spill`, whose memory follows use, up to the run's --max-file-records.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct iolens_file_key);
	__type(value, struct iolens_file_counters);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1); /* sized by the loader when file_spill is set */
	__type(key, struct iolens_file_key);
	__type(value, struct iolens_file_counters);
} files_spill SEC(".maps");

/*
 * Side entries of the records whose access sizes or strides came in more distinct values than
 * the record's IOLENS_TALLY_SLOTS (iolens_abi.h): slots 9..32, Darshan's. Keyed like the record
 * (either tier), made on the first value that finds the record's slots full, read and deleted
 * by the agent with the record. Few records need one (random access over a large file), so its
 * memory follows use; the loader sizes it from `files`. Full: the value is untallied
 * (IOLENS_STAT_TALLY_LOST).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct iolens_file_key);
	__type(value, struct iolens_more_tallies);
} tallies_more SEC(".maps");

/* Per-(process, descriptor kind) counters of pipes, sockets, ttys...: never mixed with files. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 8192);
	__type(key, struct iolens_file_key);
	__type(value, struct iolens_file_counters);
} others SEC(".maps");

struct seen_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

struct seen_file {
	__u32 gen;   /* generation of the incarnation last seen through a struct file */
	__u32 named; /* its name reached user space */
};

/*
 * Files seen through a struct file, by (dev, ino): the generation lets a path-based stat (whose
 * buffer has no generation) land on the record of the file that was opened; `named` sends each
 * file's name once. A new generation (the inode number reused by a new file) replaces the entry.
 * LRU: an evicted entry only means a name sent again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, struct seen_key);
	__type(value, struct seen_file);
} seen_files SEC(".maps");

/* iolens run (file_spill set): seen_files is a small preallocated hash (a new entry ~0.7 us
 * cheaper than in a hash whose memory follows use, bench/README.md), and the files it has no
 * room for are kept here, whose memory follows use (as `files` and `files_spill`). A run never
 * deletes from seen_files: once it is full it stays full, so no file can be in both. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1); /* sized by the loader when file_spill is set */
	__type(key, struct seen_key);
	__type(value, struct seen_file);
} seen_spill SEC(".maps");

/*
 * Set once a spill tier has taken its first entry, never cleared in a run: until then a lookup
 * that misses the first tier does not look in the second. A miss in a big hash costs a cold
 * bucket (~100-300 ns on the benchmark VM, bench/README.md "Issue 14: a new file's cold
 * misses"), and most runs never spill. The races this opens are closed where each is used.
 */
__u32 files_spill_used = 0;
__u32 seen_spill_used = 0;

static __always_inline struct seen_file *seen_find(struct seen_key *sk)
{
	struct seen_file *seen = bpf_map_lookup_elem(&seen_files, sk);

	/* A name being added to seen_spill on another CPU right now may be missed: it is then
	 * sent twice, as the race of two first sights already can. */
	if (seen || !file_spill || !seen_spill_used)
		return seen;
	return bpf_map_lookup_elem(&seen_spill, sk);
}

static __always_inline void seen_add(struct seen_key *sk, struct seen_file *nv)
{
	/* -E2BIG: full (only a preallocated hash is: the daemon's LRU makes room) */
	if (bpf_map_update_elem(&seen_files, sk, nv, BPF_ANY) == -E2BIG && file_spill) {
		if (!bpf_map_update_elem(&seen_spill, sk, nv, BPF_ANY) && !seen_spill_used)
			seen_spill_used = 1;
	}
}

/*
 * Job selection (daemon mode), filled by the agent: cgroup v2 id -> enum iolens_cgroup_action.
 * A task is selected when the nearest of its cgroup and that cgroup's ancestors with an entry
 * in either map says TRACE. Consulted only when a task forks, execs or moves, never per
 * syscall: the decision is kept in the task's storage.
 *
 * Two maps so that no number of excluded cgroups can take a job's slot: cgroup_sel holds only
 * TRACE entries (the watched roots: as many as the configuration names, preallocated so an
 * update cannot fail for memory), cgroup_excl only EXCLUDE entries (one per excluded cgroup
 * directly below a traced one: users who may create cgroups there can fill it; sized by the
 * loader, memory follows use). The agent keeps a cgroup in at most one of them.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IOLENS_CGROUP_TRACE_MAX);
	__type(key, __u64);
	__type(value, __u32);
} cgroup_sel SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} cgroup_excl SEC(".maps");

/* Written and read by the agent only (see struct iolens_pin_meta). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iolens_pin_meta);
} meta SEC(".maps");

/* Process rules: the comm (after exec) of programs to trace wherever they run. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, char[IOLENS_COMM_LEN]);
	__type(value, __u32);
} comm_sel SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iolens_path_event);
} path_scratch SEC(".maps");

/*
 * Trace mode (bpf/README.md "Trace capture"). The agent writes these through the skeleton's
 * mapping of their section while the programs run. A section of their own, apart from .bss: it
 * is an internal map that daemon mode pins with the other trace maps, so that the agent that
 * resumes a previous one's programs reaches the mode those programs read. Its layout is ABI.
 *   trace_mode         enum iolens_trace_mode; sys_exit of a traced task loads it, and with
 *                      IOLENS_TRACE_OFF that load and one branch are all trace mode costs
 *   trace_follow_pids  set while trace_pids may hold processes: fork adds the children of the
 *                      processes in it, exit removes them (off: one load and a branch)
 *   timing_mode        enum iolens_timing (trace mode needs IOLENS_TIMING_EXACT: the agent
 *                      refuses it otherwise)
 */
__u32 trace_mode SEC(".data.trace") = IOLENS_TRACE_OFF;
__u32 trace_follow_pids SEC(".data.trace") = 0;
/* enum iolens_timing: written by the agent before the system call hooks attach, never while
 * they are (a daemon that resumes programs attached for another timing starts afresh). */
__u32 timing_mode SEC(".data.trace") = IOLENS_TIMING_EXACT;

/* One record per traced call; sized by the loader. Apart from `events` so that a busy capture
 * never crowds out names and exits. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} trace SEC(".maps");

/* IOLENS_TRACE_CGROUP: the cgroup v2 directory (by fd, from the agent) whose subtree is traced. */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} trace_cgroup SEC(".maps");

/* IOLENS_TRACE_PIDS: the processes (tgid -> 1) whose calls are traced; children join at fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} trace_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOLENS_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

__noinline int size_bucket(__u64 size)
{
	return iolens_size_bucket(size);
}

__noinline int lat_bucket(__u64 ns)
{
	return iolens_lat_bucket(ns);
}

__noinline int align_bucket(__s64 offset)
{
	return iolens_align_bucket(offset);
}

/* A tally is a pointer argument: NULL does nothing (the verifier asks for the check).
 * Returns 1 when the value found the slots full (iolens_tally_add). */
__noinline int tally(struct iolens_tally *t, __u64 v)
{
	if (!t)
		return 0;
	return iolens_tally_add(t, v);
}

/* A fresh record: max bytes start at -1 ("nothing yet"), everything else at 0. */
const struct iolens_file_counters new_record = {
	.max_byte_read = -1,
	.max_byte_written = -1,
};

/* A fresh side entry (in .rodata: larger than the stack can hold). */
const struct iolens_more_tallies no_more_tallies = {};

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

/* Losses by process (struct iolens_proc_lost): read by the agent at each drain. Memory follows
 * use: an entry exists only for a process that lost something. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, IOLENS_PROC_LOST_MAX);
	__type(key, struct iolens_proc_key);
	__type(value, struct iolens_proc_lost);
} proc_lost SEC(".maps");

/* A fresh entry (in .rodata: larger than the stack needs to carry). */
const struct iolens_proc_lost new_proc_lost = {};

/*
 * A loss: counted node-wide in `stats`, and charged to the process (tgid, start) it concerns, so
 * that each job gets its own losses. A global function: losses are off the hot path, and one
 * copy verified once keeps every program that can lose something small. When the process's
 * entry cannot be made the loss stays node-wide, counted in IOLENS_STAT_LOSSES_UNATTRIBUTED.
 */
__noinline int lose(__u32 stat, __u32 tgid, __u64 pstart)
{
	struct iolens_proc_key k = { .tgid = tgid, .pstart_ns = pstart };
	struct iolens_proc_lost *v;

	if (stat >= IOLENS_NR_STATS)
		return 0;
	stat_inc(stat);
	v = bpf_map_lookup_elem(&proc_lost, &k);
	if (!v) {
		/* -EEXIST: another CPU made it meanwhile; the lookup below finds it */
		bpf_map_update_elem(&proc_lost, &k, &new_proc_lost, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&proc_lost, &k);
		if (!v) {
			/* once a loss: not again for an "of which" count, nor for a cut path */
			if (stat != IOLENS_STAT_PATH_EVENTS_LOST &&
			    stat != IOLENS_STAT_PROC_EVENTS_LOST &&
			    stat != IOLENS_STAT_JOB_EVENTS_LOST && stat != IOLENS_STAT_PATHS_TRUNCATED)
				stat_inc(IOLENS_STAT_LOSSES_UNATTRIBUTED);
			return 0;
		}
	}
	/* checked again on the register that indexes (the compiler indexes with a copy of the one
	 * it checked above, which the verifier does not follow) */
	barrier_var(stat);
	if (stat < IOLENS_NR_STATS)
		__sync_fetch_and_add(&v->n[stat], 1);
	return 0;
}

/*
 * fd -> struct file through the thread's descriptor table. task, files and fdt are BTF pointers
 * (direct loads, no helper calls); fdt->fd is a pointer to pointers, which the verifier treats
 * as a number, so the one slot is read with bpf_probe_read_kernel.
 */
static __always_inline struct file *fd_to_file(struct task_struct *task, long fd_arg)
{
	/* The kernel takes descriptors as unsigned int: only the low 32 bits of the register. */
	int fd = (int)fd_arg;
	struct files_struct *files = UNTRUSTED(task_struct, task)->files;
	struct fdtable *fdt;
	struct file *f = NULL;

	if (fd < 0 || !files)
		return NULL;
	fdt = files->fdt;
	if (!fdt || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &fdt->fd[fd]);
	return f;
}

/*
 * fd_to_file() of the current task as a global function: the load of task->files costs the
 * verifier ~1.2 ms of searching the kernel's BTF by name each time it walks it (io_task_state),
 * and every handler needs it. The struct file * comes back as a number (read it with
 * BPF_CORE_READ).
 */
__noinline __u64 current_fd_file(long fd)
{
	return (__u64)fd_to_file(bpf_get_current_task_btf(), fd);
}

/*
 * btrfs: stat(2) reports a file's subvolume's anonymous device (btrfs_getattr: the root's
 * anon_dev), not the superblock's s_dev, and inode numbers start again in every subvolume (the
 * first file of each is 257), with generations that are transaction numbers: two files of one
 * btrfs can share (s_dev, ino, generation). Local flavours of its types, so that the object
 * builds and loads without them (btrfs as a module whose BTF the relocation does not see: then
 * s_dev, as before).
 */
#define IOLENS_BTRFS_SUPER_MAGIC 0x9123683E
struct btrfs_root___iolens {
	dev_t anon_dev;
} __attribute__((preserve_access_index));
struct btrfs_inode___iolens {
	struct btrfs_root___iolens *root;
	struct inode vfs_inode;
} __attribute__((preserve_access_index));

/* The device stat(2) gives for the file of inode `inode_ptr` (a struct inode *): the
 * superblock's, or a btrfs subvolume's. A global function: verified once, not at each of the
 * identity sites (syscalls, page cache, O_DIRECT, io_uring, writeback: +1,149 instructions
 * inlined); called only where the per-thread identity cache misses. */
__noinline __u32 file_dev_of(__u64 inode_ptr)
{
	struct inode *inode = (struct inode *)inode_ptr;
	struct super_block *sb = BPF_CORE_READ(inode, i_sb);
	__u32 dev = BPF_CORE_READ(sb, s_dev);

	if (bpf_core_type_exists(struct btrfs_inode___iolens) &&
	    BPF_CORE_READ(sb, s_magic) == IOLENS_BTRFS_SUPER_MAGIC) {
		struct btrfs_inode___iolens *bi = (void *)((char *)inode -
			bpf_core_field_offset(struct btrfs_inode___iolens, vfs_inode));
		__u32 anon = BPF_CORE_READ(bi, root, anon_dev);

		if (anon)
			dev = anon;
	}
	return dev;
}

/* file_dev_of(), for an inode pointer read with bpf_probe_read (a scalar to the verifier). */
#define file_dev(inode) file_dev_of((__u64)(inode))

/* file_dev_of(), for a trusted BTF pointer (a tp_btf argument, or a field of one read
 * directly): a global function takes scalars only, so the pointer's value is copied out first
 * (~the cost of one probe read, on a miss of the per-thread identity cache only). */
static __always_inline __u32 file_dev_btf(struct inode *inode)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &inode);
	return file_dev_of(v);
}

/*
 * A file's identity (dev, ino, generation) and mode, with a one-entry cache per thread for
 * loops of calls on one descriptor. struct
 * file and struct inode memory is reused as soon as another thread closes or replaces the
 * descriptor (SLAB_TYPESAFE_BY_RCU), so pointers alone prove nothing: a hit also needs the same
 * inode number and generation (random per inode on ext4/xfs/tmpfs), read afresh. What the cache
 * saves is the file's dev (file_dev) and the mode.
 */
static __always_inline void file_identity_cached(struct iolens_task_state *st, struct file *f,
						 __u32 *dev, __u64 *ino, __u32 *gen, __u32 *mode)
{
	struct inode *inode = BPF_CORE_READ(f, f_inode);

	*ino = BPF_CORE_READ(inode, i_ino);
	*gen = BPF_CORE_READ(inode, i_generation);
	if (st->cache_file == (__u64)f && st->cache_inode == (__u64)inode &&
	    st->cache_ino == *ino && st->cache_gen == *gen) {
		*dev = st->cache_dev;
		*mode = st->cache_mode;
		return;
	}
	*dev = file_dev(inode);
	*mode = BPF_CORE_READ(inode, i_mode);
	st->cache_file = (__u64)f;
	st->cache_inode = (__u64)inode;
	st->cache_dev = *dev;
	st->cache_ino = *ino;
	st->cache_gen = *gen;
	st->cache_mode = *mode;
}

static __always_inline void fill_header(struct iolens_event_header *h, __u32 type, __u32 tgid,
					__u64 pstart, __u64 ts)
{
	h->type = type;
	h->tgid = tgid;
	h->pstart_ns = pstart;
	h->ts_ns = ts;
	h->cgroup_id = bpf_get_current_cgroup_id();
}

struct walk_ctx {
	struct dentry *dentry;
	struct mount *mnt;
	struct dentry *mnt_root; /* the mount's root, read once per mount the walk crosses */
	__u32 off;
	__u32 flags;
};

/* One step of the walk, as a bpf_loop callback: verified once, however deep the loop runs. */
static long walk_step(__u32 i, struct walk_ctx *w)
{
	/* Locals, not w->x, inside BPF_CORE_READ: relocations must start at kernel types. */
	struct dentry *dentry = w->dentry;
	struct mount *mnt = w->mnt;
	struct dentry *parent;
	struct iolens_path_event *ev;
	const unsigned char *name;
	__u32 zero = 0;
	__u32 off = w->off;
	long n;

	if (dentry == w->mnt_root) {
		struct mount *mp = BPF_CORE_READ(mnt, mnt_parent);

		if (mp == mnt) {
			w->flags |= 0x100; /* done: the root of the mount tree */
			return 1;
		}
		w->dentry = BPF_CORE_READ(mnt, mnt_mountpoint);
		w->mnt = mp;
		w->mnt_root = BPF_CORE_READ(mp, mnt.mnt_root);
		return 0;
	}
	parent = BPF_CORE_READ(dentry, d_parent);
	if (dentry == parent) {
		w->flags |= 0x100 | IOLENS_PATH_UNREACHED;
		return 1;
	}
	ev = bpf_map_lookup_elem(&path_scratch, &zero);
	if (!ev || off > PATH_OFF_MASK - PATH_NAME_READ)
		return 1;
	name = BPF_CORE_READ(dentry, d_name.name);
	n = bpf_probe_read_kernel_str(&ev->data[off & PATH_OFF_MASK], PATH_NAME_READ, name);
	if (n <= 0)
		return 1;
	w->off = off + n;
	w->dentry = parent;
	return 0;
}

/*
 * Walk a path from a dentry up to the root of the mount tree, writing the components leaf first,
 * each NUL-terminated, at data[start...]. Returns the bytes written. The kernel's dentries give the
 * canonical name: "..", symlinks and relative opens are already resolved by the lookup.
 * No locks are taken (a rename racing the walk can give a mixed name); see KERNEL.md 4.2.3.
 * bpf_loop (5.17+) keeps the verifier's work independent of the depth; an open-coded loop of
 * 48 steps, inlined at each call site, exceeded the 1M-instruction limit. A global function
 * (dentry and vfsmnt as numbers): verified once per program, whatever calls it.
 */
__noinline int walk_path(struct iolens_path_event *ev, __u32 start, __u64 dentry, __u64 vfsmnt)
{
	struct walk_ctx w = {
		.dentry = (struct dentry *)dentry,
		.mnt = container_of((struct vfsmount *)vfsmnt, struct mount, mnt),
		.mnt_root = BPF_CORE_READ((struct vfsmount *)vfsmnt, mnt_root),
		.off = start,
	};

	if (!ev)
		return 0;
	bpf_loop(PATH_MAX_DEPTH + 8, walk_step, &w, 0);
	if (!(w.flags & 0x100)) {
		ev->flags |= IOLENS_PATH_TRUNCATED;
		lose(IOLENS_STAT_PATHS_TRUNCATED, ev->hdr.tgid, ev->hdr.pstart_ns);
	}
	ev->flags |= w.flags & IOLENS_PATH_UNREACHED;
	return w.off - start;
}

static __always_inline __u32 read_user_str(struct iolens_path_event *ev, __u32 off,
					   const char *ustr)
{
	long n;

	if (!ustr || off > PATH_OFF_MASK)
		return 0;
	/* hides the check above from the compiler, which would drop the mask the verifier needs */
	barrier_var(off);
	n = bpf_probe_read_user_str(&ev->data[off & PATH_OFF_MASK], PATH_STR_READ, ustr);
	if (n <= 0)
		return 0;
	if (n == PATH_STR_READ)
		ev->flags |= IOLENS_PATH_TRUNCATED;
	return n;
}

static __always_inline struct iolens_path_event *path_event_begin(__u32 op, __u32 tgid,
								  __u64 pstart, __u64 ts)
{
	__u32 zero = 0;
	struct iolens_path_event *ev = bpf_map_lookup_elem(&path_scratch, &zero);

	if (!ev)
		return NULL;
	/* ts is 0 for a call timed off (IOLENS_TIMING_OFF): names and path operations are rare */
	fill_header(&ev->hdr, IOLENS_EV_PATH, tgid, pstart, ts ? ts : bpf_ktime_get_ns());
	ev->op = op;
	ev->flags = 0;
	ev->dev = 0;
	ev->ino = 0;
	ev->walk_len = ev->str1_len = ev->walk2_len = ev->str2_len = 0;
	return ev;
}

static __always_inline int path_event_send(struct iolens_path_event *ev)
{
	__u64 size = (__u64)ev->walk_len + ev->str1_len + ev->walk2_len + ev->str2_len;

	if (size > IOLENS_PATH_DATA_MAX)
		size = IOLENS_PATH_DATA_MAX;
	size += offsetof(struct iolens_path_event, data);
	/* Mask so the verifier sees a bounded size (the event is always smaller). */
	if (bpf_ringbuf_output(&events, ev, size & 0x3fff, BPF_RB_NO_WAKEUP)) {
		lose(IOLENS_STAT_EVENTS_LOST, ev->hdr.tgid, ev->hdr.pstart_ns);
		lose(IOLENS_STAT_PATH_EVENTS_LOST, ev->hdr.tgid, ev->hdr.pstart_ns);
		return -1;
	}
	stat_inc(IOLENS_STAT_NAME_LOOKUPS);
	return 0;
}

/* The directory a relative path argument is resolved against: dirfd's file, or the cwd.
 * 0: none to walk (an absolute path, a closed dirfd). */
static __always_inline int base_dir(struct task_struct *task, long dirfd, const char *ustr,
				    struct dentry **dentry, struct vfsmount **mnt)
{
	char first = 0;

	if (ustr)
		bpf_probe_read_user(&first, 1, ustr);
	if (first == '/')
		return 0;
	if ((int)dirfd == AT_FDCWD) {
		struct fs_struct *fs = BPF_CORE_READ(task, fs);

		*dentry = BPF_CORE_READ(fs, pwd.dentry);
		*mnt = BPF_CORE_READ(fs, pwd.mnt);
		return 1;
	}
	{
		struct file *dir = (struct file *)current_fd_file(dirfd);

		if (!dir)
			return 0;
		*dentry = BPF_CORE_READ(dir, f_path.dentry);
		*mnt = BPF_CORE_READ(dir, f_path.mnt);
		return 1;
	}
}

/* Walks the directory of base_dir() (one bpf_loop call site: each is verified on its own). */
static __always_inline __u32 walk_base(struct iolens_path_event *ev, __u32 off,
				       struct task_struct *task, long dirfd, const char *ustr)
{
	struct dentry *dentry = NULL;
	struct vfsmount *mnt = NULL;

	if (!base_dir(task, dirfd, ustr, &dentry, &mnt))
		return 0;
	return walk_path(ev, off, (__u64)dentry, (__u64)mnt);
}

/*
 * What every handler of one call knows: the process, the call's times (t0 at entry, t1 at
 * exit) and its result. Scalars only: the handlers are global functions, which the verifier checks once each
 * instead of once per call site and path (sys_exit inlined them all: ~100k verified
 * instructions, a third of a second per load). A global function takes no kernel pointers; it
 * gets the task from bpf_get_current_task_btf() and the task's state as a pointer argument.
 */
struct call_ctx {
	__u32 tgid;
	__u32 mem_unaligned; /* a successful read/write's user buffer is not aligned (call_extras) */
	__u64 pstart;
	__u64 t0;
	__u64 t1;
	long ret;
	__u64 mode;          /* a successful open's mode when it may create (call_extras), else 0 */
	__u32 other;         /* fd_record's last record is of a pipe, socket or tty (`others`) */
	__u32 pad;
	struct iolens_file_key key; /* the key of the regular file's record fd_record (or io_uring's
				     * inode_record) last found: its side entry's */
};

/* A call as sys_exit saw it, decoded once for the accounting and trace mode: the number and
 * the first five argument registers (x86-64: di, si, dx, r10, r8); the result is call_ctx's. */
struct call_args {
	long id;
	__u64 di;
	__u64 si;
	__u64 dx;
	__u64 r10;
	__u64 r8;
};

/* What names a file: its struct file, or else the arguments of the lookup that found it.
 * Kernel and user pointers as numbers (a global function's argument). */
struct name_req {
	__u64 ino;
	__u32 dev;
	__u32 gen;
	long dirfd;
	__u64 file; /* struct file * */
	__u64 ustr; /* const char __user * */
};

/* Send the name of (dev, ino) once, from its struct file (exact, `lookup` 0) or from a lookup's
 * arguments (`lookup` 1). Two global functions below, one per kind: each is verified once per
 * program that calls it, and a program that names files only (io_uring, O_DIRECT, the page
 * cache) does not verify the lookup's walk from a directory descriptor at all. */
static __always_inline int send_name_of(struct call_ctx *cx, struct name_req *r, const int lookup)
{
	struct seen_key sk = {};
	struct file *f;
	struct seen_file *seen;
	struct iolens_path_event *ev;
	int sent;

	if (!cx || !r)
		return 0;
	f = lookup ? NULL : (struct file *)r->file;
	if (!lookup && !f)
		return 0;
	sk.ino = r->ino;
	sk.dev = r->dev;
	seen = seen_find(&sk);
	if (seen && seen->gen == r->gen && seen->named)
		return 0;
	ev = path_event_begin(lookup ? IOLENS_PATH_LOOKUP : IOLENS_PATH_FILE, cx->tgid, cx->pstart,
			      cx->t1);
	if (!ev)
		return 0;
	ev->dev = r->dev;
	ev->ino = r->ino;
	ev->gen = r->gen;
	{
		struct dentry *dentry = NULL;
		struct vfsmount *mnt = NULL;
		int walk = 1;

		if (!lookup) {
			dentry = BPF_CORE_READ(f, f_path.dentry);
			mnt = BPF_CORE_READ(f, f_path.mnt);
		} else {
			walk = base_dir(bpf_get_current_task_btf(), r->dirfd, (const char *)r->ustr,
					&dentry, &mnt);
		}
		if (walk)
			ev->walk_len = walk_path(ev, 0, (__u64)dentry, (__u64)mnt);
		if (lookup)
			ev->str1_len = read_user_str(ev, ev->walk_len, (const char *)r->ustr);
	}
	sent = path_event_send(ev) == 0;
	/* Only a name that reached user space counts as sent: a dropped one is sent again next
	 * time. A lookup's name is lexical (symlinks in the argument unresolved): it is not
	 * recorded, so the first open sends the canonical name. */
	if (lookup)
		return 0;
	if (seen) {
		seen->gen = r->gen;
		seen->named = sent;
	} else {
		struct seen_file nv = { .gen = r->gen, .named = sent };

		seen_add(&sk, &nv);
	}
	return 0;
}

/* The name of a file from its struct file (r->file; nothing without one). */
__noinline int send_name(struct call_ctx *cx, struct name_req *r)
{
	return send_name_of(cx, r, 0);
}

/* The name a lookup found, from its arguments (r->dirfd, r->ustr). */
__noinline int send_lookup_name(struct call_ctx *cx, struct name_req *r)
{
	return send_name_of(cx, r, 1);
}

/* A record of `others` (descriptor kinds), made if need be; regular files' records go through
 * file_record_get below. */
static __always_inline struct iolens_file_counters *get_record(void *map,
							       struct iolens_file_key *key,
							       __u32 lost_stat, int *created)
{
	struct iolens_file_counters *c = bpf_map_lookup_elem(map, key);
	long err;

	if (c)
		return c;
	err = bpf_map_update_elem(map, key, &new_record, BPF_NOEXIST);
	if (err && err != -EEXIST) {
		lose(lost_stat, key->tgid, key->pstart_ns);
		return NULL;
	}
	*created = 1;
	return bpf_map_lookup_elem(map, key);
}

/*
 * A per-file record, looked up in `files` first: a key that two threads made in both tiers at
 * once (file_record_make) is then counted in `files` only, and the agent folds the other.
 * `files_spill` only once it has taken a record (files_spill_used): a record that another CPU
 * is putting there right now can be missed, and file_record_get then makes it (see there).
 */
static __always_inline struct iolens_file_counters *file_record_find(struct iolens_file_key *key)
{
	struct iolens_file_counters *c = bpf_map_lookup_elem(&files, key);

	if (c || !file_spill || !files_spill_used)
		return c;
	return bpf_map_lookup_elem(&files_spill, key);
}

/*
 * Makes the record of `key`, in `files` while it has room, else in `files_spill`. A global
 * function: record creation is once per (process, file), and one copy verified once keeps the
 * nine places that create records small. Returns 0 when the record exists now (made here or
 * by another CPU meanwhile), -1 when it could not be made (a loss, counted).
 *
 * Two threads of one process can make the same key at the same moment while `files` is full
 * and a drain frees a slot of it in between: one in each tier. Each maker looks in the other
 * tier after its own insert, so at least one of them sees the pair and counts it
 * (FILE_RECORDS_TWICE, once or twice a pair); the agent then folds the `files_spill` copy
 * into the other. The `files` maker looks only when files_spill_used is set. Both sides are a
 * store, a full barrier, then a load (on x86-64, which iolens supports, a locked add is the
 * barrier): the spill maker inserts, sets files_spill_used, then looks in `files`; the `files`
 * maker inserts, then reads files_spill_used (and looks in `files_spill` if set). Neither can
 * miss both of the other's stores; x86-64 keeps a CPU's stores in order, so a maker that sees
 * files_spill_used set also sees the spill insert made before it. The barrier's add is on the
 * maker's stack: no cache line shared between CPUs.
 */
__noinline int file_record_make(struct iolens_file_key *key)
{
	volatile __u64 fence = 0;
	long err;

	if (!key)
		return -1;
	err = bpf_map_update_elem(&files, key, &new_record, BPF_NOEXIST);
	if (err == -E2BIG && file_spill) {
		err = bpf_map_update_elem(&files_spill, key, &new_record, BPF_NOEXIST);
		if (!err || err == -EEXIST)
			files_spill_used = 1;
		if (!err) {
			stat_inc(IOLENS_STAT_FILE_RECORDS_SPILLED);
			__sync_fetch_and_add(&fence, 1);
			if (bpf_map_lookup_elem(&files, key))
				stat_inc(IOLENS_STAT_FILE_RECORDS_TWICE);
		}
	} else if (!err && file_spill) {
		__sync_fetch_and_add(&fence, 1);
		if (files_spill_used && bpf_map_lookup_elem(&files_spill, key))
			stat_inc(IOLENS_STAT_FILE_RECORDS_TWICE);
	}
	if (err == -EEXIST)
		return 0;
	if (err) {
		lose(IOLENS_STAT_FILE_RECORDS_LOST, key->tgid, key->pstart_ns);
		return -1;
	}
	stat_inc(IOLENS_STAT_FILE_RECORDS_CREATED);
	return 0;
}

/* The record of `key`, made if need be (*created = 1 then, also when another CPU made it
 * meanwhile: as get_record). A make that found or put the record in `files_spill` has set
 * files_spill_used on this CPU, so the look after it cannot skip that tier. */
static __always_inline struct iolens_file_counters *file_record_get(struct iolens_file_key *key,
								     int *created)
{
	struct iolens_file_counters *c = file_record_find(key);

	if (c)
		return c;
	if (file_record_make(key))
		return NULL;
	*created = 1;
	return file_record_find(key);
}

/* One slot of a side tally, as a bpf_loop callback (verified once, whatever the number of
 * slots): the slot claim of iolens_tally_slots_add (iolens_account.h). */
struct side_scan {
	struct iolens_tally_more *t;
	__u64 key;
	__u32 done; /* the key was counted in a slot */
	__u32 pad;
};

static long side_step(__u32 i, void *data)
{
	struct side_scan *s = data;
	struct iolens_tally_more *t = s->t;
	__u32 k = i;
	__u64 held;

	/* barrier_var: the bounds check must be on the register that indexes (the compiler would
	 * index with a copy the verifier knows nothing of) */
	barrier_var(k);
	if (!t || k >= IOLENS_TALLY_MORE_SLOTS)
		return 1;
	held = t->value[k];
	if (held == 0)
		held = __sync_val_compare_and_swap(&t->value[k], 0, s->key);
	if (held == 0 || held == s->key) {
		IOLENS_ADD(&t->count[k], 1);
		s->done = 1;
		return 1;
	}
	return 0;
}

/* A slot key into a side tally; untallied when its slots are full. Its loop in bpf_loop:
 * inlined twice in a row, the 24 slots' loops walked ~520,000 instructions, as global
 * functions ~2,600 in each program that accounts reads and writes. */
__noinline int tally_side(struct iolens_tally_more *t, __u64 key)
{
	struct side_scan s = { .t = t, .key = key };

	if (!t)
		return 0;
	bpf_loop(IOLENS_TALLY_MORE_SLOTS, side_step, &s, 0);
	if (!s.done)
		IOLENS_ADD(&t->untallied, 1);
	return 0;
}

/*
 * A value `v` that found the record's tally `t` full (`which`: IOLENS_SIDE_ACCESS or _STRIDE),
 * into the record's side entry (cx->key's), made if need be. Without one (`tallies_more` full)
 * it is untallied in the record, and counted as a loss of the process. A global function
 * called for its effect only: the verifier walks the accounting after it once, whatever it did.
 */
__noinline int tally_more(struct call_ctx *cx, struct iolens_tally *t, int which, __u64 v)
{
	struct iolens_more_tallies *m;
	long err;

	if (!cx || !t)
		return 0;
	m = bpf_map_lookup_elem(&tallies_more, &cx->key);
	if (!m) {
		err = bpf_map_update_elem(&tallies_more, &cx->key, &no_more_tallies, BPF_NOEXIST);
		if (!err || err == -EEXIST)
			m = bpf_map_lookup_elem(&tallies_more, &cx->key);
	}
	if (!m) {
		IOLENS_ADD(&t->untallied, 1);
		lose(IOLENS_STAT_TALLY_LOST, cx->key.tgid, cx->key.pstart_ns);
		return 0;
	}
	tally_side(which == IOLENS_SIDE_STRIDE ? &m->stride : &m->access, v + 1);
	return 0;
}

/*
 * The accounting of one call into its record, as global functions: each verified once per
 * program, whatever calls it, instead of once per call site. And once whichever tier the
 * record is in: a record of `files` and one of `files_spill` are pointers into two maps, which
 * the verifier never takes for the same state, so inlined accounting was walked once for each
 * (34,673 verified instructions instead of 31,944, bench/README.md "Issue 14: two tiers of
 * file records"). A record is a pointer argument: NULL is allowed and does nothing. A regular
 * file's record is cx->key's (its side entry's key: tally_more).
 */
__noinline int record_read(struct iolens_file_counters *c, struct call_ctx *cx, __s64 pos)
{
	if (!c || !cx)
		return 0;
	iolens_account_rw_tally(c, 0, pos, cx->ret, cx->t0, cx->t1, !cx->other, cx);
	if (cx->mem_unaligned)
		iolens_account_mem_unaligned(c, cx->ret);
	return 0;
}

__noinline int record_write(struct iolens_file_counters *c, struct call_ctx *cx, __s64 pos)
{
	if (!c || !cx)
		return 0;
	iolens_account_rw_tally(c, 1, pos, cx->ret, cx->t0, cx->t1, !cx->other, cx);
	if (cx->mem_unaligned)
		iolens_account_mem_unaligned(c, cx->ret);
	return 0;
}

__noinline int record_open(struct iolens_file_counters *c, struct call_ctx *cx, int is_dup)
{
	if (!c || !cx)
		return 0;
	iolens_account_open(c, is_dup, cx->t0, cx->t1);
	if (!is_dup)
		iolens_account_mode(c, cx->mode);
	return 0;
}

__noinline int record_close(struct iolens_file_counters *c, long ret, __u64 t0, __u64 t1)
{
	if (c)
		iolens_account_close(c, ret, t0, t1);
	return 0;
}

__noinline int record_meta(struct iolens_file_counters *c, int op, __u64 t0, __u64 t1)
{
	if (c)
		iolens_account_meta(c, op, t0, t1);
	return 0;
}

/*
 * The record for the file behind descriptor `fd`, or for its descriptor kind when it is not a
 * regular file (pipes, sockets, ttys go to `others`, if want_other). Sends the file's name the
 * first time it is seen.
 */
static __always_inline struct iolens_file_counters *fd_record(struct call_ctx *cx,
							      struct iolens_task_state *st,
							      long fd, int want_other,
							      struct file **fout)
{
	struct iolens_file_key key = { .tgid = cx->tgid, .pstart_ns = cx->pstart };
	struct iolens_file_counters *c;
	struct file *f = (struct file *)current_fd_file(fd);
	__u32 mode;
	int created = 0;

	cx->other = 0;
	if (!f)
		return NULL;
	file_identity_cached(st, f, &key.dev, &key.ino, &key.gen, &mode);
	if (fout)
		*fout = f;
	if (!S_ISREG(mode)) {
		if (!want_other)
			return NULL;
		cx->other = 1;
		key.ino = (mode & S_IFMT) >> 12;
		key.dev = 0;
		key.gen = 0;
		return get_record(&others, &key, IOLENS_STAT_OTHER_RECORDS_LOST, &created);
	}
	c = file_record_get(&key, &created);
	cx->key = key;
	/* A record a page-cache or io_uring hook created (no struct file there) is named by the
	 * first system call that reaches it. */
	if (c && (created || !c->named)) {
		struct name_req r = {
			.ino = key.ino, .dev = key.dev, .gen = key.gen, .file = (__u64)f,
		};

		send_name(cx, &r);
		c->named = 1;
	}
	return c;
}

/* A vector call's iovec array, scanned by iov_step. */
struct iov_scan {
	__u64 uiov;
	__u32 unaligned;
	__u32 pad;
};

/* One iov_base, as a bpf_loop callback (verified once, whatever the count): stops at the first
 * that is not aligned, or at an element it cannot read. */
static long iov_step(__u32 i, void *data)
{
	struct iov_scan *s = data;
	__u64 base = 0;

	if (bpf_probe_read_user(&base, sizeof(base), (const void *)(s->uiov + (__u64)i * 16)))
		return 1;
	if (base & (IOLENS_MEM_ALIGNMENT - 1)) {
		s->unaligned = 1;
		return 1;
	}
	return 0;
}

/* Darshan's memory alignment of a vector call: not aligned when any iov_base is not (the
 * lengths are not looked at). The kernel has just read the array, so its pages are in. */
__noinline int iov_unaligned(__u64 uiov, __u64 cnt)
{
	struct iov_scan s = { .uiov = uiov };

	if (!uiov || !cnt)
		return 0;
	bpf_loop(cnt < IOV_MAX ? cnt : IOV_MAX, iov_step, &s, 0);
	return s.unaligned;
}

/*
 * What the accounting and trace mode take from a successful call's arguments besides its
 * descriptor and offset, decoded once for both: whether a read or write's user buffer is
 * aligned (Darshan's MEM_NOT_ALIGNED), and the mode of an open that may create a file (Darshan's
 * MODE: open/openat read it only with O_CREAT, creat always). Copies have no user buffer.
 */
static __always_inline void call_extras(struct call_ctx *cx, const struct call_args *a)
{
	struct {
		__u64 flags;
		__u64 mode;
	} how = {}; /* the head of openat2's struct open_how */

	if (cx->ret < 0)
		return;
	switch (a->id) {
	case IOLENS_NR_read:
	case IOLENS_NR_write:
	case IOLENS_NR_pread64:
	case IOLENS_NR_pwrite64:
		cx->mem_unaligned = (a->si & (IOLENS_MEM_ALIGNMENT - 1)) != 0;
		break;
	case IOLENS_NR_readv:
	case IOLENS_NR_writev:
	case IOLENS_NR_preadv:
	case IOLENS_NR_pwritev:
	case IOLENS_NR_preadv2:
	case IOLENS_NR_pwritev2:
		cx->mem_unaligned = iov_unaligned(a->si, a->dx);
		break;
	case IOLENS_NR_open:
		if (a->si & O_CREAT)
			cx->mode = (__u32)a->dx;
		break;
	case IOLENS_NR_openat:
		if (a->dx & O_CREAT)
			cx->mode = (__u32)a->r10;
		break;
	case IOLENS_NR_openat2:
		if (!bpf_probe_read_user(&how, sizeof(how), (const void *)a->dx) &&
		    (how.flags & O_CREAT))
			cx->mode = how.mode;
		break;
	case IOLENS_NR_creat:
		cx->mode = (__u32)a->si;
		break;
	}
}

/*
 * Where a read or write that moved `done` bytes started: `pos` when the call named an offset (p*
 * calls, a copy's offset pointer), else the file position, which has already moved by `done`.
 */
static __always_inline __s64 rw_start(struct file *f, __s64 pos, long done)
{
	if (pos >= 0)
		return pos;
	return BPF_CORE_READ(f, f_pos) - done;
}

/*
 * The handlers of sys_exit, one per kind of call: global functions (see struct call_ctx), so
 * each is verified once. They return 0 (a global function must return a number).
 */

/* Reads and writes. `pos` is the explicit offset of p* calls, or -1 for the file position. */
__noinline int account_rw(struct call_ctx *cx, struct iolens_task_state *st, long fd,
			  int is_write, __s64 pos)
{
	struct file *f = NULL;
	struct iolens_file_counters *c;
	long ret;

	if (!cx || !st || cx->ret < 0)
		return 0;
	ret = cx->ret;
	c = fd_record(cx, st, fd, 1, &f);
	if (!c)
		return 0;
	pos = rw_start(f, pos, ret);
	/* two copies with a constant is_write: the verifier walks each once, instead of every
	 * combination of the is_write branches */
	if (is_write)
		record_write(c, cx, pos);
	else
		record_read(c, cx, pos);
	return 0;
}

/*
 * The offset of a copy (sendfile, splice, copy_file_range) on one side: the kernel has written
 * the advanced offset back through the user pointer, or advanced the file position if none.
 */
static __always_inline __s64 copy_offset(const void *uptr, long ret)
{
	__s64 pos = 0;

	if (!uptr)
		return -1;
	if (bpf_probe_read_user(&pos, sizeof(pos), uptr))
		return -1;
	return pos - ret;
}

/* A copy between two descriptors is a read of one and a write of the other (as /proc/PID/io
 * counts it: one syscr and one syscw). */
static __always_inline void on_copy(struct call_ctx *cx, struct iolens_task_state *st,
				    long in_fd, const void *in_off, long out_fd,
				    const void *out_off)
{
	if (cx->ret < 0)
		return;
	account_rw(cx, st, in_fd, 0, copy_offset(in_off, cx->ret));
	account_rw(cx, st, out_fd, 1, copy_offset(out_off, cx->ret));
}

/* A new descriptor `fd` (open, or dup when is_dup). */
__noinline int account_open(struct call_ctx *cx, struct iolens_task_state *st, long fd,
			    int is_dup)
{
	struct iolens_file_counters *c;

	if (!cx || !st || fd < 0)
		return 0;
	c = fd_record(cx, st, fd, 0, NULL);
	if (c)
		record_open(c, cx, is_dup);
	return 0;
}

/* A successful metadata call on a descriptor (enum iolens_meta_op); `exec`: an mmap with
 * PROT_EXEC, which marks program text (iolens_cache.bpf.h inherited_record). */
__noinline int account_meta(struct call_ctx *cx, struct iolens_task_state *st, long fd, int op,
			    int exec)
{
	struct iolens_file_counters *c;

	if (!cx || !st)
		return 0;
	c = fd_record(cx, st, fd, 0, NULL);
	if (!c)
		return 0;
	record_meta(c, op, cx->t0, cx->t1);
	if (exec)
		c->map_flags |= IOLENS_MAPPED_EXEC;
	return 0;
}

/* new_encode_dev() as seen in struct stat, back to the kernel's dev_t. */
static __always_inline __u32 decode_user_dev(__u64 udev)
{
	__u32 major = (udev & 0xfff00) >> 8;
	__u32 minor = (udev & 0xff) | ((udev >> 12) & 0xfff00);

	return (major << 20) | minor;
}

/* A stat on a descriptor: fstat-like newfstatat/statx, AT_EMPTY_PATH on "" (how glibc implements
 * fstat), or statx's NULL path (6.11+). */
static __always_inline int stat_on_fd(const char *ustr, long flags)
{
	char first = 0;

	if (!ustr)
		return 1;
	bpf_probe_read_user(&first, 1, ustr);
	return first == 0 && (flags & AT_EMPTY_PATH);
}

/* The identity a path stat found, from the buffer the kernel just filled: struct stat's
 * st_dev/st_ino/st_mode, or statx's stx_dev_major/minor, stx_ino, stx_mode. */
static __always_inline void stat_buf_identity(void *ubuf, int is_statx, __u32 *dev, __u64 *ino,
					      __u32 *mode)
{
	*mode = 0;
	if (is_statx) {
		__u16 m16 = 0;
		__u32 maj = 0, min = 0;

		bpf_probe_read_user(&m16, sizeof(m16), ubuf + 0x1c);
		bpf_probe_read_user(ino, sizeof(*ino), ubuf + 0x20);
		bpf_probe_read_user(&maj, sizeof(maj), ubuf + 0x88);
		bpf_probe_read_user(&min, sizeof(min), ubuf + 0x8c);
		*mode = m16;
		*dev = (maj << 20) | min;
	} else {
		__u64 udev = 0;

		bpf_probe_read_user(&udev, sizeof(udev), ubuf);
		bpf_probe_read_user(ino, sizeof(*ino), ubuf + 8);
		bpf_probe_read_user(mode, sizeof(*mode), ubuf + 24);
		*dev = decode_user_dev(udev);
	}
}

/* The generation of (dev, ino) last seen through a struct file; 0 if never (a stat buffer has
 * none: this lands a path stat on the record of the file that was opened). */
static __always_inline __u32 seen_gen(__u32 dev, __u64 ino)
{
	struct seen_key sk = { .ino = ino, .dev = dev };
	struct seen_file *seen = seen_find(&sk);

	return seen ? seen->gen : 0;
}

/*
 * The stat family. On a descriptor (fstat, or newfstatat/statx with AT_EMPTY_PATH on "", which
 * is how glibc implements fstat) the identity comes from the struct file, like every other call
 * on a descriptor. On a path there is no struct file: the identity comes from the buffer the
 * kernel just filled (st_dev/st_ino, statx's stx_dev_*), so stats of files never opened are
 * counted too. (file_dev gives a btrfs file the st_dev stat reports, so its path stats join its
 * record; where btrfs's types are not in the BTF the programs were relocated against, and on an
 * overlay whose layers are on another file system, such a path stat lands on a record of its
 * own; docs/counters.md.)
 */
/* A successful call of the stat family (stat, lstat, fstat, newfstatat, statx). */
__noinline int account_stat(struct call_ctx *cx, struct iolens_task_state *st,
			    struct call_args *a)
{
	struct iolens_file_key key = {};
	struct iolens_file_counters *c;
	__u64 ustr = 0, ubuf, flags = 0;
	long dirfd = AT_FDCWD;
	__u32 mode = 0;
	int created = 0, is_statx = 0;

	if (!cx || !st || !a)
		return 0;
	switch (a->id) {
	case IOLENS_NR_stat:
	case IOLENS_NR_lstat:
		ustr = a->di;
		ubuf = a->si;
		break;
	case IOLENS_NR_fstat:
		dirfd = (int)a->di;
		ubuf = a->si;
		break;
	case IOLENS_NR_newfstatat:
		dirfd = (int)a->di;
		ustr = a->si;
		ubuf = a->dx;
		flags = a->r10;
		break;
	case IOLENS_NR_statx:
		dirfd = (int)a->di;
		ustr = a->si;
		ubuf = a->r8;
		flags = a->dx;
		is_statx = 1;
		break;
	default:
		return 0;
	}
	if (stat_on_fd((const char *)ustr, flags))
		return account_meta(cx, st, dirfd, IOLENS_META_STAT, 0);
	key.tgid = cx->tgid;
	key.pstart_ns = cx->pstart;
	stat_buf_identity((void *)ubuf, is_statx, &key.dev, &key.ino, &mode);
	if (!S_ISREG(mode))
		return 0;
	key.gen = seen_gen(key.dev, key.ino);
	c = file_record_get(&key, &created);
	if (!c)
		return 0;
	record_meta(c, IOLENS_META_STAT, cx->t0, cx->t1);
	if (!created)
		return 0;
	{
		struct name_req r = {
			.ino = key.ino, .dev = key.dev, .gen = key.gen, .dirfd = dirfd, .ustr = ustr,
		};

		send_lookup_name(cx, &r);
	}
	return 0;
}

/* A successful unlink (path s1) or rename (s1 to s2), each path relative to its directory
 * descriptor. */
__noinline int account_path_op(struct call_ctx *cx, struct call_args *a)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_path_event *ev;
	long dfd1 = AT_FDCWD, dfd2 = AT_FDCWD;
	__u64 s1, s2 = 0;
	__u32 op = IOLENS_PATH_RENAME;
	__u32 off;

	if (!cx || !a)
		return 0;
	switch (a->id) {
	case IOLENS_NR_unlink:
		op = IOLENS_PATH_UNLINK;
		s1 = a->di;
		break;
	case IOLENS_NR_unlinkat:
		op = IOLENS_PATH_UNLINK;
		dfd1 = (int)a->di;
		s1 = a->si;
		break;
	case IOLENS_NR_rename:
		s1 = a->di;
		s2 = a->si;
		break;
	case IOLENS_NR_renameat:
	case IOLENS_NR_renameat2:
		dfd1 = (int)a->di;
		s1 = a->si;
		dfd2 = (int)a->dx;
		s2 = a->r10;
		break;
	default:
		return 0;
	}
	ev = path_event_begin(op, cx->tgid, cx->pstart, cx->t1);
	if (!ev)
		return 0;
	ev->walk_len = walk_base(ev, 0, task, dfd1, (const char *)s1);
	ev->str1_len = read_user_str(ev, ev->walk_len, (const char *)s1);
	if (op == IOLENS_PATH_RENAME) {
		off = ev->walk_len + ev->str1_len;
		if (off <= PATH_OFF_MASK) {
			ev->walk2_len = walk_base(ev, off, task, dfd2, (const char *)s2);
			ev->str2_len = read_user_str(ev, off + ev->walk2_len, (const char *)s2);
		} else {
			ev->flags |= IOLENS_PATH_TRUNCATED;
		}
	}
	path_event_send(ev);
	return 0;
}

static __always_inline __u64 leader_start(struct task_struct *task)
{
	return BPF_CORE_READ(task, group_leader, start_time);
}

/*
 * The filter every syscall of every task on the machine goes through (sys_enter open-codes it,
 * with the syscall number tested between its two steps): the task's storage for this map, or
 * NULL. Most tasks have no BPF task storage at all; one direct load of
 * task->bpf_storage sends them away before any helper call (this is what processes outside the
 * traced tree pay, see bench/README.md).
 */
static __always_inline struct iolens_task_state *traced_state(struct task_struct *task)
{
	if (!UNTRUSTED(task_struct, task)->bpf_storage)
		return NULL;
	return bpf_task_storage_get(&task_state, task, 0, 0);
}

/* ---- job selection (daemon mode): which tasks get task storage, decided at fork/exec/move ---- */

#define PF_KTHREAD 0x00200000
#define PF_IO_WORKER 0x00000010
/* vmlinux.h has no errno macros: ENOSYS, which the x86-64 syscall entry puts in regs->ax */
#define IOLENS_ENOSYS 38

/*
 * Timing off: whether `t` is inside a system call now, whose exit is still to come. The entry
 * saved the call's number in orig_ax (negative for an interrupt or an exception) and set ax to
 * -ENOSYS, which the call's return value replaces before its exit work (sys_exit). A task in
 * user mode, or stopped or preempted after a call returned, holds that return value there.
 * (A call that itself returned -ENOSYS looks inside one: at most one of its next calls is not
 * counted.)
 */
static __always_inline int inside_call(struct task_struct *t)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);

	return (long)BPF_CORE_READ(regs, orig_ax) >= 0 &&
	       (long)BPF_CORE_READ(regs, ax) == -IOLENS_ENOSYS;
}
/* Depth limit of the ancestor walk: Kubernetes and Slurm trees are 4 to 7 levels deep. */
#define CGROUP_MAX_WALK 32

static __always_inline __u64 cgroup_id_of(struct cgroup *cg)
{
	return BPF_CORE_READ(cg, kn, id);
}

static __always_inline struct cgroup *task_dfl_cgroup(struct task_struct *t)
{
	return BPF_CORE_READ(t, cgroups, dfl_cgrp);
}

/* The default (v2) hierarchy is the first one registered: hierarchy_id 0. The v1 hierarchies of
 * a hybrid layout fire the same cgroup tracepoints and are ignored. */
static __always_inline int on_v2(struct cgroup *cg)
{
	return BPF_CORE_READ(cg, root, hierarchy_id) == 0;
}

/* Whether tasks in `cg` are selected: the nearest of cg and its ancestors with an entry decides.
 * A subtree created after the agent wrote its entries is covered by its ancestor's entry. */
static __always_inline int cgroup_selected(struct cgroup *cg)
{
	for (int i = 0; i < CGROUP_MAX_WALK && cg; i++) {
		__u64 id = cgroup_id_of(cg);
		struct cgroup_subsys_state *parent;

		if (bpf_map_lookup_elem(&cgroup_sel, &id))
			return 1;
		if (bpf_map_lookup_elem(&cgroup_excl, &id))
			return 0;
		parent = BPF_CORE_READ(cg, self.parent);
		if (!parent)
			return 0;
		cg = container_of(parent, struct cgroup, self);
	}
	return 0;
}

/* Tasks traced because of their cgroup: they stop being traced when they leave the selection
 * (tasks marked through a pidfd or by a process rule are traced wherever they go). */
static __always_inline int origin_is_cgroup(__u32 origin)
{
	return origin == IOLENS_MARK_FORK || origin == IOLENS_MARK_ATTACH ||
	       origin == IOLENS_MARK_SCAN || origin == IOLENS_MARK_MOVED;
}

static __always_inline struct iolens_task_state *mark_task(struct task_struct *t, __u32 reason)
{
	struct iolens_task_state *st =
		bpf_task_storage_get(&task_state, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!st) {
		lose(IOLENS_STAT_TASK_STATE_FAILED, BPF_CORE_READ(t, tgid), leader_start(t));
		return NULL;
	}
	st->pstart_ns = leader_start(t);
	st->origin = reason;
	/* Timing off (struct iolens_task_state's enter_ns): 0 makes sys_exit skip the exit of the
	 * call `t` is inside now, entered before it was traced (the write to cgroup.procs that
	 * moved it); a task in user mode is inside none. */
	if (timing_mode == IOLENS_TIMING_OFF)
		st->enter_ns = inside_call(t) ? 0 : 1;
	return st;
}

/* Tells the agent a process (of `t`) entered or left the selection, with its cgroup. Woken at
 * once: a new job process must be known before its records are drained. */
static __always_inline void send_mark(struct task_struct *t, __u32 reason)
{
	struct iolens_mark_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	struct task_struct *parent;

	if (!ev) {
		lose(IOLENS_STAT_EVENTS_LOST, BPF_CORE_READ(t, tgid), leader_start(t));
		lose(IOLENS_STAT_JOB_EVENTS_LOST, BPF_CORE_READ(t, tgid), leader_start(t));
		return;
	}
	fill_header(&ev->hdr, IOLENS_EV_MARK, BPF_CORE_READ(t, tgid), leader_start(t),
		    bpf_ktime_get_ns());
	ev->hdr.cgroup_id = cgroup_id_of(task_dfl_cgroup(t));
	ev->reason = reason;
	ev->threads = BPF_CORE_READ(t, signal, nr_threads);
	parent = BPF_CORE_READ(t, real_parent);
	ev->ppid = BPF_CORE_READ(parent, tgid);
	ev->pad = 0;
	ev->parent_pstart_ns = BPF_CORE_READ(parent, group_leader, start_time);
	bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), BPF_CORE_READ(t, comm));
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

static __always_inline void send_cgroup(struct cgroup *cg, const char *path, __u32 op)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct iolens_cgroup_event *ev;
	long n;

	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		stat_inc(IOLENS_STAT_EVENTS_LOST);
		stat_inc(IOLENS_STAT_JOB_EVENTS_LOST);
		return;
	}
	fill_header(&ev->hdr, IOLENS_EV_CGROUP, cur->tgid, leader_start(cur), bpf_ktime_get_ns());
	ev->hdr.cgroup_id = cgroup_id_of(cg);
	ev->op = op;
	ev->level = BPF_CORE_READ(cg, level);
	n = bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), path);
	ev->path_len = n > 0 ? n : 0;
	ev->flags = n == sizeof(ev->path) ? IOLENS_PATH_TRUNCATED : 0;
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

/* A cgroup is named when it is created, so a job whose cgroup lives for milliseconds is named. */
SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(cgroup_mkdir, struct cgroup *cgrp, const char *path)
{
	if (select_jobs && on_v2(cgrp))
		send_cgroup(cgrp, path, IOLENS_CGROUP_MKDIR);
	return 0;
}

SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(cgroup_rmdir, struct cgroup *cgrp, const char *path)
{
	__u64 id;

	if (!select_jobs || !on_v2(cgrp))
		return 0;
	/* Ids are never reused; an entry of a removed cgroup would only take a slot. */
	id = cgroup_id_of(cgrp);
	bpf_map_delete_elem(&cgroup_sel, &id);
	bpf_map_delete_elem(&cgroup_excl, &id);
	send_cgroup(cgrp, path, IOLENS_CGROUP_RMDIR);
	return 0;
}

/* A write to cgroup.procs/cgroup.threads moved `task` (the group leader if threadgroup). Runs in
 * the writer's context (slurmstepd, runc, systemd), once per move. */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(cgroup_attach_task, struct cgroup *dst_cgrp, const char *path,
	     struct task_struct *task, bool threadgroup)
{
	struct iolens_task_state *st;
	int sel;

	if (!select_jobs || !on_v2(dst_cgrp))
		return 0;
	sel = cgroup_selected(dst_cgrp);
	st = bpf_task_storage_get(&task_state, task, 0, 0);
	if (st) {
		if (!origin_is_cgroup(st->origin))
			return 0;
		if (sel) {
			send_mark(task, IOLENS_MARK_MOVED);
			return 0;
		}
		bpf_task_storage_delete(&task_state, task);
		send_mark(task, IOLENS_MARK_UNTRACED);
		return 0;
	}
	if (!sel || !mark_task(task, IOLENS_MARK_ATTACH))
		return 0;
	send_mark(task, IOLENS_MARK_ATTACH);
	return 0;
}

/*
 * Run by the agent (bpf_iter_create + read) when it starts and whenever the selection changes:
 * marks every task already in a selected cgroup, and unmarks cgroup-selected tasks whose cgroup
 * is no longer selected (an excluded subtree).
 */
SEC("iter/task")
int scan_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct iolens_task_state *st;
	int sel;

	/* io_uring's threads are not marked: they borrow their group leader's state
	 * (io_task_state), which resets its context at its own sys_exit */
	if (!t || !select_jobs || (t->flags & (PF_KTHREAD | PF_IO_WORKER)))
		return 0;
	st = bpf_task_storage_get(&task_state, t, 0, 0);
	if (scan_settle) {
		/* A call a task was marked inside (enter_ns 0) that returned while sys_exit was
		 * detached was never seen: if the task is inside none now, its next exit is a call
		 * of its own, to be counted. */
		if (st && !st->enter_ns && !inside_call(t))
			st->enter_ns = 1;
		return 0;
	}
	sel = cgroup_selected(task_dfl_cgroup(t));
	if (st) {
		if (!sel && origin_is_cgroup(st->origin)) {
			bpf_task_storage_delete(&task_state, t);
			send_mark(t, IOLENS_MARK_UNTRACED);
		} else if (scan_report_all && t == BPF_CORE_READ(t, group_leader)) {
			send_mark(t, st->origin == IOLENS_MARK_COMM ? IOLENS_MARK_COMM : IOLENS_MARK_SCAN);
		}
		return 0;
	}
	if (!sel || !mark_task(t, IOLENS_MARK_SCAN))
		return 0;
	send_mark(t, IOLENS_MARK_SCAN);
	return 0;
}

/*
 * Run by iolensd (BPF_PROG_TEST_RUN, never attached) with the names a fold forgot: args[0]
 * points at an array of struct iolens_name_id in iolensd's memory (the run is in its own system
 * call, so a user read sees it), args[1] is its length. Each file's `named` is cleared if its
 * entry is still the incarnation the name was of, so its next use sends the name again. One
 * system call for a slice, where a lookup and an update a name took two each (7.7% of iolensd's
 * main thread in a burst of new files that folds, bench/README.md). Returns how many entries
 * were read: fewer than asked means a read failed, and iolensd clears that one itself.
 */
struct forget_ctx {
	__u64 ids; /* user address of the array */
	__u32 done;
};

static long forget_one(__u64 i, void *data)
{
	struct forget_ctx *c = data;
	struct iolens_name_id id;
	struct seen_key sk = {};
	struct seen_file *seen;

	if (bpf_probe_read_user(&id, sizeof(id), (const void *)(c->ids + i * sizeof(id))))
		return 1;
	sk.ino = id.ino;
	sk.dev = id.dev;
	/* The daemon's only tier: seen_spill is a run's, and a run never forgets names. */
	seen = bpf_map_lookup_elem(&seen_files, &sk);
	if (seen && seen->gen == id.gen && seen->named)
		seen->named = 0;
	c->done = i + 1;
	return 0;
}

SEC("raw_tp")
int forget_names(struct bpf_raw_tracepoint_args *ctx)
{
	struct forget_ctx c = { .ids = ctx->args[0] };
	__u64 n = ctx->args[1];

	if (n > IOLENS_FORGET_NAMES_MAX)
		n = IOLENS_FORGET_NAMES_MAX;
	bpf_loop(n, forget_one, &c, 0);
	return c.done;
}

/* ---- trace mode: one record per traced call, through the `trace` ring ---- */

/* Where a trace record's file comes from. */
enum trace_src {
	TRACE_SRC_FD = 0,  /* the file behind descriptor `fd` now */
	TRACE_SRC_CLOSE,   /* close: the file captured at sys_enter (the descriptor is gone) */
	TRACE_SRC_STATBUF, /* a path stat: the identity in the buffer the kernel filled */
	TRACE_SRC_NONE,    /* named by no descriptor (unlink, rename, a failed open) */
};

/* What the dispatch knows of a call before its file is resolved. */
struct trace_req {
	long fd;     /* TRACE_SRC_FD: the descriptor whose file the record names */
	__s64 pos;   /* the record's offset (reads/writes: when at_pos) */
	__s64 arg;   /* the record's arg */
	__u64 ubuf;  /* TRACE_SRC_STATBUF: the user's stat or statx buffer */
	__s32 rfd;   /* the record's fd */
	__u32 flags; /* IOLENS_TRACE_F_* known from the call */
	__u16 op;    /* enum iolens_trace_op_kind */
	__u8 src;    /* enum trace_src */
	__u8 statx;  /* TRACE_SRC_STATBUF: ubuf is a struct statx */
	__u8 at_pos; /* reads/writes: the call named its offset, `pos` (else the file position) */
	__u8 pad[3];
};

/*
 * Emits one record. Reserved in the ring first and filled in place (no copy). Submitted without
 * a wakeup: the agent drains on a timer; only once the ring is more than half full does a record
 * wake it (KERNEL.md 4.2.4: a wakeup per record costs ~2 us, paid by the traced thread).
 * A global function: verified once for its three call sites.
 */
__noinline int trace_record(struct call_ctx *cx, struct iolens_task_state *st,
			    struct trace_req *q, long nr, long ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_trace_record *r;
	struct file *f = NULL;
	__u32 mode = 0, flags;
	__u64 wake = BPF_RB_NO_WAKEUP;
	__s64 offset;
	int found = 0;

	if (!cx || !st || !q)
		return 0;
	flags = q->flags;
	offset = q->pos;
	stat_inc(IOLENS_STAT_TRACE_RECORDS);
	r = bpf_ringbuf_reserve(&trace, sizeof(*r), 0);
	if (!r) {
		stat_inc(IOLENS_STAT_TRACE_LOST);
		return 0;
	}
	r->ino = 0;
	r->dev = 0;
	r->gen = 0;
	if (q->src == TRACE_SRC_FD) {
		f = (struct file *)current_fd_file(q->fd);
		if (f) {
			file_identity_cached(st, f, &r->dev, &r->ino, &r->gen, &mode);
			found = 1;
		}
	} else if (q->src == TRACE_SRC_CLOSE) {
		found = st->close_kind != 0;
		if (st->close_kind == 1) {
			r->dev = st->close_dev;
			r->ino = st->close_ino;
			r->gen = st->close_gen;
			mode = S_IFREG;
		} else {
			mode = st->close_ino << 12; /* sys_enter kept only the kind */
		}
	} else if (q->src == TRACE_SRC_STATBUF && ret == 0) {
		__u32 dev = 0;
		__u64 ino = 0;

		stat_buf_identity((void *)q->ubuf, q->statx, &dev, &ino, &mode);
		r->dev = dev;
		r->ino = ino;
		r->gen = S_ISREG(mode) ? seen_gen(dev, ino) : 0;
		found = 1;
	}
	if (!found) {
		flags |= IOLENS_TRACE_F_NOFILE;
	} else if (!S_ISREG(mode)) {
		/* As in the `others` map: the descriptor kind, no identity, no offset. */
		flags |= IOLENS_TRACE_F_OTHER;
		r->ino = (mode & S_IFMT) >> 12;
		r->dev = 0;
		r->gen = 0;
		if (q->op == IOLENS_OP_READ || q->op == IOLENS_OP_WRITE)
			offset = -1;
	} else if ((q->op == IOLENS_OP_READ || q->op == IOLENS_OP_WRITE) && f && !q->at_pos) {
		/* A failed call did not move the position: it would have started there. */
		offset = rw_start(f, -1, ret > 0 ? ret : 0);
	}
	r->start_ns = cx->t0;
	r->end_ns = cx->t1;
	r->pstart_ns = cx->pstart;
	r->offset = offset;
	r->ret = ret;
	r->arg = q->arg;
	r->tgid = cx->tgid;
	r->tid = task->pid;
	r->op = q->op;
	r->nr = (__u16)nr;
	r->flags = flags;
	r->fd = q->rfd;
	r->pad = 0;
	if (bpf_ringbuf_query(&trace, BPF_RB_AVAIL_DATA) >
	    bpf_ringbuf_query(&trace, BPF_RB_RING_SIZE) / 2)
		wake = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(r, wake);
	return 0;
}

/* Whether the trace mode selects the current task (already known to be traced). */
static __always_inline int trace_selects(__u32 mode, __u32 tgid)
{
	if (mode == IOLENS_TRACE_ALL)
		return 1;
	if (mode == IOLENS_TRACE_CGROUP)
		return bpf_current_task_under_cgroup(&trace_cgroup, 0) == 1;
	if (mode == IOLENS_TRACE_PIDS)
		return bpf_map_lookup_elem(&trace_pids, &tgid) != NULL;
	return 0;
}

/* A copy is a read of one descriptor and a write of the other, at the same times. */
static __always_inline void trace_copy(struct call_ctx *cx, struct iolens_task_state *st,
				       long in_fd, const void *in_off, long out_fd,
				       const void *out_off, __s64 len, long nr, long ret)
{
	long done = ret > 0 ? ret : 0;
	struct trace_req q = {
		.op = IOLENS_OP_READ,
		.fd = in_fd,
		.rfd = (int)in_fd,
		.pos = copy_offset(in_off, done),
		.arg = len,
		.flags = IOLENS_TRACE_F_COPY,
	};

	q.at_pos = q.pos >= 0; /* an offset pointer was given (its value cannot be negative) */
	trace_record(cx, st, &q, nr, ret);
	q.op = IOLENS_OP_WRITE;
	q.fd = out_fd;
	q.rfd = (int)out_fd;
	q.pos = copy_offset(out_off, done);
	q.at_pos = q.pos >= 0;
	trace_record(cx, st, &q, nr, ret);
}

/*
 * Trace mode, from sys_exit of a traced task once the mode is not OFF: every call of the kinds
 * in enum iolens_trace_op_kind gives a record, failed calls too. Runs before the accounting, which
 * forgets what close captured. A global function, like the accounting handlers.
 */
__noinline int trace_call(struct call_ctx *cx, struct iolens_task_state *st,
			  struct call_args *a)
{
	struct trace_req q = { .fd = -1, .pos = -1, .rfd = -1, .src = TRACE_SRC_FD };
	long id, ret;

	if (!cx || !st || !a || !trace_selects(trace_mode, cx->tgid))
		return 0;
	id = a->id;
	ret = cx->ret;
	switch (id) {
	case IOLENS_NR_read:
	case IOLENS_NR_pread64:
	case IOLENS_NR_readv:
	case IOLENS_NR_preadv:
	case IOLENS_NR_preadv2:
		q.op = IOLENS_OP_READ;
		break;
	case IOLENS_NR_write:
	case IOLENS_NR_pwrite64:
	case IOLENS_NR_writev:
	case IOLENS_NR_pwritev:
	case IOLENS_NR_pwritev2:
		q.op = IOLENS_OP_WRITE;
		break;
	case IOLENS_NR_sendfile:
		/* sendfile(out_fd, in_fd, *offset, count): offset is the input's */
		trace_copy(cx, st, (int)a->si, (const void *)a->dx, (int)a->di, NULL,
			   (__s64)a->r10, id, ret);
		return 0;
	case IOLENS_NR_splice:
	case IOLENS_NR_copy_file_range:
		/* (fd_in, *off_in, fd_out, *off_out, len, flags) */
		trace_copy(cx, st, (int)a->di, (const void *)a->si, (int)a->dx,
			   (const void *)a->r10, (__s64)a->r8, id, ret);
		return 0;
	case IOLENS_NR_open:
	case IOLENS_NR_openat:
	case IOLENS_NR_openat2:
	case IOLENS_NR_creat:
		q.op = IOLENS_OP_OPEN;
		break;
	case IOLENS_NR_fcntl:
		if (!fcntl_dups(a->si))
			return 0;
		/* fall through */
	case IOLENS_NR_dup:
	case IOLENS_NR_dup2:
	case IOLENS_NR_dup3:
		q.op = IOLENS_OP_DUP;
		break;
	case IOLENS_NR_close:
		q.op = IOLENS_OP_CLOSE;
		q.src = TRACE_SRC_CLOSE;
		break;
	case IOLENS_NR_lseek:
		q.op = IOLENS_OP_SEEK;
		q.pos = ret >= 0 ? ret : -1;
		q.arg = (int)a->dx;
		break;
	case IOLENS_NR_fsync:
		q.op = IOLENS_OP_FSYNC;
		break;
	case IOLENS_NR_fdatasync:
		q.op = IOLENS_OP_FDATASYNC;
		break;
	case IOLENS_NR_ftruncate:
		q.op = IOLENS_OP_TRUNCATE;
		break;
	case IOLENS_NR_mmap:
		if (a->r10 & MAP_ANONYMOUS)
			return 0; /* not file I/O */
		q.op = IOLENS_OP_MMAP;
		break;
	case IOLENS_NR_fstat:
		q.op = IOLENS_OP_STAT;
		break;
	case IOLENS_NR_stat:
	case IOLENS_NR_lstat:
		q.op = IOLENS_OP_STAT;
		q.src = TRACE_SRC_STATBUF;
		q.ubuf = a->si;
		break;
	case IOLENS_NR_newfstatat:
		q.op = IOLENS_OP_STAT;
		if (!stat_on_fd((const char *)a->si, a->r10)) {
			q.src = TRACE_SRC_STATBUF;
			q.ubuf = a->dx;
		}
		break;
	case IOLENS_NR_statx:
		q.op = IOLENS_OP_STAT;
		if (!stat_on_fd((const char *)a->si, a->dx)) {
			q.src = TRACE_SRC_STATBUF;
			q.ubuf = a->r8;
			q.statx = 1;
		}
		break;
	case IOLENS_NR_unlinkat:
		if (a->dx & AT_REMOVEDIR)
			return 0; /* rmdir */
		/* fall through */
	case IOLENS_NR_unlink:
		q.op = IOLENS_OP_UNLINK;
		q.src = TRACE_SRC_NONE;
		break;
	case IOLENS_NR_rename:
	case IOLENS_NR_renameat:
	case IOLENS_NR_renameat2:
		q.op = IOLENS_OP_RENAME;
		q.src = TRACE_SRC_NONE;
		break;
	default:
		return 0;
	}
	if (q.op == IOLENS_OP_READ || q.op == IOLENS_OP_WRITE) {
		/* read/write(fd, buf, count); the vector calls have no byte count to ask for */
		if (id == IOLENS_NR_read || id == IOLENS_NR_write || id == IOLENS_NR_pread64 ||
		    id == IOLENS_NR_pwrite64)
			q.arg = (__s64)a->dx;
		else
			q.arg = -1;
		/* p* calls name the offset (r10), as given even if invalid; for preadv2/pwritev2,
		 * -1 means the file position */
		if (id != IOLENS_NR_read && id != IOLENS_NR_write && id != IOLENS_NR_readv &&
		    id != IOLENS_NR_writev) {
			q.pos = (__s64)a->r10;
			q.at_pos = q.pos != -1 ||
				   (id != IOLENS_NR_preadv2 && id != IOLENS_NR_pwritev2);
		}
		if (cx->mem_unaligned)
			q.flags |= IOLENS_TRACE_F_MEM_UNALIGNED;
	}
	if (q.op == IOLENS_OP_OPEN || q.op == IOLENS_OP_DUP) {
		/* The record names the new descriptor (a dup's arg too); a failed dup still names the
		 * file of the descriptor it was asked to duplicate (the first argument). */
		if (ret >= 0) {
			q.fd = ret;
			q.rfd = (int)ret;
		} else if (q.op == IOLENS_OP_DUP) {
			q.fd = (int)a->di;
		} else {
			q.src = TRACE_SRC_NONE;
		}
		if (q.op == IOLENS_OP_DUP)
			q.arg = ret >= 0 ? ret : -1;
		else
			q.arg = (__s64)cx->mode;
	} else if (q.src == TRACE_SRC_FD) {
		/* every other call on a descriptor has it first; mmap's is its fifth argument */
		q.fd = id == IOLENS_NR_mmap ? (int)a->r8 : (int)a->di;
		q.rfd = (int)q.fd;
	} else if (q.src == TRACE_SRC_CLOSE) {
		q.rfd = (int)a->di;
	}
	trace_record(cx, st, &q, id, ret);
	return 0;
}

/*
 * close(fd) of a traced thread, at its entry: what the descriptor names, kept in st for the
 * close's sys_exit (the descriptor is gone by then). sys_enter calls it with timing exact; with
 * timing off, close_enter (the classic tracepoint of close alone) does.
 */
static __always_inline void close_capture(struct iolens_task_state *st, int fd)
{
	/* After close the descriptor is gone: capture what it names now. */
	struct file *f = (struct file *)current_fd_file(fd);
	__u32 mode = 0;

	st->close_kind = 0;
	st->close_name = 0;
	if (f) {
		/* also leaves f in st->cache_file, until sys_exit */
		file_identity_cached(st, f, &st->close_dev, &st->close_ino, &st->close_gen,
				     &mode);
		st->close_kind = S_ISREG(mode) ? 1 : 2;
		if (st->close_kind == 2) {
			/* only the kind, for trace mode (as the `others` map keys it) */
			st->close_ino = (mode & S_IFMT) >> 12;
			st->close_dev = 0;
			st->close_gen = 0;
		}
	}
	/* A descriptor inherited from outside the traced tree may close without ever having
	 * been opened here: sys_exit names its file (send_name is not called here, so that
	 * this program, which every system call of a traced task runs, stays small). */
	if (st->close_kind == 1) {
		struct seen_key sk = { .ino = st->close_ino, .dev = st->close_dev };
		struct seen_file *seen = seen_find(&sk);

		st->close_name = !seen || seen->gen != st->close_gen || !seen->named;
	}
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_task_state *st;

	/* The cheapest tests first: any task without task storage (every process outside the
	 * traced tree: one load), then a call iolens does not count (futex, poll, mmap of anonymous
	 * memory...: a traced job's most frequent calls) before the storage lookup. fcntl counts
	 * only as a dup: the others (F_GETFL, F_SETFD, locks: ~88,000 in bench/README.md's
	 * 10,000-file PyTorch run) leave here, and their sys_exit without reading the clock. */
	if (!UNTRUSTED(task_struct, task)->bpf_storage || !iolens_syscall_wanted(id) ||
	    (id == IOLENS_NR_fcntl && !fcntl_dups(regs->si)))
		return 0;
	st = bpf_task_storage_get(&task_state, task, 0, 0);
	if (!st)
		return 0;
	st->enter_ns = bpf_ktime_get_ns();
	st->io_ctx = iolens_syscall_io_ctx(id);
	if (id == IOLENS_NR_close)
		close_capture(st, (int)regs->di);
	return 0;
}

/*
 * Timing off (IOLENS_TIMING_OFF): sys_enter is not attached, and of all entries only close's is
 * needed (its descriptor is gone at sys_exit). The classic tracepoint of close alone gives it:
 * the kernel runs this program for close only, the other system calls of the machine pay a
 * bitmap test. The agent mounts tracefs for it.
 */
SEC("tracepoint/syscalls/sys_enter_close")
int close_enter(struct trace_event_raw_sys_enter *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_task_state *st;

	if (!UNTRUSTED(task_struct, task)->bpf_storage)
		return 0;
	st = bpf_task_storage_get(&task_state, task, 0, 0);
	if (st)
		close_capture(st, (int)ctx->args[0]);
	return 0;
}

/* A close of a regular file, whose identity sys_enter kept (the descriptor is gone now). */
__noinline int account_close(struct call_ctx *cx, struct iolens_task_state *st)
{
	struct iolens_file_key key = {};
	struct iolens_file_counters *c;
	int created = 0;

	if (!cx || !st)
		return 0;
	key.ino = st->close_ino;
	key.dev = st->close_dev;
	key.tgid = cx->tgid;
	key.pstart_ns = cx->pstart;
	key.gen = st->close_gen;
	c = file_record_get(&key, &created);
	/* A descriptor inherited from the parent has no record here yet: no name is known from
	 * this process, the parent's record names it. */
	if (c)
		record_close(c, cx->ret, cx->t0, cx->t1);
	if (st->close_name && st->cache_file) {
		struct name_req r = {
			.ino = key.ino, .dev = key.dev, .gen = key.gen, .file = st->cache_file,
		};

		send_name(cx, &r);
	}
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_task_state *st = traced_state(task);
	struct call_ctx cx = {};
	struct call_args a;
	__u64 now;
	long id;

	if (!st)
		return 0;
	st->io_ctx = IOLENS_CTX_NONE; /* whatever the call was (io_uring_enter too) */
	id = regs->orig_ax;
	/* Timing off: the first exit after the task was marked inside a call (enter_ns 0), of
	 * whatever call, is that call's, entered untraced: not counted (as timing exact leaves a
	 * call whose sys_enter it did not see). */
	if (timing_mode == IOLENS_TIMING_OFF && !st->enter_ns) {
		st->enter_ns = 1;
		if (id == IOLENS_NR_close) {
			st->close_kind = 0;
			st->close_name = 0;
			st->cache_file = 0; /* close_enter kept the file going away */
		}
		return 0;
	}
	if (!iolens_syscall_wanted(id) || (id == IOLENS_NR_fcntl && !fcntl_dups(regs->si)))
		return 0;
	cx.tgid = task->tgid;
	/* A call whose entry was not seen (the task was selected during it: the write to
	 * cgroup.procs that moved it into a job) is not counted: tracing starts with the next
	 * (timing off: above). */
	if (timing_mode == IOLENS_TIMING_OFF) {
		/* no clock read: t0 = t1 = 0 add no time anywhere (iolens_account.h) */
		st->enter_ns++;
	} else {
		now = bpf_ktime_get_ns();
		cx.t0 = st->enter_ns;
		cx.t1 = now;
		st->enter_ns = 0;
		if (!cx.t0)
			return 0;
	}
	if (!st->pstart_ns)
		st->pstart_ns = leader_start(task);
	cx.pstart = st->pstart_ns;
	cx.ret = ret;
	a.id = id;
	a.di = regs->di;
	a.si = regs->si;
	a.dx = regs->dx;
	a.r10 = regs->r10;
	a.r8 = regs->r8;
	call_extras(&cx, &a);
	if (trace_calls && trace_mode != IOLENS_TRACE_OFF)
		trace_call(&cx, st, &a);

	switch (id) {
	case IOLENS_NR_read:
	case IOLENS_NR_readv:
		account_rw(&cx, st, a.di, 0, -1);
		break;
	case IOLENS_NR_write:
	case IOLENS_NR_writev:
		account_rw(&cx, st, a.di, 1, -1);
		break;
	case IOLENS_NR_pread64:
	case IOLENS_NR_preadv:
		account_rw(&cx, st, a.di, 0, (__s64)a.r10);
		break;
	case IOLENS_NR_pwrite64:
	case IOLENS_NR_pwritev:
		account_rw(&cx, st, a.di, 1, (__s64)a.r10);
		break;
	case IOLENS_NR_preadv2:
		/* offset -1 means "at the file position", like readv */
		account_rw(&cx, st, a.di, 0, (__s64)a.r10 < 0 ? -1 : (__s64)a.r10);
		break;
	case IOLENS_NR_pwritev2:
		account_rw(&cx, st, a.di, 1, (__s64)a.r10 < 0 ? -1 : (__s64)a.r10);
		break;
	case IOLENS_NR_sendfile:
		/* sendfile(out_fd, in_fd, *offset, count): offset is the input's */
		on_copy(&cx, st, (int)a.si, (const void *)a.dx, (int)a.di, NULL);
		break;
	case IOLENS_NR_splice:
	case IOLENS_NR_copy_file_range:
		/* (fd_in, *off_in, fd_out, *off_out, len, flags) */
		on_copy(&cx, st, (int)a.di, (const void *)a.si, (int)a.dx, (const void *)a.r10);
		break;
	case IOLENS_NR_open:
	case IOLENS_NR_openat:
	case IOLENS_NR_openat2:
	case IOLENS_NR_creat:
		account_open(&cx, st, ret, 0);
		break;
	case IOLENS_NR_dup:
	case IOLENS_NR_dup2:
	case IOLENS_NR_dup3:
		account_open(&cx, st, ret, 1);
		break;
	case IOLENS_NR_fcntl: /* a dup (sys_enter let no other command through) */
		account_open(&cx, st, ret, 1);
		break;
	case IOLENS_NR_close:
		if (st->close_kind == 1)
			account_close(&cx, st);
		st->close_kind = 0;
		st->close_name = 0;
		st->cache_file = 0; /* the file is going away */
		break;
	case IOLENS_NR_lseek:
		if (ret >= 0)
			account_meta(&cx, st, a.di, IOLENS_META_SEEK, 0);
		break;
	case IOLENS_NR_fsync:
		if (ret >= 0)
			account_meta(&cx, st, a.di, IOLENS_META_FSYNC, 0);
		break;
	case IOLENS_NR_fdatasync:
		if (ret >= 0)
			account_meta(&cx, st, a.di, IOLENS_META_FDSYNC, 0);
		break;
	case IOLENS_NR_ftruncate:
		if (ret == 0)
			account_meta(&cx, st, a.di, IOLENS_META_TRUNCATE, 0);
		break;
	case IOLENS_NR_mmap:
		/* prot (third argument) PROT_EXEC marks program text, whose faults a forked child
		 * does not inherit a record for (iolens_cache.bpf.h inherited_record) */
		if ((unsigned long)ret < (unsigned long)-MAX_ERRNO && !(a.r10 & MAP_ANONYMOUS))
			account_meta(&cx, st, (int)a.r8, IOLENS_META_MMAP, !!(a.dx & PROT_EXEC));
		break;
	case IOLENS_NR_stat:
	case IOLENS_NR_lstat:
	case IOLENS_NR_fstat:
	case IOLENS_NR_newfstatat:
	case IOLENS_NR_statx:
		if (ret == 0)
			account_stat(&cx, st, &a);
		break;
	case IOLENS_NR_unlinkat:
		if (a.dx & AT_REMOVEDIR)
			break; /* rmdir */
		/* fall through */
	case IOLENS_NR_unlink:
	case IOLENS_NR_rename:
	case IOLENS_NR_renameat:
	case IOLENS_NR_renameat2:
		if (ret == 0)
			account_path_op(&cx, &a);
		break;
	default:
		break;
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	struct iolens_task_state *ps = bpf_task_storage_get(&task_state, parent, 0, 0);
	struct iolens_task_state *cs;
	struct iolens_fork_event *ev;
	__u64 now;

	/* Trace mode PIDS: a new process of a listed one is listed too (before it runs). */
	if (trace_follow_pids && child->tgid != parent->tgid) {
		__u32 ptgid = parent->tgid, ctgid = child->tgid;
		__u8 one = 1;

		if (bpf_map_lookup_elem(&trace_pids, &ptgid) &&
		    bpf_map_update_elem(&trace_pids, &ctgid, &one, BPF_ANY))
			stat_inc(IOLENS_STAT_TRACE_PIDS_LOST);
	}
	if (ps) {
		cs = bpf_task_storage_get(&task_state, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!cs) {
			/* The child would run untraced: count it so the output says so (charged to
			 * the parent: the child's job never learns of it). */
			lose(IOLENS_STAT_TASK_STATE_FAILED, parent->tgid, leader_start(parent));
			return 0;
		}
		cs->origin = ps->origin;
	} else {
		/* An untraced parent: the child may have been created straight into a selected
		 * cgroup (clone3 CLONE_INTO_CGROUP, as systemd and container runtimes do), or be a
		 * new thread of a process moved into one. */
		if (!select_jobs || !cgroup_selected(task_dfl_cgroup(child)))
			return 0;
		cs = mark_task(child, IOLENS_MARK_FORK);
		if (!cs)
			return 0;
	}
	/* timing off: a new task is inside no call it entered untraced (its first exit is the
	 * fork's return), and mark_task read the parent's registers (struct iolens_task_state's
	 * enter_ns) */
	if (timing_mode == IOLENS_TIMING_OFF)
		cs->enter_ns = 1;
	if (child->tgid == parent->tgid) {
		cs->pstart_ns = leader_start(parent);
		return 0; /* a thread: same process record */
	}
	now = bpf_ktime_get_ns();
	cs->pstart_ns = child->start_time;
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		/* charged to the parent, the process the agent knows */
		lose(IOLENS_STAT_EVENTS_LOST, parent->tgid, leader_start(parent));
		lose(IOLENS_STAT_PROC_EVENTS_LOST, parent->tgid, leader_start(parent));
		return 0;
	}
	fill_header(&ev->hdr, IOLENS_EV_FORK, child->tgid, child->start_time, now);
	ev->hdr.cgroup_id = cgroup_id_of(task_dfl_cgroup(child));
	ev->ppid = parent->tgid;
	ev->pad = 0;
	ev->parent_pstart_ns = leader_start(parent);
	bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), parent->comm);
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct iolens_task_state *st = bpf_task_storage_get(&task_state, p, 0, 0);
	struct iolens_path_event *ev;
	struct file *f;

	if (!st) {
		/* Process rules: the comm is the new program's by now (begin_new_exec set it, zero
		 * padded), so it can be the key as it is. */
		char comm[IOLENS_COMM_LEN] = {};

		if (!select_jobs)
			return 0;
		bpf_probe_read_kernel(comm, sizeof(comm), p->comm);
		if (!bpf_map_lookup_elem(&comm_sel, comm))
			return 0;
		if (!mark_task(p, IOLENS_MARK_COMM))
			return 0;
		send_mark(p, IOLENS_MARK_COMM);
	}
	ev = path_event_begin(IOLENS_PATH_EXE, p->tgid, leader_start(p), bpf_ktime_get_ns());
	if (!ev)
		return 0;
	bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), p->comm);
	f = BPF_CORE_READ(bprm, file);
	if (f)
		ev->walk_len = walk_path(ev, 0, (__u64)BPF_CORE_READ(f, f_path.dentry),
					 (__u64)BPF_CORE_READ(f, f_path.mnt));
	path_event_send(ev);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
	struct iolens_task_state *st = bpf_task_storage_get(&task_state, p, 0, 0);
	struct iolens_exit_event *ev;
	int code;

	/* A listed process leaves trace_pids with its last thread, before its pid can be reused. */
	if (trace_follow_pids && BPF_CORE_READ(p, signal, live.counter) == 0) {
		__u32 tgid = p->tgid;

		bpf_map_delete_elem(&trace_pids, &tgid);
	}
	if (!st)
		return 0;
	/* Only the last thread of the group closes the process (signal->live reached 0). Two
	 * threads exiting at once can both see 0 and both send the event; the agent keeps one (same
	 * key, same values). The tracepoint's group_dead argument would be exact, but older kernels'
	 * sched_process_exit has only the task, and reading a missing argument fails the load. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		lose(IOLENS_STAT_EVENTS_LOST, p->tgid, leader_start(p));
		lose(IOLENS_STAT_PROC_EVENTS_LOST, p->tgid, leader_start(p));
		return 0;
	}
	code = BPF_CORE_READ(p, signal, group_exit_code);
	if (!code)
		code = p->exit_code;
	fill_header(&ev->hdr, IOLENS_EV_EXIT, p->tgid, leader_start(p), bpf_ktime_get_ns());
	ev->exit_code = code;
	ev->pad = 0;
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	return 0;
}

/*
 * ---- below the system calls (ABI 7): page cache, faults, O_DIRECT, io_uring, writeback,
 * block layer. These programs are extras (agent/loader: each loads and attaches where the
 * kernel allows, a missing one is reported and the rest run). They fire per page-cache or
 * block event, not per system call, and count into the same (process, file) records.
 */

/*
 * The traced state behind a task that is doing file I/O below the system calls: the thread's
 * own, or, for io_uring's threads (PF_IO_WORKER: io-wq workers and the SQPOLL thread, which
 * no fork event announces), its group leader's. NULL: not traced. *own: whether it is the
 * thread's own.
 * Each direct load of a pointer field through a trusted pointer (task->bpf_storage,
 * task->group_leader, mapping->host...) costs the verifier two to four linear searches of the
 * kernel's BTF by name, ~1.2 ms every time it walks it (bench/README.md "Start-up"): these
 * programs have one or two, each walked once. The filter is chosen for who loads them: the
 * daemon, which loads once and runs on every node, keeps traced_state()'s one load of
 * task->bpf_storage, the cheapest filter at run time for the events of every other process;
 * `iolens run`, which loads them at every start, asks the helper directly (no load to verify,
 * ~10 ns more per event of an untraced process, only while a run is live). select_jobs is a
 * constant of .rodata, so the verifier walks only the branch taken.
 */

/* The state of an io thread's group leader. Untrusted loads: the leader is looked up by its pid
 * (an acquired, trusted task, with no pointer walked); else task->group_leader, walked. */
static __always_inline struct iolens_task_state *leader_state(struct task_struct *task)
{
#ifdef IOLENS_UNTRUSTED_LOADS
	struct task_struct *leader = bpf_task_from_pid(task->tgid);
	struct iolens_task_state *st;

	if (!leader)
		return NULL;
	st = bpf_task_storage_get(&task_state, leader, 0, 0);
	bpf_task_release(leader);
	return st;
#else
	return bpf_task_storage_get(&task_state, task->group_leader, 0, 0);
#endif
}

static __always_inline struct iolens_task_state *io_task_state(struct task_struct *task,
								int *own)
{
	struct iolens_task_state *st = select_jobs ? traced_state(task)
						   : bpf_task_storage_get(&task_state, task, 0, 0);

	*own = st != NULL;
	if (st || !(task->flags & PF_IO_WORKER))
		return st;
	return leader_state(task);
}

/* The kinds of io_uring requests iolens tells apart: at submission and completion
 * (bpf/iolens_direct.bpf.h), and as the context of an io-wq worker running one (io_worker_ctx). */
enum uring_kind {
	URING_SKIP = 0,
	URING_READ,
	URING_WRITE,
	URING_OPEN,
	URING_CLOSE,
	URING_OTHER,
};

/* What iolens makes of an opcode (enum io_uring_op values from the kernel's BTF). A global
 * function: the verifier does not know which kind it returns, so what the io_uring programs do
 * for every kind (the file's record) is walked once, not once per kind (io_uring_complete: 6,551
 * walked instructions with it inlined). */
__noinline int uring_kind(__u32 op)
{
	/* A kernel without io_uring has no such enum: its values below would be poisoned calls,
	 * which a verifier before 6.8 walks in a global function even where nothing calls it
	 * (io_worker_ctx's callers are the page-cache programs). A relocated constant: the rest is
	 * dead code there. */
	if (!bpf_core_type_exists(enum io_uring_op))
		return URING_OTHER;
	if (op == bpf_core_enum_value(enum io_uring_op, IORING_OP_READ) ||
	    op == bpf_core_enum_value(enum io_uring_op, IORING_OP_READV) ||
	    op == bpf_core_enum_value(enum io_uring_op, IORING_OP_READ_FIXED))
		return URING_READ;
	if (op == bpf_core_enum_value(enum io_uring_op, IORING_OP_WRITE) ||
	    op == bpf_core_enum_value(enum io_uring_op, IORING_OP_WRITEV) ||
	    op == bpf_core_enum_value(enum io_uring_op, IORING_OP_WRITE_FIXED))
		return URING_WRITE;
	if (op == bpf_core_enum_value(enum io_uring_op, IORING_OP_OPENAT) ||
	    op == bpf_core_enum_value(enum io_uring_op, IORING_OP_OPENAT2))
		return URING_OPEN;
	if (op == bpf_core_enum_value(enum io_uring_op, IORING_OP_CLOSE))
		return URING_CLOSE;
	/* Multishot reads post many completions for one submission: not counted. (6.7+: on an
	 * older kernel the relocation of a missing enum value would fail the load.) */
	if (bpf_core_enum_value_exists(enum io_uring_op, IORING_OP_READ_MULTISHOT) &&
	    op == bpf_core_enum_value(enum io_uring_op, IORING_OP_READ_MULTISHOT))
		return URING_SKIP;
	return URING_OTHER;
}

/*
 * The context (enum iolens_io_ctx) of an io thread whose state is borrowed (io_task_state:
 * own == 0). An io-wq worker runs one request at a time, io_worker::cur_work (the io_wq_work
 * inside its struct io_kiocb), with no system call of its own: the pages it inserts are that
 * request's, a read's misses or a write's new pages. The leader's context, whatever call it is
 * in (usually another io_uring_enter, waiting), said nothing of them: such a read's misses
 * counted as prefetches. The SQPOLL thread (no io_worker), or a kernel without these fields:
 * the borrowed context, as before. Plain probe reads: nothing for the verifier to walk.
 */
static __always_inline __u32 io_worker_ctx(struct task_struct *task,
					   struct iolens_task_state *st)
{
	struct io_worker *w;
	struct io_wq_work *work;
	struct io_kiocb *req;
	int kind;

	if (!bpf_core_field_exists(task->worker_private) ||
	    !bpf_core_field_exists(struct io_worker, cur_work))
		return st->io_ctx;
	w = (struct io_worker *)BPF_CORE_READ(task, worker_private);
	/* An io_worker names its task: anything else behind worker_private is not one. */
	if (!w || BPF_CORE_READ(w, task) != task)
		return st->io_ctx;
	work = BPF_CORE_READ(w, cur_work);
	if (!work)
		return st->io_ctx;
	req = (struct io_kiocb *)((void *)work - bpf_core_field_offset(struct io_kiocb, work));
	kind = uring_kind(BPF_CORE_READ(req, opcode));
	return kind == URING_READ ? IOLENS_CTX_READ :
	       kind == URING_WRITE ? IOLENS_CTX_WRITE : IOLENS_CTX_NONE;
}

/*
 * The (process, file) record of `inode` for the traced task `task`, created if need be, or
 * NULL (not a regular file, map full: counted). With a struct file (O_DIRECT, io_uring) a new
 * record's name is sent at once; without one (filemap hooks) the next system call on the file
 * sends it (iolens_file_counters::named). `kout`, if not NULL, gets the record's key.
 */
static __always_inline struct iolens_file_counters *
inode_record(struct task_struct *task, struct iolens_task_state *st, struct inode *inode,
	     struct file *f, struct iolens_file_key *kout)
{
	struct iolens_file_key key = {};
	struct iolens_file_counters *c;
	int created = 0;

	if (!inode || !S_ISREG(BPF_CORE_READ(inode, i_mode)))
		return NULL;
	if (!st->pstart_ns)
		st->pstart_ns = leader_start(task);
	key.tgid = task->tgid;
	key.pstart_ns = st->pstart_ns;
	key.ino = BPF_CORE_READ(inode, i_ino);
	key.dev = file_dev(inode);
	key.gen = BPF_CORE_READ(inode, i_generation);
	c = file_record_get(&key, &created);
	if (kout)
		*kout = key;
	if (c && f && !c->named) {
		struct call_ctx cx = {
			.tgid = key.tgid,
			.pstart = key.pstart_ns,
			.t1 = bpf_ktime_get_ns(),
		};
		struct name_req r = {
			.ino = key.ino, .dev = key.dev, .gen = key.gen, .file = (__u64)f,
		};

		send_name(&cx, &r);
		c->named = 1;
	}
	return c;
}

/*
 * Who last dirtied each file's pages, by (dev, ino): written by the dirtying hook
 * (writeback_dirty_folio, in the writer's context), read by the block hooks when a flusher
 * kworker writes those pages back, so the writeback is charged to the process (and so the job)
 * that dirtied them. cgroup v2 writeback would name the cgroup through the bio's blkcg, but
 * only where the io controller is on v2; this works on hybrid hosts too. LRU: the oldest
 * dirtiers go first, and their pages have long been written back. `iolens run` makes it a hash
 * without preallocation (agent/loader/loader.cpp): a run that dirties more files than it holds
 * counts the rest in IOLENS_STAT_DIRTIER_LOST.
 */
struct dirtier {
	__u32 tgid;
	__u32 pad;
	__u64 pstart_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seen_key);
	__type(value, struct dirtier);
} dirtiers SEC(".maps");

static __always_inline void remember_dirtier(__u32 dev, __u64 ino, __u32 tgid, __u64 pstart)
{
	struct seen_key k = { .ino = ino, .dev = dev };
	struct dirtier *d = bpf_map_lookup_elem(&dirtiers, &k);
	struct dirtier nv = { .tgid = tgid, .pstart_ns = pstart };

	if (d && d->tgid == tgid && d->pstart_ns == pstart)
		return;
	/* Fails when full (a run's hash) or when the LRU finds no free node under contention. */
	if (bpf_map_update_elem(&dirtiers, &k, &nv, BPF_ANY))
		lose(IOLENS_STAT_DIRTIER_LOST, tgid, pstart);
}

#include "iolens_cache.bpf.h"
#include "iolens_direct.bpf.h"
#include "iolens_block.bpf.h"
