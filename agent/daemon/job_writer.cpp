// SPDX-License-Identifier: Apache-2.0
#include "daemon/job_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "exporters/json_report.hpp"

namespace iolens::daemon {
namespace fs = std::filesystem;
namespace {

bool is_record_name(const std::string& n) {
  // 16 characters of timestamp, '_', an id, ".json": what job_file_name makes.
  return n.size() > 22 && n[8] == 'T' && n[15] == 'Z' && n[16] == '_' &&
         n.compare(n.size() - 5, 5, ".json") == 0 && n[0] != '.';
}

bool write_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string job_file_name(const std::string& job_id, int64_t start_wall_ns) {
  const time_t secs = static_cast<time_t>(start_wall_ns / 1000000000LL);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  std::string id;
  for (unsigned char c : job_id)
    id += (std::isalnum(c) || c == '.' || c == '-' || c == '_') && c < 0x80 ? static_cast<char>(c)
                                                                           : '_';
  if (id.empty() || id[0] == '.') id.insert(0, "_");
  if (id.size() > 200) id.resize(200);  // NAME_MAX is 255 with the stamp and suffixes
  return std::string(stamp) + "_" + id + ".json";
}

RotationResult rotate_records(const std::string& dir, uint64_t max_bytes, uint64_t max_age_s,
                              int64_t now_wall_s, const std::string& keep) {
  struct Entry {
    std::string name;
    uint64_t size;
    int64_t mtime;
  };
  std::vector<Entry> entries;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_record_name(name)) continue;
    struct stat st {};
    if (lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    entries.push_back({name, static_cast<uint64_t>(st.st_size), static_cast<int64_t>(st.st_mtime)});
  }
  // Oldest written first (a long job's record, written last, is among the newest), then by
  // name (job start).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.name < b.name;
  });
  uint64_t total = 0;
  for (const auto& e : entries) total += e.size;
  RotationResult r;
  for (const auto& e : entries) {
    const bool too_old = max_age_s > 0 && now_wall_s - e.mtime > static_cast<int64_t>(max_age_s);
    const bool too_big = max_bytes > 0 && total > max_bytes;
    if ((!too_old && !too_big) || e.name == keep) continue;
    if (unlink((dir + "/" + e.name).c_str()) == 0) {
      total -= e.size;
      r.removed.push_back(e.name);
    }
  }
  r.kept_bytes = total;
  return r;
}

JobWriter::JobWriter(std::string dir, uint64_t max_bytes, uint64_t max_age_s)
    : dir_(std::move(dir)), max_bytes_(max_bytes), max_age_s_(max_age_s) {}

Status JobWriter::prepare() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::Error("cannot create output directory " + dir_ + ": " + ec.message());
  if (!fs::is_directory(dir_, ec))
    return Status::Error("output directory " + dir_ + " is not a directory");
  chmod(dir_.c_str(), 0750);
  if (access(dir_.c_str(), W_OK | X_OK) != 0)
    return Status::Error("cannot write to output directory " + dir_ + ": " + std::strerror(errno));
  return Status::Ok();
}

Status JobWriter::write(const std::string& name, const nlohmann::json& record,
                        std::string& path_out) {
  std::string final_path = dir_ + "/" + name;
  for (int n = 1; access(final_path.c_str(), F_OK) == 0 && n < 1000; ++n)
    final_path = dir_ + "/" + name.substr(0, name.size() - 5) + "." + std::to_string(n) + ".json";
  const std::string tmp = dir_ + "/.tmp-" + name;
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    ++failed_;
    return Status::Error("cannot write " + tmp + ": " + std::strerror(errno), errno);
  }
  const std::string text = exporters::dump_json(record) + "\n";
  const bool ok = write_all(fd, text) && fsync(fd) == 0;
  const int e = errno;
  close(fd);
  if (!ok || rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e2 = ok ? errno : e;
    unlink(tmp.c_str());
    ++failed_;
    return Status::Error("cannot write " + final_path + ": " + std::strerror(e2), e2);
  }
  ++written_;
  path_out = final_path;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  rotated_ += rotate_records(dir_, max_bytes_, max_age_s_, now.tv_sec,
                             fs::path(final_path).filename().string())
                  .removed.size();
  return Status::Ok();
}

}  // namespace iolens::daemon
