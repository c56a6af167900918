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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
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

namespace {

/// A BTF file open for reading in pieces, with its header checked.
struct BtfFile {
  int fd = -1;
  btf_header hdr{};
  ~BtfFile() {
    if (fd >= 0) close(fd);
  }
  Status open_checked(const std::string& path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      return Status::Error("cannot open " + path + ": " + std::strerror(e), e);
    }
    if (pread(fd, &hdr, sizeof(hdr), 0) != static_cast<ssize_t>(sizeof(hdr)) ||
        hdr.magic != BTF_MAGIC || hdr.hdr_len < sizeof(hdr))
      return Status::Error(path + " is not a BTF file (bad header)", EINVAL);
    return Status::Ok();
  }
};

/// Reads [start, start + len) of a file front to back through a 64 KiB buffer.
class PieceReader {
 public:
  PieceReader(int fd, off_t start, uint64_t len) : fd_(fd), next_(start), left_(len) {}
  /// The next `n` bytes into `out`; false at the end or on an error (errno then set).
  bool read(void* out, std::size_t n) {
    auto* dst = static_cast<char*>(out);
    while (n > 0) {
      if (pos_ == have_ && !refill()) return false;
      const std::size_t k = std::min(n, have_ - pos_);
      std::memcpy(dst, buf_.data() + pos_, k);
      pos_ += k;
      dst += k;
      n -= k;
    }
    return true;
  }
  bool skip(uint64_t n) {
    while (n > 0) {
      if (pos_ == have_ && !refill()) return false;
      const std::size_t k = static_cast<std::size_t>(std::min<uint64_t>(n, have_ - pos_));
      pos_ += k;
      n -= k;
    }
    return true;
  }
  bool at_end() const { return pos_ == have_ && left_ == 0; }

 private:
  bool refill() {
    if (left_ == 0) {
      errno = 0;
      return false;
    }
    const std::size_t want = static_cast<std::size_t>(std::min<uint64_t>(buf_.size(), left_));
    const ssize_t n = pread(fd_, buf_.data(), want, next_);
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    next_ += n;
    left_ -= static_cast<uint64_t>(n);
    have_ = static_cast<std::size_t>(n);
    pos_ = 0;
    return true;
  }
  int fd_;
  off_t next_;
  uint64_t left_;
  std::vector<char> buf_ = std::vector<char>(64 * 1024);
  std::size_t have_ = 0, pos_ = 0;
};

/// Calls found(name, offset) for each string of the file's string section that is in `names`,
/// with its offset in the section, until stop() says so. Only a string whose length is that of
/// a name is compared (the kernel's 2 MB of strings are ~100,000 strings).
template <class Found, class Stop>
Status scan_strings(const BtfFile& f, const std::string& path, const std::set<std::string>& names,
                    Found found, Stop stop) {
  std::size_t longest = 0;
  for (const auto& n : names) longest = std::max(longest, n.size());
  std::vector<bool> length(longest + 1, false);
  for (const auto& n : names) length[n.size()] = true;
  auto match = [&](std::string_view str, uint32_t off) {
    if (str.size() <= longest && length[str.size()])
      if (auto it = names.find(std::string(str)); it != names.end()) found(*it, off);
  };
  // The string section, a piece at a time; `cur` holds the start of a string that a piece cut
  // in two (or as much of it as can still be a name).
  const off_t start = static_cast<off_t>(f.hdr.hdr_len) + f.hdr.str_off;
  std::vector<char> buf(64 * 1024);
  std::string cur;
  uint32_t cur_off = 0;   // where `cur`'s string starts in the section
  bool cut = false;       // a string is continued from the previous piece
  for (uint32_t done = 0; done < f.hdr.str_len && !stop();) {
    const std::size_t want = std::min<std::size_t>(buf.size(), f.hdr.str_len - done);
    const ssize_t n = pread(f.fd, buf.data(), want, start + done);
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      return Status::Error("cannot read " + path + ": " + std::strerror(e), e);
    }
    const uint32_t piece = done;
    done += static_cast<uint32_t>(n);
    const char* p = buf.data();
    const char* end = p + n;
    while (p < end) {
      const auto* nul = static_cast<const char*>(std::memchr(p, '\0', static_cast<std::size_t>(end - p)));
      const char* stop_at = nul ? nul : end;
      if (cut || !nul) {
        if (!cut) cur_off = piece + static_cast<uint32_t>(p - buf.data());
        if (cur.size() <= longest)
          cur.append(p, std::min<std::size_t>(static_cast<std::size_t>(stop_at - p), longest + 1));
        cut = !nul;
        if (!nul) break;
        match(cur, cur_off);
        cur.clear();
      } else {
        match(std::string_view(p, static_cast<std::size_t>(nul - p)),
              piece + static_cast<uint32_t>(p - buf.data()));
      }
      p = nul + 1;
    }
  }
  return Status::Ok();
}

