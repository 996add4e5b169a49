// Metrics: ServerMetrics' wire contract on prometheus-cpp (the exposition's lines, label
// escaping, cumulative histogram buckets, updates from several threads) fed by fake executor
// observers.
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

// prometheus-cpp's TextSerializer writes the exposition: the lines the contract's consumers
// (Prometheus, the dashboards, the deploy checks) read, byte for byte.
TEST(ServerMetrics, ExpositionLinesFromPrometheusCpp) {
  ServerMetrics metrics;
  ExecutorObserver* observer = metrics.AddModel("odd \"model\" \\ name\nline2", 4096);
  observer->OnRequestFinished(absl::OkStatus(), 3, 2, 0.00390625);
  observer->OnRequestFinished(absl::OkStatus(), 1, 1, 2);
  observer->OnRequestFinished(absl::OkStatus(), 1, 1, 100);
  metrics.CountRequest("generate", "ok");
  const std::string text = metrics.Render();
  for (const char* line : {
           "# HELP abcd_requests_total Requests answered, by request kind and final status.\n"
           "# TYPE abcd_requests_total counter\n",
           "\nabcd_requests_total{kind=\"generate\",status=\"ok\"} 1\n",
           "# TYPE abcd_request_duration_seconds histogram\n",
           "abcd_request_duration_seconds_count 3\n"
           "abcd_request_duration_seconds_sum 102.00390625\n"
           "abcd_request_duration_seconds_bucket{le=\"0.001\"} 0\n"
           "abcd_request_duration_seconds_bucket{le=\"0.0025\"} 0\n"
           "abcd_request_duration_seconds_bucket{le=\"0.005\"} 1\n",
           "abcd_request_duration_seconds_bucket{le=\"2.5\"} 2\n",
           "abcd_request_duration_seconds_bucket{le=\"60\"} 2\n"
           "abcd_request_duration_seconds_bucket{le=\"+Inf\"} 3\n",
           "abcd_prompt_tokens_total 5\n",
           "abcd_state_bytes_per_sequence{model=\"odd \\\"model\\\" \\\\ name\\nline2\"} 4096\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin\n" << text;
  }
  EXPECT_EQ(std::string(ServerMetrics::kContentType), "text/plain; version=0.0.4; charset=utf-8");
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
      {"abcd_kv_cache_spare_bytes", "gauge"},
      {"abcd_state_bytes_per_sequence", "gauge"},
      {"abcd_prefix_cache_bytes", "gauge"},
      {"abcd_prefix_cache_entries", "gauge"},
      {"abcd_prefix_cache_queried_tokens_total", "counter"},
      {"abcd_prefix_cache_hit_tokens_total", "counter"},
      {"abcd_prefix_cache_evictions_total", "counter"},
      {"abcd_prefix_cache_miss_tokens_total", "counter"},
      {"abcd_prefix_cache_lookups_total", "counter"},
      {"abcd_speculative_draft_tokens_total", "counter"},
      {"abcd_speculative_accepted_tokens_total", "counter"},
      {"abcd_prefill_overdue_iterations_total", "counter"},
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
  for (absl::string_view kind :
       {"generate", "translate", "completions", "chat", "list_models", "sessions", "other"}) {
    for (absl::string_view status :
         {"ok", "invalid_argument", "resource_exhausted", "cancelled", "deadline_exceeded",
          "unavailable", "not_found", "aborted", "failed_precondition", "internal"}) {
      EXPECT_EQ(SampleValue(text, absl::StrCat("abcd_requests_total{kind=\"", kind, "\",status=\"",
                                               status, "\"}")),
                "0")
          << kind << " " << status;
    }
  }
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_per_sequence{model=\"abc-lm\"}"), "4096");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_hit_tokens_total{model=\"abc-lm\"}"), "0");
  EXPECT_EQ(SampleValue(text, "abcd_batch_size_bucket{le=\"1024\"}"), "0");
  EXPECT_EQ(SampleValue(text, "abcd_request_duration_seconds_bucket{le=\"0.001\"}"), "0");
  EXPECT_EQ(SampleValue(text, "abcd_request_duration_seconds_bucket{le=\"60\"}"), "0");
}

