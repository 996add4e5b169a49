// Constrained JSON output (engine/sampling/json_grammar.h, token_mask.h): the matcher accepts
// and refuses hand-written texts; unsupported schema keywords are refused naming their path;
// the trie walk's mask equals a token-by-token check; random schemas sampled with uniform random
// logits through the mask always give JSON that parses and validates; the tokenizer's token
// bytes are what each token adds to a decoded text.
#include "engine/sampling/json_grammar.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::shared_ptr<const JsonGrammar> Schema(const std::string& text) {
  auto grammar = JsonGrammar::FromSchema(ordered_json::parse(text), "schema");
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

// Whether `text` is a complete value for `grammar`.
bool Accepts(const JsonGrammar& grammar, const std::string& text) {
  JsonMatcher matcher(&grammar);
  return matcher.Advance(text) && matcher.accepting();
}

TEST(JsonGrammar, AnyObjectAcceptsObjectsOnly) {
  const auto any = JsonGrammar::AnyObject();
  for (const char* ok :
       {"{}", " {}", "{\"a\":1}", "{\"a\": [1, \"x\", {\"b\": null}], \"c\": true}",
        "{\"a\":-0.5e+10,\"b\":[],\"c\":{}}", "{\"s\":\"\\u00e9\\n\\\"caf\xc3\xa9\\\\\"}",
        "{\n\"a\" : 1\n}", "{\"\xf0\x9f\x98\x80\":false}"}) {
    EXPECT_TRUE(Accepts(*any, ok)) << ok;
  }
  for (const char* bad :
       {"[1]", "\"x\"", "{} ", "{\"a\":01}", "{\"a\":1,}", "{  \"a\":1}", "{\"a\":\"\x01\"}",
        "{\"a\":\"\xc3\"}", "{\"a\":\"\xc0\x80\"}", "{\"a\":\"\\ud800\"}", "{\"a\":tru}",
        "{\"a\":1.}", "{\"a\":1e}", "{a:1}", "{\"a\":1}}", "{\"a\":\"\xed\xa0\x80\"}"}) {
    EXPECT_FALSE(Accepts(*any, bad)) << bad;
  }
  JsonMatcher matcher(any.get());
  ASSERT_TRUE(matcher.Advance("{\"a\":1"));
  EXPECT_FALSE(matcher.accepting());
  ASSERT_TRUE(matcher.Advance("}"));
  EXPECT_TRUE(matcher.complete());
  EXPECT_FALSE(matcher.Advance(" "));
}

TEST(JsonGrammar, NumbersAreBounded) {
  const auto number = Schema(R"({"type": "number"})");
  EXPECT_TRUE(Accepts(*number, "123456789012345"));
  EXPECT_FALSE(Accepts(*number, "1234567890123456"));
  EXPECT_TRUE(Accepts(*number, "-0.25E-99"));
  EXPECT_FALSE(Accepts(*number, "1e100"));  // parsers refuse doubles past 1.8e308
  const auto integer = Schema(R"({"type": "integer"})");
  EXPECT_TRUE(Accepts(*integer, "-42"));
  EXPECT_FALSE(Accepts(*integer, "4.2"));
  EXPECT_FALSE(Accepts(*integer, "1e3"));
  JsonMatcher top(integer.get());
  ASSERT_TRUE(top.Advance("7"));
  EXPECT_TRUE(top.accepting());
  EXPECT_FALSE(top.complete());  // more digits may follow: only the end (eos) closes it
}

TEST(JsonGrammar, ObjectPropertiesInOrderRequiredAndOptional) {
  const auto g = Schema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 12, 1]}, "minItems": 1,
               "maxItems": 2},
      "ok": {"type": ["boolean", "null"]}},
    "required": ["name", "tags"], "additionalProperties": false})");
  EXPECT_TRUE(Accepts(*g, R"({"name":"x","tags":["a"]})"));
  EXPECT_TRUE(Accepts(*g, R"({"name":"x","age":3,"tags":[1,12],"ok":null})"));
  EXPECT_TRUE(Accepts(*g, R"({"name": "x", "tags": [12], "ok": true})"));
  EXPECT_FALSE(Accepts(*g, R"({"tags":["a"],"name":"x"})"));          // schema order
  EXPECT_FALSE(Accepts(*g, R"({"name":"x"})"));                       // tags required
  EXPECT_FALSE(Accepts(*g, R"({"name":"x","tags":[]})"));             // minItems
  EXPECT_FALSE(Accepts(*g, R"({"name":"x","tags":["a","b","a"]})"));  // maxItems
  EXPECT_FALSE(Accepts(*g, R"({"name":"x","tags":["c"]})"));          // enum
  EXPECT_FALSE(Accepts(*g, R"({"name":"x","tags":[2]})"));
  EXPECT_FALSE(Accepts(*g, R"({"name":"x","tags":["a"],"extra":1})"));
  EXPECT_FALSE(Accepts(*g, R"({"name":1,"tags":["a"]})"));
}

