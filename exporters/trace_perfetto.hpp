// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A captured trace as Chrome trace-event JSON ({"traceEvents": [...]}), which ui.perfetto.dev,
/// chrome://tracing and TensorBoard's trace viewer open, on the same time axis as a
/// torch.profiler (Kineto) trace of the same job. Fields and clock: docs/trace-convert.md.

#include <cstdint>
#include <optional>
#include <ostream>

#include "trace/trace.hpp"

namespace iolens::exporters {

/// Kineto's 3-month period (7,889,238 s): its baseTimeNanoseconds is the wall clock floored to it.
inline constexpr int64_t kKinetoBasePeriodNs = 7'889'238LL * 1'000'000'000LL;

/// The baseTimeNanoseconds a torch.profiler trace written at wall-clock time `wall_ns` (ns since
/// the Unix epoch) carries: `wall_ns` floored to a multiple of kKinetoBasePeriodNs.
int64_t kineto_base_time_ns(int64_t wall_ns);

struct PerfettoOptions {
  /// Wall-clock ns (since the Unix epoch) subtracted from every timestamp before it is written in
  /// microseconds, and written as "baseTimeNanoseconds". Unset: kineto_base_time_ns(the capture
  /// window's wall-clock start), the base of a torch.profiler trace of the same 3-month period;
  /// to line up with a given torch trace, pass its "baseTimeNanoseconds". 0: microseconds since
  /// the epoch (Kineto versions without baseTimeNanoseconds; sub-microsecond digits then lost
  /// to double precision in viewers).
  std::optional<int64_t> base_time_ns;
  /// Width of the per-process read/write byte counters' buckets; 0 = no counters.
  uint64_t counter_interval_ns = 100'000'000;
};

/// Writes the whole JSON document to `out`. Events: per process, process_name (comm, else the
/// exe's base name, else "pid N"), process_labels (exe) and process_sort_index (start order);
/// per thread, thread_name; per op, a complete event ("ph":"X", "cat":"io", ts/dur in µs with
/// ns digits, args: path, fd, offset, size, requested, ret, errno...), in start order; per
/// process, "ph":"C" counters of read and write bytes per bucket; global instants for the
/// capture window's ends and for lost records. Job, window and losses in "otherData".
/// Strings that are not valid UTF-8 are written with U+FFFD, their bytes in a "*_hex" arg.
void write_perfetto_json(const trace::Trace& t, std::ostream& out,
                         const PerfettoOptions& opts = {});

}  // namespace iolens::exporters
