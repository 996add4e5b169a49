// OpenAI Completions extras on the real abcd-server with the bundled abc-lm: logprobs (greedy:
// the chosen token is the top-1), echo + logprobs + max_tokens 0 (the lm-eval-harness
// loglikelihood request) reproducing the generated tokens' scores, and the SSE shapes with and
// without stream_options.include_usage (the JSON shapes of OpenAI's legacy Completions API,
// checked field by field), exact text, the sampling fields, health and deadlines; and chat
// completions driven by the official OpenAI Node SDK (tests/e2e/openai_sdk/, installed by its
// npm-ci.sh; skipped without node), and chat sessions.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using nlohmann::json;

using testing::kTrainedLmDir;
using testing::MetricSample;

class OpenAiE2eTest : public testing::ServerSuite<OpenAiE2eTest> {
 public:
  static std::vector<std::string> ServerArgs() { return {"--models", kTrainedLmDir}; }

 protected:
  void SetUp() override {
    ServerSuite::SetUp();
    if (HasFatalFailure()) return;
    stub_ = abcd::v1::Generator::NewStub(
        grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
    auto tokenizer = Tokenizer::Load(kTrainedLmDir + "/tokenizer.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    auto ids = (*tokenizer)->Encode("Once upon a time there was a little");
    ASSERT_TRUE(ids.ok());
    prompt_ = *ids;
  }

  json Complete(const json& body, int* status = nullptr) {
    auto response = http_->Post("/v1/completions", body.dump(), "application/json");
    if (!response) return json();
    if (status != nullptr) *status = response->status;
    EXPECT_EQ(response->status, 200) << response->body;
    return json::parse(response->body, nullptr, false);
  }
  // The data payloads of an SSE body; "[DONE]" must be the last.
  std::vector<json> Stream(const json& body) {
    auto response = http_->Post("/v1/completions", body.dump(), "application/json");
    std::vector<json> chunks;
    if (!response) {
      ADD_FAILURE() << "no response";
      return chunks;
    }
    EXPECT_EQ(response->status, 200) << response->body;
    bool done = false;
    for (absl::string_view event : absl::StrSplit(response->body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
      EXPECT_FALSE(done) << "data after [DONE]";
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      chunks.push_back(json::parse(event.substr(6), nullptr, false));
    }
    EXPECT_TRUE(done) << response->body;
    return chunks;
  }

  // Greedy generation over gRPC (it returns the token ids) from `prompt` (default prompt_).
  std::vector<int32_t> GenerateIds(int max_tokens, const std::vector<int32_t>* prompt = nullptr) {
    abcd::v1::GenerateRequest request;
    for (int32_t id : prompt != nullptr ? *prompt : prompt_) request.add_prompt_token_ids(id);
    request.set_max_tokens(max_tokens);
    request.mutable_sampling()->set_temperature(0);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    std::vector<int32_t> ids;
    while (reader->Read(&response)) {
      ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return ids;
  }

  std::unique_ptr<abcd::v1::Generator::Stub> stub_;
  std::vector<int32_t> prompt_;
};

// Runs a shell command; its stdout (and stderr when the command redirects it) and exit status.
std::string RunCommand(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  *status = pclose(pipe);
  return output;
}

TEST_F(OpenAiE2eTest, GreedyLogprobsPickTopOneAndEchoReproducesThem) {
  constexpr int kMaxTokens = 8;
  const json greedy = Complete(
      {{"prompt", prompt_}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"logprobs", 3}});
  const json& choice = greedy["choices"][0];
  const json& logprobs = choice["logprobs"];
  ASSERT_TRUE(logprobs.is_object()) << greedy.dump();
  const size_t n = logprobs["tokens"].size();
  ASSERT_GT(n, 0u);
  ASSERT_EQ(logprobs["token_logprobs"].size(), n);
  ASSERT_EQ(logprobs["top_logprobs"].size(), n);
  ASSERT_EQ(logprobs["text_offset"].size(), n);
  EXPECT_EQ(greedy["usage"]["completion_tokens"], n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    const std::string token = logprobs["tokens"][i];
    const double lp = logprobs["token_logprobs"][i];
    const json& top = logprobs["top_logprobs"][i];
    ASSERT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 3u);
    double best = -INFINITY;
    std::string best_text;
    for (auto it = top.begin(); it != top.end(); ++it) {
      EXPECT_LE(it.value().get<double>(), 0.0);
      if (it.value().get<double>() > best) {
        best = it.value();
        best_text = it.key();
      }
    }
    EXPECT_EQ(best_text, token) << "token " << i;  // greedy: the chosen token is the top-1
    EXPECT_NEAR(best, lp, 1e-6) << "token " << i;
    EXPECT_EQ(logprobs["text_offset"][i], joined.size());
    joined += token;
  }
  EXPECT_EQ(joined, choice["text"]);

  // The same continuation's ids (gRPC returns them), scored as a prompt: echo + logprobs +
  // max_tokens 0 gives each generated token the score it had when generated.
  const std::vector<int32_t> generated = GenerateIds(kMaxTokens);
  ASSERT_EQ(generated.size(), n);
  std::vector<int32_t> all = prompt_;
  all.insert(all.end(), generated.begin(), generated.end());
  const json scored =
      Complete({{"prompt", all}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}});
  const json& echoed = scored["choices"][0];
  ASSERT_EQ(echoed["logprobs"]["token_logprobs"].size(), all.size()) << scored.dump();
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(echoed["logprobs"]["token_logprobs"][prompt_.size() + i].get<double>(),
                logprobs["token_logprobs"][i].get<double>(), 1e-4)
        << "generated token " << i;
  }
  // The echoed text is the prompt's and the continuation's text.
  EXPECT_TRUE(absl::EndsWith(echoed["text"].get<std::string>(), choice["text"].get<std::string>()))
      << echoed["text"] << " vs " << choice["text"];
  EXPECT_EQ(echoed["finish_reason"], "length");
}

