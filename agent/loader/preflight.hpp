// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Checks made before loading anything, so a user gets one clear line instead of a verifier dump.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "loader/status.hpp"

namespace iolens::loader {

/// Root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN) in the effective set.
Status check_privileges();

/// The kernel BTF that CO-RE and tp_btf need (or a user-supplied BTF file for CO-RE).
Status check_btf(const std::string& path);

/// Which of `names` are strings of the BTF file at `path`, read in small pieces without parsing
/// the types (the kernel's BTF is 5-6 MB; a parse costs tens of milliseconds that `iolens run`
/// pays at each start). Kernel BTF is deduplicated, so a string is there only if a type uses
/// it: "btf_trace_<tp>" is there exactly when the kernel has tracepoint <tp>. `found` gets the
/// names present; an error if the file is not readable BTF.
Status btf_strings_present(const std::string& path, const std::set<std::string>& names,
                           std::set<std::string>& found);

/// A type looked for by btf_type_ids: its name and BTF kind (BTF_KIND_STRUCT, BTF_KIND_FUNC...).
struct BtfTypeName {
  std::string name;
  uint32_t kind = 0;
};

/// The ids of the types `wanted` in the BTF file at `path`: ids[i] for wanted[i], the first
/// type of that name and kind, 0 if there is none. Read in small pieces as btf_strings_present
/// does (no parse: the string section once for the names' offsets, then every type's header
/// in id order). An error if the file is not readable BTF, or holds a kind this code does not
/// know (the ids after it could not be counted).
Status btf_type_ids(const std::string& path, const std::vector<BtfTypeName>& wanted,
                    std::vector<uint32_t>& ids);

/// The two builds of the programs (bpf/README.md "Two builds"): `casts` loads through trusted
/// kernel pointers cast to untrusted ones (the kfuncs bpf_rdonly_cast and bpf_task_from_pid,
/// Linux 6.2+), which the verifier checks without searching the kernel's BTF: ~30 ms less of
/// every start on the test VM; `plain` loads directly, for any kernel iolens supports.
enum class ProgramBuild { Auto, Casts, Plain };

/// The build to load and what the `casts` build needs set: the kernel's BTF ids of the types
/// it casts to (.rodata kid_*).
struct BuildChoice {
  bool casts = false;
  std::string note;  // why this build
  uint32_t task_struct = 0, address_space = 0, kiocb = 0, folio = 0;
};

/// `opt`, or IOLENS_BPF_BUILD (auto, casts, plain) when the environment sets it; an error for
/// any other value.
Status asked_build(ProgramBuild opt, ProgramBuild& out);

/// `casts` where the kernel BTF at `kernel_btf` has the kfuncs the casts build calls
/// (bpf_rdonly_cast, bpf_task_from_pid, bpf_task_release) and the types it casts to, unless
/// `plain` is asked; `plain` with the reason otherwise, or an error when `casts` was asked.
Status choose_build(const std::string& kernel_btf, ProgramBuild asked, BuildChoice& out);

/// The hint printed after any permission error.
const char* privilege_hint();

/// A kernel release as uname(2) gives it ("6.18.44-fc-v857", "5.15.0-91-generic"): its major
/// and minor numbers, or nothing if it does not start with "<major>.<minor>".
struct KernelVersion {
  unsigned major = 0;
  unsigned minor = 0;
  bool at_least(unsigned ma, unsigned mi) const {
    return major > ma || (major == ma && minor >= mi);
  }
};
std::optional<KernelVersion> parse_kernel_release(std::string_view release);

/// The running kernel's version (uname), or nothing if it cannot be read.
std::optional<KernelVersion> running_kernel();

}  // namespace iolens::loader