// Issue 28: lookups by outcome and missed tokens by reason, one labelled series each, following
// the executor's PrefixCacheCounters.
TEST(ServerMetrics, PrefixCacheLookupsAndMissesByLabel) {
  ServerMetrics metrics;
  ExecutorObserver* lm = metrics.AddModel("abc-lm", 4096);
  std::string text = metrics.Render();
  for (const char* outcome : {"hit", "partial", "evicted", "miss"}) {
    EXPECT_EQ(SampleValue(text, absl::StrCat("abcd_prefix_cache_lookups_total{model=\"abc-lm\","
                                             "outcome=\"",
                                             outcome, "\"}")),
              "0")
        << outcome;
  }
  ExecutorStats stats;
  stats.prefix_cache_counters.lookups[PrefixCacheCounters::kHit] = 7;
  stats.prefix_cache_counters.lookups[PrefixCacheCounters::kEvicted] = 2;
  stats.prefix_cache_counters.miss_evicted_tokens = 30;
  stats.prefix_cache_counters.miss_not_cached_tokens = 11;
  stats.prefix_cache_counters.miss_last_tokens = 9;
  lm->OnIteration(1, stats);
  text = metrics.Render();
  const std::string model = "abcd_prefix_cache_lookups_total{model=\"abc-lm\",outcome=";
  EXPECT_EQ(SampleValue(text, model + "\"hit\"}"), "7");
  EXPECT_EQ(SampleValue(text, model + "\"evicted\"}"), "2");
  EXPECT_EQ(SampleValue(text, model + "\"miss\"}"), "0");
  const std::string miss = "abcd_prefix_cache_miss_tokens_total{model=\"abc-lm\",reason=";
  EXPECT_EQ(SampleValue(text, miss + "\"evicted\"}"), "30");
  EXPECT_EQ(SampleValue(text, miss + "\"not_cached\"}"), "11");
  EXPECT_EQ(SampleValue(text, miss + "\"last_token\"}"), "9");
}

// Speculative decoding: drafted and kept tokens per model, moved by OnSpeculation.
TEST(ServerMetrics, SpeculativeTokensPerModel) {
  ServerMetrics metrics;
  ExecutorObserver* lm = metrics.AddModel("abc-lm", 4096);
  metrics.AddModel("abc-lm-untrained", 1024);
  std::string text = metrics.Render();
  EXPECT_EQ(SampleValue(text, "abcd_speculative_draft_tokens_total{model=\"abc-lm\"}"), "0");
  lm->OnSpeculation(4, 3);
  lm->OnSpeculation(2, 0);
  text = metrics.Render();
  EXPECT_EQ(SampleValue(text, "abcd_speculative_draft_tokens_total{model=\"abc-lm\"}"), "6");
  EXPECT_EQ(SampleValue(text, "abcd_speculative_accepted_tokens_total{model=\"abc-lm\"}"), "3");
  EXPECT_EQ(SampleValue(text, "abcd_speculative_draft_tokens_total{model=\"abc-lm-untrained\"}"),
            "0");
}

// Iterations widened for overdue prompts (--prefill_deadline_ms): one per OnOverduePrefill, per
// model.
TEST(ServerMetrics, PrefillOverdueIterationsPerModel) {
  ServerMetrics metrics;
  ExecutorObserver* lm = metrics.AddModel("abc-lm", 4096);
  metrics.AddModel("abc-lm-untrained", 1024);
  const std::string series = "abcd_prefill_overdue_iterations_total{model=\"abc-lm\"}";
  EXPECT_EQ(SampleValue(metrics.Render(), series), "0");
  lm->OnOverduePrefill();
  lm->OnOverduePrefill();
  const std::string text = metrics.Render();
  EXPECT_EQ(SampleValue(text, series), "2");
  EXPECT_EQ(SampleValue(text, "abcd_prefill_overdue_iterations_total{model=\"abc-lm-untrained\"}"),
            "0");
}

