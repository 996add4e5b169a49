// OpenAI tool calling (server/chat/chat_tools.h): the format a template teaches, calls parsed
// back out of the model's text in each format, text that is not a call kept as content, the
// streaming hold-back, and the request's tools validated naming the field.
#include "server/chat/chat_tools.h"

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/sampling/json_grammar.h"
#include "gtest/gtest.h"
#include "server/chat/chat_template.h"
#include "tests/testing/read_file.h"

namespace abcd::chat {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const std::vector<std::string> kNames = {"get_weather", "add"};

std::string Template(const std::string& name) {
  return testing::ReadFile(std::string(ABCD_FIXTURE_DIR) + "/chat/templates/" + name);
}

TEST(ChatTools, FormatIsTheOneTheTemplateTeaches) {
  EXPECT_EQ(DetectToolCallFormat(Template("hermes-tools.jinja")), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(Template("mistral-v0.3.jinja")), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat(Template("llama3.1-tools.jinja")), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(Template("llama2.jinja")), ToolCallFormat::kHermes);  // default
  auto chat = ChatTemplate::FromText(Template("llama3.1-tools.jinja"), "t", "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ((*chat)->tool_call_format(), ToolCallFormat::kLlama3Json);
}

// --tool_call_format: the four names (auto: the template's own), anything else refused naming
// the flag; Load applies the override whatever the template teaches.
TEST(ChatTools, TheFormatFlagOverridesTheTemplates) {
  EXPECT_EQ(*ParseToolCallFormat("auto", "--f"), std::nullopt);
  EXPECT_EQ(*ParseToolCallFormat("hermes", "--f"), ToolCallFormat::kHermes);
  EXPECT_EQ(*ParseToolCallFormat("llama3_json", "--f"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(*ParseToolCallFormat("mistral", "--f"), ToolCallFormat::kMistral);
  for (const char* bad : {"", "forced", "Hermes", "llama3"}) {
    const auto refused = ParseToolCallFormat(bad, "--tool_call_format");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(
        refused.status().message(),
        absl::StrCat("--tool_call_format must be auto, hermes, llama3_json or mistral, got \"", bad,
                     "\""));
  }
  for (const ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kMistral, ToolCallFormat::kLlama3Json}) {
    EXPECT_EQ(*ParseToolCallFormat(ToolCallFormatName(format), "--f"), format);
  }
  const std::string llama = std::string(ABCD_FIXTURE_DIR) + "/chat/templates/llama3.1-tools.jinja";
  const std::string dir = std::string(ABCD_FIXTURE_DIR) + "/chat/templates";  // no config
  auto own = ChatTemplate::Load(dir, llama);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)->tool_call_format(), ToolCallFormat::kLlama3Json);
  auto overridden = ChatTemplate::Load(dir, llama, ToolCallFormat::kMistral);
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ((*overridden)->tool_call_format(), ToolCallFormat::kMistral);
  EXPECT_EQ((*overridden)->origin(), llama);
  const Value messages = *ParseChatMessages(json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(*(*overridden)->Render(messages, true), *(*own)->Render(messages, true));
  auto builtin = ChatTemplate::Load(dir, "", ToolCallFormat::kLlama3Json);
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  EXPECT_EQ((*builtin)->tool_call_format(), ToolCallFormat::kLlama3Json);
  EXPECT_EQ((*builtin)->origin(), "built-in chat template");
}

TEST(ChatTools, TheTemplateSeesTheTools) {
  auto chat = ChatTemplate::FromText(Template("hermes-tools.jinja"), "t", "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  const Value messages = *ParseChatMessages(json::parse(R"([{"role": "user", "content": "Hi"}])"));
  const ordered_json tools = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  auto with = (*chat)->Render(messages, true, nullptr, FromJson(tools));
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(absl::StrContains(*with, "get_weather")) << *with;
  auto without = (*chat)->Render(messages, true);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_FALSE(absl::StrContains(*without, "get_weather")) << *without;
}

TEST(ChatTools, HermesCallsAndTheTextBeforeThem) {
  const ParsedToolCalls parsed = ParseToolCalls(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, "
      "\"b\": 2}}\n</tool_call>",
      kNames);
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(parsed.calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(parsed.calls[1].name, "add");
  EXPECT_EQ(json::parse(parsed.calls[1].arguments), json({{"a", 1}, {"b", 2}}));
  EXPECT_EQ(parsed.content, "Let me check.\n\n");
}

TEST(ChatTools, MistralCalls) {
  const ParsedToolCalls parsed = ParseToolCalls(
      ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": \"get_weather\", "
      "\"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}]",
      kNames);
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "add");
  EXPECT_EQ(parsed.calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(parsed.calls[1].arguments, "{\"city\": \"Oslo\"}");  // a string: as given
  EXPECT_EQ(parsed.content, "");
}

TEST(ChatTools, Llama3JsonCalls) {
  for (const char* text : {"{\"name\": \"add\", \"parameters\": {\"a\": 1}}",
                           "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}",
                           "  {\"name\": \"add\", \"arguments\": {\"a\": 1}}\n"}) {
    const ParsedToolCalls parsed = ParseToolCalls(ToolCallFormat::kLlama3Json, text, kNames);
    ASSERT_EQ(parsed.calls.size(), 1u) << text;
    EXPECT_EQ(parsed.calls[0].name, "add");
    EXPECT_EQ(parsed.calls[0].arguments, "{\"a\":1}");
    EXPECT_EQ(parsed.content, "");
  }
}

TEST(ChatTools, WhatIsNotACallStaysContent) {
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kHermes, "The weather is fine."},
      {ToolCallFormat::kHermes,  // an unknown name
       "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>"},
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": </tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": 5}\n</tool_call>"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS] not json"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"add\"}"},  // no parameters
      {ToolCallFormat::kLlama3Json, "Sure: {\"name\": \"add\", \"parameters\": {}}"},
      {ToolCallFormat::kForced, "{\"name\": \"add\", \"arguments\": {\"a\""},  // cut short
  };
  for (const auto& [format, text] : cases) {
    const ParsedToolCalls parsed = ParseToolCalls(format, text, kNames);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, text);
  }
  // One good block among bad ones: the good one is a call, the rest content.
  const ParsedToolCalls mixed = ParseToolCalls(
      ToolCallFormat::kHermes,
      "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>A<tool_call>{\"name\": \"add\", "
      "\"arguments\": {}}</tool_call>",
      kNames);
  ASSERT_EQ(mixed.calls.size(), 1u);
  EXPECT_EQ(mixed.content, "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>A");
}

