#include "server/chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace abcd::chat {
namespace {

absl::Status Error(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status UndefinedError(const Value& value) {
  return Error(value.s.empty() ? "a value is undefined"
                               : absl::StrCat("'", value.s, "' is undefined"));
}

// Decodes the code point at text[k] (invalid bytes read as one each); sets *len.
uint32_t CodePointAt(absl::string_view text, size_t k, size_t* len) {
  const auto c = static_cast<unsigned char>(text[k]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (k + n > text.size()) n = 1;
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t j = 1; j < n; ++j) {
    const auto b = static_cast<unsigned char>(text[k + j]);
    if ((b & 0xC0) != 0x80) {
      n = 1;
      cp = c;
      break;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *len = n;
  return cp;
}

bool IsPyWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string CaseMapped(absl::string_view text, absl::string_view mode) {
  std::string out(text);
  bool word_start = true;
  for (size_t k = 0; k < out.size(); ++k) {
    const char c = out[k];
    if (mode == "upper") {
      out[k] = absl::ascii_toupper(c);
    } else if (mode == "lower") {
      out[k] = absl::ascii_tolower(c);
    } else if (mode == "capitalize") {
      out[k] = k == 0 ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
    } else {  // title: upper after a non-letter, lower after a letter
      out[k] = word_start ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
      word_start = !absl::ascii_isalpha(c) && static_cast<unsigned char>(c) < 0x80;
    }
  }
  return out;
}

absl::StatusOr<std::string> NeedString(const Value& v, absl::string_view what) {
  if (v.is_string()) return v.s;
  return Error(absl::StrCat(what, " must be a string, got ", TypeName(v)));
}

absl::StatusOr<int64_t> NeedInt(const Value& v, absl::string_view what) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return int64_t{v.b};
  return Error(absl::StrCat(what, " must be an integer, got ", TypeName(v)));
}

std::vector<std::string> Split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  size_t k = 0;
  while (k < s.size()) {
    while (k < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[k]))) ++k;
    if (k >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      std::string rest = s.substr(k);
      parts.push_back(Strip(rest, nullptr, false, true));
      break;
    }
    size_t end = k;
    while (end < s.size() && !absl::ascii_isspace(static_cast<unsigned char>(s[end]))) ++end;
    parts.push_back(s.substr(k, end - k));
    k = end;
  }
  return parts;
}

