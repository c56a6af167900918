// SPDX-License-Identifier: Apache-2.0
// The Prometheus exposition of a known snapshot: exact text, label escaping of hostile values,
// and every family rendered is documented in docs/metrics.md (and every documented one exists).
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "exporters/prometheus_metrics.hpp"

using namespace iolens;

namespace {

core::MetricsSnapshot known_snapshot() {
  core::MetricsSnapshot s;
  s.node = "n1";
  core::JobMetrics j;
  j.kind = "slurm";
  j.id = "slurm/42";
  j.rule = "slurm";
  j.cgroup = "/system.slice/slurmstepd.scope/job_42";
  j.labels = {{"slurm_job", "42"}, {"slurm_uid", "1000"}};
  core::MetricsGroup g;
  g.labels = {{"slurm_step", "0"}};
  g.totals.reads = 3;
  g.totals.bytes_read = 2 * 65536 + 50;
  g.totals.size_read[0] = 1;  // 50 bytes
  g.totals.size_read[3] = 0;
  g.totals.size_read[4] = 2;  // 64 KiB
  g.totals.lat_read[0] = 1;
  g.totals.lat_read[2] = 2;
  g.totals.lat_read_sum_ns = 25'000;
  g.totals.opens = 3;
  g.totals.dups = 1;
  g.totals.cache_read_pages = 64;
  g.totals.cache_miss_pages = 16;
  g.totals.direct_read_time_ns = 1'500'000'000;
  g.totals.direct_write_time_ns = 500'000'000;
  g.totals.uring_closes = 2;
  g.totals.throttle_ns = 3'200'000'000;
  j.groups.push_back(g);
  j.classes = {{"dataset", {131122, 0, 3, 0, 5, 2}}, {"other", {}}};
  j.devices = {{"254:1", {131122, 0, 3, 0, 5, 2}}};
  j.top_files = {{"/d/a\"b\\c\nd\xff", 65586, 0, 2, 0}};
  j.other_files = core::TopFile{"<other>", 65536, 0, 1, 0};
  j.files = 2;
  j.processes = 1;
  j.start_s = 1700000000.5;
  s.jobs.push_back(j);
  s.daemon.version = "0.1.0";
  s.daemon.abi_version = 5;
  s.daemon.lost = {{"events", 0}, {"file_records", 7}};
  s.daemon.maps = {{"files", 16, 64}};
  s.daemon.drain.bounds = {0.001, 0.01};
  s.daemon.drain.observe(0.005);
  return s;
}

/// The text of the families named, in the order rendered.
std::string text_of(const core::MetricsSnapshot& s, const std::set<std::string>& names) {
  std::vector<prometheus::MetricFamily> keep;
  for (auto& f : exporters::metric_families(s, 0.25))
    if (names.count(f.name)) keep.push_back(f);
  return exporters::prometheus_text(keep);
}

}  // namespace

