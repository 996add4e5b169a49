// Text <-> token ids for a model: a SentencePiece model (tokenizer.model, through the plugin in
// sentencepiece_backend.h) or a Hugging Face tokenizer.json (hf_tokenizer.h), chosen by the
// file Load is given. Neither adds a bos/eos token to what Encode returns: the engine prepends
// ModelConfig::bos_id where ModelConfig::add_bos says so. Thread-safe for concurrent
// Encode/Decode after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/sentencepiece_handle.h"

namespace abcd {

class Tokenizer {
 public:
  // `path` ending in ".json": a tokenizer.json; anything else: a SentencePiece model.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // A model directory's tokenizer: `dir`/tokenizer.json when present (as transformers'
  // AutoTokenizer picks the fast tokenizer), else `dir`/tokenizer.model; a tokenizer.json that
  // does not load falls back to a tokenizer.model beside it, and alone is refused with its error.
  // NotFound when the directory has neither file.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadDirectory(const std::string& dir);
  // The file it was loaded from.
  const std::string& path() const { return path_; }

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // Ids >= vocab_size() (padding rows of a larger model vocabulary) decode to no text, and so
  // do control / special tokens; a negative id is an error.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  // Each id's bytes as it appears inside a decoded text (after other text): a piece with
  // U+2581 as a space, a byte-fallback piece <0xNN> (or a GPT-2 byte-level character) as that
  // byte, "" for control, special, unknown and unused ids. Constrained output
  // (engine/sampling/token_mask.h) walks these.
  std::vector<std::string> TokenBytes() const;
  // The tokenizer.json, or nullptr for a SentencePiece model.
  const hf::HfTokenizer* hf() const { return hf_.get(); }

 private:
  explicit Tokenizer(SentencePieceHandle sentencepiece)
      : sentencepiece_(std::move(sentencepiece)) {}
  explicit Tokenizer(std::unique_ptr<hf::HfTokenizer> hf) : hf_(std::move(hf)) {}
  std::optional<SentencePieceHandle> sentencepiece_;
  std::unique_ptr<hf::HfTokenizer> hf_;
  std::string path_;
};

}  // namespace abcd
