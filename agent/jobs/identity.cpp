// SPDX-License-Identifier: Apache-2.0
#include "jobs/identity.hpp"

#include <array>
#include <filesystem>
#include <limits>
#include <system_error>

namespace iolens::jobs {
namespace {

using Parts = std::vector<std::string_view>;

bool strip_prefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

bool strip_suffix(std::string_view& s, std::string_view suffix) {
  if (!s.ends_with(suffix)) return false;
  s.remove_suffix(suffix.size());
  return true;
}

bool is_lower_hex_char(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool is_lower_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_lower_hex_char(c)) return false;
  }
  return true;
}

// Docker, containerd, CRI-O and podman all name containers by 64 hex digits (a SHA-256).
bool is_container_id(std::string_view s) { return s.size() == 64 && is_lower_hex(s); }

// A decimal number as Slurm prints it (%u): no sign, no leading zero, at most UINT32_MAX.
bool is_slurm_number(std::string_view s, bool zero_allowed) {
  if (s.empty() || s.size() > 10) return false;
  if (s[0] == '0') return zero_allowed && s.size() == 1;
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value <= std::numeric_limits<uint32_t>::max();
}


// Pod UIDs are RFC 4122 UUIDs in lower-case hex (8-4-4-4-12) from the API server, or, for static
// pods, the kubelet's 32-hex-digit hash of the manifest. The systemd cgroup driver writes the
// UUID's '-' as '_' because '-' separates the levels of a slice name; the result has dashes.
std::optional<std::string> pod_uid(std::string_view text, char separator) {
  if (text.size() == 32 && is_lower_hex(text)) return std::string(text);
  if (text.size() != 36) return std::nullopt;
  std::string uid(text);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != separator) return std::nullopt;
      uid[i] = '-';
    } else if (!is_lower_hex_char(text[i])) {
      return std::nullopt;
    }
  }
  return uid;
}

struct ContainerRef {
  std::string_view runtime;
  std::string_view id;
  bool is_container;  // false for the engines' monitor processes (conmon)
};

// Container cgroups named by the engines, with `suffix` ".scope" (systemd cgroup driver) or ""
// (cgroupfs). The conmon prefixes come first: "crio-" would also start "crio-conmon-".
std::optional<ContainerRef> container_ref(std::string_view component, std::string_view suffix) {
  struct Prefix {
    std::string_view prefix;
    std::string_view runtime;
    bool is_container;
  };
  static constexpr std::array<Prefix, 6> kPrefixes{{{"cri-containerd-", "containerd", true},
                                                    {"crio-conmon-", "crio-conmon", false},
                                                    {"crio-", "crio", true},
                                                    {"docker-", "docker", true},
                                                    {"libpod-conmon-", "podman-conmon", false},
                                                    {"libpod-", "podman", true}}};
  std::string_view rest = component;
  if (!strip_suffix(rest, suffix)) return std::nullopt;
  for (const Prefix& p : kPrefixes) {
    std::string_view id = rest;
    if (strip_prefix(id, p.prefix) && is_container_id(id)) {
      return ContainerRef{p.runtime, id, p.is_container};
    }
  }
  return std::nullopt;
}

enum class KubepodsDriver { None, Systemd, Cgroupfs };

// Whether parts[i] starts a kubepods tree; for the systemd driver `stem` receives the slice name
// without ".slice", which prefixes every slice below it ("kubelet-kubepods" in kind, where the
// kubelet's cgroup root is /kubelet and systemd names nested slices after their parents).
KubepodsDriver kubepods_at(const Parts& parts, std::size_t i, std::string_view& stem) {
  const std::string_view c = parts[i];
  if (c == "kubepods") return KubepodsDriver::Cgroupfs;
  if (c == "kubepods.slice") {
    stem = "kubepods";
    return KubepodsDriver::Systemd;
  }
  std::string_view s = c;
  if (!strip_suffix(s, ".slice")) return KubepodsDriver::None;
  std::string_view parent = s;
  if (!strip_suffix(parent, "-kubepods") || parent.empty() || i == 0) return KubepodsDriver::None;
  std::string_view above = parts[i - 1];
  if (!strip_suffix(above, ".slice") || above != parent) return KubepodsDriver::None;
  stem = s;
  return KubepodsDriver::Systemd;
}

