// SPDX-License-Identifier: Apache-2.0
// The daemon's job table, fed synthetic kernel events: which cgroups the kernel must trace or
// exclude, which process lands in which job, when a job closes, what its record holds.
#include <gtest/gtest.h>

#include "daemon/job_metrics.hpp"
#include "daemon/job_table.hpp"
#include "daemon_test_util.hpp"
#include "iolens_abi.h"

using namespace iolens;
using daemon::JobState;
using daemon::JobTable;

namespace {

jobs::Rule kube_rule() {
  jobs::Rule r;
  r.kind = jobs::RuleKind::Kubernetes;
  r.name = "kubernetes";
  r.roots = {"/kubepods.slice"};
  return r;
}

jobs::Rule cgroup_rule(const std::string& glob) {
  jobs::Rule r;
  r.kind = jobs::RuleKind::Cgroup;
  r.name = "dl";
  r.globs = {glob};
  r.roots = {"/dl"};
  return r;
}

const std::string kPod = "/kubepods.slice/kubepods-burstable.slice/"
                         "kubepods-burstable-pod0f3e9a7c_1d2b_4c5d_8e9f_0a1b2c3d4e5f.slice";
const std::string kCtr = kPod + "/cri-containerd-" + std::string(64, 'a') + ".scope";

using testing_util::key;
using testing_util::mark;

core::FileCounters written(uint64_t bytes) {
  core::FileCounters c = core::new_counters();
  c.opens = 1;
  c.closes = 1;
  c.writes = 1;
  c.bytes_written = bytes;
  c.max_byte_written = static_cast<int64_t>(bytes) - 1;
  return c;
}

class JobTableTest : public ::testing::Test {
 protected:
  JobTable make(std::vector<jobs::Rule> rules, jobs::Limits limits = {}) {
    return JobTable(jobs::Selector(std::move(rules)), limits, 1'000'000'000);
  }
  /// One pod job (a container below it) with processes 100 and 101.
  JobTable pod_of_two() {
    auto t = make({kube_rule()});
    t.on_cgroup(1, "/kubepods.slice", false, 0);
    t.on_cgroup(3, kPod, true, 10);
    t.on_cgroup(5, kCtr, true, 20);
    t.on_mark(mark(100, 5));
    t.on_mark(mark(101, 5));
    return t;
  }
};

}  // namespace

TEST_F(JobTableTest, RootsAreTracedJobsOpenAtCreationSiblingsExcluded) {
  auto t = make({kube_rule()});
  auto root = t.on_cgroup(1, "/kubepods.slice", false, 0);
  ASSERT_EQ(root.size(), 1u);
  EXPECT_EQ(root[0].action, static_cast<uint32_t>(IOLENS_CGROUP_TRACE));
  EXPECT_TRUE(t.on_cgroup(2, "/kubepods.slice/kubepods-burstable.slice", true, 5).empty());
  EXPECT_TRUE(t.on_cgroup(3, kPod, true, 500).empty());  // traced through its ancestor
  ASSERT_EQ(t.jobs().size(), 1u);
  const auto& job = *t.jobs().begin()->second;
  EXPECT_EQ(job.identity.id, "k8s/0f3e9a7c-1d2b-4c5d-8e9f-0a1b2c3d4e5f");
  EXPECT_EQ(job.cgroup_id, 3u);
  EXPECT_EQ(job.start_ns, 1'000'000'500);  // creation time, on the wall clock
  // Not a pod: nothing can be a job below it, so the kernel must not trace its tasks.
  auto other = t.on_cgroup(4, "/kubepods.slice/not-a-pod", true, 6);
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0].action, static_cast<uint32_t>(IOLENS_CGROUP_EXCLUDE));
  EXPECT_EQ(t.active_jobs(), 1u);
}

// issue 21, blinding: a user who may create cgroups in an excluded subtree (a delegated user
// slice) must not be able to fill the kernel's exclusion map from there. Only the top of an
// excluded subtree gets an entry; the kernel's nearest-ancestor rule covers the rest.
TEST_F(JobTableTest, OnlyTheTopOfAnExcludedSubtreeGetsAnExclusion) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  auto top = t.on_cgroup(2, "/kubepods.slice/user.slice", true, 1);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].action, static_cast<uint32_t>(IOLENS_CGROUP_EXCLUDE));
  for (uint64_t i = 0; i < 100; ++i) {
    const std::string p = "/kubepods.slice/user.slice/u" + std::to_string(i);
    EXPECT_TRUE(t.on_cgroup(10 + i, p, true, 2).empty()) << p;
    EXPECT_TRUE(t.on_cgroup(1000 + i, p + "/deeper", true, 2).empty()) << p;
  }
  // Outside every root nothing is traced: no entry either.
  EXPECT_TRUE(t.on_cgroup(5000, "/system.slice", true, 3).empty());
  EXPECT_TRUE(t.on_cgroup(5001, "/system.slice/a.service", true, 3).empty());
  // A job in a container below the root is still traced through the root's entry.
  EXPECT_TRUE(t.on_cgroup(3, "/kubepods.slice/kubepods-burstable.slice", true, 4).empty());
  EXPECT_TRUE(t.on_cgroup(4, kPod, true, 5).empty());
  EXPECT_EQ(t.jobs().size(), 1u);
}

TEST_F(JobTableTest, ProcessesOfNestedCgroupsBelongToTheJobWithTheirContainer) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtr, true, 20);
  ASSERT_TRUE(t.on_mark(mark(100, 5)));
  core::ForkEvent f{{101, 1010}, {100, 1000}, 30, "python3", 5};
  t.on_event(f);
  EXPECT_TRUE(t.attributed({100, 1000}));
  EXPECT_TRUE(t.attributed({101, 1010}));
  t.on_file(key(100, 1), written(4096), false);
  t.on_file(key(101, 2), written(100), false);
  const auto& job = *t.jobs().begin()->second;
  EXPECT_EQ(job.procs.size(), 2u);
  auto rec = t.job_json(job, "test");
  EXPECT_EQ(rec["schema"], "iolens.job/1");
  EXPECT_EQ(rec["job"]["totals"]["bytes_written"], 4196u);
  EXPECT_EQ(rec["job"]["labels"]["qos_class"], "burstable");
  ASSERT_EQ(rec["processes"].size(), 2u);
  for (const auto& p : rec["processes"])
    EXPECT_EQ(p["labels"]["container_id"], std::string(64, 'a')) << p.dump();
}

TEST_F(JobTableTest, OutsideProcessesAndTheirRecordsAreCountedNotKept) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  // A process directly in the root: traced by the kernel, but in no job.
  EXPECT_FALSE(t.on_mark(mark(200, 1)));
  EXPECT_FALSE(t.attributed({200, 2000}));
  t.on_file(key(200, 9), written(10), false);  // a read, not yet a discard: not counted
  EXPECT_EQ(t.stats().unattributed_records, 0u);
  t.on_file(key(200, 9), written(10), true);  // discarded by the drain: counted
  EXPECT_EQ(t.stats().unattributed_processes, 1u);
  EXPECT_EQ(t.stats().unattributed_records, 1u);
  EXPECT_TRUE(t.jobs().empty());
}

TEST_F(JobTableTest, JobClosesWhenItsOwnCgroupGoesNotASubCgroup) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtr, true, 20);
  t.on_mark(mark(100, 5));
  t.on_event(core::ExitEvent{{100, 1000}, 40, 0});
  t.on_cgroup_removed(5, 50);  // the container goes; the pod stays
  EXPECT_TRUE(t.closing().empty());
  t.on_cgroup_removed(3, 60);
  ASSERT_EQ(t.closing().size(), 1u);
  auto job = t.take(t.closing()[0]);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->end_ns, 1'000'000'060);
  EXPECT_EQ(job->state, JobState::Closed);
  EXPECT_TRUE(t.jobs().empty());
  EXPECT_FALSE(t.attributed({100, 1000}));
  EXPECT_EQ(t.stats().jobs_closed, 1u);
}

