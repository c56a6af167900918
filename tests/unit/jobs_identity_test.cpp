// SPDX-License-Identifier: Apache-2.0
// Job identity from cgroup paths: every layout kubelet, Slurm, systemd and the container engines
// create, the ancestors that are not jobs yet, malformed names, and hostile bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "jobs/identity.hpp"

using namespace iolens::jobs;
using Labels = std::map<std::string, std::string>;

namespace {

// A pod UID as the API server makes it, and as the systemd driver writes it in slice names.
const std::string kUid = "8f0c3b9e-6a1d-4c2b-9e7f-1a2b3c4d5e6f";
const std::string kUidSystemd = "8f0c3b9e_6a1d_4c2b_9e7f_1a2b3c4d5e6f";
// Container ids are SHA-256 digests: 64 lower-case hex digits.
const std::string kCid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kCid2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

Identity must(const std::optional<Identity>& id, const std::string& path) {
  EXPECT_TRUE(id.has_value()) << path;
  return id.value_or(Identity{});
}

}  // namespace

TEST(JobsSplit, Components) {
  EXPECT_EQ(split_cgroup_path("/"), std::vector<std::string_view>{});
  EXPECT_EQ(split_cgroup_path("/a/b.slice"), (std::vector<std::string_view>{"a", "b.slice"}));
  EXPECT_FALSE(split_cgroup_path(""));
  EXPECT_FALSE(split_cgroup_path("a/b"));
  EXPECT_FALSE(split_cgroup_path("/a/"));
  EXPECT_FALSE(split_cgroup_path("//a"));
  EXPECT_FALSE(split_cgroup_path("/a//b"));
  EXPECT_FALSE(split_cgroup_path("/a/./b"));
  EXPECT_FALSE(split_cgroup_path("/a/../b"));
  EXPECT_FALSE(split_cgroup_path(std::string("/a\0b", 4)));
  EXPECT_TRUE(split_cgroup_path("/.hidden/..x/a b/\xff"));  // odd names are still names
}

// --- kubernetes, systemd cgroup driver ---------------------------------------------------------

TEST(JobsKubernetes, SystemdGuaranteedPodWithContainerd) {
  const std::string pod = "/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice";
  const std::string path = pod + "/cri-containerd-" + kCid + ".scope";
  const Identity id = must(parse_kubernetes(path), path);
  EXPECT_EQ(id.kind, "kubernetes");
  EXPECT_EQ(id.id, "k8s/" + kUid);
  EXPECT_EQ(id.job_cgroup, pod);
  EXPECT_EQ(id.labels, (Labels{{"pod_uid", kUid}, {"qos_class", "guaranteed"}}));
  EXPECT_EQ(id.sub, (Labels{{"container_id", kCid}, {"runtime", "containerd"}}));
}

TEST(JobsKubernetes, SystemdBurstableAndBestEffortWithEachRuntime) {
  const std::string burstable =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice";
  const std::string besteffort =
      "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSystemd + ".slice";
  struct Case {
    std::string pod, scope, qos, runtime;
  };
  for (const Case& c :
       {Case{burstable, "cri-containerd-" + kCid + ".scope", "burstable", "containerd"},
        Case{burstable, "crio-" + kCid + ".scope", "burstable", "crio"},
        Case{besteffort, "docker-" + kCid + ".scope", "besteffort", "docker"},
        Case{besteffort, "crio-conmon-" + kCid + ".scope", "besteffort", "crio-conmon"}}) {
    const std::string path = c.pod + "/" + c.scope;
    const Identity id = must(parse_kubernetes(path), path);
    EXPECT_EQ(id.id, "k8s/" + kUid) << path;
    EXPECT_EQ(id.job_cgroup, c.pod) << path;
    EXPECT_EQ(id.labels, (Labels{{"pod_uid", kUid}, {"qos_class", c.qos}})) << path;
    EXPECT_EQ(id.sub, (Labels{{"container_id", kCid}, {"runtime", c.runtime}})) << path;
  }
}

