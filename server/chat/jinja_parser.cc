// Lexer and recursive-descent parser for the chat-template subset (jinja_ast.h). The grammar
// and precedence follow jinja2's parser.py: condexpr < or < and < not < compare < +,- < ~ <
// *,/,//,% < ** < unary -,+ < postfix (., [], ()) and filters/tests.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja_ast.h"
#include "server/chat/jinja_builtins.h"

namespace abcd::chat {
namespace {

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;  // name, operator, or a string literal's decoded value
  int line = 0;
  int64_t i = 0;
  double f = 0.0;
};

struct Segment {
  enum class Type { kText, kVar, kBlock };
  Type type = Type::kText;
  std::string text;
  std::vector<Token> tokens;  // kVar / kBlock, ending with a kEnd token
  int line = 0;
};

absl::Status Error(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", message));
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's unicode-escape decoding of a literal's body (what jinja2 applies to it).
void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

absl::StatusOr<std::string> Unescape(absl::string_view body, int line) {
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    if (body[k] != '\\' || k + 1 == body.size()) {
      out += body[k];
      continue;
    }
    const char c = body[++k];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      case '\n':
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t width = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (k + width >= body.size()) {
          return Error(line, "truncated \\x/\\u escape in a string literal");
        }
        const std::string hex(body.substr(k + 1, width));
        for (const char h : hex) {
          if (!std::isxdigit(static_cast<unsigned char>(h))) {
            return Error(line, "malformed \\x/\\u escape in a string literal");
          }
        }
        const uint32_t cp = static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
        if (cp > 0x10FFFF) return Error(line, "escape outside Unicode in a string literal");
        AppendUtf8(cp, &out);
        k += width;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t n = 0;
          while (n < 3 && k < body.size() && body[k] >= '0' && body[k] <= '7') {
            cp = cp * 8 + static_cast<uint32_t>(body[k] - '0');
            ++k;
            ++n;
          }
          --k;
          AppendUtf8(cp, &out);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') newlines_.push_back(k);
    }
  }

