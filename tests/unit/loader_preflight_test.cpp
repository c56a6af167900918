// SPDX-License-Identifier: Apache-2.0
// The loader's checks that read files only (no BPF): the kernel-BTF string scan.
#include <gtest/gtest.h>
#include <linux/btf.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "loader/preflight.hpp"

namespace iolens::loader {
namespace {

/// A BTF file with no types and the given string section (which starts with the empty string).
std::string write_btf(const std::string& strings, uint16_t magic = BTF_MAGIC) {
  char path[] = "/tmp/iolens_btf_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  btf_header hdr{};
  hdr.magic = magic;
  hdr.version = 1;
  hdr.hdr_len = sizeof(hdr);
  hdr.str_off = 0;
  hdr.str_len = static_cast<uint32_t>(strings.size());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&hdr), sizeof(hdr));
  f.write(strings.data(), static_cast<std::streamsize>(strings.size()));
  return path;
}

std::string strings_of(std::initializer_list<std::string> names) {
  std::string s(1, '\0');
  for (const auto& n : names) s += n + '\0';
  return s;
}

TEST(BtfStrings, FindsWholeStringsOnly) {
  const std::string path = write_btf(strings_of(
      {"task_struct", "btf_trace_sched_process_exec", "btf_trace_mm_filemap_fault_x",
       "xbtf_trace_block_rq_issue", "btf_trace_block"}));
  std::set<std::string> found;
  ASSERT_TRUE(btf_strings_present(path,
                                  {"btf_trace_sched_process_exec", "btf_trace_mm_filemap_fault",
                                   "btf_trace_block_rq_issue", "btf_trace_readahead"},
                                  found));
  EXPECT_EQ(found, std::set<std::string>{"btf_trace_sched_process_exec"});
  unlink(path.c_str());
}

TEST(BtfStrings, NameCutByTheReadPiece) {
  // The scan reads 64 KiB at a time: put a wanted name across the first boundary, and another
  // one that is the section's last string.
  std::string s(1, '\0');
  const std::string cut = "btf_trace_cut_in_two";
  while (s.size() + cut.size() / 2 < 64 * 1024) s += "filler_name\0"[s.size() % 12];
  s.resize(64 * 1024 - cut.size() / 2);
  s.back() = '\0';
  s += cut + '\0' + std::string(100000, 'y') + '\0' + "btf_trace_last" + '\0';
  const std::string path = write_btf(s);
  std::set<std::string> found;
  ASSERT_TRUE(btf_strings_present(path, {cut, "btf_trace_last", "btf_trace_absent"}, found));
  EXPECT_EQ(found, (std::set<std::string>{cut, "btf_trace_last"}));
  unlink(path.c_str());
}

TEST(BtfStrings, NotBtf) {
  const std::string path = write_btf(strings_of({"a"}), 0x1234);
  std::set<std::string> found;
  const Status st = btf_strings_present(path, {"a"}, found);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message.find("not a BTF file"), std::string::npos) << st.message;
  unlink(path.c_str());
  EXPECT_FALSE(btf_strings_present("/nonexistent/vmlinux", {"a"}, found));
}

TEST(BtfStrings, RunningKernel) {
  // The kernel's own BTF (world-readable): a tracepoint every supported kernel has, and one
  // that no kernel has.
  const char* vmlinux = "/sys/kernel/btf/vmlinux";
  if (access(vmlinux, R_OK) != 0) GTEST_SKIP() << "no kernel BTF at " << vmlinux;
  std::set<std::string> found;
  ASSERT_TRUE(btf_strings_present(
      vmlinux, {"btf_trace_sched_process_exec", "btf_trace_iolens_no_such_tracepoint"}, found));
  EXPECT_EQ(found, std::set<std::string>{"btf_trace_sched_process_exec"});
}

}  // namespace
}  // namespace iolens::loader

TEST(KernelRelease, MajorAndMinorOfWhatUnameGives) {
  using iolens::loader::parse_kernel_release;
  auto v = parse_kernel_release("6.18.44-fc-v857");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->major, 6u);
  EXPECT_EQ(v->minor, 18u);
  EXPECT_TRUE(v->at_least(6, 1));
  EXPECT_TRUE(v->at_least(6, 18));
  EXPECT_FALSE(v->at_least(6, 19));
  EXPECT_FALSE(v->at_least(7, 0));
  v = parse_kernel_release("5.15.0-91-generic");
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->at_least(6, 1));
  EXPECT_TRUE(v->at_least(5, 15));
  v = parse_kernel_release("6.0");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->minor, 0u);
  for (const char* bad : {"", "6", "6.", ".1", "x6.1", "6.x", "-1.2"})
    EXPECT_FALSE(parse_kernel_release(bad).has_value()) << bad;
  EXPECT_TRUE(iolens::loader::running_kernel().has_value());
}
