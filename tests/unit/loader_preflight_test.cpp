// SPDX-License-Identifier: Apache-2.0
// The loader's checks that read files only (no BPF): the kernel-BTF string scan, and the walk of
// its types that finds ids (the casts build, bpf/README.md "Two builds").
#include <gtest/gtest.h>
#include <linux/btf.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "loader/preflight.hpp"

namespace iolens::loader {
namespace {

/// A BTF file with a type section (none by default) and the given string section (which starts
/// with the empty string), the types first as in the kernel's.
std::string write_btf(const std::string& strings, uint16_t magic = BTF_MAGIC,
                      const std::string& types = "") {
  char path[] = "/tmp/iolens_btf_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  btf_header hdr{};
  hdr.magic = magic;
  hdr.version = 1;
  hdr.hdr_len = sizeof(hdr);
  hdr.type_off = 0;
  hdr.type_len = static_cast<uint32_t>(types.size());
  hdr.str_off = hdr.type_len;
  hdr.str_len = static_cast<uint32_t>(strings.size());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&hdr), sizeof(hdr));
  f.write(types.data(), static_cast<std::streamsize>(types.size()));
  f.write(strings.data(), static_cast<std::streamsize>(strings.size()));
  return path;
}

/// Builds a BTF type section: each add() is the next id (from 1), `tail` bytes after its header.
struct Types {
  std::string bytes;
  uint32_t next_id = 1;
  uint32_t add(uint32_t name_off, uint32_t kind, uint32_t vlen, std::size_t tail) {
    btf_type t{};
    t.name_off = name_off;
    t.info = (kind << 24) | vlen;
    t.size = 4;
    bytes.append(reinterpret_cast<const char*>(&t), sizeof(t));
    // Filler that looks like a header (a name offset of the wanted name), so that a walk that
    // got a kind's length wrong would match in the middle of a record.
    for (std::size_t i = 0; i < tail; ++i) bytes += static_cast<char>(i % 4 == 0 ? 1 : 0);
    return next_id++;
  }
};

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

TEST(BtfTypeIds, EveryKindWalkedToTheRightId) {
  // Strings: "" at 0, then the names at known offsets.
  const std::string strings = strings_of({"target", "other", "func_x"});
  const uint32_t target = 1, other = 8, func_x = 14;
  Types t;
  // One of each kind with its tail (include/uapi/linux/btf.h), names that must not match.
  t.add(other, BTF_KIND_INT, 0, 4);
  t.add(0, BTF_KIND_PTR, 0, 0);
  t.add(0, BTF_KIND_ARRAY, 0, 12);
  t.add(other, BTF_KIND_STRUCT, 3, 3 * 12);
  t.add(other, BTF_KIND_UNION, 2, 2 * 12);
  t.add(other, BTF_KIND_ENUM, 5, 5 * 8);
  t.add(target, BTF_KIND_FWD, 0, 0);  // the name, but not the kind looked for
  t.add(other, BTF_KIND_TYPEDEF, 0, 0);
  t.add(0, BTF_KIND_VOLATILE, 0, 0);
  t.add(0, BTF_KIND_CONST, 0, 0);
  t.add(0, BTF_KIND_RESTRICT, 0, 0);
  t.add(0, BTF_KIND_FUNC_PROTO, 4, 4 * 8);
  t.add(other, BTF_KIND_VAR, 0, 4);
  t.add(other, BTF_KIND_DATASEC, 2, 2 * 12);
  t.add(other, BTF_KIND_FLOAT, 0, 0);
  t.add(other, BTF_KIND_DECL_TAG, 0, 4);
  t.add(0, BTF_KIND_TYPE_TAG, 0, 0);
  t.add(other, BTF_KIND_ENUM64, 3, 3 * 12);
  const uint32_t want_struct = t.add(target, BTF_KIND_STRUCT, 1, 12);
  t.add(target, BTF_KIND_STRUCT, 0, 0);  // a second one: the first is given
  const uint32_t want_func = t.add(func_x, BTF_KIND_FUNC, 0, 0);
  const std::string path = write_btf(strings, BTF_MAGIC, t.bytes);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(btf_type_ids(path,
                           {{"target", BTF_KIND_STRUCT},
                            {"func_x", BTF_KIND_FUNC},
                            {"target", BTF_KIND_UNION},
                            {"absent", BTF_KIND_STRUCT}},
                           ids));
  EXPECT_EQ(ids, (std::vector<uint32_t>{want_struct, want_func, 0, 0}));
  unlink(path.c_str());
}

