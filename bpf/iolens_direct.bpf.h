/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Included at the end of bpf/iolens.bpf.c (extras: see the comment there). */
/*
 * O_DIRECT (iomap dio) and io_uring requests (docs/counters.md "O_DIRECT and io_uring (ABI 7)").
 *
 * Both are timed from a start hook to a completion hook that may run elsewhere: an O_DIRECT
 * completion in the block layer's IRQ or a kworker, an io_uring completion in an io-wq worker
 * or the submitter's task work. The start hook runs in the traced task and keeps what the
 * completion needs (the process key, the time) in an in-flight map keyed by the kiocb or the
 * request; the completion never trusts `current` for the process.
 */

/* The (process, file) key of `inode`; 0 if it is not a regular file. */
static __always_inline int inode_key(struct iolens_file_key *k, __u32 tgid, __u64 pstart,
				     struct inode *inode)
{
	if (!inode || !S_ISREG(BPF_CORE_READ(inode, i_mode)))
		return 0;
	k->tgid = tgid;
	k->pstart_ns = pstart;
	k->ino = BPF_CORE_READ(inode, i_ino);
	k->dev = file_dev(inode);
	k->gen = BPF_CORE_READ(inode, i_generation);
	return 1;
}

/* ---- O_DIRECT: iomap_dio_rw_begin .. iomap_dio_complete ---- */

/* 0: iomap_dio_complete's program is not loaded (disabled, or refused by the kernel), so no
 * attempt of an io_uring request is counted before its CQE, which then counts all its request
 * moved (io_uring_complete). Set by the loader with the programs it loads. */
const volatile __u32 dio_complete_loaded = 1;

struct dio_inflight {
	__u64 t0;
	__u64 pstart_ns;
	__u64 done_before; /* bytes a previous partial call already moved (in the complete's ret) */
	__u64 count;       /* bytes this call asked for (the iterator's count at begin) */
	__u64 file;        /* its struct file * (compared, never read, at an io_uring CQE) */
	__u32 tgid;
	__u32 is_write;
};

/* In-flight direct I/O by struct kiocb *. A begin that never completes (a NOWAIT attempt that
 * gave up with -EAGAIN, an error before any bio, a fallback to buffered I/O) leaves its entry:
 * overwritten when the kiocb address is used again (a syscall's kiocb is on the stack), taken
 * out by the CQE of the io_uring request at that address (dio_take). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct dio_inflight);
} dio_inflight SEC(".maps");

SEC("tp_btf/iomap_dio_rw_begin")
int BPF_PROG(iomap_dio_rw_begin, struct kiocb *iocb, struct iov_iter *iter, unsigned int dio_flags,
	     size_t done_before)
{
	struct task_struct *task = bpf_get_current_task_btf();
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct dio_inflight v = {};
	struct file *f;
	__u64 key = (__u64)iocb;

	if (!st)
		return 0;
	f = UNTRUSTED(kiocb, iocb)->ki_filp;
	/* Creates the record and sends its name now, in the task: the completion may be in IRQ. */
	if (!f || !inode_record(task, st, BPF_CORE_READ(f, f_inode), f, NULL))
		return 0;
	v.t0 = bpf_ktime_get_ns();
	v.tgid = task->tgid;
	v.pstart_ns = st->pstart_ns;
	v.done_before = done_before;
	v.count = BPF_CORE_READ(iter, count);
	v.file = (__u64)f;
	/* ITER_SOURCE: the iterator is the data's source, i.e. a write (iov_iter_rw()) */
	v.is_write = BPF_CORE_READ(iter, data_source) ? 1 : 0;
	if (bpf_map_update_elem(&dio_inflight, &key, &v, BPF_ANY))
		lose(IOLENS_STAT_DIRECT_INFLIGHT_LOST, v.tgid, v.pstart_ns);
	return 0;
}

/* One direct read or write of `d` that returned `ret` (>= 0) bytes, complete at `t1`; at most
 * what the call asked for. */
static __always_inline void dio_account(struct iolens_file_counters *c,
					const struct dio_inflight *d, __u64 ret, __u64 t1)
{
	__u64 elapsed = t1 > d->t0 ? t1 - d->t0 : 0;
	__u64 bytes = ret > d->done_before ? ret - d->done_before : 0;

	if (bytes > d->count)
		bytes = d->count;

	if (d->is_write) {
		IOLENS_ADD(&c->direct_writes, 1);
		IOLENS_ADD(&c->direct_bytes_written, bytes);
		IOLENS_ADD(&c->direct_write_time_ns, elapsed);
	} else {
		IOLENS_ADD(&c->direct_reads, 1);
		IOLENS_ADD(&c->direct_bytes_read, bytes);
		IOLENS_ADD(&c->direct_read_time_ns, elapsed);
	}
	if (elapsed > c->direct_max_time_ns)
		c->direct_max_time_ns = elapsed;
}

