/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Included at the end of bpf/iolens.bpf.c (extras: see the comment there). */
/*
 * Page cache (filemap, readahead), file-backed page faults, dirtying and writer throttling.
 * Every program here fires for every task on the machine: the task-state lookup goes first and
 * sends untraced tasks away. docs/counters.md "Page cache, mmap and writes (ABI 7)" says what
 * each counter means and where it is an approximation.
 */

/* Kernel HZ, for balance_dirty_pages' pause in jiffies (libbpf fills it from the kernel config;
 * 0 when the config is not readable). */
extern int CONFIG_HZ __kconfig __weak;

/* Debian's and most distributions' x86-64 default, when the kernel config cannot be read. */
#define IOLENS_DEFAULT_HZ 250

/*
 * Number of base pages in a folio. 6.18 wraps folio->flags in memdesc_flags_t, older kernels
 * have a plain unsigned long at the same place: read the raw word at the field's offset, which
 * fits both. A large folio has PG_head set; its size is _nr_pages (6.x, 64-bit) or, where that
 * field does not exist, the order in the low byte of _flags_1.
 */
static __always_inline __u64 folio_pages(struct folio *folio)
{
	unsigned long flags = 0;

	bpf_probe_read_kernel(&flags, sizeof(flags),
			      (void *)folio + bpf_core_field_offset(struct folio, flags));
	if (!(flags & (1UL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	if (bpf_core_field_exists(folio->_nr_pages))
		return BPF_CORE_READ(folio, _nr_pages);
	return 1UL << (BPF_CORE_READ(folio, _flags_1) & 0xff);
}

/*
 * The device of `inode` (ino, gen read from it): from the thread's identity cache when the
 * inode is that of its last system call's file (a read's page-cache events are), else read
 * through i_sb with bpf_probe_read_kernel. Not a direct load of inode->i_sb: each costs the
 * verifier ~1.2 ms of searching the kernel's BTF by name, at every walk (io_task_state).
 */
static __always_inline __u32 inode_dev(struct iolens_task_state *st, struct inode *inode,
				       __u64 ino, __u32 gen)
{
	if (st->cache_inode == (__u64)inode && st->cache_ino == ino && st->cache_gen == gen)
		return st->cache_dev;
	return file_dev_btf(inode);
}

/* The (process, file) key of (dev, ino, gen) for the traced task `task`. */
static __always_inline void task_file_key(struct task_struct *task, struct iolens_task_state *st,
					  __u32 dev, __u64 ino, __u32 gen,
					  struct iolens_file_key *key)
{
	if (!st->pstart_ns)
		st->pstart_ns = leader_start(task);
	key->ino = ino;
	key->dev = dev;
	key->gen = gen;
	key->tgid = task->tgid;
	key->pstart_ns = st->pstart_ns;
}

/*
 * What the thread is doing now (enum iolens_io_ctx), for the page-cache hooks. With timing exact
 * sys_enter set st->io_ctx at the call's entry. With timing off nothing runs at entry: the call
 * is read from the registers the thread's entry into the kernel saved, orig_ax, the system call's
 * number (-1 in an exception from user mode: a page fault; a fault inside a call, copying to or
 * from a mapping, sees the call's). io_uring's issue still sets st->io_ctx (READ, WRITE) on the
 * issuing thread, which keeps it. State borrowed from the group leader (io-wq, SQPOLL: own == 0)
 * has no system call of its own: an io-wq worker's context is the request it runs
 * (io_worker_ctx), the SQPOLL thread's the borrowed st->io_ctx.
 */
static __always_inline __u32 io_ctx_now(struct task_struct *task, struct iolens_task_state *st,
					int own)
{
	struct pt_regs *regs;
	long nr;

	if (!own)
		return io_worker_ctx(task, st);
	if (timing_mode != IOLENS_TIMING_OFF || st->io_ctx == IOLENS_CTX_READ ||
	    st->io_ctx == IOLENS_CTX_WRITE)
		return st->io_ctx;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	nr = BPF_CORE_READ(regs, orig_ax);
	return nr >= 0 ? iolens_syscall_io_ctx(nr) : IOLENS_CTX_FAULT;
}

/*
 * The record of `inode` to count a page-cache event into, or NULL. Inside a read or write
 * (`what`, from io_ctx_now(): READ, WRITE) the record is created if need be, and the call's
 * sys_exit names it (a descriptor inherited from outside the traced tree has no record yet). Elsewhere (faults,
 * fault-around, prefetch, stores through a mapping) only a record the process already has counts:
 * otherwise every process would get records for its program and libraries (execve reads and
 * maps them; a forked child faults on its parent's mappings). The one exception is a real fault
 * of a forked child on a data file its parent mapped (inherited_record).
 */
static __always_inline struct iolens_file_counters *
file_record(struct task_struct *task, struct iolens_task_state *st, struct inode *inode,
	    __u32 what)
{
	struct iolens_file_key key = {};
	__u64 ino;
	__u32 gen;
	int created = 0;

	if (!inode)
		return NULL;
	/* Direct loads through the tracepoint's BTF pointers (no helper calls: these hooks run on
	 * every buffered read of a traced process, where bpf_probe_read_kernel cost ~300 ns). */
	ino = inode->i_ino;
	gen = inode->i_generation;
	task_file_key(task, st, inode_dev(st, inode, ino, gen), ino, gen, &key);
	if (what == IOLENS_CTX_READ || what == IOLENS_CTX_WRITE) {
		if (!S_ISREG(inode->i_mode))
			return NULL;
		return file_record_get(&key, &created);
	}
	return file_record_find(&key);
}

/*
 * The programs below load mapping->host (and folio->mapping) first, before io_task_state()
 * branches: a pointer loaded through a tracepoint's argument costs the verifier ~1.2 ms per
 * walk (see io_task_state), and one load per event is nothing at run time.
 */

/*
 * One buffered read's pages asked of the page cache. filemap_read() calls filemap_get_pages()
 * once per batch of folios, each time with the read's whole remaining range [index, last_index]
 * (last_index inclusive on 6.18): a later batch of the same read has the same file, the same
 * last_index, a higher index and the same system call (enter_ns). Only the first event of a read
 * counts, so cache_read_pages is the pages each read asked for, once.
 */
SEC("tp_btf/mm_filemap_get_pages")
int BPF_PROG(mm_filemap_get_pages, struct address_space *mapping, unsigned long index,
	     unsigned long last_index)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct inode *host = UNTRUSTED(address_space, mapping)->host;
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct iolens_file_counters *c;
	__u64 ino;
	__u32 dev;
	int same;

	if (!st || !host)
		return 0;
	ino = host->i_ino;
	/* Through the thread's identity cache: a read's batches are on the file its calls use, so
	 * the btrfs test of file_dev_of() runs only on a miss (per read, it cost ~120 ns). */
	dev = inode_dev(st, host, ino, host->i_generation);
	/* enter_ns is 0 outside the hooked system calls (io_uring_enter, io-wq workers, iolensd
	 * with its syscall hooks detached): there the file and range alone tell a later batch. */
	same = st->gp_enter == st->enter_ns && st->gp_dev == dev && st->gp_ino == ino &&
	       st->gp_last == last_index && index > st->gp_first;
	st->gp_ino = ino;
	st->gp_dev = dev;
	st->gp_first = index;
	st->gp_last = last_index;
	st->gp_enter = st->enter_ns;
	if (same || last_index < index)
		return 0;
	c = file_record(task, st, host, io_ctx_now(task, st, own));
	if (c)
		IOLENS_ADD(&c->cache_read_pages, last_index - index + 1);
	return 0;
}

/*
 * A folio inserted into the page cache, charged by what the thread is doing (st->io_ctx): a
 * read's miss (with the readahead done for it), a fault's miss, a prefetch; pages created for a
 * write are not misses and count in dirtied_pages instead.
 */
SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(mm_filemap_add_to_page_cache, struct folio *folio)
{
	struct task_struct *task = bpf_get_current_task_btf();
	/* NULL mapping (anonymous, swap): the load of host yields NULL (the loads are not
	 * through a trusted pointer, so the verifier needs no test) */
	struct inode *host = UNTRUSTED(folio, folio)->mapping->host;
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct iolens_file_counters *c;
	__u32 what;

	if (!st)
		return 0;
	what = io_ctx_now(task, st, own);
	if (what == IOLENS_CTX_WRITE)
		return 0;
	c = file_record(task, st, host, what);
	if (!c)
		return 0;
	if (what == IOLENS_CTX_READ)
		IOLENS_ADD(&c->cache_miss_pages, folio_pages(folio));
	else if (what == IOLENS_CTX_FAULT)
		IOLENS_ADD(&c->fault_miss_pages, folio_pages(folio));
	else
		IOLENS_ADD(&c->prefetch_pages, folio_pages(folio));
	return 0;
}

/* A readahead decision on `inode`: synchronous (a read or fault missed) or asynchronous (a
 * sequential stream reached its readahead mark). */
static __always_inline int count_ra(struct inode *inode, int async)
{
	struct task_struct *task = bpf_get_current_task_btf();
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct iolens_file_counters *c;

	if (!st)
		return 0;
	c = file_record(task, st, inode, io_ctx_now(task, st, own));
	if (c)
		IOLENS_ADD(async ? &c->ra_async : &c->ra_sync, 1);
	return 0;
}

SEC("tp_btf/page_cache_sync_ra")
int BPF_PROG(page_cache_sync_ra, struct inode *inode, unsigned long index,
	     struct file_ra_state *ra, unsigned long req_count)
{
	return count_ra(inode, 0);
}

SEC("tp_btf/page_cache_async_ra")
int BPF_PROG(page_cache_async_ra, struct inode *inode, unsigned long index,
	     struct file_ra_state *ra, unsigned long req_count)
{
	return count_ra(inode, 1);
}

/*
 * For a fault (mm_filemap_fault) on a file the process has no record of: a new record when the
 * parent process (real_parent, the process that forked it) mapped the file itself through a
 * traced mmap() and never executable, else NULL. This is a DataLoader worker reading the dataset
 * its parent memmapped (np.load(mmap_mode='r'), np.memmap) before forking it. Libraries are kept
 * out by PROT_EXEC: ld.so maps each library's text executable, so the parent's record of it has
 * IOLENS_MAPPED_EXEC (a library's data segment alone is not executable, hence the flag on the
 * record rather than on one mapping); the program and ld.so are mapped by execve, not mmap(), so
 * the parent has no mmaps of them. Only mm_filemap_fault creates such a record: fault-around
 * (mm_filemap_map_pages) maps cached pages of the parent's mappings, library text included,
 * all the time. The child's later fault-around and fault misses count into the record as usual.
 * Only the direct parent counts: a grandchild of the process that mapped the file has no record.
 * The name was sent with the parent's record (names are per file, not per process): the new
 * record is as named as the parent's.
 */
static __always_inline struct iolens_file_counters *
inherited_record(struct task_struct *task, struct iolens_task_state *st, struct inode *inode,
		 __u32 what)
{
	struct iolens_file_key key = {};
	struct iolens_file_counters *pc, *c;
	struct task_struct *parent;
	int created = 0;
	__u64 ino;
	__u32 gen;

	if (!inode || what == IOLENS_CTX_READ || what == IOLENS_CTX_WRITE)
		return NULL;
	parent = BPF_CORE_READ(task, real_parent);
	if (!parent)
		return NULL;
	ino = BPF_CORE_READ(inode, i_ino);
	gen = BPF_CORE_READ(inode, i_generation);
	task_file_key(task, st, inode_dev(st, inode, ino, gen), ino, gen, &key);
	key.tgid = BPF_CORE_READ(parent, tgid);
	key.pstart_ns = leader_start(parent);
	pc = file_record_find(&key);
	if (!pc || !pc->mmaps || (pc->map_flags & IOLENS_MAPPED_EXEC))
		return NULL;
	key.tgid = task->tgid;
	key.pstart_ns = st->pstart_ns;
	c = file_record_get(&key, &created);
	if (c && created)
		c->named = pc->named;
	return c;
}

/*
 * A file-backed fault entering filemap_fault(). Faults come from user mode, where sys_exit left
 * io_ctx at NONE: the pages the fault inserts (its read-around included) are fault misses until
 * the thread's next system call resets io_ctx. A fault inside a read or write (copying from or
 * to a file mapping) leaves the call's context alone: nothing would restore it when the fault
 * ends, and the call's own pages (a write's new pages) must not turn into fault misses.
 */
SEC("tp_btf/mm_filemap_fault")
int BPF_PROG(mm_filemap_fault, struct address_space *mapping, unsigned long index)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct inode *host = UNTRUSTED(address_space, mapping)->host;
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct iolens_file_counters *c;

	__u32 what;

	if (!st)
		return 0;
	/* Not on state borrowed from the group leader (an io thread's fault): its context is the
	 * leader's call's, and a worker's comes from its request (io_worker_ctx). */
	if (own && st->io_ctx == IOLENS_CTX_NONE)
		st->io_ctx = IOLENS_CTX_FAULT;
	what = io_ctx_now(task, st, own);
	c = file_record(task, st, host, what);
	if (!c)
		c = inherited_record(task, st, host, what);
	if (c)
		IOLENS_ADD(&c->fault_pages, 1);
	return 0;
}

/* Fault-around: the range [start, last] (inclusive) filemap_map_pages() tries to map from the
 * page cache; pages not cached in it are skipped, so this is an upper bound of pages mapped. */
SEC("tp_btf/mm_filemap_map_pages")
int BPF_PROG(mm_filemap_map_pages, struct address_space *mapping, unsigned long start,
	     unsigned long last)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct inode *host = UNTRUSTED(address_space, mapping)->host;
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct iolens_file_counters *c;

	if (!st || last < start)
		return 0;
	c = file_record(task, st, host, io_ctx_now(task, st, own));
	if (c)
		IOLENS_ADD(&c->fault_around_pages, last - start + 1);
	return 0;
}

