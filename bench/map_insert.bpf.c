// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * bench/map_insert.py: what making one new hash-map entry costs a BPF program, by value size,
 * with the map preallocated or not (BPF_F_NO_PREALLOC, set by map_insert.c before the load).
 * A tp_btf program on raw sys_enter inserts one new key per getppid() of one process; the
 * same program with `insert` 0 is the baseline. iolens' per-file record is 936 bytes
 * (bpf/README.md "Two tiers of records").
 * Build: clang -O2 -g -target bpf -DVALUE_SIZE=N -c map_insert.bpf.c (no vmlinux.h needed).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#ifndef VALUE_SIZE
#define VALUE_SIZE 936
#endif
#define NR_getppid 110 /* x86-64 */

struct value {
	__u64 w[VALUE_SIZE / 8];
};

/* 32 bytes, as iolens_file_key */
struct key {
	__u64 a, b, c, d;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 18); /* map_insert.c sets it to the run's calls */
	__type(key, struct key);
	__type(value, struct value);
} m SEC(".maps");

/* set by map_insert.c: [0] the process whose getppid() inserts, [1] 1 to insert, 0 not */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} cfg SEC(".maps");

const struct value zero_value = {};
__u64 next_key = 0;

SEC("tp_btf/sys_enter")
int insert_one(__u64 *ctx)
{
	__u32 k0 = 0, k1 = 1;
	__u32 *tgid = bpf_map_lookup_elem(&cfg, &k0);
	__u32 *insert = bpf_map_lookup_elem(&cfg, &k1);
	struct key k = {};

	if (!tgid || !insert || (bpf_get_current_pid_tgid() >> 32) != *tgid ||
	    ctx[1] != NR_getppid || !*insert)
		return 0;
	k.a = next_key++; /* one process, one thread inserts */
	bpf_map_update_elem(&m, &k, &zero_value, BPF_NOEXIST);
	return 0;
}
