#include "engine/scheduler/prefix_cache.h"

#include <algorithm>

namespace abcd {
namespace {

constexpr int64_t kTokenBytes = static_cast<int64_t>(sizeof(int32_t));

// Tokens `edge` and `tokens[from, ...)` have in common, from the start of the edge.
size_t CommonLength(const std::vector<int32_t>& edge, std::span<const int32_t> tokens,
                    size_t from) {
  const size_t limit = std::min(edge.size(), tokens.size() - from);
  size_t n = 0;
  while (n < limit && edge[n] == tokens[from + n]) ++n;
  return n;
}

// A running hash of a token prefix (FNV-1a over 32-bit tokens) and the key of the prefix it
// has covered, mixed with its length.
constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;
uint64_t HashStep(uint64_t hash, int32_t token) {
  return (hash ^ static_cast<uint32_t>(token)) * 0x100000001b3ull;
}
uint64_t PrefixKey(uint64_t hash, size_t length) {
  uint64_t x = hash ^ (static_cast<uint64_t>(length) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

}  // namespace

PrefixCache::PrefixCache(int64_t budget_bytes)
    : budget_bytes_(std::max<int64_t>(budget_bytes, 0)), root_(std::make_unique<Node>()) {}

PrefixCache::~PrefixCache() {
  // Iteratively: a long chain of nodes would overflow the stack in recursive destructors.
  std::vector<std::unique_ptr<Node>> doomed;
  doomed.push_back(std::move(root_));
  while (!doomed.empty()) {
    std::unique_ptr<Node> node = std::move(doomed.back());
    doomed.pop_back();
    for (auto& [token, child] : node->children) doomed.push_back(std::move(child));
  }
}

void PrefixCache::Unlist(Node* node) {
  leaves_.erase({node->last_used, node});
  speculative_.erase({node->last_used, node});
}

void PrefixCache::Relist(Node* node) {
  if (node->snapshot == nullptr) return;
  if (node->speculative) {
    speculative_.insert({node->last_used, node});
  } else if (node->snapshots_below == 0) {
    leaves_.insert({node->last_used, node});
  }
}

void PrefixCache::Touch(Node* node) {
  Unlist(node);
  node->last_used = ++tick_;
  Relist(node);
}

PrefixCache::Match PrefixCache::Lookup(std::span<const int32_t> tokens) {
  Match match;
  if (budget_bytes_ == 0) return match;
  const int64_t size = static_cast<int64_t>(tokens.size());
  Node* node = root_.get();
  Node* hit = nullptr;
  size_t at = 0;
  while (at < tokens.size()) {
    const auto it = node->children.find(tokens[at]);
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const size_t common = CommonLength(child->edge, tokens, at);
    at += common;
    if (common < child->edge.size()) break;  // ends or diverges inside the edge
    node = child;
    if (node->depth < size) {
      if (node->snapshot != nullptr) hit = node;
      if (node->pending > 0) match.pending = node->depth;
    }
  }
  match.shared = static_cast<int64_t>(at);
  queried_ += size;
  if (hit != nullptr) {
    match.cached = hit->depth;
    match.snapshot = hit->snapshot;
    hit_ += hit->depth;
    if (hit->speculative) {  // its continuation came back: keep it like a prompt snapshot
      Unlist(hit);
      hit->speculative = false;
      speculative_bytes_ -= static_cast<int64_t>(hit->snapshot->size());
    }
    Touch(hit);
  }
  if (!ghosts_.empty()) {
    uint64_t hash = kHashSeed;
    for (size_t length = 1; length < tokens.size(); ++length) {
      hash = HashStep(hash, tokens[length - 1]);
      if (static_cast<int64_t>(length) > match.cached &&
          ghosts_.contains(PrefixKey(hash, length))) {
        match.evicted = static_cast<int64_t>(length);
      }
    }
  }
  return match;
}

PrefixCache::Node* PrefixCache::Find(std::span<const int32_t> prefix) const {
  Node* node = root_.get();
  size_t at = 0;
  while (at < prefix.size()) {
    const auto it = node->children.find(prefix[at]);
    if (it == node->children.end()) return nullptr;
    Node* child = it->second.get();
    const size_t common = CommonLength(child->edge, prefix, at);
    if (common < child->edge.size()) return nullptr;
    at += common;
    node = child;
  }
  return node;
}

PrefixCache::Node* PrefixCache::Split(Node* node, size_t keep) {
  Node* parent = node->parent;
  auto middle = std::make_unique<Node>();
  middle->edge.assign(node->edge.begin(), node->edge.begin() + static_cast<ptrdiff_t>(keep));
  middle->depth = node->depth - static_cast<int64_t>(node->edge.size() - keep);
  middle->parent = parent;
  middle->snapshots_below = node->snapshots_below + (node->snapshot != nullptr ? 1 : 0);
  std::unique_ptr<Node>& slot = parent->children[node->edge.front()];
  std::unique_ptr<Node> moved = std::move(slot);
  moved->edge.erase(moved->edge.begin(), moved->edge.begin() + static_cast<ptrdiff_t>(keep));
  moved->parent = middle.get();
  const int32_t first = moved->edge.front();
  middle->children.emplace(first, std::move(moved));
  Node* result = middle.get();
  slot = std::move(middle);
  return result;  // no tokens added: the edge's tokens are now on two nodes
}

PrefixCache::Node* PrefixCache::FindOrCreate(std::span<const int32_t> prefix) {
  Node* node = root_.get();
  size_t at = 0;
  while (at < prefix.size()) {
    const auto it = node->children.find(prefix[at]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge.assign(prefix.begin() + static_cast<ptrdiff_t>(at), prefix.end());
      leaf->depth = static_cast<int64_t>(prefix.size());
      leaf->parent = node;
      bytes_ += kTokenBytes * static_cast<int64_t>(leaf->edge.size());
      Node* result = leaf.get();
      node->children.emplace(prefix[at], std::move(leaf));
      return result;
    }
    Node* child = it->second.get();
    const size_t common = CommonLength(child->edge, prefix, at);
    if (common < child->edge.size()) child = Split(child, common);
    at += common;
    node = child;
  }
  return node;
}

void PrefixCache::Recycle(std::shared_ptr<const std::string> snapshot) {
  if (snapshot.use_count() != 1 || snapshot->capacity() <= recycled_.capacity()) return;
  // Every snapshot here was made as a mutable string (Insert), and this is its last owner.
  recycled_ = std::move(*std::const_pointer_cast<std::string>(snapshot));
}

void PrefixCache::SetSnapshot(Node* node, std::shared_ptr<const std::string> snapshot) {
  Unlist(node);
  if (node->snapshot != nullptr) {
    bytes_ -= static_cast<int64_t>(node->snapshot->size());
    if (node->speculative) speculative_bytes_ -= static_cast<int64_t>(node->snapshot->size());
    Recycle(std::move(node->snapshot));
  } else {
    ++entries_;
    for (Node* up = node->parent; up != nullptr; up = up->parent) {
      leaves_.erase({up->last_used, up});  // no longer a leaf (a speculative one stays listed)
      ++up->snapshots_below;
    }
  }
  bytes_ += static_cast<int64_t>(snapshot->size());
  node->snapshot = std::move(snapshot);
  node->last_used = ++tick_;
  Relist(node);
}

void PrefixCache::DropSnapshot(Node* node) {
  Unlist(node);
  bytes_ -= static_cast<int64_t>(node->snapshot->size());
  if (node->speculative) speculative_bytes_ -= static_cast<int64_t>(node->snapshot->size());
  node->speculative = false;
  Recycle(std::move(node->snapshot));
  node->snapshot.reset();
  --entries_;
  for (Node* up = node->parent; up != nullptr; up = up->parent) {
    --up->snapshots_below;
    Relist(up);
  }
}

void PrefixCache::Compact(Node* node) {
  while (node != root_.get() && node->snapshot == nullptr && node->pending == 0 &&
         node->children.size() <= 1) {
    Node* parent = node->parent;
    std::unique_ptr<Node>& slot = parent->children[node->edge.front()];
    if (node->children.empty()) {
      bytes_ -= kTokenBytes * static_cast<int64_t>(node->edge.size());
      parent->children.erase(node->edge.front());  // destroys `node`
      node = parent;
      continue;
    }
    // One child: it takes this node's place with the two edges joined (no tokens change).
    std::unique_ptr<Node> child = std::move(node->children.begin()->second);
    child->edge.insert(child->edge.begin(), node->edge.begin(), node->edge.end());
    child->parent = parent;
    slot = std::move(child);  // destroys `node`
    return;
  }
}

void PrefixCache::MarkPending(std::span<const int32_t> prefix) {
  if (budget_bytes_ == 0 || prefix.empty()) return;
  ++FindOrCreate(prefix)->pending;
}

void PrefixCache::ClearPending(std::span<const int32_t> prefix) {
  if (budget_bytes_ == 0 || prefix.empty()) return;
  Node* node = Find(prefix);
  if (node == nullptr || node->pending == 0) return;
  if (--node->pending == 0) Compact(node);
}

void PrefixCache::Remember(uint64_t prefix_hash) {
  if (!ghosts_.insert(prefix_hash).second) return;
  ghost_order_.push_back(prefix_hash);
  if (ghost_order_.size() > kMaxGhosts) {
    ghosts_.erase(ghost_order_.front());
    ghost_order_.pop_front();
  }
}

void PrefixCache::Evict(Node* node) {
  std::vector<const Node*> path;
  for (const Node* up = node; up != root_.get(); up = up->parent) path.push_back(up);
  uint64_t hash = kHashSeed;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    for (int32_t token : (*it)->edge) hash = HashStep(hash, token);
  }
  Remember(PrefixKey(hash, static_cast<size_t>(node->depth)));
  DropSnapshot(node);
  ++evictions_;
  Compact(node);
}

void PrefixCache::Insert(std::span<const int32_t> prefix, std::string snapshot, SnapshotKind kind) {
  if (budget_bytes_ == 0 || prefix.empty()) return;
  const int64_t size = static_cast<int64_t>(snapshot.size());
  const bool speculative = kind == SnapshotKind::kSpeculative;
  const int64_t alone = size + kTokenBytes * static_cast<int64_t>(prefix.size());
  if (alone > budget_bytes_ || (speculative && size > budget_bytes_ / kSpeculativeShare)) return;
  Node* node = FindOrCreate(prefix);
  if (speculative && node->snapshot != nullptr && !node->speculative) {
    Touch(node);
    return;
  }
  SetSnapshot(node, std::make_shared<std::string>(std::move(snapshot)));
  if (speculative) {
    Unlist(node);
    node->speculative = true;
    speculative_bytes_ += size;
    Relist(node);
  }
  while (speculative_bytes_ > budget_bytes_ / kSpeculativeShare && !speculative_.empty()) {
    Evict(speculative_.begin()->second);
  }
  while (bytes_ > budget_bytes_ && !(speculative_.empty() && leaves_.empty())) {
    Evict((speculative_.empty() ? leaves_ : speculative_).begin()->second);
  }
}

const char* PrefixCacheCounters::OutcomeName(int outcome) {
  static constexpr const char* kNames[kOutcomes] = {"hit", "partial", "evicted", "miss"};
  return outcome >= 0 && outcome < kOutcomes ? kNames[outcome] : "miss";
}

void PrefixCacheCounters::Count(const PrefixCache::Match& match, int64_t prompt_tokens) {
  if (prompt_tokens <= 0) return;
  const int64_t reusable = prompt_tokens - 1;  // the last token is always fed
  const int64_t cached = std::min(match.cached, reusable);
  const int64_t evicted = std::clamp<int64_t>(match.evicted, cached, reusable);
  queried_tokens += prompt_tokens;
  hit_tokens += cached;
  miss_evicted_tokens += evicted - cached;
  miss_not_cached_tokens += reusable - evicted;
  miss_last_tokens += 1;
  const int outcome = cached > 0 && cached == reusable ? kHit
                      : cached > 0                     ? kPartial
                      : evicted > 0                    ? kEvicted
                                                       : kMiss;
  ++lookups[outcome];
}

}  // namespace abcd
