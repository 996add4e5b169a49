// Speculative decoding's exact rollback (StatePool::ReserveCheckpoints / Rollback, DecodeRow::
// checkpoint) on every golden fixture, so every attention type (softmax KV, window ring,
// abc/rfa/t2r/elu, txl, gsa/gla/retnet/hgrn2, hybrids, encoder-decoder): a verify pass feeds
// k + 1 rows with a checkpoint after each of the first k, and rolling back to checkpoint j
// leaves the state a sequence fed only those j + 1 rows in the same call has (bitwise: the
// Snapshot bytes are equal), and the next logits equal that sequence's (bitwise). Against a
// sequence fed the j + 1 rows in a call of their own the state agrees within 1e-5 relative
// (the matrix products' sums depend on the batch's row count, as for any batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/model/model.h"
#include "engine/state/state_pool.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

using testing::FixtureDir;
using testing::Golden;
using testing::LoadGolden;
using testing::MaxAbsDiff;

constexpr int64_t kBudget = int64_t{1} << 30;
constexpr int kDrafts = 4;  // k: rows 0..k-1 of the verify pass carry a checkpoint

class RollbackTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto model = Model::Load(FixtureDir(GetParam()));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    golden_ = LoadGolden(GetParam());
    ASSERT_GE(golden_.decode_ids.size(), static_cast<size_t>(kDrafts + 2));
    pool_ = std::make_unique<StatePool>(model_->state_layout(), kBudget);
    vocab_ = model_->config().vocab_size;
  }

  // A sequence that has seen the prompt (and the source).
  SequenceId Prompted() {
    auto id = pool_->Acquire();
    EXPECT_TRUE(id.ok()) << id.status();
    if (model_->config().is_encoder_decoder()) {
      EXPECT_TRUE(model_->Encode(golden_.source_ids, *id, *pool_).ok());
    }
    std::vector<DecodeRow> rows;
    for (int32_t t : golden_.prompt_ids) rows.push_back({*id, t, false});
    std::vector<float> logits;
    EXPECT_TRUE(model_->Decode(rows, *pool_, &logits).ok());
    return *id;
  }

  // The verify rows: decode_ids[0..k] with a checkpoint after each of the first k.
  std::vector<DecodeRow> VerifyRows(SequenceId id) const {
    std::vector<DecodeRow> rows;
    for (int i = 0; i <= kDrafts; ++i) {
      rows.push_back({id, golden_.decode_ids[i], true, /*checkpoint=*/i < kDrafts});
    }
    return rows;
  }

  // Rows of `id` feeding decode_ids[0..j].
  std::vector<DecodeRow> Accepted(SequenceId id, int j) const {
    std::vector<DecodeRow> rows;
    for (int i = 0; i <= j; ++i) rows.push_back({id, golden_.decode_ids[i], true});
    return rows;
  }

  std::vector<float> Next(SequenceId id) {
    std::vector<float> logits;
    const DecodeRow row{id, golden_.decode_ids[kDrafts + 1], true};
    EXPECT_TRUE(model_->Decode({&row, 1}, *pool_, &logits).ok());
    return logits;
  }

  std::string Snapshot(SequenceId id) {
    auto snapshot = pool_->Snapshot(id);
    EXPECT_TRUE(snapshot.ok()) << snapshot.status();
    return snapshot.ok() ? *snapshot : std::string();
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<StatePool> pool_;
  Golden golden_;
  int vocab_ = 0;
};

// Largest |a - b| / max(1, |b|) over the floats of two states of one layout.
float StateDifference(const SequenceState& a, const SequenceState& b) {
  if (a.position != b.position || a.fixed.size() != b.fixed.size() || a.kv.size() != b.kv.size()) {
    return INFINITY;
  }
  float worst = 0.0f;
  const auto compare = [&worst](std::span<const float> x, std::span<const float> y) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] == y[i]) continue;  // also equal infinities (running maxima start at -inf)
      const float diff = std::abs(x[i] - y[i]) / std::max(1.0f, std::abs(y[i]));
      worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
    }
  };
  compare(a.fixed, b.fixed);
  for (size_t l = 0; l < a.kv.size(); ++l) {
    if (a.kv[l].length != b.kv[l].length) return INFINITY;
    const size_t n = static_cast<size_t>(a.kv[l].length * a.kv[l].width);
    std::vector<float> ak(n), av(n), bk(n), bv(n);
    a.kv[l].ReadRows(a.kv[l].length, ak.data(), av.data());
    b.kv[l].ReadRows(b.kv[l].length, bk.data(), bv.data());
    compare(ak, bk);
    compare(av, bv);
  }
  return worst;
}

