// Issue 44 item 5: every refusal in OpenAI's shape names its field in error.param, as the path
// OpenAI writes ("messages[3].role", "response_format.json_schema.schema.properties.x.type",
// "speculative.k"). On the real binary (abc-lm with a plain chat template, a translation model,
// sessions, --max_prompt_tokens 64), a bad value of every field of /v1/completions,
// /v1/chat/completions, /tokenize, /detokenize, /v1/translate and /v1/sessions is refused with
// the path as param, the message starting with the same path; the refusals that concern no
// field (a body that is not JSON, nests too deep at the top, or an unknown key) keep param null.
// A completion or chat naming an unknown session is a 404 with param session_id.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using nlohmann::json;

struct Refusal {
  std::string path;
  std::string body;
  std::string param;  // empty: param must be null
  int status = 400;
};

std::string Words(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) absl::StrAppend(&text, i == 0 ? "" : " ", "w", i);
  return text;
}

class RefusalParamTest : public testing::ServerSuite<RefusalParamTest> {
 public:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::path(::testing::TempDir()) /
                                     ("abcd-refusal-param-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    const std::string chat_template = (*dir_ / "chat.jinja").string();
    std::ofstream(chat_template) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n"
                                    "{% endfor %}assistant:";
    Start({"--device", "cpu", "--models", testing::kTrainedLmDir + "," + testing::kMtDir,
           "--chat_template", "abc-lm=" + chat_template, "--max_prompt_tokens", "64"});
  }
  static void TearDownTestSuite() {
    ServerSuite::TearDownTestSuite();
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

 protected:
  // Every case answered with its status and param; the message starts with the param.
  void ExpectParams(const std::vector<Refusal>& cases) {
    for (const Refusal& c : cases) {
      SCOPED_TRACE(absl::StrCat(c.path, " ", c.body.substr(0, 120)));
      const auto result = http_->Post(c.path, c.body, "application/json");
      ASSERT_TRUE(result) << server_->Log();
      EXPECT_EQ(result->status, c.status) << result->body;
      const json body = json::parse(result->body, nullptr, false);
      ASSERT_TRUE(body.is_object() && body.contains("error")) << result->body;
      const json& error = body["error"];
      const std::string message = error["message"].is_string() ? error["message"] : "";
      if (c.param.empty()) {
        EXPECT_TRUE(error["param"].is_null()) << result->body;
      } else {
        EXPECT_EQ(error["param"], c.param) << result->body;
        EXPECT_TRUE(absl::StartsWith(message, c.param)) << result->body;
      }
    }
  }

  static inline std::filesystem::path* dir_ = nullptr;
};

// {"prompt": "hello", <extra>}
std::string Completion(const std::string& extra) {
  return absl::StrCat(R"({"prompt": "hello", )", extra, "}");
}
// {"messages": [one user message], <extra>}
std::string Chat(const std::string& extra) {
  return absl::StrCat(R"({"messages": [{"role": "user", "content": "hi"}], )", extra, "}");
}

TEST_F(RefusalParamTest, CompletionFieldsAreNamed) {
  const std::string p = "/v1/completions";
  const std::string schema = R"("response_format": {"type": "json_schema", "json_schema": )";
  ExpectParams({
      {p, R"({"prompt": 5})", "prompt"},
      {p, R"({"prompt": ""})", "prompt"},
      {p, R"({"prompt": ["a", "b"]})", "prompt"},
      {p, R"({"prompt": [1, -1]})", "prompt[1]"},
      {p, R"({"prompt": [99999999]})", "prompt[0]"},  // the engine's vocabulary check
      {p, json({{"prompt", std::vector<int>(64, 5)}}).dump(), "prompt"},  // 64 + bos > 64
      {p, json({{"prompt", std::vector<int>(65, 5)}}).dump(), "prompt"},  // the parser's limit
      {p, json({{"prompt", Words(100)}}).dump(), "prompt"},
      {p, json({{"prompt", std::string(2000, 'x')}}).dump(), "prompt"},
      {p, Completion(R"("max_tokens": 0)"), "max_tokens"},
      {p, Completion(R"("max_tokens": 1e400)"), "max_tokens"},
      {p, Completion(R"("temperature": -1)"), "temperature"},
      {p, Completion(R"("top_p": 0)"), "top_p"},
      {p, Completion(R"("top_k": -1)"), "top_k"},
      {p, Completion(R"("seed": -1)"), "seed"},
      {p, Completion(R"("stop": [1])"), "stop[0]"},
      {p, Completion(R"("stop": [")" + std::string(300, 'x') + "\"]"), "stop[0]"},
      {p, Completion(R"("stream": 1)"), "stream"},
      {p, Completion(R"("n": 1000)"), "n"},
      {p, Completion(R"("best_of": 2)"), "best_of"},
      {p, Completion(R"("ignore_eos": "y")"), "ignore_eos"},
      {p, Completion(R"("logprobs": 99)"), "logprobs"},
      {p, Completion(R"("echo": 1)"), "echo"},
      {p, Completion(R"("min_p": 2)"), "min_p"},
      {p, Completion(R"("presence_penalty": 3)"), "presence_penalty"},
      {p, Completion(R"("frequency_penalty": -3)"), "frequency_penalty"},
      {p, Completion(R"("repetition_penalty": 0)"), "repetition_penalty"},
      {p, Completion(R"("logit_bias": {"x": 1})"), "logit_bias"},
      {p, Completion(R"("logit_bias": {"1": 1000})"), "logit_bias[1]"},
      {p, Completion(R"("logit_bias": {"999999": 1})"), "logit_bias"},  // the engine's vocabulary
      {p, Completion(R"("response_format": {"type": "bogus"})"), "response_format.type"},
      {p, Completion(schema + R"({"schema": {"type": "bogus"}}})"),
       "response_format.json_schema.schema.type"},
      {p,
       Completion(schema +
                  R"({"schema": {"type": "object", "properties": {"x": {"type": "bogus"}}}}})"),
       "response_format.json_schema.schema.properties.x.type"},
      {p, Completion(schema + R"({"schema": {"anyOf": [{"type": "string"}, {"pattern": 5}]}}})"),
       "response_format.json_schema.schema.anyOf[1].pattern"},
      {p, Completion(schema + R"({"schema": {"$ref": "#"}}})"),
       "response_format.json_schema.schema"},
      {p, Completion(schema + R"({"schema": {"type": "object", "properties": {"n": {"$ref": "#"}},
                                "required": ["n"]}}})"),
       "response_format.json_schema.schema"},
      {p, Completion(schema + R"({"name": 5, "schema": {}}})"), "response_format.json_schema.name"},
      {p, Completion(schema + R"({"schema": {"type": "string", "format": "hostname"}}})"),
       "response_format.json_schema.schema.format"},
      {p, Completion(R"("speculative": {"mode": "ngram", "k": 0})"), "speculative.k"},
      {p, Completion(R"("speculative": {})"), "speculative.mode"},
      {p, Completion(R"("session_id": 5)"), "session_id"},
      {p, Completion(R"("session_id": "abc")"), "session_id"},
      {p, Completion(R"("stream_options": {"include_usage": true})"), "stream_options"},
      {p, Completion(R"("model": 5)"), "model"},
      {p, Completion(R"("model": "abc-mt-untrained")"), "model"},
      {p, Completion(R"("model": "nope")"), "model", 404},
      {p, Completion(R"("n": 2, "session_id": "new")"), "n"},
      {p, Completion(R"("echo": true, "n": 2)"), "echo"},
      {p, Completion(R"("stream": true, "stream_options": {"include_usage": 3})"),
       "stream_options.include_usage"},
      // No field to name: not JSON, too deep at the top, an unknown key's bad number.
      {p, R"({"prompt": "x")", ""},
      {p, std::string(300, '[') + std::string(300, ']'), ""},
      {p, R"({"prompt": "x", "a": {"b": [1e400]}})", ""},
  });
  ExpectServing();
}

