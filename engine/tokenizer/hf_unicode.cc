#include "engine/tokenizer/hf_unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

#include "absl/status/status.h"

namespace abcd::hf {
namespace {

// Length of the valid UTF-8 sequence at text[pos], or 0 where it is invalid; *bad_len is then
// the length of the maximal invalid subpart (at least 1), as the Unicode standard (and Rust's
// from_utf8_lossy) counts it.
size_t ValidSequence(absl::string_view text, size_t pos, size_t* bad_len) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  *bad_len = 1;
  if (b0 < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= text.size()) {
      *bad_len = i;
      return 0;
    }
    const uint8_t b = byte(pos + i);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *bad_len = i;
      return 0;
    }
  }
  return need;
}

}  // namespace

char32_t NextCodePoint(absl::string_view text, size_t* pos) {
  size_t bad = 0;
  const size_t n = ValidSequence(text, *pos, &bad);
  const uint8_t b0 = static_cast<uint8_t>(text[*pos]);
  if (n == 0) {
    ++*pos;
    return b0;
  }
  char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (static_cast<uint8_t>(text[*pos + i]) & 0x3F);
  *pos += n;
  return c;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Utf8Lossy(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t bad = 0;
    const size_t n = ValidSequence(bytes, pos, &bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      pos += bad;
    } else {
      out.append(bytes.data() + pos, n);
      pos += n;
    }
  }
  return out;
}

bool IsValidUtf8(absl::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t bad = 0;
    const size_t n = ValidSequence(bytes, pos, &bad);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

bool IsWhitespace(char32_t c) {
  if (c <= 0x7F) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

size_t LeadingWhitespace(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsWhitespace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

size_t TrailingWhitespace(absl::string_view text) {
  // Walk forward, remembering where the current whitespace run began.
  size_t pos = 0, run_start = 0;
  while (pos < text.size()) {
    const bool space = IsWhitespace(NextCodePoint(text, &pos));
    if (!space) run_start = pos;
  }
  return text.size() - run_start;
}

bool IsWordChar(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

namespace {

struct ByteMaps {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 512> to_byte{};  // the map's code points are all below U+0200
  ByteMaps() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_unicode[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_unicode[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMaps& Maps() {
  static const ByteMaps* const maps = new ByteMaps();
  return *maps;
}

}  // namespace

char32_t ByteToUnicode(uint8_t byte) { return Maps().to_unicode[byte]; }

int UnicodeToByte(char32_t c) { return c < 512 ? Maps().to_byte[c] : -1; }

std::string ByteLevelEncode(absl::string_view text) {
  std::string out;
  ByteLevelEncodeTo(text, out);
  return out;
}

void ByteLevelEncodeTo(absl::string_view text, std::string& out) {
  const ByteMaps& maps = Maps();
  out.clear();
  out.reserve(text.size() * 2);
  for (char ch : text) AppendUtf8(maps.to_unicode[static_cast<uint8_t>(ch)], &out);
}

absl::StatusOr<std::string> Normalize(absl::string_view text, NormalForm form) {
  bool ascii = true;
  for (char c : text) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(text);  // every form leaves ASCII as it is
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    return absl::InvalidArgumentError(std::string("Unicode normalization: ") + utf8proc_errmsg(n));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::string Lowercase(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t c = NextCodePoint(text, &pos);
    if (c == 0x130) {  // the one unconditional multi-character mapping: İ -> i + U+0307
      out += "i\xcc\x87";
      continue;
    }
    AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), &out);
  }
  return out;
}

}  // namespace abcd::hf
