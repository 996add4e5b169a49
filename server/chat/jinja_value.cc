#include "server/chat/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace abcd::chat {
namespace {

// Python's repr of a float: the shortest digits that round-trip, positional for exponents in
// [-4, 16), else d.ddde+XX.
std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), f, std::chars_format::scientific);
  if (ec != std::errc()) return "nan";
  std::string sci(buffer, end);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(sci.c_str() + e + 1);
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&mantissa, ".", digits.substr(1));
    char exp_text[16];
    std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return sign + mantissa + exp_text;
  }
  std::string out;
  if (exponent < 0) {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
          digits.substr(static_cast<size_t>(exponent) + 1);
  }
  return sign + out;
}

std::string StringRepr(const std::string& s) {
  const bool double_quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = double_quote ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (u < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", u);
          *out += hex;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

absl::Status JsonTo(const Value& v, int indent, int depth, std::string* out) {
  if (depth > 64) return absl::InvalidArgumentError("tojson: value nested too deeply");
  const auto newline = [&](int level) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent * level), ' ');
  };
  const char* item_separator = indent < 0 ? ", " : ",";
  switch (v.kind) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.b ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.i);
      return absl::OkStatus();
    case Value::Kind::kFloat:
      *out += std::isnan(v.f)   ? "NaN"
              : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity")
                                : FloatRepr(v.f);
      return absl::OkStatus();
    case Value::Kind::kString:
      JsonString(v.s, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list->empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) *out += item_separator;
        newline(depth + 1);
        if (absl::Status s = JsonTo((*v.list)[k], indent, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      *out += '{';
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k > 0) *out += item_separator;
        newline(depth + 1);
        JsonString((*v.dict)[k].first, out);
        *out += ": ";
        if (absl::Status s = JsonTo((*v.dict)[k].second, indent, depth + 1, out); !s.ok()) {
          return s;
        }
      }
      newline(depth);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: Object of type ", TypeName(v), " is not JSON serializable"));
  }
}

}  // namespace

const Value* Value::Find(absl::string_view key) const {
  if (dict == nullptr) return nullptr;
  for (const auto& [name, value] : *dict) {
    if (name == key) return &value;
  }
  return nullptr;
}

Value FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::Int(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        items.emplace_back(it.key(), FromJson(it.value()));
      }
      return Value::Dict(std::move(items));
    }
    default:
      return Value::None();
  }
}

absl::string_view TypeName(const Value& value) {
  switch (value.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
  }
  return "object";
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0.0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    default:
      return true;
  }
}

std::string Str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.s;
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.i);
    case Value::Kind::kFloat:
      return FloatRepr(v.f);
    case Value::Kind::kString:
      return StringRepr(v.s);
    case Value::Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) out += ", ";
        out += Repr((*v.list)[k]);
      }
      return out + "]";
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = v.kind == Value::Kind::kDict ? "{" : "<Namespace {";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k > 0) out += ", ";
        absl::StrAppend(&out, StringRepr((*v.dict)[k].first), ": ", Repr((*v.dict)[k].second));
      }
      return out + (v.kind == Value::Kind::kDict ? "}" : "}>");
    }
    case Value::Kind::kFunction:
      return absl::StrCat("<function ", v.s, ">");
  }
  return "";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const auto as_double = [](const Value& v) {
      return v.kind == Value::Kind::kFloat
                 ? v.f
                 : static_cast<double>(v.kind == Value::Kind::kBool ? int64_t{v.b} : v.i);
    };
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      const int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i;
      const int64_t y = b.kind == Value::Kind::kBool ? b.b : b.i;
      return x == y;
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, value] : *a.dict) {
        const Value* other = b.Find(key);
        if (other == nullptr || !Equal(value, *other)) return false;
      }
      return true;
    default:
      return a.dict == b.dict && a.s == b.s && a.self == b.self;
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const auto number = [](const Value& v) {
      return v.kind == Value::Kind::kFloat  ? v.f
             : v.kind == Value::Kind::kBool ? static_cast<double>(v.b)
                                            : static_cast<double>(v.i);
    };
    if (a.kind == Value::Kind::kInt && b.kind == Value::Kind::kInt) return a.i < b.i;
    return number(a) < number(b);
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 keeps code point order
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent) {
  std::string out;
  if (absl::Status status = JsonTo(value, indent, 0, &out); !status.ok()) return status;
  return out;
}

std::vector<size_t> CodePointOffsets(absl::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size());
  for (size_t k = 0; k < text.size();) {
    offsets.push_back(k);
    const auto c = static_cast<unsigned char>(text[k]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 1;
    if (k + len > text.size()) len = 1;
    for (size_t j = 1; j < len; ++j) {
      if ((static_cast<unsigned char>(text[k + j]) & 0xC0) != 0x80) {
        len = 1;
        break;
      }
    }
    k += len;
  }
  return offsets;
}

}  // namespace abcd::chat
