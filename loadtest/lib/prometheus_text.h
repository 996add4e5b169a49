// A reader for the Prometheus text exposition format (0.0.4) that abcd-server's /metrics
// serves: enough to take counters before and after a run and to watch gauges during it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace abcd::loadtest {

struct Sample {
  std::string name;                           // e.g. abcd_requests_total
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

// Every sample line; comments, blank and malformed lines are skipped.
std::vector<Sample> ParsePrometheusText(absl::string_view text);

// Samples indexed by name, for lookups with label filters.
class MetricSnapshot {
 public:
  MetricSnapshot() = default;
  explicit MetricSnapshot(std::vector<Sample> samples);

  bool empty() const { return samples_.empty(); }
  // The sum over samples named `name` whose labels include every pair of `labels`.
  double Sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
  bool Has(const std::string& name) const;
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  std::vector<Sample> samples_;
  std::multimap<std::string, size_t> by_name_;
};

}  // namespace abcd::loadtest
