// The chat-template renderer (server/chat/jinja_template.h) against Python's jinja2: every
// template in tests/fixtures/chat/templates over every conversation in cases.json must render
// byte for byte as tests/fixtures/chat/make_chat_fixtures.py recorded (or fail with the same
// raise_exception message). Plus load-time refusals, runtime errors and the render limits.
#include "server/chat/jinja_template.h"

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/chat/jinja_builtins.h"
#include "tests/testing/read_file.h"

namespace abcd::chat {
namespace {

const std::string kDir = std::string(ABCD_FIXTURE_DIR) + "/chat";
// make_chat_fixtures.py's strftime_now time: 2024-07-26 12:00:00 UTC.
constexpr int64_t kFixtureTime = 1721995200;

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
  ASSERT_GT(expected.size(), 380u);
  RenderLimits limits;
  limits.fixed_time = kFixtureTime;
  int compared = 0;
  int errors = 0;
  // Each entry is checked on its own (a lambda: an ASSERT ends that entry only), so one run
  // lists every template and conversation that differs.
  for (const auto& entry : expected) {
    [&] {
      const std::string name = entry["template"];
      const std::string case_name = entry["case"];
      SCOPED_TRACE(name + " / " + case_name +
                   (entry["add_generation_prompt"].get<bool>() ? " / generation prompt" : ""));
      absl::StatusOr<JinjaTemplate> parsed =
          JinjaTemplate::Parse(ReadFile(kDir + "/templates/" + name + ".jinja"));
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      const nlohmann::ordered_json* found = nullptr;
      for (const auto& c : cases) {
        if (c["name"] == case_name) found = &c;
      }
      ASSERT_NE(found, nullptr);
      const nlohmann::ordered_json& c = *found;
      ValueDict variables = {
          {"messages", FromJson(c["messages"])},
          {"tools", c.contains("tools") ? FromJson(c["tools"]) : Value::None()},
          {"documents", Value::None()},
          {"add_generation_prompt", Value::Bool(entry["add_generation_prompt"].get<bool>())},
          {"bos_token", Value::String("<s>")},
          {"eos_token", Value::String("</s>")},
          {"date_string", Value::String("26 Jul 2024")}};
      if (c.contains("variables")) {
        for (auto it = c["variables"].begin(); it != c["variables"].end(); ++it) {
          variables.emplace_back(it.key(), FromJson(it.value()));
        }
      }
      absl::StatusOr<std::string> out = parsed->Render(variables, limits);
      if (entry.contains("error")) {
        ASSERT_FALSE(out.ok()) << *out;
        EXPECT_EQ(out.status().message(), entry["error"].get<std::string>());
        EXPECT_TRUE(out.status().GetPayload(kTemplateExceptionPayload).has_value());
        ++errors;
      } else if (entry.contains("error_type")) {  // jinja2 failed (a TypeError, ...): so must we
        ASSERT_FALSE(out.ok()) << entry["error_type"] << ": " << *out;
        EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
        EXPECT_FALSE(out.status().GetPayload(kTemplateExceptionPayload).has_value());
      } else {
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(*out, entry["output"].get<std::string>());
      }
      ++compared;
    }();
  }
  EXPECT_EQ(compared, static_cast<int>(expected.size()));
  EXPECT_GT(errors, 10);  // the alternation checks fired
}

// Every template in the folder is in expected.json (the generator was rerun after adding it),
// over every conversation, and at least 25 of them are published ones (hf-*, whose sources
// templates/README.md lists).
TEST(JinjaTemplate, ExpectedCoversEveryTemplateIncludingTwentyFivePublishedOnes) {
  const auto cases = nlohmann::ordered_json::parse(ReadFile(kDir + "/cases.json"));
  const auto expected = nlohmann::ordered_json::parse(ReadFile(kDir + "/expected.json"));
  std::map<std::string, size_t> renders;  // template -> entries
  for (const auto& entry : expected) ++renders[entry["template"].get<std::string>()];
  size_t files = 0, published = 0;
  for (const auto& file : std::filesystem::directory_iterator(kDir + "/templates")) {
    if (file.path().extension() != ".jinja") continue;
    ++files;
    const std::string name = file.path().stem().string();
    if (absl::StartsWith(name, "hf-")) ++published;
    EXPECT_EQ(renders[name], 2 * cases.size()) << name << ": rerun make_chat_fixtures.py";
  }
  EXPECT_EQ(renders.size(), files);
  EXPECT_GE(published, 25u);
}

// A syntax error fails the parse; a well-formed construct outside the subset parses and fails
// only the render that reaches it (a 400 for that request, never a model that cannot start).
TEST(JinjaTemplate, RefusesSyntaxErrorsAtLoadAndUnsupportedConstructsWhenRendered) {
  const struct {
    const char* source;
    const char* message;
  } kSyntax[] = {
      {"{% if x %}never closed", "missing {% endif %}"},
      {"{{ 'unterminated }}", "line 1: unterminated string literal"},
      {"{{ a + }}", "line 1: expected an expression"},
      {"{% endfor %}", "line 1: unexpected {% endfor %}"},
      {"{{ x", "unclosed tag"},
      {"{% macro %}{% endmacro %}", "line 1: expected a macro name"},
      {"{% set x %}never closed", "missing {% endset %}"},
  };
  for (const auto& c : kSyntax) {
    absl::StatusOr<JinjaTemplate> parsed = JinjaTemplate::Parse(c.source);
    ASSERT_FALSE(parsed.ok()) << c.source;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), c.message))
        << c.source << " -> " << parsed.status().message();
  }
  const struct {
    const char* source;
    const char* message;
  } kUnsupported[] = {
      {"a\n{% include 'x' %}", "chat template line 2: {% include %} is not supported"},
      {"x\n\n{{ messages | wordwrap }}", "line 3: filter 'wordwrap' is not supported"},
      {"{{ x is prime }}", "line 1: test 'is prime' is not supported"},
      {"{{ lipsum() }}", "line 1: function 'lipsum' is not supported"},
      {"{{ 'a'.format(1) }}", "line 1: method '.format()' is not supported"},
      {"{% with a = 1 %}x{% endwith %}", "line 1: {% with %} is not supported"},
      {"{% for x in [1] recursive %}{% endfor %}",
       "line 1: {% for ... recursive %} is not supported"},
  };
  for (const auto& c : kUnsupported) {
    absl::StatusOr<JinjaTemplate> parsed = JinjaTemplate::Parse(
        absl::StrCat("{% if add_generation_prompt %}", c.source, "{% endif %}ok"));
    ASSERT_TRUE(parsed.ok()) << c.source << " -> " << parsed.status();
    EXPECT_EQ(*parsed->Render({{"add_generation_prompt", Value::Bool(false)}}), "ok");
    absl::StatusOr<std::string> out =
        parsed->Render({{"add_generation_prompt", Value::Bool(true)}});
    ASSERT_FALSE(out.ok()) << c.source;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(out.status().message(), c.message))
        << c.source << " -> " << out.status().message();
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
  // Work without output: nested loops capped by work.
  limits = RenderLimits();
  limits.max_work = 100000;
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

