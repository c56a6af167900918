// SPDX-License-Identifier: Apache-2.0
// The board the control socket's front thread answers `status` and `jobs` from: fresh when the
// loop builds an answer within the wait after the request's arrival, the last one built (with
// its age) when the loop is busy, and waits that run from each request's arrival.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/answer_board.hpp"

using iolens::daemon::AnswerBoard;
using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

/// A loop that publishes `cmd` with n once a request wants it (or after 10 s: a board that
/// never says so fails the test instead of hanging it).
std::thread loop_answering(AnswerBoard& board, const std::string& cmd, int n) {
  return std::thread([&board, cmd, n] {
    const auto until = Clock::now() + 10s;
    while (!board.wanted(cmd) && Clock::now() < until) std::this_thread::sleep_for(1ms);
    board.publish(cmd, {{"n", n}}, Clock::now());
  });
}

}  // namespace

TEST(AnswerBoard, OnlyStatusJobsAndCaptureStatusAndOnlyOncePublished) {
  AnswerBoard board(50ms);
  int asked = 0;
  const auto ask = [&] { ++asked; };
  // Nothing published yet: the loop answers (start-up), and nobody is told to wait.
  EXPECT_FALSE(board.answer("status", Clock::now(), ask));
  EXPECT_EQ(0, asked);
  EXPECT_FALSE(board.wanted("status"));
  board.publish("status", {{"n", 1}}, Clock::now());
  EXPECT_FALSE(board.answer("jobs", Clock::now(), ask)) << "jobs not published yet";
  board.publish("jobs", {{"jobs", json::array({"a"})}}, Clock::now());
  board.publish("job", {{"x", 1}}, Clock::now());  // not a board command: ignored
  for (const char* cmd : {"job", "run", "capture", "capture_stop", ""}) {
    EXPECT_FALSE(AnswerBoard::answers(cmd)) << cmd;
    EXPECT_FALSE(board.answer(cmd, Clock::now(), ask)) << cmd;
  }
  EXPECT_TRUE(AnswerBoard::answers("status"));
  EXPECT_TRUE(AnswerBoard::answers("jobs"));
  EXPECT_TRUE(AnswerBoard::answers("capture_status"));
  // No capture yet: nothing published, the loop answers ("no such capture").
  EXPECT_FALSE(board.answer("capture_status", Clock::now(), ask));
  board.publish("capture_status", {{"id", 1}, {"state", "running"}}, Clock::now());
  const auto c = board.answer("capture_status", Clock::now() - 1s, ask);
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)["id"], 1);
  EXPECT_EQ(0, asked);
}

TEST(AnswerBoard, FreshWhenTheLoopPublishesWithinTheWait) {
  AnswerBoard board(5s);  // long: the answer must come from the publish, not the timeout
  board.publish("status", {{"n", 1}}, Clock::now());
  board.publish("jobs", {{"n", 1}}, Clock::now());
  std::atomic<int> asked{0};
  std::thread loop = loop_answering(board, "status", 2);
  const auto start = Clock::now();
  const auto a = board.answer("status", start, [&] { ++asked; });
  loop.join();
  ASSERT_TRUE(a);
  EXPECT_EQ(2, a->at("n"));
  EXPECT_LT(Clock::now() - start, 4s) << "waited for the timeout, not the publish";
  EXPECT_TRUE(a->contains("age_ms"));
  EXPECT_EQ(1, asked.load());
  EXPECT_FALSE(board.wanted("status"));  // the publish answered it
  EXPECT_FALSE(board.wanted("jobs")) << "only what was asked for is wanted";
  EXPECT_EQ(1u, board.counts().fresh);
  EXPECT_EQ(0u, board.counts().stale);
  // Built after the request arrived already (a publish that came meanwhile): no wait at all.
  const auto arrived = Clock::now();
  board.publish("status", {{"n", 3}}, Clock::now());
  const auto b = board.answer("status", arrived, [&] { ++asked; });
  ASSERT_TRUE(b);
  EXPECT_EQ(3, b->at("n"));
  EXPECT_EQ(1, asked.load());
  EXPECT_EQ(2u, board.counts().fresh);
}

