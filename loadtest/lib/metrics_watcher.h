// Watches abcd-server's /metrics around one measured phase: scrapes once before, polls the
// gauges (running sequences, waiting requests, state bytes) on a background thread to find their
// peaks, scrapes once after, and reports counter and histogram deltas. Metric names are the
// server's contract (server/metrics/server_metrics.h).
//
// Thread-safety: Start and Stop from one thread; the poller is internal.
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "loadtest/lib/prometheus_text.h"
#include "nlohmann/json.hpp"

namespace abcd::loadtest {

struct ServerMetricsReport {
  bool available = false;  // both scrapes worked
  std::string error;
  int scrapes = 0;
  std::map<std::string, double> requests;  // "kind/status" -> requests counted during the phase
  double prompt_tokens = 0;
  double generated_tokens = 0;
  // Speculative decoding: draft tokens verified and accepted during the phase.
  double draft_tokens = 0;
  double accepted_draft_tokens = 0;
  // Means over the phase from histogram _sum/_count deltas (0 when nothing was observed).
  double mean_ttft_ms = 0;
  double mean_itl_ms = 0;
  double mean_request_duration_ms = 0;
  double mean_batch_size = 0;
  double batches = 0;  // engine iterations with a non-empty batch
  // Largest values seen by any scrape during the phase.
  double peak_running_sequences = 0;
  double peak_waiting_requests = 0;
  double peak_state_bytes_in_use = 0;
  double peak_kv_cache_bytes = 0;
  double state_bytes_capacity = 0;
  std::map<std::string, double> state_bytes_per_sequence;  // by model

  nlohmann::json ToJson() const;
};

class MetricsWatcher {
 public:
  // `address` must be loopback (see host_check.h); `port` is the HTTP port serving /metrics.
  MetricsWatcher(std::string address, int port, int poll_interval_ms);
  ~MetricsWatcher();
  MetricsWatcher(const MetricsWatcher&) = delete;
  MetricsWatcher& operator=(const MetricsWatcher&) = delete;

  void Start();
  ServerMetricsReport Stop();

 private:
  bool Scrape(MetricSnapshot* snapshot, std::string* error);
  void ObservePeaks(const MetricSnapshot& snapshot);
  void Poll();

  const std::string address_;
  const int port_;
  const int poll_interval_ms_;
  MetricSnapshot before_;
  std::string before_error_;
  std::thread poller_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  ServerMetricsReport peaks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace abcd::loadtest
