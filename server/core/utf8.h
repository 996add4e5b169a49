// UTF-8 validation for text that crosses a trust boundary (client strings, label values).
// Thread-safe: a pure function.
#pragma once

#include "absl/strings/string_view.h"

namespace abcd {

// Well-formed UTF-8: no overlong forms, surrogates or code points beyond U+10FFFF.
bool IsValidUtf8(absl::string_view text);

}  // namespace abcd
