#include "engine/tokenizer/sentencepiece_adapter.h"

#include <sentencepiece_processor.h>

namespace abcd {

SentencePieceAdapter::SentencePieceAdapter()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceAdapter::~SentencePieceAdapter() = default;

std::string SentencePieceAdapter::Load(const std::string& path) {
  const auto status = processor_->Load(path);
  return status.ok() ? "" : status.ToString();
}

std::string SentencePieceAdapter::Encode(const std::string& text, std::vector<int>* ids) const {
  const auto status = processor_->Encode(text, ids);
  return status.ok() ? "" : status.ToString();
}

std::string SentencePieceAdapter::Decode(const std::vector<int>& ids, std::string* text) const {
  const auto status = processor_->Decode(ids, text);
  return status.ok() ? "" : status.ToString();
}

int SentencePieceAdapter::PieceCount() const { return processor_->GetPieceSize(); }
bool SentencePieceAdapter::IsControl(int id) const { return processor_->IsControl(id); }
std::string SentencePieceAdapter::Piece(int id) const { return processor_->IdToPiece(id); }

}  // namespace abcd