TEST_F(JobTableTest, ACgroupNobodyNamedIsResolvedOnDemand) {
  auto t = make({cgroup_rule("/dl/*")});
  t.on_cgroup(1, "/dl", false, 0);
  int asked = 0;
  t.set_cgroup_resolver([&](uint64_t id) -> std::optional<std::string> {
    ++asked;
    if (id == 77) return std::string("/dl/job-a");
    return std::nullopt;
  });
  EXPECT_TRUE(t.on_mark(mark(300, 77)));
  EXPECT_EQ(asked, 1);
  ASSERT_NE(t.find("cgroup/dl/job-a"), nullptr);
  EXPECT_FALSE(t.on_mark(mark(301, 78)));
  EXPECT_EQ(t.stats().unknown_cgroups, 1u);
}

TEST_F(JobTableTest, ProcessRuleJobClosesWithItsLastProcess) {
  auto t = make({});
  core::MarkEvent m = mark(400, 1);
  m.reason = IOLENS_MARK_COMM;
  t.add_process_job(m, "trainers");
  t.on_event(core::ForkEvent{{401, 4010}, {400, 4000}, 1100, "python3", 1});
  ASSERT_EQ(t.jobs().size(), 1u);
  const std::string id = t.jobs().begin()->first;
  EXPECT_EQ(id, "process/trainers/400-4000");
  t.on_event(core::ExitEvent{{400, 4000}, 1200, 0});
  EXPECT_TRUE(t.closing().empty());  // a child is still running
  t.on_event(core::ExitEvent{{401, 4010}, 1300, 0});
  ASSERT_EQ(t.closing().size(), 1u);
  EXPECT_EQ(t.find(id)->end_ns, 1'000'001'300);
}

TEST_F(JobTableTest, LimitsFoldFinalRecordsAndKeepTotals) {
  jobs::Limits limits;
  limits.max_files_per_job = 100;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/big", true, 0);
  t.on_mark(mark(500, 2));
  uint64_t total = 0;
  for (uint64_t i = 1; i <= 1000; ++i) {
    t.on_file(key(500, i), written(i), true);  // final: out of the kernel
    total += i;
  }
  EXPECT_GT(t.enforce_limits(), 0u);
  EXPECT_LE(t.file_records(), 100u);
  const auto& job = *t.find("cgroup/dl/big");
  auto rec = t.job_json(job, "test");
  EXPECT_EQ(rec["job"]["totals"]["bytes_written"], total);
  EXPECT_EQ(rec["job"]["files"], 1000u);
  EXPECT_GT(rec["job"]["folded_files"].get<uint64_t>(), 0u);
  EXPECT_EQ(t.stats().folded_records, rec["job"]["folded_files"].get<uint64_t>());
}

TEST_F(JobTableTest, WithinARoundFileRecordsFoldNeverProcesses) {
  // A drain folds as soon as a piece leaves names or records over twice their bounds, before
  // its round ends: then it must fold only file records (out of the kernel), by bytes and by
  // count. A process that exited may still have records in the part of the map not walked
  // yet: processes fold only at the round's end.
  jobs::Limits limits;
  limits.max_files_per_job = 10;
  limits.max_processes_per_job = 2;
  limits.max_path_bytes_per_job = 64 << 10;
  limits.max_path_bytes = 1 << 20;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_mark(mark(500, 2));
  // Three exited processes (over max_processes_per_job), each with a record out of the kernel.
  for (uint32_t pid = 600; pid < 603; ++pid) {
    t.on_event(core::ForkEvent{{pid, pid * 10ull}, {500, 5000}, 1100, "worker", 1});
    t.on_file(key(pid, pid), written(1), true);
    t.on_event(core::ExitEvent{{pid, pid * 10ull}, 1200, 0});
  }
  // 40 files of process 500 with 2 KB paths (and their path index entries): over 64 KiB.
  EXPECT_FALSE(t.names_over_limits());
  for (uint64_t i = 1; i <= 40; ++i) {
    core::PathEvent n;
    n.proc = {500, 5000};
    n.op = IOLENS_PATH_FILE;
    n.dev = key(500, i).dev;
    n.ino = i;
    n.gen = key(500, i).gen;
    n.walk = "f" + std::to_string(i) + '\0' + std::string(2000, 'p') + '\0';
    t.on_event(n);
    t.on_file(key(500, i), written(i), true);
  }
  EXPECT_TRUE(t.names_over_limits());
  EXPECT_TRUE(t.names_over_limits(2));  // ~160 KB of names (paths and index): over twice 64 KiB
  EXPECT_FALSE(t.names_over_limits(3));
  EXPECT_TRUE(t.records_over_limits(3));  // 43 file records: over three times 10
  EXPECT_FALSE(t.records_over_limits(5));
  const daemon::Job& job = *t.find("cgroup/dl/a");
  ASSERT_EQ(job.rec->processes(), 4u);
  EXPECT_GT(t.enforce_limits(nullptr, true), 0u);
  EXPECT_FALSE(t.names_over_limits());
  EXPECT_EQ(job.rec->processes(), 4u);    // no process folded within a round
  EXPECT_LE(job.rec->file_records(), 10u);  // by count too
  EXPECT_FALSE(t.records_over_limits());
  EXPECT_TRUE(t.attributed({601, 6010}));
  // The round's end folds the rest.
  t.enforce_limits();
  EXPECT_LE(job.rec->file_records(), 10u);
  EXPECT_LT(job.rec->processes(), 4u);
  auto rec = t.job_json(job, "test");
  uint64_t total = 3;  // the workers' bytes
  for (uint64_t i = 1; i <= 40; ++i) total += i;
  EXPECT_EQ(rec["job"]["totals"]["bytes_written"], total);
}

TEST_F(JobTableTest, WithinARoundTheNodeWideShareFoldsFileRecordsNotProcesses) {
  // Two jobs over max_records together (each under its own limit): within a round their file
  // records fold to their shares, and none of their exited processes (over
  // max_processes_per_job) folds before the round's end.
  jobs::Limits limits;
  limits.max_files_per_job = 1000;
  limits.max_records = 40;
  limits.max_processes_per_job = 1;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_cgroup(3, "/dl/b", true, 0);
  uint64_t total = 0;
  for (uint32_t leader : {500u, 700u}) {
    t.on_mark(mark(leader, leader == 500 ? 2 : 3));
    for (uint32_t pid = leader + 1; pid <= leader + 3; ++pid) {  // three exited workers each
      t.on_event(core::ForkEvent{{pid, pid * 10ull}, {leader, leader * 10ull}, 1100, "w", 1});
      for (uint64_t i = 1; i <= 20; ++i) {
        t.on_file(key(pid, pid * 100 + i), written(i), true);
        total += i;
      }
      t.on_event(core::ExitEvent{{pid, pid * 10ull}, 1200, 0});
    }
  }
  const daemon::Job& a = *t.find("cgroup/dl/a");
  const daemon::Job& b = *t.find("cgroup/dl/b");
  ASSERT_EQ(a.rec->processes() + b.rec->processes(), 8u);
  EXPECT_TRUE(t.records_over_limits());
  EXPECT_GT(t.enforce_limits(nullptr, true), 0u);
  EXPECT_LE(t.file_records(), 40u);
  EXPECT_EQ(a.rec->processes() + b.rec->processes(), 8u);  // no process folded within a round
  EXPECT_EQ(t.stats().folded_processes, 0u);
  // The round's end folds the processes; the bytes stay the workers' own.
  t.enforce_limits();
  EXPECT_GT(t.stats().folded_processes, 0u);
  uint64_t written_total = 0;
  for (const daemon::Job* j : {&a, &b})
    written_total += t.job_json(*j, "test")["job"]["totals"]["bytes_written"].get<uint64_t>();
  EXPECT_EQ(written_total, total);
}

TEST_F(JobTableTest, FoldedFileIdsBoundedByFoldingExitedWorkers) {
  // A DataLoader over many files with workers re-forked every epoch: each folded (process,
  // file) pair keeps its file's id (so file counts stay exact), 16 bytes, so a job over a
  // million files grew by a million ids an epoch. Past max_folded_files_per_job the exited
  // workers fold (earliest exit first) into "<other processes>"; a running one never does.
  // Totals, processes and (process, file) pairs stay those the test made.
  jobs::Limits limits;
  limits.max_files_per_job = 10;
  limits.max_folded_files_per_job = 250;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_mark(mark(500, 2));
  const daemon::Job& job = *t.find("cgroup/dl/a");
  uint64_t bytes = 0, pairs = 0;
  auto epoch = [&](uint32_t first_pid, bool exit) {
    for (uint32_t pid = first_pid; pid < first_pid + 4; ++pid) {
      t.on_event(core::ForkEvent{{pid, pid * 10ull}, {500, 5000}, 1100 + pid, "worker", 1});
      for (uint64_t i = 1; i <= 100; ++i) {  // the same 100 files every epoch, final
        t.on_file(key(pid, i), written(i), true);
        bytes += i;
        ++pairs;
      }
      if (exit) t.on_event(core::ExitEvent{{pid, pid * 10ull}, 2000 + pid, 0});
      t.enforce_limits();  // the end of a drain round
    }
  };
  epoch(600, true);
  // 400 pairs: the first workers folded as soon as the ids passed 250, down to 225 or fewer.
  EXPECT_LE(job.rec->folded_file_ids(), 250u);
  EXPECT_GT(job.rec->folded_processes(), 0u);
  EXPECT_FALSE(t.attributed({600, 6000}));  // the earliest exit went first
  EXPECT_TRUE(t.attributed({603, 6030}));
  EXPECT_TRUE(t.attributed({602, 6020}));  // and only until the ids fit
  EXPECT_GT(job.rec->folded_file_ids(), 150u);
  epoch(700, false);  // four running workers: never folded, whatever their ids
  EXPECT_EQ(job.rec->folded_processes(), 4u);
  for (uint32_t pid = 700; pid < 704; ++pid) EXPECT_TRUE(t.attributed({pid, pid * 10ull})) << pid;
  EXPECT_GT(job.rec->folded_file_ids(), 250u);
  for (uint32_t pid = 700; pid < 704; ++pid)
    t.on_event(core::ExitEvent{{pid, pid * 10ull}, 3000 + pid, 0});
  t.enforce_limits();
  EXPECT_LE(job.rec->folded_file_ids(), 225u);
  auto rec = t.job_json(job, "test");
  EXPECT_EQ(rec["job"]["totals"]["bytes_written"].get<uint64_t>(), bytes);
  EXPECT_EQ(rec["job"]["totals"]["opens"].get<uint64_t>(), pairs);
  EXPECT_EQ(rec["job"]["files"].get<uint64_t>(), pairs);  // (process, file) pairs, exact
  EXPECT_EQ(rec["job"]["processes"].get<uint64_t>(), 9u);  // the parent and eight workers
  EXPECT_EQ(rec["job"]["folded_processes"].get<uint64_t>(), t.stats().folded_processes);
  EXPECT_GT(t.stats().folded_processes, 4u);  // the second epoch's earliest too
}

namespace {

using testing_util::name_event;

/// The inodes of a job record's file rows.
std::set<uint64_t> inodes_of(const nlohmann::json& rec) {
  std::set<uint64_t> out;
  for (const auto& f : rec["files"]) out.insert(f["ino"].get<uint64_t>());
  return out;
}

}  // namespace

TEST_F(JobTableTest, TheNodeWideRecordBudgetFoldsTheBigJobToItsShareAndSparesTheSmallOne) {
  // docs/daemon-config.md `limits.max_records`: over the node-wide budget the biggest jobs
  // fold, each to its share (max_records / jobs). A job under its share is not touched.
  jobs::Limits limits;
  limits.max_records = 40;  // share 20 for two jobs; each far under max_files_per_job
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/big", true, 0);
  t.on_cgroup(3, "/dl/small", true, 0);
  t.on_mark(mark(500, 2));
  t.on_mark(mark(700, 3));
  uint64_t big_total = 0, small_total = 0;
  for (uint64_t i = 1; i <= 100; ++i) {
    t.on_file(key(500, i), written(i), true);  // final: out of the kernel, foldable
    big_total += i;
  }
  for (uint64_t i = 1; i <= 10; ++i) {
    t.on_file(key(700, 1000 + i), written(1000 + i), true);
    small_total += 1000 + i;
  }
  ASSERT_FALSE(t.records_over_limits(3));  // 110 records: over the budget, under thrice it
  ASSERT_TRUE(t.records_over_limits());
  const daemon::Job& big = *t.find("cgroup/dl/big");
  const daemon::Job& small = *t.find("cgroup/dl/small");
  // The big job folds to 9/10 of its share (fold_to's hysteresis: 18 records), which brings
  // the total (28) under the budget: the small job keeps all 10.
  EXPECT_EQ(t.enforce_limits(), 82u);
  EXPECT_EQ(big.rec->file_records(), 18u);
  EXPECT_EQ(small.rec->file_records(), 10u);
  EXPECT_FALSE(t.records_over_limits());
  EXPECT_EQ(t.stats().folded_records, 82u);
  const auto b = t.job_json(big, "test");
  EXPECT_EQ(b["job"]["files"], 100u);
  EXPECT_EQ(b["job"]["folded_files"], 82u);
  EXPECT_EQ(b["job"]["totals"]["bytes_written"], big_total);
  EXPECT_EQ(b["job"]["totals"]["writes"], 100u);
  // Least useful first (fewest bytes): the 18 files written most are the rows kept.
  std::set<uint64_t> most;
  for (uint64_t i = 83; i <= 100; ++i) most.insert(i);
  EXPECT_EQ(inodes_of(b), most);
  const auto s = t.job_json(small, "test");
  EXPECT_EQ(s["job"]["files"], 10u);
  EXPECT_EQ(s["job"]["folded_files"], 0u);
  EXPECT_EQ(s["job"]["totals"]["bytes_written"], small_total);
  EXPECT_EQ(s["files"].size(), 10u);
}

TEST_F(JobTableTest, TheNodeWideRecordBudgetFoldsTheBiggestJobsFirst) {
  // Three jobs over max_records 60 (share 20), each over its share. Biggest first: c (50) and
  // b (30) fold to 18 each, and then the total (58) fits, so a (22) keeps every record. Their
  // ids sort the other way round: the table's order would have folded a first.
  jobs::Limits limits;
  limits.max_records = 60;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  const std::vector<std::pair<std::string, uint64_t>> sizes = {{"a", 22}, {"b", 30}, {"c", 50}};
  std::map<std::string, uint64_t> total;
  uint32_t pid = 500;
  for (const auto& [name, n] : sizes) {
    t.on_cgroup(pid, "/dl/" + name, true, 0);
    t.on_mark(mark(pid, pid));
    for (uint64_t i = 1; i <= n; ++i) {
      t.on_file(key(pid, i), written(i), true);
      total[name] += i;
    }
    pid += 100;
  }
  ASSERT_EQ(t.file_records(), 102u);
  EXPECT_EQ(t.enforce_limits(), (50u - 18) + (30 - 18));
  EXPECT_EQ(t.file_records(), 58u);
  EXPECT_EQ(t.stats().folded_records, 44u);
  const std::map<std::string, uint64_t> kept = {{"a", 22}, {"b", 18}, {"c", 18}};
  for (const auto& [name, n] : sizes) {
    SCOPED_TRACE(name);
    const daemon::Job& job = *t.find("cgroup/dl/" + name);
    EXPECT_EQ(job.rec->file_records(), kept.at(name));
    const auto rec = t.job_json(job, "test");
    EXPECT_EQ(rec["job"]["files"], n);
    EXPECT_EQ(rec["job"]["folded_files"], n - kept.at(name));
    EXPECT_EQ(rec["job"]["totals"]["bytes_written"], total[name]);
  }
}

TEST_F(JobTableTest, TheNodeWideNameBudgetFoldsEachJobToItsShareOfBytes) {
  // docs/daemon-config.md `limits.max_path_bytes`: names of all jobs together are bounded, the
  // biggest jobs folding first, each to its share. Two jobs of ~2.9 MiB of names each, under
  // their own limit (max_path_bytes_per_job, 5 MiB) and over max_path_bytes (4 MiB) together:
  // both must come down to their share, 2 MiB.
  jobs::Limits limits;
  limits.max_path_bytes = 4u << 20;
  ASSERT_EQ(limits.max_path_bytes_per_job, 5u << 20);  // the default: not the bound that binds
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_cgroup(3, "/dl/b", true, 0);
  t.on_mark(mark(600, 2));
  t.on_mark(mark(700, 3));
  std::string dirs;  // four directories of 249 bytes: paths of ~1 KB
  for (int d = 0; d < 4; ++d) dirs += std::string(249, static_cast<char>('a' + d)) + '\0';
  constexpr uint64_t kFiles = 1500;
  const std::vector<std::pair<uint32_t, uint64_t>> jobs = {{600, 1}, {700, 10001}};  // pid, ino
  std::map<uint32_t, uint64_t> total;
  for (const auto& [pid, first] : jobs) {
    for (uint64_t ino = first; ino < first + kFiles; ++ino) {
      t.on_event(name_event(pid, ino, "f" + std::to_string(ino) + '\0' + dirs));
      t.on_file(key(pid, ino), written(ino), true);
      total[pid] += ino;
    }
  }
  const daemon::Job& a = *t.find("cgroup/dl/a");
  const daemon::Job& b = *t.find("cgroup/dl/b");
  const std::size_t share = 2u << 20;
  for (const daemon::Job* j : {&a, &b}) {
    ASSERT_GT(j->rec->name_bytes(), share);
    ASSERT_LT(j->rec->name_bytes(), limits.max_path_bytes_per_job);
  }
  ASSERT_TRUE(t.names_over_limits());
  ASSERT_FALSE(t.records_over_limits());  // the names bind, not the counts
  std::vector<core::FileIdentity> forgotten;
  const std::size_t folded = t.enforce_limits(&forgotten);
  EXPECT_GT(folded, 0u);
  EXPECT_FALSE(t.names_over_limits());
  EXPECT_EQ(t.stats().folded_records, folded);
  // Each folded file was named by its one process only: its name goes with it, and the kernel
  // must be told to send it again.
  EXPECT_EQ(forgotten.size(), folded);
  uint64_t folded_files = 0;
  for (const auto& [pid, first] : jobs) {
    SCOPED_TRACE(pid);
    const daemon::Job& job = pid == 600 ? a : b;
    EXPECT_LE(job.rec->name_bytes(), share);
    EXPECT_GT(job.rec->file_records(), 0u);
    const auto rec = t.job_json(job, "test");
    EXPECT_EQ(rec["job"]["files"], kFiles);
    EXPECT_EQ(rec["job"]["totals"]["bytes_written"], total[pid]);
    EXPECT_EQ(rec["job"]["folded_files"], kFiles - job.rec->file_records());
    folded_files += rec["job"]["folded_files"].get<uint64_t>();
    for (const auto& f : rec["files"]) EXPECT_FALSE(f.contains("path_unknown")) << f["ino"];
  }
  EXPECT_EQ(folded_files, folded);
}

TEST_F(JobTableTest, TheNodeWideNameCacheEvictsByFileIdentityAndForgetsTheEvicted) {
  // The node-wide cache holds the last name event of each file, so that a job using a file
  // another job named gets its path. Over max_records entries it evicts down to 9/10 of the
  // bound, the lowest (dev, ino, generation) first (the cache's key order, not the order of
  // use), and reports each evicted file in `forgotten` so the kernel sends its name again.
  jobs::Limits limits;
  limits.max_records = 10;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_cgroup(3, "/dl/b", true, 0);
  t.on_mark(mark(600, 2));
  t.on_mark(mark(700, 3));
  // Job a names 20 files, the highest inode first: the lowest are the last used.
  for (uint64_t ino = 20; ino >= 1; --ino)
    t.on_event(name_event(600, ino, "f" + std::to_string(ino) + std::string("\0etc\0", 5)));
  // Job b was given two of them, one to be evicted: fewer names than the evicted, so its side
  // is the one walked.
  t.on_event(name_event(700, 5, std::string("f5\0etc\0", 7)));
  t.on_event(name_event(700, 15, std::string("f15\0etc\0", 8)));
  ASSERT_FALSE(t.names_over_limits());  // the bytes are small: only the count binds
  std::vector<core::FileIdentity> forgotten;
  EXPECT_EQ(t.enforce_limits(&forgotten), 0u);  // names evicted are no records folded
  EXPECT_EQ(t.stats().folded_records, 0u);
  std::vector<core::FileIdentity> evicted;  // 20 down to 9: inodes 1 to 11
  for (uint64_t ino = 1; ino <= 11; ++ino) evicted.push_back({.ino = ino, .dev = 7, .gen = 1});
  EXPECT_EQ(forgotten, evicted);
  // Job a, which named them, no longer counts the evicted ones as given: a re-sent name of
  // one must reach it again.
  const daemon::Job& a = *t.find("cgroup/dl/a");
  EXPECT_EQ(a.named.count({.ino = 1, .dev = 7, .gen = 1}), 0u);
  EXPECT_EQ(a.named.count({.ino = 11, .dev = 7, .gen = 1}), 0u);
  EXPECT_EQ(a.named.count({.ino = 12, .dev = 7, .gen = 1}), 1u);
  const daemon::Job& b = *t.find("cgroup/dl/b");
  EXPECT_EQ(b.named.count({.ino = 5, .dev = 7, .gen = 1}), 0u);
  EXPECT_EQ(b.named.count({.ino = 15, .dev = 7, .gen = 1}), 1u);
  EXPECT_EQ(b.named.size(), 1u);
  // Down to 9, under the bound: the next call evicts nothing more.
  std::vector<core::FileIdentity> again;
  t.enforce_limits(&again);
  EXPECT_TRUE(again.empty());
  // Job b uses an evicted file and a kept one: only the kept one's name is given.
  t.on_file(key(700, 1), written(5), false);
  t.on_file(key(700, 20), written(6), false);
  auto path_of = [&](uint64_t ino) {  // b's row of the file
    const nlohmann::json rec = t.job_json(*t.find("cgroup/dl/b"), "v");
    for (const auto& f : rec["files"])
      if (f["ino"] == ino) return f;
    return nlohmann::json();
  };
  EXPECT_EQ(path_of(20)["path"], "/etc/f20");
  EXPECT_FALSE(path_of(20).contains("path_unknown"));
  EXPECT_EQ(path_of(1)["path_unknown"], true) << path_of(1);
  // The kernel, told to forget it, sends the evicted file's name again at b's next use.
  t.on_event(name_event(700, 1, std::string("f1\0etc\0", 7)));
  EXPECT_EQ(path_of(1)["path"], "/etc/f1");
  EXPECT_FALSE(path_of(1).contains("path_unknown"));
}

TEST_F(JobTableTest, SavedTableLoadsIntoTheSameState) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtr, true, 20);
  t.on_mark(mark(100, 5));
  t.on_file(key(100, 1), written(4096), true);
  t.on_file(key(100, 2), written(10), false);
  const nlohmann::json saved = t.save();
  auto u = make({kube_rule()});
  std::string error;
  ASSERT_TRUE(u.load(saved, error)) << error;
  ASSERT_EQ(u.jobs().size(), 1u);
  const auto& a = *t.jobs().begin()->second;
  const auto& b = *u.jobs().begin()->second;
  EXPECT_EQ(t.job_json(a, "v"), u.job_json(b, "v"));
  EXPECT_TRUE(u.attributed({100, 1000}));
  EXPECT_EQ(u.cgroup_path(5), kCtr);
  // Continues: the live record re-read from the kernel replaces its earlier value.
  u.on_file(key(100, 2), written(20), false);
  EXPECT_EQ(u.job_json(b, "v")["job"]["totals"]["bytes_written"], 4116u);
  // Corrupt input is refused without touching the table.
  nlohmann::json bad = saved;
  bad["jobs"][0]["recorder"] = nlohmann::json::binary({1, 2, 3});
  EXPECT_FALSE(u.load(bad, error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(u.load(nlohmann::json::object(), error));
  EXPECT_EQ(u.jobs().size(), 1u);
}

TEST_F(JobTableTest, SavedIntoEachJobsBufferOfTheLastSave) {
  // iolensd gathers each save into the last save's buffers (their pages already faulted in),
  // each job into its own: the same state as into fresh ones.
  auto t = make({cgroup_rule("/dl/*")});
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_cgroup(3, "/dl/b", true, 0);
  t.on_mark(mark(100, 2));
  t.on_mark(mark(200, 3));
  t.on_file(key(100, 1), written(1), true);
  for (uint64_t i = 1; i <= 50; ++i) t.on_file(key(200, i), written(i), true);
  const nlohmann::json fresh = t.save({}, false);
  std::map<std::string, std::vector<uint8_t>> spares;
  spares["cgroup/dl/b"] = std::vector<uint8_t>(1 << 20, 7);  // b's, big enough
  spares["cgroup/dl/a"] = std::vector<uint8_t>(16, 7);       // a's, too small: grown
  spares["cgroup/dl/gone"] = std::vector<uint8_t>(1 << 16, 7);  // a job no longer there
  const uint8_t* b_pages = spares["cgroup/dl/b"].data();
  const nlohmann::json reused = t.save({}, false, &spares);
  EXPECT_EQ(reused, fresh);
  ASSERT_EQ(spares.size(), 1u);  // the jobs took theirs; the gone job's is left
  EXPECT_EQ(spares.begin()->first, "cgroup/dl/gone");
  for (const auto& job : reused["jobs"]) {
    if (job["id"] == "cgroup/dl/b") {
      EXPECT_EQ(job["recorder"].get_binary().data(), b_pages);
    }
  }
}

TEST_F(JobTableTest, SavedCountsLoadBackFieldByField) {
  // Each count known from what the test fed: one job closed, one unattributed process with a
  // discarded record, one unknown cgroup.
  auto t = make({cgroup_rule("/dl/*")});
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_mark(mark(100, 2));
  t.on_event(core::ExitEvent{{100, 1000}, 2000, 0});
  t.on_cgroup_removed(2, 3000);
  for (const auto& id : t.closing()) t.take(id);
  t.on_mark(mark(200, 1));  // directly in the root: in no job
  t.on_file(key(200, 1), written(1), true);
  t.on_mark(mark(300, 99));  // a cgroup nobody named
  ASSERT_EQ(t.stats().jobs_closed, 1u);
  ASSERT_EQ(t.stats().unattributed_processes, 2u);
  ASSERT_EQ(t.stats().unattributed_records, 1u);
  ASSERT_EQ(t.stats().unknown_cgroups, 1u);
  auto u = make({cgroup_rule("/dl/*")});
  std::string error;
  ASSERT_TRUE(u.load(t.save(), error)) << error;
  EXPECT_EQ(u.stats().jobs_closed, 1u);
  EXPECT_EQ(u.stats().unattributed_processes, 2u);
  EXPECT_EQ(u.stats().unattributed_records, 1u);
  EXPECT_EQ(u.stats().unknown_cgroups, 1u);
  EXPECT_EQ(u.stats().folded_records, 0u);
  EXPECT_EQ(u.stats().folded_processes, 0u);
}

TEST_F(JobTableTest, AFileNamedInOneJobIsNamedInTheNext) {
  // The kernel sends a file's name once for the whole node: the second job must get it too.
  auto t = make({cgroup_rule("/dl/*")});
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 0);
  t.on_cgroup(3, "/dl/b", true, 0);
  t.on_mark(mark(600, 2));
  t.on_mark(mark(700, 3));
  core::PathEvent name;
  name.proc = {600, 6000};
  name.op = IOLENS_PATH_FILE;
  name.dev = 7;
  name.ino = 42;
  name.gen = 1;
  name.walk = std::string("hostname\0etc\0", 13);
  t.on_event(name);
  t.on_file(key(600, 42), written(5), false);
  t.on_file(key(700, 42), written(6), false);
  for (const char* id : {"cgroup/dl/a", "cgroup/dl/b"}) {
    auto rec = t.job_json(*t.find(id), "v");
    ASSERT_EQ(rec["files"].size(), 1u) << id;
    EXPECT_EQ(rec["files"][0]["path"], "/etc/hostname") << id;
  }
}

