// SPDX-License-Identifier: Apache-2.0
// BPF tier, daemon mode: tasks are selected by cgroup v2 subtree (moved in, created in, found
// by the task iterator), by comm at exec, never outside; cgroups are named when created; pinned
// maps and links survive the agent. Each test builds its own cgroups and knows what its children
// did.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/events.hpp"
#include "core/recorder.hpp"
#include "loader/loader.hpp"
#include "loader/preflight.hpp"
#include "bpf_test_util.hpp"

namespace fs = std::filesystem;
using iolens::core::CgroupEvent;
using iolens::core::MarkEvent;
using iolens::bpftest::cgroup2_mount;
using iolens::bpftest::write_text;
using iolens::loader::Loader;

namespace {

uint64_t inode_of(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

/// Writes `n` bytes to a new file: the I/O each child does, known to the test.
void write_bytes(const std::string& p, size_t n) {
  std::string data(n, 'z');
  const int fd = open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, data.data(), data.size()) != static_cast<ssize_t>(n)) _exit(121);
  close(fd);
}

class SelectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto s = iolens::loader::check_privileges(); !s) GTEST_SKIP() << s.message;
    mount_ = cgroup2_mount();
    ASSERT_FALSE(mount_.empty()) << "no cgroup2 mount: daemon mode needs cgroup v2";
    rel_ = "/iolens-select-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(mkdir((mount_ + rel_).c_str(), 0755), 0) << std::strerror(errno);
    char tmpl[] = "/var/tmp/iolens-select-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = fs::canonical(tmpl);
    opts_.select_jobs = true;
  }
  void TearDown() override {
    loader_.reset();
    // A test that failed before its unpin_all() leaves its pins: removing them detaches the
    // programs and frees the maps.
    if (!opts_.pin_dir.empty()) {
      std::error_code pin_ec;
      fs::remove_all(opts_.pin_dir, pin_ec);
    }
    // Children have exited; remove the cgroups deepest first.
    std::vector<std::string> dirs;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(mount_ + rel_, ec);
         it != fs::recursive_directory_iterator(); ++it)
      if (it->is_directory()) dirs.push_back(it->path());
    std::sort(dirs.rbegin(), dirs.rend());
    for (const auto& d : dirs) rmdir(d.c_str());
    if (!mount_.empty()) rmdir((mount_ + rel_).c_str());
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void load() {
    iolens::Status st;
    loader_ = Loader::create(opts_, st);
    ASSERT_NE(loader_, nullptr) << st.message;
  }

  std::string cg(const std::string& sub = "") const { return mount_ + rel_ + sub; }
  uint64_t cg_id(const std::string& sub = "") const { return inode_of(cg(sub)); }

  /// Forks a child that waits for a byte on a pipe, then runs `body`. Returns pid + pipe.
  struct Child {
    pid_t pid;
    int go;
  };
  Child spawn(const std::function<void()>& body) {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[1]);
      char c;
      if (read(p[0], &c, 1) != 1) _exit(120);
      body();
      _exit(0);
    }
    close(p[0]);
    return {pid, p[1]};
  }
  static void finish(Child c) {
    EXPECT_EQ(write(c.go, "g", 1), 1);
    close(c.go);
    int status = 0;
    EXPECT_EQ(waitpid(c.pid, &status, 0), c.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }

  struct Seen {
    std::vector<CgroupEvent> cgroups;
    std::vector<MarkEvent> marks;
    // bytes written per (pid, file path) as the recorder names them
    std::map<std::pair<uint32_t, std::string>, uint64_t> written;
  };
  Seen collect() {
    Seen s;
    iolens::core::Recorder rec(0, static_cast<uint32_t>(getpid()));
    loader_->consume_events([&](std::span<const uint8_t> b) {
      auto r = iolens::core::decode_event(b);
      ASSERT_TRUE(r.ok) << r.error;
      if (r.job) {
        if (auto* c = std::get_if<CgroupEvent>(&*r.job)) s.cgroups.push_back(*c);
        if (auto* m = std::get_if<MarkEvent>(&*r.job)) s.marks.push_back(*m);
        return;
      }
      rec.on_event(r.event);
    });
    auto keep = [](const auto&, const auto&) { return Loader::Disposition::Keep; };
    loader_->drain_files(keep, [&](const auto& k, const auto& c, bool rm) { rec.on_file(k, c, rm); });
    for (const auto& f : rec.snapshot({}).files)
      s.written[{f.pid, f.path}] += f.counters.bytes_written;
    return s;
  }
  static const MarkEvent* mark_of(const Seen& s, pid_t pid) {
    for (const auto& m : s.marks)
      if (m.proc.pid == static_cast<uint32_t>(pid)) return &m;
    return nullptr;
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  iolens::loader::Options opts_;
  std::unique_ptr<Loader> loader_;
  std::string mount_, rel_;
  fs::path dir_;
};

}  // namespace

