// Output of one measured phase: a human table, a JSON object with the key names of
// `vllm bench serve --save-result` (so tools that read those files read these), and optionally
// one JSON line per request.
//
// vLLM keys written: date, backend, endpoint_type, label, model_id, tokenizer_id, num_prompts,
// request_rate ("inf" for closed loop), burstiness, max_concurrency, duration, completed, failed,
// total_input_tokens, total_output_tokens, request_throughput, request_goodput,
// output_throughput, total_token_throughput, max_output_tokens_per_s, max_concurrent_requests,
// {mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms, input_lens, output_lens, ttfts, itls,
// latencies, start_times, errors (per-request arrays; times in seconds, as vLLM writes them),
// generated_texts (with --save_texts).
// abcd additions: arrival ("closed" | "open"), concurrency, errors_by_status, warmup_requests,
// peak_state_bytes, peak_running_sequences, server (the /metrics report),
// {mean,median,p90,p99}_client_queue_ms.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "loadtest/lib/metrics_watcher.h"
#include "loadtest/lib/runner.h"
#include "loadtest/lib/stats.h"
#include "nlohmann/json.hpp"

namespace abcd::loadtest {

struct RunInfo {
  std::string label;
  Endpoint endpoint = Endpoint::kGrpcGenerate;
  std::string target;  // address:port the driver talked to ("in-process" for the executor)
  std::string model_id;
  std::string tokenizer_id;
  bool closed_loop = true;
  int concurrency = 0;      // closed loop
  double request_rate = 0;  // open loop (inf allowed)
  double burstiness = 1.0;
  int max_concurrency = 0;  // open loop cap; 0 = none
  int warmup_requests = 0;
  Slo slo;
};

nlohmann::json ResultJson(const RunInfo& info, const BenchmarkMetrics& metrics,
                          const PhaseResult& phase, const ServerMetricsReport* server,
                          bool save_texts);

std::string HumanTable(const RunInfo& info, const BenchmarkMetrics& metrics,
                       const ServerMetricsReport* server);

// One line per request: index, status, error, send_s (since the phase start), ttft_ms,
// chunk_ms (every chunk since send), e2el_ms, prompt_tokens, output_tokens.
absl::Status WriteRequestsJsonl(const std::string& path, const PhaseResult& phase);

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value);

}  // namespace abcd::loadtest