TEST_F(JobTableTest, DarshanLogOfAJobComesFromTheRecordsSnapshot) {
  jobs::Rule slurm;
  slurm.kind = jobs::RuleKind::Slurm;
  slurm.name = "slurm";
  slurm.roots = {"/system.slice/slurmstepd.scope"};
  auto t = make({slurm});
  t.on_cgroup(1, "/system.slice/slurmstepd.scope", false, 0);
  t.on_cgroup(2, "/system.slice/slurmstepd.scope/job_4242", true, 500);
  t.on_cgroup(3, "/system.slice/slurmstepd.scope/job_4242/step_0", true, 600);
  ASSERT_TRUE(t.on_mark(mark(300, 3)));
  ASSERT_TRUE(t.on_mark(mark(200, 3)));  // started first (pid * 10 ns): rank 0
  core::FileCounters c = written(4096);
  c.write_start_ns = 500 + 2'000'000'000;  // 2 s after the job's cgroup was created
  c.write_end_ns = 500 + 3'000'000'000;
  t.on_file(key(300, 1), c, false);
  t.on_file(key(200, 2), written(10), false);
  daemon::Job& job = *t.find("slurm/4242");
  job.uid = 1000;
  const core::RunSnapshot snap = t.job_snapshot(job);
  EXPECT_EQ(snap.start_ns, 1'000'000'500);
  EXPECT_EQ(snap.end_ns, 0);  // live
  EXPECT_EQ(t.job_json(job, snap, "v"), t.job_json(job, "v"));

  const exporters::DarshanJobInfo info = t.darshan_job_info(job, snap, "node7");
  EXPECT_EQ(info.uid, 1000);
  EXPECT_EQ(info.jobid, 4242);  // the Slurm job id, not a pid
  EXPECT_EQ(info.exe, "python3");  // rank 0's exe, its comm without one
  EXPECT_EQ(info.timestamp_base_ns, 500u);
  auto meta = [&](const std::string& key) {
    for (const auto& [k, v] : info.metadata)
      if (k == key) return v;
    return std::string("<none>");
  };
  EXPECT_EQ(meta("job_id"), "slurm/4242");
  EXPECT_EQ(meta("job_kind"), "slurm");
  EXPECT_EQ(meta("job_rule"), "slurm");
  EXPECT_EQ(meta("job_cgroup"), "/system.slice/slurmstepd.scope/job_4242");
  EXPECT_EQ(meta("node"), "node7");
  EXPECT_EQ(meta("slurm_job"), "4242");  // the job's labels
  EXPECT_EQ(meta("start_estimated"), "<none>");

  exporters::DarshanLogContents log;
  std::string error;
  ASSERT_TRUE(exporters::read_darshan_log(exporters::darshan_log(snap, info), log, error)) << error;
  EXPECT_EQ(log.nprocs, 2);
  EXPECT_EQ(log.jobid, 4242);
  EXPECT_EQ(log.uid, 1000);
  EXPECT_EQ(log.start_sec, 1);
  EXPECT_EQ(log.start_nsec, 500);
  ASSERT_EQ(log.posix.size(), 2u);
  for (const auto& r : log.posix) {
    auto n = [&](const char* name) {
      return r.counters[static_cast<size_t>(exporters::darshan_posix_counter_index(name))];
    };
    auto f = [&](const char* name) {
      return r.fcounters[static_cast<size_t>(exporters::darshan_posix_fcounter_index(name))];
    };
    if (r.rank == 1) {  // pid 300
      EXPECT_EQ(n("BYTES_WRITTEN"), 4096);
      EXPECT_EQ(n("WRITES"), 1);
      EXPECT_DOUBLE_EQ(f("F_WRITE_START_TIMESTAMP"), 2.0);  // from the job start, not boot
      EXPECT_DOUBLE_EQ(f("F_WRITE_END_TIMESTAMP"), 3.0);
    } else {
      EXPECT_EQ(r.rank, 0);
      EXPECT_EQ(n("BYTES_WRITTEN"), 10);
    }
  }
  // The uid survives a restart; a state saved before it existed has none.
  nlohmann::json saved = t.save();
  auto u = make({slurm});
  ASSERT_TRUE(u.load(saved, error)) << error;
  EXPECT_EQ(u.find("slurm/4242")->uid, 1000);
  saved["jobs"][0].erase("uid");
  ASSERT_TRUE(u.load(saved, error)) << error;
  EXPECT_EQ(u.find("slurm/4242")->uid, -1);
}

TEST_F(JobTableTest, BlockRecordsLiveReplacedFinalAddedOnceAndSaved) {
  auto t = pod_of_two();
  auto blk = [](uint32_t pid) { return iolens_block_key{pid, 7, pid * 10ull}; };
  iolens_block_counters r{};
  r.read_bytes = 4096;
  r.read_reqs = 1;
  EXPECT_TRUE(t.on_block(blk(100), r, false));
  r.read_bytes = 8192;  // the live record read again: its new value replaces the old
  r.read_reqs = 2;
  EXPECT_TRUE(t.on_block(blk(100), r, false));
  iolens_block_counters w{};
  w.write_bytes = 1 << 20;
  w.writeback_bytes = 1 << 20;
  w.dev_write[5] = 3;
  EXPECT_TRUE(t.on_block(blk(101), w, true));  // exited: added once, then deleted by the caller
  EXPECT_FALSE(t.on_block(blk(999), w, true));  // a process in no job: nothing kept

  const daemon::FileClassifier fc;
  const auto m = daemon::job_metrics(*t.jobs().begin()->second, fc, 0);
  ASSERT_EQ(m.block.size(), 1u);
  EXPECT_EQ(m.block[0].first, "0:7");
  EXPECT_EQ(m.block[0].second.read_bytes, 8192u);
  EXPECT_EQ(m.block[0].second.read_reqs, 2u);
  EXPECT_EQ(m.block[0].second.write_bytes, 1u << 20);
  EXPECT_EQ(m.block[0].second.writeback_bytes, 1u << 20);
  EXPECT_EQ(m.block[0].second.dev_write[5], 3u);

  // A restarted daemon has the exited processes' sums; the live records it reads again.
  auto u = make({kube_rule()});
  std::string error;
  ASSERT_TRUE(u.load(t.save(), error)) << error;
  const auto mu = daemon::job_metrics(*u.jobs().begin()->second, fc, 0);
  ASSERT_EQ(mu.block.size(), 1u);
  EXPECT_EQ(mu.block[0].second.write_bytes, 1u << 20);
  EXPECT_EQ(mu.block[0].second.dev_write[5], 3u);
  EXPECT_EQ(mu.block[0].second.read_bytes, 0u);
  EXPECT_TRUE(u.on_block(blk(100), r, false));
  EXPECT_EQ(daemon::job_metrics(*u.jobs().begin()->second, fc, 0).block[0].second.read_bytes,
            8192u);
}

TEST_F(JobTableTest, ProcessLossesAreTheJobsOwnLiveReplacedFinalAddedOnceAndSaved) {
  auto t = pod_of_two();
  auto key = [](uint32_t pid) { return iolens_proc_key{pid, 0, pid * 10ull}; };
  iolens_proc_lost a{};
  a.n[IOLENS_STAT_FILE_RECORDS_LOST] = 5;
  EXPECT_TRUE(t.on_proc_lost(key(100), a, false));
  a.n[IOLENS_STAT_FILE_RECORDS_LOST] = 7;  // read again: the new value replaces the old
  a.n[IOLENS_STAT_EVENTS_LOST] = 1;
  a.n[IOLENS_STAT_PATH_EVENTS_LOST] = 1;
  EXPECT_TRUE(t.on_proc_lost(key(100), a, false));
  iolens_proc_lost b{};
  b.n[IOLENS_STAT_FILE_RECORDS_LOST] = 3;
  b.n[IOLENS_STAT_BLOCK_RECORDS_LOST] = 2;
  EXPECT_TRUE(t.on_proc_lost(key(101), b, true));   // exited: added once (the caller deletes it)
  EXPECT_FALSE(t.on_proc_lost(key(999), b, true));  // a process in no job: nothing kept
  const daemon::Job& job = *t.jobs().begin()->second;
  auto own = job.own_losses();
  EXPECT_EQ(own[IOLENS_STAT_FILE_RECORDS_LOST], 10u);
  EXPECT_EQ(own[IOLENS_STAT_EVENTS_LOST], 1u);
  EXPECT_EQ(own[IOLENS_STAT_PATH_EVENTS_LOST], 1u);
  EXPECT_EQ(own[IOLENS_STAT_BLOCK_RECORDS_LOST], 2u);
  EXPECT_EQ(own[IOLENS_STAT_OTHER_RECORDS_LOST], 0u);
  // A block request the daemon's sweep found untimed: its process's job's too.
  EXPECT_TRUE(t.add_loss({101, 1010}, IOLENS_STAT_BLOCK_UNTIMED_SWEPT));
  EXPECT_FALSE(t.add_loss({999, 9990}, IOLENS_STAT_BLOCK_UNTIMED_SWEPT));
  EXPECT_EQ(job.own_losses()[IOLENS_STAT_BLOCK_UNTIMED_SWEPT], 1u);

  // A restarted daemon keeps the exited processes' sums and reads the live entries again.
  auto u = make({kube_rule()});
  std::string error;
  ASSERT_TRUE(u.load(t.save(), error)) << error;
  own = u.jobs().begin()->second->own_losses();
  EXPECT_EQ(own[IOLENS_STAT_FILE_RECORDS_LOST], 3u);
  EXPECT_EQ(own[IOLENS_STAT_BLOCK_RECORDS_LOST], 2u);
  EXPECT_EQ(own[IOLENS_STAT_BLOCK_UNTIMED_SWEPT], 1u);
  EXPECT_TRUE(u.on_proc_lost(key(100), a, false));
  EXPECT_EQ(u.jobs().begin()->second->own_losses()[IOLENS_STAT_FILE_RECORDS_LOST], 10u);
  // A state of an older daemon has no `lost_done`; a malformed one is refused.
  nlohmann::json saved = t.save();
  saved["jobs"][0].erase("lost_done");
  ASSERT_TRUE(u.load(saved, error)) << error;
  EXPECT_EQ(u.jobs().begin()->second->own_losses()[IOLENS_STAT_FILE_RECORDS_LOST], 0u);
  saved["jobs"][0]["lost_done"] = std::vector<int>(IOLENS_NR_STATS + 1, 1);
  EXPECT_FALSE(u.load(saved, error));
  saved["jobs"][0]["lost_done"] = nlohmann::json::array({"x"});
  EXPECT_FALSE(u.load(saved, error));
}

TEST_F(JobTableTest, AStateOfWrongTypesIsRefusedWithoutThrowingOrTouchingTheTable) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_mark(mark(100, 3));
  const nlohmann::json saved = t.save();
  auto u = make({kube_rule()});  // empty: any part of `saved` taken would show
  u.on_cgroup(1, "/kubepods.slice", false, 0);
  std::string error;
  const nlohmann::json before = u.save();
  std::vector<nlohmann::json> bad(13, saved);
  bad[0] = nlohmann::json::array();
  bad[1] = "text";
  bad[2]["format"] = "1";
  bad[3]["jobs"] = {{{"kind", 5}}};
  bad[4]["jobs"][0]["start_ns"] = "yesterday";
  bad[5]["jobs"][0]["recorder"] = "not binary";
  bad[6]["cgroups"] = {{"x", "/a", "j"}};
  bad[7]["proc_job"] = {{{1}, "j"}};  // a process key cut short
  bad[8]["stats"] = {1, 2};
  // The last field read: a failure there once left the table half replaced.
  bad[9]["mono_to_wall_ns"] = "x";
  bad[10].erase("unattributed");
  bad[11]["jobs"][0]["end_estimated"] = "maybe";
  bad[12]["proc_job"][0][1] = "no-such-job";  // would be followed to a null job at its next fork
  for (std::size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(i);
    bool ok = true;
    EXPECT_NO_THROW(ok = u.load(bad[i], error));
    EXPECT_FALSE(ok);
    EXPECT_NE(error.find("malformed state"), std::string::npos) << error;
    EXPECT_EQ(u.save(), before);
  }
}