TEST(AnswerBoard, TheLastPublishedWithItsAgeWhenTheLoopIsBusy) {
  AnswerBoard board(60ms);
  board.publish("jobs", {{"jobs", json::array({"a", "b"})}}, Clock::now());
  int asked = 0;
  const auto start = Clock::now();
  const auto a = board.answer("jobs", start, [&] { ++asked; });
  const auto waited = Clock::now() - start;
  ASSERT_TRUE(a);
  EXPECT_EQ(json::array({"a", "b"}), a->at("jobs"));
  // Its age is at least the wait: built before the request, nothing since.
  EXPECT_GE(a->at("age_ms").get<uint64_t>(), 60u);
  EXPECT_GE(waited, 60ms);
  EXPECT_EQ(1, asked);
  EXPECT_TRUE(board.wanted("jobs"));  // still asked: the loop publishes when it comes back
  const auto c = board.counts();
  EXPECT_EQ(0u, c.fresh);
  EXPECT_EQ(1u, c.stale);
  EXPECT_GE(c.oldest_stale_ms, 60u);
}

TEST(AnswerBoard, WaitsRunFromEachRequestsArrival) {
  AnswerBoard board(300ms);
  board.publish("status", {{"n", 1}}, Clock::now());
  int asked = 0;
  const auto ask = [&] { ++asked; };
  // Clients that arrived together and are read one after the other (the front thread is one
  // thread): after the first waited its 300 ms, the others' time is up too. Loosely: well under
  // one wait for all five.
  const auto arrived = Clock::now();
  ASSERT_TRUE(board.answer("status", arrived, ask));
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(board.answer("status", arrived, ask));
  EXPECT_LT(Clock::now() - start, 150ms);
  EXPECT_EQ(1, asked) << "the loop is asked once until it publishes";
  EXPECT_EQ(6u, board.counts().stale);
  // Once the loop publishes, a later request asks afresh.
  board.publish("status", {{"n", 2}}, Clock::now());
  EXPECT_FALSE(board.wanted("status"));
  std::this_thread::sleep_for(2ms);
  std::thread loop = loop_answering(board, "status", 3);
  const auto a = board.answer("status", Clock::now(), ask);
  loop.join();
  ASSERT_TRUE(a);
  EXPECT_EQ(3, a->at("n"));
  EXPECT_EQ(2, asked);
  EXPECT_EQ(1u, board.counts().fresh);
}

// Built again at a round's end: `status` whenever it is older than max_age, `jobs` (a snapshot
// of every live job) only while somebody asks for it.
TEST(AnswerBoard, DueAgainWhenOldAndForJobsOnlyWhenAskedFor) {
  AnswerBoard board(1ms);
  EXPECT_FALSE(board.due("status", 0ms, std::nullopt));  // nothing published
  board.publish("status", {{"n", 1}}, Clock::now());
  board.publish("jobs", {{"n", 1}}, Clock::now());
  std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(board.due("status", 0ms, std::nullopt));
  EXPECT_FALSE(board.due("status", 1h, std::nullopt)) << "not old enough";
  EXPECT_FALSE(board.due("jobs", 0ms, 1h)) << "nobody asked";
  ASSERT_TRUE(board.answer("jobs", Clock::now(), [] {}));
  EXPECT_TRUE(board.due("jobs", 0ms, 1h));
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(board.due("jobs", 0ms, 1ms)) << "asked too long ago";
  board.publish("jobs", {{"n", 2}}, Clock::now());
  EXPECT_FALSE(board.due("jobs", 1s, 1h)) << "just built";
  EXPECT_FALSE(board.due("job", 0ms, std::nullopt));
}

// A build that began before a request arrived does not answer it, nor clear its wish: the loop
// is still asked for a later one (a round-end rebuild under way when a client came).
TEST(AnswerBoard, ABuildBegunBeforeARequestLeavesItWanted) {
  AnswerBoard board(5s);
  board.publish("status", {{"n", 1}}, Clock::now());
  const auto begun = Clock::now();  // the loop starts building n=2
  std::this_thread::sleep_for(2ms);
  std::atomic<int> asked{0};
  std::optional<json> a;
  std::thread client([&] { a = board.answer("status", Clock::now(), [&] { ++asked; }); });
  const auto until = Clock::now() + 10s;
  while (!board.wanted("status") && Clock::now() < until) std::this_thread::sleep_for(1ms);
  board.publish("status", {{"n", 2}}, begun);
  EXPECT_TRUE(board.wanted("status")) << "the request still wants a build begun after it came";
  board.publish("status", {{"n", 3}}, Clock::now());
  client.join();
  ASSERT_TRUE(a);
  EXPECT_EQ(3, a->at("n"));
  EXPECT_EQ(1, asked.load());
  EXPECT_FALSE(board.wanted("status"));
  EXPECT_EQ(1u, board.counts().fresh);
}
