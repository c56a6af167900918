// SPDX-License-Identifier: Apache-2.0
#include "loader/core_btf.hpp"

#include <bpf/btf.h>
#include <fcntl.h>
#include <linux/btf.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "control/unique_fd.hpp"
#include "core/private_dir.hpp"

namespace iolens::loader {
namespace {

constexpr uint64_t kMul1 = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kMul2 = 0xBF58476D1CE4E5B9ULL;
constexpr int kBpftoolTimeoutMs = 10000;
constexpr uint64_t kMaxCoreBtfBytes = 16u << 20;  // a few KB expected: anything huge is wrong

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }


/// Why the file open at `fd` may not be trusted at all ("" if it may): not the effective
/// user's, or writable by others.
std::string foreign_file(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  if (st.st_uid != geteuid()) return "it is not owned by the effective user";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "it is writable by group or others";
  return "";
}

/// Why the file open at `fd` is not a small BTF that libbpf parses ("" if it is).
std::string damaged_file(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  if (st.st_size < static_cast<off_t>(sizeof(btf_header)) ||
      static_cast<uint64_t>(st.st_size) > kMaxCoreBtfBytes)
    return "its size is not that of a small BTF file";
  btf_header hdr{};
  if (pread(fd, &hdr, sizeof(hdr), 0) != static_cast<ssize_t>(sizeof(hdr)) ||
      hdr.magic != BTF_MAGIC)
    return "it is not BTF";
  // Parsed as libbpf will parse it (a few KB: well under a millisecond), so that a damaged
  // file is found here instead of failing the load.
  btf* parsed = btf__parse_raw(("/proc/self/fd/" + std::to_string(fd)).c_str());
  if (!parsed) return std::string("libbpf cannot parse it: ") + std::strerror(errno);
  btf__free(parsed);
  return "";
}

std::string untrusted_file(int fd) {
  std::string why = foreign_file(fd);
  return why.empty() ? damaged_file(fd) : why;
}

/// Runs `argv` with no input and no output but its error text (the first 4 KB, in `err`),
/// for at most kBpftoolTimeoutMs. true if it exited with status 0.
bool run_quietly(const std::vector<std::string>& args, std::string& err) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    err = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Nothing of iolens's environment (a sudo user's, maybe) reaches the tool.
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env, nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    err = "cannot run " + args[0] + ": " + std::strerror(rc);
    return false;
  }
  // Its error text is short; read it as it comes so that it never blocks on a full pipe.
  fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  int status = 0;
  bool exited = false;
  for (int waited_ms = 0;; waited_ms += 2) {
    char buf[512];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof(buf))) > 0)
      if (err.size() < 4096) err.append(buf, static_cast<std::size_t>(n));
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
      break;
    }
    if (w < 0 && errno != EINTR) {
      // ECHILD: reaped already (SIGCHLD ignored); anything else: it is not ours to wait for.
      if (errno != ECHILD) kill(pid, SIGKILL);
      break;
    }
    if (waited_ms >= kBpftoolTimeoutMs) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      err = args[0] + " took over " + std::to_string(kBpftoolTimeoutMs / 1000) + " s: killed";
      close(pipefd[0]);
      return false;
    }
    struct timespec ts {0, 2000000};
    nanosleep(&ts, nullptr);
  }
  {
    // What it wrote just before it exited.
    char buf[512];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof(buf))) > 0)
      if (err.size() < 4096) err.append(buf, static_cast<std::size_t>(n));
  }
  close(pipefd[0]);
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (!exited) {
    err = "cannot wait for " + args[0];
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    err = args[0] + " failed" + (err.empty() ? std::string() : ": " + err);
    return false;
  }
  return true;
}

