// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Minimal BPF programs for bench/run_bench.py --variants: what each layer of iolens' syscall
 * hooks costs a process that is NOT traced. All are tp_btf on the raw sys_enter/sys_exit
 * tracepoints, like iolens; none does any work for the benchmark's processes.
 *   empty_enter / empty_exit  the floor: a program that returns at once
 *   ts_enter / ts_exit        iolens' filter: a task-storage lookup that finds nothing
 *   ts_exit_ktime_first       the same, but reading the clock before the lookup (as
 *                             iolens' sys_exit did when this was written)
 *   hash_enter / hash_exit    the alternative filter: a hash lookup keyed by tgid
 *   pages1_exit, pages4_exit, pages16_exit
 *                             read one word from each of 1, 4 or 16 distinct pages (an array
 *                             map of page-sized values): what a page the programs touch costs
 *                             per syscall (bench/README.md "Per call: by removal")
 * Build: clang -O2 -g -target bpf -c variants.bpf.c (no vmlinux.h needed).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct task_struct;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} ts_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} pid_map SEC(".maps");

SEC("tp_btf/sys_enter")
int empty_enter(void *ctx)
{
	return 0;
}

SEC("tp_btf/sys_exit")
int empty_exit(void *ctx)
{
	return 0;
}

static __always_inline int ts_touch(void)
{
	__u64 *v = bpf_task_storage_get(&ts_map, bpf_get_current_task_btf(), 0, 0);

	if (!v)
		return 0;
	*v = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sys_enter")
int ts_enter(void *ctx)
{
	return ts_touch();
}

SEC("tp_btf/sys_exit")
int ts_exit(void *ctx)
{
	return ts_touch();
}

SEC("tp_btf/sys_exit")
int ts_exit_ktime_first(void *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *v = bpf_task_storage_get(&ts_map, bpf_get_current_task_btf(), 0, 0);

	if (!v)
		return 0;
	*v = now;
	return 0;
}

static __always_inline int hash_touch(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 *v = bpf_map_lookup_elem(&pid_map, &tgid);

	if (!v)
		return 0;
	*v = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sys_enter")
int hash_enter(void *ctx)
{
	return hash_touch();
}

SEC("tp_btf/sys_exit")
int hash_exit(void *ctx)
{
	return hash_touch();
}

/* 16 values of one page each: element i lies on its own page. */
struct page_value {
	__u64 words[512];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct page_value);
} pages SEC(".maps");

__u64 pages_sink;

static __always_inline int touch_pages(__u32 n)
{
	__u64 sum = 0;

	for (__u32 i = 0; i < n; i++) {
		__u32 key = i;
		struct page_value *v = bpf_map_lookup_elem(&pages, &key);

		if (v)
			sum += v->words[0];
	}
	pages_sink = sum;
	return 0;
}

SEC("tp_btf/sys_exit")
int pages1_exit(void *ctx)
{
	return touch_pages(1);
}

SEC("tp_btf/sys_exit")
int pages4_exit(void *ctx)
{
	return touch_pages(4);
}

SEC("tp_btf/sys_exit")
int pages16_exit(void *ctx)
{
	return touch_pages(16);
}
