// abcd-server end to end: the real binary on ephemeral loopback ports, driven over gRPC and
// HTTP. Streaming, reproducibility under load, concurrency and batching, cancellation, overload,
// graceful drain on SIGTERM and the bad-input table.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "reflection.grpc.pb.h"
#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using abcd::v1::GenerateRequest;
using abcd::v1::GenerateResponse;
using testing::kGmatDir;
using testing::kLmDir;
using testing::kMtDir;

struct StreamResult {
  grpc::Status status;
  std::vector<GenerateResponse> responses;
  std::vector<int32_t> tokens() const {
    std::vector<int32_t> out;
    for (const auto& r : responses)
      out.insert(out.end(), r.token_ids().begin(), r.token_ids().end());
    return out;
  }
};

class ServerTest : public testing::ServerTest {
 protected:
  // Runs on the small untrained models: fast, and independent of which trained models ship.
  // On the CPU backend unless `args` picks a device: several tests compare with abcd-cli.
  void Start(std::vector<std::string> args = {},
             std::string models = std::string(kLmDir) + "," + kMtDir) {
    if (std::find(args.begin(), args.end(), "--device") == args.end()) {
      args.insert(args.begin(), {"--device", "cpu"});
    }
    args.insert(args.begin(), {"--models", models});
    testing::ServerTest::Start(std::move(args));
    if (HasFatalFailure()) return;
    channel_ = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = abcd::v1::Generator::NewStub(channel_);
  }

  StreamResult Stream(const GenerateRequest& request, int cancel_after = -1) {
    grpc::ClientContext context;
    StreamResult result;
    auto reader = stub_->Generate(&context, request);
    GenerateResponse response;
    while (reader->Read(&response)) {
      result.responses.push_back(response);
      if (static_cast<int>(result.responses.size()) == cancel_after) context.TryCancel();
    }
    result.status = reader->Finish();
    return result;
  }

