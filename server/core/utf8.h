// UTF-8 text that crosses a trust boundary: validation (client strings, label values) and
// the cut of a client's value echoed in an error message. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace abcd {

// Well-formed UTF-8: no overlong forms, surrogates or code points beyond U+10FFFF.
bool IsValidUtf8(absl::string_view text);

// Error messages echo at most this many bytes of a client's value (then "...").
inline constexpr size_t kMaxEchoedBytes = 256;
// Longer values are cut at a character boundary and end "... (N bytes)".
std::string TruncateForMessage(absl::string_view value);

}  // namespace abcd
