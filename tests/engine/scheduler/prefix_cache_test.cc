// PrefixCache: exact positions, edges split on divergence, shared/pending reporting, LRU
// eviction over leaves under the budget, oversize snapshots dropped, counters, the disabled
// cache, speculative snapshots (capped, evicted first, promoted by a hit), evicted prefixes
// and miss reasons, and a randomized comparison with a brute-force model.
#include "engine/scheduler/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace abcd {
namespace {

using Tokens = std::vector<int32_t>;

Tokens Range(int32_t from, int32_t count) {
  Tokens tokens(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) tokens[static_cast<size_t>(i)] = from + i;
  return tokens;
}

Tokens Concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCache, FindsSnapshotsOnlyStrictlyInsideThePrompt) {
  PrefixCache cache(1 << 20);
  const Tokens five = Range(10, 5);
  cache.Insert(five, "state@5");
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), 7 + 5 * 4);

  PrefixCache::Match six = cache.Lookup(Concat(five, {99}));
  EXPECT_EQ(six.cached, 5);
  ASSERT_NE(six.snapshot, nullptr);
  EXPECT_EQ(*six.snapshot, "state@5");
  EXPECT_EQ(six.shared, 5);
  EXPECT_EQ(six.pending, 0);

  // The whole prompt cached leaves nothing to feed for the next-token logits: no hit.
  PrefixCache::Match same = cache.Lookup(five);
  EXPECT_EQ(same.cached, 0);
  EXPECT_EQ(same.snapshot, nullptr);
  EXPECT_EQ(same.shared, 5);

  // Longer prompts still hit at 5; shorter ones share but do not hit.
  EXPECT_EQ(cache.Lookup(Concat(five, Range(50, 20))).cached, 5);
  const PrefixCache::Match shorter = cache.Lookup(Range(10, 3));
  EXPECT_EQ(shorter.cached, 0);
  EXPECT_EQ(shorter.shared, 3);
  const PrefixCache::Match other = cache.Lookup(Range(11, 8));
  EXPECT_EQ(other.cached, 0);
  EXPECT_EQ(other.shared, 0);
  EXPECT_EQ(cache.Lookup({}).shared, 0);
}

TEST(PrefixCache, SplitsEdgesWhereAPrefixEndsOrDiverges) {
  PrefixCache cache(1 << 20);
  const Tokens long_path = Range(0, 10);
  cache.Insert(long_path, "L10");
  // Diverges inside the edge at 4: the edge splits, token storage grows by the new branch only.
  const Tokens branch = Concat(Range(0, 4), {77, 78});
  cache.Insert(branch, "B6");
  EXPECT_EQ(cache.bytes(), 3 + 2 + (10 + 2) * 4);
  // Ends inside the edge at 7: a snapshot in the middle of the path.
  cache.Insert(Range(0, 7), "M7");
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.bytes(), 3 + 2 + 2 + 12 * 4);

  EXPECT_EQ(cache.Lookup(Concat(Range(0, 4), {77, 78, 79})).cached, 6);
  EXPECT_EQ(*cache.Lookup(Concat(Range(0, 4), {77, 78, 79})).snapshot, "B6");
  EXPECT_EQ(cache.Lookup(Range(0, 9)).cached, 7);
  EXPECT_EQ(cache.Lookup(Range(0, 11)).cached, 10);
  // A prompt diverging at 4 (neither branch) shares 4 tokens and has no snapshot there.
  const PrefixCache::Match diverged = cache.Lookup(Concat(Range(0, 4), {50, 51}));
  EXPECT_EQ(diverged.shared, 4);
  EXPECT_EQ(diverged.cached, 0);
  // Diverging inside an edge below the snapshot at 7 finds it.
  const PrefixCache::Match inside = cache.Lookup(Concat(Range(0, 8), {60}));
  EXPECT_EQ(inside.shared, 8);
  EXPECT_EQ(inside.cached, 7);
  // Replacing a snapshot changes its bytes, not the entry count.
  cache.Insert(Range(0, 7), "M7-longer");
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.bytes(), 3 + 2 + 9 + 12 * 4);
  EXPECT_EQ(*cache.Lookup(Range(0, 8)).snapshot, "M7-longer");
}