TEST(JsonGrammar, RecursiveRefs) {
  const auto g = Schema(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"const": "k"}, "next": {"$ref": "#/$defs/node"}}, "required": ["v"]}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Accepts(*g, R"({"v":"k","next":{"v":"k","next":{"v":"k"}}})"));
  EXPECT_FALSE(Accepts(*g, R"({"v":"k","next":{}})"));
}

// Issue 44: a recursive $ref whose every value needs another one inside it (no base case) is
// refused when the schema is compiled, naming where, instead of failing after the matcher's
// stack runs out mid-generation (a 500 after 192 tokens).
TEST(JsonGrammar, RecursiveRefWithoutBaseCaseIsRefusedAtCompileTime) {
  const std::string root = "response_format.json_schema.schema";
  const std::string no_value =
      ": no finite value satisfies this schema (a recursive $ref without a base case: every "
      "value needs another one inside it through required properties or minItems)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}},
          "required": ["next"]}}, "$ref": "#/$defs/node"})",
       root + ".$ref" + no_value},
      {R"({"type": "array", "minItems": 1, "items": {"$ref": "#"}})", root + no_value},
      // Optional, but the matcher would be stuck inside it once it began.
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/bad"}}, "$defs": {"bad":
          {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/bad"}}}})",
       root + ".properties.a.$ref" + no_value},
  };
  for (const auto& [schema, message] : cases) {
    auto grammar = JsonGrammar::FromSchema(ordered_json::parse(schema), root);
    ASSERT_FALSE(grammar.ok()) << schema;
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(grammar.status().message(), message) << schema;
  }
  // With a base case (null, an optional property, minItems 0) recursion compiles.
  for (const char* ok : {
           R"({"type": ["object", "null"], "properties": {"next": {"$ref": "#"}},
               "required": ["next"]})",
           R"({"type": "object", "properties": {"next": {"$ref": "#"}}})",
           R"({"type": "array", "items": {"$ref": "#"}})",
       }) {
    EXPECT_TRUE(JsonGrammar::FromSchema(ordered_json::parse(ok), root).ok()) << ok;
  }
  const auto list = Schema(R"({"type": ["object", "null"], "properties": {"next": {"$ref": "#"}},
                              "required": ["next"]})");
  EXPECT_TRUE(Accepts(*list, R"({"next":{"next":null}})"));
}

// A schema whose shortest value needs more nested values than the matcher's stack holds is
// refused at compile time.
TEST(JsonGrammar, ShortestValueDeeperThanTheStackIsRefused) {
  auto nested = [](int levels) {
    ordered_json schema = {{"type", "integer"}};
    for (int i = 0; i < levels; ++i) {
      schema = {{"type", "object"},
                {"properties", {{"a", schema}}},
                {"required", ordered_json::array({"a"})}};
    }
    return schema;
  };
  EXPECT_TRUE(JsonGrammar::FromSchema(nested(kMaxJsonDepth - 2), "schema").ok());
  auto deep = JsonGrammar::FromSchema(nested(kMaxJsonDepth - 1), "schema");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(),
            absl::StrCat("schema: its shortest value nests more than ", kMaxJsonDepth - 1,
                         " values deep (one inside another), the most that can be generated"));
}

// Optional recursion never leaves the matcher stuck: past the depth where the required rest
// could still be completed, the recursive property is not offered any more.
TEST(JsonGrammar, OptionalRecursionAlwaysCompletes) {
  const auto g = Schema(R"({"$defs": {"n": {"type": "object", "properties": {
      "next": {"$ref": "#/$defs/n"}, "v": {"type": "integer"}}, "required": ["v"]}},
      "$ref": "#/$defs/n"})");
  JsonMatcher matcher(g.get());
  int levels = 0;
  for (;; ++levels) {
    JsonMatcher next = matcher;
    if (!next.Advance(R"({"next":)")) break;
    matcher = next;
  }
  EXPECT_GT(levels, 10);
  ASSERT_TRUE(matcher.Advance(R"({"v":1})")) << levels << " levels";
  for (int i = 0; i < levels; ++i) ASSERT_TRUE(matcher.Advance(R"(,"v":1})"));
  EXPECT_TRUE(matcher.accepting());
  EXPECT_TRUE(matcher.complete());
}

