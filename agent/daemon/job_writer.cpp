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
#include <map>
#include <string_view>

#include "exporters/json_report.hpp"

namespace iolens::daemon {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kJson = ".json", kDarshan = ".darshan";

/// The stem of a job's file (its name without ".json" or ".darshan"), "" if it is none: 16
/// characters of timestamp, '_', an id, then the suffix, as job_file_name makes them.
std::string record_stem(const std::string& n) {
  for (std::string_view suffix : {kJson, kDarshan}) {
    if (n.size() > 17 + suffix.size() && n[8] == 'T' && n[15] == 'Z' && n[16] == '_' &&
        n[0] != '.' && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      return n.substr(0, n.size() - suffix.size());
  }
  return "";
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

/// `bytes` as `dir/name`, through `dir/.tmp-name`, fsync(2) and rename(2).
Status write_atomically(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string tmp = dir + "/.tmp-" + name;
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return Status::Error("cannot write " + tmp + ": " + std::strerror(errno), errno);
  const bool ok = write_all(fd, bytes) && fsync(fd) == 0;
  const int e = errno;
  close(fd);
  const std::string final_path = dir + "/" + name;
  if (!ok || rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e2 = ok ? errno : e;
    unlink(tmp.c_str());
    return Status::Error("cannot write " + final_path + ": " + std::strerror(e2), e2);
  }
  return Status::Ok();
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

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
  // One entry per job: its record and its log, whichever are there.
  struct Job {
    std::vector<std::pair<std::string, uint64_t>> files;  // name, size
    uint64_t size = 0;
    int64_t mtime = 0;
  };
  std::map<std::string, Job> by_stem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string stem = record_stem(name);
    if (stem.empty()) continue;
    struct stat st {};
    if (lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    Job& job = by_stem[stem];
    job.files.emplace_back(name, static_cast<uint64_t>(st.st_size));
    job.size += static_cast<uint64_t>(st.st_size);
    job.mtime = std::max(job.mtime, static_cast<int64_t>(st.st_mtime));
  }
  std::vector<std::pair<std::string, Job>> jobs(by_stem.begin(), by_stem.end());
  for (auto& [stem, job] : jobs) std::sort(job.files.begin(), job.files.end());
  // Oldest written first (a long job's record, written last, is among the newest), then by
  // name (job start).
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
    return a.second.mtime < b.second.mtime;
  });
  uint64_t total = 0;
  for (const auto& [stem, job] : jobs) total += job.size;
  const std::string keep_stem = record_stem(keep);
  RotationResult r;
  for (const auto& [stem, job] : jobs) {
    const bool too_old = max_age_s > 0 && now_wall_s - job.mtime > static_cast<int64_t>(max_age_s);
    const bool too_big = max_bytes > 0 && total > max_bytes;
    if ((!too_old && !too_big) || (!keep_stem.empty() && stem == keep_stem)) continue;
    bool any = false;
    for (const auto& [name, size] : job.files) {
      if (unlink((dir + "/" + name).c_str()) != 0) continue;
      total -= size;
      r.removed.push_back(name);
      any = true;
    }
    r.removed_jobs += any;
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

JobWritten JobWriter::write(const std::string& name, const nlohmann::json& record,
                             const std::string* darshan_log) {
  // A stem neither a record nor a log has: a job's two files always share theirs.
  const std::string base = name.ends_with(kJson) ? name.substr(0, name.size() - kJson.size()) : name;
  std::string stem = base;
  for (int n = 1; (exists(dir_ + "/" + stem + std::string(kJson)) ||
                   exists(dir_ + "/" + stem + std::string(kDarshan))) && n < 1000;
       ++n)
    stem = base + "." + std::to_string(n);
  JobWritten w;
  if (darshan_log) {
    const std::string log_name = stem + std::string(kDarshan);
    w.darshan = write_atomically(dir_, log_name, *darshan_log);
    if (w.darshan) {
      ++darshan_written_;
      w.darshan_path = dir_ + "/" + log_name;
    } else {
      ++darshan_failed_;
    }
  }
  const std::string record_name = stem + std::string(kJson);
  w.record = write_atomically(dir_, record_name, exporters::dump_json(record) + "\n");
  if (!w.record) {
    ++failed_;
    return w;
  }
  ++written_;
  w.path = dir_ + "/" + record_name;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  rotated_ += rotate_records(dir_, max_bytes_, max_age_s_, now.tv_sec, record_name).removed_jobs;
  return w;
}

}  // namespace iolens::daemon