TEST_F(SelectTest, SyscallHooksWaitUntilAsked) {
  load();
  EXPECT_FALSE(loader_->syscall_hooks());
  std::map<std::string, bool> attached;
  for (const auto& p : loader_->programs()) attached[p.name] = p.attached;
  EXPECT_TRUE(attached["sched_process_fork"]);
  EXPECT_TRUE(attached["cgroup_attach_task"]);
  EXPECT_TRUE(attached["cgroup_mkdir"]);
  EXPECT_FALSE(attached["sys_enter"]);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  EXPECT_TRUE(loader_->syscall_hooks());
  ASSERT_TRUE(loader_->set_syscall_hooks(false).ok);
  EXPECT_FALSE(loader_->syscall_hooks());
}

TEST_F(SelectTest, MovedIntoNestedCgroupCreatedLaterIsTraced) {
  load();
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  // Created after the selection: covered by its ancestor's entry, and named at creation.
  ASSERT_EQ(mkdir(cg("/job/step").c_str(), 0755), -1);  // parent missing: mkdir -p by hand
  ASSERT_EQ(mkdir(cg("/job").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(cg("/job/step").c_str(), 0755), 0);
  // A cgroup v1 hierarchy of a hybrid layout fires the same tracepoint: it must be ignored.
  const std::string v1 = "/sys/fs/cgroup/cpu" + rel_ + "-v1";
  const bool have_v1 = mkdir(v1.c_str(), 0755) == 0;
  const std::string procs = cg("/job/step/cgroup.procs");
  const std::string inside = path("inside.bin");
  Child in = spawn([&] {
    write_text(procs, "0");  // "0": the writing process itself
    write_bytes(inside, 4321);
  });
  Child out = spawn([&] { write_bytes(path("outside.bin"), 999); });
  finish(in);
  finish(out);
  Seen s = collect();

  bool named = false;
  for (const auto& c : s.cgroups)
    if (c.created && c.path == rel_ + "/job/step") {
      named = true;
      EXPECT_EQ(c.id, cg_id("/job/step"));
    }
  EXPECT_TRUE(named) << "no mkdir event for " << rel_ << "/job/step";
  if (have_v1) {
    rmdir(v1.c_str());
    for (const auto& c : s.cgroups) EXPECT_EQ(c.path.find("-v1"), std::string::npos) << c.path;
  }
  const MarkEvent* m = mark_of(s, in.pid);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->reason, static_cast<uint32_t>(IOLENS_MARK_ATTACH));
  EXPECT_EQ(m->cgroup_id, cg_id("/job/step"));
  EXPECT_EQ((s.written[{static_cast<uint32_t>(in.pid), inside}]), 4321u);
  EXPECT_EQ(mark_of(s, out.pid), nullptr);
  for (const auto& [k, v] : s.written) EXPECT_NE(k.first, static_cast<uint32_t>(out.pid)) << k.second;
}

