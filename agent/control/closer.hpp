// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Closes descriptors off the daemon's loop. close(2) of a file on a FUSE file system waits,
/// without a timeout, for its server's answer to FLUSH, and a client may pass such a file with
/// any request: the loop hands the descriptors it does not keep to this one thread instead.

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace iolens::control {

/// Descriptors waiting for the closer at most (docs/control.md, limits). When that many are
/// waiting its thread is stuck in a close, and the server takes no more descriptors.
inline constexpr std::size_t kCloserCapacity = 64;

/// How long a stopping daemon waits for the closer to close what it holds (as for a capture's
/// writer, kCaptureStopWait); then the thread is left behind and the daemon exits.
inline constexpr std::chrono::milliseconds kCloserStopWait{5000};

class Closer {
 public:
  /// `close_fn`: ::close; tests pass one that blocks, as a FUSE close does.
  explicit Closer(std::size_t capacity = kCloserCapacity,
                  std::function<int(int)> close_fn = ::close);
  /// Waits up to kCloserStopWait for the queue to be closed, then leaves the thread behind (it
  /// holds its own state and ends whenever its close returns).
  ~Closer();
  Closer(const Closer&) = delete;
  Closer& operator=(const Closer&) = delete;

  /// Queues `fd` to be closed; takes it either way. Never blocks. False when the queue was full:
  /// the descriptor is then closed here after all (callers check room() first; see server.cpp).
  bool close(int fd);
  /// Descriptors that may still be queued without blocking the caller.
  std::size_t room() const;
  /// Queued or being closed now.
  std::size_t pending() const;
  /// True once everything queued is closed, within `timeout`.
  bool wait_idle(std::chrono::milliseconds timeout) const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace iolens::control
