#include "engine/sampling/json_grammar.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"

namespace abcd {

using OrderedJson = nlohmann::ordered_json;

// Frame phases. Root: kRootValue (leading whitespace, then the value), kRootDone.
// Objects and arrays: kStart (the opening character), kOpen (after it), kKey (schema object:
// matching a property name), kColon, kValue, kAfter (after a value: ',' or the close), kComma.
// Strings: kStart, kBody, kEscape, kHex (pos hex digits read; a = 1 after a leading 'd'),
// kUtf8 (pos continuation bytes left, a = lowest | highest << 8 for the next one).
// Numbers: kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits.
// Literals: kStart, kBody (range [a, b) of the sorted literals agrees with the pos bytes taken).
namespace {

enum : uint8_t { kRootValue = 0, kRootDone = 1 };
enum : uint8_t { kStart = 0 };
enum : uint8_t { kOpen = 1, kKey, kColon, kValue, kAfter, kComma };
enum : uint8_t { kBody = 1, kEscape, kHex, kUtf8 };
enum : uint8_t { kMinus = 1, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

constexpr int kMaxNumberDigits = 15;
constexpr int kMaxExponentDigits = 2;  // 15 digits e99 stays within a double
constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxEnumValues = 1024;
constexpr size_t kMaxKeyBytes = 1024;

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "title", "description", "$schema", "$id", "$comment", "default", "examples"};
  return *names;
}

const absl::flat_hash_set<std::string>& Keywords() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "type",  "properties", "required", "additionalProperties",
      "items", "minItems",   "maxItems", "enum",
      "const", "$ref",       "$defs",    "definitions"};
  return *names;
}

// The JSON types a value has, by JSON Schema's names (an integer is also a number).
bool HasType(const OrderedJson& v, absl::string_view type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>();
  }
  if (type == "number") return v.is_number();
  return false;
}

JsonNode Node(JsonNode::Kind kind, int value = -1) {
  JsonNode node;
  node.kind = kind;
  node.value = value;
  return node;
}

}  // namespace

// Compiles one schema into nodes of a grammar.
class SchemaCompiler {
 public:
  SchemaCompiler(const OrderedJson& root, JsonGrammar* grammar) : root_(root), g_(*grammar) {}

  absl::StatusOr<int> Compile(const OrderedJson& schema, const std::string& path, int depth);
  int AnyValue();
  int FreeObject(int value);
  absl::Status CheckUnionCycles(const std::string& path) const;

 private:
  int Add(JsonNode node) {
    g_.nodes_.push_back(std::move(node));
    return static_cast<int>(g_.nodes_.size()) - 1;
  }
  int StringNode();
  int Literals(std::vector<std::string> texts);
  absl::StatusOr<int> CompileRef(const OrderedJson& schema, const std::string& path, int depth);
  absl::StatusOr<int> CompileType(const OrderedJson& schema, absl::string_view type,
                                  const std::string& path, int depth);
  absl::StatusOr<int> CompileObject(const OrderedJson& schema, const std::string& path, int depth);
  absl::StatusOr<int> CompileArray(const OrderedJson& schema, const std::string& path, int depth);
  absl::StatusOr<int> CompileLiterals(const OrderedJson& schema, const std::string& path);

  const OrderedJson& root_;
  JsonGrammar& g_;
  absl::flat_hash_map<std::string, int> refs_;
  int any_ = -1;
  int string_ = -1;
};

int SchemaCompiler::StringNode() {
  if (string_ < 0) string_ = Add(Node(JsonNode::Kind::kString));
  return string_;
}

int SchemaCompiler::Literals(std::vector<std::string> texts) {
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  JsonNode node = Node(JsonNode::Kind::kLiterals);
  node.literals = std::move(texts);
  return Add(std::move(node));
}

int SchemaCompiler::FreeObject(int value) {
  JsonNode object = Node(JsonNode::Kind::kFreeObject, value);
  object.alternatives = {StringNode()};  // the keys' node
  return Add(std::move(object));
}