Identity pod_identity(const Parts& parts, std::size_t pod_index, std::string uid,
                      std::string_view qos) {
  Identity id;
  id.kind = "kubernetes";
  id.id = "k8s/" + uid;
  id.job_cgroup = join_cgroup_path(parts, pod_index + 1);
  id.labels["pod_uid"] = std::move(uid);
  id.labels["qos_class"] = std::string(qos);
  return id;
}

void add_container_sub(Identity& id, const std::optional<ContainerRef>& ref) {
  if (!ref) return;
  id.sub["container_id"] = std::string(ref->id);
  if (!ref->runtime.empty()) id.sub["runtime"] = std::string(ref->runtime);
}

// kubepods.slice / [S-burstable.slice | S-besteffort.slice] / S[-<qos>]-pod<uid_>.slice / <scope>
LayoutMatch match_kubepods_systemd(const Parts& parts, std::size_t at, std::string_view stem) {
  const std::string s(stem);
  std::size_t i = at + 1;
  if (i == parts.size()) return {Layout::Ancestor, {}};
  std::string_view qos = "guaranteed";
  std::string pod_prefix = s + "-pod";
  for (std::string_view q : {std::string_view("burstable"), std::string_view("besteffort")}) {
    if (parts[i] == s + "-" + std::string(q) + ".slice") {
      qos = q;
      pod_prefix = s + "-" + std::string(q) + "-pod";
      if (++i == parts.size()) return {Layout::Ancestor, {}};
      break;
    }
  }
  std::string_view uid_text = parts[i];
  if (!strip_prefix(uid_text, pod_prefix) || !strip_suffix(uid_text, ".slice")) {
    return {Layout::Off, {}};
  }
  std::optional<std::string> uid = pod_uid(uid_text, '_');
  if (!uid) return {Layout::Off, {}};
  Identity id = pod_identity(parts, i, std::move(*uid), qos);
  if (i + 1 < parts.size()) add_container_sub(id, container_ref(parts[i + 1], ".scope"));
  return {Layout::Job, std::move(id)};
}

// kubepods / [burstable | besteffort] / pod<uid> / <container id | crio-<id> | crio-conmon-<id>>
LayoutMatch match_kubepods_cgroupfs(const Parts& parts, std::size_t at) {
  std::size_t i = at + 1;
  if (i == parts.size()) return {Layout::Ancestor, {}};
  std::string_view qos = "guaranteed";
  if (parts[i] == "burstable" || parts[i] == "besteffort") {
    qos = parts[i];
    if (++i == parts.size()) return {Layout::Ancestor, {}};
  }
  std::string_view uid_text = parts[i];
  if (!strip_prefix(uid_text, "pod")) return {Layout::Off, {}};
  std::optional<std::string> uid = pod_uid(uid_text, '-');
  if (!uid) return {Layout::Off, {}};
  Identity id = pod_identity(parts, i, std::move(*uid), qos);
  if (i + 1 < parts.size()) {
    const std::string_view c = parts[i + 1];
    // containerd and docker name the container cgroup by its bare id: the runtime is not in it.
    if (is_container_id(c)) {
      add_container_sub(id, ContainerRef{{}, c, true});
    } else {
      add_container_sub(id, container_ref(c, ""));
    }
  }
  return {Layout::Job, std::move(id)};
}

enum class SlurmPlugin { None, V2, V1 };

// cgroup/v2: slurmstepd.scope or <node>_slurmstepd.scope (several slurmd on one host).
// cgroup/v1: slurm or slurm_<node>.
SlurmPlugin slurm_anchor(std::string_view c) {
  if (c == "slurmstepd.scope") return SlurmPlugin::V2;
  if (c == "slurm") return SlurmPlugin::V1;
  std::string_view s = c;
  if (strip_suffix(s, "_slurmstepd.scope") && !s.empty()) return SlurmPlugin::V2;
  s = c;
  if (strip_prefix(s, "slurm_") && !s.empty()) return SlurmPlugin::V1;
  return SlurmPlugin::None;
}

bool numbered(std::string_view c, std::string_view prefix, bool zero_allowed,
              std::string_view& number) {
  if (!strip_prefix(c, prefix) || !is_slurm_number(c, zero_allowed)) return false;
  number = c;
  return true;
}

