// SPDX-License-Identifier: Apache-2.0
// The board the control socket's front thread answers `status` and `jobs` from: fresh when the
// loop publishes within the wait, the last published (with its age) when the loop is busy, and
// a burst of requests waits at most one wait in all.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/answer_board.hpp"

using iolens::daemon::AnswerBoard;
using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(AnswerBoard, OnlyStatusAndJobsAndOnlyOncePublished) {
  AnswerBoard board(50ms);
  int asked = 0;
  const auto ask = [&] { ++asked; };
  // Nothing published yet: the loop answers (start-up), and nobody is told to wait.
  EXPECT_FALSE(board.answer("status", ask));
  EXPECT_EQ(0, asked);
  EXPECT_FALSE(board.wanted());
  board.publish({{"n", 1}}, {{"jobs", json::array({"a"})}});
  EXPECT_FALSE(board.answer("job", ask));
  EXPECT_FALSE(board.answer("run", ask));
  EXPECT_FALSE(board.answer("", ask));
  EXPECT_EQ(0, asked);
  EXPECT_FALSE(board.wanted());
}

TEST(AnswerBoard, FreshWhenTheLoopPublishesWithinTheWait) {
  AnswerBoard board(5s);  // long: the answer must come from the publish, not the timeout
  board.publish({{"n", 1}}, {{"jobs", json::array()}});
  std::atomic<int> asked{0};
  // The loop: publishes n=2 once a request wants it.
  std::thread loop([&] {
    while (!board.wanted()) std::this_thread::sleep_for(1ms);
    board.publish({{"n", 2}}, {{"jobs", json::array({"j"})}});
  });
  const auto start = Clock::now();
  const auto a = board.answer("status", [&] { ++asked; });
  loop.join();
  ASSERT_TRUE(a);
  EXPECT_EQ(2, a->at("n"));
  EXPECT_LT(Clock::now() - start, 4s) << "waited for the timeout, not the publish";
  EXPECT_TRUE(a->contains("age_ms"));
  EXPECT_EQ(1, asked.load());
  EXPECT_FALSE(board.wanted());  // the publish answered it
  EXPECT_EQ(1u, board.counts().fresh);
  EXPECT_EQ(0u, board.counts().stale);
}

TEST(AnswerBoard, TheLastPublishedWithItsAgeWhenTheLoopIsBusy) {
  AnswerBoard board(60ms);
  board.publish({{"n", 1}}, {{"jobs", json::array({"a", "b"})}});
  int asked = 0;
  const auto start = Clock::now();
  const auto a = board.answer("jobs", [&] { ++asked; });
  const auto waited = Clock::now() - start;
  ASSERT_TRUE(a);
  EXPECT_EQ(json::array({"a", "b"}), a->at("jobs"));
  // Its age is at least the wait: published before the request, nothing since.
  EXPECT_GE(a->at("age_ms").get<uint64_t>(), 60u);
  EXPECT_GE(waited, 60ms);
  EXPECT_EQ(1, asked);
  EXPECT_TRUE(board.wanted());  // still asked: the loop publishes when it comes back
  const auto c = board.counts();
  EXPECT_EQ(0u, c.fresh);
  EXPECT_EQ(1u, c.stale);
  EXPECT_GE(c.oldest_stale_ms, 60u);
}

TEST(AnswerBoard, ABurstWaitsOneWaitInAll) {
  AnswerBoard board(300ms);
  board.publish({{"n", 1}}, {{"jobs", json::array()}});
  int asked = 0;
  const auto ask = [&] { ++asked; };
  ASSERT_TRUE(board.answer("status", ask));  // waits the whole 300 ms: the loop is busy
  // The loop is still busy: the next requests find the first one's wait over and do not wait
  // again (a front thread answering clients one after the other would otherwise take 300 ms
  // for each). Loosely: well under one wait for all five.
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) {
    const auto a = board.answer(i % 2 ? "jobs" : "status", ask);
    ASSERT_TRUE(a);
  }
  EXPECT_LT(Clock::now() - start, 150ms);
  EXPECT_EQ(1, asked) << "the loop is asked once until it publishes";
  EXPECT_EQ(6u, board.counts().stale);
  // Once the loop publishes, a request asks afresh.
  board.publish({{"n", 2}}, {{"jobs", json::array()}});
  EXPECT_FALSE(board.wanted());
  std::thread loop([&] {
    while (!board.wanted()) std::this_thread::sleep_for(1ms);
    board.publish({{"n", 3}}, {{"jobs", json::array()}});
  });
  const auto a = board.answer("status", ask);
  loop.join();
  ASSERT_TRUE(a);
  EXPECT_EQ(3, a->at("n"));
  EXPECT_EQ(2, asked);
  EXPECT_EQ(1u, board.counts().fresh);
}

// Published again at a round's end only while clients ask: a stale answer is then at most about
// a second older than the loop's long piece of work, and an idle node builds no answers.
TEST(AnswerBoard, DueAgainOnlyWhenOldAndAskedFor) {
  AnswerBoard board(1ms);
  EXPECT_FALSE(board.due(0ms, 1h));  // nothing published
  board.publish({{"n", 1}}, {{"jobs", json::array()}});
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(board.due(0ms, 1h)) << "nobody asked";
  ASSERT_TRUE(board.answer("status", [] {}));
  EXPECT_TRUE(board.due(0ms, 1h));
  EXPECT_FALSE(board.due(1h, 1h)) << "not old enough";
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(board.due(0ms, 1ms)) << "asked too long ago";
  board.publish({{"n", 2}}, {{"jobs", json::array()}});
  EXPECT_FALSE(board.due(1s, 1h)) << "just published";
}
