// SPDX-License-Identifier: Apache-2.0
#pragma once
/// `iolens status`, `iolens jobs`, `iolens job ID`: ask the node daemon (iolensd) over its
/// control socket and print the answer as text or, with --json, as the daemon sent it.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace iolens::cli {

class QueryCommands {
 public:
  /// Adds the three subcommands to `app`.
  explicit QueryCommands(CLI::App& app);

  /// Whether the command line names one of them (also when it failed to parse).
  bool given() const;

  /// Asks the daemon and prints the answer. 0 on success; 1 when the daemon cannot be reached or
  /// answers an error (one "iolens: " line on stderr says which).
  int run() const;

  /// Exit status for a command line of ours that did not parse: 2, after one "iolens: " line on
  /// stderr (--help and friends print and give 0 as usual).
  int usage_error(CLI::App& app, const CLI::ParseError& e) const;

 private:
  /// `job`: the closed job's record, or every page of the live job's answer joined; nullopt
  /// and `error` when the daemon cannot be reached or refuses.
  std::optional<nlohmann::json> fetch_job(std::string& error) const;

  CLI::App* status_;
  CLI::App* jobs_;
  CLI::App* job_;
  std::string socket_path_;
  bool json_ = false;
  std::string job_id_;
};

}  // namespace iolens::cli
