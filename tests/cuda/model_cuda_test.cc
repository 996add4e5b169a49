// The whole decoder on the GPU against the PyTorch reference's golden logits (the fixtures the
// CPU parity test uses): prompt fed one token per step, then 32 teacher-forced decode steps,
// alone and batched with another sequence, and several sequences' prompts in one Forward();
// CUDA-graph greedy sampling against eager argmax.
// Skipped without a GPU.
#include "engine/model/model_cuda.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/fixtures.h"

namespace abcd::cuda {
namespace {

using abcd::testing::FixtureDir;
using abcd::testing::FixtureNames;
using abcd::testing::Golden;
using abcd::testing::LoadGolden;

// The graph and the eager step may split sums differently (their grids differ), so a greedy
// pick must be the eager argmax or tie with it within float rounding.
void ExpectGreedyPick(const std::vector<float>& logits, int row, int64_t vocab, int32_t picked,
                      const std::string& what) {
  const auto begin = logits.begin() + row * vocab;
  ASSERT_GE(picked, 0) << what;
  ASSERT_LT(picked, vocab) << what;
  const float best = *std::max_element(begin, begin + vocab);
  ASSERT_LE(best - begin[picked], 1e-5f * std::max(1.0f, std::abs(best)))
      << what << " row " << row << ": picked " << picked;
}

class ModelCudaTest : public CudaTest {
 protected:
  // The CUDA model of fixture `name`, or null when the backend does not run it (then the
  // error must say Unimplemented).
  std::unique_ptr<CudaModel> Make(const std::string& name, bool graphs,
                                  int max_prefill_tokens = 512, int64_t max_context = 128) {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(name));
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    cpu_models_.push_back(std::move(*model));
    CudaModelOptions options;
    options.max_sequences = 4;
    options.max_context = max_context;
    options.weights = WeightType::kF32;
    options.cuda_graphs = graphs;
    options.max_prefill_tokens = max_prefill_tokens;
    absl::StatusOr<std::unique_ptr<CudaModel>> cuda_model =
        CudaModel::Create(*cpu_models_.back(), context(), options);
    if (!cuda_model.ok()) {
      EXPECT_EQ(cuda_model.status().code(), absl::StatusCode::kUnimplemented)
          << name << ": " << cuda_model.status();
      return nullptr;
    }
    return std::move(*cuda_model);
  }

  std::vector<std::unique_ptr<Model>> cpu_models_;
};

// The CUDA abc kernels know exp control only: other controls are refused by name (the server
// then serves the model on the CPU).
TEST_F(ModelCudaTest, RefusesAbcControlOtherThanExp) {
  for (const char* control : {"sigmoid", "relu", "random", "position", "block", "cluster"}) {
    const std::string name = std::string("dec_abc_") + control;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(name));
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModelOptions options;
    options.max_sequences = 4;
    options.max_context = 128;
    options.weights = WeightType::kF32;
    options.cuda_graphs = false;
    absl::StatusOr<std::unique_ptr<CudaModel>> cuda_model =
        CudaModel::Create(**model, context(), options);
    ASSERT_FALSE(cuda_model.ok()) << name;
    EXPECT_EQ(cuda_model.status().code(), absl::StatusCode::kUnimplemented);
    const std::string expected = std::string("abc attention with control \"") + control + "\"";
    EXPECT_NE(cuda_model.status().message().find(expected), std::string::npos)
        << cuda_model.status();
  }
}

// Feature-map cross attention (issue 15) has no CUDA kernel: refused naming the layer and type.
TEST_F(ModelCudaTest, RefusesFeatureMapCrossAttention) {
  for (const char* type : {"rfa", "t2r", "elu"}) {
    const std::string name = std::string("encdec_") + type + "_cross";
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(name));
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModelOptions options;
    options.max_sequences = 4;
    options.max_context = 128;
    options.weights = WeightType::kF32;
    options.cuda_graphs = false;
    absl::StatusOr<std::unique_ptr<CudaModel>> cuda_model =
        CudaModel::Create(**model, context(), options);
    ASSERT_FALSE(cuda_model.ok()) << name;
    EXPECT_EQ(cuda_model.status().code(), absl::StatusCode::kUnimplemented);
    const std::string expected =
        std::string("decoder_layers[0].cross_attention: ") + type + " cross attention";
    EXPECT_NE(cuda_model.status().message().find(expected), std::string::npos)
        << cuda_model.status();
  }
}