TEST(JobsKubernetes, PodCgroupItselfAndDeeperCgroupsBelongToThePod) {
  const std::string pod =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice";
  const Identity at_pod = must(parse_kubernetes(pod), pod);
  EXPECT_EQ(at_pod.job_cgroup, pod);
  EXPECT_TRUE(at_pod.sub.empty());
  // A container scope whose name is not an engine's: still the pod, no container labels.
  const Identity odd = must(parse_kubernetes(pod + "/cri-containerd-x.scope/sub"), pod);
  EXPECT_EQ(odd.id, "k8s/" + kUid);
  EXPECT_EQ(odd.job_cgroup, pod);
  EXPECT_TRUE(odd.sub.empty());
  // Cgroups a container creates inside itself (systemd in a container, nested runtimes).
  const std::string deep = pod + "/cri-containerd-" + kCid + ".scope/init.scope/a/b";
  const Identity nested = must(parse_kubernetes(deep), deep);
  EXPECT_EQ(nested.job_cgroup, pod);
  EXPECT_EQ(nested.sub, (Labels{{"container_id", kCid}, {"runtime", "containerd"}}));
}

TEST(JobsKubernetes, StaticPodUidIsAHashWithoutDashes) {
  const std::string hash = "e5f2f1c5d7fa5b5f7a3a6e2c86b4f0d1";
  const std::string path =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + hash + ".slice";
  const Identity id = must(parse_kubernetes(path), path);
  EXPECT_EQ(id.id, "k8s/" + hash);
  EXPECT_EQ(id.labels.at("pod_uid"), hash);
  EXPECT_EQ(must(parse_kubernetes("/kubepods/pod" + hash + "/" + kCid), hash).id, "k8s/" + hash);
}

TEST(JobsKubernetes, KubepodsBelowOtherComponents) {
  // A test tree.
  const std::string test_pod =
      "/iolens-test-123/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice";
  EXPECT_EQ(must(parse_kubernetes(test_pod + "/x"), test_pod).job_cgroup, test_pod);
  // kind: the kubelet's cgroup root is /kubelet, so systemd names every slice below it after it.
  const std::string kind_pod =
      "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
      "kubelet-kubepods-besteffort-pod" +
      kUidSystemd + ".slice";
  const Identity in_kind =
      must(parse_kubernetes(kind_pod + "/cri-containerd-" + kCid + ".scope"), kind_pod);
  EXPECT_EQ(in_kind.job_cgroup, kind_pod);
  EXPECT_EQ(in_kind.labels, (Labels{{"pod_uid", kUid}, {"qos_class", "besteffort"}}));
  // kind seen from the host: the node is a docker container.
  const std::string host_view = "/system.slice/docker-" + kCid2 + ".scope" + kind_pod;
  EXPECT_EQ(must(parse_kubernetes(host_view), host_view).job_cgroup, host_view);
  const std::string kind_guaranteed =
      "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + kUidSystemd + ".slice";
  EXPECT_EQ(must(parse_kubernetes(kind_guaranteed), kind_guaranteed).labels.at("qos_class"),
            "guaranteed");
  // k3s/kind with the cgroupfs driver below a container.
  const std::string k3s = "/system.slice/docker-" + kCid2 + ".scope/kubepods/besteffort/pod" + kUid;
  EXPECT_EQ(must(parse_kubernetes(k3s + "/" + kCid), k3s).job_cgroup, k3s);
}

TEST(JobsKubernetes, PrefixedKubepodsSliceNeedsItsParentSlice) {
  // "<p>-kubepods.slice" is the kubepods slice only right under "<p>.slice", as systemd nests.
  const std::string pod = "kubelet-kubepods-pod" + kUidSystemd + ".slice";
  EXPECT_FALSE(parse_kubernetes("/other.slice/kubelet-kubepods.slice/" + pod));
  EXPECT_EQ(match_kubernetes("/other.slice/kubelet-kubepods.slice/" + pod).layout, Layout::Before);
  EXPECT_FALSE(parse_kubernetes("/kubelet-kubepods.slice/" + pod));
  EXPECT_FALSE(parse_kubernetes("/-kubepods.slice/-kubepods-pod" + kUidSystemd + ".slice"));
}

TEST(JobsKubernetes, NestedKubeletBelongsToTheOuterPod) {
  const std::string outer = "/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice";
  const std::string inner = outer + "/cri-containerd-" + kCid +
                            ".scope/kubelet.slice/"
                            "kubelet-kubepods.slice/kubelet-kubepods-pod"
                            "11111111_2222_3333_4444_555555555555.slice";
  EXPECT_EQ(must(parse_kubernetes(inner), inner).job_cgroup, outer);
}

// --- kubernetes, cgroupfs driver ---------------------------------------------------------------