// What a render over its budget looks like: RESOURCE_EXHAUSTED naming the budget, quickly, and
// never an allocation of the size asked for.
void ExpectOverBudget(absl::string_view source, ValueDict variables = {},
                      absl::string_view budget = "budget") {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> out = RenderText(source, std::move(variables));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(out.ok()) << source << " rendered " << out->size() << " bytes";
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), budget)) << out.status();
  EXPECT_LT(seconds, 10.0) << source;
}

TEST(JinjaTemplate, PowerWithAHugeExponentIsComputedBySquaring) {
  EXPECT_EQ(*RenderText("{{ 1 ** 10**15 }}"), "1");
  EXPECT_EQ(*RenderText("{{ (-1) ** (10**15 + 1) }}"), "-1");
  EXPECT_EQ(*RenderText("{{ 0 ** 10**15 }},{{ 0 ** 0 }},{{ 3 ** 4 }},{{ 2 ** 62 }}"),
            "0,1,81,4611686018427387904");
  absl::StatusOr<std::string> out = RenderText("{{ 2 ** 10**15 }}");
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "integer overflow")) << out.status();
}

TEST(JinjaTemplate, AllocationsAreChargedBeforeTheyAreMade) {
  // Each of these asked for gigabytes (std::bad_alloc) or ran for minutes before budgets.
  ExpectOverBudget("{% set s = 'a' * 4000000 %}{{ s.replace('a', s) }}", {}, "memory budget");
  ExpectOverBudget("{% set s = 'a' * 4000000 %}{{ s | replace('a', s) }}", {}, "memory budget");
  ExpectOverBudget(
      "{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(40) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
      {}, "budget");
  ExpectOverBudget("{% set s = 'a' * 4000000 %}{% set l = [s] * 100000 %}{{ l }}");
  ExpectOverBudget("{% set s = 'a' * 4000000 %}{{ ([s] * 100000) | tojson }}");
  ExpectOverBudget("{% set s = 'a' * 4000000 %}{{ ([s] * 100000) | join(',') }}");
  ExpectOverBudget("{% set s = 'a' * 1000 %}{{ [s] * 10**12 }}", {}, "memory budget");
  ExpectOverBudget(
      "{% set s = 'a' * 4000000 %}{% for i in range(100000) %}{% set t = s ~ i %}"
      "{% endfor %}");
  ExpectOverBudget(
      "{% set s = 'a b ' * 1000000 %}{% for i in range(100000) %}"
      "{% set t = s.split(' ') %}{% endfor %}");
  ExpectOverBudget(
      "{% set s = 'a' * 4000000 %}{% for i in range(100000) %}"
      "{% set t = s + 'b' %}{% endfor %}");
  ExpectOverBudget("{% set s = 'a' * 4000000 %}{% for c in s %}{% endfor %}");
  ExpectOverBudget(
      "{% set s = 'a' * 3000000 %}{% for i in range(100000) %}"
      "{% if s[1:] == s[:-1] %}{% endif %}{% endfor %}");
  // Searching is linear: a needle of 2M 'a's then 'b' in 4M 'a's would be 8e12 steps naively.
  ExpectOverBudget(
      "{% set h = 'a' * 4000000 %}{% set n = 'a' * 2000000 ~ 'b' %}"
      "{% for i in range(100000) %}{% if n in h %}{% endif %}{% endfor %}");
}

