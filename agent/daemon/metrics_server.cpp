// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics_server.hpp"

#include <sys/stat.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include "exporters/prometheus_metrics.hpp"

namespace iolens::daemon {
namespace {

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

struct MetricsServer::Collector : prometheus::Collectable {
  mutable std::mutex mu;
  std::shared_ptr<const core::MetricsSnapshot> snapshot;
  mutable std::atomic<uint64_t> last_scrape_ns{0};
  mutable std::atomic<uint64_t> scrapes{0};

  std::vector<prometheus::MetricFamily> Collect() const override {
    const double t0 = now_s();
    std::shared_ptr<const core::MetricsSnapshot> s;
    {
      std::lock_guard<std::mutex> lock(mu);
      s = snapshot;
    }
    if (!s) return {};
    auto families = exporters::metric_families(
        *s, static_cast<double>(last_scrape_ns.load(std::memory_order_relaxed)) / 1e9);
    last_scrape_ns.store(static_cast<uint64_t>((now_s() - t0) * 1e9), std::memory_order_relaxed);
    scrapes.fetch_add(1, std::memory_order_relaxed);
    return families;
  }
};

std::vector<std::string> civetweb_options(const jobs::MetricsConfig& cfg) {
  // Any local user can connect to a loopback port. civetweb gives each connection one of
  // num_threads workers until its request is read and answered, and waits request_timeout_ms
  // (default 30 s) for a request that trickles in, and as long for each write to a client that
  // does not read: with 2 threads, two trickling connections blocked every scrape ~30 s.
  // Hence more threads, a short timeout for the whole request header, and no keep-alive (an
  // idle kept-alive connection would hold a worker too). docs/metrics.md#slow-clients.
  return {"listening_ports",    cfg.listen,
          "num_threads",        std::to_string(cfg.threads),
          "request_timeout_ms", std::to_string(cfg.request_timeout_ms),
          "enable_keep_alive",  "no"};
}

bool constant_time_equal(const std::string& given, const std::string& expected) {
  if (expected.empty()) return false;
  // Every byte of `given` is compared (against `expected` repeated), so the time says nothing
  // about where the first difference is.
  std::size_t diff = given.size() ^ expected.size();
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(expected[i % expected.size()]);
  return diff == 0;
}

bool read_password_file(const std::string& path, std::string& password, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = "basic_auth.password_file " + path + ": " + std::strerror(errno);
    return false;
  }
  if (st.st_mode & 0007) {
    error = "basic_auth.password_file " + path + " is readable by every user: chmod o-rwx it";
    return false;
  }
  std::ifstream in(path);
  if (!in || !std::getline(in, password) || password.empty()) {
    error = "basic_auth.password_file " + path + ": no password on its first line";
    return false;
  }
  if (!password.empty() && password.back() == '\r') password.pop_back();
  return true;
}

std::unique_ptr<MetricsServer> MetricsServer::start(const jobs::MetricsConfig& cfg,
                                                    std::string& error) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->collector_ = std::make_shared<Collector>();
  std::string password;
  if (!cfg.username.empty() && !read_password_file(cfg.password_file, password, error))
    return nullptr;
  std::vector<std::string> options = civetweb_options(cfg);
  if (!cfg.tls_cert_file.empty()) {
    // Debian 12's civetweb 1.15 loads OpenSSL at run time by the 1.1 names; OpenSSL 3 has no
    // SSL_get_peer_certificate, the pointer stays null and the first HTTPS request crashes the
    // daemon (seen here). Refused rather than crash later: docs/metrics.md says what to do.
    error = "metrics.tls: not available in this build: the system's civetweb (1.15) cannot "
            "serve HTTPS with OpenSSL 3 (it crashes on the first request); terminate TLS in a "
            "proxy in front of a loopback listen address (docs/metrics.md#exposing-the-endpoint)";
    return nullptr;
  }
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(options);
  } catch (const std::exception& e) {
    error = "metrics.listen " + cfg.listen + ": cannot serve there (" + e.what() +
            (cfg.tls_cert_file.empty() ? "" : "; or the TLS certificate/key was refused") +
            // Debian 12's civetweb is built without IPv6: any [v6] address fails this way.
            (cfg.listen.starts_with("[") ? "; or this build's civetweb has no IPv6 (Debian 12's "
                                           "has not): use an IPv4 address"
                                         : "") +
            ")";
    return nullptr;
  }
  s->exposer_->RegisterCollectable(s->collector_);
  if (!cfg.username.empty()) {
    s->exposer_->RegisterAuth(
        [user = cfg.username, password](const std::string& u, const std::string& p) {
          // Both compared in full, whatever the first one says: no timing hint on either.
          const bool user_ok = constant_time_equal(u, user);
          const bool password_ok = constant_time_equal(p, password);
          return user_ok && password_ok;
        },
        "iolensd");
  }
  return s;
}

MetricsServer::~MetricsServer() = default;

void MetricsServer::publish(std::shared_ptr<const core::MetricsSnapshot> snapshot) {
  std::lock_guard<std::mutex> lock(collector_->mu);
  collector_->snapshot = std::move(snapshot);
}

std::vector<int> MetricsServer::ports() const { return exposer_->GetListeningPorts(); }

uint64_t MetricsServer::scrapes() const { return collector_->scrapes.load(); }

}  // namespace iolens::daemon