TEST(JobsKubernetes, CgroupfsEachQosClass) {
  struct Case {
    std::string pod, qos;
  };
  for (const Case& c : {Case{"/kubepods/pod" + kUid, "guaranteed"},
                        Case{"/kubepods/burstable/pod" + kUid, "burstable"},
                        Case{"/kubepods/besteffort/pod" + kUid, "besteffort"}}) {
    const Identity id = must(parse_kubernetes(c.pod + "/" + kCid), c.pod);
    EXPECT_EQ(id.kind, "kubernetes");
    EXPECT_EQ(id.id, "k8s/" + kUid);
    EXPECT_EQ(id.job_cgroup, c.pod);
    EXPECT_EQ(id.labels, (Labels{{"pod_uid", kUid}, {"qos_class", c.qos}}));
    // containerd and docker name the cgroup by the bare id: the runtime is unknown.
    EXPECT_EQ(id.sub, (Labels{{"container_id", kCid}}));
  }
  const Identity crio =
      must(parse_kubernetes("/kubepods/burstable/pod" + kUid + "/crio-" + kCid), "crio");
  EXPECT_EQ(crio.sub, (Labels{{"container_id", kCid}, {"runtime", "crio"}}));
  const Identity conmon =
      must(parse_kubernetes("/kubepods/pod" + kUid + "/crio-conmon-" + kCid), "conmon");
  EXPECT_EQ(conmon.sub, (Labels{{"container_id", kCid}, {"runtime", "crio-conmon"}}));
  // The systemd driver's scope names do not appear under the cgroupfs layout.
  EXPECT_TRUE(
      must(parse_kubernetes("/kubepods/pod" + kUid + "/crio-" + kCid + ".scope"), "x").sub.empty());
}

TEST(JobsKubernetes, AncestorsAreNotJobs) {
  for (const std::string path :
       {"/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice",
        "/kubepods.slice/kubepods-besteffort.slice", "/kubepods", "/kubepods/burstable",
        "/kubepods/besteffort", "/iolens-test-123/kubepods.slice",
        "/kubelet.slice/kubelet-kubepods.slice",
        "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice"}) {
    EXPECT_FALSE(parse_kubernetes(path)) << path;
    EXPECT_EQ(match_kubernetes(path).layout, Layout::Ancestor) << path;
  }
  for (const std::string& path :
       std::vector<std::string>{"/", "/system.slice", "/system.slice/kubelet.service",
                                "/kubelet.slice", "/kubepods-x"}) {
    EXPECT_EQ(match_kubernetes(path).layout, Layout::Before) << path;
  }
}

TEST(JobsKubernetes, MalformedPodsAreRefused) {
  const std::string qos = "/kubepods.slice/kubepods-burstable.slice/";
  for (const std::string& path : std::vector<std::string>{
           // uid: dashes in a systemd name, upper case, too short, not hex, empty
           qos + "kubepods-burstable-pod" + kUid + ".slice",
           qos + "kubepods-burstable-pod8F0C3B9E_6A1D_4C2B_9E7F_1A2B3C4D5E6F.slice",
           qos + "kubepods-burstable-pod8f0c3b9e_6a1d_4c2b_9e7f_1a2b3c4d5e6.slice",
           qos + "kubepods-burstable-podzf0c3b9e_6a1d_4c2b_9e7f_1a2b3c4d5e6f.slice",
           qos + "kubepods-burstable-pod.slice",
           qos + "kubepods-burstable-pod" + kUidSystemd,  // no .slice
           // QoS class mismatch, or a burstable pod outside its QoS slice
           qos + "kubepods-besteffort-pod" + kUidSystemd + ".slice",
           "/kubepods.slice/kubepods-burstable-pod" + kUidSystemd + ".slice",
           "/kubepods.slice/kubepods-guaranteed.slice/kubepods-guaranteed-pod" + kUidSystemd +
               ".slice",
           "/kubepods.slice/something.slice",
           // cgroupfs: underscores, unknown QoS, no "pod" prefix
           "/kubepods/pod" + kUidSystemd,
           "/kubepods/guaranteed/pod" + kUid,
           "/kubepods/" + kUid,
           "/kubepods/burstable/" + kCid,
       }) {
    EXPECT_FALSE(parse_kubernetes(path)) << path;
    EXPECT_EQ(match_kubernetes(path).layout, Layout::Off) << path;
    EXPECT_EQ(
        match_kubernetes(path + "/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice").layout,
        Layout::Off)
        << "a path that left the layout must not re-enter it further down: " << path;
  }
}

