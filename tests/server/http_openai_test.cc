// OpenAI Completions extras on POST /v1/completions: logprobs, echo (with prompt scores and
// max_tokens 0), stream_options.include_usage and abcd's own fields under "abcd". The real
// HttpService over a scripted executor that replays given events; token texts come from the
// bundled lm tokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/backend/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/sampling/json_grammar.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_template.h"
#include "server/core/served_models.h"
#include "server/http/chat_route.h"
#include "server/http/completion_format.h"
#include "server/http/http_service.h"

namespace abcd {
namespace {

using nlohmann::json;

// Replays `events` (the last one gets finished = true) for each accepted request on its own
// thread, and records the requests.
class ScriptedExecutor final : public Executor {
 public:
  explicit ScriptedExecutor(const Model& model) : backend_(model, 1 << 20) {}
  ~ScriptedExecutor() override { Shutdown(); }

  void set_events(std::vector<GenerationEvent> events) {
    std::lock_guard<std::mutex> lock(mu_);
    events_ = std::move(events);
  }
  std::vector<GenerationRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

  absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(std::move(request));
    threads_.emplace_back([events = events_, callback = std::move(callback)]() mutable {
      for (size_t i = 0; i < events.size(); ++i) {
        events[i].finished = i + 1 == events.size();
        callback(std::move(events[i]));
      }
    });
    return static_cast<RequestId>(requests_.size());
  }
  void Cancel(RequestId) override {}
  void StartDraining() override {}
  void Shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }
  ExecutorStats LatestStats() const override { return {}; }
  const DecodeBackend& backend() const override { return backend_; }

 private:
  CpuBackend backend_;
  mutable std::mutex mu_;
  std::vector<GenerationEvent> events_;
  std::vector<GenerationRequest> requests_;
  std::vector<std::thread> threads_;
};

TokenLogprobs Scored(int32_t token, float logprob, std::vector<std::pair<int32_t, float>> top) {
  TokenLogprobs scored;
  scored.token = token;
  scored.logprob = logprob;
  scored.top = std::move(top);
  return scored;
}

std::vector<json> SseChunks(const std::string& body, bool* done) {
  std::vector<json> chunks;
  *done = false;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    const absl::string_view data = event.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    EXPECT_FALSE(*done) << "a chunk after [DONE]";
    chunks.push_back(json::parse(data.begin(), data.end(), nullptr, false));
    EXPECT_FALSE(chunks.back().is_discarded()) << data;
  }
  return chunks;
}

class HttpOpenAiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load(std::string(ABCD_FIXTURE_DIR) + "/golden/dec_abc");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(model_, nullptr);
    auto tokenizer = Tokenizer::Load(std::string(ABCD_SOURCE_DIR) + "/models/tokenizers/lm.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    models_ = std::make_unique<ServedModels>();
    auto lm = std::make_unique<ServedModel>();
    lm->name = "abc-lm-test";
    lm->kind = ModelKind::kLanguageModel;
    lm->tokenizer = *std::move(tokenizer);
    tokenizer_ = lm->tokenizer.get();
    lm->executor = std::make_unique<ScriptedExecutor>(*model_);
    lm_ = static_cast<ScriptedExecutor*>(lm->executor.get());
    models_->Add(std::move(lm));
    models_->set_ready(true);
    service_ =
        std::make_unique<http::HttpService>(*models_, http::HttpHooks{}, http::HttpOptions{});
    ASSERT_TRUE(service_->Start("127.0.0.1", 0).ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", service_->port());
    client_->set_read_timeout(5, 0);

    // The script generates these ids (the first with two alternatives) and ends with EOS.
    ids_ = *tokenizer_->Encode(" big red dog");
    ASSERT_GE(ids_.size(), 2u);
    GenerationEvent first;
    first.token_ids = {ids_[0]};
    first.text = *tokenizer_->Decode(std::vector<int32_t>{ids_[0]});
    first.logprobs = {Scored(ids_[0], -0.5f, {{ids_[0], -0.5f}, {ids_[1], -1.5f}})};
    GenerationEvent rest;
    for (size_t i = 1; i < ids_.size(); ++i) {
      rest.token_ids.push_back(ids_[i]);
      rest.logprobs.push_back(Scored(ids_[i], -0.25f * static_cast<float>(i), {{ids_[i], -0.1f}}));
    }
    rest.text = Text(ids_).substr(first.text.size());
    GenerationEvent last;
    last.finish_reason = FinishReason::kEos;
    last.prompt_tokens = 3;
    last.completion_tokens = static_cast<int>(ids_.size());
    generated_ = {first, rest, last};
  }

  void TearDown() override {
    client_.reset();
    service_.reset();
    models_.reset();
  }

  std::string Text(const std::vector<int32_t>& ids) const { return *tokenizer_->Decode(ids); }

  httplib::Result Post(const json& body) {
    return client_->Post("/v1/completions", body.dump(), "application/json");
  }
  json PostJson(const json& body) {
    httplib::Result result = Post(body);
    EXPECT_TRUE(result);
    if (!result) return json();
    EXPECT_EQ(result->status, 200) << result->body;
    return json::parse(result->body, nullptr, false);
  }
  // A 400 whose message starts with `field`.
  void ExpectRefused(const json& body, const std::string& field) {
    httplib::Result result = Post(body);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 400) << body.dump() << " -> " << result->body;
    const json error = json::parse(result->body, nullptr, false);
    const std::string message = error["error"]["message"];
    EXPECT_TRUE(absl::StartsWith(message, field)) << body.dump() << " -> " << message;
    // OpenAI's error.param: the field's top-level name.
    EXPECT_EQ(error["error"]["param"], field.substr(0, field.find('.'))) << result->body;
  }

  static Model* model_;
  std::unique_ptr<ServedModels> models_;
  const Tokenizer* tokenizer_ = nullptr;
  ScriptedExecutor* lm_ = nullptr;
  std::unique_ptr<http::HttpService> service_;
  std::unique_ptr<httplib::Client> client_;
  std::vector<int32_t> ids_;
  std::vector<GenerationEvent> generated_;
};

