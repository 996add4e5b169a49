// Why a request body is not valid JSON, naming the field where that helps: a number beyond the
// range of a double (`"max_tokens": 1e400`) is "max_tokens must be a number within the range
// of a double, got 1e400", not a bare "not valid JSON". Only called after a parse failed.
//
// Thread-safety: a pure function.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace abcd::http {

// INVALID_ARGUMENT: for an out-of-range number, its field (the dotted path of object keys,
// "[i]" for array elements, from 0; "request body" at the top level); otherwise "request body is
// not valid JSON" with the byte offset of the error.
absl::Status InvalidJsonError(absl::string_view body);

}  // namespace abcd::http
