// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Which job a cgroup belongs to, read from the cgroup's path alone (no I/O), for the layouts that
/// kubelet, Slurm, systemd and the container engines create. Paths are relative to the cgroup2
/// mount and start with "/" ("/kubepods.slice/..."). Every parser is strict: a component that
/// departs from the layout yields no identity, never a guess, and any bytes are safe to pass.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace iolens::jobs {

struct Identity {
  /// "kubernetes", "slurm", "systemd", "container", "cgroup" or "process".
  std::string kind;
  /// Unique and stable on the node: "k8s/<pod uid>", "slurm/<job id>", "systemd/<unit>",
  /// "docker/<id>", "containerd/<id>", "podman/<id>", "crio/<id>", "cgroup/<job cgroup>".
  std::string id;
  /// The job's cgroup: the parsed path itself or an ancestor of it, by whole components.
  std::string job_cgroup;
  /// Job-level: pod_uid, qos_class; slurm_job, slurm_uid; unit, slice; runtime, container_id.
  std::map<std::string, std::string> labels;
  /// From the components below the job cgroup: container_id and runtime (kubernetes);
  /// slurm_step, slurm_task (slurm). Absent when the path stops above them.
  std::map<std::string, std::string> sub;
};

/// The components of a cgroup path ("/a/b" -> {"a", "b"}; "/" -> {}), or nothing when it is not
/// one: not starting with '/', an empty, "." or ".." component (so no trailing '/'), or a NUL.
std::optional<std::vector<std::string_view>> split_cgroup_path(std::string_view cgroup_path);

/// The path of the first `count` components of a split path ("/" for none).
std::string join_cgroup_path(const std::vector<std::string_view>& parts, std::size_t count);

/// Where a path stands in one of the layouts with a fixed job level (kubernetes, slurm):
enum class Layout {
  Before,    ///< no component that starts the layout: it may still begin further down
  Ancestor,  ///< inside the layout, above the job level (kubepods, a QoS slice, job_ parents)
  Job,       ///< at or below a job cgroup
  Off,       ///< starts the layout, then departs from it: no job at or below this path
};
struct LayoutMatch {
  Layout layout = Layout::Off;
  std::optional<Identity> identity;  ///< set when layout == Job
};

/// Kubernetes pods (job = the pod cgroup), systemd and cgroupfs cgroup drivers. The layout starts
/// at the first kubepods component: "kubepods.slice", "<parent>-kubepods.slice" right under
/// "<parent>.slice" (kind's kubelet.slice/kubelet-kubepods.slice), or "kubepods" (cgroupfs).
LayoutMatch match_kubernetes(std::string_view cgroup_path);
/// Slurm jobs (job = the job_<id> cgroup). The layout starts at the first "slurmstepd.scope",
/// "<node>_slurmstepd.scope" (cgroup/v2), "slurm" or "slurm_<node>" (cgroup/v1) component.
LayoutMatch match_slurm(std::string_view cgroup_path);

std::optional<Identity> parse_kubernetes(std::string_view cgroup_path);
std::optional<Identity> parse_slurm(std::string_view cgroup_path);
/// The deepest *.service or *.scope component that is not a container scope is the job.
std::optional<Identity> parse_systemd(std::string_view cgroup_path);
/// Containers outside kubepods: docker-<id>.scope, /docker/<id>, libpod-<id>.scope,
/// cri-containerd-<id>.scope, crio-<id>.scope; <id> is 64 lower-case hex digits. The first
/// (outermost) container on the path is the job.
std::optional<Identity> parse_container(std::string_view cgroup_path);
/// Tries kubernetes, slurm, container, systemd in that order.
std::optional<Identity> identify(std::string_view cgroup_path);

/// Builds the identity of a systemd unit found at `components[unit_index]`; shared with the
/// selector's systemd rules so both name a unit the same way. The id is "systemd/<unit>", with
/// the enclosing units first when the unit runs under another one (a user manager:
/// "systemd/user@1000.service/app.scope"), because unit names are unique per manager only.
Identity systemd_identity(const std::vector<std::string_view>& components, std::size_t unit_index);

/// Whether `name` is a systemd unit name of type service or scope.
bool is_service_or_scope(std::string_view name);

/// Pod namespace and name from the kubelet's pod log directory, whose entries are named
/// "<namespace>_<name>_<uid>" (kubelet `BuildPodLogsDirectory`): optional enrichment. Reads the
/// directory; nothing when it is unreadable or holds no entry for this uid.
std::optional<std::pair<std::string, std::string>> pod_name_from_log_dir(
    const std::string& log_pods_dir, const std::string& pod_uid);

}  // namespace iolens::jobs
