/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Included at the end of bpf/iolens.bpf.c (extras: see the comment there). */
/*
 * The block layer: bytes, requests and latency per (process, device), docs/counters.md "Block
 * layer (ABI 7)".
 *
 *   block_bio_queue     a bio enters the block layer: find its owner, charge its bytes, and
 *                       remember bio -> owner for the request it will become part of
 *   block_rq_insert     a request enters the I/O scheduler's queue: t_insert
 *   block_rq_issue      the driver gets it: count it (size, queue latency) for the owner of its
 *                       first bio
 *   block_rq_complete   the device is done (IRQ context: no `current`): device latency
 *
 * Owner of a bio (never the blkcg: on hybrid hosts the io controller is on cgroup v1 and
 * flusher writeback is charged to the root cgroup there):
 *   (b) a write of page-cache pages whose file a traced process dirtied (`dirtiers`) and that
 *       another thread writes (flusher kworker, a sync(2) caller): the dirtier, as writeback;
 *   (a) else the current task if it is traced: direct I/O, reads and readahead, writeback run
 *       by the dirtier itself (fsync);
 *   (c) else nobody: the bytes go to the node-wide `block_unattributed` array.
 */

/* Per-(process, device) block counters, drained by the agent (Loader::read_blocks). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct iolens_block_key);
	__type(value, struct iolens_block_counters);
} blocks SEC(".maps");

/*
 * Bytes of bios charged to nobody (rule c), node-wide: [0] reads, [1] writes. Kernel threads'
 * journal and metadata writes, untraced processes' I/O, writeback of files no traced process
 * dirtied (or whose dirtier was evicted from `dirtiers`).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} block_unattributed SEC(".maps");

/*
 * bio -> owner, from block_bio_queue to the request the bio starts. LRU: a bio lives for
 * milliseconds; a stale entry (the bio freed and its memory reused) is overwritten or removed
 * when the new bio is queued, and checked against the device and sectors when it is read.
 */
struct bio_owner {
	struct iolens_block_key key;
	__u64 sector;  /* first sector of the bio when it was queued */
	__u64 sectors; /* its length, 512-byte sectors */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct bio_owner);
} bio_owners SEC(".maps");

/* A charged request between insert (or issue) and completion, keyed by struct request *. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct iolens_rq_inflight);
} rq_inflight SEC(".maps");

/*
 * `f` belongs to an earlier request at the same address: one whose completion never reached
 * block_rq_complete (it is deleted there). Counted when it had been counted at issue, so that
 * requests = timed + untimed holds (docs/counters.md `block_untimed`).
 */
static __always_inline void drop_stale(const struct iolens_rq_inflight *f)
{
	if (f->counted && f->issue_ns)
		lose(IOLENS_STAT_BLOCK_UNTIMED, f->key.tgid, f->key.pstart_ns);
}

/* A fresh block record (in .rodata: the value is larger than the BPF stack allows). */
const struct iolens_block_counters new_block_record = {};

#define IOLENS_REQ_OP_MASK 0xff
#define IOLENS_REQ_OP_READ 0
#define IOLENS_REQ_OP_WRITE 1
#define IOLENS_REQ_OP_FLUSH 2
#define IOLENS_REQ_OP_DISCARD 3
/* page->mapping's low bits: anonymous (1) or movable/KSM (2, 3) pages have no address_space */
#define IOLENS_PAGE_MAPPING_FLAGS 0x3

static __always_inline struct iolens_block_counters *block_record(struct iolens_block_key *key)
{
	struct iolens_block_counters *c = bpf_map_lookup_elem(&blocks, key);
	long err;

	if (c)
		return c;
	err = bpf_map_update_elem(&blocks, key, &new_block_record, BPF_NOEXIST);
	if (err && err != -EEXIST) {
		lose(IOLENS_STAT_BLOCK_RECORDS_LOST, key->tgid, key->pstart_ns);
		return NULL;
	}
	return bpf_map_lookup_elem(&blocks, key);
}

/* One request of `ns` into a latency histogram (iolens_lat_bucket) and its sum. */
static __always_inline void lat_add(__u64 *hist, __u64 *sum_ns, __u64 ns)
{
	__u32 b = iolens_lat_bucket(ns);

	/* Explicit bound for the verifier. */
	if (b < IOLENS_NR_LAT_BUCKETS) {
		IOLENS_ADD(&hist[b], 1);
		IOLENS_ADD(sum_ns, ns);
	}
}

/*
 * The dirtier of the file whose page starts `bio`, or NULL: the first page's folio (a large
 * folio's tail page has no mapping of its own) -> address_space -> host inode -> dirtiers.
 */
