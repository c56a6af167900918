// SPDX-License-Identifier: Apache-2.0
// BPF tier, trace mode: one record per traced call through the `trace` ring. A forked child
// performs a known sequence of calls and logs, in memory shared with the test, what each returned;
// every record the kernel produced is checked against that log (TRIGGER, then ASSERT). The child
// waits for the test on memory, not on a system call, so its traced calls are exactly those it
// logs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <bpf/bpf.h>

#include "bpf_test_util.hpp"
#include "loader/loader.hpp"
#include "loader/preflight.hpp"

namespace fs = std::filesystem;
using iolens::loader::Loader;

namespace {

constexpr int kBadFd = 1000;  // not open in the child (checked before the fork)
constexpr size_t kMaxCalls = 128;
constexpr uint64_t kRecordSlot = sizeof(iolens_trace_record) + 8;  // + the ring's record header

/// Which file a call names, as the test knows it.
enum FileRef { kNoFile = 0, kFileA = 1, kFileB = 2 };

/// One call as the child made it: what its record must say.
struct Call {
  uint16_t op;
  uint16_t nr;
  int32_t fd;
  int64_t offset;
  int64_t arg;
  int64_t ret;
  int file;  // FileRef
  uint32_t flags;
};

/// Shared with forked children (MAP_SHARED): gates the test opens without a system call, and
/// the children's logs.
struct Shared {
  std::atomic<int> phase{0};   // raised by the test: the child may run its part `phase`
  std::atomic<int> reached{0}; // raised by a child when it has finished a part
  std::atomic<int> n{0};
  Call calls[kMaxCalls];
  std::atomic<int64_t> value{0};  // a number a child reports (a grandchild's pid, a count)
};

/// The child side: spin (sched_yield is no traced call) until the test opens part `p`.
void wait_phase(Shared* sh, int p) {
  while (sh->phase.load() < p) sched_yield();
}

/// A system call's result as its record has it: -errno for a failure.
int64_t rv(long r) { return r < 0 ? -errno : r; }

void log_call(Shared* sh, const Call& c) {
  const int i = sh->n.fetch_add(1);
  if (i < static_cast<int>(kMaxCalls)) sh->calls[i] = c;
}

/// The kernel's dev_t of a file, as records and map keys carry it (MAJOR << 20 | MINOR).
uint32_t kernel_dev(dev_t d) { return (major(d) << 20) | minor(d); }

struct Identity {
  uint64_t ino = 0;
  uint32_t dev = 0;
  uint32_t gen = 0;
  bool gen_known = false;
};

Identity identity_of(const std::string& path) {
  Identity id;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return id;
  id.ino = st.st_ino;
  id.dev = kernel_dev(st.st_dev);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  int gen = 0;
  if (fd >= 0 && ioctl(fd, FS_IOC_GETVERSION, &gen) == 0) {
    id.gen = static_cast<uint32_t>(gen);
    id.gen_known = true;
  }
  if (fd >= 0) close(fd);
  return id;
}

void make_file(const std::string& p, size_t size) {
  std::string data(size, 'q');
  const int fd = open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, data.data(), data.size()) != static_cast<ssize_t>(size)) std::abort();
  close(fd);
}

/// Paths of the sequence, as C strings made before the fork (the child must not allocate:
/// malloc may call mmap or brk, which would be no traced call, but keep the child minimal).
struct SeqPaths {
  std::string a, a2, b;
};

/*
 * The known sequence: every traced kind, failed calls, a copy. Offsets follow from the calls
 * (A starts empty): writes 0, 4096, 8192 (A is 8292 bytes), pwrite at 1000, pread at 4000,
 * lseek to 100, read of 1000 at 100, lseek to 8200 (end - 92), readv of 92 at 8200 (the end),
 * pwritev of 100 at 20000 (A is 20100), preadv2 at the file position (8292), stats, syncs,
 * ftruncate to 16384, mmap at 4096, dup, a failed dup2 (A still named), B opened write-only,
 * a read of it (EBADF, B named), a read of a bad fd (EBADF, no file), copy_file_range A@0 ->
 * B, sendfile A@8392 -> B@5000, closes (one bad), renames (one failed), unlinks, a failed open.
 */
