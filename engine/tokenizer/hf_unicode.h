// UTF-8 and Unicode helpers for the tokenizer.json tokenizer (hf_tokenizer.h): code point
// iteration, Rust's String::from_utf8_lossy, char::is_whitespace, the GPT-2 byte <-> unicode
// map of the ByteLevel pre-tokenizer and decoder, and Unicode normalization forms (utf8proc).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd::hf {

// The code point at `text[*pos]`, advancing *pos past it. A byte that does not start a valid
// UTF-8 sequence is returned as itself (0x80..0xFF) and advances one byte.
char32_t NextCodePoint(absl::string_view text, size_t* pos);
// Appends the UTF-8 encoding of `c`.
void AppendUtf8(char32_t c, std::string* out);
// Valid UTF-8 as Rust's String::from_utf8_lossy makes it: each maximal invalid subpart becomes
// one U+FFFD.
std::string Utf8Lossy(absl::string_view bytes);
bool IsValidUtf8(absl::string_view bytes);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsWhitespace(char32_t c);
// Byte length of the whitespace that starts / ends `text`.
size_t LeadingWhitespace(absl::string_view text);
size_t TrailingWhitespace(absl::string_view text);
// A word character as regex \w takes it (letters, marks, numbers, connector punctuation).
bool IsWordChar(char32_t c);

// GPT-2's byte -> printable code point map (bytes_to_unicode): '!'..'~', 0xA1..0xAC, 0xAE..0xFF
// map to themselves, the other 68 bytes to U+0100 onwards.
char32_t ByteToUnicode(uint8_t byte);
// The inverse; -1 for a code point outside the map.
int UnicodeToByte(char32_t c);
// Every byte of `text` as its mapped code point, in UTF-8.
std::string ByteLevelEncode(absl::string_view text);
// The same into `out`, replacing what it held (its capacity is reused).
void ByteLevelEncodeTo(absl::string_view text, std::string& out);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `text` (valid UTF-8) in the normal form; an error only for invalid UTF-8.
absl::StatusOr<std::string> Normalize(absl::string_view text, NormalForm form);
// Each code point's Unicode lowercase mapping (Rust's char::to_lowercase, as Hugging Face's
// Lowercase normalizer applies it: no final-sigma rule).
std::string Lowercase(absl::string_view text);

}  // namespace abcd::hf