TEST(PrefixCache, ReportsPendingMarksCountedAndPruned) {
  PrefixCache cache(1 << 20);
  const Tokens prefix = Range(0, 6);
  cache.MarkPending(prefix);
  cache.MarkPending(prefix);  // two producers
  EXPECT_EQ(cache.bytes(), 6 * 4);
  EXPECT_EQ(cache.entries(), 0);
  PrefixCache::Match match = cache.Lookup(Range(0, 9));
  EXPECT_EQ(match.pending, 6);
  EXPECT_EQ(match.shared, 9 > 6 ? 6 : 9);
  EXPECT_EQ(match.cached, 0);
  EXPECT_EQ(cache.Lookup(prefix).pending, 0);  // strictly inside the prompt only
  EXPECT_EQ(cache.Lookup(Range(0, 4)).shared, 4);

  cache.ClearPending(prefix);
  EXPECT_EQ(cache.Lookup(Range(0, 9)).pending, 6);  // one mark left
  cache.ClearPending(Range(0, 5));                  // never marked: ignored
  EXPECT_EQ(cache.Lookup(Range(0, 9)).pending, 6);
  cache.ClearPending(prefix);
  match = cache.Lookup(Range(0, 9));
  EXPECT_EQ(match.pending, 0);
  EXPECT_EQ(match.shared, 0);  // the path was pruned
  EXPECT_EQ(cache.bytes(), 0);
  cache.ClearPending(prefix);  // extra clear: ignored
  EXPECT_EQ(cache.bytes(), 0);

  // A pending mark below a snapshot: both reported; the snapshot outlives the mark.
  cache.Insert(Range(0, 3), "S3");
  cache.MarkPending(Range(0, 8));
  match = cache.Lookup(Range(0, 10));
  EXPECT_EQ(match.cached, 3);
  EXPECT_EQ(match.pending, 8);
  cache.ClearPending(Range(0, 8));
  EXPECT_EQ(cache.bytes(), 2 + 3 * 4);
  EXPECT_EQ(cache.Lookup(Range(0, 10)).shared, 3);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesUnderTheBudget) {
  // Each entry: a 100-byte snapshot on its own 5-token branch (20 bytes) = 120 bytes.
  PrefixCache cache(3 * 120);
  const std::string state(100, 's');
  const Tokens a = Range(100, 5), b = Range(200, 5), c = Range(300, 5), d = Range(400, 5);
  cache.Insert(a, state);
  cache.Insert(b, state);
  cache.Insert(c, state);
  EXPECT_EQ(cache.bytes(), 360);
  EXPECT_EQ(cache.evictions(), 0);
  EXPECT_EQ(cache.Lookup(Concat(a, {1})).cached, 5);  // a is now the most recently used
  cache.Insert(d, state);                             // evicts b, the least recently used
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.bytes(), 360);
  EXPECT_EQ(cache.Lookup(Concat(b, {1})).cached, 0);
  EXPECT_EQ(cache.Lookup(Concat(b, {1})).shared, 0);  // its path went with it
  EXPECT_EQ(cache.Lookup(Concat(c, {1})).cached, 5);
  EXPECT_EQ(cache.Lookup(Concat(a, {1})).cached, 5);
  cache.Insert(b, state);  // evicts d (c and a were used since)
  EXPECT_EQ(cache.Lookup(Concat(d, {1})).cached, 0);
  EXPECT_EQ(cache.evictions(), 2);
}

// An evicted or replaced snapshot nothing else holds is kept (the largest one) for the next
// snapshot to be written into; one a Lookup's match still holds is not.
TEST(PrefixCache, RecyclesTheStorageOfSnapshotsNothingElseHolds) {
  PrefixCache cache(2 * 120);
  const Tokens a = Range(100, 5), b = Range(200, 5), c = Range(300, 5), d = Range(400, 5);
  EXPECT_TRUE(cache.TakeRecycled().empty());
  std::string state(100, 'a');
  const char* storage = state.data();
  cache.Insert(a, std::move(state));
  cache.Insert(b, std::string(100, 'b'));
  cache.Insert(c, std::string(100, 'c'));  // evicts a
  std::string recycled = cache.TakeRecycled();
  EXPECT_EQ(recycled.data(), storage);
  EXPECT_GE(recycled.capacity(), 100u);
  EXPECT_TRUE(cache.TakeRecycled().empty()) << "taken once";
  // Replacing b's snapshot recycles the old one.
  cache.Insert(b, std::string(100, 'B'));
  EXPECT_GE(cache.TakeRecycled().capacity(), 100u);
  // A snapshot a match still holds is freed by its last holder, not recycled.
  const PrefixCache::Match held = cache.Lookup(Concat(c, {1}));
  ASSERT_NE(held.snapshot, nullptr);
  cache.Insert(d, std::string(100, 'd'));  // evicts the least recently used: b
  cache.Insert(a, std::string(100, 'a'));  // evicts c, which `held` still holds
  EXPECT_EQ(cache.evictions(), 3);
  EXPECT_GE(cache.TakeRecycled().capacity(), 100u) << "b was recycled";
  EXPECT_EQ(*held.snapshot, std::string(100, 'c'));
  EXPECT_TRUE(cache.TakeRecycled().empty()) << "c was not";
}

