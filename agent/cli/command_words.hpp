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

/// The command to run: the words after "--" when the parser had none before it; else the
/// parser's words, then "--" and the rest (`iolens run git diff -- f` runs `git diff -- f`, as
/// the parser alone took it).
std::vector<std::string> run_command_of(std::vector<std::string> parsed,
                                        const std::optional<std::vector<std::string>>& after);

}  // namespace iolens::cli
