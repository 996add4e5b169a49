// An independent JSON Schema validator for the keywords json_schema_keywords_test.cc covers
// (type, enum/const, anyOf/oneOf, properties/required/additionalProperties/propertyNames,
// items/minItems/maxItems, minLength/maxLength in code points, pattern through std::regex,
// format, minimum/maximum/exclusive bounds, $ref to "#/$defs/..."): written apart from
// engine/sampling so the grammar's outputs are checked by code that shares nothing with it.
// Test-only; pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>
#include <string>

#include "nlohmann/json.hpp"

namespace abcd::json_schema_validator {

using nlohmann::json;

// Code points of valid UTF-8 (the outputs are; parse() checked that).
inline size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
  return n;
}

inline bool ValidDate(const std::string& s) {
  int y = 0, m = 0, d = 0;
  if (!std::regex_match(s, std::regex(R"(\d{4}-\d{2}-\d{2})"))) return false;
  std::sscanf(s.c_str(), "%d-%d-%d", &y, &m, &d);
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m >= 1 && m <= 12 && d >= 1 && d <= kDays[m - 1] + (m == 2 && leap);
}

inline bool ValidTime(const std::string& s) {
  std::smatch m;
  if (!std::regex_match(s, m, std::regex(R"((\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-](\d\d):(\d\d)))"))) {
    return false;
  }
  auto num = [&m](int i) { return std::stoi(m[i].str()); };
  if (num(1) > 23 || num(2) > 59 || num(3) > 60) return false;
  return m[5] == "Z" || (num(6) <= 23 && num(7) <= 59);
}

inline bool ValidFormat(const std::string& format, const std::string& s) {
  if (format == "date") return ValidDate(s);
  if (format == "time") return ValidTime(s);
  if (format == "date-time") {
    const size_t t = s.find('T');
    return t != std::string::npos && ValidDate(s.substr(0, t)) && ValidTime(s.substr(t + 1));
  }
  if (format == "uuid") {
    return std::regex_match(s, std::regex(R"([0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})"));
  }
  if (format == "ipv4") {
    std::smatch m;
    if (!std::regex_match(s, m, std::regex(R"((\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}))"))) {
      return false;
    }
    for (int i = 1; i <= 4; ++i) {
      const std::string part = m[i].str();
      if ((part.size() > 1 && part[0] == '0') || std::stoi(part) > 255) return false;
    }
    return true;
  }
  if (format == "email") {
    const size_t at = s.find('@');
    if (at == 0 || at == std::string::npos || s.find('@', at + 1) != std::string::npos) {
      return false;
    }
    const std::string domain = s.substr(at + 1);
    return std::regex_match(s.substr(0, at), std::regex(R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+)")) &&
           std::regex_match(
               domain, std::regex(R"(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,})"));
  }
  return false;
}

// `value` against `schema` (the keywords of this file; `root` for $ref "#/$defs/..").
inline bool Valid(const json& schema, const json& value, const json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"].get<std::string>();
    return Valid(ref == "#" ? root : root["$defs"][ref.substr(8)], value, root);
  }
  if (schema.contains("anyOf") || schema.contains("oneOf")) {
    const bool one = schema.contains("oneOf");
    int matches = 0;
    for (const json& alt : schema[one ? "oneOf" : "anyOf"]) matches += Valid(alt, value, root);
    return one ? matches == 1 : matches > 0;
  }
  if (schema.contains("const") && schema["const"] != value) return false;
  if (schema.contains("enum") &&
      std::find(schema["enum"].begin(), schema["enum"].end(), value) == schema["enum"].end()) {
    return false;
  }
  if (schema.contains("type")) {
    const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    bool typed = false;
    for (const json& t : types) {
      const std::string name = t.get<std::string>();
      typed |= (name == "string" && value.is_string()) || (name == "object" && value.is_object()) ||
               (name == "array" && value.is_array()) || (name == "boolean" && value.is_boolean()) ||
               (name == "null" && value.is_null()) || (name == "number" && value.is_number()) ||
               (name == "integer" && value.is_number() &&
                std::trunc(value.get<double>()) == value.get<double>());
    }
    if (!typed) return false;
  }
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (schema.contains("minLength") && CodePoints(s) < schema["minLength"].get<size_t>()) {
      return false;
    }
    if (schema.contains("maxLength") && CodePoints(s) > schema["maxLength"].get<size_t>()) {
      return false;
    }
    if (schema.contains("pattern") &&
        !std::regex_search(s, std::regex(schema["pattern"].get<std::string>()))) {
      return false;
    }
    if (schema.contains("format") && !ValidFormat(schema["format"].get<std::string>(), s)) {
      return false;
    }
  }
  if (value.is_number()) {
    const double x = value.get<double>();
    if (schema.contains("minimum") && x < schema["minimum"].get<double>()) return false;
    if (schema.contains("maximum") && x > schema["maximum"].get<double>()) return false;
    if (schema.contains("exclusiveMinimum") && x <= schema["exclusiveMinimum"].get<double>()) {
      return false;
    }
    if (schema.contains("exclusiveMaximum") && x >= schema["exclusiveMaximum"].get<double>()) {
      return false;
    }
  }
  if (value.is_array()) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>()) {
      return false;
    }
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>()) {
      return false;
    }
    for (const json& item : value) {
      if (schema.contains("items") && !Valid(schema["items"], item, root)) return false;
    }
  }
  if (value.is_object()) {
    const json properties = schema.value("properties", json::object());
    for (const json& name : schema.value("required", json::array())) {
      if (!value.contains(name.get<std::string>())) return false;
    }
    for (const auto& [key, v] : value.items()) {
      if (schema.contains("propertyNames") && !Valid(schema["propertyNames"], key, root)) {
        return false;
      }
      if (properties.contains(key)) {
        if (!Valid(properties[key], v, root)) return false;
      } else if (schema.contains("additionalProperties") &&
                 !Valid(schema["additionalProperties"], v, root)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace abcd::json_schema_validator
