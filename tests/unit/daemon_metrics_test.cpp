// SPDX-License-Identifier: Apache-2.0
// The metrics' view of jobs (daemon/job_metrics) fed synthetic records, and the /metrics server
// on a loopback port: bounded per-file series, class sums that survive folding, basic auth.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "daemon/job_metrics.hpp"
#include "daemon/job_table.hpp"
#include "daemon/metrics_server.hpp"
#include "daemon_test_util.hpp"
#include "iolens_abi.h"

using namespace iolens;
using daemon::JobTable;

namespace {

const std::string kPod = "/kubepods.slice/kubepods-pod0f3e9a7c_1d2b_4c5d_8e9f_0a1b2c3d4e5f.slice";
const std::string kCtrA = kPod + "/cri-containerd-" + std::string(64, 'a') + ".scope";
const std::string kCtrB = kPod + "/cri-containerd-" + std::string(64, 'b') + ".scope";

jobs::Rule kube_rule() {
  jobs::Rule r;
  r.kind = jobs::RuleKind::Kubernetes;
  r.name = "kubernetes";
  r.roots = {"/kubepods.slice"};
  return r;
}

using testing_util::key;
using testing_util::mark;

core::FileCounters read_of(uint64_t bytes, uint64_t calls = 1) {
  core::FileCounters c = core::new_counters();
  c.opens = 1;
  c.closes = 1;
  c.reads = calls;
  c.bytes_read = bytes;
  c.max_byte_read = static_cast<int64_t>(bytes) - 1;
  c.size_read[4] = calls;
  c.lat_read[1] = calls;
  return c;
}

/// Names (dev 7, ino) `path` through the kernel's name event.
void name(JobTable& t, uint32_t pid, uint64_t ino, const std::string& path) {
  // The walk: components leaf first, each NUL-terminated.
  std::string walk;
  std::size_t end = path.size();
  while (end > 0) {
    const std::size_t slash = path.rfind('/', end - 1);
    walk += path.substr(slash + 1, end - slash - 1);
    walk.push_back('\0');
    end = slash;
  }
  t.on_event(testing_util::name_event(pid, ino, walk));
}

JobTable pod_table() {
  JobTable t(jobs::Selector({kube_rule()}), jobs::Limits{}, 1'000'000'000);
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.on_cgroup(5, kCtrA, true, 20);
  t.on_cgroup(6, kCtrB, true, 20);
  return t;
}

std::vector<jobs::FileClass> classes() { return {{"dataset", {"/data/"}}, {"checkpoint", {"/ckpt/"}}}; }

}  // namespace

TEST(JobMetrics, SumsByContainerAndByClass) {
  auto t = pod_table();
  ASSERT_TRUE(t.on_mark(mark(100, 5)));
  ASSERT_TRUE(t.on_mark(mark(200, 6)));
  name(t, 100, 1, "/data/a.npy");
  name(t, 100, 2, "/ckpt/model.pt");
  name(t, 100, 3, "/usr/lib/python3/x.pyc");
  t.on_file(key(100, 1), read_of(1000, 2), false);
  t.on_file(key(200, 1), read_of(500), false);  // the same file, other container
  t.on_file(key(100, 3), read_of(7), false);
  core::FileCounters w = core::new_counters();
  w.writes = 3;
  w.bytes_written = 3 << 20;
  w.fsyncs = 1;
  t.on_file(key(100, 2), w, false);
  const daemon::FileClassifier fc(classes());
  const core::JobMetrics m = daemon::job_metrics(*t.jobs().begin()->second, fc, 0);
  EXPECT_EQ(m.id, "k8s/0f3e9a7c-1d2b-4c5d-8e9f-0a1b2c3d4e5f");
  EXPECT_EQ(m.info_labels.at("pod_uid"), "0f3e9a7c-1d2b-4c5d-8e9f-0a1b2c3d4e5f");
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[0].labels.at("container"), std::string(64, 'a'));
  EXPECT_EQ(m.groups[0].totals.bytes_read, 1007u);
  EXPECT_EQ(m.groups[0].totals.bytes_written, 3u << 20);
  EXPECT_EQ(m.groups[0].totals.lat_read[1], 3u);
  EXPECT_EQ(m.groups[1].labels.at("container"), std::string(64, 'b'));
  EXPECT_EQ(m.groups[1].totals.bytes_read, 500u);
  ASSERT_EQ(m.classes.size(), 3u);
  EXPECT_EQ(m.classes[0].first, "dataset");
  EXPECT_EQ(m.classes[0].second.bytes_read, 1500u);
  EXPECT_EQ(m.classes[0].second.reads, 3u);
  EXPECT_EQ(m.classes[0].second.files, 1u);  // one file, read by two processes
  EXPECT_EQ(m.classes[1].second.bytes_written, 3u << 20);
  EXPECT_EQ(m.classes[1].second.metadata_ops, 1u);  // the fsync
  EXPECT_EQ(m.classes[2].first, "other");           // python3 is no class here
  EXPECT_EQ(m.classes[2].second.bytes_read, 7u);
  EXPECT_EQ(m.files, 3u);
  // Every test file is on kernel dev 7 (major 0, minor 7).
  ASSERT_EQ(m.devices.size(), 1u);
  EXPECT_EQ(m.devices[0].first, "0:7");
  EXPECT_EQ(m.devices[0].second.bytes_read, 1507u);
  EXPECT_EQ(m.devices[0].second.bytes_written, 3u << 20);
  EXPECT_EQ(m.devices[0].second.files, 3u);
  EXPECT_EQ(m.processes, 2u);
  EXPECT_TRUE(m.top_files.empty());
  EXPECT_FALSE(m.other_files);
}

