#include "loadtest/lib/report.h"

#include <cmath>
#include <ctime>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace abcd::loadtest {
namespace {

using nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y%m%d-%H%M%S", &tm);
  return buffer;
}

void PutDistribution(json& j, const std::string& name, const Distribution& d) {
  j[absl::StrCat("mean_", name, "_ms")] = d.mean;
  j[absl::StrCat("median_", name, "_ms")] = d.median;
  j[absl::StrCat("std_", name, "_ms")] = d.std;
  j[absl::StrCat("p90_", name, "_ms")] = d.p90;
  j[absl::StrCat("p99_", name, "_ms")] = d.p99;
}

std::string Row(const std::string& label, const std::string& value) {
  return absl::StrFormat("%-44s %s\n", label, value);
}
std::string Num(double v) { return absl::StrFormat("%.2f", v); }

std::string Bytes(double b) {
  if (b >= 1 << 30) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  if (b >= 1 << 10) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrFormat("%.0f B", b);
}

}  // namespace

json ResultJson(const RunInfo& info, const BenchmarkMetrics& m, const PhaseResult& phase,
                const ServerMetricsReport* server, bool save_texts) {
  json j;
  j["date"] = Now();
  j["backend"] = "abcd";
  j["endpoint_type"] = std::string(EndpointName(info.endpoint));
  j["label"] = info.label.empty() ? std::string(EndpointName(info.endpoint)) : info.label;
  j["target"] = info.target;
  j["model_id"] = info.model_id;
  j["tokenizer_id"] = info.tokenizer_id;
  j["num_prompts"] = static_cast<int64_t>(phase.records.size());
  j["arrival"] = info.closed_loop ? "closed" : "open";
  if (info.closed_loop || std::isinf(info.request_rate)) {
    j["request_rate"] = "inf";
  } else {
    j["request_rate"] = info.request_rate;
  }
  j["burstiness"] = info.burstiness;
  const int max_concurrency = info.closed_loop ? info.concurrency : info.max_concurrency;
  j["max_concurrency"] = max_concurrency > 0 ? json(max_concurrency) : json(nullptr);
  if (info.closed_loop) j["concurrency"] = info.concurrency;
  j["warmup_requests"] = info.warmup_requests;

  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = info.slo.empty() ? json(nullptr) : json(m.request_goodput);
  if (!info.slo.empty()) {
    json slo = json::object();
    if (info.slo.ttft_ms) slo["ttft"] = *info.slo.ttft_ms;
    if (info.slo.tpot_ms) slo["tpot"] = *info.slo.tpot_ms;
    if (info.slo.e2el_ms) slo["e2el"] = *info.slo.e2el_ms;
    j["goodput_slo_ms"] = slo;
  }
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  PutDistribution(j, "ttft", m.ttft_ms);
  PutDistribution(j, "tpot", m.tpot_ms);
  PutDistribution(j, "itl", m.itl_ms);
  PutDistribution(j, "e2el", m.e2el_ms);
  j["mean_client_queue_ms"] = m.queue_ms.mean;
  j["median_client_queue_ms"] = m.queue_ms.median;
  j["p90_client_queue_ms"] = m.queue_ms.p90;
  j["p99_client_queue_ms"] = m.queue_ms.p99;
  j["errors_by_status"] = m.errors_by_status;
  j["cancelled_at_drain"] = phase.cancelled_at_drain;

  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(),
       itls = json::array(), latencies = json::array(), start_times = json::array(),
       errors = json::array(), texts = json::array();
  for (const RequestRecord& r : phase.records) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.ok ? r.output_tokens : 0);
    const Clock::time_point first = r.chunk_times.empty() ? r.end : r.chunk_times.front();
    ttfts.push_back(r.ok ? Seconds(first - r.send) : 0.0);
    json itl = json::array();
    for (size_t i = 1; r.ok && i < r.chunk_times.size(); ++i) {
      itl.push_back(Seconds(r.chunk_times[i] - r.chunk_times[i - 1]));
    }
    itls.push_back(std::move(itl));
    latencies.push_back(r.ok ? Seconds(r.end - r.send) : 0.0);
    start_times.push_back(Seconds(r.send - phase.start));
    errors.push_back(r.ok ? std::string() : absl::StrCat(r.status, ": ", r.error));
    if (save_texts) texts.push_back(r.text);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["latencies"] = std::move(latencies);
  j["start_times"] = std::move(start_times);
  j["errors"] = std::move(errors);
  if (save_texts) j["generated_texts"] = std::move(texts);

  if (server != nullptr) {
    j["server"] = server->ToJson();
    j["peak_state_bytes"] = server->peak_state_bytes_in_use;
    j["peak_running_sequences"] = server->peak_running_sequences;
  }
  return j;
}

