// The schema compiler's scalar keywords (json_schema.cc): strings' minLength, maxLength, format
// and pattern, and numbers' minimum, maximum, exclusiveMinimum and exclusiveMaximum, as the
// fields of a JsonNode (json_grammar.h) that the matcher enforces.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sampling/json_grammar.h"
#include "nlohmann/json.hpp"

namespace abcd {

// Whether `schema` has a string keyword (minLength, maxLength, pattern, format), or a number
// keyword (minimum, maximum, exclusive ones).
bool HasStringKeywords(const nlohmann::ordered_json& schema);
bool HasNumberKeywords(const nlohmann::ordered_json& schema);

// A kString node for `schema`'s string keywords; a DFA it needs is appended to `dfas`.
// InvalidArgument naming `path` and the keyword for bad or unsupported values.
absl::StatusOr<JsonNode> CompileStringNode(const nlohmann::ordered_json& schema,
                                           const std::string& path, std::vector<JsonDfa>* dfas);

// Sets `number`'s bounds from `schema`'s number keywords (none: unchanged). InvalidArgument
// naming `path` when a bound is not a number, or no integer part of at most 15 digits fits.
absl::Status BoundNumber(const nlohmann::ordered_json& schema, const std::string& path,
                         JsonNode* number);

}  // namespace abcd
