// SPDX-License-Identifier: Apache-2.0
// `iolens_trace_sample_files DIR`: writes small valid trace files of several shapes into DIR
// (created if missing), for the fuzz seeds (tests/fuzz) and the format doc's Python reader
// (tests/unit/trace_format_doc_test.py, which knows what small.iotrace holds).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "trace/trace_file.hpp"
#include "trace_samples.hpp"

using namespace iolens::trace;

namespace {

struct Shape {
  const char* name;
  std::size_t ops, files, processes;
  WriterOptions options;
  bool finish = true;
};

/// Writes a shape: half the names, the ops, the rest of the names with the first process
/// updated (exited), then the trailer unless the capture is "unfinished".
iolens::Status write(const std::string& path, const Shape& s) {
  TraceWriter w;
  auto procs = samples::processes(s.processes);
  const auto files = samples::files(s.files);
  const auto ops = samples::ops(s.ops);
  iolens::Status st = w.open(path, s.files ? samples::meta() : Meta{}, s.options);
  for (std::size_t i = 0; st && i < files.size() / 2; ++i) st = w.add_file(files[i]);
  for (std::size_t i = 0; st && i < procs.size(); ++i) st = w.add_process(procs[i]);
  if (st) st = w.add_ops(ops);
  for (std::size_t i = files.size() / 2; st && i < files.size(); ++i) st = w.add_file(files[i]);
  if (st && !procs.empty()) {
    procs[0].exit_ns = 9'999;
    procs[0].exit_code = 0;
    st = w.add_process(procs[0]);
  }
  if (st) st = s.finish ? w.finish(samples::losses(), 2'000'000'000'000ull) : w.flush();
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "cannot create %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  const WriterOptions zstd{.ops_per_block = 4};
  const WriterOptions stored{.ops_per_block = 4, .compress = false};
  const Shape shapes[] = {
      {"empty", 0, 0, 0, {}},
      {"small", 20, 5, 3, {}},
      {"small-stored", 20, 5, 3, {.compress = false}},
      {"blocks", 30, 8, 4, zstd},
      {"blocks-stored", 30, 8, 4, stored},
      {"hostile-stored", 2, samples::hostile_strings().size(), 2, stored},
      {"unfinished", 10, 3, 2, zstd, false},
  };
  for (const Shape& s : shapes) {
    const std::string path = dir + "/" + s.name + ".iotrace";
    if (const iolens::Status st = write(path, s); !st) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), st.message.c_str());
      return 1;
    }
  }
  return 0;
}
