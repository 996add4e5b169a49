// A JSON Schema `pattern` (an ECMAScript regular expression, a subset) compiled to a DFA over
// the characters constrained strings are generated from: printable ASCII (0x20-0x7e) except '"'
// and '\\' (no escapes in the JSON text, so the string's characters are its bytes). The DFA's
// language is the pattern's matches within that alphabet (a subset of what the pattern allows,
// never more). Unanchored patterns are searched, as JSON Schema does: no '^' means any prefix,
// no '$' any suffix.
//
// Supported syntax: literals, '.', classes ([a-z0-9_], [^...]), \d \D \w \W \s \S and escaped
// punctuation, groups ( ) and (?: ), alternation |, quantifiers * + ? {n} {n,} {n,m} (a lazy
// '?' after them is the same language), '^' first, then negative lookaheads (?!X) (the string
// does not start with a match of X), and '$' last. Anything else (other lookaround,
// backreferences, \b, named groups, anchors elsewhere, unicode classes) is InvalidArgument.
//
// Thread-safety: functions are pure; a JsonDfa is an immutable value once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

struct JsonDfa {
  static constexpr int kChars = 128;
  // next[state * kChars + c]: the state after character c, or -1 (c outside the alphabet, or a
  // state from which no accepting state can be reached). State 0 is the start. Every state
  // left can reach an accepting one.
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  int states() const { return static_cast<int>(accepting.size()); }
  int Next(int state, uint8_t c) const { return c < kChars ? next[state * kChars + c] : -1; }
};

// Whether generated constrained strings may contain `c`.
inline bool DfaAlphabet(uint8_t c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

// `pattern` as a DFA; InvalidArgument "<path>: ..." for unsupported syntax, a pattern too
// complex (more than a few thousand states), or one no string of the alphabet matches.
absl::StatusOr<JsonDfa> CompilePattern(absl::string_view pattern, absl::string_view path);

// The strings both accept (product construction, dead states removed); InvalidArgument naming
// `path` when none.
absl::StatusOr<JsonDfa> IntersectDfas(const JsonDfa& a, const JsonDfa& b, absl::string_view path);

// The anchored pattern generated for a JSON Schema `format` (date-time, date, time, uuid,
// email, ipv4), or "" for a format without one. Each is a subset of what the format allows
// (e.g. days 01-28 in February, lowercase uuids, no leap seconds).
std::string FormatPattern(absl::string_view format);

}  // namespace abcd
