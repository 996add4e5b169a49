// The chat-template renderer (server/chat/jinja_template.h) against Python's jinja2: every
// template in tests/fixtures/chat/templates over every conversation in cases.json must render
// byte for byte as tests/fixtures/chat/make_chat_fixtures.py recorded (or fail with the same
// raise_exception message). Plus load-time refusals, runtime errors and the render limits.
#include "server/chat/jinja_template.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/chat/jinja_builtins.h"
#include "tests/testing/read_file.h"

namespace abcd::chat {
namespace {

const std::string kDir = std::string(ABCD_FIXTURE_DIR) + "/chat";

using testing::ReadFile;

absl::StatusOr<std::string> RenderText(absl::string_view source, ValueDict variables = {},
                                       RenderLimits limits = {}) {
  absl::StatusOr<JinjaTemplate> parsed = JinjaTemplate::Parse(source);
  if (!parsed.ok()) return parsed.status();
  return parsed->Render(variables, limits);
}

TEST(JinjaTemplate, MatchesJinja2OnEveryFixture) {
  const auto cases = nlohmann::ordered_json::parse(ReadFile(kDir + "/cases.json"));
  const auto expected = nlohmann::ordered_json::parse(ReadFile(kDir + "/expected.json"));
  ASSERT_GT(expected.size(), 200u);
  int compared = 0;
  int errors = 0;
  for (const auto& entry : expected) {
    const std::string name = entry["template"];
    const std::string case_name = entry["case"];
    SCOPED_TRACE(name + " / " + case_name +
                 (entry["add_generation_prompt"].get<bool>() ? " / generation prompt" : ""));
    absl::StatusOr<JinjaTemplate> parsed =
        JinjaTemplate::Parse(ReadFile(kDir + "/templates/" + name + ".jinja"));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const nlohmann::ordered_json* messages = nullptr;
    for (const auto& c : cases) {
      if (c["name"] == case_name) messages = &c["messages"];
    }
    ASSERT_NE(messages, nullptr);
    const ValueDict variables = {
        {"messages", FromJson(*messages)},
        {"tools", Value::None()},
        {"documents", Value::None()},
        {"add_generation_prompt", Value::Bool(entry["add_generation_prompt"].get<bool>())},
        {"bos_token", Value::String("<s>")},
        {"eos_token", Value::String("</s>")}};
    absl::StatusOr<std::string> out = parsed->Render(variables);
    if (entry.contains("error")) {
      ASSERT_FALSE(out.ok()) << *out;
      EXPECT_EQ(out.status().message(), entry["error"].get<std::string>());
      EXPECT_TRUE(out.status().GetPayload(kTemplateExceptionPayload).has_value());
      ++errors;
    } else {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, entry["output"].get<std::string>());
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(expected.size()));
  EXPECT_GT(errors, 10);  // the alternation checks fired
}

TEST(JinjaTemplate, RefusesUnsupportedConstructsAtLoadNamingThemAndTheirLine) {
  const struct {
    const char* source;
    const char* message;
  } kCases[] = {
      {"a\n{% macro m() %}x{% endmacro %}", "chat template line 2: {% macro %} is not supported"},
      {"{% include 'x' %}", "line 1: {% include %} is not supported"},
      {"x\n\n{{ messages | sort }}", "line 3: filter 'sort' is not supported"},
      {"{{ x is prime }}", "line 1: test 'is prime' is not supported"},
      {"{{ lipsum() }}", "line 1: function 'lipsum' is not supported"},
      {"{{ 'a'.format(1) }}", "line 1: method '.format()' is not supported"},
      {"{% set x %}body{% endset %}", "line 1: {% set %} blocks ({% endset %}) are not supported"},
      {"{% for x in y recursive %}{% endfor %}",
       "line 1: {% for ... recursive %} is not supported"},
      {"{% if x %}never closed", "missing {% endif %}"},
      {"{{ 'unterminated }}", "line 1: unterminated string literal"},
      {"{{ a + }}", "line 1: expected an expression"},
      {"{% endfor %}", "line 1: unexpected {% endfor %}"},
      {"{{ x", "unclosed tag"},
  };
  for (const auto& c : kCases) {
    absl::StatusOr<JinjaTemplate> parsed = JinjaTemplate::Parse(c.source);
    ASSERT_FALSE(parsed.ok()) << c.source;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), c.message))
        << c.source << " -> " << parsed.status().message();
  }
}

TEST(JinjaTemplate, RefusesNestingBeyondTheLimit) {
  std::string deep_blocks;
  for (int k = 0; k < 100; ++k) deep_blocks += "{% if true %}";
  for (int k = 0; k < 100; ++k) deep_blocks += "{% endif %}";
  absl::StatusOr<JinjaTemplate> blocks = JinjaTemplate::Parse(deep_blocks);
  ASSERT_FALSE(blocks.ok());
  EXPECT_TRUE(absl::StrContains(blocks.status().message(), "nested too deeply"));
  const std::string deep_expr = "{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}";
  absl::StatusOr<JinjaTemplate> expr = JinjaTemplate::Parse(deep_expr);
  ASSERT_FALSE(expr.ok());
  EXPECT_TRUE(absl::StrContains(expr.status().message(), "nested too deeply"));
  std::string nots = "{{ ";
  for (int k = 0; k < 500; ++k) nots += "not ";
  absl::StatusOr<JinjaTemplate> many_nots = JinjaTemplate::Parse(nots + "x }}");
  ASSERT_FALSE(many_nots.ok());
}

TEST(JinjaTemplate, RuntimeErrorsNameTheLine) {
  absl::StatusOr<std::string> out = RenderText("ok\n{{ 'a' + 1 }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "chat template line 2: can only concatenate str (not \"int\") to str");
  out = RenderText("{{ nothing.attr }}");
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "'nothing' is undefined"));
  out = RenderText("{{ raise_exception('Roles must alternate') }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "Roles must alternate");
  EXPECT_TRUE(out.status().GetPayload(kTemplateExceptionPayload).has_value());
}

TEST(JinjaTemplate, RenderIsBounded) {
  // A loop over a long list of messages: output capped.
  ValueList many(1000, Value::Dict({{"content", Value::String(std::string(1000, 'x'))}}));
  RenderLimits limits;
  limits.max_output_bytes = 100000;
  absl::StatusOr<std::string> out = RenderText("{% for m in messages %}{{ m.content }}{% endfor %}",
                                               {{"messages", Value::List(many)}}, limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  // Work without output: nested loops capped by steps.
  limits = RenderLimits();
  limits.max_steps = 100000;
  out = RenderText("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}",
                   {}, limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  // Doubling a string cannot allocate past the cap.
  out = RenderText("{{ 'x' * 1000000000000 }}");
  ASSERT_FALSE(out.ok());
  out = RenderText("{{ range(1000000000) | length }}");
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "range()"));
}

TEST(JinjaTemplate, ScopingFollowsJinja2) {
  // A set inside a loop lasts one iteration; a namespace carries values out.
  EXPECT_EQ(*RenderText("{% set x = 1 %}{% for m in [1, 2] %}{{ x }}{% set x = m * 10 %}{{ x }},"
                        "{% endfor %}{{ x }}"),
            "110,120,1");
  EXPECT_EQ(*RenderText("{% set ns = namespace(n=0) %}{% for m in [1, 2, 3] %}"
                        "{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(*RenderText("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
}

}  // namespace
}  // namespace abcd::chat
