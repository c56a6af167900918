// SPDX-License-Identifier: Apache-2.0
#include "jobs/selector.hpp"

#include <algorithm>
#include <regex>
#include <stdexcept>

#include "core/paths.hpp"

namespace iolens::jobs {
namespace {

using Parts = std::vector<std::string_view>;
using Components = std::vector<std::string>;

constexpr std::string_view kAnyDepth = "**";

// libstdc++'s default regex executor recurses once per input character and overflows the stack
// on a long cmdline (GCC bug 86164: a few KiB under ASan). Its `__polynomial` mode runs the
// breadth-first executor, whose recursion is bounded by the pattern; it refuses back-references,
// which only the backtracking executor supports.
constexpr auto kCmdlineRegexFlags =
#if defined(__GLIBCXX__)
    std::regex::ECMAScript | std::regex::nosubs | std::regex_constants::__polynomial;
#else
    std::regex::ECMAScript | std::regex::nosubs;
#endif

// regex_search restarts the match at every position of the input, so a pattern that scans to
// the end and fails (".*x") costs time quadratic in the cmdline. Prefixing "[\s\S]*" and
// matching from the first position only (match_continuous) searches in one pass instead; the
// pattern is compiled alone first so that its own syntax is what gets checked ("a)(b" stays
// an error).
std::regex compile_cmdline_regex(std::string_view pattern) {
  std::regex(pattern.begin(), pattern.end(), kCmdlineRegexFlags);
  const std::string anywhere = "[\\s\\S]*(?:" + std::string(pattern) + ")";
  return std::regex(anywhere, kCmdlineRegexFlags);
}

bool cmdline_matches(const std::regex& re, const std::string& cmdline) {
  return std::regex_search(cmdline, re, std::regex_constants::match_continuous);
}

// Matches the set "[...]" that starts at p[open] against byte c. Returns the index just after its
// closing ']', or npos when the set is unterminated.
std::size_t match_set(std::string_view p, std::size_t open, unsigned char c, bool& matched) {
  std::size_t j = open + 1;
  bool negate = false;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
    negate = true;
    ++j;
  }
  bool in = false;
  bool first = true;  // a ']' right after the opening is a member, not the end
  while (j < p.size() && (first || p[j] != ']')) {
    first = false;
    const auto lo = static_cast<unsigned char>(p[j]);
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      const auto hi = static_cast<unsigned char>(p[j + 2]);
      in = in || (lo <= c && c <= hi);
      j += 3;
    } else {
      in = in || lo == c;
      ++j;
    }
  }
  if (j >= p.size()) return std::string_view::npos;
  matched = in != negate;
  return j + 1;
}

bool sets_terminated(std::string_view p) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '[') continue;
    bool ignored = false;
    const std::size_t next = match_set(p, i, 0, ignored);
    if (next == std::string_view::npos) return false;
    i = next - 1;
  }
  return true;
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

Components split_or_throw(std::string_view path, std::string_view what) {
  const auto parts = split_cgroup_path(path);
  if (!parts) {
    throw std::invalid_argument(std::string(what) + " " + quoted(path) +
                                " is not a canonical cgroup path");
  }
  return Components(parts->begin(), parts->end());
}

// Whether `prefix` is a prefix of `parts` by whole components (equal counts too).
bool starts_with(const Parts& parts, const Components& prefix) {
  if (prefix.size() > parts.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), parts.begin());
}


// A glob against a path, component by component, `**` matching zero or more components. The
// states are the glob positions reachable after each path component (a Thompson-style NFA walk:
// linear in the path, never exponential whatever the number of `**`).
struct GlobFit {
  std::optional<std::size_t> job_components;  // the shortest matching prefix, in components
  bool may_extend = false;                    // a longer path could still match
};

