// SPDX-License-Identifier: Apache-2.0
// The closer's queue bound, with a close function that blocks as close(2) of a FUSE file whose
// server never answers FLUSH does.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "control/closer.hpp"

using iolens::control::Closer;

namespace {

struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<int> closed;
  int close(int fd) {
    std::unique_lock lk(mu);
    if (fd == 100) cv.wait(lk, [&] { return open; });  // the stuck one
    closed.push_back(fd);
    return 0;
  }
  void release() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(ControlCloser, QueueBoundedWhileACloseIsStuck) {
  Gate gate;
  {
    Closer closer(4, [&](int fd) { return gate.close(fd); });
    EXPECT_EQ(4u, closer.room());
    EXPECT_TRUE(closer.close(100));  // blocks the thread
    EXPECT_TRUE(closer.close(101));
    EXPECT_TRUE(closer.close(102));
    EXPECT_TRUE(closer.close(103));
    EXPECT_EQ(0u, closer.room());
    EXPECT_EQ(4u, closer.pending());
    EXPECT_FALSE(closer.wait_idle(std::chrono::milliseconds(50)));
    // Full: refused (closed by the caller, here with the same function: 104 does not block).
    EXPECT_FALSE(closer.close(104));
    EXPECT_EQ(4u, closer.pending());
    gate.release();
    EXPECT_TRUE(closer.wait_idle(std::chrono::seconds(30)));
    EXPECT_EQ(4u, closer.room());
    EXPECT_TRUE(closer.close(105));
    EXPECT_TRUE(closer.wait_idle(std::chrono::seconds(30)));
  }
  EXPECT_EQ((std::vector<int>{104, 100, 101, 102, 103, 105}), gate.closed);
}

}  // namespace
