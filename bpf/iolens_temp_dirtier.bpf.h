/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * TEMP (branch `block` only, drop at merge): a minimal dirtying hook so that the block layer's
 * writeback attribution (dirtiers map) can be tested before the real one (bpf/iolens_cache.bpf.h)
 * is merged. It only remembers who dirtied each file; it counts nothing.
 */
SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(temp_dirtier_writeback_dirty_folio, struct folio *folio, struct address_space *mapping)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct iolens_task_state *st;
	struct inode *host;

	if (!mapping) /* nullable argument: the verifier insists */
		return 0;
	st = io_task_state(task);
	if (!st)
		return 0;
	host = BPF_CORE_READ(mapping, host);
	if (!host)
		return 0;
	if (!st->pstart_ns)
		st->pstart_ns = leader_start(task);
	remember_dirtier(BPF_CORE_READ(host, i_sb, s_dev), BPF_CORE_READ(host, i_ino), task->tgid,
			 st->pstart_ns);
	return 0;
}