// The prefix cache's figures per model: gauges from the latest stats, counters following the
// executor's cumulative totals across renders.
TEST(ServerMetrics, PrefixCacheFiguresPerModel) {
  ServerMetrics metrics;
  ExecutorObserver* lm = metrics.AddModel("abc-lm", 4096);
  ExecutorObserver* other = metrics.AddModel("abc-lm-untrained", 1024);
  ExecutorStats stats;
  stats.prefix_cache_bytes = 5000;
  stats.prefix_cache_entries = 3;
  stats.prefix_cache_queried_tokens = 100;
  stats.prefix_cache_hit_tokens = 40;
  stats.prefix_cache_evictions = 1;
  lm->OnIteration(1, stats);
  std::string text = metrics.Render();
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_bytes{model=\"abc-lm\"}"), "5000");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_entries{model=\"abc-lm\"}"), "3");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_queried_tokens_total{model=\"abc-lm\"}"), "100");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_hit_tokens_total{model=\"abc-lm\"}"), "40");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_evictions_total{model=\"abc-lm\"}"), "1");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_hit_tokens_total{model=\"abc-lm-untrained\"}"),
            "0");
  stats.prefix_cache_hit_tokens = 90;
  stats.prefix_cache_bytes = 100;
  lm->OnIteration(1, stats);
  other->OnIteration(1, stats);
  text = metrics.Render();
  text = metrics.Render();  // rendering twice adds nothing
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_hit_tokens_total{model=\"abc-lm\"}"), "90");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_bytes{model=\"abc-lm\"}"), "100");
  EXPECT_EQ(SampleValue(text, "abcd_prefix_cache_hit_tokens_total{model=\"abc-lm-untrained\"}"),
            "90");
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
  // Cardinality stays fixed: 7 kinds x 10 statuses.
  int samples = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "abcd_requests_total{")) ++samples;
  }
  EXPECT_EQ(samples, 70);
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kAborted), "aborted");
  EXPECT_EQ(ServerMetrics::StatusLabel(absl::StatusCode::kFailedPrecondition),
            "failed_precondition");
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
  stats.kv_cache_spare_bytes = 2048;
  lm->OnIteration(0, stats);  // empty batch: not observed
  stats.running_sequences = 4;
  lm->OnIteration(3, stats);  // the latest stats win
  ExecutorStats mt_stats;
  mt_stats.running_sequences = 2;
  mt_stats.waiting_requests = 5;
  mt_stats.state_bytes_in_use = 4000;
  mt_stats.state_bytes_capacity = int64_t{1} << 30;
  mt_stats.kv_cache_spare_bytes = 1024;
  mt->OnIteration(2, mt_stats);

  lm->OnFirstToken(0.02);
  lm->OnToken(0.004);
  lm->OnToken(0.004);
  lm->OnTokensGenerated(1);
  lm->OnTokensGenerated(2);
  lm->OnRequestFinished(absl::OkStatus(), 7, 3, 0.03);
  mt->OnFirstToken(2);
  mt->OnTokensGenerated(1);
  mt->OnRequestFinished(absl::CancelledError(), 11, 1, 2.5);
  mt->OnRequestFinished(absl::InvalidArgumentError("x"), 0, 0, 0.0005);

  const std::string text = metrics.Render();
  EXPECT_EQ(SampleValue(text, "abcd_running_sequences"), "6");
  EXPECT_EQ(SampleValue(text, "abcd_waiting_requests"), "6");
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_in_use"), "7000");
  EXPECT_EQ(SampleValue(text, "abcd_state_bytes_capacity"), "2147483648");
  EXPECT_EQ(SampleValue(text, "abcd_kv_cache_bytes"), "512");
  EXPECT_EQ(SampleValue(text, "abcd_kv_cache_spare_bytes"), "3072");
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
  // Generated tokens count as they are generated (OnTokensGenerated), not again at the end.
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
        observer->OnTokensGenerated(1);
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
  lm->OnTokensGenerated(16);
  lm->OnRequestFinished(absl::OkStatus(), 5, 16, 0.31);
  lm->OnSpeculation(4, 2);
  odd->OnTokensGenerated(2);
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
