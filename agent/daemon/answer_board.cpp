// SPDX-License-Identifier: Apache-2.0
#include "daemon/answer_board.hpp"

#include <algorithm>

namespace iolens::daemon {

AnswerBoard::AnswerBoard(std::chrono::milliseconds fresh_wait) : fresh_wait_(fresh_wait) {
  // Made here, never inserted later: a slot found under the lock stays where it is.
  slots_["status"];
  slots_["jobs"];
  slots_["capture_status"];
}

bool AnswerBoard::answers(const std::string& cmd) {
  return cmd == "status" || cmd == "jobs" || cmd == "capture_status";
}

void AnswerBoard::publish(const std::string& cmd, nlohmann::json result,
                          Clock::time_point built_at) {
  auto doc = std::make_shared<const nlohmann::json>(std::move(result));
  {
    std::lock_guard lk(mu_);
    const auto it = slots_.find(cmd);
    if (it == slots_.end()) return;
    Slot& slot = it->second;
    slot.result.swap(doc);  // the old one is freed outside the lock
    slot.built_at = built_at;
    // A request that arrived after this build began still wants a later one.
    slot.wanted = slot.asked_at && *slot.asked_at > built_at;
  }
  published_cv_.notify_all();
}

bool AnswerBoard::wanted(const std::string& cmd) const {
  std::lock_guard lk(mu_);
  const auto it = slots_.find(cmd);
  return it != slots_.end() && it->second.wanted;
}

bool AnswerBoard::due(const std::string& cmd, Clock::duration max_age,
                      std::optional<Clock::duration> asked_within) const {
  const auto now = Clock::now();
  std::lock_guard lk(mu_);
  const auto it = slots_.find(cmd);
  if (it == slots_.end() || !it->second.result) return false;
  const Slot& s = it->second;
  if (asked_within && (!s.asked_at || now - *s.asked_at > *asked_within)) return false;
  return now - s.built_at > max_age;
}

std::optional<nlohmann::json> AnswerBoard::answer(const std::string& cmd,
                                                  Clock::time_point arrived,
                                                  const std::function<void()>& ask_loop) {
  std::unique_lock lk(mu_);
  const auto it = slots_.find(cmd);
  if (it == slots_.end() || !it->second.result) return std::nullopt;
  Slot& s = it->second;
  s.asked_at = std::max(s.asked_at.value_or(arrived), arrived);
  const auto fresh_enough = [&] { return s.built_at >= arrived; };
  if (!fresh_enough()) {
    if (!s.wanted) {
      s.wanted = true;
      lk.unlock();
      ask_loop();
      lk.lock();
    }
    published_cv_.wait_until(lk, arrived + fresh_wait_, fresh_enough);
  }
  const bool fresh = fresh_enough();
  const std::shared_ptr<const nlohmann::json> doc = s.result;
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - s.built_at);
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