void io_sequence(Shared* sh, const SeqPaths& p) {
  alignas(64) static char buf[16384];  // aligned: the offsets below make the misaligned ones
  const char* A = p.a.c_str();
  const char* A2 = p.a2.c_str();
  const char* B = p.b.c_str();
  auto L = [sh](uint16_t op, long nr, int fd, int64_t off, int64_t arg, int64_t ret, int file,
                uint32_t flags = 0) {
    log_call(sh, Call{op, static_cast<uint16_t>(nr), fd, off, arg, ret, file, flags});
  };
  // A successful read or write whose buffer (any iov_base) is not 8-byte aligned has
  // IOLENS_TRACE_F_MEM_UNALIGNED (ABI 14): from the addresses passed, not from the program.
  auto U = [](const void* p) -> uint32_t {
    return reinterpret_cast<uintptr_t>(p) % 8 ? IOLENS_TRACE_F_MEM_UNALIGNED : 0;
  };
  long r;
  const int oflags = O_CREAT | O_RDWR | O_TRUNC;
  const int a = static_cast<int>(syscall(SYS_openat, AT_FDCWD, A, oflags, 0644));
  L(IOLENS_OP_OPEN, SYS_openat, a, -1, 0644, rv(a), kFileA);  // O_CREAT: arg is the mode
  r = write(a, buf, 4096);
  L(IOLENS_OP_WRITE, SYS_write, a, 0, 4096, rv(r), kFileA);
  r = write(a, buf, 4096);
  L(IOLENS_OP_WRITE, SYS_write, a, 4096, 4096, rv(r), kFileA);
  r = write(a, buf, 100);
  L(IOLENS_OP_WRITE, SYS_write, a, 8192, 100, rv(r), kFileA);
  r = pwrite(a, buf, 512, 1000);
  L(IOLENS_OP_WRITE, SYS_pwrite64, a, 1000, 512, rv(r), kFileA);
  r = pread(a, buf, 300, 4000);
  L(IOLENS_OP_READ, SYS_pread64, a, 4000, 300, rv(r), kFileA);
  r = lseek(a, 100, SEEK_SET);
  L(IOLENS_OP_SEEK, SYS_lseek, a, 100, SEEK_SET, rv(r), kFileA);
  r = read(a, buf + 1, 1000);
  L(IOLENS_OP_READ, SYS_read, a, 100, 1000, rv(r), kFileA, U(buf + 1));
  r = lseek(a, -92, SEEK_END);
  L(IOLENS_OP_SEEK, SYS_lseek, a, 8200, SEEK_END, rv(r), kFileA);
  struct iovec iov[2] = {{buf, 50}, {buf + 50, 50}};
  const uint32_t iov_flag = U(iov[0].iov_base) | U(iov[1].iov_base);  // the second: buf + 50
  r = readv(a, iov, 2);
  L(IOLENS_OP_READ, SYS_readv, a, 8200, -1, rv(r), kFileA, iov_flag);
  r = pwritev(a, iov, 2, 20000);
  L(IOLENS_OP_WRITE, SYS_pwritev, a, 20000, -1, rv(r), kFileA, iov_flag);
  // (fd, iov, iovcnt, pos_l, pos_h, flags): -1 = at the file position, which readv left at 8292
  r = syscall(SYS_preadv2, a, iov, 2, -1L, -1L, 0);
  L(IOLENS_OP_READ, SYS_preadv2, a, 8292, -1, rv(r), kFileA, iov_flag);
  struct stat st;
  r = syscall(SYS_fstat, a, &st);
  L(IOLENS_OP_STAT, SYS_fstat, a, -1, 0, rv(r), kFileA);
  r = syscall(SYS_newfstatat, a, "", &st, AT_EMPTY_PATH);  // glibc's fstat
  L(IOLENS_OP_STAT, SYS_newfstatat, a, -1, 0, rv(r), kFileA);
  r = syscall(SYS_newfstatat, AT_FDCWD, A, &st, 0);  // glibc's stat
  L(IOLENS_OP_STAT, SYS_newfstatat, -1, -1, 0, rv(r), kFileA);
  r = syscall(SYS_stat, A, &st);
  L(IOLENS_OP_STAT, SYS_stat, -1, -1, 0, rv(r), kFileA);
  struct statx stx;
  r = syscall(SYS_statx, AT_FDCWD, A, 0, STATX_BASIC_STATS, &stx);
  L(IOLENS_OP_STAT, SYS_statx, -1, -1, 0, rv(r), kFileA);
  r = syscall(SYS_lstat, A2, &st);  // no such file: a failed stat names nothing
  L(IOLENS_OP_STAT, SYS_lstat, -1, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  r = fsync(a);
  L(IOLENS_OP_FSYNC, SYS_fsync, a, -1, 0, rv(r), kFileA);
  r = fdatasync(a);
  L(IOLENS_OP_FDATASYNC, SYS_fdatasync, a, -1, 0, rv(r), kFileA);
  r = ftruncate(a, 16384);
  L(IOLENS_OP_TRUNCATE, SYS_ftruncate, a, -1, 0, rv(r), kFileA);
  void* m = mmap(nullptr, 8192, PROT_READ, MAP_SHARED, a, 4096);
  L(IOLENS_OP_MMAP, SYS_mmap, a, -1, 0,
    m == MAP_FAILED ? -errno : static_cast<int64_t>(reinterpret_cast<uintptr_t>(m)), kFileA);
  if (m != MAP_FAILED) munmap(m, 8192);  // munmap is no traced call
  const int d = dup(a);
  L(IOLENS_OP_DUP, SYS_dup, d, -1, d, rv(d), kFileA);
  r = dup2(a, -1);  // EBADF: no new descriptor, but the one duplicated names A
  L(IOLENS_OP_DUP, SYS_dup2, -1, -1, -1, rv(r), kFileA);
  const int b = static_cast<int>(syscall(SYS_open, B, O_WRONLY, 0));
  L(IOLENS_OP_OPEN, SYS_open, b, -1, 0, rv(b), kFileB);
  r = read(b, buf, 10);  // EBADF: write-only, but the descriptor still names B
  L(IOLENS_OP_READ, SYS_read, b, 0, 10, rv(r), kFileB);
  r = read(kBadFd, buf, 10);
  L(IOLENS_OP_READ, SYS_read, kBadFd, -1, 10, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  loff_t off_in = 0;
  r = copy_file_range(a, &off_in, b, nullptr, 5000, 0);
  L(IOLENS_OP_READ, SYS_copy_file_range, a, 0, 5000, rv(r), kFileA, IOLENS_TRACE_F_COPY);
  L(IOLENS_OP_WRITE, SYS_copy_file_range, b, 0, 5000, rv(r), kFileB, IOLENS_TRACE_F_COPY);
  r = sendfile(b, a, nullptr, 100);  // input at A's position (8392), output at B's (5000)
  L(IOLENS_OP_READ, SYS_sendfile, a, 8392, 100, rv(r), kFileA, IOLENS_TRACE_F_COPY);
  L(IOLENS_OP_WRITE, SYS_sendfile, b, 5000, 100, rv(r), kFileB, IOLENS_TRACE_F_COPY);
  r = close(d);
  L(IOLENS_OP_CLOSE, SYS_close, d, -1, 0, rv(r), kFileA);
  r = close(a);
  L(IOLENS_OP_CLOSE, SYS_close, a, -1, 0, rv(r), kFileA);
  r = close(b);
  L(IOLENS_OP_CLOSE, SYS_close, b, -1, 0, rv(r), kFileB);
  r = close(kBadFd);
  L(IOLENS_OP_CLOSE, SYS_close, kBadFd, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  r = syscall(SYS_rename, A, A2);
  L(IOLENS_OP_RENAME, SYS_rename, -1, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  r = syscall(SYS_rename, A, A2);  // ENOENT
  L(IOLENS_OP_RENAME, SYS_rename, -1, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  r = syscall(SYS_unlink, A2);
  L(IOLENS_OP_UNLINK, SYS_unlink, -1, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  r = syscall(SYS_unlinkat, AT_FDCWD, B, 0);
  L(IOLENS_OP_UNLINK, SYS_unlinkat, -1, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
  r = syscall(SYS_openat, AT_FDCWD, A, O_RDONLY, 0);  // ENOENT: renamed away
  L(IOLENS_OP_OPEN, SYS_openat, -1, -1, 0, rv(r), kNoFile, IOLENS_TRACE_F_NOFILE);
}

/// What a sequence run gives: the child's log and everything the loader saw.
struct SeqRun {
  pid_t pid = 0;
  std::vector<Call> calls;
  std::vector<iolens_trace_record> records;  // drained after the child exited, in ring order
};

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto s = iolens::loader::check_privileges(); !s) GTEST_SKIP() << s.message;
    char tmpl[] = "/var/tmp/iolens-trace-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = fs::canonical(tmpl);
    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    sh_ = new (mem) Shared();
    ASSERT_EQ(fcntl(kBadFd, F_GETFD), -1) << "descriptor " << kBadFd << " is open";
  }
  void TearDown() override {
    for (pid_t pid : children_) {  // a test that failed half-way left them waiting
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    loader_.reset();
    if (sh_) munmap(sh_, sizeof(Shared));
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void load() {
    iolens::Status st;
    loader_ = Loader::create(opts_, st);
    ASSERT_NE(loader_, nullptr) << st.message;
  }

  /// Forks a child that waits (on memory) for part 1, then runs `body` and exits. Marked as
  /// traced before it starts when `traced`.
  pid_t spawn(const std::function<void()>& body, bool traced = true) {
    const pid_t pid = fork();
    if (pid == 0) {
      // Neither call is a traced kind. The child keeps none of the test's descriptors (the pin
      // directory's lock would outlive the agent holding it) and dies with the test.
      syscall(SYS_close_range, 3, ~0U, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      wait_phase(sh_, 1);
      body();
      _exit(0);
    }
    EXPECT_GT(pid, 0);
    children_.push_back(pid);
    if (traced) {
      auto s = loader_->trace_process(pid);
      EXPECT_TRUE(s.ok) << s.message;
    }
    return pid;
  }
  void reap(pid_t pid) {
    children_.erase(std::remove(children_.begin(), children_.end(), pid), children_.end());
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  /// Opens part `p` to every child and waits until one reports it done.
  void run_phase(int p) {
    sh_->phase.store(p);
    while (sh_->reached.load() < p) sched_yield();
  }

  std::vector<iolens_trace_record> drain() {
    std::vector<iolens_trace_record> out;
    const int n = loader_->consume_trace([&](const iolens_trace_record& r) { out.push_back(r); });
    EXPECT_EQ(n, static_cast<int>(out.size()));
    return out;
  }
  static std::vector<iolens_trace_record> of(const std::vector<iolens_trace_record>& all,
                                             pid_t pid) {
    std::vector<iolens_trace_record> out;
    for (const auto& r : all)
      if (r.tgid == static_cast<uint32_t>(pid)) out.push_back(r);
    return out;
  }

  /// Runs io_sequence in a traced child with files a.bin and b.bin made in `sub`.
  SeqRun run_sequence(const std::string& sub) {
    SeqRun run;
    fs::create_directories(dir_ / sub);
    paths_ = {path(sub + "/a.bin"), path(sub + "/a2.bin"), path(sub + "/b.bin")};
    make_file(paths_.a, 0);
    make_file(paths_.b, 0);
    ids_[kFileA] = identity_of(paths_.a);
    ids_[kFileB] = identity_of(paths_.b);
    sh_->n.store(0);
    sh_->phase.store(0);
    const SeqPaths p = paths_;
    run.pid = spawn([this, p] { io_sequence(sh_, p); });
    sh_->phase.store(1);
    reap(run.pid);
    const int n = std::min<int>(sh_->n.load(), kMaxCalls);
    run.calls.assign(sh_->calls, sh_->calls + n);
    run.records = drain();
    return run;
  }

  /// Every record of the child against its log, field by field, in order.
  void expect_records_match(const SeqRun& run) {
    const auto recs = of(run.records, run.pid);
    ASSERT_EQ(recs.size(), run.calls.size()) << "records of the child vs calls it made";
    EXPECT_EQ(recs.size(), run.records.size()) << "records of another process";
    uint64_t prev_end = 0;
    for (size_t i = 0; i < recs.size(); ++i) {
      const auto& r = recs[i];
      const auto& c = run.calls[i];
      SCOPED_TRACE("call " + std::to_string(i) + ": op " + std::to_string(c.op) + " nr " +
                   std::to_string(c.nr));
      EXPECT_EQ(r.op, c.op);
      EXPECT_EQ(r.nr, c.nr);
      EXPECT_EQ(r.fd, c.fd);
      EXPECT_EQ(r.ret, c.ret);
      EXPECT_EQ(r.offset, c.offset);
      EXPECT_EQ(r.arg, c.arg);
      EXPECT_EQ(r.flags, c.flags);
      EXPECT_EQ(r.tgid, static_cast<uint32_t>(run.pid));
      EXPECT_EQ(r.tid, static_cast<uint32_t>(run.pid));
      EXPECT_EQ(r.pad, 0u);
      EXPECT_EQ(r.pstart_ns, recs[0].pstart_ns);
      EXPECT_GT(r.pstart_ns, 0u);
      EXPECT_LE(r.pstart_ns, r.start_ns);
      EXPECT_GT(r.start_ns, 0u);
      EXPECT_LE(r.start_ns, r.end_ns);
      // One thread: each call starts after the previous one ended; a copy's two records
      // share their times.
      if (i > 0 && (c.flags & IOLENS_TRACE_F_COPY) && c.op == IOLENS_OP_WRITE) {
        EXPECT_EQ(r.start_ns, recs[i - 1].start_ns);
        EXPECT_EQ(r.end_ns, recs[i - 1].end_ns);
      } else {
        EXPECT_GE(r.start_ns, prev_end);
      }
      prev_end = r.end_ns;
      if (c.file == kNoFile) {
        EXPECT_EQ(r.ino, 0u);
        EXPECT_EQ(r.dev, 0u);
        EXPECT_EQ(r.gen, 0u);
      } else {
        const Identity& id = ids_.at(c.file);
        EXPECT_EQ(r.ino, id.ino);
        EXPECT_EQ(r.dev, id.dev);
        if (id.gen_known) {
          EXPECT_EQ(r.gen, id.gen);
        }
      }
    }
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  iolens::loader::Options opts_;
  std::unique_ptr<Loader> loader_;
  fs::path dir_;
  Shared* sh_ = nullptr;
  std::vector<pid_t> children_;  // spawned, not reaped yet
  SeqPaths paths_;
  std::map<int, Identity> ids_;
};

/// A child's part: open `file`, write `bytes` to it, close it (three records).
void open_write_close(const std::string& file, size_t bytes) {
  static char buf[65536];
  const int fd = open(file.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0 || bytes > sizeof(buf) || write(fd, buf, bytes) != static_cast<ssize_t>(bytes))
    _exit(121);
  close(fd);
}

/// Counters that must not depend on the trace mode (times aside).
void expect_same_counters(const iolens_file_counters& x, const iolens_file_counters& y) {
#define SAME(f) EXPECT_EQ(x.f, y.f) << #f
  SAME(opens); SAME(dups); SAME(reads); SAME(writes); SAME(seeks); SAME(stats); SAME(mmaps);
  SAME(fsyncs); SAME(fdsyncs); SAME(truncates); SAME(closes); SAME(bytes_read);
  SAME(bytes_written); SAME(max_byte_read); SAME(max_byte_written); SAME(seq_reads);
  SAME(consec_reads); SAME(seq_writes); SAME(consec_writes); SAME(rw_switches);
  SAME(last_byte_read); SAME(last_byte_written); SAME(open_fds); SAME(mem_not_aligned);
  SAME(mode);
#undef SAME
  for (int i = 0; i < IOLENS_NR_SIZE_BUCKETS; ++i) {
    EXPECT_EQ(x.size_read[i], y.size_read[i]) << "size_read " << i;
    EXPECT_EQ(x.size_write[i], y.size_write[i]) << "size_write " << i;
  }
  for (int i = 0; i < IOLENS_NR_ALIGN_BUCKETS; ++i)
    EXPECT_EQ(x.offset_lsb[i], y.offset_lsb[i]) << "offset_lsb " << i;
  uint64_t lr[2] = {}, lw[2] = {};
  for (int i = 0; i < IOLENS_NR_LAT_BUCKETS; ++i) {
    lr[0] += x.lat_read[i];
    lr[1] += y.lat_read[i];
    lw[0] += x.lat_write[i];
    lw[1] += y.lat_write[i];
  }
  EXPECT_EQ(lr[0], lr[1]);
  EXPECT_EQ(lw[0], lw[1]);
}

}  // namespace

TEST(TraceOptions, RingSizeIsValidatedWithAClearError) {
  for (uint32_t bad : {0u, 2048u, 5000u, (16u << 20) + 4096u}) {
    iolens::loader::Options o;
    o.trace_ring_bytes = bad;
    iolens::Status st;
    EXPECT_EQ(Loader::create(o, st), nullptr);
    EXPECT_FALSE(st.ok);
    EXPECT_EQ(st.err, EINVAL) << bad;
    EXPECT_NE(st.message.find("trace ring size must be a power of two"), std::string::npos)
        << st.message;
    EXPECT_NE(st.message.find(std::to_string(bad)), std::string::npos) << st.message;
  }
}

TEST_F(TraceTest, ModeAllRecordsEveryCallExactly) {
  load();
  EXPECT_EQ(loader_->trace_mode(), IOLENS_TRACE_OFF);  // off unless asked
  EXPECT_EQ(loader_->trace_ring_size(), 16u << 20);
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  EXPECT_EQ(loader_->trace_mode(), IOLENS_TRACE_ALL);
  const SeqRun run = run_sequence("all");
  ASSERT_EQ(run.calls.size(), 40u);  // the sequence as written (a copy logs two records)
  // The sequence went as planned (the offsets it expects follow from that): exactly the seven
  // calls meant to fail failed, every sized read and write was whole, the vector calls moved
  // what the comment on io_sequence says.
  std::vector<int64_t> failed;
  for (const Call& c : run.calls) {
    if (c.ret < 0) failed.push_back(c.ret);
    if ((c.op == IOLENS_OP_READ || c.op == IOLENS_OP_WRITE) && c.arg > 0 && c.ret >= 0) {
      EXPECT_EQ(c.ret, c.arg) << "nr " << c.nr;
    }
    if (c.nr == SYS_readv) {
      EXPECT_EQ(c.ret, 92);
    }
    if (c.nr == SYS_pwritev || c.nr == SYS_preadv2) {
      EXPECT_EQ(c.ret, 100);
    }
  }
  EXPECT_EQ(failed,
            (std::vector<int64_t>{-ENOENT, -EBADF, -EBADF, -EBADF, -EBADF, -ENOENT, -ENOENT}));
  expect_records_match(run);
  const auto st = loader_->stats();
  EXPECT_EQ(st[IOLENS_STAT_TRACE_RECORDS], run.calls.size());
  EXPECT_EQ(st[IOLENS_STAT_TRACE_LOST], 0u);
  EXPECT_EQ(drain().size(), 0u);  // all were drained
}

/// File A's counters after run_sequence(): what its calls make of them.
void expect_sequence_counts(const iolens_file_counters& a) {
  EXPECT_EQ(a.opens, 2u);  // openat + dup
  EXPECT_EQ(a.reads, 6u);  // pread, read, readv, preadv2, and the input side of both copies
  EXPECT_EQ(a.stats, 5u);
  EXPECT_EQ(a.closes, 2u);
  // read into buf + 1, readv, pwritev and preadv2 (iov[1] at buf + 50); copies have no buffer
  EXPECT_EQ(a.mem_not_aligned, 4u);
  EXPECT_EQ(a.mode, 0644u);  // the openat with O_CREAT
  // The reads and writes of A by their offset's lowest set bit (io_sequence's offsets): not a
  // multiple of 512: 1000, 4000, 100, 8200 (readv), 8292 (preadv2), 8392 (sendfile's read);
  // 4096: 2^12 (bucket 4), 8192: 2^13 (5), 20000 = 2^5 * 625: not 512's either. 0 twice: none.
  uint64_t below_512 = a.offset_lsb[0], all = 0;
  for (int i = 0; i < IOLENS_NR_ALIGN_BUCKETS; ++i) all += a.offset_lsb[i];
  EXPECT_EQ(below_512, 7u);
  EXPECT_EQ(a.offset_lsb[4], 1u);
  EXPECT_EQ(a.offset_lsb[5], 1u);
  EXPECT_EQ(all, 9u);
}

TEST_F(TraceTest, ModeOffRecordsNothingAndCountersDoNotDependOnTheMode) {
  load();
  // The same sequence with the mode off, then on: no record at all, then the same counters.
  const SeqRun off = run_sequence("off");
  EXPECT_EQ(off.records.size(), 0u);
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_RECORDS), 0u);
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_LOST), 0u);
  const std::map<int, Identity> off_ids = ids_;
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  const SeqRun on = run_sequence("on");
  expect_records_match(on);
  // By process and inode: the files of the first run were deleted, their inode numbers reused.
  std::map<std::pair<uint32_t, uint64_t>, iolens_file_counters> rec;
  auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
  ASSERT_TRUE(loader_
                  ->drain_files(keep, [&](const iolens_file_key& k, const iolens_file_counters& c,
                                          bool) { rec[{k.tgid, k.ino}] = c; })
                  .ok);
  const auto off_pid = static_cast<uint32_t>(off.pid), on_pid = static_cast<uint32_t>(on.pid);
  for (int f : {kFileA, kFileB}) {
    SCOPED_TRACE(f == kFileA ? "file A" : "file B");
    ASSERT_TRUE(rec.count({off_pid, off_ids.at(f).ino}));
    ASSERT_TRUE(rec.count({on_pid, ids_.at(f).ino}));
    expect_same_counters(rec[{off_pid, off_ids.at(f).ino}], rec[{on_pid, ids_.at(f).ino}]);
  }
  expect_sequence_counts(rec[{on_pid, ids_.at(kFileA).ino}]);
}

TEST_F(TraceTest, WithoutTraceCallsATraceIsRefusedAndTheCountsAreTheSame) {
  // `iolens run` without --trace: trace mode's code dead in sys_exit, and an agent that asks for
  // a trace anyway is told so instead of getting nothing; the counts do not change. (That the
  // verifier then walks fewer of sys_exit's instructions, the point of it, is e2e_verifier_budget's
  // check: the kernel's own count, with and without --trace.)
  opts_.trace_calls = false;
  load();
  const iolens::Status refused = loader_->set_trace_mode(IOLENS_TRACE_ALL);
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.message.find("trace_calls"), std::string::npos) << refused.message;
  const SeqRun run = run_sequence("no trace code");
  EXPECT_EQ(run.records.size(), 0u);
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_RECORDS), 0u);
  std::map<uint64_t, iolens_file_counters> rec;
  auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
  ASSERT_TRUE(loader_
                  ->drain_files(keep, [&](const iolens_file_key& k, const iolens_file_counters& c,
                                          bool) {
                    if (k.tgid == static_cast<uint32_t>(run.pid)) rec[k.ino] = c;
                  })
                  .ok);
  ASSERT_TRUE(rec.count(ids_.at(kFileA).ino));
  expect_sequence_counts(rec[ids_.at(kFileA).ino]);
}

/// The process's resident set, from the kernel's own count (/proc/self/status).
uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

TEST_F(TraceTest, TheRingIsMappedOnlyWhileATraceRuns) {
  // A mapped ring is twice its size in RSS (libbpf maps its data twice): the daemon maps the
  // trace ring for a capture only (issue 16, item 2). The RSS the kernel reports shows it come
  // and go, and a trace after an unmapped one still records every call.
  load();
  const uint64_t ring = loader_->trace_ring_size();
  EXPECT_EQ(loader_->trace_fd(), -1);
  EXPECT_EQ(loader_->consume_trace([](const iolens_trace_record&) {}), 0);
  const uint64_t before = rss_bytes();
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  EXPECT_GE(loader_->trace_fd(), 0);
  const uint64_t mapped = rss_bytes();
  EXPECT_GE(mapped, before + ring * 2 - ring / 4) << before << " -> " << mapped;
  expect_records_match(run_sequence("first"));
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_OFF).ok);
  EXPECT_GE(loader_->trace_fd(), 0);  // mapped until the trace's last read
  EXPECT_EQ(loader_->consume_trace([](const iolens_trace_record&) {}), 0);
  EXPECT_EQ(loader_->trace_fd(), -1);
  const uint64_t unmapped = rss_bytes();
  EXPECT_LE(unmapped + ring * 2 - ring / 4, mapped) << mapped << " -> " << unmapped;
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  expect_records_match(run_sequence("second"));
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_LOST), 0u);
}