  absl::StatusOr<std::vector<Segment>> Run() {
    std::vector<Segment> segments;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = std::string::npos;
      for (const char* open : {"{{", "{%", "{#"}) {
        start = std::min(start, src_.find(open, pos));
      }
      if (start == std::string::npos) {
        AddText(&segments, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        size_t keep = text.size();
        while (keep > 0 && IsSpace(text[keep - 1])) --keep;
        text.resize(keep);
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && IsSpace(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      AddText(&segments, text, pos);
      size_t cursor = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", cursor);
        if (close == std::string::npos) return Error(LineAt(start), "unclosed comment {# ... #}");
        const char before = close > cursor ? src_[close - 1] : '\0';
        pos = close + 2;
        pos = AfterTag(pos, before);
      } else {
        Segment segment;
        segment.type = kind == '{' ? Segment::Type::kVar : Segment::Type::kBlock;
        segment.line = LineAt(start);
        absl::StatusOr<size_t> end = Tokens(cursor, kind == '{' ? '}' : '%', &segment.tokens);
        if (!end.ok()) return end.status();
        pos = *end;
        segments.push_back(std::move(segment));
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    return segments;
  }

 private:
  int LineAt(size_t offset) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), offset) -
                                newlines_.begin());
  }
  void AddText(std::vector<Segment>* segments, std::string text, size_t offset) {
    if (text.empty()) return;
    Segment segment;
    segment.text = std::move(text);
    segment.line = LineAt(offset);
    segments->push_back(std::move(segment));
  }
  // Past a tag's closing marker: `-` before it strips all following whitespace, `+` keeps it,
  // and a plain block or comment end drops one newline (trim_blocks).
  size_t AfterTag(size_t pos, char before, bool block = true) const {
    if (before == '-') {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
    } else if (before != '+' && block && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  // Tokens of a {{ }} (close '}') or {% %} (close '%') tag from `pos`; returns the offset after
  // the tag (and its whitespace control).
  absl::StatusOr<size_t> Tokens(size_t pos, char close, std::vector<Token>* tokens) {
    int depth = 0;
    while (true) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      if (pos >= src_.size()) return Error(LineAt(pos), "unclosed tag at the end of the template");
      const int line = LineAt(pos);
      if (depth == 0) {
        for (const char marker : {'-', '+', '\0'}) {
          const size_t at = pos + (marker == '\0' ? 0 : 1);
          if (marker != '\0' && src_[pos] != marker) continue;
          if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
            if (marker == '+' && close == '}') break;
            tokens->push_back(Token{Token::Type::kEnd, "", line});
            return AfterTag(at + 2, marker, close == '%');
          }
        }
      }
      Token token;
      token.line = line;
      const char c = src_[pos];
      if (c == '\'' || c == '"') {
        size_t k = pos + 1;
        while (k < src_.size() && src_[k] != c) k += src_[k] == '\\' ? 2 : 1;
        if (k >= src_.size()) return Error(line, "unterminated string literal");
        absl::StatusOr<std::string> value = Unescape(src_.substr(pos + 1, k - pos - 1), line);
        if (!value.ok()) return value.status();
        token.type = Token::Type::kString;
        token.text = *std::move(value);
        pos = k + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t k = pos;
        std::string digits;
        bool is_float = false;
        while (k < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_' ||
                (src_[k] == '.' && !is_float && k + 1 < src_.size() &&
                 std::isdigit(static_cast<unsigned char>(src_[k + 1]))))) {
          is_float = is_float || src_[k] == '.';
          if (src_[k] != '_') digits += src_[k];
          ++k;
        }
        if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
          size_t e = k + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            is_float = true;
            digits += src_.substr(k, e - k);
            k = e;
            while (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
              digits += src_[k++];
            }
          }
        }
        token.type = is_float ? Token::Type::kFloat : Token::Type::kInt;
        if (is_float) {
          token.f = std::strtod(digits.c_str(), nullptr);
        } else {
          errno = 0;
          token.i = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE) return Error(line, "integer literal out of range");
        }
        pos = k;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t k = pos;
        while (k < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[k])) || src_[k] == '_')) {
          ++k;
        }
        token.type = Token::Type::kName;
        token.text = src_.substr(pos, k - pos);
        pos = k;
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                           "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        token.type = Token::Type::kOp;
        for (const char* op : kOps) {
          if (src_.compare(pos, std::char_traits<char>::length(op), op) == 0) {
            token.text = op;
            break;
          }
        }
        if (token.text.empty()) {
          return Error(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        if (token.text == "(" || token.text == "[" || token.text == "{") ++depth;
        if (token.text == ")" || token.text == "]" || token.text == "}") --depth;
        if (depth > kMaxTemplateDepth) return Error(line, "brackets nested too deeply");
        pos += token.text.size();
      }
      tokens->push_back(std::move(token));
    }
  }

  std::string src_;
  std::vector<size_t> newlines_;  // offsets of '\n', for line numbers
};

