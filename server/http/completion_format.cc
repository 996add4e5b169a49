#include "server/http/completion_format.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/scheduler/text_stream.h"

namespace abcd::http {

using nlohmann::json;

absl::string_view OpenAiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json Usage(const GenerationEvent& last) {
  json usage = Usage(last.prompt_tokens, last.completion_tokens);
  usage["prompt_tokens_details"] = {{"cached_tokens", last.cached_prompt_tokens}};
  return usage;
}

std::string TakeCompleteUtf8(std::string& pending) {
  size_t start = pending.size();
  int continuation = 0;
  while (start > 0 && continuation < 4) {
    const auto byte = static_cast<unsigned char>(pending[start - 1]);
    if ((byte & 0xC0) != 0x80) break;
    --start;
    ++continuation;
  }
  size_t keep_from = pending.size();
  if (start > 0) {
    const auto lead = static_cast<unsigned char>(pending[start - 1]);
    const size_t length = (lead & 0x80) == 0      ? 1
                          : (lead & 0xE0) == 0xC0 ? 2
                          : (lead & 0xF0) == 0xE0 ? 3
                          : (lead & 0xF8) == 0xF0 ? 4
                                                  : 1;
    if (start - 1 + length > pending.size()) keep_from = start - 1;
  }
  std::string complete = pending.substr(0, keep_from);
  pending.erase(0, keep_from);
  return complete;
}

std::string TokenTexts::Decode(std::span<const int32_t> ids) const {
  if (tokenizer_ == nullptr) return std::string();
  absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
  return text.ok() ? *std::move(text) : std::string();
}

std::string TokenTexts::Text(int32_t id, std::span<const int32_t> before,
                             const std::string& before_text) const {
  if (tokenizer_ == nullptr || id < 0 || id >= tokenizer_->vocab_size()) {
    return absl::StrCat("<", id, ">");
  }
  if (!before.empty()) {
    std::vector<int32_t> ids(before.begin(), before.end());
    ids.push_back(id);
    std::string both = Decode(ids);
    if (absl::StartsWith(both, before_text)) return both.substr(before_text.size());
  }
  return Decode(std::span<const int32_t>(&id, 1));
}

void TokenTexts::Trim(std::vector<int32_t>* ids) const {
  if (tokenizer_ == nullptr) return ids->clear();
  const std::span<const int32_t> tail = TextStream::ContextTail(*tokenizer_, *ids);
  ids->erase(ids->begin(), ids->end() - static_cast<std::ptrdiff_t>(tail.size()));
}

void ChoiceLogprobs::Add(std::span<const TokenLogprobs> tokens) {
  for (const TokenLogprobs& token : tokens) {
    const std::string before_text = texts_->Decode(before_);
    std::string text = texts_->Text(token.token, before_, before_text);
    json top = json::object();
    for (const auto& [id, logprob] : token.top) {
      std::string alternative = texts_->Text(id, before_, before_text);
      auto it = top.find(alternative);
      if (it == top.end() || it->get<double>() < logprob) top[alternative] = logprob;
    }
    text_offset_.push_back(offset_);
    offset_ += static_cast<int64_t>(text.size());
    tokens_.push_back(std::move(text));
    token_logprobs_.push_back(token.logprob);
    top_logprobs_.push_back(std::move(top));
    before_.push_back(token.token);
    texts_->Trim(&before_);
  }
}

json ChoiceLogprobs::Take() {
  json object = {{"tokens", std::move(tokens_)},
                 {"token_logprobs", std::move(token_logprobs_)},
                 {"top_logprobs", std::move(top_logprobs_)},
                 {"text_offset", std::move(text_offset_)}};
  Clear();
  return object;
}

void ChoiceLogprobs::Clear() {
  tokens_ = json::array();
  token_logprobs_ = json::array();
  top_logprobs_ = json::array();
  text_offset_ = json::array();
}

}  // namespace abcd::http
