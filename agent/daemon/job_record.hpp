// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A job's record (`iolens.job/1`, docs/daemon.md#job-records) and the header of its Darshan log,
/// made from the job alone and a few values of its table: what the record writer's thread calls
/// on a job taken out of the table, away from the daemon's loop (record_writer.hpp). The table
/// uses the same functions for live jobs, so there is one definition of a record.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_alignment.hpp"
#include "core/snapshot.hpp"
#include "daemon/job_table.hpp"
#include "exporters/darshan_log.hpp"
#include "exporters/json_report.hpp"

namespace iolens::daemon {

/// What a job's record needs of its table besides the job.
struct RecordBasis {
  int64_t mono_to_wall_ns = 0;  // the table's wall-clock offset (JobTable::clock())
  std::string timing = "exact";
  /// Darshan's mount table for the rows' file_alignment (core/file_alignment.hpp); none: their
  /// alignment is not known (null in the record, -1 in the Darshan log).
  std::shared_ptr<const std::vector<core::AlignmentMount>> alignment;
};

/// What the job's recorder holds, with the job's start and end (0 while live); file timestamps
/// count from boot (the monotonic clock's zero).
core::RunSnapshot job_snapshot(const Job& job, const RecordBasis& basis);

/// What the record's `job` member says of the job without a snapshot of it: identity, state,
/// times, process counts (the `iolens jobs` line of a job whose record is being written).
nlohmann::json job_head(const Job& job);

/// The record's `job` member (and one line of `iolens jobs`): job_head() with the files and
/// totals of a snapshot of the job.
nlohmann::json job_summary(const Job& job, const core::RunSnapshot& snap);
/// The same from the recorder's summary (`iolens jobs` of a live job: no snapshot built).
nlohmann::json job_summary(const Job& job, const core::Recorder::Summary& sum,
                           uint64_t folded_records);

/// How a run record (exporters::run_to_json, write_run_json) becomes the job's: the schema, no
/// command or exit code, a null end while live, `summary` as `job`, each process's labels; then
/// every member of `overrides` (an object: `lost`, `restart`) replaces the record's.
exporters::RecordEdits job_record_edits(const Job& job, nlohmann::json summary,
                                        nlohmann::json overrides = nlohmann::json::object());

/// The header of a job's Darshan log written from `snap`; `node` goes in its metadata. Mounts
/// are the caller's (no I/O here). docs/darshan-log.md.
exporters::DarshanJobInfo darshan_job_info(const Job& job, const core::RunSnapshot& snap,
                                           const std::string& node, int64_t mono_to_wall_ns);

}  // namespace iolens::daemon
