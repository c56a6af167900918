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

/// One ELF note as the kernel lays them out in /sys/kernel/notes: namesz, descsz, type, then
/// the name and the descriptor, each padded to 4 bytes.
std::string note(const std::string& name_with_nul, const std::string& desc, uint32_t type) {
  const uint32_t head[3] = {static_cast<uint32_t>(name_with_nul.size()),
                            static_cast<uint32_t>(desc.size()), type};
  std::string out(reinterpret_cast<const char*>(head), sizeof(head));
  out += name_with_nul + std::string((4 - name_with_nul.size() % 4) % 4, '\0');
  out += desc + std::string((4 - desc.size() % 4) % 4, '\0');
  return out;
}

std::vector<unsigned char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

/// The notes of a kernel with build id `id`, between two notes of other kinds (the test VM's
/// has Linux's and Xen's after its build id).
std::string kernel_notes(const std::string& id) {
  return note(std::string("Xen\0", 4), std::string(4, '\1'), 18) +
         note(std::string("GNU\0", 4), id, 3) +
         note(std::string("Linux\0", 6), "6.18.0", 0x100);
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
  CoreBtf get(const std::string& bpftool, const std::string& object = "object bytes",
              const std::string& notes = "") {
    CoreBtf r = core_btf(cache_, {reinterpret_cast<const unsigned char*>(object.data()),
                                  object.size()},
                         kernel_, bpftool, notes);
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

TEST_F(CoreBtfCache, KeyedByTheKernelsBuildIdWhenItHasOne) {
  const std::string bpftool = tool("cp " + (root_ / "good.btf").string() + " \"$4\"");
  const fs::path notes = root_ / "notes";
  write_file(notes, kernel_notes("0123456789abcdefghij"));
  ASSERT_TRUE(get(bpftool, "object", notes).made);
  // The same id and size: the same kernel, whatever is read from the BTF file (not read).
  write_file(kernel_, std::string(200000, 'x'));
  EXPECT_FALSE(get(bpftool, "object", notes).made);
  EXPECT_EQ(calls(), 1);
  // Another build id, or the same with a BTF of another size: another kernel.
  write_file(notes, kernel_notes("0123456789abcdefghiJ"));
  EXPECT_TRUE(get(bpftool, "object", notes).made);
  write_file(kernel_, std::string(200001, 'x'));
  EXPECT_TRUE(get(bpftool, "object", notes).made);
  // Notes without a build id, or none: the whole file's digest, as without notes.
  write_file(notes, note(std::string("Linux\0", 6), "6.18.0", 0x100));
  ASSERT_TRUE(get(bpftool, "object", notes).made);
  uint64_t kd = 0;
  ASSERT_TRUE(file_digest(kernel_, kd));
  const std::string object = "object";
  const std::string by_content = core_btf_name(
      kd, digest64({reinterpret_cast<const unsigned char*>(object.data()), object.size()}));
  EXPECT_TRUE(fs::exists(cache_ / by_content));
  EXPECT_FALSE(get(bpftool, "object", (root_ / "no-notes").string()).made);
  EXPECT_FALSE(get(bpftool, "object").made);
  EXPECT_EQ(calls(), 4);
}

TEST(KernelBtfKey, BuildIdAndSizeOrTheWholeFile) {
  const fs::path dir = fs::temp_directory_path() / ("iolens_btf_key_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path btf = dir / "btf", notes = dir / "notes";
  write_file(btf, std::string(5000, 'b'));
  write_file(notes, kernel_notes("id-one-0123456789abc"));
  uint64_t a = 0, b = 0, whole = 0;
  ASSERT_TRUE(kernel_btf_key(btf, notes, a));
  ASSERT_TRUE(file_digest(btf, whole));
  EXPECT_NE(a, whole);
  write_file(btf, std::string(5000, 'c'));
  ASSERT_TRUE(kernel_btf_key(btf, notes, b));
  EXPECT_EQ(a, b) << "the build id decides, not the content";
  ASSERT_TRUE(kernel_btf_key(btf, "", b));
  ASSERT_TRUE(file_digest(btf, whole));
  EXPECT_EQ(b, whole) << "without notes: the content";
  EXPECT_FALSE(kernel_btf_key(dir / "no-btf", notes, b)) << "a BTF that is not there";
  EXPECT_FALSE(kernel_btf_key(dir / "no-btf", "", b));
  fs::remove_all(dir);
}

TEST(GnuBuildId, FoundAmongOtherNotesAndNotInCutOnes) {
  // The test VM's kernel's (a SHA-1: 20 bytes, one of them zero).
  const std::string id("\x24\xa3\x59\x8f\xd7\x00\x11\x4d\x0a\x1b\x1a\x48\x71\xba\xdc\xee"
                       "\x75\xd0\xac\xac",
                       20);
  const std::string notes = kernel_notes(id);
  EXPECT_EQ(gnu_build_id(bytes_of(notes)), bytes_of(id));
  // An id whose length is not a multiple of 4 (padded in the file, not in the id).
  EXPECT_EQ(gnu_build_id(bytes_of(kernel_notes("abcdefg"))), bytes_of("abcdefg"));
  // Cut inside the id, or inside a header: none.
  const std::size_t id_end = notes.find(id) + id.size();
  EXPECT_TRUE(gnu_build_id(bytes_of(notes.substr(0, id_end - 1))).empty());
  EXPECT_TRUE(gnu_build_id(bytes_of(notes.substr(0, 10))).empty());
  EXPECT_TRUE(gnu_build_id({}).empty());
  // GNU's other notes (ABI tag: type 1), another owner's type 3, an empty id: none.
  EXPECT_TRUE(gnu_build_id(bytes_of(note(std::string("GNU\0", 4), id, 1))).empty());
  EXPECT_TRUE(gnu_build_id(bytes_of(note(std::string("Xen\0", 4), id, 3))).empty());
  EXPECT_TRUE(gnu_build_id(bytes_of(note(std::string("GNU\0", 4), "", 3))).empty());
  // A name or id size past the end (up to 2^32 - 1, which padding must not wrap): none, and no
  // read past it (ASan).
  for (const uint32_t huge : {0xfffffff0u, 0xfffffffdu, 0xffffffffu}) {
    for (const std::size_t field : {0u, 4u}) {  // namesz, descsz
      std::string bad = note(std::string("GNU\0", 4), id, 3);
      std::memcpy(bad.data() + field, &huge, 4);
      EXPECT_TRUE(gnu_build_id(bytes_of(bad)).empty()) << "size " << huge << " at " << field;
    }
  }
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
