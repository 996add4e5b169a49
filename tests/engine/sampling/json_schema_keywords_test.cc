// JSON Schema keywords libraries emit (issue 45 item 4): anyOf/oneOf, type arrays, pydantic's
// Optional, additionalProperties as a schema, propertyNames, minLength/maxLength (code points),
// format, pattern, minimum/maximum/exclusive bounds. Per keyword: texts the matcher accepts and
// refuses; schemas in the shapes zod's z.toJSONSchema and pydantic's model_json_schema emit, and
// those the npm zod itself writes (tests/fixtures/json_schema/zod.json); and 300 seeded random
// schemas over these keywords sampled with random logits through the token mask (then finished
// as a model ending its answer would: Generate), every output complete and checked by an
// independent validator (below: nlohmann, std::regex for patterns, hand-written format checks)
// and, where node and the pinned ajv are installed (tests/engine/sampling/ajv/npm-ci.sh), by ajv
// with ajv-formats too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/sampling/json_grammar.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/token_mask.h"
#include "nlohmann/json.hpp"
#include "tests/engine/sampling/json_schema_validator.h"

namespace abcd {
namespace json_schema_keywords_test {  // named: the tests build as one unity source
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::shared_ptr<const JsonGrammar> Compile(const std::string& text) {
  auto grammar = JsonGrammar::FromSchema(ordered_json::parse(text), "schema");
  EXPECT_TRUE(grammar.ok()) << grammar.status() << " " << text;
  return grammar.ok() ? *grammar : nullptr;
}

bool Accepts(const JsonGrammar& grammar, const std::string& text) {
  JsonMatcher matcher(&grammar);
  return matcher.Advance(text) && matcher.accepting();
}

std::string Refusal(const std::string& text) {
  auto grammar = JsonGrammar::FromSchema(ordered_json::parse(text), "schema");
  return grammar.ok() ? "ok" : std::string(grammar.status().message());
}

void ExpectTexts(const std::string& schema, const std::vector<std::string>& ok,
                 const std::vector<std::string>& bad) {
  const auto g = Compile(schema);
  ASSERT_NE(g, nullptr);
  for (const std::string& text : ok) EXPECT_TRUE(Accepts(*g, text)) << schema << " " << text;
  for (const std::string& text : bad) EXPECT_FALSE(Accepts(*g, text)) << schema << " " << text;
}

TEST(JsonSchemaKeywords, AnyOfOneOfAndTypeArrays) {
  // pydantic's Optional[int] and zod's z.union([z.string(), z.number()]).
  ExpectTexts(R"({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null})",
              {"3", "-12", "null"}, {"\"3\"", "1.5", "nul"});
  ExpectTexts(R"({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]})",
              {"\"a\"", "1.5", "true"}, {"null", "[]"});
  // enum/const alternatives are one set of values; oneOf of distinct consts is exact.
  ExpectTexts(R"({"oneOf": [{"const": "a"}, {"const": "b"}, {"enum": [1, 2]}]})",
              {"\"a\"", "\"b\"", "2"}, {"\"c\"", "3"});
  // Union[int, float]: the plain number covers the integers.
  ExpectTexts(R"({"anyOf": [{"type": "integer"}, {"type": "number"}]})", {"3", "2.5"}, {"\"\""});
  ExpectTexts(R"({"type": ["integer", "string", "null"], "minimum": 1, "maxLength": 1})",
              {"1", "\"x\"", "null"}, {"0", "\"xy\""});
  // anyOf with any value is any value; a plain string covers the other strings.
  ExpectTexts(R"({"anyOf": [{}, {"type": "null"}]})", {"null", "[1]", "\"x\""}, {"nul"});
  ExpectTexts(R"({"anyOf": [{"type": "number"}, {"const": 5}, {"type": "integer", "maximum": 0}]})",
              {"5", "2.5", "-7"}, {"\"5\""});
  ExpectTexts(
      R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "string"}, {"enum": ["x", 1]}]})",
      {"\"long\"", "1"}, {"2"});
  EXPECT_EQ(Refusal(R"({"anyOf": [{"type": "object"}, {"type": "object", "properties": {}}]})"),
            "schema: alternatives that can start with the same character ('{') are not "
            "supported (anyOf/oneOf/type alternatives must be of different JSON types, "
            "enum/const values, or objects that one required property's enum/const values tell "
            "apart)");
  EXPECT_EQ(Refusal(R"({"oneOf": [{"const": "a"}, {"enum": ["b", "a"]}]})"),
            "schema.oneOf[1]: \"a\" also matches an earlier alternative of oneOf");
  EXPECT_EQ(Refusal(R"({"anyOf": [{"type": "string"}], "type": "string"})"),
            "schema.type next to anyOf is not supported");
  EXPECT_EQ(Refusal(R"({"anyOf": []})"), "schema.anyOf must be a non-empty array of schemas");
  EXPECT_EQ(Refusal(R"({"properties": {"a": {"anyOf": [{"maxLength": 3}, {"const": "x"}]}}})"),
            "schema.properties.a: alternatives that can start with the same character ('\"') are "
            "not supported (anyOf/oneOf/type alternatives must be of different JSON types, "
            "enum/const values, or objects that one required property's enum/const values tell "
            "apart)");
}