TEST_F(TraceTest, ModeCgroupRecordsOnlyTasksInTheSubtree) {
  const std::string mount = iolens::bpftest::cgroup2_mount();
  ASSERT_FALSE(mount.empty()) << "no cgroup2 mount";
  const std::string cg = mount + "/iolens-trace-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << std::strerror(errno);
  struct RemoveCgroup {  // its tasks have exited by then, whatever failed
    std::string dir;
    ~RemoveCgroup() { rmdir(dir.c_str()); }
  } remove_cgroup{cg};
  load();
  const int cgfd = open(cg.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(cgfd, 0);
  // Refused with a reason: no cgroup, a cgroup with another mode, a directory not of cgroup v2.
  EXPECT_FALSE(loader_->set_trace_mode(IOLENS_TRACE_CGROUP).ok);
  EXPECT_FALSE(loader_->set_trace_mode(IOLENS_TRACE_ALL, cgfd).ok);
  const int tmpfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  auto bad = loader_->set_trace_mode(IOLENS_TRACE_CGROUP, tmpfd);
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.message.find("cgroup v2"), std::string::npos) << bad.message;
  close(tmpfd);
  EXPECT_EQ(loader_->trace_mode(), IOLENS_TRACE_OFF);
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_CGROUP, cgfd).ok);
  close(cgfd);  // the map holds the cgroup

  const std::string in_file = path("in.bin"), out_file = path("out.bin");
  make_file(in_file, 0);
  make_file(out_file, 0);
  const pid_t in = spawn([&] { open_write_close(in_file, 1234); });
  const pid_t out = spawn([&] { open_write_close(out_file, 4321); });
  iolens::bpftest::write_text(cg + "/cgroup.procs", std::to_string(in));
  sh_->phase.store(1);
  reap(in);
  reap(out);
  const auto all = drain();
  const auto recs = of(all, in);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(all.size(), 3u) << "records of a task outside the cgroup";
  const Identity id = identity_of(in_file);
  const uint16_t ops[3] = {IOLENS_OP_OPEN, IOLENS_OP_WRITE, IOLENS_OP_CLOSE};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(recs[i].op, ops[i]);
    EXPECT_EQ(recs[i].ino, id.ino);
    EXPECT_EQ(recs[i].dev, id.dev);
  }
  EXPECT_EQ(recs[1].ret, 1234);
  // The task outside was traced all along: its counters are there, only its records are not.
  uint64_t out_written = 0;
  auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
  loader_->drain_files(keep, [&](const iolens_file_key& k, const iolens_file_counters& c, bool) {
    if (k.tgid == static_cast<uint32_t>(out)) out_written += c.bytes_written;
  });
  EXPECT_EQ(out_written, 4321u);
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_OFF).ok);
}

