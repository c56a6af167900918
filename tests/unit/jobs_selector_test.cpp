// SPDX-License-Identifier: Apache-2.0
// The selection rules: watch roots, verdicts for ancestors / jobs / excluded siblings / cgroups
// created later below a job, rule precedence, process rules, globs and the cgroup2 mount.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <stdexcept>
#include <string>

#include "jobs/selector.hpp"

using namespace iolens::jobs;
using Labels = std::map<std::string, std::string>;
using Paths = std::vector<std::string>;

namespace {

const std::string kUid = "8f0c3b9e-6a1d-4c2b-9e7f-1a2b3c4d5e6f";
const std::string kUidSystemd = "8f0c3b9e_6a1d_4c2b_9e7f_1a2b3c4d5e6f";
const std::string kCid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kPod =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice";

Rule rule(RuleKind kind, std::string name) {
  Rule r;
  r.kind = kind;
  r.name = std::move(name);
  return r;
}

Rule kubernetes(Paths roots = {}, std::string name = "kubernetes") {
  Rule r = rule(RuleKind::Kubernetes, std::move(name));
  r.roots = std::move(roots);
  return r;
}

Rule slurm(Paths roots = {}, std::string name = "slurm") {
  Rule r = rule(RuleKind::Slurm, std::move(name));
  r.roots = std::move(roots);
  return r;
}

Rule systemd(std::string slice, Paths units, std::string name = "systemd") {
  Rule r = rule(RuleKind::Systemd, std::move(name));
  r.slice = std::move(slice);
  r.globs = std::move(units);
  return r;
}

Rule cgroup(Paths paths, std::string name = "cgroup") {
  Rule r = rule(RuleKind::Cgroup, std::move(name));
  r.globs = std::move(paths);
  return r;
}

Rule process(std::string comm, std::string cmdline, std::string name) {
  Rule r = rule(RuleKind::Process, std::move(name));
  r.comm = std::move(comm);
  r.cmdline = std::move(cmdline);
  return r;
}

std::string verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Job: return "Job";
    case Verdict::Container: return "Container";
    case Verdict::Excluded: return "Excluded";
  }
  return "?";
}

// "Job <id> <job cgroup> <rule>", "Container <rule>" or "Excluded": one string to compare.
std::string verdict(const Selector& s, const std::string& path) {
  const Classification c = s.classify(path);
  std::string out = verdict_name(c.verdict);
  if (c.verdict == Verdict::Job) {
    EXPECT_TRUE(c.identity) << path;
    if (c.identity) out += " " + c.identity->id + " " + c.identity->job_cgroup;
  } else {
    EXPECT_FALSE(c.identity) << path;
  }
  if (!c.rule.empty()) out += " [" + c.rule + "]";
  return out;
}

}  // namespace

// --- watch roots -------------------------------------------------------------------------------

TEST(JobsSelector, WatchRootsDefaultsDedupAndNesting) {
  const Selector s(
      {kubernetes(), slurm(), systemd("/system.slice", {"train-*.service"}),
       cgroup({"/batch.slice/job-*", "/batch.slice/x/**/y", "/kubepods.slice/a/*", "/fixed/job"}),
       process("torchrun", "", "p"), kubernetes({"/kubepods"}, "k2")});
  // slurmstepd.scope lies under /system.slice, /kubepods.slice/a under /kubepods.slice, and the
  // second /kubepods and /batch.slice are duplicates: the first of each stays, in rule order.
  EXPECT_EQ(s.watch_roots(), (Paths{"/kubepods.slice", "/kubepods", "/slurm", "/system.slice",
                                    "/batch.slice", "/fixed/job"}));
}

TEST(JobsSelector, WatchRootsOfGlobsStopAtTheFirstWildcard) {
  EXPECT_EQ(Selector({cgroup({"/a/b/c*/d"})}).watch_roots(), Paths{"/a/b"});
  EXPECT_EQ(Selector({cgroup({"/a/b/[xy]/d"})}).watch_roots(), Paths{"/a/b"});
  EXPECT_EQ(Selector({cgroup({"/a/b/?"})}).watch_roots(), Paths{"/a/b"});
  EXPECT_EQ(Selector({cgroup({"/a/**/d"})}).watch_roots(), Paths{"/a"});
  EXPECT_EQ(Selector({cgroup({"/a/b/d"})}).watch_roots(), Paths{"/a/b/d"});
  EXPECT_EQ(Selector({process("x", "", "p")}).watch_roots(), Paths{});
  EXPECT_EQ(Selector({kubernetes({"/k8s/a", "/k8s", "/k8s/b"})}).watch_roots(), Paths{"/k8s"});
}

// --- kubernetes --------------------------------------------------------------------------------

