// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Counters from a captured trace: its ops replayed through the kernel's own accounting
/// (bpf/iolens_account.h) into per-(process, file) records, then through the recorder into the
/// RunSnapshot that `iolens run` builds, so that the JSON record, the text report and a Darshan
/// log (with DXT_POSIX) of a captured window are what a live run would have given.
/// docs/trace-convert.md#counters.

#include <cstdint>
#include <map>
#include <utility>

#include "core/counters.hpp"
#include "core/recorder.hpp"
#include "core/snapshot.hpp"
#include "exporters/darshan_log.hpp"
#include "trace/trace.hpp"

namespace iolens::exporters {

/// The kernel's two maps after a replay, before the recorder: regular files by (dev, ino, gen,
/// process), and non-regular descriptors by (process, S_IFMT >> 12).
struct ReplayedRecords {
  std::map<core::FileKey, core::FileCounters> files;
  std::map<std::pair<core::ProcKey, uint32_t>, core::FileCounters> others;
};

/// Applies every op, in the order the kernel accounts them (by end time: a call is counted
/// at its exit; equal ends keep the file's order), to its record with the accounting call the
/// kernel makes for it, under the kernel's conditions (docs/trace-convert.md#counters).
ReplayedRecords replay_records(const trace::Trace& t);

/// The run as `iolens run` reports it: replay_records fed to a core::Recorder with the trace's
/// processes (fork, exec, exit) and names, unlinks and renames attributed as the recorder does,
/// the snapshot taken relative to the capture window's start. The trace's losses are in
/// `lost` as trace_ring_full, trace_size_limit and trace_other. Not in a trace, so left empty:
/// rename targets (`renamed_to`) and the run's exit code.
core::RunSnapshot replay_counters(const trace::Trace& t);

/// The DXT_POSIX records of the trace's reads and writes of regular files that the accounting
/// counts (ret >= 0), ranked and named as replay_counters(t) ranks and names them (`run` must
/// be its result): one record per (rank, file), segments in start order, times in seconds from
/// the window start (the Darshan job start), thread = the Linux thread id, hostname = the
/// trace's node. `partial` when the trace lost records.
DarshanDxt dxt_of_trace(const trace::Trace& t, const core::RunSnapshot& run,
                        uint32_t version = kDarshanDxtPosixVersion);

/// Darshan job fields a trace knows: jobid = its job id when numeric, else the first process's
/// pid; metadata = target, job kind and id, node, trace losses. uid (unknown: 0) and mounts
/// (none) are the caller's to set.
DarshanJobInfo darshan_job_of_trace(const trace::Trace& t);

}  // namespace iolens::exporters
