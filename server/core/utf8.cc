#include "server/core/utf8.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace abcd {

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    size_t length;
    uint32_t code;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return false;
      code = (code << 6) | (byte(i + k) & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[length]) return false;      // overlong
    if (code > 0x10FFFF) return false;                   // beyond Unicode
    if (code >= 0xD800 && code <= 0xDFFF) return false;  // surrogate
    i += length;
  }
  return true;
}

std::string TruncateForMessage(absl::string_view value) {
  if (value.size() <= kMaxEchoedBytes) return std::string(value);
  size_t cut = kMaxEchoedBytes;
  // Do not split a UTF-8 character.
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xc0) == 0x80) --cut;
  return absl::StrCat(value.substr(0, cut), "... (", value.size(), " bytes)");
}

}  // namespace abcd