// ---- bounded memory against a hostile job (issue 21): processes, name bytes, answers ----

namespace {

/// The kernel key of file `ino` of process `p`.
iolens_file_key key_of(const core::ProcKey& p, uint64_t ino) {
  iolens_file_key k = key(0, ino);
  k.tgid = p.pid;
  k.pstart_ns = p.start_ns;
  return k;
}

}  // namespace

TEST_F(JobTableTest, AForkStormKeepsAtMostTheBoundOfProcessesAndExactTotals) {
  // A job running /bin/true in a loop: 20,000 short processes, each writing a file and exiting,
  // with a drain (enforce_limits) every 500 of them.
  jobs::Limits limits;
  limits.max_processes_per_job = 100;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/big", true, 0);
  t.on_mark(mark(500, 2));
  const core::ProcKey shell{500, 5000};
  constexpr uint32_t kChildren = 20000;
  uint64_t total = 0, other_bytes = 0;
  const auto& job = *t.find("cgroup/dl/big");
  for (uint32_t i = 0; i < kChildren; ++i) {
    const core::ProcKey child{1000 + i, 100000 + i * 10ull};
    t.on_event(core::ForkEvent{child, shell, child.start_ns, "true", 2});
    t.on_file(key_of(child, 1 + i % 50), written(i + 1), true);
    total += i + 1;
    iolens_file_key pipe = key_of(child, 001);  // a pipe (S_IFIFO >> 12): other I/O
    core::FileCounters c = written(3);
    t.on_other(pipe, c, true);
    other_bytes += 3;
    t.on_event(core::ExitEvent{child, child.start_ns + 5, 0});
    if (i % 500 == 499) {
      t.enforce_limits();
      // The shell (alive) and at most the bound: every per-process map stays bounded.
      ASSERT_LE(job.procs.size(), 100u) << i;
      ASSERT_LE(job.rec->processes(), 100u) << i;
      ASSERT_LE(job.rec->memory().file_records, 100u) << i;
      ASSERT_LE(t.save()["proc_job"].size(), 100u) << i;
    }
  }
  auto rec = t.job_json(job, "test");
  EXPECT_LE(rec["processes"].size(), 101u);  // the kept ones and the "<other processes>" row
  EXPECT_EQ(rec["job"]["processes"], kChildren + 1);
  EXPECT_EQ(rec["job"]["live_processes"], 1u);
  EXPECT_EQ(rec["job"]["folded_processes"].get<uint64_t>(), kChildren + 1 - job.procs.size());
  EXPECT_EQ(t.stats().folded_processes, kChildren + 1 - job.procs.size());
  EXPECT_EQ(rec["job"]["totals"]["bytes_written"], total);
  EXPECT_EQ(rec["job"]["totals"]["writes"], kChildren);
  EXPECT_EQ(rec["job"]["files"], kChildren);  // one file each
  uint64_t rows_bytes = 0, rows_pipe = 0, folded_row = 0;
  for (const auto& p : rec["processes"]) {
    rows_bytes += p["counters"]["bytes_written"].get<uint64_t>();
    if (p["other_io"].contains("pipe")) rows_pipe += p["other_io"]["pipe"]["bytes_written"].get<uint64_t>();
    if (p.contains("folded_processes")) {
      EXPECT_EQ(p["comm"], "<other processes>");
      folded_row += p["folded_processes"].get<uint64_t>();
    }
  }
  EXPECT_EQ(rows_bytes, total);
  EXPECT_EQ(rows_pipe, other_bytes);
  EXPECT_EQ(folded_row, rec["job"]["folded_processes"].get<uint64_t>());
  // The folded row survives a restart.
  auto u = make({cgroup_rule("/dl/*")}, limits);
  std::string error;
  ASSERT_TRUE(u.load(t.save(), error)) << error;
  EXPECT_EQ(u.job_json(*u.find("cgroup/dl/big"), "test"), rec);
}

