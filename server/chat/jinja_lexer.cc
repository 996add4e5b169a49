#include "server/chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/chat/jinja_ast.h"

namespace abcd::chat {

absl::Status TemplateError(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", message));
}

namespace {

absl::Status Error(int line, absl::string_view message) { return TemplateError(line, message); }

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
      // The next "{{", "{%" or "{#" (one scan: finding each separately from every position
      // would be quadratic in a template without one of them).
      size_t start = src_.find('{', pos);
      while (start != std::string::npos && start + 1 < src_.size() && src_[start + 1] != '{' &&
             src_[start + 1] != '%' && src_[start + 1] != '#') {
        start = src_.find('{', start + 1);
      }
      if (start != std::string::npos && start + 1 >= src_.size()) start = std::string::npos;
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

}  // namespace

absl::StatusOr<std::vector<Segment>> LexTemplate(std::string source) {
  return Lexer(std::move(source)).Run();
}

}  // namespace abcd::chat
