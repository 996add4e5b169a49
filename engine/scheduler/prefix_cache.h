// Snapshots of sequence states keyed by the exact token prefix they have folded, in a radix
// (compressed) tree over token ids, under a byte budget with LRU eviction over leaves. Not
// thread-safe: the engine thread owns it.
//
// Bytes: every snapshot's size plus 4 bytes per token stored on the tree's edges (a token shared
// by several prefixes is stored once).
// Eviction (after Insert only): while bytes() > budget, drop the least recently used *leaf*
// snapshot, one with no other snapshot below it in the tree (Lookup hits and Inserts make a
// snapshot recently used). An inner snapshot (a shared prefix) therefore outlives every longer
// snapshot below it; it becomes a leaf, and evictable, once those are gone. Since the deepest
// snapshot of any path is always a leaf, eviction can always proceed while a snapshot remains.
// Pending marks are never evicted: their nodes (and the tokens on their path) stay until the
// last ClearPending, even when that keeps bytes() above the budget with no snapshot left.
// Nodes left with no snapshot, no pending mark and no children are pruned, and a node left
// with one child and nothing of its own is merged into it, so the tree stays compressed.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace abcd {

class PrefixCache {
 public:
  // 0 (or less) disables: Lookup finds nothing, Insert stores nothing.
  explicit PrefixCache(int64_t budget_bytes);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Match {
    int64_t cached = 0;  // longest L < tokens.size() with a snapshot of tokens[0, L) (0: none)
    std::shared_ptr<const std::string> snapshot;  // that snapshot (null when cached == 0)
    int64_t shared = 0;   // longest common prefix of `tokens` with any path in the tree
    int64_t pending = 0;  // longest L < tokens.size() with a pending mark (0: none)
  };
  // Looks up a whole prompt. A snapshot is usable only strictly inside the prompt (at least one
  // token must remain to be fed for the next-token logits). Counts queried (tokens.size()) and
  // hit (cached) tokens; marks the hit node used (LRU). O(tokens.size()). A disabled cache
  // answers an empty Match and counts nothing.
  Match Lookup(std::span<const int32_t> tokens);
  // `prefix` will get a snapshot soon (a running request is prefilling up to there): later
  // Lookups report it as pending so that their requests can wait for it instead of prefilling
  // the same tokens. Marks are counted (two producers, two Clears). ClearPending of a prefix
  // without a mark is ignored; so are empty prefixes, and both calls on a disabled cache.
  void MarkPending(std::span<const int32_t> prefix);
  void ClearPending(std::span<const int32_t> prefix);
  // Stores the state after `prefix` (replacing any older snapshot there), then evicts least
  // recently used leaves until bytes() <= budget. A snapshot that cannot fit even alone
  // (snapshot size + 4 * prefix.size() > budget) is dropped, leaving any older one in place. An
  // empty prefix stores nothing (a snapshot of nothing saves no work).
  void Insert(std::span<const int32_t> prefix, std::string snapshot);

  int64_t budget_bytes() const { return budget_bytes_; }
  int64_t bytes() const { return bytes_; }             // snapshots + the tree's token storage
  int64_t entries() const { return entries_; }         // stored snapshots
  int64_t queried_tokens() const { return queried_; }  // cumulative
  int64_t hit_tokens() const { return hit_; }          // cumulative
  int64_t evictions() const { return evictions_; }     // cumulative

 private:
  struct Node {
    std::vector<int32_t> edge;  // tokens from the parent to here (empty only at the root)
    int64_t depth = 0;          // tokens from the root to here
    Node* parent = nullptr;
    absl::flat_hash_map<int32_t, std::unique_ptr<Node>> children;  // by first edge token
    std::shared_ptr<const std::string> snapshot;
    int64_t pending = 0;          // outstanding MarkPending calls
    int64_t snapshots_below = 0;  // snapshots in the subtree, this node excluded
    uint64_t last_used = 0;       // LRU tick of the snapshot
  };

  // The node whose path is exactly `prefix`, splitting an edge or adding a leaf as needed.
  Node* FindOrCreate(std::span<const int32_t> prefix);
  // The node whose path is exactly `prefix`, or null.
  Node* Find(std::span<const int32_t> prefix) const;
  // Splits `node`'s edge after `keep` tokens; returns the new node in between.
  Node* Split(Node* node, size_t keep);
  void SetSnapshot(Node* node, std::shared_ptr<const std::string> snapshot);
  void DropSnapshot(Node* node);
  void Touch(Node* node);
  // Prunes or merges `node` and its ancestors that hold nothing of their own.
  void Compact(Node* node);
  // Leaf-set membership: a node with a snapshot and no snapshot below.
  void Unlist(Node* node);
  void Relist(Node* node);

  int64_t budget_bytes_;
  int64_t bytes_ = 0;
  int64_t entries_ = 0;
  int64_t queried_ = 0;
  int64_t hit_ = 0;
  int64_t evictions_ = 0;
  uint64_t tick_ = 0;
  std::unique_ptr<Node> root_;
  std::set<std::pair<uint64_t, Node*>> leaves_;  // evictable snapshots by last use
};

}  // namespace abcd
