// tokenizer.json's added_tokens: found in the text before the model sees it, as Hugging Face's
// AddedVocabulary does. Tokens with `normalized: false` (special tokens usually) are matched in
// the raw text first, the others in each normalized stretch between those; leftmost-longest,
// honouring single_word, lstrip (the whitespace before joins the token) and rstrip (after).
// A normalized token is matched (and decoded) as the normalizer writes its content, as
// tokenizers 0.23 does. `special` tokens decode to nothing (skip_special_tokens). Immutable
// after Parse; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/hf_json.h"
#include "engine/tokenizer/hf_normalizers.h"

namespace abcd::hf {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  std::string pattern;  // what is matched and decoded: content, normalized where `normalized`
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A stretch of text, or an added token found in it (id >= 0, `text` its matched span).
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_start = false;
};

class AddedTokens {
 public:
  // `spec` is tokenizer.json's "added_tokens" (an array, or null for none); `normalizer` the
  // tokenizer's (or null).
  static absl::StatusOr<std::unique_ptr<AddedTokens>> Parse(const json& spec,
                                                            const Normalizer* normalizer);

  // Splits `text` around the tokens of one matching pass (`normalized` picks which).
  // `at_start`: `text` begins the input.
  void Split(absl::string_view text, bool normalized, bool at_start,
             std::vector<Segment>& out) const;

  const AddedToken* ById(int32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
  }
  const AddedToken* ByContent(absl::string_view content) const {
    auto it = by_content_.find(content);
    return it == by_content_.end() ? nullptr : &tokens_[it->second];
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  AddedTokens() = default;
  // The longest token of the pass that matches at text[pos], or nullptr.
  const AddedToken* LongestAt(absl::string_view text, size_t pos, bool normalized) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, size_t> by_content_;
  // Per pass (0: not normalized, 1: normalized) and first byte: indexes into tokens_, longest
  // first.
  std::vector<std::vector<size_t>> by_first_byte_[2];
};

}  // namespace abcd::hf
