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

 private:
  explicit Tokenizer(SentencePieceHandle sentencepiece)
      : sentencepiece_(std::move(sentencepiece)) {}
  SentencePieceHandle sentencepiece_;
};

}  // namespace abcd
