// One sample of a served abcd-server's Prometheus exposition (GET /metrics), for the e2e tests.
// Uses the caller's httplib::Client: thread-safe as far as that client is.
#pragma once

#include <httplib.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace abcd::testing {

// The value of `sample` (its exact name with labels, e.g. `abcd_batch_size_bucket{le="1"}`):
// `absent` when no line has it (a labelled counter not yet incremented), -1 when /metrics does
// not answer 200.
inline double MetricSample(httplib::Client& http, const std::string& sample, double absent = -1) {
  auto response = http.Get("/metrics");
  if (!response || response->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(response->body, '\n')) {
    if (!absl::StartsWith(line, sample + " ")) continue;
    double value = -1;
    if (absl::SimpleAtod(line.substr(sample.size() + 1), &value)) return value;
  }
  return absent;
}

}  // namespace abcd::testing