TEST_F(JobTableTest, TheUnattributedSetShrinksAndIsBounded) {
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  // 10,000 short processes directly in the root, in no job: counted, then gone with their exit.
  for (uint32_t i = 0; i < 10000; ++i) {
    const auto m = mark(2000 + i, 1);
    EXPECT_FALSE(t.on_mark(m));
    t.on_event(core::ExitEvent{m.proc, 99, 0});
  }
  EXPECT_EQ(t.stats().unattributed_processes, 10000u);
  EXPECT_EQ(t.save()["unattributed"].size(), 0u);
  // Their exits missed (no longer traced): the set stays bounded all the same (16,384).
  for (uint32_t i = 0; i < 40000; ++i) t.on_mark(mark(100000 + i, 1));
  EXPECT_EQ(t.stats().unattributed_processes, 50000u);
  EXPECT_LE(t.save()["unattributed"].size(), 16384u);
  EXPECT_GT(t.save()["unattributed"].size(), 0u);
}

TEST_F(JobTableTest, LongPathsFoldAsManyMoreFilesWould) {
  // 3,000 files whose paths are 3.5 KB each: 10 MB of names, far under max_files_per_job.
  jobs::Limits limits;
  limits.max_path_bytes_per_job = 1u << 20;
  auto t = make({cgroup_rule("/dl/*")}, limits);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/paths", true, 0);
  t.on_mark(mark(600, 2));
  std::string dirs;
  for (int d = 0; d < 14; ++d) dirs += std::string(249, static_cast<char>('a' + d)) + '\0';
  uint64_t total = 0;
  for (uint64_t i = 1; i <= 3000; ++i) {
    core::PathEvent name;
    name.proc = {600, 6000};
    name.op = IOLENS_PATH_FILE;
    name.dev = 7;
    name.ino = i;
    name.gen = 1;
    name.walk = "f" + std::to_string(i) + '\0' + dirs;
    t.on_event(name);
    t.on_file(key(600, i), written(i), true);
    total += i;
    if (i % 300 == 0) t.enforce_limits();
  }
  t.enforce_limits();
  const auto& job = *t.find("cgroup/dl/paths");
  EXPECT_LE(job.rec->name_bytes(), 1u << 20);
  EXPECT_LT(job.rec->file_records(), 3000u);
  auto rec = t.job_json(job, "test");
  EXPECT_EQ(rec["job"]["files"], 3000u);
  EXPECT_EQ(rec["job"]["totals"]["bytes_written"], total);
  EXPECT_GT(rec["job"]["folded_files"].get<uint64_t>(), 0u);
  // The count kept as names come and go is the one a loaded recorder counts from scratch.
  auto u = make({cgroup_rule("/dl/*")}, limits);
  std::string error;
  ASSERT_TRUE(u.load(t.save(), error)) << error;
  EXPECT_EQ(u.find("cgroup/dl/paths")->rec->name_bytes(), job.rec->name_bytes());
  EXPECT_GT(job.rec->name_bytes(), 0u);
}