// Below job_<id>: step_<n|batch|extern|interactive> / [user /] task_<n>. Anything else below the
// job (slurmstepd's own "slurm" cgroup in a step, an unknown step name) only omits the labels.
void add_slurm_sub(Identity& id, const Parts& parts, std::size_t step_index) {
  if (step_index >= parts.size()) return;
  std::string_view step = parts[step_index];
  if (!strip_prefix(step, "step_")) return;
  if (step != "batch" && step != "extern" && step != "interactive" &&
      !is_slurm_number(step, true)) {
    return;
  }
  id.sub["slurm_step"] = std::string(step);
  std::size_t task_index = step_index + 1;
  if (task_index < parts.size() && parts[task_index] == "user") ++task_index;
  std::string_view task;
  if (task_index < parts.size() && numbered(parts[task_index], "task_", true, task)) {
    id.sub["slurm_task"] = std::string(task);
  }
}

}  // namespace

std::string join_cgroup_path(const std::vector<std::string_view>& parts, std::size_t count) {
  if (count == 0) return "/";
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out += '/';
    out += parts[i];
  }
  return out;
}

std::optional<std::vector<std::string_view>> split_cgroup_path(std::string_view cgroup_path) {
  if (cgroup_path.empty() || cgroup_path.front() != '/') return std::nullopt;
  if (cgroup_path.find('\0') != std::string_view::npos) return std::nullopt;
  Parts parts;
  if (cgroup_path.size() == 1) return parts;
  std::size_t pos = 1;
  while (true) {
    const std::size_t end = cgroup_path.find('/', pos);
    const std::string_view part =
        cgroup_path.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    if (part.empty() || part == "." || part == "..") return std::nullopt;
    parts.push_back(part);
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return parts;
}

LayoutMatch match_kubernetes(std::string_view cgroup_path) {
  const auto parts = split_cgroup_path(cgroup_path);
  if (!parts) return {Layout::Off, {}};
  // Only the first kubepods component counts: a kubelet nested in a pod (kind in a pod) is part
  // of that outer pod, and a path that left the outer layout cannot re-enter it further down.
  for (std::size_t i = 0; i < parts->size(); ++i) {
    std::string_view stem;
    switch (kubepods_at(*parts, i, stem)) {
      case KubepodsDriver::Systemd: return match_kubepods_systemd(*parts, i, stem);
      case KubepodsDriver::Cgroupfs: return match_kubepods_cgroupfs(*parts, i);
      case KubepodsDriver::None: break;
    }
  }
  return {Layout::Before, {}};
}

LayoutMatch match_slurm(std::string_view cgroup_path) {
  const auto parts = split_cgroup_path(cgroup_path);
  if (!parts) return {Layout::Off, {}};
  const std::size_t n = parts->size();
  for (std::size_t i = 0; i < n; ++i) {
    const SlurmPlugin plugin = slurm_anchor((*parts)[i]);
    if (plugin == SlurmPlugin::None) continue;
    std::size_t j = i + 1;
    std::string_view uid;
    if (plugin == SlurmPlugin::V1) {
      if (j == n) return {Layout::Ancestor, {}};
      if (!numbered((*parts)[j], "uid_", true, uid)) return {Layout::Off, {}};
      ++j;
    }
    // cgroup/v2 also has <stepd scope>/system for slurmstepd itself: not a job, so Off.
    if (j == n) return {Layout::Ancestor, {}};
    std::string_view job;
    if (!numbered((*parts)[j], "job_", false, job)) return {Layout::Off, {}};
    Identity id;
    id.kind = "slurm";
    id.id = "slurm/" + std::string(job);
    id.job_cgroup = join_cgroup_path(*parts, j + 1);
    id.labels["slurm_job"] = std::string(job);
    if (!uid.empty()) id.labels["slurm_uid"] = std::string(uid);
    add_slurm_sub(id, *parts, j + 1);
    return {Layout::Job, std::move(id)};
  }
  return {Layout::Before, {}};
}

std::optional<Identity> parse_kubernetes(std::string_view cgroup_path) {
  return match_kubernetes(cgroup_path).identity;
}

std::optional<Identity> parse_slurm(std::string_view cgroup_path) {
  return match_slurm(cgroup_path).identity;
}

bool is_service_or_scope(std::string_view name) {
  if (name.size() > 255) return false;  // systemd's UNIT_NAME_MAX
  std::string_view stem = name;
  if (!strip_suffix(stem, ".service") && !strip_suffix(stem, ".scope")) return false;
  if (stem.empty()) return false;
  for (char c : stem) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == ':' || c == '-' || c == '_' || c == '.' || c == '\\' || c == '@';
    if (!ok) return false;
  }
  return true;
}

