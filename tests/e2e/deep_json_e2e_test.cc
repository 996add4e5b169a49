// Issue 44: one 100 KB request of deeply nested JSON used to kill abcd-server (SIGSEGV, every
// request in flight lost). On the real binary, over HTTP and gRPC: 50,000 nested `[` in a chat
// message, a 60,000-deep tool `parameters`, a `const` and an `enum` 100,000 deep in a
// response_format schema and the same in gRPC's GenerateRequest.response_format are each a 400 /
// INVALID_ARGUMENT naming the field, answered at once, and the server keeps serving.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class DeepJsonTest : public testing::ServerSuite<DeepJsonTest> {
 public:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::path(::testing::TempDir()) /
                                     ("abcd-deep-json-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    const std::string chat_template = (*dir_ / "chat.jinja").string();
    std::ofstream(chat_template) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n"
                                    "{% endfor %}assistant:";
    Start({"--device", "cpu", "--models", testing::kTrainedLmDir, "--chat_template",
           "abc-lm=" + chat_template});
  }
  static void TearDownTestSuite() {
    ServerSuite::TearDownTestSuite();
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

 protected:
  // POSTs `body` and expects a fast 400 whose error names `param` and the nesting limit.
  void ExpectRefused(const std::string& path, const std::string& body, const std::string& param) {
    const auto start = Clock::now();
    const auto result = http_->Post(path, body, "application/json");
    ASSERT_TRUE(result) << "no answer to a " << body.size() << "-byte body on " << path << "\n"
                        << server_->Log();
    EXPECT_EQ(result->status, 400) << result->body;
    const json error = json::parse(result->body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << result->body;
    EXPECT_EQ(error["error"]["param"], param) << result->body;
    EXPECT_TRUE(absl::StrContains(error["error"]["message"].get<std::string>(),
                                  "nests JSON deeper than 256 levels"))
        << result->body;
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
    ExpectServing();
  }

  static inline std::filesystem::path* dir_ = nullptr;
};

TEST_F(DeepJsonTest, NestedChatMessageContentIsRefusedNamingMessages) {
  ExpectRefused("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": )" + Nested(50000) + "}]}",
                "messages");
  ExpectRefused("/tokenize",
                R"({"messages": [{"role": "user", "content": )" + Nested(50000) + "}]}",
                "messages");
}

TEST_F(DeepJsonTest, NestedToolParametersAreRefusedNamingTools) {
  ExpectRefused("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": )"
                R"("function", "function": {"name": "f", "parameters": )" +
                    Nested(60000) + "}}]}",
                "tools");
}

TEST_F(DeepJsonTest, NestedSchemaValuesAreRefusedNamingResponseFormat) {
  const std::string schema_prefix =
      R"({"prompt": "x", "max_tokens": 4, "response_format": {"type": "json_schema", )"
      R"("json_schema": {"name": "n", "schema": {"type": "object", "properties": {"a": )";
  ExpectRefused("/v1/completions", schema_prefix + R"({"const": )" + Nested(100000) + "}}}}}}",
                "response_format");
  ExpectRefused("/v1/completions", schema_prefix + R"({"enum": [)" + Nested(100000) + "]}}}}}}",
                "response_format");
  // Nesting the limit allows still reaches the schema compiler (and is compiled or refused by
  // it, never a crash).
  const auto result =
      http_->Post("/v1/completions", schema_prefix + R"({"const": )" + Nested(200) + "}}}}}}",
                  "application/json");
  ASSERT_TRUE(result) << server_->Log();
  EXPECT_TRUE(result->status == 200 || result->status == 400) << result->body;
  EXPECT_FALSE(absl::StrContains(result->body, "nests JSON deeper")) << result->body;
  ExpectServing();
}

TEST_F(DeepJsonTest, NestedTopLevelBodyIsRefused) {
  const auto result = http_->Post("/v1/completions", Nested(50000), "application/json");
  ASSERT_TRUE(result) << server_->Log();
  EXPECT_EQ(result->status, 400) << result->body;
  EXPECT_TRUE(
      absl::StrContains(result->body, "request body[0][0][0][0][0][0][0][0]... nests JSON deeper"))
      << result->body;
  ExpectServing();
}

TEST_F(DeepJsonTest, NestedGrpcResponseFormatIsInvalidArgument) {
  auto stub = abcd::v1::Generator::NewStub(
      grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  abcd::v1::GenerateRequest request;
  request.set_prompt("x");
  request.set_max_tokens(2);
  request.mutable_response_format()->set_type(abcd::v1::ResponseFormat::TYPE_JSON_SCHEMA);
  request.mutable_response_format()->set_json_schema(R"({"enum": [)" + Nested(100000) + "]}");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->Generate(&context, request);
  abcd::v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "response_format.json_schema: enum[0]"))
      << status.error_message();
  ExpectServing();
}

}  // namespace
}  // namespace abcd