TEST_F(SelectTest, ExcludedSubtreeIsNotTraced) {
  load();
  ASSERT_EQ(mkdir(cg("/system").c_str(), 0755), 0);
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->select_cgroup(cg_id("/system"), IOLENS_CGROUP_EXCLUDE).ok);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  const std::string procs = cg("/system/cgroup.procs");
  Child c = spawn([&] {
    write_text(procs, "0");
    write_bytes(path("excluded.bin"), 100);
  });
  finish(c);
  Seen s = collect();
  EXPECT_EQ(mark_of(s, c.pid), nullptr);
  EXPECT_TRUE(s.written.empty());
}

// issue 21, blinding: users who may create cgroups below a traced one make excluded cgroups by
// the thousand. With one selection map for both kinds, 16,384 exclusions filled it and a
// watched root made later got no entry: its jobs ran untraced. Exclusions have their own map
// now: however full, a traced cgroup's entry is stored and its tasks are traced exactly.
TEST_F(SelectTest, FullExclusionMapNeverTakesATracedCgroupsSlot) {
  load();
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  // Ids of no cgroup (cgroup ids are inode numbers, far below 2^40): exclusions until refused.
  const uint64_t fake = uint64_t{1} << 40;
  uint64_t stored = 0;
  iolens::Status refused;
  while (stored < (uint64_t{1} << 22)) {
    refused = loader_->select_cgroup(fake + stored, IOLENS_CGROUP_EXCLUDE);
    if (!refused) break;
    ++stored;
  }
  ASSERT_FALSE(refused.ok) << "the exclusion map took " << stored << " entries, never full";
  EXPECT_EQ(refused.err, E2BIG) << refused.message;
  EXPECT_GT(stored, 16384u) << "fewer exclusions than the old shared map held";
  EXPECT_EQ(stored, loader_->max_cgroup_exclusions());
  // A watched root that appears now (a new slice, slurmstepd's scope after a restart).
  ASSERT_EQ(mkdir(cg("/root").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(cg("/root/job").c_str(), 0755), 0);
  iolens::Status traced = loader_->select_cgroup(cg_id("/root"), IOLENS_CGROUP_TRACE);
  ASSERT_TRUE(traced.ok) << traced.message;
  // An excluded cgroup made after the map filled: its exclusion cannot be stored, so its tasks
  // are traced (the documented fallback: the daemon counts it and finds them in no job).
  ASSERT_EQ(mkdir(cg("/root/unexcluded").c_str(), 0755), 0);
  EXPECT_EQ(loader_->select_cgroup(cg_id("/root/unexcluded"), IOLENS_CGROUP_EXCLUDE).err, E2BIG);
  const std::string job_procs = cg("/root/job/cgroup.procs");
  const std::string unex_procs = cg("/root/unexcluded/cgroup.procs");
  const std::string job_file = path("job.bin"), unex_file = path("unexcluded.bin");
  Child job = spawn([&] {
    write_text(job_procs, "0");
    write_bytes(job_file, 54321);
  });
  Child unex = spawn([&] {
    write_text(unex_procs, "0");
    write_bytes(unex_file, 12);
  });
  finish(job);
  finish(unex);
  Seen s = collect();
  const MarkEvent* m = mark_of(s, job.pid);
  ASSERT_NE(m, nullptr) << "the job's process was not traced";
  EXPECT_EQ(m->cgroup_id, cg_id("/root/job"));
  EXPECT_EQ((s.written[{static_cast<uint32_t>(job.pid), job_file}]), 54321u);
  EXPECT_NE(mark_of(s, unex.pid), nullptr);
  // A freed slot takes the exclusion; the entry goes with its cgroup (the rmdir program).
  ASSERT_TRUE(loader_->unselect_cgroup(fake).ok);
  ASSERT_TRUE(loader_->select_cgroup(cg_id("/root/unexcluded"), IOLENS_CGROUP_EXCLUDE).ok);
  const uint64_t unex_id = cg_id("/root/unexcluded"), root_id = cg_id("/root");
  auto entries = loader_->selection_entries();
  EXPECT_EQ(entries.excluded.size(), stored);
  EXPECT_EQ(std::count(entries.excluded.begin(), entries.excluded.end(), unex_id), 1);
  EXPECT_EQ(entries.traced, std::vector<uint64_t>{root_id});
  ASSERT_EQ(rmdir(cg("/root/unexcluded").c_str()), 0);
  ASSERT_EQ(rmdir(cg("/root/job").c_str()), 0);
  ASSERT_EQ(rmdir(cg("/root").c_str()), 0);
  entries = loader_->selection_entries();
  EXPECT_EQ(entries.excluded.size(), stored - 1);
  EXPECT_EQ(std::count(entries.excluded.begin(), entries.excluded.end(), unex_id), 0);
  EXPECT_TRUE(entries.traced.empty());
}

// Nearest entry decides across the two maps: an exclusion below a traced cgroup, and a traced
// cgroup below an excluded one.
TEST_F(SelectTest, NearestEntryDecidesAcrossTraceAndExclusionMaps) {
  load();
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  for (const char* d : {"/ex", "/ex/deep", "/ex/in", "/ex/in/deep"})
    ASSERT_EQ(mkdir(cg(d).c_str(), 0755), 0) << d;
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->select_cgroup(cg_id("/ex"), IOLENS_CGROUP_EXCLUDE).ok);
  ASSERT_TRUE(loader_->select_cgroup(cg_id("/ex/in"), IOLENS_CGROUP_TRACE).ok);
  // One entry per cgroup: selecting it the other way moves it.
  ASSERT_TRUE(loader_->select_cgroup(cg_id("/ex/deep"), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->select_cgroup(cg_id("/ex/deep"), IOLENS_CGROUP_EXCLUDE).ok);
  auto entries = loader_->selection_entries();
  EXPECT_EQ(entries.traced.size(), 2u);
  EXPECT_EQ(entries.excluded.size(), 2u);
  const std::string out_procs = cg("/ex/deep/cgroup.procs"), in_procs = cg("/ex/in/deep/cgroup.procs");
  Child out = spawn([&] {
    write_text(out_procs, "0");
    write_bytes(path("out.bin"), 10);
  });
  Child in = spawn([&] {
    write_text(in_procs, "0");
    write_bytes(path("in.bin"), 20);
  });
  finish(out);
  finish(in);
  Seen s = collect();
  EXPECT_EQ(mark_of(s, out.pid), nullptr);
  EXPECT_NE(mark_of(s, in.pid), nullptr);
  EXPECT_EQ((s.written[{static_cast<uint32_t>(in.pid), path("in.bin")}]), 20u);
}

TEST_F(SelectTest, TaskIteratorMarksTasksAlreadyThere) {
  load();
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  const std::string file = path("scanned.bin");
  Child c = spawn([&] { write_bytes(file, 2048); });
  // In the cgroup before it is selected: no attach event can mark it, only the iterator.
  write_text(cg("/cgroup.procs"), std::to_string(c.pid));
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->scan_tasks().ok);
  finish(c);
  Seen s = collect();
  const MarkEvent* m = mark_of(s, c.pid);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->reason, static_cast<uint32_t>(IOLENS_MARK_SCAN));
  EXPECT_EQ((s.written[{static_cast<uint32_t>(c.pid), file}]), 2048u);
}