/// Bytes that follow a type's 12-byte header, by kind (include/uapi/linux/btf.h); -1 for a kind
/// not known here.
int64_t btf_type_tail(uint32_t kind, uint32_t vlen) {
  switch (kind) {
    case BTF_KIND_INT:
    case BTF_KIND_VAR:
    case BTF_KIND_DECL_TAG:
      return 4;
    case BTF_KIND_ARRAY:
      return 12;
    case BTF_KIND_STRUCT:
    case BTF_KIND_UNION:
    case BTF_KIND_DATASEC:
    case BTF_KIND_ENUM64:
      return 12 * static_cast<int64_t>(vlen);
    case BTF_KIND_ENUM:
    case BTF_KIND_FUNC_PROTO:
      return 8 * static_cast<int64_t>(vlen);
    case BTF_KIND_PTR:
    case BTF_KIND_FWD:
    case BTF_KIND_TYPEDEF:
    case BTF_KIND_VOLATILE:
    case BTF_KIND_CONST:
    case BTF_KIND_RESTRICT:
    case BTF_KIND_FUNC:
    case BTF_KIND_FLOAT:
    case BTF_KIND_TYPE_TAG:
      return 0;
    default:
      return -1;
  }
}

}  // namespace

Status btf_strings_present(const std::string& path, const std::set<std::string>& names,
                           std::set<std::string>& found) {
  found.clear();
  BtfFile f;
  if (Status s = f.open_checked(path); !s) return s;
  return scan_strings(
      f, path, names, [&](const std::string& name, uint32_t) { found.insert(name); },
      [&] { return found.size() == names.size(); });
}

Status btf_type_ids(const std::string& path, const std::vector<BtfTypeName>& wanted,
                    std::vector<uint32_t>& ids) {
  ids.assign(wanted.size(), 0);
  BtfFile f;
  if (Status s = f.open_checked(path); !s) return s;
  std::set<std::string> names;
  for (const auto& w : wanted) names.insert(w.name);
  // Kernel BTF is deduplicated (one offset per string); a file in general need not be.
  std::vector<std::pair<uint32_t, std::size_t>> at;  // (string offset, index in `wanted`)
  std::set<std::string> seen;
  if (Status s = scan_strings(
          f, path, names,
          [&](const std::string& name, uint32_t off) {
            seen.insert(name);
            for (std::size_t i = 0; i < wanted.size(); ++i)
              if (wanted[i].name == name) at.emplace_back(off, i);
          },
          [&] { return seen.size() == names.size(); });
      !s)
    return s;
  if (at.empty()) return Status::Ok();
  uint32_t kinds = 0;  // bit per kind looked for
  for (const auto& w : wanted) kinds |= w.kind < 32 ? 1u << w.kind : 0;
  PieceReader types(f.fd, static_cast<off_t>(f.hdr.hdr_len) + f.hdr.type_off, f.hdr.type_len);
  std::size_t left = at.size();
  for (uint32_t id = 1; left > 0 && !types.at_end(); ++id) {
    btf_type t{};
    if (!types.read(&t, sizeof(t)))
      return Status::Error("cannot read " + path + ": " + std::strerror(errno ? errno : EIO),
                           errno ? errno : EIO);
    const uint32_t kind = BTF_INFO_KIND(t.info);
    const int64_t tail = btf_type_tail(kind, BTF_INFO_VLEN(t.info));
    if (tail < 0)
      return Status::Error(path + ": type " + std::to_string(id) + " has a BTF kind unknown here (" +
                               std::to_string(kind) + ")",
                           EINVAL);
    if (kinds & (1u << kind))
      for (auto& [off, i] : at)
        if (off == t.name_off && wanted[i].kind == kind && ids[i] == 0) {
          ids[i] = id;
          --left;
        }
    if (!types.skip(static_cast<uint64_t>(tail)))
      return Status::Error(path + ": type " + std::to_string(id) + " runs past the type section",
                           EINVAL);
  }
  return Status::Ok();
}

