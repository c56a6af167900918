// SPDX-License-Identifier: Apache-2.0
#include "core/crash_point.hpp"

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>

namespace iolens::core {
namespace {

struct Plan {
  const char* at = nullptr;     // IOLENS_CRASH_AT, or none
  const char* after = nullptr;  // IOLENS_CRASH_AFTER, or none
  std::atomic<bool> armed{true};
};

/// Read once (the environment is not changed after start); points run on the record writer's
/// and the state saver's threads alike.
Plan& plan() {
  static Plan* p = [] {
    auto* q = new Plan;
    q->at = getenv("IOLENS_CRASH_AT");
    q->after = getenv("IOLENS_CRASH_AFTER");
    if (q->at && !*q->at) q->at = nullptr;
    if (q->after && *q->after) q->armed = false;
    else q->after = nullptr;
    return q;
  }();
  return *p;
}

}  // namespace

void crash_point(const char* point) {
  Plan& p = plan();
  if (!p.at) return;
  if (p.after && !p.armed.load(std::memory_order_acquire)) {
    if (std::strcmp(point, p.after) == 0) p.armed.store(true, std::memory_order_release);
    return;
  }
  if (std::strcmp(point, p.at) == 0) raise(SIGKILL);
}

bool known_crash_point(const char* point) {
  for (const char* k : kCrashPoints)
    if (std::strcmp(k, point) == 0) return true;
  return false;
}

}  // namespace iolens::core
