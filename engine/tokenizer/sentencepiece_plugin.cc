// The SentencePiece plugin (libabcd_sentencepiece.so): the only code that includes
// libsentencepiece's header. See sentencepiece_backend.h for why it is a plugin.
#include <sentencepiece_processor.h>

#include "engine/tokenizer/sentencepiece_backend.h"

namespace abcd {
namespace {

class SentencePieceProcessorBackend final : public SentencePieceBackend {
 public:
  std::string Load(const std::string& path) override { return Error(processor_.Load(path)); }
  std::string Encode(const std::string& text, std::vector<int>* ids) const override {
    return Error(processor_.Encode(text, ids));
  }
  std::string Decode(const std::vector<int>& ids, std::string* text) const override {
    return Error(processor_.Decode(ids, text));
  }
  int PieceCount() const override { return processor_.GetPieceSize(); }
  std::string Piece(int id, int* kind) const override {
    *kind = kNormal;
    if (processor_.IsByte(id)) *kind = kByte;
    if (processor_.IsControl(id) || processor_.IsUnknown(id) || processor_.IsUnused(id)) {
      *kind = kControl;
    }
    return processor_.IdToPiece(id);
  }

 private:
  static std::string Error(const sentencepiece::util::Status& status) {
    return status.ok() ? std::string() : status.ToString();
  }
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace abcd

extern "C" __attribute__((visibility("default"))) abcd::SentencePieceBackend*
abcd_create_sentencepiece_backend() {
  return new abcd::SentencePieceProcessorBackend();
}
