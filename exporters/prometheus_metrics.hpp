// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The Prometheus view of iolensd (docs/metrics.md): a core::MetricsSnapshot rendered as
/// prometheus-cpp metric families. Pure; the daemon's Collectable calls it at scrape time.

#include <string>
#include <string_view>
#include <vector>

#include <prometheus/metric_family.h>

#include "core/metrics_snapshot.hpp"

namespace iolens::exporters {

/// A label value the text format can carry, reversibly: valid UTF-8 is kept as it is but for
/// a backslash, which is doubled (\ -> \\); every other byte becomes the four characters \xNN
/// (a file name may hold any byte but '/' and NUL; one invalid byte would make Prometheus
/// reject the whole scrape). Read left to right, \\ is always a backslash and \xNN always a
/// byte (docs/metrics.md#conventions). The text format's own escaping of backslash, '"' and
/// newline is applied on top of this by the serializer.
std::string prometheus_label_value(std::string_view raw);

/// Every family of docs/metrics.md for `s`, in a fixed order. `last_scrape_s`: how long the
/// previous scrape took (iolens_scrape_duration_seconds).
std::vector<prometheus::MetricFamily> metric_families(const core::MetricsSnapshot& s,
                                                      double last_scrape_s);

/// The text exposition format (0.0.4) of `families`.
std::string prometheus_text(const std::vector<prometheus::MetricFamily>& families);

/// The `le` bounds (bytes) of iolens_job_request_size_bytes: Darshan's access-size buckets.
const std::vector<double>& request_size_bounds();
/// The `le` bounds (seconds) of iolens_job_request_duration_seconds.
const std::vector<double>& request_duration_bounds();

}  // namespace iolens::exporters