// The schema document itself is checked for depth before anything recurses over it.
TEST(JsonGrammar, SchemaDocumentsNestedTooDeeplyAreRefusedByPath) {
  ordered_json value = 1;
  for (int i = 0; i < 5000; ++i) value = ordered_json::array({std::move(value)});
  const ordered_json schema = {{"const", std::move(value)}};
  auto grammar = JsonGrammar::FromSchema(schema, "schema");
  ASSERT_FALSE(grammar.ok());
  EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
  std::string path = "schema.const";
  for (int i = 1; i < kMaxSchemaDocumentDepth; ++i) path += "[0]";
  EXPECT_EQ(grammar.status().message(),
            absl::StrCat(path, " nests deeper than ", kMaxSchemaDocumentDepth, " levels"));
}

TEST(JsonGrammar, UnsupportedKeywordsAreRefusedByPath) {
  const std::string root = "response_format.json_schema.schema";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"js({"type":"object","properties":{"name":{"type":"string","pattern":"(?=a)"}}})js",
       root + ".properties.name.pattern: a lookaround or named group at offset 1 is not supported"},
      {R"({"allOf":[{"type":"string"}]})", root + ".allOf is not supported"},
      {R"({"type":"array","items":{"type":"object","minProperties":2}})",
       root + ".items.minProperties is not supported"},
      {R"({"type":"string","format":"uri"})",
       root + ".format \"uri\" is not supported (supported: date-time, date, time, uuid, email, "
              "ipv4)"},
      {R"({"type":"object","additionalProperties":{"type":"string","uniqueItems":true}})",
       root + ".additionalProperties.uniqueItems is not supported"},
      {R"({"type":"array","items":[{"type":"string"}]})",
       root + ".items as an array (a tuple) is not supported"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})",
       root + ".required[0] must name one of the properties, got \"b\""},
      {R"({"type":"decimal"})", root + ".type: unknown type \"decimal\""},
      {R"({"$ref":"#"})", root + ": a $ref cycle names no value (a reference to itself)"},
      {R"({"$ref":"#/$defs/missing"})",
       root + ".$ref: \"#/$defs/missing\" does not name a schema in the document"},
      {R"({"type":"string","enum":["a",1]})", root + ".enum[1] does not have the schema's type"},
      {R"(false)", root + " is false: no value would be valid"},
      {R"({"type":"array","minItems":3,"maxItems":2})", root + ".minItems exceeds maxItems"},
  };
  for (const auto& [schema, message] : cases) {
    auto grammar = JsonGrammar::FromSchema(ordered_json::parse(schema), root);
    ASSERT_FALSE(grammar.ok()) << schema;
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(grammar.status().message(), message) << schema;
  }
}

// A small vocabulary with every single byte, JSON fragments, words and multi-byte characters.
std::vector<std::string> TestVocabulary() {
  std::vector<std::string> v = {"", "", ""};  // 0 pad, 1 bos, 2 eos (no bytes)
  // Every byte, as a byte-fallback vocabulary has.
  for (int c = 0; c < 256; ++c) v.push_back(std::string(1, static_cast<char>(c)));
  for (const char* piece : {"{\"",
                            "\":",
                            "\",",
                            "\"}",
                            "\"]",
                            "},",
                            "],",
                            "[{",
                            "[]",
                            "{}",
                            "true",
                            "false",
                            "null",
                            " true",
                            "tr",
                            "ue",
                            "fal",
                            " \"",
                            "\": \"",
                            "\", \"",
                            "12",
                            "3.5",
                            "e+1",
                            "-",
                            "00",
                            " the",
                            " cat",
                            "name",
                            "\"name\"",
                            "\"age\":",
                            "tags",
                            "\\n",
                            "\\u00",
                            "\\\"",
                            "caf\xc3\xa9",
                            "\xc3",
                            "\xa9",
                            "\xe2\x82\xac",
                            "\xe2\x82",
                            "\xac",
                            "\xf0\x9f\x98\x80",
                            "hello world",
                            " \n",
                            "  "}) {
    v.push_back(piece);
  }
  return v;
}