TEST_F(OpenAiE2eTest, StreamShapesWithAndWithoutIncludeUsage) {
  const json base = {{"prompt", prompt_},
                     {"max_tokens", 5},
                     {"temperature", 0},
                     {"stream", true},
                     {"ignore_eos", true}};
  // Default: no usage anywhere; the last chunk has the finish_reason and abcd.finish_reason.
  std::vector<json> chunks = Stream(base);
  ASSERT_FALSE(chunks.empty());
  for (const json& chunk : chunks) {
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_FALSE(chunk.contains("usage")) << chunk.dump();
    ASSERT_EQ(chunk["choices"].size(), 1u) << chunk.dump();
  }
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chunks.back()["choices"][0]["abcd"]["finish_reason"], "length");

  // include_usage: "usage": null on every chunk, then {"choices": [], "usage": {...}}.
  json with_usage = base;
  with_usage["stream_options"] = {{"include_usage", true}};
  with_usage["logprobs"] = 2;
  with_usage["echo"] = true;
  chunks = Stream(with_usage);
  ASSERT_GE(chunks.size(), 2u);
  size_t tokens = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    ASSERT_TRUE(chunks[i].contains("usage")) << chunks[i].dump();
    EXPECT_TRUE(chunks[i]["usage"].is_null());
    ASSERT_EQ(chunks[i]["choices"].size(), 1u);
    tokens += chunks[i]["choices"][0]["logprobs"]["tokens"].size();
  }
  EXPECT_EQ(tokens, prompt_.size() + 5);  // echo: the prompt's tokens, then the 5 generated
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  const json& last = chunks.back();
  EXPECT_TRUE(last["choices"].is_array() && last["choices"].empty()) << last.dump();
  EXPECT_EQ(last["usage"]["completion_tokens"], 5);
  EXPECT_EQ(last["usage"]["total_tokens"], last["usage"]["prompt_tokens"].get<int>() + 5);
  EXPECT_EQ(last["id"], chunks.front()["id"]);
}

