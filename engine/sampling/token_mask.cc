#include "engine/sampling/token_mask.h"

#include <algorithm>
#include <bit>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace abcd {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes,
                                 std::vector<int32_t> stop_ids)
    : bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id) {
    if (!bytes_[id].empty() && !IsStop(id)) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(),
                   [this](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  // Sorted strings give the trie in preorder: each string shares its longest common prefix with
  // the previous one, so the path is popped to that depth and extended with the rest.
  trie_.push_back(TrieNode{});
  std::vector<int32_t> path = {0};  // path[d]: the node at depth d of the previous string
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    if (previous != nullptr) {
      while (common < previous->size() && common < s.size() && (*previous)[common] == s[common]) {
        ++common;
      }
    }
    while (path.size() > common + 1) {
      trie_[path.back()].skip = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      node.tokens_begin = node.tokens_end = static_cast<int32_t>(token_ids_.size());
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(node);
    }
    TrieNode& end = trie_[path.back()];
    if (end.tokens_begin == end.tokens_end) {
      end.tokens_begin = end.tokens_end = static_cast<int32_t>(token_ids_.size());
    }
    token_ids_.push_back(id);
    end.tokens_end = static_cast<int32_t>(token_ids_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    previous = &s;
  }
  while (!path.empty()) {
    trie_[path.back()].skip = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

bool TokenVocabulary::IsStop(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

TokenConstraint::TokenConstraint(std::shared_ptr<const JsonGrammar> grammar,
                                 std::shared_ptr<const TokenVocabulary> vocabulary, bool allow_stop)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      allow_stop_(allow_stop),
      matcher_(grammar_.get()),
      cache_(std::make_shared<Cache>()) {}

TokenMask TokenConstraint::ComputeMask() const {
  const TokenVocabulary& v = *vocabulary_;
  TokenMask mask;
  mask.bits.assign((static_cast<size_t>(v.vocab_size()) + 63) / 64, 0);
  auto set = [&mask](int32_t id) { mask.bits[id / 64] |= uint64_t{1} << (id % 64); };
  const std::vector<TokenVocabulary::TrieNode>& trie = v.trie();
  const std::span<const int32_t> ids = v.token_ids();
  // at[d]: the matcher after the first d bytes of the current trie path; it is states[d], or
  // (a byte that keeps the state, inside a string) the same object as at[d - 1]. Preorder
  // overwrites states[d] only once the subtree that could point at it is done.
  const size_t depth = static_cast<size_t>(v.max_depth()) + 1;
  std::vector<JsonMatcher> states(depth);
  std::vector<const JsonMatcher*> at(depth, nullptr);
  std::vector<char> in_string(depth, 0);  // at[d]->InStringBody()
  at[0] = &matcher_;
  in_string[0] = matcher_.InStringBody();
  for (size_t i = 1; i < trie.size();) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const JsonMatcher& parent = *at[node.depth - 1];
    if (in_string[node.depth - 1] && JsonMatcher::PlainStringByte(node.byte)) {
      at[node.depth] = &parent;
      in_string[node.depth] = 1;
    } else {
      JsonMatcher& state = states[node.depth];
      state.CopyFrom(parent);
      if (!state.Advance(node.byte)) {
        i = static_cast<size_t>(node.skip);
        continue;
      }
      at[node.depth] = &state;
      in_string[node.depth] = state.InStringBody();
    }
    for (int32_t t = node.tokens_begin; t < node.tokens_end; ++t) set(ids[t]);
    ++i;
  }
  if (allow_stop_ && matcher_.accepting()) {
    for (int32_t id : v.stop_ids()) {
      if (id >= 0 && id < v.vocab_size()) set(id);
    }
  }
  for (uint64_t word : mask.bits) mask.allowed += std::popcount(word);
  return mask;
}

const TokenMask& TokenConstraint::Allowed() {
  if (current_ != nullptr) return *current_;
  std::string key = matcher_.Key();
  if (auto it = cache_->masks.find(key); it != cache_->masks.end()) {
    current_ = it->second;
    return *current_;
  }
  current_ = std::make_shared<const TokenMask>(ComputeMask());
  ++cache_->walks;
  if (cache_->masks.size() >= kMaxCachedMasks) cache_->masks.clear();
  cache_->masks.emplace(std::move(key), current_);
  return *current_;
}

absl::Status TokenConstraint::Accept(int32_t token) {
  if (token < 0 || token >= vocabulary_->vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format: token ", token, " is outside the vocabulary"));
  }
  if (vocabulary_->IsStop(token)) {
    if (allow_stop_ && matcher_.accepting()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("response_format: the end (token ", token, ") before the value is complete"));
  }
  JsonMatcher next;
  next.CopyFrom(matcher_);
  const std::string& bytes = vocabulary_->bytes(token);
  if (bytes.empty() || !next.Advance(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format: token ", token, " does not continue the JSON value"));
  }
  matcher_.CopyFrom(next);
  current_.reset();
  return absl::OkStatus();
}

}  // namespace abcd