using ExprPtr = std::unique_ptr<Expr>;

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
  absl::Status Body(const std::vector<absl::string_view>& ends, NodeList* out, std::string* end,
                    int depth);
  absl::Status Statement(const std::string& keyword, NodeList* out, int depth);
  absl::Status ExpectEnd() {
    if (Peek().type != Token::Type::kEnd) {
      return Error(Peek().line, absl::StrCat("unexpected '", Peek().text, "' in the tag"));
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
    return Error(Peek().line, absl::StrCat("expected '", op, "', got ",
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
    if (++depth_ > kMaxTemplateDepth) return Error(line, "expression nested too deeply");
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
      return Error(token.line, token.type == Token::Type::kEnd
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
      const Expr& callee = *call->args[0];
      if (callee.type == Expr::Type::kName && !IsGlobalFunction(callee.name)) {
        return Error(call->line, absl::StrCat("function '", callee.name, "' is not supported"));
      }
      if (callee.type == Expr::Type::kGetAttr && !IsMethod(callee.name)) {
        return Error(call->line, absl::StrCat("method '.", callee.name, "()' is not supported"));
      }
      if (callee.type != Expr::Type::kName && callee.type != Expr::Type::kGetAttr) {
        return Error(call->line, "only named functions and methods can be called");
      }
      node = std::move(call);
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
    if (attr.type != Token::Type::kName) return Error(token.line, "expected a name after '.'");
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
      if (parts.size() == 3) return Error(token.line, "too many ':' in a slice");
      parts.emplace_back();
      continue;
    }
    if (parts.back() != nullptr) return Error(Peek().line, "expected ']' in a subscript");
    PARSE_ASSIGN(part, Expression());
    parts.back() = std::move(part);
  }
  Next();
  if (!slice && parts[0] == nullptr) return Error(token.line, "empty subscript []");
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
        return Error(Peek().line, "positional argument after a keyword argument");
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
      if (name.type != Token::Type::kName) return Error(name.line, "expected a filter name");
      if (!IsFilter(name.text)) {
        return Error(name.line, absl::StrCat("filter '", name.text, "' is not supported"));
      }
      ExprPtr e = Make(Expr::Type::kFilter, name.line);
      e->name = name.text;
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
        return Error(line, "expected a test name after 'is'");
      }
      if (!IsTest(name.text)) {
        return Error(line, absl::StrCat("test 'is ", name.text, "' is not supported"));
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
      return Error(Peek().line, "only named functions and methods can be called");
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
    if (name.type != Token::Type::kName) return Error(name.line, "expected a variable name");
    names.push_back(name.text);
  } while (SkipOp(","));
  if (paren) {
    if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
  }
  return names;
}

absl::Status Parser::Body(const std::vector<absl::string_view>& ends, NodeList* out,
                          std::string* end, int depth) {
  if (depth > kMaxTemplateDepth) {
    return Error(segments_[std::min(seg_, segments_.size() - 1)].line, "blocks nested too deeply");
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
    if (keyword.type != Token::Type::kName) return Error(keyword.line, "expected a tag name");
    for (const absl::string_view e : ends) {
      if (keyword.text == e) {
        *end = keyword.text;
        return absl::OkStatus();
      }
    }
    if (absl::Status s = Statement(keyword.text, out, depth); !s.ok()) return s;
  }
  if (!ends.empty()) {
    return Error(segments_.empty() ? 1 : segments_.back().line,
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
    if (!IsName("in")) return Error(node->line, "expected 'in' in {% for %}");
    Next();
    PARSE_ASSIGN(iterable, Expression(/*with_condexpr=*/false));
    node->expr = std::move(iterable);
    if (IsName("if")) {
      Next();
      PARSE_ASSIGN(filter, Expression());
      node->filter = std::move(filter);
    }
    if (IsName("recursive")) return Error(node->line, "{% for ... recursive %} is not supported");
    if (absl::Status s = ExpectEnd(); !s.ok()) return s;
    ++seg_;
    std::string end;
    if (absl::Status s = Body({"else", "endfor"}, &node->body, &end, depth + 1); !s.ok()) return s;
    if (end == "else") {
      if (absl::Status s = ExpectEnd(); !s.ok()) return s;
      ++seg_;
      if (absl::Status s = Body({"endfor"}, &node->else_body, &end, depth + 1); !s.ok()) return s;
    }
  } else if (keyword == "set") {
    node->type = Node::Type::kSet;
    if (Peek().type == Token::Type::kName && IsOp(".", 1)) {
      node->targets.push_back(Next().text);
      Next();
      if (Peek().type != Token::Type::kName) return Error(node->line, "expected an attribute");
      node->attribute = Next().text;
    } else {
      PARSE_ASSIGN(targets, Targets());
      node->targets = std::move(targets);
    }
    if (!IsOp("=")) return Error(node->line, "{% set %} blocks ({% endset %}) are not supported");
    Next();
    PARSE_ASSIGN(value, Expression());
    node->expr = std::move(value);
  } else if (keyword == "break" || keyword == "continue") {
    node->type = keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue;
  } else if (keyword == "generation") {  // HF's AssistantTracker: renders its body
    node->type = Node::Type::kBlock;
    if (absl::Status s = ExpectEnd(); !s.ok()) return s;
    ++seg_;
    std::string end;
    if (absl::Status s = Body({"endgeneration"}, &node->body, &end, depth + 1); !s.ok()) return s;
  } else if (keyword.rfind("end", 0) == 0 || keyword == "else" || keyword == "elif") {
    return Error(node->line, absl::StrCat("unexpected {% ", keyword, " %}"));
  } else {
    return Error(node->line, absl::StrCat("{% ", keyword, " %} is not supported"));
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
  absl::StatusOr<std::vector<Segment>> segments = Lexer(std::move(text)).Run();
  if (!segments.ok()) return segments.status();
  return Parser(*std::move(segments)).Run();
}

}  // namespace abcd::chat
