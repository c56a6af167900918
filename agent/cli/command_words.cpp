// SPDX-License-Identifier: Apache-2.0
#include "cli/command_words.hpp"

#include <string_view>

namespace iolens::cli {

CommandWords split_run_command(int argc, const char* const* argv) {
  CommandWords out;
  out.argc = argc;
  int run = 1;
  while (run < argc && argv[run][0] == '-') ++run;  // the root's own options (--version, ...)
  if (run >= argc || std::string_view(argv[run]) != "run") return out;
  for (int i = run + 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    out.argc = i;
    out.command.emplace(argv + i + 1, argv + argc);
    break;
  }
  return out;
}

std::vector<std::string> run_command_of(std::vector<std::string> parsed,
                                        const std::optional<std::vector<std::string>>& after) {
  if (!after) return parsed;
  if (parsed.empty()) return *after;
  parsed.emplace_back("--");
  parsed.insert(parsed.end(), after->begin(), after->end());
  return parsed;
}

}  // namespace iolens::cli
