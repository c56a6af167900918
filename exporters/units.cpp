// SPDX-License-Identifier: Apache-2.0
#include "exporters/units.hpp"

#include <cstdio>

namespace iolens::exporters {

std::string human_duration(uint64_t ns) {
  char buf[32];
  if (ns < 1000) return std::to_string(ns) + " ns";
  const double v = static_cast<double>(ns);
  if (ns < 1000000)
    std::snprintf(buf, sizeof(buf), "%.1f us", v / 1e3);
  else if (ns < 1000000000ULL)
    std::snprintf(buf, sizeof(buf), "%.2f ms", v / 1e6);
  else
    std::snprintf(buf, sizeof(buf), "%.2f s", v / 1e9);
  return buf;
}

std::string human_count(uint64_t n) {
  // Built forwards: GCC 12 warns falsely (-Wrestrict) on std::string::insert here.
  const std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace iolens::exporters
