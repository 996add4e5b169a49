#include "server/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace abcd::chat {
namespace {

// Bytes of the UTF-8 code point at text[k] (an invalid byte: 1).
size_t CodePointLength(absl::string_view text, size_t k) {
  const auto c = static_cast<unsigned char>(text[k]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (k + len > text.size()) return 1;
  for (size_t j = 1; j < len; ++j) {
    if ((static_cast<unsigned char>(text[k + j]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

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

char ReprQuote(const std::string& s) {
  return s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
}

// Bytes of one escaped byte in repr() (quote: the enclosing quote).
size_t ReprByteSize(char c, char quote) {
  const auto u = static_cast<unsigned char>(c);
  if (c == quote || c == '\\' || c == '\n' || c == '\r' || c == '\t') return 2;
  return (u < 0x20 || u == 0x7f) ? 4 : 1;
}

absl::Status AppendStringRepr(const std::string& s, RenderBudget& budget, std::string* out) {
  const char quote = ReprQuote(s);
  size_t size = 2;
  for (const char c : s) size += ReprByteSize(c, quote);
  if (absl::Status st = budget.Bytes(size); !st.ok()) return st;
  out->reserve(out->size() + size);
  *out += quote;
  if (size == s.size() + 2) {  // nothing to escape
    *out += s;
    *out += quote;
    return absl::OkStatus();
  }
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      *out += '\\';
      *out += c;
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      *out += hex;
    } else {
      *out += c;
    }
  }
  *out += quote;
  return absl::OkStatus();
}

size_t JsonByteSize(char c) {
  const auto u = static_cast<unsigned char>(c);
  switch (c) {
    case '"':
    case '\\':
    case '\n':
    case '\r':
    case '\t':
    case '\b':
    case '\f':
      return 2;
    default:
      return u < 0x20 ? 6 : 1;
  }
}

absl::Status JsonString(const std::string& s, RenderBudget& budget, std::string* out) {
  size_t size = 2;
  for (const char c : s) size += JsonByteSize(c);
  if (absl::Status st = budget.Bytes(size); !st.ok()) return st;
  out->reserve(out->size() + size);
  *out += '"';
  if (size == s.size() + 2) {  // nothing to escape
    *out += s;
    *out += '"';
    return absl::OkStatus();
  }
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
  return absl::OkStatus();
}

// Appends a short piece (a number, a separator, indentation) within the budget.
absl::Status Put(absl::string_view piece, RenderBudget& budget, std::string* out) {
  if (absl::Status st = budget.Bytes(piece.size()); !st.ok()) return st;
  out->append(piece.data(), piece.size());
  return absl::OkStatus();
}

absl::Status JsonTo(const Value& v, const JsonOptions& options, int depth, RenderBudget& budget,
                    std::string* out) {
  if (depth > 64) return absl::InvalidArgumentError("tojson: value nested too deeply");
  if (absl::Status st = budget.Work(1); !st.ok()) return st;
  const int indent = options.indent;
  const auto newline = [&](int level) -> absl::Status {
    if (indent < 0) return absl::OkStatus();
    const size_t width = static_cast<size_t>(indent) * static_cast<size_t>(level);
    if (absl::Status st = budget.Bytes(width + 1); !st.ok()) return st;
    *out += '\n';
    out->append(width, ' ');
    return absl::OkStatus();
  };
  const std::string& item_separator =
      options.item_separator.has_value() ? *options.item_separator : (indent < 0 ? ", " : ",");
  const std::string& key_separator = options.key_separator;
  switch (v.kind) {
    case Value::Kind::kNone:
      return Put("null", budget, out);
    case Value::Kind::kBool:
      return Put(v.b ? "true" : "false", budget, out);
    case Value::Kind::kInt:
      return Put(absl::StrCat(v.i), budget, out);
    case Value::Kind::kFloat:
      return Put(std::isnan(v.f)   ? "NaN"
                 : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity")
                                   : FloatRepr(v.f),
                 budget, out);
    case Value::Kind::kString:
      return JsonString(v.s.str(), budget, out);
    case Value::Kind::kList:
    case Value::Kind::kDict: {
      const bool list = v.kind == Value::Kind::kList;
      const size_t n = list ? v.list->size() : v.dict->size();
      if (n == 0) return Put(list ? "[]" : "{}", budget, out);
      if (absl::Status st = Put(list ? "[" : "{", budget, out); !st.ok()) return st;
      std::vector<size_t> order(n);
      for (size_t k = 0; k < n; ++k) order[k] = k;
      if (!list && options.sort_keys) {
        if (absl::Status st = budget.Items(n); !st.ok()) return st;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return (*v.dict)[a].first < (*v.dict)[b].first;
        });
      }
      for (size_t k = 0; k < n; ++k) {
        if (k > 0) {
          if (absl::Status st = Put(item_separator, budget, out); !st.ok()) return st;
        }
        if (absl::Status st = newline(depth + 1); !st.ok()) return st;
        if (!list) {
          if (absl::Status st = JsonString(KeyText((*v.dict)[order[k]].first), budget, out);
              !st.ok()) {
            return st;
          }
          if (absl::Status st = Put(key_separator, budget, out); !st.ok()) return st;
        }
        const Value& item = list ? (*v.list)[k] : (*v.dict)[order[k]].second;
        if (absl::Status st = JsonTo(item, options, depth + 1, budget, out); !st.ok()) return st;
      }
      if (absl::Status st = newline(depth); !st.ok()) return st;
      return Put(list ? "]" : "}", budget, out);
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: Object of type ", TypeName(v), " is not JSON serializable"));
  }
}

absl::Status ReprTo(const Value& v, int depth, RenderBudget& budget, std::string* out) {
  if (depth > 64) return absl::InvalidArgumentError("repr: value nested too deeply");
  if (absl::Status st = budget.Work(1); !st.ok()) return st;
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return Put("Undefined", budget, out);
    case Value::Kind::kNone:
      return Put("None", budget, out);
    case Value::Kind::kBool:
      return Put(v.b ? "True" : "False", budget, out);
    case Value::Kind::kInt:
      return Put(absl::StrCat(v.i), budget, out);
    case Value::Kind::kFloat:
      return Put(FloatRepr(v.f), budget, out);
    case Value::Kind::kString:
      return AppendStringRepr(v.s.str(), budget, out);
    case Value::Kind::kList: {
      if (absl::Status st = Put(v.tuple ? "(" : "[", budget, out); !st.ok()) return st;
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) {
          if (absl::Status st = Put(", ", budget, out); !st.ok()) return st;
        }
        if (absl::Status st = ReprTo((*v.list)[k], depth + 1, budget, out); !st.ok()) return st;
      }
      if (!v.tuple) return Put("]", budget, out);
      return Put(v.list->size() == 1 ? ",)" : ")", budget, out);
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const bool dict = v.kind == Value::Kind::kDict;
      if (absl::Status st = Put(dict ? "{" : "<Namespace {", budget, out); !st.ok()) return st;
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k > 0) {
          if (absl::Status st = Put(", ", budget, out); !st.ok()) return st;
        }
        const std::string& key = (*v.dict)[k].first;
        if (absl::Status st = !key.empty() && key[0] == kIntKeyMarker
                                  ? Put(KeyText(key), budget, out)
                                  : AppendStringRepr(key, budget, out);
            !st.ok()) {
          return st;
        }
        if (absl::Status st = Put(": ", budget, out); !st.ok()) return st;
        if (absl::Status st = ReprTo((*v.dict)[k].second, depth + 1, budget, out); !st.ok()) {
          return st;
        }
      }
      return Put(dict ? "}" : "}>", budget, out);
    }
    case Value::Kind::kFunction:
      return Put(absl::StrCat("<function ", v.s.str(), ">"), budget, out);
  }
  return absl::OkStatus();
}

}  // namespace

