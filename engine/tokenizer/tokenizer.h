// Text <-> token ids through a SentencePiece model (the model directory's tokenizer.model).
// Thread-safe for concurrent Encode/Decode after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/sentencepiece_handle.h"

namespace abcd {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // Ids >= vocab_size() (padding rows of a larger model vocabulary) decode to no text; a
  // negative id is an error.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const;
  int vocab_size() const { return sentencepiece_.backend().PieceCount(); }
  // Each id's bytes as it appears inside a decoded text (after other text): a piece with
  // U+2581 as a space, a byte-fallback piece <0xNN> as that byte, "" for control, unknown and
  // unused ids. Constrained output (engine/sampling/token_mask.h) walks these.
  std::vector<std::string> TokenBytes() const;

 private:
  explicit Tokenizer(SentencePieceHandle sentencepiece)
      : sentencepiece_(std::move(sentencepiece)) {}
  SentencePieceHandle sentencepiece_;
};

}  // namespace abcd
