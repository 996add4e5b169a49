// The generalised abc kernel (engine/attention/abc_state.h): the never-written-slot guard, the
// masked read, ReLU slots dead for the first tokens, the random control's slot hash (pinned to
// the PyTorch reference's values) and the state bytes of each control.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "engine/attention/abc_state.h"
#include "engine/model/model.h"
#include "engine/state/state_pool.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

TEST(AbcControl, MinusInfinityLogControlWritesNothing) {
  constexpr int kSlots = 3, kDim = 2;
  std::vector<float> keys(kSlots * kDim, 0.0f), values(kSlots * kDim, 0.0f);
  std::vector<float> log_norm(kSlots, kNegInf);
  const float k[kDim] = {1.0f, 2.0f}, v[kDim] = {3.0f, 4.0f};
  // Slot 0 is written (w = 1), slots 1 and 2 stay never-written: no (-inf) - (-inf).
  const float first[kSlots] = {0.5f, kNegInf, kNegInf};
  AbcUpdateHead(k, v, first, kSlots, kDim, keys.data(), values.data(), log_norm.data());
  EXPECT_FLOAT_EQ(log_norm[0], 0.5f);
  EXPECT_EQ(log_norm[1], kNegInf);
  EXPECT_EQ(log_norm[2], kNegInf);
  EXPECT_EQ(keys, (std::vector<float>{1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(values, (std::vector<float>{3, 4, 0, 0, 0, 0}));
  // A -inf on a written slot leaves it unchanged too.
  const float k2[kDim] = {5.0f, 6.0f}, v2[kDim] = {7.0f, 8.0f};
  const float second[kSlots] = {kNegInf, 0.0f, kNegInf};
  AbcUpdateHead(k2, v2, second, kSlots, kDim, keys.data(), values.data(), log_norm.data());
  EXPECT_FLOAT_EQ(log_norm[0], 0.5f);
  EXPECT_FLOAT_EQ(log_norm[1], 0.0f);
  EXPECT_EQ(log_norm[2], kNegInf);
  EXPECT_EQ(keys, (std::vector<float>{1, 2, 5, 6, 0, 0}));
  EXPECT_EQ(values, (std::vector<float>{3, 4, 7, 8, 0, 0}));
}

TEST(AbcControl, ReadMasksDeadSlotsAndReadsZeroWithNoLiveSlot) {
  constexpr int kSlots = 3, kDim = 2;
  const float keys[kSlots * kDim] = {1, 0, 0, 0, 0, 1};
  const float values[kSlots * kDim] = {10, 20, 99, 99, 30, 40};
  const float q[kDim] = {0.5f, -0.25f};
  // Slot 1 is dead: its zero key would otherwise get logit 0 and pull the output to (99, 99).
  const float log_norm[kSlots] = {0.0f, kNegInf, 1.0f};
  float out[kDim];
  AbcReadHead(q, keys, values, log_norm, kSlots, kDim, out);
  const double p0 = std::exp(0.5) / (std::exp(0.5) + std::exp(-0.25));
  EXPECT_NEAR(out[0], p0 * 10 + (1 - p0) * 30, 1e-5);
  EXPECT_NEAR(out[1], p0 * 20 + (1 - p0) * 40, 1e-5);
  const float all_dead[kSlots] = {kNegInf, kNegInf, kNegInf};
  AbcReadHead(q, keys, values, all_dead, kSlots, kDim, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
}

// ReLU control: a slot stays dead while its logit is <= 0; the head reads 0 until some slot is
// written, then only the live slots; never NaN.
TEST(AbcControl, ReluSlotDeadForTheFirstTokens) {
  constexpr int kHeads = 1, kDim = 2, kSlots = 2;
  const AbcState state(kHeads, kDim, kSlots, AbcControl::kRelu);
  EXPECT_EQ(state.ExtraColumns(), kSlots);
  std::vector<float> fixed(state.FixedFloats());
  state.Init(fixed.data());
  const float q[kDim] = {1.0f, 1.0f};
  float out[kDim];
  auto step = [&](std::vector<float> k, std::vector<float> v, std::vector<float> logits,
                  int64_t position) {
    state.UpdateHead(0, {k.data(), v.data(), logits.data()}, {fixed.data(), nullptr, position});
    state.ReadHead(0, q, {fixed.data(), nullptr, position}, out);
    EXPECT_TRUE(std::isfinite(out[0]) && std::isfinite(out[1]));
  };
  step({1, 1}, {5, 6}, {-1.0f, 0.0f}, 0);  // both dead
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  step({1, 0}, {7, 8}, {-2.0f, 2.0f}, 1);  // slot 1 comes alive with this token only
  EXPECT_FLOAT_EQ(out[0], 7.0f);
  EXPECT_FLOAT_EQ(out[1], 8.0f);
  step({0, 1}, {1, 2}, {-3.0f, 6.0f}, 2);  // slot 1: weights 2 and 6 -> mean (2*(7,8) + 6*(1,2))/8
  EXPECT_NEAR(out[0], (2 * 7 + 6 * 1) / 8.0, 1e-5);
  EXPECT_NEAR(out[1], (2 * 8 + 6 * 2) / 8.0, 1e-5);
  EXPECT_EQ(fixed[2 * kSlots * kDim], kNegInf);  // slot 0's L: still never written
}

TEST(AbcControl, RandomSlotHashMatchesTheReference) {
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(1234), 0xBB0CF61B2F181CDBull);
  // random_slots(1234, layer 0, 4 heads, t 0..7, n 4) and (99, layer 8193, 2 heads, t 100..103, n
  // 6) from models/abcd_ref/attention.py.
  const AbcState a(4, 2, 4, AbcControl::kRandom, AbcReduce::kMean, 1234, 0);
  const int expected_a[4][8] = {{3, 2, 2, 3, 1, 2, 3, 1},
                                {3, 1, 1, 3, 3, 3, 0, 3},
                                {2, 3, 2, 0, 0, 3, 1, 0},
                                {3, 2, 3, 2, 0, 2, 0, 3}};
  for (int h = 0; h < 4; ++h) {
    for (int t = 0; t < 8; ++t) EXPECT_EQ(a.RandomSlot(h, t), expected_a[h][t]) << h << " " << t;
  }
  const AbcState b(2, 2, 6, AbcControl::kRandom, AbcReduce::kSum, 99, kAbcCrossLayerId + 1);
  const int expected_b[2][4] = {{5, 2, 4, 5}, {4, 1, 1, 4}};
  for (int h = 0; h < 2; ++h) {
    for (int t = 0; t < 4; ++t) EXPECT_EQ(b.RandomSlot(h, 100 + t), expected_b[h][t]);
  }
  EXPECT_EQ(a.ExtraColumns(), 0);  // no control projection
  EXPECT_EQ(a.FixedFloats(), 4 * 4 * (2 * 2 + 1));
  EXPECT_EQ(b.FixedFloats(), 2 * 6 * (2 * 2));  // sum: no log-normaliser
}

// State bytes of the abc-control fixtures: H n (2 dh + 1) floats per mean layer, H n 2 dh per
// sum layer, as models/FORMAT.md states.
TEST(AbcControl, FixtureStateBytesFollowTheFormat) {
  for (const char* name : {"dec_abc_sigmoid", "dec_abc_relu", "dec_abc_random", "dec_abc_position",
                           "dec_abc_block", "dec_abc_cluster"}) {
    auto model = Model::Load(testing::FixtureDir(name));
    ASSERT_TRUE(model.ok()) << model.status();
    const ModelConfig& c = (*model)->config();
    int64_t floats = 0;
    for (const LayerSpec& layer : c.decoder_layers) {
      const AttentionSpec& a = layer.attention;
      const int mean = a.reduce == AbcReduce::kMean ? 1 : 0;
      floats += int64_t{c.n_heads} * a.slots * (2 * c.head_dim() + mean);
    }
    EXPECT_EQ((*model)->state_layout().FixedBytes(), 4 * floats) << name;
  }
}

// random control has no projection: a checkpoint that carries `control.*` tensors for a random
// layer is refused by the loader (they would be silently ignored otherwise), naming them.
TEST(AbcControl, RandomControlRefusesControlTensors) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("abc_control_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path source = testing::FixtureDir("dec_abc");
  std::filesystem::copy_file(source / "model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(source / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["decoder_layers"][0]["attention"]["control"] = "random";
  config["decoder_layers"][0]["attention"]["seed"] = 1;
  std::ofstream(dir / "config.json") << config.dump();
  auto model = Model::Load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("decoder.layers.0.attn.control.weight"),
            std::string::npos)
      << model.status();
}

// position: the state holds 2 n dh floats per head whatever the length, up to N tokens (the
// fixture's max_positions = 64); past N nothing is written and the logits stay finite.
TEST(AbcControl, PositionStateBytesAfter16AndNTokens) {
  auto model = Model::Load(testing::FixtureDir("dec_abc_position"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  ASSERT_EQ(c.max_positions(), 64);
  StatePool pool((*model)->state_layout(), int64_t{1} << 30);
  const int64_t fixed = (*model)->state_layout().FixedBytes();
  EXPECT_EQ(fixed, int64_t{4} * 2 * c.n_heads * 4 * 2 * c.head_dim());  // 2 layers, n = 4
  for (int64_t tokens : {int64_t{16}, int64_t{64}, int64_t{80}}) {
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok());
    std::vector<DecodeRow> rows;
    for (int64_t t = 0; t < tokens; ++t) {
      rows.push_back({*id, static_cast<int32_t>(4 + t % 90), t + 1 == tokens});
    }
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Decode(rows, pool, &logits).ok());
    for (float v : logits) EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(*pool.SequenceBytes(*id), fixed) << tokens;
    pool.Release(*id);
  }
}

// cluster: the first n keys take the empty slots in order, then each key joins its nearest
// centroid (ties: the lowest slot), and that centroid moves to the running mean.
TEST(AbcControl, ClusterAssignsEmptySlotsThenNearestCentroid) {
  constexpr int kHeads = 1, kDim = 2, kSlots = 2;
  const AbcState state(kHeads, kDim, kSlots, AbcControl::kCluster);
  EXPECT_EQ(state.ExtraColumns(), 0);
  EXPECT_EQ(state.FixedFloats(), kSlots * (2 * kDim + 1));
  std::vector<float> fixed(state.FixedFloats());
  state.Init(fixed.data());
  auto feed = [&](std::vector<float> k, int64_t position) {
    state.UpdateHead(0, {k.data(), k.data(), nullptr}, {fixed.data(), nullptr, position});
  };
  feed({4, 0}, 0);  // slot 0 (empty)
  feed({4, 0}, 1);  // slot 1 is still empty: it takes it although slot 0 is at distance 0
  EXPECT_EQ(std::vector<float>(fixed.begin(), fixed.begin() + 4), (std::vector<float>{4, 0, 4, 0}));
  feed({2, 0}, 2);  // tie between the two centroids: slot 0, mean (4 + 2) / 2
  EXPECT_EQ(std::vector<float>(fixed.begin(), fixed.begin() + 4), (std::vector<float>{3, 0, 4, 0}));
  feed({5, 2}, 3);  // nearer to slot 1
  EXPECT_EQ(std::vector<float>(fixed.begin(), fixed.begin() + 4),
            (std::vector<float>{3, 0, 4.5f, 1}));
  const float* keys = fixed.data();
  const float* log_norm = fixed.data() + 2 * kSlots * kDim;
  const float k[kDim] = {3.4f, 0};
  EXPECT_EQ(AbcState::ClusterSlot(k, keys, log_norm, kSlots, kDim), 0);
}

// block: ring slot floor(t/c) mod n holds the running mean of its block, the block's first token
// overwrites it, and the read sees only the slots holding a block.
TEST(AbcControl, BlockRingOfRunningMeans) {
  constexpr int kHeads = 1, kDim = 1, kSlots = 2, kBlock = 2;
  const AbcState state(kHeads, kDim, kSlots, AbcControl::kBlock, AbcReduce::kSum, 0, 0, kBlock);
  EXPECT_EQ(state.FixedFloats(), kSlots * 2 * kDim);
  std::vector<float> fixed(state.FixedFloats());
  state.Init(fixed.data());
  const float q[kDim] = {0.0f};  // equal logits: the read is the mean of the live slots' values
  float out[kDim];
  const float values[] = {2, 4, 10, 20, 100};
  const float expected_read[] = {2, 3, (3 + 10) / 2.0f, (3 + 15) / 2.0f, (100 + 15) / 2.0f};
  for (int64_t t = 0; t < 5; ++t) {
    const float v = values[t];
    state.UpdateHead(0, {&v, &v, nullptr}, {fixed.data(), nullptr, t});
    state.ReadHead(0, q, {fixed.data(), nullptr, t}, out);
    EXPECT_FLOAT_EQ(out[0], expected_read[t]) << t;
  }
  EXPECT_EQ(fixed[0], 100.0f);  // block 2 evicted block 0 from slot 0
}

}  // namespace
}  // namespace abcd