// Exact text (issue 26): the completion is what its tokens add after the prompt, so
// prompt + completion == the text of prompt + generated ids, on gRPC (token ids, n, a session's
// next turn) and on HTTP (plain, SSE, echo, n, logprob tokens). The issue's example: the greedy
// continuation of "The old house stood" begins with a space.
TEST_F(OpenAiE2eTest, PromptPlusCompletionIsTheWholeText) {
  auto tokenizer = Tokenizer::Load(kTrainedLmDir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok());
  const std::string prompt = "The old house stood";
  std::vector<int32_t> prompt_ids = *(*tokenizer)->Encode(prompt);
  prompt_ids.insert(prompt_ids.begin(), 1);  // bos
  ASSERT_EQ(*(*tokenizer)->Decode(prompt_ids), prompt);
  // Decode(preceding + ids) without Decode(preceding).
  auto after = [&](const std::vector<int32_t>& preceding, const std::vector<int32_t>& ids) {
    std::vector<int32_t> all = preceding;
    all.insert(all.end(), ids.begin(), ids.end());
    return (*(*tokenizer)->Decode(all)).substr((*(*tokenizer)->Decode(preceding)).size());
  };
  // gRPC, n = 2 sampled: each choice's text follows the prompt.
  struct Turn {
    std::vector<std::vector<int32_t>> ids{2};
    std::vector<std::string> text{2};
    std::string session_id;
  };
  auto generate = [&](const std::string& text, int n, float temperature,
                      const std::string& session) {
    abcd::v1::GenerateRequest request;
    request.set_prompt(text);
    request.set_max_tokens(12);
    request.set_n(n);
    request.set_session_id(session);
    request.mutable_sampling()->set_temperature(temperature);
    request.mutable_sampling()->set_seed(7);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    Turn turn;
    while (reader->Read(&response)) {
      const size_t index = static_cast<size_t>(response.index());
      if (index >= turn.ids.size()) continue;
      turn.ids[index].insert(turn.ids[index].end(), response.token_ids().begin(),
                             response.token_ids().end());
      turn.text[index] += response.text();
      if (!response.session_id().empty()) turn.session_id = response.session_id();
    }
    EXPECT_TRUE(reader->Finish().ok());
    return turn;
  };
  const Turn greedy = generate(prompt, 1, 0.0f, "");
  ASSERT_FALSE(greedy.ids[0].empty());
  EXPECT_EQ(greedy.text[0], after(prompt_ids, greedy.ids[0]));
  EXPECT_EQ(greedy.text[0][0], ' ') << greedy.text[0];
  const Turn sampled = generate(prompt, 2, 1.0f, "");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(sampled.text[i], after(prompt_ids, sampled.ids[i]));
  // A session's next turn follows its history and its own prompt.
  const Turn first = generate(prompt, 1, 0.0f, "new");
  ASSERT_FALSE(first.session_id.empty());
  const Turn second = generate(" and then", 1, 1.0f, first.session_id);
  std::vector<int32_t> history = prompt_ids;
  history.insert(history.end(), first.ids[0].begin(), first.ids[0].end());
  const std::vector<int32_t> next_prompt = *(*tokenizer)->Encode(" and then");
  history.insert(history.end(), next_prompt.begin(), next_prompt.end());
  EXPECT_EQ(second.text[0], after(history, second.ids[0]));

  // HTTP: the same greedy text, plain, streamed, echoed, and as the logprob tokens' texts.
  const json base = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}};
  const json plain = Complete(base);
  EXPECT_EQ(plain["choices"][0]["text"], greedy.text[0]);
  json echo = base;
  echo["echo"] = true;
  echo["logprobs"] = 0;
  const json echoed = Complete(echo);
  EXPECT_EQ(echoed["choices"][0]["text"], prompt + greedy.text[0]);
  std::string tokens;
  for (const json& token : echoed["choices"][0]["logprobs"]["tokens"]) tokens += token;
  EXPECT_EQ(tokens, prompt + greedy.text[0]);
  json streamed = base;
  streamed["stream"] = true;
  streamed["logprobs"] = 1;
  std::string text;
  tokens.clear();
  for (const json& chunk : Stream(streamed)) {
    text += chunk["choices"][0]["text"].get<std::string>();
    for (const json& token : chunk["choices"][0]["logprobs"]["tokens"]) tokens += token;
  }
  EXPECT_EQ(text, greedy.text[0]);
  EXPECT_EQ(tokens, greedy.text[0]);
  json two = base;
  two["n"] = 2;
  two["temperature"] = 1.0;
  two["seed"] = 7;
  const json choices = Complete(two)["choices"];
  ASSERT_EQ(choices.size(), 2u);
  for (const json& choice : choices) {
    EXPECT_EQ(choice["text"], sampled.text[choice["index"].get<int>()]);
  }
}

