// SPDX-License-Identifier: Apache-2.0
// A live job's `job` pages (docs/control.md#live-jobs): cut from one snapshot, which answers
// its own job's pages while they name it or while it is young, and new snapshots bounded to a
// share of the loop's time. Times are given, never read: the rules are checked exactly.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "control/protocol.hpp"
#include "daemon/job_pages.hpp"

using iolens::control::BadRequest;
using iolens::daemon::JobPages;
using iolens::daemon::LivePages;
using iolens::daemon::parse_page_request;
using nlohmann::json;
using namespace std::chrono_literals;
using Clock = LivePages::Clock;

namespace {

/// A snapshot of `files` files of one process, one row each, made at `at`.
std::shared_ptr<const JobPages> pages_of(const std::string& id, uint64_t serial, Clock::time_point at,
                                         std::size_t files = 0, std::size_t max_rows = 200) {
  iolens::core::RunSnapshot snap;
  iolens::core::ProcessSnapshot p;
  p.pid = 7;
  snap.processes.push_back(p);
  for (std::size_t i = 0; i < files; ++i) {
    iolens::core::FileSnapshot f;
    f.pid = 7;
    f.dev = 1;
    f.ino = i + 1;
    f.path = "/data/" + std::to_string(i);
    snap.files.push_back(f);
  }
  iolens::exporters::RecordEdits edits;
  edits.head = [](json& j) { j["schema"] = "iolens.job/1"; };
  return std::make_shared<const JobPages>(id, serial, std::move(snap), std::move(edits), "v", at,
                                          max_rows);
}

}  // namespace

TEST(JobPages, PagesHoldAtMostTheirRowsAndNameTheirSnapshot) {
  const Clock::time_point t0{};
  const auto p = pages_of("j", 9, t0, 450, 200);
  json seen = json::array();
  std::size_t offset = 0;
  int pages = 0;
  for (;;) {
    // Asked for 1,000: each page holds 200 at most, and says so (limit), and where to go on.
    const json page = p->page(offset, 1000, t0 + 1500ms);
    ++pages;
    EXPECT_EQ(page["schema"], "iolens.job/1");  // the edits applied
    EXPECT_EQ(page["page"]["limit"], 200u);
    EXPECT_EQ(page["page"]["snapshot"], 9u);
    EXPECT_EQ(page["page"]["age_ms"], 1500);
    EXPECT_EQ(page["page"]["files"], 450u);
    EXPECT_EQ(page["page"]["by_file"], 450u);
    EXPECT_LE(page["files"].size(), 200u);
    EXPECT_EQ(page["files"].size(), page["by_file"].size());
    // Its one process in the first page only; coverage from every process on every page.
    EXPECT_EQ(page["processes"].size(), offset == 0 ? 1u : 0u);
    for (const auto& f : page["files"]) seen.push_back(f["path"]);
    if (page["page"]["next"].is_null()) break;
    offset = page["page"]["next"].get<std::size_t>();
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 450u);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], "/data/" + std::to_string(i));
}