TEST_F(RefusalParamTest, ChatFieldsAreNamed) {
  const std::string c = "/v1/chat/completions";
  const auto user = [](const std::string& content) {
    return json::array({{{"role", "user"}, {"content", content}}});
  };
  ExpectParams({
      {c, R"({"messages": 5})", "messages"},
      {c, R"({"messages": []})", "messages"},
      {c, R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
      {c,
       json({{"messages",
              {{{"role", "user"}, {"content", "a"}},
               {{"role", "assistant"}, {"content", "b"}},
               {{"role", "user"}, {"content", "c"}},
               {{"role", "robot"}, {"content", "d"}}}}})
           .dump(),
       "messages[3].role"},
      {c, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {c, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      // Within the byte bound but over 64 tokens once rendered: the messages, not a "prompt".
      {c, json({{"messages", user(Words(100))}}).dump(), "messages"},
      {c, json({{"messages", user(std::string(3000, 'x'))}}).dump(), "messages"},
      {c, Chat(R"("max_completion_tokens": 0)"), "max_completion_tokens"},
      {c, Chat(R"("top_logprobs": 3)"), "top_logprobs"},
      {c, Chat(R"("logprobs": 3)"), "logprobs"},
      {c, Chat(R"("add_generation_prompt": 1)"), "add_generation_prompt"},
      {c, Chat(R"("tools": 5)"), "tools"},
      {c, Chat(R"("tool_choice": "x")"), "tool_choice"},
      {c, Chat(R"("parallel_tool_calls": 3)"), "parallel_tool_calls"},
      {c, Chat(R"("function_call": "auto")"), "function_call"},
      {c, Chat(R"("modalities": ["audio"])"), "modalities"},
      {c, Chat(R"("audio": {})"), "audio"},
      {c, Chat(R"("prompt": "x")"), "prompt"},
      {c, Chat(R"("echo": true)"), "echo"},
      {c, Chat(R"("n": 0)"), "n"},
      {c, Chat(R"("temperature": 500)"), "temperature"},
      {c, Chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 1}})"),
       "response_format.json_schema.schema"},
      {c,
       Chat(R"("tools": [{"type": "function", "function": {"name": "f", "parameters":)"
            R"( {"type": "object", "properties": {"a": {"type": "bogus"}}}}}],)"
            R"( "tool_choice": "required")"),
       "tools[0].function.parameters.properties.a.type"},
      {c, Chat(R"("tools": [{"type": "function", "function": {"name": 5}}])"),
       "tools[0].function.name"},
      {c, Chat(R"("session_id": "zzz")"), "session_id"},
      {c, Chat(R"("speculative": {"mode": "ngram", "k": 99})"), "speculative.k"},
      {c, Chat(R"("logit_bias": {"999999": 1})"), "logit_bias"},
      {c, Chat(R"("model": "abc-mt-untrained")"), "model"},
      {c, Chat(R"("max_tokens": 100000)"), "max_tokens"},
      {c,
       Chat(R"("tools": [{"type": "function", "function": {"name": "f"}}], )"
            R"("tool_choice": "required", "response_format": {"type": "json_object"})"),
       "response_format"},
      {c, R"({"messages": 5)", ""},
  });
  ExpectServing();
}

