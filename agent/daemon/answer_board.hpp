// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The loop's latest answers to `status` and `jobs`, for the control socket's front thread
/// (control::Server::start_front): those two are answered without waiting for the loop.
///
/// A request for one asks the loop for fresh answers and waits for them at most `fresh_wait`,
/// counted from the oldest request still waiting (so a burst of clients does not wait one
/// `fresh_wait` each). A loop that is free publishes within a pass (a millisecond or so); one in
/// a long piece of work (a fold, a state save's gathering, a round's end on a job of 150,000
/// records) does not, and the last answers it published are sent instead. Each answer says
/// how old it is ("age_ms"), and the board counts fresh and stale answers
/// (docs/control.md#answer-times).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
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
  explicit AnswerBoard(std::chrono::milliseconds fresh_wait = control::kFreshAnswerWait)
      : fresh_wait_(fresh_wait) {}

  /// The loop: the answers as of now (`status`'s result, `jobs`'s result). Wakes the requests
  /// waiting for them.
  void publish(nlohmann::json status, nlohmann::json jobs);
  /// The loop: whether a request waits for fresh answers (then publish() soon).
  bool wanted() const;
  /// The loop: whether the answers are older than `max_age` and a client asked within
  /// `asked_within`: published again then at a round's end, so that an answer given while the
  /// loop is busy is not one from whenever somebody last asked.
  bool due(Clock::duration max_age, Clock::duration asked_within) const;

  /// The front thread: the result for `cmd` ("status" or "jobs") with "age_ms" added: fresh
  /// when the loop publishes within the wait, else the last published. `ask_loop` is called
  /// (without the board's lock) when fresh answers are asked for. std::nullopt for any other
  /// command and before the first publish(): the loop answers those.
  std::optional<nlohmann::json> answer(const std::string& cmd,
                                       const std::function<void()>& ask_loop);

  struct Counts {
    uint64_t fresh = 0;  // answered with what the loop published after the request came
    uint64_t stale = 0;  // answered with what it had published before (the loop was busy)
    uint64_t oldest_stale_ms = 0;  // the largest age_ms of a stale answer
  };
  Counts counts() const;

 private:
  const std::chrono::milliseconds fresh_wait_;
  mutable std::mutex mu_;
  std::condition_variable published_cv_;
  std::shared_ptr<const nlohmann::json> status_, jobs_;  // under mu_
  Clock::time_point published_at_{};
  std::optional<Clock::time_point> asked_at_;  // the last request's arrival
  uint64_t generation_ = 0;  // publish() calls
  std::optional<Clock::time_point> wanted_since_;  // the oldest request still waiting
  Counts counts_;
};

}  // namespace iolens::daemon