TEST(LivePages, TheHeldSnapshotAnswersItsJobWhileYoungOrNamed) {
  LivePages live;  // reuse: max(1 s, 20 x its time); budget: 1/20
  const Clock::time_point t0 = Clock::time_point{} + 1h;
  EXPECT_FALSE(live.usable("a", std::nullopt, t0));  // nothing held
  EXPECT_EQ(live.wait_for_new(t0), Clock::duration::zero());
  const uint64_t s1 = live.next_serial();
  EXPECT_EQ(live.next_serial(), s1 + 1);  // counting up (from the wall clock, not from 1)
  // Taken from t0 in 10 ms: young for 1 s (20 x 10 ms is less).
  EXPECT_FALSE(live.hold(pages_of("a", s1, t0), 10ms, t0 + 10ms));
  EXPECT_TRUE(live.usable("a", std::nullopt, t0 + 999ms));
  EXPECT_FALSE(live.usable("a", std::nullopt, t0 + 1s));  // a new request: a new snapshot
  EXPECT_TRUE(live.usable("a", s1, t0 + 20s));             // pages that name it: however old
  EXPECT_FALSE(live.usable("a", s1 + 1, t0 + 100ms));      // another snapshot's: gone
  EXPECT_FALSE(live.usable("b", std::nullopt, t0 + 100ms));  // another job's
  EXPECT_FALSE(live.usable("b", s1, t0 + 100ms));
  EXPECT_EQ(live.counts().pages_held, 2u);
  EXPECT_EQ(live.counts().snapshots, 1u);
  EXPECT_EQ(live.counts().held_rows, 1u);  // its one process
  EXPECT_EQ(live.counts().last_snapshot_us, 10000u);

  // A big one: 500 ms, young for 10 s.
  const auto t1 = t0 + 2s;
  const auto old = live.hold(pages_of("a", live.next_serial(), t1, 30), 500ms, t1 + 500ms);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->serial(), s1);  // handed back to be freed off the loop
  EXPECT_TRUE(live.usable("a", std::nullopt, t1 + 9999ms));
  EXPECT_FALSE(live.usable("a", std::nullopt, t1 + 10s));
  EXPECT_EQ(live.counts().held_rows, 31u);
}

TEST(LivePages, NewSnapshotsTakeAtMostTheBudgetsShareOfTheLoop) {
  LivePages live;
  const Clock::time_point t0 = Clock::time_point{} + 1h;
  // 500 ms ending at t0 + 500 ms: the next no sooner than 19 x 500 ms later (1/20 of the time).
  live.hold(pages_of("a", live.next_serial(), t0), 500ms, t0 + 500ms);
  EXPECT_EQ(live.wait_for_new(t0 + 500ms), 9500ms);
  EXPECT_EQ(live.wait_for_new(t0 + 9s), 1000ms);
  EXPECT_EQ(live.wait_for_new(t0 + 10s), Clock::duration::zero());
  EXPECT_EQ(live.wait_for_new(t0 + 11s), Clock::duration::zero());
  // Job a's own new requests need none meanwhile: its snapshot is young until the budget
  // allows a new one (both at t0 + 10 s).
  EXPECT_TRUE(live.usable("a", std::nullopt, t0 + 10s - 1ns));
  // A tiny one frees the budget at once, nearly.
  live.hold(pages_of("b", live.next_serial(), t0 + 10s), 1ms, t0 + 10s + 1ms);
  EXPECT_EQ(live.wait_for_new(t0 + 10s + 1ms), 19ms);
  live.count_retry(false);
  live.count_retry(true);
  live.count_retry(true);
  EXPECT_EQ(live.counts().retry_busy, 1u);
  EXPECT_EQ(live.counts().retry_gone, 2u);
  EXPECT_EQ(live.counts().snapshots, 2u);
}