// selectattr/map's attribute getter: "a.b" walks item lookups (jinja2's make_attrgetter).
absl::StatusOr<Value> Attribute(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    int64_t index = 0;
    absl::StatusOr<Value> next = absl::SimpleAtoi(part, &index)
                                     ? GetItem(current, Value::Int(index))
                                     : GetItem(current, Value::String(part));
    if (!next.ok()) return next.status();
    current = *std::move(next);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

absl::StatusOr<Value> SelectOrReject(const Value& input, const CallArgs& args, bool select) {
  const Value* attr = args.Get(0, "");
  if (attr == nullptr || !attr->is_string())
    return Error("selectattr: an attribute name is needed");
  absl::StatusOr<ValueList> items = Iterate(input);
  if (!items.ok()) return items.status();
  CallArgs test_args;
  for (size_t k = 2; k < args.positional.size(); ++k)
    test_args.positional.push_back(args.positional[k]);
  ValueList out;
  for (const Value& item : *items) {
    absl::StatusOr<Value> value = Attribute(item, attr->s);
    if (!value.ok()) return value.status();
    bool keep = Truthy(*value);
    if (args.positional.size() > 1) {
      absl::StatusOr<std::string> test = NeedString(args.positional[1], "selectattr's test");
      if (!test.ok()) return test.status();
      if (!IsTest(*test)) return Error(absl::StrCat("test '", *test, "' is not supported"));
      absl::StatusOr<bool> passed = ApplyTest(*test, *value, test_args);
      if (!passed.ok()) return passed.status();
      keep = *passed;
    }
    if (keep == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Map(const Value& input, const CallArgs& args) {
  absl::StatusOr<ValueList> items = Iterate(input);
  if (!items.ok()) return items.status();
  ValueList out;
  if (const Value* attribute = args.Get(99, "attribute"); attribute != nullptr) {
    const Value* fallback = args.Get(99, "default");
    for (const Value& item : *items) {
      absl::StatusOr<Value> value = Attribute(item, Str(*attribute));
      if (!value.ok()) return value.status();
      out.push_back(value->undefined() && fallback != nullptr ? *fallback : *std::move(value));
    }
    return Value::List(std::move(out));
  }
  const Value* filter = args.Get(0, "");
  if (filter == nullptr || !filter->is_string() || !IsFilter(filter->s) || filter->s == "map") {
    return Error("map: needs attribute= or the name of a supported filter");
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : *items) {
    absl::StatusOr<Value> value = ApplyFilter(filter->s, item, rest);
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
  return Value::List(std::move(out));
}

std::string Escape(const std::string& s) {
  return absl::StrReplaceAll(
      s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&#34;"}, {"'", "&#39;"}});
}

absl::StatusOr<Value> ToInt(const Value& input, const CallArgs& args) {
  const Value* fallback = args.Get(0, "default");
  const Value def = fallback != nullptr ? *fallback : Value::Int(0);
  switch (input.kind) {
    case Value::Kind::kInt:
      return input;
    case Value::Kind::kBool:
      return Value::Int(input.b);
    case Value::Kind::kFloat:
      return std::isfinite(input.f) ? Value::Int(static_cast<int64_t>(input.f)) : def;
    case Value::Kind::kString: {
      int64_t i = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(input.s), &i)) return Value::Int(i);
      double f = 0;
      if (absl::SimpleAtod(input.s, &f) && std::isfinite(f)) {
        return Value::Int(static_cast<int64_t>(f));
      }
      return def;
    }
    default:
      return def;
  }
}

}  // namespace

const Value* CallArgs::Get(size_t index, absl::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (!name.empty() && key == name) return &value;
  }
  return nullptr;
}

bool IsFilter(absl::string_view name) {
  static const absl::flat_hash_set<absl::string_view> kNames = {
      "trim",       "length",     "count", "upper",  "lower",  "capitalize", "title",
      "tojson",     "default",    "d",     "first",  "last",   "join",       "list",
      "selectattr", "rejectattr", "map",   "string", "int",    "float",      "replace",
      "reverse",    "items",      "safe",  "abs",    "escape", "e"};
  return kNames.contains(name);
}

bool IsTest(absl::string_view name) {
  static const absl::flat_hash_set<absl::string_view> kNames = {
      "defined", "undefined", "none",        "string",  "number",   "integer",  "float",
      "boolean", "true",      "false",       "mapping", "iterable", "sequence", "callable",
      "odd",     "even",      "divisibleby", "equalto", "eq",       "==",       "ne",
      "!=",      "lower",     "upper",       "in",      "sameas"};
  return kNames.contains(name);
}

bool IsMethod(absl::string_view name) {
  static const absl::flat_hash_set<absl::string_view> kNames = {
      "strip",    "lstrip", "rstrip",  "upper", "lower", "title", "capitalize", "startswith",
      "endswith", "split",  "replace", "find",  "items", "keys",  "values",     "get"};
  return kNames.contains(name);
}

bool IsGlobalFunction(absl::string_view name) {
  return name == "raise_exception" || name == "namespace" || name == "range" || name == "dict";
}

std::string Strip(absl::string_view text, const std::string* chars, bool left, bool right) {
  const auto strip_cp = [&](uint32_t cp, absl::string_view bytes) {
    return chars == nullptr ? IsPyWhitespace(cp)
                            : absl::string_view(*chars).find(bytes) != absl::string_view::npos;
  };
  size_t begin = 0;
  size_t end = text.size();
  while (left && begin < end) {
    size_t len = 0;
    const uint32_t cp = CodePointAt(text, begin, &len);
    if (!strip_cp(cp, text.substr(begin, len))) break;
    begin += len;
  }
  while (right && end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    const uint32_t cp = CodePointAt(text, start, &len);
    if (start + len != end) len = 1, start = end - 1;
    if (!strip_cp(len == 1 ? static_cast<unsigned char>(text[start]) : cp,
                  text.substr(start, len))) {
      break;
    }
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointOffsets(v.s).size());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict->size());
    default:
      return Error(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [key, value] : *v.dict) keys.push_back(Value::String(key));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      const std::vector<size_t> offsets = CodePointOffsets(v.s);
      for (size_t k = 0; k < offsets.size(); ++k) {
        const size_t end = k + 1 < offsets.size() ? offsets[k + 1] : v.s.size();
        chars.push_back(Value::String(v.s.substr(offsets[k], end - offsets[k])));
      }
      return chars;
    }
    default:
      return Error(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<Value> GetAttr(const Value& object, absl::string_view name) {
  if (object.undefined()) return UndefinedError(object);
  if (object.kind == Value::Kind::kDict || object.kind == Value::Kind::kString) {
    const bool dict_method = name == "items" || name == "keys" || name == "values" || name == "get";
    if ((object.kind == Value::Kind::kDict) == dict_method && IsMethod(name)) {
      return Value::Function(std::string(name), std::make_shared<Value>(object));
    }
  }
  if (object.kind == Value::Kind::kDict || object.kind == Value::Kind::kNamespace) {
    const Value* found = object.Find(name);
    return found != nullptr ? *found : Value::Undefined(std::string(name));
  }
  return Value::Undefined(std::string(name));
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.undefined()) return UndefinedError(object);
  if (object.kind == Value::Kind::kDict && key.is_string()) {
    if (const Value* found = object.Find(key.s); found != nullptr) return *found;
    return GetAttr(object, key.s);
  }
  if ((object.kind == Value::Kind::kList || object.kind == Value::Kind::kString) &&
      (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool)) {
    absl::StatusOr<int64_t> length = Length(object);
    if (!length.ok()) return length.status();
    int64_t index = key.kind == Value::Kind::kBool ? key.b : key.i;
    if (index < 0) index += *length;
    if (index < 0 || index >= *length) return Value::Undefined("[index]");
    if (object.kind == Value::Kind::kList) return (*object.list)[static_cast<size_t>(index)];
    const Value from = Value::Int(index);
    const Value to = Value::Int(index + 1);
    return Slice(object, &from, &to, nullptr);
  }
  if (key.is_string()) return GetAttr(object, key.s);
  return Value::Undefined("[key]");
}

absl::StatusOr<Value> Slice(const Value& object, const Value* start, const Value* stop,
                            const Value* step) {
  if (object.kind != Value::Kind::kList && object.kind != Value::Kind::kString) {
    if (object.undefined()) return UndefinedError(object);
    return Error(absl::StrCat("'", TypeName(object), "' object is not subscriptable"));
  }
  const auto bound = [](const Value* v, int64_t fallback) -> absl::StatusOr<int64_t> {
    if (v == nullptr || v->kind == Value::Kind::kNone) return fallback;
    return NeedInt(*v, "a slice index");
  };
  absl::StatusOr<int64_t> step_or = bound(step, 1);
  if (!step_or.ok()) return step_or.status();
  const int64_t st = *step_or;
  if (st == 0) return Error("slice step cannot be zero");
  const std::vector<size_t> offsets =
      object.is_string() ? CodePointOffsets(object.s) : std::vector<size_t>{};
  const int64_t n = object.is_string() ? static_cast<int64_t>(offsets.size())
                                       : static_cast<int64_t>(object.list->size());
  absl::StatusOr<int64_t> a = bound(start, st > 0 ? 0 : n - 1);
  absl::StatusOr<int64_t> b = bound(stop, st > 0 ? n : -1);
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  const auto clamp = [&](int64_t i) {  // Python's PySlice_AdjustIndices
    if (i < 0) i += n;
    if (i < 0) return st > 0 ? int64_t{0} : int64_t{-1};
    if (i >= n) return st > 0 ? n : n - 1;
    return i;
  };
  const int64_t lo = (start == nullptr || start->kind == Value::Kind::kNone) ? *a : clamp(*a);
  const int64_t hi = (stop == nullptr || stop->kind == Value::Kind::kNone) ? *b : clamp(*b);
  std::vector<int64_t> picked;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) picked.push_back(i);
  if (object.kind == Value::Kind::kList) {
    ValueList out;
    for (const int64_t i : picked) out.push_back((*object.list)[static_cast<size_t>(i)]);
    return Value::List(std::move(out));
  }
  std::string out;
  for (const int64_t i : picked) {
    const size_t from = offsets[static_cast<size_t>(i)];
    const size_t to = static_cast<size_t>(i) + 1 < offsets.size()
                          ? offsets[static_cast<size_t>(i) + 1]
                          : object.s.size();
    out.append(object.s, from, to - from);
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args) {
  if (name == "default" || name == "d") {
    const Value* fallback = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use =
        input.undefined() || (boolean != nullptr && Truthy(*boolean) && !Truthy(input));
    return use ? (fallback != nullptr ? *fallback : Value::String("")) : input;
  }
  if (name == "safe") return input;
  if (input.undefined() && name != "length" && name != "count" && name != "list" &&
      name != "string" && name != "items" && name != "trim" && name != "upper" && name != "lower" &&
      name != "join" && name != "first" && name != "last") {
    return UndefinedError(input);
  }
  if (name == "length" || name == "count") {
    absl::StatusOr<int64_t> n = Length(input);
    if (!n.ok()) return n.status();
    return Value::Int(*n);
  }
  if (name == "trim") {
    const Value* chars = args.Get(0, "chars");
    const std::string set = chars != nullptr && chars->is_string() ? chars->s : "";
    return Value::String(Strip(Str(input), chars != nullptr ? &set : nullptr, true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    return Value::String(CaseMapped(Str(input), name));
  }
  if (name == "string") return Value::String(Str(input));
  if (name == "escape" || name == "e") return Value::String(Escape(Str(input)));
  if (name == "tojson") {
    const Value* indent = args.Get(0, "indent");
    int64_t width = -1;
    if (indent != nullptr && indent->kind != Value::Kind::kNone) {
      absl::StatusOr<int64_t> n = NeedInt(*indent, "tojson's indent");
      if (!n.ok()) return n.status();
      width = std::clamp<int64_t>(*n, 0, 16);
    }
    absl::StatusOr<std::string> json = ToJson(input, static_cast<int>(width));
    if (!json.ok()) return json.status();
    return Value::String(*std::move(json));
  }
  if (name == "first" || name == "last" || name == "list" || name == "reverse" || name == "join") {
    absl::StatusOr<ValueList> items = Iterate(input);
    if (!items.ok()) return items.status();
    if (name == "first" || name == "last") {
      if (items->empty()) return Value::Undefined(std::string(name));
      return name == "first" ? items->front() : items->back();
    }
    if (name == "reverse") {
      std::reverse(items->begin(), items->end());
      if (!input.is_string()) return Value::List(*std::move(items));
      std::string out;
      for (const Value& c : *items) out += c.s;
      return Value::String(std::move(out));
    }
    if (name == "list") return Value::List(*std::move(items));
    const Value* separator = args.Get(0, "d");
    const Value* attribute = args.Get(1, "attribute");
    std::string out;
    for (size_t k = 0; k < items->size(); ++k) {
      if (k > 0 && separator != nullptr) out += Str(*separator);
      if (attribute != nullptr) {
        absl::StatusOr<Value> value = Attribute((*items)[k], Str(*attribute));
        if (!value.ok()) return value.status();
        out += Str(*value);
      } else {
        out += Str((*items)[k]);
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "items") {
    if (input.undefined()) return Value::List({});
    if (input.kind != Value::Kind::kDict) return Error("items: the value must be a mapping");
    ValueList pairs;
    for (const auto& [key, value] : *input.dict) {
      pairs.push_back(Value::List({Value::String(key), value}));
    }
    return Value::List(std::move(pairs));
  }
  if (name == "selectattr" || name == "rejectattr") {
    return SelectOrReject(input, args, name == "selectattr");
  }
  if (name == "map") return Map(input, args);
  if (name == "int") return ToInt(input, args);
  if (name == "float") {
    if (input.kind == Value::Kind::kFloat) return input;
    if (input.is_number())
      return Value::Float(input.kind == Value::Kind::kBool ? input.b : input.i);
    double f = 0;
    if (input.is_string() && absl::SimpleAtod(input.s, &f)) return Value::Float(f);
    const Value* fallback = args.Get(0, "default");
    return fallback != nullptr ? *fallback : Value::Float(0.0);
  }
  if (name == "replace") {
    const Value* old_text = args.Get(0, "old");
    const Value* new_text = args.Get(1, "new");
    if (old_text == nullptr || new_text == nullptr) return Error("replace: needs old and new");
    const Value* count = args.Get(2, "count");
    CallArgs method_args;
    method_args.positional = {Value::String(Str(*old_text)), Value::String(Str(*new_text))};
    if (count != nullptr) method_args.positional.push_back(*count);
    return CallMethod(Value::String(Str(input)), "replace", method_args);
  }
  if (name == "abs") {
    if (input.kind == Value::Kind::kInt) return Value::Int(input.i < 0 ? -input.i : input.i);
    if (input.kind == Value::Kind::kFloat) return Value::Float(std::fabs(input.f));
    return Error(absl::StrCat("bad operand type for abs(): '", TypeName(input), "'"));
  }
  return Error(absl::StrCat("filter '", name, "' is not supported"));
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  const Value* arg = args.Get(0, "");
  if (name == "defined") return !v.undefined();
  if (name == "undefined") return v.undefined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.kind == K::kString;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "iterable") {
    return v.kind == K::kUndefined || v.kind == K::kList || v.kind == K::kDict ||
           v.kind == K::kString;
  }
  if (name == "sequence") return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString;
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "lower") return v.is_string() && CaseMapped(v.s, "lower") == v.s;
  if (name == "upper") return v.is_string() && CaseMapped(v.s, "upper") == v.s;
  if (arg == nullptr && name != "odd" && name != "even") {
    return Error(absl::StrCat("test '", name, "' needs an argument"));
  }
  if (name == "equalto" || name == "eq" || name == "==") return Equal(v, *arg);
  if (name == "ne" || name == "!=") return !Equal(v, *arg);
  if (name == "sameas") {
    if (v.kind != arg->kind) return false;
    if (v.kind == K::kNone || v.kind == K::kUndefined) return true;
    if (v.kind == K::kBool) return v.b == arg->b;
    return v.list == arg->list && v.dict == arg->dict && v.kind != K::kString &&
           v.kind != K::kInt && v.kind != K::kFloat;
  }
  if (name == "in") {
    CallArgs none;
    absl::StatusOr<ValueList> items = Iterate(*arg);
    if (!items.ok()) return items.status();
    if (arg->is_string()) {
      if (!v.is_string()) return Error("'in <string>' requires a string on the left");
      return arg->s.find(v.s) != std::string::npos;
    }
    for (const Value& item : *items) {
      if (Equal(item, v)) return true;
    }
    return false;
  }
  absl::StatusOr<int64_t> n = NeedInt(v, absl::StrCat("the value tested 'is ", name, "'"));
  if (!n.ok()) return n.status();
  if (name == "odd") return (*n % 2) != 0;
  if (name == "even") return (*n % 2) == 0;
  absl::StatusOr<int64_t> d = NeedInt(*arg, "divisibleby's argument");
  if (!d.ok()) return d.status();
  if (*d == 0) return Error("divisibleby 0");
  return (*n % *d) == 0;
}

absl::StatusOr<Value> CallMethod(const Value& self, absl::string_view name, const CallArgs& args) {
  if (self.undefined()) return UndefinedError(self);
  if (self.kind == Value::Kind::kDict) {
    if (name == "get") {
      const Value* key = args.Get(0, "");
      if (key == nullptr) return Error("get() takes a key");
      const Value* found = key->is_string() ? self.Find(key->s) : nullptr;
      if (found != nullptr) return *found;
      const Value* fallback = args.Get(1, "");
      return fallback != nullptr ? *fallback : Value::None();
    }
    ValueList out;
    for (const auto& [key, value] : *self.dict) {
      if (name == "items") out.push_back(Value::List({Value::String(key), value}));
      if (name == "keys") out.push_back(Value::String(key));
      if (name == "values") out.push_back(value);
    }
    if (name == "items" || name == "keys" || name == "values") return Value::List(std::move(out));
  }
  if (!self.is_string() || name == "items" || name == "keys" || name == "values" || name == "get") {
    return Error(absl::StrCat("'", TypeName(self), "' object has no attribute '", name, "'"));
  }
  const std::string& s = self.s;
  const Value* first = args.Get(0, "");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    std::string chars;
    const bool have = first != nullptr && first->kind != Value::Kind::kNone;
    if (have) {
      absl::StatusOr<std::string> c = NeedString(*first, absl::StrCat(name, "'s argument"));
      if (!c.ok()) return c.status();
      chars = *c;
    }
    return Value::String(Strip(s, have ? &chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return Value::String(CaseMapped(s, name));
  }
  if (name == "startswith" || name == "endswith") {
    if (first == nullptr) return Error(absl::StrCat(name, "() takes a string"));
    std::vector<std::string> options;
    if (first->kind == Value::Kind::kList) {
      for (const Value& item : *first->list) options.push_back(Str(item));
    } else {
      absl::StatusOr<std::string> c = NeedString(*first, absl::StrCat(name, "'s argument"));
      if (!c.ok()) return c.status();
      options.push_back(*c);
    }
    for (const std::string& option : options) {
      if (name == "startswith" ? absl::StartsWith(s, option) : absl::EndsWith(s, option)) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "split") {
    const Value* sep = args.Get(0, "sep");
    const Value* maxsplit = args.Get(1, "maxsplit");
    int64_t limit = -1;
    if (maxsplit != nullptr) {
      absl::StatusOr<int64_t> n = NeedInt(*maxsplit, "split's maxsplit");
      if (!n.ok()) return n.status();
      limit = *n;
    }
    const bool by_sep = sep != nullptr && sep->kind != Value::Kind::kNone;
    if (by_sep && (!sep->is_string() || sep->s.empty())) {
      return Error("split's separator must be a non-empty string");
    }
    ValueList out;
    for (std::string& part : Split(s, by_sep ? &sep->s : nullptr, limit)) {
      out.push_back(Value::String(std::move(part)));
    }
    return Value::List(std::move(out));
  }
  if (name == "replace") {
    const Value* second = args.Get(1, "");
    if (first == nullptr || second == nullptr || !first->is_string() || !second->is_string()) {
      return Error("replace() takes two strings");
    }
    int64_t count = -1;
    if (const Value* c = args.Get(2, "count"); c != nullptr) {
      absl::StatusOr<int64_t> n = NeedInt(*c, "replace's count");
      if (!n.ok()) return n.status();
      count = *n;
    }
    if (first->s.empty()) return Error("replace() with an empty pattern is not supported");
    std::string out;
    size_t start = 0;
    for (int64_t done = 0; count < 0 || done < count; ++done) {
      const size_t at = s.find(first->s, start);
      if (at == std::string::npos) break;
      absl::StrAppend(&out, s.substr(start, at - start), second->s);
      start = at + first->s.size();
    }
    out += s.substr(start);
    return Value::String(std::move(out));
  }
  if (name == "find") {
    if (first == nullptr || !first->is_string()) return Error("find() takes a string");
    const size_t at = s.find(first->s);
    if (at == std::string::npos) return Value::Int(-1);
    return Value::Int(static_cast<int64_t>(CodePointOffsets(s.substr(0, at)).size()));
  }
  return Error(absl::StrCat("method '", name, "' is not supported"));
}

absl::StatusOr<Value> CallGlobal(absl::string_view name, const CallArgs& args) {
  if (name == "raise_exception") {
    const Value* message = args.Get(0, "");
    absl::Status status = absl::InvalidArgumentError(message != nullptr ? Str(*message) : "");
    status.SetPayload(kTemplateExceptionPayload, absl::Cord("1"));
    return status;
  }
  if (name == "namespace" || name == "dict") {
    ValueDict items;
    if (const Value* init = args.Get(0, ""); init != nullptr) {
      if (init->kind != Value::Kind::kDict) return Error(absl::StrCat(name, "() takes a mapping"));
      items = *init->dict;
    }
    for (const auto& keyword : args.keyword) {  // not a structured binding: clang 14 captures
      auto it = std::find_if(items.begin(), items.end(),
                             [&](const auto& item) { return item.first == keyword.first; });
      if (it != items.end()) {
        it->second = keyword.second;
      } else {
        items.emplace_back(keyword.first, keyword.second);
      }
    }
    return name == "namespace" ? Value::Namespace(std::move(items)) : Value::Dict(std::move(items));
  }
  // range(stop) / range(start, stop[, step])
  std::vector<int64_t> bounds;
  for (const Value& v : args.positional) {
    absl::StatusOr<int64_t> n = NeedInt(v, "range's argument");
    if (!n.ok()) return n.status();
    bounds.push_back(*n);
  }
  if (bounds.empty() || bounds.size() > 3) return Error("range() takes 1 to 3 integers");
  const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
  const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
  const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
  if (step == 0) return Error("range() step must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRangeItems) {
      return Error(absl::StrCat("range() of more than ", kMaxRangeItems, " items"));
    }
    out.push_back(Value::Int(i));
  }
  return Value::List(std::move(out));
}

}  // namespace abcd::chat
