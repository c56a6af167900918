// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The `iolens.run/1` JSON record (docs/run-json.md).

#include <nlohmann/json.hpp>
#include <string>

#include "core/snapshot.hpp"

namespace iolens::exporters {

inline constexpr const char* kRunSchema = "iolens.run/1";

nlohmann::json run_to_json(const core::RunSnapshot& run, const std::string& version);

/// Serialized text. Strings that are not valid UTF-8 (hostile file names) are written with
/// U+FFFD in their place; records carry the exact bytes in a "*_hex" field beside them.
std::string dump_json(const nlohmann::json& j);

/// Whether `s` is valid UTF-8.
bool is_valid_utf8(const std::string& s);

}  // namespace iolens::exporters
