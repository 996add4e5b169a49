// Benchmark metrics from per-request records, defined as `vllm bench serve` defines them so
// that numbers (and the JSON keys in report.h) mean the same thing in both tools:
//   TTFT  first output chunk - send                          (successful requests)
//   TPOT  (e2e - TTFT) / (output_tokens - 1)                 (requests with > 1 token, streamed)
//   ITL   gap between consecutive output chunks, every gap of every request
//   E2EL  end - send
// Percentiles interpolate linearly between order statistics (numpy's default); std is the
// population standard deviation. Goodput counts completed requests that meet every given SLO
// (a request with <= 1 output token counts as TPOT 0, as in vLLM).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loadtest/lib/driver.h"

namespace abcd::loadtest {

struct Distribution {
  size_t count = 0;
  double mean = 0;
  double median = 0;
  double std = 0;
  double p90 = 0;
  double p99 = 0;
};

// `p` in [0, 100]; `sorted` ascending and non-empty.
double Percentile(const std::vector<double>& sorted, double p);
// All zeros for an empty input (vLLM reports 0 for an empty metric).
Distribution Describe(std::vector<double> values);

// Service-level objectives in milliseconds; unset ones are not checked.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};
// "ttft:500,tpot:50,e2el:2000" (any subset, any order); INVALID_ARGUMENT naming the bad part.
absl::StatusOr<Slo> ParseSlo(const std::string& text);

struct BenchmarkMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double duration_s = 0;
  double request_throughput = 0;
  double request_goodput = 0;  // meaningful only with an SLO
  double output_throughput = 0;
  double total_token_throughput = 0;
  Distribution ttft_ms;
  Distribution tpot_ms;
  Distribution itl_ms;
  Distribution e2el_ms;
  Distribution queue_ms;               // arrival -> send: time a request waited for a client slot
  double max_output_tokens_per_s = 0;  // busiest one-second bucket
  int64_t max_concurrent_requests = 0;
  std::map<std::string, int64_t> errors_by_status;  // failed requests by RequestRecord::status
};

// `start` is when the measured phase began (the first send), `end` when its last request ended.
BenchmarkMetrics ComputeMetrics(const std::vector<RequestRecord>& records, Clock::time_point start,
                                Clock::time_point end, const Slo& slo);

double Milliseconds(Clock::duration d);

}  // namespace abcd::loadtest
