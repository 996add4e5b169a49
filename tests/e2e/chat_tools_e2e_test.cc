// Tool calls on the real abcd-server with the bundled abc-lm and a chat template that shows, on
// every turn, whether it was given tools: a chat session whose second turn is the tool's result
// (the template gets the tools again, the appended tokens are what it renders after the answer,
// a forced call is parsed in the continuation too), and --tool_call_format overriding the format
// the template teaches (and refused, naming the flag, when unknown).
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using nlohmann::json;
using testing::kTrainedLmDir;

// Every turn shows whether the template was given tools (no tool-call marker: Hermes by default).
constexpr char kToolsPerTurnTemplate[] =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if tools %} [{{ tools | length }} "
    "tools]{% endif %} | {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

const json& Weather() {
  static const json* const kTool = new json(json::parse(R"({"type": "function", "function": {
      "name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
      "additionalProperties": false}}})"));
  return *kTool;
}

class ChatToolsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/abcd-chat-tools-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    template_file_ = dir_ + "/tools-per-turn.jinja";
    std::ofstream(template_file_) << kToolsPerTurnTemplate;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A server of abc-lm with the template above and `extra` flags.
  std::unique_ptr<testing::ServerProcess> Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--models", kTrainedLmDir, "--chat_template",
                                     "abc-lm=" + template_file_};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::StartServer(std::move(args));
  }

  static json Post(httplib::Client& http, const char* path, const json& body) {
    auto response = http.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(response && response->status == 200)
        << path << " " << (response ? response->body : "no response");
    return response ? json::parse(response->body, nullptr, false) : json();
  }
  static int TokenCount(httplib::Client& http, const std::string& text) {
    return static_cast<int>(
        Post(http, "/tokenize", {{"prompt", text}, {"add_special_tokens", false}})["tokens"]
            .size());
  }

  std::string dir_;
  std::string template_file_;
};

// Turn 1 forces a call (session "new"); turn 2 sends only the tool's result with the session id
// and the tools: the appended tokens are the template's render after the answer with the tools
// (" [1 tools] | tool: 18 C [1 tools] | assistant:"), not without them, and a forced call in the
// continuation comes back as tool_calls. The session holds every token of both turns.
TEST_F(ChatToolsE2eTest, SessionContinuationWithTools) {
  const auto server = Start();
  ASSERT_TRUE(server->started()) << server->Log();
  const auto http = testing::HttpClient(*server);
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const json first = Post(*http, "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                           {"tools", {Weather()}},
                           {"tool_choice", named},
                           {"max_tokens", 100},
                           {"temperature", 0},
                           {"session_id", "new"}});
  ASSERT_EQ(first["choices"][0]["finish_reason"], "tool_calls") << first.dump();
  const json call = first["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const std::string session = first.value("session_id", "");
  ASSERT_FALSE(session.empty()) << first.dump();
  EXPECT_EQ(first["usage"]["prompt_tokens"],  // and bos
            1 + TokenCount(*http, "user: Weather in Paris? [1 tools] | assistant:"));

  const json result = {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "18 C"}};
  const json second = Post(*http, "/v1/chat/completions",
                           {{"messages", {result}},
                            {"tools", {Weather()}},
                            {"tool_choice", named},
                            {"max_tokens", 100},
                            {"temperature", 0},
                            {"session_id", session}});
  EXPECT_EQ(second["session_id"], session);
  EXPECT_EQ(second["usage"]["prompt_tokens"],
            TokenCount(*http, " [1 tools] | tool: 18 C [1 tools] | assistant:"))
      << second.dump();
  ASSERT_EQ(second["choices"][0]["finish_reason"], "tool_calls") << second.dump();
  EXPECT_EQ(second["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  const int total =
      first["usage"]["total_tokens"].get<int>() + second["usage"]["total_tokens"].get<int>();
  const auto info = http->Get("/v1/sessions/" + session);
  ASSERT_TRUE(info && info->status == 200);
  EXPECT_EQ(json::parse(info->body, nullptr, false)["tokens"], total) << info->body;

  // Without tools in the request, the continuation is rendered without them.
  const json plain = Post(*http, "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                           {"max_tokens", 2},
                           {"temperature", 0},
                           {"session_id", "new"}});
  const json next = Post(*http, "/v1/chat/completions",
                         {{"messages", {result}},
                          {"max_tokens", 2},
                          {"temperature", 0},
                          {"session_id", plain.value("session_id", "")}});
  EXPECT_EQ(next["usage"]["prompt_tokens"], TokenCount(*http, " | tool: 18 C | assistant:"))
      << next.dump();
}

// The answer is constrained (response_format) to {"name": "get_weather", "parameters": {...}}:
// Llama-3.1's JSON call. The template names no format, so by default (Hermes) it is content;
// with --tool_call_format llama3_json the same answer is the call.
TEST_F(ChatToolsE2eTest, ToolCallFormatFlagOverridesTheTemplates) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                     {"tools", {Weather()}},
                     {"max_tokens", 200},
                     {"temperature", 0},
                     {"response_format",
                      {{"type", "json_schema"},
                       {"json_schema",
                        {{"name", "call"},
                         {"schema",
                          {{"type", "object"},
                           {"properties",
                            {{"name", {{"const", "get_weather"}}},
                             {"parameters", Weather()["function"]["parameters"]}}},
                           {"required", {"name", "parameters"}},
                           {"additionalProperties", false}}}}}}}};
  std::string content;
  {
    const auto server = Start();
    ASSERT_TRUE(server->started()) << server->Log();
    const json answer = Post(*testing::HttpClient(*server), "/v1/chat/completions", body);
    EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop") << answer.dump();
    EXPECT_FALSE(answer["choices"][0]["message"].contains("tool_calls")) << answer.dump();
    content = answer["choices"][0]["message"]["content"].get<std::string>();
  }
  const json value = json::parse(content, nullptr, false);
  ASSERT_TRUE(value.is_object()) << content;
  for (const std::string flag : {"llama3_json", "abc-lm=llama3_json"}) {
    const auto server = Start({"--tool_call_format", flag});
    ASSERT_TRUE(server->started()) << server->Log();
    const json answer = Post(*testing::HttpClient(*server), "/v1/chat/completions", body);
    const json& choice = answer["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << answer.dump();
    EXPECT_TRUE(choice["message"]["content"].is_null()) << answer.dump();
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << answer.dump();
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(
        json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
        value["parameters"]);
  }
}

// An unknown format and a model that is not served stop the server at load (exit 1), a
// malformed value when the flags are read (exit 2, as every bad flag), with a line naming the
// flag.
TEST_F(ChatToolsE2eTest, UnknownToolCallFormatsAreRefusedNamingTheFlag) {
  struct Case {
    std::string value;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"json", 1, "--tool_call_format must be auto, hermes, llama3_json or mistral, got \"json\""},
      {"abc-lm=xml", 1,
       "--tool_call_format must be auto, hermes, llama3_json or mistral, got \"xml\""},
      {"=hermes", 2, "--tool_call_format must be FORMAT or MODEL=FORMAT"},
      {"nosuch=hermes", 1, "--tool_call_format nosuch=hermes: no language model named 'nosuch'"}};
  for (const auto& [value, exit_code, message] : cases) {
    SCOPED_TRACE(value);
    testing::ExpectRefusedStart({"--models", kTrainedLmDir, "--tool_call_format", value}, exit_code,
                                message, /*exit_timeout_s=*/20);
  }
}

}  // namespace
}  // namespace abcd