TEST(PrometheusText, KnownSnapshotExactText) {
  const auto s = known_snapshot();
  const std::string J = "job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job=\"42\",slurm_uid=\"1000\","
                        "node=\"n1\"";
  EXPECT_EQ(text_of(s, {"iolens_job_io_bytes_total", "iolens_job_request_size_bytes"}),
            "# HELP iolens_job_io_bytes_total Bytes read from / written to files by the job's "
            "read and write calls.\n"
            "# TYPE iolens_job_io_bytes_total counter\n"
            "iolens_job_io_bytes_total{" + J + ",slurm_step=\"0\",op=\"read\"} 131122\n"
            "iolens_job_io_bytes_total{" + J + ",slurm_step=\"0\",op=\"write\"} 0\n"
            "# HELP iolens_job_request_size_bytes Size of each read or write, in Darshan's "
            "access-size buckets.\n"
            "# TYPE iolens_job_request_size_bytes histogram\n"
            "iolens_job_request_size_bytes_count{" + J + ",slurm_step=\"0\",op=\"read\"} 3\n"
            "iolens_job_request_size_bytes_sum{" + J + ",slurm_step=\"0\",op=\"read\"} 131122\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"100\"} 1\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"1024\"} 1\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"10240\"} 1\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"102400\"} 1\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"1048576\"} 3\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"4194304\"} 3\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"10485760\"} 3\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"104857600\"} 3\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"1073741824\"} 3\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"read\",le=\"+Inf\"} 3\n"
            "iolens_job_request_size_bytes_count{" + J + ",slurm_step=\"0\",op=\"write\"} 0\n"
            "iolens_job_request_size_bytes_sum{" + J + ",slurm_step=\"0\",op=\"write\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"100\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"1024\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"10240\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"102400\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"1048576\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"4194304\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"10485760\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"104857600\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"1073741824\"} 0\n"
            "iolens_job_request_size_bytes_bucket{" + J + ",slurm_step=\"0\",op=\"write\",le=\"+Inf\"} 0\n");
}