// --- slurm -------------------------------------------------------------------------------------

TEST(JobsSlurm, CgroupV2Steps) {
  const std::string job = "/system.slice/slurmstepd.scope/job_4242";
  struct Case {
    std::string below;
    Labels sub;
  };
  for (const Case& c :
       {Case{"", {}}, Case{"/step_0", {{"slurm_step", "0"}}},
        Case{"/step_0/user/task_3", {{"slurm_step", "0"}, {"slurm_task", "3"}}},
        Case{"/step_12/user/task_0/x", {{"slurm_step", "12"}, {"slurm_task", "0"}}},
        Case{"/step_0/slurm", {{"slurm_step", "0"}}}, Case{"/step_0/user", {{"slurm_step", "0"}}},
        Case{"/step_batch/user/task_0", {{"slurm_step", "batch"}, {"slurm_task", "0"}}},
        Case{"/step_extern/user/task_special", {{"slurm_step", "extern"}}},
        Case{"/step_interactive", {{"slurm_step", "interactive"}}},
        Case{"/step_foo/user/task_1", {}}, Case{"/step_01", {}}}) {
    const std::string path = job + c.below;
    const Identity id = must(parse_slurm(path), path);
    EXPECT_EQ(id.kind, "slurm");
    EXPECT_EQ(id.id, "slurm/4242");
    EXPECT_EQ(id.job_cgroup, job);
    EXPECT_EQ(id.labels, (Labels{{"slurm_job", "4242"}})) << path;
    EXPECT_EQ(id.sub, c.sub) << path;
  }
}

TEST(JobsSlurm, MultipleSlurmdScopeAndOtherPlacements) {
  const std::string job = "/system.slice/node07_slurmstepd.scope/job_7";
  EXPECT_EQ(must(parse_slurm(job + "/step_batch"), job).job_cgroup, job);
  // slurmd started outside systemd: the scope elsewhere.
  const std::string elsewhere = "/slurmstepd.scope/job_8";
  EXPECT_EQ(must(parse_slurm(elsewhere + "/step_0/user/task_0"), elsewhere).id, "slurm/8");
}

TEST(JobsSlurm, CgroupV1Layout) {
  const std::string job = "/slurm/uid_1000/job_5";
  const Identity id = must(parse_slurm(job + "/step_0/task_1"), job);
  EXPECT_EQ(id.id, "slurm/5");
  EXPECT_EQ(id.job_cgroup, job);
  EXPECT_EQ(id.labels, (Labels{{"slurm_job", "5"}, {"slurm_uid", "1000"}}));
  EXPECT_EQ(id.sub, (Labels{{"slurm_step", "0"}, {"slurm_task", "1"}}));
  const std::string named = "/slurm_node07/uid_0/job_9";
  const Identity root_job = must(parse_slurm(named + "/step_batch"), named);
  EXPECT_EQ(root_job.job_cgroup, named);
  EXPECT_EQ(root_job.labels, (Labels{{"slurm_job", "9"}, {"slurm_uid", "0"}}));
  EXPECT_EQ(root_job.sub, (Labels{{"slurm_step", "batch"}}));
}

TEST(JobsSlurm, AncestorsAndSlurmstepdItselfAreNotJobs) {
  for (const std::string& path :
       std::vector<std::string>{"/system.slice/slurmstepd.scope", "/slurm", "/slurm/uid_1000",
                                "/slurm_node07", "/system.slice/node07_slurmstepd.scope"}) {
    EXPECT_FALSE(parse_slurm(path)) << path;
    EXPECT_EQ(match_slurm(path).layout, Layout::Ancestor) << path;
  }
  EXPECT_EQ(match_slurm("/system.slice/slurmstepd.scope/system").layout, Layout::Off);
  EXPECT_FALSE(parse_slurm("/system.slice/slurmstepd.scope/system"));
  for (const std::string& path :
       std::vector<std::string>{"/", "/system.slice", "/system.slice/slurmd.service",
                                "/system.slice/_slurmstepd.scope/job_1", "/slurm_/uid_1/job_1"}) {
    EXPECT_EQ(match_slurm(path).layout, Layout::Before) << path;
  }
}

