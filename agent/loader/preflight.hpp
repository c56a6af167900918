// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Checks made before loading anything, so a user gets one clear line instead of a verifier dump.

#include <string>

#include "loader/status.hpp"

namespace iolens::loader {

/// Root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN) in the effective set.
Status check_privileges();

/// The kernel BTF that CO-RE and tp_btf need (or a user-supplied BTF file for CO-RE).
Status check_btf(const std::string& path);

/// The hint printed after any permission error.
const char* privilege_hint();

}  // namespace iolens::loader
