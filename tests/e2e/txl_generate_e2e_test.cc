// Transformer-XL on the real binary (issue 16): abcd-server serves a txl LM (post-LN, no absolute
// positions, memory 6, built by make_txl_lm.py) over gRPC Generate and HTTP /v1/completions. A
// prompt longer than the ring wraps it during prefill; greedy decoding gives the same tokens on
// both paths and the same again when the request is repeated (the ring is per sequence).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "abcd/v1/generator.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"

namespace abcd {
namespace {

constexpr char kPrompt[] = "The jury said that the city of Atlanta deserves the praise and thanks";
constexpr int kMaxTokens = 20;

class TxlGenerateTest : public testing::ServerTest {
 protected:
  void SetUp() override {
    model_ = std::make_unique<testing::GeneratedModel>(std::string(ABCD_SOURCE_DIR) +
                                                       "/tests/e2e/make_txl_lm.py");
    ASSERT_TRUE(model_->ok()) << model_->error();
    Start({"--device", "cpu", "--models", model_->dir()});
    if (HasFatalFailure()) return;
    auto channel = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = abcd::v1::Generator::NewStub(channel);
  }

  void TearDown() override {
    http_.reset();
    server_.reset();
    model_.reset();
  }

  // Greedy text over gRPC (the streamed pieces joined) and the number of generated tokens.
  std::pair<std::string, int> GrpcGreedy() {
    abcd::v1::GenerateRequest request;
    request.set_prompt(kPrompt);
    request.set_max_tokens(kMaxTokens);
    request.mutable_sampling()->set_temperature(0.0f);
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    std::string text;
    int tokens = 0;
    while (reader->Read(&response)) {
      text += response.text();
      tokens += response.token_ids_size();
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {text, tokens};
  }

  std::unique_ptr<testing::GeneratedModel> model_;
  std::unique_ptr<abcd::v1::Generator::Stub> stub_;
};

TEST_F(TxlGenerateTest, GrpcAndCompletionsAgreeGreedy) {
  const auto [grpc_text, grpc_tokens] = GrpcGreedy();
  EXPECT_GT(grpc_tokens, 0);
  const nlohmann::json body = {{"prompt", kPrompt}, {"max_tokens", kMaxTokens}, {"temperature", 0}};
  auto response = http_->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200) << response->body;
  const nlohmann::json parsed = nlohmann::json::parse(response->body);
  EXPECT_EQ(parsed["choices"][0]["text"].get<std::string>(), grpc_text) << response->body;
  EXPECT_EQ(parsed["usage"]["completion_tokens"].get<int>(), grpc_tokens) << response->body;
  EXPECT_GT(parsed["usage"]["prompt_tokens"].get<int>(), 7) << "the prompt must wrap the ring";
  // A repeat (a fresh ring, or the prefix cache's snapshot of it) gives the same tokens.
  EXPECT_EQ(GrpcGreedy().first, grpc_text);
}

}  // namespace
}  // namespace abcd