TEST(PrefixCache, KeepsAnInnerSnapshotWhileALongerOneBelowIsCached) {
  const std::string state(100, 's');
  const Tokens inner = Range(0, 4);  // 16 bytes of tokens
  PrefixCache cache(100 + 16 + 100 + 8 + 100 + 8);
  cache.Insert(inner, state);                    // oldest
  cache.Insert(Concat(inner, {50, 51}), state);  // below it
  cache.Insert(Concat(inner, {60, 61}), state);  // below it too: exactly the budget
  EXPECT_EQ(cache.evictions(), 0);
  // Room for one more 100-byte snapshot on 2 new tokens requires evicting: the inner one is
  // the least recently used but not a leaf, so the oldest leaf goes.
  cache.Insert(Concat(inner, {70, 71}), state);
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_EQ(cache.Lookup(Concat(inner, {50, 51, 1})).cached, 4);
  EXPECT_EQ(cache.Lookup(Concat(inner, {60, 61, 1})).cached, 6);
  EXPECT_EQ(cache.Lookup(Concat(inner, {70, 71, 1})).cached, 6);
  // Once nothing longer remains below it, the inner snapshot is a leaf like any other.
  PrefixCache small(100 + 16 + 100 + 8);
  small.Insert(inner, state);
  small.Insert(Concat(inner, {50, 51}), state);
  // 208 more bytes: evicts the leaf below, then the inner snapshot, now a leaf.
  small.Insert(Range(500, 2), std::string(200, 't'));
  EXPECT_EQ(small.evictions(), 2);
  EXPECT_EQ(small.entries(), 1);
  EXPECT_EQ(small.bytes(), 208);
  EXPECT_EQ(small.Lookup(Concat(inner, {50, 51, 1})).shared, 0);
}

TEST(PrefixCache, PendingPathsAreNeverEvicted) {
  PrefixCache cache(200);
  cache.MarkPending(Range(0, 10));                   // 40 bytes that eviction cannot free
  cache.Insert(Range(0, 5), std::string(100, 's'));  // shares the pending path: 140 bytes
  EXPECT_EQ(cache.bytes(), 140);
  cache.Insert(Range(20, 5), std::string(100, 's'));  // evicts the older snapshot only
  EXPECT_EQ(cache.evictions(), 1);
  const PrefixCache::Match match = cache.Lookup(Range(0, 12));
  EXPECT_EQ(match.pending, 10);
  EXPECT_EQ(match.cached, 0);
  EXPECT_EQ(cache.bytes(), 40 + 120);
  // When the pending path leaves too little room, even the newest snapshot goes: the budget
  // holds, pending tokens stay.
  cache.Insert(Range(30, 5), std::string(150, 's'));
  EXPECT_EQ(cache.evictions(), 3);
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 40);
  EXPECT_EQ(cache.Lookup(Range(0, 12)).pending, 10);
}

TEST(PrefixCache, DropsSnapshotsBiggerThanTheBudget) {
  PrefixCache cache(100);
  cache.Insert(Range(0, 5), std::string(80, 's'));  // 100 bytes: fits exactly
  EXPECT_EQ(cache.entries(), 1);
  cache.Insert(Range(0, 5), std::string(81, 's'));  // 101: dropped, the old one stays
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), 100);
  EXPECT_EQ(cache.Lookup(Range(0, 6)).snapshot->size(), 80u);
  cache.Insert(Range(40, 5), std::string(200, 's'));
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.evictions(), 0);
  EXPECT_EQ(cache.Lookup(Range(40, 6)).shared, 0);
}

TEST(PrefixCache, CountsQueriedAndHitTokens) {
  PrefixCache cache(1 << 20);
  cache.Insert(Range(0, 4), "x");
  cache.Lookup(Range(0, 10));  // hit 4 of 10
  cache.Lookup(Range(0, 4));   // no hit
  cache.Lookup(Range(9, 3));   // no hit
  EXPECT_EQ(cache.queried_tokens(), 17);
  EXPECT_EQ(cache.hit_tokens(), 4);
  EXPECT_EQ(cache.budget_bytes(), 1 << 20);
}