  // Polls until the server holds no sequence and no state bytes.
  bool EventuallyIdle() {
    for (int i = 0; i < 200; ++i) {
      if (Metric("abcd_running_sequences") == 0 && Metric("abcd_waiting_requests") == 0 &&
          Metric("abcd_state_bytes_in_use") == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = health->Check(&context, {}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.status();
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<abcd::v1::Generator::Stub> stub_;
};

GenerateRequest Greedy(const std::string& prompt, int max_tokens) {
  GenerateRequest request;
  request.set_prompt(prompt);
  request.set_max_tokens(max_tokens);
  request.mutable_sampling()->set_temperature(0.0f);
  return request;
}

std::vector<int32_t> CliGreedyTokens(const std::string& prompt, int max_tokens) {
  const std::string command = testing::CliBinary() + " generate --model " + kLmDir + " --prompt '" +
                              prompt + "' --max-tokens " + std::to_string(max_tokens) +
                              " --temperature 0 --json";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  pclose(pipe);
  std::vector<std::string> lines = absl::StrSplit(output, '\n', absl::SkipEmpty());
  if (lines.empty()) return {};
  return nlohmann::json::parse(lines.back())["token_ids"].get<std::vector<int32_t>>();
}

TEST_F(ServerTest, StreamsTokenByTokenAndGreedyMatchesCli) {
  Start();
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  const StreamResult result = Stream(Greedy("This program is free software", 12));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_FALSE(result.responses.empty());
  for (size_t i = 0; i + 1 < result.responses.size(); ++i) {
    EXPECT_EQ(result.responses[i].token_ids_size(), 1);
    EXPECT_EQ(result.responses[i].finish_reason(), abcd::v1::FINISH_REASON_UNSPECIFIED);
  }
  const GenerateResponse& last = result.responses.back();
  EXPECT_NE(last.finish_reason(), abcd::v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_EQ(last.usage().completion_tokens(), static_cast<int>(result.tokens().size()));
  EXPECT_GT(last.usage().prompt_tokens(), 1);
  EXPECT_EQ(result.tokens(), CliGreedyTokens("This program is free software", 12));
}

TEST_F(ServerTest, DeviceAutoServesOnABackendItLogs) {
  Start({"--device", "auto"});
  const std::string log = server_->Log();
  // The translation model has no CUDA path, so it is on the CPU whatever the machine.
  EXPECT_NE(log.find("event=model_loaded name=abc-mt-untrained kind=translation"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("backend=cpu"), std::string::npos) << log;
  EXPECT_NE(log.find("event=cuda_unavailable name=abc-mt-untrained"), std::string::npos) << log;
  const StreamResult result = Stream(Greedy("This program is free software", 8));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.tokens().size(), 8u);
}

TEST(ServerFlags, BadDeviceIsRefusedNamingTheFlag) {
  testing::ExpectRefusedStart({"--device", "tpu"}, 2, "--device must be auto, cpu, cuda or cuda:N");
}

TEST(ServerFlags, BadPrefillPolicyIsRefusedNamingTheFlag) {
  testing::ExpectRefusedStart({"--prefill_policy", "fast"}, 2,
                              "--prefill_policy must be time or tokens");
  testing::ExpectRefusedStart({"--iteration_budget_ms", "-1"}, 2,
                              "--iteration_budget_ms must be in [0, 10000]");
  testing::ExpectRefusedStart({"--prefill_step_share", "0"}, 2,
                              "--prefill_step_share must be in (0, 16]");
}

TEST_F(ServerTest, ReflectionListsTheServices) {
  Start();
  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = reflection->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("*");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& s : response.list_services_response().service()) services.push_back(s.name());
  EXPECT_NE(std::find(services.begin(), services.end(), "abcd.v1.Generator"), services.end());
  EXPECT_NE(std::find(services.begin(), services.end(), "grpc.health.v1.Health"), services.end());
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServerTest, SeededSamplingIsReproducibleWithSixtyFourOtherStreams) {
  Start();
  GenerateRequest seeded;
  seeded.set_prompt("the freedom to share and change it");
  seeded.set_max_tokens(24);
  seeded.mutable_sampling()->set_temperature(0.8f);
  seeded.mutable_sampling()->set_top_p(0.95f);
  seeded.mutable_sampling()->set_seed(424242);
  const StreamResult alone = Stream(seeded);
  ASSERT_TRUE(alone.status.ok());

  std::atomic<int> failures{0};
  std::vector<std::thread> others;
  for (int i = 0; i < 64; ++i) {
    others.emplace_back([this, i, &failures] {
      GenerateRequest other;
      other.set_prompt("other stream " + std::to_string(i));
      other.set_max_tokens(32);
      other.mutable_sampling()->set_seed(i);
      if (!Stream(other).status.ok()) failures++;
    });
  }
  const StreamResult crowded = Stream(seeded);
  for (auto& t : others) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(crowded.status.ok());
  EXPECT_EQ(crowded.tokens(), alone.tokens());
}

TEST_F(ServerTest, HundredTwentyEightConcurrentStreamsBatchTogether) {
  Start();
  std::atomic<int> ok{0};
  std::vector<std::thread> streams;
  for (int i = 0; i < 128; ++i) {
    streams.emplace_back([this, i, &ok] {
      GenerateRequest request;
      request.set_prompt("stream number " + std::to_string(i));
      request.set_max_tokens(16);
      const StreamResult r = Stream(request);
      if (r.status.ok() && !r.responses.empty()) ok++;
    });
  }
  for (auto& t : streams) t.join();
  EXPECT_EQ(ok.load(), 128);
  const double count = Metric("abcd_batch_size_count");
  const double singles = Metric("abcd_batch_size_bucket{le=\"1\"}");
  ASSERT_GT(count, 0);
  EXPECT_LT(singles, count) << "no batch larger than one sequence was observed";
  EXPECT_GT(Metric("abcd_batch_size_sum") / count, 1.0);
  EXPECT_GE(Metric("abcd_requests_total{kind=\"generate\",status=\"ok\"}"), 128);
  EXPECT_TRUE(EventuallyIdle());
}

TEST_F(ServerTest, CancelMidStreamFreesStateAtOnce) {
  Start();
  GenerateRequest request;
  request.set_prompt("a very long answer");
  request.set_max_tokens(4000);
  const StreamResult result = Stream(request, /*cancel_after=*/3);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(result.responses.size(), 200u);
  EXPECT_TRUE(EventuallyIdle());
}

TEST_F(ServerTest, OverloadIsRefusedAndTheServerKeepsServing) {
  Start({"--max_waiting_requests", "1", "--max_running_sequences", "1"});
  // One running stream and one waiting request fill the server.
  GenerateRequest long_request;
  long_request.set_prompt("occupy the server");
  long_request.set_max_tokens(4000);
  grpc::ClientContext running_context, waiting_context;
  std::atomic<int> running_received{0};
  grpc::Status running_status, waiting_status;
  std::thread running([&] {
    auto stream = stub_->Generate(&running_context, long_request);
    GenerateResponse response;
    while (stream->Read(&response)) running_received++;
    running_status = stream->Finish();
  });
  while (running_received.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::thread waiting([&] {
    auto stream = stub_->Generate(&waiting_context, long_request);
    GenerateResponse response;
    while (stream->Read(&response)) {
    }
    waiting_status = stream->Finish();
  });
  bool queued = false;
  for (int i = 0; i < 500 && !queued; ++i) {
    queued = Metric("abcd_waiting_requests") == 1;
    if (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(queued);

  const StreamResult refused = Stream(Greedy("one too many", 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.status.error_message();
  auto http_refused =
      http_->Post("/v1/completions", R"({"prompt": "more", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(http_refused);
  EXPECT_EQ(http_refused->status, 429) << http_refused->body;
  EXPECT_NE(http_refused->body.find("\"error\""), std::string::npos);

  running_context.TryCancel();
  waiting_context.TryCancel();
  running.join();
  waiting.join();
  EXPECT_EQ(running_status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(EventuallyIdle());  // cancelled requests free their place within an iteration
  EXPECT_TRUE(Stream(Greedy("still serving", 4)).status.ok());
  EXPECT_EQ(Metric("abcd_requests_total{kind=\"generate\",status=\"resource_exhausted\"}"), 1);
}

TEST_F(ServerTest, SigtermDrainsInFlightStreamsThenExitsZero) {
  Start({"--drain_grace_seconds", "20"});
  // Greedy, so the stream is the same every run and does not stop at an early sampled EOS (the
  // server would then drain at once and exit before the probes below; seen once in ~20 runs).
  const GenerateRequest request = Greedy("finish me", 3000);
  StreamResult in_flight;
  std::atomic<int> received{0};
  std::thread reader([&] {
    grpc::ClientContext context;
    auto stream = stub_->Generate(&context, request);
    GenerateResponse response;
    while (stream->Read(&response)) {
      in_flight.responses.push_back(response);
      received++;
    }
    in_flight.status = stream->Finish();
  });
  while (received.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  server_->SendSignal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto ready = http_->Get("/readyz");
  auto healthz = http_->Get("/healthz");
  const StreamResult refused = Stream(Greedy("too late", 4));
  reader.join();  // before any fatal assertion: a joinable thread's destructor aborts
  ASSERT_TRUE(ready && healthz) << server_->Log();
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(in_flight.status.ok()) << in_flight.status.error_message();
  ASSERT_FALSE(in_flight.responses.empty());
  EXPECT_EQ(in_flight.responses.back().usage().completion_tokens() > 0, true);
  EXPECT_EQ(server_->WaitForExit(30), 0) << server_->Log();
}

TEST_F(ServerTest, BadInputOverGrpcNamesTheField) {
  Start({"--max_prompt_tokens", "32"});
  struct Case {
    GenerateRequest request;
    const char* field;
  };
  std::vector<Case> cases;
  auto add = [&](const char* field, auto mutate) {
    GenerateRequest r = Greedy("valid prompt", 4);
    mutate(r);
    cases.push_back({r, field});
  };
  add("prompt", [](GenerateRequest& r) { r.set_prompt(""); });
  add("max_tokens", [](GenerateRequest& r) { r.set_max_tokens(-1); });
  add("max_tokens", [](GenerateRequest& r) { r.set_max_tokens(1 << 30); });
  add("temperature", [](GenerateRequest& r) { r.mutable_sampling()->set_temperature(-1); });
  add("top_p", [](GenerateRequest& r) { r.mutable_sampling()->set_top_p(1.5f); });
  add("top_k", [](GenerateRequest& r) { r.mutable_sampling()->set_top_k(-3); });
  add("repetition_penalty",
      [](GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(0); });
  add("stop[0]", [](GenerateRequest& r) { r.add_stop(""); });
  add("prompt", [](GenerateRequest& r) { r.set_prompt(std::string(4000, 'x') + " many words"); });
  for (const Case& c : cases) {
    const StreamResult r = Stream(c.request);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(r.status.error_message().find(c.field), std::string::npos)
        << c.field << ": " << r.status.error_message();
  }
  // An unknown model is NOT_FOUND, as HTTP's 404 model_not_found (ServedModels::Resolve).
  GenerateRequest unknown = Greedy("valid prompt", 4);
  unknown.set_model("no-such-model");
  const StreamResult not_found = Stream(unknown);
  EXPECT_EQ(not_found.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(not_found.status.error_message().find("model 'no-such-model' is not served"),
            std::string::npos)
      << not_found.status.error_message();
  abcd::v1::TranslateRequest translate;
  abcd::v1::TranslateResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status = stub_->Translate(&context, translate, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("text"), std::string::npos);
  }
  translate.set_text("Open file");
  translate.set_beam_size(100);
  {
    grpc::ClientContext context;
    const grpc::Status status = stub_->Translate(&context, translate, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("beam_size"), std::string::npos);
  }
  // The server is unharmed.
  EXPECT_TRUE(Stream(Greedy("valid prompt", 4)).status.ok());
}

TEST_F(ServerTest, BadInputOverHttpNamesTheField) {
  Start({"--max_prompt_tokens", "32"});
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"/v1/completions", R"({"max_tokens": 4})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 7})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": 500})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 2})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "x", "model": "nope"})", 404, "model"},
      {"/v1/completions", R"({"prompt": "x", "max_tok)", 400, "JSON"},
      {"/v1/completions", std::string("{\"prompt\": \"") + std::string(2 << 20, 'a') + "\"}", 413,
       "bytes"},
      {"/v1/completions", R"({"prompt": ")" + std::string(3000, 'y') + R"( z"})", 400, "prompt"},
      {"/v1/translate", R"({"text": ""})", 400, "text"},
      {"/v1/translate", R"({"text": "x", "beam_size": 0})", 400, "beam_size"},
      {"/v1/translate", R"({"texts": []})", 400, "texts"},
  };
  for (const Case& c : cases) {
    auto response = http_->Post(c.path, c.body, "application/json");
    ASSERT_TRUE(response) << c.body.substr(0, 80);
    EXPECT_EQ(response->status, c.status) << c.body.substr(0, 80) << " -> " << response->body;
    const auto error = nlohmann::json::parse(response->body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << response->body;
    EXPECT_TRUE(error["error"]["message"].is_string());
    EXPECT_TRUE(error["error"]["type"].is_string());
    EXPECT_NE(error["error"]["message"].get<std::string>().find(c.fragment), std::string::npos)
        << c.fragment << ": " << response->body;
  }
  auto ok =
      http_->Post("/v1/completions", R"({"prompt": "fine", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// A GMAT model (issue 16) serves Translate over gRPC and POST /v1/translate, greedy and beam 4;
// greedy gives the same translation on both.
TEST_F(ServerTest, GmatModelTranslatesOverGrpcAndHttp) {
  Start({}, kGmatDir);
  for (int beam : {1, 4}) {
    abcd::v1::TranslateRequest translate;
    translate.set_text("Open the file and save the changes.");
    translate.set_max_tokens(8);
    translate.set_beam_size(beam);
    abcd::v1::TranslateResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->Translate(&context, translate, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    auto http = http_->Post("/v1/translate",
                            absl::StrCat(R"({"text": "Open the file and save the changes.", )",
                                         R"("max_tokens": 8, "beam_size": )", beam, "}"),
                            "application/json");
    ASSERT_TRUE(http);
    ASSERT_EQ(http->status, 200) << http->body;
    const auto body = nlohmann::json::parse(http->body);
    ASSERT_TRUE(body["translation"].is_string()) << http->body;
    EXPECT_EQ(body["translation"].get<std::string>(), response.translation()) << "beam " << beam;
  }
  EXPECT_TRUE(EventuallyIdle());
}

TEST_F(ServerTest, HttpTranslateCompletionsAndModels) {
  Start();
  auto models = http_->Get("/v1/models");
  ASSERT_TRUE(models);
  const auto list = nlohmann::json::parse(models->body);
  ASSERT_EQ(list["data"].size(), 2u);
  auto translated =
      http_->Post("/v1/translate", R"({"text": "Open file", "max_tokens": 8})", "application/json");
  ASSERT_TRUE(translated);
  EXPECT_EQ(translated->status, 200) << translated->body;
  EXPECT_TRUE(nlohmann::json::parse(translated->body)["translation"].is_string());
  auto batch =
      http_->Post("/v1/translate", R"({"texts": ["Open file", "Save changes?"], "max_tokens": 8})",
                  "application/json");
  ASSERT_TRUE(batch);
  EXPECT_EQ(nlohmann::json::parse(batch->body)["translations"].size(), 2u);
  auto stream = http_->Post("/v1/completions",
                            R"({"prompt": "free software", "max_tokens": 5, "stream": true})",
                            "application/json");
  ASSERT_TRUE(stream);
  EXPECT_NE(stream->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  EXPECT_NE(stream->body.find("data: [DONE]"), std::string::npos);
}

}  // namespace
}  // namespace abcd