static __always_inline struct dirtier *bio_dirtier(struct bio *bio)
{
	struct seen_key k = {};
	struct bio_vec *bv = BPF_CORE_READ(bio, bi_io_vec);
	struct page *page;
	struct inode *host;
	unsigned long head, mapping;

	if (!bv || !BPF_CORE_READ(bio, bi_vcnt))
		return NULL;
	page = BPF_CORE_READ(bv, bv_page);
	if (!page)
		return NULL;
	head = BPF_CORE_READ(page, compound_head);
	if (head & 1)
		page = (struct page *)(head - 1);
	mapping = (unsigned long)BPF_CORE_READ(page, mapping);
	if (!mapping || (mapping & IOLENS_PAGE_MAPPING_FLAGS))
		return NULL;
	host = BPF_CORE_READ((struct address_space *)mapping, host);
	if (!host)
		return NULL;
	k.ino = BPF_CORE_READ(host, i_ino);
	k.dev = file_dev(host);
	return bpf_map_lookup_elem(&dirtiers, &k);
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(block_bio_queue, struct bio *bio)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_block_counters *c;
	int own;
	/* first, before any branch: its loads are walked once by the verifier (io_task_state) */
	struct iolens_task_state *st = io_task_state(task, &own);
	struct bio_owner o = {};
	struct dirtier *d = NULL;
	__u64 bio_key = (__u64)bio;
	__u32 opf = BPF_CORE_READ(bio, bi_opf);
	__u32 op = opf & IOLENS_REQ_OP_MASK;
	__u64 bytes = BPF_CORE_READ(bio, bi_iter.bi_size);
	int writeback = 0;

	if (op == IOLENS_REQ_OP_WRITE)
		d = bio_dirtier(bio);
	if (d && d->tgid != task->tgid) {
		o.key.tgid = d->tgid;
		o.key.pstart_ns = d->pstart_ns;
		writeback = 1;
	} else {
		if (!st) {
			__u32 idx = op == IOLENS_REQ_OP_WRITE;

			/* Rule (c); a stale entry of this bio pointer must not name a request. */
			bpf_map_delete_elem(&bio_owners, &bio_key);
			if (op <= IOLENS_REQ_OP_WRITE) {
				__u64 *v = bpf_map_lookup_elem(&block_unattributed, &idx);

				if (v)
					*v += bytes;
			}
			return 0;
		}
		if (!st->pstart_ns)
			st->pstart_ns = leader_start(task);
		o.key.tgid = task->tgid;
		o.key.pstart_ns = st->pstart_ns;
	}
	o.key.dev = BPF_CORE_READ(bio, bi_bdev, bd_dev);
	o.sector = BPF_CORE_READ(bio, bi_iter.bi_sector);
	o.sectors = bytes >> 9;
	bpf_map_update_elem(&bio_owners, &bio_key, &o, BPF_ANY);

	c = block_record(&o.key);
	if (!c)
		return 0;
	if (op == IOLENS_REQ_OP_READ) {
		IOLENS_ADD(&c->read_bytes, bytes);
		IOLENS_ADD(&c->read_bios, 1);
	} else if (op == IOLENS_REQ_OP_WRITE) {
		IOLENS_ADD(&c->write_bytes, bytes);
		IOLENS_ADD(&c->write_bios, 1);
		if (writeback) {
			IOLENS_ADD(&c->writeback_bytes, bytes);
			IOLENS_ADD(&c->writeback_bios, 1);
		}
	} else if (op == IOLENS_REQ_OP_DISCARD) {
		IOLENS_ADD(&c->discard_bytes, bytes);
		IOLENS_ADD(&c->discard_bios, 1);
	}
	if (op == IOLENS_REQ_OP_FLUSH ||
	    (opf & (1U << bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH))))
		IOLENS_ADD(&c->flush_bios, 1);
	return 0;
}

/*
 * The owner of a request: that of its first bio. A bio split to the device's limits starts a
 * request as a new bio chained to the one queued (bio_chain: bi_private = the parent), so the
 * parent is looked up too. The entry must match the device and lie over the request's first
 * sector (a bio pointer reused since is not taken for its predecessor).
 */
