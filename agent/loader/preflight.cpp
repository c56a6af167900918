// SPDX-License-Identifier: Apache-2.0
#include "loader/preflight.hpp"

#include <fcntl.h>
#include <linux/btf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <vector>

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

Status btf_strings_present(const std::string& path, const std::set<std::string>& names,
                           std::set<std::string>& found) {
  found.clear();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return Status::Error("cannot open " + path + ": " + std::strerror(e), e);
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  btf_header hdr{};
  if (pread(fd, &hdr, sizeof(hdr), 0) != static_cast<ssize_t>(sizeof(hdr)) ||
      hdr.magic != BTF_MAGIC || hdr.hdr_len < sizeof(hdr))
    return Status::Error(path + " is not a BTF file (bad header)", EINVAL);
  std::size_t longest = 0;
  for (const auto& n : names) longest = std::max(longest, n.size());
  // What every name starts with ("btf_trace_"): most strings end the search at their first bytes.
  std::string prefix = names.empty() ? "" : *names.begin();
  for (const auto& n : names) {
    std::size_t k = 0;
    while (k < prefix.size() && k < n.size() && prefix[k] == n[k]) ++k;
    prefix.resize(k);
  }
  // The string section, a piece at a time; `cur` holds the string that a piece cut in two.
  const off_t start = static_cast<off_t>(hdr.hdr_len) + hdr.str_off;
  std::vector<char> buf(64 * 1024);
  std::string cur;
  bool too_long = false;  // `cur` is longer than any name: skip to its end
  for (uint32_t done = 0; done < hdr.str_len;) {
    const std::size_t want = std::min<std::size_t>(buf.size(), hdr.str_len - done);
    const ssize_t n = pread(fd, buf.data(), want, start + done);
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      return Status::Error("cannot read " + path + ": " + std::strerror(e), e);
    }
    done += static_cast<uint32_t>(n);
    for (const char *p = buf.data(), *end = p + n; p < end;) {
      const auto left = static_cast<std::size_t>(end - p);
      const auto* nul = static_cast<const char*>(std::memchr(p, '\0', left));
      const char* stop = nul ? nul : end;
      if (!too_long) {
        cur.append(p, static_cast<std::size_t>(stop - p));
        too_long = cur.size() > longest;
      }
      if (!nul) break;
      if (!too_long && cur.compare(0, prefix.size(), prefix) == 0 && names.count(cur))
        found.insert(cur);
      cur.clear();
      too_long = false;
      p = nul + 1;
    }
  }
  return Status::Ok();
}

std::optional<KernelVersion> parse_kernel_release(std::string_view release) {
  KernelVersion v;
  const char* p = release.data();
  const char* end = p + release.size();
  auto [q, e1] = std::from_chars(p, end, v.major);
  if (e1 != std::errc() || q == p || q == end || *q != '.') return std::nullopt;
  const char* minor = q + 1;
  auto [r, e2] = std::from_chars(minor, end, v.minor);
  if (e2 != std::errc() || r == minor) return std::nullopt;
  return v;
}

std::optional<KernelVersion> running_kernel() {
  utsname u{};
  if (uname(&u) != 0) return std::nullopt;
  return parse_kernel_release(u.release);
}

}  // namespace iolens::loader
