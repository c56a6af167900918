// SPDX-License-Identifier: Apache-2.0
#include "core/units.hpp"

#include <cstdio>

namespace iolens::core {

std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), v < 10 ? "%.2f %s" : (v < 100 ? "%.1f %s" : "%.0f %s"), v,
                kUnits[u]);
  return buf;
}

}  // namespace iolens::core