namespace {
bool is_unit_job(std::string_view component) {
  if (!is_service_or_scope(component)) return false;
  const auto ref = container_ref(component, ".scope");
  return !ref;  // container and conmon scopes belong to their engines, not to a unit's job
}
}  // namespace

Identity systemd_identity(const std::vector<std::string_view>& components, std::size_t unit_index) {
  Identity id;
  id.kind = "systemd";
  id.id = "systemd";
  for (std::size_t i = 0; i < unit_index; ++i) {
    if (is_unit_job(components[i])) {
      id.id += '/';
      id.id += components[i];
    }
  }
  id.id += '/';
  id.id += components[unit_index];
  id.job_cgroup = join_cgroup_path(components, unit_index + 1);
  id.labels["unit"] = std::string(components[unit_index]);
  id.labels["slice"] = join_cgroup_path(components, unit_index);
  return id;
}

std::optional<Identity> parse_systemd(std::string_view cgroup_path) {
  const auto parts = split_cgroup_path(cgroup_path);
  if (!parts) return std::nullopt;
  std::optional<std::size_t> deepest;
  for (std::size_t i = 0; i < parts->size(); ++i) {
    if (is_unit_job((*parts)[i])) deepest = i;
  }
  if (!deepest) return std::nullopt;
  return systemd_identity(*parts, *deepest);
}

std::optional<Identity> parse_container(std::string_view cgroup_path) {
  const auto parts = split_cgroup_path(cgroup_path);
  if (!parts) return std::nullopt;
  for (std::size_t i = 0; i < parts->size(); ++i) {
    std::string_view stem;
    if (kubepods_at(*parts, i, stem) != KubepodsDriver::None) return std::nullopt;
    std::optional<ContainerRef> ref = container_ref((*parts)[i], ".scope");
    std::size_t job_index = i;
    if ((*parts)[i] == "docker" && i + 1 < parts->size() && is_container_id((*parts)[i + 1])) {
      ref = ContainerRef{"docker", (*parts)[i + 1], true};  // docker's cgroupfs driver
      job_index = i + 1;
    }
    if (!ref || !ref->is_container) continue;
    Identity id;
    id.kind = "container";
    id.id = std::string(ref->runtime) + "/" + std::string(ref->id);
    id.job_cgroup = join_cgroup_path(*parts, job_index + 1);
    id.labels["runtime"] = std::string(ref->runtime);
    id.labels["container_id"] = std::string(ref->id);
    return id;
  }
  return std::nullopt;
}

std::optional<Identity> identify(std::string_view cgroup_path) {
  if (auto id = parse_kubernetes(cgroup_path)) return id;
  if (auto id = parse_slurm(cgroup_path)) return id;
  if (auto id = parse_container(cgroup_path)) return id;
  return parse_systemd(cgroup_path);
}

std::optional<std::pair<std::string, std::string>> pod_name_from_log_dir(
    const std::string& log_pods_dir, const std::string& pod_uid) {
  if (pod_uid.empty() || pod_uid.find_first_of("_/") != std::string::npos) return std::nullopt;
  const std::string suffix = "_" + pod_uid;
  std::error_code ec;
  std::filesystem::directory_iterator it(log_pods_dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::string_view rest = name;
    if (!strip_suffix(rest, suffix)) continue;
    // Namespace and pod name are DNS-1123 names, which have no '_': exactly one separates them.
    const std::size_t sep = rest.find('_');
    if (sep == 0 || sep == std::string_view::npos || sep + 1 == rest.size() ||
        rest.find('_', sep + 1) != std::string_view::npos) {
      continue;
    }
    return std::pair{std::string(rest.substr(0, sep)), std::string(rest.substr(sep + 1))};
  }
  return std::nullopt;
}

}  // namespace iolens::jobs
