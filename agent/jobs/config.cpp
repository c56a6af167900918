// SPDX-License-Identifier: Apache-2.0
#include "jobs/config.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <sstream>

#include "jobs/identity.hpp"
#include "jobs/memory_bound.hpp"
#include "jobs/selector.hpp"
#include "jobs/units.hpp"

namespace iolens::jobs {
namespace {

using Keys = std::span<const std::string_view>;

constexpr std::array<std::string_view, 22> kTopKeys{
    "cgroup_root", "output_dir",    "state_dir",      "pin_dir",
    "socket",      "socket_group",  "drain_interval", "drain_interval_ms",
    "log_level",   "limits",        "rotation",       "grace_period",
    "jobs",        "syscall_hooks", "hooks_idle",     "metrics",
    "darshan_logs", "disabled_programs", "runs", "timing", "drain_piece",
    "record_compression"};
// YAML 1.2's core schema booleans (yaml-cpp would also take YAML 1.1's y, yes, on...; a typo
// such as 'ture' must not silently mean false, and 'no' is not a boolean in YAML 1.2).
constexpr std::array<std::string_view, 3> kTrue{"true", "True", "TRUE"};
constexpr std::array<std::string_view, 3> kFalse{"false", "False", "FALSE"};
constexpr std::array<std::string_view, 9> kMetricsKeys{
    "listen", "node", "top_files", "max_jobs",        "classes",
    "basic_auth", "tls", "threads", "request_timeout"};
constexpr std::array<std::string_view, 2> kClassKeys{"name", "prefixes"};
constexpr std::array<std::string_view, 2> kAuthKeys{"username", "password_file"};
constexpr std::array<std::string_view, 1> kTlsKeys{"cert_file"};
constexpr std::size_t kMaxClasses = 32;
constexpr std::size_t kMaxTopFiles = 1000;
constexpr uint64_t kMaxMetricsThreads = 256;
constexpr uint64_t kMaxMetricsRequestTimeoutMs = 60000;
constexpr std::array<std::string_view, 2> kHookModes{"on-demand", "always"};
constexpr std::array<std::string_view, 14> kLimitKeys{
    "memory",         "max_files_per_job",   "max_records", "max_processes_per_job",
    "max_folded_files_per_job",
    "max_path_bytes_per_job", "max_path_bytes", "kernel_file_records",
    "kernel_file_records_preallocated", "ring_size", "trace_ring_size",
    "kernel_cgroup_exclusions", "kernel_block_records", "kernel_inflight"};
constexpr std::array<std::string_view, 2> kRotationKeys{"max_size", "max_age"};
constexpr std::array<std::string_view, 6> kRuleKeys{"name",    "kubernetes", "slurm",
                                                    "systemd", "cgroup",     "process"};
constexpr std::array<std::string_view, 1> kRootsKeys{"roots"};
constexpr std::array<std::string_view, 2> kSystemdKeys{"slice", "units"};
constexpr std::array<std::string_view, 1> kCgroupKeys{"paths"};
constexpr std::array<std::string_view, 2> kProcessKeys{"comm", "cmdline"};
constexpr std::array<std::string_view, 5> kLogLevels{"trace", "debug", "info", "warn", "error"};

// The kernel keeps a command name in TASK_COMM_LEN (16) bytes, NUL included.
constexpr std::size_t kMaxCommBytes = 15;
// sizeof(sockaddr_un::sun_path) is 108, NUL included.
constexpr std::size_t kMaxSocketPathBytes = 107;
constexpr std::size_t kMaxRuleNameBytes = 64;
constexpr std::size_t kMaxConfigBytes = 4 << 20;

std::optional<RuleKind> kind_from_key(std::string_view key) {
  if (key == "kubernetes") return RuleKind::Kubernetes;
  if (key == "slurm") return RuleKind::Slurm;
  if (key == "systemd") return RuleKind::Systemd;
  if (key == "cgroup") return RuleKind::Cgroup;
  if (key == "process") return RuleKind::Process;
  return std::nullopt;
}

// A value as it appears in a message: control bytes escaped, long text cut (at a UTF-8 boundary).
std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 64;
  std::size_t cut = s.size();
  if (cut > kMax) {
    cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out = "'";
  for (std::size_t i = 0; i < cut; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (cut < s.size()) out += "...";
  return out + "'";
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return quoted(node.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The one known key close to `key` (a typo, other case, '-' for '_', a prefix such as
// "socket_path" for "socket"), or nothing when none or several are equally close.
std::optional<std::string_view> suggestion(std::string_view key, Keys known) {
  if (key.size() > 64) return std::nullopt;
  std::string norm(key);
  for (char& c : norm) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const std::size_t limit = norm.size() >= 5 ? 2 : 1;
  std::optional<std::string_view> best;
  std::size_t best_distance = limit + 1;
  bool tie = false;
  for (std::string_view k : known) {
    std::size_t d = edit_distance(norm, k);
    const std::string_view shorter = norm.size() < k.size() ? std::string_view(norm) : k;
    const std::string_view longer = norm.size() < k.size() ? k : std::string_view(norm);
    if (shorter.size() >= 4 && longer.starts_with(shorter)) d = std::min(d, limit);
    if (d < best_distance) {
      best = k;
      best_distance = d;
      tie = false;
    } else if (d == best_distance) {
      tie = true;
    }
  }
  if (tie) return std::nullopt;
  return best;
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string element(const std::string& path, std::size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

struct Entry {
  std::string key;
  YAML::Mark mark;  // of the key: where a message about this entry points
  YAML::Node value;
};

// Collects the errors of one document, in the order found.
class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  // The errors in file order (checks run by section, so they are found out of order).
  std::vector<std::string> take() {
    std::stable_sort(errors_.begin(), errors_.end(), [](const Located& a, const Located& b) {
      return std::pair(a.line, a.column) < std::pair(b.line, b.column);
    });
    std::vector<std::string> out;
    for (Located& e : errors_) out.push_back(std::move(e.text));
    errors_.clear();
    return out;
  }

  void error(const YAML::Mark& mark, const std::string& path, const std::string& message) {
    const int line = mark.line >= 0 ? mark.line + 1 : 1;
    const int column = mark.column >= 0 ? mark.column + 1 : 1;
    std::string e = source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
    if (!path.empty()) e += path + ": ";
    errors_.push_back({line, column, e + message});
  }

  // The entries of a map in file order; unknown, repeated and non-scalar keys are reported and
  // left out. `unknown` counts the unknown ones.
  std::vector<Entry> entries(const YAML::Node& map, const std::string& path, Keys known,
                             std::size_t* unknown = nullptr) {
    std::vector<Entry> out;
    std::map<std::string, int> first_line;
    for (const auto& pair : map) {  // yaml-cpp's operator-> points into a temporary: copy
      const YAML::Node key = pair.first;
      if (!key.IsScalar()) {
        error(key.Mark(), path, "expected a key name, got " + describe(key));
        continue;
      }
      const std::string name = key.Scalar();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string message = "unknown key " + quoted(name);
        if (auto near = suggestion(name, known)) {
          message += " (did you mean '" + std::string(*near) + "'?)";
        }
        error(key.Mark(), path, message);
        if (unknown != nullptr) ++*unknown;
        continue;
      }
      if (auto seen = first_line.find(name); seen != first_line.end()) {
        error(key.Mark(), child(path, name),
              "set twice; the first is at line " + std::to_string(seen->second));
        continue;
      }
      first_line[name] = key.Mark().line + 1;
      out.push_back({name, key.Mark(), pair.second});
    }
    return out;
  }

  // The text of a scalar value; nothing for ~ (the default stays) or, with an error, for a map
  // or a list.
  std::optional<std::string> scalar(const Entry& e, const std::string& path,
                                    std::string_view expected) {
    if (e.value.IsNull()) return std::nullopt;
    if (!e.value.IsScalar()) {
      error(e.mark, path, "expected " + std::string(expected) + ", got " + describe(e.value));
      return std::nullopt;
    }
    return e.value.Scalar();
  }

  // A map value, or nothing for ~ (all defaults); an error for anything else.
  bool map_or_null(const Entry& e, const std::string& path, std::string_view expected) {
    if (e.value.IsNull() || e.value.IsMap()) return e.value.IsMap();
    error(e.mark, path, "expected " + std::string(expected) + ", got " + describe(e.value));
    return false;
  }

  void string(const Entry& e, const std::string& path, std::string& out) {
    if (auto text = scalar(e, path, "a string")) out = *text;
  }

  void boolean(const Entry& e, const std::string& path, bool& out) {
    auto text = scalar(e, path, "true or false");
    if (!text) return;
    if (std::find(kTrue.begin(), kTrue.end(), *text) != kTrue.end()) {
      out = true;
    } else if (std::find(kFalse.begin(), kFalse.end(), *text) != kFalse.end()) {
      out = false;
    } else {
      error(e.mark, path, "expected true or false, got " + quoted(*text));
    }
  }

  void absolute_path(const Entry& e, const std::string& path, std::string& out) {
    auto text = scalar(e, path, "an absolute path");
    if (!text) return;
    if (text->empty() || text->front() != '/') {
      error(e.mark, path, "expected an absolute path, got " + quoted(*text));
      return;
    }
    out = *text;
  }

  /// The value read into `out`: true; else an error, and `out` as it was.
  bool positive(const Entry& e, const std::string& path, uint64_t max, uint64_t& out) {
    auto text = scalar(e, path, "a positive integer");
    if (!text) return false;
    const ParsedUnsigned n = parse_unsigned(*text);
    if (!n.ok() || n.value == 0) {
      // Digits that do not fit are out of range, not "not a number".
      if (n.error.starts_with("too large")) {
        error(e.mark, path,
              "expected a positive integer at most " + std::to_string(max) + ", got " +
                  quoted(*text));
      } else {
        error(e.mark, path, "expected a positive integer, got " + quoted(*text));
      }
      return false;
    }
    if (n.value > max) {
      error(
          e.mark, path,
          "expected a positive integer at most " + std::to_string(max) + ", got " + quoted(*text));
      return false;
    }
    out = n.value;
    return true;
  }

  /// The value read into `out`: true; else an error, and `out` as it was.
  bool size(const Entry& e, const std::string& path, uint64_t& out) {
    auto text = scalar(e, path, "a size such as 1GiB");
    if (!text) return false;
    const ParsedUnsigned n = parse_size_bytes(*text);
    if (!n.ok()) {
      error(e.mark, path, n.error + ", got " + quoted(*text));
    } else if (n.value == 0) {
      error(e.mark, path, "expected a positive size, got " + quoted(*text));
    } else {
      out = n.value;
      return true;
    }
    return false;
  }

  // A duration in milliseconds; nothing after an error or for ~.
  std::optional<uint64_t> duration_ms(const Entry& e, const std::string& path, bool zero_ok) {
    auto text = scalar(e, path, "a duration such as 30s");
    if (!text) return std::nullopt;
    const ParsedUnsigned n = parse_duration_ms(*text);
    if (!n.ok()) {
      error(e.mark, path, n.error + ", got " + quoted(*text));
      return std::nullopt;
    }
    if (n.value == 0 && !zero_ok) {
      error(e.mark, path, "expected a positive duration, got " + quoted(*text));
      return std::nullopt;
    }
    return n.value;
  }

  void seconds(const Entry& e, const std::string& path, bool zero_ok, uint64_t& out) {
    const std::optional<uint64_t> ms = duration_ms(e, path, zero_ok);
    if (!ms) return;
    if (*ms % 1000 != 0) {
      error(e.mark, path, "expected a whole number of seconds, got " + quoted(e.value.Scalar()));
      return;
    }
    out = *ms / 1000;
  }

  // A list value; nothing (and no error) for ~, an error for a scalar or a map.
  std::optional<std::vector<std::pair<YAML::Node, YAML::Mark>>> list(const Entry& e,
                                                                     const std::string& path,
                                                                     std::string_view expected) {
    if (e.value.IsNull()) return std::nullopt;
    if (!e.value.IsSequence()) {
      error(e.mark, path, "expected " + std::string(expected) + ", got " + describe(e.value));
      return std::nullopt;
    }
    std::vector<std::pair<YAML::Node, YAML::Mark>> items;
    // yaml-cpp marks an empty item ("-" alone) at the token after it: point at the list.
    for (const YAML::Node& item : e.value) {
      items.emplace_back(item, item.IsNull() ? e.mark : item.Mark());
    }
    return items;
  }

 private:
  struct Located {
    int line;
    int column;
    std::string text;
  };
  std::string source_;
  std::vector<Located> errors_;
};

// A literal cgroup path naming a subtree (a root or a slice): empty when fine, else why not.
std::string check_cgroup_subtree(std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return "expected an absolute cgroup path (starting with '/'), got " + quoted(path);
  }
  if (path == "/") return "'/' would make the kernel trace the whole machine";
  if (!split_cgroup_path(path)) {
    return quoted(path) + " has an empty, '.' or '..' component (or a trailing '/')";
  }
  if (has_wildcard(path)) {
    return quoted(path) + " is not a literal path; for globs use a cgroup rule with paths:";
  }
  return {};
}

struct RuleSite {
  std::string path;  // "jobs[3]"
  YAML::Mark mark;   // of the rule
  std::optional<YAML::Mark> name_mark;
};

// Tells whether a YAML stream has a second document with content. YAML::LoadAll cannot: after
// some malformed input (a lone ",") yaml-cpp 0.7 yields empty documents forever and LoadAll
// never returns (jbeder/yaml-cpp#1040, fixed after 0.8), so the parser is driven here for two
// documents at most, through its event interface.
class DocumentProbe : public YAML::EventHandler {
 public:
  bool has_content = false;
  YAML::Mark start;

  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { has_content = true; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    has_content = true;
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    has_content = true;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    has_content = true;
  }
  void OnMapEnd() override {}
};

class ConfigParser {
 public:
  explicit ConfigParser(const std::string& source) : check_(source) {}

  ConfigResult run(std::string_view text) {
    ConfigResult result;
    const std::string input(text);
    YAML::Node root;
    try {
      root = YAML::Load(input);
      second_document(input);
    } catch (const YAML::ParserException& e) {
      check_.error(e.mark, "", "invalid YAML: " + e.msg);
      result.errors = check_.take();
      return result;
    }
    if (root.IsNull()) {
      check_.error(YAML::Mark::null_mark(), "",
                   "the configuration is empty; it needs at least a jobs: list");
    } else if (!root.IsMap()) {
      check_.error(root.Mark(), "", "expected a map of settings, got " + describe(root));
    } else {
      top(root, result.config);
    }
    result.errors = check_.take();
    return result;
  }

 private:
  // Reports a second document with content (iolensd reads one). Throws ParserException for a
  // syntax error in it, which YAML::Load, reading the first document only, does not see.
  void second_document(const std::string& input) {
    std::istringstream in(input);
    YAML::Parser parser(in);
    DocumentProbe first;
    if (!parser.HandleNextDocument(first)) return;
    DocumentProbe second;
    if (!parser.HandleNextDocument(second) || !second.has_content) return;
    check_.error(second.start, "", "the file holds more than one YAML document; iolensd reads one");
  }

  void top(const YAML::Node& root, Config& c) {
    const Entry* drain = nullptr;
    bool have_rules = false;
    YAML::Mark jobs_mark = root.Mark();
    YAML::Mark limits_mark = root.Mark();
    const std::vector<Entry> entries = check_.entries(root, "", kTopKeys);
    for (const Entry& e : entries) {
      const std::string& k = e.key;
      if (k == "cgroup_root") {
        if (auto text = check_.scalar(e, k, "'auto' or an absolute path")) {
          if (*text == "auto" || (!text->empty() && text->front() == '/')) {
            c.cgroup_root = *text;
          } else {
            check_.error(e.mark, k, "expected 'auto' or an absolute path, got " + quoted(*text));
          }
        }
      } else if (k == "output_dir") {
        check_.absolute_path(e, k, c.output_dir);
      } else if (k == "darshan_logs") {
        check_.boolean(e, k, c.darshan_logs);
      } else if (k == "state_dir") {
        check_.absolute_path(e, k, c.state_dir);
      } else if (k == "pin_dir") {
        check_.absolute_path(e, k, c.pin_dir);
      } else if (k == "socket") {
        std::string socket = c.socket_path;
        check_.absolute_path(e, k, socket);
        if (socket.size() > kMaxSocketPathBytes) {
          check_.error(e.mark, k,
                       quoted(socket) + " is " + std::to_string(socket.size()) +
                           " bytes; a unix socket path holds at most " +
                           std::to_string(kMaxSocketPathBytes));
        } else {
          c.socket_path = socket;
        }
      } else if (k == "socket_group") {
        check_.string(e, k, c.socket_group);
      } else if (k == "drain_interval" || k == "drain_interval_ms") {
        if (drain != nullptr) {
          check_.error(e.mark, k,
                       "set either drain_interval or drain_interval_ms, not both (the other is at "
                       "line " +
                           std::to_string(drain->mark.line + 1) + ")");
          continue;
        }
        drain = &e;
        drain_interval(e, c);
      } else if (k == "drain_piece") {
        // At most a second: longer, a client would wait longer than its own timeouts.
        if (const auto ms = check_.duration_ms(e, k, false)) {
          if (*ms > 1000)
            check_.error(e.mark, k, "expected at most 1s, got " + quoted(e.value.Scalar()));
          else
            c.drain_piece_ms = static_cast<uint32_t>(*ms);
        }
      } else if (k == "log_level") {
        log_level(e, c);
      } else if (k == "syscall_hooks") {
        syscall_hooks(e, c);
      } else if (k == "timing") {
        timing(e, c);
      } else if (k == "record_compression") {
        record_compression(e, c);
      } else if (k == "disabled_programs") {
        // Names are checked against the object's programs when iolensd loads them.
        if (auto names = string_list(e, k, "a list of optional program names",
                                     [](const std::string& n) {
                                       return n.empty() ? std::string("an empty name")
                                                        : std::string();
                                     }))
          c.disabled_programs = *names;
      } else if (k == "hooks_idle") {
        check_.seconds(e, k, true, c.hooks_idle_s);
      } else if (k == "limits") {
        limits_mark = e.mark;
        limits(e, c.limits);
      } else if (k == "rotation") {
        rotation(e, c.rotation);
      } else if (k == "grace_period") {
        check_.seconds(e, k, true, c.grace_s);
      } else if (k == "metrics") {
        metrics(e, c.metrics);
      } else if (k == "jobs") {
        jobs_mark = e.mark;
        have_rules = jobs(e, c.rules);
      } else if (k == "runs") {
        if (auto text = check_.scalar(e, k, "a cgroup path, or \"\" for none")) {
          if (std::string why = text->empty() ? "" : check_cgroup_subtree(*text); !why.empty())
            check_.error(e.mark, k, why);
          else
            c.runs = *text;
        }
      }
    }
    if (std::string why = apply_memory_bound(c.limits); !why.empty())
      check_.error(limits_mark, "limits", why);
    if (!have_rules && c.runs.empty())
      check_.error(jobs_mark, "jobs", "no rule; iolensd would trace nothing");
    if (!c.runs.empty()) {
      for (const Rule& r : c.rules)
        if (r.name == kRunRuleName)
          check_.error(jobs_mark, "jobs",
                       std::string("the rule name '") + kRunRuleName + "' is the runs' own (runs:)");
      c.rules.push_back(run_rule(c.runs));
    }
  }

  void metrics(const Entry& parent, MetricsConfig& m) {
    if (!check_.map_or_null(parent, parent.key, "a map")) return;
    for (const Entry& e : check_.entries(parent.value, parent.key, kMetricsKeys)) {
      const std::string path = child(parent.key, e.key);
      if (e.key == "listen") {
        if (auto text = check_.scalar(e, path, "host:port, or \"\" to disable")) {
          if (std::string why = check_listen_address(*text); !why.empty())
            check_.error(e.mark, path, why);
          else
            m.listen = *text;
        }
      } else if (e.key == "node") {
        check_.string(e, path, m.node);
      } else if (e.key == "top_files") {
        if (e.value.IsScalar() && e.value.Scalar() == "0") {
          m.top_files = 0;
        } else {
          uint64_t n = m.top_files;
          check_.positive(e, path, kMaxTopFiles, n);
          m.top_files = static_cast<uint32_t>(n);
        }
      } else if (e.key == "max_jobs") {
        uint64_t n = m.max_jobs;
        check_.positive(e, path, 1000000, n);
        m.max_jobs = static_cast<uint32_t>(n);
      } else if (e.key == "threads") {
        uint64_t n = m.threads;
        check_.positive(e, path, kMaxMetricsThreads, n);
        m.threads = static_cast<uint32_t>(n);
      } else if (e.key == "request_timeout") {
        if (const auto ms = check_.duration_ms(e, path, false)) {
          if (*ms > kMaxMetricsRequestTimeoutMs)
            check_.error(e.mark, path,
                         "at most 60s: a slow client holds a server thread that long, got " +
                             quoted(e.value.Scalar()));
          else
            m.request_timeout_ms = static_cast<uint32_t>(*ms);
        }
      } else if (e.key == "classes") {
        classes(e, path, m.classes);
      } else if (e.key == "basic_auth") {
        if (!check_.map_or_null(e, path, "a map with username and password_file")) continue;
        std::string user, file;
        for (const Entry& a : check_.entries(e.value, path, kAuthKeys)) {
          if (a.key == "username") check_.string(a, child(path, a.key), user);
          if (a.key == "password_file") check_.absolute_path(a, child(path, a.key), file);
        }
        if (user.empty() || file.empty() || user.find(':') != std::string::npos) {
          check_.error(e.mark, path,
                       "needs a username (without ':') and a password_file (an absolute path)");
        } else {
          m.username = user;
          m.password_file = file;
        }
      } else if (e.key == "tls") {
        if (!check_.map_or_null(e, path, "a map with cert_file")) continue;
        for (const Entry& t : check_.entries(e.value, path, kTlsKeys))
          check_.absolute_path(t, child(path, t.key), m.tls_cert_file);
        if (m.tls_cert_file.empty()) check_.error(e.mark, path, "needs cert_file");
      }
    }
  }

  void classes(const Entry& e, const std::string& path, std::vector<FileClass>& out) {
    auto items = check_.list(e, path, "a list of {name, prefixes}");
    if (!items) return;
    std::vector<FileClass> parsed;
    bool ok = true;
    for (std::size_t i = 0; i < items->size(); ++i) {
      const auto& [node, mark] = (*items)[i];
      const std::string at = element(path, i);
      if (!node.IsMap()) {
        check_.error(mark, at, "expected a map {name, prefixes}, got " + describe(node));
        ok = false;
        continue;
      }
      FileClass fc;
      bool bad_prefix = false;
      for (const Entry& f : check_.entries(node, at, kClassKeys)) {
        if (f.key == "name") {
          check_.string(f, child(at, f.key), fc.name);
        } else if (auto prefixes = check_.list(f, child(at, f.key), "a list of path prefixes")) {
          for (std::size_t j = 0; j < prefixes->size(); ++j) {
            const auto& [p, pmark] = (*prefixes)[j];
            if (!p.IsScalar() || p.Scalar().empty() || p.Scalar().front() != '/') {
              check_.error(pmark, element(child(at, f.key), j),
                           "expected an absolute path prefix, got " + describe(p));
              ok = false;
              bad_prefix = true;
              continue;
            }
            fc.prefixes.push_back(p.Scalar());
          }
        }
      }
      if (!valid_class_name(fc.name)) {
        check_.error(mark, at,
                     "name: expected 1-32 characters of [a-z0-9_], not 'other', got " +
                         quoted(fc.name));
        ok = false;
        continue;
      }
      if (fc.prefixes.empty() && !bad_prefix) {
        check_.error(mark, at, "class " + quoted(fc.name) + " has no prefixes");
        ok = false;
        continue;
      }
      for (const FileClass& seen : parsed)
        if (seen.name == fc.name) {
          check_.error(mark, at, "class " + quoted(fc.name) + " is defined twice");
          ok = false;
        }
      parsed.push_back(std::move(fc));
    }
    if (parsed.size() > kMaxClasses) {
      check_.error(e.mark, path,
                   "at most " + std::to_string(kMaxClasses) + " classes (each is a set of series)");
      ok = false;
    }
    if (ok) out = std::move(parsed);
  }

  static bool valid_class_name(const std::string& n) {
    if (n.empty() || n.size() > 32 || n == "other") return false;
    for (char ch : n)
      if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
    return true;
  }

  void drain_interval(const Entry& e, Config& c) {
    uint64_t ms = 0;
    if (e.key == "drain_interval_ms") {
      ms = c.drain_interval_ms;
      check_.positive(e, e.key, std::numeric_limits<uint32_t>::max(), ms);
    } else {
      const std::optional<uint64_t> parsed = check_.duration_ms(e, e.key, false);
      if (!parsed) return;
      ms = *parsed;
      if (ms > std::numeric_limits<uint32_t>::max()) {
        check_.error(
            e.mark, e.key,
            "expected at most 4294967295ms (about 49 days), got " + quoted(e.value.Scalar()));
        return;
      }
    }
    c.drain_interval_ms = static_cast<uint32_t>(ms);
  }

  void syscall_hooks(const Entry& e, Config& c) {
    auto text = check_.scalar(e, e.key, "on-demand or always");
    if (!text) return;
    if (std::find(kHookModes.begin(), kHookModes.end(), *text) != kHookModes.end()) {
      c.syscall_hooks = *text;
      return;
    }
    check_.error(e.mark, e.key, "expected on-demand or always, got " + quoted(*text));
  }

  void record_compression(const Entry& e, Config& c) {
    auto text = check_.scalar(e, e.key, "zstd or none");
    if (!text) return;
    if (*text == "zstd" || *text == "none") {
      c.record_compression = *text;
      return;
    }
    check_.error(e.mark, e.key, "expected zstd or none, got " + quoted(*text));
  }

  void timing(const Entry& e, Config& c) {
    auto text = check_.scalar(e, e.key, "exact or off");
    if (!text) return;
    if (*text == "exact" || *text == "off") {
      c.timing = *text;
      return;
    }
    check_.error(e.mark, e.key, "expected exact or off, got " + quoted(*text));
  }

  void log_level(const Entry& e, Config& c) {
    auto text = check_.scalar(e, e.key, "a log level");
    if (!text) return;
    if (std::find(kLogLevels.begin(), kLogLevels.end(), *text) != kLogLevels.end()) {
      c.log_level = *text;
      return;
    }
    std::string message = "expected one of trace, debug, info, warn, error, got " + quoted(*text);
    if (auto near = suggestion(*text, kLogLevels)) {
      message += " (did you mean '" + std::string(*near) + "'?)";
    }
    check_.error(e.mark, e.key, message);
  }

  void limits(const Entry& parent, Limits& l) {
    if (!check_.map_or_null(parent, parent.key, "a map")) return;
    for (const Entry& e : check_.entries(parent.value, parent.key, kLimitKeys)) {
      const std::string path = child(parent.key, e.key);
      if (e.key == "memory") {
        l.given.memory = check_.size(e, path, l.memory);
      } else if (e.key == "max_files_per_job") {
        l.given.max_files_per_job =
            check_.positive(e, path, std::numeric_limits<uint64_t>::max(), l.max_files_per_job);
      } else if (e.key == "max_records") {
        l.given.max_records =
            check_.positive(e, path, std::numeric_limits<uint64_t>::max(), l.max_records);
      } else if (e.key == "max_processes_per_job") {
        check_.positive(e, path, std::numeric_limits<uint64_t>::max(), l.max_processes_per_job);
      } else if (e.key == "max_folded_files_per_job") {
        check_.positive(e, path, std::numeric_limits<uint64_t>::max(), l.max_folded_files_per_job);
      } else if (e.key == "max_path_bytes_per_job") {
        l.given.max_path_bytes_per_job = path_bytes(e, path, l.max_path_bytes_per_job);
      } else if (e.key == "max_path_bytes") {
        l.given.max_path_bytes = path_bytes(e, path, l.max_path_bytes);
      } else if (e.key == "kernel_file_records") {
        uint64_t n = l.kernel_file_records;
        check_.positive(e, path, std::numeric_limits<uint32_t>::max(), n);
        l.kernel_file_records = static_cast<uint32_t>(n);
      } else if (e.key == "kernel_file_records_preallocated") {
        check_.boolean(e, path, l.kernel_file_records_preallocated);
        l.given.kernel_file_records_preallocated = true;
      } else if (e.key == "kernel_cgroup_exclusions") {
        uint64_t n = l.kernel_cgroup_exclusions;
        check_.positive(e, path, std::numeric_limits<uint32_t>::max(), n);
        l.kernel_cgroup_exclusions = static_cast<uint32_t>(n);
      } else if (e.key == "kernel_block_records") {
        uint64_t n = l.kernel_block_records;
        check_.positive(e, path, std::numeric_limits<uint32_t>::max(), n);
        l.kernel_block_records = static_cast<uint32_t>(n);
      } else if (e.key == "kernel_inflight") {
        uint64_t n = l.kernel_inflight;
        check_.positive(e, path, std::numeric_limits<uint32_t>::max(), n);
        l.kernel_inflight = static_cast<uint32_t>(n);
      } else if (e.key == "ring_size") {
        ring_size(e, path, l.ring_bytes);
      } else if (e.key == "trace_ring_size") {
        ring_size(e, path, l.trace_ring_bytes);
      }
    }
  }

  /// A budget of name bytes: a size of at least 64KiB (a few of the longest paths, 4KiB each).
  bool path_bytes(const Entry& e, const std::string& path, uint64_t& out) {
    uint64_t n = out;
    if (!check_.size(e, path, n)) return false;
    if (n < (64u << 10)) {
      check_.error(e.mark, path, "expected a size of at least 64KiB, got " + std::to_string(n));
      return false;
    }
    out = n;
    return true;
  }

  /// A kernel ring buffer's size: a power of two, whole pages, below 4 GiB.
  void ring_size(const Entry& e, const std::string& path, uint32_t& out) {
    uint64_t n = out;
    check_.size(e, path, n);
    if (n < 4096 || n > (1ull << 31) || (n & (n - 1)) != 0) {
      check_.error(e.mark, path,
                   "expected a power of two from 4KiB to 2GiB, got " + std::to_string(n));
    } else {
      out = static_cast<uint32_t>(n);
    }
  }

  void rotation(const Entry& parent, Rotation& r) {
    if (!check_.map_or_null(parent, parent.key, "a map")) return;
    for (const Entry& e : check_.entries(parent.value, parent.key, kRotationKeys)) {
      const std::string path = child(parent.key, e.key);
      if (e.key == "max_size") {
        check_.size(e, path, r.max_bytes);
      } else if (e.key == "max_age") {
        check_.seconds(e, path, false, r.max_age_s);
      }
    }
  }

  // Returns whether the list holds at least one rule (valid or not).
  bool jobs(const Entry& e, std::vector<Rule>& rules) {
    auto items = check_.list(e, e.key, "a list of rules");
    if (!items) return !e.value.IsNull();  // a scalar or a map was reported already
    std::vector<RuleSite> sites;
    for (std::size_t i = 0; i < items->size(); ++i) {
      const auto& [node, mark] = (*items)[i];
      RuleSite site{element(e.key, i), mark, std::nullopt};
      if (std::optional<Rule> rule = this->rule(node, site)) {
        rules.push_back(std::move(*rule));
        sites.push_back(std::move(site));
      }
    }
    // Rule names label the jobs each rule finds; two rules with one name could not be told apart.
    for (std::size_t i = 0; i < rules.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (rules[i].name != rules[j].name) continue;
        check_.error(sites[i].name_mark.value_or(sites[i].mark), sites[i].path + ".name",
                     quoted(rules[i].name) + " is also the name of " + sites[j].path +
                         "; give each rule its own name:");
        break;
      }
    }
    return !items->empty();
  }

  std::optional<Rule> rule(const YAML::Node& node, RuleSite& site) {
    if (!node.IsMap()) {
      check_.error(site.mark, site.path,
                   "expected a rule (a map such as 'kubernetes: {}'), got " + describe(node));
      return std::nullopt;
    }
    std::size_t unknown = 0;
    const std::vector<Entry> entries = check_.entries(node, site.path, kRuleKeys, &unknown);
    const Entry* kind_entry = nullptr;
    std::optional<std::string> name;
    for (const Entry& e : entries) {
      if (e.key == "name") {
        name = rule_name(e, site);
      } else if (kind_entry != nullptr) {
        check_.error(e.mark, child(site.path, e.key),
                     "a rule has one kind, and this one is already '" + kind_entry->key + "'");
      } else {
        kind_entry = &e;
      }
    }
    if (kind_entry == nullptr) {
      if (unknown == 0) {
        check_.error(site.mark, site.path,
                     "a rule needs one of kubernetes, slurm, systemd, cgroup, process");
      }
      return std::nullopt;
    }
    Rule r;
    r.kind = *kind_from_key(kind_entry->key);
    r.name = name.value_or(std::string(rule_kind_name(r.kind)));
    const std::string path = child(site.path, kind_entry->key);
    const bool is_map = check_.map_or_null(*kind_entry, path, "a map (may be empty: {})");
    const YAML::Node settings = is_map ? kind_entry->value : YAML::Node(YAML::NodeType::Map);
    switch (r.kind) {
      case RuleKind::Kubernetes:
      case RuleKind::Slurm: roots_rule(*kind_entry, settings, path, r); break;
      case RuleKind::Systemd: systemd_rule(*kind_entry, settings, path, r); break;
      case RuleKind::Cgroup: cgroup_rule(*kind_entry, settings, path, r); break;
      case RuleKind::Process: process_rule(*kind_entry, settings, path, r); break;
    }
    return r;
  }

  std::optional<std::string> rule_name(const Entry& e, RuleSite& site) {
    const std::string path = child(site.path, e.key);
    auto text = check_.scalar(e, path, "a name");
    if (!text) return std::nullopt;
    site.name_mark = e.mark;
    const bool ok = !text->empty() && text->size() <= kMaxRuleNameBytes &&
                    std::all_of(text->begin(), text->end(), [](char ch) {
                      return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                             (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
                    });
    if (!ok) {
      check_.error(
          e.mark, path,
          "expected a name of 1 to 64 letters, digits, '.', '_' or '-', got " + quoted(*text));
      return std::nullopt;
    }
    return text;
  }

  // The scalar items of a list value, each checked by `check` (empty string: fine).
  template <typename Check>
  std::optional<std::vector<std::string>> string_list(const Entry& e, const std::string& path,
                                                      std::string_view expected, Check check) {
    auto items = check_.list(e, path, expected);
    if (!items) return std::nullopt;
    if (items->empty()) {
      check_.error(e.mark, path, "expected " + std::string(expected) + ", got an empty list");
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool all_ok = true;
    for (std::size_t i = 0; i < items->size(); ++i) {
      const auto& [node, mark] = (*items)[i];
      const std::string item_path = element(path, i);
      if (!node.IsScalar()) {
        check_.error(mark, item_path, "expected a string, got " + describe(node));
        all_ok = false;
        continue;
      }
      if (std::string why = check(node.Scalar()); !why.empty()) {
        check_.error(mark, item_path, why);
        all_ok = false;
        continue;
      }
      out.push_back(node.Scalar());
    }
    if (!all_ok) return std::nullopt;
    return out;
  }

  void roots_rule(const Entry&, const YAML::Node& settings, const std::string& path, Rule& r) {
    r.roots = default_roots(r.kind);
    for (const Entry& e : check_.entries(settings, path, kRootsKeys)) {
      if (auto roots =
              string_list(e, child(path, e.key), "a list of cgroup paths", check_cgroup_subtree)) {
        r.roots = std::move(*roots);
      }
    }
  }

  void systemd_rule(const Entry& kind, const YAML::Node& settings, const std::string& path,
                    Rule& r) {
    bool have_units = false;
    for (const Entry& e : check_.entries(settings, path, kSystemdKeys)) {
      const std::string p = child(path, e.key);
      if (e.key == "slice") {
        auto text = check_.scalar(e, p, "a slice such as /system.slice");
        if (!text) continue;
        std::string why = check_cgroup_subtree(*text);
        if (why.empty() && !text->ends_with(".slice")) {
          why = "expected a slice such as /system.slice, got " + quoted(*text);
        }
        if (!why.empty()) {
          check_.error(e.mark, p, why);
        } else {
          r.slice = *text;
        }
      } else if (e.key == "units") {
        have_units = !e.value.IsNull();
        if (auto units = string_list(e, p, "a list of unit name globs", check_name_glob)) {
          r.globs = std::move(*units);
        }
      }
    }
    if (!have_units) {
      check_.error(kind.mark, child(path, "units"),
                   "required: a list of unit name globs such as train-*.service");
    }
    r.roots = {r.slice};
  }

  void cgroup_rule(const Entry& kind, const YAML::Node& settings, const std::string& path,
                   Rule& r) {
    bool have_paths = false;
    for (const Entry& e : check_.entries(settings, path, kCgroupKeys)) {
      have_paths = !e.value.IsNull();
      if (auto globs = string_list(e, child(path, e.key), "a list of cgroup path globs",
                                   check_cgroup_glob)) {
        r.globs = std::move(*globs);
      }
    }
    if (!have_paths) {
      check_.error(kind.mark, child(path, "paths"),
                   "required: a list of cgroup path globs such as /batch.slice/job-*.scope");
    }
    for (const std::string& glob : r.globs) {
      std::string root = cgroup_glob_static_prefix(glob);
      if (std::find(r.roots.begin(), r.roots.end(), root) == r.roots.end()) {
        r.roots.push_back(std::move(root));
      }
    }
  }

  void process_rule(const Entry& kind, const YAML::Node& settings, const std::string& path,
                    Rule& r) {
    bool have_comm = false;
    for (const Entry& e : check_.entries(settings, path, kProcessKeys)) {
      const std::string p = child(path, e.key);
      if (e.key == "comm") {
        auto text = check_.scalar(e, p, "a command name");
        have_comm = text.has_value() || !e.value.IsNull();
        if (!text) continue;
        if (text->empty()) {
          check_.error(e.mark, p, "expected a command name, got ''");
        } else if (text->find('/') != std::string::npos) {
          check_.error(e.mark, p,
                       "expected a command name, not a path (the kernel matches the executable's "
                       "file name, cut to 15 bytes), got " +
                           quoted(*text));
        } else if (text->size() > kMaxCommBytes) {
          check_.error(e.mark, p,
                       quoted(*text) + " is " + std::to_string(text->size()) +
                           " bytes; the kernel keeps only the first 15 of a command name, so "
                           "write " +
                           quoted(text->substr(0, kMaxCommBytes)));
        } else {
          r.comm = *text;
        }
      } else if (e.key == "cmdline") {
        auto text = check_.scalar(e, p, "a regular expression");
        if (!text) continue;
        if (std::string why = check_cmdline_regex(*text); !why.empty()) {
          check_.error(e.mark, p, why);
        } else {
          r.cmdline = *text;
        }
      }
    }
    if (!have_comm) {
      check_.error(kind.mark, child(path, "comm"),
                   "required: the command name the kernel matches at exec (at most 15 bytes)");
    }
  }

  Checker check_;
};

}  // namespace

std::vector<FileClass> default_file_classes() {
  return {{"python",
           {"/usr/lib/python3", "/usr/local/lib/python3", "/usr/lib64/python3", "/opt/conda/"}},
          {"system",
           {"/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/etc/", "/proc/", "/sys/", "/dev/",
            "/run/"}}};
}

std::string check_listen_address(std::string_view text) {
  if (text.empty()) return {};
  std::string_view host;
  std::string_view port;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return "expected [ipv6]:port, got " + quoted(text);
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return "expected host:port (e.g. 127.0.0.1:9464), got " + quoted(text);
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return "an IPv6 address goes in brackets ([::1]:9464), got " + quoted(text);
  }
  const ParsedUnsigned p = parse_unsigned(port);
  if (!p.ok() || p.value > 65535) return "expected a port from 0 to 65535, got " + quoted(text);
  if (host.empty()) return "expected an address before the port (0.0.0.0 for all), got " + quoted(text);
  for (char ch : host)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == ':' || ch == '-'))
      return "expected an IP address or host name, got " + quoted(text);
  return {};
}

Rule run_rule(const std::string& runs) {
  Rule r;
  r.kind = RuleKind::Cgroup;
  r.name = kRunRuleName;
  r.roots = {runs};
  r.globs = {runs + "/run-*"};
  return r;
}

std::string_view rule_kind_name(RuleKind kind) {
  switch (kind) {
    case RuleKind::Kubernetes: return "kubernetes";
    case RuleKind::Slurm: return "slurm";
    case RuleKind::Systemd: return "systemd";
    case RuleKind::Cgroup: return "cgroup";
    case RuleKind::Process: return "process";
  }
  return "unknown";
}

std::vector<std::string> default_roots(RuleKind kind) {
  switch (kind) {
    case RuleKind::Kubernetes: return {"/kubepods.slice", "/kubepods"};
    case RuleKind::Slurm: return {"/system.slice/slurmstepd.scope", "/slurm"};
    default: return {};
  }
}

ConfigResult parse_config(std::string_view yaml_text, const std::string& source_name) {
  try {
    return ConfigParser(source_name).run(yaml_text);
  } catch (const std::exception& e) {
    // yaml-cpp documents ParserException only; anything else is a bug, reported, not thrown.
    ConfigResult result;
    result.errors.push_back(source_name + ": cannot parse: " + e.what());
    return result;
  }
}

ConfigResult load_config_file(const std::string& path) {
  ConfigResult result;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    result.errors.push_back(path + ": cannot read: " + std::strerror(errno));
    return result;
  }
  std::string text;
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxConfigBytes) {
    text.append(buf, n);
  }
  const int read_errno = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (read_errno != 0) {
    result.errors.push_back(path + ": cannot read: " + std::strerror(read_errno));
    return result;
  }
  if (text.size() > kMaxConfigBytes) {
    result.errors.push_back(path + ": cannot read: larger than 4 MiB; is it the configuration?");
    return result;
  }
  return parse_config(text, path);
}

}  // namespace iolens::jobs