GlobFit fit_glob(const Components& glob, const Parts& parts) {
  const std::size_t m = glob.size();
  std::vector<char> states(m + 1, 0);
  std::vector<char> next(m + 1, 0);
  auto skip_any_depth = [&](std::vector<char>& s) {
    for (std::size_t j = 0; j < m; ++j) {
      if (s[j] && glob[j] == kAnyDepth) s[j + 1] = 1;
    }
  };
  states[0] = 1;
  skip_any_depth(states);
  if (states[m]) return {0, true};
  for (std::size_t k = 0; k < parts.size(); ++k) {
    std::fill(next.begin(), next.end(), 0);
    bool any = false;
    for (std::size_t j = 0; j < m; ++j) {
      if (!states[j]) continue;
      if (glob[j] == kAnyDepth) {
        next[j] = 1;
        any = true;
      } else if (glob_component_matches(glob[j], parts[k])) {
        next[j + 1] = 1;
        any = true;
      }
    }
    if (!any) return {};
    skip_any_depth(next);
    states.swap(next);
    if (states[m]) return {k + 1, true};
  }
  return {std::nullopt, true};
}

struct RuleVerdict {
  Verdict verdict = Verdict::Excluded;
  std::optional<Identity> identity;
  std::size_t job_components = 0;
};

std::size_t component_count(const std::string& path) {
  return path == "/" ? 0 : static_cast<std::size_t>(std::count(path.begin(), path.end(), '/'));
}

RuleVerdict job(Identity id) {
  RuleVerdict v{Verdict::Job, std::move(id), 0};
  v.job_components = component_count(v.identity->job_cgroup);
  return v;
}

}  // namespace

struct CompiledRule {
  Rule rule;
  std::vector<Components> roots;  // kubernetes, slurm: roots; systemd: {slice}
  std::vector<Components> globs;  // cgroup: path globs, split
  std::optional<std::regex> cmdline;
};

struct Selector::Impl {
  std::vector<Rule> rules;
  std::vector<CompiledRule> compiled;
  std::vector<std::string> watch_roots;
  std::vector<std::string> comms;

  RuleVerdict verdict(const CompiledRule& r, std::string_view path, const Parts& parts) const;
};

namespace {

RuleVerdict layout_verdict(const std::vector<Components>& roots, std::string_view path,
                           const Parts& parts, LayoutMatch (*match)(std::string_view)) {
  bool under = false;
  bool at_or_above_root = false;
  for (const Components& root : roots) {
    if (starts_with(parts, root)) under = true;
    if (root.size() >= parts.size() && std::equal(parts.begin(), parts.end(), root.begin())) {
      at_or_above_root = true;
    }
  }
  if (under) {
    LayoutMatch m = match(path);
    if (m.layout == Layout::Job) return job(std::move(*m.identity));
    if (m.layout != Layout::Off) return {Verdict::Container, std::nullopt, 0};
  }
  if (at_or_above_root) return {Verdict::Container, std::nullopt, 0};
  return {};
}

}  // namespace

RuleVerdict Selector::Impl::verdict(const CompiledRule& r, std::string_view path,
                                    const Parts& parts) const {
  switch (r.rule.kind) {
    case RuleKind::Kubernetes: return layout_verdict(r.roots, path, parts, &match_kubernetes);
    case RuleKind::Slurm: return layout_verdict(r.roots, path, parts, &match_slurm);
    case RuleKind::Systemd: {
      const Components& slice = r.roots.front();
      if (parts.size() <= slice.size()) {
        const bool above = std::equal(parts.begin(), parts.end(), slice.begin());
        return {above ? Verdict::Container : Verdict::Excluded, std::nullopt, 0};
      }
      if (!starts_with(parts, slice)) return {};
      const std::string_view unit = parts[slice.size()];
      for (const std::string& glob : r.rule.globs) {
        if (glob_component_matches(glob, unit)) return job(systemd_identity(parts, slice.size()));
      }
      return {};
    }
    case RuleKind::Cgroup: {
      std::optional<std::size_t> shortest;
      bool may_extend = false;
      for (const Components& glob : r.globs) {
        const GlobFit fit = fit_glob(glob, parts);
        if (fit.job_components && (!shortest || *fit.job_components < *shortest)) {
          shortest = fit.job_components;
        }
        may_extend = may_extend || fit.may_extend;
      }
      if (!shortest) return {may_extend ? Verdict::Container : Verdict::Excluded, std::nullopt, 0};
      Identity id;
      id.kind = "cgroup";
      id.job_cgroup = join_cgroup_path(parts, *shortest);
      id.id = "cgroup/" + id.job_cgroup.substr(1);
      // A cgroup rule only says where the job is; when a known layout puts a job at the very
      // same cgroup (a pod, a Slurm job), its labels still describe it.
      if (std::optional<Identity> known = identify(path);
          known && known->job_cgroup == id.job_cgroup) {
        id.labels = std::move(known->labels);
        id.sub = std::move(known->sub);
      }
      return job(std::move(id));
    }
    case RuleKind::Process: return {};
  }
  return {};
}

