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
// RenderBudget bounds what one render may create and do (RenderLimits): every operation that
// allocates charges the bytes it is about to create BEFORE allocating them, and every step,
// loop iteration and byte or item touched charges work, so a template cannot exhaust memory
// or time; the caller's `cancelled` hook is polled as work is charged.
//
// Thread-compatible: values are built and read by one render at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace abcd::chat {

// A string shared by the values that copy it: copying a value never copies its text. Immutable
// once made, except through Unique() by the one holder (a namespace attribute appending).
class SharedString {
 public:
  SharedString() = default;
  explicit SharedString(std::string text) : text_(std::make_shared<std::string>(std::move(text))) {}

  const std::string& str() const {
    static const std::string* const kEmpty = new std::string();
    return text_ != nullptr ? *text_ : *kEmpty;
  }
  operator const std::string&() const { return str(); }  // NOLINT: reads as the string
  size_t size() const { return str().size(); }
  bool empty() const { return str().empty(); }
  // Same buffer (equal without comparing).
  bool SameAs(const SharedString& other) const { return text_ == other.text_; }
  // The text to modify in place when nothing else shares it, else null.
  std::string* Unique() {
    return text_ != nullptr && text_.use_count() == 1 ? text_.get() : nullptr;
  }

  friend bool operator==(const SharedString& a, absl::string_view b) { return a.str() == b; }
  friend std::ostream& operator<<(std::ostream& out, const SharedString& s) {
    return out << s.str();
  }

 private:
  std::shared_ptr<std::string> text_;
};

struct Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

