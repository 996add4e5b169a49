#include "engine/tokenizer/hf_added_tokens.h"

#include <algorithm>

#include "engine/core/status_macros.h"
#include "engine/tokenizer/hf_unicode.h"

namespace abcd::hf {
namespace {

bool StartsWithWord(absl::string_view text) {
  size_t pos = 0;
  return !text.empty() && IsWordChar(NextCodePoint(text, &pos));
}

bool EndsWithWord(absl::string_view text) {
  if (text.empty()) return false;
  size_t begin = text.size() - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  return IsWordChar(NextCodePoint(text, &begin));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AddedTokens>> AddedTokens::Parse(const json& spec,
                                                                const Normalizer* normalizer) {
  std::unique_ptr<AddedTokens> added(new AddedTokens());
  for (auto& pass : added->by_first_byte_) pass.resize(256);
  if (spec.is_null()) return added;
  if (!spec.is_array()) return FieldError("added_tokens", "must be an array");
  for (size_t i = 0; i < spec.size(); ++i) {
    const json& t = spec[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    AddedToken token;
    const json* id = Member(t, "id");
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= (1 << 30)) {
      return FieldError(Sub(field, "id"), "must be an integer in [0, 2^30)");
    }
    token.id = static_cast<int32_t>(id->get<int64_t>());
    ABCD_ASSIGN_OR_RETURN(token.content, StringField(t, field, "content"));
    if (token.content.empty()) return FieldError(Sub(field, "content"), "must not be empty");
    ABCD_ASSIGN_OR_RETURN(token.special, BoolField(t, field, "special", false));
    ABCD_ASSIGN_OR_RETURN(token.single_word, BoolField(t, field, "single_word", false));
    ABCD_ASSIGN_OR_RETURN(token.lstrip, BoolField(t, field, "lstrip", false));
    ABCD_ASSIGN_OR_RETURN(token.rstrip, BoolField(t, field, "rstrip", false));
    ABCD_ASSIGN_OR_RETURN(token.normalized, BoolField(t, field, "normalized", !token.special));
    if (added->by_id_.contains(token.id)) {
      return FieldError(Sub(field, "id"), absl::StrCat(token.id, " is given to two added tokens"));
    }
    if (added->by_content_.contains(token.content)) continue;  // the first one wins
    token.pattern = token.content;
    if (token.normalized && normalizer != nullptr) {
      ABCD_RETURN_IF_ERROR(normalizer->Normalize(token.pattern));
    }
    added->by_id_[token.id] = added->tokens_.size();
    added->by_content_[token.content] = added->tokens_.size();
    added->tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < added->tokens_.size(); ++i) {
    const AddedToken& token = added->tokens_[i];
    if (token.pattern.empty()) continue;
    added->by_first_byte_[token.normalized][static_cast<uint8_t>(token.pattern[0])].push_back(i);
  }
  for (auto& pass : added->by_first_byte_) {
    for (auto& list : pass) {
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return added->tokens_[a].pattern.size() > added->tokens_[b].pattern.size();
      });
    }
  }
  return added;
}

const AddedToken* AddedTokens::LongestAt(absl::string_view text, size_t pos,
                                         bool normalized) const {
  for (size_t index : by_first_byte_[normalized][static_cast<uint8_t>(text[pos])]) {
    const AddedToken& token = tokens_[index];
    if (text.compare(pos, token.pattern.size(), token.pattern) == 0) return &token;
  }
  return nullptr;
}

void AddedTokens::Split(absl::string_view text, bool normalized, bool at_start,
                        std::vector<Segment>& out) const {
  size_t done = 0;  // text before this is in `out`
  size_t pos = 0;
  const std::vector<std::vector<size_t>>& starting_with = by_first_byte_[normalized];
  while (pos < text.size()) {
    // Most bytes start no added token: skip them without a call.
    if (starting_with[static_cast<uint8_t>(text[pos])].empty()) {
      ++pos;
      continue;
    }
    const AddedToken* token = LongestAt(text, pos, normalized);
    if (token == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + token->pattern.size();
    pos = end;
    if (token->single_word &&
        (EndsWithWord(text.substr(0, begin)) || StartsWithWord(text.substr(end)))) {
      continue;
    }
    if (token->lstrip) {
      begin = std::max(begin - TrailingWhitespace(text.substr(0, begin)), done);
    }
    if (token->rstrip) end += LeadingWhitespace(text.substr(end));
    if (begin > done) {
      out.push_back({std::string(text.substr(done, begin - done)), -1, at_start && done == 0});
    }
    out.push_back(
        {std::string(text.substr(begin, end - begin)), token->id, at_start && begin == 0});
    done = end;
    pos = end;
  }
  if (done < text.size()) {
    out.push_back({std::string(text.substr(done)), -1, at_start && done == 0});
  }
}

}  // namespace abcd::hf