// The kernel sends a file's name once; iolensd clears that after a fold forgot it, in daemon
// mode by the `forget_names` program (one BPF_PROG_TEST_RUN a slice), else by a lookup and an
// update a name. Either way: a cleared file's name comes again at its next open, a file of
// another generation (the inode number reused) or not in the list does not, and a list longer
// than one run of the program (IOLENS_FORGET_NAMES_MAX) is cleared to its end.
TEST_F(SelectTest, ForgottenNamesAreSentAgainForTheirIncarnationOnly) {
  load();
  ASSERT_TRUE(loader_->forgets_by_program()) << "daemon mode loads forget_names";
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  const std::vector<std::string> files = {path("f0"), path("f1"), path("f2"), path("f3")};
  for (const auto& f : files) write_bytes(f, 10);  // made outside the cgroup: no name yet
  std::vector<uint64_t> ino(files.size());
  for (size_t i = 0; i < files.size(); ++i) ino[i] = inode_of(files[i]);
  const std::string procs = cg("/cgroup.procs");
  // A traced child that opens every file once; returns the files whose name the kernel sent
  // (FILE path events, by inode), with their identity.
  auto open_all = [&] {
    Child c = spawn([&] {
      write_text(procs, "0");
      for (const auto& f : files) {
        const int fd = open(f.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) _exit(123);
        close(fd);
      }
    });
    finish(c);
    std::map<uint64_t, Loader::NameId> named;
    loader_->consume_events([&](std::span<const uint8_t> b) {
      auto r = iolens::core::decode_event(b);
      ASSERT_TRUE(r.ok) << r.error;
      if (r.job) return;
      auto* p = std::get_if<iolens::core::PathEvent>(&r.event);
      // (cgroup.procs, which the child writes, is named too: only the test's files count)
      if (p && p->op == IOLENS_PATH_FILE && std::count(ino.begin(), ino.end(), p->ino))
        named[p->ino] = Loader::NameId{p->ino, p->dev, p->gen};
    });
    return named;
  };
  auto inos = [](const std::map<uint64_t, Loader::NameId>& m) {
    std::vector<uint64_t> v;
    for (const auto& [ino, id] : m) v.push_back(ino);
    return v;
  };

  auto first = open_all();
  ASSERT_EQ(first.size(), files.size()) << "each file named at its first open";
  EXPECT_TRUE(open_all().empty()) << "a name is sent once";

  for (const bool by_program : {true, false}) {
    SCOPED_TRACE(by_program ? "by the program" : "by syscalls");
    // f0 cleared; f1 listed with another generation; f2, f3 not listed.
    Loader::NameId other = first[ino[1]];
    ++other.gen;
    std::vector<Loader::NameId> ids = {first[ino[0]], other};
    loader_->forget_names(ids, by_program);
    EXPECT_EQ(inos(open_all()), std::vector<uint64_t>{ino[0]});
    // More than one run of the program takes: files never seen, then f2 and f3 at the end.
    ids.clear();
    for (uint64_t i = 0; i < IOLENS_FORGET_NAMES_MAX + 100; ++i)
      ids.push_back({(1ull << 40) + i, first[ino[2]].dev, 1});
    ids.push_back(first[ino[2]]);
    ids.push_back(first[ino[3]]);
    loader_->forget_names(ids, by_program);
    EXPECT_EQ(inos(open_all()), (std::vector<uint64_t>{std::min(ino[2], ino[3]),
                                                        std::max(ino[2], ino[3])}));
    // By the program, the program did it all: its by-hand fallback would pass the above too.
    EXPECT_EQ(loader_->names_cleared_by_hand(), 0u);
  }
  EXPECT_TRUE(loader_->forgets_by_program()) << "the kernel ran every slice";
}

