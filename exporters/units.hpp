// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Human units for reports: 1.5 MiB, 230 us, 12,345.

#include <cstdint>
#include <string>

#include "core/units.hpp"

namespace iolens::exporters {

using core::human_bytes;                     // "0 B", "512 B", "1.50 KiB", "64.0 MiB"
std::string human_duration(uint64_t ns);     // "850 ns", "12.3 us", "4.56 ms", "1.20 s"
std::string human_count(uint64_t n);         // "1,234,567"

}  // namespace iolens::exporters