// Object alternatives told apart by a required property's enum/const values (pydantic's
// discriminated unions, tool_choice "required" over several tools) are one automaton that
// writes that property first and continues as the alternative its value names.
TEST(JsonSchemaKeywords, TaggedObjectUnions) {
  const std::string pets = R"({"$defs": {
      "Cat": {"properties": {"pet_type": {"const": "cat", "title": "Pet Type", "type": "string"},
                             "meows": {"title": "Meows", "type": "integer"}},
              "required": ["pet_type", "meows"], "title": "Cat", "type": "object"},
      "Dog": {"properties": {"barks": {"title": "Barks", "type": "number"},
                             "pet_type": {"const": "dog", "title": "Pet Type", "type": "string"}},
              "required": ["barks", "pet_type"], "title": "Dog", "type": "object"}},
    "properties": {"pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat",
                                                         "dog": "#/$defs/Dog"},
                                             "propertyName": "pet_type"},
                           "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]},
                   "n": {"type": "integer"}},
    "required": ["pet", "n"], "type": "object"})";
  ExpectTexts(pets,
              {R"({"pet":{"pet_type":"cat","meows":3},"n":1})",
               R"({"pet": {"pet_type": "dog", "barks": 2.5}, "n": 1})"},
              {R"({"pet":{"pet_type":"cat","barks":2},"n":1})",
               R"({"pet":{"pet_type":"dog","meows":3},"n":1})", R"({"pet":{"pet_type":"cow")",
               R"({"pet":{"barks":2.5,"pet_type":"dog"},"n":1})",  // the tag comes first
               R"({"pet":{"pet_type":"cat"},"n":1})"});
  // tool_choice "required" over two tools; a third alternative of another type stays apart.
  ExpectTexts(R"({"anyOf": [
      {"type": "object", "properties": {"name": {"const": "get_weather"},
       "arguments": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}, "required": ["name", "arguments"]},
      {"type": "object", "properties": {"name": {"enum": ["search", "find"]},
       "arguments": {"type": "object", "properties": {"q": {"type": "integer"}},
                     "required": ["q"]}}, "required": ["name", "arguments"]},
      {"type": "null"}]})",
              {R"({"name":"get_weather","arguments":{"city":"Oslo"}})",
               R"({"name":"find","arguments":{"q":3}})", "null"},
              {R"({"name":"get_weather","arguments":{"q":3}})",
               R"({"name":"search","arguments":{"city":"x"}})", R"({"name":"other")",
               R"({"arguments":{"q":3},"name":"find"})"});
  // A tag value two alternatives share, or no required tag, leaves them refused.
  EXPECT_TRUE(absl::StrContains(
      Refusal(R"({"oneOf": [{"properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]},
                            {"properties": {"k": {"const": "b"}}, "required": ["k"]}]})"),
      "schema: alternatives that can start with the same character ('{')"));
  EXPECT_TRUE(
      absl::StrContains(Refusal(R"({"oneOf": [{"properties": {"k": {"const": "a"}}},
                            {"properties": {"k": {"const": "b"}}, "required": ["k"]}]})"),
                        "schema: alternatives that can start with the same character ('{')"));
}

TEST(JsonSchemaKeywords, ObjectsWithAdditionalPropertiesSchemasAndPropertyNames) {
  // zod's z.record(z.string(), z.number().int()).
  ExpectTexts(R"({"type": "object", "propertyNames": {"type": "string"},
                  "additionalProperties": {"type": "integer", "minimum": 0}})",
              {"{}", R"({"a":1,"b":0})"}, {R"({"a":-1})", R"({"a":"x"})"});
  ExpectTexts(R"({"type": "object", "propertyNames": {"enum": ["x", "y"]},
                  "additionalProperties": {"type": "boolean"}})",
              {R"({"x":true,"y":false})"}, {R"({"z":true})"});
  ExpectTexts(R"({"type": "object", "propertyNames": {"maxLength": 2}})", {R"({"ab":[1]})"},
              {R"({"abc":1})"});
  // With properties, only those are generated (any additionalProperties schema allows that).
  ExpectTexts(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                  "additionalProperties": {"type": "string"}})",
              {R"({"a":1})", "{}"}, {R"({"b":"x"})"});
  EXPECT_EQ(Refusal(R"({"type": "object", "propertyNames": {"type": "integer"}})"),
            "schema.propertyNames must be a string schema (type string, or string enum/const)");
}