TEST(BtfTypeIds, TypesAcrossReadPieces) {
  // 20,000 structs of 3 members (~960 KB): records cut by the 64 KiB reads; the one looked for
  // is the last.
  const std::string strings = strings_of({"filler", "wanted"});
  Types t;
  for (int i = 0; i < 20000; ++i) t.add(1, BTF_KIND_STRUCT, 3, 3 * 12);
  const uint32_t last = t.add(8, BTF_KIND_STRUCT, 2, 2 * 12);
  const std::string path = write_btf(strings, BTF_MAGIC, t.bytes);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(btf_type_ids(path, {{"wanted", BTF_KIND_STRUCT}}, ids));
  EXPECT_EQ(ids, std::vector<uint32_t>{last});
  unlink(path.c_str());
}

TEST(BtfTypeIds, NameCutByTheReadPiece) {
  // The string section read 64 KiB at a time: the wanted name across the first boundary, so
  // that its offset is counted from where its first part began; a long string cut too.
  const std::string cut = "wanted_cut_in_two";
  std::string s(1, '\0');
  s += std::string(70000, 'z') + '\0';  // longer than any name, and across the boundary
  while (s.size() < 2 * 64 * 1024 - cut.size() / 2) s += "fill\0";
  s.resize(2 * 64 * 1024 - cut.size() / 2);
  s.back() = '\0';
  const auto cut_off = static_cast<uint32_t>(s.size());
  s += cut + '\0';
  Types t;
  t.add(cut_off + 1, BTF_KIND_STRUCT, 0, 0);  // the name's tail: not the name
  const uint32_t id = t.add(cut_off, BTF_KIND_STRUCT, 0, 0);
  const std::string path = write_btf(s, BTF_MAGIC, t.bytes);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(btf_type_ids(path, {{cut, BTF_KIND_STRUCT}}, ids));
  EXPECT_EQ(ids, std::vector<uint32_t>{id});
  unlink(path.c_str());
}

TEST(BtfTypeIds, UnknownKindAndTruncationAreErrors) {
  const std::string strings = strings_of({"wanted"});
  {
    Types t;
    t.add(0, 31, 0, 0);  // a kind no BTF has yet: what follows cannot be counted
    t.add(1, BTF_KIND_STRUCT, 0, 0);
    const std::string path = write_btf(strings, BTF_MAGIC, t.bytes);
    std::vector<uint32_t> ids;
    const Status st = btf_type_ids(path, {{"wanted", BTF_KIND_STRUCT}}, ids);
    EXPECT_FALSE(st);
    EXPECT_NE(st.message.find("kind unknown"), std::string::npos) << st.message;
    unlink(path.c_str());
  }
  {
    Types t;
    t.add(0, BTF_KIND_STRUCT, 5, 5 * 12);
    t.add(1, BTF_KIND_STRUCT, 0, 0);
    t.bytes.resize(t.bytes.size() - 20);  // the section ends inside the first struct's members
    const std::string path = write_btf(strings, BTF_MAGIC, t.bytes);
    std::vector<uint32_t> ids;
    const Status st = btf_type_ids(path, {{"wanted", BTF_KIND_STRUCT}}, ids);
    EXPECT_FALSE(st);
    EXPECT_NE(st.message.find("runs past"), std::string::npos) << st.message;
    unlink(path.c_str());
  }
  std::vector<uint32_t> ids;
  EXPECT_FALSE(btf_type_ids("/nonexistent/vmlinux", {{"a", BTF_KIND_STRUCT}}, ids));
}

TEST(BtfTypeIds, RunningKernelAgreesWithBpftool) {
  // The ids the casts build is given, against bpftool's dump of the same BTF (an independent
  // reader): "[114] STRUCT 'task_struct' size=..." lines.
  const char* vmlinux = "/sys/kernel/btf/vmlinux";
  const char* bpftool = "/usr/sbin/bpftool";
  if (access(vmlinux, R_OK) != 0) GTEST_SKIP() << "no kernel BTF at " << vmlinux;
  if (access(bpftool, X_OK) != 0) GTEST_SKIP() << "no " << bpftool;
  const std::vector<BtfTypeName> wanted = {{"task_struct", BTF_KIND_STRUCT},
                                           {"folio", BTF_KIND_STRUCT},
                                           {"kiocb", BTF_KIND_STRUCT},
                                           {"bpf_rdonly_cast", BTF_KIND_FUNC}};
  std::vector<uint32_t> ids;
  ASSERT_TRUE(btf_type_ids(vmlinux, wanted, ids));
  FILE* p = popen("/usr/sbin/bpftool btf dump file /sys/kernel/btf/vmlinux", "r");
  ASSERT_NE(p, nullptr);
  std::vector<uint32_t> theirs(wanted.size(), 0);
  char line[4096];
  while (fgets(line, sizeof(line), p)) {
    unsigned id = 0;
    char kind[32] = {}, name[256] = {};
    if (std::sscanf(line, "[%u] %31s '%255[^']'", &id, kind, name) != 3) continue;
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      const char* k = wanted[i].kind == BTF_KIND_STRUCT ? "STRUCT" : "FUNC";
      if (theirs[i] == 0 && wanted[i].name == name && std::strcmp(kind, k) == 0) theirs[i] = id;
    }
  }
  ASSERT_EQ(pclose(p), 0);
  EXPECT_EQ(ids, theirs);
  EXPECT_NE(ids[0], 0u);
}

