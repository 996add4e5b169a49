// Recursive-descent parser for the chat-template subset (jinja_ast.h) over jinja_lexer.h's
// segments. The grammar and precedence follow jinja2's parser.py: condexpr < or < and < not <
// compare < +,- < ~ < *,/,//,% < ** < unary -,+ < postfix (., [], ()) and filters/tests.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja_ast.h"
#include "server/chat/jinja_builtins.h"
#include "server/chat/jinja_lexer.h"

namespace abcd::chat {
namespace {

absl::Status ParseError(int line, absl::string_view message) {
  return TemplateError(line, message);
}

using ExprPtr = std::unique_ptr<Expr>;

// Whether the expression or nodes read the variable `name` (a macro's varargs / kwargs).
bool Mentions(const Expr* e, const std::string& name) {
  if (e == nullptr) return false;
  if (e->type == Expr::Type::kName && e->name == name) return true;
  for (const ExprPtr& arg : e->args) {
    if (Mentions(arg.get(), name)) return true;
  }
  for (const auto& kwarg : e->kwargs) {
    if (Mentions(kwarg.second.get(), name)) return true;
  }
  return false;
}

bool Mentions(const NodeList& nodes, const std::string& name) {
  for (const auto& node : nodes) {
    if (Mentions(node->expr.get(), name) || Mentions(node->filter.get(), name) ||
        Mentions(node->body, name) || Mentions(node->else_body, name)) {
      return true;
    }
    for (const auto& fallback : node->defaults) {
      if (Mentions(fallback.get(), name)) return true;
    }
    for (const auto& [cond, body] : node->branches) {
      if (Mentions(cond.get(), name) || Mentions(body, name)) return true;
    }
  }
  return false;
}

class Parser {
 public:
  explicit Parser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  absl::StatusOr<NodeList> Run() {
    NodeList nodes;
    std::string end;
    if (absl::Status s = Body({}, &nodes, &end, 0); !s.ok()) return s;
    return nodes;
  }

 private:
  // Parses nodes until a block tag whose keyword is in `ends` (stored in *end, its tokens
  // left current) or the end of the template (only allowed when ends is empty).
  absl::Status Body(const std::vector<std::string>& ends, NodeList* out, std::string* end,
                    int depth);
  // A macro's or caller's parameters: (name[=default], ...).
  absl::Status Params(Node* node);
  absl::Status Statement(const std::string& keyword, NodeList* out, int depth);
  absl::Status ExpectEnd() {
    if (Peek().type != Token::Type::kEnd) {
      return ParseError(Peek().line, absl::StrCat("unexpected '", Peek().text, "' in the tag"));
    }
    return absl::OkStatus();
  }

