// One nesting limit for every JSON text abcd parses: request bodies (HTTP, and the JSON carried
// in gRPC fields), config.json, tokenizer_config.json, generation_config.json, checkpoint and
// safetensors headers, the server's config file.
//
// nlohmann::json parses iteratively, but copying, comparing, dumping and walking a value (the
// schema compiler, the chat template's values) recurse once per level, so a 100 KB request of
// 50,000 nested `[` would overflow the stack. CheckJsonNesting scans the text once, without
// building anything, and refuses it before any parser sees it. Real requests need far less:
// an OpenAI tool's `parameters` schema nested 64 objects deep is about 130 JSON levels.
//
// Thread-safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace abcd {

// The deepest nesting of arrays and objects accepted anywhere (the top-level value is level 1).
inline constexpr int kMaxJsonNesting = 256;

// OK when no array or object in `text` is nested deeper than `max_depth` levels. Otherwise
// INVALID_ARGUMENT naming where: "<field path> nests JSON deeper than 256 levels", the path
// built from the object keys and array indices leading to the level over the limit, after
// `what` and a colon when `what` is not empty. Examples: what "" gives
// "tools[0].function.parameters[0]...", or "request body[0][0]..." for a top-level array; what
// "config.json" gives "config.json: layers[0][0]...". Only brackets outside strings count, so
// text that is not valid JSON is left to the parser to refuse. O(len(text)) time, O(max_depth)
// memory.
absl::Status CheckJsonNesting(absl::string_view text, absl::string_view what,
                              int max_depth = kMaxJsonNesting);

}  // namespace abcd