TEST(PrefixCache, ZeroBudgetDisablesTheCache) {
  PrefixCache cache(0);
  cache.Insert(Range(0, 4), "x");
  cache.MarkPending(Range(0, 8));
  const PrefixCache::Match match = cache.Lookup(Range(0, 10));
  EXPECT_EQ(match.cached, 0);
  EXPECT_EQ(match.shared, 0);
  EXPECT_EQ(match.pending, 0);
  EXPECT_EQ(match.snapshot, nullptr);
  cache.ClearPending(Range(0, 8));
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(cache.queried_tokens(), 0);
}

TEST(PrefixCache, EmptyPrefixesStoreNothing) {
  PrefixCache cache(1 << 20);
  cache.Insert({}, "x");
  cache.MarkPending({});
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(cache.Lookup(Range(0, 3)).pending, 0);
}

// End-of-request (speculative) snapshots hold at most budget / kSpeculativeShare, go before
// any prompt snapshot, and become prompt snapshots once a lookup hits one.
TEST(PrefixCache, SpeculativeSnapshotsAreCappedEvictedFirstAndPromotedByAHit) {
  const std::string state(96, 's');                         // + 4 tokens * 4 bytes = 112 per entry
  PrefixCache cache(PrefixCache::kSpeculativeShare * 250);  // speculative share: 250 bytes
  const Tokens prompt = Range(0, 4);
  cache.Insert(prompt, state);  // a prompt snapshot
  for (int32_t i = 0; i < 5; ++i) {
    cache.Insert(Range(100 * (i + 1), 4), state, SnapshotKind::kSpeculative);
    EXPECT_LE(cache.speculative_bytes(), 250) << i;
  }
  EXPECT_EQ(cache.speculative_bytes(), 2 * 96);  // the two latest; three evicted
  EXPECT_EQ(cache.evictions(), 3);
  EXPECT_EQ(cache.Lookup(Concat(prompt, {1})).cached, 4);  // the prompt snapshot stayed
  EXPECT_EQ(cache.Lookup(Concat(Range(100, 4), {1})).cached, 0);
  // A hit promotes: the speculative bytes shrink and the next speculative insert keeps it.
  EXPECT_EQ(cache.Lookup(Concat(Range(400, 4), {1})).cached, 4);
  EXPECT_EQ(cache.speculative_bytes(), 96);
  cache.Insert(Range(600, 4), state, SnapshotKind::kSpeculative);
  cache.Insert(Range(700, 4), state, SnapshotKind::kSpeculative);
  EXPECT_EQ(cache.Lookup(Concat(Range(400, 4), {1})).cached, 4);
  EXPECT_EQ(cache.Lookup(Concat(Range(500, 4), {1})).cached, 0);  // speculative, evicted
  // A speculative snapshot never replaces a prompt snapshot of the same prefix.
  cache.Insert(prompt, "other", SnapshotKind::kSpeculative);
  EXPECT_EQ(*cache.Lookup(Concat(prompt, {1})).snapshot, state);

  // Under the whole budget, speculative snapshots go before older prompt snapshots.
  PrefixCache tight(PrefixCache::kSpeculativeShare * 120);
  for (int32_t i = 0; i < 7; ++i) tight.Insert(Range(10 * i, 4), state);  // 7 * 112 = 784
  tight.Insert(Range(1000, 4), state, SnapshotKind::kSpeculative);        // 896 <= 960
  tight.Insert(Range(2000, 4), state);  // 1008 > 960: the speculative one goes first
  EXPECT_EQ(tight.speculative_bytes(), 0);
  EXPECT_EQ(tight.Lookup(Concat(Range(0, 4), {1})).cached, 4);
}