static __always_inline struct bio_owner *rq_owner(struct request *rq)
{
	struct bio *bio = BPF_CORE_READ(rq, bio);
	struct bio_owner *o;
	__u64 k = (__u64)bio, sector;
	__u32 dev;

	if (!bio)
		return NULL;
	o = bpf_map_lookup_elem(&bio_owners, &k);
	if (!o) {
		k = (__u64)BPF_CORE_READ(bio, bi_private);
		if (!k)
			return NULL;
		o = bpf_map_lookup_elem(&bio_owners, &k);
		if (!o)
			return NULL;
	}
	dev = BPF_CORE_READ(bio, bi_bdev, bd_dev);
	sector = BPF_CORE_READ(bio, bi_iter.bi_sector);
	if (o->key.dev != dev || sector < o->sector || sector > o->sector + o->sectors)
		return NULL;
	return o;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(block_rq_insert, struct request *rq)
{
	struct iolens_rq_inflight f = {}, *old;
	struct bio_owner *o;
	__u64 k = (__u64)rq, rq_start = BPF_CORE_READ(rq, start_time_ns);

	old = bpf_map_lookup_elem(&rq_inflight, &k);
	if (old && old->rq_start_ns == rq_start && old->counted) {
		/* Requeued and inserted again: keeps its owner and its count. */
		old->insert_ns = bpf_ktime_get_ns();
		return 0;
	}
	if (old)
		drop_stale(old);
	o = rq_owner(rq);
	if (!o) {
		/* A charged request of the past at this address must not lend its times. */
		bpf_map_delete_elem(&rq_inflight, &k);
		return 0;
	}
	f.key = o->key;
	f.rq_start_ns = rq_start;
	f.insert_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&rq_inflight, &k, &f, BPF_ANY))
		lose(IOLENS_STAT_BLOCK_INFLIGHT_LOST, f.key.tgid, f.key.pstart_ns);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_rq_issue, struct request *rq)
{
	struct iolens_block_counters *c;
	struct iolens_rq_inflight *f, nf = {};
	struct iolens_block_key key;
	struct bio_owner *o;
	__u64 k = (__u64)rq, now = bpf_ktime_get_ns(), queued = 0;
	__u64 rq_start = BPF_CORE_READ(rq, start_time_ns);
	__u32 op = BPF_CORE_READ(rq, cmd_flags) & IOLENS_REQ_OP_MASK;
	__u32 bytes = BPF_CORE_READ(rq, __data_len);
	__u32 b, write = op == IOLENS_REQ_OP_WRITE;
	int have_queue = 0;

	if (op > IOLENS_REQ_OP_WRITE)
		return 0; /* flush, discard, ...: counted as bios only */
	f = bpf_map_lookup_elem(&rq_inflight, &k);
	if (f && f->rq_start_ns != rq_start)
		drop_stale(f);
	if (f && f->rq_start_ns == rq_start) {
		f->issue_ns = now;
		if (f->counted)
			return 0; /* issued again after a requeue */
		if (f->insert_ns) {
			queued = now - f->insert_ns;
			have_queue = 1;
		}
		f->write = write;
		f->counted = 1;
		key = f->key;
	} else {
		o = rq_owner(rq);
		if (!o) {
			if (f)
				bpf_map_delete_elem(&rq_inflight, &k);
			return 0;
		}
		nf.key = o->key;
		nf.rq_start_ns = rq_start;
		nf.issue_ns = now;
		nf.write = write;
		nf.counted = 1;
		/* On failure the request is still counted, but not timed. */
		if (bpf_map_update_elem(&rq_inflight, &k, &nf, BPF_ANY))
			lose(IOLENS_STAT_BLOCK_INFLIGHT_LOST, nf.key.tgid, nf.key.pstart_ns);
		key = nf.key;
	}
	c = block_record(&key);
	if (!c)
		return 0;
	b = iolens_blk_size_bucket(bytes);
	if (write)
		IOLENS_ADD(&c->write_reqs, 1);
	else
		IOLENS_ADD(&c->read_reqs, 1);
	if (b < IOLENS_NR_BLK_SIZE_BUCKETS) {
		if (write)
			IOLENS_ADD(&c->size_write[b], 1);
		else
			IOLENS_ADD(&c->size_read[b], 1);
	}
	if (!have_queue) {
		IOLENS_ADD(&c->unqueued_reqs, 1);
		return 0;
	}
	if (write)
		lat_add(c->queue_write, &c->queue_write_sum_ns, queued);
	else
		lat_add(c->queue_read, &c->queue_read_sum_ns, queued);
	return 0;
}

/*
 * Interrupt context: everything comes from the in-flight entry. A request completed in parts
 * (several calls) is timed at its first.
 */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	struct iolens_block_counters *c;
	struct iolens_rq_inflight *f;
	__u64 k = (__u64)rq, lat;

	f = bpf_map_lookup_elem(&rq_inflight, &k);
	if (!f)
		return 0;
	if (!f->issue_ns || f->rq_start_ns != BPF_CORE_READ(rq, start_time_ns)) {
		drop_stale(f);
		bpf_map_delete_elem(&rq_inflight, &k);
		return 0;
	}
	lat = bpf_ktime_get_ns() - f->issue_ns;
	c = block_record(&f->key);
	if (c) {
		if (f->write)
			lat_add(c->dev_write, &c->dev_write_sum_ns, lat);
		else
			lat_add(c->dev_read, &c->dev_read_sum_ns, lat);
		if (error)
			IOLENS_ADD(&c->dev_errors, 1);
	}
	bpf_map_delete_elem(&rq_inflight, &k);
	return 0;
}
