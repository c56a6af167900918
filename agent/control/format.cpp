// SPDX-License-Identifier: Apache-2.0
#include "control/format.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "control/protocol.hpp"
#include "exporters/units.hpp"

namespace iolens::control {
namespace {

using exporters::human_bytes;
using exporters::human_count;
using nlohmann::json;

constexpr const char* kMissing = "-";
constexpr std::size_t kMaxProcessRows = 20;
constexpr std::size_t kLabelWidth = 15;  // "syscall hooks" and two spaces

std::string printf_text(const char* f, auto... args) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

// ---- reading fields that may be missing or of the wrong type ----

const json* field(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const json& object_or_empty(const json& obj, std::string_view key) {
  static const json kEmpty = json::object();
  const json* f = field(obj, key);
  return f != nullptr && f->is_object() ? *f : kEmpty;
}

const json& array_or_empty(const json& obj, std::string_view key) {
  static const json kEmpty = json::array();
  const json* f = field(obj, key);
  return f != nullptr && f->is_array() ? *f : kEmpty;
}

std::optional<uint64_t> count_value(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d < 1.8e19) return static_cast<uint64_t>(d);
  }
  return std::nullopt;
}

std::optional<uint64_t> count_of(const json& obj, std::string_view key) {
  const json* f = field(obj, key);
  return f != nullptr ? count_value(*f) : std::nullopt;
}

std::optional<int64_t> int_of(const json& obj, std::string_view key) {
  const json* f = field(obj, key);
  if (f == nullptr || !f->is_number_integer()) return std::nullopt;
  if (f->is_number_unsigned() && f->get<uint64_t>() > INT64_MAX) return std::nullopt;
  return f->get<int64_t>();
}

std::optional<double> number_of(const json& obj, std::string_view key) {
  const json* f = field(obj, key);
  if (f == nullptr || !f->is_number()) return std::nullopt;
  const double d = f->get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

std::optional<bool> bool_of(const json& obj, std::string_view key) {
  const json* f = field(obj, key);
  return f != nullptr && f->is_boolean() ? std::optional<bool>(f->get<bool>()) : std::nullopt;
}

/// The bytes of a "*_hex" field (iolens.run/1 gives the exact bytes of names that are not UTF-8
/// beside their U+FFFD version); nullopt unless it is well-formed hex.
std::optional<std::string> from_hex(const std::string& hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

/// A name or label, safe for the terminal; nullopt if missing.
std::optional<std::string> text_of(const json& obj, std::string_view key) {
  if (const json* hex = field(obj, std::string(key) + "_hex"); hex != nullptr && hex->is_string()) {
    if (auto bytes = from_hex(hex->get<std::string>())) return terminal_safe(*bytes);
  }
  const json* f = field(obj, key);
  if (f == nullptr || f->is_null()) return std::nullopt;
  if (f->is_string()) return terminal_safe(f->get<std::string>());
  if (f->is_number() || f->is_boolean()) return f->dump();
  return std::nullopt;
}

std::string text_or_missing(const json& obj, std::string_view key) {
  return text_of(obj, key).value_or(kMissing);
}

std::string bytes_of(const json& obj, std::string_view key) {
  const auto v = count_of(obj, key);
  return v ? human_bytes(*v) : kMissing;
}

std::string number_text(const json& obj, std::string_view key) {
  const auto v = count_of(obj, key);
  return v ? human_count(*v) : kMissing;
}

// ---- time ----

/// "12.5 s", "3 min 20 s", "2 h 5 min", "3 d 4 h".
std::string human_age(double seconds) {
  if (!(seconds >= 0)) return kMissing;
  if (seconds < 60) return printf_text("%.1f s", seconds);
  const auto s = static_cast<uint64_t>(seconds);
  if (s < 3600) return printf_text("%u min %u s", unsigned(s / 60), unsigned(s % 60));
  if (s < 86400) return printf_text("%u h %u min", unsigned(s / 3600), unsigned(s % 3600 / 60));
  return printf_text("%llu d %u h", static_cast<unsigned long long>(s / 86400),
                     unsigned(s % 86400 / 3600));
}

/// Wall-clock nanoseconds as UTC: the same text wherever the command runs.
std::string utc_time(uint64_t ns) {
  const time_t t = static_cast<time_t>(ns / 1000000000ULL);
  tm parts{};
  if (gmtime_r(&t, &parts) == nullptr) return kMissing;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return buf;
}

// ---- layout ----

/// Columns on a terminal: code points, which is what the escaped text consists of (wide CJK
/// characters still count one; rare in paths, and they only misalign).
std::size_t display_width(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string pad(const std::string& s, std::size_t width, bool right) {
  const std::size_t w = display_width(s);
  if (w >= width) return s;
  return right ? std::string(width - w, ' ') + s : s + std::string(width - w, ' ');
}

struct Column {
  const char* header;
  bool right;  // numbers right-aligned, names left
};

/// Rows under a header line, each column as wide as its widest cell, two spaces apart; a `right`
/// false last column is not padded (no trailing blanks).
std::string table(const std::vector<Column>& columns,
                  const std::vector<std::vector<std::string>>& rows, bool with_header = true) {
  std::vector<std::size_t> width(columns.size(), 0);
  for (size_t c = 0; c < columns.size(); ++c) {
    if (with_header) width[c] = display_width(columns[c].header);
    for (const auto& row : rows) width[c] = std::max(width[c], display_width(row[c]));
  }
  auto line = [&](auto cell_of) {
    std::string out;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (c != 0) out += "  ";
      const bool last = c + 1 == columns.size();
      out += last && !columns[c].right ? std::string(cell_of(c))
                                       : pad(cell_of(c), width[c], columns[c].right);
    }
    return out + "\n";
  };
  std::string out;
  if (with_header) out += line([&](size_t c) { return std::string(columns[c].header); });
  for (const auto& row : rows) out += line([&](size_t c) { return row[c]; });
  return out;
}

/// "label      value" lines; a multi-line value continues under the first.
std::string labelled(const std::string& label, const std::string& value) {
  const std::size_t width = std::max(kLabelWidth, display_width(label) + 2);
  if (value.empty()) return label + "\n";
  std::string out;
  size_t start = 0;
  bool first = true;
  while (start < value.size()) {
    size_t end = value.find('\n', start);
    if (end == std::string::npos) end = value.size();
    out += pad(first ? label : "", width, false) + value.substr(start, end - start) + "\n";
    first = false;
    start = end + 1;
  }
  return out;
}

std::string strip_final_newline(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

/// Every non-zero loss, "events 3, file_records 2"; "nothing lost" when all are zero.
std::string lost_text(const json& lost) {
  std::string out;
  for (const auto& [name, value] : lost.items()) {
    const auto n = count_value(value);
    if (!n || *n == 0) continue;
    if (!out.empty()) out += ", ";
    out += terminal_safe(name) + " " + human_count(*n);
  }
  return out.empty() ? "nothing lost" : out;
}

uint64_t saturating_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

uint64_t file_bytes(const json& file) {
  const json& counters = object_or_empty(file, "counters");
  return saturating_add(count_of(counters, "bytes_read").value_or(0),
                        count_of(counters, "bytes_written").value_or(0));
}

// ---- the job header, shared by nothing else but long enough to stand apart ----

std::string job_state(const json& job, uint64_t now_ns) {
  const auto state = text_of(job, "state");
  const auto start = count_of(job, "start_ns");
  const auto end = count_of(job, "end_ns");
  std::string out = state.value_or(kMissing);
  if (end && start) {
    out += ", " + utc_time(*start) + " to " + utc_time(*end);
    if (*end >= *start) out += " (" + human_age(static_cast<double>(*end - *start) / 1e9) + ")";
  } else if (start) {
    out += ", started " + utc_time(*start);
    if (now_ns >= *start) {
      out += ", running for " + human_age(static_cast<double>(now_ns - *start) / 1e9);
    }
  }
  return out;
}

std::string labels_text(const json& labels) {
  std::string out;
  for (const auto& [key, value] : labels.items()) {
    if (!out.empty()) out += ", ";
    out += terminal_safe(key) + "=" +
           (value.is_string() ? terminal_safe(value.get<std::string>()) : value.dump());
  }
  return out.empty() ? "none" : out;
}

std::string calls_text(const json& totals, std::string_view key) {
  const auto n = count_of(totals, key);
  return n ? human_count(*n) + (*n == 1 ? " call" : " calls") : "- calls";
}

std::string totals_text(const json& totals) {
  std::string out = "read " + bytes_of(totals, "bytes_read") + " in " +
                    calls_text(totals, "reads") + ", wrote " + bytes_of(totals, "bytes_written") +
                    " in " + calls_text(totals, "writes");
  std::string ops;
  for (const char* op : {"opens", "stats", "seeks", "fsyncs"}) {
    if (const auto n = count_of(totals, op)) {
      ops += (ops.empty() ? "" : ", ") + human_count(*n) + " " + op;
    }
  }
  return ops.empty() ? out : out + "\n" + ops;
}

std::string exit_text(const json& process) {
  if (const auto code = int_of(process, "exit_code")) return std::to_string(*code);
  return count_of(process, "end_ns") ? kMissing : "running";
}

}  // namespace

std::string terminal_safe(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) {
        out += printf_text("\\x%02x", c);
      } else if (c == '\\') {
        out += "\\\\";
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, then the rules that make it the one
    // shortest encoding of a scalar value (no overlongs, no surrogates, at most U+10FFFF).
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    }
    bool valid = len != 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      valid = (cc & 0xC0) == 0x80;
      cp = cp << 6 | (cc & 0x3F);
    }
    if (valid) {
      valid = !(len == 3 && cp < 0x800) && !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
              !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!valid) {
      out += printf_text("\\x%02x", c);
      ++i;
      continue;
    }
    // C1 controls (0x9B is CSI on some terminals) and the marks that reorder text on screen
    // (a name could otherwise display as a different name).
    const bool hidden = (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E ||
                        cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
                        (cp >= 0x2066 && cp <= 0x2069);
    if (hidden) {
      out += printf_text("\\u%04x", static_cast<unsigned>(cp));
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

namespace {

/// "(as of 0.4 s ago: the daemon was busy)\n" for an answer the front thread gave from the
/// loop's last publish, else empty.
std::string stale_note(const json& result) {
  const auto age = count_of(result, "age_ms");
  if (!age || *age < static_cast<uint64_t>(kFreshAnswerWait.count())) return "";
  return "(as of " + human_age(static_cast<double>(*age) / 1000) + " ago: the daemon was busy)";
}

}  // namespace

std::string format_status(const json& status) {
  std::string out = "iolensd";
  if (const auto version = text_of(status, "version")) out += " " + *version;
  if (const auto pid = count_of(status, "pid")) out += ", pid " + std::to_string(*pid);
  if (const auto up = number_of(status, "uptime_s")) out += ", up " + human_age(*up);
  // Answered by the front thread while the loop was busy: what the loop published last
  // (docs/control.md#answer-times). A fresh answer is a few ms old and says nothing.
  if (const std::string stale = stale_note(status); !stale.empty()) out += " " + stale;
  out += "\n";

  if (const auto root = text_of(status, "cgroup_root")) out += labelled("cgroup root", *root);
  if (const auto hooks = text_of(status, "syscall_hooks")) out += labelled("syscall hooks", *hooks);
  if (const auto timing = text_of(status, "timing")) {
    const auto note = text_of(status, "timing_note");
    out += labelled("timing", *timing + (note && !note->empty() ? " (" + *note + ")" : ""));
  }

  std::vector<std::vector<std::string>> programs;
  for (const json& p : array_or_empty(status, "programs")) {
    const auto attached = bool_of(p, "attached");
    std::string state = !attached ? kMissing : *attached ? "OK" : "FAILED";
    // Not attached on purpose (the daemon's on-demand syscall hooks): not a failure.
    if (const auto s = text_of(p, "state"); s && *s == "detached") state = "detached";
    if (const auto error = text_of(p, "error"); error && !error->empty()) state += ": " + *error;
    // Runs the kernel skipped (recursion): events that program did not see (lost.program_misses).
    if (const auto m = number_of(p, "misses"); m && *m > 0)
      state += ", skipped " + human_count(static_cast<uint64_t>(*m)) + " times";
    programs.push_back({text_or_missing(p, "name"), state});
  }
  if (!programs.empty()) {
    out += labelled("programs",
                    strip_final_newline(table({{"", false}, {"", false}}, programs, false)));
  }

  std::vector<std::vector<std::string>> maps;
  for (const json& m : array_or_empty(status, "maps")) {
    const auto entries = count_of(m, "entries");
    const auto max = count_of(m, "max");
    std::string fill =
        (entries ? human_count(*entries) : kMissing) + " / " + (max ? human_count(*max) : kMissing);
    if (entries && max && *max > 0) {
      const double percent = 100.0 * static_cast<double>(*entries) / static_cast<double>(*max);
      // Operations that find a full map are lost: say so before it happens.
      fill += printf_text(percent >= 90 ? " (%.1f%%, nearly full)" : " (%.1f%%)", percent);
    }
    maps.push_back({text_or_missing(m, "name"), fill});
  }
  if (!maps.empty()) {
    out += labelled("maps", strip_final_newline(table({{"", false}, {"", false}}, maps, false)));
  }

  if (const json* lost = field(status, "lost"); lost != nullptr && lost->is_object()) {
    out += labelled("lost", lost_text(*lost));
  }
  if (const json* jobs = field(status, "jobs"); jobs != nullptr && jobs->is_object()) {
    out += labelled(
        "jobs", number_text(*jobs, "live") + " live, " + number_text(*jobs, "closed") + " closed");
  }
  if (const json* records = field(status, "records"); records != nullptr && records->is_object()) {
    std::string text =
        number_text(*records, "files") + " files, " + number_text(*records, "folded") + " folded";
    if (const auto procs = count_of(*records, "processes_folded"); procs && *procs > 0)
      text += ", " + human_count(*procs) + " processes folded";
    out += labelled("records", text);
  }
  // Runs of `iolens run` (docs/run.md): only when the daemon has a run root.
  if (const json* runs = field(status, "runs"); runs != nullptr && runs->is_object()) {
    if (const auto root = text_of(*runs, "root"); root && !root->empty())
      out += labelled("runs", *root + ": " + number_text(*runs, "live") + " live, " +
                                  number_text(*runs, "ended") + " ended, " +
                                  number_text(*runs, "abandoned") + " abandoned, " +
                                  number_text(*runs, "refused") + " refused");
  }
  if (const json* restart = field(status, "restart"); restart != nullptr && restart->is_object()) {
    const auto resumed = bool_of(*restart, "resumed");
    std::string text = !resumed ? kMissing : *resumed ? "resumed" : "fresh start";
    if (const auto note = text_of(*restart, "note"); note && !note->empty()) text += ": " + *note;
    out += labelled("restart", text);
  }
  return out;
}

std::string format_jobs(const json& jobs) {
  const json& list = array_or_empty(jobs, "jobs");
  const std::string stale = stale_note(jobs);
  if (list.empty()) return "no jobs" + (stale.empty() ? "" : " " + stale) + "\n";
  std::vector<std::vector<std::string>> rows;
  for (const json& job : list) {
    const json& totals = object_or_empty(job, "totals");
    // A closed job whose record is being written has no totals yet (docs/control.md).
    const auto writing = bool_of(job, "writing");
    rows.push_back({text_or_missing(job, "id"), text_or_missing(job, "kind"),
                    text_or_missing(job, "state") + (writing && *writing ? " (writing)" : ""),
                    number_text(job, "processes"),
                    number_text(job, "files"), bytes_of(totals, "bytes_read"),
                    bytes_of(totals, "bytes_written"), number_text(totals, "opens")});
  }
  return table({{"ID", false},
                {"KIND", false},
                {"STATE", false},
                {"PROCS", true},
                {"FILES", true},
                {"READ", true},
                {"WRITTEN", true},
                {"OPENS", true}},
               rows) +
         (stale.empty() ? "" : stale + "\n");
}

std::string format_job(const json& result, uint64_t now_ns, std::size_t top_files) {
  const json& job = object_or_empty(result, "job");
  std::string out;
  out += labelled("job", text_or_missing(job, "id"));
  out += labelled("kind", text_or_missing(job, "kind"));
  out += labelled("cgroup", text_or_missing(job, "cgroup"));
  out += labelled("labels", labels_text(object_or_empty(job, "labels")));
  out += labelled("state", job_state(job, now_ns));
  // A live job's answer is cut from a snapshot the daemon may have taken for an earlier
  // request (docs/control.md#live-jobs): said once it is a second old.
  if (const auto age = count_of(result, "age_ms"); age && *age >= 1000)
    out += labelled("as of", human_age(static_cast<double>(*age) / 1000) +
                                 " ago (the daemon's last snapshot of the job)");
  std::string procs = number_text(job, "processes");
  if (const auto live = count_of(job, "live_processes"))
    procs += ", " + human_count(*live) + " live";
  if (const auto folded = count_of(job, "folded_processes"); folded && *folded > 0)
    procs += ", " + human_count(*folded) + " folded";
  out += labelled("processes", procs);
  std::string file_count = number_text(job, "files");
  if (const auto folded = count_of(job, "folded_files")) {
    file_count += ", " + human_count(*folded) + " folded";
  }
  out += labelled("files", file_count);
  if (const json* lost = field(result, "lost"); lost != nullptr && lost->is_object()) {
    out += labelled("lost", lost_text(*lost));
  }
  out += labelled("totals", totals_text(object_or_empty(job, "totals")));

  const json& processes = array_or_empty(result, "processes");
  if (!processes.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const json& p : processes) {
      if (rows.size() == kMaxProcessRows) break;
      const json& counters = object_or_empty(p, "counters");
      rows.push_back({text_or_missing(p, "pid"), text_or_missing(p, "ppid"),
                      text_or_missing(p, "comm"), bytes_of(counters, "bytes_read"),
                      bytes_of(counters, "bytes_written"), number_text(counters, "opens"),
                      exit_text(p), text_or_missing(p, "exe")});
    }
    out += "\nprocesses\n";
    out += table({{"PID", true},
                  {"PPID", true},
                  {"COMM", false},
                  {"READ", true},
                  {"WRITTEN", true},
                  {"OPENS", true},
                  {"EXIT", true},
                  {"EXE", false}},
                 rows);
    if (processes.size() > kMaxProcessRows) {
      out += "... " + human_count(processes.size() - kMaxProcessRows) +
             " more processes (--json lists all)\n";
    }
  }

  // Files across processes (`by_file`, docs/run-json.md#by-file) when the record has them;
  // a record of an older daemon has only the per-process rows.
  const json* by_file = field(result, "by_file");
  const bool across = by_file != nullptr && by_file->is_array();
  const char* list = across ? "by_file" : "files";
  if (field(result, list) == nullptr)
    return out;  // not sent: say nothing rather than "no files"
  const json& all_files = array_or_empty(result, list);
  std::vector<const json*> files;
  for (const json& f : all_files) files.push_back(&f);
  const std::size_t shown = std::min(top_files, files.size());
  // Ties by path then pid: the same answer always prints the same way.
  std::partial_sort(files.begin(), files.begin() + static_cast<std::ptrdiff_t>(shown), files.end(),
                    [](const json* a, const json* b) {
                      const uint64_t x = file_bytes(*a), y = file_bytes(*b);
                      if (x != y) return x > y;
                      const std::string pa = text_of(*a, "path").value_or("");
                      const std::string pb = text_of(*b, "path").value_or("");
                      if (pa != pb) return pa < pb;
                      // files rows: by pid; by_file rows (no pid): two inodes at one path by ino
                      const auto pid_a = count_of(*a, "pid"), pid_b = count_of(*b, "pid");
                      if (pid_a != pid_b) return pid_a.value_or(0) < pid_b.value_or(0);
                      return count_of(*a, "ino").value_or(0) < count_of(*b, "ino").value_or(0);
                    });
  if (files.empty()) {
    out += "\nno files\n";
    return out;
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < shown; ++i) {
    const json& counters = object_or_empty(*files[i], "counters");
    rows.push_back({bytes_of(counters, "bytes_read"), bytes_of(counters, "bytes_written"),
                    number_text(counters, "reads"), number_text(counters, "writes"),
                    across ? number_text(*files[i], "processes") : text_or_missing(*files[i], "pid"),
                    text_or_missing(*files[i], "path")});
  }
  out += "\ntop " + std::to_string(shown) + " of " + human_count(files.size()) +
         " files by bytes" + (across ? " (all processes)" : "") + "\n";
  out += table({{"READ", true},
                {"WRITTEN", true},
                {"READS", true},
                {"WRITES", true},
                {across ? "PROCS" : "PID", true},
                {"PATH", false}},
               rows);
  return out;
}

}  // namespace iolens::control
