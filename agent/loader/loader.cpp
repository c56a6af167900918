// SPDX-License-Identifier: Apache-2.0
#include "loader/loader.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <vector>

#include "iolens_bpf.skel.h"
#include "loader/preflight.hpp"

namespace iolens::loader {
namespace {

bool g_verbose = false;

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG && !g_verbose) return 0;
  char buf[2048];
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  std::string line(buf);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (level == LIBBPF_WARN)
    spdlog::warn("libbpf: {}", line);
  else
    spdlog::debug("libbpf: {}", line);
  return n;
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

// ctx points at Impl::current_sink, which consume_events() sets for the duration of a call.
int ring_callback(void* ctx, void* data, size_t size) {
  auto* const* sink = static_cast<const Loader::EventSink* const*>(ctx);
  if (*sink) (**sink)(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size));
  return 0;
}

constexpr int kErrNotSupp = 524;  // the kernel's ENOTSUPP, not in user-space errno.h

}  // namespace

struct Loader::Impl {
  iolens_bpf* skel = nullptr;
  ring_buffer* ring = nullptr;
  const EventSink* current_sink = nullptr;
  ~Impl() {
    if (ring) ring_buffer__free(ring);
    if (skel) iolens_bpf__destroy(skel);
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

std::unique_ptr<Loader> Loader::create(const Options& opts, Status& status) {
  g_verbose = opts.verbose;
  libbpf_set_print(libbpf_log);

  if (status = check_privileges(); !status) return nullptr;
  if (status = check_btf(opts.btf_path); !status) return nullptr;
  if (opts.btf_path != "/sys/kernel/btf/vmlinux") {
    // tp_btf attaches by the running kernel's own BTF; a custom file only helps CO-RE.
    if (status = check_btf("/sys/kernel/btf/vmlinux"); !status) return nullptr;
  }

  // Features the programs cannot do without: say which one is missing instead of a verifier dump.
  if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr) != 1) {
    status = Status::Error("this kernel lacks BPF task-local storage (Linux 5.11+ needed)", ENOTSUP);
    return nullptr;
  }
  if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, nullptr) != 1) {
    status = Status::Error("this kernel lacks the bpf_loop helper (Linux 5.17+ needed)", ENOTSUP);
    return nullptr;
  }

  auto impl = std::make_unique<Impl>();
  LIBBPF_OPTS(bpf_object_open_opts, open_opts);
  if (opts.btf_path != "/sys/kernel/btf/vmlinux") open_opts.btf_custom_path = opts.btf_path.c_str();
  impl->skel = iolens_bpf__open_opts(&open_opts);
  if (!impl->skel) {
    const int e = errno;
    status = Status::Error("cannot open the BPF object: " + errno_text(e), e);
    return nullptr;
  }
  iolens_bpf* skel = impl->skel;
  if (skel->rodata->abi_version != IOLENS_ABI_VERSION) {
    status = Status::Error("BPF object ABI " + std::to_string(skel->rodata->abi_version) +
                           " does not match the agent's ABI " +
                           std::to_string(IOLENS_ABI_VERSION));
    return nullptr;
  }
  bpf_map__set_max_entries(skel->maps.files, opts.max_file_records);
  bpf_map__set_max_entries(skel->maps.others, opts.max_other_records);
  bpf_map__set_max_entries(skel->maps.events, opts.ring_bytes);

  if (int err = iolens_bpf__load(skel); err) {
    std::string msg = "cannot load the BPF programs: " + errno_text(err);
    if (err == -EPERM || err == -EACCES) msg += std::string(" (") + privilege_hint() + ")";
    else msg += " (run with -v for the verifier's log)";
    status = Status::Error(msg, -err);
    return nullptr;
  }

  auto loader = std::unique_ptr<Loader>(new Loader(std::move(impl)));
  loader->max_file_records_ = opts.max_file_records;
  // Attach one by one so that each failure is named; all of these are required for `run`.
  struct {
    const char* name;
    bpf_program* prog;
    bpf_link** link;
  } progs[] = {
      {"sched_process_fork", skel->progs.sched_process_fork, &skel->links.sched_process_fork},
      {"sched_process_exec", skel->progs.sched_process_exec, &skel->links.sched_process_exec},
      {"sched_process_exit", skel->progs.sched_process_exit, &skel->links.sched_process_exit},
      {"sys_enter", skel->progs.sys_enter, &skel->links.sys_enter},
      {"sys_exit", skel->progs.sys_exit, &skel->links.sys_exit},
  };
  for (auto& p : progs) {
    ProgramState ps{p.name, false, ""};
    *p.link = bpf_program__attach(p.prog);
    if (!*p.link) {
      const int e = errno;
      ps.error = errno_text(e);
      loader->programs_.push_back(ps);
      std::string msg = std::string("cannot attach ") + p.name + ": " + ps.error;
      if (e == EPERM || e == EACCES) msg += std::string(" (") + privilege_hint() + ")";
      status = Status::Error(msg, e);
      return nullptr;
    }
    ps.attached = true;
    loader->programs_.push_back(ps);
  }

  loader->impl_->ring = ring_buffer__new(bpf_map__fd(skel->maps.events), ring_callback,
                                         &loader->impl_->current_sink, nullptr);
  if (!loader->impl_->ring) {
    const int e = errno;
    status = Status::Error("cannot set up the ring buffer: " + errno_text(e), e);
    return nullptr;
  }
  status = Status::Ok();
  return loader;
}