/*
 * The record of the file this thread last dirtied (st->dirty_*), created if need be, or NULL
 * (none yet, map full: counted). balance_dirty_pages has no file argument: the throttled
 * thread is the one that just dirtied pages, so its pause is charged to that file.
 */
static __always_inline struct iolens_file_counters *
dirty_record(struct task_struct *task, struct iolens_task_state *st)
{
	struct iolens_file_key key = {};
	int created = 0;

	if (!st->dirty_ino && !st->dirty_dev)
		return NULL;
	task_file_key(task, st, st->dirty_dev, st->dirty_ino, st->dirty_gen, &key);
	return file_record_get(&key, &created);
}

/*
 * For the writeback hooks, whose mapping argument is nullable (the verifier insists on the
 * test): NULL without a mapping, else io_task_state() and the mapping's inode in *host. The
 * test and the load come first, before io_task_state() branches, so that the load is walked
 * once (see there).
 */
static __always_inline struct iolens_task_state *
mapping_task_state(struct task_struct *task, struct address_space *mapping, struct inode **host,
		   int *own)
{
	if (!mapping)
		return NULL;
	*host = UNTRUSTED(address_space, mapping)->host;
	return io_task_state(task, own);
}

/* A folio newly dirtied in the writer's context (write(), a store through a shared mapping). */
SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(writeback_dirty_folio, struct folio *folio, struct address_space *mapping)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct inode *host = NULL;
	int own;
	struct iolens_task_state *st = mapping_task_state(task, mapping, &host, &own);
	struct iolens_file_counters *c;

	if (!st)
		return 0;
	c = file_record(task, st, host, io_ctx_now(task, st, own));
	if (!c)
		return 0;
	IOLENS_ADD(&c->dirtied_pages, folio_pages(folio));
	st->dirty_ino = host->i_ino;
	st->dirty_gen = host->i_generation;
	st->dirty_dev = inode_dev(st, host, st->dirty_ino, st->dirty_gen);
	/* for the block hooks: a flusher writing these pages back charges this process */
	remember_dirtier(st->dirty_dev, st->dirty_ino, task->tgid, st->pstart_ns);
	return 0;
}

