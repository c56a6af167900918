// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The client's end of the control socket (`iolens status` and friends).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "control/protocol.hpp"

namespace iolens::control {

/// Where iolensd listens unless told otherwise.
inline constexpr const char* kDefaultSocketPath = "/run/iolens/iolens.sock";

/// The most of an answer a client reads. A job with very many files makes a large answer; the
/// cap only stops a broken daemon from filling the client's memory.
inline constexpr std::size_t kMaxAnswerBytes = 512u << 20;

/// What request() says when it cannot connect to `path` (errno `err`).
std::string connect_error(const std::string& path, int err);

/// Connects, sends `req` as one line, reads one answer line; the whole exchange within
/// `timeout_ms`. Returns the answer's "result", or nullopt and `error` saying what went wrong:
/// "cannot connect to iolensd at PATH: ... (is iolensd running?)", "permission denied by
/// iolensd: ...", "iolensd: <its error text>", a timeout or a malformed answer.
/// `pass_fd` >= 0: the descriptor travels with the request (SCM_RIGHTS), e.g. the file a
/// capture is written to, opened by the client with the client's own permissions.
/// `received_fd`: where a descriptor the daemon sends with its answer goes (the caller closes
/// it; left as it was when none came); null: any that comes is closed.
/// `refusal`: when the daemon answers with an error, that answer (its code, its retry time).
std::optional<nlohmann::json> request(const std::string& socket_path, const nlohmann::json& req,
                                      std::string& error, int timeout_ms = 5000,
                                      int pass_fd = -1, int* received_fd = nullptr,
                                      Answer* refusal = nullptr);

}  // namespace iolens::control
