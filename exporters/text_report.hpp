// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The human summary `iolens run` prints on stderr at exit.

#include <cstddef>
#include <string>
#include <vector>

#include "core/snapshot.hpp"

namespace iolens::exporters {

struct TextOptions {
  std::size_t top_files = 10;
  std::size_t max_processes = 20;
};

std::string run_summary(const core::RunSnapshot& run, const TextOptions& opts = {});
/// One line per device of the run's block layer ("block  vda: read ... ; device latency ...").
std::string block_summary(const std::vector<core::BlockDeviceSnapshot>& devices);

/// A name safe to print on a terminal: control bytes and invalid UTF-8 as \xNN escapes.
std::string printable(const std::string& s);

}  // namespace iolens::exporters
