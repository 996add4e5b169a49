// Constrained JSON output, the character level: a response format (any JSON object, or a JSON
// Schema subset) compiled to a JsonGrammar, and a JsonMatcher, the pushdown automaton that
// takes the output one byte at a time and says whether each byte may come next.
//
// Supported schema keywords: type (a name, or an array of names), anyOf and oneOf (alternatives
// that start with different characters: of different JSON types, or enum/const values, which
// are merged, or objects told apart by a required property's enum/const values, generated
// with that property first (json_schema_tagged.h: pydantic's discriminated unions, next to
// which `discriminator` is taken as an annotation); so a value matches exactly one and oneOf is
// exact; in anyOf, any value ({}) makes the union any value, and a plain string or number
// covers the other strings or numbers),
// properties, required, additionalProperties (false, true or a schema: with properties only those
// are generated, in their order; without, any keys with values of the schema), propertyNames (a
// string schema: the keys of an object without properties), items, minItems, maxItems, enum, const,
// $ref to "#/$defs/.." or "#/definitions/.." (recursion allowed), minLength/maxLength (code
// points), format (date-time, date, time, uuid, email, ipv4) and pattern (json_regex.h: its subset
// of ECMAScript syntax), which generate printable ASCII without escapes, each a subset of what the
// format allows, minimum, maximum, exclusiveMinimum, exclusiveMaximum (integers: exact; numbers: a
// fraction only after an integer part whose every fraction is in range, no exponent; bounds that
// admit no integer are refused), and the annotations title, description, $schema, $id, $comment,
// default, examples. Without a type, the keywords pick one (properties: object, minLength: string,
// minimum: number, ...). Any other keyword is refused: InvalidArgument "<path>.<keyword> is not
// supported"; so are anyOf/oneOf next to other keywords, alternatives that can start with the
// same character, and enum/const next to string or number keywords. `true` (or {}) is any
// JSON value.
// Refused at compile time too (InvalidArgument naming the path): a schema document nested
// deeper than kMaxSchemaDocumentDepth levels (checked before anything else, so compiling never
// recurses deeper than that), a part of the schema no finite value can satisfy (a recursive
// $ref without a base case: every value would need another one inside it through required
// properties or minItems), and a schema whose shortest value nests deeper than kMaxJsonDepth.
//
// Generated text: no whitespace except at most kMaxWhitespace space or newline characters
// where JSON allows whitespace (before the value and around structural characters), nothing
// after the value; numbers have at most 15 integer, 15 fraction and 2 exponent digits; strings
// are valid UTF-8 without raw control characters, escapes included (\uXXXX not a surrogate);
// containers nest at most kMaxJsonDepth deep. Every text the matcher accepts to its end
// (accepting()) parses as JSON and validates against the schema.
//
// Files: json_schema.cc compiles schemas; json_grammar.cc is the matcher.
//
// Thread-safety: a JsonGrammar is immutable after compilation (share it); a JsonMatcher is a
// value, thread-compatible.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/sampling/json_regex.h"
#include "nlohmann/json.hpp"

namespace abcd {

inline constexpr int kMaxWhitespace = 1;
inline constexpr int kMaxJsonDepth = 32;  // frames on the matcher's stack, the root included
inline constexpr int kMaxSchemaProperties = 64;
inline constexpr int kMaxSchemaNodes = 4096;
inline constexpr int kMaxSchemaDocumentDepth = 256;  // nested arrays/objects of the schema text
inline constexpr int kUnboundedLength = 1 << 30;

struct JsonNode {
  enum class Kind : uint8_t { kObject, kFreeObject, kArray, kString, kNumber, kLiterals, kUnion };
  Kind kind = Kind::kUnion;
  bool integer = false;  // kNumber: no fraction or exponent
  // kObject: the properties in generation order; keys[i] is the name as JSON text ("\"id\"").
  std::vector<std::string> keys;
  std::vector<int> values;         // kObject: each property's node
  std::vector<int> next_required;  // kObject: the first required index >= i (or keys.size())
  // kObject of a tagged union (json_schema_tagged.h): by literal index of values[0] (the tag's
  // enum/const values, sorted), the object node the value continues as once the tag is written.
  std::vector<int> tag_targets;
  int value = -1;  // kFreeObject: the values' node; kArray: the items' node
  int min_items = 0;
  int max_items = 1 << 30;
  std::vector<std::string> literals;  // kLiterals: JSON texts, sorted, distinct
  std::vector<int> alternatives;      // kUnion: nodes whose first characters do not overlap
  // kString: length bounds in characters (code points), and an automaton its characters must
  // follow (an index into the grammar's DFAs, -1: none). A string with a DFA has only the DFA's
  // characters (printable ASCII, no escapes). live[count * states + state]: whether a string in
  // `state` after `count` characters can still end within the bounds (empty: always; a count
  // past the table: always).
  int min_length = 0;
  int max_length = kUnboundedLength;
  int dfa = -1;
  std::vector<uint8_t> live;
  // kNumber with bounds (minimum, maximum, exclusive ones): by sign (0 '+', 1 '-'), the
  // magnitudes of the integer part a number may end with, and those after which a fraction may
  // follow (every fraction then stays within the bounds). No exponent.
  bool bounded = false;
  int64_t end_lo[2] = {0, 0};
  int64_t end_hi[2] = {-1, -1};
  int64_t frac_lo[2] = {0, 0};
  int64_t frac_hi[2] = {-1, -1};
  // Matcher frames the shortest complete value of this node needs, its own included (a union:
  // its shallowest alternative). The matcher starts a value, or offers an optional property,
  // only where that many frames are left, so every text it accepts can be completed.
  int min_depth = 1;
};

class JsonGrammar {
 public:
  // Any JSON object ({"type": "json_object"}).
  static std::shared_ptr<const JsonGrammar> AnyObject();
  // A JSON Schema (the subset above; ordered_json keeps the properties' order, which is the
  // order they are generated in). `path` names the schema in error messages, e.g.
  // "response_format.json_schema.schema".
  static absl::StatusOr<std::shared_ptr<const JsonGrammar>> FromSchema(
      const nlohmann::ordered_json& schema, absl::string_view path);