/* Fires for synchronous and for queued (aio, io_uring: -EIOCBQUEUED) direct I/O alike: the
 * async path completes through iomap_dio_complete_work(), which calls iomap_dio_complete().
 * A queued completion runs in an IRQ, a softirq (wherever it lands) or a workqueue: the kernel
 * (6.18 VM) was seen not to run this program in the softirq of a busy unrelated thread, with
 * no recursion miss counted (as block_rq_complete, docs/counters.md `block_untimed`). For
 * io_uring requests, io_uring_complete counts what this missed (dio_take). */
SEC("tp_btf/iomap_dio_complete")
int BPF_PROG(iomap_dio_complete, struct kiocb *iocb, int error, ssize_t ret)
{
	__u64 key = (__u64)iocb;
	struct dio_inflight *v = bpf_map_lookup_elem(&dio_inflight, &key);
	struct iolens_file_key fk = {};
	struct iolens_file_counters *c;
	struct dio_inflight d;
	struct file *f;
	int created = 0;

	if (!v)
		return 0;
	d = *v;
	bpf_map_delete_elem(&dio_inflight, &key);
	if (ret < 0)
		return 0;
	f = UNTRUSTED(kiocb, iocb)->ki_filp;
	if (!f || !inode_key(&fk, d.tgid, d.pstart_ns, BPF_CORE_READ(f, f_inode)))
		return 0;
	/* No name sent from here (IRQ context possibly): the begin hook named the record. */
	c = file_record_get(&fk, &created);
	if (!c)
		return 0;
	dio_account(c, &d, ret, bpf_ktime_get_ns());
	return 0;
}

/* ---- io_uring: io_uring_submit_req .. io_uring_complete ---- */

struct uring_inflight {
	__u64 t0;
	__u64 pstart_ns;
	__s64 pos;     /* read/write: the request's offset (-1: the file position) */
	__u64 ino;     /* close: the file the descriptor named at submission */
	__u32 dev;
	__u32 gen;
	__u32 tgid;
	__u32 opcode;
	__u32 target_ok; /* open: into a descriptor (not a registered-file slot); close: the
			  * descriptor named a regular file */
	__u32 pad;
};

/* In-flight io_uring requests by struct io_kiocb *. A request that posts no completion
 * (IOSQE_CQE_SKIP_SUCCESS) leaves its entry until the request is recycled. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct uring_inflight);
} uring_inflight SEC(".maps");

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(io_uring_submit_req, struct io_kiocb *req)
{
	struct task_struct *task = bpf_get_current_task_btf();
	int own;
	struct iolens_task_state *st = io_task_state(task, &own);
	struct uring_inflight v = {};
	__u64 key = (__u64)req;
	int kind;

	if (!st)
		return 0;
	v.opcode = req->opcode;
	kind = uring_kind(v.opcode);
	if (kind == URING_SKIP)
		return 0;
	if (!st->pstart_ns)
		st->pstart_ns = leader_start(task);
	v.t0 = bpf_ktime_get_ns();
	v.tgid = task->tgid;
	v.pstart_ns = st->pstart_ns;
	v.pos = -1;
	/* The request is issued inline right after this, in this thread (io_uring_enter, whose
	 * sys_exit resets it): page-cache insertions meanwhile serve it (enum iolens_io_ctx).
	 * Not on state borrowed from the group leader (SQPOLL, io-wq: no sys_exit to reset). */
	if (own)
		st->io_ctx = kind == URING_READ ? IOLENS_CTX_READ :
			     kind == URING_WRITE ? IOLENS_CTX_WRITE : IOLENS_CTX_NONE;
	if (kind == URING_READ || kind == URING_WRITE) {
		/* prep (io_prep_rw) has run: the command area is a struct io_rw */
		struct io_rw *rw = (struct io_rw *)&req->cmd;

		v.pos = BPF_CORE_READ(rw, kiocb.ki_pos);
	} else if (kind == URING_OPEN) {
		/* An open into a registered-file slot completes with 0, not a descriptor. */
		struct io_open *op = (struct io_open *)&req->cmd;

		v.target_ok = !bpf_core_field_exists(op->file_slot) ||
			      BPF_CORE_READ(op, file_slot) == 0;
	} else if (kind == URING_CLOSE) {
		/* The descriptor is gone at completion: resolve it now, in the submitter's table
		 * (a registered-file slot, io_close::file_slot, is not a descriptor: skipped). */
		struct io_close *cl = (struct io_close *)&req->cmd;
		struct file *f;
		__u32 mode;

		/* (file_slot: 5.15+) */
		if (!bpf_core_field_exists(cl->file_slot) || !BPF_CORE_READ(cl, file_slot)) {
			f = (struct file *)current_fd_file(BPF_CORE_READ(cl, fd));
			if (f) {
				file_identity_cached(st, f, &v.dev, &v.ino, &v.gen, &mode);
				v.target_ok = S_ISREG(mode);
				/* name it while the struct file is reachable */
				if (v.target_ok)
					inode_record(task, st, BPF_CORE_READ(f, f_inode), f, NULL);
			}
			st->cache_file = 0; /* the file is going away */
		}
	}
	if (bpf_map_update_elem(&uring_inflight, &key, &v, BPF_ANY))
		lose(IOLENS_STAT_URING_INFLIGHT_LOST, v.tgid, v.pstart_ns);
	return 0;
}