Selector::Selector(std::vector<Rule> rules) {
  auto impl = std::make_shared<Impl>();
  for (const Rule& rule : rules) {
    CompiledRule c;
    c.rule = rule;
    switch (rule.kind) {
      case RuleKind::Kubernetes:
      case RuleKind::Slurm: {
        const std::vector<std::string> roots =
            rule.roots.empty() ? default_roots(rule.kind) : rule.roots;
        for (const std::string& root : roots) {
          c.roots.push_back(split_or_throw(root, "root"));
          impl->watch_roots.push_back(root);
        }
        break;
      }
      case RuleKind::Systemd:
        c.roots.push_back(split_or_throw(rule.slice, "slice"));
        impl->watch_roots.push_back(rule.slice);
        break;
      case RuleKind::Cgroup:
        for (const std::string& glob : rule.globs) {
          c.globs.push_back(split_or_throw(glob, "path glob"));
          impl->watch_roots.push_back(cgroup_glob_static_prefix(glob));
        }
        break;
      case RuleKind::Process:
        if (!rule.cmdline.empty()) {
          try {
            c.cmdline = compile_cmdline_regex(rule.cmdline);
          } catch (const std::regex_error& e) {
            throw std::invalid_argument("rule " + quoted(rule.name) + ": cmdline: " + e.what());
          }
        }
        if (std::find(impl->comms.begin(), impl->comms.end(), rule.comm) == impl->comms.end()) {
          impl->comms.push_back(rule.comm);
        }
        break;
    }
    impl->compiled.push_back(std::move(c));
  }

  // Keep the first of equal roots and drop any root below another: the kernel traces subtrees.
  std::vector<std::string> kept;
  const auto& all = impl->watch_roots;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Components mine = split_or_throw(all[i], "root");
    bool covered = false;
    for (std::size_t j = 0; j < all.size() && !covered; ++j) {
      if (i == j) continue;
      const Components other = split_or_throw(all[j], "root");
      const Parts mine_view(mine.begin(), mine.end());
      if (!starts_with(mine_view, other)) continue;
      // Strictly below another root, or equal to one that comes first.
      covered = other.size() < mine.size() || j < i;
    }
    if (!covered) kept.push_back(all[i]);
  }
  impl->watch_roots = std::move(kept);
  impl->rules = std::move(rules);
  impl_ = std::move(impl);
}

const std::vector<Rule>& Selector::rules() const { return impl_->rules; }

std::vector<std::string> Selector::watch_roots() const { return impl_->watch_roots; }

std::vector<std::string> Selector::process_comms() const { return impl_->comms; }

Classification Selector::classify(std::string_view cgroup_path) const {
  const auto parts = split_cgroup_path(cgroup_path);
  if (!parts) return {};
  Classification out;
  std::optional<std::size_t> best;
  const CompiledRule* container_rule = nullptr;
  for (const CompiledRule& r : impl_->compiled) {
    RuleVerdict v = impl_->verdict(r, cgroup_path, *parts);
    if (v.verdict == Verdict::Job) {
      if (!best || v.job_components < *best) {
        best = v.job_components;
        out.verdict = Verdict::Job;
        out.identity = std::move(v.identity);
        out.rule = r.rule.name;
      }
    } else if (v.verdict == Verdict::Container && container_rule == nullptr) {
      container_rule = &r;
    }
  }
  if (best) return out;
  if (container_rule != nullptr)
    return {Verdict::Container, std::nullopt, container_rule->rule.name};
  return {};
}

