// Transformer-XL (txl) decode state on the golden fixtures dec_txl (post-LN, positional none,
// memories 6 and 9) and dec_txl_pre (pre-LN, sinusoidal, memory 5 beside a softmax layer):
// the ring's bytes are 2 (M + 1) d_model floats per layer, the same after M + 16 and 4096
// tokens; bf16 and f16 rings halve them and stay within kBf16Tolerance of the reference (f16
// closer); prefill equals token-by-token decoding bit for bit; fork and snapshot/restore of a
// 16-bit ring are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/attention/softmax_state.h"
#include "engine/model/model.h"
#include "engine/state/state_pool.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

using testing::FixtureDir;
using testing::MaxAbsDiff;

// Largest |logit - reference| of a bf16 ring on dec_txl / dec_txl_pre (measured 4.0e-3 - 7.3e-3 on
// the 12 prompt and 32 decode positions; FORMAT.md documents the bound).
constexpr float kBf16Tolerance = 2e-2f;

std::unique_ptr<Model> LoadModel(const std::string& name, KvFormat ring_format) {
  ModelLoadOptions options;
  options.kv_cache_format = ring_format;
  auto model = Model::Load(FixtureDir(name), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<float> Feed(const Model& model, StatePool& pool, SequenceId id,
                        std::span<const int32_t> tokens) {
  std::vector<DecodeRow> rows;
  for (int32_t t : tokens) rows.push_back({id, t, true});
  std::vector<float> logits;
  const absl::Status status = model.Decode(rows, pool, &logits);
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

std::vector<float> FeedOneByOne(const Model& model, StatePool& pool, SequenceId id,
                                std::span<const int32_t> tokens) {
  std::vector<float> all;
  for (const int32_t& t : tokens) {
    std::vector<float> step = Feed(model, pool, id, {&t, 1});
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

class TxlTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TxlTest, RingBytesAreFixedAfterMemoryAndLongContexts) {
  for (const KvFormat format : {KvFormat::kF32, KvFormat::kBf16, KvFormat::kF16}) {
    SCOPED_TRACE(KvFormatName(format));
    std::unique_ptr<Model> model = LoadModel(GetParam(), format);
    ASSERT_NE(model, nullptr);
    const ModelConfig& c = model->config();
    int64_t ring_bytes = 0, max_memory = 0;
    for (const LayerSpec& layer : c.decoder_layers) {
      if (layer.attention.type != AttentionType::kTxl) continue;
      ring_bytes += 2 * (int64_t{layer.attention.memory} + 1) * c.d_model * KvValueBytes(format);
      max_memory = std::max<int64_t>(max_memory, layer.attention.memory);
    }
    ASSERT_GT(ring_bytes, 0);
    EXPECT_EQ(model->state_layout().FixedBytes(), ring_bytes);
    StatePool pool(model->state_layout(), int64_t{1} << 32);
    const int64_t at_memory = testing::SequenceBytesAfter(*model, pool, max_memory + 16);
    const int64_t at_4096 = testing::SequenceBytesAfter(*model, pool, 4096);
    if (GetParam() == "dec_txl") {  // txl only: nothing grows
      EXPECT_EQ(at_memory, ring_bytes);
      EXPECT_EQ(at_4096, ring_bytes);
    } else {  // beside a softmax layer: only its (paged) KV cache grows
      EXPECT_GT(at_memory, ring_bytes);
      EXPECT_GE(at_4096, ring_bytes + 4096 * model->state_layout().KvBytesPerToken());
    }
  }
}

TEST_P(TxlTest, PrefillEqualsStepByStepExactly) {
  const testing::Golden golden = testing::LoadGolden(GetParam());
  std::vector<int32_t> tokens = golden.prompt_ids;
  tokens.insert(tokens.end(), golden.decode_ids.begin(), golden.decode_ids.end());
  for (const KvFormat format : {KvFormat::kF32, KvFormat::kBf16, KvFormat::kF16}) {
    SCOPED_TRACE(KvFormatName(format));
    std::unique_ptr<Model> model = LoadModel(GetParam(), format);
    ASSERT_NE(model, nullptr);
    StatePool pool(model->state_layout(), int64_t{1} << 30);
    const SequenceId batched = *pool.Acquire();
    const SequenceId stepped = *pool.Acquire();
    // Runs shorter than kSoftmaxBlockedRunRows: beside txl (dec_txl_pre) a softmax layer reads
    // longer runs as matrix products, equal to row by row only within rounding.
    std::vector<float> prefill;
    for (size_t first = 0; first < tokens.size(); first += kSoftmaxBlockedRunRows - 1) {
      const size_t n = std::min<size_t>(kSoftmaxBlockedRunRows - 1, tokens.size() - first);
      const std::vector<float> part =
          Feed(*model, pool, batched, std::span<const int32_t>(tokens).subspan(first, n));
      prefill.insert(prefill.end(), part.begin(), part.end());
    }
    const std::vector<float> steps = FeedOneByOne(*model, pool, stepped, tokens);
    EXPECT_EQ(MaxAbsDiff(prefill, steps), 0.0f);
    // Bitwise (a bf16 pair read as a float may be a NaN pattern).
    const std::vector<float>& a = pool.Get(batched)->fixed;
    const std::vector<float>& b = pool.Get(stepped)->fixed;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
  }
}

TEST_P(TxlTest, HalfRingsStayCloseToReference) {
  const testing::Golden golden = testing::LoadGolden(GetParam());
  float worst[2] = {};
  for (const KvFormat format : {KvFormat::kBf16, KvFormat::kF16}) {
    std::unique_ptr<Model> model = LoadModel(GetParam(), format);
    ASSERT_NE(model, nullptr);
    StatePool pool(model->state_layout(), int64_t{1} << 30);
    const SequenceId id = *pool.Acquire();
    const float prefill =
        MaxAbsDiff(Feed(*model, pool, id, golden.prompt_ids), golden.prefill_logits);
    const float decode =
        MaxAbsDiff(FeedOneByOne(*model, pool, id, golden.decode_ids), golden.decode_logits);
    std::printf("%s %s ring: max |logit - reference| prefill %.2e, 32 decode steps %.2e\n",
                GetParam().c_str(), KvFormatName(format), prefill, decode);
    EXPECT_LE(prefill, kBf16Tolerance) << KvFormatName(format);
    EXPECT_LE(decode, kBf16Tolerance) << KvFormatName(format);
    EXPECT_GT(std::max(prefill, decode), 0.0f) << KvFormatName(format);  // really rounded
    worst[format == KvFormat::kF16] = std::max(prefill, decode);
  }
  // f16 keeps 3 more mantissa bits than bf16 (these rings hold no value beyond f16's range).
  EXPECT_LT(worst[1], worst[0]);
}

TEST_P(TxlTest, HalfRingForkAndSnapshotAreExact) {
  const testing::Golden golden = testing::LoadGolden(GetParam());
  for (const KvFormat format : {KvFormat::kBf16, KvFormat::kF16}) {
    SCOPED_TRACE(KvFormatName(format));
    std::unique_ptr<Model> model = LoadModel(GetParam(), format);
    ASSERT_NE(model, nullptr);
    StatePool pool(model->state_layout(), int64_t{1} << 30);
    const SequenceId original = *pool.Acquire();
    Feed(*model, pool, original, golden.prompt_ids);
    auto fork = pool.Fork(original);
    ASSERT_TRUE(fork.ok()) << fork.status();
    auto snapshot = pool.Snapshot(original);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    const std::vector<float> expected = FeedOneByOne(*model, pool, original, golden.decode_ids);
    EXPECT_EQ(MaxAbsDiff(FeedOneByOne(*model, pool, *fork, golden.decode_ids), expected), 0.0f);
    pool.Release(original);
    auto restored = pool.Restore(*snapshot);
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(MaxAbsDiff(FeedOneByOne(*model, pool, *restored, golden.decode_ids), expected), 0.0f);
  }
}

// A ring's bytes are stored raw in sessions: each format has its own fingerprint.
TEST_P(TxlTest, RingFormatIsPartOfTheFingerprint) {
  std::unique_ptr<Model> fp32 = LoadModel(GetParam(), KvFormat::kF32);
  std::unique_ptr<Model> bf16 = LoadModel(GetParam(), KvFormat::kBf16);
  std::unique_ptr<Model> f16 = LoadModel(GetParam(), KvFormat::kF16);
  ASSERT_NE(fp32, nullptr);
  ASSERT_NE(bf16, nullptr);
  ASSERT_NE(f16, nullptr);
  EXPECT_NE(fp32->state_layout().fingerprint, bf16->state_layout().fingerprint);
  EXPECT_NE(fp32->state_layout().fingerprint, f16->state_layout().fingerprint);
  EXPECT_NE(bf16->state_layout().fingerprint, f16->state_layout().fingerprint);
}

INSTANTIATE_TEST_SUITE_P(Txl, TxlTest, ::testing::Values("dec_txl", "dec_txl_pre"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace abcd