/*
 * What earlier short attempts of read or write request `req` moved, which io_uring adds to its
 * CQE's result (its struct io_async_rw's bytes_done). 0 where the kernel has none, and where
 * the request's async data was already recycled before the CQE (6.10+, the usual inline path):
 * bytes_done > 0 only after a short attempt punted the rest to io-wq, whose requests keep it.
 */
static __always_inline __u64 uring_bytes_done(struct io_kiocb *req)
{
	struct io_async_rw *io = BPF_CORE_READ(req, async_data);

	if (!io || !bpf_core_field_exists(io->bytes_done))
		return 0;
	return BPF_CORE_READ(io, bytes_done);
}

/*
 * The in-flight O_DIRECT entry at io_uring request `key`, taken out of dio_inflight: 1 if there
 * was one. The request's kiocb is the start of its struct io_kiocb, so both hooks key it by
 * the same address, and the direct I/O completes before the request's CQE is posted (in its
 * ki_complete, or in io_uring's task work for a completion deferred to the caller): an entry
 * still there at the CQE is a completion iomap_dio_complete's program did not see (see there),
 * or a begin that did no direct I/O: at or past end of file (result 0), refused (< 0), or
 * fallen back to buffered I/O (the page cache over its range could not be invalidated:
 * result > 0, and counted as direct, as the CQE cannot tell). io_uring_complete removes it
 * at a read or write that moved nothing, takes it out at one that moved bytes and counts it,
 * timed to the CQE, when it is this request's: an entry an earlier request left at the
 * recycled address (its CQE not posted: IOSQE_CQE_SKIP_SUCCESS; or not seen, its process
 * untraced meanwhile) has an older begin than this request's submission, or another file or
 * direction. The CQE's result also holds what earlier short attempts of the request moved
 * (io_uring's own bytes_done, counted by those attempts' completions): only what the last
 * attempt moved counts, so a last attempt that did no direct I/O (at end of file after a
 * short read) counts nothing. An earlier attempt is short only when its direct I/O completed
 * synchronously, in the submitting task, where the completion program has not been seen
 * skipped; if it were, its bytes would not be counted (the retry's begin replaces its entry).
 * Where that program is not loaded at all (dio_complete_loaded), no attempt was counted before
 * the CQE, which counts the whole result as one direct read or write.
 */
static __always_inline int dio_take(__u64 key, struct dio_inflight *out)
{
	struct dio_inflight *vp = bpf_map_lookup_elem(&dio_inflight, &key);

	if (!vp)
		return 0;
	*out = *vp;
	bpf_map_delete_elem(&dio_inflight, &key);
	return 1;
}

