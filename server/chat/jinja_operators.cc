// The binary operators of jinja_builtins.h (BinaryOperator): Python's arithmetic on ints and
// floats, + and * on strings and lists (charged to the budget before they allocate), ~, and **
// by squaring.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/chat/jinja_builtins.h"

namespace abcd::chat {
namespace {

int64_t AsInt(const Value& v) { return v.kind == Value::Kind::kBool ? int64_t{v.b} : v.i; }
double AsDouble(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : static_cast<double>(AsInt(v));
}

absl::Status TypeError(absl::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times, RenderBudget& budget) {
  times = std::max<int64_t>(times, 0);
  const uint64_t unit = seq.is_string() ? seq.s.str().size() : seq.list->size();
  const uint64_t cap = budget.bytes_left();
  if (unit > 0 && static_cast<uint64_t>(times) > cap / unit) {
    return budget.Bytes(UINT64_MAX / 4);  // over: fails before allocating
  }
  const uint64_t total = unit * static_cast<uint64_t>(times);
  if (seq.is_string()) {
    if (absl::Status s = budget.Bytes(total); !s.ok()) return s;
    std::string out;
    out.reserve(total);
    if (total > 0) out = seq.s.str();
    while (out.size() < total) out.append(out, 0, std::min<size_t>(out.size(), total - out.size()));
    return Value::String(std::move(out));
  }
  if (absl::Status s = budget.Items(total); !s.ok()) return s;
  ValueList out;
  out.reserve(total);
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::List(std::move(out));
}

// x ** y for integers by squaring: O(log y) multiplications, an overflow is an error (Python's
// ints are unbounded; no chat template needs one past int64).
absl::StatusOr<int64_t> IntPow(int64_t x, int64_t y) {
  if (x == 0) return y == 0 ? 1 : 0;
  if (x == 1) return 1;
  if (x == -1) return (y % 2 == 0) ? 1 : -1;
  int64_t result = 1;
  int64_t base = x;
  while (y > 0) {
    if ((y & 1) != 0 && __builtin_mul_overflow(result, base, &result)) {
      return absl::InvalidArgumentError("integer overflow");
    }
    y >>= 1;
    if (y > 0 && __builtin_mul_overflow(base, base, &base)) {
      return absl::InvalidArgumentError("integer overflow");
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<Value> BinaryOperator(const std::string& op, const Value& a, const Value& b,
                                     RenderBudget& budget) {
  if (op == "~") {
    std::string out;
    if (absl::Status s = AppendStr(a, budget, &out); !s.ok()) return s;
    if (absl::Status s = AppendStr(b, budget, &out); !s.ok()) return s;
    return Value::String(std::move(out));
  }
  for (const Value* v : {&a, &b}) {
    if (v->undefined()) {
      return absl::InvalidArgumentError(v->s.str().empty()
                                            ? "a value is undefined"
                                            : absl::StrCat("'", v->s.str(), "' is undefined"));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string() && (a.markup || b.markup)) {
      // Markup + str (and str + Markup, Markup's __radd__): the plain operand is escaped.
      absl::StatusOr<Value> left = a.markup ? a : ApplyFilter("escape", a, {}, budget);
      if (!left.ok()) return left.status();
      absl::StatusOr<Value> right = b.markup ? b : ApplyFilter("escape", b, {}, budget);
      if (!right.ok()) return right.status();
      if (absl::Status s = budget.Bytes(left->s.size() + right->s.size()); !s.ok()) return s;
      Value sum = Value::String(absl::StrCat(left->s.str(), right->s.str()));
      sum.markup = true;
      return sum;
    }
    if (a.is_string() && b.is_string()) {
      if (absl::Status s = budget.Bytes(a.s.str().size() + b.s.str().size()); !s.ok()) return s;
      return Value::String(absl::StrCat(a.s.str(), b.s.str()));
    }
    if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
      if (absl::Status s = budget.Items(a.list->size() + b.list->size()); !s.ok()) return s;
      ValueList items;
      items.reserve(a.list->size() + b.list->size());
      items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::List(std::move(items));
    }
    if (a.is_string() && !b.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("can only concatenate str (not \"", TypeName(b), "\") to str"));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.kind == Value::Kind::kList) && b.kind == Value::Kind::kInt) {
      return Repeat(a, b.i, budget);
    }
    if ((b.is_string() || b.kind == Value::Kind::kList) && a.kind == Value::Kind::kInt) {
      return Repeat(b, a.i, budget);
    }
  }
  if (op == "%" && a.is_string()) {
    return absl::InvalidArgumentError("string formatting with '%' is not supported");
  }
  if (!a.is_number() || !b.is_number()) return TypeError(op, a, b);
  const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
  if (op == "/") {
    if (AsDouble(b) == 0.0) return absl::InvalidArgumentError("division by zero");
    return Value::Float(AsDouble(a) / AsDouble(b));
  }
  if (ints) {
    const int64_t x = AsInt(a);
    const int64_t y = AsInt(b);
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") {
      overflow = __builtin_add_overflow(x, y, &r);
    } else if (op == "-") {
      overflow = __builtin_sub_overflow(x, y, &r);
    } else if (op == "*") {
      overflow = __builtin_mul_overflow(x, y, &r);
    } else if (op == "//" || op == "%") {
      if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return absl::InvalidArgumentError("integer overflow");
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      r = op == "//" ? q : m;
    } else if (op == "**") {
      if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      absl::StatusOr<int64_t> p = IntPow(x, y);
      if (!p.ok()) return p.status();
      r = *p;
    }
    if (overflow) return absl::InvalidArgumentError("integer overflow");
    return Value::Int(r);
  }
  const double x = AsDouble(a);
  const double y = AsDouble(b);
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") return Value::Float(std::pow(x, y));
  if (y == 0.0) return absl::InvalidArgumentError("float division or modulo by zero");
  const double m = std::fmod(x, y);
  const double mod = (m != 0.0 && ((m < 0) != (y < 0))) ? m + y : m;
  if (op == "%") return Value::Float(mod);
  return Value::Float(std::floor((x - mod) / y + 0.5));  // "//"
}

}  // namespace abcd::chat
