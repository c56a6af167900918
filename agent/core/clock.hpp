// SPDX-License-Identifier: Apache-2.0
#pragma once
/// One clock reading in nanoseconds, for the agent's threads (the daemon's loop and its writers).

#include <time.h>

#include <cstdint>

namespace iolens::core {

inline int64_t clock_ns(clockid_t c) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace iolens::core
