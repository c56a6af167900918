// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The loop's latest answers to `status`, `jobs` and `capture_status` (of the last capture),
/// for the control socket's front thread (control::Server::start_front): those are answered
/// without waiting for the loop.
///
/// A request is answered with an answer the loop began to build after the request arrived (its
/// connection was accepted) when the loop builds one within `fresh_wait` of that arrival; it
/// asks the loop for one and waits that long at most. A loop that is free builds one within a
/// pass (a millisecond or so); one in a long piece of work (a fold, a state save's gathering, a
/// round's end on a job of 150,000 records) does not, and the last one it built is sent instead.
/// Each answer says how old it is ("age_ms"), and the board counts fresh and stale answers
/// (docs/control.md#answer-times). Waits run from each request's arrival (its connection's
/// accept), so clients accepted together share one wait.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "control/protocol.hpp"

namespace iolens::daemon {

class AnswerBoard {
 public:
  using Clock = std::chrono::steady_clock;
  /// `fresh_wait`: below the 100 ms the control socket promises, with room for the answer's
  /// own time.
  explicit AnswerBoard(std::chrono::milliseconds fresh_wait = control::kFreshAnswerWait);

  /// Whether `cmd` is answered from the board ("status", "jobs", "capture_status").
  static bool answers(const std::string& cmd);

  /// The loop: `cmd`'s result, built from `built_at` on. Wakes the requests waiting for it.
  void publish(const std::string& cmd, nlohmann::json result, Clock::time_point built_at);
  /// The loop: whether a request waits for a fresh `cmd` (publish it soon).
  bool wanted(const std::string& cmd) const;
  /// The loop: whether `cmd`'s answer is older than `max_age` and (when `asked_within` is
  /// given) a client asked for it that recently: published again then at a round's end, so
  /// that what is answered while the loop is busy is not from whenever it was last built.
  bool due(const std::string& cmd, Clock::duration max_age,
           std::optional<Clock::duration> asked_within) const;

  /// The front thread: `cmd`'s result with "age_ms" added (since its build began): fresh when
  /// the loop builds one within the wait, else the last built. `ask_loop` is called (without
  /// the board's lock) when a fresh one is asked for. std::nullopt for any other command and
  /// before the first publish(): the loop answers those.
  std::optional<nlohmann::json> answer(const std::string& cmd, Clock::time_point arrived,
                                       const std::function<void()>& ask_loop);

  struct Counts {
    uint64_t fresh = 0;  // answered with what the loop built after the request arrived
    uint64_t stale = 0;  // answered with what it had built before (the loop was busy)
    uint64_t oldest_stale_ms = 0;  // the largest age_ms of a stale answer
  };
  Counts counts() const;

 private:
  struct Slot {
    std::shared_ptr<const nlohmann::json> result;
    Clock::time_point built_at{};
    bool wanted = false;
    std::optional<Clock::time_point> asked_at;  // the last request's arrival
  };
  const std::chrono::milliseconds fresh_wait_;
  mutable std::mutex mu_;
  std::condition_variable published_cv_;
  std::map<std::string, Slot> slots_;  // one per command answered, made at construction
  Counts counts_;
};

}  // namespace iolens::daemon
