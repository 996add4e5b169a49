// Isolates libsentencepiece: its public header defines `absl::string_view` itself, which
// collides with Debian's Abseil. Only sentencepiece_adapter.cc includes it, and this interface
// uses the standard library only. Tokenizer wraps it with absl::Status.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace abcd {

class SentencePieceAdapter {
 public:
  SentencePieceAdapter();
  ~SentencePieceAdapter();

  // Each returns an empty string on success, else the library's error message.
  std::string Load(const std::string& path);
  std::string Encode(const std::string& text, std::vector<int>* ids) const;
  std::string Decode(const std::vector<int>& ids, std::string* text) const;

  int PieceCount() const;
  bool IsControl(int id) const;
  std::string Piece(int id) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace abcd
