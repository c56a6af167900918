// SPDX-License-Identifier: Apache-2.0
// Compile-time checks that the C++ compiler lays out the shared ABI as the BPF side expects.
// The BPF side asserts the same sizes (bpf/iolens_abi.h); tests/unit/abi_btf_test.cpp compares
// every field offset with the BTF clang emitted for the BPF target.
#include <cstddef>

#include "iolens_abi.h"

static_assert(offsetof(iolens_file_key, ino) == 0);
static_assert(offsetof(iolens_file_key, dev) == 8);
static_assert(offsetof(iolens_file_key, tgid) == 12);
static_assert(offsetof(iolens_file_key, pstart_ns) == 16);
static_assert(offsetof(iolens_file_key, gen) == 24);
static_assert(offsetof(iolens_file_counters, opens) == 0);
static_assert(offsetof(iolens_file_counters, size_read) == 20 * 8);
static_assert(offsetof(iolens_file_counters, size_write) == 30 * 8);
static_assert(offsetof(iolens_file_counters, lat_read) == 47 * 8);
static_assert(offsetof(iolens_file_counters, lat_write) == 59 * 8);
static_assert(offsetof(iolens_file_counters, lat_read_sum_ns) == 71 * 8);
static_assert(offsetof(iolens_file_counters, lat_write_sum_ns) == 72 * 8);
static_assert(offsetof(iolens_file_counters, open_start_ns) == 73 * 8);
static_assert(offsetof(iolens_file_counters, cache_read_pages) == 83 * 8);
static_assert(offsetof(iolens_file_counters, direct_reads) == 91 * 8);
static_assert(offsetof(iolens_file_counters, uring_reads) == 98 * 8);
static_assert(offsetof(iolens_file_counters, wb_waits) == 108 * 8);
static_assert(offsetof(iolens_file_counters, last_byte_read) == 109 * 8);
static_assert(offsetof(iolens_file_counters, open_fds) == 115 * 8);
static_assert(offsetof(iolens_file_counters, named) == 116 * 8);
static_assert(offsetof(iolens_file_counters, map_flags) == 116 * 8 + 4);
static_assert(sizeof(iolens_file_counters) == 117 * 8);
static_assert(offsetof(iolens_task_state, close_dev) == 24);
static_assert(offsetof(iolens_task_state, close_gen) == 32);
static_assert(offsetof(iolens_task_state, cache_file) == 40);
static_assert(offsetof(iolens_task_state, cache_gen) == 68);
static_assert(offsetof(iolens_task_state, origin) == 72);
static_assert(offsetof(iolens_task_state, io_ctx) == 76);
static_assert(offsetof(iolens_task_state, gp_ino) == 80);
static_assert(offsetof(iolens_task_state, gp_dev) == 112);
static_assert(offsetof(iolens_task_state, dirty_ino) == 120);
static_assert(offsetof(iolens_task_state, dirty_gen) == 128);
static_assert(sizeof(iolens_task_state) == 136);
static_assert(offsetof(iolens_event_header, ts_ns) == 16);
static_assert(offsetof(iolens_event_header, cgroup_id) == 24);
static_assert(offsetof(iolens_fork_event, comm) == 48);
static_assert(offsetof(iolens_exit_event, exit_code) == 32);
static_assert(offsetof(iolens_path_event, gen) == 44);
static_assert(offsetof(iolens_path_event, data) == 80);
static_assert(offsetof(iolens_path_event, comm) == 64);
static_assert(offsetof(iolens_cgroup_event, path_len) == 40);
static_assert(offsetof(iolens_cgroup_event, path) == 48);
static_assert(offsetof(iolens_mark_event, parent_pstart_ns) == 48);
static_assert(offsetof(iolens_mark_event, comm) == 56);
static_assert(offsetof(iolens_pin_meta, mono_to_wall_ns) == 24);
static_assert(offsetof(iolens_pin_meta, trace_ring_bytes) == 32);
static_assert(offsetof(iolens_pin_meta, cgroup_excl_max) == 36);
static_assert(offsetof(iolens_pin_meta, timing) == 40);
static_assert(offsetof(iolens_trace_record, start_ns) == 0);
static_assert(offsetof(iolens_trace_record, pstart_ns) == 16);
static_assert(offsetof(iolens_trace_record, ino) == 24);
static_assert(offsetof(iolens_trace_record, dev) == 32);
static_assert(offsetof(iolens_trace_record, gen) == 36);
static_assert(offsetof(iolens_trace_record, offset) == 40);
static_assert(offsetof(iolens_trace_record, ret) == 48);
static_assert(offsetof(iolens_trace_record, arg) == 56);
static_assert(offsetof(iolens_trace_record, tgid) == 64);
static_assert(offsetof(iolens_trace_record, tid) == 68);
static_assert(offsetof(iolens_trace_record, op) == 72);
static_assert(offsetof(iolens_trace_record, nr) == 74);
static_assert(offsetof(iolens_trace_record, flags) == 76);
static_assert(offsetof(iolens_trace_record, fd) == 80);
static_assert(offsetof(iolens_trace_record, pad) == 84);
static_assert(sizeof(iolens_trace_record) == 88);
static_assert(offsetof(iolens_block_key, dev) == 4);
static_assert(offsetof(iolens_block_key, pstart_ns) == 8);
static_assert(sizeof(iolens_block_key) == 16);
static_assert(offsetof(iolens_block_counters, writeback_bytes) == 4 * 8);
static_assert(offsetof(iolens_block_counters, read_reqs) == 9 * 8);
static_assert(offsetof(iolens_block_counters, size_read) == 12 * 8);
static_assert(offsetof(iolens_block_counters, queue_read) == 28 * 8);
static_assert(offsetof(iolens_block_counters, queue_read_sum_ns) == 52 * 8);
static_assert(offsetof(iolens_block_counters, dev_read) == 54 * 8);
static_assert(offsetof(iolens_block_counters, dev_write_sum_ns) == 79 * 8);
static_assert(offsetof(iolens_block_counters, dev_errors) == 80 * 8);
static_assert(sizeof(iolens_block_counters) == 81 * 8);
static_assert(offsetof(iolens_rq_inflight, rq_start_ns) == 16);
static_assert(offsetof(iolens_rq_inflight, issue_ns) == 32);
static_assert(offsetof(iolens_rq_inflight, counted) == 44);
static_assert(sizeof(iolens_rq_inflight) == 48);
