// SPDX-License-Identifier: Apache-2.0
#include "cli/query_command.hpp"

#include <time.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

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

/// How long `iolens job` waits in all for a daemon that asks it to come back later: its
/// snapshots of live jobs are bounded to a share of its time (docs/control.md#live-jobs).
constexpr auto kRetryFor = std::chrono::seconds(60);
/// How many times it starts a live job's pages again when the snapshot they come from is gone,
/// or the job closed while they were read.
constexpr int kRestarts = 3;

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

std::optional<nlohmann::json> QueryCommands::fetch_job(std::string& error) const {
  using Clock = std::chrono::steady_clock;
  const auto give_up = Clock::now() + kRetryFor;
  control::Answer refusal;
  // One request; a "retry" answer with a time is waited out (said once) while within kRetryFor.
  bool said = false;
  const auto ask = [&](const nlohmann::json& req, int* fd) {
    for (;;) {
      refusal = {};
      auto r = control::request(socket_path_, req, error, 5000, -1, fd, &refusal);
      if (r || refusal.code != control::kCodeRetry || refusal.retry_after.count() == 0)
        return r;
      if (Clock::now() + refusal.retry_after > give_up) {
        error += " (gave up after waiting " + std::to_string(kRetryFor.count()) + " s)";
        return r;
      }
      if (!said)
        std::fprintf(stderr, "iolens: %s; waiting\n",
                     control::terminal_safe(refusal.error).c_str());
      said = true;
      std::this_thread::sleep_for(refusal.retry_after);
    }
  };
  for (int restarts = 0, handed = 0;;) {
    // A closed job's record comes as a descriptor to read here (docs/control.md#job).
    nlohmann::json request = {{"cmd", "job"}, {"id", job_id_}, {"fd", true}};
    int record_fd = -1;
    auto result = ask(request, &record_fd);
    const control::UniqueFd record(record_fd);
    if (result && result->contains("record")) {
      // The whole record, as the daemon wrote it: no pages to join.
      return read_record(record.get(), result->value("record", ""), error);
    }
    // The daemon answers `job` a page at a time (docs/control.md#job): the rest is fetched and
    // joined, so the output is the whole record as before. A live job's pages all come from
    // the snapshot the first one names.
    bool again = false;
    while (result) {
      const nlohmann::json* page = result->contains("page") ? &(*result)["page"] : nullptr;
      if (!page || !page->is_object() || !page->contains("next") ||
          !(*page)["next"].is_number_unsigned())
        break;
      const uint64_t next = (*page)["next"].get<uint64_t>();
      if (next <= page->value("offset", uint64_t{0})) break;  // no progress: a broken daemon
      request["offset"] = next;
      if (const auto snap = page->find("snapshot"); snap != page->end() && snap->is_number_unsigned())
        request["snapshot"] = *snap;
      auto more = ask(request, nullptr);
      // The job closed and the daemon hands its record over (a closed job's record is never
      // paged): from the start, which reads the record.
      if (more && more->contains("record")) {
        again = true;
        if (handed++ == kRestarts) {  // only a broken daemon: the next first page is the record
          error = "iolensd handed over a record for a page of job " + job_id_ + " " +
                  std::to_string(kRestarts + 1) + " times, and pages again when asked anew";
          return std::nullopt;
        }
        break;
      }
      // The snapshot went (a newer one was taken for another client): from the start.
      if (!more && refusal.code == control::kCodeRetry && refusal.retry_after.count() == 0) {
        again = true;
        if (restarts++ == kRestarts) {
          error = "the job's pages could not be read from one snapshot of it in " +
                  std::to_string(kRestarts + 1) + " tries (requests for other jobs replaced "
                  "it): try again";
          return std::nullopt;
        }
        break;
      }
      if (!more) {
        result.reset();
        break;
      }
      for (const char* key : {"processes", "files", "by_file"}) {
        // find, not []: a list the daemon does not send (an older one has no by_file) stays
        // absent instead of becoming null
        const auto into = result->find(key);
        const auto part = more->find(key);
        if (into == result->end() || part == more->end() || !into->is_array() ||
            !part->is_array())
          continue;
        for (const auto& e : *part) into->push_back(e);
      }
      (*result)["page"] = (*more)["page"];
    }
    if (again) continue;
    if (result && result->contains("page") && (*result)["page"].is_object() &&
        (*result)["page"].value("next", nlohmann::json()).is_null()) {
      // Joined whole: one record, as the daemon writes it (a partial join keeps `page`), and
      // how old its snapshot is, as `status` says how old it is.
      const nlohmann::json age = (*result)["page"].value("age_ms", nlohmann::json());
      result->erase("page");
      if (age.is_number_unsigned()) (*result)["age_ms"] = age;
    }
    return result;
  }
}

int QueryCommands::run() const {
  std::string error;
  std::optional<nlohmann::json> result;
  if (status_->parsed()) {
    result = control::request(socket_path_, {{"cmd", "status"}}, error);
  } else if (jobs_->parsed()) {
    result = control::request(socket_path_, {{"cmd", "jobs"}}, error);
  } else {
    if (job_id_.empty()) {
      std::fprintf(stderr, "iolens: the job ID is empty\n");
      return 2;
    }
    result = fetch_job(error);
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
