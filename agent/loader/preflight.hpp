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
