// Speculative decoding on the real abcd-server with the bundled abc-lm: the per-request
// "speculative" field (HTTP completions, SSE, chat, gRPC) gives the same greedy text as
// without it, bad values are a 400 naming the field, --speculative ngram:4 makes it the
// default (a request's "mode": "off" opts out), and the abcd_speculative_* counters move.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using nlohmann::json;

using testing::kTrainedLmDir;
using testing::MetricSample;
constexpr char kPrompt[] =
    "The old house stood on the hill. The old house stood on the hill. The old house stood on "
    "the hill. The old house stood on the hill. The old";

class SpeculativeE2eTest : public testing::ServerTest {
 protected:
  void Start(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--models", kTrainedLmDir, "--prefix_cache_mb", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    ServerTest::Start(std::move(args), /*read_timeout_s=*/60);
  }
  json Post(const std::string& path, const json& body, int expected_status = 200) {
    auto response = http_->Post(path, body.dump(), "application/json");
    if (!response) {
      ADD_FAILURE() << "no response";
      return json();
    }
    EXPECT_EQ(response->status, expected_status) << response->body;
    return json::parse(response->body, nullptr, false);
  }
  std::string Text(const json& body) {
    const json answer = Post("/v1/completions", body);
    return answer.contains("choices") ? answer["choices"][0]["text"].get<std::string>() : "";
  }
  double Drafted() {
    return MetricSample(*http_, "abcd_speculative_draft_tokens_total{model=\"abc-lm\"}");
  }
  double Accepted() {
    return MetricSample(*http_, "abcd_speculative_accepted_tokens_total{model=\"abc-lm\"}");
  }
};

TEST_F(SpeculativeE2eTest, PerRequestFieldGivesTheSameTextAndMovesTheCounters) {
  Start({});
  const json plain = {{"prompt", kPrompt}, {"max_tokens", 48}, {"temperature", 0}};
  json spec = plain;
  spec["speculative"] = {{"mode", "ngram"}, {"k", 4}};
  EXPECT_EQ(Drafted(), 0);
  const std::string expected = Text(plain);
  EXPECT_EQ(Drafted(), 0) << "speculation is off by default";
  EXPECT_EQ(Text(spec), expected);
  EXPECT_GT(Drafted(), 0);
  EXPECT_GE(Accepted(), 0);
  EXPECT_LE(Accepted(), Drafted());
  std::printf("abc-lm, repeated sentence: %.0f of %.0f drafted tokens accepted\n", Accepted(),
              Drafted());

  // Seeded sampling and SSE streaming: the same text.
  json sampled = plain;
  sampled["temperature"] = 0.8;
  sampled["seed"] = 5;
  json sampled_spec = sampled;
  sampled_spec["speculative"] = spec["speculative"];
  EXPECT_EQ(Text(sampled_spec), Text(sampled));
  json stream = spec;
  stream["stream"] = true;
  auto response = http_->Post("/v1/completions", stream.dump(), "application/json");
  ASSERT_TRUE(response);
  std::string streamed;
  for (absl::string_view event : absl::StrSplit(response->body, "\n\n", absl::SkipEmpty())) {
    if (event == "data: [DONE]") continue;
    const json chunk = json::parse(event.substr(6), nullptr, false);
    if (chunk.contains("choices") && !chunk["choices"].empty()) {
      streamed += chunk["choices"][0]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(streamed, expected);

  // gRPC: GenerateRequest.speculative.
  auto stub = abcd::v1::Generator::NewStub(
      grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  for (bool speculative : {false, true}) {
    abcd::v1::GenerateRequest request;
    request.set_prompt(kPrompt);
    request.set_max_tokens(48);
    request.mutable_sampling()->set_temperature(0);
    if (speculative) {
      request.mutable_speculative()->set_mode("ngram");
      request.mutable_speculative()->set_k(6);
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub->Generate(&context, request);
    abcd::v1::GenerateResponse answer;
    std::string text;
    while (reader->Read(&answer)) text += answer.text();
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(text, expected) << "gRPC, speculative " << speculative;
  }
}

TEST_F(SpeculativeE2eTest, BadValuesAreRefusedNamingTheField) {
  Start({});
  for (const json& bad : {json{{"mode", "ngram"}, {"k", 0}}, json{{"mode", "ngram"}, {"k", 17}},
                          json{{"mode", "medusa"}}, json{{"k", 4}}, json("ngram")}) {
    json body = {{"prompt", "Hello"}, {"max_tokens", 4}, {"speculative", bad}};
    const json error = Post("/v1/completions", body, 400);
    ASSERT_TRUE(error.contains("error")) << error.dump();
    EXPECT_TRUE(absl::StrContains(error["error"]["message"].get<std::string>(), "speculative"))
        << error.dump();
  }
  const json chat = Post("/v1/chat/completions",
                         {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                          {"max_tokens", 4},
                          {"speculative", {{"mode", "ngram"}, {"k", 99}}}},
                         400);
  EXPECT_TRUE(absl::StrContains(chat.dump(), "speculative.k")) << chat.dump();
}

TEST_F(SpeculativeE2eTest, ServerFlagMakesItTheDefault) {
  Start({"--speculative", "ngram:4"});
  const json body = {{"prompt", kPrompt}, {"max_tokens", 32}, {"temperature", 0}};
  json off = body;
  off["speculative"] = {{"mode", "off"}};
  const std::string expected = Text(off);
  EXPECT_EQ(Drafted(), 0) << "the request opted out";
  EXPECT_EQ(Text(body), expected);
  EXPECT_GT(Drafted(), 0);
}

TEST(SpeculativeFlag, BadValueStopsTheServerNamingTheFlag) {
  testing::ExpectRefusedStart({"--models", kTrainedLmDir, "--speculative", "ngram:0"},
                              testing::kAnyExit, "--speculative");
}

}  // namespace
}  // namespace abcd
