// Metrics: the registry's text exposition (format 0.0.4) byte for byte, label escaping,
// cumulative histogram buckets, lock-free updates from several threads, registration errors,
// and ServerMetrics' wire contract fed by fake executor observers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/metrics/metrics_registry.h"
#include "server/metrics/server_metrics.h"

namespace abcd {
namespace {

// The value of the sample line that starts with `series` (name plus labels, exactly as
// written), or "" when there is no such line.
std::string SampleValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, absl::StrCat(series, " "))) {
      return std::string(line.substr(series.size() + 1));
    }
  }
  return "";
}

TEST(MetricsRegistry, ExactExposition) {
  MetricsRegistry registry;
  Counter* ok = *registry.AddCounter("test_requests_total", "Requests.", {{"code", "200"}});
  Counter* bad = *registry.AddCounter("test_requests_total", "Requests.", {{"code", "500"}});
  Gauge* temperature = *registry.AddGauge("test_temperature_celsius", "Heat.\nSecond \\ line");
  Histogram* latency =
      *registry.AddHistogram("test_latency_seconds", "Latency.", {0.005, 0.5, 1, 2.5});
  ok->Increment();
  ok->Increment(2);
  bad->Increment(0.5);
  temperature->Set(-3.25);
  temperature->Add(1);
  latency->Observe(0.00390625);
  latency->Observe(0.5);
  latency->Observe(2);
  latency->Observe(100);

  EXPECT_EQ(registry.Serialize(),
            "# HELP test_latency_seconds Latency.\n"
            "# TYPE test_latency_seconds histogram\n"
            "test_latency_seconds_bucket{le=\"0.005\"} 1\n"
            "test_latency_seconds_bucket{le=\"0.5\"} 2\n"
            "test_latency_seconds_bucket{le=\"1\"} 2\n"
            "test_latency_seconds_bucket{le=\"2.5\"} 3\n"
            "test_latency_seconds_bucket{le=\"+Inf\"} 4\n"
            "test_latency_seconds_sum 102.50390625\n"
            "test_latency_seconds_count 4\n"
            "# HELP test_requests_total Requests.\n"
            "# TYPE test_requests_total counter\n"
            "test_requests_total{code=\"200\"} 3\n"
            "test_requests_total{code=\"500\"} 0.5\n"
            "# HELP test_temperature_celsius Heat.\\nSecond \\\\ line\n"
            "# TYPE test_temperature_celsius gauge\n"
            "test_temperature_celsius -2.25\n");
}

