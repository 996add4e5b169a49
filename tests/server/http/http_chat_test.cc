// POST /v1/chat/completions (chat_route.h) and its tool calls on the real HttpService over the
// scripted executor of http_openai_fixture.h.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/chat/chat_prompt.h"
#include "tests/server/http/http_openai_fixture.h"

namespace abcd {
namespace {

using http_testing::HttpOpenAiTest;
using http_testing::Scored;
using http_testing::SseChunks;
using nlohmann::json;

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
             "tools[0].function.name", "tools[0].function.name must be");
  expect_400({{"tool_choice", "sometimes"}}, "tool_choice", "tool_choice must be");
  expect_400({{"tool_choice", "auto"}}, "tool_choice", "tool_choice auto needs a non-empty tools");
  expect_400(
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}},
      "tool_choice.function.name", "tool_choice.function.name \"f\" is not one of the tools");
  expect_400({{"tools", tools},
              {"tool_choice", "required"},
              {"response_format", {{"type", "json_object"}}}},
             "response_format", "response_format cannot be combined with tool_choice");
  expect_400({{"tools", json::parse(R"([{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"s": {"type": "string",
                "not": {"const": "a"}}}}}}])")},
              {"tool_choice", "required"}},
             "tools[0].function.parameters.properties.s.not",
             "tools[0].function.parameters.properties.s.not is not supported");
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
// A chat answer that should be one tool call, streamed (the deltas' content concatenated) or
// not (message.content must be null).
struct ToolCallAnswer {
  json call;
  std::string content;
  std::string finish;
};
ToolCallAnswer ReadToolCall(const std::string& body, bool stream) {
  ToolCallAnswer answer;
  if (stream) {
    bool done = false;
    for (const json& chunk : SseChunks(body, &done)) {
      const json& choice = chunk["choices"][0];
      answer.content += choice["delta"].value("content", "");
      if (choice["delta"].contains("tool_calls")) answer.call = choice["delta"]["tool_calls"][0];
      if (choice["finish_reason"].is_string()) answer.finish = choice["finish_reason"];
    }
  } else {
    const json choice = json::parse(body)["choices"][0];
    EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
    answer.call = choice["message"]["tool_calls"][0];
    answer.finish = choice["finish_reason"];
  }
  return answer;
}

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
    const ToolCallAnswer answer = ReadToolCall(result->body, stream);
    const json& call = answer.call;
    EXPECT_EQ(answer.content, "");
    EXPECT_EQ(answer.finish, "tool_calls");
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
    const ToolCallAnswer answer = ReadToolCall(result->body, stream);
    const json& call = answer.call;
    EXPECT_EQ(answer.content, "");
    EXPECT_EQ(answer.finish, "tool_calls");
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
  // The same ids as a chat completion prefills: its prompt after the bos the engine adds (this
  // model's tokenizer adds one).
  ASSERT_EQ(Chat({{"messages", User("Hi")}})->status, 200);
  want.erase(want.begin());
  EXPECT_EQ(lm_->requests()[0].prompt_token_ids, want);
}