TEST_P(RollbackTest, EveryCheckpointEqualsFeedingOnlyTheAcceptedRows) {
  for (int j = 0; j < kDrafts; ++j) {
    SCOPED_TRACE(::testing::Message() << "rolled back to row " << j);
    // One call: the verify pass of `spec` next to `exact`, which gets only rows 0..j.
    const SequenceId spec = Prompted();
    const SequenceId exact = Prompted();
    std::vector<DecodeRow> rows = VerifyRows(spec);
    const std::vector<DecodeRow> accepted = Accepted(exact, j);
    rows.insert(rows.end(), accepted.begin(), accepted.end());
    std::vector<float> logits;
    ASSERT_TRUE(model_->Decode(rows, *pool_, &logits).ok());
    ASSERT_EQ(pool_->Get(spec)->checkpoint_positions.size(), static_cast<size_t>(kDrafts));
    // The verify rows' logits for rows 0..j are the accepted rows' too.
    const std::span<const float> all(logits);
    EXPECT_EQ(MaxAbsDiff(all.subspan(0, (j + 1) * vocab_),
                         all.subspan((kDrafts + 1) * vocab_, (j + 1) * vocab_)),
              0.0f);
    ASSERT_TRUE(pool_->Rollback(spec, j).ok());
    EXPECT_EQ(pool_->Get(spec)->position, pool_->Get(exact)->position);
    EXPECT_TRUE(Snapshot(spec) == Snapshot(exact)) << "state bytes differ";

    // Against rows 0..j fed in a call of their own: equal within the batch's rounding.
    const SequenceId alone = Prompted();
    std::vector<float> alone_logits;
    ASSERT_TRUE(model_->Decode(Accepted(alone, j), *pool_, &alone_logits).ok());
    EXPECT_LE(StateDifference(*pool_->Get(spec), *pool_->Get(alone)), 1e-5f);

    // And the next token's logits: bitwise the exact sequence's.
    EXPECT_EQ(MaxAbsDiff(Next(spec), Next(exact)), 0.0f);
    for (SequenceId id : {spec, exact, alone}) pool_->Release(id);
  }
}

TEST_P(RollbackTest, RollbackGoesBackToEarlierCheckpointsOfTheSameCall) {
  const SequenceId spec = Prompted();
  std::vector<float> logits;
  ASSERT_TRUE(model_->Decode(VerifyRows(spec), *pool_, &logits).ok());
  // Latest first, then earlier ones: each rollback restores from the same saved slots.
  for (int j = kDrafts - 1; j >= 0; --j) {
    SCOPED_TRACE(::testing::Message() << "rolled back to row " << j);
    ASSERT_TRUE(pool_->Rollback(spec, j).ok());
    const SequenceId alone = Prompted();
    ASSERT_TRUE(model_->Decode(Accepted(alone, j), *pool_, &logits).ok());
    EXPECT_LE(StateDifference(*pool_->Get(spec), *pool_->Get(alone)), 1e-5f);
    pool_->Release(alone);
  }
  EXPECT_EQ(pool_->Rollback(spec, kDrafts).code(), absl::StatusCode::kOutOfRange);
  // A decode without checkpoints forgets them.
  const DecodeRow row{spec, golden_.decode_ids[1], false};
  ASSERT_TRUE(model_->Decode({&row, 1}, *pool_, &logits).ok());
  EXPECT_EQ(pool_->Rollback(spec, 0).code(), absl::StatusCode::kOutOfRange);
}

INSTANTIATE_TEST_SUITE_P(Golden, RollbackTest, ::testing::ValuesIn(testing::FixtureNames()),
                         [](const auto& param_info) { return param_info.param; });

TEST(Rollback, CheckpointBytesAreChargedAndFreed) {
  StateLayout layout;
  layout.initial_fixed.assign(100, 0.0f);  // 400 bytes
  layout.self = {{0, 100, -1}};
  layout.fingerprint = 7;
  StatePool pool(layout, 2000);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(pool.ReserveCheckpoints(*id, 3).ok());
  EXPECT_EQ(pool.bytes_in_use(), 1600);
  EXPECT_EQ(pool.checkpoint_bytes_in_use(), 1200);
  EXPECT_EQ(pool.kv_bytes_in_use(), 0);
  ASSERT_TRUE(pool.ReserveCheckpoints(*id, 2).ok());  // never shrinks
  EXPECT_EQ(pool.bytes_in_use(), 1600);
  const absl::Status refused = pool.ReserveCheckpoints(*id, 5);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(pool.bytes_in_use(), 1600);
  // A fork does not inherit the checkpoints (nor pay for them).
  auto fork = pool.Fork(*id);
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(pool.bytes_in_use(), 2000);
  EXPECT_TRUE(pool.Get(*fork)->checkpoints.empty());
  pool.Release(*id);
  EXPECT_EQ(pool.bytes_in_use(), 400);
  EXPECT_EQ(pool.checkpoint_bytes_in_use(), 0);
  EXPECT_EQ(pool.Rollback(*id, 0).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace abcd