TEST(JobMetrics, AHundredThousandFilesGiveAtMostKPlusOnePaths) {
  auto t = pod_table();
  ASSERT_TRUE(t.on_mark(mark(100, 5)));
  uint64_t total = 0;
  for (uint64_t i = 1; i <= 100000; ++i) {
    name(t, 100, i, "/data/f" + std::to_string(i));
    t.on_file(key(100, i), read_of(i), false);
    total += i;
  }
  const core::JobMetrics m =
      daemon::job_metrics(*t.jobs().begin()->second, daemon::FileClassifier(classes()), 5);
  ASSERT_EQ(m.top_files.size(), 5u);
  ASSERT_TRUE(m.other_files);
  EXPECT_EQ(m.top_files[0].path, "/data/f100000");
  EXPECT_EQ(m.top_files[4].path, "/data/f99996");
  uint64_t shown = m.other_files->bytes_read;
  for (const auto& f : m.top_files) shown += f.bytes_read;
  EXPECT_EQ(shown, total);
  EXPECT_EQ(m.other_files->path, "<other>");
  EXPECT_EQ(m.files, 100000u);
}

TEST(JobMetrics, FoldingKeepsClassSumsAndTotals) {
  jobs::Limits limits;
  limits.max_files_per_job = 100;
  JobTable t(jobs::Selector({kube_rule()}), limits, 1'000'000'000);
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.set_file_classes(classes());
  // Darshan's alignment by mount: /data 4096, the rest 512
  t.set_alignment_table(std::make_shared<const std::vector<core::AlignmentMount>>(
      std::vector<core::AlignmentMount>{{"/data", 4096}, {"/", 512}}));
  ASSERT_TRUE(t.on_mark(mark(100, 3)));
  for (uint64_t i = 1; i <= 1000; ++i) {
    name(t, 100, i, (i % 2 ? "/data/f" : "/ckpt/c") + std::to_string(i));
    core::FileCounters c = read_of(10 + i % 2);
    c.offset_lsb[0] = 1;  // an offset no multiple of 512: not aligned anywhere
    c.offset_lsb[3] = 1;  // a multiple of 2 KiB, not of 4 KiB: not aligned under /data only
    t.on_file(key(100, i), c, true);  // final: foldable
  }
  const daemon::FileClassifier fc(classes());
  const core::JobMetrics before =
      daemon::job_metrics(*t.jobs().begin()->second, fc, 3, t.alignment_table());
  EXPECT_GT(t.enforce_limits(), 0u);
  const core::JobMetrics after =
      daemon::job_metrics(*t.jobs().begin()->second, fc, 3, t.alignment_table());
  EXPECT_GT(after.folded_records, 0u);
  EXPECT_LE(t.jobs().begin()->second->rec->file_records(), 100u);
  for (std::size_t i = 0; i < before.classes.size(); ++i) {
    EXPECT_EQ(after.classes[i].second.bytes_read, before.classes[i].second.bytes_read) << i;
    EXPECT_EQ(after.classes[i].second.reads, before.classes[i].second.reads) << i;
    EXPECT_EQ(after.classes[i].second.metadata_ops, before.classes[i].second.metadata_ops) << i;
  }
  EXPECT_EQ(before.classes[0].second.bytes_read, 500u * 11);
  ASSERT_EQ(after.devices.size(), 1u);
  EXPECT_EQ(after.devices[0].second.bytes_read, before.devices[0].second.bytes_read);
  EXPECT_EQ(after.devices[0].second.reads, before.devices[0].second.reads);
  EXPECT_EQ(after.groups[0].totals.bytes_read, before.groups[0].totals.bytes_read);
  EXPECT_EQ(after.files, 1000u);
  // Darshan's FILE_NOT_ALIGNED, each file against its own alignment, kept through the fold
  EXPECT_EQ(before.file_not_aligned, 500u * 2 + 500u * 1);
  EXPECT_EQ(after.file_not_aligned, before.file_not_aligned);
  // The folded records' counts were kept as they were folded; a publish that can judge fewer
  // records (no mount table here; a name cut or replaced) shows the high mark: a counter never
  // goes down.
  const uint64_t folded = t.jobs().begin()->second->folded_not_aligned;
  EXPECT_GT(folded, 0u);
  EXPECT_LT(folded, after.file_not_aligned);
  EXPECT_EQ(daemon::job_metrics(*t.jobs().begin()->second, fc, 3).file_not_aligned,
            after.file_not_aligned);
  // The top files plus the rest still add up to the job's bytes.
  uint64_t shown = after.other_files->bytes_read;
  for (const auto& f : after.top_files) shown += f.bytes_read;
  EXPECT_EQ(shown, before.groups[0].totals.bytes_read);
  // The fold accounting survives a checkpoint.
  JobTable restored(jobs::Selector({kube_rule()}), limits, 0);
  std::string error;
  ASSERT_TRUE(restored.load(t.save(), error)) << error;
  const core::JobMetrics again = daemon::job_metrics(*restored.jobs().begin()->second, fc, 3,
                                                     t.alignment_table());
  EXPECT_EQ(again.classes[0].second.bytes_read, before.classes[0].second.bytes_read);
  EXPECT_EQ(again.file_not_aligned, before.file_not_aligned);
  EXPECT_EQ(again.devices[0].second.bytes_read, before.devices[0].second.bytes_read);
}

TEST(JobMetrics, FoldingProcessesKeepsClassSumsAndDevices) {
  // Exited workers past max_processes_per_job fold into "<other processes>": their records
  // leave the recorder, and what they read stays in their classes and device.
  jobs::Limits limits;
  limits.max_processes_per_job = 2;
  JobTable t(jobs::Selector({kube_rule()}), limits, 1'000'000'000);
  t.on_cgroup(1, "/kubepods.slice", false, 0);
  t.on_cgroup(3, kPod, true, 10);
  t.set_file_classes(classes());
  ASSERT_TRUE(t.on_mark(mark(100, 3)));
  uint64_t data = 0, ckpt = 0, reads = 0;
  for (uint32_t pid = 101; pid <= 106; ++pid) {
    t.on_event(core::ForkEvent{{pid, pid * 10ull}, {100, 1000}, 30, "worker", 1});
    for (uint64_t i = 0; i < 3; ++i) {
      const uint64_t ino = pid * 100 + i;
      const bool is_data = i < 2;
      name(t, pid, ino, (is_data ? "/data/s" : "/ckpt/c") + std::to_string(ino));
      const uint64_t bytes = 1000 * pid + i;
      t.on_file(key(pid, ino), read_of(bytes, 1 + i), true);
      (is_data ? data : ckpt) += bytes;
      reads += 1 + i;
    }
    t.on_event(core::ExitEvent{{pid, pid * 10ull}, 40, 0});
  }
  const daemon::FileClassifier fc(classes());
  t.enforce_limits();
  const daemon::Job& job = *t.jobs().begin()->second;
  ASSERT_GT(job.rec->folded_processes(), 0u);
  const core::JobMetrics m = daemon::job_metrics(job, fc, 3);
  EXPECT_EQ(m.classes[0].first, "dataset");
  EXPECT_EQ(m.classes[0].second.bytes_read, data);
  EXPECT_EQ(m.classes[1].second.bytes_read, ckpt);
  EXPECT_EQ(m.classes[0].second.reads + m.classes[1].second.reads, reads);
  EXPECT_EQ(m.classes[2].second.bytes_read, 0u);  // nothing counted twice into "other"
  ASSERT_EQ(m.devices.size(), 1u);
  EXPECT_EQ(m.devices[0].second.bytes_read, data + ckpt);
  EXPECT_EQ(m.devices[0].second.reads, reads);
}

TEST(FileClassifier, FirstMatchingPrefixWins) {
  const daemon::FileClassifier fc({{"a", {"/x/y/"}}, {"b", {"/x/"}}});
  const std::string p1 = "/x/y/z", p2 = "/x/q", p3 = "/xq";
  EXPECT_EQ(fc.classify(&p1), 0u);
  EXPECT_EQ(fc.classify(&p2), 1u);
  EXPECT_EQ(fc.classify(&p3), 2u);
  EXPECT_EQ(fc.classify(nullptr), 2u);
  EXPECT_EQ(fc.names(), (std::vector<std::string>{"a", "b", "other"}));
}

// ---- the HTTP endpoint ---------------------------------------------------------------------

namespace {

/// One HTTP/1.0 GET on 127.0.0.1:port; the whole response.
std::string http_get(int port, const std::string& path, const std::string& auth = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "connect failed";
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n";
  if (!auth.empty()) req += "Authorization: Basic " + auth + "\r\n";
  req += "\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

std::string base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += k[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    for (int s : {18, 12, 6}) out += k[(v >> s) & 63];
    out += "=";
  }
  return out;
}

std::shared_ptr<core::MetricsSnapshot> tiny_snapshot() {
  auto s = std::make_shared<core::MetricsSnapshot>();
  s->node = "unit";
  s->daemon.version = "9.9.9";
  return s;
}

std::string temp_file(const std::string& text, mode_t mode) {
  char path[] = "/tmp/iolens-unit-XXXXXX";
  const int fd = mkstemp(path);
  (void)!write(fd, text.data(), text.size());
  close(fd);
  chmod(path, mode);
  return path;
}

}  // namespace

TEST(MetricsServer, ServesThePublishedSnapshotOnAnEphemeralPort) {
  jobs::MetricsConfig cfg;
  cfg.listen = "127.0.0.1:0";
  std::string error;
  auto server = daemon::MetricsServer::start(cfg, error);
  ASSERT_TRUE(server) << error;
  ASSERT_EQ(server->ports().size(), 1u);
  const int port = server->ports()[0];
  ASSERT_GT(port, 0);
  server->publish(tiny_snapshot());
  const std::string page = http_get(port, "/metrics");
  EXPECT_NE(page.find("200 OK"), std::string::npos) << page;
  EXPECT_NE(page.find("iolens_build_info{version=\"9.9.9\",abi_version=\"0\",node=\"unit\"} 1"),
            std::string::npos)
      << page;
  EXPECT_EQ(server->scrapes(), 1u);
  // The same port again: refused with the reason, not a crash.
  jobs::MetricsConfig again = cfg;
  again.listen = "127.0.0.1:" + std::to_string(port);
  EXPECT_FALSE(daemon::MetricsServer::start(again, error));
  EXPECT_NE(error.find("cannot serve there"), std::string::npos) << error;
}

// Any local user can connect: civetweb must not keep the defaults that let two slow clients
// hold every scrape ~30 s (2 threads, 30 s request timeout; docs/metrics.md#slow-clients).
TEST(MetricsServer, CivetwebOptionsBoundSlowClients) {
  jobs::MetricsConfig cfg;
  const std::vector<std::string> defaults = daemon::civetweb_options(cfg);
  EXPECT_EQ(defaults, (std::vector<std::string>{"listening_ports", "127.0.0.1:9464", "num_threads",
                                                "8", "request_timeout_ms", "5000",
                                                "enable_keep_alive", "no"}));
  cfg.threads = 3;
  cfg.request_timeout_ms = 1500;
  const std::vector<std::string> set = daemon::civetweb_options(cfg);
  EXPECT_EQ(set[3], "3");
  EXPECT_EQ(set[5], "1500");
}

TEST(MetricsServer, BasicAuth) {
  const std::string pw = temp_file("s3cret\n", 0600);
  jobs::MetricsConfig cfg;
  cfg.listen = "127.0.0.1:0";
  cfg.username = "prom";
  cfg.password_file = pw;
  std::string error;
  auto server = daemon::MetricsServer::start(cfg, error);
  ASSERT_TRUE(server) << error;
  server->publish(tiny_snapshot());
  const int port = server->ports()[0];
  EXPECT_NE(http_get(port, "/metrics").find("401"), std::string::npos);
  EXPECT_NE(http_get(port, "/metrics", base64("prom:wrong")).find("401"), std::string::npos);
  EXPECT_NE(http_get(port, "/metrics", base64("other:s3cret")).find("401"), std::string::npos);
  const std::string ok = http_get(port, "/metrics", base64("prom:s3cret"));
  EXPECT_NE(ok.find("200 OK"), std::string::npos) << ok;
  EXPECT_NE(ok.find("iolens_build_info"), std::string::npos);
  unlink(pw.c_str());
}

TEST(MetricsServer, PasswordFileMustBePrivateAndNonEmpty) {
  jobs::MetricsConfig cfg;
  cfg.listen = "127.0.0.1:0";
  cfg.username = "prom";
  std::string error;
  cfg.password_file = temp_file("s3cret\n", 0644);
  EXPECT_FALSE(daemon::MetricsServer::start(cfg, error));
  EXPECT_NE(error.find("readable by every user"), std::string::npos) << error;
  unlink(cfg.password_file.c_str());
  cfg.password_file = temp_file("\n", 0600);
  EXPECT_FALSE(daemon::MetricsServer::start(cfg, error));
  EXPECT_NE(error.find("no password"), std::string::npos) << error;
  unlink(cfg.password_file.c_str());
  cfg.password_file = "/nonexistent/pw";
  EXPECT_FALSE(daemon::MetricsServer::start(cfg, error));
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST(MetricsServer, ConstantTimeEqual) {
  EXPECT_TRUE(daemon::constant_time_equal("abc", "abc"));
  EXPECT_FALSE(daemon::constant_time_equal("abd", "abc"));
  EXPECT_FALSE(daemon::constant_time_equal("ab", "abc"));
  EXPECT_FALSE(daemon::constant_time_equal("abcabc", "abc"));
  EXPECT_FALSE(daemon::constant_time_equal("", ""));
}
