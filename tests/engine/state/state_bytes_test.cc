// Bounded attention keeps the same bytes per sequence after 16 and after 4096 tokens; the
// softmax baseline's KV cache grows linearly. Runs the real model on each golden fixture. Also
// the worst case admission charges a request (RequestStateBytes).
#include <gtest/gtest.h>

#include "engine/model/model.h"
#include "engine/state/request_state_bytes.h"
#include "engine/state/state_pool.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

TEST(RequestStateBytes, WorstCaseBytesCoverKvPages) {
  StateLayout bounded;
  bounded.initial_fixed.resize(100);
  bounded.kv_width = 8;
  EXPECT_EQ(RequestStateBytes(bounded, 10, 0, 1000, 1), 400);
  EXPECT_EQ(RequestStateBytes(bounded, 10, 0, 1000, 4), 1600);
  StateLayout softmax;
  softmax.kv_is_cross = {false, true};
  softmax.kv_width = 8;  // 64 bytes per token per layer
  // self: 10 + 20 tokens -> 32 (two pages); cross: 5 source tokens -> 16
  EXPECT_EQ(RequestStateBytes(softmax, 10, 5, 20, 1), 32 * 64 + 16 * 64);
}

class StateBytesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StateBytesTest, BoundedFlatSoftmaxLinear) {
  auto model = Model::Load(testing::FixtureDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  StatePool pool((*model)->state_layout(), int64_t{1} << 32);
  const int64_t fixed = (*model)->state_layout().FixedBytes();
  const int64_t at16 = testing::SequenceBytesAfter(**model, pool, 16);
  const int64_t at4096 = testing::SequenceBytesAfter(**model, pool, 4096);
  EXPECT_EQ(pool.bytes_in_use(), 0);
  if (GetParam() == "dec_softmax") {
    EXPECT_EQ(fixed, 0);
    const ModelConfig& c = (*model)->config();
    const int64_t per_token = static_cast<int64_t>(c.decoder_layers.size()) * 2 * c.d_model * 4;
    EXPECT_EQ(at16, 16 * per_token);
    EXPECT_EQ(at4096, 4096 * per_token);
  } else {
    EXPECT_GT(fixed, 0);
    EXPECT_EQ(at16, fixed);
    EXPECT_EQ(at4096, fixed);
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, StateBytesTest,
                         ::testing::Values("dec_softmax", "dec_window", "dec_window_dilated",
                                           "dec_abc", "dec_rfa_gaussian_gate", "dec_rfa_arccos",
                                           "dec_t2r", "dec_elu", "dec_abc_sigmoid", "dec_abc_relu",
                                           "dec_abc_random", "dec_abc_block", "dec_abc_cluster"),
                         [](const auto& param_info) { return param_info.param; });

// The dilated window keeps a ring of (window - 1) * dilation + 1 keys and values per layer.
TEST(StateBytes, DilatedWindowRing) {
  auto model = Model::Load(testing::FixtureDir("dec_window_dilated"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  int64_t expected = 0;
  for (const LayerSpec& layer : c.decoder_layers) {
    expected += 2 * layer.attention.WindowSpan() * c.d_model * 4;
  }
  EXPECT_EQ((*model)->state_layout().FixedBytes(), expected);
  EXPECT_EQ(expected, 2 * (7 + 11) * 32 * 4);  // window 4 dilation 2, window 3 dilation 5
}

// Feature-map cross attention: the memory is F (dh + 1) floats per head, built from a source of
// any length; the sequence's bytes are the same for a 3-token and a 1000-token source, and
// decoding 4096 tokens after it adds nothing.
class CrossStateBytesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossStateBytesTest, ConstantInSourceLength) {
  auto model = Model::Load(testing::FixtureDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  StatePool pool((*model)->state_layout(), int64_t{1} << 32);
  int64_t cross_floats = 0;
  for (const LayerSpec& layer : c.decoder_layers) {
    const int f = layer.cross_attention->FeatureDim(c.head_dim());
    cross_floats += int64_t{c.n_heads} * f * (c.head_dim() + 1);
  }
  int64_t self_floats = 0;
  for (const StateLayout::Slot& slot : (*model)->state_layout().self) {
    self_floats += slot.fixed_floats;
  }
  EXPECT_EQ((*model)->state_layout().FixedBytes(), 4 * (self_floats + cross_floats));
  std::vector<int64_t> bytes;
  for (int64_t source_length : {3, 1000}) {
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok()) << id.status();
    std::vector<int32_t> source;
    for (int64_t i = 0; i < source_length; ++i) source.push_back(4 + static_cast<int>(i % 90));
    ASSERT_TRUE((*model)->Encode(source, *id, pool).ok());
    auto encoded = pool.SequenceBytes(*id);
    ASSERT_TRUE(encoded.ok());
    bytes.push_back(*encoded);
    std::vector<DecodeRow> rows;
    for (int64_t t = 0; t < 4096; ++t) {
      rows.push_back({*id, static_cast<int32_t>(4 + t % 90), t + 1 == 4096});
    }
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Decode(rows, pool, &logits).ok());
    for (float v : logits) EXPECT_TRUE(std::isfinite(v));
    auto decoded = pool.SequenceBytes(*id);
    ASSERT_TRUE(decoded.ok());
    bytes.push_back(*decoded);
    pool.Release(*id);
  }
  for (int64_t b : bytes) EXPECT_EQ(b, (*model)->state_layout().FixedBytes());
}

INSTANTIATE_TEST_SUITE_P(Cross, CrossStateBytesTest,
                         ::testing::Values("encdec_rfa_cross", "encdec_t2r_cross",
                                           "encdec_elu_cross"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace abcd