TEST_F(SelectTest, ChildCreatedIntoCgroupIsTraced) {
  load();
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  const int cgfd = open(cg().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(cgfd, 0);
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgfd);
  const std::string file = path("cloned.bin");
  const long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    write_bytes(file, 777);
    _exit(0);
  }
  ASSERT_GT(pid, 0) << std::strerror(errno);
  close(cgfd);
  int status = 0;
  ASSERT_EQ(waitpid(static_cast<pid_t>(pid), &status, 0), pid);
  Seen s = collect();
  EXPECT_EQ((s.written[{static_cast<uint32_t>(pid), file}]), 777u);
}

TEST_F(SelectTest, CommRuleTracesAProgramWherever) {
  load();
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  // A copy of cp under a name no other process has: its comm after exec is that name.
  const std::string prog = path("iolens_cpx");
  fs::copy_file("/bin/cp", prog);
  fs::permissions(prog, fs::perms::owner_all);
  ASSERT_TRUE(loader_->select_comm("iolens_cpx").ok);
  write_bytes(path("src.bin"), 5000);
  const std::string dst = path("dst.bin");
  Child c = spawn([&] {
    execl(prog.c_str(), "iolens_cpx", path("src.bin").c_str(), dst.c_str(), nullptr);
    _exit(122);
  });
  finish(c);
  Seen s = collect();
  const MarkEvent* m = mark_of(s, c.pid);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->reason, static_cast<uint32_t>(IOLENS_MARK_COMM));
  EXPECT_EQ((s.written[{static_cast<uint32_t>(c.pid), dst}]), 5000u);
}

