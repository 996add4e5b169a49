// The filters of jinja_builtins.h (ApplyFilter), with jinja2's semantics: an undefined input
// reads as an empty string or list (jinja2's lenient Undefined), except where jinja2 fails too
// (tojson, dictsort, abs). Each filter charges what it creates before creating it.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja_builtins.h"

namespace abcd::chat {
namespace {

absl::Status FilterError(absl::string_view message) { return absl::InvalidArgumentError(message); }

using ListPtr = std::shared_ptr<const ValueList>;

absl::StatusOr<Value> SelectOrReject(const Value& input, const CallArgs& args, bool select,
                                     bool by_attribute, RenderBudget& budget) {
  const char* filter =
      by_attribute ? (select ? "selectattr" : "rejectattr") : (select ? "select" : "reject");
  size_t next = 0;
  const Value* attr = nullptr;
  if (by_attribute) {
    attr = args.Get(next++, "");
    if (attr == nullptr || !attr->is_string()) {
      return FilterError(absl::StrCat(filter, ": an attribute name is needed"));
    }
  }
  const Value* test = args.Get(next++, "");
  if (test != nullptr && (!test->is_string() || !IsTest(test->s.str()))) {
    return FilterError(
        absl::StrCat(filter, ": test '", test != nullptr ? Str(*test) : "", "' is not supported"));
  }
  CallArgs test_args;
  for (size_t k = next; k < args.positional.size(); ++k) {
    test_args.positional.push_back(args.positional[k]);
  }
  // jinja2's select_or_reject starts with `if value:`: none (a template's tools when there
  // are none) selects nothing.
  if (!Truthy(input)) return Value::List({});
  absl::StatusOr<ListPtr> items = Iterate(input, budget);
  if (!items.ok()) return items.status();
  if (absl::Status st = budget.Items((*items)->size()); !st.ok()) return st;
  ValueList out;
  for (const Value& item : **items) {
    Value value = item;
    if (attr != nullptr) {
      absl::StatusOr<Value> got = Attribute(item, attr->s.str(), budget);
      if (!got.ok()) return got.status();
      value = *std::move(got);
    }
    bool keep = Truthy(value);
    if (test != nullptr) {
      absl::StatusOr<bool> passed = ApplyTest(test->s.str(), value, test_args, budget);
      if (!passed.ok()) return passed.status();
      keep = *passed;
    }
    if (keep == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Map(const Value& input, const CallArgs& args, RenderBudget& budget) {
  if (!Truthy(input)) return Value::List({});  // jinja2: `if value:` (none maps to nothing)
  absl::StatusOr<ListPtr> items = Iterate(input, budget);
  if (!items.ok()) return items.status();
  if (absl::Status st = budget.Items((*items)->size()); !st.ok()) return st;
  ValueList out;
  if (const Value* attribute = args.Get(99, "attribute"); attribute != nullptr) {
    const Value* fallback = args.Get(99, "default");
    const std::string path = Str(*attribute);
    for (const Value& item : **items) {
      absl::StatusOr<Value> value = Attribute(item, path, budget);
      if (!value.ok()) return value.status();
      out.push_back(value->undefined() && fallback != nullptr ? *fallback : *std::move(value));
    }
    return Value::List(std::move(out));
  }
  const Value* filter = args.Get(0, "");
  if (filter == nullptr || !filter->is_string() || !IsFilter(filter->s.str()) ||
      filter->s.str() == "map") {
    return FilterError("map: needs attribute= or the name of a supported filter");
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : **items) {
    absl::StatusOr<Value> value = ApplyFilter(filter->s.str(), item, rest, budget);
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
  return Value::List(std::move(out));
}

// Python's str.splitlines(): the lines without their ends (\n, \r\n, \r, \v, \f, \x1c-\x1e,
// U+0085, U+2028, U+2029).
std::vector<absl::string_view> SplitLines(absl::string_view s) {
  std::vector<absl::string_view> lines;
  size_t start = 0;
  size_t k = 0;
  while (k < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    size_t end_len = 0;
    if (c == '\r') {
      end_len = k + 1 < s.size() && s[k + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      end_len = 1;
    } else if (c == 0xc2 && k + 1 < s.size() && static_cast<unsigned char>(s[k + 1]) == 0x85) {
      end_len = 2;
    } else if (c == 0xe2 && k + 2 < s.size() && static_cast<unsigned char>(s[k + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[k + 2]) == 0xa8 ||
                static_cast<unsigned char>(s[k + 2]) == 0xa9)) {
      end_len = 3;
    }
    if (end_len == 0) {
      ++k;
      continue;
    }
    lines.push_back(s.substr(start, k - start));
    k += end_len;
    start = k;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

// jinja2's do_indent(s, width=4, first=False, blank=False): every line but the first (and
// blank ones unless `blank`) gets the indentation (spaces, or the string given as width).
absl::StatusOr<Value> Indent(const Value& input, const CallArgs& args, RenderBudget& budget) {
  if (input.undefined()) return UndefinedError(input);
  if (!input.is_string()) return FilterError("indent: the value must be a string");
  std::string indention(4, ' ');
  if (const Value* width = args.Get(0, "width"); width != nullptr) {
    if (width->is_string()) {
      indention = width->s.str();
    } else {
      absl::StatusOr<int64_t> n = NeedInt(*width, "indent's width");
      if (!n.ok()) return n.status();
      if (*n < 0 || *n > 256) return FilterError("indent's width must be between 0 and 256");
      indention.assign(static_cast<size_t>(*n), ' ');
    }
  }
  const Value* first = args.Get(1, "first");
  const Value* blank = args.Get(2, "blank");
  const std::string text = absl::StrCat(input.s.str(), "\n");  // jinja2's quirk, kept
  if (absl::Status st = budget.Scan(text.size()); !st.ok()) return st;
  const std::vector<absl::string_view> lines = SplitLines(text);
  if (absl::Status st = budget.Bytes(text.size() + (lines.size() + 1) * indention.size());
      !st.ok()) {
    return st;
  }
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k > 0) out += "\n";
    if (k > 0 && (!lines[k].empty() || (blank != nullptr && Truthy(*blank)))) out += indention;
    out.append(lines[k].data(), lines[k].size());
  }
  if (first != nullptr && Truthy(*first)) out.insert(0, indention);
  Value result = Value::String(std::move(out));
  result.markup = input.markup;
  return result;
}

absl::StatusOr<Value> Escape(const std::string& s, RenderBudget& budget) {
  size_t size = 0;
  for (const char c : s) {
    size += c == '&' ? 5 : (c == '<' || c == '>') ? 4 : (c == '"' || c == '\'') ? 5 : 1;
  }
  if (absl::Status st = budget.Bytes(size); !st.ok()) return st;
  std::string out;
  out.reserve(size);
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value::String(std::move(out));
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
      return std::isfinite(input.f) && std::fabs(input.f) < 9.2e18
                 ? Value::Int(static_cast<int64_t>(input.f))
                 : def;
    case Value::Kind::kString: {
      if (input.s.str().size() > 400) return def;
      int64_t i = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(input.s.str()), &i)) return Value::Int(i);
      double f = 0;
      if (absl::SimpleAtod(input.s.str(), &f) && std::isfinite(f) && std::fabs(f) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(f));
      }
      return def;
    }
    default:
      return def;
  }
}

// jinja2's sort key: strings lowercased unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!v.is_string() || case_sensitive) return v;
  return Value::String(absl::AsciiStrToLower(v.s.str()));
}

// Sorts `items` by `keys` (same length) with Python's <; a type error or a spent budget is
// returned.
absl::Status SortBy(std::vector<std::pair<Value, Value>>* pairs, bool reverse,
                    RenderBudget& budget) {
  const size_t n = pairs->size();
  int64_t log_n = 1;
  while ((size_t{1} << log_n) < n) ++log_n;
  if (absl::Status st = budget.Work(static_cast<int64_t>(n) * log_n); !st.ok()) return st;
  absl::Status failure;
  std::stable_sort(pairs->begin(), pairs->end(), [&](const auto& a, const auto& b) {
    if (!failure.ok()) return false;
    absl::StatusOr<bool> less = reverse ? Less(b.first, a.first) : Less(a.first, b.first);
    if (!less.ok()) {
      failure = less.status();
      return false;
    }
    return *less;
  });
  return failure;
}

bool CaseSensitive(const CallArgs& args, size_t index) {
  const Value* v = args.Get(index, "case_sensitive");
  return v != nullptr && Truthy(*v);
}

absl::StatusOr<Value> Sorted(absl::string_view name, const Value& input, const CallArgs& args,
                             RenderBudget& budget) {
  if (name == "dictsort") {
    if (input.kind != Value::Kind::kDict) {
      return FilterError(
          absl::StrCat("dictsort: the value must be a mapping, got ", TypeName(input)));
    }
    const bool case_sensitive = CaseSensitive(args, 0);
    const Value* by = args.Get(1, "by");
    const Value* reverse = args.Get(2, "reverse");
    const bool by_value = by != nullptr && by->is_string() && by->s.str() == "value";
    if (by != nullptr && (!by->is_string() || (by->s.str() != "key" && by->s.str() != "value"))) {
      return FilterError("dictsort: 'by' must be 'key' or 'value'");
    }
    if (absl::Status st = budget.Items(input.dict->size() * 4); !st.ok()) return st;
    std::vector<std::pair<Value, Value>> pairs;
    for (const auto& [key, value] : *input.dict) {
      if (absl::Status st = budget.Bytes(key.size() * 2); !st.ok()) return st;
      Value item = Value::Tuple({KeyValue(key), value});
      pairs.emplace_back(SortKey(by_value ? value : KeyValue(key), case_sensitive),
                         std::move(item));
    }
    if (absl::Status st = SortBy(&pairs, reverse != nullptr && Truthy(*reverse), budget);
        !st.ok()) {
      return st;
    }
    ValueList out;
    for (auto& pair : pairs) out.push_back(std::move(pair.second));
    return Value::List(std::move(out));
  }
  // sort(reverse=False, case_sensitive=False, attribute=None), unique(case_sensitive=False,
  // attribute=None), min/max(case_sensitive=False, attribute=None).
  const bool is_sort = name == "sort";
  const Value* reverse = is_sort ? args.Get(0, "reverse") : nullptr;
  const bool case_sensitive = CaseSensitive(args, is_sort ? 1 : 0);
  const Value* attribute = args.Get(is_sort ? 2 : 1, "attribute");
  absl::StatusOr<ListPtr> items = Iterate(input, budget);
  if (!items.ok()) return items.status();
  if (absl::Status st = budget.Items((*items)->size() * 3); !st.ok()) return st;
  std::vector<std::pair<Value, Value>> pairs;
  for (const Value& item : **items) {
    Value key = item;
    if (attribute != nullptr) {
      absl::StatusOr<Value> got = Attribute(item, Str(*attribute), budget);
      if (!got.ok()) return got.status();
      key = *std::move(got);
    }
    if (key.is_string() && !case_sensitive) {
      if (absl::Status st = budget.Bytes(key.s.str().size()); !st.ok()) return st;
    }
    pairs.emplace_back(SortKey(key, case_sensitive), item);
  }
  if (name == "unique") {
    ValueList out;
    std::vector<const Value*> seen;
    for (const auto& [key, item] : pairs) {
      bool found = false;
      if (absl::Status st = budget.Work(static_cast<int64_t>(seen.size())); !st.ok()) return st;
      for (const Value* other : seen) {
        if (Equal(*other, key, &budget)) {
          found = true;
          break;
        }
      }
      if (!budget.ok()) return budget.status();
      if (!found) {
        seen.push_back(&key);
        out.push_back(item);
      }
    }
    return Value::List(std::move(out));
  }
  if (absl::Status st = SortBy(&pairs, reverse != nullptr && Truthy(*reverse), budget); !st.ok()) {
    return st;
  }
  if (is_sort) {
    ValueList out;
    for (auto& pair : pairs) out.push_back(std::move(pair.second));
    return Value::List(std::move(out));
  }
  if (pairs.empty()) return Value::Undefined(std::string(name));
  return name == "min" ? pairs.front().second : pairs.back().second;
}

absl::StatusOr<Value> Sum(const Value& input, const CallArgs& args, RenderBudget& budget) {
  const Value* attribute = args.Get(0, "attribute");
  const Value* start = args.Get(1, "start");
  absl::StatusOr<ListPtr> items = Iterate(input, budget);
  if (!items.ok()) return items.status();
  int64_t total = 0;
  double real = 0;
  bool is_float = false;
  if (start != nullptr) {
    if (!start->is_number()) return FilterError("sum: start must be a number");
    is_float = start->kind == Value::Kind::kFloat;
    real = is_float ? start->f : 0;
    total = is_float ? 0 : (start->kind == Value::Kind::kBool ? start->b : start->i);
  }
  for (const Value& item : **items) {
    Value v = item;
    if (attribute != nullptr) {
      absl::StatusOr<Value> got = Attribute(item, Str(*attribute), budget);
      if (!got.ok()) return got.status();
      v = *std::move(got);
    }
    if (!v.is_number()) {
      return FilterError(
          absl::StrCat("unsupported operand type(s) for +: 'int' and '", TypeName(v), "'"));
    }
    if (v.kind == Value::Kind::kFloat) {
      is_float = true;
      real += v.f;
    } else if (__builtin_add_overflow(total, v.kind == Value::Kind::kBool ? v.b : v.i, &total)) {
      return FilterError("integer overflow");
    }
  }
  return is_float ? Value::Float(real + static_cast<double>(total)) : Value::Int(total);
}

absl::StatusOr<Value> Join(const Value& input, const CallArgs& args, RenderBudget& budget) {
  absl::StatusOr<ListPtr> items = Iterate(input, budget);
  if (!items.ok()) return items.status();
  const Value* separator = args.Get(0, "d");
  const Value* attribute = args.Get(1, "attribute");
  std::string sep;
  if (separator != nullptr) {
    if (absl::Status st = AppendStr(*separator, budget, &sep); !st.ok()) return st;
  }
  std::string out;
  for (size_t k = 0; k < (*items)->size(); ++k) {
    if (k > 0) {
      if (absl::Status st = budget.Bytes(sep.size()); !st.ok()) return st;
      out += sep;
    }
    const Value& item = (**items)[k];
    if (attribute != nullptr) {
      absl::StatusOr<Value> value = Attribute(item, Str(*attribute), budget);
      if (!value.ok()) return value.status();
      if (absl::Status st = AppendStr(*value, budget, &out); !st.ok()) return st;
    } else if (absl::Status st = AppendStr(item, budget, &out); !st.ok()) {
      return st;
    }
  }
  return Value::String(std::move(out));
}

}  // namespace

absl::StatusOr<Value> Attribute(const Value& item, const std::string& path, RenderBudget& budget) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    int64_t index = 0;
    absl::StatusOr<Value> next = absl::SimpleAtoi(part, &index)
                                     ? GetItem(current, Value::Int(index), budget)
                                     : GetItem(current, Value::String(part), budget);
    if (!next.ok()) return next.status();
    current = *std::move(next);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const CallArgs& args,
                                  RenderBudget& budget) {
  if (absl::Status st = budget.Work(1); !st.ok()) return st;
  if (name == "default" || name == "d") {
    const Value* fallback = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use =
        input.undefined() || (boolean != nullptr && Truthy(*boolean) && !Truthy(input));
    return use ? (fallback != nullptr ? *fallback : Value::String("")) : input;
  }
  if (name == "safe") {
    if (!input.is_string()) return input;
    Value marked = input;
    marked.markup = true;
    return marked;
  }
  if (input.undefined() && (name == "tojson" || name == "dictsort" || name == "abs")) {
    return UndefinedError(input);
  }
  if (name == "length" || name == "count") {
    absl::StatusOr<int64_t> n = Length(input, budget);
    if (!n.ok()) return n.status();
    return Value::Int(*n);
  }
  if (name == "string") {
    if (input.is_string()) return input;
    absl::StatusOr<std::string> text = StrOf(input, budget);
    if (!text.ok()) return text.status();
    return Value::String(*std::move(text));
  }
  if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" ||
      name == "title" || name == "escape" || name == "e" || name == "replace") {
    absl::StatusOr<std::string> text = StrOf(input, budget);
    if (!text.ok()) return text.status();
    if (name == "escape" || name == "e") {
      if (input.is_string() && input.markup) return input;  // Markup is not escaped twice
      absl::StatusOr<Value> escaped = Escape(*text, budget);
      if (escaped.ok()) escaped->markup = true;
      return escaped;
    }
    if (name == "replace") {
      const Value* old_text = args.Get(0, "old");
      const Value* new_text = args.Get(1, "new");
      if (old_text == nullptr || new_text == nullptr)
        return FilterError("replace: needs old and new");
      const Value* count = args.Get(2, "count");
      CallArgs method_args;
      for (const Value* v : {old_text, new_text}) {
        absl::StatusOr<std::string> s = StrOf(*v, budget);
        if (!s.ok()) return s.status();
        method_args.positional.push_back(Value::String(*std::move(s)));
      }
      if (count != nullptr) method_args.positional.push_back(*count);
      return CallMethod(Value::String(*std::move(text)), "replace", method_args, budget);
    }
    if (absl::Status st = budget.Bytes(text->size()); !st.ok()) return st;
    if (name == "trim") {
      const Value* chars = args.Get(0, "chars");
      const bool have = chars != nullptr && chars->is_string();
      return Value::String(Strip(*text, have ? &chars->s.str() : nullptr, true, true));
    }
    return Value::String(CaseMapped(*text, name));
  }
  if (name == "tojson") {
    const Value* indent = args.Get(0, "indent");
    int64_t width = -1;
    if (indent != nullptr && indent->kind != Value::Kind::kNone) {
      absl::StatusOr<int64_t> n = NeedInt(*indent, "tojson's indent");
      if (!n.ok()) return n.status();
      width = std::clamp<int64_t>(*n, 0, 16);
    }
    JsonOptions options;
    options.indent = static_cast<int>(width);
    if (const Value* separators = args.Get(99, "separators");
        separators != nullptr && separators->kind != Value::Kind::kNone) {
      if (separators->kind != Value::Kind::kList || separators->list->size() != 2 ||
          !(*separators->list)[0].is_string() || !(*separators->list)[1].is_string()) {
        return FilterError("tojson: separators must be two strings");
      }
      options.item_separator = (*separators->list)[0].s.str();
      options.key_separator = (*separators->list)[1].s.str();
    }
    if (const Value* sort_keys = args.Get(99, "sort_keys"); sort_keys != nullptr) {
      options.sort_keys = Truthy(*sort_keys);
    }
    absl::StatusOr<std::string> json = ToJson(input, options, budget);
    if (!json.ok()) return json.status();
    return Value::String(*std::move(json));
  }
  if (name == "join") return Join(input, args, budget);
  if (name == "indent") return Indent(input, args, budget);
  if (name == "first" || name == "last" || name == "list" || name == "reverse") {
    if (input.is_string() && (name == "first" || name == "last")) {
      if (input.s.str().empty()) return Value::Undefined(std::string(name));
      const Value index = Value::Int(name == "first" ? 0 : -1);
      return GetItem(input, index, budget);
    }
    absl::StatusOr<ListPtr> items = Iterate(input, budget);
    if (!items.ok()) return items.status();
    if (name == "first" || name == "last") {
      if ((*items)->empty()) return Value::Undefined(std::string(name));
      return name == "first" ? (*items)->front() : (*items)->back();
    }
    if (absl::Status st = budget.Items((*items)->size()); !st.ok()) return st;
    ValueList copy = **items;
    if (name == "list") return Value::List(std::move(copy));
    std::reverse(copy.begin(), copy.end());
    if (!input.is_string()) return Value::List(std::move(copy));
    if (absl::Status st = budget.Bytes(input.s.str().size()); !st.ok()) return st;
    std::string out;
    for (const Value& c : copy) out += c.s.str();
    return Value::String(std::move(out));
  }
  if (name == "items") {
    if (input.undefined()) return Value::List({});
    if (input.kind != Value::Kind::kDict) return FilterError("items: the value must be a mapping");
    return CallMethod(input, "items", CallArgs(), budget);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    return SelectOrReject(input, args, name == "selectattr" || name == "select",
                          name == "selectattr" || name == "rejectattr", budget);
  }
  if (name == "map") return Map(input, args, budget);
  if (name == "dictsort" || name == "sort" || name == "unique" || name == "min" || name == "max") {
    return Sorted(name, input, args, budget);
  }
  if (name == "sum") return Sum(input, args, budget);
  if (name == "int") return ToInt(input, args);
  if (name == "float") {
    if (input.kind == Value::Kind::kFloat) return input;
    if (input.is_number()) {
      return Value::Float(input.kind == Value::Kind::kBool ? input.b
                                                           : static_cast<double>(input.i));
    }
    double f = 0;
    if (input.is_string() && input.s.str().size() <= 400 && absl::SimpleAtod(input.s.str(), &f)) {
      return Value::Float(f);
    }
    const Value* fallback = args.Get(0, "default");
    return fallback != nullptr ? *fallback : Value::Float(0.0);
  }
  if (name == "abs") {
    if (input.kind == Value::Kind::kInt) {
      if (input.i == INT64_MIN) return FilterError("integer overflow");
      return Value::Int(input.i < 0 ? -input.i : input.i);
    }
    if (input.kind == Value::Kind::kFloat) return Value::Float(std::fabs(input.f));
    return FilterError(absl::StrCat("bad operand type for abs(): '", TypeName(input), "'"));
  }
  return FilterError(absl::StrCat("filter '", name, "' is not supported"));
}

}  // namespace abcd::chat
