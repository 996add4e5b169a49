// The lexer of the chat-template subset (jinja_ast.h): splits a template into text, {{ }} and
// {% %} segments with Jinja's whitespace rules as Hugging Face configures them (trim_blocks,
// lstrip_blocks, `-`/`+` markers; comments dropped), and a tag's inside into tokens (string
// literals decoded with Python's escapes). Errors: INVALID_ARGUMENT "chat template line N: ...".
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd::chat {

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

// `source` with newlines already normalised to \n.
absl::StatusOr<std::vector<Segment>> LexTemplate(std::string source);

absl::Status TemplateError(int line, absl::string_view message);

}  // namespace abcd::chat
