// SPDX-License-Identifier: Apache-2.0
// The log formatter of iolensd and iolens (control/log_escape.hpp): what a local user puts in a
// cgroup name, a comm or a path reaches the log only as visible escapes.
#include <gtest/gtest.h>

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>
#include <string>

#include "control/log_escape.hpp"

namespace {

using iolens::control::escaping_formatter;

std::string logged(const std::string& name) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  spdlog::logger logger("t", sink);
  logger.set_formatter(escaping_formatter("iolensd: %l: %v"));
  logger.info("job {} opened: cgroup /x/{}", "cgroup/x", name);
  return out.str();
}

// Each character that must never reach a terminal raw, with the escape the log shows for it.
struct Case {
  const char* raw;
  const char* shown;
};
constexpr Case kHidden[] = {
    {"\x1b", "\\x1b"},         {"\n", "\\x0a"},           {"\r", "\\x0d"},
    {"\t", "\\x09"},           {"\x07", "\\x07"},         {"\x7f", "\\x7f"},
    {"\xc2\x9b", "\\u009b"},   {"\xc2\x85", "\\u0085"},   {"\xe2\x80\xaa", "\\u202a"},
    {"\xe2\x80\xab", "\\u202b"}, {"\xe2\x80\xac", "\\u202c"}, {"\xe2\x80\xad", "\\u202d"},
    {"\xe2\x80\xae", "\\u202e"}, {"\xe2\x81\xa6", "\\u2066"}, {"\xe2\x81\xa7", "\\u2067"},
    {"\xe2\x81\xa8", "\\u2068"}, {"\xe2\x81\xa9", "\\u2069"}, {"\xe2\x80\x8e", "\\u200e"},
    {"\xe2\x80\x8f", "\\u200f"}, {"\xd8\x9c", "\\u061c"},   {"\xff", "\\xff"},
    {"\xc0\xaf", "\\xc0\\xaf"}, {"\\", "\\\\"},
};

TEST(LogEscape, EveryHiddenCharacterIsShownAsAnEscape) {
  for (const Case& c : kHidden) {
    const std::string line = logged(std::string("a") + c.raw + "b");
    EXPECT_EQ(line, std::string("iolensd: info: job cgroup/x opened: cgroup /x/a") + c.shown +
                        "b\n")
        << "for the escape " << c.shown;
  }
}

TEST(LogEscape, AnAttackerNameCannotColourReorderOrSplitALine) {
  const std::string line = logged("\x1b[31mred\xe2\x80\xaegpj.exe\nfake: line");
  EXPECT_EQ(line,
            "iolensd: info: job cgroup/x opened: cgroup /x/\\x1b[31mred\\u202egpj.exe\\x0afake: "
            "line\n");
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_EQ(line.find("\xe2\x80\xae"), std::string::npos);
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // the pattern's own newline only
}

TEST(LogEscape, PrintableTextIsKept) {
  EXPECT_EQ(logged("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x93\x81 job-1.scope"),
            "iolensd: info: job cgroup/x opened: cgroup /x/caf\xc3\xa9 \xe6\x97\xa5 "
            "\xf0\x9f\x93\x81 job-1.scope\n");
}

TEST(LogEscape, ACloneEscapesToo) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  sink->set_formatter(escaping_formatter("%v")->clone());
  spdlog::logger logger("t", sink);
  logger.warn("{}", "\x1b]0;title\x07");
  EXPECT_EQ(out.str(), "\\x1b]0;title\\x07\n");
}

}  // namespace