// Transformer-XL (issue 16) has no CUDA kernel: refused naming the layer and the type.
TEST_F(ModelCudaTest, RefusesTxl) {
  for (const char* name : {"dec_txl", "dec_txl_pre"}) {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(name));
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModelOptions options;
    options.max_sequences = 4;
    options.max_context = 128;
    options.weights = WeightType::kF32;
    options.cuda_graphs = false;
    absl::StatusOr<std::unique_ptr<CudaModel>> cuda_model =
        CudaModel::Create(**model, context(), options);
    ASSERT_FALSE(cuda_model.ok()) << name;
    EXPECT_EQ(cuda_model.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(cuda_model.status().message().find("decoder_layers[0]: txl attention"),
              std::string::npos)
        << cuda_model.status();
  }
}

// The Linformer's encoder and cross forms (abc position) are refused naming the layer and the
// control; the cross check comes first.
TEST_F(ModelCudaTest, RefusesAbcPositionInCrossAndEncoder) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir("encdec_abc_position"));
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModelOptions options;
  options.max_sequences = 4;
  options.max_context = 128;
  options.weights = WeightType::kF32;
  options.cuda_graphs = false;
  absl::StatusOr<std::unique_ptr<CudaModel>> cuda_model =
      CudaModel::Create(**model, context(), options);
  ASSERT_FALSE(cuda_model.ok());
  EXPECT_EQ(cuda_model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(cuda_model.status().message().find(
                "decoder_layers[0].cross_attention: abc attention with control \"position\""),
            std::string::npos)
      << cuda_model.status();
}

TEST_F(ModelCudaTest, MatchesGoldenLogitsAloneAndBatched) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaModel> model = Make(name, /*graphs=*/false);
    if (model == nullptr) continue;
    ++checked;
    const Golden golden = LoadGolden(name);
    const int64_t vocab = model->config().vocab_size;
    std::vector<int32_t> inputs = golden.prompt_ids;
    inputs.insert(inputs.end(), golden.decode_ids.begin(), golden.decode_ids.end());
    // Row i of the expected logits follows inputs[i].
    std::vector<float> expected = golden.prefill_logits;
    expected.insert(expected.end(), golden.decode_logits.begin(), golden.decode_logits.end());

    absl::StatusOr<int> alone = model->Acquire();
    absl::StatusOr<int> first = model->Acquire();
    absl::StatusOr<int> second = model->Acquire();
    ASSERT_TRUE(alone.ok() && first.ok() && second.ok());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string step = name + " step " + std::to_string(i);
      std::vector<float> logits;
      const int slots_alone[] = {*alone};
      ASSERT_TRUE(model->StepLogits(slots_alone, {&inputs[i], 1}, &logits).ok()) << step;
      ExpectClose(logits, Row(expected, i, vocab), kLogitsTolerance, step + " alone");
      // The same sequence next to another one (fed the inputs backwards) in one batch.
      std::vector<float> batched;
      const int slots_batched[] = {*second, *first};
      const int32_t tokens[] = {inputs[inputs.size() - 1 - i], inputs[i]};
      ASSERT_TRUE(model->StepLogits(slots_batched, tokens, &batched).ok()) << step;
      ExpectClose(Row(batched, 1, vocab), Row(expected, i, vocab), kLogitsTolerance,
                  step + " batched");
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GE(checked, 7) << "every decoder-only fixture without window attention";
}

// The prompt in chunks of 5 rows (12 tokens: chunks of 5, 5, 2), then decode steps.
TEST_F(ModelCudaTest, ChunkedPrefillMatchesGoldenLogits) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaModel> model = Make(name, /*graphs=*/false, /*max_prefill_tokens=*/5);
    if (model == nullptr) continue;
    ++checked;
    const Golden golden = LoadGolden(name);
    const int64_t vocab = model->config().vocab_size;
    const int slot = *model->Acquire();
    std::vector<float> prefill;
    ASSERT_TRUE(model->Prefill(slot, golden.prompt_ids, /*last_only=*/false, &prefill).ok());
    ExpectClose(prefill, golden.prefill_logits, kLogitsTolerance, name + " prefill");
    std::vector<float> last;
    const int other = *model->Acquire();
    ASSERT_TRUE(model->Prefill(other, golden.prompt_ids, /*last_only=*/true, &last).ok());
    ExpectClose(last, Row(golden.prefill_logits, golden.prompt_ids.size() - 1, vocab),
                kLogitsTolerance, name + " prefill last row");
    for (size_t i = 0; i < golden.decode_ids.size(); ++i) {
      std::vector<float> logits;
      const int slots[] = {slot};
      ASSERT_TRUE(model->StepLogits(slots, {&golden.decode_ids[i], 1}, &logits).ok());
      ExpectClose(logits, Row(golden.decode_logits, i, vocab), kLogitsTolerance,
                  name + " decode " + std::to_string(i) + " after prefill");
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GE(checked, 7);
}