TEST(PrometheusText, LatencyMetadataAndDaemonSeries) {
  const auto s = known_snapshot();
  const std::string text = exporters::prometheus_text(exporters::metric_families(s, 0.25));
  const std::string G = "slurm_uid=\"1000\",node=\"n1\",slurm_step=\"0\"";
  for (const std::string& line : std::vector<std::string>{
           "iolens_job_request_duration_seconds_bucket{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",op=\"read\",le=\"1e-06\"} 1\n",
           "iolens_job_request_duration_seconds_bucket{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",op=\"read\",le=\"1.6e-05\"} 3\n",
           "iolens_job_request_duration_seconds_sum{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",op=\"read\"} 2.5e-05\n",
           // open excludes dups; Darshan's OPENS = open + dup
           "iolens_job_metadata_operations_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",op=\"open\"} 2\n",
           "iolens_job_metadata_operations_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",op=\"dup\"} 1\n",
           "iolens_job_class_io_bytes_total{job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job="
           "\"42\",slurm_uid=\"1000\",node=\"n1\",class=\"dataset\",op=\"read\"} 131122\n",
           "iolens_job_start_time_seconds{job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job=\"42\","
           "slurm_uid=\"1000\",node=\"n1\"} 1700000000.5\n",
           "iolens_lost_total{cause=\"file_records\",node=\"n1\"} 7\n",
           "iolens_job_device_io_bytes_total{job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job="
           "\"42\",slurm_uid=\"1000\",node=\"n1\",device=\"254:1\",op=\"read\"} 131122\n",
           "iolens_map_fill_ratio{map=\"files\",node=\"n1\"} 0.25\n",
           "iolens_drain_duration_seconds_bucket{node=\"n1\",le=\"0.001\"} 0\n",
           "iolens_drain_duration_seconds_bucket{node=\"n1\",le=\"0.01\"} 1\n",
           "iolens_scrape_duration_seconds{node=\"n1\"} 0.25\n",
           "iolens_build_info{version=\"0.1.0\",abi_version=\"5\",node=\"n1\"} 1\n",
           "iolens_job_page_cache_pages_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",event=\"read\"} 64\n",
           "iolens_job_page_cache_pages_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",event=\"read_miss\"} 16\n",
           "iolens_job_direct_io_seconds_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + "} 2\n",
           "iolens_job_io_uring_operations_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + ",op=\"close\"} 2\n",
           "iolens_job_dirty_throttle_seconds_total{job_id=\"slurm/42\",job_kind=\"slurm\","
           "slurm_job=\"42\"," + G + "} 3.2\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nnot in:\n" << text;
  // An ended job only: no end time while it lives.
  EXPECT_EQ(text.find("iolens_job_end_time_seconds{"), std::string::npos);
}

TEST(PrometheusText, HostileLabelValuesAreEscapedAndValidUtf8) {
  const auto s = known_snapshot();
  const std::string text = text_of(s, {"iolens_job_top_file_io_bytes"});
  // The label value: '\' doubled, the byte 0xff as the four characters \xff; then the text
  // format's escapes: '"' -> \", each '\' -> \\, newline -> \n.
  EXPECT_NE(text.find("path=\"/d/a\\\"b\\\\\\\\c\\nd\\\\xff\",op=\"read\"} 65586\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("path=\"<other>\",op=\"read\"} 65536\n"), std::string::npos) << text;
  for (unsigned char c : text) EXPECT_LT(c, 0x80);  // this page is ASCII: trivially UTF-8
}

TEST(PrometheusText, LabelValueSanitizer) {
  using exporters::prometheus_label_value;
  EXPECT_EQ(prometheus_label_value("plain/ascii"), "plain/ascii");
  EXPECT_EQ(prometheus_label_value("caf\xc3\xa9"), "caf\xc3\xa9");           // valid 2-byte
  EXPECT_EQ(prometheus_label_value("\xe2\x82\xac"), "\xe2\x82\xac");         // valid 3-byte
  EXPECT_EQ(prometheus_label_value("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80"); // valid 4-byte
  EXPECT_EQ(prometheus_label_value("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(prometheus_label_value("\xc3"), "\\xc3");                  // truncated sequence
  EXPECT_EQ(prometheus_label_value("\xc0\xaf"), "\\xc0\\xaf");         // overlong '/'
  EXPECT_EQ(prometheus_label_value("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(prometheus_label_value("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  EXPECT_EQ(prometheus_label_value(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(prometheus_label_value("a\\b"), "a\\\\b");  // a backslash is doubled
}

// docs/metrics.md#conventions read back: "\\" is a backslash, "\xNN" the byte NN, anything
// else itself. nullopt for a value the rule cannot have produced.
std::optional<std::string> label_value_bytes(const std::string& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '\\') {
      out += v[i];
    } else if (i + 1 < v.size() && v[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < v.size() && v[i + 1] == 'x' &&
               std::isxdigit(static_cast<unsigned char>(v[i + 2])) &&
               std::isxdigit(static_cast<unsigned char>(v[i + 3]))) {
      out += static_cast<char>(std::stoi(v.substr(i + 2, 2), nullptr, 16));
      i += 3;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

TEST(PrometheusText, LabelValuesOfALiteralEscapeAndOfAByteDiffer) {
  using exporters::prometheus_label_value;
  // A name holding the text \x41 (or \xff) and names holding the bytes they would stand for.
  const std::vector<std::string> names{"/d/\\x41", "/d/A",      "/d/\\xff", "/d/\xff",
                                       "/d/\\\xff", "/d/\\\\xff", "/d/\\",   "/d/\\\\",
                                       "caf\xc3\xa9", "\xc3\xa9\xc3"};
  std::set<std::string> values;
  for (const std::string& n : names) {
    const std::string v = prometheus_label_value(n);
    values.insert(v);
    EXPECT_EQ(label_value_bytes(v), n) << "not reversible: " << v;
  }
  EXPECT_EQ(values.size(), names.size()) << "two names share a label value";
  EXPECT_EQ(prometheus_label_value("/d/\\x41"), "/d/\\\\x41");
  EXPECT_EQ(prometheus_label_value("/d/\xff"), "/d/\\xff");
  // Every single byte and every pair: the value reads back to the name.
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      const std::string n{static_cast<char>(a), static_cast<char>(b)};
      ASSERT_EQ(label_value_bytes(prometheus_label_value(n)), n) << a << " " << b;
    }
}

TEST(PrometheusText, EveryFamilyIsDocumentedAndEveryDocumentedOneExists) {
  auto s = known_snapshot();
  s.jobs[0].end_s = 1700000100;  // so that the end-time family has a series
  s.daemon.resident_bytes = 40u << 20;  // and the RSS one (absent when /proc cannot be read)
  std::set<std::string> rendered;
  for (const auto& f : exporters::metric_families(s, 0)) rendered.insert(f.name);
  std::ifstream doc(IOLENS_METRICS_DOC);
  ASSERT_TRUE(doc) << IOLENS_METRICS_DOC;
  std::stringstream text;
  text << doc.rdbuf();
  // Table rows of docs/metrics.md: "| `iolens_name` | type | ..."
  const std::regex row(R"(\n\| `(iolens_[a-z_]+)` \| (counter|gauge|histogram))");
  std::set<std::string> documented;
  const std::string t = text.str();
  for (auto it = std::sregex_iterator(t.begin(), t.end(), row); it != std::sregex_iterator(); ++it)
    documented.insert((*it)[1]);
  EXPECT_EQ(rendered, documented);
  for (const auto& f : exporters::metric_families(s, 0)) {
    const bool counter = f.type == prometheus::MetricType::Counter;
    EXPECT_EQ(counter, f.name.ends_with("_total")) << f.name;
  }
}

TEST(PrometheusText, BlockLayerSeriesPerJobDeviceAndDirection) {
  auto s = known_snapshot();
  iolens_block_counters c{};
  c.read_bytes = 1 << 20;
  c.write_bytes = 4096;
  c.writeback_bytes = 4096;
  c.read_reqs = 4;
  c.write_reqs = 1;
  c.dev_read[5] = 4;  // <= 1 ms
  c.dev_read_sum_ns = 2'000'000;
  c.queue_write[1] = 1;  // <= 4 us
  c.queue_write_sum_ns = 3'000;
  s.jobs[0].block = {{"254:0", c}};
  const std::string text = exporters::prometheus_text(exporters::metric_families(s, 0.25));
  const std::string D = "job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job=\"42\","
                        "slurm_uid=\"1000\",node=\"n1\",device=\"254:0\"";
  for (const std::string& line : std::vector<std::string>{
           "iolens_block_bytes_total{" + D + ",op=\"read\"} 1048576\n",
           "iolens_block_bytes_total{" + D + ",op=\"write\"} 4096\n",
           "iolens_block_writeback_bytes_total{" + D + "} 4096\n",
           "iolens_block_requests_total{" + D + ",op=\"read\"} 4\n",
           "iolens_block_requests_total{" + D + ",op=\"write\"} 1\n",
           "iolens_block_device_duration_seconds_bucket{" + D + ",op=\"read\",le=\"0.000256\"} 0\n",
           "iolens_block_device_duration_seconds_bucket{" + D + ",op=\"read\",le=\"0.001\"} 4\n",
           "iolens_block_device_duration_seconds_sum{" + D + ",op=\"read\"} 0.002\n",
           "iolens_block_queue_duration_seconds_bucket{" + D + ",op=\"write\",le=\"4e-06\"} 1\n",
           "iolens_block_queue_duration_seconds_sum{" + D + ",op=\"write\"} 3e-06\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nnot in:\n" << text;
}

TEST(PrometheusText, JobLossesPerCauseOnlyThoseThatHappened) {
  auto s = known_snapshot();
  s.jobs[0].lost = {{"file_records", 12}, {"path_events", 3}};
  const std::string text = exporters::prometheus_text(exporters::metric_families(s, 0.25));
  const std::string J = "job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job=\"42\","
                        "slurm_uid=\"1000\",node=\"n1\"";
  for (const std::string& line :
       {"iolens_job_lost_total{" + J + ",cause=\"file_records\"} 12\n",
        "iolens_job_lost_total{" + J + ",cause=\"path_events\"} 3\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nnot in:\n" << text;
  EXPECT_EQ(text.find("iolens_job_lost_total{" + J + ",cause=\"events\""), std::string::npos);
}

// timing: off (docs/metrics.md): the call-time families of the jobs get no series (not zeros),
// and iolens_timing_exact says which; every other job series is still there.
TEST(PrometheusText, TimingOffLeavesCallTimeSeriesOut) {
  auto s = known_snapshot();
  s.jobs[0].groups[0].totals.read_time_ns = 2'000'000'000;  // nonzero: exact would show it
  s.jobs[0].groups[0].totals.write_time_ns = 1'000'000'000;
  s.jobs[0].groups[0].totals.lat_write[1] = 4;
  s.jobs[0].groups[0].totals.lat_write_sum_ns = 8'000;
  const std::string G = "job_id=\"slurm/42\",job_kind=\"slurm\",slurm_job=\"42\","
                        "slurm_uid=\"1000\",node=\"n1\",slurm_step=\"0\"";

  // Default, exact: the series are there, with their values.
  ASSERT_TRUE(s.daemon.timing_exact);
  const std::string exact = exporters::prometheus_text(exporters::metric_families(s, 0.25));
  for (const std::string& line : std::vector<std::string>{
           "iolens_job_io_seconds_total{" + G + ",op=\"read\"} 2\n",
           "iolens_job_io_seconds_total{" + G + ",op=\"write\"} 1\n",
           "iolens_job_request_duration_seconds_sum{" + G + ",op=\"read\"} 2.5e-05\n",
           "iolens_job_request_duration_seconds_count{" + G + ",op=\"write\"} 4\n",
           "iolens_timing_exact{node=\"n1\"} 1\n"})
    EXPECT_NE(exact.find(line), std::string::npos) << line << "\nnot in:\n" << exact;

  // Off: no series of either family, the gauge 0, other job series unchanged.
  s.daemon.timing_exact = false;
  const auto families = exporters::metric_families(s, 0.25);
  const std::string off = exporters::prometheus_text(families);
  EXPECT_EQ(off.find("iolens_job_io_seconds_total{"), std::string::npos) << off;
  EXPECT_EQ(off.find("iolens_job_request_duration_seconds_"), std::string::npos) << off;
  EXPECT_EQ(off.find("iolens_job_request_duration_seconds{"), std::string::npos) << off;
  for (const auto& f : families) {
    if (f.name == "iolens_job_io_seconds_total" || f.name == "iolens_job_request_duration_seconds") {
      EXPECT_TRUE(f.metric.empty()) << f.name;
    }
  }
  for (const std::string& line : std::vector<std::string>{
           "iolens_timing_exact{node=\"n1\"} 0\n",
           "iolens_job_io_bytes_total{" + G + ",op=\"read\"} 131122\n",
           "iolens_job_request_size_bytes_count{" + G + ",op=\"read\"} 3\n",
           "iolens_job_metadata_operations_total{" + G + ",op=\"open\"} 2\n"})
    EXPECT_NE(off.find(line), std::string::npos) << line << "\nnot in:\n" << off;
  EXPECT_EQ(off.find("iolens_timing_exact{node=\"n1\"} 1"), std::string::npos) << off;
}

// The gauge is exported with no job at all, and has no labels of its own (only the node's).
TEST(PrometheusText, TimingExactGaugeWithoutJobs) {
  core::MetricsSnapshot s;
  s.node = "n1";
  EXPECT_EQ(text_of(s, {"iolens_timing_exact"}),
            "# HELP iolens_timing_exact 1 when calls are timed (timing: exact); 0 with timing "
            "off, where iolens_job_io_seconds_total and iolens_job_request_duration_seconds "
            "are left out.\n"
            "# TYPE iolens_timing_exact gauge\n"
            "iolens_timing_exact{node=\"n1\"} 1\n");
  s.daemon.timing_exact = false;
  const std::string off = text_of(s, {"iolens_timing_exact"});
  EXPECT_NE(off.find("\niolens_timing_exact{node=\"n1\"} 0\n"), std::string::npos) << off;
}
