// Every 400 names its request field in OpenAI's error.param, also where the message comes from
// a layer that calls the field by another name: the completions parser and the engine see a
// chat's rendered conversation as "prompt" / "prompt_token_ids" (param "messages"), and the
// engine sees a completion's token-id prompt as "prompt_token_ids" (param "prompt").
// tests/e2e/refusal_param_e2e_test.cc runs the whole table of refusals on the real binary.
#include "server/http/http_errors.h"
#include "tests/server/http/http_openai_fixture.h"

namespace abcd {
namespace {

using http_testing::HttpOpenAiTest;
using nlohmann::json;

TEST(HttpErrors, RenameFieldRenamesOnlyALeadingField) {
  absl::Status engine = absl::InvalidArgumentError("prompt_token_ids has 9 tokens, the limit is 7");
  engine.SetPayload("abcd/test", absl::Cord("kept"));
  const absl::Status renamed = http::RenameField(engine, "prompt_token_ids", "prompt");
  EXPECT_EQ(renamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(renamed.message(), "prompt has 9 tokens, the limit is 7");
  EXPECT_EQ(renamed.GetPayload("abcd/test"), absl::Cord("kept"));
  EXPECT_EQ(http::ParamFromMessage(renamed.message()), "prompt");
  EXPECT_EQ(http::RenameField(absl::InvalidArgumentError("prompt_token_ids[3] must be"),
                              "prompt_token_ids", "prompt")
                .message(),
            "prompt[3] must be");
  EXPECT_EQ(http::RenameField(absl::InvalidArgumentError("prompt: give text or token ids"),
                              "prompt", http::kRenderedMessages)
                .message(),
            "messages (as rendered by the chat template): give text or token ids");
  EXPECT_EQ(http::ParamFromMessage(http::kRenderedMessages), "messages");
  // Not a leading field: unchanged (a longer word, the word later on, an OK status).
  for (const char* message : {"prompts are", "the prompt is", "prompt", "prompt_token_ids"}) {
    EXPECT_EQ(http::RenameField(absl::InvalidArgumentError(message), "prompt", "x").message(),
              message);
  }
  EXPECT_TRUE(http::RenameField(absl::OkStatus(), "prompt", "x").ok());
}

// error.param is the path the message starts with, as OpenAI writes it: indices in brackets,
// keys after dots, up to the first byte that is not part of a path.
TEST(HttpErrors, ParamIsThePathTheMessageStartsWith) {
  const std::pair<const char*, const char*> cases[] = {
      {"messages[3].role must be one of system, user", "messages[3].role"},
      {"messages[0].content[0].type must be \"text\"", "messages[0].content[0].type"},
      {"response_format.json_schema.schema.properties.x.type: unknown type \"bogus\"",
       "response_format.json_schema.schema.properties.x.type"},
      {"response_format.json_schema.schema.properties.my-key$1.items.pattern must be a string",
       "response_format.json_schema.schema.properties.my-key$1.items.pattern"},
      {"response_format.json_schema.schema.format \"hostname\" is not supported",
       "response_format.json_schema.schema.format"},
      {"response_format.json_schema.schema: a $ref cycle", "response_format.json_schema.schema"},
      {"speculative.k must be an integer in [1, 16], got 0", "speculative.k"},
      {"tools[0].function.parameters.properties.a.type: unknown",
       "tools[0].function.parameters"
       ".properties.a.type"},
      {"tools[0].function.parameters[0][0][0]... nests JSON deeper than 256 levels",
       "tools[0].function.parameters[0][0][0]"},
      {"sampling.top_p must be in (0, 1]", "top_p"},
      {"logit_bias[5] must be a number", "logit_bias[5]"},
      {"stop[0] must be a non-empty string", "stop[0]"},
      {"n: must be 1 with a session", "n"},
      {"messages (as rendered by the chat template) has 70 tokens", "messages"},
      {"prompt.", "prompt"},
      {"prompt[x] must be", "prompt"},
      {"prompt[3 must be", "prompt"},
      {"stream_options.include_usage must be a boolean", "stream_options.include_usage"},
      // Not a request field: no param.
      {"x[0][0]... nests JSON deeper than 256 levels", ""},
      {"session 0123 not found (unknown or expired)", ""},
      {"the body is not valid JSON", ""},
  };
  for (const auto& [message, param] : cases) {
    EXPECT_EQ(http::ParamFromMessage(message), param) << message;
  }
}

// A status whose message names no field gets its param from WithParam; one that names its own
// keeps that.
TEST(HttpErrors, WithParamNamesTheFieldOfAMessageWithoutOne) {
  const json unknown = json::parse(http::ErrorBody(http::WithParam(
      absl::NotFoundError("session 0123 not found (unknown or expired)"), "session_id")));
  EXPECT_EQ(unknown["error"]["param"], "session_id") << unknown;
  EXPECT_EQ(unknown["error"]["type"], "not_found_error") << unknown;
  const json named = json::parse(http::ErrorBody(
      http::WithParam(absl::InvalidArgumentError("n: must be 1 with a session"), "session_id")));
  EXPECT_EQ(named["error"]["param"], "n") << named;
  EXPECT_TRUE(http::WithParam(absl::OkStatus(), "session_id").ok());
}

// Refuses every request with `status`, as the engine's intake does.
class RefusingExecutor final : public Executor {
 public:
  RefusingExecutor(const Model& model, absl::Status status)
      : backend_(model, 1 << 20), status_(std::move(status)) {}
  absl::StatusOr<RequestId> Enqueue(GenerationRequest, EventCallback) override { return status_; }
  void Cancel(RequestId) override {}
  void StartDraining() override {}
  void Shutdown() override {}
  ExecutorStats LatestStats() const override { return {}; }
  const DecodeBackend& backend() const override { return backend_; }

 private:
  CpuBackend backend_;
  const absl::Status status_;
};

class HttpRefusalParamTest : public HttpOpenAiTest {
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

  // A second service over the same models with `options`; its client.
  std::unique_ptr<httplib::Client> Serve(http::HttpOptions options) {
    other_ = std::make_unique<http::HttpService>(*models_, http::HttpHooks{}, options);
    EXPECT_TRUE(other_->Start("127.0.0.1", 0).ok());
    auto client = std::make_unique<httplib::Client>("127.0.0.1", other_->port());
    client->set_read_timeout(5, 0);
    return client;
  }
  // Replaces the model's executor with one refusing every request with `status`.
  void RefuseWith(absl::Status status) {
    auto* model = const_cast<ServedModel*>(models_->FindByName("abc-lm-test"));
    model->executor = std::make_unique<RefusingExecutor>(*model_, std::move(status));
    lm_ = nullptr;
  }

  // POSTs `body` to `path` and expects a 400 whose param is `param` and whose message starts
  // with `starts`.
  static void Expect400(httplib::Client& client, const std::string& path, const json& body,
                        const std::string& param, const std::string& starts) {
    httplib::Result result = client.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 400) << body.dump() << " -> " << result->body;
    const json error = json::parse(result->body)["error"];
    EXPECT_EQ(error["param"], param) << error;
    EXPECT_TRUE(absl::StartsWith(error["message"].get<std::string>(), starts)) << error;
  }

  std::unique_ptr<http::HttpService> other_;
};

// The rendered conversation over --max_prompt_tokens is the client's messages, not a "prompt"
// it never sent.
TEST_F(HttpRefusalParamTest, RenderedConversationOverTheLimitNamesMessages) {
  http::HttpOptions options;
  options.max_prompt_tokens = 4;
  std::unique_ptr<httplib::Client> client = Serve(options);
  Expect400(*client, "/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "Hi there, my good friend"}}}}},
            "messages", "messages (as rendered by the chat template) has ");
  // A completion's own prompt keeps its name.
  Expect400(*client, "/v1/completions", {{"prompt", {5, 6, 7, 8, 9}}}, "prompt",
            "prompt has 5 token ids, more than the limit of 4");
  EXPECT_TRUE(lm_->requests().empty());
}

// What the engine refuses about the token ids it was given names the HTTP field.
TEST_F(HttpRefusalParamTest, EngineRefusalsOfTokenIdsNameTheHttpField) {
  RefuseWith(
      absl::InvalidArgumentError("prompt_token_ids has 64 tokens, the limit is 63 (and bos)"));
  Expect400(*client_, "/v1/completions", {{"prompt", {5, 6}}}, "prompt",
            "prompt has 64 tokens, the limit is 63 (and bos)");
  Expect400(*client_, "/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, "messages",
            "messages (as rendered by the chat template) has 64 tokens");
  RefuseWith(absl::InvalidArgumentError("prompt is 70 tokens, longer than the limit of 64"));
  Expect400(*client_, "/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, "messages",
            "messages (as rendered by the chat template) is 70 tokens");
  Expect400(*client_, "/v1/completions", {{"prompt", "Hi"}}, "prompt", "prompt is 70 tokens");
  // Other engine refusals keep their names.
  RefuseWith(absl::InvalidArgumentError("sampling.logit_bias: token id 9999 is outside"));
  Expect400(*client_, "/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, "logit_bias",
            "logit_bias: token id 9999");
}

TEST_F(HttpRefusalParamTest, TokenizeWithPromptAndMessagesNamesPrompt) {
  Expect400(*client_, "/tokenize",
            {{"prompt", "x"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, "prompt",
            "prompt and messages are mutually exclusive");
}

}  // namespace
}  // namespace abcd