/// Makes `name` in the cache directory `dir_fd` (`cache_dir`) with bpftool and returns it open,
/// or -1 with `why`. bpftool works in a fresh 0700 directory of its own inside the cache (the
/// object it reads, the file it writes with whatever mode its umask gives): nobody else can
/// open either, and the file is renamed into place only once checked and made 0644, so a
/// reader never sees a partial or a foreign file.
int make_core_btf(int dir_fd, const std::string& cache_dir, const std::string& name,
                  std::span<const unsigned char> object, const std::string& kernel_btf,
                  const std::string& bpftool, std::string& why) {
  if (access(bpftool.c_str(), X_OK) != 0) {
    why = "no " + bpftool + " (Debian package bpftool): " + std::strerror(errno);
    return -1;
  }
  const std::string work = ".make-" + std::to_string(getpid());
  const std::string work_path = cache_dir + "/" + work;
  // A directory of a dead iolens with the same pid (a kill during bpftool) goes first.
  unlinkat(dir_fd, (work + "/object.o").c_str(), 0);
  unlinkat(dir_fd, (work + "/core.btf").c_str(), 0);
  unlinkat(dir_fd, work.c_str(), AT_REMOVEDIR);
  if (mkdirat(dir_fd, work.c_str(), 0700) != 0) {
    why = "cannot create " + work_path + ": " + std::strerror(errno);
    return -1;
  }
  control::UniqueFd wd{
      openat(dir_fd, work.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  int fd = -1;
  if (wd.get() < 0) {
    why = "cannot open " + work_path + ": " + std::strerror(errno);
  } else {
    control::UniqueFd obj{core::create_fresh(wd.get(), "object.o", 0600)};
    if (obj.get() < 0 ||
        !core::write_all(obj.get(),
                         {reinterpret_cast<const char*>(object.data()), object.size()})) {
      why = "cannot write the object into " + work_path + ": " + std::strerror(errno);
    } else if (run_quietly({bpftool, "gen", "min_core_btf", kernel_btf,
                            work_path + "/core.btf", work_path + "/object.o"},
                           why)) {
      control::UniqueFd made{core::open_regular_at(wd.get(), "core.btf")};
      // 0644 whatever the umask: untrusted_file() refuses a file others may write.
      std::string bad = made.get() < 0                    ? "it is not a regular file"
                        : fchmod(made.get(), 0644) != 0 ? std::strerror(errno)
                                                       : untrusted_file(made.get());
      // On disk before it has its name: a crash must not leave an empty file under it.
      if (bad.empty() && fsync(made.get()) != 0) bad = std::strerror(errno);
      if (bad.empty() && renameat(wd.get(), "core.btf", dir_fd, name.c_str()) != 0)
        bad = std::strerror(errno);
      if (bad.empty())
        fd = made.release();
      else
        why = bpftool + "'s output cannot be used (" + bad + ")";
    }
    unlinkat(wd.get(), "object.o", 0);
    unlinkat(wd.get(), "core.btf", 0);
  }
  unlinkat(dir_fd, work.c_str(), AT_REMOVEDIR);
  return fd;
}

}  // namespace

uint64_t digest64(std::span<const unsigned char> bytes, uint64_t seed) {
  uint64_t h = seed ^ (bytes.size() * kMul1);
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = rotl(h ^ (w * kMul1), 31) * kMul2;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  h = rotl(h ^ (tail * kMul1), 31) * kMul2;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  return h;
}

bool file_digest(const std::string& path, uint64_t& out) {
  control::UniqueFd f{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.get() < 0) return false;
  // Whole 64 KiB pieces whatever each read returns (sysfs files may give less): the digest
  // depends on the content only.
  std::vector<unsigned char> buf(64 * 1024);
  uint64_t h = 0;
  for (;;) {
    std::size_t have = 0;
    while (have < buf.size()) {
      const ssize_t n = read(f.get(), buf.data() + have, buf.size() - have);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      if (n == 0) break;
      have += static_cast<std::size_t>(n);
    }
    h = digest64({buf.data(), have}, h);
    if (have < buf.size()) break;
  }
  out = h;
  return true;
}

std::vector<unsigned char> gnu_build_id(std::span<const unsigned char> notes) {
  // Each note: namesz, descsz, type (4 bytes each), then the name and the descriptor, each
  // padded to 4 bytes (the kernel's notes are 4-byte aligned, Elf64 or not).
  // Sizes in 64 bits: a padded 32-bit size cannot wrap, whatever size_t is.
  constexpr uint32_t kNtGnuBuildId = 3;
  const auto pad4 = [](uint64_t n) { return (n + 3) & ~uint64_t{3}; };
  const uint64_t size = notes.size();
  uint64_t at = 0;
  while (size - at >= 12) {
    uint32_t head[3];
    std::memcpy(head, notes.data() + at, sizeof(head));
    const uint64_t name_at = at + 12;
    const uint64_t name_len = pad4(head[0]);
    if (name_len > size - name_at) break;
    const uint64_t desc_at = name_at + name_len;
    const uint64_t desc_len = pad4(head[1]);
    if (desc_len > size - desc_at) break;
    if (head[2] == kNtGnuBuildId && head[0] == 4 && head[1] > 0 &&
        std::memcmp(notes.data() + name_at, "GNU", 4) == 0)
      return {notes.begin() + static_cast<std::ptrdiff_t>(desc_at),
              notes.begin() + static_cast<std::ptrdiff_t>(desc_at + head[1])};
    at = desc_at + desc_len;
  }
  return {};
}

bool kernel_btf_key(const std::string& path, const std::string& notes_path, uint64_t& out) {
  if (!notes_path.empty()) {
    struct stat st {};
    control::UniqueFd f{open(notes_path.c_str(), O_RDONLY | O_CLOEXEC)};
    unsigned char buf[4096];
    ssize_t n = -1;
    if (f.get() >= 0) {
      do {
        n = read(f.get(), buf, sizeof(buf));
      } while (n < 0 && errno == EINTR);
    }
    if (n > 0 && stat(path.c_str(), &st) == 0) {
      std::vector<unsigned char> id = gnu_build_id({buf, static_cast<std::size_t>(n)});
      if (!id.empty()) {
        // Tagged apart from every whole-file digest: "build id" and the BTF's size follow it.
        const uint64_t size = static_cast<uint64_t>(st.st_size);
        const unsigned char* sz = reinterpret_cast<const unsigned char*>(&size);
        id.insert(id.end(), sz, sz + sizeof(size));
        const char tag[] = "build id";
        id.insert(id.end(), tag, tag + sizeof(tag) - 1);
        out = digest64(id);
        return true;
      }
    }
  }
  return file_digest(path, out);
}

std::string core_btf_name(uint64_t kernel_digest, uint64_t object_digest) {
  char name[64];
  std::snprintf(name, sizeof(name), "core-%016" PRIx64 "-%016" PRIx64 ".btf", kernel_digest,
                object_digest);
  return name;
}

CoreBtf core_btf(const std::string& cache_dir, std::span<const unsigned char> object,
                 const std::string& kernel_btf, const std::string& bpftool,
                 const std::string& kernel_notes) {
  CoreBtf out;
  const std::string fallback = "; CO-RE uses the kernel's BTF";
  uint64_t kernel_digest = 0;
  if (!kernel_btf_key(kernel_btf, kernel_notes, kernel_digest)) {
    out.note = "cannot read " + kernel_btf + fallback;
    return out;
  }
  std::string error;
  control::UniqueFd dir{
      core::open_private_dir(cache_dir, 0755, false, "cache directory", error)};
  if (dir.get() < 0) {
    out.note = error + fallback;
    return out;
  }
  const std::string name = core_btf_name(kernel_digest, digest64(object));
  control::UniqueFd file{core::open_regular_at(dir.get(), name)};
  std::string replaced;
  if (file.get() >= 0) {
    if (const std::string why = foreign_file(file.get()); !why.empty()) {
      out.note = cache_dir + "/" + name + " is not used: " + why + fallback;
      return out;
    }
    // Ours but damaged (a bad copy, a disk error): made again.
    replaced = damaged_file(file.get());
    if (!replaced.empty()) {
      file.reset();
      unlinkat(dir.get(), name.c_str(), 0);
    }
  }
  if (file.get() < 0) {
    control::UniqueFd made{
        make_core_btf(dir.get(), cache_dir, name, object, kernel_btf, bpftool, out.note)};
    if (made.get() < 0) {
      if (!replaced.empty())
        out.note = "the cached one was damaged (" + replaced + "): " + out.note;
      out.note += fallback;
      return out;
    }
    out.made = true;
    file = std::move(made);
  }
  out.path = "/proc/self/fd/" + std::to_string(file.get());
  out.fd = std::move(file);
  out.file = cache_dir + "/" + name;
  out.note = std::string(out.made ? "made " : "") + out.file +
             (replaced.empty() ? "" : " (the cached one was damaged: " + replaced + ")");
  return out;
}

std::vector<std::string> modules_needing_kernel_btf(const std::string& sysfs_btf_dir) {
  std::vector<std::string> out;
  for (const char* module : {"btrfs"}) {
    const std::string path = sysfs_btf_dir + "/" + module;
    if (access(path.c_str(), F_OK) == 0) out.emplace_back(module);
  }
  return out;
}

}  // namespace iolens::loader
