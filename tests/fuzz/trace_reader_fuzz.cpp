// SPDX-License-Identifier: Apache-2.0
// libFuzzer target over the trace reader (docs/trace-format.md), built by clang with
// -fsanitize=fuzzer,address,undefined and -DIOLENS_FUZZING: the reader then ignores checksums,
// so that mutated inputs reach the decoders behind them (tests/unit prove the checksums are
// checked). Besides "no crash, no leak, no undefined behaviour, bounded memory", it checks the
// result's promises, and that a trace read in full is written again and read back the same.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trace/trace_file.hpp"
#include "trace_samples.hpp"

using namespace iolens::trace;

namespace {

void require(bool ok, const char* what, const std::string& detail = "") {
  if (ok) return;
  std::fprintf(stderr, "broken promise: %s %s\n", what, detail.c_str());
  std::abort();
}

/// Writes `t` with TraceWriter and reads it back. Skipped when the writer refuses the trace
/// (a string the reader takes but the writer's limits do not, e.g. a 2 MiB path).
void round_trip(const Trace& t) {
  const int fd = memfd_create("trace", MFD_CLOEXEC);
  require(fd >= 0, "memfd_create");
  {
    TraceWriter w;
    iolens::Status s = w.open_fd(fd, t.meta);
    for (std::size_t i = 0; s && i < t.files.size(); ++i) s = w.add_file(t.files[i]);
    for (std::size_t i = 0; s && i < t.processes.size(); ++i) s = w.add_process(t.processes[i]);
    if (s) s = w.add_ops(t.ops);
    if (s) s = w.finish(t.losses, t.meta.window_end_ns);
    if (!s) {
      close(fd);
      return;
    }
  }
  require(lseek(fd, 0, SEEK_SET) == 0, "lseek");
  const ReadResult again = read_trace_fd(fd);
  close(fd);
  require(again.status.ok, "a written trace reads back", again.status.message);
  require(samples::difference(again.trace, t).empty(), "the same trace comes back",
          samples::difference(again.trace, t));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const ReadResult r = read_trace_bytes({data, size});
  require(r.good_bytes <= size, "good_bytes within the input");
  require(r.status.ok == (r.problem == ReadProblem::none), "status and problem agree");
  if (!r.status.ok) {
    require(r.status.message.find("at byte " + std::to_string(r.good_bytes)) != std::string::npos,
            "the message names good_bytes", r.status.message);
    require(r.problem != ReadProblem::io, "no I/O errors from memory", r.status.message);
    return 0;
  }
  require(r.trace.complete && r.good_bytes == size, "a clean read is complete and whole");
  round_trip(r.trace);
  return 0;
}