TEST_F(JobTableTest, TheJobAnswerIsPagedAndThePagesMakeTheRecord) {
  auto t = make({cgroup_rule("/dl/*")});
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/many", true, 0);
  t.on_mark(mark(700, 2));
  for (uint64_t i = 1; i <= 2500; ++i) t.on_file(key(700, i), written(i), false);
  const auto& job = *t.find("cgroup/dl/many");
  const nlohmann::json whole = t.job_json(job, "v");
  ASSERT_EQ(whole["files"].size(), 2500u);
  const std::string text = whole.dump();
  for (bool written_record : {false, true}) {
    nlohmann::json joined;
    uint64_t offset = 0;
    int pages = 0;
    for (;;) {
      nlohmann::json page = written_record ? *daemon::record_page(text, offset, 1000)
                                           : t.job_pages(job, "v", 1, nlohmann::json::object(), {}, 1000)
                                                 ->page(offset, 1000, {});
      ++pages;
      EXPECT_LE(page["files"].size(), 1000u);
      EXPECT_EQ(page["page"]["files"], 2500u);
      EXPECT_EQ(page["page"]["processes"], 1u);
      EXPECT_EQ(page["page"]["by_file"], 2500u);
      EXPECT_LE(page["by_file"].size(), 1000u);
      EXPECT_EQ(page["job"], whole["job"]);
      if (joined.is_null()) {
        joined = page;
      } else {
        for (const auto& f : page["files"]) joined["files"].push_back(f);
        for (const auto& f : page["by_file"]) joined["by_file"].push_back(f);
      }
      if (page["page"]["next"].is_null()) break;
      offset = page["page"]["next"].get<uint64_t>();
    }
    EXPECT_EQ(pages, 3);
    joined.erase("page");
    EXPECT_EQ(joined, whole) << written_record;
  }
  EXPECT_FALSE(daemon::record_page("not json", 0, 10));
}