TEST(JsonSchemaKeywords, StringLengthsCountCodePoints) {
  ExpectTexts(R"({"type": "string", "minLength": 2, "maxLength": 3})",
              {"\"ab\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"\\n\\u00e9a\""},
              {"\"a\"", "\"abcd\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", "\"\\n\\n\\n\\n\""});
  ExpectTexts(R"({"type": "string", "maxLength": 0})", {"\"\""}, {"\"a\""});
  EXPECT_EQ(Refusal(R"({"type": "string", "minLength": 3, "maxLength": 2})"),
            "schema.minLength exceeds maxLength");
  EXPECT_EQ(Refusal(R"({"type": "string", "maxLength": -1})"),
            "schema.maxLength must be an integer in [0, 1048576]");
  // A string that reached maxLength takes only the closing quote.
  const auto g = Compile(R"({"type": "string", "maxLength": 2})");
  JsonMatcher m(g.get());
  ASSERT_TRUE(m.Advance("\"xy"));
  EXPECT_FALSE(m.InStringBody());  // the count changes: the trie walk must copy the state
  JsonMatcher more = m;
  EXPECT_FALSE(more.Advance("z"));
  EXPECT_TRUE(m.Advance("\""));
}

TEST(JsonSchemaKeywords, Formats) {
  ExpectTexts(R"({"type": "string", "format": "date"})", {"\"2024-02-28\"", "\"1999-12-31\""},
              {"\"2024-02-30\"", "\"2024-13-01\"", "\"2024-1-01\"", "\"2024-04-31\""});
  ExpectTexts(R"({"type": "string", "format": "time"})",
              {"\"23:59:59Z\"", "\"08:30:00.125+05:30\""}, {"\"24:00:00Z\"", "\"08:30:00\""});
  ExpectTexts(R"({"format": "date-time"})", {"\"2024-06-11T08:30:00Z\""},
              {"\"2024-06-11 08:30:00Z\"", "1"});
  ExpectTexts(R"({"type": "string", "format": "uuid"})",
              {"\"123e4567-e89b-12d3-a456-426614174000\""},
              {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400\""});
  ExpectTexts(R"({"type": "string", "format": "ipv4"})", {"\"192.168.0.1\"", "\"255.0.0.0\""},
              {"\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\""});
  ExpectTexts(R"({"type": "string", "format": "email"})", {"\"ann.lee@mail.example.org\""},
              {"\"ann\"", "\"@example.org\"", "\"a@b\"", "\"a b@c.org\""});
  // With a length: the automaton only goes where a string of the right length can end.
  ExpectTexts(R"({"type": "string", "format": "email", "maxLength": 8})", {"\"a@bc.de\""},
              {"\"ab@cd.efg\""});
  EXPECT_EQ(Refusal(R"({"type": "string", "format": "uuid", "minLength": 37})"),
            "schema: no string of its format/pattern has a length within minLength/maxLength");
}

TEST(JsonSchemaKeywords, Patterns) {
  ExpectTexts(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"})", {"\"AB-123\""},
              {"\"AB-12\"", "\"ab-123\"", "\"xAB-123\""});
  // Unanchored: a search, as JSON Schema's pattern is.
  ExpectTexts(R"({"type": "string", "pattern": "b+c"})", {"\"abbcd\"", "\"bc\""}, {"\"ac\""});
  ExpectTexts(R"({"type": "string", "pattern": "^(?:ab|cd)*$", "maxLength": 4})",
              {"\"\"", "\"abcd\""}, {"\"abc\"", "\"ababab\""});
  ExpectTexts(R"({"type": "string", "pattern": "^[^a-y]?x$"})", {"\"x\"", "\"zx\""}, {"\"ax\""});
  // Characters that would need an escape in JSON are never generated (a subset).
  ExpectTexts(R"({"type": "string", "pattern": "^a.?$"})", {"\"a\"", "\"a.\""},
              {"\"a\\\"\"", "\"a\\\\\""});
  // Negative lookaheads right after '^' (zod 4's email pattern).
  ExpectTexts(
      R"js({"type": "string", "pattern": "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"})js",
      {"\"a.b@c.de\"", "\"x@y-z.org\""}, {"\".a@c.de\"", "\"a..b@c.de\"", "\"a.@c\""});
  EXPECT_EQ(Refusal(R"({"type": "string", "pattern": "^(?!a"})"),
            "schema.pattern: an unclosed lookahead at offset 5 is not supported");
  EXPECT_EQ(Refusal(R"({"type": "string", "pattern": "(a)\\1"})"),
            "schema.pattern: the escape \\1 at offset 4 is not supported");
  EXPECT_EQ(Refusal(R"({"type": "string", "pattern": "a$b"})"),
            "schema.pattern: an anchor not at the pattern's start or end at offset 1 is not "
            "supported");
  EXPECT_EQ(Refusal(R"({"type": "string", "pattern": "^\"$"})"),
            "schema.pattern: no string of printable ASCII characters other than '\"' and '\\' "
            "matches it");
  EXPECT_EQ(Refusal(R"({"type": "string", "format": "uuid", "pattern": "^x"})"),
            "schema: no string satisfies both its format and its pattern");
}

