// Serving overhead: the same greedy workload (same prompts, max_tokens, concurrency) through
// an in-process Executor and through abcd-server over gRPC streaming and over HTTP SSE, with
// the same load-test runner and metrics. The three paths take turns for `rounds` rounds (the
// idle ones wait on condition variables), and each reports its median round, so other load on
// the machine hits all of them alike. Greedy decoding of the same prompts gives the same tokens
// on every path; the bench checks that the generated texts match.
#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "loadtest/bench/benchmarks.h"
#include "loadtest/lib/executor_driver.h"
#include "loadtest/lib/grpc_driver.h"
#include "loadtest/lib/http_driver.h"
#include "loadtest/lib/runner.h"
#include "loadtest/lib/stats.h"
#include "loadtest/lib/workload.h"
#include "tests/e2e/server_process.h"

namespace abcd::bench {
namespace {

using loadtest::BenchmarkMetrics;
using loadtest::Driver;
using loadtest::PhaseOptions;
using loadtest::PhaseResult;
using loadtest::RequestRecord;

struct PathResult {
  std::string path;
  BenchmarkMetrics metrics;
  std::map<int64_t, std::string> texts;  // by request index
};

void Warm(Driver& driver, const loadtest::Workload& workload, const OverheadOptions& options) {
  PhaseOptions warm;
  warm.concurrency = options.concurrency;
  warm.num_requests = options.warmup;
  if (options.warmup > 0) RunPhase(driver, workload, warm, int64_t{1} << 40);
}

PathResult Drive(const std::string& path, Driver& driver, const loadtest::Workload& workload,
                 const OverheadOptions& options) {
  PhaseOptions phase;
  phase.concurrency = options.concurrency;
  phase.num_requests = options.requests;
  const PhaseResult result = RunPhase(driver, workload, phase, 0);
  PathResult out;
  out.path = path;
  out.metrics = ComputeMetrics(result.records, result.start, result.end, {});
  for (const RequestRecord& r : result.records) out.texts[r.index] = r.text;
  return out;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunOverhead(const OverheadOptions& options) {
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                        Tokenizer::LoadDirectory(options.model));
  loadtest::WorkloadOptions wo;
  wo.prompts_file = options.prompts;
  wo.output_tokens = {options.max_tokens, options.max_tokens};
  wo.base.temperature = 0;
  ABCD_ASSIGN_OR_RETURN(loadtest::Workload workload,
                        loadtest::Workload::Create(wo, tokenizer.get()));

  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(options.model));
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                        Executor::Create(*model, *tokenizer, ExecutorOptions()));
  testing::ServerProcess server(options.server, {"--models", options.model});
  if (!server.started()) {
    executor->Shutdown();
    return absl::UnavailableError(absl::StrCat("abcd-server did not start:\n", server.Log()));
  }
  const std::vector<std::string> names = {"in-process", "grpc", "http-sse"};
  std::vector<std::unique_ptr<Driver>> drivers;
  drivers.push_back(loadtest::MakeExecutorDriver(*executor));
  drivers.push_back(
      loadtest::MakeGrpcDriver(server.grpc_target(), loadtest::Endpoint::kGrpcGenerate, 1));
  drivers.push_back(loadtest::MakeHttpDriver("127.0.0.1", server.http_port(),
                                             loadtest::Endpoint::kHttpCompletions, 1024));
  for (auto& d : drivers) Warm(*d, workload, options);
  std::vector<std::vector<PathResult>> rounds(drivers.size());
  for (int r = 0; r < options.rounds; ++r) {
    for (size_t i = 0; i < drivers.size(); ++i) {
      rounds[i].push_back(Drive(names[i], *drivers[i], workload, options));
    }
  }
  drivers.clear();
  executor->Shutdown();
  // Each path's median round by output throughput.
  std::vector<PathResult> paths;
  std::vector<std::vector<double>> throughputs;  // every round's output tokens/s, ascending
  for (auto& by_round : rounds) {
    std::sort(by_round.begin(), by_round.end(), [](const PathResult& a, const PathResult& b) {
      return a.metrics.output_throughput < b.metrics.output_throughput;
    });
    paths.push_back(by_round[by_round.size() / 2]);
    throughputs.emplace_back();
    for (const PathResult& p : by_round) throughputs.back().push_back(p.metrics.output_throughput);
  }

  const PathResult& base = paths.front();
  nlohmann::json out;
  out["model"] = options.model;
  out["requests"] = options.requests;
  out["concurrency"] = options.concurrency;
  out["max_tokens"] = options.max_tokens;
  out["rounds"] = options.rounds;
  nlohmann::json rows = nlohmann::json::array();
  std::cout << "== serving overhead: " << options.requests << " greedy requests, concurrency "
            << options.concurrency << ", max_tokens " << options.max_tokens << "; median of "
            << options.rounds << " interleaved rounds ==\n";
  std::cout << absl::StrFormat("%-11s %7s %10s %15s %9s %9s %9s %9s %9s %10s %9s\n", "path",
                               "req/s", "out tok/s", "(min-max)", "TTFT ms", "TPOT ms", "ITL ms",
                               "E2EL ms", "tok/s %", "+E2EL ms", "same text");
  for (size_t i = 0; i < paths.size(); ++i) {
    const PathResult& p = paths[i];
    const BenchmarkMetrics& m = p.metrics;
    int same = 0;
    for (const auto& [index, text] : p.texts) {
      auto it = base.texts.find(index);
      same += it != base.texts.end() && it->second == text;
    }
    const double relative = m.output_throughput / base.metrics.output_throughput * 100;
    const double added = m.e2el_ms.mean - base.metrics.e2el_ms.mean;
    const std::string spread =
        absl::StrFormat("(%.0f-%.0f)", throughputs[i].front(), throughputs[i].back());
    std::cout << absl::StrFormat(
        "%-11s %7.2f %10.1f %15s %9.2f %9.3f %9.3f %9.2f %8.1f%% %10.2f %5d/%-3d\n", p.path,
        m.request_throughput, m.output_throughput, spread, m.ttft_ms.mean, m.tpot_ms.mean,
        m.itl_ms.mean, m.e2el_ms.mean, relative, added, same, static_cast<int>(p.texts.size()));
    rows.push_back({{"path", p.path},
                    {"completed", m.completed},
                    {"failed", m.failed},
                    {"total_output_tokens", m.total_output_tokens},
                    {"request_throughput", m.request_throughput},
                    {"output_throughput", m.output_throughput},
                    {"output_throughput_rounds", throughputs[i]},
                    {"mean_ttft_ms", m.ttft_ms.mean},
                    {"mean_tpot_ms", m.tpot_ms.mean},
                    {"mean_itl_ms", m.itl_ms.mean},
                    {"mean_e2el_ms", m.e2el_ms.mean},
                    {"p99_e2el_ms", m.e2el_ms.p99},
                    {"throughput_vs_in_process", relative / 100},
                    {"added_mean_e2el_ms", added},
                    {"same_text_as_in_process", same}});
  }
  out["paths"] = std::move(rows);
  std::cout << "\n";
  return out;
}

}  // namespace abcd::bench