// The on-demand syscall hooks (docs/daemon.md#cost): a process selected while they were
// detached marks its job with the earliest such selection and the attach that ended it, by the
// event's own time (its event may be read after the attach); one selected while they were
// attached does not. Kept across a save and a load.
TEST_F(JobTableTest, AJobSelectedWhileTheHooksWereDetachedSaysSo) {
  auto t = make({cgroup_rule("/dl/*")});
  t.hooks_detached(0);
  t.on_cgroup(1, "/dl", false, 0);
  t.on_cgroup(2, "/dl/a", true, 10);
  t.on_cgroup(3, "/dl/b", true, 10);
  t.on_cgroup(4, "/dl/c", true, 10);
  ASSERT_TRUE(t.on_mark(mark(100, 2, 50)));  // a: selected before the first attach...
  t.hooks_attached(80);
  ASSERT_TRUE(t.on_mark(mark(101, 2, 60)));  // ...and another, read after it: the earliest stays
  ASSERT_TRUE(t.on_mark(mark(200, 3, 90)));  // b: after the attach
  t.hooks_detached(300);
  ASSERT_TRUE(t.on_mark(mark(300, 4, 350)));  // c: detached again, not yet attached
  const auto job = [&](const std::string& id) -> const daemon::Job& { return *t.find(id); };
  EXPECT_EQ(job("cgroup/dl/a").unhooked_since, 50u);
  EXPECT_EQ(job("cgroup/dl/a").unhooked_until, 80u);
  EXPECT_EQ(job("cgroup/dl/b").unhooked_since, 0u);
  EXPECT_EQ(job("cgroup/dl/c").unhooked_since, 350u);
  EXPECT_EQ(job("cgroup/dl/c").unhooked_until, 0u);
  EXPECT_EQ(t.jobs_unhooked(), 2u);
  t.hooks_attached(400);  // c's window ends here; a's stays
  EXPECT_EQ(job("cgroup/dl/c").unhooked_until, 400u);
  EXPECT_EQ(job("cgroup/dl/a").unhooked_until, 80u);
  // Attached or detached twice: nothing moves.
  t.hooks_attached(500);
  EXPECT_EQ(job("cgroup/dl/c").unhooked_until, 400u);
  t.hooks_detached(600);  // saved detached: the loaded table goes on with that window
  auto u = make({cgroup_rule("/dl/*")});
  std::string error;
  ASSERT_TRUE(u.load(t.save(), error)) << error;
  EXPECT_EQ(u.find("cgroup/dl/a")->unhooked_since, 50u);
  EXPECT_EQ(u.find("cgroup/dl/a")->unhooked_until, 80u);
  EXPECT_EQ(u.find("cgroup/dl/c")->unhooked_until, 400u);
  EXPECT_EQ(u.find("cgroup/dl/b")->unhooked_since, 0u);
  u.on_cgroup(5, "/dl/d", true, 10);
  u.on_cgroup(6, "/dl/e", true, 10);
  ASSERT_TRUE(u.on_mark(mark(500, 5, 650)));  // in the saved open window (a replayed event)
  ASSERT_TRUE(u.on_mark(mark(501, 6, 350)));  // in a saved closed one
  u.hooks_attached(700);
  EXPECT_EQ(u.find("cgroup/dl/d")->unhooked_since, 650u);
  EXPECT_EQ(u.find("cgroup/dl/d")->unhooked_until, 700u);
  EXPECT_EQ(u.find("cgroup/dl/e")->unhooked_since, 350u);
  EXPECT_EQ(u.find("cgroup/dl/e")->unhooked_until, 400u);
  // A fork of a process selected while they were attached is selected at its own time.
  core::ForkEvent f{{502, 5020}, {500, 5000}, 800, "python3", 5};
  u.on_event(f);
  EXPECT_EQ(u.find("cgroup/dl/d")->unhooked_since, 650u);  // the earliest stays
  // An older state, without the windows: none known.
  nlohmann::json older = t.save();
  older.erase("unhooked");
  auto v = make({cgroup_rule("/dl/*")});
  ASSERT_TRUE(v.load(older, error)) << error;
  v.on_cgroup(7, "/dl/f", true, 10);
  ASSERT_TRUE(v.on_mark(mark(600, 7, 650)));
  EXPECT_EQ(v.find("cgroup/dl/f")->unhooked_since, 0u);
}