TEST(ChatTools, StreamingHoldsBackOnlyWhatCouldStartACall) {
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kHermes, "Hello <tool"), 6u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kHermes, "Hello <b>"), 9u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kHermes, "a <tool_call>{"), 2u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kMistral, "x [TOOL"), 2u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kLlama3Json, " {\"na"), 0u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kLlama3Json, "<|pyth"), 0u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kLlama3Json, "Hi {"), 4u);
  EXPECT_EQ(SafeContentLength(ToolCallFormat::kForced, "anything"), 0u);

  const auto names = std::make_shared<const std::vector<std::string>>(kNames);
  const std::string call =
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  for (const std::string& output : {"Checking: " + call, std::string("Just <b>text</b> <tool")}) {
    ToolCallStream stream(ToolCallFormat::kHermes, names);
    std::string sent;
    for (char c : output) sent += stream.Add(std::string(1, c));  // one byte at a time
    const ParsedToolCalls end = stream.Finish();
    sent += end.content;
    if (absl::StrContains(output, "</tool_call>")) {
      EXPECT_EQ(sent, "Checking: ");
      ASSERT_EQ(end.calls.size(), 1u);
      EXPECT_EQ(end.calls[0].name, "add");
    } else {
      EXPECT_EQ(sent, output);  // not a call: every byte released, once
      EXPECT_TRUE(end.calls.empty());
    }
  }
}

TEST(ChatTools, StreamingLlamaJsonAndForcedCalls) {
  const auto names = std::make_shared<const std::vector<std::string>>(kNames);
  const auto run = [&](ToolCallFormat format, const std::string& output, std::string* sent) {
    ToolCallStream stream(format, names);
    std::string early;
    for (char c : output) early += stream.Add(std::string(1, c));
    ParsedToolCalls end = stream.Finish();
    *sent = early + end.content;
    return std::make_pair(early, end.calls);
  };
  std::string sent;
  const std::string call = "{\"name\": \"add\", \"parameters\": {\"a\": 2}}";
  auto [early, calls] = run(ToolCallFormat::kLlama3Json, " <|python_tag|>" + call, &sent);
  EXPECT_EQ(early, "");  // held from the start
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, "{\"a\":2}");
  std::tie(early, calls) = run(ToolCallFormat::kLlama3Json, "Sure: " + call, &sent);
  EXPECT_EQ(early, "Sure: " + call);  // released as it came
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(sent, "Sure: " + call);
  std::tie(early, calls) =
      run(ToolCallFormat::kForced, "{\"name\": \"add\", \"arguments\": {}}", &sent);
  EXPECT_EQ(early, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(sent, "");
}

TEST(ChatTools, ToolCallIdsAreOpenAiShaped) {
  const std::string a = NewToolCallId();
  EXPECT_TRUE(absl::StartsWith(a, "call_"));
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, NewToolCallId());
}

absl::StatusOr<ToolRequest> Parse(const std::string& body) {
  return ParseToolRequest(json::parse(body), ordered_json::parse(body));
}

