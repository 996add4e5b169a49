#include "server/chat/jinja_template.h"

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja_builtins.h"

namespace abcd::chat {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

// Macro calls nest at most this deep (a recursive macro over a deep JSON schema).
constexpr int kMaxCallDepth = 64;
// Blocks and expressions being rendered, across macro calls, nest at most this deep: it bounds
// the renderer's recursion, so its stack (measured: under 1 MiB at this depth, under 4 MiB with
// ASan) whatever a template nests inside a recursive macro.
constexpr int kMaxNesting = 400;

// What a macro value (Value::macro) points to: its node, and for a call block's caller the
// scope of the {% call %} (null for a macro: it runs over the template's top-level scope).
struct Callable {
  const Node* node;
  std::shared_ptr<const std::vector<absl::flat_hash_map<std::string, Value>>> scope;
};

int64_t IntOf(const Value& v) { return v.kind == Value::Kind::kBool ? int64_t{v.b} : v.i; }

class Renderer {
 public:
  Renderer(const ValueDict& variables, const RenderLimits& limits) : budget_(limits) {
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
  absl::Status Step() { return budget_.Work(1); }
  // Adds the line to an error from a builtin (raise_exception's message and the budget's
  // statuses stay as they are).
  static absl::Status AtLine(absl::Status status, int line) {
    if (status.ok() || status.GetPayload(kTemplateExceptionPayload).has_value() ||
        status.code() == absl::StatusCode::kResourceExhausted ||
        status.code() == absl::StatusCode::kCancelled ||
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
    if (IsGlobalFunction(name)) return Value::Function(name);  // `strftime_now is defined`
    return Value::Undefined(name);
  }

  // Renders `body` into a string instead of the output (a macro's result, a {% set %} block).
  absl::StatusOr<std::string> Capture(const NodeList& body) {
    std::string saved = std::move(out_);
    out_.clear();
    ++capturing_;
    absl::StatusOr<Flow> flow = Exec(body);
    --capturing_;
    std::string captured = std::move(out_);
    out_ = std::move(saved);
    if (!flow.ok()) return flow.status();
    return captured;
  }

  // Calls a {% macro %} (or a call block's caller): its parameters bound from `args` (missing
  // ones from their defaults, else undefined), `caller` when given, in a scope over the
  // template's globals and top-level variables (jinja2: a macro sees those at call time) or,
  // for a caller, over the scope of its {% call %}.
  absl::StatusOr<Value> CallMacro(const Value& function, const CallArgs& args, const Value* caller,
                                  int line) {
    const auto& callable = *static_cast<const Callable*>(function.macro.get());
    const Node& node = *callable.node;
    if (++call_depth_ > kMaxCallDepth) {
      --call_depth_;
      return AtLine(absl::InvalidArgumentError(absl::StrCat("macro calls nested deeper than ",
                                                            kMaxCallDepth, " (recursion?)")),
                    line);
    }
    absl::flat_hash_map<std::string, Value> local;
    ValueList varargs;
    ValueDict kwargs;
    for (size_t k = 0; k < args.positional.size(); ++k) {
      if (k < node.params.size()) {
        local[node.params[k]] = args.positional[k];
      } else {
        varargs.push_back(args.positional[k]);
      }
    }
    for (const auto& [key, value] : args.keyword) {
      const auto it = std::find(node.params.begin(), node.params.end(), key);
      if (it == node.params.end()) {
        kwargs.emplace_back(key, value);
      } else {
        local[key] = value;
      }
    }
    absl::Status refused;
    if (!varargs.empty() && !node.uses_varargs) {
      refused = absl::InvalidArgumentError(absl::StrCat("macro '", function.s.str(),
                                                        "' takes not more than ",
                                                        node.params.size(), " argument(s)"));
    } else if (!kwargs.empty() && !node.uses_kwargs) {
      refused = absl::InvalidArgumentError(absl::StrCat(
          "macro '", function.s.str(), "' takes no keyword argument '", kwargs[0].first, "'"));
    }
    // The scope is copied per call: charged like the items it copies.
    size_t copied = 0;
    if (callable.scope != nullptr) {
      for (const auto& frame : *callable.scope) copied += frame.size();
    } else {
      copied = frames_[0].size() + frames_[1].size();
    }
    if (absl::Status s = budget_.Items(copied + local.size()); !s.ok()) {
      --call_depth_;
      return s;
    }
    std::vector<absl::flat_hash_map<std::string, Value>> saved = std::move(frames_);
    frames_.clear();
    if (callable.scope != nullptr) {
      frames_ = *callable.scope;
    } else {
      frames_.push_back(saved[0]);
      frames_.push_back(saved[1]);
    }
    frames_.push_back(std::move(local));
    absl::StatusOr<std::string> text = std::string();
    if (!refused.ok()) {
      text = AtLine(refused, line);
    } else {
      // Defaults are evaluated in the macro's scope, after the parameters before them.
      for (size_t k = 0; k < node.params.size() && text.ok(); ++k) {
        if (frames_.back().contains(node.params[k])) continue;
        if (node.defaults[k] == nullptr) {
          frames_.back()[node.params[k]] = Value::Undefined(node.params[k]);
          continue;
        }
        absl::StatusOr<Value> fallback = Eval(*node.defaults[k]);
        if (!fallback.ok()) {
          text = fallback.status();
        } else {
          frames_.back()[node.params[k]] = *std::move(fallback);
        }
      }
      if (text.ok()) {
        frames_.back()["varargs"] = Value::Tuple(std::move(varargs));
        frames_.back()["kwargs"] = Value::Dict(std::move(kwargs));
        if (caller != nullptr) frames_.back()["caller"] = *caller;
        text = Capture(node.body);
      }
    }
    frames_ = std::move(saved);
    --call_depth_;
    if (!text.ok()) return text.status();
    return Value::String(*std::move(text));
  }

  absl::StatusOr<Value> CallValue(const Value& callee, const CallArgs& args, int line) {
    if (callee.kind != Value::Kind::kFunction) {
      if (callee.undefined()) {
        return absl::InvalidArgumentError(
            callee.s.empty() ? "a value is undefined"
                             : absl::StrCat("'", callee.s.str(), "' is undefined"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("'", TypeName(callee), "' object is not callable"));
    }
    if (callee.macro != nullptr) return CallMacro(callee, args, nullptr, line);
    if (callee.self != nullptr) return CallMethod(*callee.self, callee.s.str(), args, budget_);
    return CallGlobal(callee.s.str(), args, budget_);
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

  // Counts one level of the renderer's recursion while alive.
  class Nested {
   public:
    explicit Nested(Renderer* r) : r_(r) { ++r_->nesting_; }
    ~Nested() { --r_->nesting_; }
    bool too_deep() const { return r_->nesting_ > kMaxNesting; }

   private:
    Renderer* r_;
  };
  static absl::Status TooDeep(int line) {
    return absl::InvalidArgumentError(absl::StrCat("chat template line ", line,
                                                   ": the render nests blocks, expressions and "
                                                   "macro calls deeper than ",
                                                   kMaxNesting));
  }

  absl::StatusOr<Flow> Exec(const NodeList& nodes) {
    const Nested nested(this);
    if (nested.too_deep()) return TooDeep(nodes.empty() ? 0 : nodes.front()->line);
    for (const std::unique_ptr<Node>& node : nodes) {
      if (absl::Status s = Step(); !s.ok()) return s;
      absl::StatusOr<Flow> flow = ExecOne(*node);
      if (!flow.ok() || *flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::Status Emit(absl::string_view text) {
    const size_t cap = budget_.limits().max_output_bytes;
    if (out_.size() + text.size() > cap) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the chat template's rendered prompt exceeds ", cap, " bytes"));
    }
    // Captured text becomes a value (charged as created); the output is capped above.
    if (absl::Status s = capturing_ > 0 ? budget_.Bytes(text.size()) : budget_.Scan(text.size());
        !s.ok()) {
      return s;
    }
    out_.append(text.data(), text.size());
    return absl::OkStatus();
  }

  absl::Status EmitValue(const Value& v) {
    if (v.is_string()) return Emit(v.s.str());
    if (v.undefined()) return absl::OkStatus();
    absl::StatusOr<std::string> text = StrOf(v, budget_);
    if (!text.ok()) return text.status();
    return Emit(*text);
  }

  // {% set ns.attr = ns.attr + value %}: appends in place when the namespace holds the only
  // reference to its list or string (the usual way templates collect items in a loop, which
  // would otherwise copy the whole list at every step). Returns false when it does not apply.
  absl::StatusOr<bool> AppendInPlace(const Node& node, const Value& target) {
    const Expr& e = *node.expr;
    if (e.type != Expr::Type::kBinary || e.name != "+") return false;
    const Expr& left = *e.args[0];
    if (left.type != Expr::Type::kGetAttr || left.name != node.attribute ||
        left.args[0]->type != Expr::Type::kName || left.args[0]->name != node.targets[0]) {
      return false;
    }
    if (target.Find(node.attribute) == nullptr) return false;
    absl::StatusOr<Value> right = Eval(*e.args[1]);
    if (!right.ok()) return right.status();
    Value* slot = const_cast<Value*>(target.Find(node.attribute));
    if (slot == nullptr) return false;
    if (slot->kind == Value::Kind::kList && right->kind == Value::Kind::kList &&
        slot->list.use_count() == 1) {
      if (absl::Status s = budget_.Items(right->list->size()); !s.ok()) return s;
      const ValueList items = *right->list;  // right may be the same list
      slot->list->insert(slot->list->end(), items.begin(), items.end());
      return true;
    }
    std::string* text = slot->is_string() ? slot->s.Unique() : nullptr;
    if (text != nullptr && right->is_string() && !slot->markup && !right->markup) {
      if (absl::Status s = budget_.Bytes(right->s.size()); !s.ok()) return s;
      text->append(right->s.str());
      return true;
    }
    absl::StatusOr<Value> sum = BinaryOperator("+", *slot, *right, budget_);
    if (!sum.ok()) return AtLine(sum.status(), e.line);
    *slot = *std::move(sum);
    return true;
  }

  absl::StatusOr<Flow> ExecOne(const Node& node) {
    switch (node.type) {
      case Node::Type::kText:
        if (absl::Status s = Emit(node.text); !s.ok()) return s;
        return Flow::kNormal;
      case Node::Type::kOutput: {
        absl::StatusOr<Value> v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        if (absl::Status s = EmitValue(*v); !s.ok()) return s;
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
        if (!node.attribute.empty()) return SetAttribute(node);
        if (node.expr == nullptr) {  // {% set x %}body{% endset %}
          absl::StatusOr<std::string> text = Capture(node.body);
          if (!text.ok()) return text.status();
          frames_.back()[node.targets[0]] = Value::String(*std::move(text));
          return Flow::kNormal;
        }
        absl::StatusOr<Value> v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        if (absl::Status s = Assign(node.targets, *v, node.line); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Node::Type::kBreak:
        return Flow::kBreak;
      case Node::Type::kContinue:
        return Flow::kContinue;
      case Node::Type::kBlock:
        return Exec(node.body);
      case Node::Type::kMacro: {
        Value macro = Value::Function(node.targets[0]);
        macro.macro = std::make_shared<const Callable>(Callable{&node, nullptr});
        frames_.back()[node.targets[0]] = std::move(macro);
        return Flow::kNormal;
      }
      case Node::Type::kCallBlock:
        return ExecCallBlock(node);
      case Node::Type::kFilterBlock: {
        absl::StatusOr<std::string> text = Capture(node.body);
        if (!text.ok()) return text.status();
        absl::StatusOr<CallArgs> args = Arguments(*node.expr, 1);
        if (!args.ok()) return args.status();
        absl::StatusOr<Value> v =
            ApplyFilter(node.expr->name, Value::String(*std::move(text)), *args, budget_);
        if (!v.ok()) return AtLine(v.status(), node.line);
        if (absl::Status s = EmitValue(*v); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Node::Type::kError:
        return AtLine(absl::InvalidArgumentError(node.text), node.line);
    }
    return Flow::kNormal;
  }

  // {% call(params) m(args) %}body{% endcall %}: m called with `caller`, a macro whose body is
  // the block's, run in the scope of the {% call %}.
  absl::StatusOr<Flow> ExecCallBlock(const Node& node) {
    const Expr& call = *node.expr;
    absl::StatusOr<Value> callee = Eval(*call.args[0]);
    if (!callee.ok()) return callee.status();
    absl::StatusOr<CallArgs> args = Arguments(call, 1);
    if (!args.ok()) return args.status();
    if (callee->kind != Value::Kind::kFunction || callee->macro == nullptr) {
      return AtLine(absl::InvalidArgumentError("{% call %} needs a macro"), node.line);
    }
    if (absl::Status s = budget_.Items(VariableCount()); !s.ok()) return s;  // the snapshot
    Value caller = Value::Function("caller");
    caller.macro = std::make_shared<const Callable>(Callable{
        &node, std::make_shared<std::vector<absl::flat_hash_map<std::string, Value>>>(frames_)});
    absl::StatusOr<Value> text = CallMacro(*callee, *args, &caller, node.line);
    if (!text.ok()) return text.status();
    if (absl::Status s = EmitValue(*text); !s.ok()) return s;
    return Flow::kNormal;
  }

  size_t VariableCount() const {
    size_t n = 0;
    for (const auto& frame : frames_) n += frame.size();
    return n;
  }

  absl::StatusOr<Flow> SetAttribute(const Node& node) {
    const Value target = Lookup(node.targets[0]);
    if (target.kind != Value::Kind::kNamespace) {
      return AtLine(absl::InvalidArgumentError(absl::StrCat(
                        "cannot assign attribute on non-namespace object '", node.targets[0], "'")),
                    node.line);
    }
    absl::StatusOr<bool> appended = AppendInPlace(node, target);
    if (!appended.ok()) return appended.status();
    if (*appended) return Flow::kNormal;
    absl::StatusOr<Value> v = Eval(*node.expr);
    if (!v.ok()) return v.status();
    if (absl::Status s = budget_.Work(static_cast<int64_t>(target.dict->size())); !s.ok()) {
      return s;
    }
    for (auto& [key, value] : *target.dict) {
      if (key == node.attribute) {
        value = *std::move(v);
        return Flow::kNormal;
      }
    }
    if (absl::Status s = budget_.Items(1); !s.ok()) return s;
    target.dict->emplace_back(node.attribute, *std::move(v));
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Node& node) {
    absl::StatusOr<Value> iterable = Eval(*node.expr);
    if (!iterable.ok()) return iterable.status();
    absl::StatusOr<std::shared_ptr<const ValueList>> all = Iterate(*iterable, budget_);
    if (!all.ok()) return AtLine(all.status(), node.line);
    std::shared_ptr<const ValueList> items = *std::move(all);
    if (node.filter != nullptr) {
      if (absl::Status s = budget_.Items(items->size()); !s.ok()) return s;
      auto kept = std::make_shared<ValueList>();
      for (const Value& item : *items) {
        frames_.emplace_back();
        absl::Status s = Assign(node.targets, item, node.line);
        absl::StatusOr<Value> keep = s.ok() ? Eval(*node.filter) : absl::StatusOr<Value>(s);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (Truthy(*keep)) kept->push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items->size());
    for (int64_t k = 0; k < n; ++k) {
      if (absl::Status s = budget_.Work(8); !s.ok()) return s;
      ValueDict loop = {{"index0", Value::Int(k)},
                        {"index", Value::Int(k + 1)},
                        {"revindex0", Value::Int(n - k - 1)},
                        {"revindex", Value::Int(n - k)},
                        {"first", Value::Bool(k == 0)},
                        {"last", Value::Bool(k == n - 1)},
                        {"length", Value::Int(n)}};
      if (k > 0) loop.emplace_back("previtem", (*items)[static_cast<size_t>(k - 1)]);
      if (k + 1 < n) loop.emplace_back("nextitem", (*items)[static_cast<size_t>(k + 1)]);
      frames_.emplace_back();  // a fresh scope per iteration, as jinja2's
      frames_.back()["loop"] = Value::Dict(std::move(loop));
      absl::Status assigned = Assign(node.targets, (*items)[static_cast<size_t>(k)], node.line);
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
    const Nested nested(this);
    if (nested.too_deep()) return TooDeep(e.line);
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
        if (absl::Status s = budget_.Items(items->positional.size()); !s.ok()) return s;
        if (e.name == "tuple") return Value::Tuple(std::move(items->positional));
        return Value::List(std::move(items->positional));
      }
      case T::kDict: {
        absl::StatusOr<CallArgs> items = Arguments(e, 0);
        if (!items.ok()) return items.status();
        ValueDict dict;
        for (size_t k = 0; k + 1 < items->positional.size(); k += 2) {
          const Value& key = items->positional[k];
          const std::optional<std::string> key_text = DictKey(key);
          if (!key_text.has_value()) {
            return absl::InvalidArgumentError("dict keys must be strings or integers");
          }
          if (absl::Status s = budget_.Items(dict.size() + 1); !s.ok()) return s;
          auto it = std::find_if(dict.begin(), dict.end(),
                                 [&](const auto& item) { return item.first == *key_text; });
          if (it != dict.end()) {
            it->second = items->positional[k + 1];
          } else {
            dict.emplace_back(*key_text, items->positional[k + 1]);
          }
        }
        return Value::Dict(std::move(dict));
      }
      case T::kGetAttr: {
        absl::StatusOr<Value> object = Eval(*e.args[0]);
        if (!object.ok()) return object.status();
        return GetAttr(*object, e.name, budget_);
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
        if (e.type == T::kGetItem) return GetItem(*object, parts[0], budget_);
        return Slice(*object, &parts[0], &parts[1], &parts[2], budget_);
      }
      case T::kCall: {
        const Expr& callee = *e.args[0];
        absl::StatusOr<CallArgs> args = Arguments(e, 1);
        if (!args.ok()) return args.status();
        if (absl::Status s = budget_.Work(1); !s.ok()) return s;
        if (callee.type == T::kGetAttr) {  // a method of a string or dict (or a namespace's macro)
          absl::StatusOr<Value> self = Eval(*callee.args[0]);
          if (!self.ok()) return self.status();
          if (self->kind == Value::Kind::kNamespace || self->kind == Value::Kind::kDict) {
            const Value* member = self->Find(callee.name);
            if (member != nullptr && member->kind == Value::Kind::kFunction) {
              return CallValue(*member, *args, e.line);
            }
          }
          if (!IsMethod(callee.name) && (self->is_string() || self->kind == Value::Kind::kDict ||
                                         self->kind == Value::Kind::kList)) {
            return absl::InvalidArgumentError(
                absl::StrCat("method '.", callee.name, "()' is not supported"));
          }
          return CallMethod(*self, callee.name, *args, budget_);
        }
        absl::StatusOr<Value> function = Eval(callee);
        if (!function.ok()) return function.status();
        if (callee.type == T::kName && function->undefined() && !IsGlobalFunction(callee.name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("function '", callee.name, "' is not supported"));
        }
        return CallValue(*function, *args, e.line);
      }
      case T::kFilter:
      case T::kTest: {
        absl::StatusOr<Value> input = Eval(*e.args[0]);
        if (!input.ok()) return input.status();
        absl::StatusOr<CallArgs> args = Arguments(e, 1);
        if (!args.ok()) return args.status();
        if (e.type == T::kFilter) return ApplyFilter(e.name, *input, *args, budget_);
        absl::StatusOr<bool> passed = ApplyTest(e.name, *input, *args, budget_);
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
        if (IntOf(*v) == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
        return Value::Int(-IntOf(*v));
      }
      case T::kBinary: {
        absl::StatusOr<Value> a = Eval(*e.args[0]);
        if (!a.ok()) return a.status();
        absl::StatusOr<Value> b = Eval(*e.args[1]);
        if (!b.ok()) return b.status();
        return BinaryOperator(e.name, *a, *b, budget_);
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
        result = Equal(*left, *right, &budget_) == (op == "==");
        if (!budget_.ok()) return budget_.status();
      } else if (op == "in" || op == "notin") {
        CallArgs args;
        args.positional.push_back(*right);
        absl::StatusOr<bool> in = ApplyTest("in", *left, args, budget_);
        if (!in.ok()) return in.status();
        result = *in == (op == "in");
      } else {
        const bool swap = op == ">" || op == "<=";
        if (left->is_string() && right->is_string()) {
          if (absl::Status s = budget_.Scan(std::min(left->s.str().size(), right->s.str().size()));
              !s.ok()) {
            return s;
          }
        }
        absl::StatusOr<bool> less = swap ? Less(*right, *left) : Less(*left, *right);
        if (!less.ok()) return less.status();
        result = (op == "<" || op == ">") ? *less : !*less;
      }
      if (!result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  RenderBudget budget_;
  std::vector<absl::flat_hash_map<std::string, Value>> frames_;
  std::string out_;
  int capturing_ = 0;   // > 0: out_ is a macro's or {% set %} block's text
  int nesting_ = 0;     // Exec and Eval calls in progress (Nested)
  int call_depth_ = 0;  // macro calls in progress
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
