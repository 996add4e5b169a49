// The values a chat template computes with (jinja_template.h): Python's types as Jinja sees
// them — undefined, none, bool, int, float, str, list, dict (insertion-ordered, as Python's),
// plus namespace() objects and callables (a global function or a bound method). Strings hold
// UTF-8; lengths, indexes and slices count code points as Python's do. Lists and dicts are
// shared and treated as immutable (the sandbox HF renders in forbids mutation), except a
// namespace, whose attributes `{% set ns.x = ... %}` writes.
//
// Conversions follow Python: Str() is str() (Jinja's output of {{ value }}: undefined prints
// nothing, None "None", True "True", floats in repr's shortest form, lists and dicts in repr),
// Truthy() is bool(), Equal() is ==, ToJson() is HF's tojson (json.dumps, ensure_ascii=False).
//
// Thread-compatible: values are built and read by one render at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace abcd::chat {

struct Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

struct Value {
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // kString; kFunction: the function's or method's name; kUndefined: its name
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;  // kDict and kNamespace
  std::shared_ptr<Value> self;      // kFunction: the receiver of a bound method (else null)

  static Value Undefined(std::string name = "") {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value None() { return Of(Kind::kNone); }
  static Value Bool(bool b) {
    Value v = Of(Kind::kBool);
    v.b = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v = Of(Kind::kInt);
    v.i = i;
    return v;
  }
  static Value Float(double f) {
    Value v = Of(Kind::kFloat);
    v.f = f;
    return v;
  }
  static Value String(std::string s) {
    Value v = Of(Kind::kString);
    v.s = std::move(s);
    return v;
  }
  static Value List(ValueList items) {
    Value v = Of(Kind::kList);
    v.list = std::make_shared<ValueList>(std::move(items));
    return v;
  }
  static Value Dict(ValueDict items) {
    Value v = Of(Kind::kDict);
    v.dict = std::make_shared<ValueDict>(std::move(items));
    return v;
  }
  static Value Namespace(ValueDict items) {
    Value v = Dict(std::move(items));
    v.kind = Kind::kNamespace;
    return v;
  }
  static Value Function(std::string name, std::shared_ptr<Value> self = nullptr) {
    Value v = Of(Kind::kFunction);
    v.s = std::move(name);
    v.self = std::move(self);
    return v;
  }

  bool undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  // The dict entry named `key`, or null.
  const Value* Find(absl::string_view key) const;

 private:
  static Value Of(Kind kind) {
    Value v;
    v.kind = kind;
    return v;
  }
};

// JSON (a request's messages, extra template variables) -> Value; objects keep their order.
Value FromJson(const nlohmann::ordered_json& json);

// Python's type name of the value ("str", "int", "list", "dict", "NoneType", "Undefined", ...),
// for error messages.
absl::string_view TypeName(const Value& value);

bool Truthy(const Value& value);
std::string Str(const Value& value);   // str(value); undefined -> ""
std::string Repr(const Value& value);  // repr(value)
bool Equal(const Value& a, const Value& b);
// a < b for numbers and strings (code point order); INVALID_ARGUMENT for other types.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: none, separators ", " ": ").
// INVALID_ARGUMENT for undefined, functions and namespaces.
absl::StatusOr<std::string> ToJson(const Value& value, int indent);

// Code points of a UTF-8 string (invalid bytes count one each) and their byte offsets.
std::vector<size_t> CodePointOffsets(absl::string_view text);

}  // namespace abcd::chat
