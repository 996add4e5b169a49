// GMAT encoder (issue 16): the encoder output against the reference, the cross-attention state
// fixed in the source length (output "memory"), forks that keep the cross memory, admission
// bytes, and config errors naming the field. Logit parity, prefill == step-by-step, fork and
// snapshot/restore run in parity_test over the encdec_gmat* fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/state/state_pool.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

constexpr int64_t kBudget = int64_t{1} << 30;

using testing::SourceIds;

// The cross KvCache of decoder layer `layer` (softmax cross attention).
const KvCache& CrossCache(const Model& model, const StatePool& pool, SequenceId id, int layer) {
  const int kv = model.state_layout().cross[static_cast<size_t>(layer)].kv_index;
  return pool.Get(id)->kv[static_cast<size_t>(kv)];
}

std::unique_ptr<Model> LoadFixture(const std::string& name) {
  auto model = Model::Load(testing::FixtureDir(name));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// The cross keys are W_k enc_out + b_k: recomputing them from the reference's encoder output
// checks the engine's GMAT encoder (memory rows, or source + memory rows) within 1e-4.
TEST(Gmat, EncoderOutputMatchesReference) {
  for (const char* name : {"encdec_gmat", "encdec_gmat_chunk"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> model = LoadFixture(name);
    ASSERT_NE(model, nullptr);
    const testing::Golden golden = testing::LoadGolden(name);
    const ModelConfig& c = model->config();
    const int64_t d = c.d_model;
    const int64_t rows = c.EncoderOutputRows(static_cast<int64_t>(golden.source_ids.size()));
    ASSERT_EQ(static_cast<int64_t>(golden.encoder_output.size()), rows * d);
    StatePool pool(model->state_layout(), kBudget);
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(model->Encode(golden.source_ids, *id, pool).ok());
    EXPECT_EQ(pool.Get(*id)->source_length, rows);
    // The last decoder layer of both fixtures has softmax cross attention.
    const int layer = static_cast<int>(c.decoder_layers.size()) - 1;
    const AttentionLayer& cross =
        *model->decoder().blocks[static_cast<size_t>(layer)].cross_attention;
    const std::vector<float> w = cross.fused_weight();  // [k; v] rows, [2d, d]
    const std::vector<float>& b = cross.fused_bias();
    const KvCache& cache = CrossCache(*model, pool, *id, layer);
    ASSERT_EQ(cache.length, rows);
    float worst = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < d; ++o) {
        double key = b[static_cast<size_t>(o)];
        for (int64_t i = 0; i < d; ++i) {
          key += double{w[static_cast<size_t>(o * d + i)]} *
                 golden.encoder_output[static_cast<size_t>(r * d + i)];
        }
        worst = std::max(
            worst, std::abs(static_cast<float>(key) - cache.keys[static_cast<size_t>(r * d + o)]));
      }
    }
    EXPECT_LE(worst, 1e-4f);
  }
}

