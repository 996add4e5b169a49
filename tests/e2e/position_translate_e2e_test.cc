// The Linformer's source limit on the real binary (issue 15): an encoder-decoder whose encoder and
// cross attention use abc position tables (cross N_src = 12, built by make_linformer_mt.py)
// translates a short text, and refuses a longer source over HTTP (400) and gRPC
// (INVALID_ARGUMENT) naming the text and the model's max_source_positions, never truncating it.
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

constexpr char kLongText[] =
    "Save all changes to the open documents before closing the window and quitting the "
    "application";

class PositionTranslateTest : public testing::ServerTest {
 protected:
  void SetUp() override {
    model_ = std::make_unique<testing::GeneratedModel>(std::string(ABCD_SOURCE_DIR) +
                                                       "/tests/e2e/make_linformer_mt.py");
    ASSERT_TRUE(model_->ok()) << model_->error();
    Start({"--device", "cpu", "--models", model_->dir()});
  }

  void TearDown() override {
    http_.reset();
    server_.reset();
    model_.reset();
  }

  std::unique_ptr<testing::GeneratedModel> model_;
};

TEST_F(PositionTranslateTest, ShortSourceServedLongerSourceRefused) {
  auto ok =
      http_->Post("/v1/translate", R"({"text": "Open file", "max_tokens": 6})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_TRUE(nlohmann::json::parse(ok->body)["translation"].is_string()) << ok->body;

  const std::string body = nlohmann::json{{"text", kLongText}, {"max_tokens", 6}}.dump();
  auto refused = http_->Post("/v1/translate", body, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  const std::string message =
      nlohmann::json::parse(refused->body)["error"]["message"].get<std::string>();
  EXPECT_EQ(message.rfind("text: ", 0), 0u) << message;
  EXPECT_NE(message.find("max_source_positions (12)"), std::string::npos) << message;

  const std::string batch =
      nlohmann::json{{"texts", {"Open file", kLongText}}, {"max_tokens", 6}}.dump();
  auto batch_refused = http_->Post("/v1/translate", batch, "application/json");
  ASSERT_TRUE(batch_refused);
  EXPECT_EQ(batch_refused->status, 400) << batch_refused->body;
  EXPECT_NE(batch_refused->body.find("texts[1]: text: "), std::string::npos) << batch_refused->body;

  auto channel = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = abcd::v1::Generator::NewStub(channel);
  abcd::v1::TranslateRequest translate;
  translate.set_text(kLongText);
  translate.set_max_tokens(6);
  abcd::v1::TranslateResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->Translate(&context, translate, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("max_source_positions (12)"), std::string::npos)
      << status.error_message();
}

}  // namespace
}  // namespace abcd
