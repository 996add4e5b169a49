#include "server/chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>

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

// A substring search (TextSearch: Knuth-Morris-Pratt) reads each byte with a branch or two,
// several times slower than a copy: a searched byte costs kSearchCost scanned bytes.
constexpr uint64_t kSearchCost = 4;

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

// str.split(sep, maxsplit) (null sep: runs of whitespace), each part charged before it is made.
absl::StatusOr<ValueList> Split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                RenderBudget& budget) {
  ValueList parts;
  const auto add = [&](size_t from, size_t length) -> absl::Status {
    if (absl::Status st = budget.Items(1); !st.ok()) return st;
    if (absl::Status st = budget.Bytes(length); !st.ok()) return st;
    parts.push_back(Value::String(s.substr(from, length)));
    return absl::OkStatus();
  };
  if (absl::Status st = budget.Scan(kSearchCost * s.size()); !st.ok()) return st;
  if (sep != nullptr) {
    if (absl::Status st = budget.Bytes(sep->size() * sizeof(uint32_t)); !st.ok()) return st;
    const TextSearch search(*sep);
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = search.Find(s, start);
      if (at == std::string::npos) break;
      if (absl::Status st = add(start, at - start); !st.ok()) return st;
      start = at + sep->size();
    }
    if (absl::Status st = add(start, s.size() - start); !st.ok()) return st;
    return parts;
  }
  size_t k = 0;
  while (k < s.size()) {
    while (k < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[k]))) ++k;
    if (k >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = s.size();
      while (end > k && absl::ascii_isspace(static_cast<unsigned char>(s[end - 1]))) --end;
      if (absl::Status st = add(k, end - k); !st.ok()) return st;
      break;
    }
    size_t end = k;
    while (end < s.size() && !absl::ascii_isspace(static_cast<unsigned char>(s[end]))) ++end;
    if (absl::Status st = add(k, end - k); !st.ok()) return st;
    k = end;
  }
  return parts;
}

}  // namespace

absl::Status UndefinedError(const Value& value) {
  return Error(value.s.str().empty() ? "a value is undefined"
                                     : absl::StrCat("'", value.s.str(), "' is undefined"));
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

absl::StatusOr<int64_t> NeedInt(const Value& v, absl::string_view what) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return int64_t{v.b};
  return Error(absl::StrCat(what, " must be an integer, got ", TypeName(v)));
}

absl::StatusOr<Value> NewString(std::string text, RenderBudget& budget) {
  if (absl::Status st = budget.Bytes(text.size()); !st.ok()) return st;
  return Value::String(std::move(text));
}

const Value* CallArgs::Get(size_t index, absl::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (!name.empty() && key == name) return &value;
  }
  return nullptr;
}

bool IsFilter(absl::string_view name) {
  static const absl::flat_hash_set<absl::string_view> kNames = {
      "trim",       "length",     "count", "upper",  "lower", "capitalize", "title",   "tojson",
      "default",    "d",          "first", "last",   "join",  "list",       "select",  "reject",
      "selectattr", "rejectattr", "map",   "string", "int",   "float",      "replace", "reverse",
      "items",      "safe",       "abs",   "escape", "e",     "dictsort",   "unique",  "sort",
      "min",        "max",        "sum",   "indent"};
  return kNames.contains(name);
}

bool IsTest(absl::string_view name) {
  static const absl::flat_hash_set<absl::string_view> kNames = {
      "defined", "undefined", "none",        "string",  "number",   "integer",  "float",
      "boolean", "true",      "false",       "mapping", "iterable", "sequence", "callable",
      "odd",     "even",      "divisibleby", "equalto", "eq",       "==",       "ne",
      "!=",      "lower",     "upper",       "in",      "sameas",   "gt",       ">",
      "ge",      ">=",        "lt",          "<",       "le",       "<="};
  return kNames.contains(name);
}

bool IsMethod(absl::string_view name) {
  static const absl::flat_hash_set<absl::string_view> kNames = {
      "strip",    "lstrip", "rstrip",  "upper", "lower", "title", "capitalize", "startswith",
      "endswith", "split",  "replace", "find",  "items", "keys",  "values",     "get"};
  return kNames.contains(name);
}

bool IsGlobalFunction(absl::string_view name) {
  return name == "raise_exception" || name == "namespace" || name == "range" || name == "dict" ||
         name == "strftime_now";
}