Model* HttpOpenAiTest::model_ = nullptr;

TEST_F(HttpOpenAiTest, LogprobsNonStreaming) {
  lm_->set_events(generated_);
  const json response = PostJson({{"prompt", "x"}, {"logprobs", 2}});
  ASSERT_EQ(lm_->requests().size(), 1u);
  EXPECT_EQ(lm_->requests()[0].logprobs, 2);
  EXPECT_FALSE(lm_->requests()[0].prompt_logprobs);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["text"], Text(ids_));
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["abcd"]["finish_reason"], "eos");
  const json& logprobs = choice["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), ids_.size()) << logprobs.dump();
  ASSERT_EQ(logprobs["token_logprobs"].size(), ids_.size());
  ASSERT_EQ(logprobs["top_logprobs"].size(), ids_.size());
  ASSERT_EQ(logprobs["text_offset"].size(), ids_.size());
  std::string joined;
  for (size_t i = 0; i < ids_.size(); ++i) {
    EXPECT_EQ(logprobs["text_offset"][i], joined.size());
    joined += logprobs["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, choice["text"]);  // the tokens' texts make up the text
  EXPECT_NEAR(logprobs["token_logprobs"][0].get<double>(), -0.5, 1e-6);
  const std::string token0 = logprobs["tokens"][0];
  EXPECT_NEAR(logprobs["top_logprobs"][0][token0].get<double>(), -0.5, 1e-6);
  EXPECT_EQ(logprobs["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(logprobs["top_logprobs"][1].size(), 1u);
  EXPECT_EQ(response["usage"]["completion_tokens"], ids_.size());
}

TEST_F(HttpOpenAiTest, NoLogprobsIsNull) {
  lm_->set_events(generated_);
  const json response = PostJson({{"prompt", "x"}, {"logprobs", nullptr}});
  EXPECT_TRUE(response["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(lm_->requests()[0].logprobs, -1);
}

TEST_F(HttpOpenAiTest, EchoWithLogprobsAndMaxTokensZeroScoresThePrompt) {
  GenerationEvent only;
  only.prompt_token_ids = ids_;
  for (size_t i = 0; i < ids_.size(); ++i) {
    only.prompt_logprobs.push_back(Scored(ids_[i], -1.0f - static_cast<float>(i), {}));
  }
  only.prompt_tokens = static_cast<int>(ids_.size()) + 1;
  lm_->set_events({only});
  const std::string prompt = Text(ids_);
  const json response =
      PostJson({{"prompt", prompt}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}});
  ASSERT_EQ(lm_->requests().size(), 1u);
  EXPECT_TRUE(lm_->requests()[0].prompt_logprobs);
  EXPECT_EQ(lm_->requests()[0].max_tokens, 0);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["text"], prompt);
  const json& logprobs = choice["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), ids_.size());
  std::string joined;
  for (size_t i = 0; i < ids_.size(); ++i) {
    EXPECT_EQ(logprobs["text_offset"][i], joined.size());
    joined += logprobs["tokens"][i].get<std::string>();
    EXPECT_NEAR(logprobs["token_logprobs"][i].get<double>(), -1.0 - static_cast<double>(i), 1e-6);
    EXPECT_TRUE(logprobs["top_logprobs"][i].empty());  // logprobs 0: no alternatives
  }
  EXPECT_EQ(joined, prompt);
}

TEST_F(HttpOpenAiTest, EchoOfTokenIdsPrependsTheirText) {
  lm_->set_events(generated_);
  const std::vector<int32_t> prompt = {ids_[1], ids_[0]};
  const json response = PostJson({{"prompt", prompt}, {"echo", true}});
  EXPECT_FALSE(lm_->requests()[0].prompt_logprobs);  // echo alone scores nothing
  EXPECT_EQ(response["choices"][0]["text"], Text(prompt) + Text(ids_));
  EXPECT_TRUE(response["choices"][0]["logprobs"].is_null());
}

TEST_F(HttpOpenAiTest, StreamingEchoLogprobsAndIncludeUsage) {
  std::vector<GenerationEvent> events = generated_;
  events[0].prompt_token_ids = {ids_[0]};
  events[0].prompt_logprobs = {Scored(ids_[0], -3.0f, {{ids_[1], -0.5f}})};
  lm_->set_events(events);
  const std::string prompt = Text({ids_[0]});
  httplib::Result result = Post({{"prompt", prompt},
                                 {"echo", true},
                                 {"logprobs", 1},
                                 {"stream", true},
                                 {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  bool done = false;
  const std::vector<json> chunks = SseChunks(result->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u) << result->body;
  // The prompt comes first, with its scores before the generated tokens'.
  const std::string first_text = chunks[0]["choices"][0]["text"];
  EXPECT_TRUE(absl::StartsWith(first_text, prompt)) << first_text;
  EXPECT_NEAR(chunks[0]["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(), -3.0, 1e-6);
  std::string text;
  size_t tokens = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const json& chunk = chunks[i];
    ASSERT_TRUE(chunk.contains("usage")) << chunk.dump();
    EXPECT_TRUE(chunk["usage"].is_null()) << chunk.dump();  // OpenAI: null until the last
    ASSERT_EQ(chunk["choices"].size(), 1u);
    const json& choice = chunk["choices"][0];
    text += choice["text"].get<std::string>();
    const json& logprobs = choice["logprobs"];
    ASSERT_TRUE(logprobs.is_object()) << chunk.dump();
    tokens += logprobs["tokens"].size();
    EXPECT_EQ(logprobs["tokens"].size(), logprobs["token_logprobs"].size());
    EXPECT_EQ(logprobs["tokens"].size(), logprobs["text_offset"].size());
    const bool last_choice_chunk = i + 2 == chunks.size();
    if (last_choice_chunk) {
      EXPECT_EQ(choice["finish_reason"], "stop");
      EXPECT_EQ(choice["abcd"]["finish_reason"], "eos");
    } else {
      EXPECT_TRUE(choice["finish_reason"].is_null());
    }
  }
  EXPECT_EQ(text, prompt + Text(ids_));
  EXPECT_EQ(tokens, 1 + ids_.size());
  const json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].is_array() && usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], ids_.size());
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], 3 + ids_.size());
  EXPECT_EQ(usage_chunk["id"], chunks[0]["id"]);
  EXPECT_EQ(usage_chunk["object"], "text_completion");
}

TEST_F(HttpOpenAiTest, StreamingWithoutIncludeUsageHasNoUsage) {
  lm_->set_events(generated_);
  httplib::Result result =
      Post({{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", false}}}});
  ASSERT_TRUE(result);
  bool done = false;
  const std::vector<json> chunks = SseChunks(result->body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(chunks.empty());
  for (const json& chunk : chunks) {
    EXPECT_FALSE(chunk.contains("usage")) << chunk.dump();
    EXPECT_EQ(chunk["choices"].size(), 1u);
    EXPECT_TRUE(chunk["choices"][0]["logprobs"].is_null());
  }
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chunks.back()["choices"][0]["abcd"]["finish_reason"], "eos");
  EXPECT_FALSE(chunks.back()["choices"][0].contains("abcd_finish_reason"));
}

TEST_F(HttpOpenAiTest, BadFieldsAreRefusedNamingThem) {
  ExpectRefused({{"prompt", "x"}, {"logprobs", 21}}, "logprobs");
  ExpectRefused({{"prompt", "x"}, {"logprobs", -1}}, "logprobs");
  ExpectRefused({{"prompt", "x"}, {"logprobs", "3"}}, "logprobs");
  ExpectRefused({{"prompt", "x"}, {"logprobs", true}}, "logprobs");
  ExpectRefused({{"prompt", "x"}, {"echo", "yes"}}, "echo");
  ExpectRefused({{"prompt", "x"}, {"echo", true}, {"n", 2}}, "echo");
  ExpectRefused({{"prompt", "x"}, {"echo", true}, {"session_id", "new"}}, "echo");
  ExpectRefused({{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens");
  ExpectRefused({{"prompt", "x"}, {"echo", true}, {"max_tokens", 0}}, "max_tokens");
  ExpectRefused({{"prompt", "x"}, {"logprobs", 1}, {"max_tokens", 0}}, "max_tokens");
  ExpectRefused({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options");
  ExpectRefused({{"prompt", "x"}, {"stream", true}, {"stream_options", true}}, "stream_options");
  ExpectRefused({{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", 1}}}},
                "stream_options.include_usage");
  EXPECT_TRUE(lm_->requests().empty());
}

// The engine's text follows the prompt (" in", not "in"): so do the logprob tokens' texts,
// decoded after the ids the first event names (GenerationEvent::preceding_token_ids).
TEST_F(HttpOpenAiTest, LogprobTextsFollowThePromptLikeTheText) {
  std::vector<int32_t> prompt = *tokenizer_->Encode("The old house stood");
  prompt.insert(prompt.begin(), 1);  // bos
  const std::vector<int32_t> generated = *tokenizer_->Encode(" in the door");
  std::vector<GenerationEvent> events;
  for (int32_t id : generated) {
    GenerationEvent event;
    event.token_ids = {id};
    event.logprobs = {Scored(id, -1.0f, {{id, -1.0f}})};
    events.push_back(std::move(event));
  }
  events[0].preceding_token_ids = std::vector<int32_t>(prompt.end() - 4, prompt.end());
  events[0].text = " in";
  events[1].text = " the door";
  events.emplace_back().finish_reason = FinishReason::kEos;
  for (const bool stream : {false, true}) {
    lm_->set_events(events);
    httplib::Result result =
        Post({{"prompt", "The old house stood"}, {"logprobs", 1}, {"stream", stream}});
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 200) << result->body;
    std::vector<json> chunks;
    bool done = false;
    if (stream) {
      chunks = SseChunks(result->body, &done);
    } else {
      chunks.push_back(json::parse(result->body));
    }
    std::string text;
    std::vector<std::string> tokens;
    for (const json& chunk : chunks) {
      const json& choice = chunk["choices"][0];
      text += choice["text"].get<std::string>();
      if (!choice["logprobs"].is_object()) continue;
      const json& logprobs = choice["logprobs"];
      for (size_t i = 0; i < logprobs["tokens"].size(); ++i) {
        tokens.push_back(logprobs["tokens"][i]);
        EXPECT_TRUE(logprobs["top_logprobs"][i].contains(tokens.back())) << logprobs.dump();
      }
    }
    EXPECT_EQ(text, " in the door");
    ASSERT_EQ(tokens.size(), generated.size());
    EXPECT_EQ(tokens[0], " in") << "stream " << stream;
    EXPECT_EQ(absl::StrJoin(tokens, ""), text) << "stream " << stream;
  }
}

// POST /tokenize and /detokenize in vLLM's shapes: bos first by default (count is a
// completion's prompt_tokens), the round trip gives the text back, errors name the field.
TEST_F(HttpOpenAiTest, TokenizeAndDetokenize) {
  auto post = [&](const char* path, const json& body, int status) {
    httplib::Result result = client_->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(result);
    if (!result) return json();
    EXPECT_EQ(result->status, status) << path << " " << body.dump() << " -> " << result->body;
    return json::parse(result->body, nullptr, false);
  };
  const std::string prompt = "The old house stood";
  std::vector<int32_t> ids = *tokenizer_->Encode(prompt);
  json tokenized = post("/tokenize", {{"prompt", prompt}}, 200);
  std::vector<int32_t> with_bos = ids;
  with_bos.insert(with_bos.begin(), 1);
  EXPECT_EQ(tokenized["tokens"].get<std::vector<int32_t>>(), with_bos);
  EXPECT_EQ(tokenized["count"], with_bos.size());
  EXPECT_EQ(tokenized["max_model_len"], 4096);
  tokenized =
      post("/tokenize",
           {{"model", "abc-lm-test"}, {"prompt", prompt}, {"add_special_tokens", false}}, 200);
  EXPECT_EQ(tokenized["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(post("/tokenize", {{"prompt", ""}}, 200)["tokens"], json::array({1}));
  EXPECT_EQ(post("/detokenize", {{"tokens", with_bos}}, 200)["prompt"], prompt);
  EXPECT_EQ(post("/detokenize", {{"tokens", json::array()}}, 200)["prompt"], "");

  const std::tuple<const char*, json, int, std::string, std::string> bad[] = {
      {"/tokenize", json::object(), 400, "prompt", "prompt is required"},
      {"/tokenize", {{"prompt", 5}}, 400, "prompt", "prompt must be a string"},
      {"/tokenize",
       {{"prompt", "x"}, {"add_special_tokens", 1}},
       400,
       "add_special_tokens",
       "add_special_tokens must be a boolean"},
      {"/tokenize", {{"prompt", "x"}, {"model", "nope"}}, 404, "model", "model 'nope'"},
      {"/detokenize", json::object(), 400, "tokens", "tokens is required"},
      {"/detokenize", {{"tokens", "x"}}, 400, "tokens", "tokens must be an array of token ids"},
      {"/detokenize", {{"tokens", {5, -1}}}, 400, "tokens", "tokens[1] must be a token id"},
      {"/detokenize", {{"tokens", {5, 8000}}}, 400, "tokens", "tokens[1] must be in [0, 8000)"},
  };
  for (const auto& [path, body, status, param, message] : bad) {
    const json error = post(path, body, status)["error"];
    EXPECT_EQ(error["param"], param) << error.dump();
    EXPECT_NE(error["message"].get<std::string>().find(message), std::string::npos) << error.dump();
  }
  httplib::Result get = client_->Get("/tokenize");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_TRUE(lm_->requests().empty());  // no executor involved
}

// One front door (ServedModels::Resolve) for both protocols: an unknown model is OpenAI's 404
// model_not_found; the same answers whatever the route.
TEST_F(HttpOpenAiTest, UnknownModelIsModelNotFound) {
  for (const char* path : {"/v1/completions", "/v1/translate"}) {
    httplib::Result result = client_->Post(
        path, json({{"model", "nope"}, {"prompt", "x"}, {"text", "x"}}).dump(), "application/json");
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 404) << result->body;
    const json error = json::parse(result->body)["error"];
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["code"], "model_not_found");
    EXPECT_EQ(error["param"], "model");
    EXPECT_NE(error["message"].get<std::string>().find("model 'nope' is not served"),
              std::string::npos);
  }
  httplib::Result model = client_->Get("/v1/models/nope");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 404);
  EXPECT_EQ(json::parse(model->body)["error"]["code"], "model_not_found");

  absl::StatusOr<const ServedModel*> found = models_->Resolve("", ModelKind::kLanguageModel);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->name, "abc-lm-test");
  const absl::Status unknown = models_->Resolve("nope", ModelKind::kLanguageModel).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorCode(unknown), "model_not_found");
  EXPECT_EQ(unknown.message(), "model 'nope' is not served (lm models: abc-lm-test)");
  const absl::Status none = models_->Resolve("", ModelKind::kTranslation).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.message(), "model is required: no translation model is served");
  const absl::Status kind = models_->Resolve("abc-lm-test", ModelKind::kTranslation).status();
  EXPECT_EQ(kind.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kind.message(), "model 'abc-lm-test' is a lm model, not a translation model");
  models_->set_draining(true);
  const absl::Status draining = models_->Resolve("", ModelKind::kLanguageModel).status();
  EXPECT_EQ(draining.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(draining.message().find("draining"), std::string::npos);
  models_->set_draining(false);
}

// Two top ids with one text keep the higher log-probability; a token's text is what it adds
// after the token before it.
TEST_F(HttpOpenAiTest, ChoiceLogprobsShapes) {
  http::TokenTexts texts(tokenizer_);
  http::ChoiceLogprobs logprobs(&texts);
  std::vector<TokenLogprobs> scored;
  for (int32_t id : ids_) scored.push_back(Scored(id, -1.0f, {{id, -2.0f}, {id, -0.5f}}));
  logprobs.Add(scored);
  const json object = logprobs.Take();
  EXPECT_TRUE(logprobs.empty());
  std::string joined;
  for (size_t i = 0; i < ids_.size(); ++i) {
    const std::string token = object["tokens"][i];
    joined += token;
    ASSERT_EQ(object["top_logprobs"][i].size(), 1u);
    EXPECT_NEAR(object["top_logprobs"][i][token].get<double>(), -0.5, 1e-6);
  }
  EXPECT_EQ(joined, Text(ids_));
  // Offsets go on across Takes.
  logprobs.Add(scored);
  EXPECT_EQ(logprobs.Take()["text_offset"][0], joined.size());
  EXPECT_EQ(http::TokenTexts(nullptr).Text(7, {}, ""), "<7>");
}

// POST /v1/chat/completions (chat_route.h) on the same scripted engine, with the Llama-2 chat
// template of tests/fixtures/chat.
class HttpChatTest : public HttpOpenAiTest {
 protected:
  void SetUp() override {
    HttpOpenAiTest::SetUp();
    std::ifstream in(std::string(ABCD_FIXTURE_DIR) + "/chat/templates/llama2.jinja");
    std::stringstream text;
    text << in.rdbuf();
    auto chat = chat::ChatTemplate::FromText(text.str(), "llama2.jinja", "<s>", "</s>");
    ASSERT_TRUE(chat.ok()) << chat.status();
    const_cast<ServedModel*>(models_->FindByName("abc-lm-test"))->chat_template = *chat;
    lm_->set_events(generated_);
  }
  httplib::Result Chat(const json& body) {
    return client_->Post("/v1/chat/completions", body.dump(), "application/json");
  }
  static json User(const std::string& text) {
    return json::array({{{"role", "user"}, {"content", text}}});
  }
};

TEST_F(HttpChatTest, RendersTheTemplateAndAnswersInTheChatShape) {
  httplib::Result result = Chat({{"messages", User("  Hi there ")}, {"seed", 3}});
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const json response = json::parse(result->body);
  const std::vector<GenerationRequest> requests = lm_->requests();
  ASSERT_EQ(requests.size(), 1u);
  const GenerationRequest& request = requests[0];
  // "<s>[INST] Hi there [/INST]": bos is the engine's, the rest is the prompt.
  EXPECT_EQ(request.prompt_token_ids, *tokenizer_->Encode("[INST] Hi there [/INST]"));
  EXPECT_EQ(request.max_tokens, http::kChatDefaultMaxTokens);
  EXPECT_EQ(request.sampling.seed, 3u);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_TRUE(absl::StartsWith(response["id"].get<std::string>(), "chatcmpl-"));
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], Text(ids_));
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_FALSE(choice.contains("text"));
}

TEST_F(HttpChatTest, StreamsDeltasWithTheRoleFirstAndChatLogprobs) {
  httplib::Result result = Chat({{"messages", User("Hi")},
                                 {"stream", true},
                                 {"logprobs", true},
                                 {"top_logprobs", 2},
                                 {"max_completion_tokens", 7},
                                 {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(lm_->requests()[0].max_tokens, 7);
  EXPECT_EQ(lm_->requests()[0].logprobs, 2);
  bool done = false;
  const std::vector<json> chunks = SseChunks(result->body, &done);
  ASSERT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  std::string token_text;
  std::string finish;
  for (const json& chunk : chunks) {
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (chunk["choices"].empty()) {
      EXPECT_EQ(chunk["usage"]["completion_tokens"], ids_.size());  // the include_usage chunk
      continue;
    }
    const json& choice = chunk["choices"][0];
    if (choice["delta"].contains("content")) content += choice["delta"]["content"];
    if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
    if (!choice["logprobs"].is_object()) continue;
    for (const json& token : choice["logprobs"]["content"]) {
      token_text += token["token"].get<std::string>();
      std::string bytes;
      for (const json& b : token["bytes"]) bytes += static_cast<char>(b.get<int>());
      EXPECT_EQ(bytes, token["token"]);
      ASSERT_FALSE(token["top_logprobs"].empty());
      EXPECT_LE(token["top_logprobs"].size(), 2u);
      EXPECT_GE(token["top_logprobs"][0]["logprob"].get<double>(),  // best first
                token["top_logprobs"].back()["logprob"].get<double>());
    }
  }
  EXPECT_EQ(content, Text(ids_));
  EXPECT_EQ(token_text, content);  // the tokens' texts make up the content
  EXPECT_EQ(finish, "stop");
}

TEST_F(HttpChatTest, RefusesBadMessagesNamingTheField) {
  const auto expect_400 = [&](const json& body, const std::string& starts) {
    httplib::Result result = Chat(body);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 400) << result->body;
    const std::string message = json::parse(result->body)["error"]["message"];
    EXPECT_TRUE(absl::StartsWith(message, starts)) << message;
  };
  json two = User("a");
  two.push_back({{"role", "robot"}, {"content", "b"}});
  expect_400({{"messages", two}}, "messages[1].role must be one of system, user, assistant");
  expect_400({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
             "messages[0].content[0].type must be \"text\"");
  expect_400({{"messages", json::array()}}, "messages must be a non-empty array");
  expect_400({{"messages", User("a")}, {"top_logprobs", 2}}, "top_logprobs needs");
  expect_400({{"messages", User("a")}, {"max_completion_tokens", 0}}, "max_completion_tokens");
  expect_400({{"messages", User("a")}, {"temperature", -1}}, "temperature");
  expect_400({{"messages", User("a")}, {"echo", true}}, "echo is not supported");
  // The template's own raise_exception (roles must alternate).
  json users = User("a");
  users.push_back({{"role", "user"}, {"content", "b"}});
  expect_400({{"messages", users}},
             "messages: the model's chat template refused the conversation: Conversation roles "
             "must alternate");
  httplib::Result unknown = Chat({{"messages", User("a")}, {"model", "nope"}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(json::parse(unknown->body)["error"]["code"], "model_not_found");
  EXPECT_TRUE(lm_->requests().empty());
}

// Tool fields are validated naming the field (chat_tools.h); the deprecated functions are
// refused; tool_choice "none" is served without parsing calls.
TEST_F(HttpChatTest, ToolFieldsAreValidatedNamingTheField) {
  const json tools = json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])");
  const auto expect_400 = [&](const json& extra, const std::string& param,
                              const std::string& starts) {
    json body = {{"messages", User("a")}};
    body.update(extra);
    httplib::Result result = Chat(body);
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 400) << extra.dump() << " -> " << result->body;
    const json error = json::parse(result->body)["error"];
    EXPECT_EQ(error["param"], param) << error;
    EXPECT_TRUE(absl::StartsWith(error["message"].get<std::string>(), starts)) << error;
  };
  expect_400({{"tools", 5}}, "tools", "tools must be an array");
  expect_400({{"tools", json::parse(R"([{"type": "function", "function": {"name": 3}}])")}},
             "tools", "tools[0].function.name must be");
  expect_400({{"tool_choice", "sometimes"}}, "tool_choice", "tool_choice must be");
  expect_400({{"tool_choice", "auto"}}, "tool_choice", "tool_choice auto needs a non-empty tools");
  expect_400(
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}},
      "tool_choice", "tool_choice.function.name \"f\" is not one of the tools");
  expect_400({{"tools", tools},
              {"tool_choice", "required"},
              {"response_format", {{"type", "json_object"}}}},
             "response_format", "response_format cannot be combined with tool_choice");
  expect_400({{"tools", json::parse(R"([{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"s": {"type": "string",
                "not": {"const": "a"}}}}}}])")},
              {"tool_choice", "required"}},
             "tools", "tools[0].function.parameters.properties.s.not is not supported");
  expect_400({{"parallel_tool_calls", "yes"}}, "parallel_tool_calls",
             "parallel_tool_calls must be a boolean");
  expect_400({{"functions", tools}}, "functions", "functions: this server does not return");
  expect_400({{"modalities", {"text", "audio"}}}, "modalities", "modalities must be");
  expect_400({{"audio", {{"voice", "alloy"}}}}, "audio", "audio: this server writes text only");
  EXPECT_TRUE(lm_->requests().empty());
  httplib::Result none = Chat({{"messages", User("a")},
                               {"tools", tools},
                               {"tool_choice", "none"},
                               {"parallel_tool_calls", false},
                               {"modalities", {"text"}},
                               {"user", "u-1"}});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 200) << none->body;
  EXPECT_EQ(json::parse(none->body)["choices"][0]["message"]["content"], Text(ids_));
}

// The scripted model answers in the Hermes format (the Llama-2 template names no format, so
// Hermes, the default, is parsed): text before the call is content, the call is a tool_call.
class HttpChatToolTest : public HttpChatTest {
 protected:
  void SetUp() override {
    HttpChatTest::SetUp();
    GenerationEvent first;
    first.token_ids = {ids_[0]};
    first.text = "Checking.\n<tool";
    GenerationEvent second;
    second.token_ids = {ids_[1]};
    second.text = "_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    GenerationEvent last;
    last.token_ids = {ids_[0]};
    last.text = "\n</tool_call>";
    last.finish_reason = FinishReason::kEos;
    last.completion_tokens = 3;
    lm_->set_events({first, second, last});
  }
  json Body(bool stream) const {
    return {{"messages", User("Weather in Paris?")},
            {"stream", stream},
            {"tools", json::parse(R"([{"type": "function", "function": {"name": "get_weather",
                "description": "The weather in a city.", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])")}};
  }
};

TEST_F(HttpChatToolTest, NonStreamingAnswerHasToolCalls) {
  httplib::Result result = Chat(Body(false));
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const json choice = json::parse(result->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], "Checking.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_TRUE(absl::StartsWith(call["id"].get<std::string>(), "call_")) << call;
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_FALSE(call.contains("index"));
  // An unconstrained request: the model chose the call.
  EXPECT_EQ(lm_->requests()[0].response_format, nullptr);
}

TEST_F(HttpChatToolTest, StreamHoldsTheCallBackAndSendsItAsToolCalls) {
  httplib::Result result = Chat(Body(true));
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  bool done = false;
  const std::vector<json> chunks = SseChunks(result->body, &done);
  ASSERT_TRUE(done);
  std::string content;
  json calls = json::array();
  std::string finish;
  for (const json& chunk : chunks) {
    const json& choice = chunk["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    EXPECT_FALSE(absl::StrContains(delta.value("content", ""), "tool")) << chunk;
    if (delta.contains("tool_calls")) {
      EXPECT_TRUE(choice["finish_reason"].is_string()) << chunk;  // sent with the last chunk
      for (const json& call : delta["tool_calls"]) calls.push_back(call);
    }
    if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, "Checking.\n");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_TRUE(absl::StartsWith(calls[0]["id"].get<std::string>(), "call_"));
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
}

TEST_F(HttpChatToolTest, CallsOfUnknownToolsAndToolChoiceNoneStayContent) {
  const std::string all =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>";
  json unknown = Body(false);
  unknown["tools"][0]["function"]["name"] = "get_time";
  json none = Body(false);
  none["tool_choice"] = "none";
  for (const json& body : {unknown, none}) {
    httplib::Result result = Chat(body);
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 200) << result->body;
    const json choice = json::parse(result->body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");
    EXPECT_EQ(choice["message"]["content"], all);
    EXPECT_FALSE(choice["message"].contains("tool_calls"));
  }
  // The template was given the tools in both (llama2.jinja ignores them: same prompt).
  ASSERT_EQ(lm_->requests().size(), 2u);
  EXPECT_EQ(lm_->requests()[0].prompt_token_ids,
            *tokenizer_->Encode("[INST] Weather in Paris? [/INST]"));
}

// With a Llama-3.1-style template the tools reach the prompt, and the whole output as
// {"name", "parameters"} JSON is the call, streamed too.
TEST_F(HttpChatToolTest, Llama31TemplateGetsTheToolsAndItsJsonIsTheCall) {
  std::ifstream in(std::string(ABCD_FIXTURE_DIR) + "/chat/templates/llama3.1-tools.jinja");
  std::stringstream text;
  text << in.rdbuf();
  auto chat = chat::ChatTemplate::FromText(text.str(), "llama3.1-tools.jinja", "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  const_cast<ServedModel*>(models_->FindByName("abc-lm-test"))->chat_template = *chat;
  GenerationEvent first;
  first.token_ids = {ids_[0]};
  first.text = "<|python_tag|>{\"name\": \"get_weather\", ";
  GenerationEvent last;
  last.token_ids = {ids_[1]};
  last.text = "\"parameters\": {\"city\": \"Rome\"}}";
  last.finish_reason = FinishReason::kEos;
  lm_->set_events({first, last});
  for (const bool stream : {false, true}) {
    httplib::Result result = Chat(Body(stream));
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 200) << result->body;
    json call;
    std::string content;
    std::string finish;
    if (stream) {
      bool done = false;
      for (const json& chunk : SseChunks(result->body, &done)) {
        const json& choice = chunk["choices"][0];
        content += choice["delta"].value("content", "");
        if (choice["delta"].contains("tool_calls")) call = choice["delta"]["tool_calls"][0];
        if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
      }
    } else {
      const json choice = json::parse(result->body)["choices"][0];
      EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
      call = choice["message"]["tool_calls"][0];
      finish = choice["finish_reason"];
    }
    EXPECT_EQ(content, "");
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_EQ(call["function"]["name"], "get_weather") << result->body;
    EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
              json({{"city", "Rome"}}));
  }
  const std::string prompt = Text(lm_->requests()[0].prompt_token_ids);
  EXPECT_TRUE(absl::StrContains(prompt, "The weather in a city.")) << prompt;
}

// A named tool_choice constrains the output to {"name": <it>, "arguments": <its parameters>}
// and returns it as the call whatever the template's format.
TEST_F(HttpChatToolTest, NamedToolChoiceIsEnforcedAndReturnedAsTheCall) {
  GenerationEvent only;
  only.token_ids = {ids_[0]};
  only.text = R"({"name": "get_weather", "arguments": {"city": "Oslo"}})";
  only.finish_reason = FinishReason::kStop;
  lm_->set_events({only});
  for (const bool stream : {false, true}) {
    json body = Body(stream);
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
    httplib::Result result = Chat(body);
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 200) << result->body;
    json call;
    std::string finish;
    if (stream) {
      bool done = false;
      for (const json& chunk : SseChunks(result->body, &done)) {
        const json& choice = chunk["choices"][0];
        EXPECT_EQ(choice["delta"].value("content", ""), "") << chunk;
        if (choice["delta"].contains("tool_calls")) call = choice["delta"]["tool_calls"][0];
        if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
      }
    } else {
      const json choice = json::parse(result->body)["choices"][0];
      EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
      call = choice["message"]["tool_calls"][0];
      finish = choice["finish_reason"];
    }
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_EQ(call["function"]["name"], "get_weather") << result->body;
    EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
              json({{"city", "Oslo"}}));
  }
  // The engine got the call's grammar: it accepts the call and refuses another name.
  ASSERT_EQ(lm_->requests().size(), 2u);
  const std::shared_ptr<const JsonGrammar> grammar = lm_->requests()[0].response_format;
  ASSERT_NE(grammar, nullptr);
  JsonMatcher good(grammar.get());
  EXPECT_TRUE(good.Advance(R"({"name":"get_weather","arguments":{"city":"Oslo"}})"));
  EXPECT_TRUE(good.accepting());
  JsonMatcher other(grammar.get());
  EXPECT_FALSE(other.Advance(R"({"name":"get_time")"));
  JsonMatcher no_city(grammar.get());
  EXPECT_FALSE(no_city.Advance(R"({"name":"get_weather","arguments":{})"));
}

TEST_F(HttpChatTest, TokenizeRendersMessagesAsChatPrefillsThem) {
  httplib::Result result =
      client_->Post("/tokenize", json({{"messages", User("Hi")}}).dump(), "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const json body = json::parse(result->body);
  std::vector<int32_t> want = *tokenizer_->Encode("[INST] Hi [/INST]");
  want.insert(want.begin(),
              models_->FindByName("abc-lm-test")->executor->backend().config().bos_id);
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(body["count"], want.size());
}

}  // namespace
}  // namespace abcd
