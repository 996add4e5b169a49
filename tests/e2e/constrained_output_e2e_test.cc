// Constrained JSON output (issue 26 item 3) on the real abcd-server with the bundled abc-lm, an
// English LM that writes no JSON of its own: response_format json_schema on /v1/completions and
// /v1/chat/completions, plain and SSE, n = 2, and over gRPC; every output parses and has the
// schema's shape and ends with "stop"; max_tokens cuts with "length"; json_object gives an
// object; unsupported keywords are 400 / INVALID_ARGUMENT naming their path; the same request
// without response_format gives no JSON (what the mask changes).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

// Ordered: the schema keeps its key order on the wire (properties are generated in it).
using json = nlohmann::ordered_json;

using testing::kTrainedLmDir;

const char kSchema[] = R"({"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"},
    "genre": {"enum": ["story", "poem", "song"]},
    "pages": {"type": ["number", "null"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}},
  "required": ["title", "year", "genre", "tags"], "additionalProperties": false})";

// kSchema's shape; the properties in the schema's order.
bool HasShape(const std::string& text) {
  const json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object() || !v.contains("title") || !v.contains("year") || !v.contains("genre") ||
      !v.contains("tags")) {
    return false;
  }
  if (!v["title"].is_string() || !v["year"].is_number_integer()) return false;
  const std::string genre = v["genre"].is_string() ? v["genre"].get<std::string>() : "";
  if (genre != "story" && genre != "poem" && genre != "song") return false;
  if (v.contains("pages") && !v["pages"].is_number() && !v["pages"].is_null()) return false;
  if (!v["tags"].is_array() || v["tags"].empty() || v["tags"].size() > 3) return false;
  for (const auto& tag : v["tags"]) {
    if (!tag.is_boolean()) return false;
  }
  for (const auto& [key, value] : v.items()) {
    if (key != "title" && key != "year" && key != "genre" && key != "pages" && key != "tags") {
      return false;
    }
  }
  const std::string order[] = {"\"title\"", "\"year\"", "\"genre\""};
  return text.find(order[0]) < text.find(order[1]) && text.find(order[1]) < text.find(order[2]);
}

json Format() {
  return {{"type", "json_schema"},
          {"json_schema", {{"name", "book"}, {"strict", true}, {"schema", json::parse(kSchema)}}}};
}

class ConstrainedOutputE2eTest : public testing::ServerSuite<ConstrainedOutputE2eTest> {
 public:
  // Exact fp32 products: the seeds below were chosen on them, and the default bf16 products
  // round differently between the gcc build and the clang ASan build (seed 13 ran out of tokens
  // on the latter).
  static std::vector<std::string> ServerArgs() {
    return {"--models", kTrainedLmDir, "--cpu_compute", "fp32"};
  }

 protected:
  void SetUp() override {
    ServerSuite::SetUp();
    if (HasFatalFailure()) return;
    http_->set_read_timeout(60, 0);
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
  // SSE: each choice's text and finish reason, by index.
  std::map<int, std::pair<std::string, std::string>> Stream(const std::string& path,
                                                            const json& body, bool chat) {
    auto response = http_->Post(path, body.dump(), "application/json");
    std::map<int, std::pair<std::string, std::string>> out;
    if (!response) return out;
    EXPECT_EQ(response->status, 200) << response->body;
    for (absl::string_view event : absl::StrSplit(response->body, "\n\n", absl::SkipEmpty())) {
      if (event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6), nullptr, false);
      for (const json& choice : chunk["choices"]) {
        auto& [text, reason] = out[choice["index"].get<int>()];
        const json& piece = chat ? choice["delta"]["content"] : choice["text"];
        if (piece.is_string()) text += piece.get<std::string>();
        if (choice["finish_reason"].is_string()) reason = choice["finish_reason"];
      }
    }
    return out;
  }
};

// At temperature 1 a title string may ramble past 300 tokens ("length"; the cut is the third
// test's): the seed is one whose two choices both close in time. Seeds 1-40 on 2026-11-26: 35
// do; 11 did before the O(vocab) draw changed its stream and no longer does.
TEST_F(ConstrainedOutputE2eTest, CompletionsPlainAndStreamedWithTwoChoices) {
  const json body = {{"prompt", "The book on the table was"},
                     {"max_tokens", 300},
                     {"temperature", 1.0},
                     {"seed", 13},
                     {"n", 2},
                     {"response_format", Format()}};
  const json plain = Post("/v1/completions", body);
  ASSERT_EQ(plain["choices"].size(), 2u) << plain.dump();
  for (const json& choice : plain["choices"]) {
    const std::string text = choice["text"];
    EXPECT_EQ(choice["finish_reason"], "stop") << text;
    EXPECT_TRUE(HasShape(text)) << text;
  }
  json streamed = body;
  streamed["stream"] = true;
  const auto chunks = Stream("/v1/completions", streamed, /*chat=*/false);
  ASSERT_EQ(chunks.size(), 2u);
  for (const auto& [index, choice] : chunks) {
    EXPECT_EQ(choice.first, plain["choices"][index]["text"]) << index;
    EXPECT_EQ(choice.second, "stop");
  }
}

