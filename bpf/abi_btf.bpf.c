// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Never loaded. One global of each struct shared with user space, so that the struct's layout
 * as clang lays it out for BPF is in this object's BTF; tests/unit/abi_btf_test.cpp compares it
 * field by field with the C++ compiler's layout (a struct used only as a local is absent from BTF).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "iolens_abi.h"

struct iolens_file_key abi_file_key;
struct iolens_file_counters abi_file_counters;
struct iolens_more_tallies abi_more_tallies;
struct iolens_task_state abi_task_state;
struct iolens_event_header abi_event_header;
struct iolens_fork_event abi_fork_event;
struct iolens_exit_event abi_exit_event;
struct iolens_path_event abi_path_event;
struct iolens_cgroup_event abi_cgroup_event;
struct iolens_mark_event abi_mark_event;
struct iolens_pin_meta abi_pin_meta;
struct iolens_name_id abi_name_id;
struct iolens_trace_record abi_trace_record;
struct iolens_block_key abi_block_key;
struct iolens_block_counters abi_block_counters;
struct iolens_rq_inflight abi_rq_inflight;
struct iolens_proc_key abi_proc_key;
struct iolens_proc_lost abi_proc_lost;

char LICENSE[] SEC("license") = "Dual BSD/GPL";