TEST(MetricsRegistry, LabelValuesAreEscapedAndSorted) {
  MetricsRegistry registry;
  // Label order at registration does not matter: names are sorted.
  Gauge* gauge = *registry.AddGauge("test_info", "", {{"zone", "a\\b\"c\nd"}, {"app", "ünïcödé"}});
  gauge->Set(1);
  EXPECT_EQ(*registry.AddGauge("test_info", "", {{"app", "ünïcödé"}, {"zone", "a\\b\"c\nd"}}),
            gauge);
  EXPECT_EQ(registry.Serialize(),
            "# HELP test_info\n"
            "# TYPE test_info gauge\n"
            "test_info{app=\"ünïcödé\",zone=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeAndKeepLabels) {
  MetricsRegistry registry;
  Histogram* histogram =
      *registry.AddHistogram("test_size", "Sizes.", {1, 2, 4, HUGE_VAL}, {{"pool", "x"}});
  EXPECT_EQ(histogram->upper_bounds(), (std::vector<double>{1, 2, 4}));  // +Inf dropped
  for (double v : {0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 1e9}) histogram->Observe(v);
  histogram->Observe(std::nan(""));  // dropped
  const Histogram::Snapshot snapshot = histogram->Collect();
  EXPECT_EQ(snapshot.cumulative_counts, (std::vector<uint64_t>{2, 4, 6, 8}));
  EXPECT_EQ(snapshot.count, 8u);
  EXPECT_DOUBLE_EQ(snapshot.sum, 1e9 + 16.5);

  const std::string text = registry.Serialize();
  EXPECT_EQ(SampleValue(text, "test_size_bucket{pool=\"x\",le=\"1\"}"), "2");
  EXPECT_EQ(SampleValue(text, "test_size_bucket{pool=\"x\",le=\"2\"}"), "4");
  EXPECT_EQ(SampleValue(text, "test_size_bucket{pool=\"x\",le=\"4\"}"), "6");
  EXPECT_EQ(SampleValue(text, "test_size_bucket{pool=\"x\",le=\"+Inf\"}"), "8");
  EXPECT_EQ(SampleValue(text, "test_size_count{pool=\"x\"}"), "8");
  // Not an integer: Go's %g switches to exponent form from 1e6 on.
  EXPECT_EQ(SampleValue(text, "test_size_sum{pool=\"x\"}"), "1.0000000165e+09");
}

TEST(MetricsRegistry, EmptyHistogramHasOnlyInfBucket) {
  MetricsRegistry registry;
  Histogram* histogram = *registry.AddHistogram("test_empty", "E.", {});
  histogram->Observe(-7);
  EXPECT_EQ(registry.Serialize(),
            "# HELP test_empty E.\n"
            "# TYPE test_empty histogram\n"
            "test_empty_bucket{le=\"+Inf\"} 1\n"
            "test_empty_sum -7\n"
            "test_empty_count 1\n");
}

TEST(MetricsRegistry, CountersOnlyGoUp) {
  MetricsRegistry registry;
  Counter* counter = *registry.AddCounter("test_total", "T.");
  counter->Increment(2);
  counter->Increment(-1);
  counter->Increment(std::nan(""));
  EXPECT_EQ(counter->Value(), 2);
}

TEST(MetricsRegistry, ConcurrentUpdatesSum) {
  MetricsRegistry registry;
  Counter* counter = *registry.AddCounter("test_total", "T.");
  Gauge* gauge = *registry.AddGauge("test_gauge", "G.");
  Histogram* histogram = *registry.AddHistogram("test_hist", "H.", {0.5, 1.5});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        counter->Increment();
        gauge->Add(t % 2 == 0 ? 2 : -1);
        histogram->Observe(1);
      }
    });
  }
  // Scrapes while the writers run must not block them or see non-cumulative buckets.
  for (int i = 0; i < 20; ++i) {
    const Histogram::Snapshot snapshot = histogram->Collect();
    EXPECT_LE(snapshot.cumulative_counts[0], snapshot.cumulative_counts[1]);
    EXPECT_EQ(snapshot.cumulative_counts.back(), snapshot.count);
    EXPECT_FALSE(registry.Serialize().empty());
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter->Value(), kThreads * kPerThread);
  EXPECT_EQ(gauge->Value(), kPerThread * (2 + 2 - 1 - 1));
  const Histogram::Snapshot snapshot = histogram->Collect();
  EXPECT_EQ(snapshot.count, uint64_t{kThreads * kPerThread});
  EXPECT_EQ(snapshot.cumulative_counts, (std::vector<uint64_t>{0, 400000, 400000}));
  EXPECT_EQ(snapshot.sum, kThreads * kPerThread);
}

TEST(MetricsRegistry, SameNameAndLabelsReturnSameMetric) {
  MetricsRegistry registry;
  Counter* a = *registry.AddCounter("test_total", "T.", {{"k", "a"}});
  EXPECT_EQ(*registry.AddCounter("test_total", "T.", {{"k", "a"}}), a);
  EXPECT_NE(*registry.AddCounter("test_total", "T.", {{"k", "b"}}), a);
  Histogram* h = *registry.AddHistogram("test_h", "H.", {1, 2});
  EXPECT_EQ(*registry.AddHistogram("test_h", "H.", {1, 2}), h);
}

