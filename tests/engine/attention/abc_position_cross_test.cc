// abc position (Linformer) in encoder self and cross attention (fixture encdec_abc_position:
// encoder table [3, 16], cross table [5, 12], decoder self table [4, 64]): each stack reads its
// own table, the cross memory is 2 n dh floats per head whatever the source length, and a source
// longer than the smallest encoder / cross table is refused with INVALID_ARGUMENT by the model and
// by the Executor, never truncated.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/attention/attention_state.h"
#include "engine/model/attention_loader.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "engine/state/state_pool.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

constexpr char kFixture[] = "encdec_abc_position";

using testing::SourceIds;

TEST(AbcPositionCross, EachStackHasItsOwnTable) {
  EXPECT_EQ(LinformerTableName("decoder.layers.3.attn"), "decoder.linformer.weight");
  EXPECT_EQ(LinformerTableName("encoder.layers.0.attn"), "encoder.linformer.weight");
  EXPECT_EQ(LinformerTableName("decoder.layers.1.cross"), "decoder.cross_linformer.weight");
}

// Cross position: 2 n dh floats per head (no L), the same after a 1-token and a 12-token source
// and after decoding up to the decoder table's 64 positions.
TEST(AbcPositionCross, CrossStateBytesConstantInSourceLength) {
  auto model = Model::Load(testing::FixtureDir(kFixture));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  ASSERT_EQ(c.max_source_positions(), 12);
  const StateLayout& layout = (*model)->state_layout();
  for (const StateLayout::Slot& slot : layout.cross) {
    EXPECT_EQ(slot.fixed_floats, int64_t{c.n_heads} * 5 * 2 * c.head_dim());
  }
  StatePool pool(layout, int64_t{1} << 30);
  for (int64_t source_length : {1, 12}) {
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*model)->Encode(SourceIds(source_length), *id, pool).ok());
    EXPECT_EQ(*pool.SequenceBytes(*id), layout.FixedBytes()) << source_length;
    std::vector<DecodeRow> rows;
    for (int64_t t = 0; t < 64; ++t) {
      rows.push_back({*id, static_cast<int32_t>(4 + t % 90), t + 1 == 64});
    }
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Decode(rows, pool, &logits).ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(*pool.SequenceBytes(*id), layout.FixedBytes()) << source_length;
    pool.Release(*id);
  }
}

TEST(AbcPositionCross, ModelRefusesSourceLongerThanTheTables) {
  auto model = Model::Load(testing::FixtureDir(kFixture));
  ASSERT_TRUE(model.ok()) << model.status();
  StatePool pool((*model)->state_layout(), int64_t{1} << 30);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  const absl::Status refused = (*model)->Encode(SourceIds(13), *id, pool);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("max_source_positions (12)"), std::string::npos) << refused;
  EXPECT_TRUE((*model)->Encode(SourceIds(12), *id, pool).ok());
}

TEST(AbcPositionCross, ExecutorRefusesTextLongerThanTheTables) {
  auto model = Model::Load(testing::FixtureDir(kFixture));
  ASSERT_TRUE(model.ok()) << model.status();
  // The fixture has no tokenizer; any SentencePiece model turns text into enough tokens.
  auto tokenizer = Tokenizer::Load(std::string(ABCD_FIXTURE_DIR) +
                                   "/../../models/checkpoints/abc-lm-untrained/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto executor = Executor::Create(**model, **tokenizer, ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  GenerationRequest request;
  request.source = "one two three four five six seven eight nine ten eleven twelve thirteen";
  request.max_tokens = 4;
  auto refused = (*executor)->Enqueue(request, [](GenerationEvent) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("text: ", 0), 0u) << refused.status();
  EXPECT_NE(refused.status().message().find("max_source_positions (12)"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace abcd