TEST_F(TraceTest, ModePidsRecordsTheListedProcessAndItsChildrenOnly) {
  load();
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_PIDS).ok);
  const std::string pf = path("p.bin"), gf = path("g.bin"), sf = path("s.bin");
  for (const auto& f : {pf, gf, sf}) make_file(f, 0);
  Shared* sh = sh_;
  const pid_t p = spawn([&] {
    const pid_t g = fork();
    if (g == 0) {
      open_write_close(gf, 200);
      _exit(0);
    }
    sh->value.store(g);
    int st = 0;
    if (g < 0 || waitpid(g, &st, 0) != g) _exit(122);
    open_write_close(pf, 100);
  });
  const pid_t s = spawn([&] { open_write_close(sf, 300); });
  ASSERT_TRUE(loader_->add_trace_pid(static_cast<uint32_t>(p)).ok);
  EXPECT_EQ(loader_->map_entries("trace_pids"), 1);
  sh_->phase.store(1);
  reap(p);
  reap(s);
  const auto g = static_cast<pid_t>(sh_->value.load());
  ASSERT_GT(g, 0);
  const auto all = drain();
  const auto rp = of(all, p), rg = of(all, g);
  EXPECT_EQ(rp.size(), 3u);
  EXPECT_EQ(rg.size(), 3u);
  EXPECT_EQ(of(all, s).size(), 0u) << "a sibling not listed was recorded";
  EXPECT_EQ(all.size(), 6u);
  const Identity pid_file = identity_of(pf), g_file = identity_of(gf);
  for (const auto& r : rp) EXPECT_EQ(r.ino, pid_file.ino);
  for (const auto& r : rg) EXPECT_EQ(r.ino, g_file.ino);
  if (rp.size() == 3 && rg.size() == 3) {
    EXPECT_EQ(rp[1].ret, 100);
    EXPECT_EQ(rg[1].ret, 200);
    EXPECT_GT(rp[0].start_ns, rg[2].end_ns);  // the parent waited for its child
  }
  // Exits took both out of the list.
  EXPECT_EQ(loader_->map_entries("trace_pids"), 0);
  // Not a process: one that has exited, a thread id.
  EXPECT_FALSE(loader_->add_trace_pid(static_cast<uint32_t>(s)).ok);
  EXPECT_FALSE(loader_->add_trace_pid(0).ok);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> stop{false};
  std::thread t([&] {
    tid.store(gettid());
    while (!stop.load()) usleep(1000);
  });
  while (tid.load() == 0) usleep(1000);
  auto thr = loader_->add_trace_pid(static_cast<uint32_t>(tid.load()));
  stop.store(true);
  t.join();
  EXPECT_FALSE(thr.ok);
  EXPECT_NE(thr.message.find("thread"), std::string::npos) << thr.message;
  EXPECT_EQ(loader_->map_entries("trace_pids"), 0);
  // Leaving PIDS empties the list.
  ASSERT_TRUE(loader_->add_trace_pid(static_cast<uint32_t>(getpid())).ok);
  EXPECT_EQ(loader_->map_entries("trace_pids"), 1);
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  EXPECT_EQ(loader_->map_entries("trace_pids"), 0);
}

