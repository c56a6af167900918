// SPDX-License-Identifier: Apache-2.0
#include "control/closer.hpp"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace iolens::control {

struct Closer::State {
  std::size_t capacity;
  std::function<int(int)> close_fn;
  mutable std::mutex mu;
  mutable std::condition_variable cv;  // the queue changed, or stop
  std::deque<int> queue;
  bool closing = false;  // the thread is inside close(2) (counted in pending)
  bool stop = false;

  void run() {
    std::unique_lock lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopping, nothing left
      const int fd = queue.front();
      queue.pop_front();
      closing = true;
      lk.unlock();
      close_fn(fd);  // may wait for a FUSE server for ever: only this thread then
      lk.lock();
      closing = false;
      cv.notify_all();
    }
  }
  std::size_t pending_locked() const { return queue.size() + (closing ? 1 : 0); }
};

Closer::Closer(std::size_t capacity, std::function<int(int)> close_fn)
    : s_(std::make_shared<State>()) {
  s_->capacity = capacity;
  s_->close_fn = std::move(close_fn);
  auto s = s_;
  std::thread([s] { s->run(); }).detach();  // the thread holds `s` until it ends
}

Closer::~Closer() {
  wait_idle(kCloserStopWait);
  std::lock_guard lk(s_->mu);
  s_->stop = true;
  s_->cv.notify_all();
}

bool Closer::close(int fd) {
  if (fd < 0) return true;
  {
    std::lock_guard lk(s_->mu);
    if (s_->pending_locked() < s_->capacity) {
      s_->queue.push_back(fd);
      s_->cv.notify_all();
      return true;
    }
  }
  s_->close_fn(fd);
  return false;
}

std::size_t Closer::room() const {
  std::lock_guard lk(s_->mu);
  const std::size_t p = s_->pending_locked();
  return p < s_->capacity ? s_->capacity - p : 0;
}

std::size_t Closer::pending() const {
  std::lock_guard lk(s_->mu);
  return s_->pending_locked();
}

bool Closer::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lk(s_->mu);
  return s_->cv.wait_for(lk, timeout, [&] { return s_->pending_locked() == 0; });
}

}  // namespace iolens::control
