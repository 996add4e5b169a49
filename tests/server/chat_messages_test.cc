// ParseChatMessages (server/chat/chat_messages.h): the messages a template sees, as the OpenAI
// SDK sends them (developer, tool-call turns with content null, tool results).
#include "server/chat/chat_messages.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_template.h"

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
  EXPECT_EQ(call_turn.Find("content")->kind, Value::Kind::kNone);
  const Value* calls = call_turn.Find("tool_calls");
  ASSERT_NE(calls, nullptr);
  ASSERT_EQ(calls->list->size(), 1u);
  EXPECT_EQ((*calls->list)[0].Find("function")->Find("name")->s, "get_weather");
  const Value& result = (*parsed->list)[2];
  EXPECT_EQ(result.Find("role")->s, "tool");
  EXPECT_EQ(result.Find("tool_call_id")->s, "call_1");
  EXPECT_EQ(result.Find("name")->s, "get_weather");
  EXPECT_EQ(result.Find("content")->s, "18 C");
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
}

}  // namespace
}  // namespace abcd::chat
