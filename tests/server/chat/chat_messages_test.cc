// ParseChatMessages (server/chat/chat_messages.h): the messages a template sees, as the OpenAI
// SDK sends them (developer, tool-call turns with content null, tool results).
#include "server/chat/chat_messages.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_template.h"
#include "tests/testing/read_file.h"

namespace abcd::chat {
namespace {

using nlohmann::json;

TEST(ChatMessages, DeveloperIsSystemUnlessTheTemplateNamesIt) {
  const json messages = json::parse(R"([{"role": "developer", "content": "Be brief."},
                                        {"role": "user", "content": "Hi"}])");
  absl::StatusOr<Value> parsed = ParseChatMessages(messages);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed->list)[0].Find("role")->s, "system");
  EXPECT_EQ((*parsed->list)[0].Find("content")->s, "Be brief.");
  ChatMessageOptions keep;
  keep.keep_developer_role = true;
  parsed = ParseChatMessages(messages, "messages", keep);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed->list)[0].Find("role")->s, "developer");
}

TEST(ChatMessages, ATemplateThatNamesDeveloperKeepsTheRole) {
  auto plain =
      ChatTemplate::FromText("{% for m in messages %}{{ m.role }}{% endfor %}", "t", "<s>", "</s>");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE((*plain)->names_developer());
  auto harmony = ChatTemplate::FromText(
      "{% for m in messages %}{% if m.role == 'developer' %}D{% endif %}{% endfor %}", "t", "<s>",
      "</s>");
  ASSERT_TRUE(harmony.ok()) << harmony.status();
  EXPECT_TRUE((*harmony)->names_developer());
}

TEST(ChatMessages, ToolCallTurnsAndToolResultsReachTheTemplate) {
  const json messages = json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"}])");
  absl::StatusOr<Value> parsed = ParseChatMessages(messages);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Value& call_turn = (*parsed->list)[1];
  EXPECT_EQ(call_turn.Find("content")->s, "");  // null: "" as vLLM passes it
  const Value* calls = call_turn.Find("tool_calls");
  ASSERT_NE(calls, nullptr);
  ASSERT_EQ(calls->list->size(), 1u);
  EXPECT_EQ((*calls->list)[0].Find("function")->Find("name")->s, "get_weather");
  // The arguments' JSON text reaches the template as the mapping it holds.
  const Value* arguments = (*calls->list)[0].Find("function")->Find("arguments");
  ASSERT_EQ(arguments->kind, Value::Kind::kDict);
  EXPECT_EQ(arguments->Find("city")->s, "Paris");
  const Value& result = (*parsed->list)[2];
  EXPECT_EQ(result.Find("role")->s, "tool");
  EXPECT_EQ(result.Find("tool_call_id")->s, "call_1");
  EXPECT_EQ(result.Find("name")->s, "get_weather");
  EXPECT_EQ(result.Find("content")->s, "18 C");
}

// For a template that concatenates the arguments (ChatTemplate::arguments_as_text) they stay
// text, and a mapping a client sent is written as json.dumps writes it; null or "" is {}.
TEST(ChatMessages, ArgumentsAsTextForTemplatesThatNeedIt) {
  const json messages = json::parse(R"([
    {"role": "assistant", "content": "", "tool_calls": [
      {"function": {"name": "a", "arguments": "{\"x\":1}"}},
      {"function": {"name": "b", "arguments": {"y": [1, "z"]}}},
      {"function": {"name": "c", "arguments": null}},
      {"function": {"name": "d", "arguments": ""}}]}])");
  ChatMessageOptions as_text;
  as_text.arguments_as_text = true;
  absl::StatusOr<Value> parsed = ParseChatMessages(messages, "messages", as_text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ValueList& calls = *(*parsed->list)[0].Find("tool_calls")->list;
  EXPECT_EQ(calls[0].Find("function")->Find("arguments")->s, "{\"x\":1}");
  EXPECT_EQ(calls[1].Find("function")->Find("arguments")->s, "{\"y\": [1, \"z\"]}");
  EXPECT_EQ(calls[2].Find("function")->Find("arguments")->s, "{}");
  EXPECT_EQ(calls[3].Find("function")->Find("arguments")->s, "{}");
  parsed = ParseChatMessages(messages);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ValueList& values = *(*parsed->list)[0].Find("tool_calls")->list;
  EXPECT_EQ(values[0].Find("function")->Find("arguments")->Find("x")->i, 1);
  EXPECT_EQ(values[2].Find("function")->Find("arguments")->kind, Value::Kind::kDict);
  // An empty tool_calls list is left out (the template takes its plain-answer path).
  parsed = ParseChatMessages(json::parse(R"([{"role": "assistant", "content": null,
                                            "tool_calls": []}])"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed->list)[0].Find("tool_calls"), nullptr);
}

