// The syntax tree of a chat template (jinja_template.h) and the parser that builds it.
//
// ParseTemplate splits the source into text, {{ }} and {% %} (comments dropped) with Jinja's
// whitespace rules as Hugging Face configures them (trim_blocks, lstrip_blocks, `-`/`+`
// markers, one trailing newline dropped, \r\n read as \n), then parses the subset listed in
// jinja_template.h. A syntax error is INVALID_ARGUMENT "chat template line N: ..."; a
// well-formed construct outside the subset (include, a filter block, an unknown filter, test,
// function or method) parses into a node or expression that fails only when a render reaches
// it, naming the construct. Nesting deeper than kMaxTemplateDepth (blocks or expressions) is
// refused.
//
// Thread-safety: the tree is immutable once parsed.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/jinja_value.h"

namespace abcd::chat {

inline constexpr int kMaxTemplateDepth = 64;

struct Expr {
  enum class Type {
    kConst,    // constant
    kName,     // name
    kList,     // [args...]; name "tuple": (args...)
    kDict,     // {args[0]: args[1], ...}
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null where omitted)
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs)
    kTest,     // args[0] is [not] name(args[1:])
    kNot,      // not args[0]
    kNeg,      // -args[0]
    kPos,      // +args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2]...: == != < > <= >= in notin
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Type type = Type::kConst;
  int line = 0;
  Value constant;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Type {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,  // expr null: a block set, {% set x %}body{% endset %}
    kBreak,
    kContinue,
    kBlock,        // {% generation %}: renders its body
    kMacro,        // {% macro targets[0](params) %}body{% endmacro %}
    kCallBlock,    // {% call(params) expr %}body{% endcall %}: expr called with caller = body
    kFilterBlock,  // {% filter f(args) %}body{% endfilter %}: expr is f, args[0] null
    kError,        // a construct outside the subset: rendering it fails with `text`
  };
  Type type = Type::kText;
  int line = 0;
  std::string text;                  // kText
  std::unique_ptr<Expr> expr;        // kOutput; kSet value; kFor iterable
  std::vector<std::string> targets;  // kFor / kSet names (several: unpacking)
  std::string attribute;             // kSet: `set targets[0].attribute = ...`
  std::unique_ptr<Expr> filter;      // kFor: `for x in y if filter`
  NodeList body;                     // kFor, kBlock, kMacro, kCallBlock, block kSet, kError
  std::vector<std::string> params;   // kMacro, kCallBlock (the caller's)
  std::vector<std::unique_ptr<Expr>> defaults;  // per param; null: none
  bool uses_varargs = false;  // kMacro/kCallBlock: the body reads varargs / kwargs
  bool uses_kwargs = false;
  NodeList else_body;                                                // kFor: `{% else %}`
  std::vector<std::pair<std::unique_ptr<Expr>, NodeList>> branches;  // kIf; null: else
};

absl::StatusOr<NodeList> ParseTemplate(absl::string_view source);

}  // namespace abcd::chat
