// Incremental detokenisation with stop strings for one request. Text is re-decoded from all
// generated ids (SentencePiece pieces do not decode independently), and only the part that is
// final is released: a tail that could still become a stop string, or an incomplete UTF-8
// character, is held back until the next token decides it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  // Adds a generated token; returns the newly released text.
  absl::StatusOr<std::string> Append(int32_t token);
  // True once the text contains a stop string (the text is cut before it).
  bool stopped() const { return stopped_; }
  // Releases everything held back (call when the request ends).
  std::string Flush();
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& text() const { return text_; }

 private:
  size_t HeldBackBytes() const;

  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  std::vector<int32_t> tokens_;
  std::string text_;     // decoded text so far, cut at a stop string
  size_t released_ = 0;  // bytes of text_ already returned
  bool stopped_ = false;
};

}  // namespace abcd
