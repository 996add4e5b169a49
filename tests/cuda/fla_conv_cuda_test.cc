// fla's short convolution and gated_deltanet on the device, through the CUDA dispatch
// (attention_cuda_dispatch.h: UploadCudaAttention, LaunchCudaAttention) against the CPU states
// (tests/engine/attention/fla_conv_cases.h: GatedDeltaState plain, GVA, gateless, negative
// eigenvalues, own silu; ShortConvState around gated_deltanet, gla, hgrn2 and gsa): random
// projection rows through PrepareRows, UpdateHead then ReadHead row by row and FinishRows on the
// CPU; the attended rows, the whole state blocks (the inner state and the convolution's window)
// and a speculative checkpoint compared, in the decode form over several steps and the scan form
// (runs of several rows over several chunks, so taps cross chunk boundaries through the window),
// with a padding row or run. Strided projection and output rows. Skipped without a GPU.
#include <cstdint>
#include <string>

#include "engine/attention/attention_cuda_dispatch.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/fla_rows_cuda_test.h"
#include "tests/engine/attention/fla_conv_cases.h"

namespace abcd::cuda {
namespace {

using testing_fla::AllConvCases;
using testing_fla::ConvCase;

// Reductions over up to 64 key channels and 96 value columns in different orders on the two
// sides (and FMAs on the device): the other fla kernels' tolerance.
constexpr float kConvTolerance = 1e-4f;

class FlaConvCudaTest : public FlaRowsCudaTest {
 protected:
  void Compare(const ConvCase& c, const FlaRowLayout& layout, int passes) {
    const std::string what = c.name + (layout.scan ? " scan" : " decode");
    const AttentionState& state = *c.state;
    int64_t bytes = 0;
    absl::StatusOr<CudaAttention> uploaded =
        UploadCudaAttention(context(), c.spec, state, state.heads(), 0, 0, what, &bytes);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    const CudaAttention& attention = *uploaded;
    ASSERT_EQ(attention.has_conv, c.spec.conv_size > 0) << what;
    const int64_t width = state.AttendedWidth(0);
    ASSERT_EQ(attention.attended_width, width) << what;
    const int64_t projection_width = c.projection_width;
    CompareRows(
        state, layout, passes, what, {projection_width, width, attention.scratch_width},
        /*prepare_reads_states=*/true,
        [&](int32_t rows, uint32_t seed) { return RandomFloats(rows * projection_width, seed); },
        [&](const StepRows& step, float* projection, const int64_t* positions, float* scratch) {
          return LaunchCudaAttention(context(), attention, projection, positions, scratch, step,
                                     KvCacheRows{});
        },
        kConvTolerance);
  }
};

TEST_F(FlaConvCudaTest, DecodeStepsMatchTheCpu) {
  for (const auto& c : AllConvCases()) {
    // Batch 1, then batch 3 with a padding row, over more steps than any case's taps.
    Compare(*c, FlaRowLayout{false, {1}, {false}, -1}, 5);
    Compare(*c, FlaRowLayout{false, {1, 1, 1}, {false, true, false}, 2}, 5);
    if (HasFailure()) return;
  }
}

TEST_F(FlaConvCudaTest, ScanRunsMatchTheCpu) {
  for (const auto& c : AllConvCases()) {
    // A lone long run; then runs of 5, 1 (padding) and 2 rows with a checkpoint mid-run (the
    // checkpoint's window mixes the old window and the run's rows).
    Compare(*c, FlaRowLayout{true, {40}, {false}, -1}, 2);
    Compare(*c, FlaRowLayout{true, {5, 1, 2}, {false, true, false}, 1}, 3);
    if (HasFailure()) return;
  }
}

// The launch planning is host code: this runs without a GPU.
TEST(GatedDeltaPlanTest, TilesOf32ValueColumnsAndQkInSharedMemory) {
  fla::DeltaParams p;
  p.heads = 6;  // fla-hub gated_deltanet 1.3B: 6 heads, K 256, V 512
  p.kv_heads = 6;
  p.key_dim = 256;
  p.value_dim = 512;
  absl::StatusOr<internal::GatedDeltaPlan> plan = internal::PlanGatedDeltaStep(p, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tiles, 16);  // 96 blocks at batch 1
  EXPECT_EQ(plan->shared_bytes, (2 * 256 + 128) * sizeof(float));
  p.value_dim = 40;  // a partial last tile
  plan = internal::PlanGatedDeltaStep(p, 256);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tiles, 2);
  EXPECT_FALSE(internal::PlanGatedDeltaStep(p, 70000).ok());  // more sequences than grid rows
  p.key_dim = 8192;  // q and k would not fit the default shared memory
  const absl::Status big = internal::PlanGatedDeltaStep(p, 1).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("key_dim 8192"), std::string::npos) << big;
}

}  // namespace
}  // namespace abcd::cuda
