// SPDX-License-Identifier: Apache-2.0
#include "daemon/job_pages.hpp"

#include <algorithm>
#include <utility>

#include "control/protocol.hpp"
#include "daemon/job_table.hpp"

namespace iolens::daemon {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

PageRequest parse_page_request(const nlohmann::json& req) {
  PageRequest r;
  if (const auto id = req.find("id"); id != req.end() && id->is_string()) r.id = id->get<std::string>();
  const auto count = [&](const char* key) -> std::optional<uint64_t> {
    const auto it = req.find(key);
    if (it == req.end()) return std::nullopt;
    if (!it->is_number_unsigned())
      throw control::BadRequest(std::string("'") + key + "' must be a non-negative integer");
    return it->get<uint64_t>();
  };
  r.offset = count("offset").value_or(0);
  r.limit = count("limit").value_or(control::kJobPageDefault);
  if (r.limit == 0 || r.limit > control::kJobPageMax)
    throw control::BadRequest("'limit' must be from 1 to " + std::to_string(control::kJobPageMax));
  r.snapshot = count("snapshot");
  return r;
}

JobPages::JobPages(std::string id, uint64_t serial, core::RunSnapshot snap,
                   exporters::RecordEdits edits, std::string version, Clock::time_point taken_at,
                   std::size_t max_rows)
    : id_(std::move(id)),
      serial_(serial),
      snap_(std::move(snap)),
      across_(snap_),
      edits_(std::move(edits)),
      version_(std::move(version)),
      taken_at_(taken_at),
      max_rows_(max_rows) {}

nlohmann::json JobPages::page(std::size_t offset, std::size_t limit, Clock::time_point now) const {
  limit = std::min(limit, max_rows_);
  nlohmann::json j = exporters::run_page_json(snap_, across_, version_, offset, limit, edits_);
  j["page"] = page_json(offset, limit, snap_.processes.size(), snap_.files.size(), across_.size());
  j["page"]["snapshot"] = serial_;
  j["page"]["age_ms"] = std::max<int64_t>(0, duration_cast<milliseconds>(now - taken_at_).count());
  return j;
}

LivePages::LivePages() : LivePages(Policy()) {}
LivePages::LivePages(Policy policy)
    : policy_(policy),
      serial_(static_cast<uint64_t>(std::chrono::duration_cast<microseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count())) {}

LivePages::Clock::duration LivePages::reuse_window(Clock::duration took) const {
  return std::max(policy_.reuse_min, took * policy_.reuse_factor);
}

std::shared_ptr<const JobPages> LivePages::usable(const std::string& id,
                                                  std::optional<uint64_t> snapshot,
                                                  Clock::time_point now, bool any_age) {
  std::lock_guard lk(mu_);
  if (!held_ || held_->id() != id) return nullptr;
  // A client continuing its pages asks for that snapshot however old.
  if (snapshot ? held_->serial() != *snapshot
               : !any_age && now - held_->taken_at() >= reuse_window(held_took_))
    return nullptr;
  last_used_ = std::max(last_used_, now);
  if (snapshot) last_paged_ = std::max(last_paged_.value_or(now), now);
  ++counts_.pages_held;
  return held_;
}

LivePages::Clock::duration LivePages::wait_for_new(Clock::time_point now) const {
  std::lock_guard lk(mu_);
  Clock::time_point until = next_allowed_;
  if (held_ && last_paged_)
    until = std::max(until, std::min(*last_paged_ + policy_.in_use,
                                     held_->taken_at() + policy_.protect_max));
  return until > now ? until - now : Clock::duration::zero();
}

uint64_t LivePages::next_serial() {
  std::lock_guard lk(mu_);
  return ++serial_;
}

std::shared_ptr<const JobPages> LivePages::hold(std::shared_ptr<const JobPages> pages,
                                                Clock::duration took, Clock::time_point now) {
  std::lock_guard lk(mu_);
  std::swap(held_, pages);
  held_took_ = took;
  last_used_ = now;
  last_paged_.reset();
  const unsigned factor = std::max(policy_.budget_factor, 1u);
  next_allowed_ = now + took * (factor - 1);
  ++counts_.snapshots;
  counts_.last_snapshot_us = static_cast<uint64_t>(duration_cast<microseconds>(took).count());
  counts_.held_rows = held_ ? held_->rows() : 0;
  return pages;
}

std::shared_ptr<const JobPages> LivePages::drop(const std::string& id, Clock::time_point now) {
  std::lock_guard lk(mu_);
  if (!held_) return nullptr;
  const bool gone = id.empty() ? now - last_used_ >= policy_.idle_drop : held_->id() == id;
  if (!gone) return nullptr;
  counts_.held_rows = 0;
  return std::exchange(held_, nullptr);
}

std::shared_ptr<const JobPages> LivePages::release() {
  std::lock_guard lk(mu_);
  counts_.held_rows = 0;
  return std::exchange(held_, nullptr);
}

LivePages::Counts LivePages::counts() const {
  std::lock_guard lk(mu_);
  return counts_;
}

void LivePages::count_retry(bool gone) {
  std::lock_guard lk(mu_);
  ++(gone ? counts_.retry_gone : counts_.retry_busy);
}

}  // namespace iolens::daemon
