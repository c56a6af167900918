// SPDX-License-Identifier: Apache-2.0
#include "cli/query_command.hpp"

#include <time.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "control/client.hpp"
#include "control/format.hpp"
#include "control/unique_fd.hpp"
#include "core/private_dir.hpp"
#include "core/zstd_stream.hpp"

namespace iolens::cli {
namespace {

/// A compressed record inflates to at most this: well above any record iolensd writes (its
/// default limits bound a job to 50,000 file rows: ~400 MB of JSON with by_file), and the
/// memory the JSON parse of it would need anyway.
constexpr std::size_t kMaxRecordBytes = std::size_t{4} << 30;

uint64_t wall_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

QueryCommands::QueryCommands(CLI::App& app) : socket_path_(control::kDefaultSocketPath) {
  status_ = app.add_subcommand("status", "Health of the node daemon (iolensd)");
  jobs_ = app.add_subcommand("jobs", "The jobs iolensd records, live and recently closed");
  job_ = app.add_subcommand("job", "One job recorded by iolensd: its processes and top files");
  job_->add_option("ID", job_id_, "The job's ID, as `iolens jobs` lists it")->required();
  for (CLI::App* cmd : {status_, jobs_, job_}) {
    cmd->add_option("--socket", socket_path_, "iolensd's control socket")->capture_default_str();
    cmd->add_flag("--json", json_, "Print the daemon's answer as JSON (docs/control.md)");
  }
}

bool QueryCommands::given() const { return status_->parsed() || jobs_->parsed() || job_->parsed(); }

int QueryCommands::usage_error(CLI::App& app, const CLI::ParseError& e) const {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help
  std::fprintf(stderr, "iolens: %s\nRun with --help for more information.\n", e.what());
  return 2;
}

namespace {

/// A closed job's record from the descriptor the daemon sent with its answer.
std::optional<nlohmann::json> read_record(int fd, const std::string& path, std::string& error) {
  if (fd < 0) {
    error = "iolensd named the record " + path + " but sent no descriptor to read it";
    return std::nullopt;
  }
  std::optional<std::string> text = core::read_all(fd);
  if (!text) {
    error = "cannot read the record " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  // iolensd's records are zstd unless its record_compression is none (docs/daemon.md).
  std::string why;
  text = core::text_of_record(std::move(*text), kMaxRecordBytes, why);
  if (!text) {
    error = "cannot read the record " + path + ": " + why;
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error = "the record " + path + " is not a JSON object";
    return std::nullopt;
  }
  return j;
}

}  // namespace

int QueryCommands::run() const {
  nlohmann::json request;
  if (status_->parsed()) {
    request = {{"cmd", "status"}};
  } else if (jobs_->parsed()) {
    request = {{"cmd", "jobs"}};
  } else {
    if (job_id_.empty()) {
      std::fprintf(stderr, "iolens: the job ID is empty\n");
      return 2;
    }
    // A closed job's record comes as a descriptor to read here (docs/control.md#job).
    request = {{"cmd", "job"}, {"id", job_id_}, {"fd", true}};
  }

  std::string error;
  int record_fd = -1;
  auto result = control::request(socket_path_, request, error, 5000, -1,
                                 job_->parsed() ? &record_fd : nullptr);
  const control::UniqueFd record(record_fd);
  if (result && job_->parsed() && result->contains("record")) {
    // The whole record, as the daemon wrote it: no pages to join.
    const std::string path = result->value("record", "");
    result = read_record(record.get(), path, error);
  }
  // The daemon answers `job` a page at a time (docs/control.md#job): the rest is fetched and
  // joined, so the output is the whole record as before.
  while (result && job_->parsed()) {
    const nlohmann::json* page = result->contains("page") ? &(*result)["page"] : nullptr;
    if (!page || !page->is_object() || !page->contains("next") || !(*page)["next"].is_number_unsigned())
      break;
    const uint64_t next = (*page)["next"].get<uint64_t>();
    if (next <= page->value("offset", uint64_t{0})) break;  // no progress: a broken daemon
    request["offset"] = next;
    auto more = control::request(socket_path_, request, error);
    if (!more) {
      result.reset();
      break;
    }
    for (const char* key : {"processes", "files", "by_file"}) {
      // find, not []: a list the daemon does not send (an older one has no by_file) stays
      // absent instead of becoming null
      const auto into = result->find(key);
      const auto part = more->find(key);
      if (into == result->end() || part == more->end() || !into->is_array() || !part->is_array())
        continue;
      for (const auto& e : *part) into->push_back(e);
    }
    (*result)["page"] = (*more)["page"];
  }
  if (result && job_->parsed() && result->contains("page") && (*result)["page"].is_object() &&
      (*result)["page"].value("next", nlohmann::json()).is_null()) {
    // Joined whole: one record, as the daemon writes it (a partial join keeps `page`).
    result->erase("page");
  }
  if (!result) {
    // The daemon's text is not ours: escaped so it cannot drive the terminal.
    std::fprintf(stderr, "iolens: %s\n", control::terminal_safe(error).c_str());
    return 1;
  }
  std::string text;
  if (json_) {
    text = result->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else if (status_->parsed()) {
    text = control::format_status(*result);
  } else if (jobs_->parsed()) {
    text = control::format_jobs(*result);
  } else {
    text = control::format_job(*result, wall_now_ns());
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace iolens::cli
