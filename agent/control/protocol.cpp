// SPDX-License-Identifier: Apache-2.0
#include "control/protocol.hpp"

#include <algorithm>
#include <exception>

namespace iolens::control {
namespace {

using nlohmann::json;

/// nlohmann's parse errors quote the offending input; a hostile line would be echoed back whole.
std::string short_text(std::string_view s) {
  constexpr std::size_t kMax = 200;
  if (s.size() <= kMax) return std::string(s);
  return std::string(s.substr(0, kMax)) + "...";
}

std::string dump_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string ok_line(const json& result) {
  return dump_line(json{{"ok", true}, {"result", result}});
}

std::string error_line(std::string_view code, std::string_view message) {
  return dump_line(json{{"ok", false}, {"code", code}, {"error", message}});
}

std::string retry_line(std::string_view message, std::chrono::milliseconds after) {
  json j{{"ok", false}, {"code", kCodeRetry}, {"error", message}};
  if (after.count() > 0) j["retry_after_ms"] = after.count();
  return dump_line(j);
}

std::string answer_line(std::string_view request_line, const Handler& handler) {
  json request;
  try {
    request = json::parse(request_line);
  } catch (const json::exception& e) {
    return error_line(kCodeBadRequest, "malformed request: " + short_text(e.what()));
  }
  if (!request.is_object()) return error_line(kCodeBadRequest, "request must be a JSON object");
  const auto cmd = request.find("cmd");
  if (cmd == request.end() || !cmd->is_string()) {
    return error_line(kCodeBadRequest, "request needs a \"cmd\" string");
  }
  // The handler is the daemon's code: whatever it throws becomes an answer, so a bug behind one
  // request cannot take the daemon down.
  try {
    return ok_line(handler(request));
  } catch (const BadRequest& e) {
    return error_line(kCodeBadRequest, short_text(e.what()));
  } catch (const Denied& e) {
    return error_line(kCodeDenied, e.what());
  } catch (const Retry& e) {
    return retry_line(e.what(), e.after);
  } catch (const std::exception& e) {
    return error_line(kCodeFailed, e.what());
  } catch (...) {
    return error_line(kCodeFailed, "internal error");
  }
}

std::string request_line(const json& request) { return dump_line(request); }

Answer parse_answer(std::string_view line) {
  Answer a;
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    a.malformed = true;
    a.error = "not JSON: " + short_text(e.what());
    return a;
  }
  const auto ok = j.is_object() ? j.find("ok") : j.end();
  if (!j.is_object() || ok == j.end() || !ok->is_boolean()) {
    a.malformed = true;
    a.error = "no \"ok\" field";
    return a;
  }
  if (ok->get<bool>()) {
    const auto result = j.find("result");
    if (result == j.end()) {
      a.malformed = true;
      a.error = "\"ok\" without a \"result\"";
      return a;
    }
    a.result = *result;
    return a;
  }
  if (const auto code = j.find("code"); code != j.end() && code->is_string()) {
    a.code = code->get<std::string>();
  }
  if (const auto after = j.find("retry_after_ms");
      a.code == kCodeRetry && after != j.end() && after->is_number_unsigned())
    // (at most a day: a broken daemon's number does not make a client sleep for ever)
    a.retry_after = std::chrono::milliseconds(std::min<uint64_t>(after->get<uint64_t>(), 86400000));
  const auto error = j.find("error");
  a.error = error != j.end() && error->is_string() ? error->get<std::string>() : "unknown error";
  return a;
}

}  // namespace iolens::control
