// The schema compiler of json_grammar.h: a JSON Schema (subset) -> JsonGrammar nodes, and
// JsonGrammar::Resolve. The matcher is in json_grammar.cc.
#include <algorithm>
#include <bitset>
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "engine/sampling/json_grammar.h"
#include "engine/sampling/json_schema_scalars.h"
#include "engine/sampling/json_schema_tagged.h"

namespace abcd {

using OrderedJson = nlohmann::ordered_json;

namespace {

constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxEnumValues = 1024;
constexpr size_t kMaxKeyBytes = 1024;

bool IsDigitByte(uint8_t b) { return b >= '0' && b <= '9'; }

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "title", "description", "$schema", "$id", "$comment", "default", "examples"};
  return *names;
}

const absl::flat_hash_set<std::string>& Keywords() {
  static const auto* names = new absl::flat_hash_set<std::string>{"type",
                                                                  "properties",
                                                                  "required",
                                                                  "additionalProperties",
                                                                  "items",
                                                                  "minItems",
                                                                  "maxItems",
                                                                  "enum",
                                                                  "const",
                                                                  "$ref",
                                                                  "$defs",
                                                                  "definitions",
                                                                  "anyOf",
                                                                  "oneOf",
                                                                  "propertyNames",
                                                                  "minLength",
                                                                  "maxLength",
                                                                  "pattern",
                                                                  "format",
                                                                  "minimum",
                                                                  "maximum",
                                                                  "exclusiveMinimum",
                                                                  "exclusiveMaximum"};
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

  // Compiles `schema` (named `path` in errors); `depth`: schemas enclosing it.
  absl::StatusOr<int> Compile(const OrderedJson& schema, const std::string& path, int depth) {
    ABCD_ASSIGN_OR_RETURN(const int node, CompileSchema(schema, path, depth));
    paths_.try_emplace(node, path);
    return node;
  }
  int AnyValue();
  int FreeObject(int value, int key = -1);
  absl::Status CheckUnionCycles(const std::string& path) const;
  // INVALID_ARGUMENT naming a union's path when two of its alternatives can start with the same
  // byte (the matcher picks an alternative by its first byte). After CheckUnionCycles.
  absl::Status CheckUnionOverlaps(const std::string& path) const;
  // Sets every node's min_depth; INVALID_ARGUMENT naming the schema's path when a part of it
  // reachable from `root` has no finite value, or the shortest value of `root` nests deeper than
  // the matcher's stack. After CheckUnionCycles (an alias cycle has no depth at all).
  absl::Status SetMinDepths(int root, const std::string& path);

 private:
  int Add(JsonNode node) {
    g_.nodes_.push_back(std::move(node));
    return static_cast<int>(g_.nodes_.size()) - 1;
  }
  absl::StatusOr<int> CompileSchema(const OrderedJson& schema, const std::string& path, int depth);
  int StringNode();
  int Literals(std::vector<std::string> texts);
  absl::StatusOr<int> CompileRef(const OrderedJson& schema, const std::string& path, int depth);
  absl::StatusOr<int> CompileType(const OrderedJson& schema, absl::string_view type,
                                  const std::string& path, int depth);
  absl::StatusOr<int> CompileObject(const OrderedJson& schema, const std::string& path, int depth);
  absl::StatusOr<int> CompileArray(const OrderedJson& schema, const std::string& path, int depth);
  absl::StatusOr<int> CompileLiterals(const OrderedJson& schema, const std::string& path);
  absl::StatusOr<int> CompileUnion(const OrderedJson& schema, const std::string& path, int depth);

  const OrderedJson& root_;
  JsonGrammar& g_;
  absl::flat_hash_map<std::string, int> refs_;
  absl::flat_hash_map<int, std::string> paths_;  // node -> the path it was first compiled at
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

int SchemaCompiler::FreeObject(int value, int key) {
  JsonNode object = Node(JsonNode::Kind::kFreeObject, value);
  object.alternatives = {key >= 0 ? key : StringNode()};  // the keys' node
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

absl::StatusOr<int> SchemaCompiler::CompileSchema(const OrderedJson& schema,
                                                  const std::string& path, int depth) {
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
    // `discriminator` (pydantic's, beside a tagged union) is read as an annotation there only.
    const bool union_annotation =
        key == "discriminator" && (schema.contains("anyOf") || schema.contains("oneOf"));
    if (!Keywords().contains(key) && !Annotations().contains(key) && !union_annotation) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".", key, " is not supported"));
    }
  }
  if (schema.contains("anyOf") || schema.contains("oneOf")) {
    return CompileUnion(schema, path, depth);
  }
  if (schema.contains("$ref")) return CompileRef(schema, path, depth);
  if (schema.contains("enum") || schema.contains("const")) return CompileLiterals(schema, path);
  const auto type = schema.find("type");
  if (type == schema.end()) {
    // Without a type, the keywords say which type is generated (a subset of what validates).
    if (schema.contains("properties") || schema.contains("additionalProperties") ||
        schema.contains("propertyNames")) {
      return CompileObject(schema, path, depth);
    }
    if (schema.contains("items")) return CompileArray(schema, path, depth);
    if (HasStringKeywords(schema)) return CompileType(schema, "string", path, depth);
    if (HasNumberKeywords(schema)) return CompileType(schema, "number", path, depth);
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
  if (type == "string") {
    if (!HasStringKeywords(schema)) return StringNode();
    ABCD_ASSIGN_OR_RETURN(JsonNode string, CompileStringNode(schema, path, &g_.dfas_));
    return Add(std::move(string));
  }
  if (type == "number" || type == "integer") {
    JsonNode number = Node(JsonNode::Kind::kNumber);
    number.integer = type == "integer";
    ABCD_RETURN_IF_ERROR(BoundNumber(schema, path, &number));
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
  // A schema for additional properties: checked, and the values of an object without
  // properties (with properties, only those are generated, which any such schema allows).
  int extra = -1;
  if (additional != schema.end() && !additional->is_boolean()) {
    ABCD_ASSIGN_OR_RETURN(
        extra, Compile(*additional, absl::StrCat(path, ".additionalProperties"), depth + 1));
  }
  const bool closed =
      additional != schema.end() && additional->is_boolean() && !additional->get<bool>();
  int key_node = -1;
  if (const auto names = schema.find("propertyNames"); names != schema.end()) {
    if (properties != schema.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".propertyNames together with properties is not supported"));
    }
    ABCD_ASSIGN_OR_RETURN(key_node,
                          Compile(*names, absl::StrCat(path, ".propertyNames"), depth + 1));
    const JsonNode& k = g_.nodes_[key_node];
    bool strings = k.kind == JsonNode::Kind::kString;
    if (k.kind == JsonNode::Kind::kLiterals) {
      strings = std::all_of(k.literals.begin(), k.literals.end(),
                            [](const std::string& text) { return text[0] == '"'; });
    }
    if (!strings) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ".propertyNames must be a string schema (type string, or string enum/const)"));
    }
  }
  if (properties == schema.end() && !closed) {
    if (schema.contains("required")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".required needs properties"));
    }
    return FreeObject(extra >= 0 ? extra : AnyValue(), key_node);
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
  for (const char* keyword : {"minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                              "exclusiveMinimum", "exclusiveMaximum"}) {
    if (schema.contains(keyword)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".", keyword, " together with enum or const is not supported"));
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

absl::StatusOr<int> SchemaCompiler::CompileUnion(const OrderedJson& schema, const std::string& path,
                                                 int depth) {
  if (schema.contains("anyOf") && schema.contains("oneOf")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": anyOf and oneOf together are not supported"));
  }
  const bool one = schema.contains("oneOf");
  const std::string keyword = one ? "oneOf" : "anyOf";
  for (const auto& [key, value] : schema.items()) {
    // pydantic writes `discriminator` beside a tagged union's oneOf: the tag is found anyway.
    if (key != keyword && key != "$defs" && key != "definitions" && key != "discriminator" &&
        !Annotations().contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".", key, " next to ", keyword, " is not supported"));
    }
  }
  const OrderedJson& list = schema[keyword];
  if (!list.is_array() || list.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".", keyword, " must be a non-empty array of schemas"));
  }
  // enum/const alternatives become one set of literals; the others must start with different
  // characters (checked once every $ref is compiled), so a value matches exactly one of them,
  // which also makes oneOf exact.
  std::vector<int> nodes;
  std::vector<std::string> literals;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = absl::StrCat(path, ".", keyword, "[", i, "]");
    ABCD_ASSIGN_OR_RETURN(const int node, Compile(list[i], at, depth + 1));
    if (g_.nodes_[node].kind != JsonNode::Kind::kLiterals) {
      nodes.push_back(node);
      continue;
    }
    for (const std::string& text : g_.nodes_[node].literals) {
      if (one && std::find(literals.begin(), literals.end(), text) != literals.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": ", text, " also matches an earlier alternative of oneOf"));
      }
      literals.push_back(text);
    }
  }
  // anyOf with a plain number: the integers and bounded numbers add nothing (Union[int, float]).
  const auto plain_number = [this](int v) {
    const JsonNode& n = g_.nodes_[v];
    return n.kind == JsonNode::Kind::kNumber && !n.integer && !n.bounded;
  };
  if (!one && std::any_of(nodes.begin(), nodes.end(), plain_number)) {
    const int keep = *std::find_if(nodes.begin(), nodes.end(), plain_number);
    std::erase_if(nodes,
                  [&](int v) { return v != keep && g_.nodes_[v].kind == JsonNode::Kind::kNumber; });
    std::erase_if(literals, [](const std::string& text) {
      return text[0] == '-' || (text[0] >= '0' && text[0] <= '9');
    });
  }
  // anyOf with any value ({} or true) is any value; with a plain string, the other strings add
  // nothing (string enum/const values included).
  auto has = [&nodes](int v) {
    return v >= 0 && std::find(nodes.begin(), nodes.end(), v) != nodes.end();
  };
  if (!one && has(any_)) return any_;
  if (!one && has(string_)) {
    std::erase_if(
        nodes, [&](int v) { return v != string_ && g_.nodes_[v].kind == JsonNode::Kind::kString; });
    std::erase_if(literals, [](const std::string& text) { return text[0] == '"'; });
  }
  if (!literals.empty()) nodes.push_back(Literals(std::move(literals)));
  if (nodes.size() == 1) return nodes[0];
  JsonNode either = Node(JsonNode::Kind::kUnion);
  either.alternatives = std::move(nodes);
  return Add(std::move(either));
}