int SchemaCompiler::AnyValue() {
  if (any_ >= 0) return any_;
  any_ = Add(Node(JsonNode::Kind::kUnion));
  const int object = FreeObject(any_);
  const int array = Add(Node(JsonNode::Kind::kArray, any_));
  const int number = Add(Node(JsonNode::Kind::kNumber));
  const int literals = Literals({"false", "null", "true"});
  g_.nodes_[any_].alternatives = {object, array, StringNode(), number, literals};
  return any_;
}

absl::StatusOr<int> SchemaCompiler::Compile(const OrderedJson& schema, const std::string& path,
                                            int depth) {
  if (depth > kMaxSchemaDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " nests deeper than ", kMaxSchemaDepth, " schemas"));
  }
  if (g_.nodes_.size() > static_cast<size_t>(kMaxSchemaNodes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the schema is too large (more than ", kMaxSchemaNodes, " nodes)"));
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return AnyValue();
    return absl::InvalidArgumentError(absl::StrCat(path, " is false: no value would be valid"));
  }
  if (!schema.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " must be a JSON Schema object"));
  }
  for (const auto& [key, value] : schema.items()) {
    if (!Keywords().contains(key) && !Annotations().contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".", key, " is not supported"));
    }
  }
  if (schema.contains("$ref")) return CompileRef(schema, path, depth);
  if (schema.contains("enum") || schema.contains("const")) return CompileLiterals(schema, path);
  const auto type = schema.find("type");
  if (type == schema.end()) {
    if (schema.contains("properties")) return CompileObject(schema, path, depth);
    if (schema.contains("items")) return CompileArray(schema, path, depth);
    return AnyValue();
  }
  if (type->is_string()) return CompileType(schema, type->get<std::string>(), path, depth);
  if (!type->is_array() || type->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".type must be a type name or a non-empty array of them"));
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < type->size(); ++i) {
    if (!(*type)[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".type[", i, "] must be a string"));
    }
    names.push_back((*type)[i].get<std::string>());
  }
  // "integer" with "number" is "number"; the others start with different characters.
  if (std::find(names.begin(), names.end(), "number") != names.end()) {
    std::erase(names, "integer");
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (names.size() == 1) return CompileType(schema, names[0], path, depth);
  JsonNode either = Node(JsonNode::Kind::kUnion);
  for (const std::string& name : names) {
    ABCD_ASSIGN_OR_RETURN(int node, CompileType(schema, name, path, depth));
    either.alternatives.push_back(node);
  }
  return Add(std::move(either));
}

absl::StatusOr<int> SchemaCompiler::CompileType(const OrderedJson& schema, absl::string_view type,
                                                const std::string& path, int depth) {
  if (type == "object") return CompileObject(schema, path, depth);
  if (type == "array") return CompileArray(schema, path, depth);
  if (type == "string") return StringNode();
  if (type == "number" || type == "integer") {
    JsonNode number = Node(JsonNode::Kind::kNumber);
    number.integer = type == "integer";
    return Add(std::move(number));
  }
  if (type == "boolean") return Literals({"false", "true"});
  if (type == "null") return Literals({"null"});
  return absl::InvalidArgumentError(absl::StrCat(path, ".type: unknown type \"", type, "\""));
}

absl::StatusOr<int> SchemaCompiler::CompileRef(const OrderedJson& schema, const std::string& path,
                                               int depth) {
  const OrderedJson& ref = schema["$ref"];
  if (!ref.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".$ref must be a string"));
  }
  const std::string target = ref.get<std::string>();
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  if (target != "#" && target.rfind("#/", 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".$ref: only references within the schema (\"#/$defs/name\") are supported, got \"",
        target, "\""));
  }
  const OrderedJson* at = &root_;
  std::string at_path = "#";
  if (target.size() > 1) {
    for (absl::string_view piece : absl::StrSplit(target.substr(2), '/')) {
      // JSON Pointer escapes: ~1 is '/', ~0 is '~'.
      const std::string part =
          absl::StrReplaceAll(absl::StrReplaceAll(piece, {{"~1", "/"}}), {{"~0", "~"}});
      if (!at->is_object() || !at->contains(part)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".$ref: \"", target, "\" does not name a schema in the document"));
      }
      at = &(*at)[part];
    }
  }
  // A placeholder first, so recursive references find it; it becomes an alias (a union of one).
  const int alias = Add(Node(JsonNode::Kind::kUnion));
  refs_[target] = alias;
  ABCD_ASSIGN_OR_RETURN(int node, Compile(*at, absl::StrCat(path, ".$ref"), depth + 1));
  g_.nodes_[alias].alternatives = {node};
  return alias;
}

