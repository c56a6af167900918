// SPDX-License-Identifier: Apache-2.0
// The command of `iolens run ... -- COMMAND...` is taken from argv as given (cli/command_words):
// words CLI11 would rewrite ("[...]" split at commas, brackets stripped) reach the command
// unchanged, and the option parser sees only what comes before run's "--".
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/command_words.hpp"

using iolens::cli::run_command_of;
using iolens::cli::split_run_command;

namespace {

std::vector<const char*> argv_of(const std::vector<std::string>& words) {
  std::vector<const char*> v;
  for (const auto& w : words) v.push_back(w.c_str());
  return v;
}

}  // namespace

TEST(RunCommandWords, TheWordsAfterRunsDoubleDashAreTheCommandAsGiven) {
  const std::vector<std::string> w = {"iolens", "run", "--json", "x.json", "--",
                                      "sh",     "-c",  "[ -f x ]",  "[0, 1]", "", "--", "[]"};
  const auto argv = argv_of(w);
  const auto s = split_run_command(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(s.argc, 4);  // iolens run --json x.json
  ASSERT_TRUE(s.command);
  EXPECT_EQ(*s.command, (std::vector<std::string>{"sh", "-c", "[ -f x ]", "[0, 1]", "", "--",
                                                  "[]"}));
}

TEST(RunCommandWords, RootOptionsMayComeFirstAndNothingAfterTheDashesIsAnEmptyCommand) {
  const std::vector<std::string> w = {"iolens", "-v", "run", "--"};
  const auto argv = argv_of(w);
  const auto s = split_run_command(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(s.argc, 3);
  ASSERT_TRUE(s.command);
  EXPECT_TRUE(s.command->empty());
}

TEST(RunCommandWords, WordsTheParserTookBeforeTheDashesComeFirst) {
  using V = std::vector<std::string>;
  EXPECT_EQ(run_command_of({}, V{"sh", "-c", "[ 1 ]"}), (V{"sh", "-c", "[ 1 ]"}));
  // `iolens run git diff -- f`: the command is `git diff -- f`, as the parser alone took it
  EXPECT_EQ(run_command_of({"git", "diff"}, V{"f"}), (V{"git", "diff", "--", "f"}));
  EXPECT_EQ(run_command_of({"true"}, std::nullopt), (V{"true"}));
  EXPECT_EQ(run_command_of({}, V{}), V{});  // nothing: main() says a command is needed
}

TEST(RunCommandWords, OtherCommandsAndARunWithoutDashesGoWholeToTheParser) {
  for (const std::vector<std::string>& w :
       {std::vector<std::string>{"iolens", "capture", "--", "x"},
        std::vector<std::string>{"iolens", "run", "true", "[a,b]"},
        std::vector<std::string>{"iolens", "report", "run", "--", "x"},
        std::vector<std::string>{"iolens"}}) {
    const auto argv = argv_of(w);
    const auto s = split_run_command(static_cast<int>(argv.size()), argv.data());
    EXPECT_EQ(s.argc, static_cast<int>(w.size())) << w[1 % w.size()];
    EXPECT_FALSE(s.command) << w[1 % w.size()];
  }
}
