// SPDX-License-Identifier: Apache-2.0
#pragma once
/// CO-RE against a small BTF, made once per kernel and BPF object.
///
/// libbpf 1.1 relocates the programs' field accesses (CO-RE) by searching the target BTF for
/// each struct the programs use: a linear scan of the kernel's whole BTF (~150,000 types) per
/// struct, 34 structs, ~40 ms of every `iolens run`'s start (bench/README.md "Start-up").
/// `bpftool gen min_core_btf` writes only the types those relocations need (~7 KB here); libbpf
/// relocates against it to the same offsets, sizes and enum values as against the kernel's
/// (the tp_btf programs still attach by the kernel's own BTF, which libbpf reads as before).
/// It is kept in a cache directory under a name made of digests of the kernel (its build id, or
/// its whole BTF) and of the object, so a new kernel or a new iolens makes its own. With a
/// custom BTF libbpf does not look in kernel modules' BTF for CO-RE: the one module whose types
/// iolens relocates is btrfs (a btrfs file's device, bpf/iolens.bpf.c file_dev), so where btrfs
/// is a module, the cache is not used (modules_needing_kernel_btf).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "control/unique_fd.hpp"

namespace iolens::loader {

/// A 64-bit digest of `bytes` (a cache key, not a cryptographic hash), continued from `seed`.
uint64_t digest64(std::span<const unsigned char> bytes, uint64_t seed = 0);

/// The digest of the whole content of `path`, read in pieces; false if it cannot be read.
bool file_digest(const std::string& path, uint64_t& out);

/// The GNU build id among the ELF notes `notes` (the content of /sys/kernel/notes), or nothing
/// if there is none or the notes are cut short.
std::vector<unsigned char> gnu_build_id(std::span<const unsigned char> notes);

/// The cache key of the kernel BTF at `path`. With `notes_path` (the running kernel's notes,
/// /sys/kernel/notes, given only with its BTF) holding a GNU build id: a digest of that id and
/// of the BTF's size, read in microseconds. The id is the linker's hash of the whole kernel
/// image, whose .BTF section is linked in, so one id is one BTF. Otherwise (no notes, a kernel
/// linked without a build id, another file): the digest of the whole file (file_digest: ~2.7 ms
/// for the 5.5 MB of the test VM's BTF, at every start). False if it cannot be read.
bool kernel_btf_key(const std::string& path, const std::string& notes_path, uint64_t& out);

/// The cache file's name for a kernel BTF digest and an object digest.
std::string core_btf_name(uint64_t kernel_digest, uint64_t object_digest);

/// What to give libbpf as the target of CO-RE.
struct CoreBtf {
  /// A path naming the cached file (a /proc/self/fd/N path of `fd`: what was checked is what
  /// libbpf reads), or "" for the kernel's own BTF.
  std::string path;
  control::UniqueFd fd;  // open while `path` is used
  std::string file;      // the cached file's path in the cache directory, when `path` is set
  bool made = false;     // made by this call (bpftool ran)
  std::string note;      // what was used, or why the kernel's own BTF is
};

/// Finds, or makes with `bpftool` and stores, the small BTF for `object` on the kernel whose BTF
/// is `kernel_btf` (keyed by kernel_btf_key with `kernel_notes`), in `cache_dir` (created 0755
/// if missing; refused unless it is a directory of the effective user that nobody else may
/// write, core::open_private_dir). Never fails: on any problem (no cache directory, no bpftool,
/// bpftool failed or took over 10 s, a file that is not BTF) the result names no file and says
/// why; CO-RE then uses the kernel's BTF as before.
CoreBtf core_btf(const std::string& cache_dir, std::span<const unsigned char> object,
                 const std::string& kernel_btf, const std::string& bpftool,
                 const std::string& kernel_notes = "");

/// The kernel modules, among those whose types the programs relocate (btrfs), that are loaded
/// with a BTF of their own under `sysfs_btf_dir` (/sys/kernel/btf): their types are in no small
/// BTF made from vmlinux's, so CO-RE must use the kernel's BTF (libbpf then searches modules).
std::vector<std::string> modules_needing_kernel_btf(const std::string& sysfs_btf_dir);

}  // namespace iolens::loader