std::string Strip(absl::string_view text, const std::string* chars, bool left, bool right) {
  absl::flat_hash_set<uint32_t> set;
  if (chars != nullptr) {
    for (size_t k = 0; k < chars->size();) {
      size_t len = 0;
      const uint32_t cp = CodePointAt(*chars, k, &len);
      set.insert(len == 1 ? static_cast<unsigned char>((*chars)[k]) : cp);
      k += len;
    }
  }
  const auto strip_cp = [&](uint32_t cp) {
    return chars == nullptr ? IsPyWhitespace(cp) : set.contains(cp);
  };
  size_t begin = 0;
  size_t end = text.size();
  while (left && begin < end) {
    size_t len = 0;
    const uint32_t cp = CodePointAt(text, begin, &len);
    if (!strip_cp(len == 1 ? static_cast<unsigned char>(text[begin]) : cp)) break;
    begin += len;
  }
  while (right && end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    const uint32_t cp = CodePointAt(text, start, &len);
    if (start + len != end) len = 1, start = end - 1;
    if (!strip_cp(len == 1 ? static_cast<unsigned char>(text[start]) : cp)) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

absl::StatusOr<int64_t> Length(const Value& v, RenderBudget& budget) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      if (absl::Status st = budget.Scan(v.s.str().size()); !st.ok()) return st;
      return static_cast<int64_t>(CodePointCount(v.s.str()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict->size());
    default:
      return Error(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

absl::StatusOr<std::shared_ptr<const ValueList>> Iterate(const Value& v, RenderBudget& budget) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return std::make_shared<const ValueList>();
    case Value::Kind::kList:
      return std::shared_ptr<const ValueList>(v.list);
    case Value::Kind::kDict: {
      if (absl::Status st = budget.Items(v.dict->size()); !st.ok()) return st;
      auto keys = std::make_shared<ValueList>();
      keys->reserve(v.dict->size());
      for (const auto& [key, value] : *v.dict) {
        if (absl::Status st = budget.Bytes(key.size()); !st.ok()) return st;
        keys->push_back(KeyValue(key));
      }
      return std::shared_ptr<const ValueList>(std::move(keys));
    }
    case Value::Kind::kString: {
      const size_t n = CodePointCount(v.s.str());
      if (absl::Status st = budget.Items(n); !st.ok()) return st;
      if (absl::Status st = budget.Bytes(v.s.str().size()); !st.ok()) return st;
      auto chars = std::make_shared<ValueList>();
      chars->reserve(n);
      for (size_t k = 0; k < v.s.str().size();) {
        size_t len = 0;
        CodePointAt(v.s.str(), k, &len);
        chars->push_back(Value::String(v.s.str().substr(k, len)));
        k += len;
      }
      return std::shared_ptr<const ValueList>(std::move(chars));
    }
    default:
      return Error(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<Value> GetAttr(const Value& object, absl::string_view name, RenderBudget& budget) {
  if (object.undefined()) return UndefinedError(object);
  if (object.kind == Value::Kind::kDict || object.kind == Value::Kind::kString) {
    const bool dict_method = name == "items" || name == "keys" || name == "values" || name == "get";
    if ((object.kind == Value::Kind::kDict) == dict_method && IsMethod(name)) {
      return Value::Function(std::string(name), std::make_shared<Value>(object));
    }
  }
  if (object.kind == Value::Kind::kDict || object.kind == Value::Kind::kNamespace) {
    if (absl::Status st = budget.Work(static_cast<int64_t>(object.dict->size())); !st.ok()) {
      return st;
    }
    const Value* found = object.Find(name);
    return found != nullptr ? *found : Value::Undefined(std::string(name));
  }
  return Value::Undefined(std::string(name));
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key, RenderBudget& budget) {
  if (object.undefined()) return UndefinedError(object);
  if (object.kind == Value::Kind::kDict && (key.is_string() || key.kind == Value::Kind::kInt)) {
    if (absl::Status st = budget.Work(static_cast<int64_t>(object.dict->size())); !st.ok()) {
      return st;
    }
    if (const Value* found = object.Find(*DictKey(key)); found != nullptr) return *found;
    if (!key.is_string()) return Value::Undefined();
    return GetAttr(object, key.s.str(), budget);
  }
  if ((object.kind == Value::Kind::kList || object.kind == Value::Kind::kString) &&
      (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool)) {
    absl::StatusOr<int64_t> length = Length(object, budget);
    if (!length.ok()) return length.status();
    int64_t index = key.kind == Value::Kind::kBool ? key.b : key.i;
    if (index < 0) index += *length;
    if (index < 0 || index >= *length) return Value::Undefined("[index]");
    if (object.kind == Value::Kind::kList) return (*object.list)[static_cast<size_t>(index)];
    const Value from = Value::Int(index);
    const Value to = Value::Int(index + 1);
    return Slice(object, &from, &to, nullptr, budget);
  }
  if (key.is_string()) return GetAttr(object, key.s.str(), budget);
  return Value::Undefined("[key]");
}

absl::StatusOr<Value> Slice(const Value& object, const Value* start, const Value* stop,
                            const Value* step, RenderBudget& budget) {
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
  std::vector<size_t> offsets;
  if (object.is_string()) {
    if (absl::Status s = budget.Bytes(object.s.str().size() * sizeof(size_t)); !s.ok()) return s;
    offsets = CodePointOffsets(object.s.str());
  }
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
  // Python's slice length.
  int64_t count = 0;
  if (st > 0 && lo < hi) count = (hi - lo + st - 1) / st;
  if (st < 0 && lo > hi) count = (lo - hi + (-st) - 1) / (-st);
  if (object.kind == Value::Kind::kList) {
    if (absl::Status s = budget.Items(static_cast<uint64_t>(count)); !s.ok()) return s;
    ValueList out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0, i = lo; k < count; ++k, i += st) {
      out.push_back((*object.list)[static_cast<size_t>(i)]);
    }
    return Value::List(std::move(out));
  }
  if (absl::Status s = budget.Bytes(object.s.str().size()); !s.ok()) return s;
  std::string out;
  for (int64_t k = 0, i = lo; k < count; ++k, i += st) {
    const size_t from = offsets[static_cast<size_t>(i)];
    const size_t to = static_cast<size_t>(i) + 1 < offsets.size()
                          ? offsets[static_cast<size_t>(i) + 1]
                          : object.s.str().size();
    out.append(object.s.str(), from, to - from);
  }
  return Value::String(std::move(out));
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& v, const CallArgs& args,
                               RenderBudget& budget) {
  using K = Value::Kind;
  if (!IsTest(name)) return Error(absl::StrCat("test 'is ", name, "' is not supported"));
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
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    if (absl::Status st = budget.Bytes(v.s.str().size()); !st.ok()) return st;
    return CaseMapped(v.s.str(), name) == v.s.str();
  }
  if (arg == nullptr && name != "odd" && name != "even") {
    return Error(absl::StrCat("test '", name, "' needs an argument"));
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "ne" || name == "!=") {
    const bool equal = Equal(v, *arg, &budget);
    if (!budget.ok()) return budget.status();
    return equal == (name != "ne" && name != "!=");
  }
  if (name == "gt" || name == ">" || name == "le" || name == "<=") {
    absl::StatusOr<bool> less = Less(*arg, v);
    if (!less.ok()) return less.status();
    return (name == "gt" || name == ">") ? *less : !*less;
  }
  if (name == "lt" || name == "<" || name == "ge" || name == ">=") {
    absl::StatusOr<bool> less = Less(v, *arg);
    if (!less.ok()) return less.status();
    return (name == "lt" || name == "<") ? *less : !*less;
  }
  if (name == "sameas") {
    if (v.kind != arg->kind) return false;
    if (v.kind == K::kNone || v.kind == K::kUndefined) return true;
    if (v.kind == K::kBool) return v.b == arg->b;
    return v.list == arg->list && v.dict == arg->dict && v.kind != K::kString &&
           v.kind != K::kInt && v.kind != K::kFloat;
  }
  if (name == "in") {
    if (arg->is_string()) {
      if (!v.is_string()) return Error("'in <string>' requires a string on the left");
      if (absl::Status st = budget.Scan(kSearchCost * (arg->s.str().size() + v.s.str().size()));
          !st.ok()) {
        return st;
      }
      if (absl::Status st = budget.Bytes(v.s.size() * sizeof(uint32_t)); !st.ok()) return st;
      return FindText(arg->s.str(), v.s.str()) != std::string::npos;
    }
    if (arg->kind == K::kDict) {
      if (absl::Status st = budget.Work(static_cast<int64_t>(arg->dict->size())); !st.ok()) {
        return st;
      }
      const std::optional<std::string> key = DictKey(v);
      return key.has_value() && arg->Find(*key) != nullptr;
    }
    absl::StatusOr<std::shared_ptr<const ValueList>> items = Iterate(*arg, budget);
    if (!items.ok()) return items.status();
    for (const Value& item : **items) {
      if (Equal(item, v, &budget)) return true;
      if (!budget.ok()) return budget.status();
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
  if (*d == -1) return true;
  return (*n % *d) == 0;
}

absl::StatusOr<Value> CallMethod(const Value& self, absl::string_view name, const CallArgs& args,
                                 RenderBudget& budget) {
  if (self.undefined()) return UndefinedError(self);
  if (self.kind == Value::Kind::kDict) {
    if (absl::Status st = budget.Work(static_cast<int64_t>(self.dict->size())); !st.ok()) return st;
    if (name == "get") {
      const Value* key = args.Get(0, "");
      if (key == nullptr) return Error("get() takes a key");
      const std::optional<std::string> key_text = DictKey(*key);
      const Value* found = key_text.has_value() ? self.Find(*key_text) : nullptr;
      if (found != nullptr) return *found;
      const Value* fallback = args.Get(1, "");
      return fallback != nullptr ? *fallback : Value::None();
    }
    if (name == "items" || name == "keys" || name == "values") {
      if (absl::Status st = budget.Items(self.dict->size() * (name == "items" ? 3 : 1)); !st.ok()) {
        return st;
      }
      ValueList out;
      out.reserve(self.dict->size());
      for (const auto& [key, value] : *self.dict) {
        if (name != "values") {
          if (absl::Status st = budget.Bytes(key.size()); !st.ok()) return st;
        }
        if (name == "items") out.push_back(Value::Tuple({KeyValue(key), value}));
        if (name == "keys") out.push_back(KeyValue(key));
        if (name == "values") out.push_back(value);
      }
      return Value::List(std::move(out));
    }
  }
  if (!self.is_string() || name == "items" || name == "keys" || name == "values" || name == "get") {
    return Error(absl::StrCat("'", TypeName(self), "' object has no attribute '", name, "'"));
  }
  const std::string& s = self.s.str();
  const Value* first = args.Get(0, "");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const std::string* chars = nullptr;
    const bool have = first != nullptr && first->kind != Value::Kind::kNone;
    if (have) {
      if (!first->is_string()) return Error(absl::StrCat(name, "'s argument must be a string"));
      chars = &first->s.str();
    }
    if (absl::Status st = budget.Bytes(s.size() + (have ? chars->size() : 0)); !st.ok()) return st;
    return Value::String(Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    if (absl::Status st = budget.Bytes(s.size()); !st.ok()) return st;
    return Value::String(CaseMapped(s, name));
  }
  if (name == "startswith" || name == "endswith") {
    if (first == nullptr) return Error(absl::StrCat(name, "() takes a string"));
    std::vector<const Value*> options;
    if (first->kind == Value::Kind::kList) {
      for (const Value& item : *first->list) options.push_back(&item);
    } else {
      options.push_back(first);
    }
    for (const Value* option : options) {
      if (!option->is_string()) return Error(absl::StrCat(name, "'s argument must be a string"));
      if (absl::Status st = budget.Scan(option->s.str().size()); !st.ok()) return st;
      if (name == "startswith" ? absl::StartsWith(s, option->s.str())
                               : absl::EndsWith(s, option->s.str())) {
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
    if (by_sep && (!sep->is_string() || sep->s.str().empty())) {
      return Error("split's separator must be a non-empty string");
    }
    absl::StatusOr<ValueList> parts = Split(s, by_sep ? &sep->s.str() : nullptr, limit, budget);
    if (!parts.ok()) return parts.status();
    return Value::List(*std::move(parts));
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
    const std::string& old_text = first->s.str();
    const std::string& new_text = second->s.str();
    if (old_text.empty()) return Error("replace() with an empty pattern is not supported");
    // Count the matches first, so the result's size is known (and charged) before it is built.
    if (absl::Status st = budget.Scan(kSearchCost * (s.size() + old_text.size())); !st.ok()) {
      return st;
    }
    if (absl::Status st = budget.Bytes(old_text.size() * sizeof(uint32_t)); !st.ok()) return st;
    const TextSearch search(old_text);
    std::vector<size_t> matches;
    for (size_t start = 0; count < 0 || static_cast<int64_t>(matches.size()) < count;) {
      const size_t at = search.Find(s, start);
      if (at == std::string::npos) break;
      if (absl::Status st = budget.Bytes(sizeof(size_t)); !st.ok()) return st;
      matches.push_back(at);
      start = at + old_text.size();
    }
    const uint64_t removed = matches.size() * old_text.size();
    const uint64_t each = new_text.size();
    if (!matches.empty() && each > (UINT64_MAX / 4) / matches.size()) {
      return budget.Bytes(UINT64_MAX / 4);
    }
    if (absl::Status st = budget.Bytes(s.size() - removed + each * matches.size()); !st.ok()) {
      return st;
    }
    std::string out;
    out.reserve(s.size() - removed + each * matches.size());
    size_t start = 0;
    for (const size_t at : matches) {
      out.append(s, start, at - start);
      out += new_text;
      start = at + old_text.size();
    }
    out.append(s, start, std::string::npos);
    return Value::String(std::move(out));
  }
  if (name == "find") {
    if (first == nullptr || !first->is_string()) return Error("find() takes a string");
    if (absl::Status st = budget.Scan(kSearchCost * (s.size() + first->s.str().size())); !st.ok()) {
      return st;
    }
    if (absl::Status st = budget.Bytes(first->s.size() * sizeof(uint32_t)); !st.ok()) return st;
    const size_t at = FindText(s, first->s.str());
    if (at == std::string::npos) return Value::Int(-1);
    return Value::Int(static_cast<int64_t>(CodePointCount(absl::string_view(s).substr(0, at))));
  }
  return Error(absl::StrCat("method '", name, "' is not supported"));
}

absl::StatusOr<Value> CallGlobal(absl::string_view name, const CallArgs& args,
                                 RenderBudget& budget) {
  if (name == "raise_exception") {
    const Value* message = args.Get(0, "");
    std::string text;
    if (message != nullptr) {
      if (absl::Status st = AppendStr(*message, budget, &text); !st.ok()) return st;
    }
    absl::Status status = absl::InvalidArgumentError(text);
    status.SetPayload(kTemplateExceptionPayload, absl::Cord("1"));
    return status;
  }
  if (name == "strftime_now") {
    const Value* format = args.Get(0, "format");
    if (format == nullptr || !format->is_string()) {
      return Error("strftime_now() takes a format string");
    }
    if (format->s.str().size() > 256)
      return Error("strftime_now()'s format is longer than 256 bytes");
    // transformers: datetime.now().strftime(format), the server's local time.
    std::tm local{};
    if (const std::optional<int64_t>& fixed = budget.limits().fixed_time; fixed.has_value()) {
      const std::time_t pinned = static_cast<std::time_t>(*fixed);
      gmtime_r(&pinned, &local);
    } else {
      const std::time_t now = std::time(nullptr);
      localtime_r(&now, &local);
    }
    char buffer[4096];
    const size_t n = std::strftime(buffer, sizeof(buffer), format->s.str().c_str(), &local);
    return NewString(std::string(buffer, n), budget);
  }
  if (name == "namespace" || name == "dict") {
    ValueDict items;
    if (const Value* init = args.Get(0, ""); init != nullptr) {
      if (init->kind != Value::Kind::kDict) return Error(absl::StrCat(name, "() takes a mapping"));
      if (absl::Status st = budget.Items(init->dict->size()); !st.ok()) return st;
      items = *init->dict;
    }
    for (const auto& keyword : args.keyword) {  // not a structured binding: clang 14 captures
      if (absl::Status st = budget.Items(1); !st.ok()) return st;
      if (absl::Status st = budget.Work(static_cast<int64_t>(items.size())); !st.ok()) return st;
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
  // In long double: stop - start may overflow int64 (and the count is compared with a small cap).
  const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  long double count = 0;
  if (step > 0 && span > 0) count = std::ceil(span / static_cast<long double>(step));
  if (step < 0 && span < 0) count = std::ceil(span / static_cast<long double>(step));
  if (count > kMaxRangeItems) {
    return Error(absl::StrCat("range() of more than ", kMaxRangeItems, " items"));
  }
  if (absl::Status st = budget.Items(static_cast<uint64_t>(count)); !st.ok()) return st;
  ValueList out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k)
    out.push_back(Value::Int(start + k * step));
  return Value::List(std::move(out));
}

}  // namespace abcd::chat
