// SPDX-License-Identifier: Apache-2.0
#include "daemon/state_saver.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "core/private_dir.hpp"
#include "daemon/state_file.hpp"

namespace iolens::daemon {
namespace {

int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace

StateSaved save_state_file(const nlohmann::json& state, int dir_fd, const char* tmp_name,
                           const char* name) {
  StateSaved r;
  const std::optional<std::vector<uint8_t>> encoded = encode_state(state);
  if (!encoded) {
    r.error = "cannot compress the state";
    r.finished_ns = mono_ns();
    return r;
  }
  const std::vector<uint8_t>& bytes = *encoded;
  // Created afresh (a file or link left at the temporary's name is removed, never written
  // through), then renamed over the state, all inside the checked state directory.
  const int fd = core::create_fresh(dir_fd, tmp_name, 0600);
  if (fd < 0) {
    r.err = errno;
    r.error = std::string("cannot create ") + tmp_name + ": " + std::strerror(r.err);
    r.finished_ns = mono_ns();
    return r;
  }
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  bool ok = off == bytes.size() && fsync(fd) == 0;
  r.err = ok ? 0 : errno ? errno : EIO;
  close(fd);
  if (ok && renameat(dir_fd, tmp_name, dir_fd, name) != 0) {
    ok = false;
    r.err = errno;
  }
  // The rename made durable too: after a power loss, an older state (whose final records the
  // daemon has since deleted from the kernel) must not come back.
  if (ok && fsync(dir_fd) != 0) {
    ok = false;
    r.err = errno;
  }
  r.ok = ok;
  if (!ok) r.error = std::strerror(r.err);
  r.bytes = ok ? bytes.size() : 0;
  r.finished_ns = mono_ns();
  return r;
}

StateSaver::StateSaver(int dir_fd, const char* tmp_name, const char* name)
    : dir_fd_(dir_fd), tmp_name_(tmp_name), name_(name), thread_([this] { run(); }) {}

StateSaver::~StateSaver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StateSaver::submit(nlohmann::json state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_ = std::move(state);
    working_ = true;
    result_.reset();
  }
  wake_.notify_all();
}

bool StateSaver::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return working_ || result_.has_value();
}

std::optional<StateSaved> StateSaver::take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (working_) return std::nullopt;
  std::optional<StateSaved> r = std::move(result_);
  result_.reset();
  return r;
}

void StateSaver::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return !working_; });
}

void StateSaver::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || queued_.has_value(); });
    if (!queued_) return;  // stopping, nothing left to save
    nlohmann::json state = std::move(*queued_);
    queued_.reset();
    lock.unlock();
    StateSaved r;
    try {
      r = save_state_file(state, dir_fd_, tmp_name_, name_);
    } catch (const std::exception& e) {  // not expected: said, never a dead thread
      r.error = std::string("cannot encode the state: ") + e.what();
      r.finished_ns = mono_ns();
    }
    state = nlohmann::json();  // freed here, not on the loop
    lock.lock();
    result_ = std::move(r);
    working_ = false;
    done_.notify_all();
  }
}

}  // namespace iolens::daemon