// A model whose tokenizer adds no bos (Qwen's tokenizer.json post-processor; here
// tokenizer_config.json's add_bos_token false, over the golden hf_llama): no bos is invented, in
// /tokenize's ids (prompt or messages) or in the chat prompt enqueued, and /tokenize's ids are
// those prefilled; an empty prompt still gets the bos the engine starts from.
TEST_F(HttpChatTest, ModelWithoutBosGetsNoneInvented) {
  char pattern[] = "/tmp/abcd-http-no-bos-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::filesystem::path dir = pattern;
  for (const char* name : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(std::string(ABCD_FIXTURE_DIR) + "/golden/hf_llama/" + name,
                               dir / name);
  }
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": false})";
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_FALSE((*model)->config().add_bos);
  const int32_t bos = (*model)->config().bos_id;
  auto served = std::make_unique<ServedModel>();
  served->name = "no-bos";
  served->kind = ModelKind::kLanguageModel;
  served->tokenizer =
      *Tokenizer::Load(std::string(ABCD_SOURCE_DIR) + "/models/tokenizers/lm.model");
  served->executor = std::make_unique<http_testing::ScriptedExecutor>(**model);
  auto* executor = static_cast<http_testing::ScriptedExecutor*>(served->executor.get());
  executor->set_events(generated_);
  std::ifstream in(std::string(ABCD_FIXTURE_DIR) + "/chat/templates/chatml.jinja");
  std::stringstream text;
  text << in.rdbuf();
  auto chat = chat::ChatTemplate::FromText(text.str(), "chatml.jinja", "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  served->chat_template = *chat;
  models_->Add(std::move(served));
  auto tokenize = [&](const json& body) {
    httplib::Result result = client_->Post("/tokenize", body.dump(), "application/json");
    EXPECT_TRUE(result && result->status == 200) << (result ? result->body : "no response");
    return result ? json::parse(result->body)["tokens"].get<std::vector<int32_t>>()
                  : std::vector<int32_t>();
  };
  const std::vector<int32_t> hi = *tokenizer_->Encode("Hi there");
  EXPECT_EQ(tokenize({{"model", "no-bos"}, {"prompt", "Hi there"}}), hi);
  EXPECT_EQ(tokenize({{"model", "no-bos"}, {"prompt", "Hi there"}, {"add_special_tokens", false}}),
            hi);
  EXPECT_EQ(tokenize({{"model", "no-bos"}, {"prompt", ""}}), std::vector<int32_t>{bos});
  const std::vector<int32_t> chat_ids = tokenize({{"model", "no-bos"}, {"messages", User("Hi")}});
  ASSERT_FALSE(chat_ids.empty());
  EXPECT_EQ(std::count(chat_ids.begin(), chat_ids.end(), bos), 0);
  EXPECT_EQ(chat_ids,
            *tokenizer_->Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  httplib::Result result = Chat({{"model", "no-bos"}, {"messages", User("Hi")}});
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  ASSERT_EQ(executor->requests().size(), 1u);
  EXPECT_EQ(executor->requests()[0].prompt_token_ids, chat_ids);
  // The model lives in this test: the service and the executor over it go first.
  client_.reset();
  service_.reset();
  models_.reset();
}

// A template whose every turn shows whether it was given tools, so a test sees where they
// reached the render.
constexpr char kToolsPerTurnTemplate[] =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if tools %} [{{ tools | length }} "
    "tools]{% endif %} | {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

// /tokenize with messages gives the template the request's tools (validated as on chat
// completions), so its ids equal those a chat completion with the same tools prefills.
TEST_F(HttpChatToolTest, TokenizeGivesTheTemplateTheTools) {
  auto chat = chat::ChatTemplate::FromText(kToolsPerTurnTemplate, "tools-per-turn", "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  const_cast<ServedModel*>(models_->FindByName("abc-lm-test"))->chat_template = *chat;
  json body = Body(false);
  body.erase("stream");
  httplib::Result result = client_->Post("/tokenize", body.dump(), "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  std::vector<int32_t> tokens = json::parse(result->body)["tokens"].get<std::vector<int32_t>>();
  ASSERT_FALSE(tokens.empty());
  tokens.erase(tokens.begin());  // bos
  EXPECT_EQ(Text(tokens), "user: Weather in Paris? [1 tools] | assistant:");
  ASSERT_EQ(Chat(Body(false))->status, 200);
  EXPECT_EQ(lm_->requests()[0].prompt_token_ids, tokens);
  body["tools"][0]["function"]["name"] = "bad name";
  result = client_->Post("/tokenize", body.dump(), "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400) << result->body;
  EXPECT_TRUE(absl::StrContains(result->body, "tools[0].function.name")) << result->body;
}

// A session's next turn (the tool's result after the model's call) is rendered with the tools
// too (the route passes the request's tools to ChatContinuationIds; this fixture serves no
// sessions, so the function is called as the route calls it).
TEST_F(HttpChatToolTest, SessionContinuationGivesTheTemplateTheTools) {
  auto chat = chat::ChatTemplate::FromText(kToolsPerTurnTemplate, "tools-per-turn", "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  ServedModel* model = const_cast<ServedModel*>(models_->FindByName("abc-lm-test"));
  model->chat_template = *chat;
  const json next =
      json::parse(R"([{"role": "tool", "tool_call_id": "call_1", "content": "18 C"}])");
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(Body(false)["tools"].dump());
  absl::StatusOr<std::vector<int32_t>> ids =
      chat::ChatContinuationIds(*model, next, true, nullptr, tools);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // After the marker: the answer's close and the new turn, both rendered with the tools (the
  // decoded text drops the leading space, as SentencePiece decoding does).
  EXPECT_EQ(Text(*ids), "[1 tools] | tool: 18 C [1 tools] | assistant:");
  ids = chat::ChatContinuationIds(*model, next, true, nullptr);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(Text(*ids), "| tool: 18 C | assistant:");
}

}  // namespace
}  // namespace abcd
