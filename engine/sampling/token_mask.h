// Constrained JSON output, the token level: which token ids may come next under a JsonGrammar
// (json_grammar.h), as a mask the Sampler applies to the logits.
//
// TokenVocabulary holds every token's bytes as they appear in the generated text (a
// SentencePiece piece with U+2581 as a space, a byte-fallback piece <0xNN> as its byte; control,
// unknown and padding ids have none and are never allowed) in a trie, built once per model.
// TokenConstraint walks the trie with the JsonMatcher from the current state, depth first,
// skipping a whole subtree at the first byte the grammar refuses (the xgrammar / llama.cpp
// approach): a token is allowed when all its bytes are accepted in sequence, a stop token (eos)
// only where the text is a complete value. The mask of a state is cached by the state's key, so
// a long string or a repeated structure costs one walk per distinct state.
//
// Thread-safety: TokenVocabulary is immutable (share it). A TokenConstraint is
// thread-compatible; copies (the choices of one request) share its mask cache, so they must be
// used from one thread (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/sampling/json_grammar.h"

namespace abcd {

class TokenVocabulary {
 public:
  // token_bytes[id]: the id's text bytes ("" = never allowed under a constraint); stop_ids:
  // the end-of-sequence ids (allowed where the value is complete).
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids);

  int vocab_size() const { return static_cast<int>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  std::span<const int32_t> stop_ids() const { return stop_ids_; }
  bool IsStop(int32_t id) const;

  // The trie in preorder: node 0 is the root (no byte); a node's subtree ends at `skip`.
  struct TrieNode {
    uint8_t byte = 0;
    uint16_t depth = 0;
    int32_t skip = 0;
    int32_t tokens_begin = 0;  // ids whose bytes end at this node: token_ids()[begin, end)
    int32_t tokens_end = 0;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  std::span<const int32_t> token_ids() const { return token_ids_; }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
};

// A set of token ids as bits (bit id % 64 of word id / 64).
struct TokenMask {
  std::vector<uint64_t> bits;
  int allowed = 0;  // how many ids are set
  bool Allows(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) / 64 < bits.size() &&
           ((bits[id / 64] >> (id % 64)) & 1);
  }
};

class TokenConstraint {
 public:
  // allow_stop false: stop ids are never allowed (ignore_eos); the value still ends the output.
  TokenConstraint(std::shared_ptr<const JsonGrammar> grammar,
                  std::shared_ptr<const TokenVocabulary> vocabulary, bool allow_stop = true);

  // The ids allowed next (computed once per distinct state).
  const TokenMask& Allowed();
  // Takes a token: its bytes advance the state. InvalidArgument when it is not allowed.
  absl::Status Accept(int32_t token);
  // The value is complete and nothing may follow (the output ends here).
  bool complete() const { return matcher_.complete(); }
  bool accepting() const { return matcher_.accepting(); }
  // Walks the trie for the current state (no cache): the cost a cache miss has.
  TokenMask ComputeMask() const;
  // Trie walks Allowed() made (cache misses), over this constraint and its copies.
  int64_t walks() const { return cache_->walks; }

 private:
  struct Cache {
    absl::flat_hash_map<std::string, std::shared_ptr<const TokenMask>> masks;
    int64_t walks = 0;
  };
  static constexpr size_t kMaxCachedMasks = 512;

  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  bool allow_stop_;
  JsonMatcher matcher_;
  std::shared_ptr<const TokenMask> current_;  // the mask of matcher_'s state, once computed
  std::shared_ptr<Cache> cache_;
};

}  // namespace abcd