TEST(JsonSchemaKeywords, IntegerBoundsAreExact) {
  ExpectTexts(R"({"type": "integer", "minimum": -5, "maximum": 120})",
              {"-5", "0", "-0", "7", "99", "120"}, {"-6", "121", "130", "1000", "-50"});
  ExpectTexts(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10.5})",
              {"1", "10"}, {"0", "11", "-1"});
  ExpectTexts(R"({"type": "integer", "minimum": 1000000000000})", {"1000000000000"},
              {"999999999999", "-1"});
  // A prefix that cannot grow into the range is refused at its first impossible digit.
  const auto g = Compile(R"({"type": "integer", "minimum": 100, "maximum": 120})");
  JsonMatcher m(g.get());
  EXPECT_TRUE(m.Advance("1"));
  EXPECT_FALSE(JsonMatcher(m).Advance('3'));
  EXPECT_TRUE(m.Advance("1"));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(JsonMatcher(g.get()).Advance('0'));
  EXPECT_EQ(Refusal(R"({"type": "integer", "minimum": 3, "maximum": 2})"),
            "schema: no integer of at most 15 digits lies within its minimum/maximum (bounds "
            "that admit only fractions are not supported)");
  EXPECT_EQ(Refusal(R"({"type": "integer", "exclusiveMinimum": true})"),
            "schema.exclusiveMinimum must be a number");
}

TEST(JsonSchemaKeywords, NumberBoundsAreASoundSubset) {
  // A fraction only follows an integer part whose every fraction is in range; no exponent.
  ExpectTexts(R"({"type": "number", "exclusiveMinimum": 0.5, "maximum": 3})",
              {"1", "1.75", "2.999", "3"}, {"0", "3.5", "3.0", "1e0", "4"});
  ExpectTexts(R"({"type": "number", "minimum": -2.5, "exclusiveMaximum": 0})", {"-2", "-1.5"},
              {"0", "-2.5", "-3", "0.5", "-0.25"});
  EXPECT_EQ(Refusal(R"({"type": "number", "minimum": 0.2, "maximum": 0.7})"),
            "schema: no integer of at most 15 digits lies within its minimum/maximum (bounds "
            "that admit only fractions are not supported)");
}

// ---- independent validation: json_schema_validator.h ------------------------------------

using json_schema_validator::Valid;

// The validator is no rubber stamp: each keyword rejects a value that breaks it.
TEST(JsonSchemaKeywords, IndependentValidatorRejectsInvalidValues) {
  const std::vector<std::pair<std::string, std::string>> invalid = {
      {R"({"type": "string", "format": "date"})", R"("2023-02-29")"},
      {R"({"type": "string", "format": "time"})", R"("24:00:00Z")"},
      {R"({"type": "string", "format": "ipv4"})", R"("1.2.3.256")"},
      {R"({"type": "string", "format": "uuid"})", R"("123e4567-e89b-12d3-a456-42661417400")"},
      {R"({"type": "string", "format": "email"})", R"("a@b")"},
      {R"({"type": "string", "pattern": "^a+$"})", R"("ab")"},
      {R"({"type": "string", "maxLength": 2})", "\"\u00e9\u00e9\u00e9\""},
      {R"({"type": "string", "minLength": 2})", R"("a")"},
      {R"({"type": "integer", "exclusiveMaximum": 5})", "5"},
      {R"({"type": "number", "minimum": 0.5})", "0.25"},
      {R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})", "3"},
      {R"({"anyOf": [{"type": "string"}, {"type": "null"}]})", "1"},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})", R"({"a": "x"})"},
      {R"({"type": "object", "propertyNames": {"maxLength": 1}})", R"({"ab": 1})"},
  };
  for (const auto& [schema_text, value_text] : invalid) {
    const json schema = json::parse(schema_text);
    EXPECT_FALSE(Valid(schema, json::parse(value_text), schema))
        << schema_text << " " << value_text;
  }
}

