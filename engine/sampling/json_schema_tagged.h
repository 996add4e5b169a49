// Tagged unions for the schema compiler (json_schema.cc): anyOf/oneOf alternatives that are
// objects told apart by one property's enum/const value (pydantic's discriminated unions,
// `{"pet_type": {"const": "cat"}, ...}`; tool_choice "required" over several tools,
// `{"name": {"const": "get_weather"}, "arguments": ...}`).
//
// The matcher picks a union's alternative by its first byte, so two object alternatives (both
// start with '{') could not be told apart. MergeTaggedUnions finds, in every union with two or
// more object alternatives, a property K that each of them requires and constrains to
// enum/const values, no value shared by two of them, and replaces those alternatives with one
// kObject node T that generates `{"K": <tag>` first (K moves to the front of each alternative's
// generation order), then continues as the alternative whose values hold the tag:
// T.tag_targets maps each literal of T's value node (sorted) to that alternative's copy, and
// the matcher switches the object frame's node when the tag's literal ends. A union without
// such a property is left as it is (CheckUnionOverlaps then refuses it).
//
// Thread-safety: operates on a grammar under construction.
#pragma once

#include <vector>

#include "engine/sampling/json_grammar.h"

namespace abcd {

// Rewrites the unions of `nodes` (after $refs are compiled and alias cycles checked, before
// the overlap check and min depths). Appends nodes; never removes or renumbers one.
void MergeTaggedUnions(std::vector<JsonNode>* nodes);

}  // namespace abcd