TEST(MetricsRegistry, ClashesAreErrors) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry.AddCounter("test_total", "T.", {{"k", "a"}}).ok());
  ASSERT_TRUE(registry.AddHistogram("test_h", "H.", {1, 2}).ok());
  EXPECT_EQ(registry.AddGauge("test_total", "T.", {{"k", "a"}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddHistogram("test_total", "T.", {1}, {{"k", "a"}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter("test_total", "Other help.", {{"k", "a"}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter("test_total", "T.", {{"other", "a"}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter("test_total", "T.").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddHistogram("test_h", "H.", {1, 3}).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Series a histogram writes cannot be taken by other families, and vice versa.
  EXPECT_EQ(registry.AddGauge("test_h_bucket", "G.").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter("test_h_count", "C.").status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddGauge("test_g_sum", "G.").ok());
  EXPECT_EQ(registry.AddHistogram("test_g", "H.", {1}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(MetricsRegistry, InvalidNamesAndBoundsAreRejected) {
  MetricsRegistry registry;
  const auto invalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(registry.AddCounter("", "x").status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("1abc", "x").status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("a-b", "x").status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("a b", "x").status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("ok", "x", {{"", "v"}}).status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("ok", "x", {{"a:b", "v"}}).status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("ok", "x", {{"__name__", "v"}}).status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("ok", "x", {{"a", "1"}, {"a", "2"}}).status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("ok", "x", {{"a", "\xff"}}).status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("ok", "\xc0\xaf").status().code(), invalid);  // overlong
  EXPECT_EQ(registry.AddHistogram("h", "x", {1}, {{"le", "1"}}).status().code(), invalid);
  EXPECT_EQ(registry.AddHistogram("h", "x", {2, 1}).status().code(), invalid);
  EXPECT_EQ(registry.AddHistogram("h", "x", {1, 1}).status().code(), invalid);
  EXPECT_EQ(registry.AddHistogram("h", "x", {std::nan("")}).status().code(), invalid);
  EXPECT_EQ(registry.AddHistogram("h", "x", {-HUGE_VAL, 1}).status().code(), invalid);
  // Valid corner cases.
  EXPECT_TRUE(registry.AddCounter("ns:sub_sys:x_total", "x", {{"_a1", ""}}).ok());
  EXPECT_TRUE(registry.AddGauge("g", "x", {{"le", "fine on a gauge"}}).ok());
  EXPECT_EQ(registry.Serialize().find("ok"), std::string::npos);  // nothing half-registered
}

TEST(MetricsRegistry, GoStyleNumbers) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(1), "1");
  EXPECT_EQ(FormatMetricValue(-1), "-1");
  EXPECT_EQ(FormatMetricValue(1e6), "1000000");
  EXPECT_EQ(FormatMetricValue(1073741824), "1073741824");
  EXPECT_EQ(FormatMetricValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(0.5), "0.5");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.0025), "0.0025");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(0.00001), "1e-05");
  EXPECT_EQ(FormatMetricValue(-1.5e-7), "-1.5e-07");
  EXPECT_EQ(FormatMetricValue(123456.5), "123456.5");
  EXPECT_EQ(FormatMetricValue(1234567.5), "1.2345675e+06");
  EXPECT_EQ(FormatMetricValue(999999.5), "999999.5");
  EXPECT_EQ(FormatMetricValue(1e-300), "1e-300");
  EXPECT_EQ(FormatMetricValue(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

// ---------------------------------------------------------------------------------------------
// ServerMetrics.

TEST(ServerMetrics, ExportsTheWholeContract) {
  ServerMetrics metrics;
  metrics.AddModel("abc-lm", 4096);
  const std::string text = metrics.Render();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"abcd_requests_total", "counter"},
      {"abcd_prompt_tokens_total", "counter"},
      {"abcd_generated_tokens_total", "counter"},
      {"abcd_time_to_first_token_seconds", "histogram"},
      {"abcd_inter_token_latency_seconds", "histogram"},
      {"abcd_request_duration_seconds", "histogram"},
      {"abcd_batch_size", "histogram"},
      {"abcd_running_sequences", "gauge"},
      {"abcd_waiting_requests", "gauge"},
      {"abcd_state_bytes_in_use", "gauge"},
      {"abcd_state_bytes_capacity", "gauge"},
      {"abcd_kv_cache_bytes", "gauge"},
      {"abcd_state_bytes_per_sequence", "gauge"},
  };
  int type_lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "# TYPE ")) ++type_lines;
  }
  EXPECT_EQ(type_lines, static_cast<int>(families.size()));
  for (const auto& [name, type] : families) {
    EXPECT_NE(text.find(absl::StrCat("\n# TYPE ", name, " ", type, "\n")), std::string::npos)
        << name;
  }
  // Every kind x status pair exists from the start, at zero.
  for (absl::string_view kind : {"generate", "translate", "completions", "list_models", "other"}) {
    for (absl::string_view status : {"ok", "invalid_argument", "resource_exhausted", "cancelled",
                                     "deadline_exceeded", "unavailable", "not_found", "internal"}) {
      EXPECT_EQ(SampleValue(text, absl::StrCat("abcd_requests_total{kind=\"", kind, "\",status=\"",
                                               status, "\"}")),
                "0")
          << kind << " " << status;
    }
  }
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_per_sequence{model=\"abc-lm\"}"), "4096");
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_bucket{le=\"1024\"}"), "0");
  EXPECT_EQ(SampleValue(text, "abcd_request_duration_seconds_bucket{le=\"0.001\"}"), "0");
  EXPECT_EQ(SampleValue(text, "abcd_request_duration_seconds_bucket{le=\"60\"}"), "0");
}

TEST(ServerMetrics, CountRequestUsesTheFixedTable) {
  ServerMetrics metrics;
  metrics.CountRequest("generate", "ok");
  metrics.CountRequest("generate", "ok");
  metrics.CountRequest("translate", absl::ResourceExhaustedError("full"));
  metrics.CountRequest("completions", absl::OkStatus());
  metrics.CountRequest("list_models", absl::PermissionDeniedError("no"));  // -> internal
  metrics.CountRequest("bogus", "weird");                                  // -> other/internal
  metrics.CountRequest("bogus2", "ok");                                    // -> other/ok
  const std::string text = metrics.Render();
  auto value = [&](absl::string_view kind, absl::string_view status) {
    return SampleValue(
        text, absl::StrCat("abcd_requests_total{kind=\"", kind, "\",status=\"", status, "\"}"));
  };
  EXPECT_EQ(value("generate", "ok"), "2");
  EXPECT_EQ(value("translate", "resource_exhausted"), "1");
  EXPECT_EQ(value("completions", "ok"), "1");
  EXPECT_EQ(value("list_models", "internal"), "1");
  EXPECT_EQ(value("other", "internal"), "1");
  EXPECT_EQ(value("other", "ok"), "1");
  EXPECT_EQ(text.find("bogus"), std::string::npos);
  EXPECT_EQ(text.find("weird"), std::string::npos);
  // Cardinality stays fixed: 5 kinds x 8 statuses.
  int samples = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "abcd_requests_total{")) ++samples;
  }
  EXPECT_EQ(samples, 40);
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kNotFound), "not_found");
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kUnavailable), "unavailable");
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kCancelled), "cancelled");
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kUnknown), "internal");
}