// One Forward() over the prompts of several sequences of different lengths (the longest in
// the middle), then passes that mix a prompt's last token with decode tokens, give each
// sequence its own golden logits.
TEST_F(ModelCudaTest, ForwardOfSeveralSequencesMatchesGoldenLogits) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaModel> model = Make(name, /*graphs=*/false);
    if (model == nullptr) continue;
    ++checked;
    const Golden golden = LoadGolden(name);
    const int64_t vocab = model->config().vocab_size;
    const int64_t prompt = static_cast<int64_t>(golden.prompt_ids.size());
    ASSERT_GE(prompt, 4) << name;
    const int partial = *model->Acquire(), full = *model->Acquire(), lagging = *model->Acquire();
    const std::span<const int32_t> ids(golden.prompt_ids);
    // Rows: partial [0, 3), full [3, 3 + P), lagging [3 + P, 2P + 2): all but its last token.
    const CudaModel::SequenceTokens entries[] = {
        {partial, ids.first(3)}, {full, ids}, {lagging, ids.first(prompt - 1)}};
    std::vector<int64_t> wanted;
    for (int64_t r = 0; r < prompt; ++r) wanted.push_back(3 + r);  // every row of `full`
    wanted.push_back(2 * prompt + 1);                              // the last row of `lagging`
    std::vector<float> logits;
    ASSERT_TRUE(model->Forward(entries, wanted, &logits).ok()) << name;
    ASSERT_EQ(logits.size(), static_cast<size_t>((prompt + 1) * vocab));
    ExpectClose(std::vector<float>(logits.begin(), logits.begin() + prompt * vocab),
                golden.prefill_logits, kLogitsTolerance, name + " forward prompt");
    ExpectClose(Row(logits, prompt, vocab), Row(golden.prefill_logits, prompt - 2, vocab),
                kLogitsTolerance, name + " forward prompt, last row of the lagging sequence");
    EXPECT_EQ(model->position(partial), 3);
    EXPECT_EQ(model->position(lagging), prompt - 1);
    for (size_t i = 0; i < golden.decode_ids.size(); ++i) {
      // Step 0: `lagging` takes its last prompt token and the first decode token in one run.
      const int32_t catch_up[] = {golden.prompt_ids.back(), golden.decode_ids[0]};
      const std::span<const int32_t> lagging_tokens =
          i == 0 ? std::span<const int32_t>(catch_up) : std::span(&golden.decode_ids[i], 1);
      const CudaModel::SequenceTokens step[] = {{full, {&golden.decode_ids[i], 1}},
                                                {lagging, lagging_tokens}};
      const int64_t rows[] = {0, static_cast<int64_t>(lagging_tokens.size())};
      logits.clear();
      ASSERT_TRUE(model->Forward(step, rows, &logits).ok()) << name;
      for (int b = 0; b < 2; ++b) {
        ExpectClose(Row(logits, b, vocab), Row(golden.decode_logits, i, vocab), kLogitsTolerance,
                    name + " forward decode " + std::to_string(i) + " row " + std::to_string(b));
      }
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GE(checked, 7);
}

TEST_F(ModelCudaTest, GraphGreedySamplingEqualsEagerArgmax) {
  for (const std::string name :
       {"dec_abc", "dec_rfa_gaussian_gate", "dec_t2r", "dec_softmax", "dec_mixed"}) {
    std::unique_ptr<CudaModel> graphs = Make(name, /*graphs=*/true);
    std::unique_ptr<CudaModel> eager = Make(name, /*graphs=*/false);
    ASSERT_NE(graphs, nullptr);
    ASSERT_NE(eager, nullptr);
    ASSERT_TRUE(graphs->uses_graphs());
    const int64_t vocab = eager->config().vocab_size;
    std::vector<int> graph_slots, eager_slots;
    for (int i = 0; i < 3; ++i) {  // batch 3 runs in the bucket of 4
      graph_slots.push_back(*graphs->Acquire());
      eager_slots.push_back(*eager->Acquire());
    }
    std::vector<int32_t> tokens = {1, 5, 9};
    const std::vector<DeviceSamplingParams> greedy(3, DeviceSamplingParams{0, 0, 1, 0, 0});
    for (int step = 0; step < 20; ++step) {
      std::vector<int32_t> sampled;
      ASSERT_TRUE(graphs->StepSample(graph_slots, tokens, greedy, &sampled).ok());
      std::vector<float> logits;
      ASSERT_TRUE(eager->StepLogits(eager_slots, tokens, &logits).ok());
      for (int b = 0; b < 3; ++b) {
        ASSERT_NO_FATAL_FAILURE(
            ExpectGreedyPick(logits, b, vocab, sampled[b], name + " step " + std::to_string(step)));
      }
      tokens = sampled;
    }
  }
}

