// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Text for the three control answers (`iolens status`, `iolens jobs`, `iolens job ID`). Pure:
/// JSON in, text out. Missing or mistyped fields are shown as "-" or left out, never an error:
/// an older or newer daemon may send a different set.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace iolens::control {

/// The daemon's health: hooks, programs, map fill, losses, jobs.
std::string format_status(const nlohmann::json& status);

/// One row per job; "no jobs" when there are none.
std::string format_jobs(const nlohmann::json& jobs);

/// One job in detail: who it is, totals, processes, the `top_files` files with the most bytes.
/// `now_ns` (wall clock) gives a live job its running time.
std::string format_job(const nlohmann::json& job, uint64_t now_ns, std::size_t top_files = 10);

/// A name safe to print on a terminal and unambiguous: control characters (C0, DEL, C1),
/// bidirectional overrides and bytes that are not UTF-8 as \xNN or \uNNNN escapes, backslash as
/// "\\" so that an escape cannot be faked by the name itself.
std::string terminal_safe(std::string_view s);

}  // namespace iolens::control