TEST(JobsSelector, KubernetesVerdicts) {
  const Selector s({kubernetes()});
  EXPECT_EQ(verdict(s, "/"), "Container [kubernetes]");
  EXPECT_EQ(verdict(s, "/kubepods.slice"), "Container [kubernetes]");
  EXPECT_EQ(verdict(s, "/kubepods.slice/kubepods-burstable.slice"), "Container [kubernetes]");
  EXPECT_EQ(verdict(s, "/kubepods.slice/kubepods-besteffort.slice"), "Container [kubernetes]");
  EXPECT_EQ(verdict(s, "/kubepods"), "Container [kubernetes]");
  EXPECT_EQ(verdict(s, "/kubepods/burstable"), "Container [kubernetes]");
  const std::string job = "Job k8s/" + kUid + " " + kPod + " [kubernetes]";
  EXPECT_EQ(verdict(s, kPod), job);
  EXPECT_EQ(verdict(s, kPod + "/cri-containerd-" + kCid + ".scope"), job);
  // Cgroups created later inside a container still belong to the pod.
  EXPECT_EQ(verdict(s, kPod + "/cri-containerd-x.scope/sub"), job);
  EXPECT_EQ(verdict(s, kPod + "/cri-containerd-" + kCid + ".scope/a/b/c"), job);
  EXPECT_EQ(verdict(s, "/kubepods/besteffort/pod" + kUid + "/" + kCid),
            "Job k8s/" + kUid + " /kubepods/besteffort/pod" + kUid + " [kubernetes]");
  // Siblings that are not pods, and what is below them.
  EXPECT_EQ(verdict(s, "/kubepods.slice/foo.slice"), "Excluded");
  EXPECT_EQ(verdict(s, "/kubepods.slice/foo.slice/bar"), "Excluded");
  EXPECT_EQ(verdict(s, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podBAD.slice"),
            "Excluded");
  EXPECT_EQ(verdict(s, "/kubepods/guaranteed"), "Excluded");
  // Outside the roots.
  EXPECT_EQ(verdict(s, "/system.slice"), "Excluded");
  EXPECT_EQ(verdict(s, "/system.slice/kubelet.service"), "Excluded");
  EXPECT_EQ(verdict(s, "/kubepods.slice.old"), "Excluded");
  EXPECT_EQ(verdict(s, "/iolens-test-1/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice"),
            "Excluded");
}

TEST(JobsSelector, KubernetesLabelsComeWithTheJob) {
  const Classification c = Selector({kubernetes()}).classify(kPod + "/crio-" + kCid + ".scope");
  ASSERT_EQ(c.verdict, Verdict::Job);
  EXPECT_EQ(c.identity->kind, "kubernetes");
  EXPECT_EQ(c.identity->labels, (Labels{{"pod_uid", kUid}, {"qos_class", "burstable"}}));
  EXPECT_EQ(c.identity->sub, (Labels{{"container_id", kCid}, {"runtime", "crio"}}));
}

TEST(JobsSelector, KubernetesUnderATestRoot) {
  const Selector s({kubernetes({"/iolens-test-123"}, "test-pods")});
  const std::string pod = "/iolens-test-123/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice";
  EXPECT_EQ(s.watch_roots(), Paths{"/iolens-test-123"});
  EXPECT_EQ(verdict(s, "/iolens-test-123"), "Container [test-pods]");
  EXPECT_EQ(verdict(s, "/iolens-test-123/kubepods.slice"), "Container [test-pods]");
  EXPECT_EQ(verdict(s, pod + "/x"), "Job k8s/" + kUid + " " + pod + " [test-pods]");
  // No kubepods component yet: one may still appear below (a kind node, a nested kubelet).
  EXPECT_EQ(verdict(s, "/iolens-test-123/node-1"), "Container [test-pods]");
  EXPECT_EQ(verdict(s, "/iolens-test-123/kubepods.slice/other"), "Excluded");
  EXPECT_EQ(verdict(s, "/iolens-test-1234"), "Excluded");
}

TEST(JobsSelector, RootThatIsNotAnAncestorLayoutIsStillContainer) {
  // A root the layout would call Off is still watched: the user chose it.
  const Selector s({kubernetes({"/kubepods.slice/odd"})});
  EXPECT_EQ(verdict(s, "/kubepods.slice/odd"), "Container [kubernetes]");
  EXPECT_EQ(verdict(s, "/kubepods.slice/odd/x"), "Excluded");
  EXPECT_EQ(verdict(s, "/kubepods.slice"), "Container [kubernetes]");
}

// --- slurm -------------------------------------------------------------------------------------

TEST(JobsSelector, SlurmVerdicts) {
  const Selector s({slurm()});
  EXPECT_EQ(verdict(s, "/system.slice"), "Container [slurm]");
  EXPECT_EQ(verdict(s, "/system.slice/slurmstepd.scope"), "Container [slurm]");
  EXPECT_EQ(verdict(s, "/system.slice/slurmstepd.scope/system"), "Excluded");
  EXPECT_EQ(verdict(s, "/system.slice/slurmstepd.scope/job_abc"), "Excluded");
  const std::string job = "/system.slice/slurmstepd.scope/job_42";
  EXPECT_EQ(verdict(s, job), "Job slurm/42 " + job + " [slurm]");
  EXPECT_EQ(verdict(s, job + "/step_0/user/task_1"), "Job slurm/42 " + job + " [slurm]");
  EXPECT_EQ(verdict(s, "/system.slice/cron.service"), "Excluded");
  EXPECT_EQ(verdict(s, "/slurm"), "Container [slurm]");
  EXPECT_EQ(verdict(s, "/slurm/uid_1000"), "Container [slurm]");
  EXPECT_EQ(verdict(s, "/slurm/uid_1000/job_7/step_batch"),
            "Job slurm/7 /slurm/uid_1000/job_7 [slurm]");
  EXPECT_EQ(verdict(s, "/slurm/other"), "Excluded");
  // A second slurmd's scope is not under the default roots.
  EXPECT_EQ(verdict(s, "/system.slice/n2_slurmstepd.scope/job_1"), "Excluded");
  const Selector multi(
      {slurm({"/system.slice/n1_slurmstepd.scope", "/system.slice/n2_slurmstepd.scope"})});
  EXPECT_EQ(verdict(multi, "/system.slice/n2_slurmstepd.scope/job_1"),
            "Job slurm/1 /system.slice/n2_slurmstepd.scope/job_1 [slurm]");
  EXPECT_EQ(verdict(multi, "/system.slice/slurmstepd.scope/job_1"), "Excluded");
}

// --- systemd -----------------------------------------------------------------------------------

TEST(JobsSelector, SystemdVerdicts) {
  const Selector s({systemd("/system.slice", {"train-*.service", "eval-?.scope"}, "runs")});
  EXPECT_EQ(s.watch_roots(), Paths{"/system.slice"});
  EXPECT_EQ(verdict(s, "/"), "Container [runs]");
  EXPECT_EQ(verdict(s, "/system.slice"), "Container [runs]");
  const std::string job = "Job systemd/train-1.service /system.slice/train-1.service [runs]";
  EXPECT_EQ(verdict(s, "/system.slice/train-1.service"), job);
  EXPECT_EQ(verdict(s, "/system.slice/train-1.service/worker"), job);
  EXPECT_EQ(verdict(s, "/system.slice/eval-a.scope"),
            "Job systemd/eval-a.scope /system.slice/eval-a.scope [runs]");
  EXPECT_EQ(verdict(s, "/system.slice/eval-ab.scope"), "Excluded");
  EXPECT_EQ(verdict(s, "/system.slice/cron.service"), "Excluded");
  EXPECT_EQ(verdict(s, "/system.slice/cron.service/train-1.service"), "Excluded");
  EXPECT_EQ(verdict(s, "/user.slice"), "Excluded");
  EXPECT_EQ(verdict(s, "/system.slice.d"), "Excluded");
  const Classification c = s.classify("/system.slice/train-1.service");
  EXPECT_EQ(c.identity->kind, "systemd");
  EXPECT_EQ(c.identity->labels, (Labels{{"unit", "train-1.service"}, {"slice", "/system.slice"}}));
}

TEST(JobsSelector, SystemdUserSliceNamesUnitsWithTheirManager) {
  const std::string slice = "/user.slice/user-1000.slice/user@1000.service/app.slice";
  const Selector s({systemd(slice, {"*.scope"})});
  EXPECT_EQ(verdict(s, slice + "/run-1.scope"),
            "Job systemd/user@1000.service/run-1.scope " + slice + "/run-1.scope [systemd]");
  EXPECT_EQ(verdict(s, "/user.slice/user-1000.slice"), "Container [systemd]");
}

// --- cgroup globs ------------------------------------------------------------------------------

TEST(JobsSelector, CgroupGlobVerdicts) {
  const Selector s({cgroup({"/batch.slice/job-*"}, "batch")});
  EXPECT_EQ(verdict(s, "/"), "Container [batch]");
  EXPECT_EQ(verdict(s, "/batch.slice"), "Container [batch]");
  const std::string job = "Job cgroup/batch.slice/job-17 /batch.slice/job-17 [batch]";
  EXPECT_EQ(verdict(s, "/batch.slice/job-17"), job);
  EXPECT_EQ(verdict(s, "/batch.slice/job-17/step/x"), job);
  EXPECT_EQ(verdict(s, "/batch.slice/other"), "Excluded");
  EXPECT_EQ(verdict(s, "/batch.slice/other/job-1"), "Excluded");
  EXPECT_EQ(verdict(s, "/other"), "Excluded");
  const Classification c = s.classify("/batch.slice/job-17");
  EXPECT_EQ(c.identity->kind, "cgroup");
  EXPECT_TRUE(c.identity->labels.empty());
}

TEST(JobsSelector, CgroupGlobAnyDepth) {
  const Selector s({cgroup({"/a/**/job-*"})});
  EXPECT_EQ(verdict(s, "/a"), "Container [cgroup]");
  EXPECT_EQ(verdict(s, "/a/b"), "Container [cgroup]");
  EXPECT_EQ(verdict(s, "/a/b/c"), "Container [cgroup]");
  // `**` matches zero components too.
  EXPECT_EQ(verdict(s, "/a/job-1"), "Job cgroup/a/job-1 /a/job-1 [cgroup]");
  EXPECT_EQ(verdict(s, "/a/b/c/job-2/d"), "Job cgroup/a/b/c/job-2 /a/b/c/job-2 [cgroup]");
  // The shortest matching prefix is the job: a job-* inside a job is part of it.
  EXPECT_EQ(verdict(s, "/a/job-1/x/job-2"), "Job cgroup/a/job-1 /a/job-1 [cgroup]");
  EXPECT_EQ(verdict(s, "/b/job-1"), "Excluded");
  const Selector mid({cgroup({"/a/**/x/*"})});
  EXPECT_EQ(verdict(mid, "/a/x"), "Container [cgroup]");
  EXPECT_EQ(verdict(mid, "/a/x/1"), "Job cgroup/a/x/1 /a/x/1 [cgroup]");
  EXPECT_EQ(verdict(mid, "/a/q/x/x/1"), "Job cgroup/a/q/x/x /a/q/x/x [cgroup]");
  const Selector many({cgroup({"/a/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/z"})});
  EXPECT_EQ(verdict(many, "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y"),
            "Container [cgroup]");  // polynomial, not exponential
}

TEST(JobsSelector, CgroupGlobFixedPathAndShortestAcrossGlobs) {
  const Selector fixed({cgroup({"/fixed/job"})});
  EXPECT_EQ(verdict(fixed, "/fixed"), "Container [cgroup]");
  EXPECT_EQ(verdict(fixed, "/fixed/job"), "Job cgroup/fixed/job /fixed/job [cgroup]");
  EXPECT_EQ(verdict(fixed, "/fixed/job/x"), "Job cgroup/fixed/job /fixed/job [cgroup]");
  EXPECT_EQ(verdict(fixed, "/fixed/jobs"), "Excluded");
  const Selector two({cgroup({"/a/*/*", "/a/*"})});
  EXPECT_EQ(verdict(two, "/a/b/c"), "Job cgroup/a/b /a/b [cgroup]");
}

TEST(JobsSelector, CgroupRuleKeepsLabelsOfAKnownJobAtTheSameCgroup) {
  const Selector s({cgroup({"/kubepods.slice/*/*"}, "pods")});
  // Selects burstable pods: identify() names the same job cgroup, so its labels are kept.
  const Classification pod = s.classify(kPod + "/cri-containerd-" + kCid + ".scope");
  ASSERT_EQ(pod.verdict, Verdict::Job);
  EXPECT_EQ(pod.identity->kind, "cgroup");
  EXPECT_EQ(pod.identity->id, "cgroup" + kPod);
  EXPECT_EQ(pod.identity->job_cgroup, kPod);
  EXPECT_EQ(pod.identity->labels, (Labels{{"pod_uid", kUid}, {"qos_class", "burstable"}}));
  EXPECT_EQ(pod.identity->sub, (Labels{{"container_id", kCid}, {"runtime", "containerd"}}));
  // Selects containers of guaranteed pods: a different cgroup from identify()'s pod: no labels.
  const std::string guaranteed = "/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice";
  const Classification ctr = s.classify(guaranteed + "/cri-containerd-" + kCid + ".scope");
  ASSERT_EQ(ctr.verdict, Verdict::Job);
  EXPECT_EQ(ctr.identity->job_cgroup, guaranteed + "/cri-containerd-" + kCid + ".scope");
  EXPECT_TRUE(ctr.identity->labels.empty());
  EXPECT_TRUE(ctr.identity->sub.empty());
}

// --- several rules -----------------------------------------------------------------------------

TEST(JobsSelector, OutermostJobWinsSoNoJobNestsInAnother) {
  // The cgroup rule makes the whole burstable slice one job; pods below it are part of it.
  const Selector s({kubernetes(), cgroup({"/kubepods.slice/*"}, "slices")});
  const std::string slice = "/kubepods.slice/kubepods-burstable.slice";
  const std::string job = "Job cgroup" + slice + " " + slice + " [slices]";
  EXPECT_EQ(verdict(s, slice), job);
  EXPECT_EQ(verdict(s, kPod), job);
  EXPECT_EQ(verdict(s, kPod + "/cri-containerd-" + kCid + ".scope"), job);
  EXPECT_EQ(verdict(s, "/kubepods.slice"), "Container [kubernetes]");
}

TEST(JobsSelector, SameJobCgroupFirstRuleWins) {
  const Rule all = cgroup({"/system.slice/*"}, "all-services");
  const Rule train = systemd("/system.slice", {"train-*.service"}, "train");
  EXPECT_EQ(verdict(Selector({all, train}), "/system.slice/train-1.service"),
            "Job cgroup/system.slice/train-1.service /system.slice/train-1.service [all-services]");
  EXPECT_EQ(verdict(Selector({train, all}), "/system.slice/train-1.service"),
            "Job systemd/train-1.service /system.slice/train-1.service [train]");
  // Another rule may claim what one rule excludes.
  EXPECT_EQ(verdict(Selector({train, all}), "/system.slice/cron.service"),
            "Job cgroup/system.slice/cron.service /system.slice/cron.service [all-services]");
  // Container: the first rule that says so.
  EXPECT_EQ(verdict(Selector({train, all}), "/system.slice"), "Container [train]");
}

TEST(JobsSelector, MalformedPathsAreExcluded) {
  const Selector s({kubernetes(), cgroup({"/a/*"})});
  for (const std::string& path :
       std::vector<std::string>{"", "kubepods.slice", "/kubepods.slice/", "//kubepods.slice",
                                "/a/../kubepods.slice", std::string("/a/b\0c", 6)}) {
    const Classification c = s.classify(path);
    EXPECT_EQ(c.verdict, Verdict::Excluded) << path;
    EXPECT_TRUE(c.rule.empty());
    EXPECT_FALSE(c.identity);
  }
}

// Along any path, verdicts must be consistent as cgroups are created deeper: below a Job, the
// same job; below an Excluded, Excluded; a Container only below a Container.
TEST(JobsSelector, VerdictsAreConsistentDownEveryPath) {
  const Selector s({kubernetes(), slurm(), systemd("/system.slice", {"train-*"}),
                    cgroup({"/batch/**/job-*", "/kubepods.slice/kubepods-besteffort.slice/*"}),
                    cgroup({"/system.slice/*"}, "services")});
  const std::vector<std::string> words = {"kubepods.slice",
                                          "kubepods-besteffort.slice",
                                          "kubepods-burstable.slice",
                                          "kubepods-pod" + kUidSystemd + ".slice",
                                          "kubepods-besteffort-pod" + kUidSystemd + ".slice",
                                          "kubepods-burstable-pod" + kUidSystemd + ".slice",
                                          "cri-containerd-" + kCid + ".scope",
                                          "kubepods",
                                          "besteffort",
                                          "pod" + kUid,
                                          kCid,
                                          "system.slice",
                                          "slurmstepd.scope",
                                          "job_1",
                                          "step_0",
                                          "user",
                                          "task_0",
                                          "system",
                                          "slurm",
                                          "uid_0",
                                          "train-1.service",
                                          "cron.service",
                                          "batch",
                                          "job-1",
                                          "x",
                                          "docker-" + kCid + ".scope"};
  std::mt19937 rng(7);
  for (int round = 0; round < 5000; ++round) {
    std::string path;
    Classification above{Verdict::Container, std::nullopt, "root"};
    const int depth = 1 + static_cast<int>(rng() % 7);
    for (int d = 0; d < depth; ++d) {
      path += "/" + words[rng() % words.size()];
      const Classification c = s.classify(path);
      if (above.verdict == Verdict::Job) {
        ASSERT_EQ(c.verdict, Verdict::Job) << path;
        EXPECT_EQ(c.identity->id, above.identity->id) << path;
        EXPECT_EQ(c.identity->job_cgroup, above.identity->job_cgroup) << path;
        EXPECT_EQ(c.rule, above.rule) << path;
      } else if (above.verdict == Verdict::Excluded) {
        ASSERT_EQ(c.verdict, Verdict::Excluded) << path;
      }
      if (c.verdict == Verdict::Job) {
        ASSERT_TRUE(c.identity);
        EXPECT_EQ(s.classify(c.identity->job_cgroup).identity->id, c.identity->id) << path;
      }
      above = c;
    }
  }
}

// --- process rules -----------------------------------------------------------------------------

TEST(JobsSelector, ProcessRules) {
  using namespace std::string_literals;
  const Selector s({process("python3", "train\\.py", "py-train"), process("python3", "", "py-any"),
                    process("torchrun", "^torchrun --nproc", "tr"), kubernetes()});
  EXPECT_EQ(s.process_comms(), (Paths{"python3", "torchrun"}));
  EXPECT_EQ(s.match_process("python3", "python3\0train.py\0--epochs\0003\0"s), "py-train");
  EXPECT_EQ(s.match_process("python3", "python3\0eval.py\0"s), "py-any");
  EXPECT_EQ(s.match_process("python3\0\0\0\0\0\0\0\0"s, "python3\0train.py\0"s), "py-train");
  // The cmdline is matched with its NULs made spaces, the trailing one dropped.
  EXPECT_EQ(s.match_process("torchrun", "torchrun\0--nproc_per_node=8\0train.py\0"s), "tr");
  EXPECT_EQ(s.match_process("torchrun", "/usr/bin/torchrun\0--nproc_per_node=8\0"s), std::nullopt);
  EXPECT_EQ(s.match_process("python", "python\0train.py\0"s), std::nullopt);
  EXPECT_EQ(s.match_process("", ""), std::nullopt);
  EXPECT_EQ(Selector({kubernetes()}).match_process("python3", "x"), std::nullopt);
  EXPECT_TRUE(Selector({kubernetes()}).process_comms().empty());
}

TEST(JobsSelector, LongCmdlinesAreSafeFastAndCut) {
  const Selector s({process("python3", "(a|b)*z", "ab"), process("python3", ".*tail", "tail"),
                    process("python3", "^python3 (-u )?train", "anchored")});
  // A backtracking matcher recurses per byte and overflows the stack on this.
  std::string many(Selector::kMaxCmdlineBytes - 1, 'a');
  EXPECT_EQ(s.match_process("python3", many + "z"), "ab");
  // A scan to the end that fails, from every start position, would be quadratic: one pass here.
  // (One pass: milliseconds, seconds in a Debug ASan build; the quadratic one: hours.)
  const std::string huge(16 << 20, 'x');
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s.match_process("python3", huge), std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  // Beyond kMaxCmdlineBytes nothing is searched.
  std::string far(Selector::kMaxCmdlineBytes, 'x');
  EXPECT_EQ(s.match_process("python3", far + "tail"), std::nullopt);
  EXPECT_EQ(s.match_process("python3", far.substr(4) + "tail"), "tail");
  // '^' still means the start of the cmdline, not of any position searched from.
  using namespace std::string_literals;
  EXPECT_EQ(s.match_process("python3", "python3\0-u\0train.py\0"s), "anchored");
  EXPECT_EQ(s.match_process("python3", "x python3\0train.py\0"s), std::nullopt);
}

TEST(JobsSelector, RulesParseConfigRefusesThrowHere) {
  EXPECT_THROW(Selector({process("x", "(", "p")}), std::invalid_argument);
  EXPECT_THROW(Selector({process("x", "(a)\\1", "p")}), std::invalid_argument);
  EXPECT_THROW(Selector({kubernetes({"relative"})}), std::invalid_argument);
  EXPECT_THROW(Selector({systemd("/a/", {"*"})}), std::invalid_argument);
  EXPECT_THROW(Selector({cgroup({"/a//b"})}), std::invalid_argument);
  EXPECT_NO_THROW(Selector({}));
  const Selector copy = Selector({kubernetes({}, "k")});
  const Selector other = copy;  // NOLINT: copies share the compiled rules
  EXPECT_EQ(other.rules().size(), 1u);
  EXPECT_EQ(other.rules()[0].name, "k");
}

// --- globs -------------------------------------------------------------------------------------

TEST(JobsGlob, ComponentMatching) {
  struct Case {
    std::string pattern, text;
    bool match;
  };
  for (const Case& c : std::vector<Case>{{"*", "", true},
                                         {"*", "anything", true},
                                         {"train-*.service", "train-1.service", true},
                                         {"train-*.service", "train-.service", true},
                                         {"train-*.service", "train-1.scope", false},
                                         {"train-*.service", "xtrain-1.service", false},
                                         {"?", "a", true},
                                         {"?", "", false},
                                         {"?", "ab", false},
                                         {"a?c", "abc", true},
                                         {"[abc]", "b", true},
                                         {"[abc]", "d", false},
                                         {"job-[0-9]", "job-7", true},
                                         {"job-[0-9]", "job-x", false},
                                         {"[!a]", "b", true},
                                         {"[!a]", "a", false},
                                         {"[^a-c]x", "dx", true},
                                         {"[^a-c]x", "bx", false},
                                         {"[]]", "]", true},
                                         {"[!]]", "]", false},
                                         {"[!]]", "a", true},
                                         {"[a-]", "-", true},
                                         {"[ab", "[ab", true},
                                         {"[ab", "a", false},  // unterminated: a literal '['
                                         {"*a*b*c", "xxaybbzc", true},
                                         {"*a*b*c", "xxaybbz", false},
                                         {"a*", "a", true},
                                         {"**", "abc", true},
                                         {"*.*", "a.b", true},
                                         {"", "", true},
                                         {"", "a", false},
                                         {"?", "\xff", true},
                                         {"[\x80-\xff]", "\xc3", true},
                                         {"[\x80-\xff]", "a", false},
                                         {"a*a*a*a*a*a*a*a*a*b", std::string(200, 'a'), false}}) {
    EXPECT_EQ(glob_component_matches(c.pattern, c.text), c.match)
        << "'" << c.pattern << "' vs '" << c.text << "'";
  }
}

TEST(JobsGlob, Checks) {
  EXPECT_EQ(check_cgroup_glob("/batch.slice/job-*"), "");
  EXPECT_EQ(check_cgroup_glob("/a/**/b/[0-9]?"), "");
  EXPECT_EQ(check_cgroup_glob("/fixed"), "");
  EXPECT_EQ(check_cgroup_glob("batch/*"),
            "expected an absolute cgroup path (starting with '/'), got 'batch/*'");
  EXPECT_EQ(check_cgroup_glob(""), "expected an absolute cgroup path (starting with '/'), got ''");
  EXPECT_EQ(check_cgroup_glob("/"), "'/' would make the kernel trace the whole machine");
  EXPECT_EQ(check_cgroup_glob("/a//b"),
            "'/a//b' has an empty, '.' or '..' component (or a trailing '/')");
  EXPECT_EQ(check_cgroup_glob("/a/b/"),
            "'/a/b/' has an empty, '.' or '..' component (or a trailing '/')");
  EXPECT_EQ(check_cgroup_glob("/a/../b"),
            "'/a/../b' has an empty, '.' or '..' component (or a trailing '/')");
  EXPECT_EQ(check_cgroup_glob("/a/x**/b"),
            "'**' must be a whole component, got 'x**' in '/a/x**/b'");
  EXPECT_EQ(check_cgroup_glob("/a/[0-9/b"), "unterminated '[' in '/a/[0-9/b'");
  const std::string whole_machine =
      " has a wildcard: the kernel would trace the whole machine; start with a fixed component "
      "such as /kubepods.slice or /system.slice";
  EXPECT_EQ(check_cgroup_glob("/*/job"), "the first component '*'" + whole_machine);
  EXPECT_EQ(check_cgroup_glob("/**/job-*"), "the first component '**'" + whole_machine);
  EXPECT_EQ(check_cgroup_glob("/kube*.slice/x"),
            "the first component 'kube*.slice'" + whole_machine);
  EXPECT_EQ(check_cgroup_glob("/batch/**"),
            "a trailing '**' adds nothing: the job is the shortest matching prefix, so '/batch' "
            "itself would be the job; write '/batch', or '/batch/*' to make each child a job");
  EXPECT_EQ(check_name_glob("train-*.service"), "");
  EXPECT_EQ(check_name_glob(""), "expected a unit name or glob, got ''");
  EXPECT_EQ(check_name_glob("a/b.service"),
            "expected a unit name or glob, not a path, got 'a/b.service'");
  EXPECT_EQ(check_name_glob("x[.service"), "unterminated '[' in 'x[.service'");
  EXPECT_EQ(cgroup_glob_static_prefix("/a/b/*/c"), "/a/b");
  EXPECT_EQ(cgroup_glob_static_prefix("/a/b"), "/a/b");
  EXPECT_EQ(cgroup_glob_static_prefix("/*"), "/");
  EXPECT_TRUE(has_wildcard("a?"));
  EXPECT_TRUE(has_wildcard("[a]"));
  EXPECT_FALSE(has_wildcard("a.b-c_d@e"));
}

TEST(JobsGlob, CmdlineRegexChecks) {
  EXPECT_EQ(check_cmdline_regex("train\\.py --epochs [0-9]+"), "");
  EXPECT_TRUE(check_cmdline_regex("(").starts_with("invalid regular expression: "))
      << check_cmdline_regex("(");
  EXPECT_TRUE(check_cmdline_regex("(a)\\1").starts_with("invalid regular expression: "));
  // Checked as written, not as wrapped for the search.
  EXPECT_TRUE(check_cmdline_regex("a)(b").starts_with("invalid regular expression: "));
  EXPECT_EQ(check_cmdline_regex("a|b"), "");
  EXPECT_EQ(check_cmdline_regex(std::string(1025, 'a')),
            "a regular expression of at most 1024 bytes, got 1025");
  EXPECT_EQ(check_cmdline_regex(std::string(1024, 'a')), "");
  // Deep nesting within the length limit compiles without exhausting the stack.
  EXPECT_EQ(check_cmdline_regex(std::string(500, '(') + "a" + std::string(500, ')')), "");
}

// --- cgroup root -------------------------------------------------------------------------------

namespace {

// A pure cgroup v2 host (Debian 12, systemd 252).
const std::string kMountinfoV2 =
    "22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "23 28 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw\n"
    "28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "26 22 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
    "27 22 0:25 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:10 - bpf bpf rw,mode=700\n";

// systemd's hybrid layout: v1 controllers on a tmpfs, the unified hierarchy at .../unified.
const std::string kMountinfoHybrid =
    "22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "25 22 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755\n"
    "26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 "
    "cgroup2 "
    "rw,nsdelegate\n"
    "27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup "
    "rw,xattr,name=systemd\n"
    "30 25 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup "
    "rw,memory\n";

// Only cgroup v1.
const std::string kMountinfoV1 =
    "25 22 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755\n"
    "30 25 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup "
    "rw,memory\n";

}  // namespace

TEST(JobsCgroupRoot, AutoPureV2) {
  const RootResult r = resolve_cgroup_root("auto", kMountinfoV2);
  EXPECT_EQ(r.path, "/sys/fs/cgroup");
  EXPECT_EQ(r.error, "");
}

TEST(JobsCgroupRoot, AutoHybrid) {
  const RootResult r = resolve_cgroup_root("auto", kMountinfoHybrid);
  EXPECT_EQ(r.path, "/sys/fs/cgroup/unified");
  EXPECT_EQ(r.error, "");
}

TEST(JobsCgroupRoot, AutoNone) {
  for (const std::string& text : {kMountinfoV1, std::string(), std::string("garbage\n\n- -\n")}) {
    const RootResult r = resolve_cgroup_root("auto", text);
    EXPECT_EQ(r.path, "");
    EXPECT_EQ(r.error,
              "no cgroup2 file system is mounted; iolensd needs the unified hierarchy (boot with "
              "systemd.unified_cgroup_hierarchy=1, or mount -t cgroup2 none /sys/fs/cgroup)");
  }
}

TEST(JobsCgroupRoot, AutoElsewhereAndHiddenMounts) {
  const std::string elsewhere =
      kMountinfoV1 + "40 28 0:40 / /run/my\\040cgroup rw,relatime shared:20 - cgroup2 none rw\n";
  EXPECT_EQ(resolve_cgroup_root("auto", elsewhere).path, "/run/my cgroup");
  // A tmpfs mounted over the cgroup2 mount hides it.
  const std::string hidden =
      kMountinfoV2 + "50 26 0:50 / /sys/fs/cgroup rw,relatime shared:30 - tmpfs tmpfs rw\n";
  EXPECT_EQ(resolve_cgroup_root("auto", hidden).path, "");
  // Optional fields are any in number, before the separator.
  const std::string optional_fields =
      "26 22 0:24 / /sys/fs/cgroup rw shared:9 master:3 propagate_from:2 - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(resolve_cgroup_root("auto", optional_fields).path, "/sys/fs/cgroup");
  const std::string no_optional = "26 22 0:24 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(resolve_cgroup_root("auto", no_optional).path, "/sys/fs/cgroup");
}

TEST(JobsCgroupRoot, Configured) {
  EXPECT_EQ(resolve_cgroup_root("/sys/fs/cgroup", kMountinfoV2).path, "/sys/fs/cgroup");
  EXPECT_EQ(resolve_cgroup_root("/sys/fs/cgroup/", kMountinfoV2).path, "/sys/fs/cgroup");
  EXPECT_EQ(resolve_cgroup_root("/sys/fs/cgroup/unified", kMountinfoHybrid).path,
            "/sys/fs/cgroup/unified");
  const RootResult not_mount = resolve_cgroup_root("/sys/fs/cgroup/unified", kMountinfoV2);
  EXPECT_EQ(not_mount.path, "");
  EXPECT_EQ(not_mount.error, "cgroup_root '/sys/fs/cgroup/unified' is not a mount point");
  EXPECT_EQ(resolve_cgroup_root("/sys/fs/cgroup/memory", kMountinfoHybrid).error,
            "cgroup_root '/sys/fs/cgroup/memory' is a cgroup v1 hierarchy; iolensd needs the "
            "unified hierarchy (cgroup2)");
  EXPECT_EQ(resolve_cgroup_root("/sys/fs/cgroup", kMountinfoHybrid).error,
            "cgroup_root '/sys/fs/cgroup' is a tmpfs mount, not cgroup2");
  EXPECT_EQ(resolve_cgroup_root("sys/fs/cgroup", kMountinfoV2).error,
            "cgroup_root 'sys/fs/cgroup' is neither 'auto' nor an absolute path");
}
