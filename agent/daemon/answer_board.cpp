// SPDX-License-Identifier: Apache-2.0
#include "daemon/answer_board.hpp"

#include <algorithm>

namespace iolens::daemon {

void AnswerBoard::publish(nlohmann::json status, nlohmann::json jobs) {
  // Built outside the lock: a reader copies under it, and the old ones are freed after it.
  auto s = std::make_shared<const nlohmann::json>(std::move(status));
  auto j = std::make_shared<const nlohmann::json>(std::move(jobs));
  {
    std::lock_guard lk(mu_);
    status_.swap(s);
    jobs_.swap(j);
    published_at_ = Clock::now();
    ++generation_;
    wanted_since_.reset();
  }
  published_cv_.notify_all();
}

bool AnswerBoard::wanted() const {
  std::lock_guard lk(mu_);
  return wanted_since_.has_value();
}

bool AnswerBoard::due(Clock::duration max_age, Clock::duration asked_within) const {
  const auto now = Clock::now();
  std::lock_guard lk(mu_);
  return status_ && asked_at_ && now - *asked_at_ <= asked_within &&
         now - published_at_ > max_age;
}

std::optional<nlohmann::json> AnswerBoard::answer(const std::string& cmd,
                                                  const std::function<void()>& ask_loop) {
  if (cmd != "status" && cmd != "jobs") return std::nullopt;
  std::unique_lock lk(mu_);
  if (!status_) return std::nullopt;
  const uint64_t asked_at = generation_;
  const auto now = Clock::now();
  asked_at_ = now;
  const bool first = !wanted_since_;
  if (first) wanted_since_ = now;
  // A request that comes while others wait has only what is left of their wait.
  const auto until = *wanted_since_ + fresh_wait_;
  if (first) {
    lk.unlock();
    ask_loop();
    lk.lock();
  }
  const bool fresh =
      published_cv_.wait_until(lk, until, [&] { return generation_ != asked_at; });
  std::shared_ptr<const nlohmann::json> doc = cmd == "status" ? status_ : jobs_;
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                                         published_at_);
  const uint64_t age_ms = static_cast<uint64_t>(std::max<int64_t>(0, age.count()));
  if (fresh) {
    ++counts_.fresh;
  } else {
    ++counts_.stale;
    counts_.oldest_stale_ms = std::max(counts_.oldest_stale_ms, age_ms);
  }
  lk.unlock();
  nlohmann::json out = *doc;  // a copy: the published one is shared with other readers
  out["age_ms"] = age_ms;
  return out;
}

AnswerBoard::Counts AnswerBoard::counts() const {
  std::lock_guard lk(mu_);
  return counts_;
}

}  // namespace iolens::daemon