TEST_F(ConstrainedOutputE2eTest, ChatPlainAndStreamed) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Describe a book as JSON."}}}},
                     {"max_completion_tokens", 300},
                     {"temperature", 0},
                     {"response_format", Format()}};
  const json plain = Post("/v1/chat/completions", body);
  const std::string content = plain["choices"][0]["message"]["content"];
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop") << content;
  EXPECT_TRUE(HasShape(content)) << content;
  json streamed = body;
  streamed["stream"] = true;
  streamed["n"] = 2;
  streamed["temperature"] = 1.0;
  streamed["seed"] = 5;
  const auto chunks = Stream("/v1/chat/completions", streamed, /*chat=*/true);
  ASSERT_EQ(chunks.size(), 2u);
  for (const auto& [index, choice] : chunks) {
    EXPECT_EQ(choice.second, "stop") << choice.first;
    EXPECT_TRUE(HasShape(choice.first)) << index << ": " << choice.first;
  }
}

TEST_F(ConstrainedOutputE2eTest, JsonObjectTheCutAndWithoutTheMask) {
  const json object = Post("/v1/completions", {{"prompt", "Open file"},
                                               {"max_tokens", 300},
                                               {"temperature", 0},
                                               {"response_format", {{"type", "json_object"}}}});
  const std::string text = object["choices"][0]["text"];
  if (object["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
  }
  const json cut = Post(
      "/v1/completions",
      {{"prompt", "The book on the table was"}, {"max_tokens", 4}, {"response_format", Format()}});
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(cut["usage"]["completion_tokens"], 4);
  // Without response_format the model writes English, which the checks above would refuse.
  const json free = Post("/v1/completions", {{"prompt", "The book on the table was"},
                                             {"max_tokens", 60},
                                             {"temperature", 1.0},
                                             {"seed", 11}});
  EXPECT_FALSE(HasShape(free["choices"][0]["text"])) << free.dump();
}

TEST_F(ConstrainedOutputE2eTest, UnsupportedKeywordsAre400NamingThem) {
  json format = Format();
  format["json_schema"]["schema"]["properties"]["title"]["contentMediaType"] = "text/plain";
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    json body = {{"prompt", "x"}, {"response_format", format}};
    if (absl::StrContains(path, "chat")) {
      body.erase("prompt");
      body["messages"] = {{{"role", "user"}, {"content", "x"}}};
    }
    const json error = Post(path, body, 400);
    EXPECT_EQ(
        error["error"]["message"],
        "response_format.json_schema.schema.properties.title.contentMediaType is not supported")
        << path;
    EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  }
  const json bad_type =
      Post("/v1/completions", {{"prompt", "x"}, {"response_format", {{"type", "grammar"}}}}, 400);
  EXPECT_TRUE(absl::StartsWith(bad_type["error"]["message"].get<std::string>(),
                               "response_format.type must be one of"))
      << bad_type.dump();
}

TEST_F(ConstrainedOutputE2eTest, GrpcResponseFormat) {
  auto stub = abcd::v1::Generator::NewStub(
      grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  auto generate = [&](const std::string& schema, std::string* text) {
    abcd::v1::GenerateRequest request;
    request.set_prompt("The book on the table was");
    request.set_max_tokens(300);
    request.mutable_sampling()->set_temperature(0);
    request.mutable_response_format()->set_type(abcd::v1::ResponseFormat::TYPE_JSON_SCHEMA);
    request.mutable_response_format()->set_json_schema(schema);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    abcd::v1::FinishReason reason = abcd::v1::FINISH_REASON_UNSPECIFIED;
    while (reader->Read(&response)) {
      *text += response.text();
      if (response.finish_reason() != abcd::v1::FINISH_REASON_UNSPECIFIED) {
        reason = response.finish_reason();
      }
    }
    grpc::Status status = reader->Finish();
    if (status.ok()) {
      EXPECT_EQ(reason, abcd::v1::FINISH_REASON_STOP) << *text;
    }
    return status;
  };
  std::string text;
  ASSERT_TRUE(generate(kSchema, &text).ok());
  EXPECT_TRUE(HasShape(text)) << text;
  // The same greedy request over HTTP gives the same text.
  const json http = Post("/v1/completions", {{"prompt", "The book on the table was"},
                                             {"max_tokens", 300},
                                             {"temperature", 0},
                                             {"response_format", Format()}});
  EXPECT_EQ(http["choices"][0]["text"], text);
  std::string ignored;
  const grpc::Status refused =
      generate(R"({"type": "string", "contentMediaType": "text/plain"})", &ignored);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message(),
            "response_format.json_schema.contentMediaType is not supported");
}

}  // namespace
}  // namespace abcd