TEST_F(TraceTest, FullRingCountsEveryLostRecordExactly) {
  opts_.trace_ring_bytes = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));  // the minimum
  load();
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  constexpr int kReads = 200000;
  const std::string f = path("loss.bin");
  make_file(f, 4096);
  Shared* sh = sh_;
  const pid_t pid = spawn([&] {
    char b[1];
    const int fd = open(f.c_str(), O_RDONLY);
    int64_t calls = 1;
    for (int i = 0; i < kReads; ++i, ++calls)
      if (pread(fd, b, 1, i % 4096) != 1) _exit(123);
    close(fd);
    sh->value.store(calls + 1);  // open, the preads, close: as the child counted them
  });
  sh_->phase.store(1);
  reap(pid);  // nothing was drained during the burst
  const auto calls = static_cast<uint64_t>(sh_->value.load());
  ASSERT_EQ(calls, static_cast<uint64_t>(kReads) + 2);
  const auto recs = drain();
  const auto st = loader_->stats();
  EXPECT_EQ(st[IOLENS_STAT_TRACE_RECORDS], calls);
  EXPECT_EQ(st[IOLENS_STAT_TRACE_LOST], calls - recs.size());
  // The ring kept the first records, as many as fit, and lost the rest.
  EXPECT_EQ(recs.size(), loader_->trace_ring_size() / kRecordSlot);
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs[0].op, IOLENS_OP_OPEN);
  for (size_t i = 1; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].op, IOLENS_OP_READ);
    EXPECT_EQ(recs[i].offset, static_cast<int64_t>(i - 1));
    EXPECT_EQ(recs[i].tgid, static_cast<uint32_t>(pid));
  }
}

