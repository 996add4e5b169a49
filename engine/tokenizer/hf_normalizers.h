// tokenizer.json normalizers: Sequence, Prepend, Replace, Strip, Lowercase, NFC, NFD, NFKC,
// NFKD. Others (BertNormalizer, Precompiled, Nmt, StripAccents, ByteLevel) are refused at load
// naming the field. Hugging Face applies the normalizer to each stretch of text between added
// tokens (hf_added_tokens.h), as the tokenizer does here. Immutable after Parse; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/hf_json.h"

namespace abcd::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual absl::Status Normalize(std::string& text) const = 0;
};

// `spec` is tokenizer.json's "normalizer" (or one element of a Sequence) at `field`; null gives
// nullptr (no normalizer).
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& spec,
                                                            const std::string& field);

// Every non-overlapping match of `regex` in `text` replaced by `content`.
absl::StatusOr<std::string> ReplaceAll(const Regex& regex, absl::string_view text,
                                       absl::string_view content);

}  // namespace abcd::hf
