#include "loadtest/lib/metrics_watcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace abcd::loadtest {
namespace {

double MeanDelta(const MetricSnapshot& before, const MetricSnapshot& after, const std::string& base,
                 double scale) {
  const double count = after.Sum(base + "_count") - before.Sum(base + "_count");
  if (count <= 0) return 0;
  return (after.Sum(base + "_sum") - before.Sum(base + "_sum")) / count * scale;
}

}  // namespace

nlohmann::json ServerMetricsReport::ToJson() const {
  nlohmann::json j;
  j["available"] = available;
  if (!error.empty()) j["error"] = error;
  j["scrapes"] = scrapes;
  j["requests"] = requests;
  j["prompt_tokens"] = prompt_tokens;
  j["generated_tokens"] = generated_tokens;
  j["draft_tokens"] = draft_tokens;
  j["accepted_draft_tokens"] = accepted_draft_tokens;
  j["mean_ttft_ms"] = mean_ttft_ms;
  j["mean_itl_ms"] = mean_itl_ms;
  j["mean_request_duration_ms"] = mean_request_duration_ms;
  j["mean_batch_size"] = mean_batch_size;
  j["batches"] = batches;
  j["peak_running_sequences"] = peak_running_sequences;
  j["peak_waiting_requests"] = peak_waiting_requests;
  j["peak_state_bytes_in_use"] = peak_state_bytes_in_use;
  j["peak_kv_cache_bytes"] = peak_kv_cache_bytes;
  j["state_bytes_capacity"] = state_bytes_capacity;
  j["state_bytes_per_sequence"] = state_bytes_per_sequence;
  return j;
}

MetricsWatcher::MetricsWatcher(std::string address, int port, int poll_interval_ms)
    : address_(std::move(address)),
      port_(port),
      poll_interval_ms_(std::max(10, poll_interval_ms)) {}

MetricsWatcher::~MetricsWatcher() {
  stop_.store(true);
  if (poller_.joinable()) poller_.join();
}

bool MetricsWatcher::Scrape(MetricSnapshot* snapshot, std::string* error) {
  httplib::Client client(address_, port_);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Result result = client.Get("/metrics");
  if (!result) {
    *error = absl::StrCat("GET /metrics: ", httplib::to_string(result.error()));
    return false;
  }
  if (result->status != 200) {
    *error = absl::StrCat("GET /metrics: HTTP ", result->status);
    return false;
  }
  *snapshot = MetricSnapshot(ParsePrometheusText(result->body));
  return true;
}

void MetricsWatcher::ObservePeaks(const MetricSnapshot& s) {
  absl::MutexLock lock(&mu_);
  ++peaks_.scrapes;
  peaks_.peak_running_sequences =
      std::max(peaks_.peak_running_sequences, s.Sum("abcd_running_sequences"));
  peaks_.peak_waiting_requests =
      std::max(peaks_.peak_waiting_requests, s.Sum("abcd_waiting_requests"));
  peaks_.peak_state_bytes_in_use =
      std::max(peaks_.peak_state_bytes_in_use, s.Sum("abcd_state_bytes_in_use"));
  peaks_.peak_kv_cache_bytes = std::max(peaks_.peak_kv_cache_bytes, s.Sum("abcd_kv_cache_bytes"));
  peaks_.state_bytes_capacity = s.Sum("abcd_state_bytes_capacity");
}

void MetricsWatcher::Poll() {
  while (!stop_.load()) {
    const auto next =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(poll_interval_ms_);
    MetricSnapshot snapshot;
    std::string error;
    if (Scrape(&snapshot, &error)) ObservePeaks(snapshot);
    while (!stop_.load() && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

void MetricsWatcher::Start() {
  if (Scrape(&before_, &before_error_)) ObservePeaks(before_);
  stop_.store(false);
  poller_ = std::thread([this] { Poll(); });
}

ServerMetricsReport MetricsWatcher::Stop() {
  stop_.store(true);
  if (poller_.joinable()) poller_.join();
  MetricSnapshot after;
  std::string error;
  const bool after_ok = Scrape(&after, &error);
  if (after_ok) ObservePeaks(after);
  ServerMetricsReport report;
  {
    absl::MutexLock lock(&mu_);
    report = peaks_;
  }
  if (before_error_.empty() && after_ok) {
    report.available = true;
  } else {
    report.error = before_error_.empty() ? error : before_error_;
    return report;
  }
  // Counter deltas, per {kind,status}.
  std::map<std::string, double> before_requests;
  for (const Sample& s : before_.samples()) {
    if (s.name != "abcd_requests_total" || !s.labels.contains("kind") ||
        !s.labels.contains("status")) {
      continue;
    }
    before_requests[absl::StrCat(s.labels.at("kind"), "/", s.labels.at("status"))] += s.value;
  }
  for (const Sample& s : after.samples()) {
    if (s.name != "abcd_requests_total" || !s.labels.contains("kind") ||
        !s.labels.contains("status")) {
      continue;
    }
    const std::string key = absl::StrCat(s.labels.at("kind"), "/", s.labels.at("status"));
    const double delta = s.value - before_requests[key];
    if (delta != 0) report.requests[key] = delta;
  }
  report.prompt_tokens =
      after.Sum("abcd_prompt_tokens_total") - before_.Sum("abcd_prompt_tokens_total");
  report.generated_tokens =
      after.Sum("abcd_generated_tokens_total") - before_.Sum("abcd_generated_tokens_total");
  report.draft_tokens = after.Sum("abcd_speculative_draft_tokens_total") -
                        before_.Sum("abcd_speculative_draft_tokens_total");
  report.accepted_draft_tokens = after.Sum("abcd_speculative_accepted_tokens_total") -
                                 before_.Sum("abcd_speculative_accepted_tokens_total");
  report.mean_ttft_ms = MeanDelta(before_, after, "abcd_time_to_first_token_seconds", 1000);
  report.mean_itl_ms = MeanDelta(before_, after, "abcd_inter_token_latency_seconds", 1000);
  report.mean_request_duration_ms =
      MeanDelta(before_, after, "abcd_request_duration_seconds", 1000);
  report.mean_batch_size = MeanDelta(before_, after, "abcd_batch_size", 1);
  report.batches = after.Sum("abcd_batch_size_count") - before_.Sum("abcd_batch_size_count");
  for (const Sample& s : after.samples()) {
    if (s.name == "abcd_state_bytes_per_sequence" && s.labels.contains("model")) {
      report.state_bytes_per_sequence[s.labels.at("model")] = s.value;
    }
  }
  return report;
}

}  // namespace abcd::loadtest