TEST_F(TraceTest, RingWakesTheAgentOnlyOnceMoreThanHalfFull) {
  opts_.trace_ring_bytes = 64 * 1024;
  load();
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  const uint64_t half_records = opts_.trace_ring_bytes / 2 / kRecordSlot;  // 341
  const std::string f = path("wake.bin");
  make_file(f, 4096);
  Shared* sh = sh_;
  const pid_t pid = spawn([&] {
    char b[1];
    const int fd = open(f.c_str(), O_RDONLY);
    for (uint64_t i = 1; i < half_records - 40; ++i) pread(fd, b, 1, 0);  // under half
    sh->reached.store(1);
    wait_phase(sh, 2);
    for (int i = 0; i < 100; ++i) pread(fd, b, 1, 0);  // over half
    close(fd);
  });
  run_phase(1);
  pollfd pfd{loader_->trace_fd(), POLLIN, 0};
  usleep(50 * 1000);  // a wakeup would have arrived by now
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "woken while the ring was less than half full";
  sh_->phase.store(2);
  reap(pid);
  EXPECT_EQ(poll(&pfd, 1, 2000), 1) << "not woken with the ring more than half full";
  const auto recs = drain();
  EXPECT_EQ(recs.size(), half_records - 40 + 100 + 1);
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_LOST), 0u);
}

