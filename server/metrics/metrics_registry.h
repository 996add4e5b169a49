// A small Prometheus metrics registry: counters, gauges and histograms grouped in families,
// serialized in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Metrics are registered once at start-up; the returned pointers stay valid for the registry's
// lifetime and are what the hot path uses. Updates are lock-free atomics and never touch the
// registry mutex, which only guards registration and Serialize().
//
// Families are identified by name; the metrics of a family by their label values. Labels are
// normalized (sorted by name) so {a, b} and {b, a} name the same metric, and every metric of a
// family must carry the same label names. Registering the same name + labels again returns the
// same metric; a clash (other type, help, label names or buckets) is an error.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace abcd {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Monotonic; negative or NaN increments are ignored.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Increment(double amount = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Fixed, strictly increasing finite upper bounds; the +Inf bucket is implicit. An observation
// lands in the first bucket whose bound is >= it. NaN observations are dropped (they would
// turn _sum into NaN for the rest of the process).
class Histogram {
 public:
  struct Snapshot {
    std::vector<double> upper_bounds;         // without +Inf
    std::vector<uint64_t> cumulative_counts;  // upper_bounds.size() + 1, the last is +Inf
    double sum = 0.0;
    uint64_t count = 0;  // == cumulative_counts.back()
  };

  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double value);
  // Buckets are read one by one, so under concurrent Observe() the sum may lag the counts by
  // a few observations; the counts are always cumulative and _count equals the +Inf bucket.
  Snapshot Collect() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;
  ~MetricsRegistry();

  // INVALID_ARGUMENT for a bad metric or label name (Prometheus regexes; `__` prefixes and,
  // for histograms, `le` are reserved), duplicate label names, label values or help that are
  // not UTF-8, or bad histogram bounds (must be finite and strictly increasing; a trailing +Inf
  // is dropped). ALREADY_EXISTS when `name` is taken by a family of another type, help, label
  // names or bounds, or collides with a histogram's _bucket/_sum/_count series.
  absl::StatusOr<Counter*> AddCounter(absl::string_view name, absl::string_view help,
                                      const MetricLabels& labels = {});
  absl::StatusOr<Gauge*> AddGauge(absl::string_view name, absl::string_view help,
                                  const MetricLabels& labels = {});
  absl::StatusOr<Histogram*> AddHistogram(absl::string_view name, absl::string_view help,
                                          std::vector<double> upper_bounds,
                                          const MetricLabels& labels = {});

  // Text format 0.0.4: families sorted by name, each with # HELP and # TYPE, then its metrics
  // sorted by label values. Content-Type: kContentType.
  std::string Serialize() const;

  static constexpr absl::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family;
  struct Metric;

  // Finds or creates the family and the metric for `labels`; `bounds` only for histograms.
  absl::StatusOr<Metric*> Add(Type type, absl::string_view name, absl::string_view help,
                              const MetricLabels& labels, std::vector<double> bounds);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_ ABSL_GUARDED_BY(mu_);
};

// Helpers shared with tests.
bool IsValidMetricName(absl::string_view name);  // [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidLabelName(absl::string_view name);   // [a-zA-Z_][a-zA-Z0-9_]*, no "__" prefix
bool IsValidUtf8(absl::string_view text);
// Go-style sample values: "+Inf", "-Inf", "NaN"; exact integers up to 2^53 without exponent;
// otherwise the shortest round-trip form, in exponent notation below 1e-4 or from 1e6 on.
std::string FormatMetricValue(double value);
std::string EscapeLabelValue(absl::string_view value);  // \\ \" \n
std::string EscapeHelp(absl::string_view help);         // \\ \n

}  // namespace abcd