const Value* Value::Find(absl::string_view key) const {
  if (dict == nullptr) return nullptr;
  for (const auto& [name, value] : *dict) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::optional<std::string> DictKey(const Value& key) {
  if (key.is_string()) return key.s.str();
  if (key.kind == Value::Kind::kInt) return absl::StrCat(std::string(1, kIntKeyMarker), key.i);
  return std::nullopt;
}

Value KeyValue(const std::string& key) {
  int64_t i = 0;
  if (!key.empty() && key[0] == kIntKeyMarker &&
      absl::SimpleAtoi(absl::string_view(key).substr(1), &i)) {
    return Value::Int(i);
  }
  return Value::String(key);
}

std::string KeyText(const std::string& key) {
  return !key.empty() && key[0] == kIntKeyMarker ? key.substr(1) : key;
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
      return !v.s.str().empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    default:
      return true;
  }
}

std::string Str(const Value& v) {
  if (v.undefined()) return "";
  if (v.is_string()) return v.s.str();
  return Repr(v);
}

std::string Repr(const Value& v) {
  RenderBudget unlimited;
  std::string out;
  if (!ReprTo(v, 0, unlimited, &out).ok()) return "<too deep>";
  return out;
}

absl::Status AppendRepr(const Value& value, RenderBudget& budget, std::string* out) {
  return ReprTo(value, 0, budget, out);
}

absl::Status AppendStr(const Value& value, RenderBudget& budget, std::string* out) {
  if (value.undefined()) return absl::OkStatus();
  if (!value.is_string()) return ReprTo(value, 0, budget, out);
  if (absl::Status st = budget.Bytes(value.s.str().size()); !st.ok()) return st;
  *out += value.s.str();
  return absl::OkStatus();
}