  // Expressions.
  const Token& Peek(size_t ahead = 0) const {
    const std::vector<Token>& tokens = segments_[seg_].tokens;
    return tokens[std::min(tok_ + ahead, tokens.size() - 1)];
  }
  Token Next() {
    Token token = Peek();
    if (tok_ + 1 < segments_[seg_].tokens.size()) ++tok_;
    return token;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Token::Type::kOp && Peek(ahead).text == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Token::Type::kName && Peek(ahead).text == name;
  }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (SkipOp(op)) return absl::OkStatus();
    return ParseError(Peek().line, absl::StrCat("expected '", op, "', got ",
                                                Peek().type == Token::Type::kEnd
                                                    ? "the end of the tag"
                                                    : absl::StrCat("'", Peek().text, "'")));
  }
  ExprPtr Make(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }
  ExprPtr Binary(Expr::Type type, ExprPtr a, ExprPtr b, absl::string_view op = "") {
    ExprPtr e = Make(type, a->line);
    e->name = std::string(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  absl::Status Deeper(int line) {
    if (++depth_ > kMaxTemplateDepth) return ParseError(line, "expression nested too deeply");
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> Expression(bool with_condexpr = true);
  absl::StatusOr<ExprPtr> Or();
  absl::StatusOr<ExprPtr> And();
  absl::StatusOr<ExprPtr> Not();
  absl::StatusOr<ExprPtr> Compare();
  absl::StatusOr<ExprPtr> Math1();
  absl::StatusOr<ExprPtr> Concat();
  absl::StatusOr<ExprPtr> Math2();
  absl::StatusOr<ExprPtr> Pow();
  absl::StatusOr<ExprPtr> Unary(bool with_filter);
  absl::StatusOr<ExprPtr> Primary();
  absl::StatusOr<ExprPtr> Postfix(ExprPtr node);
  absl::StatusOr<ExprPtr> FilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> Subscript(ExprPtr node);
  absl::Status CallArgs(Expr* call);
  absl::StatusOr<std::vector<std::string>> Targets();

  std::vector<Segment> segments_;
  size_t seg_ = 0;
  size_t tok_ = 0;
  int depth_ = 0;
};

#define PARSE_ASSIGN(lhs, rexpr)                \
  auto lhs##_or = (rexpr);                      \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

absl::StatusOr<ExprPtr> Parser::Expression(bool with_condexpr) {
  if (absl::Status s = Deeper(Peek().line); !s.ok()) return s;
  PARSE_ASSIGN(node, Or());
  while (with_condexpr && IsName("if")) {
    Next();
    PARSE_ASSIGN(cond, Or());
    ExprPtr e = Make(Expr::Type::kCond, cond->line);
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(node));
    if (IsName("else")) {
      Next();
      PARSE_ASSIGN(other, Expression());
      e->args.push_back(std::move(other));
    } else {
      e->args.push_back(nullptr);
    }
    node = std::move(e);
  }
  --depth_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::Or() {
  PARSE_ASSIGN(node, And());
  while (IsName("or")) {
    Next();
    PARSE_ASSIGN(right, And());
    node = Binary(Expr::Type::kOr, std::move(node), std::move(right));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::And() {
  PARSE_ASSIGN(node, Not());
  while (IsName("and")) {
    Next();
    PARSE_ASSIGN(right, Not());
    node = Binary(Expr::Type::kAnd, std::move(node), std::move(right));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Not() {
  if (IsName("not")) {
    const int line = Next().line;
    if (absl::Status s = Deeper(line); !s.ok()) return s;
    PARSE_ASSIGN(operand, Not());
    --depth_;
    ExprPtr e = Make(Expr::Type::kNot, line);
    e->args.push_back(std::move(operand));
    return e;
  }
  return Compare();
}

absl::StatusOr<ExprPtr> Parser::Compare() {
  PARSE_ASSIGN(first, Math1());
  ExprPtr e;
  while (true) {
    std::string op;
    if (Peek().type == Token::Type::kOp &&
        (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
      op = Next().text;
    } else if (IsName("in")) {
      Next();
      op = "in";
    } else if (IsName("not") && IsName("in", 1)) {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    if (e == nullptr) {
      e = Make(Expr::Type::kCompare, first->line);
      e->args.push_back(std::move(first));
    }
    PARSE_ASSIGN(right, Math1());
    e->ops.push_back(op);
    e->args.push_back(std::move(right));
  }
  return e != nullptr ? std::move(e) : std::move(first);
}

absl::StatusOr<ExprPtr> Parser::Math1() {
  PARSE_ASSIGN(node, Concat());
  while (IsOp("+") || IsOp("-")) {
    const std::string op = Next().text;
    PARSE_ASSIGN(right, Concat());
    node = Binary(Expr::Type::kBinary, std::move(node), std::move(right), op);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Concat() {
  PARSE_ASSIGN(node, Math2());
  while (IsOp("~")) {
    Next();
    PARSE_ASSIGN(right, Math2());
    node = Binary(Expr::Type::kBinary, std::move(node), std::move(right), "~");
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Math2() {
  PARSE_ASSIGN(node, Pow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const std::string op = Next().text;
    PARSE_ASSIGN(right, Pow());
    node = Binary(Expr::Type::kBinary, std::move(node), std::move(right), op);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Pow() {
  PARSE_ASSIGN(node, Unary(true));
  while (IsOp("**")) {
    Next();
    PARSE_ASSIGN(right, Unary(true));
    node = Binary(Expr::Type::kBinary, std::move(node), std::move(right), "**");
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Unary(bool with_filter) {
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token sign = Next();
    if (absl::Status s = Deeper(sign.line); !s.ok()) return s;
    PARSE_ASSIGN(operand, Unary(false));
    --depth_;
    node = Make(sign.text == "-" ? Expr::Type::kNeg : Expr::Type::kPos, sign.line);
    node->args.push_back(std::move(operand));
  } else {
    PARSE_ASSIGN(primary, Primary());
    node = std::move(primary);
  }
  PARSE_ASSIGN(post, Postfix(std::move(node)));
  if (!with_filter) return post;
  return FilterExpr(std::move(post));
}

absl::StatusOr<ExprPtr> Parser::Primary() {
  const Token token = Next();
  switch (token.type) {
    case Token::Type::kName: {
      static const absl::flat_hash_set<absl::string_view> kTrue = {"true", "True"};
      static const absl::flat_hash_set<absl::string_view> kFalse = {"false", "False"};
      static const absl::flat_hash_set<absl::string_view> kNone = {"none", "None"};
      ExprPtr e = Make(Expr::Type::kConst, token.line);
      if (kTrue.contains(token.text)) {
        e->constant = Value::Bool(true);
      } else if (kFalse.contains(token.text)) {
        e->constant = Value::Bool(false);
      } else if (kNone.contains(token.text)) {
        e->constant = Value::None();
      } else {
        e->type = Expr::Type::kName;
        e->name = token.text;
      }
      return e;
    }
    case Token::Type::kString: {
      std::string text = token.text;
      while (Peek().type == Token::Type::kString) text += Next().text;  // 'a' 'b' == 'ab'
      ExprPtr e = Make(Expr::Type::kConst, token.line);
      e->constant = Value::String(std::move(text));
      return e;
    }
    case Token::Type::kInt:
    case Token::Type::kFloat: {
      ExprPtr e = Make(Expr::Type::kConst, token.line);
      e->constant = token.type == Token::Type::kInt ? Value::Int(token.i) : Value::Float(token.f);
      return e;
    }
    case Token::Type::kOp:
      if (token.text == "(" || token.text == "[") {
        const std::string close = token.text == "(" ? ")" : "]";
        ExprPtr list = Make(Expr::Type::kList, token.line);
        bool tuple = token.text == "[";
        while (!IsOp(close)) {
          if (!list->args.empty()) {
            if (absl::Status s = ExpectOp(","); !s.ok()) return s;
            tuple = true;
            if (IsOp(close)) break;
          }
          PARSE_ASSIGN(item, Expression());
          list->args.push_back(std::move(item));
        }
        Next();
        if (!tuple && list->args.size() == 1) return std::move(list->args[0]);  // (expr)
        if (close == ")") list->name = "tuple";
        return list;
      }
      if (token.text == "{") {
        ExprPtr dict = Make(Expr::Type::kDict, token.line);
        while (!IsOp("}")) {
          if (!dict->args.empty()) {
            if (absl::Status s = ExpectOp(","); !s.ok()) return s;
            if (IsOp("}")) break;
          }
          PARSE_ASSIGN(key, Expression());
          if (absl::Status s = ExpectOp(":"); !s.ok()) return s;
          PARSE_ASSIGN(value, Expression());
          dict->args.push_back(std::move(key));
          dict->args.push_back(std::move(value));
        }
        Next();
        return dict;
      }
      [[fallthrough]];
    default:
      return ParseError(token.line, token.type == Token::Type::kEnd
                                        ? "expected an expression, got the end of the tag"
                                        : absl::StrCat("unexpected '", token.text, "'"));
  }
}

absl::StatusOr<ExprPtr> Parser::Postfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      PARSE_ASSIGN(next, Subscript(std::move(node)));
      node = std::move(next);
    } else if (IsOp("(")) {
      ExprPtr call = Make(Expr::Type::kCall, Peek().line);
      call->args.push_back(std::move(node));
      if (absl::Status s = CallArgs(call.get()); !s.ok()) return s;
      node = std::move(call);  // what is called is checked when it is
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::Subscript(ExprPtr node) {
  const Token token = Next();
  if (token.text == ".") {
    const Token attr = Next();
    if (attr.type == Token::Type::kInt) {
      ExprPtr e = Make(Expr::Type::kGetItem, token.line);
      ExprPtr index = Make(Expr::Type::kConst, token.line);
      index->constant = Value::Int(attr.i);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(index));
      return e;
    }
    if (attr.type != Token::Type::kName) return ParseError(token.line, "expected a name after '.'");
    ExprPtr e = Make(Expr::Type::kGetAttr, token.line);
    e->name = attr.text;
    e->args.push_back(std::move(node));
    return e;
  }
  // '[' start? (':' stop? (':' step?)?)? ']'
  std::vector<ExprPtr> parts(1);
  bool slice = false;
  while (!IsOp("]")) {
    if (IsOp(":")) {
      Next();
      slice = true;
      if (parts.size() == 3) return ParseError(token.line, "too many ':' in a slice");
      parts.emplace_back();
      continue;
    }
    if (parts.back() != nullptr) return ParseError(Peek().line, "expected ']' in a subscript");
    PARSE_ASSIGN(part, Expression());
    parts.back() = std::move(part);
  }
  Next();
  if (!slice && parts[0] == nullptr) return ParseError(token.line, "empty subscript []");
  ExprPtr e = Make(slice ? Expr::Type::kSlice : Expr::Type::kGetItem, token.line);
  e->args.push_back(std::move(node));
  parts.resize(slice ? 3 : 1);
  for (ExprPtr& part : parts) e->args.push_back(std::move(part));
  return e;
}

absl::Status Parser::CallArgs(Expr* call) {
  if (absl::Status s = ExpectOp("("); !s.ok()) return s;
  while (!IsOp(")")) {
    if (call->args.size() > 1 || !call->kwargs.empty()) {
      if (absl::Status s = ExpectOp(","); !s.ok()) return s;
      if (IsOp(")")) break;
    }
    if (Peek().type == Token::Type::kName && IsOp("=", 1)) {
      const std::string name = Next().text;
      Next();
      PARSE_ASSIGN(value, Expression());
      call->kwargs.emplace_back(name, std::move(value));
    } else {
      if (!call->kwargs.empty()) {
        return ParseError(Peek().line, "positional argument after a keyword argument");
      }
      PARSE_ASSIGN(value, Expression());
      call->args.push_back(std::move(value));
    }
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::FilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      const Token name = Next();
      if (name.type != Token::Type::kName) return ParseError(name.line, "expected a filter name");
      std::string filter_name = name.text;
      while (IsOp(".") && Peek(1).type == Token::Type::kName) {  // dotted names: jinja2 allows
        Next();
        const Token part = Next();
        absl::StrAppend(&filter_name, ".", part.text);
      }
      ExprPtr e = Make(Expr::Type::kFilter, name.line);
      e->name = filter_name;
      e->args.push_back(std::move(node));
      if (IsOp("(")) {
        if (absl::Status s = CallArgs(e.get()); !s.ok()) return s;
      }
      node = std::move(e);
    } else if (IsName("is")) {
      const int line = Next().line;
      ExprPtr e = Make(Expr::Type::kTest, line);
      if (IsName("not")) {
        Next();
        e->negated = true;
      }
      const Token name = Next();
      if (name.type != Token::Type::kName &&
          !(name.type == Token::Type::kOp && (name.text == "==" || name.text == "!="))) {
        return ParseError(line, "expected a test name after 'is'");
      }
      e->name = name.text;
      e->args.push_back(std::move(node));
      const Token& next = Peek();
      if (IsOp("(")) {
        if (absl::Status s = CallArgs(e.get()); !s.ok()) return s;
      } else if ((next.type == Token::Type::kString || next.type == Token::Type::kInt ||
                  next.type == Token::Type::kFloat || IsOp("[") || IsOp("{") ||
                  (next.type == Token::Type::kName && next.text != "else" && next.text != "or" &&
                   next.text != "and"))) {
        PARSE_ASSIGN(arg, Primary());
        PARSE_ASSIGN(post, Postfix(std::move(arg)));
        e->args.push_back(std::move(post));
      }
      node = std::move(e);
    } else if (IsOp("(")) {
      return ParseError(Peek().line, "only named functions and methods can be called");
    } else {
      return node;
    }
  }
}

absl::StatusOr<std::vector<std::string>> Parser::Targets() {
  std::vector<std::string> names;
  const bool paren = SkipOp("(");
  do {
    const Token name = Next();
    if (name.type != Token::Type::kName) return ParseError(name.line, "expected a variable name");
    names.push_back(name.text);
  } while (SkipOp(","));
  if (paren) {
    if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
  }
  return names;
}

absl::Status Parser::Params(Node* node) {
  if (absl::Status s = ExpectOp("("); !s.ok()) return s;
  while (!IsOp(")")) {
    if (!node->params.empty()) {
      if (absl::Status s = ExpectOp(","); !s.ok()) return s;
      if (IsOp(")")) break;
    }
    const Token name = Next();
    if (name.type != Token::Type::kName) return ParseError(name.line, "expected a parameter name");
    node->params.push_back(name.text);
    ExprPtr fallback;
    if (SkipOp("=")) {
      PARSE_ASSIGN(value, Expression());
      fallback = std::move(value);
    }
    node->defaults.push_back(std::move(fallback));
  }
  Next();
  return absl::OkStatus();
}

absl::Status Parser::Body(const std::vector<std::string>& ends, NodeList* out, std::string* end,
                          int depth) {
  if (depth > kMaxTemplateDepth) {
    return ParseError(segments_[std::min(seg_, segments_.size() - 1)].line,
                      "blocks nested too deeply");
  }
  for (; seg_ < segments_.size(); ++seg_) {
    const Segment& segment = segments_[seg_];
    tok_ = 0;
    depth_ = 0;
    if (segment.type == Segment::Type::kText) {
      auto node = std::make_unique<Node>();
      node->type = Node::Type::kText;
      node->line = segment.line;
      node->text = segment.text;
      out->push_back(std::move(node));
      continue;
    }
    if (segment.type == Segment::Type::kVar) {
      auto node = std::make_unique<Node>();
      node->type = Node::Type::kOutput;
      node->line = segment.line;
      PARSE_ASSIGN(expr, Expression());
      node->expr = std::move(expr);
      if (absl::Status s = ExpectEnd(); !s.ok()) return s;
      out->push_back(std::move(node));
      continue;
    }
    const Token keyword = Next();
    if (keyword.type != Token::Type::kName) return ParseError(keyword.line, "expected a tag name");
    for (const std::string& e : ends) {
      if (keyword.text == e) {
        *end = keyword.text;
        return absl::OkStatus();
      }
    }
    if (absl::Status s = Statement(keyword.text, out, depth); !s.ok()) return s;
  }
  if (!ends.empty()) {
    return ParseError(segments_.empty() ? 1 : segments_.back().line,
                      absl::StrCat("missing {% ", ends.back(), " %}"));
  }
  return absl::OkStatus();
}

absl::Status Parser::Statement(const std::string& keyword, NodeList* out, int depth) {
  auto node = std::make_unique<Node>();
  node->line = Peek().line;
  if (keyword == "if") {
    node->type = Node::Type::kIf;
    std::string end = "elif";
    while (end == "elif" || end == "if") {
      PARSE_ASSIGN(cond, Expression());
      if (absl::Status s = ExpectEnd(); !s.ok()) return s;
      ++seg_;
      NodeList body;
      if (absl::Status s = Body({"elif", "else", "endif"}, &body, &end, depth + 1); !s.ok()) {
        return s;
      }
      node->branches.emplace_back(std::move(cond), std::move(body));
    }
    if (end == "else") {
      if (absl::Status s = ExpectEnd(); !s.ok()) return s;
      ++seg_;
      NodeList body;
      if (absl::Status s = Body({"endif"}, &body, &end, depth + 1); !s.ok()) return s;
      node->branches.emplace_back(nullptr, std::move(body));
    }
  } else if (keyword == "for") {
    node->type = Node::Type::kFor;
    PARSE_ASSIGN(targets, Targets());
    node->targets = std::move(targets);
    if (!IsName("in")) return ParseError(node->line, "expected 'in' in {% for %}");
    Next();
    PARSE_ASSIGN(iterable, Expression(/*with_condexpr=*/false));
    node->expr = std::move(iterable);
    if (IsName("if")) {
      Next();
      PARSE_ASSIGN(filter, Expression());
      node->filter = std::move(filter);
    }
    if (IsName("recursive")) {  // parsed, refused when rendered
      Next();
      node->text = "{% for ... recursive %} is not supported";
    }
    if (absl::Status s = ExpectEnd(); !s.ok()) return s;
    ++seg_;
    std::string end;
    if (absl::Status s = Body({"else", "endfor"}, &node->body, &end, depth + 1); !s.ok()) return s;
    if (end == "else") {
      if (absl::Status s = ExpectEnd(); !s.ok()) return s;
      ++seg_;
      if (absl::Status s = Body({"endfor"}, &node->else_body, &end, depth + 1); !s.ok()) return s;
    }
    if (!node->text.empty()) node->type = Node::Type::kError;
  } else if (keyword == "set") {
    node->type = Node::Type::kSet;
    if (Peek().type == Token::Type::kName && IsOp(".", 1)) {
      node->targets.push_back(Next().text);
      Next();
      if (Peek().type != Token::Type::kName) return ParseError(node->line, "expected an attribute");
      node->attribute = Next().text;
    } else {
      PARSE_ASSIGN(targets, Targets());
      node->targets = std::move(targets);
    }
    if (!IsOp("=")) {  // {% set x %}body{% endset %}
      if (!node->attribute.empty() || node->targets.size() != 1) {
        return ParseError(node->line, "a {% set %} block assigns one name");
      }
      if (absl::Status s = ExpectEnd(); !s.ok()) return s;
      ++seg_;
      std::string end;
      if (absl::Status s = Body({"endset"}, &node->body, &end, depth + 1); !s.ok()) return s;
    } else {
      Next();
      PARSE_ASSIGN(value, Expression());
      node->expr = std::move(value);
    }
  } else if (keyword == "break" || keyword == "continue") {
    node->type = keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue;
  } else if (keyword == "generation") {  // HF's AssistantTracker: renders its body
    node->type = Node::Type::kBlock;
    if (absl::Status s = ExpectEnd(); !s.ok()) return s;
    ++seg_;
    std::string end;
    if (absl::Status s = Body({"endgeneration"}, &node->body, &end, depth + 1); !s.ok()) return s;
  } else if (keyword == "macro" || keyword == "call") {
    node->type = keyword == "macro" ? Node::Type::kMacro : Node::Type::kCallBlock;
    if (keyword == "macro") {
      const Token name = Next();
      if (name.type != Token::Type::kName) return ParseError(node->line, "expected a macro name");
      node->targets.push_back(name.text);
    }
    if (keyword == "macro" || IsOp("(")) {
      if (absl::Status s = Params(node.get()); !s.ok()) return s;
    }
    if (keyword == "call") {
      PARSE_ASSIGN(call, Expression());
      if (call->type != Expr::Type::kCall) return ParseError(node->line, "{% call %} needs a call");
      node->expr = std::move(call);
    }
    if (absl::Status s = ExpectEnd(); !s.ok()) return s;
    ++seg_;
    std::string end;
    if (absl::Status s = Body({absl::StrCat("end", keyword)}, &node->body, &end, depth + 1);
        !s.ok()) {
      return s;
    }
    node->uses_varargs = Mentions(node->body, "varargs");
    node->uses_kwargs = Mentions(node->body, "kwargs");
  } else if (keyword == "filter") {  // {% filter name(args) %}body{% endfilter %}
    node->type = Node::Type::kFilterBlock;
    const Token name = Next();
    if (name.type != Token::Type::kName) return ParseError(node->line, "expected a filter name");
    ExprPtr e = Make(Expr::Type::kFilter, node->line);
    e->name = name.text;
    e->args.push_back(nullptr);  // the body's text
    if (IsOp("(")) {
      if (absl::Status s = CallArgs(e.get()); !s.ok()) return s;
    }
    node->expr = std::move(e);
    if (absl::Status s = ExpectEnd(); !s.ok()) return s;
    ++seg_;
    std::string end;
    if (absl::Status s = Body({"endfilter"}, &node->body, &end, depth + 1); !s.ok()) return s;
  } else if (keyword == "with" || keyword == "autoescape" || keyword == "block") {
    // Block constructs outside the subset: parsed past, refused when a render reaches them.
    node->type = Node::Type::kError;
    node->text = absl::StrCat("{% ", keyword, " %} is not supported");
    const std::string end_tag = absl::StrCat("end", keyword);
    while (Peek().type != Token::Type::kEnd) Next();
    ++seg_;
    std::string end;
    if (absl::Status s = Body({end_tag}, &node->body, &end, depth + 1); !s.ok()) return s;
  } else if (keyword.rfind("end", 0) == 0 || keyword == "else" || keyword == "elif") {
    return ParseError(node->line, absl::StrCat("unexpected {% ", keyword, " %}"));
  } else {
    node->type = Node::Type::kError;
    node->text = absl::StrCat("{% ", keyword, " %} is not supported");
    while (Peek().type != Token::Type::kEnd) Next();
  }
  if (absl::Status s = ExpectEnd(); !s.ok()) return s;
  out->push_back(std::move(node));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodeList> ParseTemplate(absl::string_view source) {
  std::string text;
  text.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {  // \r\n and \r -> \n, as jinja2 reads them
    if (source[k] == '\r') {
      text += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      text += source[k];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();  // keep_trailing_newline=False
  absl::StatusOr<std::vector<Segment>> segments = LexTemplate(std::move(text));
  if (!segments.ok()) return segments.status();
  return Parser(*std::move(segments)).Run();
}

}  // namespace abcd::chat
