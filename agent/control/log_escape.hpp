// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Every log line of iolensd and iolens goes through terminal_safe: messages carry strings that
/// local users choose (cgroup and unit names, container ids, comm, file paths), and a raw ESC
/// sequence, a newline or a right-to-left override would otherwise reach an admin's terminal
/// or journal as is (a forged log line, a recoloured or reordered one). Escaping here, at the
/// one formatter every logger uses, covers every call site, present and future.

#include <memory>
#include <string>

#include <spdlog/formatter.h>
#include <spdlog/logger.h>

namespace iolens::control {

/// Formats with `inner` a copy of the message whose text went through terminal_safe (C0
/// controls, DEL, C1 controls, bidirectional controls and invalid UTF-8 as \xNN / \uNNNN, a
/// backslash doubled). What the pattern adds (prefix, level, the final newline) is kept.
class EscapingFormatter final : public spdlog::formatter {
 public:
  explicit EscapingFormatter(std::unique_ptr<spdlog::formatter> inner);
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;

 private:
  std::unique_ptr<spdlog::formatter> inner_;
};

/// An EscapingFormatter around spdlog's pattern formatter with `pattern`.
std::unique_ptr<spdlog::formatter> escaping_formatter(const std::string& pattern);

}  // namespace iolens::control