absl::Status SchemaCompiler::CheckUnionOverlaps(const std::string& path) const {
  const int n = static_cast<int>(g_.nodes_.size());
  std::vector<std::bitset<256>> first(n);
  std::vector<bool> done(n, false);
  // The bytes a value of v can start with (unions have no cycles by now).
  std::function<const std::bitset<256>&(int)> starts = [&](int v) -> const std::bitset<256>& {
    if (done[v]) return first[v];
    std::bitset<256> bytes;
    const JsonNode& node = g_.nodes_[v];
    if (node.kind == JsonNode::Kind::kUnion) {
      for (int alt : node.alternatives) bytes |= starts(alt);
    } else if (node.kind == JsonNode::Kind::kLiterals) {
      for (const std::string& text : node.literals) bytes.set(static_cast<uint8_t>(text[0]));
    } else {
      for (int b = 0; b < 256; ++b) {
        if (g_.Resolve(v, static_cast<uint8_t>(b)) >= 0) bytes.set(b);
      }
    }
    first[v] = bytes;
    done[v] = true;
    return first[v];
  };
  for (int v = 0; v < n; ++v) {
    const JsonNode& node = g_.nodes_[v];
    if (node.kind != JsonNode::Kind::kUnion) continue;
    std::bitset<256> seen;
    for (int alt : node.alternatives) {
      const std::bitset<256>& bytes = starts(alt);
      if (const std::bitset<256> both = seen & bytes; both.any()) {
        int b = 0;
        while (!both.test(b)) ++b;
        const auto named = paths_.find(v);
        return absl::InvalidArgumentError(absl::StrCat(
            named != paths_.end() ? named->second : path,
            ": alternatives that can start with the same character ('", std::string(1, b),
            "') are not supported (anyOf/oneOf/type alternatives must be of different JSON types, "
            "enum/const values, or objects that one required property's enum/const values tell "
            "apart)"));
      }
      seen |= bytes;
    }
  }
  return absl::OkStatus();
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

absl::Status SchemaCompiler::SetMinDepths(int root, const std::string& path) {
  std::vector<JsonNode>& nodes = g_.nodes_;
  const int n = static_cast<int>(nodes.size());
  // What a node's shortest value needs: all of an object's required properties' values or a
  // non-empty array's items (and), or one of a union's alternatives (or).
  auto needs = [&nodes](int v) {
    const JsonNode& node = nodes[v];
    std::vector<int> out;
    if (!node.tag_targets.empty()) {  // a tagged union: every alternative it may become
      out = node.tag_targets;
    } else if (node.kind == JsonNode::Kind::kObject) {
      for (size_t i = 0; i < node.values.size(); ++i) {
        if (node.next_required[i] == static_cast<int>(i)) out.push_back(node.values[i]);
      }
    } else if (node.kind == JsonNode::Kind::kArray && node.min_items > 0) {
      out.push_back(node.value);
    } else if (node.kind == JsonNode::Kind::kUnion) {
      out = node.alternatives;
    }
    return out;
  };
  // Which nodes have a finite value at all: a worklist over the reversed needs, O(edges).
  std::vector<std::vector<int>> needed_by(n);
  std::vector<int> missing(n, 0);  // and-nodes: needs not yet finite
  std::vector<bool> finite(n, false);
  std::vector<int> queue;
  for (int v = 0; v < n; ++v) {
    const std::vector<int> deps = needs(v);
    for (int d : deps) needed_by[d].push_back(v);
    missing[v] = static_cast<int>(deps.size());
    const bool is_union = nodes[v].kind == JsonNode::Kind::kUnion;
    if (!is_union && deps.empty()) {
      finite[v] = true;
      queue.push_back(v);
    }
  }
  while (!queue.empty()) {
    const int u = queue.back();
    queue.pop_back();
    for (int p : needed_by[u]) {
      if (finite[p]) continue;
      if (nodes[p].kind != JsonNode::Kind::kUnion && --missing[p] > 0) continue;
      finite[p] = true;
      queue.push_back(p);
    }
  }
  // Every node reachable from the root must have a finite value (an optional property that can
  // never end would leave the matcher stuck inside it): the first concrete one that does not is
  // named.
  std::vector<bool> seen(n, false);
  std::vector<int> stack = {root};
  seen[root] = true;
  int stuck = -1;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    const JsonNode& node = nodes[v];
    if (!finite[v] && (stuck < 0 || (nodes[stuck].kind == JsonNode::Kind::kUnion &&
                                     node.kind != JsonNode::Kind::kUnion))) {
      stuck = v;
    }
    std::vector<int> next = node.values;
    if (node.value >= 0) next.push_back(node.value);
    next.insert(next.end(), node.alternatives.begin(), node.alternatives.end());
    next.insert(next.end(), node.tag_targets.begin(), node.tag_targets.end());
    for (auto it = next.rbegin(); it != next.rend(); ++it) {
      if (!seen[*it]) {
        seen[*it] = true;
        stack.push_back(*it);
      }
    }
  }
  if (stuck >= 0) {
    const auto named = paths_.find(stuck);
    return absl::InvalidArgumentError(absl::StrCat(
        named != paths_.end() ? named->second : path,
        ": no finite value satisfies this schema (a recursive $ref without a base case: every "
        "value needs another one inside it through required properties or minItems)"));
  }
  // Frames of the shortest value, capped at kMaxJsonDepth + 1 (too deep to generate): after
  // round k every node whose shortest value needs k frames or fewer has its depth.
  constexpr int kTooDeep = kMaxJsonDepth + 1;
  std::vector<int> depth(n, kTooDeep);
  for (int round = 0; round <= kTooDeep; ++round) {
    bool changed = false;
    for (int v = 0; v < n; ++v) {
      const JsonNode& node = nodes[v];
      int d = 1;
      if (node.kind == JsonNode::Kind::kUnion) {
        d = kTooDeep;
        for (int alt : node.alternatives) d = std::min(d, depth[alt]);
      } else if (!node.tag_targets.empty()) {  // becomes one of them in its own frame
        for (int alt : node.tag_targets) d = std::max(d, depth[alt]);
      } else {
        for (int need : needs(v)) d = std::max(d, std::min(kTooDeep, depth[need] + 1));
      }
      if (d < depth[v]) {
        depth[v] = d;
        changed = true;
      }
    }
    if (!changed) break;
  }
  for (int v = 0; v < n; ++v) nodes[v].min_depth = depth[v];
  if (1 + depth[root] > kMaxJsonDepth) {  // the root's own frame comes first
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": its shortest value nests more than ", kMaxJsonDepth - 1,
                     " values deep (one inside another), the most that can be generated"));
  }
  return absl::OkStatus();
}