namespace {

/// Daemon mode's pins: the trace maps outlive the agent with the other maps.
class TracePinTest : public TraceTest {
 protected:
  void SetUp() override {
    TraceTest::SetUp();
    if (IsSkipped()) return;
    opts_.pin_dir = "/sys/fs/bpf/iolens-trace-test-" + std::to_string(getpid());
  }
  void TearDown() override {
    if (loader_) loader_->unpin_all();
    loader_.reset();
    if (!opts_.pin_dir.empty()) {
      std::error_code ec;
      fs::remove_all(opts_.pin_dir, ec);
    }
    TraceTest::TearDown();
  }
};

}  // namespace

TEST_F(TracePinTest, ARestartedAgentStartsWithTracingOffAndControlsTheResumedPrograms) {
  load();
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  std::string files[4];
  for (int i = 0; i < 4; ++i) {
    files[i] = path("f" + std::to_string(i));
    make_file(files[i], 0);
  }
  Shared* sh = sh_;
  const pid_t pid = spawn([&] {
    for (int part = 1; part <= 4; ++part) {
      wait_phase(sh, part);
      open_write_close(files[part - 1], 10 * part);
      sh->reached.store(part);
    }
  });
  run_phase(1);
  EXPECT_EQ(of(drain(), pid).size(), 3u);
  loader_.reset();  // dies with tracing on; its programs keep running, pinned
  run_phase(2);     // traced into the pinned ring while no agent reads it
  load();
  ASSERT_TRUE(loader_->pin_state().resumed) << loader_->pin_state().discarded;
  EXPECT_EQ(loader_->trace_mode(), IOLENS_TRACE_OFF);
  // The ring is not mapped while no trace runs (a read gives nothing): that the dead agent's
  // records were discarded shows in the trace after phase 4, which holds only its own.
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_RECORDS), 6u);
  run_phase(3);  // the resumed programs read this agent's mode: off
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_RECORDS), 6u);
  ASSERT_TRUE(loader_->set_trace_mode(IOLENS_TRACE_ALL).ok);
  run_phase(4);  // ... and write to the ring this agent drains
  reap(pid);
  const auto all = drain();
  EXPECT_EQ(all.size(), 3u) << "records of phase 2 (the dead agent's) were not discarded";
  const auto recs = of(all, pid);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[1].ret, 40);
  EXPECT_EQ(recs[1].ino, identity_of(files[3]).ino);
  EXPECT_EQ(loader_->stat(IOLENS_STAT_TRACE_RECORDS), 9u);
}