TEST(TokenConstraint, TrieMaskEqualsTokenByTokenCheck) {
  auto vocabulary = std::make_shared<TokenVocabulary>(TestVocabulary(), std::vector<int32_t>{2});
  // The second: strings whose state changes with every character (no shared trie state).
  const auto plain = Schema(R"({"type":"object","properties":{"a":{"type":"string"},
      "b":{"type":"array","items":{"type":"number"}},"c":{"enum":["x","xy",1,12]}}})");
  const auto bounded = Schema(R"({"type":"object","properties":{
      "a":{"type":"string","minLength":2,"maxLength":5},"d":{"type":"string","format":"date"},
      "e":{"type":"string","pattern":"^[a-c]+$","maxLength":4},
      "n":{"type":"number","minimum":-3,"exclusiveMaximum":20}}})");
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const auto& grammar = trial % 2 ? bounded : plain;
    TokenConstraint constraint(grammar, vocabulary);
    JsonMatcher state(grammar.get());
    for (int step = 0; step < 60 && !constraint.complete(); ++step) {
      const TokenMask& mask = constraint.Allowed();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocabulary->vocab_size(); ++id) {
        JsonMatcher next;
        next.CopyFrom(state);
        const bool ok = id == 2
                            ? state.accepting()
                            : !vocabulary->bytes(id).empty() && next.Advance(vocabulary->bytes(id));
        ASSERT_EQ(mask.Allows(id), ok) << "token " << id << " step " << step;
        if (ok) allowed.push_back(id);
      }
      ASSERT_EQ(mask.allowed, static_cast<int>(allowed.size()));
      ASSERT_FALSE(allowed.empty());
      const int32_t token = allowed[rng() % allowed.size()];
      if (token == 2) break;
      ASSERT_TRUE(constraint.Accept(token).ok());
      ASSERT_TRUE(state.Advance(vocabulary->bytes(token)));
    }
  }
}

// A random schema of the supported subset, `depth` levels deep at most.
ordered_json RandomSchema(std::mt19937& rng, int depth) {
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = pick(depth > 0 ? 10 : 7);
  switch (kind) {
    case 0:
      return {{"type", "string"}};
    case 1:
      return {{"type", "integer"}};
    case 2:
      return {{"type", "number"}};
    case 3:
      return {{"type", "boolean"}};
    case 4:
      return {{"type", {"string", "null"}}};
    case 5:
      return {{"enum", {"red", "green", 7, 70, nullptr, "gr\xc3\xbcn"}}};
    case 6:
      return {{"const", "fixed"}};
    case 7: {
      ordered_json s = {{"type", "array"}, {"items", RandomSchema(rng, depth - 1)}};
      if (pick(2)) s["minItems"] = pick(2);
      if (pick(2)) s["maxItems"] = 2 + pick(2);
      return s;
    }
    case 8:
      return {{"type", "object"}};  // any object
    default: {
      ordered_json s = {{"type", "object"}, {"properties", ordered_json::object()}};
      ordered_json required = ordered_json::array();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        const std::string name = absl::StrCat("p", i, i % 2 ? "\xc3\xa9" : "");
        s["properties"][name] = RandomSchema(rng, depth - 1);
        if (pick(2)) required.push_back(name);
      }
      s["required"] = required;
      if (pick(2)) s["additionalProperties"] = false;
      return s;
    }
  }
}

// Validates `value` against the supported subset (without $ref).
bool Validates(const ordered_json& schema, const json& value) {
  if (schema.contains("const")) return json::parse(schema["const"].dump()) == value;
  if (schema.contains("enum")) {
    for (const auto& v : schema["enum"]) {
      if (json::parse(v.dump()) == value) return true;
    }
    return false;
  }
  const ordered_json& type = schema["type"];
  if (type.is_array()) {
    for (const auto& t : type) {
      ordered_json one = schema;
      one["type"] = t;
      if (Validates(one, value)) return true;
    }
    return false;
  }
  const std::string t = type.get<std::string>();
  if (t == "string") return value.is_string();
  if (t == "integer") return value.is_number_integer();
  if (t == "number") return value.is_number();
  if (t == "boolean") return value.is_boolean();
  if (t == "null") return value.is_null();
  if (t == "array") {
    if (!value.is_array()) return false;
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>())
      return false;
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>())
      return false;
    for (const auto& item : value) {
      if (!Validates(schema["items"], item)) return false;
    }
    return true;
  }
  if (!value.is_object()) return false;
  if (!schema.contains("properties")) return true;
  for (const auto& name : schema["required"]) {
    if (!value.contains(name.get<std::string>())) return false;
  }
  for (const auto& [key, v] : value.items()) {
    if (!schema["properties"].contains(key)) return false;  // never generated
    if (!Validates(schema["properties"][key], v)) return false;
  }
  return true;
}

