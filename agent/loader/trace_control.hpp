// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The kernel's trace mode as a capture sees it (docs/capture.md): which tasks' calls are
/// traced, and the ring their records come through. All a capture needs of the kernel, so that
/// its logic is unit-tested against a fake one (tests/unit/daemon_capture_test.cpp);
/// loader::Loader is the real one.

#include <cstdint>
#include <functional>

#include "iolens_abi.h"
#include "loader/status.hpp"

namespace iolens::loader {

class TraceControl {
 public:
  virtual ~TraceControl() = default;

  /// Trace mode: one iolens_trace_record per call of a traced task, through the `trace` ring,
  /// which the kernel does not wake for (except once it is more than half full): drain it with
  /// consume_trace() on a timer (and when trace_fd() polls readable). Takes effect at once.
  ///  - IOLENS_TRACE_OFF: no records (the default; a resumed daemon starts with it too);
  ///  - IOLENS_TRACE_ALL: every traced task;
  ///  - IOLENS_TRACE_CGROUP: traced tasks at or below `cgroup_fd`, an open cgroup v2 directory
  ///    (the caller may close it afterwards);
  ///  - IOLENS_TRACE_PIDS: traced tasks of the processes given to add_trace_pid() and of the
  ///    processes they create from then on.
  /// Leaving PIDS empties the pid list; leaving CGROUP forgets the cgroup. A trace needs each
  /// call's start: with timing off every mode but OFF is refused.
  virtual Status set_trace_mode(iolens_trace_mode mode, int cgroup_fd = -1) = 0;
  /// Adds a process (tgid) to the PIDS list; its new child processes join it at fork and every
  /// listed process leaves it when it exits. May be called before or after set_trace_mode(PIDS):
  /// children are followed from this call on.
  virtual Status add_trace_pid(uint32_t tgid) = 0;
  /// Hands every pending trace record to `sink`, in ring order; never blocks. Returns records
  /// consumed (or a negative errno). The ring is mapped (twice its size of RSS) from
  /// set_trace_mode() to a trace on, until the first read once the mode is OFF: that read is
  /// the trace's last, and unmaps it.
  using TraceSink = std::function<void(const iolens_trace_record&)>;
  virtual int consume_trace(const TraceSink& sink) = 0;
  /// The ring's size, and the kernel's counts of trace records made and of those the ring had
  /// no room for (IOLENS_STAT_TRACE_RECORDS, IOLENS_STAT_TRACE_LOST) since the programs loaded.
  virtual uint64_t trace_ring_size() const = 0;
  virtual uint64_t trace_records_made() const = 0;
  virtual uint64_t trace_records_lost() const = 0;
};

}  // namespace iolens::loader