TEST(LivePages, OneBeingPagedIsNotReplacedForAWhile) {
  LivePages live;  // in use: a page that named it within 1 s; protected for 30 s at most
  const Clock::time_point t0 = Clock::time_point{} + 1h;
  const uint64_t s = live.next_serial();
  live.hold(pages_of("a", s, t0), 1ms, t0 + 1ms);
  // Nobody pages it (a one-page answer): only the budget's 19 ms.
  EXPECT_EQ(live.wait_for_new(t0 + 1ms), 19ms);
  EXPECT_TRUE(live.usable("a", std::nullopt, t0 + 10ms));  // a new request reusing it: the same
  EXPECT_EQ(live.wait_for_new(t0 + 20ms), Clock::duration::zero());
  // A client reads page after page: a new snapshot waits until a second after its last page.
  EXPECT_TRUE(live.usable("a", s, t0 + 100ms));
  EXPECT_EQ(live.wait_for_new(t0 + 100ms), 1000ms);
  EXPECT_EQ(live.wait_for_new(t0 + 600ms), 500ms);
  EXPECT_TRUE(live.usable("a", s, t0 + 29500ms));
  // ... but not past 30 s from when it was taken.
  EXPECT_EQ(live.wait_for_new(t0 + 29500ms), 500ms);
  EXPECT_EQ(live.wait_for_new(t0 + 30s), Clock::duration::zero());
  // Job a's own new request meanwhile: its held snapshot, however old, rather than a refusal.
  EXPECT_FALSE(live.usable("a", std::nullopt, t0 + 29600ms));  // past its reuse window
  EXPECT_TRUE(live.usable("a", std::nullopt, t0 + 29600ms, true));
  EXPECT_FALSE(live.usable("b", std::nullopt, t0 + 29600ms, true));
  // A new one is not being paged yet.
  live.hold(pages_of("b", live.next_serial(), t0 + 31s), 1ms, t0 + 31s);
  EXPECT_EQ(live.wait_for_new(t0 + 31s + 19ms), Clock::duration::zero());
}

TEST(LivePages, DroppedWhenItsJobLeavesOrNobodyPagesIt) {
  LivePages::Policy policy;
  policy.idle_drop = 30s;
  LivePages live(policy);
  const Clock::time_point t0 = Clock::time_point{} + 1h;
  const uint64_t s = live.next_serial();
  live.hold(pages_of("a", s, t0), 1ms, t0);
  EXPECT_FALSE(live.drop("b", t0));       // another job left: kept
  EXPECT_FALSE(live.drop("", t0 + 29s));  // paged within 30 s: kept
  EXPECT_TRUE(live.usable("a", s, t0 + 29s));
  EXPECT_FALSE(live.drop("", t0 + 58s));  // the last page at 29 s
  const auto gone = live.drop("", t0 + 59s);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->id(), "a");
  EXPECT_FALSE(live.usable("a", s, t0 + 59s));
  EXPECT_EQ(live.counts().held_rows, 0u);

  live.hold(pages_of("a", live.next_serial(), t0 + 60s), 1ms, t0 + 60s);
  EXPECT_TRUE(live.drop("a", t0 + 60s));  // its job left the table
  EXPECT_FALSE(live.usable("a", std::nullopt, t0 + 60s));

  // Before a new one is taken, whatever is held goes.
  live.hold(pages_of("a", live.next_serial(), t0 + 70s), 1ms, t0 + 70s);
  EXPECT_EQ(live.counts().held_rows, 1u);
  EXPECT_TRUE(live.release());
  EXPECT_EQ(live.counts().held_rows, 0u);
  EXPECT_FALSE(live.usable("a", std::nullopt, t0 + 70s));
  EXPECT_FALSE(live.release());
}

TEST(JobPages, RequestsAreCheckedMemberByMember) {
  const auto r = parse_page_request({{"cmd", "job"}, {"id", "k8s/p"}});
  EXPECT_EQ(r.id, "k8s/p");
  EXPECT_EQ(r.offset, 0u);
  EXPECT_EQ(r.limit, iolens::control::kJobPageDefault);
  EXPECT_FALSE(r.snapshot);
  const auto c = parse_page_request(
      {{"cmd", "job"}, {"id", "x"}, {"offset", 400u}, {"limit", 10u}, {"snapshot", 3u}});
  EXPECT_EQ(c.offset, 400u);
  EXPECT_EQ(c.limit, 10u);
  EXPECT_EQ(c.snapshot, 3u);
  for (const json& bad : {json{{"offset", -1}}, json{{"limit", 0u}}, json{{"limit", 10001u}},
                          json{{"limit", "5"}}, json{{"snapshot", -2}}, json{{"snapshot", 1.5}}}) {
    json req = {{"cmd", "job"}, {"id", "x"}};
    req.update(bad);
    EXPECT_THROW(parse_page_request(req), BadRequest) << bad;
  }
}