TEST(JobsSlurm, MalformedJobsAreRefused) {
  for (const std::string& path : std::vector<std::string>{
           "/system.slice/slurmstepd.scope/job_abc",
           "/system.slice/slurmstepd.scope/job_",
           "/system.slice/slurmstepd.scope/job_0",
           "/system.slice/slurmstepd.scope/job_007",
           "/system.slice/slurmstepd.scope/job_-1",
           "/system.slice/slurmstepd.scope/job_1a",
           "/system.slice/slurmstepd.scope/job_4294967296",
           "/system.slice/slurmstepd.scope/job_99999999999",
           "/system.slice/slurmstepd.scope/uid_1/job_1",
           "/slurm/job_5",
           "/slurm/uid_x/job_5",
           "/slurm/uid_/job_5",
           "/slurm/uid_1000/job_x/step_0",
           "/slurm/uid_01/job_5",
       }) {
    EXPECT_FALSE(parse_slurm(path)) << path;
    EXPECT_EQ(match_slurm(path).layout, Layout::Off) << path;
  }
  EXPECT_EQ(must(parse_slurm("/system.slice/slurmstepd.scope/job_4294967295"), "max").id,
            "slurm/4294967295");
}

// --- systemd -----------------------------------------------------------------------------------

TEST(JobsSystemd, ServiceAndScopeUnits) {
  const Identity svc = must(parse_systemd("/system.slice/train-1.service"), "svc");
  EXPECT_EQ(svc.kind, "systemd");
  EXPECT_EQ(svc.id, "systemd/train-1.service");
  EXPECT_EQ(svc.job_cgroup, "/system.slice/train-1.service");
  EXPECT_EQ(svc.labels, (Labels{{"unit", "train-1.service"}, {"slice", "/system.slice"}}));
  EXPECT_TRUE(svc.sub.empty());
  // Cgroups a delegated service makes below itself belong to it.
  EXPECT_EQ(must(parse_systemd("/system.slice/train-1.service/worker/0"), "deep").job_cgroup,
            "/system.slice/train-1.service");
  const Identity scope = must(parse_systemd("/batch.slice/batch-a.slice/run-r1f.scope"), "scope");
  EXPECT_EQ(scope.id, "systemd/run-r1f.scope");
  EXPECT_EQ(scope.labels,
            (Labels{{"unit", "run-r1f.scope"}, {"slice", "/batch.slice/batch-a.slice"}}));
  const Identity init = must(parse_systemd("/init.scope"), "init");
  EXPECT_EQ(init.labels, (Labels{{"unit", "init.scope"}, {"slice", "/"}}));
  EXPECT_EQ(must(parse_systemd("/system.slice/getty@tty1.service"), "tpl").id,
            "systemd/getty@tty1.service");
}

TEST(JobsSystemd, UserUnitsAreNamedWithTheirManager) {
  // Unit names are unique per manager only: two users may both run app-x.scope.
  const std::string path = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-x.scope";
  const Identity id = must(parse_systemd(path), path);
  EXPECT_EQ(id.id, "systemd/user@1000.service/app-x.scope");
  EXPECT_EQ(id.job_cgroup, path);
  EXPECT_EQ(id.labels,
            (Labels{{"unit", "app-x.scope"},
                    {"slice", "/user.slice/user-1000.slice/user@1000.service/app.slice"}}));
}

TEST(JobsSystemd, ContainerScopesAreSkipped) {
  EXPECT_FALSE(parse_systemd("/system.slice/docker-" + kCid + ".scope"));
  EXPECT_FALSE(parse_systemd("/machine.slice/libpod-conmon-" + kCid + ".scope"));
  const Identity id =
      must(parse_systemd("/system.slice/foo.service/docker-" + kCid + ".scope/x"), "x");
  EXPECT_EQ(id.job_cgroup, "/system.slice/foo.service");
  // A scope that only looks like a container's is a unit.
  EXPECT_EQ(must(parse_systemd("/system.slice/docker-x.scope"), "x").id, "systemd/docker-x.scope");
}

TEST(JobsSystemd, NotUnits) {
  for (const std::string& path : std::vector<std::string>{
           "/", "/system.slice", "/user.slice/user-1000.slice", "/system.slice/.service",
           "/system.slice/a b.service", "/system.slice/x.socket", "/system.slice/x.service.d",
           "/system.slice/\xff.service", "relative/x.service"}) {
    EXPECT_FALSE(parse_systemd(path)) << path;
  }
  EXPECT_FALSE(parse_systemd("/system.slice/" + std::string(250, 'a') + ".service"));
}

