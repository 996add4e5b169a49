// The tokenizer.json BPE model: vocab, merges (both "a b" strings and ["a", "b"] pairs),
// byte_fallback (<0xNN> pieces), unk_token and fuse_unk, ignore_merges. dropout (other than
// 0/null), continuing_subword_prefix and end_of_word_suffix are refused at load naming the
// field. Merging is Hugging Face's: the lowest-ranked pair present, leftmost first, until none
// is left. Immutable after Parse; Tokenize is thread-safe (a per-thread word cache) with a
// Scratch of the calling thread's own.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/hf_json.h"

namespace abcd::hf {

class BpeModel {
 public:
  // `spec` is tokenizer.json's "model" at `field`.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Parse(const json& spec,
                                                         const std::string& field);

  // What merging a word works in, kept from word to word by one Encode call so that merging
  // allocates only when a word is longer than any before it. Not thread-safe: one per call.
  class Scratch {
   private:
    friend class BpeModel;
    struct Symbol {
      int32_t id;
      int32_t prev;  // index, -1 none
      int32_t next;  // index, -1 none
      bool removed;
    };
    struct Merge {
      int32_t rank;
      int32_t pos;
      int32_t new_id;
      int32_t left, right;  // the pair's ids when queued
      // A max-heap (std::push_heap) pops the largest: the lowest rank, then the leftmost.
      bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Symbol> symbols;
    std::vector<Merge> queue;  // a heap
  };

  // Appends the ids of one pre-tokenized word. An error only where a character is unknown and
  // the unk_token the file names is not in the vocab.
  absl::Status Tokenize(absl::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const;

  // The vocab's token for `id`, or nullptr where no token has it.
  const std::string* IdToToken(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() && has_token_[id] ? &tokens_[id]
                                                                                 : nullptr;
  }
  // -1 where `token` is not in the vocab.
  int32_t TokenToId(absl::string_view token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  // One past the largest id.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  BpeModel() = default;
  absl::Status MergeWord(absl::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;  // by id
  std::vector<bool> has_token_;
  // (left id << 32 | right id) -> (rank, merged id)
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<int32_t> byte_ids_;        // <0xNN> ids for byte_fallback, -1 where absent
  std::array<int32_t, 0x80> ascii_ids_;  // the id of each one-byte (ASCII) token, -1 if none
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::string unk_token_;  // empty: none
  int32_t unk_id_ = -1;
  uint64_t cache_key_ = 0;  // identifies this model in the per-thread caches
};

}  // namespace abcd::hf
