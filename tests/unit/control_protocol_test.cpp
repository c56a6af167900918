// SPDX-License-Identifier: Apache-2.0
// The control protocol without sockets: every request line gets exactly one answer line.
#include <gtest/gtest.h>

#include "control/protocol.hpp"

using namespace iolens::control;
using nlohmann::json;

namespace {

int handler_calls = 0;

json handler(const json& req) {
  ++handler_calls;
  const std::string cmd = req.at("cmd").get<std::string>();
  if (cmd == "status") return {{"version", "0.1.0"}};
  if (cmd == "job") return {{"id", req.at("id")}};  // json::out_of_range when "id" is missing
  if (cmd == "fail") throw std::runtime_error("no job x");
  if (cmd == "alien") throw 42;
  if (cmd == "mine") throw Denied("capture 3 was started by uid 1000");
  if (cmd == "later") throw Retry("ask again in 1500 ms", std::chrono::milliseconds(1500));
  if (cmd == "again") throw Retry("ask again from offset 0", std::chrono::milliseconds(0));
  if (cmd == "bytes") return {{"path", std::string("/data/\xff\xfe.npy")}};
  throw BadRequest("unknown command: " + cmd);
}

/// The answer as JSON, after checking it is one line.
json answer(std::string_view line) {
  const std::string text = answer_line(line, handler);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ('\n', text.back());
  EXPECT_EQ(text.size() - 1, text.find('\n')) << text;
  return json::parse(text);
}

void expect_error(std::string_view line, const char* code, const std::string& error_start) {
  const json a = answer(line);
  EXPECT_EQ(false, a["ok"]) << line;
  EXPECT_EQ(code, a["code"]) << line;
  EXPECT_EQ(error_start, a["error"].get<std::string>().substr(0, error_start.size())) << a;
}

}  // namespace

TEST(ControlProtocol, Answers) {
  EXPECT_EQ((json{{"ok", true}, {"result", {{"version", "0.1.0"}}}}),
            answer(R"({"cmd":"status"})"));
  EXPECT_EQ((json{{"ok", true}, {"result", {{"id", "k8s/a\nb"}}}}),
            answer(R"({"cmd":"job","id":"k8s/a\nb"})"));
  // Whitespace and a CR (a client on a terminal) around the object are fine.
  EXPECT_EQ(true, answer(" {\"cmd\":\"status\"} \r")["ok"]);
}

TEST(ControlProtocol, HandlerErrorsBecomeAnswers) {
  expect_error(R"({"cmd":"fail"})", kCodeFailed, "no job x");
  expect_error(R"({"cmd":"frob"})", kCodeBadRequest, "unknown command: frob");
  expect_error(R"({"cmd":"alien"})", kCodeFailed, "internal error");
  expect_error(R"({"cmd":"mine"})", kCodeDenied, "capture 3 was started by uid 1000");
  expect_error(R"({"cmd":"job"})", kCodeFailed, "[json.exception.out_of_range");
}

TEST(ControlProtocol, RetryAnswersSayWhenToAskAgain) {
  expect_error(R"({"cmd":"later"})", kCodeRetry, "ask again in 1500 ms");
  EXPECT_EQ(1500, answer(R"({"cmd":"later"})")["retry_after_ms"]);
  // No time: none in the answer (ask again now, differently).
  expect_error(R"({"cmd":"again"})", kCodeRetry, "ask again from offset 0");
  EXPECT_FALSE(answer(R"({"cmd":"again"})").contains("retry_after_ms"));
  // What a client reads of them; a time that is not a count, or in an answer of another code,
  // is no time; a huge one is at most a day.
  const Answer a = parse_answer(answer_line(R"({"cmd":"later"})", handler));
  EXPECT_EQ(kCodeRetry, a.code);
  EXPECT_EQ(std::chrono::milliseconds(1500), a.retry_after);
  EXPECT_EQ(std::chrono::milliseconds(0),
            parse_answer(R"({"ok":false,"code":"retry","error":"x","retry_after_ms":-5})").retry_after);
  EXPECT_EQ(std::chrono::milliseconds(0),
            parse_answer(R"({"ok":false,"code":"failed","error":"x","retry_after_ms":5})").retry_after);
  EXPECT_EQ(std::chrono::milliseconds(0),
            parse_answer(R"({"ok":false,"code":"retry","error":"x","retry_after_ms":1e30})")
                .retry_after);
  EXPECT_EQ(std::chrono::milliseconds(86400000),
            parse_answer(R"({"ok":false,"code":"retry","error":"x","retry_after_ms":18446744073709551615})")
                .retry_after);
}