// --- containers outside kubernetes -------------------------------------------------------------

TEST(JobsContainer, EachEngine) {
  struct Case {
    std::string path, job, id, runtime;
  };
  const std::string d = "/system.slice/docker-" + kCid + ".scope";
  for (const Case& c :
       {Case{d, d, "docker/" + kCid, "docker"},
        Case{d + "/init.scope/x", d, "docker/" + kCid, "docker"},
        Case{"/docker/" + kCid, "/docker/" + kCid, "docker/" + kCid, "docker"},
        Case{"/docker/" + kCid + "/sub", "/docker/" + kCid, "docker/" + kCid, "docker"},
        Case{"/machine.slice/libpod-" + kCid + ".scope", "/machine.slice/libpod-" + kCid + ".scope",
             "podman/" + kCid, "podman"},
        Case{"/system.slice/cri-containerd-" + kCid + ".scope",
             "/system.slice/cri-containerd-" + kCid + ".scope", "containerd/" + kCid, "containerd"},
        Case{"/system.slice/crio-" + kCid + ".scope", "/system.slice/crio-" + kCid + ".scope",
             "crio/" + kCid, "crio"}}) {
    const Identity id = must(parse_container(c.path), c.path);
    EXPECT_EQ(id.kind, "container");
    EXPECT_EQ(id.id, c.id) << c.path;
    EXPECT_EQ(id.job_cgroup, c.job) << c.path;
    EXPECT_EQ(id.labels, (Labels{{"runtime", c.runtime}, {"container_id", kCid}})) << c.path;
    EXPECT_TRUE(id.sub.empty());
  }
}

TEST(JobsContainer, OutermostContainerIsTheJob) {
  const std::string outer = "/system.slice/docker-" + kCid + ".scope";
  EXPECT_EQ(must(parse_container(outer + "/docker/" + kCid2), "dind").job_cgroup, outer);
}

TEST(JobsContainer, NotContainers) {
  for (const std::string& path : std::vector<std::string>{
           "/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice/cri-containerd-" + kCid +
               ".scope",
           "/kubepods/pod" + kUid + "/" + kCid, "/kubepods.slice/docker-" + kCid + ".scope",
           "/system.slice/crio-conmon-" + kCid + ".scope",
           "/machine.slice/libpod-conmon-" + kCid + ".scope",
           "/system.slice/docker-" + kCid.substr(1) + ".scope",
           "/system.slice/docker-" + std::string(64, 'A') + ".scope", "/docker", "/docker/abc",
           "/system.slice/docker.service", "/" + kCid}) {
    EXPECT_FALSE(parse_container(path)) << path;
  }
}

// --- identify ----------------------------------------------------------------------------------

TEST(JobsIdentify, TriesKubernetesSlurmContainerSystemdInOrder) {
  const std::string pod = "/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice";
  EXPECT_EQ(must(identify(pod + "/cri-containerd-" + kCid + ".scope"), pod).kind, "kubernetes");
  // The kind node is a docker container, but the pod inside it is the job.
  const std::string kind_pod = "/system.slice/docker-" + kCid2 +
                               ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" +
                               kUidSystemd + ".slice";
  EXPECT_EQ(must(identify(kind_pod), kind_pod).kind, "kubernetes");
  EXPECT_EQ(must(identify("/system.slice/docker-" + kCid2 + ".scope/system.slice"), "node").id,
            "docker/" + kCid2);
  // slurmstepd.scope is a systemd unit too; the Slurm job below it wins.
  EXPECT_EQ(must(identify("/system.slice/slurmstepd.scope/job_1/step_0"), "slurm").id, "slurm/1");
  EXPECT_EQ(must(identify("/system.slice/slurmstepd.scope/system"), "stepd").id,
            "systemd/slurmstepd.scope");
  EXPECT_EQ(must(identify("/system.slice/docker-" + kCid + ".scope"), "d").kind, "container");
  EXPECT_EQ(must(identify("/system.slice/sshd.service"), "s").kind, "systemd");
  // Kubepods ancestors are nothing (not the systemd unit of some slice).
  EXPECT_FALSE(identify("/kubepods.slice/kubepods-burstable.slice"));
  EXPECT_FALSE(identify("/"));
  EXPECT_FALSE(identify("/user.slice"));
}