// Evicted prefixes are remembered, so a lookup can tell "evicted" from "never cached"; the
// counters split every queried token into hit and missed-by-reason.
TEST(PrefixCache, ReportsEvictedPrefixesAndCountsMissesByReason) {
  PrefixCache cache(2 * (100 + 6 * 4));
  const Tokens a = Range(0, 6), b = Range(50, 6), c = Range(80, 6);
  cache.Insert(a, std::string(100, 'a'));
  cache.Insert(b, std::string(100, 'b'));
  cache.Insert(c, std::string(100, 'c'));  // evicts a
  PrefixCacheCounters counters;
  const PrefixCache::Match evicted = cache.Lookup(Concat(a, {7, 8}));
  EXPECT_EQ(evicted.cached, 0);
  EXPECT_EQ(evicted.evicted, 6);
  counters.Count(evicted, 8);
  const PrefixCache::Match hit = cache.Lookup(Concat(b, {9}));  // an exact repeat of b + 1
  EXPECT_EQ(hit.cached, 6);
  EXPECT_EQ(hit.evicted, 0);
  counters.Count(hit, 7);
  const PrefixCache::Match partial = cache.Lookup(Concat(c, {1, 2, 3}));
  counters.Count(partial, 9);
  counters.Count(cache.Lookup(Range(300, 5)), 5);  // never seen
  EXPECT_EQ(counters.lookups[PrefixCacheCounters::kEvicted], 1);
  EXPECT_EQ(counters.lookups[PrefixCacheCounters::kHit], 1);
  EXPECT_EQ(counters.lookups[PrefixCacheCounters::kPartial], 1);
  EXPECT_EQ(counters.lookups[PrefixCacheCounters::kMiss], 1);
  EXPECT_EQ(counters.queried_tokens, 8 + 7 + 9 + 5);
  EXPECT_EQ(counters.hit_tokens, 6 + 6);
  EXPECT_EQ(counters.miss_evicted_tokens, 6);
  EXPECT_EQ(counters.miss_last_tokens, 4);
  EXPECT_EQ(counters.miss_not_cached_tokens, 1 + 0 + 2 + 4);
  EXPECT_EQ(counters.hit_tokens + counters.miss_evicted_tokens + counters.miss_not_cached_tokens +
                counters.miss_last_tokens,
            counters.queried_tokens);
  EXPECT_STREQ(PrefixCacheCounters::OutcomeName(PrefixCacheCounters::kEvicted), "evicted");
}

// The cache's contract, by brute force: snapshots and pending counts in maps keyed by prefix,
// LRU ticks, eviction of the least recently used snapshot with no snapshot extending it.
class Model {
 public:
  explicit Model(int64_t budget) : budget_(budget) {}

  PrefixCache::Match Lookup(const Tokens& tokens) {
    PrefixCache::Match match;
    for (const auto& [key, value] : snapshots_) {
      if (key.size() < tokens.size() && IsPrefix(key, tokens) &&
          static_cast<int64_t>(key.size()) > match.cached) {
        match.cached = static_cast<int64_t>(key.size());
        match.snapshot = std::make_shared<const std::string>(value.first);
      }
    }
    for (const auto& [key, count] : pending_) {
      if (key.size() < tokens.size() && IsPrefix(key, tokens)) {
        match.pending = std::max<int64_t>(match.pending, static_cast<int64_t>(key.size()));
      }
    }
    for (const Tokens& key : Paths()) {
      size_t common = 0;
      while (common < key.size() && common < tokens.size() && key[common] == tokens[common]) {
        ++common;
      }
      match.shared = std::max<int64_t>(match.shared, static_cast<int64_t>(common));
    }
    queried_ += static_cast<int64_t>(tokens.size());
    if (match.cached > 0) {
      hit_ += match.cached;
      snapshots_[Tokens(tokens.begin(), tokens.begin() + match.cached)].second = ++tick_;
    }
    return match;
  }
  void MarkPending(const Tokens& prefix) {
    if (!prefix.empty()) ++pending_[prefix];
  }
  void ClearPending(const Tokens& prefix) {
    const auto it = pending_.find(prefix);
    if (it != pending_.end() && --it->second == 0) pending_.erase(it);
  }
  void Insert(const Tokens& prefix, const std::string& snapshot) {
    if (prefix.empty() || static_cast<int64_t>(snapshot.size() + 4 * prefix.size()) > budget_) {
      return;
    }
    snapshots_[prefix] = {snapshot, ++tick_};
    while (Bytes() > budget_ && !snapshots_.empty()) {
      auto victim = snapshots_.end();
      for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it) {
        bool leaf = true;
        for (const auto& [other, value] : snapshots_) {
          if (other.size() > it->first.size() && IsPrefix(it->first, other)) leaf = false;
        }
        if (leaf && (victim == snapshots_.end() || it->second.second < victim->second.second)) {
          victim = it;
        }
      }
      snapshots_.erase(victim);
      ++evictions_;
    }
  }
  int64_t Bytes() const {
    std::set<Tokens> prefixes;
    for (const Tokens& key : Paths()) {
      for (size_t n = 1; n <= key.size(); ++n)
        prefixes.insert(Tokens(key.begin(), key.begin() + n));
    }
    int64_t bytes = 4 * static_cast<int64_t>(prefixes.size());
    for (const auto& [key, value] : snapshots_) bytes += static_cast<int64_t>(value.first.size());
    return bytes;
  }
  int64_t entries() const { return static_cast<int64_t>(snapshots_.size()); }
  int64_t queried() const { return queried_; }
  int64_t hit() const { return hit_; }
  int64_t evictions() const { return evictions_; }

 private:
  static bool IsPrefix(const Tokens& prefix, const Tokens& tokens) {
    return prefix.size() <= tokens.size() &&
           std::equal(prefix.begin(), prefix.end(), tokens.begin());
  }
  std::vector<Tokens> Paths() const {
    std::vector<Tokens> paths;
    for (const auto& [key, value] : snapshots_) paths.push_back(key);
    for (const auto& [key, count] : pending_) paths.push_back(key);
    return paths;
  }

  int64_t budget_;
  std::map<Tokens, std::pair<std::string, uint64_t>> snapshots_;
  std::map<Tokens, int> pending_;
  uint64_t tick_ = 0;
  int64_t queried_ = 0, hit_ = 0, evictions_ = 0;
};

