// SPDX-License-Identifier: Apache-2.0
// trace_mode: runs a command traced by iolens' loader with trace mode off or on (ALL), draining
// the trace ring every 10 ms on another thread as an agent would, or untraced; the command's own
// output (io_loops' JSON line) is the measurement. Used by bench/trace_mode.py until `iolens
// run` has a trace option that run_bench.py can drive. Prints records drained/produced/lost to
// stderr. Build it after the main build, from the source tree (one line):
//   g++ -std=c++20 -O2 -Iagent -Ibpf bench/trace_mode.cpp build/agent/libiolens_loader.a
//       build/agent/libiolens_core.a -lbpf -lspdlog -lfmt -lz -lelf -lpthread -o trace_mode
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include "loader/loader.hpp"

namespace {

int run(char** cmd, iolens::loader::Loader* loader) {
  int go[2];
  if (pipe(go) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(1);
    execvp(cmd[0], cmd);
    _exit(127);
  }
  close(go[0]);
  if (loader) loader->trace_process(pid);
  std::atomic<bool> done{false};
  uint64_t drained = 0;
  auto drain = [&] { return loader->consume_trace([](const iolens_trace_record&) {}); };
  std::thread drainer([&] {
    while (loader && !done.load()) {
      drained += static_cast<uint64_t>(drain());
      usleep(10000);
    }
  });
  if (write(go[1], "g", 1) != 1) return 1;
  int status = 0;
  waitpid(pid, &status, 0);
  done.store(true);
  drainer.join();
  if (loader) {
    drained += static_cast<uint64_t>(drain());
    std::fprintf(stderr, "trace records drained %llu produced %llu lost %llu\n",
                 static_cast<unsigned long long>(drained),
                 static_cast<unsigned long long>(loader->stat(IOLENS_STAT_TRACE_RECORDS)),
                 static_cast<unsigned long long>(loader->stat(IOLENS_STAT_TRACE_LOST)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 3 ? argv[1] : "";
  if ((mode != "untraced" && mode != "off" && mode != "all") || std::string(argv[2]) != "--") {
    std::fprintf(stderr, "usage: trace_mode untraced|off|all -- COMMAND...\n");
    return 2;
  }
  if (mode == "untraced") return run(argv + 3, nullptr);
  iolens::Status st;
  auto loader = iolens::loader::Loader::create(iolens::loader::Options{}, st);
  if (!loader) {
    std::fprintf(stderr, "trace_mode: %s\n", st.message.c_str());
    return 1;
  }
  if (mode == "all") loader->set_trace_mode(IOLENS_TRACE_ALL);
  return run(argv + 3, loader.get());
}