TEST(JinjaTemplate, NamespaceAppendOverALongConversationIsLinear) {
  ValueList many;
  for (int k = 0; k < 14000; ++k) {
    many.push_back(Value::Dict({{"role", Value::String(k % 2 == 0 ? "user" : "assistant")},
                                {"content", Value::String("hello")}}));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> out = RenderText(
      "{% set ns = namespace(roles=[], text='') %}{% for m in messages %}"
      "{% set ns.roles = ns.roles + [m.role] %}{% set ns.text = ns.text + m.content %}"
      "{% endfor %}{{ ns.roles | length }} {{ ns.text | length }} {{ ns.roles[-1] }}",
      {{"messages", Value::List(many)}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "14000 70000 assistant");
  EXPECT_LT(seconds, 1.0);
  // The append leaves other references to the list as they were.
  EXPECT_EQ(*RenderText("{% set ns = namespace(l=[1]) %}{% set keep = ns.l %}"
                        "{% set ns.l = ns.l + [2] %}{{ keep }} {{ ns.l }}"),
            "[1] [1, 2]");
  EXPECT_EQ(*RenderText("{% set ns = namespace(l=[1]) %}{% set ns.l = ns.l + ns.l %}"
                        "{% set ns.l = ns.l + ns.l %}{{ ns.l }}"),
            "[1, 1, 1, 1]");
  EXPECT_EQ(*RenderText("{% set ns = namespace(s='ab') %}{% set ns.s = ns.s + 'c' %}"
                        "{% set t = ns.s %}{% set ns.s = ns.s + 'd' %}{{ t }} {{ ns.s }}"),
            "abc abcd");
}

TEST(JinjaTemplate, ARealTemplateOverAThousandLongMessagesRendersWithinBudget) {
  ValueList many;
  for (int k = 0; k < 1000; ++k) {
    many.push_back(Value::Dict({{"role", Value::String(k % 2 == 0 ? "user" : "assistant")},
                                {"content", Value::String(std::string(4000, 'a' + k % 26))}}));
  }
  absl::StatusOr<JinjaTemplate> parsed =
      JinjaTemplate::Parse(ReadFile(kDir + "/templates/llama3.jinja"));
  ASSERT_TRUE(parsed.ok());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> out = parsed->Render({{"messages", Value::List(many)},
                                                    {"add_generation_prompt", Value::Bool(true)},
                                                    {"bos_token", Value::String("<s>")}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_GT(out->size(), 4000000u);
  EXPECT_LT(seconds, 0.5);
}

TEST(JinjaTemplate, TheCancellationHookStopsALongRender) {
  std::atomic<int> polls = 0;
  RenderLimits limits;
  limits.max_work = INT64_MAX / 4;
  limits.cancelled = [&] { return ++polls > 10; };
  absl::StatusOr<std::string> out =
      RenderText("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
                 {}, limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled) << out.status();
  EXPECT_EQ(out.status().message(), "the chat template's render was cancelled");
  EXPECT_EQ(polls.load(), 11);
  // A render that finishes never sees the hook fire.
  limits.cancelled = [] { return false; };
  EXPECT_EQ(*RenderText("{% for a in range(10000) %}{% endfor %}ok", {}, limits), "ok");
}

// Each expected string is python3-jinja2 3.1.6's render (as make_chat_fixtures.py configures it).
TEST(JinjaTemplate, MacrosCallersAndBlocksRenderAsJinja2) {
  const struct {
    const char* source;
    const char* expected;
  } kCases[] = {
      // A macro sees top-level variables as they are when it is called, not the caller's loop.
      {"{% set a = 5 %}{% macro m() %}{{ a }}{% endmacro %}{% set a = 6 %}{{ m() }}", "6"},
      {"{% macro m() %}{{ a }}{% endmacro %}{% for a in [1] %}{{ m() }}{% endfor %}", ""},
      {"{% macro m(p, q=p * 2) %}{{ p }},{{ q }}{% endmacro %}{{ m(1) }}|{{ m(1, q=5) }}",
       "1,2|1,5"},
      {"{% macro m(a) %}{{ a }}{{ varargs }}{% endmacro %}{{ m(1,2,3) }}", "1(2, 3)"},
      {"{% macro m(p) %}{{ p }}{{ kwargs }}{% endmacro %}{{ m(1, z=5) }}", "1{'z': 5}"},
      {"{% set x = 3 %}{% macro m() %}{% set x = 4 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}", "43"},
      // caller() runs in the scope of the {% call %} (the loop's i), with its own parameters.
      {"{% macro m() %}[{{ caller(7) }}]{% endmacro %}{% for i in [1,2] %}"
       "{% call(v) m() %}{{ i }}{{ v }}{% endcall %}{% endfor %}",
       "[17][27]"},
      {"{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}{% call m() %}x{% endcall %}",
       "FalseTrue"},
      {"{% macro t(s) %}{% if s.type == 'array' %}list[{{ t(s['items']) }}]{% else %}"
       "{{ s.type }}{% endif %}{% endmacro %}"
       "{{ t({'type': 'array', 'items': {'type': 'array', 'items': {'type': 'int'}}}) }}",
       "list[list[int]]"},
      {"{% for i in [1,2] %}{% set t %}{{ i * 2 }}{% endset %}{{ t }}{% endfor %}[{{ t }}]",
       "24[]"},
      {"{% filter upper %}a{{ 1 }}b{% endfilter %}", "A1B"},
      {"{{ {'b':1,'A':2,'c':0}|dictsort }}{{ {'b':1,'A':2,'c':0}|dictsort(by='value') }}",
       "[('A', 2), ('b', 1), ('c', 0)][('c', 0), ('b', 1), ('A', 2)]"},
      {"{{ ['b','A','a','c']|unique|list }}{{ ['b','A','a','c']|sort }}",
       "['b', 'A', 'c']['A', 'a', 'b', 'c']"},
      {"{{ [1,2,None]|reject('none')|list }}{{ ['a','b','ci']|reject('equalto','ci')|join(', ') }}",
       "[1, 2]a, b"},
      {"{{ nope | length }}{{ nope | upper }}{{ nope | join }}|{{ nope | list }}", "0|[]"},
      {"{{ strftime_now is defined }}{{ raise_exception is defined }}", "TrueTrue"},
      // transformers' tojson passes separators and sort_keys to json.dumps.
      {"{{ {'b': [1, 2], 'a': {'y': 1, 'x': none}} | tojson(separators=(',', ':')) }}|"
       "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}",
       "{\"b\":[1,2],\"a\":{\"y\":1,\"x\":null}}|{\"a\": 2, \"b\": 1}"},
      // Integer dict keys (Seed-OSS's {512: 128}) stay distinct from string ones.
      {"{% set d = {0: 'a', 512: 'b', '0': 'c'} %}{{ d[512] }}{{ d[0] }}{{ d['0'] }}"
       "{{ 512 in d }}{{ d.get(0) }}|{{ d }}|{{ d | tojson }}|{{ d | items | list }}",
       "bacTruea|{0: 'a', 512: 'b', '0': 'c'}|{\"0\": \"a\", \"512\": \"b\", \"0\": \"c\"}|"
       "[(0, 'a'), (512, 'b'), ('0', 'c')]"},
      {"{% for k, v in {16: 1, 2: 0} | dictsort %}{{ k + 1 }},{% endfor %}{{ {1: 2}[3] is defined "
       "}}",
       "3,17,False"},
      // safe/escape give Markup: `+` with a plain string escapes it (functionary v3.1); ~ does not.
      {"{{ 'a<' | safe + '<b>' }}|{{ '<b>' + 'a<' | safe }}|{{ ('x' | safe + {'k': '\"'} | tojson) "
       "}}|"
       "{{ 'a<' | safe ~ '<b>' }}|{{ '<' | e | e }}",
       "a<&lt;b&gt;|&lt;b&gt;a<|x{&#34;k&#34;: &#34;\\&#34;&#34;}|a<<b>|&lt;"},
      {"{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb\\n\\nc' | indent(2, true) }}|"
       "{{ 'a\\r\\nb' | indent('> ', blank=true) }}|{{ '' | indent(first=true) }}|",
       "a\n    b\n\n    c|  a\n  b\n\n  c|a\n> b|    |"},
      // jinja2's select/reject/map start with `if value:`: none gives nothing.
      {"{{ none | selectattr('type', 'equalto', 'x') | list }}{{ none | map(attribute='a') | list "
       "}}"
       "{{ none | reject | list }}",
       "[][][]"},
  };
  for (const auto& c : kCases) {
    absl::StatusOr<std::string> out = RenderText(c.source);
    ASSERT_TRUE(out.ok()) << c.source << " -> " << out.status();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
  // A macro recursing without end stops at the depth limit.
  absl::StatusOr<std::string> out = RenderText("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}");
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "macro calls nested deeper than 64"))
      << out.status();
  // Deep blocks and expressions inside a recursive macro: the renderer's recursion is bounded
  // (this overflowed an 8 MiB stack before).
  std::string deep = "{% macro m(n) %}";
  for (int k = 0; k < 60; ++k) deep += "{% if true %}";
  deep += "{{ " + std::string(55, '(') + "m(n - 1) if n > 0 else 1" + std::string(55, ')') + " }}";
  for (int k = 0; k < 60; ++k) deep += "{% endif %}";
  out = RenderText(deep + "{% endmacro %}{{ m(100) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(),
                                "nests blocks, expressions and macro "
                                "calls deeper than 400"))
      << out.status();
  out = RenderText("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "takes not more than 1 argument(s)"));
}

// transformers' strftime_now: datetime.now().strftime(format), the server's local time.
TEST(JinjaTemplate, StrftimeNowIsTheLocalTime) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char expected[64];
  std::strftime(expected, sizeof(expected), "%d %b %Y", &local);
  absl::StatusOr<std::string> out = RenderText("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, expected);  // (fails only if the day changes between the two calls)
  EXPECT_FALSE(RenderText("{{ strftime_now(1) }}").ok());
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
