// abcd-loadtest end to end: 2-second runs of the real binary against a real abcd-server started
// on ephemeral loopback ports with the bundled models; the result JSON must carry vLLM's keys,
// zero errors, and the server's /metrics must agree with what the client counted.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "httplib.h"
#include "loadtest/lib/prometheus_text.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/server_suite.h"

namespace abcd {
namespace {

using nlohmann::json;

struct Command {
  int exit_code = -1;
  std::string output;
};

Command RunLoadtest(const std::string& args) {
  Command c;
  const std::string command = std::string(ABCD_LOADTEST) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return c;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) c.output.append(buffer, n);
  const int status = pclose(pipe);
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return c;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, false);
}

// One abcd-server for the suite (tests/e2e/server_suite.h).
class LoadtestE2E : public testing::ServerSuite<LoadtestE2E> {
 public:
  // The small untrained models: fast, and independent of which trained models ship.
  static std::vector<std::string> ServerArgs() {
    const std::string models = std::string(ABCD_SOURCE_DIR) +
                               "/models/checkpoints/abc-lm-untrained," + ABCD_SOURCE_DIR +
                               "/models/checkpoints/abc-mt-untrained";
    return {"--models", models, "--drain_grace_seconds", "1"};
  }

 protected:
  std::string Target() const {
    // Gauges polled every 5 ms: a 16-token request now lasts a few milliseconds, so the default
    // 200 ms poll can miss every running sequence of a short run.
    return "--host 127.0.0.1 --grpc_port " + std::to_string(server_->grpc_port()) +
           " --http_port " + std::to_string(server_->http_port()) + " --poll_ms 5";
  }
  static std::string Output(const std::string& name) { return ::testing::TempDir() + "/" + name; }