  const JsonNode& node(int i) const { return nodes_[i]; }
  const JsonDfa& dfa(int i) const { return dfas_[i]; }
  int root() const { return root_; }
  // The concrete node (not a union) a value of `node` starting with `byte` is, or -1.
  int Resolve(int node, uint8_t byte) const;

 private:
  friend class SchemaCompiler;
  std::vector<JsonNode> nodes_;
  std::vector<JsonDfa> dfas_;
  int root_ = -1;
};

// The automaton's state: a stack of frames (the root, then one per open value). Copy it to
// try a byte: a rejected byte leaves the matcher in an unspecified state.
class JsonMatcher {
 public:
  explicit JsonMatcher(const JsonGrammar* grammar = nullptr);

  // Takes one byte; false when the grammar does not allow it here.
  bool Advance(uint8_t byte);
  bool Advance(absl::string_view bytes);
  // The text so far is a complete value (the end may come here).
  bool accepting() const;
  // The value is complete and nothing may follow it.
  bool complete() const;
  // Inside a string, where Advance(byte) of a PlainStringByte takes it and leaves the state as it
  // is: the trie walk then shares the state instead of copying it.
  bool InStringBody() const;
  static bool PlainStringByte(uint8_t byte) {
    return byte >= 0x20 && byte < 0x80 && byte != '"' && byte != '\\';
  }
  int depth() const { return size_; }
  // The state as bytes (equal states have equal keys), for caching per-state results.
  std::string Key() const;
  // Copies `other`'s stack only (cheaper than assignment for shallow states).
  void CopyFrom(const JsonMatcher& other) {
    grammar_ = other.grammar_;
    size_ = other.size_;
    std::memcpy(stack_, other.stack_, sizeof(Frame) * static_cast<size_t>(size_));
  }

  struct Frame {
    int32_t node;   // -1: the root
    uint8_t phase;  // what comes next (per kind; see json_grammar.cc)
    uint8_t ws;     // whitespace characters taken at this position
    uint16_t pos;   // literal or key byte; digits of a number part; string escape progress
    uint32_t a;     // literals: range begin; object: next property; array: items; string: UTF-8
    uint32_t b;     // literals: range end; string: characters; bounded number: 1 if negative
    uint64_t mask;  // object: candidate keys; string: DFA state; bounded number: magnitude
  };

 private:
  enum class Step { kReject, kTaken, kTakenPop, kPush, kPopRetry };
  Step StepFrame(Frame& f, uint8_t byte, int* child);
  Step StepRoot(Frame& f, uint8_t byte, int* child);
  Step StepObject(Frame& f, const JsonNode& n, uint8_t byte, int* child);
  Step StepArray(Frame& f, const JsonNode& n, uint8_t byte, int* child);
  Step StepString(Frame& f, const JsonNode& n, uint8_t byte);
  // A constrained string's next character (length bounds, DFA); kTaken or kReject.
  Step StepConstrainedChar(Frame& f, const JsonNode& n, uint8_t byte);
  Step StepNumber(Frame& f, const JsonNode& n, uint8_t byte);
  Step StepBoundedNumber(Frame& f, const JsonNode& n, uint8_t byte);
  Step StepLiterals(Frame& f, const JsonNode& n, uint8_t byte);
  // Whitespace where JSON allows it (bounded by kMaxWhitespace).
  static bool TakeWhitespace(Frame& f, uint8_t byte);
  bool MayEnd(const Frame& f) const;  // a number or literal that is complete here
  // Before the top frame pops: when it was a tagged union's tag (json_schema_tagged.h), the
  // object below continues as the alternative the tag names.
  void Retag();

  const JsonGrammar* grammar_;
  int size_ = 0;
  Frame stack_[kMaxJsonDepth];
};

}  // namespace abcd