SEC("tp_btf/io_uring_complete")
int BPF_PROG(io_uring_complete, struct io_ring_ctx *ring, void *req_ptr, struct io_uring_cqe *cqe)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct io_kiocb *req = req_ptr;
	__u64 key = (__u64)req_ptr;
	struct uring_inflight *vp;
	struct uring_inflight v = {};
	struct iolens_task_state *st;
	struct iolens_file_counters *c = NULL;
	struct dio_inflight dio = {};
	struct call_ctx ucx = {};
	struct file *f;
	__u64 t1;
	__s32 res;
	int kind, own;

	if (!req)
		return 0; /* an auxiliary completion (no request): nothing to charge */
	/* before the branch on the entry below: its loads are walked once (io_task_state) */
	st = io_task_state(task, &own);
	vp = bpf_map_lookup_elem(&uring_inflight, &key);
	if (vp) {
		v = *vp;
		bpf_map_delete_elem(&uring_inflight, &key);
	}
	/*
	 * Completions are posted by threads of the ring's process (its task work, io-wq workers,
	 * the SQPOLL thread): the record is the submitter's, whose state must be traced. A
	 * completion seen without its submission (in-flight map full, tracing began meanwhile)
	 * is counted for the current process with zero time.
	 */
	if (!st)
		return 0;
	if (!vp) {
		v.opcode = BPF_CORE_READ(req, opcode);
		v.tgid = task->tgid;
		v.pos = -1;
	} else if (v.tgid != task->tgid) {
		return 0; /* a ring shared with another process: not resolvable here */
	}
	kind = uring_kind(v.opcode);
	res = cqe->res;
	/* a begin of a read or write that moved nothing did no direct I/O to miss (dio_take) */
	if (res <= 0 && (kind == URING_READ || kind == URING_WRITE))
		bpf_map_delete_elem(&dio_inflight, &key);
	if (kind == URING_SKIP || res < 0)
		return 0;
	t1 = bpf_ktime_get_ns();

	if (kind == URING_CLOSE) {
		struct iolens_file_key fk = {
			.tgid = v.tgid,
			.pstart_ns = v.pstart_ns,
			.ino = v.ino,
			.dev = v.dev,
			.gen = v.gen,
		};
		int created = 0;

		if (!v.target_ok)
			return 0;
		c = file_record_get(&fk, &created);
		if (!c)
			return 0;
		IOLENS_ADD(&c->uring_closes, 1);
		record_close(c, res, v.t0, t1);
		return 0;
	}
	if (kind == URING_OPEN && !v.target_ok)
		return 0;
	if (kind == URING_OPEN)
		/* the new descriptor, in the process's table */
		f = (struct file *)current_fd_file(res);
	else
		f = BPF_CORE_READ(req, file);
	if (!f)
		return 0;
	c = inode_record(task, st, BPF_CORE_READ(f, f_inode), f, &ucx.key);
	if (!c)
		return 0;
	/* As a system call's for the accounting; the request's buffer and an open's mode are not
	 * looked at (mem_not_aligned and mode stay as they were: Darshan sees no io_uring) */
	ucx.tgid = v.tgid;
	ucx.t0 = v.t0;
	ucx.t1 = t1;
	ucx.ret = res;
	switch (kind) {
	case URING_READ:
	case URING_WRITE:
		if (v.pos < 0) /* at the file position, which has moved by res */
			v.pos = BPF_CORE_READ(f, f_pos) - res;
		if (v.pos < 0)
			v.pos = 0;
		if (kind == URING_READ) {
			IOLENS_ADD(&c->uring_reads, 1);
			IOLENS_ADD(&c->uring_bytes_read, (__u64)res);
		} else {
			IOLENS_ADD(&c->uring_writes, 1);
			IOLENS_ADD(&c->uring_bytes_written, (__u64)res);
		}
		/* a constant is_write in each copy (see account_rw) */
		if (kind == URING_WRITE)
			record_write(c, &ucx, v.pos);
		else
			record_read(c, &ucx, v.pos);
		/* a begin of this request: its process, file and direction, after its submission;
		 * and bytes moved by its last attempt (dio_take) */
		if (dio_take(key, &dio) && dio.tgid == v.tgid && dio.file == (__u64)f &&
		    dio.is_write == (kind == URING_WRITE) && (!vp || dio.t0 >= v.t0)) {
			__u64 done = uring_bytes_done(req);
			__u64 last = (__u64)res - done;

			/* without the completion program the earlier attempts went uncounted too:
			 * the whole result is this request's direct I/O (with or without a readable
			 * bytes_done) */
			if (!dio_complete_loaded) {
				last = (__u64)res;
				dio.count = (__u64)res; /* io_uring's own total: no cap */
				dio.done_before = 0;	/* nothing counted those bytes */
			}
			if (last <= (__u64)res && last > 0)
				dio_account(c, &dio, last, t1);
		}
		break;
	case URING_OPEN:
		IOLENS_ADD(&c->uring_opens, 1);
		record_open(c, &ucx, 0);
		break;
	default:
		IOLENS_ADD(&c->uring_other, 1);
		break;
	}
	return 0;
}
