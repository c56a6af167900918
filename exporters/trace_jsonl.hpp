// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A captured trace as JSON lines ("iolens.trace-jsonl/1") for ad-hoc scripts: one object a
/// line, each with a "type": "trace" first (meta, window, losses), then "process" lines, "file"
/// lines and "op" lines in start order, every op with its path resolved. Fields:
/// docs/trace-convert.md#json-lines.

#include <ostream>

#include "trace/trace.hpp"

namespace iolens::exporters {

inline constexpr const char* kTraceJsonlSchema = "iolens.trace-jsonl/1";

/// Streams the lines to `out` (no whole-document buffer). Strings that are not valid UTF-8 are
/// written with U+FFFD, their exact bytes in a "<key>_hex" field beside them.
void write_jsonl(const trace::Trace& t, std::ostream& out);

}  // namespace iolens::exporters