TEST_F(JobTableTest, AWallClockStepMovesEveryWallTimeWithIt) {
  // Job started at monotonic 10 under offset 1 s; the clock is set an hour forward while it
  // runs; its cgroup goes at monotonic 60. Its record must span 50 ns on the new clock, not
  // start on the old clock and end on the new one (an hour and 50 ns).
  constexpr int64_t kHour = 3600LL * 1000000000LL;
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtr, true, 20);
  t.on_mark(mark(100, 5));
  ASSERT_EQ(t.jobs().size(), 1u);
  EXPECT_EQ(t.jobs().begin()->second->start_ns, 1'000'000'010);
  t.rebase_wall(kHour);
  EXPECT_EQ(t.clock().mono_to_wall_ns, 1'000'000'000 + kHour);
  EXPECT_EQ(t.jobs().begin()->second->start_ns, 1'000'000'010 + kHour);
  t.on_event(core::ExitEvent{{100, 1000}, 40, 0});
  t.on_cgroup_removed(3, 60);
  ASSERT_EQ(t.closing().size(), 1u);
  // Stepped back after the end: the ended job moves too.
  t.rebase_wall(-2 * kHour);
  auto job = t.take(t.closing()[0]);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->start_ns, 1'000'000'010 - kHour);
  EXPECT_EQ(job->end_ns, 1'000'000'060 - kHour);
  EXPECT_EQ(t.clock().mono_to_wall_ns, 1'000'000'000 - kHour);
}

TEST_F(JobTableTest, OnFileSaysWhetherTheJobHoldsTheRecordWithItsName) {
  // iolensd's drain skips a live record read again unchanged only once on_file said its job
  // holds it named: one whose name had not come yet is handed on again, and gets it then.
  auto t = make({kube_rule()});
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtr, true, 20);
  ASSERT_TRUE(t.on_mark(mark(100, 5)));
  EXPECT_FALSE(t.on_file(key(100, 1), written(10), false));
  t.on_event(name_event(100, 1, std::string("f1\0etc\0", 7)));
  EXPECT_TRUE(t.on_file(key(100, 1), written(10), false));
  EXPECT_TRUE(t.on_file(key(100, 1), written(20), true));
  auto rec = t.job_json(*t.jobs().begin()->second, "test");
  ASSERT_EQ(rec["files"].size(), 1u);
  EXPECT_EQ(rec["files"][0]["path"], "/etc/f1");
  EXPECT_EQ(rec["files"][0]["counters"]["bytes_written"], 20u);
  // A process in no job: nothing held, whatever the name.
  EXPECT_FALSE(t.on_file(key(200, 1), written(10), false));
}