TEST(ServerMetrics, ObserversFeedGaugesHistogramsAndCounters) {
  ServerMetrics metrics;
  ExecutorObserver* lm = metrics.AddModel("abc-lm", 1000);
  ExecutorObserver* mt = metrics.AddModel("abc-mt", 2000);
  ASSERT_NE(lm, mt);

  ExecutorStats stats;
  stats.running_sequences = 3;
  stats.waiting_requests = 1;
  stats.state_bytes_in_use = 3000;
  stats.state_bytes_capacity = int64_t{1} << 30;
  stats.kv_cache_bytes = 512;
  lm->OnIteration(0, stats);  // empty batch: not observed
  stats.running_sequences = 4;
  lm->OnIteration(3, stats);  // the latest stats win
  ExecutorStats mt_stats;
  mt_stats.running_sequences = 2;
  mt_stats.waiting_requests = 5;
  mt_stats.state_bytes_in_use = 4000;
  mt_stats.state_bytes_capacity = int64_t{1} << 30;
  mt->OnIteration(2, mt_stats);

  lm->OnFirstToken(0.02);
  lm->OnToken(0.004);
  lm->OnToken(0.004);
  lm->OnRequestFinished(absl::OkStatus(), 7, 3, 0.03);
  mt->OnFirstToken(2);
  mt->OnRequestFinished(absl::CancelledError(), 11, 1, 2.5);
  mt->OnRequestFinished(absl::InvalidArgumentError("x"), 0, 0, 0.0005);

  const std::string text = metrics.Render();
  EXPECT_EQ(SampleValue(text, "abcd_running_sequences"), "6");
  EXPECT_EQ(SampleValue(text, "abcd_waiting_requests"), "6");
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_in_use"), "7000");
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_capacity"), "2147483648");
  EXPECT_EQ(SampleValue(text, "abcd_kv_cache_bytes"), "512");
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_per_sequence{model=\"abc-lm\"}"), "1000");
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_per_sequence{model=\"abc-mt\"}"), "2000");

  EXPECT_EQ(SampleValue(text, "abcd_batch_size_count"), "2");
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_sum"), "5");
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_bucket{le=\"1\"}"), "0");
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_bucket{le=\"2\"}"), "1");
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_bucket{le=\"4\"}"), "2");

  EXPECT_EQ(SampleValue(text, "abcd_time_to_first_token_seconds_count"), "2");
  EXPECT_EQ(SampleValue(text, "abcd_time_to_first_token_seconds_bucket{le=\"0.025\"}"), "1");
  EXPECT_EQ(SampleValue(text, "abcd_time_to_first_token_seconds_bucket{le=\"2.5\"}"), "2");
  EXPECT_EQ(SampleValue(text, "abcd_inter_token_latency_seconds_count"), "2");
  EXPECT_EQ(SampleValue(text, "abcd_inter_token_latency_seconds_bucket{le=\"0.005\"}"), "2");
  EXPECT_EQ(SampleValue(text, "abcd_request_duration_seconds_count"), "3");
  EXPECT_EQ(SampleValue(text, "abcd_request_duration_seconds_bucket{le=\"0.001\"}"), "1");

  EXPECT_EQ(SampleValue(text, "abcd_prompt_tokens_total"), "18");
  EXPECT_EQ(SampleValue(text, "abcd_generated_tokens_total"), "4");

  // A later iteration replaces the model's figures (gauges, not counters).
  lm->OnIteration(1, ExecutorStats{});
  const std::string later = metrics.Render();
  EXPECT_EQ(SampleValue(later, "abcd_running_sequences"), "2");
  EXPECT_EQ(SampleValue(later, "abcd_state_bytes_in_use"), "4000");
}

