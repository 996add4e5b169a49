// Field access for reading tokenizer.json (hf_tokenizer.h): every error names the file and the
// field's path inside it ("tokenizer.json: pre_tokenizer.pretokenizers[1].type: ...").
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/hf_regex.h"
#include "nlohmann/json.hpp"

namespace abcd::hf {

using json = nlohmann::json;

inline absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", field, ": ", message));
}

inline std::string Sub(absl::string_view field, absl::string_view key) {
  return absl::StrCat(field, ".", key);
}

// The object's member `key`, or nullptr where it is absent or null.
inline const json* Member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

inline absl::StatusOr<std::string> StringField(const json& object, absl::string_view field,
                                               const char* key) {
  const json* value = Member(object, key);
  if (value == nullptr || !value->is_string()) {
    return FieldError(Sub(field, key), "must be a string");
  }
  return value->get<std::string>();
}

inline absl::StatusOr<bool> BoolField(const json& object, absl::string_view field, const char* key,
                                      bool fallback) {
  const json* value = Member(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return FieldError(Sub(field, key), "must be true or false");
  return value->get<bool>();
}

// A `{"String": s}` or `{"Regex": r}` pattern (Split, Replace) compiled with PCRE2.
inline absl::StatusOr<std::unique_ptr<Regex>> PatternField(const json& object,
                                                           absl::string_view field) {
  const std::string name = Sub(field, "pattern");
  const json* pattern = Member(object, "pattern");
  if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
    return FieldError(name, "must be {\"String\": ...} or {\"Regex\": ...}");
  }
  const bool literal = pattern->contains("String");
  if (!literal && !pattern->contains("Regex")) {
    return FieldError(name, "must be {\"String\": ...} or {\"Regex\": ...}");
  }
  const json& text = pattern->begin().value();
  if (!text.is_string()) return FieldError(name, "must hold a string");
  absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Compile(text.get<std::string>(), literal);
  if (!regex.ok()) return FieldError(name, regex.status().message());
  return regex;
}

// The object's "type", for the messages that refuse one.
inline std::string TypeName(const json& object) {
  const json* type = Member(object, "type");
  return type != nullptr && type->is_string() ? type->get<std::string>() : "(none)";
}

}  // namespace abcd::hf
