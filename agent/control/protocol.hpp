// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The control protocol without the socket (docs/control.md): one JSON object per line each
/// way. Requests {"cmd":"status"|"jobs"|"job", ...}; answers {"ok":true,"result":{...}} or
/// {"ok":false,"code":"...","error":"..."}. Pure, so every malformed input is unit-testable.

#include <chrono>
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace iolens::control {

/// The longest request line the daemon reads (without its newline). Requests are tiny; the cap
/// bounds what a client can make the daemon hold.
inline constexpr std::size_t kMaxRequestBytes = 64 * 1024;

/// The `job` request's page (docs/control.md#job): processes and files per answer when the
/// request gives no `limit`, and the largest `limit` accepted. A file row is about 3 KB of
/// JSON (its counters), so a page of the default is a few MB at most.
inline constexpr std::size_t kJobPageDefault = 1000;
inline constexpr std::size_t kJobPageMax = 10000;
/// A live job's page holds at most this many rows of each list, whatever `limit` asks (its
/// `page.limit` says what it holds; `page.next` goes on from there). Such pages are cut by the
/// control socket's front thread (docs/control.md#live-jobs), which answers `status` too: a
/// row costs it ~100 us, so a page (files and by_file: 400 rows for one process) keeps
/// `status` waiting 20-40 ms.
inline constexpr std::size_t kLiveJobPageMax = 200;

/// How long the control socket's front thread waits for the loop's fresh `status` or `jobs`
/// before it answers with what the loop built last (docs/control.md#answer-times). The front
/// thread is one thread: a client that connects while it waits for another is read after that
/// wait, so a client waits at most twice this (80 ms) from its connection. An answer whose
/// "age_ms" is at least this is a stale one (or one whose client took that long to send).
inline constexpr std::chrono::milliseconds kFreshAnswerWait{40};

/// Error codes in answers, for clients that act on the kind of failure rather than its text.
inline constexpr const char* kCodeBadRequest = "bad_request";  // malformed, oversize, unknown cmd
inline constexpr const char* kCodeDenied = "denied";           // the peer may not ask
inline constexpr const char* kCodeFailed = "failed";           // the daemon could not answer
/// Not now: ask again, after "retry_after_ms" when the answer gives it (a live job's snapshot
/// the daemon may not take yet, or a page of one it no longer holds).
inline constexpr const char* kCodeRetry = "retry";

/// Thrown by a handler for a request to make again later: the answer's code is "retry", with
/// "retry_after_ms" when `after` is not zero.
struct Retry : std::runtime_error {
  Retry(const std::string& what, std::chrono::milliseconds after_)
      : std::runtime_error(what), after(after_) {}
  std::chrono::milliseconds after;
};

/// Turns a request into its "result" object. Throw std::runtime_error (or BadRequest) for an
/// error answer; the text is sent to the client.
using Handler = std::function<nlohmann::json(const nlohmann::json& request)>;

/// Thrown by a handler for a request it does not understand (unknown "cmd", missing "id"): the
/// answer's code is "bad_request" instead of "failed".
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Thrown by a handler for a request this peer may not make, though the socket admitted it
/// (e.g. stopping another user's capture): the answer's code is "denied".
struct Denied : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One answer line, newline included. Strings that are not valid UTF-8 are sent with U+FFFD in
/// their place instead of failing the whole answer.
std::string ok_line(const nlohmann::json& result);
std::string error_line(std::string_view code, std::string_view message);
/// A "retry" answer: error_line's, with "retry_after_ms" when `after` is not zero.
std::string retry_line(std::string_view message, std::chrono::milliseconds after);

/// The answer to one request line (without its newline): parsed, checked to be an object with a
/// string "cmd", handed to `handler`. Never throws.
std::string answer_line(std::string_view request_line, const Handler& handler);

/// A request line, newline included.
std::string request_line(const nlohmann::json& request);

/// What a client learns from one answer line: the result, or an error.
struct Answer {
  std::optional<nlohmann::json> result;  // set iff the daemon said ok
  std::string code;                      // the error's code ("" if the daemon gave none)
  /// With code "retry": how long to wait before asking again (0 when the daemon gave none).
  std::chrono::milliseconds retry_after{0};
  std::string error;                     // the daemon's text, or why the line is not an answer
  bool malformed = false;                // the line is not a protocol answer at all
};
Answer parse_answer(std::string_view line);

}  // namespace iolens::control