// Issue 26 item 4 on the real server: /tokenize counts what a completion reports as its
// prompt_tokens and /detokenize gives the text back; logit_bias forces a token on HTTP and
// gRPC alike; min_p and the penalties are accepted on both.
TEST_F(OpenAiE2eTest, TokenizeAndSamplingFields) {
  auto post = [&](const char* path, const json& body) {
    auto response = http_->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(response);
    if (!response) return json();
    EXPECT_EQ(response->status, 200) << path << " -> " << response->body;
    return json::parse(response->body, nullptr, false);
  };
  const std::string prompt = "The old house stood";
  const json tokenized = post("/tokenize", {{"prompt", prompt}});
  const json completion = Complete({{"prompt", prompt}, {"max_tokens", 1}});
  EXPECT_EQ(tokenized["count"], completion["usage"]["prompt_tokens"]);
  EXPECT_EQ(post("/detokenize", {{"tokens", tokenized["tokens"]}})["prompt"], prompt);

  auto tokenizer = Tokenizer::Load(kTrainedLmDir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok());
  const int32_t door = (*tokenizer)->Encode(" door")->back();
  std::vector<int32_t> forced = tokenized["tokens"].get<std::vector<int32_t>>();
  const std::string before = *(*tokenizer)->Decode(forced);
  forced.insert(forced.end(), {door, door, door});
  const std::string expected = (*(*tokenizer)->Decode(forced)).substr(before.size());
  const json biased = Complete({{"prompt", prompt},
                                {"max_tokens", 3},
                                {"min_p", 0.05},
                                {"presence_penalty", 0.5},
                                {"frequency_penalty", 0.5},
                                {"logit_bias", {{std::to_string(door), 100}}}});
  EXPECT_EQ(biased["choices"][0]["text"], expected);

  abcd::v1::GenerateRequest request;
  request.set_prompt(prompt);
  request.set_max_tokens(3);
  request.mutable_sampling()->set_min_p(0.05f);
  request.mutable_sampling()->set_presence_penalty(0.5f);
  request.mutable_sampling()->set_frequency_penalty(0.5f);
  (*request.mutable_sampling()->mutable_logit_bias())[door] = 100.0f;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub_->Generate(&context, request);
  abcd::v1::GenerateResponse response;
  std::vector<int32_t> ids;
  std::string text;
  while (reader->Read(&response)) {
    ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
    text += response.text();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(ids, std::vector<int32_t>(3, door));
  EXPECT_EQ(text, expected);
}

// Issue 26 item 5: health answers for the service by name; a deadline that expires mid-stream
// counts as deadline_exceeded; generated tokens are counted while they stream.
TEST_F(OpenAiE2eTest, HealthDeadlinesAndStreamingCounts) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  for (const std::string service : {"", "abcd.v1.Generator", "abcd.v1.Nothing"}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = health->Check(&context, request, &response);
    if (service == "abcd.v1.Nothing") {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    } else {
      ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
      EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
    }
  }

  // A short request first, so the timed stream below does not also pay for the server's first
  // request (allocation, first pages) on a loaded machine: its deadline must leave room for the
  // five tokens it checks.
  {
    abcd::v1::GenerateRequest warm;
    warm.set_prompt("The old house stood");
    warm.set_max_tokens(8);
    grpc::ClientContext warm_context;
    auto warm_reader = stub_->Generate(&warm_context, warm);
    abcd::v1::GenerateResponse ignored;
    while (warm_reader->Read(&ignored)) {
    }
    ASSERT_TRUE(warm_reader->Finish().ok());
  }

  // A long stream (eos banned by logit_bias) whose deadline expires after some tokens: 4000
  // tokens take longer than 0.3 s even on a fast idle machine (about 0.25 ms a token on the 2-core
  // dev VM, 2026-12-05: with a 1 s deadline all 4000 arrived in time), and 5 come within it.
  abcd::v1::GenerateRequest request;
  request.set_prompt("The old house stood");
  request.set_max_tokens(4000);
  (*request.mutable_sampling()->mutable_logit_bias())[2] = -100.0f;  // eos
  const std::string exceeded = R"(abcd_requests_total{kind="generate",status="deadline_exceeded"})";
  const std::string cancelled = R"(abcd_requests_total{kind="generate",status="cancelled"})";
  const double exceeded_before = MetricSample(*http_, exceeded);
  const double cancelled_before = MetricSample(*http_, cancelled);
  const double generated_before = MetricSample(*http_, "abcd_generated_tokens_total");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int>(300 * testing::TimeLimit(1.0))));
  auto reader = stub_->Generate(&context, request);
  abcd::v1::GenerateResponse response;
  int read = 0;
  double generated_mid_stream = -1;
  while (reader->Read(&response)) {
    if (++read == 5) generated_mid_stream = MetricSample(*http_, "abcd_generated_tokens_total");
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_GE(read, 5) << "the stream ended before its deadline";
  EXPECT_LT(read, 4000);
  // Counted as the tokens streamed, before the request ended.
  EXPECT_GE(generated_mid_stream, generated_before + 5);
  bool counted = false;
  for (int i = 0; i < 100 && !counted; ++i) {
    counted = MetricSample(*http_, exceeded) == exceeded_before + 1;
    if (!counted) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(counted) << "deadline_exceeded not counted";
  EXPECT_EQ(MetricSample(*http_, cancelled), cancelled_before);
}

// The official OpenAI Node SDK drives /v1/chat/completions (tests/e2e/openai_sdk/chat.mjs checks
// plain, SSE with include_usage, n, logprobs + top_logprobs and refusals naming the field), and
// its greedy answer is exact text: the rendered prompt's text (/tokenize with the messages gives
// its ids, /detokenize its text) + the answer == the text of prompt ids + the generated ids.
// Skipped where node or the SDK (tests/e2e/openai_sdk/npm-ci.sh) is not installed.
TEST_F(OpenAiE2eTest, OpenAiNodeSdkDrivesChat) {
  const std::string dir = std::string(ABCD_SOURCE_DIR) + "/tests/e2e/openai_sdk";
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !std::filesystem::exists(dir + "/node_modules/openai/package.json")) {
    GTEST_SKIP() << "node or the openai package is not installed (" << dir << "/npm-ci.sh)";
  }
  const std::string command = "node " + dir +
                              "/chat.mjs http://127.0.0.1:" + std::to_string(server_->http_port()) +
                              "/v1 2>&1";
  int status = 0;
  const std::string output = RunCommand(command, &status);
  ASSERT_EQ(status, 0) << output;
  const std::vector<std::string> lines = absl::StrSplit(output, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  const json result = json::parse(lines.back(), nullptr, false);
  ASSERT_TRUE(result.is_object() && result["content"].is_string()) << output;

  auto post = [&](const char* path, const json& body) {
    auto response = http_->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(response && response->status == 200) << path;
    return response ? json::parse(response->body, nullptr, false) : json();
  };
  std::vector<int32_t> prompt_ids =
      post("/tokenize", {{"model", result["model"]}, {"messages", result["messages"]}})["tokens"]
          .get<std::vector<int32_t>>();
  ASSERT_GT(prompt_ids.size(), 1u);
  ASSERT_EQ(prompt_ids[0], 1);  // bos, which the engine prepends to a gRPC prompt
  const std::vector<int32_t> without_bos(prompt_ids.begin() + 1, prompt_ids.end());
  const std::vector<int32_t> generated = GenerateIds(result["max_tokens"], &without_bos);
  ASSERT_FALSE(generated.empty());
  std::vector<int32_t> all = prompt_ids;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string prompt_text = post("/detokenize", {{"tokens", prompt_ids}})["prompt"];
  EXPECT_EQ(prompt_text + result["content"].get<std::string>(),
            post("/detokenize", {{"tokens", all}})["prompt"].get<std::string>());
}

// gRPC Generate with messages renders them as /v1/chat/completions does: the same greedy
// tokens and text, the same prompt_tokens (also with add_generation_prompt false), and the
// same refusals naming the field.
TEST_F(OpenAiE2eTest, ChatMessagesOverGrpcMatchHttp) {
  const json messages = {{{"role", "system"}, {"content", "You tell short stories."}},
                         {{"role", "user"}, {"content", "Tell me about the old house."}}};
  struct Result {
    grpc::Status status;
    std::vector<int32_t> ids;
    std::string text;
    int prompt_tokens = 0;
  };
  auto generate = [&](const json& conversation, std::optional<bool> add_generation_prompt,
                      const std::function<void(abcd::v1::GenerateRequest&)>& edit = nullptr) {
    abcd::v1::GenerateRequest request;
    for (const json& m : conversation) {
      abcd::v1::ChatMessage* message = request.add_messages();
      message->set_role(m["role"].get<std::string>());
      message->set_content(m["content"].get<std::string>());
    }
    if (add_generation_prompt.has_value()) {
      request.set_add_generation_prompt(*add_generation_prompt);
    }
    request.set_max_tokens(12);
    request.mutable_sampling()->set_temperature(0);
    if (edit) edit(request);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    Result result;
    while (reader->Read(&response)) {
      result.ids.insert(result.ids.end(), response.token_ids().begin(), response.token_ids().end());
      result.text += response.text();
      if (response.has_usage()) result.prompt_tokens = response.usage().prompt_tokens();
    }
    result.status = reader->Finish();
    return result;
  };
  const Result grpc_chat = generate(messages, std::nullopt);
  ASSERT_TRUE(grpc_chat.status.ok()) << grpc_chat.status.error_message();
  ASSERT_FALSE(grpc_chat.ids.empty());

  auto response =
      http_->Post("/v1/chat/completions",
                  json{{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}}.dump(),
                  "application/json");
  ASSERT_TRUE(response && response->status == 200) << (response ? response->body : "");
  const json http_chat = json::parse(response->body);
  EXPECT_EQ(grpc_chat.text, http_chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(grpc_chat.prompt_tokens, http_chat["usage"]["prompt_tokens"]);
  // The same ids: the rendered prompt's ids as a token-id prompt generate them too.
  auto tokens = http_->Post("/tokenize", json{{"messages", messages}}.dump(), "application/json");
  ASSERT_TRUE(tokens && tokens->status == 200);
  const std::vector<int32_t> rendered = json::parse(tokens->body)["tokens"];
  const std::vector<int32_t> without_bos(rendered.begin() + 1, rendered.end());
  EXPECT_EQ(GenerateIds(12, &without_bos), grpc_chat.ids);
  EXPECT_EQ(grpc_chat.prompt_tokens, static_cast<int>(rendered.size()));

  tokens = http_->Post("/tokenize",
                       json{{"messages", messages}, {"add_generation_prompt", false}}.dump(),
                       "application/json");
  ASSERT_TRUE(tokens && tokens->status == 200);
  const Result no_turn = generate(messages, false);
  ASSERT_TRUE(no_turn.status.ok()) << no_turn.status.error_message();
  EXPECT_EQ(no_turn.prompt_tokens, json::parse(tokens->body)["count"].get<int>());
  EXPECT_LT(no_turn.prompt_tokens, grpc_chat.prompt_tokens);

  auto refused = [&](const Result& result, const std::string& message) {
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message;
    EXPECT_TRUE(absl::StartsWith(result.status.error_message(), message))
        << result.status.error_message();
  };
  refused(generate({{{"role", "robot"}, {"content", "x"}}}, std::nullopt),
          "messages[0].role must be one of system, user, assistant");
  refused(generate(messages, std::nullopt,
                   [](abcd::v1::GenerateRequest& r) { r.set_prompt("The old house"); }),
          "messages must be empty when prompt is given");
  refused(generate(messages, std::nullopt,
                   [](abcd::v1::GenerateRequest& r) { r.set_session_id("new"); }),
          "session_id is not supported with messages");
}

// abcd-client chat sends messages (the HTTP chat answer, greedy) and generate's sampling flags
// reach the server (--logit_bias forces a token; min_p and the penalties are taken).
TEST_F(OpenAiE2eTest, ClientChatAndSamplingFlags) {
  int status = 0;
  auto client = [&](const std::string& command) {
    return RunCommand(testing::ClientBinary() + " " + command + " --target " +
                          server_->grpc_target() + " 2>/dev/null",
                      &status);
  };
  const std::string chat = client(
      "chat --system 'You tell short stories.' --user 'Tell me about the old house.' "
      "--max_tokens 8 --temperature 0");
  ASSERT_EQ(status, 0) << chat;
  const json messages = {{{"role", "system"}, {"content", "You tell short stories."}},
                         {{"role", "user"}, {"content", "Tell me about the old house."}}};
  auto response =
      http_->Post("/v1/chat/completions",
                  json{{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}}.dump(),
                  "application/json");
  ASSERT_TRUE(response && response->status == 200);
  EXPECT_EQ(
      chat,
      json::parse(response->body)["choices"][0]["message"]["content"].get<std::string>() + "\n");

  auto tokenizer = Tokenizer::Load(kTrainedLmDir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok());
  const int32_t door = (*tokenizer)->Encode(" door")->back();
  const std::string forced =
      client("generate --prompt 'The old house stood' --max_tokens 3 --logit_bias " +
             std::to_string(door) + ":100 --min_p 0.05 --presence_penalty 0.5 " +
             "--frequency_penalty 0.5");
  ASSERT_EQ(status, 0) << forced;
  EXPECT_EQ(forced, " door door door\n");
  client("generate --prompt x --logit_bias 5");
  EXPECT_NE(status, 0);
}

// abcd-client --port_file FILE (the image's HEALTHCHECK) talks to the grpc_port of the file the
// server wrote; with --target too, or a file that is missing or malformed, it exits 2 naming the
// flags or the file.
TEST_F(OpenAiE2eTest, ClientPortFileFollowsTheServersPort) {
  int status = 0;
  auto client = [&](const std::string& arguments) {
    return RunCommand(testing::ClientBinary() + " " + arguments + " 2>&1", &status);
  };
  EXPECT_EQ(client("health --port_file " + server_->port_file()), "SERVING\n");
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(absl::StartsWith(client("models --port_file " + server_->port_file()), "abc-lm\t"));
  EXPECT_EQ(status, 0);

  const std::string both =
      client("health --port_file " + server_->port_file() + " --target " + server_->grpc_target());
  EXPECT_TRUE(absl::StrContains(both, "--target and --port_file are exclusive")) << both;
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string dir = ::testing::TempDir() + "abcd-port-file-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string missing = dir + "/missing.json";
  const std::string no_file = client("health --port_file " + missing);
  EXPECT_TRUE(absl::StrContains(no_file, "--port_file " + missing + ": cannot read")) << no_file;
  EXPECT_EQ(WEXITSTATUS(status), 2);
  for (const std::string text : {"{", "[50051]", R"({"http_port": 8080})", R"({"grpc_port": 0})",
                                 R"({"grpc_port": "50051"})", R"({"grpc_port": 65536})"}) {
    const std::string file = dir + "/ports.json";
    std::ofstream(file) << text;
    const std::string bad = client("health --port_file " + file);
    EXPECT_TRUE(absl::StrContains(bad, "--port_file " + file +
                                           ": not a JSON object with a "
                                           "grpc_port from 1 to 65535"))
        << text << ": " << bad;
    EXPECT_EQ(WEXITSTATUS(status), 2) << text;
  }
  std::filesystem::remove_all(dir);
}

// --chat_template at start-up: MODEL=FILE serves that model's chat with FILE (what /tokenize
// with messages renders); a file that is missing or does not parse, or a model that is not
// served, stops the server with a message naming the flag (exit 1, after the flags parsed; a
// malformed value exits 2 before any model loads).
class ChatTemplateStartup : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("abcd-chat-template-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  // Expects the server to refuse to start with --chat_template `value`, exiting `code` and
  // logging `message`.
  void ExpectRefusal(const std::string& value, int code, const std::string& message) {
    SCOPED_TRACE(value);
    testing::ExpectRefusedStart({"--models", kTrainedLmDir, "--chat_template", value}, code,
                                message, /*exit_timeout_s=*/30);
  }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateStartup, ModelEqualsFileIsServedAndBadFilesAreRefusedNamingTheFlag) {
  const std::string file = Write("q.jinja", "Q: {{ messages[-1].content }} A:");
  {
    const auto server =
        testing::StartServer({"--models", kTrainedLmDir, "--chat_template", "abc-lm=" + file});
    ASSERT_TRUE(testing::Started(*server));
    httplib::Client http("127.0.0.1", server->http_port());
    auto tokens = http.Post("/tokenize",
                            R"({"messages": [{"role": "user", "content": "Where is the house?"}]})",
                            "application/json");
    ASSERT_TRUE(tokens && tokens->status == 200);
    json detokenize = {{"tokens", json::parse(tokens->body)["tokens"]}};
    auto text = http.Post("/detokenize", detokenize.dump(), "application/json");
    ASSERT_TRUE(text && text->status == 200);
    EXPECT_EQ(json::parse(text->body)["prompt"], "Q: Where is the house? A:");
  }
  const std::string missing = (dir_ / "missing.jinja").string();
  ExpectRefusal(missing, 1, "--chat_template " + missing + ": not found");
  const std::string broken = Write("broken.jinja", "{% for m in messages %}");
  ExpectRefusal("abc-lm=" + broken, 1, "--chat_template " + broken);
  ExpectRefusal("nosuch=" + file, 1,
                "--chat_template nosuch=" + file + ": no language model named 'nosuch'");
  ExpectRefusal("abc-lm=", 2, "--chat_template must be");
}

TEST_F(OpenAiE2eTest, EchoRefusals) {
  int status = 0;
  auto refused = [&](const json& body) {
    auto response = http_->Post("/v1/completions", body.dump(), "application/json");
    if (!response) return std::string("no response");
    status = response->status;
    return json::parse(response->body, nullptr, false)["error"]["message"].get<std::string>();
  };
  EXPECT_TRUE(absl::StartsWith(refused({{"prompt", "x"}, {"echo", true}, {"n", 2}}), "echo"));
  EXPECT_EQ(status, 400);
  EXPECT_TRUE(absl::StartsWith(refused({{"prompt", "x"}, {"logprobs", 21}}), "logprobs"));
  EXPECT_EQ(status, 400);
}

// Chat sessions (issue 26): "new" starts one from the rendered conversation; a session id's
// turn sends only the new messages, appended after the last answer as the template renders
// them (the built-in transcript: "\nuser: ...\nassistant:"), so turn 2 is the greedy
// continuation of turn 1's prompt ids + its generated ids + that suffix's ids.
TEST_F(OpenAiE2eTest, ChatSessionAppendsTheNewMessagesAfterTheAnswer) {
  auto post = [&](const char* path, const json& body) {
    auto response = http_->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(response && response->status == 200) << path << (response ? response->body : "");
    return response ? json::parse(response->body, nullptr, false) : json();
  };
  const json first_messages = {{{"role", "user"}, {"content", "Tell me about the old house."}}};
  const json first = post(
      "/v1/chat/completions",
      {{"messages", first_messages}, {"max_tokens", 8}, {"temperature", 0}, {"session_id", "new"}});
  const std::string session = first.value("session_id", "");
  ASSERT_FALSE(session.empty()) << first.dump();
  const std::string question = "And the door?";
  const json second =
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", question}}}},
                                    {"max_tokens", 8},
                                    {"temperature", 0},
                                    {"session_id", session}});
  EXPECT_EQ(second["session_id"], session);
  // The same tokens without a session: turn 1's prompt and answer ids, then the suffix's.
  std::vector<int32_t> ids =
      post("/tokenize", {{"messages", first_messages}})["tokens"].get<std::vector<int32_t>>();
  ids.erase(ids.begin());  // bos, which the engine prepends
  const std::vector<int32_t> answer = GenerateIds(8, &ids);
  ids.insert(ids.end(), answer.begin(), answer.end());
  const std::vector<int32_t> suffix =
      post("/tokenize", {{"prompt", "\nuser: " + question + "\nassistant:"},
                         {"add_special_tokens", false}})["tokens"]
          .get<std::vector<int32_t>>();
  EXPECT_EQ(second["usage"]["prompt_tokens"], static_cast<int>(suffix.size()));
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  const std::vector<int32_t> expected = GenerateIds(8, &ids);
  const std::string expected_text =
      post("/detokenize", {{"tokens", ids}})["prompt"].get<std::string>();
  std::vector<int32_t> all = ids;
  all.insert(all.end(), expected.begin(), expected.end());
  const std::string whole = post("/detokenize", {{"tokens", all}})["prompt"].get<std::string>();
  EXPECT_EQ(second["choices"][0]["message"]["content"], whole.substr(expected_text.size()));
  const json info = json::parse(http_->Get("/v1/sessions/" + session)->body, nullptr, false);
  EXPECT_EQ(info["tokens"], static_cast<int>(all.size()) + 1);  // and bos
  // A template the continuation cannot follow is refused naming messages.
  auto refused = http_->Post("/v1/chat/completions",
                             json({{"messages", json::array()}, {"session_id", session}}).dump(),
                             "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_TRUE(absl::StartsWith(
      json::parse(refused->body, nullptr, false)["error"]["message"].get<std::string>(),
      "messages"))
      << refused->body;
}

}  // namespace
}  // namespace abcd