TEST(TokenConstraint, RandomSchemasWithRandomLogitsAlwaysValidate) {
  auto vocabulary = std::make_shared<TokenVocabulary>(TestVocabulary(), std::vector<int32_t>{2});
  std::mt19937 rng(20240611);
  int completed = 0;
  int cut = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const ordered_json schema = RandomSchema(rng, 3);
    auto grammar = JsonGrammar::FromSchema(schema, "schema");
    ASSERT_TRUE(grammar.ok()) << grammar.status() << " " << schema.dump();
    TokenConstraint constraint(*grammar, vocabulary);
    SamplingParams params;
    params.seed = static_cast<uint64_t>(trial);
    Sampler sampler(params);
    std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
    std::vector<float> logits(vocabulary->vocab_size());
    std::string text;
    bool done = false;
    for (int step = 0; step < 300 && !done; ++step) {
      for (float& l : logits) l = uniform(rng);
      const TokenMask& mask = constraint.Allowed();
      ASSERT_GT(mask.allowed, 0) << schema.dump() << " after " << text;
      const int32_t token = sampler.Sample(logits, {}, &mask);
      ASSERT_TRUE(constraint.Accept(token).ok()) << token;
      if (token == 2) {
        done = true;
        break;
      }
      text += vocabulary->bytes(token);
      done = constraint.complete();
    }
    if (!done) {
      ++cut;  // what the executor ends with finish_reason "length"
      continue;
    }
    ++completed;
    const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(value.is_discarded()) << schema.dump() << "\n" << text;
    EXPECT_TRUE(Validates(schema, value)) << schema.dump() << "\n" << text;
  }
  EXPECT_GT(completed, 150) << "cut " << cut;
}

TEST(TokenConstraint, SamplerRespectsTheMaskGreedyToo) {
  auto vocabulary = std::make_shared<TokenVocabulary>(TestVocabulary(), std::vector<int32_t>{2});
  TokenConstraint constraint(JsonGrammar::AnyObject(), vocabulary);
  std::vector<float> logits(vocabulary->vocab_size(), 0.0f);
  logits[2] = 100.0f;  // eos, the favourite, is not allowed before the object
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const int32_t token = Sampler(greedy).Sample(logits, {}, &constraint.Allowed());
  const char first = vocabulary->bytes(token)[0];
  EXPECT_TRUE(first == '{' || first == ' ' || first == '\n') << vocabulary->bytes(token);
  SamplingParams top_k;
  top_k.top_k = 1;
  EXPECT_NE(Sampler(top_k).Sample(logits, {}, &constraint.Allowed()), 2);
  EXPECT_FALSE(constraint.Accept(2).ok());
}

TEST(TokenVocabulary, TokenBytesAreWhatEachTokenAddsToTheText) {
  auto tokenizer =
      Tokenizer::Load(std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-lm/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<std::string> bytes = (*tokenizer)->TokenBytes();
  ASSERT_EQ(static_cast<int>(bytes.size()), (*tokenizer)->vocab_size());
  const std::vector<int32_t> anchor = *(*tokenizer)->Encode("word");
  const std::string anchor_text = *(*tokenizer)->Decode(anchor);
  int checked = 0;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    if (bytes[id].empty() || static_cast<uint8_t>(bytes[id][0]) >= 0x80) continue;
    std::vector<int32_t> ids = anchor;
    ids.push_back(id);
    ASSERT_EQ(*(*tokenizer)->Decode(ids), anchor_text + bytes[id]) << id;
    ++checked;
  }
  EXPECT_GT(checked, 7000);
  EXPECT_EQ(bytes[1], "");         // bos
  EXPECT_EQ(bytes[2], "");         // eos
  EXPECT_EQ(bytes[4 + '{'], "{");  // byte fallback <0x7B>
}

}  // namespace
}  // namespace abcd