// A vocabulary of every single byte, JSON fragments and a few multi-byte characters.
std::shared_ptr<TokenVocabulary> Vocabulary() {
  std::vector<std::string> v = {"", "", ""};  // 0 pad, 1 bos, 2 eos
  for (int c = 0; c < 256; ++c) v.push_back(std::string(1, static_cast<char>(c)));
  for (const char* piece : {"{\"", "\":", "\",", "\"}", "null", "true", "12", "-0.5", "2024-",
                            "T08:", "@mail.org", "00000", "caf\xc3\xa9", "\xe2\x82\xac", " \""}) {
    v.push_back(piece);
  }
  return std::make_shared<TokenVocabulary>(std::move(v), std::vector<int32_t>{2});
}

// The shortest bytes after which `start` holds a complete value (accepting()),
// by breadth-first search over the matcher's states (equal Key()s are one state); nullopt when
// `max_states` states were visited without one. `*dead_end`: the search ran out of states, so
// no text completes `start` (json_grammar.h promises every text the matcher takes can be
// completed, so a dead end is a grammar bug).
std::optional<std::string> KeywordsShortestCompletion(const JsonMatcher& start, size_t max_states,
                                                      bool* dead_end) {
  *dead_end = false;
  if (start.accepting()) return std::string();
  std::deque<JsonMatcher> states(1);  // a deque: matchers stay put as it grows
  states.front().CopyFrom(start);
  std::vector<std::pair<int, char>> from = {{-1, 0}};  // each state's parent and byte
  std::unordered_set<std::string> seen = {start.Key()};
  for (size_t i = 0; i < states.size(); ++i) {
    if (states.size() >= max_states) return std::nullopt;
    for (int c = 0; c < 256; ++c) {
      JsonMatcher next;
      next.CopyFrom(states[i]);
      if (!next.Advance(static_cast<uint8_t>(c)) || !seen.insert(next.Key()).second) continue;
      states.emplace_back().CopyFrom(next);
      from.emplace_back(static_cast<int>(i), static_cast<char>(c));
      if (!next.accepting()) continue;
      std::string path;
      for (int at = static_cast<int>(from.size()) - 1; from[at].first >= 0; at = from[at].first) {
        path += from[at].second;
      }
      return std::string(path.rbegin(), path.rend());
    }
  }
  *dead_end = true;
  return std::nullopt;
}

// Samples `grammar` with uniform random logits (a stress walk through the token mask); the
// text, or nullopt when cut at `steps`. From step `wrap_up` on, the walk is a model finishing its
// answer: the tokens that write the start of the shortest completion of the text so far
// (KeywordsShortestCompletion; eos once the value is complete) get +10, the mask still deciding
// what is allowed (`*tokens`: how many were sampled). Without it a string runs, at 1 in ~270 for
// its closing quote, past most budgets, and one under an unanchored `pattern` (JSON Schema's
// `pattern` matches anywhere in the string, so any text may surround the match) may never write its
// match at random.
std::optional<std::string> Generate(const std::shared_ptr<const JsonGrammar>& grammar,
                                    const std::shared_ptr<TokenVocabulary>& vocabulary,
                                    std::mt19937& rng, int steps, int wrap_up = -1,
                                    int* tokens = nullptr) {
  TokenConstraint constraint(grammar, vocabulary);
  JsonMatcher matcher(grammar.get());  // the text so far, for the completion search
  SamplingParams params;
  params.seed = rng();
  Sampler sampler(params);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> logits(vocabulary->vocab_size());
  std::string text;
  std::optional<std::string> plan;  // the completion being written (wrap-up only)
  int search_at = wrap_up;
  for (int step = 0; step < steps; ++step) {
    for (float& l : logits) l = uniform(rng);
    if (wrap_up >= 0 && step >= wrap_up) {
      if (!plan.has_value() && step >= search_at) {
        bool dead_end = false;
        plan = KeywordsShortestCompletion(matcher, 20000, &dead_end);
        EXPECT_FALSE(dead_end) << "no completion of " << text;
        if (!plan.has_value()) search_at = step + 16;  // too far to search: walk on a while
      }
      if (plan.has_value() && plan->empty()) logits[2] += 10.0f;  // eos
      for (int32_t id = 3; plan.has_value() && id < vocabulary->vocab_size(); ++id) {
        const std::string& bytes = vocabulary->bytes(id);
        if (!bytes.empty() && absl::StartsWith(*plan, bytes)) logits[id] += 10.0f;
      }
    }
    const TokenMask& mask = constraint.Allowed();
    EXPECT_GT(mask.allowed, 0) << text;
    if (mask.allowed == 0) return std::nullopt;
    const int32_t token = sampler.Sample(logits, {}, &mask);
    EXPECT_TRUE(constraint.Accept(token).ok());
    if (tokens != nullptr) *tokens = step + 1;
    if (token == 2) return text;
    const std::string& bytes = vocabulary->bytes(token);
    text += bytes;
    EXPECT_TRUE(matcher.Advance(bytes)) << text;
    if (plan.has_value() && absl::StartsWith(*plan, bytes)) {
      plan->erase(0, bytes.size());  // on the plan: the rest of it is still a completion
    } else {
      plan.reset();  // off it: search again from here
    }
    if (constraint.complete()) return text;
  }
  return std::nullopt;
}

