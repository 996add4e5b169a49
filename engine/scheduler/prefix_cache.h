// Snapshots of sequence states keyed by the exact token prefix they have folded, in a radix
// (compressed) tree over token ids, under a byte budget with LRU eviction over leaves. Not
// thread-safe: the engine thread owns it.
//
// Bytes: every snapshot's size plus 4 bytes per token stored on the tree's edges (a token shared
// by several prefixes is stored once).
// Two kinds of snapshot: kPrompt (a prompt prefix: where prompts diverge, or a prompt's end
// minus its last token, which an exact repeat restores) and kSpeculative (a request's final
// state after its sampled continuation: hit only by a client that resends that continuation
// verbatim, as chat clients do). Speculative snapshots hold at most budget / kSpeculativeShare
// bytes (the least recently used go first) and are evicted before any prompt snapshot; one that
// a Lookup hits becomes a prompt snapshot (its continuation did come back).
// Eviction (after Insert only): while bytes() > budget, drop the least recently used
// speculative snapshot, else the least recently used *leaf* snapshot, one with no other
// snapshot below it in the tree (Lookup hits and Inserts make a snapshot recently used). An inner
// snapshot (a shared prefix) therefore outlives every longer snapshot below it; it becomes a leaf,
// and evictable, once those are gone. Since the deepest snapshot of any path is always a leaf,
// eviction can always proceed while a snapshot remains. Pending marks are never evicted: their
// nodes (and the tokens on their path) stay until the last ClearPending, even when that keeps
// bytes() above the budget with no snapshot left. Nodes left with no snapshot, no pending mark and
// no children are pruned, and a node left with one child and nothing of its own is merged into it,
// so the tree stays compressed. The prefixes of the last kMaxGhosts evicted snapshots are
// remembered as 64-bit hashes (8 bytes each, not counted in bytes()), so a Lookup can tell tokens
// that were cached and evicted from tokens no snapshot ever held (Match::evicted,
// PrefixCacheCounters).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace abcd {

enum class SnapshotKind { kPrompt, kSpeculative };

class PrefixCache {
 public:
  static constexpr int64_t kSpeculativeShare = 8;  // speculative bytes <= budget / this
  static constexpr size_t kMaxGhosts = 8192;

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
    // Longest L in (cached, tokens.size()) whose snapshot was evicted (remembered), else 0.
    int64_t evicted = 0;
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
  // empty prefix stores nothing (a snapshot of nothing saves no work). A speculative snapshot
  // never replaces a prompt snapshot of the same prefix (that one is only marked used).
  // An evicted or replaced snapshot that nothing else held, kept for the next snapshot to be
  // written into (StatePool::Snapshot's buffer): blobs of megabytes then reuse memory that is
  // already mapped instead of faulting in fresh pages on the engine thread. At most one is
  // kept, the largest; not counted in bytes(). Empty when there is none.
  std::string TakeRecycled() { return std::exchange(recycled_, std::string()); }
  void Insert(std::span<const int32_t> prefix, std::string snapshot,
              SnapshotKind kind = SnapshotKind::kPrompt);

  int64_t budget_bytes() const { return budget_bytes_; }
  int64_t bytes() const { return bytes_; }             // snapshots + the tree's token storage
  int64_t entries() const { return entries_; }         // stored snapshots
  int64_t queried_tokens() const { return queried_; }  // cumulative
  int64_t hit_tokens() const { return hit_; }          // cumulative
  int64_t evictions() const { return evictions_; }     // cumulative
  int64_t speculative_bytes() const { return speculative_bytes_; }  // snapshot bytes only

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
    bool speculative = false;     // the snapshot is SnapshotKind::kSpeculative
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
  // Evicts `node`'s snapshot, remembering its prefix's hash.
  void Evict(Node* node);
  void Remember(uint64_t prefix_hash);

  int64_t budget_bytes_;
  int64_t bytes_ = 0;
  int64_t entries_ = 0;
  int64_t queried_ = 0;
  int64_t hit_ = 0;
  int64_t evictions_ = 0;
  uint64_t tick_ = 0;
  std::unique_ptr<Node> root_;
  // Keeps `snapshot`'s storage as recycled_ when nothing else holds it (and it is larger).
  void Recycle(std::shared_ptr<const std::string> snapshot);
  std::string recycled_;
  std::set<std::pair<uint64_t, Node*>> leaves_;       // evictable prompt snapshots by last use
  std::set<std::pair<uint64_t, Node*>> speculative_;  // speculative snapshots by last use
  int64_t speculative_bytes_ = 0;
  absl::flat_hash_set<uint64_t> ghosts_;  // hashes of evicted snapshots' prefixes
  std::deque<uint64_t> ghost_order_;      // oldest first
};

// Why prompt tokens were or were not restored, summed over admitted requests' lookups.
// Outcomes: kHit (all but the last token restored), kPartial (some), kEvicted (none, but a
// snapshot covering some had been evicted), kMiss (none ever cached). Miss reasons: evicted
// (tokens an evicted snapshot covered beyond what was restored), not_cached (tokens no snapshot
// held) and last_token (the prompt's last token, always fed: its logits are the first
// sample's). hit_tokens + the three miss counts == queried tokens.
struct PrefixCacheCounters {
  enum Outcome { kHit, kPartial, kEvicted, kMiss, kOutcomes };
  static const char* OutcomeName(int outcome);  // "hit", "partial", "evicted", "miss"
  int64_t lookups[kOutcomes] = {};
  int64_t queried_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t miss_evicted_tokens = 0;
  int64_t miss_not_cached_tokens = 0;
  int64_t miss_last_tokens = 0;
  // Counts one lookup of a `prompt_tokens`-token prompt that restored `match.cached`.
  void Count(const PrefixCache::Match& match, int64_t prompt_tokens);
};

}  // namespace abcd
