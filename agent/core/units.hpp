// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Sizes for people, shared by the reports (exporters/units.hpp) and the daemon's config checks
/// and logs (jobs/memory_bound.cpp).

#include <cstdint>
#include <string>

namespace iolens::core {

std::string human_bytes(uint64_t bytes);  // "0 B", "512 B", "1.50 KiB", "64.0 MiB", "256 MiB"

}  // namespace iolens::core