TEST_F(RefusalParamTest, TokenizeTranslateAndSessionFieldsAreNamed) {
  const std::string user = R"([{"role": "user", "content": "hi"}])";
  ExpectParams({
      {"/tokenize", R"({"prompt": 5})", "prompt"},
      {"/tokenize", R"({})", "prompt"},
      {"/tokenize", R"({"prompt": "x", "messages": )" + user + "}", "prompt"},
      {"/tokenize", R"({"messages": [{"role": "x"}]})", "messages[0].role"},
      {"/tokenize", json({{"prompt", std::string(3000, 'x')}}).dump(), "prompt"},
      {"/tokenize", R"({"prompt": "x", "add_special_tokens": 3})", "add_special_tokens"},
      {"/detokenize", R"({"tokens": [99999]})", "tokens[0]"},
      {"/detokenize", R"({"tokens": [-1]})", "tokens[0]"},
      {"/detokenize", json({{"tokens", std::vector<int>(100, 5)}}).dump(), "tokens"},
      {"/v1/translate", R"({})", "text"},
      {"/v1/translate", R"({"text": "a", "texts": ["b"]})", "text"},
      {"/v1/translate", R"({"texts": []})", "texts"},
      {"/v1/translate", R"({"text": "a", "beam_size": 0})", "beam_size"},
      {"/v1/translate", json({{"text", std::string(9000, 'x')}}).dump(), "text"},
      {"/v1/translate", json({{"texts", {std::string(9000, 'x')}}}).dump(), "texts[0]"},
      {"/v1/translate", R"({"text": "a", "model": "abc-lm"})", "model"},
      {"/v1/sessions", "garbage", "state"},
  });
  ExpectServing();
}

// A completion or chat naming a session this server does not have: 404 with param session_id
// (the message names the session by its id). The session routes take the id in the path, not in
// a field: their 404 has no param.
TEST_F(RefusalParamTest, UnknownSessionNamesSessionId) {
  const std::string id = "0123456789abcdef0123456789abcdef";
  for (const auto& [path, body] :
       {std::pair<std::string, std::string>{"/v1/completions",
                                            Completion(R"("session_id": ")" + id + "\"")},
        {"/v1/chat/completions", Chat(R"("session_id": ")" + id + "\"")}}) {
    const auto result = http_->Post(path, body, "application/json");
    ASSERT_TRUE(result) << server_->Log();
    EXPECT_EQ(result->status, 404) << result->body;
    const json error = json::parse(result->body)["error"];
    EXPECT_EQ(error["param"], "session_id") << result->body;
    EXPECT_EQ(error["type"], "not_found_error") << result->body;
    EXPECT_TRUE(absl::StrContains(error["message"].get<std::string>(), id)) << result->body;
  }
  const auto get = http_->Get("/v1/sessions/" + id);
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 404) << get->body;
  EXPECT_TRUE(json::parse(get->body)["error"]["param"].is_null()) << get->body;
  ExpectServing();
}

}  // namespace
}  // namespace abcd
