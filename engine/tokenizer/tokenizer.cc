#include "engine/tokenizer/tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace abcd {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  absl::StatusOr<SentencePieceHandle> sentencepiece = SentencePieceHandle::Open();
  if (!sentencepiece.ok()) return sentencepiece.status();
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(*std::move(sentencepiece)));
  if (std::string error = tokenizer->sentencepiece_.backend().Load(path); !error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load SentencePiece model: ", error));
  }
  return tokenizer;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int> ids;
  if (std::string error = sentencepiece_.backend().Encode(std::string(text), &ids);
      !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenize: ", error));
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::vector<int> pieces(ids.begin(), ids.end());
  for (int id : pieces) {
    if (id < 0 || id >= sentencepiece_.backend().PieceCount()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the tokenizer"));
    }
  }
  std::string text;
  if (std::string error = sentencepiece_.backend().Decode(pieces, &text); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("detokenize: ", error));
  }
  return text;
}

}  // namespace abcd
