// SPDX-License-Identifier: Apache-2.0
#pragma once
/// iolensd's /metrics endpoint: a prometheus-cpp Exposer (civetweb threads) rendering the
/// snapshot the daemon loop published last (docs/metrics.md). The loop never waits for a scrape
/// and a scrape never touches the job table: they share one immutable snapshot.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/metrics_snapshot.hpp"
#include "jobs/config.hpp"

namespace prometheus {
class Exposer;
}

namespace iolens::daemon {

class MetricsServer {
 public:
  /// Listens on cfg.listen (with basic auth and TLS when configured). nullptr and `error` when
  /// it cannot: a bad address, the port in use, an unreadable or world-readable password file,
  /// a TLS certificate the server refuses.
  static std::unique_ptr<MetricsServer> start(const jobs::MetricsConfig& cfg, std::string& error);
  ~MetricsServer();

  /// The snapshot scrapes render from now on.
  void publish(std::shared_ptr<const core::MetricsSnapshot> snapshot);
  /// The ports actually bound (a configured port 0 is resolved).
  std::vector<int> ports() const;
  uint64_t scrapes() const;

  struct Collector;  // the prometheus::Collectable

 private:
  MetricsServer() = default;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

/// The civetweb options the server is started with (listen address, threads, timeouts).
std::vector<std::string> civetweb_options(const jobs::MetricsConfig& cfg);

/// Whether `given` equals `expected` (never when `expected` is empty), in a time that depends
/// on the length of `given` only.
bool constant_time_equal(const std::string& given, const std::string& expected);

/// The password of a basic_auth password_file: its first line. False and `error` when the file
/// cannot be read, is readable by every user (mode & 0007), or its first line is empty.
bool read_password_file(const std::string& path, std::string& password, std::string& error);

}  // namespace iolens::daemon