absl::StatusOr<int> SchemaCompiler::CompileObject(const OrderedJson& schema,
                                                  const std::string& path, int depth) {
  const auto properties = schema.find("properties");
  const auto additional = schema.find("additionalProperties");
  if (additional != schema.end() && !additional->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".additionalProperties is not supported unless it is true or false"));
  }
  const bool closed = additional != schema.end() && !additional->get<bool>();
  if (properties == schema.end() && !closed) {
    if (schema.contains("required")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".required needs properties"));
    }
    return FreeObject(AnyValue());
  }
  JsonNode object = Node(JsonNode::Kind::kObject);
  if (properties != schema.end()) {
    if (!properties->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".properties must be an object"));
    }
    if (properties->size() > static_cast<size_t>(kMaxSchemaProperties)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".properties has ", properties->size(),
                                                     " entries, at most ", kMaxSchemaProperties));
    }
    for (const auto& [name, property] : properties->items()) {
      std::string key =
          OrderedJson(name).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
      if (key.size() > kMaxKeyBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".properties: a name is longer than ", kMaxKeyBytes, " bytes"));
      }
      object.keys.push_back(std::move(key));
      ABCD_ASSIGN_OR_RETURN(int node,
                            Compile(property, absl::StrCat(path, ".properties.", name), depth + 1));
      object.values.push_back(node);
    }
  }
  std::vector<bool> required(object.keys.size(), false);
  if (const auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".required must be an array"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const OrderedJson& name = (*it)[i];
      const auto at =
          name.is_string() && properties != schema.end()
              ? std::find(object.keys.begin(), object.keys.end(), OrderedJson(name).dump())
              : object.keys.end();
      if (at == object.keys.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".required[", i, "] must name one of the properties, got ",
                         name.dump(-1, ' ', false, OrderedJson::error_handler_t::replace)));
      }
      required[at - object.keys.begin()] = true;
    }
  }
  const int n = static_cast<int>(object.keys.size());
  object.next_required.assign(n + 1, n);
  for (int i = n - 1; i >= 0; --i) {
    object.next_required[i] = required[i] ? i : object.next_required[i + 1];
  }
  return Add(std::move(object));
}

absl::StatusOr<int> SchemaCompiler::CompileArray(const OrderedJson& schema, const std::string& path,
                                                 int depth) {
  JsonNode array = Node(JsonNode::Kind::kArray);
  for (const char* bound : {"minItems", "maxItems"}) {
    const auto it = schema.find(bound);
    if (it == schema.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".", bound, " must be an integer in [0, ", 1 << 20, "]"));
    }
    (bound[1] == 'i' ? array.min_items : array.max_items) = it->get<int>();
  }
  if (array.min_items > array.max_items) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".minItems exceeds maxItems"));
  }
  const auto items = schema.find("items");
  if (items == schema.end()) {
    array.value = AnyValue();
  } else if (items->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".items as an array (a tuple) is not supported"));
  } else {
    ABCD_ASSIGN_OR_RETURN(array.value, Compile(*items, absl::StrCat(path, ".items"), depth + 1));
  }
  return Add(std::move(array));
}