std::optional<std::string> Selector::match_process(std::string_view comm,
                                                   std::string_view cmdline) const {
  comm = comm.substr(0, comm.find('\0'));
  std::string joined(cmdline.substr(0, kMaxCmdlineBytes));
  while (!joined.empty() && joined.back() == '\0') joined.pop_back();
  std::replace(joined.begin(), joined.end(), '\0', ' ');
  for (const CompiledRule& r : impl_->compiled) {
    if (r.rule.kind != RuleKind::Process || r.rule.comm != comm) continue;
    if (r.cmdline && !cmdline_matches(*r.cmdline, joined)) continue;
    return r.rule.name;
  }
  return std::nullopt;
}

// --- globs -------------------------------------------------------------------------------------

bool glob_component_matches(std::string_view p, std::string_view s) {
  std::size_t pi = 0;
  std::size_t si = 0;
  std::size_t star = std::string_view::npos;  // the last '*' seen, for backtracking
  std::size_t star_si = 0;
  while (si < s.size()) {
    if (pi < p.size()) {
      const char pc = p[pi];
      if (pc == '*') {
        star = pi++;
        star_si = si;
        continue;
      }
      if (pc == '?') {
        ++pi;
        ++si;
        continue;
      }
      if (pc == '[') {
        bool in = false;
        const std::size_t after = match_set(p, pi, static_cast<unsigned char>(s[si]), in);
        if (after == std::string_view::npos ? s[si] == '[' : in) {
          pi = after == std::string_view::npos ? pi + 1 : after;
          ++si;
          continue;
        }
      } else if (pc == s[si]) {
        ++pi;
        ++si;
        continue;
      }
    }
    // Mismatch: let the last '*' swallow one more byte, or fail when there is none.
    if (star == std::string_view::npos) return false;
    pi = star + 1;
    si = ++star_si;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

bool has_wildcard(std::string_view pattern) {
  return pattern.find_first_of("*?[") != std::string_view::npos;
}

std::string check_name_glob(std::string_view glob) {
  if (glob.empty()) return "expected a unit name or glob, got ''";
  if (glob.find('/') != std::string_view::npos) {
    return "expected a unit name or glob, not a path, got " + quoted(glob);
  }
  if (!sets_terminated(glob)) return "unterminated '[' in " + quoted(glob);
  return {};
}

std::string check_cgroup_glob(std::string_view glob) {
  if (glob.empty() || glob.front() != '/') {
    return "expected an absolute cgroup path (starting with '/'), got " + quoted(glob);
  }
  if (glob == "/") return "'/' would make the kernel trace the whole machine";
  const auto parts = split_cgroup_path(glob);
  if (!parts) {
    return quoted(glob) + " has an empty, '.' or '..' component (or a trailing '/')";
  }
  for (std::string_view c : *parts) {
    if (c != kAnyDepth && c.find(kAnyDepth) != std::string_view::npos) {
      return "'**' must be a whole component, got " + quoted(c) + " in " + quoted(glob);
    }
    if (!sets_terminated(c)) return "unterminated '[' in " + quoted(glob);
  }
  if (has_wildcard(parts->front())) {
    return "the first component " + quoted(parts->front()) +
           " has a wildcard: the kernel would trace the whole machine; start with a fixed "
           "component such as /kubepods.slice or /system.slice";
  }
  if (parts->back() == kAnyDepth) {
    const std::string above = join_cgroup_path(*parts, parts->size() - 1);
    return "a trailing '**' adds nothing: the job is the shortest matching prefix, so " +
           quoted(above) + " itself would be the job; write " + quoted(above) + ", or " +
           quoted(above == "/" ? "/*" : above + "/*") + " to make each child a job";
  }
  return {};
}

std::string cgroup_glob_static_prefix(std::string_view glob) {
  std::string out;
  std::size_t pos = 0;
  while (pos < glob.size()) {
    if (glob[pos] == '/') {
      ++pos;
      continue;
    }
    std::size_t end = glob.find('/', pos);
    if (end == std::string_view::npos) end = glob.size();
    const std::string_view c = glob.substr(pos, end - pos);
    if (has_wildcard(c)) break;
    out += '/';
    out += c;
    pos = end;
  }
  return out.empty() ? "/" : out;
}

std::string check_cmdline_regex(std::string_view pattern) {
  if (pattern.size() > kMaxCmdlineRegexBytes) {
    return "a regular expression of at most " + std::to_string(kMaxCmdlineRegexBytes) +
           " bytes, got " + std::to_string(pattern.size());
  }
  try {
    compile_cmdline_regex(pattern);
  } catch (const std::regex_error& e) {
    return std::string("invalid regular expression: ") + e.what();
  }
  return {};
}

// --- cgroup root -------------------------------------------------------------------------------

namespace {

struct Mount {
  std::string point;
  std::string fstype;
};

// "36 35 98:0 /root /mount/point opts [optional fields...] - fstype source super-opts"
std::vector<Mount> parse_mountinfo(std::string_view text) {
  std::vector<Mount> mounts;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    std::vector<std::string_view> fields;
    std::size_t f = 0;
    while (f < line.size()) {
      std::size_t g = line.find(' ', f);
      if (g == std::string_view::npos) g = line.size();
      if (g > f) fields.push_back(line.substr(f, g - f));
      f = g + 1;
    }
    const auto dash = std::find(fields.begin(), fields.end(), std::string_view("-"));
    if (fields.size() < 5 || dash == fields.end() || dash - fields.begin() < 6 ||
        dash + 1 == fields.end()) {
      continue;
    }
    mounts.push_back({core::unescape_mount_field(fields[4]), std::string(*(dash + 1))});
  }
  return mounts;
}

// The mount visible at `point`: a later mount on the same point hides the earlier ones.
const Mount* visible_at(const std::vector<Mount>& mounts, std::string_view point) {
  const Mount* found = nullptr;
  for (const Mount& m : mounts) {
    if (m.point == point) found = &m;
  }
  return found;
}

}  // namespace

RootResult resolve_cgroup_root(const std::string& configured, std::string_view mountinfo_text) {
  const std::vector<Mount> mounts = parse_mountinfo(mountinfo_text);
  if (configured != "auto") {
    std::string point = configured;
    while (point.size() > 1 && point.back() == '/') point.pop_back();
    if (point.empty() || point.front() != '/') {
      return {{}, "cgroup_root " + quoted(configured) + " is neither 'auto' nor an absolute path"};
    }
    const Mount* m = visible_at(mounts, point);
    if (m == nullptr) {
      return {{}, "cgroup_root " + quoted(point) + " is not a mount point"};
    }
    if (m->fstype == "cgroup") {
      return {{},
              "cgroup_root " + quoted(point) +
                  " is a cgroup v1 hierarchy; iolensd needs the unified hierarchy (cgroup2)"};
    }
    if (m->fstype != "cgroup2") {
      return {{}, "cgroup_root " + quoted(point) + " is a " + m->fstype + " mount, not cgroup2"};
    }
    return {point, {}};
  }
  for (std::string_view candidate : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    const Mount* m = visible_at(mounts, candidate);
    if (m != nullptr && m->fstype == "cgroup2") return {std::string(candidate), {}};
  }
  for (const Mount& m : mounts) {
    if (m.fstype == "cgroup2" && visible_at(mounts, m.point) == &m) return {m.point, {}};
  }
  return {{},
          "no cgroup2 file system is mounted; iolensd needs the unified hierarchy (boot with "
          "systemd.unified_cgroup_hierarchy=1, or mount -t cgroup2 none /sys/fs/cgroup)"};
}

}  // namespace iolens::jobs