TEST(ServerMetrics, RenderWhileEnginesRun) {
  ServerMetrics metrics;
  std::vector<ExecutorObserver*> observers;
  for (int m = 0; m < 4; ++m) observers.push_back(metrics.AddModel(absl::StrCat("m", m), 1));
  constexpr int kIterations = 20000;
  std::vector<std::thread> engines;
  for (ExecutorObserver* observer : observers) {
    engines.emplace_back([observer] {
      ExecutorStats stats;
      for (int i = 1; i <= kIterations; ++i) {
        stats.running_sequences = i % 7;
        observer->OnIteration(1, stats);
        observer->OnToken(0.001);
        observer->OnRequestFinished(absl::OkStatus(), 2, 1, 0.01);
      }
    });
  }
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(metrics.Render().empty());
  for (auto& engine : engines) engine.join();
  const std::string text = metrics.Render();
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_count"), absl::StrCat(4 * kIterations));
  EXPECT_EQ(SampleValue(text, "abcd_prompt_tokens_total"), absl::StrCat(8 * kIterations));
  EXPECT_EQ(SampleValue(text, "abcd_generated_tokens_total"), absl::StrCat(4 * kIterations));
  EXPECT_EQ(SampleValue(text, "abcd_running_sequences"), absl::StrCat(4 * (kIterations % 7)));
}

TEST(ServerMetrics, NonUtf8ModelNamesAreSanitized) {
  ServerMetrics metrics;
  metrics.AddModel(
      "bad\xff"
      "name",
      1);
  EXPECT_EQ(SampleValue(metrics.Render(), "abcd_state_bytes_per_sequence{model=\"bad?name\"}"),
            "1");
}

// A representative exposition for the `metrics_exposition_parses` test, which runs this test
// with ABCD_METRICS_DUMP=<file> and parses the file with prometheus_client's reference parser.
TEST(ServerMetrics, ExpositionForReferenceParser) {
  ServerMetrics metrics;
  ExecutorObserver* lm = metrics.AddModel("abc-lm-untrained", 24576);
  ExecutorObserver* odd = metrics.AddModel("odd \"model\" \\ name\nline2", 1 << 20);
  ExecutorStats stats;
  stats.running_sequences = 2;
  stats.waiting_requests = 3;
  stats.state_bytes_in_use = 49152;
  stats.state_bytes_capacity = int64_t{1} << 30;
  stats.kv_cache_bytes = 8192;
  lm->OnIteration(2, stats);
  odd->OnIteration(1, stats);
  lm->OnFirstToken(0.015);
  lm->OnToken(0.0042);
  odd->OnToken(0.25);
  lm->OnRequestFinished(absl::OkStatus(), 5, 16, 0.31);
  odd->OnRequestFinished(absl::DeadlineExceededError("late"), 9, 2, 75);
  metrics.CountRequest("generate", "ok");
  metrics.CountRequest("generate", "ok");
  metrics.CountRequest("generate", "ok");
  metrics.CountRequest("translate", absl::DeadlineExceededError("late"));
  const std::string text = metrics.Render();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');

  const char* path = std::getenv("ABCD_METRICS_DUMP");
  if (path != nullptr) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    ASSERT_TRUE(out.good()) << path;
  }
}

}  // namespace
}  // namespace abcd
