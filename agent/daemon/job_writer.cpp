// SPDX-License-Identifier: Apache-2.0
#include "daemon/job_writer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>

#include "core/clock.hpp"
#include "core/crash_point.hpp"
#include "core/private_dir.hpp"
#include "core/zstd_stream.hpp"
#include "exporters/json_report.hpp"

namespace iolens::daemon {
namespace {

constexpr std::string_view kJson = ".json", kJsonZst = ".json.zst", kDarshan = ".darshan";
/// zstd level of compressed records: at 3 the demo's 20 MB record becomes 0.63 MB and a
/// 50,000-file job's 338 MB 9.1 MB (bench/README.md "Compressed job records"), on the record
/// writer's thread; higher levels cost more time for little.
constexpr int kRecordZstdLevel = 3;

/// The stem of a job's file (its name without ".json", ".json.zst" or ".darshan"), "" if it is
/// none: 16 characters of timestamp, '_', an id, then the suffix, as job_file_name makes them.
std::string record_stem(const std::string& n) {
  for (std::string_view suffix : {kJson, kJsonZst, kDarshan}) {
    if (n.size() > 17 + suffix.size() && n[8] == 'T' && n[15] == 'Z' && n[16] == '_' &&
        n[0] != '.' && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      return n.substr(0, n.size() - suffix.size());
  }
  return "";
}

/// The extended attribute that names the job a record or log is of (JobWriter::write).
constexpr const char* kIdentityXattr = "user.iolens.job";

/// The crash points a file's writing passes (core/crash_point.hpp).
struct FilePoints {
  const char* written;
  const char* renamed;
};
constexpr FilePoints kRecordPoints{"record_written", "record_renamed"};
constexpr FilePoints kLogPoints{"darshan_written", "darshan_renamed"};

/// `bytes` as `name` in `dir_fd` (whose path is `dir`, for messages), through `.tmp-name`
/// (created afresh: a stale file or link there is removed, never written through), fsync(2) and
/// a rename that never replaces: an existing `name` is left as it is and the error's errno is
/// EEXIST (the caller takes the next free name). The temporary is flock'd from its creation to
/// its rename (a start removes only the temporaries nobody holds:
/// JobWriter::remove_stale_temporaries) and given `identity` as kIdentityXattr
/// (`*identity_failed` set where the filesystem refuses it).
Status write_atomically(int dir_fd, const std::string& dir, const std::string& name,
                        const RecordText& text, const std::string& identity,
                        const FilePoints& points, bool* identity_failed) {
  const std::string tmp = ".tmp-" + name;
  const int fd = core::create_fresh(dir_fd, tmp, 0640);
  if (fd < 0) return Status::Error("cannot write " + dir + "/" + tmp + ": " + std::strerror(errno), errno);
  // Fresh, so nobody else holds it. Where locks are not to be had (some network filesystems)
  // a start cannot tell it from a stale one: only a second daemon writing into the same
  // directory could suffer from that.
  (void)flock(fd, LOCK_EX | LOCK_NB);
  if (!identity.empty() &&
      fsetxattr(fd, kIdentityXattr, identity.data(), identity.size(), 0) != 0)
    *identity_failed = true;
  bool ok = false;
  try {
    ok = text([fd](std::string_view piece) { return core::write_all(fd, piece); }) && fsync(fd) == 0;
  } catch (...) {  // making the text failed: no descriptor or temporary left behind
    close(fd);
    unlinkat(dir_fd, tmp.c_str(), 0);
    throw;
  }
  int e = errno;
  if (ok) {
    core::crash_point(points.written);
    // Renamed while still locked: a start's removal of stale temporaries never takes it.
    if (renameat2(dir_fd, tmp.c_str(), dir_fd, name.c_str(), RENAME_NOREPLACE) == 0) {
      close(fd);
      core::crash_point(points.renamed);
      return Status::Ok();
    }
    e = errno;
    // Filesystems without RENAME_NOREPLACE: link(2) never replaces either.
    if ((e == EINVAL || e == ENOSYS) && linkat(dir_fd, tmp.c_str(), dir_fd, name.c_str(), 0) == 0) {
      unlinkat(dir_fd, tmp.c_str(), 0);
      close(fd);
      core::crash_point(points.renamed);
      return Status::Ok();
    }
    if (e == EINVAL || e == ENOSYS) e = errno;
  }
  unlinkat(dir_fd, tmp.c_str(), 0);
  close(fd);
  return Status::Error("cannot write " + dir + "/" + name + ": " + std::strerror(e), e);
}

/// Whether `name` in `dir_fd` is a regular file of the job `identity` (its kIdentityXattr).
/// Checked to be a regular file before it is opened: nothing else is ever opened.
bool of_job(int dir_fd, const std::string& name, const std::string& identity) {
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
    return false;
  const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  std::string got(identity.size() + 1, '\0');
  const ssize_t n = fgetxattr(fd, kIdentityXattr, got.data(), got.size());
  close(fd);
  return n == static_cast<ssize_t>(identity.size()) && got.compare(0, n, identity) == 0;
}

/// Whether `stem` is `base` or `base.N` (a stem JobWriter::write takes for a job named `base`).
bool stem_of_base(const std::string& stem, const std::string& base) {
  if (stem == base) return true;
  if (stem.size() < base.size() + 2 || stem.compare(0, base.size(), base) != 0 ||
      stem[base.size()] != '.')
    return false;
  return std::all_of(stem.begin() + static_cast<std::ptrdiff_t>(base.size()) + 1, stem.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

/// Whether `name` exists in `dir_fd` (a link counts: the name is taken).
bool exists_at(int dir_fd, const std::string& name) {
  struct stat st {};
  return fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
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
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  RotationResult r = rotate_records(fd, max_bytes, max_age_s, now_wall_s, keep);
  close(fd);
  return r;
}

void StoredJobs::clear() {
  jobs_.clear();
  by_age_.clear();
  bytes_ = 0;
}

void StoredJobs::add(const std::string& stem, const std::string& name, uint64_t size,
                     int64_t mtime) {
  Job& job = jobs_[stem];
  by_age_.erase({job.mtime, stem});
  for (auto it = job.files.begin(); it != job.files.end(); ++it) {
    if (it->first != name) continue;
    job.size -= it->second;
    bytes_ -= it->second;
    job.files.erase(it);
    break;
  }
  job.files.insert(std::upper_bound(job.files.begin(), job.files.end(),
                                    std::make_pair(name, uint64_t{0})),
                   {name, size});
  job.size += size;
  bytes_ += size;
  job.mtime = std::max(job.mtime, mtime);
  by_age_.insert({job.mtime, stem});
}

bool StoredJobs::add_listed(int dir_fd, const std::string& name) {
  const std::string stem = record_stem(name);
  if (stem.empty()) return false;
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
    return false;
  add(stem, name, static_cast<uint64_t>(st.st_size), static_cast<int64_t>(st.st_mtime));
  return true;
}

bool StoredJobs::list(int dir_fd) {
  clear();
  // Listed through a duplicate of the descriptor: closedir() closes the one it is given.
  const int list_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
  if (!d) {
    if (list_fd >= 0) close(list_fd);
    return false;
  }
  rewinddir(d);
  while (const dirent* e = readdir(d)) add_listed(dir_fd, e->d_name);
  closedir(d);
  return true;
}

RotationResult StoredJobs::rotate(int dir_fd, uint64_t max_bytes, uint64_t max_age_s,
                                  int64_t now_wall_s, const std::string& keep) {
  RotationResult r;
  const std::string keep_stem = record_stem(keep);
  // Oldest written first (a long job's record, written last, is among the newest), then by
  // name (job start): the order of by_age_. Both limits only ever hold for a prefix of it,
  // so the walk stops at the first job within them (the kept one aside).
  for (auto it = by_age_.begin(); it != by_age_.end();) {
    const auto [mtime, stem] = *it;
    const bool too_old = max_age_s > 0 && now_wall_s - mtime > static_cast<int64_t>(max_age_s);
    const bool too_big = max_bytes > 0 && bytes_ > max_bytes;
    if (!too_old && !too_big) break;
    if (!keep_stem.empty() && stem == keep_stem) {
      ++it;
      continue;
    }
    Job& job = jobs_[stem];
    bool any = false;
    for (auto f = job.files.begin(); f != job.files.end();) {
      if (unlinkat(dir_fd, f->first.c_str(), 0) == 0) {
        r.removed.push_back(f->first);
        any = true;
      } else if (errno != ENOENT) {
        ++f;  // kept, and tried again at the next rotation
        continue;
      } else {
        ++r.gone;
      }
      // removed, or gone already (by someone else since it was listed)
      job.size -= f->second;
      bytes_ -= f->second;
      f = job.files.erase(f);
    }
    r.removed_jobs += any;
    if (job.files.empty()) {
      jobs_.erase(stem);
      it = by_age_.erase(it);
    } else {
      ++it;  // what could not go stays listed
    }
  }
  r.kept_bytes = bytes_;
  return r;
}

RotationResult rotate_records(int dir_fd, uint64_t max_bytes, uint64_t max_age_s,
                              int64_t now_wall_s, const std::string& keep) {
  if (max_bytes == 0 && max_age_s == 0) return {};  // no limit: nothing to list
  StoredJobs jobs;
  if (!jobs.list(dir_fd)) return {};
  return jobs.rotate(dir_fd, max_bytes, max_age_s, now_wall_s, keep);
}

JobWriter::JobWriter(std::string dir, uint64_t max_bytes, uint64_t max_age_s, bool compress)
    : dir_(std::move(dir)), max_bytes_(max_bytes), max_age_s_(max_age_s), compress_(compress) {}

JobWriter::~JobWriter() {
  if (dir_fd_ >= 0) close(dir_fd_);
}

Status JobWriter::prepare() {
  if (dir_fd_ >= 0) return Status::Ok();
  std::string error;
  dir_fd_ = core::open_private_dir(dir_, 0750, true, "output directory", error);
  if (dir_fd_ < 0) return Status::Error(error);
  return Status::Ok();
}

void JobWriter::remove_stale_temporaries() {
  if (dir_fd_ < 0) return;
  // A daemon killed while it wrote a record leaves its temporary (up to a whole record, which
  // the rotation does not see): removed unless a writer holds it (its flock, held from the
  // temporary's creation to its rename).
  const int list_fd = fcntl(dir_fd_, F_DUPFD_CLOEXEC, 0);
  DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
  if (!d) {
    if (list_fd >= 0) close(list_fd);
    return;
  }
  rewinddir(d);  // the duplicate shares the directory's offset with every other listing
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(".tmp-", 0) == 0 && !record_stem(name.substr(5)).empty()) names.push_back(name);
  }
  closedir(d);
  for (const auto& name : names) {
    struct stat before {}, held {};
    if (fstatat(dir_fd_, name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(before.st_mode))
      continue;  // only regular files are opened
    const int fd = openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    // Shared: an exclusive lock on a read-only descriptor fails where flock is emulated with
    // POSIX locks (NFS); a writer's exclusive lock still refuses it. Held through the unlink,
    // and the name checked to still be that file.
    if (fstat(fd, &held) == 0 && held.st_ino == before.st_ino && held.st_dev == before.st_dev &&
        flock(fd, LOCK_SH | LOCK_NB) == 0 &&
        fstatat(dir_fd_, name.c_str(), &before, AT_SYMLINK_NOFOLLOW) == 0 &&
        before.st_ino == held.st_ino && unlinkat(dir_fd_, name.c_str(), 0) == 0)
      ++stale_removed_;
    close(fd);
  }
}

JobWritten JobWriter::write(const std::string& name, const nlohmann::json& record,
                             const std::string* darshan_log) {
  const std::string text = exporters::dump_json(record);
  return write(name, [&](const Sink& sink) { return sink(text); }, darshan_log);
}

void JobWriter::rotate(const std::string& keep) {
  if (dir_fd_ < 0 || (max_bytes_ == 0 && max_age_s_ == 0)) return;  // no limit: nothing kept
  const int64_t mono = core::clock_ns(CLOCK_MONOTONIC);
  if (listed_mono_ == 0 || mono - listed_mono_ >= kRelistEvery) {
    if (!stored_.list(dir_fd_)) return;
    listed_mono_ = mono;
  }
  const RotationResult r =
      stored_.rotate(dir_fd_, max_bytes_, max_age_s_, core::clock_ns(CLOCK_REALTIME) / 1000000000LL, keep);
  rotated_ += r.removed_jobs;
  // Someone else removes files here (a collector shipping records away): what the index still
  // counts of theirs made this rotation take more than it should; listed afresh next time.
  if (r.gone) listed_mono_ = 0;
}

JobWritten JobWriter::write(const std::string& name, const RecordText& record,
                             const std::string* darshan_log, bool rotate,
                             const std::string& identity, bool maybe_written) {
  JobWritten w;
  if (Status s = prepare(); !s) {
    w.record = s;
    ++failed_;
    if (darshan_log) {
      w.darshan = s;
      ++darshan_failed_;
    }
    return w;
  }
  const std::string base = name.ends_with(kJson) ? name.substr(0, name.size() - kJson.size()) : name;
  // A job a restarted daemon took from its saved state may have been written after that save:
  // its files say so, at whichever of its name's stems they took (the record is renamed last,
  // so it is whole when it is there).
  std::string own_log_stem;  // this job's log without its record: the record goes beside it
  if (maybe_written && !identity.empty()) {
    const Own own = find_own(base, identity);
    if (!own.record.empty()) {
      w.record = Status::Ok();
      w.path = dir_ + "/" + own.record;
      w.already = true;
      if (own.log_stem == record_stem(own.record))
        w.darshan_path = dir_ + "/" + own.log_stem + std::string(kDarshan);
      ++already_written_;
      return w;
    }
    own_log_stem = own.log_stem;
  }
  bool identity_failed = false;
  // A stem neither a record nor a log has: a job's two files always share theirs. The renames
  // never replace, so a name taken meanwhile sends the job to the next stem, never over a file.
  for (uint64_t n = 0;; ++n) {
    const std::string stem = !own_log_stem.empty() ? own_log_stem
                             : n == 0              ? base
                                                   : base + "." + std::to_string(n);
    const bool log_there = !own_log_stem.empty();
    own_log_stem.clear();  // if its stem turns out taken after all, the next free one
    const std::string record_name = stem + std::string(compress_ ? kJsonZst : kJson);
    const std::string log_name = stem + std::string(kDarshan);
    w = JobWritten{};
    // A stem is taken by a record of either kind (the setting may have changed since).
    if (exists_at(dir_fd_, stem + std::string(kJson)) ||
        exists_at(dir_fd_, stem + std::string(kJsonZst)) ||
        (!log_there && exists_at(dir_fd_, log_name)))
      continue;
    if (log_there) {
      w.darshan_path = dir_ + "/" + log_name;
    } else if (darshan_log) {
      w.darshan = write_atomically(
          dir_fd_, dir_, log_name, [&](const Sink& sink) { return sink(*darshan_log); },
          identity, kLogPoints, &identity_failed);
      if (!w.darshan && w.darshan.err == EEXIST && exists_at(dir_fd_, log_name)) continue;
      if (w.darshan) w.darshan_path = dir_ + "/" + log_name;
    }
    if (compress_) {
      // One zstd frame made as the text comes: the record is never whole in memory, in either
      // form.
      w.record = write_atomically(
          dir_fd_, dir_, record_name,
          [&](const Sink& sink) {
            core::ZstdWriter z(sink, kRecordZstdLevel);
            errno = 0;
            const bool ok =
                record([&](std::string_view piece) { return z.write(piece); }) && z.finish();
            if (!ok && errno == 0) errno = EIO;  // zstd itself failed, not a write: no errno of its own
            return ok;
          },
          identity, kRecordPoints, &identity_failed);
    } else {
      w.record = write_atomically(dir_fd_, dir_, record_name, record, identity, kRecordPoints,
                                  &identity_failed);
    }
    if (!w.record && w.record.err == EEXIST && exists_at(dir_fd_, record_name)) {
      if (!w.darshan_path.empty() && !log_there) unlinkat(dir_fd_, log_name.c_str(), 0);
      continue;
    }
    if (darshan_log && !log_there) ++(w.darshan ? darshan_written_ : darshan_failed_);
    if (!w.record) {
      ++failed_;
      return w;
    }
    // The renames made durable before the state that no longer holds the job is saved: after
    // a power loss, a record's name must not be gone while the state says it was written.
    fsync(dir_fd_);
    ++written_;
    if (identity_failed) ++unidentified_;
    w.path = dir_ + "/" + record_name;
    if (listed_mono_ != 0) {  // else the first rotation lists them
      stored_.add_listed(dir_fd_, record_name);
      if (!w.darshan_path.empty()) stored_.add_listed(dir_fd_, log_name);
    }
    if (rotate) this->rotate(record_name);
    return w;
  }
}

JobWriter::Own JobWriter::find_own(const std::string& base, const std::string& identity) const {
  // One listing, every stem of the name looked at: a stem before the job's may have been freed
  // since the job was written (rotation, a collector moving records away).
  Own own;
  const int list_fd = fcntl(dir_fd_, F_DUPFD_CLOEXEC, 0);
  DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
  if (!d) {
    if (list_fd >= 0) close(list_fd);
    return own;
  }
  rewinddir(d);  // the duplicate shares the directory's offset with every other listing
  std::vector<std::string> candidates;
  while (const dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    const std::string stem = record_stem(n);
    if (!stem.empty() && stem_of_base(stem, base)) candidates.push_back(n);
  }
  closedir(d);
  std::sort(candidates.begin(), candidates.end());
  for (const auto& n : candidates) {
    if (!of_job(dir_fd_, n, identity)) continue;
    if (n.ends_with(kDarshan)) {
      own.log_stem = record_stem(n);
    } else if (own.record.empty()) {
      own.record = n;
    }
  }
  return own;
}

}  // namespace iolens::daemon
