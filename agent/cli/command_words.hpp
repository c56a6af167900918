// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The command of `iolens run [OPTIONS] -- COMMAND...`, taken from argv as given: CLI11 (2.1)
/// splits a word written "[...]" at its commas and strips its brackets (`sh -c '[ -f x ]'`,
/// a JSON argument), so the words after the "--" never go through it.

#include <optional>
#include <string>
#include <vector>

namespace iolens::cli {

struct CommandWords {
  int argc = 0;                      // argv[0 .. argc) is what the option parser gets
  std::optional<std::vector<std::string>> command;  // the words after run's "--", when given
};

/// When argv is `iolens [ROOT OPTIONS] run ... -- WORDS...` (root options: words starting with
/// '-' before "run"), the parser gets everything before that "--" and `command` is WORDS (empty
/// when nothing follows it); otherwise the parser gets all of argv and `command` is nullopt.
CommandWords split_run_command(int argc, const char* const* argv);

}  // namespace iolens::cli