TEST_F(SelectTest, PinnedStateOutlivesTheAgent) {
  opts_.pin_dir = "/sys/fs/bpf/iolens-test-" + std::to_string(getpid());
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  const std::string procs = cg("/cgroup.procs");
  const std::string before = path("before.bin"), during = path("during.bin");
  int again[2], halfway[2];
  ASSERT_EQ(pipe(again), 0);
  ASSERT_EQ(pipe(halfway), 0);
  Child c = spawn([&] {
    close(again[1]);
    close(halfway[0]);
    write_text(procs, "0");
    write_bytes(before, 100);
    if (write(halfway[1], "h", 1) != 1) _exit(124);  // the first half is done
    char x;  // the second half runs while no agent exists
    if (read(again[0], &x, 1) != 1) _exit(123);
    write_bytes(during, 200);
  });
  close(again[0]);
  close(halfway[1]);
  ASSERT_EQ(write(c.go, "g", 1), 1);
  close(c.go);
  char h;  // the child's first half done (its events are in the ring), not a sleep
  ASSERT_EQ(read(halfway[0], &h, 1), 1);
  close(halfway[0]);
  // What this agent consumes before it dies, a restarted one can read again from the saved
  // position: the consumer position lives in the pinned ring.
  const uint64_t saved_pos = loader_->ring_consumer_pos();
  int consumed = loader_->consume_events([](std::span<const uint8_t>) {});
  EXPECT_GT(consumed, 0);  // at least the child's mark event
  EXPECT_GT(loader_->ring_consumer_pos(), saved_pos);
  loader_.reset();  // the agent dies without unpinning: programs and maps stay
  EXPECT_TRUE(fs::exists(opts_.pin_dir + "/link_sys_enter"));
  ASSERT_EQ(write(again[1], "g", 1), 1);
  close(again[1]);
  int status = 0;
  ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  load();
  EXPECT_TRUE(loader_->pin_state().resumed) << loader_->pin_state().discarded;
  EXPECT_TRUE(loader_->syscall_hooks());
  EXPECT_FALSE(loader_->rewind_ring(loader_->ring_consumer_pos() + 8).ok);  // never forward
  ASSERT_TRUE(loader_->rewind_ring(saved_pos).ok);
  Seen s = collect();
  const MarkEvent* m = mark_of(s, c.pid);
  ASSERT_NE(m, nullptr) << "the mark consumed before the restart was not replayed";
  EXPECT_EQ((s.written[{static_cast<uint32_t>(c.pid), before}]), 100u);
  EXPECT_EQ((s.written[{static_cast<uint32_t>(c.pid), during}]), 200u);
  loader_->unpin_all();
  loader_.reset();
  EXPECT_FALSE(fs::exists(opts_.pin_dir));
}

namespace {
/// Whether the `files` map pinned in `pin_dir` is preallocated; -1 if there is none.
int pinned_files_preallocated(const std::string& pin_dir) {
  const int fd = bpf_obj_get((pin_dir + "/files").c_str());
  if (fd < 0) return -1;
  bpf_map_info info{};
  __u32 len = sizeof(info);
  const int r = bpf_obj_get_info_by_fd(fd, &info, &len);
  close(fd);
  if (r != 0) return -1;
  return (info.map_flags & BPF_F_NO_PREALLOC) ? 0 : 1;
}
}  // namespace

