// SPDX-License-Identifier: Apache-2.0
#include "capture/async_output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

namespace iolens::capture {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_writers{0};  // writer threads not ended, abandoned ones included

struct AsyncOutput::Shared {
  OutputLimits limits;
  int fd = -1;        // owned by the writer thread, which closes it
  int wake_fd = -1;   // eventfd: stop() wakes a writer waiting in poll()
  bool regular = false;
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> queue;
  uint64_t queued = 0, written = 0;
  Clock::time_point progress;  // last byte taken, or when bytes started waiting
  bool closed = false, stop = false, done = false, stalled = false;
  Status error;

  ~Shared() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  /// With `m` held: the writer stops (wakes from poll() if it waits there). The bytes still
  /// queued will never be written: their memory goes now, not when a writer stuck in a FUSE
  /// write(2) ends (`queued` keeps their count for the status).
  void request_stop() {
    stop = true;
    std::deque<std::string>().swap(queue);
    cv.notify_all();
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof(one));
  }
  /// With `m` held.
  void fail(Status s, bool stall) {
    if (error.ok) {
      error = std::move(s);
      stalled = stall;
    }
    request_stop();
  }

  /// Writes `chunk` whole; false when stopped or failed.
  bool write_chunk(const std::string& chunk) {
    std::size_t off = 0;
    while (off < chunk.size()) {
      const ssize_t w = ::write(fd, chunk.data() + off, chunk.size() - off);
      if (w > 0) {
        off += static_cast<std::size_t>(w);
        std::lock_guard lk(m);
        written += static_cast<uint64_t>(w);
        queued -= static_cast<uint64_t>(w);
        progress = Clock::now();
        if (stop) return false;
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // A pipe that is full: wait for room or for stop(); the loop declares the stall.
        pollfd fds[2] = {{fd, POLLOUT, 0}, {wake_fd, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) {
          const int e = errno;
          std::lock_guard lk(m);
          fail(Status::Error(std::string("poll on the output: ") + std::strerror(e), e), false);
          return false;
        }
        std::lock_guard lk(m);
        if (stop) return false;
        continue;
      }
      const int e = w < 0 ? errno : EIO;
      std::lock_guard lk(m);
      fail(Status::Error(std::string("cannot write the output: ") + std::strerror(e), e), false);
      return false;
    }
    return true;
  }

  void run() {
    for (;;) {
      std::string chunk;
      {
        std::unique_lock lk(m);
        cv.wait(lk, [&] { return stop || closed || !queue.empty(); });
        if (stop) break;
        if (queue.empty()) {  // closed, all written
          lk.unlock();
          // A regular file is synced so that a complete trailer means a complete file on disk.
          if (regular && fsync(fd) != 0) {
            const int e = errno;
            lk.lock();
            fail(Status::Error(std::string("cannot sync the output: ") + std::strerror(e), e),
                 false);
          }
          break;
        }
        chunk = std::move(queue.front());
        queue.pop_front();
      }
      if (!write_chunk(chunk)) break;
    }
    const int e = ::close(fd) == 0 ? 0 : errno;
    std::lock_guard lk(m);
    if (e != 0 && e != EINTR)
      fail(Status::Error(std::string("cannot close the output: ") + std::strerror(e), e), false);
    done = true;
    cv.notify_all();
  }
};

OutputKind output_kind(int fd) {
  struct statx stx {};
  if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) != 0)
    return OutputKind::Other;
  if (S_ISREG(stx.stx_mode)) return OutputKind::Regular;
  if (S_ISFIFO(stx.stx_mode)) return OutputKind::Pipe;
  return OutputKind::Other;
}

std::unique_ptr<AsyncOutput> AsyncOutput::start(int fd, const OutputLimits& limits,
                                                Status& error) {
  auto s = std::make_shared<Shared>();
  s->limits = limits;
  s->fd = fd;
  s->regular = output_kind(fd) == OutputKind::Regular;
  s->progress = Clock::now();
  s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd < 0) {
    error = Status::Error(std::string("eventfd: ") + std::strerror(errno), errno);
    ::close(fd);
    return nullptr;
  }
  if (!s->regular) {
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
      error = Status::Error(std::string("cannot make the output non-blocking: ") +
                            std::strerror(errno), errno);
      ::close(fd);
      return nullptr;
    }
  }
  try {
    ++g_writers;
    std::thread([s] {
      s->run();
      --g_writers;
    }).detach();  // the thread holds `s` until it ends
  } catch (const std::system_error& e) {
    --g_writers;
    error = Status::Error(std::string("cannot start the output's writer: ") + e.what(),
                          e.code().value());
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<AsyncOutput>(new AsyncOutput(std::move(s)));
}

AsyncOutput::~AsyncOutput() { abandon(); }

Status AsyncOutput::push(std::string_view bytes) {
  std::lock_guard lk(s_->m);
  if (!s_->error.ok) return s_->error;
  if (s_->closed) return Status::Error("the output is closed already", EBADF);
  if (bytes.empty()) return Status::Ok();
  if (s_->queued + bytes.size() > s_->limits.max_queued_bytes) {
    s_->fail(Status::Error("output stalled: " + std::to_string(s_->queued) +
                               " bytes waiting for the output, which took " +
                               std::to_string(s_->written) + " so far (at most " +
                               std::to_string(s_->limits.max_queued_bytes) + " may wait)",
                           EAGAIN),
             true);
    return s_->error;
  }
  if (s_->queued == 0) s_->progress = Clock::now();  // the wait starts now
  s_->queue.emplace_back(bytes);
  s_->queued += bytes.size();
  s_->cv.notify_all();
  return Status::Ok();
}

void AsyncOutput::close() {
  std::lock_guard lk(s_->m);
  if (s_->queued == 0) s_->progress = Clock::now();  // the sync's wait starts now
  s_->closed = true;
  s_->cv.notify_all();
}

OutputState AsyncOutput::check() {
  std::lock_guard lk(s_->m);
  // Waiting bytes, or a close whose sync has not come back: either way the output owes us.
  const bool owing = s_->queued > 0 || (s_->closed && !s_->done);
  if (!s_->done && s_->error.ok && owing &&
      Clock::now() - s_->progress >= s_->limits.stall_timeout) {
    const long long ms = s_->limits.stall_timeout.count();
    s_->fail(Status::Error("output stalled: it took no bytes for " +
                               (ms % 1000 ? std::to_string(ms) + " ms" :
                                            std::to_string(ms / 1000) + " s") + " (" +
                               std::to_string(s_->queued) + " bytes waiting, " +
                               std::to_string(s_->written) + " taken so far)",
                           ETIMEDOUT),
             true);
  }
  OutputState st;
  st.written = s_->written;
  st.queued = s_->queued;
  st.done = s_->done;
  st.stalled = s_->stalled;
  st.error = s_->error;
  return st;
}

int AsyncOutput::writers_alive() { return g_writers.load(); }

bool AsyncOutput::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lk(s_->m);
  return s_->cv.wait_for(lk, timeout, [&] { return s_->done; });
}

void AsyncOutput::abandon() {
  std::lock_guard lk(s_->m);
  if (!s_->done && !s_->stop) s_->request_stop();
}

}  // namespace iolens::capture
