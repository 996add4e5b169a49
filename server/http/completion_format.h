// OpenAI legacy Completions shapes for POST /v1/completions (http_service.cc): finish reasons,
// usage, a choice's "logprobs" object and the helpers that stream text without splitting a
// UTF-8 character.
//
// logprobs object (OpenAI's): {"tokens": [text...], "token_logprobs": [lp...],
// "top_logprobs": [{text: lp, ...}...], "text_offset": [byte offset...]}. A token's text is what
// it adds to the text (TokenTexts); text_offset counts bytes from the start of the choice's
// "text" (with echo, the prompt's first token is at 0). Two top ids with one text keep
// the higher log-probability.
//
// Thread-compatible: one object per call, used on its connection's strand.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/sampling/logprobs.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace abcd::http {

// OpenAI reports EOS as "stop"; abcd's own reason goes in choices[i].abcd.finish_reason.
absl::string_view OpenAiFinishReason(FinishReason reason);

nlohmann::json Usage(int prompt_tokens, int completion_tokens);
// A completion's usage; prompt_tokens_details.cached_tokens (OpenAI's name) counts the prompt
// tokens restored from the prefix cache instead of prefilled.
nlohmann::json Usage(const GenerationEvent& last);

// Moves the longest prefix of `pending` that does not end inside a UTF-8 character out of it,
// so streamed deltas never split a character (json would otherwise replace the halves).
std::string TakeCompleteUtf8(std::string& pending);

// The text a token id adds after the ids before it (SentencePiece drops the leading space of a
// decode's first piece and joins byte pieces into characters, so an id is decoded after a short
// tail of its predecessors and their text is cut off), the way the engine's TextStream builds
// a choice's text. `tokenizer` may be null (then ids read "<id>").
class TokenTexts {
 public:
  explicit TokenTexts(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // The text of `before` (the argument Text takes as before_text).
  std::string Decode(std::span<const int32_t> before) const;
  // What `id` adds after `before`, whose text is `before_text`; `before` empty: `id` starts
  // the text.
  std::string Text(int32_t id, std::span<const int32_t> before,
                   const std::string& before_text) const;
  // Cuts `ids` to the tail later ids are decoded after (TextStream::ContextTail).
  void Trim(std::vector<int32_t>* ids) const;

 private:
  const Tokenizer* tokenizer_;
};

// A choice's logprobs, accumulated token by token. Take() hands out what was added since the
// last Take (streaming: each chunk's own tokens) and keeps the running text offset.
class ChoiceLogprobs {
 public:
  explicit ChoiceLogprobs(const TokenTexts* texts) : texts_(texts) { Clear(); }
  void Add(std::span<const TokenLogprobs> tokens);
  // The next token's text is what it adds after `preceding` (the engine's
  // GenerationEvent::preceding_token_ids: the prompt's tail).
  void Follow(std::span<const int32_t> preceding) {
    before_.assign(preceding.begin(), preceding.end());
  }
  bool empty() const { return tokens_.empty(); }
  nlohmann::json Take();

 private:
  void Clear();

  const TokenTexts* texts_;
  int64_t offset_ = 0;
  std::vector<int32_t> before_;  // the ids the next token follows (a short tail)
  nlohmann::json tokens_;
  nlohmann::json token_logprobs_;
  nlohmann::json top_logprobs_;
  nlohmann::json text_offset_;
};

}  // namespace abcd::http
