// SPDX-License-Identifier: Apache-2.0
// The ABI as clang laid it out for BPF (from the BTF of bpf/abi_btf.bpf.c, never loaded) must
// equal the C++ layout field by field: a mismatch would make the agent misread every record.
#include <bpf/btf.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>

#include "iolens_abi.h"

namespace {

struct BtfLayout {
  size_t size = 0;
  std::map<std::string, size_t> offsets;  // member name -> byte offset
};

BtfLayout layout_of(const btf* b, const char* struct_name) {
  BtfLayout out;
  const int id = btf__find_by_name_kind(b, struct_name, BTF_KIND_STRUCT);
  if (id < 0) return out;
  const btf_type* t = btf__type_by_id(b, static_cast<__u32>(id));
  out.size = t->size;
  const btf_member* m = btf_members(t);
  for (int i = 0; i < btf_vlen(t); ++i, ++m) {
    out.offsets[btf__name_by_offset(b, m->name_off)] = btf_member_bit_offset(t, static_cast<__u32>(i)) / 8;
  }
  return out;
}

class AbiBtf : public ::testing::Test {
 protected:
  void SetUp() override {
    b_ = btf__parse_elf(IOLENS_ABI_BTF_OBJECT, nullptr);
    ASSERT_NE(b_, nullptr) << "cannot read BTF from " << IOLENS_ABI_BTF_OBJECT;
  }
  void TearDown() override { btf__free(b_); }
  btf* b_ = nullptr;
};

#define EXPECT_FIELD(L, T, F) \
  EXPECT_EQ((L).offsets.at(#F), offsetof(T, F)) << #T "." #F

}  // namespace

TEST_F(AbiBtf, FileKey) {
  auto l = layout_of(b_, "iolens_file_key");
  ASSERT_EQ(l.size, sizeof(iolens_file_key));
  EXPECT_FIELD(l, iolens_file_key, ino);
  EXPECT_FIELD(l, iolens_file_key, dev);
  EXPECT_FIELD(l, iolens_file_key, tgid);
  EXPECT_FIELD(l, iolens_file_key, pstart_ns);
  EXPECT_FIELD(l, iolens_file_key, gen);
}

TEST_F(AbiBtf, FileCountersEveryField) {
  auto l = layout_of(b_, "iolens_file_counters");
  ASSERT_EQ(l.size, sizeof(iolens_file_counters));
  // 169 eight-byte slots: the two 10-entry size arrays, the two 12-entry latency arrays and the
  // 16-entry offset_lsb are one member each (-18, -22, -15), the two 17-slot tallies too
  // (-32), and two pairs of __u32 share a slot each (+2).
  ASSERT_EQ(l.offsets.size(), 169u - 2 * 9 - 2 * 11 - 15 - 2 * 16 + 2);
  EXPECT_FIELD(l, iolens_file_counters, opens);
  EXPECT_FIELD(l, iolens_file_counters, bytes_read);
  EXPECT_FIELD(l, iolens_file_counters, max_byte_written);
  EXPECT_FIELD(l, iolens_file_counters, size_read);
  EXPECT_FIELD(l, iolens_file_counters, size_write);
  EXPECT_FIELD(l, iolens_file_counters, read_time_ns);
  EXPECT_FIELD(l, iolens_file_counters, max_write_time_size);
  EXPECT_FIELD(l, iolens_file_counters, lat_read);
  EXPECT_FIELD(l, iolens_file_counters, lat_write);
  EXPECT_FIELD(l, iolens_file_counters, lat_read_sum_ns);
  EXPECT_FIELD(l, iolens_file_counters, lat_write_sum_ns);
  EXPECT_FIELD(l, iolens_file_counters, open_start_ns);
  EXPECT_FIELD(l, iolens_file_counters, meta_end_ns);
  EXPECT_FIELD(l, iolens_file_counters, last_byte_read);
  EXPECT_FIELD(l, iolens_file_counters, last_io_type);
  EXPECT_FIELD(l, iolens_file_counters, first_io_type);
  EXPECT_FIELD(l, iolens_file_counters, open_fds);
  EXPECT_FIELD(l, iolens_file_counters, cache_read_pages);
  EXPECT_FIELD(l, iolens_file_counters, fault_miss_pages);
  EXPECT_FIELD(l, iolens_file_counters, direct_max_time_ns);
  EXPECT_FIELD(l, iolens_file_counters, uring_other);
  EXPECT_FIELD(l, iolens_file_counters, wb_waits);
  EXPECT_FIELD(l, iolens_file_counters, named);
  EXPECT_FIELD(l, iolens_file_counters, map_flags);
  EXPECT_FIELD(l, iolens_file_counters, mem_not_aligned);
  EXPECT_FIELD(l, iolens_file_counters, mode);
  EXPECT_FIELD(l, iolens_file_counters, offset_lsb);
  EXPECT_FIELD(l, iolens_file_counters, access);
  EXPECT_FIELD(l, iolens_file_counters, stride);
  auto t = layout_of(b_, "iolens_tally");
  ASSERT_EQ(t.size, sizeof(iolens_tally));
  ASSERT_EQ(t.offsets.size(), 3u);
  EXPECT_FIELD(t, iolens_tally, value);
  EXPECT_FIELD(t, iolens_tally, count);
  EXPECT_FIELD(t, iolens_tally, untallied);
  auto side = layout_of(b_, "iolens_more_tallies");
  ASSERT_EQ(side.size, sizeof(iolens_more_tallies));
  EXPECT_FIELD(side, iolens_more_tallies, access);
  EXPECT_FIELD(side, iolens_more_tallies, stride);
  auto more = layout_of(b_, "iolens_tally_more");
  ASSERT_EQ(more.size, sizeof(iolens_tally_more));
  ASSERT_EQ(more.offsets.size(), 3u);
  EXPECT_FIELD(more, iolens_tally_more, value);
  EXPECT_FIELD(more, iolens_tally_more, count);
  EXPECT_FIELD(more, iolens_tally_more, untallied);
}

TEST_F(AbiBtf, TaskStateAndEvents) {
  auto ts = layout_of(b_, "iolens_task_state");
  ASSERT_EQ(ts.size, sizeof(iolens_task_state));
  EXPECT_FIELD(ts, iolens_task_state, enter_ns);
  EXPECT_FIELD(ts, iolens_task_state, close_kind);
  EXPECT_FIELD(ts, iolens_task_state, close_gen);
  EXPECT_FIELD(ts, iolens_task_state, origin);
  EXPECT_FIELD(ts, iolens_task_state, io_ctx);
  EXPECT_FIELD(ts, iolens_task_state, gp_enter);
  EXPECT_FIELD(ts, iolens_task_state, gp_dev);
  EXPECT_FIELD(ts, iolens_task_state, dirty_dev);
  EXPECT_FIELD(ts, iolens_task_state, dirty_gen);

  auto h = layout_of(b_, "iolens_event_header");
  ASSERT_EQ(h.size, sizeof(iolens_event_header));
  EXPECT_FIELD(h, iolens_event_header, ts_ns);
  EXPECT_FIELD(h, iolens_event_header, cgroup_id);

  auto f = layout_of(b_, "iolens_fork_event");
  ASSERT_EQ(f.size, sizeof(iolens_fork_event));
  EXPECT_FIELD(f, iolens_fork_event, ppid);
  EXPECT_FIELD(f, iolens_fork_event, parent_pstart_ns);
  EXPECT_FIELD(f, iolens_fork_event, comm);

  auto x = layout_of(b_, "iolens_exit_event");
  ASSERT_EQ(x.size, sizeof(iolens_exit_event));
  EXPECT_FIELD(x, iolens_exit_event, exit_code);

  auto p = layout_of(b_, "iolens_path_event");
  ASSERT_EQ(p.size, sizeof(iolens_path_event));
  EXPECT_FIELD(p, iolens_path_event, ino);
  EXPECT_FIELD(p, iolens_path_event, dev);
  EXPECT_FIELD(p, iolens_path_event, gen);
  EXPECT_FIELD(p, iolens_path_event, op);
  EXPECT_FIELD(p, iolens_path_event, flags);
  EXPECT_FIELD(p, iolens_path_event, walk_len);
  EXPECT_FIELD(p, iolens_path_event, str2_len);
  EXPECT_FIELD(p, iolens_path_event, comm);
  EXPECT_FIELD(p, iolens_path_event, data);

  auto c = layout_of(b_, "iolens_cgroup_event");
  ASSERT_EQ(c.size, sizeof(iolens_cgroup_event));
  EXPECT_FIELD(c, iolens_cgroup_event, op);
  EXPECT_FIELD(c, iolens_cgroup_event, level);
  EXPECT_FIELD(c, iolens_cgroup_event, path_len);
  EXPECT_FIELD(c, iolens_cgroup_event, flags);
  EXPECT_FIELD(c, iolens_cgroup_event, path);

  auto m = layout_of(b_, "iolens_mark_event");
  ASSERT_EQ(m.size, sizeof(iolens_mark_event));
  EXPECT_FIELD(m, iolens_mark_event, reason);
  EXPECT_FIELD(m, iolens_mark_event, threads);
  EXPECT_FIELD(m, iolens_mark_event, ppid);
  EXPECT_FIELD(m, iolens_mark_event, parent_pstart_ns);
  EXPECT_FIELD(m, iolens_mark_event, comm);

  auto pm = layout_of(b_, "iolens_pin_meta");
  ASSERT_EQ(pm.size, sizeof(iolens_pin_meta));
  EXPECT_FIELD(pm, iolens_pin_meta, ring_bytes);
  EXPECT_FIELD(pm, iolens_pin_meta, created_wall_ns);
  EXPECT_FIELD(pm, iolens_pin_meta, mono_to_wall_ns);
  EXPECT_FIELD(pm, iolens_pin_meta, trace_ring_bytes);
  EXPECT_FIELD(pm, iolens_pin_meta, cgroup_excl_max);
  EXPECT_FIELD(pm, iolens_pin_meta, timing);
}

TEST_F(AbiBtf, TraceRecordEveryField) {
  auto l = layout_of(b_, "iolens_trace_record");
  ASSERT_EQ(l.size, sizeof(iolens_trace_record));
  ASSERT_EQ(l.offsets.size(), 16u);
  EXPECT_FIELD(l, iolens_trace_record, start_ns);
  EXPECT_FIELD(l, iolens_trace_record, end_ns);
  EXPECT_FIELD(l, iolens_trace_record, pstart_ns);
  EXPECT_FIELD(l, iolens_trace_record, ino);
  EXPECT_FIELD(l, iolens_trace_record, dev);
  EXPECT_FIELD(l, iolens_trace_record, gen);
  EXPECT_FIELD(l, iolens_trace_record, offset);
  EXPECT_FIELD(l, iolens_trace_record, ret);
  EXPECT_FIELD(l, iolens_trace_record, arg);
  EXPECT_FIELD(l, iolens_trace_record, tgid);
  EXPECT_FIELD(l, iolens_trace_record, tid);
  EXPECT_FIELD(l, iolens_trace_record, op);
  EXPECT_FIELD(l, iolens_trace_record, nr);
  EXPECT_FIELD(l, iolens_trace_record, flags);
  EXPECT_FIELD(l, iolens_trace_record, fd);
  EXPECT_FIELD(l, iolens_trace_record, pad);
}

TEST_F(AbiBtf, ProcessLosses) {
  auto k = layout_of(b_, "iolens_proc_key");
  ASSERT_EQ(k.size, sizeof(iolens_proc_key));
  EXPECT_FIELD(k, iolens_proc_key, tgid);
  EXPECT_FIELD(k, iolens_proc_key, pad);
  EXPECT_FIELD(k, iolens_proc_key, pstart_ns);
  auto v = layout_of(b_, "iolens_proc_lost");
  ASSERT_EQ(v.size, sizeof(iolens_proc_lost));
  EXPECT_FIELD(v, iolens_proc_lost, n);
}

TEST_F(AbiBtf, NameId) {
  auto k = layout_of(b_, "iolens_name_id");
  ASSERT_EQ(k.size, sizeof(iolens_name_id));
  EXPECT_FIELD(k, iolens_name_id, ino);
  EXPECT_FIELD(k, iolens_name_id, dev);
  EXPECT_FIELD(k, iolens_name_id, gen);
}

TEST_F(AbiBtf, BlockKeyAndCounters) {
  auto k = layout_of(b_, "iolens_block_key");
  ASSERT_EQ(k.size, sizeof(iolens_block_key));
  EXPECT_FIELD(k, iolens_block_key, tgid);
  EXPECT_FIELD(k, iolens_block_key, dev);
  EXPECT_FIELD(k, iolens_block_key, pstart_ns);

  auto c = layout_of(b_, "iolens_block_counters");
  ASSERT_EQ(c.size, sizeof(iolens_block_counters));
  EXPECT_FIELD(c, iolens_block_counters, read_bytes);
  EXPECT_FIELD(c, iolens_block_counters, writeback_bytes);
  EXPECT_FIELD(c, iolens_block_counters, discard_bytes);
  EXPECT_FIELD(c, iolens_block_counters, unqueued_reqs);
  EXPECT_FIELD(c, iolens_block_counters, size_read);
  EXPECT_FIELD(c, iolens_block_counters, size_write);
  EXPECT_FIELD(c, iolens_block_counters, queue_read);
  EXPECT_FIELD(c, iolens_block_counters, queue_write_sum_ns);
  EXPECT_FIELD(c, iolens_block_counters, dev_read);
  EXPECT_FIELD(c, iolens_block_counters, dev_write);
  EXPECT_FIELD(c, iolens_block_counters, dev_write_sum_ns);
  EXPECT_FIELD(c, iolens_block_counters, dev_errors);

  auto f = layout_of(b_, "iolens_rq_inflight");
  ASSERT_EQ(f.size, sizeof(iolens_rq_inflight));
  EXPECT_FIELD(f, iolens_rq_inflight, key);
  EXPECT_FIELD(f, iolens_rq_inflight, rq_start_ns);
  EXPECT_FIELD(f, iolens_rq_inflight, insert_ns);
  EXPECT_FIELD(f, iolens_rq_inflight, issue_ns);
  EXPECT_FIELD(f, iolens_rq_inflight, write);
  EXPECT_FIELD(f, iolens_rq_inflight, counted);
}
