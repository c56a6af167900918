// SPDX-License-Identifier: Apache-2.0
#include "control/log_escape.hpp"

#include <spdlog/pattern_formatter.h>

#include "control/format.hpp"

namespace iolens::control {

EscapingFormatter::EscapingFormatter(std::unique_ptr<spdlog::formatter> inner)
    : inner_(std::move(inner)) {}

void EscapingFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const std::string safe = terminal_safe(std::string_view(msg.payload.data(), msg.payload.size()));
  spdlog::details::log_msg copy = msg;
  copy.payload = spdlog::string_view_t(safe.data(), safe.size());
  inner_->format(copy, dest);
}

std::unique_ptr<spdlog::formatter> EscapingFormatter::clone() const {
  return std::make_unique<EscapingFormatter>(inner_->clone());
}

std::unique_ptr<spdlog::formatter> escaping_formatter(const std::string& pattern) {
  return std::make_unique<EscapingFormatter>(
      std::make_unique<spdlog::pattern_formatter>(pattern));
}

}  // namespace iolens::control