Status Loader::trace_process(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    return Status::Error("pidfd_open(" + std::to_string(pid) + "): " + errno_text(e), e);
  }
  iolens_task_state st{};
  const int err = bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.task_state), &pidfd, &st,
                                      BPF_NOEXIST);
  const int e = errno;
  close(pidfd);
  if (err) return Status::Error("cannot mark process " + std::to_string(pid) + " as traced: " +
                                    errno_text(e), e);
  return Status::Ok();
}

int Loader::consume_events(const EventSink& sink) {
  impl_->current_sink = &sink;
  const int n = ring_buffer__consume(impl_->ring);
  impl_->current_sink = nullptr;
  return n;
}

namespace {

/// Every record of a hash map, a batch per syscall (BPF_MAP_LOOKUP_BATCH, Linux 5.6+). Returns
/// false when the kernel cannot do batches, so the caller walks the keys one by one instead.
bool read_batched(int fd, std::vector<iolens_file_key>& keys,
                  std::vector<iolens_file_counters>& values) {
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  __u32 batch = 1024;
  __u32 in = 0, out = 0;  // hash maps' batch token: a bucket index
  bool first = true;
  for (;;) {
    const size_t base = keys.size();
    keys.resize(base + batch);
    values.resize(base + batch);
    __u32 count = batch;
    const int err = bpf_map_lookup_batch(fd, first ? nullptr : &in, &out, keys.data() + base,
                                         values.data() + base, &count, &opts);
    keys.resize(base + count);
    values.resize(base + count);
    if (err == -ENOENT) return true;  // the last batch
    if (err == -ENOSPC && count == 0) {
      batch *= 2;  // one bucket holds more records than a batch
      continue;
    }
    if (err) {
      keys.clear();
      values.clear();
      return false;
    }
    in = out;
    first = false;
  }
}

void read_one_by_one(int fd, std::vector<iolens_file_key>& keys,
                     std::vector<iolens_file_counters>& values) {
  iolens_file_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    iolens_file_counters v{};
    if (bpf_map_lookup_elem(fd, &next, &v) == 0) {
      keys.push_back(next);
      values.push_back(v);
    }
    key = next;
    prev = &key;
  }
}

}  // namespace

void Loader::delete_keys(int map_fd, const std::vector<iolens_file_key>& keys) {
  size_t done = 0;
  if (batch_ok_ && !keys.empty()) {
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    __u32 count = static_cast<__u32>(keys.size());
    if (bpf_map_delete_batch(map_fd, keys.data(), &count, &opts) == 0) return;
    done = count;  // the batch stops at the first failure; finish one by one
  }
  for (size_t i = done; i < keys.size(); ++i) bpf_map_delete_elem(map_fd, &keys[i]);
}

Status Loader::drain(int map_fd, const RemovePredicate& remove, const RecordSink& sink) {
  std::vector<iolens_file_key> keys;
  std::vector<iolens_file_counters> values;
  if (!batch_ok_ || !read_batched(map_fd, keys, values)) {
    batch_ok_ = false;
    read_one_by_one(map_fd, keys, values);
  }
  std::vector<iolens_file_key> final_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& k = keys[i];
    iolens_file_counters value = values[i];
    switch (remove(k, value, keys.size())) {
      case Disposition::Keep:
        sink(k, value, false);
        break;
      case Disposition::RemoveFinal:
        sink(k, value, true);
        final_keys.push_back(k);
        break;
      case Disposition::RemoveLive:
        // Read and delete in one step so no update between the read and the delete is lost.
        if (bpf_map_lookup_and_delete_elem(map_fd, &k, &value) == 0) {
          sink(k, value, true);
        } else if (errno == kErrNotSupp || errno == EINVAL || errno == EOPNOTSUPP) {
          // Kernels before 5.14 cannot lookup-and-delete hash maps: read, then delete.
          if (bpf_map_lookup_elem(map_fd, &k, &value) == 0 && bpf_map_delete_elem(map_fd, &k) == 0)
            sink(k, value, true);
        }
        break;
    }
  }
  delete_keys(map_fd, final_keys);
  return Status::Ok();
}

Status Loader::drain_files(const RemovePredicate& remove, const RecordSink& sink) {
  return drain(bpf_map__fd(impl_->skel->maps.files), remove, sink);
}

Status Loader::drain_others(const RemovePredicate& remove, const RecordSink& sink) {
  return drain(bpf_map__fd(impl_->skel->maps.others), remove, sink);
}

uint64_t Loader::stat(uint32_t index) const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0 || index >= IOLENS_NR_STATS) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  if (bpf_map_lookup_elem(bpf_map__fd(impl_->skel->maps.stats), &index, per_cpu.data()) != 0)
    return 0;
  uint64_t sum = 0;
  for (auto v : per_cpu) sum += v;
  return sum;
}

KernelStats Loader::stats() const {
  KernelStats out{};
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  const int fd = bpf_map__fd(impl_->skel->maps.stats);
  for (uint32_t i = 0; i < IOLENS_NR_STATS; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (auto v : per_cpu) out[i] += v;
  }
  return out;
}

}  // namespace iolens::loader