// iolensd's file records preallocated whole (limits.kernel_file_records_preallocated): the
// counts are the same, a full map still loses what does not fit, and pins made the other way
// are not reused (the kernel would refuse the map) but discarded with the reason.
TEST_F(SelectTest, PreallocatedRecordsCountAndPinsMadeTheOtherWayAreDiscarded) {
  opts_.pin_dir = "/sys/fs/bpf/iolens-test-" + std::to_string(getpid()) + "-prealloc";
  opts_.max_file_records = 16;
  opts_.fast_file_records = 16;
  load();
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 1);
  EXPECT_EQ(loader_->fast_file_records(), 16u);
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_TRACE).ok);
  ASSERT_TRUE(loader_->set_syscall_hooks(true).ok);
  const std::string procs = cg("/cgroup.procs");
  const std::string d = dir_.string();
  constexpr int kFiles = 24;  // into 16 records: the first ones fit, the rest are lost (counted)
  Child c = spawn([&] {
    write_text(procs, "0");
    for (int i = 0; i < kFiles; ++i) write_bytes(d + "/p" + std::to_string(i), 100 + i);
  });
  finish(c);
  const uint64_t lost = loader_->stat(IOLENS_STAT_FILE_RECORDS_LOST);
  Seen s = collect();
  int records = 0;
  for (const auto& [key, bytes] : s.written) records += key.first == static_cast<uint32_t>(c.pid);
  EXPECT_EQ(records, 16) << "the full map did not hold exactly its 16 records";
  // The files written first have their records, exact; none after the first one missing.
  int counted = 0;
  for (int i = 0; i < kFiles; ++i) {
    auto it = s.written.find({static_cast<uint32_t>(c.pid), path("p" + std::to_string(i))});
    if (it == s.written.end()) break;
    EXPECT_EQ(it->second, static_cast<uint64_t>(100 + i)) << i;
    ++counted;
  }
  for (int i = counted; i < kFiles; ++i)
    EXPECT_FALSE(s.written.count({static_cast<uint32_t>(c.pid), path("p" + std::to_string(i))}))
        << i;
  EXPECT_GE(counted, 15);  // the close of cgroup.procs may take one record
  EXPECT_GE(lost, static_cast<uint64_t>(kFiles - counted))
      << "files that found the map full were not counted as lost";
  loader_.reset();  // dies without unpinning

  opts_.fast_file_records = 0;
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded, "file records preallocated -> made on demand");
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 0);
  loader_.reset();

  opts_.fast_file_records = 16;
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded, "file records made on demand -> preallocated");
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 1);
  loader_.reset();
  load();
  EXPECT_TRUE(loader_->pin_state().resumed) << loader_->pin_state().discarded;
  loader_.reset();

  // A daemon whose config does not say (file_records_follow_pins) keeps the pinned kind of map
  // and resumes, either way.
  opts_.file_records_follow_pins = true;
  opts_.fast_file_records = 0;
  load();
  EXPECT_TRUE(loader_->pin_state().resumed) << loader_->pin_state().discarded;
  EXPECT_EQ(loader_->fast_file_records(), 16u);
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 1);
  loader_->unpin_all();
  loader_.reset();
  opts_.file_records_follow_pins = false;
  load();  // no pins: made on demand, as asked
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 0);
  loader_.reset();
  opts_.file_records_follow_pins = true;
  opts_.fast_file_records = 16;
  load();
  EXPECT_TRUE(loader_->pin_state().resumed) << loader_->pin_state().discarded;
  EXPECT_EQ(loader_->fast_file_records(), 0u);
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 0);
  loader_.reset();
  // State discarded for another reason: the new maps are of the kind asked, not the pinned one.
  opts_.max_cgroup_exclusions = 4096;
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded.rfind("map sizes changed", 0), 0u)
      << loader_->pin_state().discarded;
  EXPECT_EQ(loader_->fast_file_records(), 16u);
  EXPECT_EQ(pinned_files_preallocated(opts_.pin_dir), 1);
  loader_->unpin_all();
  loader_.reset();
  EXPECT_FALSE(fs::exists(opts_.pin_dir));
}