std::string HumanTable(const RunInfo& info, const BenchmarkMetrics& m,
                       const ServerMetricsReport* server) {
  std::string title =
      info.closed_loop
          ? absl::StrCat(" ", EndpointName(info.endpoint), ", closed loop, concurrency ",
                         info.concurrency, " ")
          : absl::StrCat(" ", EndpointName(info.endpoint), ", open loop, ",
                         std::isinf(info.request_rate) ? std::string("inf")
                                                       : absl::StrFormat("%g", info.request_rate),
                         " req/s, burstiness ", absl::StrFormat("%g", info.burstiness), " ");
  std::string out = absl::StrCat(std::string(10, '='), title);
  if (out.size() < 72) out.append(72 - out.size(), '=');
  out += "\n";
  out += Row("Target:",
             absl::StrCat(info.target, info.model_id.empty() ? "" : " model ", info.model_id));
  out += Row("Successful requests:", absl::StrCat(m.completed));
  out += Row("Failed requests:", absl::StrCat(m.failed));
  if (!info.closed_loop && info.max_concurrency > 0) {
    out += Row("Maximum request concurrency:", absl::StrCat(info.max_concurrency));
  }
  out += Row("Benchmark duration (s):", Num(m.duration_s));
  out += Row("Total input tokens:", absl::StrCat(m.total_input_tokens));
  out += Row("Total generated tokens:", absl::StrCat(m.total_output_tokens));
  out += Row("Request throughput (req/s):", Num(m.request_throughput));
  if (!info.slo.empty()) out += Row("Request goodput (req/s):", Num(m.request_goodput));
  out += Row("Output token throughput (tok/s):", Num(m.output_throughput));
  out += Row("Peak output token throughput (tok/s):", Num(m.max_output_tokens_per_s));
  out += Row("Peak concurrent requests:", absl::StrCat(m.max_concurrent_requests));
  out += Row("Total token throughput (tok/s):", Num(m.total_token_throughput));
  out += absl::StrFormat("%-22s %10s %10s %10s %10s\n", "Latency (ms)", "mean", "median", "p90",
                         "p99");
  auto line = [&](const std::string& name, const Distribution& d) {
    out += absl::StrFormat("%-22s %10.2f %10.2f %10.2f %10.2f\n", name, d.mean, d.median, d.p90,
                           d.p99);
  };
  line("TTFT", m.ttft_ms);
  if (IsStreaming(info.endpoint)) {
    line("TPOT (excl. 1st)", m.tpot_ms);
    line("ITL", m.itl_ms);
  } else {
    out += "TPOT, ITL               n/a: the answer arrives whole (TTFT = E2EL)\n";
  }
  line("E2EL", m.e2el_ms);
  if (m.queue_ms.mean > 0.01) line("Client queue", m.queue_ms);
  if (!m.errors_by_status.empty()) {
    out += "Errors by status:\n";
    for (const auto& [status, count] : m.errors_by_status) {
      out += Row(absl::StrCat("  ", status), absl::StrCat(count));
    }
  }
  if (server != nullptr) {
    if (!server->available) {
      out += Row("Server /metrics:", absl::StrCat("unavailable (", server->error, ")"));
    } else {
      out += absl::StrCat("Server /metrics (", server->scrapes, " scrapes):\n");
      for (const auto& [key, count] : server->requests) {
        out += Row(absl::StrCat("  requests ", key), absl::StrFormat("%.0f", count));
      }
      out += Row("  prompt / generated tokens",
                 absl::StrFormat("%.0f / %.0f", server->prompt_tokens, server->generated_tokens));
      if (server->draft_tokens > 0) {
        out += Row("  speculative draft / accepted tokens",
                   absl::StrFormat("%.0f / %.0f (%.0f %%)", server->draft_tokens,
                                   server->accepted_draft_tokens,
                                   100.0 * server->accepted_draft_tokens / server->draft_tokens));
      }
      out += Row("  server mean TTFT / ITL / duration (ms)",
                 absl::StrFormat("%.2f / %.2f / %.2f", server->mean_ttft_ms, server->mean_itl_ms,
                                 server->mean_request_duration_ms));
      out += Row("  mean batch size (engine iterations)",
                 absl::StrFormat("%.2f (%.0f)", server->mean_batch_size, server->batches));
      out += Row("  peak running sequences / waiting",
                 absl::StrFormat("%.0f / %.0f", server->peak_running_sequences,
                                 server->peak_waiting_requests));
      out += Row("  peak state bytes in use / capacity",
                 absl::StrCat(Bytes(server->peak_state_bytes_in_use), " / ",
                              Bytes(server->state_bytes_capacity)));
      if (server->peak_kv_cache_bytes > 0) {
        out += Row("  peak KV cache bytes", Bytes(server->peak_kv_cache_bytes));
      }
      for (const auto& [model, bytes] : server->state_bytes_per_sequence) {
        out += Row(absl::StrCat("  state bytes per sequence (", model, ")"), Bytes(bytes));
      }
    }
  }
  out += std::string(72, '=') + "\n";
  return out;
}

absl::Status WriteRequestsJsonl(const std::string& path, const PhaseResult& phase) {
  std::ofstream out(path);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  for (const RequestRecord& r : phase.records) {
    json chunks = json::array();
    for (const Clock::time_point t : r.chunk_times) chunks.push_back(Milliseconds(t - r.send));
    const Clock::time_point first = r.chunk_times.empty() ? r.end : r.chunk_times.front();
    json line = {{"index", r.index},
                 {"status", r.status},
                 {"error", r.error},
                 {"arrival_s", Seconds(r.arrival - phase.start)},
                 {"send_s", Seconds(r.send - phase.start)},
                 {"ttft_ms", r.ok ? Milliseconds(first - r.send) : 0.0},
                 {"chunk_ms", std::move(chunks)},
                 {"chunk_tokens", r.chunk_tokens},
                 {"e2el_ms", Milliseconds(r.end - r.send)},
                 {"prompt_tokens", r.prompt_tokens},
                 {"output_tokens", r.output_tokens}};
    out << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  return out.good() ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing ", path));
}

absl::Status WriteJsonFile(const std::string& path, const json& value) {
  std::ofstream out(path);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  out << value.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  return out.good() ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing ", path));
}

}  // namespace abcd::loadtest