/// A kernel BTF with the four cast types and, by name, the kfuncs of `funcs`.
std::string casts_btf(std::initializer_list<std::string> funcs, uint32_t& task_struct_id) {
  std::string strings(1, '\0');
  auto add = [&](const std::string& name) {
    const auto off = static_cast<uint32_t>(strings.size());
    strings += name + '\0';
    return off;
  };
  Types t;
  t.add(add("int"), BTF_KIND_INT, 0, 4);
  task_struct_id = t.add(add("task_struct"), BTF_KIND_STRUCT, 0, 0);
  t.add(add("address_space"), BTF_KIND_STRUCT, 0, 0);
  t.add(add("kiocb"), BTF_KIND_STRUCT, 0, 0);
  t.add(add("folio"), BTF_KIND_STRUCT, 0, 0);
  for (const auto& f : funcs) t.add(add(f), BTF_KIND_FUNC, 0, 0);
  return write_btf(strings, BTF_MAGIC, t.bytes);
}

TEST(ProgramBuildChoice, CastsWhereTheKernelHasTheKfuncs) {
  unsetenv("IOLENS_BPF_BUILD");
  uint32_t task_struct = 0;
  const std::string all =
      casts_btf({"bpf_rdonly_cast", "bpf_task_from_pid", "bpf_task_release"}, task_struct);
  BuildChoice c;
  ASSERT_TRUE(choose_build(all, ProgramBuild::Auto, c));
  EXPECT_TRUE(c.casts);
  EXPECT_EQ(c.task_struct, task_struct);
  EXPECT_EQ(c.address_space, task_struct + 1);
  EXPECT_EQ(c.kiocb, task_struct + 2);
  EXPECT_EQ(c.folio, task_struct + 3);
  ASSERT_TRUE(choose_build(all, ProgramBuild::Plain, c));
  EXPECT_FALSE(c.casts);
  EXPECT_EQ(c.note, "asked for");

  // Without bpf_task_from_pid: plain under auto, with the reason; an error when casts is asked.
  const std::string some = casts_btf({"bpf_rdonly_cast", "bpf_task_release"}, task_struct);
  ASSERT_TRUE(choose_build(some, ProgramBuild::Auto, c));
  EXPECT_FALSE(c.casts);
  EXPECT_NE(c.note.find("has no bpf_task_from_pid"), std::string::npos) << c.note;
  const Status refused = choose_build(some, ProgramBuild::Casts, c);
  EXPECT_FALSE(refused);
  EXPECT_NE(refused.message.find("the casts build of the programs cannot load here: the "
                                 "kernel's BTF has no bpf_task_from_pid"),
            std::string::npos)
      << refused.message;
  // An unreadable kernel BTF: plain, saying why.
  ASSERT_TRUE(choose_build("/nonexistent/vmlinux", ProgramBuild::Auto, c));
  EXPECT_FALSE(c.casts);
  EXPECT_NE(c.note.find("cannot open /nonexistent/vmlinux"), std::string::npos) << c.note;
  unlink(all.c_str());
  unlink(some.c_str());
}

TEST(ProgramBuildChoice, EnvironmentChoosesOrIsRefused) {
  ProgramBuild b = ProgramBuild::Casts;
  unsetenv("IOLENS_BPF_BUILD");
  ASSERT_TRUE(asked_build(ProgramBuild::Auto, b));
  EXPECT_EQ(b, ProgramBuild::Auto);
  setenv("IOLENS_BPF_BUILD", "plain", 1);
  ASSERT_TRUE(asked_build(ProgramBuild::Auto, b));
  EXPECT_EQ(b, ProgramBuild::Plain);
  setenv("IOLENS_BPF_BUILD", "casts", 1);
  ASSERT_TRUE(asked_build(ProgramBuild::Plain, b));
  EXPECT_EQ(b, ProgramBuild::Casts);
  setenv("IOLENS_BPF_BUILD", "fast", 1);
  const Status bad = asked_build(ProgramBuild::Auto, b);
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.message, "IOLENS_BPF_BUILD must be auto, casts or plain, not \"fast\"");
  unsetenv("IOLENS_BPF_BUILD");
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