/// Options::program_build, or IOLENS_BPF_BUILD when set.
Status asked_build(ProgramBuild opt, ProgramBuild& out) {
  out = opt;
  const char* env = std::getenv("IOLENS_BPF_BUILD");
  if (!env) return Status::Ok();
  const std::string v = env;
  if (v == "auto") out = ProgramBuild::Auto;
  else if (v == "casts") out = ProgramBuild::Casts;
  else if (v == "plain") out = ProgramBuild::Plain;
  else
    return Status::Error("IOLENS_BPF_BUILD must be auto, casts or plain, not \"" + v + "\"",
                         EINVAL);
  return Status::Ok();
}

/// `casts` where the running kernel's BTF has the kfuncs it calls and the types it casts to
/// (found by a walk of the BTF file: no parse), unless `plain` is asked.
Status choose_build(const std::string& kernel_btf, ProgramBuild asked, BuildChoice& out) {
  out = {};
  if (asked == ProgramBuild::Plain) {
    out.note = "asked for";
    return Status::Ok();
  }
  // The cast types are among the kernel's first (ids under 1,000 on 6.18), so their walk stops
  // early; the kfuncs' FUNC types are far (~65,000), so their names are looked for among the
  // strings instead: a deduplicated BTF holds a name only if a type uses it, and these names
  // only the kfuncs do. ~0.1 + ~1 ms, against ~3-4 ms for a walk to the kfuncs' ids.
  static const std::vector<BtfTypeName> wanted = {{"task_struct", BTF_KIND_STRUCT},
                                                  {"address_space", BTF_KIND_STRUCT},
                                                  {"kiocb", BTF_KIND_STRUCT},
                                                  {"folio", BTF_KIND_STRUCT}};
  static const std::set<std::string> kfuncs = {"bpf_rdonly_cast", "bpf_task_from_pid",
                                               "bpf_task_release"};
  std::vector<uint32_t> ids;
  std::set<std::string> have;
  Status read = btf_type_ids(kernel_btf, wanted, ids);
  if (read) read = btf_strings_present(kernel_btf, kfuncs, have);
  std::string why;
  if (!read) {
    why = read.message;
  } else {
    for (std::size_t i = 0; i < wanted.size(); ++i)
      if (!ids[i]) why += (why.empty() ? "the kernel's BTF has no " : ", ") + wanted[i].name;
    for (const auto& k : kfuncs)
      if (!have.count(k)) why += (why.empty() ? "the kernel's BTF has no " : ", ") + k;
  }
  if (!why.empty()) {
    if (asked == ProgramBuild::Casts)
      return Status::Error("the casts build of the programs cannot load here: " + why, ENOTSUP);
    out.note = why;
    return Status::Ok();
  }
  out.casts = true;
  out.note = asked == ProgramBuild::Casts ? "asked for"
                                          : "the kernel has bpf_rdonly_cast and bpf_task_from_pid";
  out.task_struct = ids[0];
  out.address_space = ids[1];
  out.kiocb = ids[2];
  out.folio = ids[3];
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
