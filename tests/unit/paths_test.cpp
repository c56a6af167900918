// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <sys/sysmacros.h>

#include <string>

#include "core/paths.hpp"

using namespace iolens::core;
using namespace std::string_literals;

TEST(Paths, WalkIsReversedLeafFirst) {
  EXPECT_EQ(path_from_walk("c\0b\0a\0"s), "/a/b/c");
  EXPECT_EQ(path_from_walk(""s), "/");
  EXPECT_EQ(path_from_walk("only\0"s), "/only");
}

TEST(Paths, WalkKeepsHostileBytesAsIs) {
  const std::string name = "we\"ird\\ \n\xff.bin";
  EXPECT_EQ(path_from_walk(name + '\0' + "dir"s + '\0'), "/dir/" + name);
}

TEST(Paths, LexicalNormalize) {
  EXPECT_EQ(lexical_normalize("/a/./b//c/"), "/a/b/c");
  EXPECT_EQ(lexical_normalize("/a/b/../c"), "/a/c");
  EXPECT_EQ(lexical_normalize("/../../x"), "/x");
  EXPECT_EQ(lexical_normalize("/"), "/");
  EXPECT_EQ(lexical_normalize("/a/.."), "/");
}

TEST(Paths, ArgumentRelativeToBase) {
  // base walked as /data/set (leaf first); relative argument with ".." and "."
  EXPECT_EQ(resolve_argument("set\0data\0"s, "sub/../f.npy"), "/data/set/f.npy");
  EXPECT_EQ(resolve_argument("set\0data\0"s, "./f"), "/data/set/f");
  EXPECT_EQ(resolve_argument("ignored\0"s, "/abs/./p"), "/abs/p");
  EXPECT_EQ(resolve_argument(""s, "rel"), "/rel");
}

TEST(Paths, DeviceNumbersMatchStat) {
  // 8:1 (sda1) in the kernel's encoding is 8 << 20 | 1; stat(2) shows makedev(8, 1) = 0x801.
  EXPECT_EQ(kernel_dev_to_user((8u << 20) | 1u), 0x801u);
  EXPECT_EQ(kernel_dev_to_user((8u << 20) | 1u), makedev(8, 1));
  // Minor numbers over 255 use the split encoding: makedev(259, 300).
  const uint32_t k = (259u << 20) | 300u;
  EXPECT_EQ(kernel_dev_major(k), 259u);
  EXPECT_EQ(kernel_dev_minor(k), 300u);
  EXPECT_EQ(kernel_dev_to_user(k), makedev(259, 300));  // glibc's encoding is the oracle
  EXPECT_EQ(kernel_dev_to_user((4095u << 20) | 1048575u), makedev(4095, 1048575));
}

TEST(Paths, MountFieldsAreUnescapedAsGetmntentDoes) {
  // The kernel writes space, tab, newline and backslash of a mount point as \ooo (show_mountinfo,
  // mangle()); getmntent() decodes exactly those four-character runs.
  EXPECT_EQ(unescape_mount_field("/mnt/a\\040b\\011c\\012d\\134e"), "/mnt/a b\tc\nd\\e");
  EXPECT_EQ(unescape_mount_field("/plain"), "/plain");
  // not an escape: kept as it is (a digit out of range, a run cut by the end)
  EXPECT_EQ(unescape_mount_field("/x\\400"), "/x\\400");
  EXPECT_EQ(unescape_mount_field("/x\\04"), "/x\\04");
  EXPECT_EQ(unescape_mount_field("/x\\"), "/x\\");
  EXPECT_EQ(unescape_mount_field("\\0401"), " 1");
}