/*
 * Writer throttling. TP_PROTO (6.18): (wb, dtc, dirty_ratelimit, task_ratelimit, pages_dirtied,
 * period, pause, start_time); pause and period are jiffies. A pause > 0 is the sleep that
 * follows at once (io_schedule_timeout(pause)); pause <= 0 is traced without sleeping (the
 * classic format's `pause` field is the same value in ms, `paused` the time since start_time).
 */
SEC("tp_btf/balance_dirty_pages")
int BPF_PROG(balance_dirty_pages, struct bdi_writeback *wb, struct dirty_throttle_control *dtc,
	     unsigned long dirty_ratelimit, unsigned long task_ratelimit,
	     unsigned long pages_dirtied, unsigned long period, long pause,
	     unsigned long start_time)
{
	struct task_struct *task = bpf_get_current_task_btf();
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct iolens_file_counters *c;
	__u64 hz = CONFIG_HZ > 0 ? CONFIG_HZ : IOLENS_DEFAULT_HZ;

	if (!st || pause <= 0)
		return 0;
	c = dirty_record(task, st);
	if (!c)
		return 0;
	IOLENS_ADD(&c->throttle_ns, (__u64)pause * 1000000000ULL / hz);
	IOLENS_ADD(&c->throttles, 1);
	return 0;
}

/* A wait for a folio under writeback (fsync, rewriting a page being written). */
SEC("tp_btf/folio_wait_writeback")
int BPF_PROG(folio_wait_writeback, struct folio *folio, struct address_space *mapping)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct inode *host = NULL;
	int own;
	struct iolens_task_state *st = mapping_task_state(task, mapping, &host, &own);
	struct iolens_file_counters *c;

	if (!st)
		return 0;
	c = file_record(task, st, host, io_ctx_now(task, st, own));
	if (c)
		IOLENS_ADD(&c->wb_waits, 1);
	return 0;
}
