// abcd-loadtest: drives a local abcd-server (gRPC Generate streaming, HTTP /v1/completions SSE,
// /v1/translate over gRPC or HTTP) or an in-process Executor with a closed-loop (fixed
// concurrency) or open-loop (Poisson / gamma arrivals) workload, and reports TTFT, TPOT, ITL and
// end-to-end latency percentiles, throughput, goodput, errors by status and the server's own
// /metrics (counters before/after, peak running sequences and state bytes). Loopback targets
// only. See loadtest/README.md.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "httplib.h"
#include "loadtest/lib/conversations.h"
#include "loadtest/lib/executor_driver.h"
#include "loadtest/lib/grpc_driver.h"
#include "loadtest/lib/host_check.h"
#include "loadtest/lib/http_driver.h"
#include "loadtest/lib/metrics_watcher.h"
#include "loadtest/lib/report.h"
#include "loadtest/lib/runner.h"
#include "loadtest/lib/stats.h"
#include "loadtest/lib/workload.h"
#include "nlohmann/json.hpp"
#include "server/core/arguments.h"
#include "tests/e2e/server_process.h"

namespace abcd::loadtest {
namespace {

constexpr char kUsage[] = R"(usage: abcd-loadtest [options]
Target (loopback only: 127.0.0.0/8, ::1, localhost)
  --endpoint E            grpc-generate (default) | http-completions | grpc-translate |
                          http-translate | in-process
  --host H                default 127.0.0.1
  --grpc_port P           default 50051          --http_port P   default 8080 (also /metrics)
  --launch_server BIN     start BIN (abcd-server) on ephemeral loopback ports for the run
  --server_args "A B"     extra arguments for --launch_server (space separated)
  --model_dir DIR         model for --endpoint in-process (default: the bundled LM)
  --model NAME            model name to request (default: the server's default)
Arrivals
  --concurrency N[,N..]   closed loop: N requests in flight (a list sweeps); default 8
  --request_rate R[,R..]  open loop: R requests/s (a list sweeps; "inf" = all at once)
  --burstiness B          open loop gamma shape: 1 = Poisson (default), <1 burstier
  --max_concurrency N     open loop: at most N in flight
  --num_requests N        stop issuing after N requests     --duration S  ... or after S seconds
                          (default: --duration 10)
  --warmup N              N unmeasured requests first (default 4)
  --drain_timeout S       wait S seconds for in-flight requests at the end (default 300)
Conversations (generate endpoints, closed loop: --concurrency conversations at a time)
  --conversations N       N multi-turn conversations instead of independent requests
  --turns T               turns per conversation (default 4); each turn's prompt is the next prompt
  --history H             session (default: turn 1 asks for a session, later turns send only their
                          new prompt) | resend (every turn resends the whole conversation as text)
Workload
  --prompts FILE          JSONL {"prompt": ...} or text lines (default loadtest/prompts/brown_test.jsonl,
                          mt_test.jsonl for translate endpoints)
  --prompt_tokens N|A:B   cut prompts to N tokens (or uniform in [A, B]) from the prompts' text
                          (longer than the whole file: its text repeated, from a random start)
  --output_tokens N|A:B   max_tokens per request (default 32)
  --tokenizer FILE        tokenizer.json or tokenizer.model for token counts (default: the
                          model directory's own)
  --temperature T         default 0 (greedy)   --seed S   workload and sampling seed (default 0)
  --ignore_eos            always generate max_tokens (HTTP and in-process; gRPC has no such field)
  --beam_size N           translate endpoints (default: the server's)
  --request_timeout S     per-request deadline (default 600)
Output
  --result_json FILE      vLLM-style result (sweeps add -c<N> / -r<R> before .json)
  --requests_jsonl FILE   one line per request (sweeps add the same suffix)
  --label NAME  --save_texts  --no_metrics  --poll_ms MS (gauge polling, default 200)
  --grpc_channels N (default 1)  --http_max_threads N (default 1024)
)";

const std::set<std::string> kValued = {"endpoint",      "host",           "grpc_port",
                                       "http_port",     "launch_server",  "server_args",
                                       "model_dir",     "model",          "concurrency",
                                       "request_rate",  "burstiness",     "max_concurrency",
                                       "num_requests",  "duration",       "warmup",
                                       "drain_timeout", "prompts",        "prompt_tokens",
                                       "output_tokens", "tokenizer",      "temperature",
                                       "seed",          "beam_size",      "request_timeout",
                                       "result_json",   "requests_jsonl", "label",
                                       "poll_ms",       "grpc_channels",  "http_max_threads",
                                       "goodput",       "conversations",  "turns",
                                       "history"};
const std::set<std::string> kFlags = {"ignore_eos", "save_texts", "no_metrics", "help"};

absl::StatusOr<std::vector<double>> ParseList(const Arguments& args, const std::string& name) {
  std::vector<double> values;
  for (absl::string_view part : absl::StrSplit(args.String(name, ""), ',', absl::SkipEmpty())) {
    double v = 0;
    if (part == "inf") {
      v = INFINITY;
    } else if (!absl::SimpleAtod(part, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be a comma-separated list of positive numbers"));
    }
    values.push_back(v);
  }
  return values;
}

std::string WithSuffix(const std::string& path, const std::string& suffix) {
  if (suffix.empty() || path.empty()) return path;
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

// The first served model of the endpoint's kind, from GET /v1/models; "" when unknown.
std::string ServedModelName(const std::string& address, int http_port, bool translation) {
  if (http_port <= 0) return "";
  httplib::Client client(address, http_port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Result result = client.Get("/v1/models");
  if (!result || result->status != 200) return "";
  const nlohmann::json j = nlohmann::json::parse(result->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) return "";
  for (const nlohmann::json& m : j["data"]) {
    if (m.is_object() && m.value("kind", "") == (translation ? "translation" : "lm")) {
      return m.value("id", "");
    }
  }
  return "";
}

// The model, tokenizer and executor behind --endpoint in-process.
struct InProcessEngine {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Executor> executor;
  ~InProcessEngine() {
    if (executor) executor->Shutdown();
  }
};

absl::StatusOr<int> Run(const Arguments& args) {
  // ---- target
  Endpoint endpoint;
  const std::string endpoint_name = args.String("endpoint", "grpc-generate");
  if (!ParseEndpoint(endpoint_name, &endpoint)) {
    return absl::InvalidArgumentError(absl::StrCat("--endpoint: unknown \"", endpoint_name, "\""));
  }
  const bool translation =
      endpoint == Endpoint::kGrpcTranslate || endpoint == Endpoint::kHttpTranslate;
  ABCD_ASSIGN_OR_RETURN(std::string address, LoopbackAddress(args.String("host", "127.0.0.1")));
  ABCD_ASSIGN_OR_RETURN(int64_t grpc_port, args.Int("grpc_port", 50051));
  ABCD_ASSIGN_OR_RETURN(int64_t http_port, args.Int("http_port", 8080));
  std::unique_ptr<testing::ServerProcess> server;
  if (args.Has("launch_server")) {
    std::vector<std::string> server_args =
        absl::StrSplit(args.String("server_args", ""), ' ', absl::SkipEmpty());
    std::cerr << "abcd-loadtest: starting " << args.String("launch_server", "") << "\n";
    server = std::make_unique<testing::ServerProcess>(args.String("launch_server", ""),
                                                      std::move(server_args));
    if (!server->started()) {
      return absl::UnavailableError(
          absl::StrCat("--launch_server: the server did not start:\n", server->Log()));
    }
    address = "127.0.0.1";
    grpc_port = server->grpc_port();
    http_port = server->http_port();
  }
  const bool ipv6 = address.find(':') != std::string::npos;
  const std::string grpc_target =
      absl::StrCat(ipv6 ? "[" : "", address, ipv6 ? "]" : "", ":", grpc_port);

  // ---- workload
  WorkloadOptions wo;
  wo.prompts_file =
      args.String("prompts", absl::StrCat(ABCD_SOURCE_DIR, "/loadtest/prompts/",
                                          translation ? "mt_test.jsonl" : "brown_test.jsonl"));
  if (args.Has("prompt_tokens")) {
    ABCD_ASSIGN_OR_RETURN(wo.prompt_tokens,
                          ParseLengthRange("prompt_tokens", args.String("prompt_tokens", "")));
  }
  ABCD_ASSIGN_OR_RETURN(wo.output_tokens,
                        ParseLengthRange("output_tokens", args.String("output_tokens", "32")));
  ABCD_ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 0));
  wo.seed = static_cast<uint64_t>(seed);
  ABCD_ASSIGN_OR_RETURN(const double temperature, args.Double("temperature", 0.0));
  wo.base.temperature = static_cast<float>(temperature);
  wo.base.ignore_eos = args.Has("ignore_eos");
  wo.base.model = args.String("model", "");
  ABCD_ASSIGN_OR_RETURN(const int64_t beam_size, args.Int("beam_size", 0));
  wo.base.beam_size = static_cast<int>(beam_size);
  ABCD_ASSIGN_OR_RETURN(wo.base.timeout_s, args.Double("request_timeout", 600));
  if (wo.base.ignore_eos &&
      (endpoint == Endpoint::kGrpcGenerate || endpoint == Endpoint::kGrpcTranslate)) {
    std::cerr << "abcd-loadtest: note: the gRPC contract has no ignore_eos; output may end at "
                 "EOS before max_tokens\n";
  }

  const std::string default_model_dir =
      absl::StrCat(ABCD_SOURCE_DIR, "/models/checkpoints/",
                   translation ? "abc-mt-untrained" : "abc-lm-untrained");
  const std::string model_dir = args.String("model_dir", default_model_dir);
  // --tokenizer: a tokenizer.json or tokenizer.model, "none", or (default) the model
  // directory's own (Tokenizer::LoadDirectory).
  std::string tokenizer_path = args.String("tokenizer", "");
  std::unique_ptr<Tokenizer> tokenizer;
  if (tokenizer_path.empty()) {
    ABCD_ASSIGN_OR_RETURN(tokenizer, Tokenizer::LoadDirectory(model_dir));
  } else if (tokenizer_path != "none") {
    ABCD_ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(tokenizer_path));
  }
  ABCD_ASSIGN_OR_RETURN(Workload workload, Workload::Create(wo, tokenizer.get()));

  // ---- driver
  InProcessEngine engine;
  std::unique_ptr<Driver> driver;
  std::string target;
  ABCD_ASSIGN_OR_RETURN(const int64_t channels, args.Int("grpc_channels", 1));
  ABCD_ASSIGN_OR_RETURN(const int64_t http_threads, args.Int("http_max_threads", 1024));
  switch (endpoint) {
    case Endpoint::kGrpcGenerate:
    case Endpoint::kGrpcTranslate:
      target = grpc_target;
      driver = MakeGrpcDriver(grpc_target, endpoint, static_cast<int>(channels));
      break;
    case Endpoint::kHttpCompletions:
    case Endpoint::kHttpTranslate:
      target = absl::StrCat(address, ":", http_port);
      driver = MakeHttpDriver(address, static_cast<int>(http_port), endpoint,
                              static_cast<int>(http_threads));
      break;
    case Endpoint::kInProcess: {
      target = "in-process";
      ABCD_ASSIGN_OR_RETURN(engine.model, Model::Load(model_dir));
      ABCD_ASSIGN_OR_RETURN(engine.tokenizer, Tokenizer::LoadDirectory(model_dir));
      ABCD_ASSIGN_OR_RETURN(engine.executor,
                            Executor::Create(*engine.model, *engine.tokenizer, ExecutorOptions()));
      driver = MakeExecutorDriver(*engine.executor);
      break;
    }
  }

  // ---- phases
  ABCD_ASSIGN_OR_RETURN(std::vector<double> concurrencies, ParseList(args, "concurrency"));
  ABCD_ASSIGN_OR_RETURN(std::vector<double> rates, ParseList(args, "request_rate"));
  if (!concurrencies.empty() && !rates.empty()) {
    return absl::InvalidArgumentError(
        "--concurrency (closed loop) and --request_rate (open loop) exclude each other; use "
        "--max_concurrency to cap an open loop");
  }
  const bool closed = rates.empty();
  if (closed && concurrencies.empty()) concurrencies.push_back(8);
  ABCD_ASSIGN_OR_RETURN(const double burstiness, args.Double("burstiness", 1.0));
  if (!(burstiness > 0)) return absl::InvalidArgumentError("--burstiness must be > 0");
  ABCD_ASSIGN_OR_RETURN(const int64_t max_concurrency, args.Int("max_concurrency", 0));
  ABCD_ASSIGN_OR_RETURN(const int64_t num_requests, args.Int("num_requests", 0));
  ABCD_ASSIGN_OR_RETURN(double duration, args.Double("duration", 0));
  if (num_requests <= 0 && duration <= 0) duration = 10;
  for (double rate : rates) {
    if (std::isinf(rate) && num_requests <= 0) {
      return absl::InvalidArgumentError("--request_rate inf needs --num_requests");
    }
  }
  ABCD_ASSIGN_OR_RETURN(const int64_t conversations, args.Int("conversations", 0));
  ABCD_ASSIGN_OR_RETURN(const int64_t turns, args.Int("turns", 4));
  const std::string history = args.String("history", "session");
  if (conversations < 0 || turns < 1 || turns > 1000) {
    return absl::InvalidArgumentError("--conversations must be >= 0 and --turns in [1, 1000]");
  }
  if (history != "session" && history != "resend") {
    return absl::InvalidArgumentError("--history must be session or resend");
  }
  if (conversations > 0 && (!closed || !IsStreaming(endpoint))) {
    return absl::InvalidArgumentError(
        "--conversations needs a generate endpoint and a closed loop (--concurrency)");
  }
  ABCD_ASSIGN_OR_RETURN(const int64_t warmup, args.Int("warmup", 4));
  ABCD_ASSIGN_OR_RETURN(const double drain_timeout, args.Double("drain_timeout", 300));
  ABCD_ASSIGN_OR_RETURN(const int64_t poll_ms, args.Int("poll_ms", 200));
  Slo slo;
  if (args.Has("goodput")) {
    ABCD_ASSIGN_OR_RETURN(slo, ParseSlo(args.String("goodput", "")));
  }
  const bool watch_metrics = !args.Has("no_metrics") && endpoint != Endpoint::kInProcess;

  RunInfo info;
  info.label = args.String("label", "");
  info.endpoint = endpoint;
  info.target = target;
  info.model_id =
      wo.base.model.empty() && endpoint != Endpoint::kInProcess
          ? ServedModelName(address, static_cast<int>(http_port), translation)
          : (wo.base.model.empty() ? std::filesystem::path(model_dir).filename().string()
                                   : wo.base.model);
  info.tokenizer_id = tokenizer_path;
  info.closed_loop = closed;
  info.burstiness = burstiness;
  info.max_concurrency = static_cast<int>(max_concurrency);
  info.warmup_requests = static_cast<int>(warmup);
  info.slo = slo;

  const size_t points = closed ? concurrencies.size() : rates.size();
  std::vector<std::string> summary;
  int64_t next_index = 0;
  int64_t total_failed = 0;
  for (size_t p = 0; p < points; ++p) {
    PhaseOptions phase;
    phase.num_requests = num_requests;
    phase.duration_s = duration;
    phase.drain_timeout_s = drain_timeout;
    phase.seed = static_cast<uint64_t>(seed) + p;
    std::string suffix;
    if (closed) {
      info.concurrency = static_cast<int>(concurrencies[p]);
      phase.concurrency = info.concurrency;
      if (points > 1) suffix = absl::StrCat("-c", info.concurrency);
    } else {
      info.request_rate = rates[p];
      phase.request_rate = rates[p];
      phase.burstiness = burstiness;
      phase.max_concurrency = static_cast<int>(max_concurrency);
      if (points > 1) suffix = absl::StrCat("-r", absl::StrFormat("%g", rates[p]));
    }
    if (warmup > 0) {
      PhaseOptions w;
      w.num_requests = warmup;
      w.concurrency = static_cast<int>(std::min<int64_t>(
          warmup, closed ? info.concurrency : (max_concurrency > 0 ? max_concurrency : 4)));
      w.drain_timeout_s = drain_timeout;
      PhaseResult warm = RunPhase(*driver, workload, w, int64_t{1} << 40);
      int64_t failed = 0;
      std::string first_error;
      for (const RequestRecord& r : warm.records) {
        if (!r.ok && failed++ == 0) first_error = absl::StrCat(r.status, ": ", r.error);
      }
      if (failed == static_cast<int64_t>(warm.records.size())) {
        return absl::UnavailableError(absl::StrCat("every warm-up request failed (", first_error,
                                                   "); is the server up at ", target, "?"));
      }
    }
    std::unique_ptr<MetricsWatcher> watcher;
    if (watch_metrics) {
      watcher = std::make_unique<MetricsWatcher>(address, static_cast<int>(http_port),
                                                 static_cast<int>(poll_ms));
      watcher->Start();
    }
    PhaseResult result;
    if (conversations > 0) {
      ConversationOptions co;
      co.conversations = conversations;
      co.turns = static_cast<int>(turns);
      co.concurrency = info.concurrency;
      co.resend_history = history == "resend";
      co.drain_timeout_s = drain_timeout;
      result = RunConversations(*driver, workload, co, next_index);
    } else {
      result = RunPhase(*driver, workload, phase, next_index);
    }
    next_index += static_cast<int64_t>(result.records.size());
    std::optional<ServerMetricsReport> server_report;
    if (watcher) server_report = watcher->Stop();
    const BenchmarkMetrics metrics = ComputeMetrics(result.records, result.start, result.end, slo);
    total_failed += metrics.failed;
    const ServerMetricsReport* server_ptr = server_report ? &*server_report : nullptr;
    std::cout << HumanTable(info, metrics, server_ptr) << std::flush;
    nlohmann::json turn_json = nlohmann::json::array();
    if (conversations > 0) {
      std::cout << absl::StrFormat("Conversations (%s): %d x %d turns\n%-6s %9s %12s %14s\n",
                                   history, conversations, turns, "turn", "requests", "TTFT p50 ms",
                                   "prompt tokens");
      for (const TurnSummary& t : SummarizeTurns(result.records, static_cast<int>(turns))) {
        std::cout << absl::StrFormat("%-6d %9d %12.2f %14.1f\n", t.turn + 1, t.requests,
                                     t.ttft_ms_p50, t.prompt_tokens_mean);
        turn_json.push_back({{"turn", t.turn + 1},
                             {"requests", t.requests},
                             {"ttft_ms_p50", t.ttft_ms_p50},
                             {"prompt_tokens_mean", t.prompt_tokens_mean}});
      }
    }
    summary.push_back(absl::StrFormat(
        "%-12s %8.2f %10.2f %10.2f %10.2f %10.2f %10.2f %7d",
        closed ? absl::StrCat("c=", info.concurrency)
               : absl::StrCat("r=", absl::StrFormat("%g", info.request_rate)),
        metrics.request_throughput, metrics.output_throughput, metrics.ttft_ms.median,
        metrics.tpot_ms.median, metrics.e2el_ms.median, metrics.e2el_ms.p99, metrics.failed));
    if (args.Has("result_json")) {
      const std::string path = WithSuffix(args.String("result_json", ""), suffix);
      nlohmann::json j = ResultJson(info, metrics, result, server_ptr, args.Has("save_texts"));
      if (conversations > 0) {
        j["conversations"] = {{"history", history}, {"turns", turn_json}};
      }
      ABCD_RETURN_IF_ERROR(WriteJsonFile(path, j));
      std::cout << "wrote " << path << "\n";
    }
    if (args.Has("requests_jsonl")) {
      const std::string path = WithSuffix(args.String("requests_jsonl", ""), suffix);
      ABCD_RETURN_IF_ERROR(WriteRequestsJsonl(path, result));
      std::cout << "wrote " << path << "\n";
    }
  }
  if (points > 1) {
    std::cout << absl::StrFormat("%-12s %8s %10s %10s %10s %10s %10s %7s\n", "sweep", "req/s",
                                 "out tok/s", "TTFT p50", "TPOT p50", "E2EL p50", "E2EL p99",
                                 "failed");
    for (const std::string& line : summary) std::cout << line << "\n";
  }
  return total_failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace abcd::loadtest

int main(int argc, char** argv) {
  absl::StatusOr<abcd::Arguments> args = abcd::Arguments::Parse(
      {argv + 1, argv + argc}, abcd::loadtest::kValued, abcd::loadtest::kFlags);
  if (!args.ok()) {
    std::cerr << "abcd-loadtest: " << args.status().message() << "\n" << abcd::loadtest::kUsage;
    return 2;
  }
  if (args->Has("help")) {
    std::cout << abcd::loadtest::kUsage;
    return 0;
  }
  absl::StatusOr<int> rc = abcd::loadtest::Run(*args);
  if (!rc.ok()) {
    std::cerr << "abcd-loadtest: " << rc.status().message() << "\n";
    return 2;
  }
  return *rc;
}
