// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Paths as the kernel programs send them, and device numbers.

#include <cstdint>
#include <string>
#include <string_view>

namespace iolens::core {

/// A walked path: components leaf first, each NUL-terminated -> "/a/b/c". Empty -> "/".
std::string path_from_walk(std::string_view walk);

/// Removes "." and empty components and applies ".." lexically to an absolute path.
std::string lexical_normalize(std::string_view abs_path);

/// The absolute path a path argument names: `arg` itself if absolute, else joined to the walked
/// base directory (dirfd or cwd), then normalized lexically (symlinks in `arg` stay unresolved:
/// the kernel resolved them but a path-based call gives no struct file to walk).
std::string resolve_argument(std::string_view base_walk, std::string_view arg);

/// The placeholder name of a file no name was received for: "<unknown MAJ:MIN:INO>".
std::string unknown_path(uint32_t kdev, uint64_t ino);

/// A field of /proc/*/mounts or mountinfo with the kernel's escapes decoded (a backslash and
/// three octal digits: space, tab, newline, backslash), as getmntent() decodes them.
std::string unescape_mount_field(std::string_view s);

/// Kernel dev_t (MAJOR << 20 | MINOR) to st_dev as stat(2) reports it (glibc makedev).
uint64_t kernel_dev_to_user(uint32_t kdev);
uint32_t kernel_dev_major(uint32_t kdev);
uint32_t kernel_dev_minor(uint32_t kdev);

}  // namespace iolens::core