namespace {

// False when `value` (inside `depth` arrays or objects) nests deeper than
// kMaxSchemaDocumentDepth; `trail` then gets the steps from `value` down to the deepest one,
// innermost first. Recurses at most kMaxSchemaDocumentDepth deep.
bool WithinDocumentDepth(const OrderedJson& value, int depth, std::vector<std::string>* trail) {
  if (!value.is_structured()) return true;
  if (depth >= kMaxSchemaDocumentDepth) return false;
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      if (!WithinDocumentDepth(child, depth + 1, trail)) {
        trail->push_back(absl::StrCat(".", key));
        return false;
      }
    }
    return true;
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (!WithinDocumentDepth(value[i], depth + 1, trail)) {
      trail->push_back(absl::StrCat("[", i, "]"));
      return false;
    }
  }
  return true;
}

}  // namespace

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyObject() {
  static const std::shared_ptr<const JsonGrammar> any = [] {
    auto grammar = std::make_shared<JsonGrammar>();
    const OrderedJson empty;
    SchemaCompiler compiler(empty, grammar.get());
    grammar->root_ = compiler.FreeObject(compiler.AnyValue());
    // Cannot fail: every node of any value has a one-frame value.
    (void)compiler.SetMinDepths(grammar->root_, "");
    return std::shared_ptr<const JsonGrammar>(std::move(grammar));
  }();
  return any;
}

absl::StatusOr<std::shared_ptr<const JsonGrammar>> JsonGrammar::FromSchema(
    const nlohmann::ordered_json& schema, absl::string_view path) {
  auto grammar = std::make_shared<JsonGrammar>();
  SchemaCompiler compiler(schema, grammar.get());
  const std::string where(path);
  if (std::vector<std::string> trail; !WithinDocumentDepth(schema, 0, &trail)) {
    std::string at = where;
    for (auto it = trail.rbegin(); it != trail.rend(); ++it) at += *it;
    return absl::InvalidArgumentError(
        absl::StrCat(at, " nests deeper than ", kMaxSchemaDocumentDepth, " levels"));
  }
  ABCD_ASSIGN_OR_RETURN(grammar->root_, compiler.Compile(schema, where, 0));
  ABCD_RETURN_IF_ERROR(compiler.CheckUnionCycles(where));
  MergeTaggedUnions(&grammar->nodes_);
  ABCD_RETURN_IF_ERROR(compiler.CheckUnionOverlaps(where));
  ABCD_RETURN_IF_ERROR(compiler.SetMinDepths(grammar->root_, where));
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
      return byte == '-' || IsDigitByte(byte) ? node : -1;
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

}  // namespace abcd