// Hostile bytes must never crash a parser, and whatever they return must be coherent: the job
// cgroup is a whole-component prefix of the path, and the job cgroup identifies as itself.
TEST(JobsIdentify, RandomPathsNeverCrashAndStayCoherent) {
  std::mt19937 rng(20240611);
  const std::vector<std::string> words = {"kubepods.slice",
                                          "kubepods",
                                          "kubepods-burstable.slice",
                                          "kubepods-besteffort.slice",
                                          "kubepods-pod" + kUidSystemd + ".slice",
                                          "kubepods-burstable-pod" + kUidSystemd + ".slice",
                                          "burstable",
                                          "besteffort",
                                          "pod" + kUid,
                                          kCid,
                                          "cri-containerd-" + kCid + ".scope",
                                          "crio-" + kCid + ".scope",
                                          "docker-" + kCid + ".scope",
                                          "docker",
                                          "libpod-" + kCid + ".scope",
                                          "slurmstepd.scope",
                                          "n1_slurmstepd.scope",
                                          "slurm",
                                          "slurm_n1",
                                          "uid_0",
                                          "uid_1000",
                                          "job_1",
                                          "job_abc",
                                          "step_0",
                                          "step_batch",
                                          "user",
                                          "task_0",
                                          "system",
                                          "system.slice",
                                          "user@1000.service",
                                          "app.scope",
                                          "kubelet.slice",
                                          "kubelet-kubepods.slice",
                                          "x.service",
                                          "",
                                          ".",
                                          "..",
                                          "-",
                                          "_",
                                          "\xff\xfe",
                                          std::string("\0", 1),
                                          "pod",
                                          "job_",
                                          ".slice",
                                          ".scope"};
  std::uniform_int_distribution<int> byte(0, 255);
  for (int round = 0; round < 20000; ++round) {
    std::string path;
    const int n = static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) {
      path += (rng() % 10 != 0) ? "/" : "";
      if (rng() % 4 == 0) {
        std::string junk(rng() % 12, ' ');
        for (char& c : junk) c = static_cast<char>(byte(rng));
        path += junk;
      } else {
        std::string w = words[rng() % words.size()];
        if (rng() % 6 == 0 && !w.empty()) w[rng() % w.size()] = static_cast<char>(byte(rng));
        path += w;
      }
    }
    for (auto parse :
         {&parse_kubernetes, &parse_slurm, &parse_systemd, &parse_container, &identify}) {
      const std::optional<Identity> id = parse(path);
      if (!id) continue;
      ASSERT_TRUE(path == id->job_cgroup || path.starts_with(id->job_cgroup + "/")) << path;
      const std::optional<Identity> again = parse(id->job_cgroup);
      ASSERT_TRUE(again) << path;
      EXPECT_EQ(again->id, id->id) << path;
      EXPECT_EQ(again->labels, id->labels) << path;
    }
    (void)match_kubernetes(path);
    (void)match_slurm(path);
  }
}

// --- pod names ---------------------------------------------------------------------------------

class PodLogDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("iolens-jobs-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    for (const std::string& name : std::vector<std::string>{
             "default_trainer-0_" + kUid, "kube-system_coredns-5d78c9869d-abcde_" + kUid + "0",
             "bad_" + kUid.substr(1), "a_b_c_11111111-2222-3333-4444-555555555555",
             "_x_22222222-2222-3333-4444-555555555555"}) {
      std::filesystem::create_directories(dir_ / name);
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(PodLogDir, FindsNamespaceAndName) {
  const auto name = pod_name_from_log_dir(dir_.string(), kUid);
  ASSERT_TRUE(name);
  EXPECT_EQ(name->first, "default");
  EXPECT_EQ(name->second, "trainer-0");
}

TEST_F(PodLogDir, NothingForUnknownOrMalformed) {
  EXPECT_FALSE(pod_name_from_log_dir(dir_.string(), "99999999-2222-3333-4444-555555555555"));
  EXPECT_FALSE(pod_name_from_log_dir(dir_.string(), "11111111-2222-3333-4444-555555555555"));
  EXPECT_FALSE(pod_name_from_log_dir(dir_.string(), "22222222-2222-3333-4444-555555555555"));
  EXPECT_FALSE(pod_name_from_log_dir(dir_.string(), ""));
  EXPECT_FALSE(pod_name_from_log_dir(dir_.string(), "../" + kUid));
  EXPECT_FALSE(pod_name_from_log_dir((dir_ / "missing").string(), kUid));
}