// A random schema over this file's keywords, `depth` containers deep at most.
ordered_json RandomSchema(std::mt19937& rng, int depth) {
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  static const char* kFormats[] = {"date-time", "date", "time", "uuid", "email", "ipv4"};
  static const char* kPatterns[] = {"^[a-z]{1,4}(-[0-9]+)?$", "x[yz]?\\d", "^(?:ab|c)+$",
                                    "^\\w+@\\w+\\.com$", "^[^aeiou ]{2,5}$"};
  switch (pick(depth > 0 ? 12 : 8)) {
    case 0: {
      ordered_json s = {{"type", "string"}};
      const int lo = pick(4);
      s["minLength"] = lo;
      if (pick(2)) s["maxLength"] = lo + pick(6);
      return s;
    }
    case 1:
      return {{"type", "string"}, {"format", kFormats[pick(6)]}};
    case 2: {
      ordered_json s = {{"type", "string"}, {"pattern", kPatterns[pick(5)]}};
      if (pick(2)) s["maxLength"] = 8 + pick(10);  // every pattern has a match that short
      return s;
    }
    case 3: {
      ordered_json s = {{"type", "integer"}};
      const int lo = pick(200) - 100;
      s[pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
      if (pick(2)) s[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2 + pick(300);
      return s;
    }
    case 4: {
      ordered_json s = {{"type", "number"}};
      const double lo = (pick(400) - 200) / 8.0;
      s[pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
      s[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2.5 + pick(100) / 4.0;
      return s;
    }
    case 5:
      return {{"oneOf", {{{"const", "a"}}, {{"const", 1}}, {{"enum", {"b", nullptr}}}}}};
    case 6:
      return {{"type", {"boolean", "integer", "null"}}, {"maximum", 9}};
    case 7:
      return {{"type", "string"}, {"format", "date"}, {"pattern", "-0[1-6]-"}};
    case 8: {  // pydantic's Optional[X] (X without null: alternatives must not overlap)
      ordered_json x = RandomSchema(rng, depth - 1);
      while (x.dump().find("null") != std::string::npos) x = RandomSchema(rng, depth - 1);
      return {{"anyOf", {x, {{"type", "null"}}}}, {"default", nullptr}};
    }
    case 9:  // zod's z.record
      return {{"type", "object"},
              {"propertyNames", {{"type", "string"}, {"maxLength", 3}}},
              {"additionalProperties", RandomSchema(rng, depth - 1)}};
    case 10: {
      ordered_json s = {{"type", "array"}, {"items", RandomSchema(rng, depth - 1)}};
      s["maxItems"] = 1 + pick(3);
      return s;
    }
    default: {
      ordered_json s = {{"type", "object"}, {"properties", ordered_json::object()}};
      ordered_json required = ordered_json::array();
      for (int i = 0, n = 1 + pick(3); i < n; ++i) {
        const std::string name = absl::StrCat("p", i);
        s["properties"][name] = RandomSchema(rng, depth - 1);
        if (pick(2)) required.push_back(name);
      }
      s["required"] = required;
      s["additionalProperties"] = false;
      return s;
    }
  }
}

// (schema, output) pairs for ajv: tests/engine/sampling/ajv/validate.mjs reads them.
void CheckWithAjv(const std::vector<std::pair<json, std::string>>& pairs, const char* name) {
  ASSERT_FALSE(pairs.empty());
  const std::filesystem::path dir =
      std::filesystem::path(ABCD_SOURCE_DIR) / "tests/engine/sampling/ajv";
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !std::filesystem::exists(dir / "node_modules/ajv")) {
    GTEST_SKIP() << "node or tests/engine/sampling/ajv/node_modules missing (run "
                    "tests/engine/sampling/ajv/npm-ci.sh): the ajv cross-check is skipped; the "
                    "C++ validator above still ran";
  }
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     absl::StrCat("abcd_ajv_", name, "_", getpid(), ".jsonl");
  {
    std::ofstream out(file);
    for (const auto& [schema, text] : pairs) {
      out << json{{"schema", schema}, {"output", text}}.dump() << "\n";
    }
  }
  const std::string command =
      absl::StrCat("node ", (dir / "validate.mjs").string(), " ", file.string());
  const int rc = std::system(command.c_str());
  std::filesystem::remove(file);
  EXPECT_EQ(rc, 0) << command;
}

using Outputs = std::vector<std::pair<json, std::string>>;

constexpr int kKeywordsRandomTrials = 300;

// Seeded random schemas and the outputs sampled for them (the same in every call);
// `*in_walk`: how many of them completed within the random walk, before the finishing.
Outputs RandomOutputs(int* in_walk = nullptr) {
  const auto vocabulary = Vocabulary();
  std::mt19937 rng(45);
  Outputs pairs;
  if (in_walk != nullptr) *in_walk = 0;
  for (int trial = 0; trial < kKeywordsRandomTrials; ++trial) {
    const ordered_json schema = RandomSchema(rng, 2);
    auto grammar = JsonGrammar::FromSchema(schema, "schema");
    EXPECT_TRUE(grammar.ok()) << grammar.status() << " " << schema.dump();
    if (!grammar.ok()) continue;
    // 400 tokens of the random walk, then up to 200 more finishing (Generate).
    int tokens = 0;
    const std::optional<std::string> text = Generate(*grammar, vocabulary, rng, 600, 400, &tokens);
    EXPECT_TRUE(text.has_value()) << schema.dump() << " not complete after 600 tokens";
    if (in_walk != nullptr && text.has_value() && tokens <= 400) ++*in_walk;
    if (text.has_value()) pairs.emplace_back(json::parse(schema.dump()), *text);
  }
  return pairs;
}

void ExpectValid(const Outputs& pairs) {
  for (const auto& [schema, text] : pairs) {
    const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(value.is_discarded()) << schema.dump() << "\n" << text;
    EXPECT_TRUE(Valid(schema, value, schema)) << schema.dump() << "\n" << text;
  }
}

TEST(JsonSchemaKeywords, RandomSchemasWithRandomLogitsValidateIndependently) {
  int in_walk = 0;
  const Outputs pairs = RandomOutputs(&in_walk);
  EXPECT_EQ(pairs.size(), static_cast<size_t>(kKeywordsRandomTrials));
  std::cout << pairs.size() << " of " << kKeywordsRandomTrials << " complete, " << in_walk
            << " within the 400-token random walk\n";
  ExpectValid(pairs);
}

TEST(JsonSchemaKeywords, AjvValidatesRandomSchemaOutputs) {
  CheckWithAjv(RandomOutputs(), "random");
}

// Schemas in the shapes zod 4's z.toJSONSchema and pydantic 2's model_json_schema emit.
Outputs ShapeOutputs() {
  const std::vector<std::string> schemas = {
      // zod: z.object({name: z.string().min(1).max(20), email: z.email(), age:
      // z.number().int().min(0).max(150).optional(), role: z.enum(["admin", "user"]),
      // id: z.uuid(), nick: z.string().nullable(), tags: z.array(z.string()).max(3),
      // meta: z.record(z.string(), z.number())})
      R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
          "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "email": {"type": "string", "format": "email", "pattern":
                "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "role": {"type": "string", "enum": ["admin", "user"]},
            "id": {"type": "string", "format": "uuid", "pattern":
                "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
            "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "meta": {"type": "object", "propertyNames": {"type": "string"},
                     "additionalProperties": {"type": "number"}}},
          "required": ["name", "email", "role", "id", "nick", "tags", "meta"],
          "additionalProperties": false})",
      // pydantic: class Address(BaseModel): street: str; zip: constr(pattern=r"^\d{5}$")
      // class User(BaseModel): id: int = Field(ge=1); name: str = Field(max_length=8);
      // born: date; seen: Optional[datetime] = None; address: Optional[Address] = None;
      // score: float = Field(gt=0, le=10); ip: IPv4Address
      R"({"$defs": {"Address": {"properties": {
            "street": {"title": "Street", "type": "string"},
            "zip": {"pattern": "^\\d{5}$", "title": "Zip", "type": "string"}},
            "required": ["street", "zip"], "title": "Address", "type": "object"}},
          "properties": {
            "id": {"minimum": 1, "title": "Id", "type": "integer"},
            "name": {"maxLength": 8, "title": "Name", "type": "string"},
            "born": {"format": "date", "title": "Born", "type": "string"},
            "seen": {"anyOf": [{"format": "date-time", "type": "string"}, {"type": "null"}],
                     "default": null, "title": "Seen"},
            "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}],
                        "default": null},
            "score": {"exclusiveMinimum": 0, "maximum": 10, "title": "Score", "type": "number"},
            "ip": {"format": "ipv4", "title": "Ip", "type": "string"}},
          "required": ["id", "name", "born", "score", "ip"], "title": "User",
          "type": "object"})",
      // pydantic: class Cat(BaseModel): pet_type: Literal["cat"]; meows: int
      // class Dog(BaseModel): pet_type: Literal["dog"]; barks: float = Field(ge=0)
      // class Owner(BaseModel): pets: list[Annotated[Union[Cat, Dog],
      // Field(discriminator="pet_type")]] = Field(max_length=3)
      R"({"$defs": {
            "Cat": {"properties": {"pet_type": {"const": "cat", "title": "Pet Type",
                                                "type": "string"},
                                   "meows": {"title": "Meows", "type": "integer"}},
                    "required": ["pet_type", "meows"], "title": "Cat", "type": "object"},
            "Dog": {"properties": {"pet_type": {"const": "dog", "title": "Pet Type",
                                                "type": "string"},
                                   "barks": {"minimum": 0, "title": "Barks", "type": "number"}},
                    "required": ["pet_type", "barks"], "title": "Dog", "type": "object"}},
          "properties": {"pets": {"items": {"discriminator": {"mapping": {"cat": "#/$defs/Cat",
                                                                          "dog": "#/$defs/Dog"},
                                                              "propertyName": "pet_type"},
                                            "oneOf": [{"$ref": "#/$defs/Cat"},
                                                      {"$ref": "#/$defs/Dog"}]},
                                  "maxItems": 3, "title": "Pets", "type": "array"}},
          "required": ["pets"], "title": "Owner", "type": "object"})",
  };
  const auto vocabulary = Vocabulary();
  std::mt19937 rng(7);
  Outputs pairs;
  for (const std::string& text : schemas) {
    const auto grammar = Compile(text);
    if (grammar == nullptr) continue;
    int completed = 0;
    for (int trial = 0; trial < 20; ++trial) {
      const std::optional<std::string> out = Generate(grammar, vocabulary, rng, 1500);
      if (!out.has_value()) continue;
      ++completed;
      pairs.emplace_back(json::parse(text), *out);
    }
    EXPECT_GT(completed, 5) << text;
  }
  return pairs;
}

