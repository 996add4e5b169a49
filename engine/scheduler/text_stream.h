// Incremental detokenisation with stop strings for one request, O(new tokens) per token.
//
// SentencePiece pieces do not decode independently (the first piece of a decode loses its
// leading space; byte-fallback pieces combine into UTF-8 characters), so each Append decodes a
// short window of recent ids twice, with and without the new ones, and appends the difference
// (the prefix-offset scheme of vLLM's and Hugging Face's detokenize_incrementally). While the
// window's text ends with U+FFFD (an incomplete UTF-8 character) nothing is taken and the window
// grows until the character completes. The ids before the first Append (the prompt with bos, a
// session's history) start the window, so the text is what the appended ids add after them:
// Decode(preceding) + every released piece == Decode(preceding + appended) ("stood" + " in",
// not "stood" + "in"); with no preceding ids, the concatenation equals Decode(appended).
// Only the part that is final is released: a tail that could still become a stop string, or an
// incomplete UTF-8 character, is held back until the next token decides it.
//
// Thread-compatible: one request's engine thread uses it.
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
  // `preceding`: the ids the appended ones follow (only ContextTail of them is kept).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop,
             std::span<const int32_t> preceding = {});

  // The shortest tail of `preceding` of at least kContextTokens ids whose text is not empty
  // (or all of it): ids decoded after it add the same text as after all of `preceding`.
  static std::span<const int32_t> ContextTail(const Tokenizer& tokenizer,
                                              std::span<const int32_t> preceding);
  static constexpr size_t kContextTokens = 4;

  // Adds a generated token; returns the newly released text.
  absl::StatusOr<std::string> Append(int32_t token);
  // True once the text contains a stop string (the text is cut before it).
  bool stopped() const { return stopped_; }
  // Releases everything held back, including a still incomplete character (call when the
  // request ends).
  std::string Flush();
  // The appended ids (not the preceding ones) and their text so far.
  std::span<const int32_t> tokens() const { return std::span(tokens_).subspan(context_); }
  const std::string& text() const { return text_; }
  // Ids the next Append decodes besides its own (the window): a few, whatever the length.
  size_t window_tokens() const { return tokens_.size() - prefix_offset_; }

 private:
  // Decodes tokens_[begin, end).
  absl::StatusOr<std::string> DecodeRange(size_t begin, size_t end) const;
  // Appends new text and cuts it at the first stop string (then stopped_).
  void AddText(const std::string& delta);
  std::string Release();
  size_t HeldBackBytes() const;

  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;          // longest stop string
  std::vector<int32_t> tokens_;  // ContextTail(preceding), then the appended ids
  size_t context_ = 0;           // preceding ids at the front of tokens_
  std::string context_text_;     // Decode(tokens_[0, context_))
  std::string text_;             // decoded text of tokens_[0, read_offset_), cut at a stop string
  size_t prefix_offset_ = 0;     // window start: tokens_[prefix_offset_, read_offset_) are decoded
  size_t read_offset_ = 0;       // tokens before this are in text_
  std::string prefix_text_;      // Decode(tokens_[prefix_offset_, read_offset_))
  size_t released_ = 0;          // bytes of text_ already returned
  bool stopped_ = false;
};

}  // namespace abcd