// A dict key's text: a string key is its text; an integer key (a template's {512: 128}) is
// kIntKeyMarker and its decimal digits, a byte no UTF-8 text holds, so 1 and "1" stay
// different keys as in Python.
inline constexpr char kIntKeyMarker = '\xff';

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
  bool tuple = false;  // kList: a tuple (repr in parentheses); otherwise a list
  // kString: markupsafe's Markup (what the safe and escape filters return): `+` with a plain
  // string escapes the plain one and gives Markup (functionary's `"..."|safe + x | tojson`).
  bool markup = false;
  int64_t i = 0;
  double f = 0.0;
  // kString: the text; kFunction: the function's or method's name; kUndefined: its name.
  SharedString s;
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;    // kDict and kNamespace
  std::shared_ptr<Value> self;        // kFunction: the receiver of a bound method (else null)
  std::shared_ptr<const void> macro;  // kFunction: a template's {% macro %} (jinja_template.cc)

  static Value Undefined(std::string name = "") {
    Value v;
    if (!name.empty()) v.s = SharedString(std::move(name));
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
    v.s = SharedString(std::move(s));
    return v;
  }
  static Value List(ValueList items) {
    Value v = Of(Kind::kList);
    v.list = std::make_shared<ValueList>(std::move(items));
    return v;
  }
  static Value Tuple(ValueList items) {
    Value v = List(std::move(items));
    v.tuple = true;
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
    v.s = SharedString(std::move(name));
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

// The key text of `key` as a dict key (a string, or an integer: kIntKeyMarker), or nullopt
// for a value of another kind.
std::optional<std::string> DictKey(const Value& key);
// A key text as the value a template sees (an integer key reads as an int).
Value KeyValue(const std::string& key);
// The key as JSON writes it (an integer key as its digits) and as Python's repr writes it.
std::string KeyText(const std::string& key);

// What one render may create and do (jinja_template.h's Render). The defaults are generous
// for real templates: 1,000 messages of 4 KB through Llama-3, ChatML, Mistral v0.3 or Qwen2's
// template use under 5% of the work and a quarter of the memory budget.
struct RenderLimits {
  // The rendered text.
  size_t max_output_bytes = size_t{4} << 20;
  // Bytes of the strings, lists and dicts the render creates, summed over the render (never
  // given back, so it also bounds the peak); a list or dict item counts kItemBytes.
  uint64_t max_bytes = uint64_t{64} << 20;
  // Work units: one per node, expression, loop iteration, call and item touched, plus one per
  // kBytesPerWorkUnit bytes copied, scanned or compared.
  int64_t max_work = 10'000'000;
  // Polled every kPollEveryWork units; true ends the render with CANCELLED (a client gone, a
  // deadline passed, the server draining). Called on the rendering thread.
  std::function<bool()> cancelled;
  // The time strftime_now formats, as seconds since the epoch read in UTC (tests pin it so a
  // template that prints today's date renders the same on any day); unset: the local clock.
  std::optional<int64_t> fixed_time;

  static constexpr uint64_t kBytesPerWorkUnit = 64;
  // A value in a list or dict, with the shared block of a string it may hold.
  static constexpr uint64_t kItemBytes = sizeof(void*) * 8 + 96;
  static constexpr int64_t kPollEveryWork = 4096;
};

// The budget of one render. A failure is sticky: once over a limit (or cancelled) every later
// charge fails with the same status, so code that cannot return a status (Equal) stops early
// and its caller reports status(). RESOURCE_EXHAUSTED past a limit ("the chat template's
// render exceeded its ... budget"), CANCELLED when the hook said so.
class RenderBudget {
 public:
  RenderBudget() : RenderBudget(Unlimited()) {}
  explicit RenderBudget(RenderLimits limits) : limits_(std::move(limits)) {}

  // `units` of work.
  absl::Status Work(int64_t units);
  // Bytes about to be allocated (checked before the allocation; also charges their copy).
  absl::Status Bytes(uint64_t bytes);
  // `n` list or dict items about to be created: kItemBytes and 4 work units each.
  absl::Status Items(uint64_t n);
  // Bytes read (scanned, compared) without allocating.
  absl::Status Scan(uint64_t bytes) {
    return Work(static_cast<int64_t>(bytes / RenderLimits::kBytesPerWorkUnit) + 1);
  }
  uint64_t bytes_left() const { return limits_.max_bytes - bytes_; }
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  const RenderLimits& limits() const { return limits_; }
  int64_t work_done() const { return work_; }
  uint64_t bytes_used() const { return bytes_; }

 private:
  static RenderLimits Unlimited() {
    RenderLimits limits;
    limits.max_bytes = UINT64_MAX / 2;
    limits.max_work = INT64_MAX / 2;
    return limits;
  }
  absl::Status Fail(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
    return status_;
  }
  RenderLimits limits_;
  int64_t work_ = 0;
  int64_t next_poll_ = RenderLimits::kPollEveryWork;
  uint64_t bytes_ = 0;
  absl::Status status_;
};

// JSON (a request's messages, extra template variables) -> Value; objects keep their order.
Value FromJson(const nlohmann::ordered_json& json);

// Python's type name of the value ("str", "int", "list", "dict", "NoneType", "Undefined", ...),
// for error messages.
absl::string_view TypeName(const Value& value);

bool Truthy(const Value& value);
std::string Str(const Value& value);   // str(value); undefined -> ""
std::string Repr(const Value& value);  // repr(value)
// str(value) / repr(value) appended to *out, each byte charged to `budget` before it is added.
absl::Status AppendStr(const Value& value, RenderBudget& budget, std::string* out);
absl::Status AppendRepr(const Value& value, RenderBudget& budget, std::string* out);
// str(value) within the budget.
absl::StatusOr<std::string> StrOf(const Value& value, RenderBudget& budget);
// ==; the comparison's work is charged to `budget` when given (false once it is spent: the
// caller reports budget->status()).
bool Equal(const Value& a, const Value& b, RenderBudget* budget = nullptr);
// a < b for numbers and strings (code point order); INVALID_ARGUMENT for other types.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: none, separators ", " ": ").
// INVALID_ARGUMENT for undefined, functions and namespaces.
absl::StatusOr<std::string> ToJson(const Value& value, int indent);
// json.dumps's indent, separators and sort_keys (transformers' tojson passes them through).
struct JsonOptions {
  int indent = -1;                            // < 0: None
  std::optional<std::string> item_separator;  // none: ", " without indent, "," with
  std::string key_separator = ": ";
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options,
                                   RenderBudget& budget);

// Code points of a UTF-8 string (invalid bytes count one each) and their byte offsets.
std::vector<size_t> CodePointOffsets(absl::string_view text);
// How many code points CodePointOffsets would list (no allocation).
size_t CodePointCount(absl::string_view text);
// text.find(needle, from) in linear time, O(len(text) + len(needle)) whatever the text: a
// byte search for a one-byte needle, else Knuth-Morris-Pratt (libc's memmem is linear too, but
// sanitizers check its whole haystack on every call, which made a search loop quadratic).
class TextSearch {
 public:
  explicit TextSearch(absl::string_view needle);
  size_t Find(absl::string_view text, size_t from = 0) const;

 private:
  absl::string_view needle_;
  std::vector<uint32_t> fallback_;  // KMP: the longest proper border of needle_[0..k]
};
size_t FindText(absl::string_view text, absl::string_view needle, size_t from = 0);

}  // namespace abcd::chat