TEST(ChatTools, RequestFieldsAreValidatedNamingThem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"tools": {}})", "tools must be an array"},
      {R"({"tools": [5]})", "tools[0] must be an object"},
      {R"({"tools": [{"type": "code", "function": {"name": "a"}}]})", "tools[0].type must be"},
      {R"({"tools": [{"type": "function"}]})", "tools[0].function must be an object"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "b c"}}]})",
       "tools[1].function.name must be 1 to 64"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "a"}}]})",
       "tools[1].function.name \"a\" is given twice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": []}}]})",
       "tools[0].function.parameters must be"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "description": 1}}]})",
       "tools[0].function.description must be a string"},
      {R"({"tool_choice": "auto"})", "tool_choice auto needs a non-empty tools array"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "x"})",
       "tool_choice must be"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}],
           "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice.function.name \"b\" is not one of the tools"},
      {R"({"parallel_tool_calls": 1})", "parallel_tool_calls must be a boolean"},
  };
  for (const auto& [body, message] : bad) {
    absl::StatusOr<ToolRequest> parsed = Parse(body);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_TRUE(absl::StartsWith(parsed.status().message(), message)) << parsed.status();
  }
}

TEST(ChatTools, RequestChoices) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
          {"type": "object", "properties": {"city": {"type": "string"}, "days": {"$ref":
          "#/$defs/n"}}, "required": ["city"], "$defs": {"n": {"type": "integer"}}}}},
          {"type": "function", "function": {"name": "add"}}])";
  absl::StatusOr<ToolRequest> none = Parse("{}");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->parses_calls());
  EXPECT_TRUE(none->tools.is_null());
  absl::StatusOr<ToolRequest> automatic = Parse("{" + tools + "}");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->choice, "auto");
  EXPECT_TRUE(automatic->parses_calls());
  EXPECT_EQ(automatic->names, kNames);
  EXPECT_EQ(automatic->tools.size(), 2u);
  absl::StatusOr<ToolRequest> off = Parse("{" + tools + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->parses_calls());
  EXPECT_FALSE(off->tools.is_null());  // the template still sees them
  absl::StatusOr<ToolRequest> named =
      Parse("{" + tools +
            R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
          "parallel_tool_calls": false})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->choice, "function");
  EXPECT_EQ(named->forced_index, 0);
  EXPECT_FALSE(named->parallel);
  // The forced call's schema compiles (its $defs moved to the root) and accepts a call.
  auto grammar = JsonGrammar::FromSchema(named->forced_schema, "tool_choice");
  ASSERT_TRUE(grammar.ok()) << grammar.status() << named->forced_schema.dump();
  const std::string call = R"({"name":"get_weather","arguments":{"city":"Rome","days":3}})";
  JsonMatcher matcher(grammar->get());
  ASSERT_TRUE(matcher.Advance(call)) << call;
  EXPECT_TRUE(matcher.accepting());
  JsonMatcher wrong(grammar->get());
  EXPECT_FALSE(wrong.Advance(R"({"name":"add")"));
  absl::StatusOr<ToolRequest> one = Parse(
      R"({"tools": [{"type": "function", "function": {"name": "add"}}], "tool_choice": "required"})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->forced_name, "add");
  EXPECT_EQ(one->forced_schema["properties"]["arguments"], ordered_json({{"type", "object"}}));
}

// "required" over several tools: the output is one call of any of them, its arguments those of
// the tool it names (each tool's $defs and references, "#" included, moved along).
TEST(ChatTools, RequiredWithSeveralToolsIsOneCallOfAny) {
  absl::StatusOr<ToolRequest> required = Parse(R"({"tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}, "days": {"$ref":
        "#/$defs/n"}}, "required": ["city"], "$defs": {"n": {"type": "integer"}}}}},
      {"type": "function", "function": {"name": "add", "parameters":
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}, "rest": {"anyOf":
        [{"$ref": "#"}, {"type": "null"}]}}, "required": ["a"],
         "$defs": {"n": {"type": "number"}}}}},
      {"type": "function", "function": {"name": "ping"}}], "tool_choice": "required"})");
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->choice, "required");
  EXPECT_TRUE(required->parses_calls());
  EXPECT_EQ(required->forced_index, -1);
  auto grammar = JsonGrammar::FromSchema(required->forced_schema, "tool_choice");
  ASSERT_TRUE(grammar.ok()) << grammar.status() << required->forced_schema.dump();
  for (const std::string call :
       {R"({"name":"get_weather","arguments":{"city":"Rome","days":3}})",
        R"({"name":"add","arguments":{"a":1.5,"rest":{"a":2,"rest":null}}})",
        R"({"name":"ping","arguments":{}})"}) {
    JsonMatcher matcher(grammar->get());
    EXPECT_TRUE(matcher.Advance(call)) << call;
    EXPECT_TRUE(matcher.accepting()) << call;
    const ParsedToolCalls parsed = ParseToolCalls(ToolCallFormat::kForced, call, required->names);
    ASSERT_EQ(parsed.calls.size(), 1u) << call;
  }
  for (const std::string bad :
       {R"({"name":"get_weather","arguments":{"city":"Rome","days":1.5)",
        R"({"name":"add","arguments":{"city")", R"({"name":"other")", R"({"arguments":)"}) {
    JsonMatcher matcher(grammar->get());
    EXPECT_FALSE(matcher.Advance(bad)) << bad;
  }
}

}  // namespace
}  // namespace abcd::chat