absl::StatusOr<int> SchemaCompiler::CompileLiterals(const OrderedJson& schema,
                                                    const std::string& path) {
  std::vector<std::string> texts;
  std::vector<std::pair<std::string, const OrderedJson*>> values;
  if (const auto it = schema.find("const"); it != schema.end()) {
    values.emplace_back(absl::StrCat(path, ".const"), &*it);
  }
  if (const auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array() || it->empty() || it->size() > kMaxEnumValues) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".enum must be an array of 1 to ", kMaxEnumValues, " values"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      values.emplace_back(absl::StrCat(path, ".enum[", i, "]"), &(*it)[i]);
    }
  }
  const auto type = schema.find("type");
  for (const auto& [where, value] : values) {
    if (type != schema.end()) {
      bool typed = false;
      if (type->is_string()) typed = HasType(*value, type->get<std::string>());
      if (type->is_array()) {
        for (const OrderedJson& t : *type)
          typed |= t.is_string() && HasType(*value, t.get<std::string>());
      }
      if (!typed) {
        return absl::InvalidArgumentError(absl::StrCat(where, " does not have the schema's type"));
      }
    }
    texts.push_back(value->dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
  }
  if (schema.contains("const") && schema.contains("enum") &&
      std::find(texts.begin() + 1, texts.end(), texts[0]) == texts.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".const is not one of enum"));
  }
  if (schema.contains("const")) texts.resize(1);
  return Literals(std::move(texts));
}