absl::StatusOr<std::string> StrOf(const Value& value, RenderBudget& budget) {
  std::string out;
  if (absl::Status st = AppendStr(value, budget, &out); !st.ok()) return st;
  return out;
}

bool Equal(const Value& a, const Value& b, RenderBudget* budget) {
  if (budget != nullptr && !budget->Work(1).ok()) return false;
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
      if (a.s.SameAs(b.s)) return true;
      if (a.s.str().size() != b.s.str().size()) return false;
      if (budget != nullptr && !budget->Scan(a.s.str().size()).ok()) return false;
      return a.s.str() == b.s.str();
    case Value::Kind::kList:
      if (a.list == b.list) return true;
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k], budget)) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict == b.dict) return true;
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, value] : *a.dict) {
        if (budget != nullptr && !budget->Work(static_cast<int64_t>(b.dict->size())).ok()) {
          return false;
        }
        const Value* other = b.Find(key);
        if (other == nullptr || !Equal(value, *other, budget)) return false;
      }
      return true;
    default:
      return a.dict == b.dict && a.s.str() == b.s.str() && a.self == b.self && a.macro == b.macro;
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
  if (a.is_string() && b.is_string()) return a.s.str() < b.s.str();  // UTF-8 keeps code point order
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent) {
  RenderBudget unlimited;
  JsonOptions options;
  options.indent = indent;
  return ToJson(value, options, unlimited);
}

absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options,
                                   RenderBudget& budget) {
  std::string out;
  if (absl::Status status = JsonTo(value, options, 0, budget, &out); !status.ok()) return status;
  return out;
}

absl::Status RenderBudget::Work(int64_t units) {
  if (!status_.ok()) return status_;
  if (units > limits_.max_work - work_) {
    work_ = limits_.max_work;
    return Fail(absl::ResourceExhaustedError(
        absl::StrCat("the chat template's render exceeded its work budget (", limits_.max_work,
                     " units: steps, loop iterations, items and bytes/",
                     RenderLimits::kBytesPerWorkUnit, " touched)")));
  }
  work_ += units;
  if (work_ >= next_poll_) {
    next_poll_ = work_ + RenderLimits::kPollEveryWork;
    if (limits_.cancelled && limits_.cancelled()) {
      return Fail(absl::CancelledError("the chat template's render was cancelled"));
    }
  }
  return absl::OkStatus();
}

absl::Status RenderBudget::Bytes(uint64_t bytes) {
  if (!status_.ok()) return status_;
  if (bytes > limits_.max_bytes - bytes_) {
    bytes_ = limits_.max_bytes;
    return Fail(absl::ResourceExhaustedError(
        absl::StrCat("the chat template's render exceeded its memory budget (", limits_.max_bytes,
                     " bytes of strings and lists created)")));
  }
  bytes_ += bytes;
  return Work(static_cast<int64_t>(bytes / RenderLimits::kBytesPerWorkUnit) + 1);
}

absl::Status RenderBudget::Items(uint64_t n) {
  if (n > (UINT64_MAX / 4) / RenderLimits::kItemBytes)
    n = (UINT64_MAX / 4) / RenderLimits::kItemBytes;
  if (!status_.ok()) return status_;
  if (absl::Status st = Bytes(n * RenderLimits::kItemBytes); !st.ok()) return st;
  return Work(static_cast<int64_t>(4 * n));
}

size_t CodePointCount(absl::string_view text) {
  size_t n = 0;
  for (size_t k = 0; k < text.size(); k += CodePointLength(text, k)) ++n;
  return n;
}

TextSearch::TextSearch(absl::string_view needle) : needle_(needle) {
  if (needle.size() < 2) return;
  fallback_.assign(needle.size(), 0);
  uint32_t k = 0;
  for (size_t i = 1; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fallback_[k - 1];
    if (needle[i] == needle[k]) ++k;
    fallback_[i] = k;
  }
}

size_t TextSearch::Find(absl::string_view text, size_t from) const {
  if (from > text.size()) return absl::string_view::npos;
  if (needle_.empty()) return from;
  if (needle_.size() == 1) return text.find(needle_[0], from);
  size_t k = 0;
  for (size_t i = from; i < text.size(); ++i) {
    while (k > 0 && text[i] != needle_[k]) k = fallback_[k - 1];
    if (text[i] == needle_[k] && ++k == needle_.size()) return i + 1 - needle_.size();
  }
  return absl::string_view::npos;
}

size_t FindText(absl::string_view text, absl::string_view needle, size_t from) {
  return TextSearch(needle).Find(text, from);
}

std::vector<size_t> CodePointOffsets(absl::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size());
  for (size_t k = 0; k < text.size(); k += CodePointLength(text, k)) offsets.push_back(k);
  return offsets;
}

}  // namespace abcd::chat
