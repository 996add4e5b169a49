// OpenAI Completions extras on POST /v1/completions: logprobs, echo (with prompt scores and
// max_tokens 0), stream_options.include_usage and abcd's own fields under "abcd". The real
// HttpService over a scripted executor that replays given events; token texts come from the
// bundled lm tokenizer.
#include "tests/server/http/http_openai_fixture.h"

namespace abcd {
namespace {

using http_testing::HttpOpenAiTest;
using http_testing::Scored;
using http_testing::SseChunks;
using nlohmann::json;

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
      {"/detokenize", {{"tokens", {5, -1}}}, 400, "tokens[1]", "tokens[1] must be a token id"},
      {"/detokenize", {{"tokens", {5, 8000}}}, 400, "tokens[1]", "tokens[1] must be in [0, 8000)"},
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
}  // namespace
}  // namespace abcd