// Output "memory": the cross state holds M rows per decoder layer whatever the source length.
TEST(Gmat, CrossStateFixedInSourceLength) {
  std::unique_ptr<Model> model = LoadFixture("encdec_gmat");
  ASSERT_NE(model, nullptr);
  const int memory = model->config().gmat->memory;
  StatePool pool(model->state_layout(), kBudget);
  std::vector<int64_t> bytes, snapshot_bytes;
  for (int64_t length : {16, 1000}) {
    auto id = pool.Acquire();
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(model->Encode(SourceIds(length), *id, pool).ok());
    EXPECT_EQ(pool.Get(*id)->source_length, memory);
    EXPECT_EQ(CrossCache(*model, pool, *id, 0).length, memory);
    std::vector<float> logits;
    const std::vector<DecodeRow> rows = {{*id, 1, false}, {*id, 5, true}};
    ASSERT_TRUE(model->Decode(rows, pool, &logits).ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    bytes.push_back(*pool.SequenceBytes(*id));
    snapshot_bytes.push_back(static_cast<int64_t>(pool.Snapshot(*id)->size()));
  }
  EXPECT_EQ(bytes[0], bytes[1]);
  EXPECT_EQ(snapshot_bytes[0], snapshot_bytes[1]);
  // Admission charges the same bytes for both sources.
  CpuBackend backend(*model, kBudget);
  EXPECT_EQ(*backend.RequestBytes(4, 16, 8, 1), *backend.RequestBytes(4, 1000, 8, 1));
  // Without GMAT (encdec_softmax) the same sources cost more for the longer one.
  std::unique_ptr<Model> softmax = LoadFixture("encdec_softmax");
  ASSERT_NE(softmax, nullptr);
  CpuBackend plain(*softmax, kBudget);
  EXPECT_LT(*plain.RequestBytes(4, 16, 8, 1), *plain.RequestBytes(4, 1000, 8, 1));
}

// Output "all": source + M rows, so the chunked fixture's cross state grows with the source.
TEST(Gmat, OutputAllKeepsSourceAndMemoryRows) {
  std::unique_ptr<Model> model = LoadFixture("encdec_gmat_chunk");
  ASSERT_NE(model, nullptr);
  StatePool pool(model->state_layout(), kBudget);
  auto id = pool.Acquire();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(model->Encode(SourceIds(37), *id, pool).ok());
  EXPECT_EQ(pool.Get(*id)->source_length, 37 + model->config().gmat->memory);
}

// Beams fork after the encoder ran: every beam keeps the same cross memory while their
// decoder states diverge.
TEST(Gmat, ForkedBeamsKeepTheCrossMemory) {
  std::unique_ptr<Model> model = LoadFixture("encdec_gmat");
  ASSERT_NE(model, nullptr);
  StatePool pool(model->state_layout(), kBudget);
  auto a = pool.Acquire();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(model->Encode(SourceIds(50), *a, pool).ok());
  std::vector<float> logits;
  const std::vector<DecodeRow> prefix = {{*a, 1, false}, {*a, 9, true}};
  ASSERT_TRUE(model->Decode(prefix, pool, &logits).ok());
  auto b = pool.Fork(*a);
  ASSERT_TRUE(b.ok());
  const std::vector<DecodeRow> step = {{*a, 11, true}, {*b, 12, true}};
  ASSERT_TRUE(model->Decode(step, pool, &logits).ok());
  for (int layer = 0; layer < 2; ++layer) {
    const KvCache& ca = CrossCache(*model, pool, *a, layer);
    const KvCache& cb = CrossCache(*model, pool, *b, layer);
    EXPECT_EQ(ca.length, cb.length);
    EXPECT_EQ(ca.keys, cb.keys);
    EXPECT_EQ(ca.values, cb.values);
  }
}

std::string GmatConfig(const std::string& encoder_layer, const std::string& gmat,
                       const std::string& decoder_self = R"({"type": "softmax"})",
                       const std::string& cross = R"({"type": "softmax"})") {
  return R"({"architecture": "encoder-decoder", "vocab_size": 16, "d_model": 8, "n_heads": 2,
    "d_ff": 16, "decoder_layers": [{"attention": )" +
         decoder_self + R"(, "cross_attention": )" + cross +
         R"(}], "encoder_layers": [{"attention": {"type": "gmat", "chunk": 4}}, {"attention": )" +
         encoder_layer + "}]" + (gmat.empty() ? "" : R"(, "gmat": )" + gmat) + "}";
}

TEST(Gmat, ConfigParses) {
  auto config =
      ParseModelConfig(GmatConfig(R"({"type": "gmat"})", R"({"memory": 32, "output": "all"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->gmat.has_value());
  EXPECT_EQ(config->gmat->memory, 32);
  EXPECT_TRUE(config->gmat->output_all);
  EXPECT_EQ(config->encoder_layers[0].attention.gmat_chunk, 4);
  EXPECT_EQ(config->encoder_layers[1].attention.gmat_chunk, 0);  // chunk defaults to 0 (full)
  EXPECT_EQ(DescribeAttention(config->encoder_layers[0].attention), "gmat(chunk=4)");
  EXPECT_EQ(config->EncoderOutputRows(100), 132);
}

TEST(Gmat, ConfigErrorsNameTheField) {
  const std::string gmat_layer = R"({"type": "gmat", "chunk": 0})";
  const std::string gmat = R"({"memory": 4})";
  const struct {
    std::string json;
    std::string message;
  } cases[] = {
      {GmatConfig(gmat_layer, gmat, gmat_layer),
       "config field \"decoder_layers[0].attention.type\": \"gmat\" is only allowed in "
       "encoder_layers (there is no causal GMAT)"},
      {GmatConfig(gmat_layer, gmat, R"({"type": "softmax"})", gmat_layer),
       "decoder_layers[0].cross_attention.type\": \"gmat\" is only allowed in encoder_layers"},
      {GmatConfig(gmat_layer, R"({"memory": 0})"), "\"gmat.memory\": must be in [1, 2^30]"},
      {GmatConfig(gmat_layer, R"({"output": "memory"})"), "\"gmat.memory\": is required"},
      {GmatConfig(gmat_layer, R"({"memory": 4, "output": "hidden"})"),
       "\"gmat.output\": must be \"memory\" or \"all\""},
      {GmatConfig(gmat_layer, R"({"memory": 4, "memory_only_layers": 1})"),
       "\"gmat.memory_only_layers\": must be 0"},
      {GmatConfig(gmat_layer, R"({"memory": 4, "slots": 1})"), "\"gmat.slots\": is not a"},
      {GmatConfig(gmat_layer, "4"), "\"gmat\": must be an object"},
      {GmatConfig(R"({"type": "gmat", "chunk": -1})", gmat),
       "\"encoder_layers[1].attention.chunk\": must be in [0, 2^30]"},
      {GmatConfig(R"({"type": "softmax"})", gmat),
       "\"encoder_layers[1].attention.type\": must be \"gmat\" when the model has \"gmat\""},
      {GmatConfig(gmat_layer, ""),
       "\"encoder_layers[0].attention.type\": \"gmat\" layers need the model-level \"gmat\""},
      {GmatConfig(R"({"type": "softmax", "chunk": 2})", gmat),
       "\"encoder_layers[1].attention.chunk\": is only allowed on gmat attention"},
      {GmatConfig(gmat_layer, gmat, R"({"type": "softmax"})",
                  R"({"type": "abc", "slots": 2, "control": "position", "max_positions": 8})"),
       "\"decoder_layers[0].cross_attention.control\": \"position\" reads source positions"},
  };
  for (const auto& c : cases) {
    const auto config = ParseModelConfig(c.json);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(c.message), std::string::npos)
        << config.status().message() << "\nexpected: " << c.message;
  }
  // A decoder-only model has no encoder for gmat.
  const auto decoder = ParseModelConfig(
      R"({"architecture": "decoder", "vocab_size": 16, "d_model": 8, "n_heads": 2, "d_ff": 16,
          "decoder_layers": [{"attention": {"type": "softmax"}}], "gmat": {"memory": 4}})");
  ASSERT_FALSE(decoder.ok());
  EXPECT_NE(decoder.status().message().find("\"gmat\": is only allowed for encoder-decoder"),
            std::string::npos)
      << decoder.status().message();
}

}  // namespace
}  // namespace abcd