void RandomOperations(int64_t budget, uint32_t seed) {
  std::mt19937 rng(seed);
  PrefixCache cache(budget);
  Model model(budget);
  std::vector<Tokens> marked;
  auto random_tokens = [&](size_t max_length) {
    Tokens tokens(std::uniform_int_distribution<size_t>(0, max_length)(rng));
    for (int32_t& t : tokens) t = std::uniform_int_distribution<int32_t>(0, 2)(rng);
    return tokens;
  };
  for (int op = 0; op < 3000; ++op) {
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    if (kind < 4) {
      const Tokens tokens = random_tokens(10);
      const PrefixCache::Match got = cache.Lookup(tokens);
      const PrefixCache::Match want = model.Lookup(tokens);
      ASSERT_EQ(got.cached, want.cached) << "op " << op;
      ASSERT_EQ(got.shared, want.shared) << "op " << op;
      ASSERT_EQ(got.pending, want.pending) << "op " << op;
      ASSERT_EQ(got.snapshot == nullptr, want.snapshot == nullptr) << "op " << op;
      if (got.snapshot != nullptr) {
        ASSERT_EQ(*got.snapshot, *want.snapshot) << "op " << op;
      }
    } else if (kind < 7) {
      const Tokens prefix = random_tokens(8);
      std::string snapshot(std::uniform_int_distribution<size_t>(0, 60)(rng), 'a');
      if (!snapshot.empty()) snapshot[0] = static_cast<char>('a' + op % 26);
      cache.Insert(prefix, snapshot);
      model.Insert(prefix, snapshot);
    } else if (kind < 8) {
      const Tokens prefix = random_tokens(8);
      cache.MarkPending(prefix);
      model.MarkPending(prefix);
      marked.push_back(prefix);
    } else {
      // Mostly clears of marked prefixes, sometimes of unmarked ones.
      Tokens prefix = random_tokens(8);
      if (!marked.empty() && kind == 8) {
        const size_t at = std::uniform_int_distribution<size_t>(0, marked.size() - 1)(rng);
        prefix = marked[at];
        marked.erase(marked.begin() + static_cast<ptrdiff_t>(at));
      }
      cache.ClearPending(prefix);
      model.ClearPending(prefix);
    }
    ASSERT_EQ(cache.bytes(), model.Bytes()) << "op " << op;
    ASSERT_EQ(cache.entries(), model.entries()) << "op " << op;
    ASSERT_EQ(cache.evictions(), model.evictions()) << "op " << op;
  }
  EXPECT_EQ(cache.queried_tokens(), model.queried());
  EXPECT_EQ(cache.hit_tokens(), model.hit());
}

TEST(PrefixCache, MatchesABruteForceModelWithoutEviction) { RandomOperations(1 << 30, 1); }

TEST(PrefixCache, MatchesABruteForceModelUnderATightBudget) {
  for (uint32_t seed = 2; seed < 6; ++seed) {
    SCOPED_TRACE(seed);
    RandomOperations(300, seed);
  }
}

}  // namespace
}  // namespace abcd
