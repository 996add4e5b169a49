// StatePool accounting: budget / state bytes sequences fit, the next is refused; release
// frees at once; KV growth is charged in pages and refused without side effects; snapshots
// round-trip and reject corruption.
#include "engine/state/state_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/model/model.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

StateLayout BoundedLayout(int64_t floats) {
  StateLayout layout;
  layout.initial_fixed.assign(floats, 0.5f);
  layout.kv_width = 8;
  layout.fingerprint = 42;
  return layout;
}

StateLayout SoftmaxLayout() {
  StateLayout layout;
  layout.kv_is_cross = {false, false};
  layout.kv_width = 8;  // 64 bytes per key+value row
  layout.fingerprint = 43;
  return layout;
}

TEST(StatePool, AdmitsBudgetOverStateBytes) {
  StatePool pool(BoundedLayout(250), 10'500);  // 1000 bytes each -> 10 sequences
  std::vector<SequenceId> ids;
  for (int i = 0; i < 10; ++i) {
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  EXPECT_EQ(pool.bytes_in_use(), 10'000);
  auto refused = pool.Acquire();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  pool.Release(ids[3]);
  EXPECT_EQ(pool.bytes_in_use(), 9'000);
  EXPECT_TRUE(pool.Acquire().ok());
  pool.Release(12345);  // unknown ids are ignored
  EXPECT_EQ(pool.size(), 10);
}

TEST(StatePool, ForkCopiesAndIsCharged) {
  StatePool pool(BoundedLayout(4), 40);
  auto a = pool.Acquire();
  ASSERT_TRUE(a.ok());
  pool.Get(*a)->fixed[2] = 7.0f;
  pool.Get(*a)->position = 5;
  auto b = pool.Fork(*a);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.Get(*b)->fixed[2], 7.0f);
  EXPECT_EQ(pool.Get(*b)->position, 5);
  pool.Get(*b)->fixed[2] = 1.0f;  // independent copies
  EXPECT_EQ(pool.Get(*a)->fixed[2], 7.0f);
  EXPECT_EQ(pool.bytes_in_use(), 32);
  EXPECT_EQ(pool.Fork(*a).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Fork(999).status().code(), absl::StatusCode::kNotFound);
}

TEST(StatePool, KvGrowthIsPagedAndRefusedAtomically) {
  StatePool pool(SoftmaxLayout(), 2 * 64 * 32);  // room for 32 tokens in both layers
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(pool.bytes_in_use(), 0);
  ASSERT_TRUE(pool.ReserveTokens(*id, 1).ok());
  EXPECT_EQ(pool.bytes_in_use(), 2 * 64 * StatePool::kKvPageTokens);
  ASSERT_TRUE(pool.ReserveTokens(*id, 32).ok());
  EXPECT_EQ(pool.bytes_in_use(), 2 * 64 * 32);
  const absl::Status refused = pool.ReserveTokens(*id, 33);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.bytes_in_use(), 2 * 64 * 32);
  EXPECT_EQ(pool.Get(*id)->kv[0].capacity(), 32);
  pool.Release(*id);
  EXPECT_EQ(pool.bytes_in_use(), 0);
}

// A released sequence's KV storage is reused by the next one (same memory, rows charged afresh,
// the new rows zero), and spare storage never takes memory the budget's sequences need.
TEST(StatePool, ReleasedKvStorageIsReusedWithinTheBudget) {
  StatePool pool(SoftmaxLayout(), 2 * 64 * 32);  // room for 32 tokens in both layers
  auto a = pool.Acquire();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool.ReserveTokens(*a, 32).ok());
  std::fill(pool.Get(*a)->kv[0].keys.begin(), pool.Get(*a)->kv[0].keys.end(), 9.0f);
  const float* storage = pool.Get(*a)->kv[0].keys.data();
  pool.Release(*a);
  EXPECT_EQ(pool.bytes_in_use(), 0);
  EXPECT_GE(pool.spare_kv_bytes(), 2 * 64 * 32);

  auto b = pool.Acquire();  // takes the spare storage
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.spare_kv_bytes(), 0);
  EXPECT_EQ(pool.Get(*b)->kv[0].capacity(), 0);
  EXPECT_EQ(pool.Get(*b)->kv[0].length, 0);
  ASSERT_TRUE(pool.ReserveTokens(*b, 16).ok());
  EXPECT_EQ(pool.bytes_in_use(), 2 * 64 * 16);
  EXPECT_EQ(pool.Get(*b)->kv[0].keys.data(), storage);
  for (float key : pool.Get(*b)->kv[0].keys) ASSERT_EQ(key, 0.0f);

  auto c = pool.Acquire();  // nothing spare: new, empty storage
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pool.Get(*c)->kv.size(), 2u);
  EXPECT_EQ(pool.Get(*c)->kv[1].width, 8);
  pool.Release(*b);  // kept: 32 rows of storage fit beside c's nothing
  EXPECT_GT(pool.spare_kv_bytes(), 0);
  ASSERT_TRUE(pool.ReserveTokens(*c, 32).ok());  // the budget's bytes: the spare goes
  EXPECT_EQ(pool.spare_kv_bytes(), 0);
  EXPECT_EQ(pool.bytes_in_use(), 2 * 64 * 32);
  pool.Release(*c);  // the whole budget: kept
  EXPECT_LE(pool.spare_kv_bytes(), pool.budget_bytes());

  // Restore and Fork take spare storage too, and Restore gives it back on failure.
  StatePool pool2(SoftmaxLayout(), 2 * 64 * 64);
  auto d = pool2.Acquire();
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(pool2.ReserveTokens(*d, 3).ok());
  pool2.Get(*d)->kv[1].Write(2, 0, std::vector<float>(8, 1.5f).data(),
                             std::vector<float>(8, -1.5f).data(), 8);
  pool2.Get(*d)->kv[0].length = pool2.Get(*d)->kv[1].length = 3;
  pool2.Get(*d)->position = 3;
  auto e = pool2.Acquire();
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(pool2.ReserveTokens(*e, 16).ok());
  const float* e_storage = pool2.Get(*e)->kv[1].values.data();
  pool2.Release(*e);
  auto fork = pool2.Fork(*d);
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(pool2.spare_kv_bytes(), 0);
  EXPECT_EQ(pool2.Get(*fork)->kv[1].values.data(), e_storage);
  EXPECT_EQ(pool2.Get(*fork)->kv[1].values[2 * 8 + 5], -1.5f);
  auto snapshot = pool2.Snapshot(*d);
  ASSERT_TRUE(snapshot.ok());
  pool2.Release(*fork);
  pool2.Release(*d);
  const int64_t spare = pool2.spare_kv_bytes();
  EXPECT_EQ(pool2.Restore(snapshot->substr(0, snapshot->size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool2.spare_kv_bytes(), spare);
  auto restored = pool2.Restore(*snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(pool2.Get(*restored)->kv[1].keys[2 * 8 + 7], 1.5f);
  EXPECT_EQ(pool2.Get(*restored)->kv[0].length, 3);
}

// A KV-cache-only state saved as it was at an earlier position restores exactly that state: its
// caches cut to the position's rows. Refused where a self-attention layer keeps a fixed state.
TEST(StatePool, SnapshotAtAnEarlierPositionCutsTheKvCaches) {
  StateLayout layout = SoftmaxLayout();
  layout.self = {{0, 0, 0}, {0, 0, 1}};
  StatePool pool(layout, 1 << 20);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(pool.ReserveTokens(*id, 5).ok());
  SequenceState& state = *pool.Get(*id);
  for (int64_t row = 0; row < 5; ++row) {
    const std::vector<float> k(8, static_cast<float>(row)), v(8, -static_cast<float>(row));
    for (KvCache& kv : state.kv) kv.Write(row, 0, k.data(), v.data(), 8);
  }
  for (KvCache& kv : state.kv) kv.length = 5;
  state.position = 5;
  ASSERT_TRUE(pool.earlier_snapshots());
  auto cut = pool.SnapshotAt(*id, 3);
  ASSERT_TRUE(cut.ok()) << cut.status();
  auto header = StatePool::ReadSnapshotHeader(*cut);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->position, 3);
  auto restored = pool.Restore(*cut);
  ASSERT_TRUE(restored.ok()) << restored.status();
  const SequenceState& back = *pool.Get(*restored);
  EXPECT_EQ(back.position, 3);
  for (const KvCache& kv : back.kv) {
    EXPECT_EQ(kv.length, 3);
    EXPECT_EQ(kv.keys[2 * 8 + 1], 2.0f);
    EXPECT_EQ(kv.values[2 * 8 + 7], -2.0f);
  }
  EXPECT_EQ(*pool.SnapshotAt(*id, 5), *pool.Snapshot(*id));  // the position itself: the same
  EXPECT_EQ(pool.SnapshotAt(*id, 6).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pool.SnapshotAt(*id, -1).status().code(), absl::StatusCode::kOutOfRange);
  state.kv[1].length = 2;  // as after a rollback
  EXPECT_EQ(pool.SnapshotAt(*id, 3).status().code(), absl::StatusCode::kOutOfRange);

  StateLayout mixed = BoundedLayout(4);
  mixed.kv_is_cross = {false};
  mixed.self = {{0, 4, -1}, {0, 0, 0}};
  StatePool bounded(mixed, 1 << 20);
  auto other = bounded.Acquire();
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(bounded.earlier_snapshots());
  EXPECT_EQ(bounded.SnapshotAt(*other, 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StatePool, SnapshotRejectsCorruptionAndOtherModels) {
  StatePool pool(BoundedLayout(6), 1 << 20);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  pool.Get(*id)->fixed[0] = 3.0f;
  auto snapshot = pool.Snapshot(*id);
  ASSERT_TRUE(snapshot.ok());
  auto restored = pool.Restore(*snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(pool.Get(*restored)->fixed, pool.Get(*id)->fixed);

  const int64_t before = pool.bytes_in_use();
  for (size_t cut : {size_t{0}, size_t{4}, size_t{20}, snapshot->size() - 1}) {
    EXPECT_EQ(pool.Restore(snapshot->substr(0, cut)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "cut at " << cut;
  }
  EXPECT_EQ(pool.Restore(*snapshot + "x").status().code(), absl::StatusCode::kInvalidArgument);
  std::string bad_magic = *snapshot;
  bad_magic[0] = 'Z';
  EXPECT_EQ(pool.Restore(bad_magic).status().code(), absl::StatusCode::kInvalidArgument);
  StatePool other(BoundedLayout(6), 1 << 20);
  StateLayout different = BoundedLayout(6);
  different.fingerprint = 7;
  StatePool foreign(different, 1 << 20);
  // Another model's snapshot is not corrupt: it is the wrong model.
  const absl::Status foreign_status = foreign.Restore(*snapshot).status();
  EXPECT_EQ(foreign_status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign_status.message().find("different model"), absl::string_view::npos);
  EXPECT_EQ(foreign.CheckSnapshot(*snapshot).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(foreign.size(), 0);
  EXPECT_TRUE(other.Restore(*snapshot).ok());
  EXPECT_EQ(pool.bytes_in_use(), before);
}

// CheckSnapshot answers what Restore would, for every truncation and single-byte change of a
// softmax snapshot, and never changes the pool; ReadSnapshotHeader reads the position.
TEST(StatePool, CheckSnapshotAgreesWithRestore) {
  StateLayout layout = BoundedLayout(3);
  layout.kv_is_cross = {false};
  layout.kv_width = 2;
  StatePool pool(layout, 1 << 20);
  const SequenceId id = *pool.Acquire();
  ASSERT_TRUE(pool.ReserveTokens(id, 5).ok());
  SequenceState* state = pool.Get(id);
  state->position = 5;
  state->kv[0].length = 5;
  for (int64_t row = 0; row < 5; ++row) {
    const float k[2] = {1.0f * row, 2.0f}, v[2] = {-1.0f, 0.5f * row};
    state->kv[0].Write(row, 0, k, v, 2);
  }
  const std::string snapshot = *pool.Snapshot(id);
  EXPECT_TRUE(pool.CheckSnapshot(snapshot).ok());
  auto header = StatePool::ReadSnapshotHeader(snapshot);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->position, 5);
  EXPECT_EQ(header->source_length, 0);
  EXPECT_EQ(header->fingerprint, 42u);
  EXPECT_EQ(StatePool::ReadSnapshotHeader(snapshot.substr(0, 31)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatePool::ReadSnapshotHeader("ABCDSEQ2").status().code(),
            absl::StatusCode::kInvalidArgument);

  const int64_t size_before = pool.size(), bytes_before = pool.bytes_in_use();
  auto agree = [&](const std::string& bytes, const std::string& what) {
    const absl::Status checked = pool.CheckSnapshot(bytes);
    EXPECT_EQ(pool.size(), size_before) << what;
    auto restored = pool.Restore(bytes);
    EXPECT_EQ(checked.code(), restored.status().code()) << what << ": " << checked;
    if (restored.ok()) pool.Release(*restored);
    EXPECT_EQ(pool.bytes_in_use(), bytes_before) << what;
  };
  for (size_t cut = 0; cut < snapshot.size(); ++cut) {
    EXPECT_FALSE(pool.CheckSnapshot(snapshot.substr(0, cut)).ok()) << "cut at " << cut;
    agree(snapshot.substr(0, cut), "cut at " + std::to_string(cut));
  }
  for (size_t at = 0; at < snapshot.size(); ++at) {
    std::string changed = snapshot;
    changed[at] ^= 0x40;
    agree(changed, "byte " + std::to_string(at));
  }
  // An empty softmax sequence (no KV rows, so empty vectors) round-trips too (the fuzzer found
  // that its restore passed a null pointer to memcpy).
  const SequenceId empty = *pool.Acquire();
  const std::string empty_snapshot = *pool.Snapshot(empty);
  EXPECT_TRUE(pool.CheckSnapshot(empty_snapshot).ok());
  auto restored_empty = pool.Restore(empty_snapshot);
  ASSERT_TRUE(restored_empty.ok()) << restored_empty.status();
  EXPECT_EQ(pool.Get(*restored_empty)->kv[0].length, 0);
  pool.Release(*restored_empty);
  pool.Release(empty);
  // A position that claims more KV rows than the bytes hold is refused before any allocation.
  std::string huge = snapshot;
  const int64_t position = int64_t{1} << 60;
  std::memcpy(huge.data() + 16, &position, 8);
  std::memcpy(huge.data() + 8 + 8 + 8 + 8 + 1 + 8 + 3 * 4 + 8, &position, 8);
  EXPECT_EQ(pool.CheckSnapshot(huge).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Restore(huge).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatePool, SoftmaxSnapshotKeepsCache) {
  auto model = Model::Load(testing::FixtureDir("dec_softmax"));
  ASSERT_TRUE(model.ok()) << model.status();
  StatePool pool((*model)->state_layout(), 1 << 24);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  std::vector<DecodeRow> rows;
  for (int32_t t = 4; t < 24; ++t) rows.push_back({*id, t, false});
  std::vector<float> logits;
  ASSERT_TRUE((*model)->Decode(rows, pool, &logits).ok());
  auto snapshot = pool.Snapshot(*id);
  ASSERT_TRUE(snapshot.ok());
  auto restored = pool.Restore(*snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(pool.Get(*restored)->position, 20);
  EXPECT_EQ(*pool.SequenceBytes(*restored), *pool.SequenceBytes(*id));
  EXPECT_EQ(pool.Get(*restored)->kv[1].length, 20);
}

// A cache larger than the 16,384-value buffer that restores into another format goes through
// restores bit for bit in each storage format, and a snapshot written into a recycled blob
// reuses its storage.
TEST(StatePool, SnapshotKvRowsRoundTripAcrossBlocks) {
  for (const KvFormat format : {KvFormat::kF32, KvFormat::kBf16, KvFormat::kF16}) {
    SCOPED_TRACE(KvFormatName(format));
    ModelLoadOptions options;
    options.kv_cache_format = format;
    auto model = Model::Load(testing::FixtureDir("dec_softmax"), options);
    ASSERT_TRUE(model.ok()) << model.status();
    StatePool pool((*model)->state_layout(), int64_t{1} << 30);
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok());
    SequenceState* state = pool.Get(*id);
    const int64_t rows = 3000;  // x width 16+: several 16,384-float blocks per side
    state->position = rows;
    std::mt19937 generator(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (KvCache& kv : state->kv) {
      kv.Resize(rows);
      kv.length = rows;
      std::vector<float> k(static_cast<size_t>(kv.width)), v(k.size());
      for (int64_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < k.size(); ++c) {
          k[c] = normal(generator);
          v[c] = normal(generator);
        }
        kv.Write(r, 0, k.data(), v.data(), kv.width);
      }
    }
    auto snapshot = pool.Snapshot(*id);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    auto restored = pool.Restore(*snapshot);
    ASSERT_TRUE(restored.ok()) << restored.status();
    const SequenceState* copy = pool.Get(*restored);
    ASSERT_EQ(copy->kv.size(), state->kv.size());
    for (size_t i = 0; i < state->kv.size(); ++i) {
      const KvCache& a = state->kv[i];
      const KvCache& b = copy->kv[i];
      ASSERT_EQ(b.length, rows);
      ASSERT_GT(rows * a.width, 2 * 16384);
      std::vector<float> ak(static_cast<size_t>(rows * a.width)), av(ak.size());
      std::vector<float> bk(ak.size()), bv(ak.size());
      a.ReadRows(rows, ak.data(), av.data());
      b.ReadRows(rows, bk.data(), bv.data());
      ASSERT_EQ(std::memcmp(ak.data(), bk.data(), ak.size() * 4), 0) << "keys of cache " << i;
      ASSERT_EQ(std::memcmp(av.data(), bv.data(), av.size() * 4), 0) << "values of cache " << i;
    }
    // Written into a recycled blob (the prefix cache's): the same bytes, in its storage.
    std::string recycled(snapshot->size() + 100, '#');
    const char* storage = recycled.data();
    auto again = pool.Snapshot(*id, std::move(recycled));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *snapshot);
    EXPECT_EQ(again->data(), storage) << "the buffer's capacity was not reused";
  }
}

// A snapshot keeps each cache's rows in the cache's format: a 16-bit cache's snapshot is about
// half an fp32 one's bytes, restores bit for bit into a pool of its format, and into a pool of
// another format as the rows written there would be (exact into fp32, rounded into 16 bits).
// Version 1 snapshots (every row widened to fp32) still restore.
TEST(StatePool, SnapshotsKeepTheCacheFormatAndRestoreIntoAnyOther) {
  constexpr KvFormat kFormats[] = {KvFormat::kF32, KvFormat::kBf16, KvFormat::kF16};
  constexpr int64_t kRows = 700;
  std::mt19937 generator(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> k(static_cast<size_t>(kRows * 8)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = normal(generator), v[i] = normal(generator);
  // One pool per format, each with a sequence of the same rows (rounded to its format).
  std::vector<std::unique_ptr<StatePool>> pools;
  std::vector<SequenceId> ids;
  std::vector<std::string> snapshots;
  for (const KvFormat format : kFormats) {
    StateLayout layout = SoftmaxLayout();
    layout.kv_format = format;
    pools.push_back(std::make_unique<StatePool>(layout, int64_t{1} << 26));
    const SequenceId id = *pools.back()->Acquire();
    ASSERT_TRUE(pools.back()->ReserveTokens(id, kRows).ok());
    SequenceState* state = pools.back()->Get(id);
    state->position = kRows;
    for (KvCache& kv : state->kv) {
      kv.length = kRows;
      kv.WriteRows(kRows, k.data(), v.data());
    }
    ids.push_back(id);
    snapshots.push_back(*pools.back()->Snapshot(id));
  }
  EXPECT_LT(snapshots[1].size(), snapshots[0].size() / 2 + 200);
  EXPECT_EQ(snapshots[1].size(), snapshots[2].size());
  // A version 1 snapshot of the fp32 sequence: the same bytes with magic ...1 and no format
  // bytes (each cache's format byte follows its row count).
  std::string v1 = snapshots[0];
  v1[7] = '1';
  const size_t first_cache = 8 + 8 + 8 + 8 + 1 + 8 + 8;  // header, no fixed floats, cache count
  const size_t cache_bytes = 8 + 1 + 2 * kRows * 8 * 4;
  v1.erase(first_cache + cache_bytes + 8, 1);
  v1.erase(first_cache + 8, 1);
  for (size_t from = 0; from < std::size(kFormats); ++from) {
    for (size_t to = 0; to < std::size(kFormats); ++to) {
      SCOPED_TRACE(::testing::Message() << KvFormatName(kFormats[from]) << " snapshot into a "
                                        << KvFormatName(kFormats[to]) << " pool");
      auto restored = pools[to]->Restore(snapshots[from]);
      ASSERT_TRUE(restored.ok()) << restored.status();
      // Expected: the source rows (as fp32) written into a cache of the target's format.
      const KvCache& source = pools[from]->Get(ids[from])->kv[1];
      std::vector<float> sk(k.size()), sv(k.size());
      source.ReadRows(kRows, sk.data(), sv.data());
      KvCache expected;
      expected.width = 8;
      expected.format = kFormats[to];
      expected.Resize(kRows);
      expected.WriteRows(kRows, sk.data(), sv.data());
      for (const KvCache& kv : pools[to]->Get(*restored)->kv) {
        ASSERT_EQ(kv.length, kRows);
        ASSERT_EQ(kv.format, kFormats[to]);
        EXPECT_TRUE(std::equal(expected.keys.begin(), expected.keys.end(), kv.keys.begin()));
        EXPECT_TRUE(std::equal(expected.values.begin(), expected.values.end(), kv.values.begin()));
        EXPECT_TRUE(std::equal(expected.keys16.begin(), expected.keys16.end(), kv.keys16.begin()));
        EXPECT_TRUE(
            std::equal(expected.values16.begin(), expected.values16.end(), kv.values16.begin()));
      }
      pools[to]->Release(*restored);
      if (from != 0) continue;
      auto old = pools[to]->Restore(v1);
      ASSERT_TRUE(old.ok()) << old.status();
      const KvCache& kv = pools[to]->Get(*old)->kv[1];
      EXPECT_TRUE(std::equal(expected.keys.begin(), expected.keys.end(), kv.keys.begin()));
      EXPECT_TRUE(
          std::equal(expected.values16.begin(), expected.values16.end(), kv.values16.begin()));
      pools[to]->Release(*old);
    }
  }
  // A format byte beyond the three is refused, naming it.
  std::string bad = snapshots[1];
  bad[first_cache + 8] = 3;
  EXPECT_TRUE(absl::StrContains(pools[1]->CheckSnapshot(bad).message(), "KV cache format 3"))
      << pools[1]->CheckSnapshot(bad);
}

// The --kv_cache_format values: the three names round-trip; anything else names them.
TEST(KvFormat, ParsesItsNamesAndRefusesOthersNamingTheChoices) {
  for (const KvFormat format : {KvFormat::kF32, KvFormat::kBf16, KvFormat::kF16}) {
    const absl::StatusOr<KvFormat> parsed =
        ParseKvFormat(KvFormatName(format), "--kv_cache_format");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, format);
  }
  for (const char* bad : {"fp16", "F16", "", "bf16 "}) {
    const absl::StatusOr<KvFormat> parsed = ParseKvFormat(bad, "--kv_cache_format");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        absl::StrContains(parsed.status().message(), "--kv_cache_format must be f32, bf16 or f16"))
        << bad;
  }
}

// A bf16 or f16 KV cache costs half the bytes per token, decodes within rounding of the fp32
// cache (prompt, then single steps, with a snapshot restored halfway; f16 closer than bf16), and
// its snapshots restore into either format.
TEST(StatePool, HalfKvCachesHalveTheBytesAndStayCloseToFp32) {
  auto exact = Model::Load(testing::FixtureDir("dec_softmax"));
  ASSERT_TRUE(exact.ok());
  float worst[2] = {};
  for (const KvFormat format : {KvFormat::kBf16, KvFormat::kF16}) {
    SCOPED_TRACE(KvFormatName(format));
    ModelLoadOptions half_options;
    half_options.kv_cache_format = format;
    auto half = Model::Load(testing::FixtureDir("dec_softmax"), half_options);
    ASSERT_TRUE(half.ok());
    EXPECT_EQ((*half)->state_layout().KvBytesPerToken() * 2,
              (*exact)->state_layout().KvBytesPerToken());
    StatePool exact_pool((*exact)->state_layout(), 1 << 24);
    StatePool half_pool((*half)->state_layout(), 1 << 24);
    const SequenceId a = *exact_pool.Acquire(), b = *half_pool.Acquire();
    std::vector<DecodeRow> prompt_a, prompt_b;
    for (int32_t t = 4; t < 40; ++t) {
      prompt_a.push_back({a, t, t == 39});
      prompt_b.push_back({b, t, t == 39});
    }
    std::vector<float> la, lb;
    ASSERT_TRUE((*exact)->Decode(prompt_a, exact_pool, &la).ok());
    ASSERT_TRUE((*half)->Decode(prompt_b, half_pool, &lb).ok());
    EXPECT_EQ(*half_pool.SequenceBytes(b) - (*half)->state_layout().FixedBytes(),
              (*exact_pool.SequenceBytes(a) - (*exact)->state_layout().FixedBytes()) / 2);
    // Halfway, continue b from its own snapshot, restored into the 16-bit pool.
    const SequenceId restored = *half_pool.Restore(*half_pool.Snapshot(b));
    float max_diff = 0.0f;
    for (int32_t step = 0; step < 24; ++step) {
      const int32_t token = 7 + (step * 37) % 50;
      la.clear();
      lb.clear();
      const DecodeRow ra{a, token, true}, rb{restored, token, true};
      ASSERT_TRUE((*exact)->Decode({&ra, 1}, exact_pool, &la).ok());
      ASSERT_TRUE((*half)->Decode({&rb, 1}, half_pool, &lb).ok());
      ASSERT_EQ(la.size(), lb.size());
      for (size_t i = 0; i < la.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(la[i] - lb[i]));
      }
    }
    EXPECT_GT(max_diff, 0.0f);  // the cache really is rounded
    EXPECT_LT(max_diff, 2e-2f);
    worst[format == KvFormat::kF16] = max_diff;
    // An fp32 pool takes the 16-bit pool's snapshot too.
    EXPECT_TRUE(exact_pool.Restore(*half_pool.Snapshot(restored)).ok());
  }
  EXPECT_LT(worst[1], worst[0]);  // f16: 3 more mantissa bits, and no value beyond its range
}

TEST(StatePool, DecodeRefusesOverBudgetWithoutChangingState) {
  auto model = Model::Load(testing::FixtureDir("dec_softmax"));
  ASSERT_TRUE(model.ok());
  const int64_t page_bytes =
      (*model)->state_layout().KvBytesPerToken() * 2 * StatePool::kKvPageTokens;
  StatePool pool((*model)->state_layout(), page_bytes);  // exactly one page per layer
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  std::vector<DecodeRow> rows;
  for (int32_t t = 0; t < 17; ++t) rows.push_back({*id, 5, true});
  std::vector<float> logits;
  EXPECT_EQ((*model)->Decode(rows, pool, &logits).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(logits.empty());
  EXPECT_EQ(pool.Get(*id)->position, 0);
  rows.resize(16);
  EXPECT_TRUE((*model)->Decode(rows, pool, &logits).ok());
}

TEST(Model, RejectsBadTokensAndUnknownSequences) {
  auto model = Model::Load(testing::FixtureDir("dec_abc"));
  ASSERT_TRUE(model.ok());
  StatePool pool((*model)->state_layout(), 1 << 24);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  std::vector<float> logits;
  const DecodeRow out_of_vocab{*id, 96, true};
  const absl::Status status = (*model)->Decode({&out_of_vocab, 1}, pool, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("token[0] = 96"), absl::string_view::npos) << status;
  const DecodeRow unknown{777, 5, true};
  EXPECT_EQ((*model)->Decode({&unknown, 1}, pool, &logits).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pool.Get(*id)->position, 0);
}

TEST(Model, EncoderDecoderNeedsEncodeFirst) {
  auto model = Model::Load(testing::FixtureDir("encdec_abc"));
  ASSERT_TRUE(model.ok());
  StatePool pool((*model)->state_layout(), 1 << 24);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  std::vector<float> logits;
  const DecodeRow row{*id, 1, true};
  EXPECT_EQ((*model)->Decode({&row, 1}, pool, &logits).code(),
            absl::StatusCode::kFailedPrecondition);
  const std::vector<int32_t> empty;
  EXPECT_EQ((*model)->Encode(empty, *id, pool).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace abcd
