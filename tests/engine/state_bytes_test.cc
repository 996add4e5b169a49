// Bounded attention keeps the same bytes per sequence after 16 and after 4096 tokens; the
// softmax baseline's KV cache grows linearly. Runs the real model on each golden fixture.
#include <gtest/gtest.h>

#include "engine/model/model.h"
#include "engine/state/state_pool.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

int64_t BytesAfter(const Model& model, StatePool& pool, int64_t tokens) {
  auto id = pool.Acquire();
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<DecodeRow> rows;
  for (int64_t t = 0; t < tokens; ++t) {
    rows.push_back({*id, static_cast<int32_t>(4 + t % 90), t + 1 == tokens});
  }
  std::vector<float> logits;
  EXPECT_TRUE(model.Decode(rows, pool, &logits).ok());
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
  auto bytes = pool.SequenceBytes(*id);
  EXPECT_TRUE(bytes.ok());
  pool.Release(*id);
  return *bytes;
}

class StateBytesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StateBytesTest, BoundedFlatSoftmaxLinear) {
  auto model = Model::Load(testing::FixtureDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  StatePool pool((*model)->state_layout(), int64_t{1} << 32);
  const int64_t fixed = (*model)->state_layout().FixedBytes();
  const int64_t at16 = BytesAfter(**model, pool, 16);
  const int64_t at4096 = BytesAfter(**model, pool, 4096);
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
                         ::testing::Values("dec_softmax", "dec_window", "dec_abc",
                                           "dec_rfa_gaussian_gate", "dec_rfa_arccos", "dec_t2r",
                                           "dec_elu", "dec_abc_sigmoid", "dec_abc_relu",
                                           "dec_abc_random", "dec_abc_block", "dec_abc_cluster"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace abcd
