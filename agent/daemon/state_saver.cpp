// SPDX-License-Identifier: Apache-2.0
#include "daemon/state_saver.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "core/crash_point.hpp"
#include "core/heap.hpp"
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
  // Created afresh (a file or link left at the temporary's name is removed, never written
  // through), then renamed over the state, all inside the checked state directory.
  const int fd = core::create_fresh(dir_fd, tmp_name, 0600);
  if (fd < 0) {
    r.err = errno;
    r.error = std::string("cannot create ") + tmp_name + ": " + std::strerror(r.err);
    r.finished_ns = mono_ns();
    return r;
  }
  // Written as it is encoded (write_state): the encoded state is never held whole.
  uint64_t written = 0;
  int write_err = 0;
  auto to_file = [&](std::string_view piece) {
    if (!core::write_all(fd, piece)) {
      write_err = errno;
      return false;
    }
    written += piece.size();
    return true;
  };
  std::string why;
  bool encoded = false;
  try {
    encoded = write_state(state, to_file, &why);
  } catch (const std::exception& e) {  // bad_alloc: the descriptor and temporary not left behind
    why = std::string("cannot encode the state: ") + e.what();
  }
  errno = 0;
  bool ok = encoded && fsync(fd) == 0;
  r.err = ok ? 0 : write_err ? write_err : errno ? errno : EIO;
  if (!encoded && !write_err) r.error = why.empty() ? "cannot encode the state" : why;
  close(fd);
  if (!encoded) unlinkat(dir_fd, tmp_name, 0);  // a partial file: never renamed, not kept
  if (ok) core::crash_point("state_written");
  if (ok && renameat(dir_fd, tmp_name, dir_fd, name) != 0) {
    ok = false;
    r.err = errno;
  }
  if (ok) core::crash_point("state_renamed");
  // The rename made durable too: after a power loss, an older state (whose final records the
  // daemon has since deleted from the kernel) must not come back.
  if (ok && fsync(dir_fd) != 0) {
    ok = false;
    r.err = errno;
  }
  r.ok = ok;
  if (!ok && r.error.empty()) r.error = std::strerror(r.err);
  r.bytes = ok ? written : 0;
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

std::map<std::string, std::vector<uint8_t>> take_blob_buffers(nlohmann::json& state) {
  std::map<std::string, std::vector<uint8_t>> out;
  if (!state.is_object() || !state.contains("table")) return out;
  nlohmann::json& table = state["table"];
  if (!table.is_object() || !table.contains("jobs") || !table["jobs"].is_array()) return out;
  for (nlohmann::json& job : table["jobs"]) {
    if (!job.is_object() || !job.contains("recorder") || !job["recorder"].is_binary() ||
        !job.contains("id") || !job["id"].is_string())
      continue;
    std::vector<uint8_t>& b = job["recorder"].get_binary();  // the container itself
    // Kept only near its blob's size (save_into reserves what the blob needs: a buffer of a
    // job that since shrank would hold its old size for nothing).
    if (b.capacity() > b.size() + b.size() / 2 + (64 << 10)) continue;
    std::vector<uint8_t>& kept = out[job["id"].get<std::string>()];  // the first of an id
    if (kept.capacity() > 0) continue;
    kept = std::move(b);
    kept.clear();
  }
  return out;
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
    r.buffers = take_blob_buffers(state);
    state = nlohmann::json();  // freed here, not on the loop
    // And given back when it was big (a big job's state is tens of MB), at most once a minute:
    // the trim holds each arena's lock while it gives pages back, the loop's too, and the
    // loop's next gathering takes the pages again.
    if (r.bytes >= kTrimAfterBytes && (last_trim_ns_ == 0 || r.finished_ns - last_trim_ns_ >= kTrimEveryNs)) {
      core::heap_release();
      last_trim_ns_ = mono_ns();
    }
    lock.lock();
    result_ = std::move(r);
    working_ = false;
    done_.notify_all();
  }
}

}  // namespace iolens::daemon
