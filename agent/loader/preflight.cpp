// SPDX-License-Identifier: Apache-2.0
#include "loader/preflight.hpp"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace iolens::loader {
namespace {

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

bool has_cap(const __user_cap_data_struct data[2], int cap) {
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

}  // namespace

const char* privilege_hint() {
  return "iolens needs root, or the capabilities CAP_BPF and CAP_PERFMON (run it with sudo)";
}

Status check_privileges() {
  __user_cap_header_struct hdr{};
  __user_cap_data_struct data[2]{};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  hdr.pid = 0;
  if (syscall(SYS_capget, &hdr, data) != 0)
    return Status::Error(std::string("cannot read capabilities: ") + std::strerror(errno), errno);
  if (has_cap(data, CAP_SYS_ADMIN)) return Status::Ok();
  if (has_cap(data, CAP_BPF) && has_cap(data, CAP_PERFMON)) return Status::Ok();
  return Status::Error(std::string("permission denied: ") + privilege_hint(), EPERM);
}

Status check_btf(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int e = errno;
    return Status::Error("kernel BTF not found at " + path + " (" + std::strerror(e) +
                             "): iolens needs a kernel built with CONFIG_DEBUG_INFO_BTF=y, or "
                             "a BTF file for this kernel passed with --btf",
                         e ? e : ENOENT);
  }
  char magic[2] = {};
  f.read(magic, 2);
  // BTF magic 0xeB9F, little-endian on x86-64.
  if (f.gcount() != 2 || static_cast<unsigned char>(magic[0]) != 0x9f ||
      static_cast<unsigned char>(magic[1]) != 0xeb)
    return Status::Error(path + " is not a BTF file (bad magic)", EINVAL);
  return Status::Ok();
}

}  // namespace iolens::loader