TEST_F(TracePinTest, PinsOfAnotherTraceRingSizeAreDiscarded) {
  load();
  loader_.reset();
  opts_.trace_ring_bytes = 8u << 20;
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded, "map sizes changed (trace ring 16777216 -> 8388608)");
  EXPECT_EQ(loader_->trace_ring_size(), 8u << 20);
}

TEST_F(TracePinTest, PinsOfAbi5AreDiscardedWithAMessage) {
  // What an ABI 5 agent left: its 32-byte meta record (no trace ring) among its maps.
  ASSERT_EQ(mkdir(opts_.pin_dir.c_str(), 0700), 0) << std::strerror(errno);
  const int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "meta", 4, 32, 1, nullptr);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  uint32_t v5[8] = {5, 65536, 8192, 8u << 20, 0, 0, 0, 0};
  const uint32_t zero = 0;
  ASSERT_EQ(bpf_map_update_elem(fd, &zero, v5, BPF_ANY), 0);
  ASSERT_EQ(bpf_obj_pin(fd, (opts_.pin_dir + "/meta").c_str()), 0) << std::strerror(errno);
  close(fd);
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded, "made for ABI 5, this agent has " + std::to_string(IOLENS_ABI_VERSION));
  EXPECT_EQ(loader_->trace_mode(), IOLENS_TRACE_OFF);
}