TEST(ControlProtocol, MalformedRequests) {
  handler_calls = 0;
  expect_error("", kCodeBadRequest, "malformed request: ");
  expect_error("   ", kCodeBadRequest, "malformed request: ");
  expect_error("{\"cmd\":", kCodeBadRequest, "malformed request: ");
  expect_error(std::string("\x00\xff\xfe garbage", 12), kCodeBadRequest, "malformed request: ");
  expect_error("{\"cmd\":\"\xff\"}", kCodeBadRequest, "malformed request: ");
  expect_error(R"({"cmd":"status"} trailing)", kCodeBadRequest, "malformed request: ");
  expect_error("null", kCodeBadRequest, "request must be a JSON object");
  expect_error(R"(["status"])", kCodeBadRequest, "request must be a JSON object");
  expect_error("{}", kCodeBadRequest, "request needs a \"cmd\" string");
  expect_error(R"({"cmd":1})", kCodeBadRequest, "request needs a \"cmd\" string");
  expect_error(R"({"CMD":"status"})", kCodeBadRequest, "request needs a \"cmd\" string");
  EXPECT_EQ(0, handler_calls);  // none of these reached the daemon's code
}

TEST(ControlProtocol, HostileSizes) {
  // Deep nesting within the size cap: no recursion to overflow the stack, just an answer.
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  expect_error(deep, kCodeBadRequest, "request must be a JSON object");
  // A parse error does not echo a long request back.
  const std::string long_garbage = "\"" + std::string(60000, 'x');
  EXPECT_LT(answer_line(long_garbage, handler).size(), 400u);
}

TEST(ControlProtocol, ResultsThatAreNotUtf8StillMakeAnAnswer) {
  const json a = answer(R"({"cmd":"bytes"})");
  EXPECT_EQ(true, a["ok"]);
  EXPECT_EQ("/data/\xef\xbf\xbd\xef\xbf\xbd.npy", a["result"]["path"]);  // U+FFFD each
}

TEST(ControlProtocol, ParseAnswer) {
  Answer a = parse_answer(R"({"ok":true,"result":{"jobs":[]}})");
  ASSERT_TRUE(a.result);
  EXPECT_EQ((json{{"jobs", json::array()}}), *a.result);

  a = parse_answer(R"({"ok":false,"code":"denied","error":"uid 7 is not root"})");
  EXPECT_FALSE(a.result);
  EXPECT_FALSE(a.malformed);
  EXPECT_EQ("denied", a.code);
  EXPECT_EQ("uid 7 is not root", a.error);

  a = parse_answer(R"({"ok":false})");
  EXPECT_FALSE(a.malformed);
  EXPECT_EQ("unknown error", a.error);

  for (const char* bad : {"", "hello", "{}", R"({"ok":"yes"})", R"({"ok":true})", "[1]"}) {
    a = parse_answer(bad);
    EXPECT_FALSE(a.result) << bad;
    EXPECT_TRUE(a.malformed) << bad;
  }
}

TEST(ControlProtocol, RequestLineIsOneLine) {
  const std::string line = request_line({{"cmd", "job"}, {"id", "a\nb\xff"}});
  EXPECT_EQ(line.size() - 1, line.find('\n'));
  EXPECT_EQ("{\"cmd\":\"job\",\"id\":\"a\\nb\xef\xbf\xbd\"}\n", line);
}
