// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The `iolens.run/1` JSON record (docs/run-json.md).

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/by_file.hpp"
#include "core/snapshot.hpp"

namespace iolens::exporters {

inline constexpr const char* kRunSchema = "iolens.run/1";

nlohmann::json run_to_json(const core::RunSnapshot& run, const std::string& version);
/// The record's `coverage` (over all its processes' totals), as run_to_json writes it: for a
/// record written in parts (a paged answer), from the whole snapshot.
nlohmann::json run_coverage_json(const core::RunSnapshot& run);

/// Rows [offset, offset + limit) of the record's `by_file` (docs/run-json.md#by-file), as
/// run_to_json makes them: for a record answered in pages.
nlohmann::json by_file_json(const core::FilesAcrossProcesses& by_file, std::size_t offset,
                            std::size_t limit);

/// Writes dump_json(run_to_json(run, version)) through `write` in pieces of about 64 KiB,
/// making each process and file record as it goes: memory stays that of one record, not of the
/// whole document twice (a 10,000-file job's record is ~100 MB of JSON objects). False as soon
/// as `write` returns false.
/// What a record other than a run's changes in run_to_json's document while it is streamed:
/// iolensd's job records (`iolens.job/1`) have other head members and per-process labels.
struct RecordEdits {
  /// Applied to the members other than `processes` and `files` before they are written.
  std::function<void(nlohmann::json& head)> head;
  /// Applied to each process's object before it is written.
  std::function<void(nlohmann::json& process)> process;
};
/// One page of the record run_to_json makes, with `edits` applied as write_run_json applies
/// them: every member but the lists as in the whole record (coverage over every process), and
/// rows [offset, offset + limit) of `processes`, `files` and `by_file` (`by_file` is `run`'s).
/// Its cost is that of the page's rows: iolensd answers a live job's pages from one snapshot.
nlohmann::json run_page_json(const core::RunSnapshot& run,
                             const core::FilesAcrossProcesses& by_file,
                             const std::string& version, std::size_t offset, std::size_t limit,
                             const RecordEdits& edits);
bool write_run_json(const core::RunSnapshot& run, const std::string& version,
                    const std::function<bool(std::string_view)>& write,
                    const RecordEdits& edits = {});

/// Serialized text. Strings that are not valid UTF-8 (hostile file names) are written with
/// U+FFFD in their place; records carry the exact bytes in a "*_hex" field beside them.
std::string dump_json(const nlohmann::json& j);

/// Whether `s` is valid UTF-8.
bool is_valid_utf8(const std::string& s);

/// Sets obj[key] = value, plus obj["<key>_hex"] = the exact bytes in lower-case hex when `value`
/// is not valid UTF-8 (the dumps then write U+FFFD in place of the invalid bytes).
void put_string(nlohmann::json& obj, const std::string& key, const std::string& value);

/// One line of compact JSON, no newline; invalid UTF-8 written as U+FFFD (as dump_json).
std::string dump_json_line(const nlohmann::json& j);

}  // namespace iolens::exporters