// The block records map is pinned but has no meta field: its pinned size is compared (libbpf
// would refuse to reuse a map of another size, failing the start). The in-flight maps are not
// pinned: another size resumes.
TEST_F(SelectTest, PinsOfAnotherBlockRecordsSizeAreDiscardedInflightSizesResume) {
  opts_.pin_dir = "/sys/fs/bpf/iolens-test-" + std::to_string(getpid()) + "-blk";
  opts_.max_block_records = 1024;
  load();
  loader_.reset();
  opts_.max_inflight = 64;
  load();
  EXPECT_TRUE(loader_->pin_state().resumed) << loader_->pin_state().discarded;
  loader_.reset();
  opts_.max_block_records = 2048;
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded, "map sizes changed (block records 1024 -> 2048)");
  loader_->unpin_all();
  loader_.reset();
  EXPECT_FALSE(fs::exists(opts_.pin_dir));
}

// What daemon mode pins is ABI: the exclusion map's size is in the pin meta, and pins of ABI 7,
// whose one selection map held exclusions too, are not reused.
TEST_F(SelectTest, PinsOfAnotherExclusionSizeOrOfAbi7AreDiscarded) {
  opts_.pin_dir = "/sys/fs/bpf/iolens-test-" + std::to_string(getpid()) + "-excl";
  opts_.max_cgroup_exclusions = 4096;
  load();
  ASSERT_TRUE(loader_->select_cgroup(cg_id(), IOLENS_CGROUP_EXCLUDE).ok);
  loader_.reset();
  opts_.max_cgroup_exclusions = 8192;
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded, "map sizes changed (cgroup exclusions 4096 -> 8192)");
  EXPECT_TRUE(loader_->selection_entries().excluded.empty());
  loader_->unpin_all();
  loader_.reset();

  // An ABI 7 agent's pins: its 40-byte meta and a cgroup_sel holding an exclusion.
  ASSERT_EQ(mkdir(opts_.pin_dir.c_str(), 0700), 0) << std::strerror(errno);
  const int meta = bpf_map_create(BPF_MAP_TYPE_ARRAY, "meta", 4, 40, 1, nullptr);
  ASSERT_GE(meta, 0) << std::strerror(errno);
  uint32_t v7[10] = {7, 65536, 8192, 16u << 20, 0, 0, 0, 0, 16u << 20, 0};
  const uint32_t zero = 0;
  ASSERT_EQ(bpf_map_update_elem(meta, &zero, v7, BPF_ANY), 0);
  ASSERT_EQ(bpf_obj_pin(meta, (opts_.pin_dir + "/meta").c_str()), 0) << std::strerror(errno);
  close(meta);
  const int sel = bpf_map_create(BPF_MAP_TYPE_HASH, "cgroup_sel", 8, 4, 16384, nullptr);
  ASSERT_GE(sel, 0) << std::strerror(errno);
  const uint64_t id = cg_id();
  const uint32_t exclude = IOLENS_CGROUP_EXCLUDE;
  ASSERT_EQ(bpf_map_update_elem(sel, &id, &exclude, BPF_ANY), 0);
  ASSERT_EQ(bpf_obj_pin(sel, (opts_.pin_dir + "/cgroup_sel").c_str()), 0) << std::strerror(errno);
  close(sel);
  load();
  EXPECT_FALSE(loader_->pin_state().resumed);
  EXPECT_EQ(loader_->pin_state().discarded,
            "made for ABI 7, this agent has " + std::to_string(IOLENS_ABI_VERSION));
  const auto entries = loader_->selection_entries();
  EXPECT_TRUE(entries.traced.empty());
  EXPECT_TRUE(entries.excluded.empty());
  loader_->unpin_all();
  loader_.reset();
  EXPECT_FALSE(fs::exists(opts_.pin_dir));
}