// Probed at load: functionary v3.1 and DeepSeek-V3.1 render a tool-call turn only with text
// arguments; Llama-3.1 and Qwen2.5 take the mapping.
TEST(ChatMessages, TheTemplateDecidesWhetherArgumentsAreText) {
  const std::string dir = std::string(ABCD_FIXTURE_DIR) + "/chat/templates/";
  for (const auto& [name, as_text] :
       std::vector<std::pair<std::string, bool>>{{"hf-meetkai-functionary-medium-v3.1", true},
                                                 {"hf-deepseek-ai-DeepSeek-V3.1", true},
                                                 {"hf-meta-llama-Llama-3.1-8B-Instruct", false},
                                                 {"hf-Qwen-Qwen2.5-7B-Instruct", false},
                                                 {"chatml", false}}) {
    auto loaded =
        ChatTemplate::FromText(testing::ReadFile(dir + name + ".jinja"), name, "<s>", "</s>");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->arguments_as_text(), as_text) << name;
  }
}

TEST(ChatMessages, BadToolFieldsAreNamed) {
  const struct {
    const char* messages;
    const char* error;
  } cases[] = {
      {R"([{"role": "user", "content": null}])", "messages[0].content is required"},
      {R"([{"role": "user", "content": "x", "tool_calls": []}])",
       "messages[0].tool_calls is allowed on assistant messages only"},
      {R"([{"role": "assistant", "tool_calls": {}}])", "messages[0].tool_calls must be an array"},
      {R"([{"role": "tool", "content": "x", "tool_call_id": 5}])",
       "messages[0].tool_call_id must be a string"},
      {R"([{"role": "user", "content": "x", "name": []}])", "messages[0].name must be a string"},
      {R"([{"role": "robot", "content": "x"}])",
       "messages[0].role must be one of system, user, assistant, tool, developer, got \"robot\""},
      {R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": "}}]}])",
       "messages[0].tool_calls[0].function.arguments must be JSON text (the call's arguments as "
       "a JSON string)"},
      // OpenAI's schema: a tool message names the call it answers; a call's name is a string.
      {R"([{"role": "tool", "content": "18 C"}])",
       "messages[0].tool_call_id is required on tool messages (the id of the call answered)"},
      {R"([{"role": "tool", "content": "18 C", "tool_call_id": null}])",
       "messages[0].tool_call_id is required on tool messages (the id of the call answered)"},
      {R"([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
           {"id": "a", "function": {"name": "f", "arguments": "{}"}},
           {"id": "b", "function": {"name": 5, "arguments": "{}"}}]}])",
       "messages[1].tool_calls[1].function.name must be a string"},
      {R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].function.name must be a string"},
      {R"([{"role": "assistant", "tool_calls": [{"id": 7, "function": {"name": "f"}}]}])",
       "messages[0].tool_calls[0].id must be a string"},
      {R"([{"role": "assistant", "tool_calls": [{"type": "function"}]}])",
       "messages[0].tool_calls[0].function must be an object {\"name\", \"arguments\"}"},
      {R"([{"role": "assistant", "tool_calls": ["get_weather"]}])",
       "messages[0].tool_calls[0] must be an object {\"id\", \"type\", \"function\"}"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Value> parsed = ParseChatMessages(json::parse(c.messages));
    ASSERT_FALSE(parsed.ok()) << c.messages;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), c.error);
  }
}

TEST(ChatMessages, DeepToolCallsAreRefusedNotRecursedInto) {
  std::string deep = std::string(20000, '[') + std::string(20000, ']');
  const json messages = json::parse(
      R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": )" + deep + "}}]}]");
  absl::StatusOr<Value> parsed = ParseChatMessages(messages);
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::StartsWith(parsed.status().message(),
                               "messages[0].tool_calls[0].function.arguments[0][0]"))
      << parsed.status();
  EXPECT_TRUE(absl::EndsWith(parsed.status().message(), "is nested deeper than 32 levels"));
  // The same nesting inside the arguments' JSON text is refused before it is parsed.
  const json text_calls = json::parse(
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": ")" + deep +
      "\"}}]}]");
  parsed = ParseChatMessages(text_calls);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "messages[0].tool_calls[0].function.arguments is nested deeper than 32 levels");
}

}  // namespace
}  // namespace abcd::chat
