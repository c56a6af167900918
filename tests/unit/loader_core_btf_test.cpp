// SPDX-License-Identifier: Apache-2.0
// The small BTF cache for CO-RE (loader/core_btf.hpp), with a stand-in for bpftool: a shell
// script that writes a known BTF file (or fails, or writes garbage) where bpftool would. No BPF
// and no root: the cache directory is the test's own.
#include <gtest/gtest.h>
#include <linux/btf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loader/core_btf.hpp"

namespace iolens::loader {
namespace {

namespace fs = std::filesystem;

/// A valid raw BTF file: one type, `int`.
std::string tiny_btf() {
  btf_header hdr{};
  hdr.magic = BTF_MAGIC;
  hdr.version = 1;
  hdr.hdr_len = sizeof(hdr);
  hdr.type_off = 0;
  hdr.type_len = sizeof(btf_type) + 4;
  hdr.str_off = hdr.type_len;
  hdr.str_len = 5;
  btf_type t{};
  t.name_off = 1;
  t.info = BTF_KIND_INT << 24;
  t.size = 4;
  const uint32_t enc = 32;  // BTF_INT_ENC(0, 0, 32): 32 bits, no flags
  std::string out(reinterpret_cast<const char*>(&hdr), sizeof(hdr));
  out.append(reinterpret_cast<const char*>(&t), sizeof(t));
  out.append(reinterpret_cast<const char*>(&enc), sizeof(enc));
  out.append("\0int\0", 5);
  return out;
}

void write_file(const fs::path& p, const std::string& text, mode_t mode = 0644) {
  std::ofstream(p, std::ios::binary) << text;
  fs::permissions(p, static_cast<fs::perms>(mode));
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  return out;
}

class CoreBtfCache : public ::testing::Test {
 protected:
  void SetUp() override {
    // Under the working directory (the build tree), not /tmp: the stand-in bpftool is a
    // script, which a noexec /tmp would not run.
    std::string tmpl = (fs::current_path() / "iolens_core_btf_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    cache_ = root_ / "cache";
    kernel_ = root_ / "vmlinux";
    write_file(kernel_, std::string(200000, 'k'));
    write_file(root_ / "good.btf", tiny_btf());
    calls_ = root_ / "calls";
  }
  void TearDown() override { fs::remove_all(root_); }

  /// A stand-in for bpftool that checks its arguments as bpftool's would be, counts its runs
  /// and then runs `action` ($4 is the output file).
  std::string tool(const std::string& action) {
    const fs::path p = root_ / "bpftool";
    write_file(p,
               "#!/bin/sh\n"
               "[ \"$1 $2 $3\" = \"gen min_core_btf " + kernel_.string() + "\" ] || exit 7\n"
               "[ -s \"$5\" ] || exit 8\n"
               "echo run >> " + calls_.string() + "\n" + action + "\n",
               0755);
    return p;
  }
  int calls() const {
    std::ifstream f(calls_);
    int n = 0;
    for (std::string line; std::getline(f, line);) ++n;
    return n;
  }
  CoreBtf get(const std::string& bpftool, const std::string& object = "object bytes") {
    CoreBtf r = core_btf(cache_, {reinterpret_cast<const unsigned char*>(object.data()),
                                  object.size()},
                         kernel_, bpftool);
    return r;
  }

  fs::path root_, cache_, kernel_, calls_;
};

TEST_F(CoreBtfCache, MadeOnceThenFoundWithItsContent) {
  const std::string bpftool = tool("cp " + (root_ / "good.btf").string() + " \"$4\"");
  const CoreBtf first = get(bpftool);
  ASSERT_FALSE(first.path.empty()) << first.note;
  EXPECT_TRUE(first.made);
  const CoreBtf second = get(bpftool);
  ASSERT_FALSE(second.path.empty()) << second.note;
  EXPECT_FALSE(second.made);
  EXPECT_EQ(calls(), 1);
  // One file, under the name of the two digests, 0644, holding what bpftool wrote.
  const auto names = names_in(cache_);
  ASSERT_EQ(names.size(), 1u);
  uint64_t kd = 0;
  ASSERT_TRUE(file_digest(kernel_, kd));
  const std::string object = "object bytes";
  EXPECT_EQ(names[0], core_btf_name(kd, digest64({reinterpret_cast<const unsigned char*>(
                                                      object.data()),
                                                  object.size()})));
  EXPECT_NE(second.note.find(names[0]), std::string::npos) << second.note;
  EXPECT_EQ(fs::status(cache_ / names[0]).permissions(), static_cast<fs::perms>(0644));
  std::ifstream f(cache_ / names[0], std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), tiny_btf());
  EXPECT_EQ(fs::status(cache_).permissions(), static_cast<fs::perms>(0755));
}

TEST_F(CoreBtfCache, AnotherObjectOrKernelMakesItsOwn) {
  const std::string bpftool = tool("cp " + (root_ / "good.btf").string() + " \"$4\"");
  ASSERT_TRUE(get(bpftool, "object one").made);
  ASSERT_TRUE(get(bpftool, "object two").made);
  write_file(kernel_, std::string(200000, 'k') + "another kernel");
  ASSERT_TRUE(get(bpftool, "object two").made);
  EXPECT_EQ(calls(), 3);
  EXPECT_EQ(names_in(cache_).size(), 3u);
}

TEST_F(CoreBtfCache, FailingToolFallsBackWithItsMessageAndLeavesNothing) {
  const CoreBtf r = get(tool("echo 'Error: failed to load BTF from the object' >&2; exit 1"));
  EXPECT_TRUE(r.path.empty());
  EXPECT_EQ(r.fd.get(), -1);
  EXPECT_NE(r.note.find("failed to load BTF from the object"), std::string::npos) << r.note;
  EXPECT_NE(r.note.find("CO-RE uses the kernel's BTF"), std::string::npos) << r.note;
  EXPECT_TRUE(names_in(cache_).empty());
}

TEST_F(CoreBtfCache, MissingTool) {
  const CoreBtf r = get((root_ / "no-such-bpftool").string());
  EXPECT_TRUE(r.path.empty());
  EXPECT_NE(r.note.find("no " + (root_ / "no-such-bpftool").string() + " (Debian package bpftool)"),
            std::string::npos)
      << r.note;
  EXPECT_TRUE(names_in(cache_).empty());
}

TEST_F(CoreBtfCache, OutputThatIsNotBtfIsNotKept) {
  const CoreBtf r = get(tool("echo garbage > \"$4\""));
  EXPECT_TRUE(r.path.empty());
  EXPECT_NE(r.note.find("cannot be used"), std::string::npos) << r.note;
  EXPECT_TRUE(names_in(cache_).empty());
}

TEST_F(CoreBtfCache, DamagedCachedFileIsMadeAgainAndAForeignOneIsNotUsed) {
  const std::string bpftool = tool("cp " + (root_ / "good.btf").string() + " \"$4\"");
  ASSERT_TRUE(get(bpftool).made);
  const fs::path cached = cache_ / names_in(cache_).at(0);
  // The right magic, cut short: libbpf could not parse it. Ours: made again, and said so.
  write_file(cached, tiny_btf().substr(0, sizeof(btf_header) + 6));
  const CoreBtf r = get(bpftool);
  ASSERT_FALSE(r.path.empty()) << r.note;
  EXPECT_TRUE(r.made);
  EXPECT_NE(r.note.find("the cached one was damaged: libbpf cannot parse it"),
            std::string::npos)
      << r.note;
  EXPECT_EQ(calls(), 2);
  std::ifstream f(cached, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), tiny_btf());
  // Writable by others: not ours alone, so neither used nor replaced.
  fs::permissions(cached, static_cast<fs::perms>(0666));
  const CoreBtf w = get(bpftool);
  EXPECT_TRUE(w.path.empty());
  EXPECT_NE(w.note.find("writable by group or others"), std::string::npos) << w.note;
  EXPECT_EQ(calls(), 2);
}

TEST_F(CoreBtfCache, CacheDirectoryOthersMayWriteIsRefused) {
  fs::create_directory(cache_);
  fs::permissions(cache_, static_cast<fs::perms>(0777));
  const CoreBtf r = get(tool("cp " + (root_ / "good.btf").string() + " \"$4\""));
  EXPECT_TRUE(r.path.empty());
  EXPECT_NE(r.note.find("writable"), std::string::npos) << r.note;
  EXPECT_EQ(calls(), 0);
}

TEST(CoreBtfDigest, ContentOnly) {
  const std::string a(100000, 'a');
  std::string b = a;
  b[77777] = 'b';
  auto d = [](const std::string& s) {
    return digest64({reinterpret_cast<const unsigned char*>(s.data()), s.size()});
  };
  EXPECT_EQ(d(a), d(std::string(100000, 'a')));
  EXPECT_NE(d(a), d(b));
  EXPECT_NE(d(a), d(a.substr(0, 99999)));
  EXPECT_NE(d(""), d(std::string(1, '\0')));
  EXPECT_EQ(core_btf_name(0x1234, 0xabcdef), "core-0000000000001234-0000000000abcdef.btf");
  uint64_t f = 0;
  EXPECT_FALSE(file_digest("/nonexistent/file", f));
}

}  // namespace
}  // namespace iolens::loader

namespace iolens::loader {
namespace {

namespace fs = std::filesystem;

// Where btrfs is a module with its own BTF, its types are in no small BTF made from vmlinux's:
// the loader then relocates against the kernel's BTF (libbpf searches modules only then).
TEST(ModulesNeedingKernelBtf, BtrfsAsAModule) {
  const fs::path dir = fs::temp_directory_path() / ("iolens_sysbtf_" + std::to_string(getpid()));
  fs::create_directories(dir);
  { std::ofstream(dir / "vmlinux") << "x"; }
  { std::ofstream(dir / "ext4") << "x"; }
  EXPECT_TRUE(modules_needing_kernel_btf(dir.string()).empty()) << "built in: vmlinux has them";
  { std::ofstream(dir / "btrfs") << "x"; }
  EXPECT_EQ(modules_needing_kernel_btf(dir.string()), std::vector<std::string>{"btrfs"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace iolens::loader
