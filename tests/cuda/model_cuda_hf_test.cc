// The Hugging Face fixtures (tests/fixtures/golden/hf_*) on the GPU against the CPU engine,
// through the one forward pass both run (engine/model/decoder_forward.h): the prompt as one
// prefill chunk, then 64 greedy steps teacher-forced with the CPU's pick, the device's logits
// within the CUDA tests' tolerance of the CPU's at every step and its greedy pick the CPU's
// argmax (or tied with it within that tolerance); fp32 weights, and bf16 weights against the CPU
// with the same bf16 matrices within the start-up probe's 16-bit tolerance. Fixtures whose layer
// types have no CUDA kernel must be refused as UNIMPLEMENTED naming the layer.
// Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda_backend.h"
#include "engine/model/model.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/fixtures.h"

namespace abcd::cuda {
namespace {

using abcd::testing::FixtureDir;
using abcd::testing::FixtureNames;
using abcd::testing::Golden;
using abcd::testing::LoadGolden;

constexpr int kGreedySteps = 64;

// Fixtures the device must take (not refuse): fla's short convolutions and gated_deltanet.
bool HasFlaConvOrDeltaKernels(const std::string& name) {
  for (const char* must : {"hf_gsa_conv", "hf_gla_conv_bias", "hf_hgrn2_conv", "hf_gated_deltanet",
                           "hf_gated_deltanet_gva"}) {
    if (name == must) return true;
  }
  return false;
}

int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

class ModelCudaHfTest : public CudaTest {
 protected:
  // Runs `name` on both backends with `weights` on the device; false when the CUDA backend
  // refuses the model (which must then be UNIMPLEMENTED naming a decoder layer).
  bool RunsLikeTheCpu(const std::string& name, WeightType weights, float tolerance) {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(name));
    EXPECT_TRUE(model.ok()) << name << ": " << model.status();
    if (!model.ok()) return false;
    CudaBackendOptions options;
    options.max_sequences = 4;
    options.max_context = 256;
    options.weights = weights;
    options.cuda_graphs = false;
    absl::StatusOr<std::unique_ptr<CudaBackend>> cuda = CudaBackend::Create(**model, options);
    if (!cuda.ok()) {
      EXPECT_FALSE(HasFlaConvOrDeltaKernels(name)) << name << ": " << cuda.status();
      EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnimplemented)
          << name << ": " << cuda.status();
      EXPECT_TRUE(absl::StrContains(cuda.status().message(), "decoder_layers["))
          << name << ": " << cuda.status();
      return false;
    }
    CpuBackend cpu(**model, int64_t{1} << 30);
    const Golden golden = LoadGolden(name);
    const int64_t vocab = (*model)->config().vocab_size;
    DecodeBackend* backends[] = {&cpu, cuda->get()};
    SequenceId ids[2];
    for (int b = 0; b < 2; ++b) ids[b] = backends[b]->Acquire().value();
    std::vector<DecodeRow> prompt[2];
    for (int b = 0; b < 2; ++b) {
      for (size_t i = 0; i < golden.prompt_ids.size(); ++i) {
        prompt[b].push_back({ids[b], golden.prompt_ids[i], i + 1 == golden.prompt_ids.size()});
      }
    }
    std::vector<float> logits[2];
    for (int b = 0; b < 2; ++b) {
      EXPECT_TRUE(backends[b]->Decode(prompt[b], &logits[b]).ok()) << name;
    }
    for (int step = 0; step <= kGreedySteps && !::testing::Test::HasFailure(); ++step) {
      const std::string what = absl::StrCat(name, " step ", step);
      ExpectClose(logits[1], logits[0], tolerance, what);
      const int32_t cpu_pick = Argmax(logits[0]);
      const int32_t cuda_pick = Argmax(logits[1]);
      const float best = logits[0][static_cast<size_t>(cpu_pick)];
      EXPECT_LE(best - logits[0][static_cast<size_t>(cuda_pick)],
                tolerance * std::max(1.0f, std::abs(best)))
          << what << ": the device picks " << cuda_pick << ", the CPU " << cpu_pick;
      if (step == kGreedySteps) break;
      for (int b = 0; b < 2; ++b) {
        logits[b].clear();
        const DecodeRow row{ids[b], cpu_pick, true};
        EXPECT_TRUE(backends[b]->Decode({&row, 1}, &logits[b]).ok()) << what;
        EXPECT_EQ(static_cast<int64_t>(logits[b].size()), vocab) << what;
      }
    }
    for (int b = 0; b < 2; ++b) backends[b]->Release(ids[b]);
    return true;
  }
};

// The sliding-window fixtures (Mistral; Qwen2 and Qwen3 with windows on some layers beside full
// softmax ones) run on the device: window_state_cuda.cu's ring, prompt longer than the window.
TEST_F(ModelCudaHfTest, SlidingWindowFixturesRunOnTheDevice) {
  for (const char* name : {"hf_mistral_window", "hf_qwen2_window", "hf_qwen3_window"}) {
    EXPECT_TRUE(RunsLikeTheCpu(name, WeightType::kF32, kLogitsTolerance)) << name;
    if (HasFailure()) return;
  }
}

TEST_F(ModelCudaHfTest, Fp32WeightsFollowTheCpuOverPrefillAnd64GreedySteps) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    if (!absl::StartsWith(name, "hf_")) continue;
    checked += RunsLikeTheCpu(name, WeightType::kF32, kLogitsTolerance) ? 1 : 0;
    if (HasFailure()) return;
  }
  // Llama (MHA, GQA, rope_parameters, sharded bf16), Mistral (window), Qwen2 (fp32, bf16,
  // window), Qwen3 (with and without biases, window), abcd_llama (t2r, abc, hybrid), the fla
  // mixers (gsa, gla, retnet, hgrn2; legacy names, GQA, t2r, hybrid, sharded bf16; short
  // convolutions) and gated_deltanet (GVA): every fixture.
  EXPECT_GE(checked, 29);
}

TEST_F(ModelCudaHfTest, Bf16WeightsFollowTheCpuWithinTheProbeTolerance) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    if (!absl::StartsWith(name, "hf_")) continue;
    checked += RunsLikeTheCpu(name, WeightType::kBF16, 5e-2f) ? 1 : 0;
    if (HasFailure()) return;
  }
  EXPECT_GE(checked, 29);
}

}  // namespace
}  // namespace abcd::cuda
