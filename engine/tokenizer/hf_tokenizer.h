// A Hugging Face `tokenizers` tokenizer.json with a BPE model: byte-level ones (GPT-2, Llama 3,
// Qwen2, SmolLM2, gpt-oss: ByteLevel/Split pre-tokenizers, ByteLevel decoder) and
// SentencePiece-style ones (Llama 2, Mistral: Metaspace or Prepend/Replace normalizers, byte
// fallback, Replace/ByteFallback/Fuse/Strip decoders), with added tokens. Encode and Decode
// give what the `tokenizers` library's encode(text, add_special_tokens=false) and
// decode(ids, skip_special_tokens=true) give (tests/engine/tokenizer/ checks them on a corpus
// against the npm package). The file's truncation and padding are ignored (transformers turns
// them off for each call too). Anything the file asks for that is not implemented (a Unigram or
// WordPiece model, an unknown normalizer, pre-tokenizer, decoder or post-processor type, BPE
// dropout, ...) is refused at load with one line naming the field.
// Immutable after Load; Encode/Decode/TokenBytes are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd::hf {

class AddedTokens;
class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;

class HfTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path);
  // The file's text; errors start with "tokenizer.json: <field>".
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Parse(absl::string_view text);
  ~HfTokenizer();

  // The ids of `text` without the post-processor's special tokens. Invalid UTF-8 is an error.
  // Each pre-token is merged as the pre-tokenizer finds it: besides the ids and a copy or two of
  // the text, memory is bounded by the longest pre-token, and the number of allocations does not
  // grow with the number of pre-tokens (only with new words, up to the word cache's size).
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // Special added tokens and ids no token has decode to nothing; a negative id is an error.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const;
  // One past the largest id of the model's vocab and the added tokens.
  int vocab_size() const { return vocab_size_; }
  // Each id's bytes inside a decoded text (after other text); "" for special tokens and ids no
  // token has. Byte tokens (<0xNN>, GPT-2 byte characters) are their raw bytes.
  std::vector<std::string> TokenBytes() const;
  // What the post-processor (TemplateProcessing, BertProcessing, RobertaProcessing) puts
  // around a single sequence: Llama 3's <|begin_of_text|>, for instance.
  const std::vector<int32_t>& template_prefix() const { return prefix_; }
  const std::vector<int32_t>& template_suffix() const { return suffix_; }
  // The token of `id` (an added token's content or the model's token), or nullptr.
  const std::string* IdToToken(int32_t id) const;

 private:
  HfTokenizer();
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedTokens> added_;
  bool has_normalized_added_ = false;
  std::vector<int32_t> prefix_, suffix_;
  int vocab_size_ = 0;
};

// Whether prompts of the model in `dir` start with a bos token, where tokenizer_config.json does
// not say (no add_bos_token) and a tokenizer.json is there: its post-processor decides, as it
// does for transformers' fast tokenizers (Llama 3's TemplateProcessing puts <|begin_of_text|>
// first; Qwen2's ByteLevel puts nothing). nullopt where tokenizer_config.json has
// add_bos_token, whatever its value (null included: transformers rebuilds the post-processor
// from any add_bos_token it is given, so the field wins), or there is no tokenizer.json, or its
// post-processor does not parse.
std::optional<bool> TemplateAddsBos(const std::string& dir);

}  // namespace abcd::hf