absl::Status SchemaCompiler::CheckUnionCycles(const std::string& path) const {
  // An alias chain that comes back to itself ({"$ref": "#"} at the root) names no value.
  const int n = static_cast<int>(g_.nodes_.size());
  std::vector<int> state(n, 0);  // 0 unseen, 1 on the path, 2 done
  std::function<bool(int)> cyclic = [&](int v) {
    if (state[v] == 1) return true;
    if (state[v] == 2) return false;
    state[v] = 1;
    for (int alt : g_.nodes_[v].alternatives) {
      if (g_.nodes_[v].kind == JsonNode::Kind::kUnion && cyclic(alt)) return true;
    }
    state[v] = 2;
    return false;
  };
  for (int v = 0; v < n; ++v) {
    if (cyclic(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a $ref cycle names no value (a reference to itself)"));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyObject() {
  static const std::shared_ptr<const JsonGrammar> any = [] {
    auto grammar = std::make_shared<JsonGrammar>();
    const OrderedJson empty;
    SchemaCompiler compiler(empty, grammar.get());
    grammar->root_ = compiler.FreeObject(compiler.AnyValue());
    return std::shared_ptr<const JsonGrammar>(std::move(grammar));
  }();
  return any;
}

absl::StatusOr<std::shared_ptr<const JsonGrammar>> JsonGrammar::FromSchema(
    const nlohmann::ordered_json& schema, absl::string_view path) {
  auto grammar = std::make_shared<JsonGrammar>();
  SchemaCompiler compiler(schema, grammar.get());
  const std::string where(path);
  ABCD_ASSIGN_OR_RETURN(grammar->root_, compiler.Compile(schema, where, 0));
  ABCD_RETURN_IF_ERROR(compiler.CheckUnionCycles(where));
  return std::shared_ptr<const JsonGrammar>(std::move(grammar));
}

int JsonGrammar::Resolve(int node, uint8_t byte) const {
  const JsonNode& n = nodes_[node];
  switch (n.kind) {
    case JsonNode::Kind::kObject:
    case JsonNode::Kind::kFreeObject:
      return byte == '{' ? node : -1;
    case JsonNode::Kind::kArray:
      return byte == '[' ? node : -1;
    case JsonNode::Kind::kString:
      return byte == '"' ? node : -1;
    case JsonNode::Kind::kNumber:
      return byte == '-' || IsDigit(byte) ? node : -1;
    case JsonNode::Kind::kLiterals:
      for (const std::string& text : n.literals) {
        if (static_cast<uint8_t>(text[0]) == byte) return node;
      }
      return -1;
    case JsonNode::Kind::kUnion:
      for (int alt : n.alternatives) {
        if (const int found = Resolve(alt, byte); found >= 0) return found;
      }
      return -1;
  }
  return -1;
}

// --- the matcher.

JsonMatcher::JsonMatcher(const JsonGrammar* grammar) : grammar_(grammar) {
  if (grammar_ == nullptr) return;
  stack_[0] = Frame{-1, kRootValue, 0, 0, 0, 0, 0};
  size_ = 1;
}

bool JsonMatcher::Advance(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Advance(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonMatcher::Advance(uint8_t byte) {
  while (size_ > 0) {
    int child = -1;
    switch (StepFrame(stack_[size_ - 1], byte, &child)) {
      case Step::kReject:
        return false;
      case Step::kTaken:
        return true;
      case Step::kTakenPop:
        --size_;
        return true;
      case Step::kPush:
        if (size_ == kMaxJsonDepth) return false;
        stack_[size_++] = Frame{child, kStart, 0, 0, 0, 0, 0};
        break;
      case Step::kPopRetry:
        --size_;
        break;
    }
  }
  return false;
}

bool JsonMatcher::MayEnd(const Frame& f) const {
  const JsonNode& n = grammar_->node(f.node);
  if (n.kind == JsonNode::Kind::kNumber) {
    return f.phase == kZero || f.phase == kInt || f.phase == kFrac || f.phase == kExpDigits;
  }
  return n.kind == JsonNode::Kind::kLiterals && f.phase == kBody && f.a < f.b &&
         n.literals[f.a].size() == f.pos;
}

bool JsonMatcher::accepting() const {
  for (int i = size_ - 1; i >= 0; --i) {
    if (stack_[i].node < 0) return stack_[i].phase == kRootDone;
    if (!MayEnd(stack_[i])) return false;
  }
  return false;
}

bool JsonMatcher::complete() const { return size_ == 1 && stack_[0].phase == kRootDone; }

bool JsonMatcher::InStringBody() const {
  if (size_ == 0) return false;
  const Frame& top = stack_[size_ - 1];
  return top.node >= 0 && top.phase == kBody &&
         grammar_->node(top.node).kind == JsonNode::Kind::kString;
}

std::string JsonMatcher::Key() const {
  return std::string(reinterpret_cast<const char*>(stack_), sizeof(Frame) * size_);
}

bool JsonMatcher::TakeWhitespace(Frame& f, uint8_t byte) {
  if (byte != ' ' && byte != '\n') return false;
  if (f.ws >= kMaxWhitespace) return false;
  ++f.ws;
  return true;
}

JsonMatcher::Step JsonMatcher::StepFrame(Frame& f, uint8_t byte, int* child) {
  if (f.node < 0) return StepRoot(f, byte, child);
  const JsonNode& n = grammar_->node(f.node);
  switch (n.kind) {
    case JsonNode::Kind::kObject:
    case JsonNode::Kind::kFreeObject:
      return StepObject(f, n, byte, child);
    case JsonNode::Kind::kArray:
      return StepArray(f, n, byte, child);
    case JsonNode::Kind::kString:
      return StepString(f, byte);
    case JsonNode::Kind::kNumber:
      return StepNumber(f, n, byte);
    case JsonNode::Kind::kLiterals:
      return StepLiterals(f, n, byte);
    case JsonNode::Kind::kUnion:
      break;  // resolved before a frame is pushed
  }
  return Step::kReject;
}

JsonMatcher::Step JsonMatcher::StepRoot(Frame& f, uint8_t byte, int* child) {
  if (f.phase != kRootValue) return Step::kReject;
  if (TakeWhitespace(f, byte)) return Step::kTaken;
  *child = grammar_->Resolve(grammar_->root(), byte);
  if (*child < 0) return Step::kReject;
  f.phase = kRootDone;
  f.ws = 0;
  return Step::kPush;
}

JsonMatcher::Step JsonMatcher::StepObject(Frame& f, const JsonNode& n, uint8_t byte, int* child) {
  const bool free = n.kind == JsonNode::Kind::kFreeObject;
  const uint32_t count = static_cast<uint32_t>(n.keys.size());
  // '}' may come when no required property is left (f.a: the next property to consider).
  const bool may_close = free || n.next_required[f.a] == static_cast<int>(count);
  auto begin_key = [&]() -> Step {
    if (byte != '"') return Step::kReject;
    f.ws = 0;
    if (free) {
      f.phase = kColon;
      *child = n.alternatives[0];
      return Step::kPush;
    }
    if (f.a >= count) return Step::kReject;
    // Candidates: the next property up to and including the first required one.
    const uint32_t last = std::min<uint32_t>(n.next_required[f.a], count - 1);
    f.mask = 0;
    for (uint32_t i = f.a; i <= last; ++i) f.mask |= uint64_t{1} << i;
    f.pos = 1;  // every key starts with '"'
    f.phase = kKey;
    return Step::kTaken;
  };
  switch (f.phase) {
    case kStart:
      if (byte != '{') return Step::kReject;
      f.phase = kOpen;
      return Step::kTaken;
    case kOpen:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte == '}') return may_close ? Step::kTakenPop : Step::kReject;
      return begin_key();
    case kComma:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      return begin_key();
    case kKey: {
      uint64_t mask = 0;
      for (uint64_t m = f.mask; m != 0; m &= m - 1) {
        const int i = std::countr_zero(m);
        const std::string& key = n.keys[i];
        if (key.size() > f.pos && static_cast<uint8_t>(key[f.pos]) == byte)
          mask |= uint64_t{1} << i;
      }
      if (mask == 0) return Step::kReject;
      f.mask = mask;
      ++f.pos;
      const int first = std::countr_zero(mask);
      if ((mask & (mask - 1)) == 0 && n.keys[first].size() == f.pos) {
        f.a = static_cast<uint32_t>(first) + 1;  // the property being written is f.a - 1
        f.phase = kColon;
        f.mask = 0;
        f.pos = 0;
      }
      return Step::kTaken;
    }
    case kColon:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte != ':') return Step::kReject;
      f.phase = kValue;
      f.ws = 0;
      return Step::kTaken;
    case kValue:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      *child = grammar_->Resolve(free ? n.value : n.values[f.a - 1], byte);
      if (*child < 0) return Step::kReject;
      f.phase = kAfter;
      f.ws = 0;
      return Step::kPush;
    case kAfter:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte == '}') return may_close ? Step::kTakenPop : Step::kReject;
      if (byte != ',' || (!free && f.a >= count)) return Step::kReject;
      f.phase = kComma;
      f.ws = 0;
      return Step::kTaken;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepArray(Frame& f, const JsonNode& n, uint8_t byte, int* child) {
  switch (f.phase) {
    case kStart:
      if (byte != '[') return Step::kReject;
      f.phase = kOpen;
      return Step::kTaken;
    case kOpen:
    case kComma:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (f.phase == kOpen && byte == ']') {
        return n.min_items == 0 ? Step::kTakenPop : Step::kReject;
      }
      if (f.a >= static_cast<uint32_t>(n.max_items)) return Step::kReject;
      *child = grammar_->Resolve(n.value, byte);
      if (*child < 0) return Step::kReject;
      ++f.a;
      f.phase = kAfter;
      f.ws = 0;
      return Step::kPush;
    case kAfter:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte == ']') {
        return f.a >= static_cast<uint32_t>(n.min_items) ? Step::kTakenPop : Step::kReject;
      }
      if (byte != ',' || f.a >= static_cast<uint32_t>(n.max_items)) return Step::kReject;
      f.phase = kComma;
      f.ws = 0;
      return Step::kTaken;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepString(Frame& f, uint8_t byte) {
  switch (f.phase) {
    case kStart:
      if (byte != '"') return Step::kReject;
      f.phase = kBody;
      return Step::kTaken;
    case kBody: {
      if (byte == '"') return Step::kTakenPop;
      if (byte == '\\') {
        f.phase = kEscape;
        return Step::kTaken;
      }
      if (byte < 0x20) return Step::kReject;
      if (byte < 0x80) return Step::kTaken;
      // A UTF-8 lead byte: how many continuation bytes follow, and the first one's range
      // (no overlong forms, no surrogates, nothing above U+10FFFF).
      uint8_t lo = 0x80, hi = 0xbf;
      if (byte >= 0xc2 && byte <= 0xdf) {
        f.pos = 1;
      } else if (byte >= 0xe0 && byte <= 0xef) {
        f.pos = 2;
        if (byte == 0xe0) lo = 0xa0;
        if (byte == 0xed) hi = 0x9f;
      } else if (byte >= 0xf0 && byte <= 0xf4) {
        f.pos = 3;
        if (byte == 0xf0) lo = 0x90;
        if (byte == 0xf4) hi = 0x8f;
      } else {
        return Step::kReject;
      }
      f.a = lo | (uint32_t{hi} << 8);
      f.phase = kUtf8;
      return Step::kTaken;
    }
    case kUtf8:
      if (byte < (f.a & 0xff) || byte > (f.a >> 8)) return Step::kReject;
      if (--f.pos == 0) {
        f.phase = kBody;
        f.a = 0;
      } else {
        f.a = 0x80 | (0xbf << 8);
      }
      return Step::kTaken;
    case kEscape:
      if (byte == 'u') {
        f.phase = kHex;
        f.pos = 0;
        f.a = 0;
        return Step::kTaken;
      }
      if (std::string_view("\"\\/bfnrt").find(static_cast<char>(byte)) == std::string_view::npos) {
        return Step::kReject;
      }
      f.phase = kBody;
      return Step::kTaken;
    case kHex:
      if (!IsHex(byte)) return Step::kReject;
      // \uD800-\uDFFF (a surrogate) would need a pair: not generated.
      if (f.pos == 0 && (byte == 'd' || byte == 'D')) f.a = 1;
      if (f.pos == 1 && f.a == 1 && !(byte >= '0' && byte <= '7')) return Step::kReject;
      if (++f.pos == 4) {
        f.phase = kBody;
        f.pos = 0;
        f.a = 0;
      }
      return Step::kTaken;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepNumber(Frame& f, const JsonNode& n, uint8_t byte) {
  const bool digit = IsDigit(byte);
  const bool fraction = !n.integer && byte == '.';
  const bool exponent = !n.integer && (byte == 'e' || byte == 'E');
  auto to = [&f](uint8_t phase, uint16_t digits) {
    f.phase = phase;
    f.pos = digits;
    return Step::kTaken;
  };
  switch (f.phase) {
    case kStart:
    case kMinus:
      if (f.phase == kStart && byte == '-') return to(kMinus, 0);
      if (byte == '0') return to(kZero, 0);
      return digit ? to(kInt, 1) : Step::kReject;
    case kZero:
      if (fraction) return to(kDot, 0);
      return exponent ? to(kExp, 0) : Step::kPopRetry;
    case kInt:
      if (digit && f.pos < kMaxNumberDigits) return to(kInt, f.pos + 1);
      if (fraction) return to(kDot, 0);
      return exponent ? to(kExp, 0) : Step::kPopRetry;
    case kDot:
      return digit ? to(kFrac, 1) : Step::kReject;
    case kFrac:
      if (digit && f.pos < kMaxNumberDigits) return to(kFrac, f.pos + 1);
      return exponent ? to(kExp, 0) : Step::kPopRetry;
    case kExp:
      if (byte == '+' || byte == '-') return to(kExpSign, 0);
      return digit ? to(kExpDigits, 1) : Step::kReject;
    case kExpSign:
      return digit ? to(kExpDigits, 1) : Step::kReject;
    case kExpDigits:
      if (digit && f.pos < kMaxExponentDigits) return to(kExpDigits, f.pos + 1);
      return Step::kPopRetry;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepLiterals(Frame& f, const JsonNode& n, uint8_t byte) {
  if (f.phase == kStart) {
    f.phase = kBody;
    f.a = 0;
    f.b = static_cast<uint32_t>(n.literals.size());
    f.pos = 0;
  }
  const auto& lits = n.literals;
  const size_t pos = f.pos;
  // The range agrees on its first pos bytes and is sorted, so those with `byte` next are a
  // contiguous run (a literal that ends here sorts first).
  const auto begin = lits.begin() + f.a;
  const auto end = lits.begin() + f.b;
  const auto lo = std::partition_point(begin, end, [&](const std::string& s) {
    return s.size() <= pos || static_cast<uint8_t>(s[pos]) < byte;
  });
  const auto hi = std::partition_point(
      lo, end, [&](const std::string& s) { return static_cast<uint8_t>(s[pos]) == byte; });
  if (lo == hi) return MayEnd(f) ? Step::kPopRetry : Step::kReject;
  f.a = static_cast<uint32_t>(lo - lits.begin());
  f.b = static_cast<uint32_t>(hi - lits.begin());
  ++f.pos;
  if (hi - lo == 1 && lo->size() == f.pos) return Step::kTakenPop;
  return Step::kTaken;
}

}  // namespace abcd
