// The filters, tests, methods and global functions a chat template may use, with Python's and
// jinja2's semantics (as Hugging Face's ImmutableSandboxedEnvironment provides them):
//
//   filters   trim length count upper lower capitalize title tojson(indent, separators,
//             sort_keys) default/d first last
//             join list selectattr rejectattr select reject map(attribute= | filter name) string
//             int float replace reverse items safe abs escape/e dictsort unique sort min max sum
//             indent
//   tests     defined undefined none string number integer float boolean true false mapping
//             iterable sequence callable odd even divisibleby equalto/eq/== ne/!= lower upper
//             in sameas gt/> ge/>= lt/< le/<=
//   methods   str: strip lstrip rstrip upper lower title capitalize startswith endswith split
//             replace find;  dict: items keys values get
//   functions raise_exception(msg) namespace(...) range(...) dict(...) strftime_now(format)
//
// upper/lower/title/capitalize change ASCII letters only (Python's change every cased letter);
// strip and trim remove Python's Unicode whitespace. Errors are INVALID_ARGUMENT without a line
// (the evaluator adds it); raise_exception's carries kTemplateExceptionPayload. Every function
// charges what it creates and touches to the render's RenderBudget (jinja_value.h) before
// allocating, and fails with its status once the budget is spent.
//
// Thread-safety: pure functions (strftime_now reads the clock).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/jinja_value.h"

namespace abcd::chat {

// On the status of raise_exception(msg): the template refused the conversation; the message is
// the template's own text.
inline constexpr absl::string_view kTemplateExceptionPayload = "type.abcd.dev/template_exception";

inline constexpr int64_t kMaxRangeItems = 100000;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Positional `index` or keyword `name`, else null.
  const Value* Get(size_t index, absl::string_view name) const;
};

bool IsFilter(absl::string_view name);
bool IsTest(absl::string_view name);
bool IsMethod(absl::string_view name);
bool IsGlobalFunction(absl::string_view name);

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const CallArgs& args,
                                  RenderBudget& budget);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input, const CallArgs& args,
                               RenderBudget& budget);
absl::StatusOr<Value> CallMethod(const Value& self, absl::string_view name, const CallArgs& args,
                                 RenderBudget& budget);
absl::StatusOr<Value> CallGlobal(absl::string_view name, const CallArgs& args,
                                 RenderBudget& budget);

// jinja2's getattr (value.name: attribute/method first, then item) and getitem (value[key]:
// item first); a missing one is undefined, and undefined's own attributes are an error.
absl::StatusOr<Value> GetAttr(const Value& object, absl::string_view name, RenderBudget& budget);
absl::StatusOr<Value> GetItem(const Value& object, const Value& key, RenderBudget& budget);
// Python's slice object[start:stop:step] of a list or string (null: omitted).
absl::StatusOr<Value> Slice(const Value& object, const Value* start, const Value* stop,
                            const Value* step, RenderBudget& budget);
// The items a {% for %} visits: list items (the list itself, not a copy), dict keys, string
// characters; undefined: none.
absl::StatusOr<std::shared_ptr<const ValueList>> Iterate(const Value& value, RenderBudget& budget);
// Python's len(): code points of a string, items of a list or dict.
absl::StatusOr<int64_t> Length(const Value& value, RenderBudget& budget);
// str.strip(chars) (null chars: Python's whitespace) from the left and/or right.
std::string Strip(absl::string_view text, const std::string* chars, bool left, bool right);

// a op b for op in + - * / // % ** ~ (jinja_operators.cc), with Python's semantics on ints
// (overflow past int64 is an error), floats, strings and lists.
absl::StatusOr<Value> BinaryOperator(const std::string& op, const Value& a, const Value& b,
                                     RenderBudget& budget);

// Shared by the filters (jinja_filters.cc) and the rest of the builtins.
absl::Status UndefinedError(const Value& value);
absl::StatusOr<int64_t> NeedInt(const Value& v, absl::string_view what);
// A new string value of `text`, its bytes charged first.
absl::StatusOr<Value> NewString(std::string text, RenderBudget& budget);
// jinja2's make_attrgetter: "a.b" / "0" walk item lookups.
absl::StatusOr<Value> Attribute(const Value& item, const std::string& path, RenderBudget& budget);
// ASCII case mapping: mode upper, lower, capitalize or title.
std::string CaseMapped(absl::string_view text, absl::string_view mode);

}  // namespace abcd::chat
