#include "engine/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace abcd {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  if (absl::EndsWith(path, ".json")) {
    absl::StatusOr<std::unique_ptr<hf::HfTokenizer>> hf = hf::HfTokenizer::Load(path);
    if (!hf.ok()) return hf.status();
    std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(*std::move(hf)));
    tokenizer->path_ = path;
    return tokenizer;
  }
  absl::StatusOr<SentencePieceHandle> sentencepiece = SentencePieceHandle::Open();
  if (!sentencepiece.ok()) return sentencepiece.status();
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(*std::move(sentencepiece)));
  if (std::string error = tokenizer->sentencepiece_->backend().Load(path); !error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load SentencePiece model: ", error));
  }
  tokenizer->path_ = path;
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadDirectory(const std::string& dir) {
  const auto exists = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  const std::string json_path = dir + "/tokenizer.json";
  const std::string model_path = dir + "/tokenizer.model";
  const bool has_json = exists(json_path), has_model = exists(model_path);
  if (!has_json && !has_model) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no tokenizer.json (Hugging Face tokenizers) or tokenizer.model (SentencePiece)"));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Load(has_json ? json_path : model_path);
  if (!loaded.ok() && has_json && has_model) return Load(model_path);
  return loaded;
}

int Tokenizer::vocab_size() const {
  return hf_ != nullptr ? hf_->vocab_size() : sentencepiece_->backend().PieceCount();
}

std::vector<std::string> Tokenizer::TokenBytes() const {
  if (hf_ != nullptr) return hf_->TokenBytes();
  const SentencePieceBackend& backend = sentencepiece_->backend();
  std::vector<std::string> bytes(backend.PieceCount());
  for (int id = 0; id < backend.PieceCount(); ++id) {
    int kind = SentencePieceBackend::kNormal;
    std::string piece = backend.Piece(id, &kind);
    if (kind == SentencePieceBackend::kControl) continue;
    int byte = 0;
    if (kind == SentencePieceBackend::kByte) {
      // "<0xNN>"
      if (piece.size() == 6 && absl::SimpleHexAtoi(absl::string_view(piece).substr(3, 2), &byte)) {
        bytes[id] = std::string(1, static_cast<char>(byte));
      }
      continue;
    }
    bytes[id] = absl::StrReplaceAll(piece, {{"\xe2\x96\x81", " "}});
  }
  return bytes;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  if (hf_ != nullptr) return hf_->Encode(text);
  std::vector<int> ids;
  if (std::string error = sentencepiece_->backend().Encode(std::string(text), &ids);
      !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenize: ", error));
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids) const {
  // Ids past the tokenizer's pieces (a model whose embedding is padded past the vocabulary, as
  // Hugging Face checkpoints often are) have no text: they decode to nothing.
  if (hf_ != nullptr) return hf_->Decode(ids);
  const int piece_count = sentencepiece_->backend().PieceCount();
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is negative"));
    }
    if (id < piece_count) pieces.push_back(id);
  }
  std::string text;
  if (std::string error = sentencepiece_->backend().Decode(pieces, &text); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("detokenize: ", error));
  }
  return text;
}

}  // namespace abcd
