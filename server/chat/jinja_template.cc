#include "server/chat/jinja_template.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja_builtins.h"

namespace abcd::chat {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

int64_t AsInt(const Value& v) { return v.kind == Value::Kind::kBool ? int64_t{v.b} : v.i; }
double AsDouble(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : static_cast<double>(AsInt(v));
}

absl::Status TypeError(absl::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times, size_t max_bytes) {
  times = std::max<int64_t>(times, 0);
  const size_t unit = seq.is_string() ? seq.s.size() : seq.list->size();
  if (unit > 0 && static_cast<uint64_t>(times) > max_bytes / unit) {
    return absl::ResourceExhaustedError("a repeated string or list exceeds the output limit");
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < times; ++k) out += seq.s;
    return Value::String(std::move(out));
  }
  ValueList out;
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b,
                                 size_t max_bytes) {
  if (op == "~") return Value::String(Str(a) + Str(b));
  for (const Value* v : {&a, &b}) {
    if (v->undefined()) {
      return absl::InvalidArgumentError(v->s.empty() ? "a value is undefined"
                                                     : absl::StrCat("'", v->s, "' is undefined"));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.s + b.s);
    if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
      ValueList items = *a.list;
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
      return Repeat(a, b.i, max_bytes);
    }
    if ((b.is_string() || b.kind == Value::Kind::kList) && a.kind == Value::Kind::kInt) {
      return Repeat(b, a.i, max_bytes);
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
      r = 1;
      for (int64_t k = 0; k < y && !overflow; ++k) overflow = __builtin_mul_overflow(r, x, &r);
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

class Renderer {
 public:
  Renderer(const ValueDict& variables, const RenderLimits& limits) : limits_(limits) {
    frames_.emplace_back();
    for (const auto& [name, value] : variables) frames_.back()[name] = value;
    frames_.emplace_back();  // the template's own top-level {% set %}s
  }

  absl::StatusOr<std::string> Run(const NodeList& nodes) {
    absl::StatusOr<Flow> flow = Exec(nodes);
    if (!flow.ok()) return flow.status();
    if (*flow != Flow::kNormal) {
      return absl::InvalidArgumentError("chat template: {% break %}/{% continue %} outside a loop");
    }
    return std::move(out_);
  }

 private:
  absl::Status Step() {
    if (++steps_ > limits_.max_steps) {
      return absl::ResourceExhaustedError(
          absl::StrCat("chat template: rendering took more than ", limits_.max_steps, " steps"));
    }
    return absl::OkStatus();
  }
  // Adds the line to an error from a builtin (raise_exception's message stays as it is).
  static absl::Status AtLine(absl::Status status, int line) {
    if (status.ok() || status.GetPayload(kTemplateExceptionPayload).has_value() ||
        absl::StartsWith(status.message(), "chat template")) {
      return status;
    }
    absl::Status out(status.code(),
                     absl::StrCat("chat template line ", line, ": ", status.message()));
    status.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
    return out;
  }

  Value Lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      if (auto it = frame->find(name); it != frame->end()) return it->second;
    }
    return Value::Undefined(name);
  }

  absl::Status Assign(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return absl::OkStatus();
    }
    if (value.kind != Value::Kind::kList || value.list->size() != targets.size()) {
      return AtLine(absl::InvalidArgumentError(absl::StrCat("cannot unpack ", TypeName(value),
                                                            " into ", targets.size(), " names")),
                    line);
    }
    for (size_t k = 0; k < targets.size(); ++k) frames_.back()[targets[k]] = (*value.list)[k];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> Exec(const NodeList& nodes) {
    for (const std::unique_ptr<Node>& node : nodes) {
      if (absl::Status s = Step(); !s.ok()) return s;
      absl::StatusOr<Flow> flow = ExecOne(*node);
      if (!flow.ok() || *flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::Status Emit(absl::string_view text) {
    if (out_.size() + text.size() > limits_.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "chat template: the rendered prompt exceeds ", limits_.max_output_bytes, " bytes"));
    }
    out_.append(text.data(), text.size());
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecOne(const Node& node) {
    switch (node.type) {
      case Node::Type::kText:
        if (absl::Status s = Emit(node.text); !s.ok()) return s;
        return Flow::kNormal;
      case Node::Type::kOutput: {
        absl::StatusOr<Value> v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        if (absl::Status s = Emit(Str(*v)); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Node::Type::kIf:
        for (const auto& [cond, body] : node.branches) {
          bool take = cond == nullptr;
          if (!take) {
            absl::StatusOr<Value> v = Eval(*cond);
            if (!v.ok()) return v.status();
            take = Truthy(*v);
          }
          if (take) return Exec(body);
        }
        return Flow::kNormal;
      case Node::Type::kFor:
        return ExecFor(node);
      case Node::Type::kSet: {
        absl::StatusOr<Value> v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        if (node.attribute.empty()) {
          if (absl::Status s = Assign(node.targets, *v, node.line); !s.ok()) return s;
          return Flow::kNormal;
        }
        const Value target = Lookup(node.targets[0]);
        if (target.kind != Value::Kind::kNamespace) {
          return AtLine(
              absl::InvalidArgumentError(absl::StrCat(
                  "cannot assign attribute on non-namespace object '", node.targets[0], "'")),
              node.line);
        }
        for (auto& [key, value] : *target.dict) {
          if (key == node.attribute) {
            value = *std::move(v);
            return Flow::kNormal;
          }
        }
        target.dict->emplace_back(node.attribute, *std::move(v));
        return Flow::kNormal;
      }
      case Node::Type::kBreak:
        return Flow::kBreak;
      case Node::Type::kContinue:
        return Flow::kContinue;
      case Node::Type::kBlock:
        return Exec(node.body);
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Node& node) {
    absl::StatusOr<Value> iterable = Eval(*node.expr);
    if (!iterable.ok()) return iterable.status();
    absl::StatusOr<ValueList> all = Iterate(*iterable);
    if (!all.ok()) return AtLine(all.status(), node.line);
    ValueList items;
    if (node.filter != nullptr) {
      for (Value& item : *all) {
        frames_.emplace_back();
        absl::Status s = Assign(node.targets, item, node.line);
        absl::StatusOr<Value> keep = s.ok() ? Eval(*node.filter) : absl::StatusOr<Value>(s);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (Truthy(*keep)) items.push_back(std::move(item));
      }
    } else {
      items = *std::move(all);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      if (absl::Status s = Step(); !s.ok()) return s;
      ValueDict loop = {{"index0", Value::Int(k)},
                        {"index", Value::Int(k + 1)},
                        {"revindex0", Value::Int(n - k - 1)},
                        {"revindex", Value::Int(n - k)},
                        {"first", Value::Bool(k == 0)},
                        {"last", Value::Bool(k == n - 1)},
                        {"length", Value::Int(n)}};
      if (k > 0) loop.emplace_back("previtem", items[static_cast<size_t>(k - 1)]);
      if (k + 1 < n) loop.emplace_back("nextitem", items[static_cast<size_t>(k + 1)]);
      frames_.emplace_back();  // a fresh scope per iteration, as jinja2's
      frames_.back()["loop"] = Value::Dict(std::move(loop));
      absl::Status assigned = Assign(node.targets, items[static_cast<size_t>(k)], node.line);
      absl::StatusOr<Flow> flow = assigned.ok() ? Exec(node.body) : absl::StatusOr<Flow>(assigned);
      frames_.pop_back();
      if (!flow.ok()) return flow;
      if (*flow == Flow::kBreak) break;
    }
    if (n == 0 && !node.else_body.empty()) {
      frames_.emplace_back();
      absl::StatusOr<Flow> flow = Exec(node.else_body);
      frames_.pop_back();
      return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<CallArgs> Arguments(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t k = first; k < e.args.size(); ++k) {
      absl::StatusOr<Value> v = Eval(*e.args[k]);
      if (!v.ok()) return v.status();
      args.positional.push_back(*std::move(v));
    }
    for (const auto& [name, expr] : e.kwargs) {
      absl::StatusOr<Value> v = Eval(*expr);
      if (!v.ok()) return v.status();
      args.keyword.emplace_back(name, *std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    if (absl::Status s = Step(); !s.ok()) return s;
    absl::StatusOr<Value> v = EvalInner(e);
    if (!v.ok()) return AtLine(v.status(), e.line);
    return v;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e) {
    using T = Expr::Type;
    switch (e.type) {
      case T::kConst:
        return e.constant;
      case T::kName:
        return Lookup(e.name);
      case T::kList: {
        absl::StatusOr<CallArgs> items = Arguments(e, 0);
        if (!items.ok()) return items.status();
        return Value::List(std::move(items->positional));
      }
      case T::kDict: {
        absl::StatusOr<CallArgs> items = Arguments(e, 0);
        if (!items.ok()) return items.status();
        ValueDict dict;
        for (size_t k = 0; k + 1 < items->positional.size(); k += 2) {
          const Value& key = items->positional[k];
          if (!key.is_string()) return absl::InvalidArgumentError("dict keys must be strings");
          auto it = std::find_if(dict.begin(), dict.end(),
                                 [&](const auto& item) { return item.first == key.s; });
          if (it != dict.end()) {
            it->second = items->positional[k + 1];
          } else {
            dict.emplace_back(key.s, items->positional[k + 1]);
          }
        }
        return Value::Dict(std::move(dict));
      }
      case T::kGetAttr: {
        absl::StatusOr<Value> object = Eval(*e.args[0]);
        if (!object.ok()) return object.status();
        return GetAttr(*object, e.name);
      }
      case T::kGetItem:
      case T::kSlice: {
        absl::StatusOr<Value> object = Eval(*e.args[0]);
        if (!object.ok()) return object.status();
        std::vector<Value> parts;
        for (size_t k = 1; k < e.args.size(); ++k) {
          if (e.args[k] == nullptr) {
            parts.push_back(Value::None());
            continue;
          }
          absl::StatusOr<Value> part = Eval(*e.args[k]);
          if (!part.ok()) return part.status();
          parts.push_back(*std::move(part));
        }
        if (e.type == T::kGetItem) return GetItem(*object, parts[0]);
        return Slice(*object, &parts[0], &parts[1], &parts[2]);
      }
      case T::kCall: {
        const Expr& callee = *e.args[0];
        absl::StatusOr<CallArgs> args = Arguments(e, 1);
        if (!args.ok()) return args.status();
        if (callee.type == T::kName) return CallGlobal(callee.name, *args);
        absl::StatusOr<Value> self = Eval(*callee.args[0]);
        if (!self.ok()) return self.status();
        return CallMethod(*self, callee.name, *args);
      }
      case T::kFilter:
      case T::kTest: {
        absl::StatusOr<Value> input = Eval(*e.args[0]);
        if (!input.ok()) return input.status();
        absl::StatusOr<CallArgs> args = Arguments(e, 1);
        if (!args.ok()) return args.status();
        if (e.type == T::kFilter) {
          absl::StatusOr<Value> out = ApplyFilter(e.name, *input, *args);
          if (out.ok() && out->is_string() && out->s.size() > limits_.max_output_bytes) {
            return absl::ResourceExhaustedError("a filter's result exceeds the output limit");
          }
          return out;
        }
        absl::StatusOr<bool> passed = ApplyTest(e.name, *input, *args);
        if (!passed.ok()) return passed.status();
        return Value::Bool(*passed != e.negated);
      }
      case T::kNot:
      case T::kNeg:
      case T::kPos: {
        absl::StatusOr<Value> v = Eval(*e.args[0]);
        if (!v.ok()) return v.status();
        if (e.type == T::kNot) return Value::Bool(!Truthy(*v));
        if (!v->is_number()) {
          return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ",
                                                         e.type == T::kNeg ? "-" : "+", ": '",
                                                         TypeName(*v), "'"));
        }
        if (e.type == T::kPos) return *v;
        if (v->kind == Value::Kind::kFloat) return Value::Float(-v->f);
        if (AsInt(*v) == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
        return Value::Int(-AsInt(*v));
      }
      case T::kBinary: {
        absl::StatusOr<Value> a = Eval(*e.args[0]);
        if (!a.ok()) return a.status();
        absl::StatusOr<Value> b = Eval(*e.args[1]);
        if (!b.ok()) return b.status();
        absl::StatusOr<Value> out = Arithmetic(e.name, *a, *b, limits_.max_output_bytes);
        if (out.ok() && out->is_string() && out->s.size() > limits_.max_output_bytes) {
          return absl::ResourceExhaustedError("a string exceeds the output limit");
        }
        return out;
      }
      case T::kCompare:
        return Compare(e);
      case T::kAnd:
      case T::kOr: {
        absl::StatusOr<Value> a = Eval(*e.args[0]);
        if (!a.ok()) return a.status();
        if (Truthy(*a) == (e.type == T::kOr)) return a;
        return Eval(*e.args[1]);
      }
      case T::kCond: {
        absl::StatusOr<Value> cond = Eval(*e.args[0]);
        if (!cond.ok()) return cond.status();
        if (Truthy(*cond)) return Eval(*e.args[1]);
        if (e.args[2] == nullptr) return Value::Undefined();
        return Eval(*e.args[2]);
      }
    }
    return Value::Undefined();
  }

  absl::StatusOr<Value> Compare(const Expr& e) {
    absl::StatusOr<Value> left = Eval(*e.args[0]);
    if (!left.ok()) return left.status();
    for (size_t k = 0; k < e.ops.size(); ++k) {
      absl::StatusOr<Value> right = Eval(*e.args[k + 1]);
      if (!right.ok()) return right.status();
      const std::string& op = e.ops[k];
      bool result = false;
      if (op == "==" || op == "!=") {
        result = Equal(*left, *right) == (op == "==");
      } else if (op == "in" || op == "notin") {
        CallArgs args;
        args.positional.push_back(*right);
        absl::StatusOr<bool> in = ApplyTest("in", *left, args);
        if (!in.ok()) return in.status();
        result = *in == (op == "in");
      } else {
        const bool swap = op == ">" || op == "<=";
        absl::StatusOr<bool> less = swap ? Less(*right, *left) : Less(*left, *right);
        if (!less.ok()) return less.status();
        result = (op == "<" || op == ">") ? *less : !*less;
      }
      if (!result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  const RenderLimits limits_;
  std::vector<absl::flat_hash_map<std::string, Value>> frames_;
  std::string out_;
  int64_t steps_ = 0;
};

}  // namespace

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(absl::string_view source) {
  absl::StatusOr<NodeList> nodes = ParseTemplate(source);
  if (!nodes.ok()) return nodes.status();
  return JinjaTemplate(std::make_shared<const NodeList>(*std::move(nodes)));
}

absl::StatusOr<std::string> JinjaTemplate::Render(const ValueDict& variables,
                                                  const RenderLimits& limits) const {
  return Renderer(variables, limits).Run(*nodes_);
}

}  // namespace abcd::chat
