// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Wall time of the steps of a start (the loader's) or an exit (`iolens run`'s), for
/// IOLENS_TIMING=1 and bench/startup.py (docs/run.md). Steps are named once and summed when
/// repeated (a load retried without an optional program).

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace iolens::loader {

class PhaseTimes {
 public:
  PhaseTimes() { restart(); }
  /// From now on: the next mark() measures from here.
  void restart() { last_ns_ = now_ns(); }
  /// Adds the time since the previous mark (or restart) to step `name`.
  void mark(const std::string& name) {
    const uint64_t now = now_ns();
    add(name, static_cast<double>(now - last_ns_) / 1e6);
    last_ns_ = now;
  }
  void add(const std::string& name, double ms) {
    for (auto& [n, t] : steps_)
      if (n == name) {
        t += ms;
        return;
      }
    steps_.emplace_back(name, ms);
  }
  const std::vector<std::pair<std::string, double>>& steps() const { return steps_; }
  /// "name=1.23 ..." in the order the steps were first marked (milliseconds).
  std::string line() const {
    std::string out;
    char buf[64];
    for (const auto& [n, t] : steps_) {
      std::snprintf(buf, sizeof buf, "%.2f", t);
      out += (out.empty() ? "" : " ") + n + "=" + buf;
    }
    return out;
  }
  /// Whether IOLENS_TIMING asks for the steps on stderr.
  static bool wanted() {
    const char* v = std::getenv("IOLENS_TIMING");
    return v && *v && std::string(v) != "0";
  }

 private:
  static uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
  }
  uint64_t last_ns_ = 0;
  std::vector<std::pair<std::string, double>> steps_;
};

}  // namespace iolens::loader
