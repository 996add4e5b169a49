// tokenizer.json pre-tokenizers: ByteLevel (GPT-2's regex and byte -> unicode map), Split
// (String or PCRE2 Regex pattern, every SplitDelimiterBehavior, invert), Metaspace, Digits,
// Whitespace, WhitespaceSplit, Sequence. Others (BertPreTokenizer, Punctuation,
// UnicodeScripts, ...) are refused at load naming the field. Immutable after Parse; thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/hf_json.h"

namespace abcd::hf {

// Receives each pre-token, in order: its text (valid only during the call) and whether it
// begins where the input text begins (Hugging Face's offsets_original().0 == 0, which
// Metaspace's prepend_scheme "first" reads).
using PieceSink = absl::FunctionRef<absl::Status(absl::string_view piece, bool at_start)>;

// The text buffers of one Encode call, reused from pre-token to pre-token: a pre-tokenizer that
// rewrites text (ByteLevel, Metaspace) writes into one it takes, so memory stays bounded by the
// longest text a stage rewrites and the number of allocations does not grow with the pre-tokens.
// Not thread-safe: one per call.
class PreTokenizeScratch {
 public:
  // A buffer no caller up the current chain holds, until Release; takes and releases nest.
  std::string& Take() {
    if (used_ == buffers_.size()) buffers_.emplace_back();
    return buffers_[used_++];
  }
  void Release() { --used_; }

 private:
  std::deque<std::string> buffers_;  // (a deque: earlier buffers stay where they are)
  size_t used_ = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Hands `sink` the pieces `text` splits into, in order (Hugging Face's pre_tokenize_str); the
  // first error `sink` returns ends the call.
  virtual absl::Status PreTokenize(absl::string_view text, bool at_start,
                                   PreTokenizeScratch& scratch, PieceSink sink) const = 0;
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