// Softmax graphs are captured per context bucket (256, 512, ... max_context): a run that
// crosses buckets, with sequences of different lengths in one batch, samples what eager steps
// sample.
TEST_F(ModelCudaTest, SoftmaxGraphsAcrossContextBucketsEqualEagerArgmax) {
  constexpr int kMaxContext = 700;  // buckets 256, 512, 700
  std::unique_ptr<CudaModel> graphs = Make("dec_softmax", /*graphs=*/true, 512, kMaxContext);
  std::unique_ptr<CudaModel> eager = Make("dec_softmax", /*graphs=*/false, 512, kMaxContext);
  ASSERT_NE(graphs, nullptr);
  ASSERT_NE(eager, nullptr);
  ASSERT_TRUE(graphs->uses_graphs());
  const int64_t vocab = eager->config().vocab_size;
  std::vector<int> graph_slots, eager_slots;
  std::vector<int32_t> tokens;
  for (int b = 0; b < 3; ++b) {
    graph_slots.push_back(*graphs->Acquire());
    eager_slots.push_back(*eager->Acquire());
    // Prompts of 1, 101 and 201 tokens: the batch's longest context leads.
    std::vector<int32_t> prompt;
    for (int t = 0; t < 1 + 100 * b; ++t)
      prompt.push_back(static_cast<int32_t>((7 * t + b) % vocab));
    std::vector<float> ignored;
    ASSERT_TRUE(graphs->Prefill(graph_slots.back(), prompt, true, &ignored).ok());
    ASSERT_TRUE(eager->Prefill(eager_slots.back(), prompt, true, &ignored).ok());
    tokens.push_back(prompt.back());
  }
  const std::vector<DeviceSamplingParams> greedy(3, DeviceSamplingParams{0, 0, 1, 0, 0});
  for (int step = 0; step < 450; ++step) {  // the longest context goes from 201 to 651
    std::vector<int32_t> sampled;
    ASSERT_TRUE(graphs->StepSample(graph_slots, tokens, greedy, &sampled).ok()) << step;
    std::vector<float> logits;
    ASSERT_TRUE(eager->StepLogits(eager_slots, tokens, &logits).ok()) << step;
    for (int b = 0; b < 3; ++b) {
      ASSERT_NO_FATAL_FAILURE(
          ExpectGreedyPick(logits, b, vocab, sampled[b], "step " + std::to_string(step)));
    }
    tokens = sampled;
  }
}

TEST_F(ModelCudaTest, RejectsBadSteps) {
  std::unique_ptr<CudaModel> model = Make("dec_abc", /*graphs=*/false);
  ASSERT_NE(model, nullptr);
  const int slot = *model->Acquire();
  std::vector<float> logits;
  const int slots[] = {slot, slot};
  const int32_t tokens[] = {1, 2};
  EXPECT_EQ(model->StepLogits(slots, tokens, &logits).code(),
            absl::StatusCode::kInvalidArgument);  // repeated slot
  const int one_slot[] = {slot};
  const int32_t bad_token[] = {static_cast<int32_t>(model->config().vocab_size)};
  EXPECT_EQ(model->StepLogits(one_slot, bad_token, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  const int free_slot[] = {3};
  EXPECT_EQ(model->StepLogits(free_slot, {tokens, 1}, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  // Forward() refuses before anything changes, naming the entry.
  const int32_t two[] = {1, 2};
  const CudaModel::SequenceTokens repeated[] = {{slot, two}, {slot, {two, 1}}};
  absl::Status status = model->Forward(repeated, {}, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("entries[1]"), std::string::npos) << status;
  const CudaModel::SequenceTokens empty[] = {{slot, {}}};
  EXPECT_EQ(model->Forward(empty, {}, &logits).code(), absl::StatusCode::kInvalidArgument);
  const CudaModel::SequenceTokens ok_entry[] = {{slot, two}};
  const int64_t descending[] = {1, 0};
  EXPECT_EQ(model->Forward(ok_entry, descending, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  const int64_t beyond[] = {2};
  EXPECT_EQ(model->Forward(ok_entry, beyond, &logits).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> too_many(static_cast<size_t>(model->max_rows() + 1), 1);
  const CudaModel::SequenceTokens oversized[] = {{slot, too_many}};
  EXPECT_EQ(model->Forward(oversized, {}, &logits).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->position(slot), 0);
  EXPECT_TRUE(logits.empty());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(model->Acquire().ok());
  EXPECT_EQ(model->Acquire().status().code(), absl::StatusCode::kResourceExhausted);
  model->Release(slot);
  EXPECT_TRUE(model->Acquire().ok());
}

}  // namespace
}  // namespace abcd::cuda