TEST(JsonSchemaKeywords, ZodAndPydanticShapesCompileAndValidate) {
  const Outputs pairs = ShapeOutputs();
  EXPECT_GT(pairs.size(), 10u);
  ExpectValid(pairs);
}

TEST(JsonSchemaKeywords, AjvValidatesZodAndPydanticShapeOutputs) {
  CheckWithAjv(ShapeOutputs(), "shapes");
}

// The schemas zod itself writes (z.toJSONSchema of the npm zod pinned in
// tests/engine/sampling/ajv/package-lock.json; tests/fixtures/json_schema/zod.json, made by
// make_zod_schemas.mjs there): every one compiles, and 12 outputs of each, sampled with random
// logits, complete and validate.
Outputs ZodOutputs() {
  std::ifstream in(std::string(ABCD_SOURCE_DIR) + "/tests/fixtures/json_schema/zod.json");
  const ordered_json shapes = ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(shapes.is_array() && shapes.size() == 7u) << "tests/fixtures/json_schema/zod.json";
  const auto vocabulary = Vocabulary();
  std::mt19937 rng(4);
  Outputs pairs;
  for (const ordered_json& shape : shapes.is_array() ? shapes : ordered_json::array()) {
    const std::string text = shape["schema"].dump();  // zod's key order kept
    const auto grammar = Compile(text);
    if (grammar == nullptr) continue;
    for (int trial = 0; trial < 12; ++trial) {
      const std::optional<std::string> out = Generate(grammar, vocabulary, rng, 3000, 600);
      EXPECT_TRUE(out.has_value()) << shape["name"] << " not complete after 3000 tokens";
      if (out.has_value()) pairs.emplace_back(json::parse(text), *out);
    }
  }
  return pairs;
}

TEST(JsonSchemaKeywords, ZodsOwnSchemasCompileAndValidate) {
  const Outputs pairs = ZodOutputs();
  EXPECT_EQ(pairs.size(), 7u * 12u);
  ExpectValid(pairs);
}

TEST(JsonSchemaKeywords, AjvValidatesZodsOwnSchemaOutputs) {
  const Outputs pairs = ZodOutputs();
  ASSERT_EQ(pairs.size(), 7u * 12u);
  CheckWithAjv(pairs, "zod");
}

}  // namespace
}  // namespace json_schema_keywords_test
}  // namespace abcd