  static void ExpectVllmResult(const json& r, const std::string& endpoint) {
    ASSERT_TRUE(r.is_object());
    for (const char* key : {"date",
                            "backend",
                            "endpoint_type",
                            "label",
                            "model_id",
                            "tokenizer_id",
                            "num_prompts",
                            "request_rate",
                            "burstiness",
                            "max_concurrency",
                            "duration",
                            "completed",
                            "failed",
                            "total_input_tokens",
                            "total_output_tokens",
                            "request_throughput",
                            "request_goodput",
                            "output_throughput",
                            "total_token_throughput",
                            "max_output_tokens_per_s",
                            "max_concurrent_requests",
                            "input_lens",
                            "output_lens",
                            "ttfts",
                            "itls",
                            "latencies",
                            "start_times",
                            "errors",
                            "errors_by_status",
                            "server",
                            "peak_state_bytes",
                            "peak_running_sequences"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
    for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) {
      for (const char* stat : {"mean", "median", "std", "p90", "p99"}) {
        const std::string key = std::string(stat) + "_" + metric + "_ms";
        ASSERT_TRUE(r.contains(key)) << key;
        EXPECT_TRUE(r[key].is_number()) << key;
        EXPECT_GE(r[key].get<double>(), 0) << key;
      }
    }
    EXPECT_EQ(r["endpoint_type"], endpoint);
    EXPECT_EQ(r["backend"], "abcd");
    EXPECT_EQ(r["failed"], 0) << r["errors_by_status"].dump();
    EXPECT_TRUE(r["errors_by_status"].empty());
    EXPECT_GT(r["completed"].get<int>(), 0);
    EXPECT_EQ(r["num_prompts"], r["completed"]);
    EXPECT_GT(r["duration"].get<double>(), 1.0);
    EXPECT_GT(r["request_throughput"].get<double>(), 0);
    EXPECT_GT(r["output_throughput"].get<double>(), 0);
    EXPECT_GT(r["mean_ttft_ms"].get<double>(), 0);
    EXPECT_GE(r["p99_e2el_ms"].get<double>(), r["median_e2el_ms"].get<double>());
    EXPECT_EQ(r["output_lens"].size(), r["completed"].get<size_t>());
    // The server's own view of the same interval.
    const json& s = r["server"];
    EXPECT_TRUE(s["available"].get<bool>()) << s.dump();
    EXPECT_GE(r["peak_running_sequences"].get<double>(), 1);
    EXPECT_GT(r["peak_state_bytes"].get<double>(), 0);
    EXPECT_EQ(s["generated_tokens"].get<double>(), r["total_output_tokens"].get<double>());
    EXPECT_EQ(s["draft_tokens"].get<double>(), 0.0) << "this server does not speculate";
  }
};

TEST_F(LoadtestE2E, GrpcGenerateClosedLoop) {
  const std::string out = Output("grpc.json");
  const Command c =
      RunLoadtest(Target() + " --endpoint grpc-generate --concurrency 4 --duration 2 " +
                  "--output_tokens 16 --warmup 2 --goodput ttft:60000 --result_json " + out +
                  " --requests_jsonl " + Output("grpc.jsonl"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("Output token throughput"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("TTFT"), std::string::npos);
  const json r = ReadJson(out);
  ExpectVllmResult(r, "grpc-generate");
  EXPECT_EQ(r["request_rate"], "inf");
  EXPECT_EQ(r["max_concurrency"], 4);
  EXPECT_LE(r["max_concurrent_requests"].get<int>(), 4);
  EXPECT_NEAR(r["request_goodput"].get<double>(), r["request_throughput"].get<double>(), 1e-9);
  EXPECT_EQ(r["server"]["requests"]["generate/ok"].get<double>(), r["completed"].get<double>());
  std::ifstream lines(Output("grpc.jsonl"));
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_EQ(j["status"], "OK");
    EXPECT_EQ(j["chunk_ms"].size(), j["chunk_tokens"].size());
    ++count;
  }
  EXPECT_EQ(count, r["completed"].get<int>());
}

TEST_F(LoadtestE2E, HttpCompletionsOpenLoop) {
  const std::string out = Output("http.json");
  const Command c =
      RunLoadtest(Target() + " --endpoint http-completions --request_rate 20 --burstiness 0.5 " +
                  "--duration 2 --output_tokens 8:16 --ignore_eos --result_json " + out);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const json r = ReadJson(out);
  ExpectVllmResult(r, "http-completions");
  EXPECT_EQ(r["request_rate"], 20.0);
  EXPECT_EQ(r["burstiness"], 0.5);
  EXPECT_EQ(r["server"]["requests"]["completions/ok"].get<double>(), r["completed"].get<double>());
  for (const json& n : r["output_lens"]) {  // ignore_eos: exactly max_tokens
    EXPECT_GE(n.get<int>(), 8);
    EXPECT_LE(n.get<int>(), 16);
  }
}

// --conversations on sessions over both protocols: every later turn continues the session the
// server named (a session hit each) and sends only its new prompt.
TEST_F(LoadtestE2E, ConversationsOnSessionsOverGrpcAndHttp) {
  const auto session_hits = [this] {
    httplib::Result metrics = http_->Get("/metrics");
    if (!metrics || metrics->status != 200) return -1.0;
    return loadtest::MetricSnapshot(loadtest::ParsePrometheusText(metrics->body))
        .Sum("abcd_session_hits_total");
  };
  for (const std::string endpoint : {"grpc-generate", "http-completions"}) {
    const double hits_before = session_hits();
    ASSERT_GE(hits_before, 0);
    const std::string out = Output(endpoint + "-conversations.json");
    const Command c = RunLoadtest(Target() + " --endpoint " + endpoint +
                                  " --concurrency 2 --conversations 2 --turns 2 --warmup 0" +
                                  " --prompt_tokens 12 --output_tokens 4 --result_json " + out);
    ASSERT_EQ(c.exit_code, 0) << c.output;
    const json r = ReadJson(out);
    EXPECT_EQ(r["failed"], 0) << endpoint << " " << r["errors_by_status"].dump();
    EXPECT_EQ(r["completed"], 4) << endpoint;
    const json& turns = r["conversations"]["turns"];
    ASSERT_EQ(turns.size(), 2u) << endpoint << " " << r["conversations"].dump();
    EXPECT_EQ(turns[1]["requests"], 2) << endpoint;
    // Turn 2's prompt is its new prompt only (resending would add turn 1's 12 + 4 tokens).
    EXPECT_LE(turns[1]["prompt_tokens_mean"].get<double>(), 13) << endpoint;
    EXPECT_GT(turns[1]["prompt_tokens_mean"].get<double>(), 0) << endpoint;
    EXPECT_EQ(session_hits() - hits_before, 2) << endpoint;  // one per conversation's turn 2
  }
}

TEST_F(LoadtestE2E, TranslateOverHttp) {
  const std::string out = Output("translate.json");
  const Command c =
      RunLoadtest(Target() + " --endpoint http-translate --concurrency 2 --duration 2 " +
                  "--output_tokens 8 --beam_size 2 --result_json " + out);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const json r = ReadJson(out);
  ExpectVllmResult(r, "http-translate");
  EXPECT_EQ(r["server"]["requests"]["translate/ok"].get<double>(), r["completed"].get<double>());
}

TEST_F(LoadtestE2E, SweepWritesOneResultPerPoint) {
  const std::string out = Output("sweep.json");
  const Command c =
      RunLoadtest(Target() + " --concurrency 1,2 --num_requests 6 --output_tokens 4 " +
                  "--warmup 0 --result_json " + out);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("sweep"), std::string::npos);
  for (const char* suffix : {"-c1", "-c2"}) {
    const json r = ReadJson(Output(std::string("sweep") + suffix + ".json"));
    ASSERT_TRUE(r.is_object()) << suffix;
    EXPECT_EQ(r["completed"], 6);
    EXPECT_EQ(r["failed"], 0);
  }
}

TEST_F(LoadtestE2E, ErrorsAreCountedByStatus) {
  // max_tokens above the server's limit: every request is refused with INVALID_ARGUMENT.
  const std::string out = Output("errors.json");
  const Command c = RunLoadtest(Target() + " --num_requests 3 --warmup 0 --output_tokens 100000 " +
                                "--result_json " + out);
  EXPECT_EQ(c.exit_code, 1) << c.output;
  const json r = ReadJson(out);
  ASSERT_TRUE(r.is_object()) << c.output;
  EXPECT_EQ(r["failed"], 3);
  EXPECT_EQ(r["errors_by_status"]["INVALID_ARGUMENT"], 3);
  EXPECT_EQ(r["server"]["requests"]["generate/invalid_argument"], 3);
}

TEST(LoadtestCli, RefusesNonLoopbackTargets) {
  for (const char* host : {"10.1.2.3", "example.com", "0.0.0.0"}) {
    const Command c = RunLoadtest(std::string("--host ") + host + " --num_requests 1");
    EXPECT_EQ(c.exit_code, 2) << host << ": " << c.output;
    EXPECT_NE(c.output.find("only loopback targets"), std::string::npos) << c.output;
  }
  EXPECT_EQ(RunLoadtest("--concurrency 2 --request_rate 3").exit_code, 2);
  EXPECT_EQ(RunLoadtest("--bogus").exit_code, 2);
}

}  // namespace
}  // namespace abcd
