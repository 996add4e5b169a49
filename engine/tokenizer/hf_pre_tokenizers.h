// tokenizer.json pre-tokenizers: ByteLevel (GPT-2's regex and byte -> unicode map), Split
// (String or PCRE2 Regex pattern, every SplitDelimiterBehavior, invert), Metaspace, Digits,
// Whitespace, WhitespaceSplit, Sequence. Others (BertPreTokenizer, Punctuation,
// UnicodeScripts, ...) are refused at load naming the field. Immutable after Parse; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/hf_json.h"

namespace abcd::hf {

// One stretch of normalized text on its way to the model. `at_start`: it begins where the
// input text begins (Hugging Face's offsets_original().0 == 0, which Metaspace's
// prepend_scheme "first" reads).
struct Piece {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty ones dropped).
  virtual absl::Status PreTokenize(std::vector<Piece>& pieces) const = 0;
};

// `spec` is tokenizer.json's "pre_tokenizer" (or an element of a Sequence) at `field`; null
// gives nullptr (the whole normalized text goes to the model).
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& spec,
                                                                const std::string& field);

// Metaspace's settings, shared with its decoder (hf_decoders.h).
enum class PrependScheme { kAlways, kFirst, kNever };
struct MetaspaceSpec {
  std::string replacement = "\xe2\x96\x81";  // U+2581
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
};
absl::StatusOr<MetaspaceSpec> ParseMetaspace(const json& spec, const std::string& field);

}  // namespace abcd::hf
