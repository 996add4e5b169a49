// The fla mixers on the device (fla_state_cuda.h: gla, retnet, hgrn2, gsa) against the CPU
// states (GatedLinearState, GsaState built from their options with random parameters,
// tests/engine/attention/fla_cases.h): random projection rows through PrepareRows, UpdateHead
// then ReadHead row by row, and FinishRows on the CPU, FlaMixerForward on the device; the
// attended rows, the state blocks and a speculative checkpoint compared, in the decode form (one
// row per sequence, several steps) and the scan form (runs of several rows, several chunks),
// with a padding row or run (null state: output zero, no state). Strided projection and output
// rows. Skipped without a GPU.
#include "engine/attention/fla_state_cuda.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/fla_rows_cuda_test.h"
#include "tests/engine/attention/fla_cases.h"

namespace abcd::cuda {
namespace {

using testing_fla::AllCases;
using testing_fla::FlaCase;
using testing_fla::RandomProjection;

// Reductions over 256-512 key channels (S^T q, gsa's slot scores before their softmax): the
// tolerance attention_cuda_test gives its long reductions.
constexpr float kFlaLongReductionTolerance = 3e-4f;

// The two backends sum S^T q, the slot softmax and the norm statistics in different orders
// (and nvcc contracts into FMAs): the tolerance the other linear-state CUDA tests use.
constexpr float kFlaTolerance = 1e-4f;

class FlaCudaTest : public FlaRowsCudaTest {
 protected:
  void Compare(const FlaCase& c, const FlaRowLayout& layout, int passes,
               float tolerance = kFlaTolerance) {
    const std::string what = c.name + (layout.scan ? " scan" : " decode");
    const AttentionState& state = *c.state;
    int64_t bytes = 0;
    absl::StatusOr<CudaFlaMixer> uploaded = UploadFlaMixer(context(), state, what, &bytes);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    const CudaFlaMixer& mixer = *uploaded;
    ASSERT_EQ(mixer.prepared_width, state.PreparedWidth()) << what;
    ASSERT_EQ(mixer.state_floats, state.FixedFloats()) << what;
    CompareRows(
        state, layout, passes, what,
        {mixer.projection_width, mixer.attended_width, mixer.prepared_width},
        /*prepare_reads_states=*/false,
        [&](int32_t rows, uint32_t seed) { return RandomProjection(c, rows, seed); },
        [&](const StepRows& step, float*, const int64_t* positions, float* prepared) {
          return FlaMixerForward(context(), mixer, step, positions, prepared);
        },
        tolerance);
  }
};

TEST_F(FlaCudaTest, DecodeStepsMatchTheCpu) {
  for (const auto& c : AllCases()) {
    // Batch 1 (the key rows split across blocks) and batch 3 with a padding row.
    Compare(*c, FlaRowLayout{false, {1}, {false}, -1}, 3);
    Compare(*c, FlaRowLayout{false, {1, 1, 1}, {false, true, false}, 2}, 3);
    if (HasFailure()) return;
  }
}

TEST_F(FlaCudaTest, ScanRunsMatchTheCpu) {
  for (const auto& c : AllCases()) {
    // A lone long run; then runs of 5, 1 (padding) and 3 rows with a checkpoint mid-run.
    Compare(*c, FlaRowLayout{true, {40}, {false}, -1}, 2);
    Compare(*c, FlaRowLayout{true, {5, 1, 3}, {false, true, false}, 2}, 2);
    if (HasFailure()) return;
  }
}

TEST_F(FlaCudaTest, HubShapesMatchTheCpu) {
  // The fla-hub 1.3B layers' shapes (several column tiles, key rows and slots split at batch 1).
  using M = MixerFeatureMap;
  std::vector<std::unique_ptr<FlaCase>> cases;
  cases.push_back(testing_fla::GatedLinearCase(AttentionType::kGla, 4, 4, 256, 512, true, false,
                                               M::kNone, false, 21));
  cases.push_back(testing_fla::GatedLinearCase(AttentionType::kRetnet, 8, 8, 256, 512, true, false,
                                               M::kNone, false, 22));
  cases.push_back(testing_fla::GatedLinearCase(AttentionType::kHgrn2, 16, 16, 128, 128, false,
                                               false, M::kNone, true, 23));
  cases.push_back(testing_fla::GsaCase(4, 4, 512, 512, 64, M::kSwish, 24));
  const char* names[] = {"gla 1.3B", "retnet 1.3B", "hgrn2 1.3B", "gsa 1.3B"};
  for (size_t i = 0; i < cases.size(); ++i) {
    FlaCase* c = cases[i].get();
    c->name = names[i];
    Compare(*c, FlaRowLayout{false, {1}, {false}, -1}, 2, kFlaLongReductionTolerance);
    Compare(*c, FlaRowLayout{true, {6, 2}, {false, false}, 3}, 1, kFlaLongReductionTolerance);
    if (HasFailure()) return;
  }
}

// The launch planning is host code: these run without a GPU.
fla::Params PlanShape(fla::Kind kind, int heads, int key_dim, int value_dim, int slots = 0) {
  fla::Params p;
  p.kind = kind;
  p.heads = p.kv_heads = heads;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  p.slots = slots;
  return p;
}

constexpr int kH200Sms = 132;

TEST(FlaStepPlanTest, GatedLinearSplitsKeyRowsOnlyWhenTheGridIsSmall) {
  // gla at the fla-hub 1.3B shape: 4 heads, S [256, 512] each.
  const fla::Params gla = PlanShape(fla::Kind::kGla, 4, 256, 512);
  absl::StatusOr<internal::GatedLinearPlan> one =
      internal::PlanGatedLinearStep(gla, 1, 1, 1, kH200Sms);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->vec, 4);
  EXPECT_EQ(one->tiles, 4);  // 128 columns a tile
  EXPECT_EQ(one->split.splits, 16);
  EXPECT_EQ(one->split.chunk, 16);  // the smallest split
  EXPECT_EQ(one->partial_floats, 16 * 2048);
  EXPECT_LE(one->shared_bytes, static_cast<size_t>(kDefaultSharedMemoryBytes));
  absl::StatusOr<internal::GatedLinearPlan> many =
      internal::PlanGatedLinearStep(gla, 256, 256, 1, kH200Sms);
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(many->split.splits, 1);
  EXPECT_EQ(many->partial_floats, 0);
  // A value width that is not a multiple of 4: one column a lane, 32-column tiles.
  absl::StatusOr<internal::GatedLinearPlan> odd =
      internal::PlanGatedLinearStep(PlanShape(fla::Kind::kHgrn2, 2, 32, 50), 1, 1, 1, kH200Sms);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->vec, 1);
  EXPECT_EQ(odd->tiles, 2);
}

TEST(FlaStepPlanTest, GatedLinearPartialsStayWithinTheirCapOnALongPrompt) {
  // One 2,048-row prompt chunk: split like a lone sequence, but its 16 partial rows per row
  // would need 256 MiB; 4 splits fit the 64 MiB cap.
  const fla::Params gla = PlanShape(fla::Kind::kGla, 4, 256, 512);
  absl::StatusOr<internal::GatedLinearPlan> plan =
      internal::PlanGatedLinearStep(gla, 2048, 1, 2048, kH200Sms);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->split.splits, 4);
  EXPECT_LE(plan->partial_floats * static_cast<int64_t>(sizeof(float)),
            internal::kFlaMaxPartialBytes);
  EXPECT_FALSE(internal::PlanGatedLinearStep(gla, 70000, 70000, 1, kH200Sms).ok());
}

TEST(FlaStepPlanTest, GsaSplitsSlotsWhereTheCombineTakesTheValueWidth) {
  absl::StatusOr<internal::GsaPlan> plan =
      internal::PlanGsaStep(PlanShape(fla::Kind::kGsa, 4, 512, 512, 64), 1, 1, 1, kH200Sms);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->vec, 4);
  EXPECT_EQ(plan->value_span, 128);  // 128 float4 columns: one thread each
  EXPECT_EQ(plan->value_groups, 1);
  EXPECT_EQ(plan->split.splits, 16);
  EXPECT_EQ(plan->split.chunk, 4);
  EXPECT_EQ(plan->partial_floats, 4 * 16 * (512 + 2));
  EXPECT_LE(plan->shared_bytes, static_cast<size_t>(kDefaultSharedMemoryBytes));
  // 640 value columns: more than the combine's 4 a thread, so the slots stay in one block.
  absl::StatusOr<internal::GsaPlan> wide =
      internal::PlanGsaStep(PlanShape(fla::Kind::kGsa, 4, 64, 640, 64), 1, 1, 1, kH200Sms);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->split.splits, 1);
  EXPECT_EQ(wide->value_span, 128);
  // Small heads: 8 float4 columns a slot row, 16 groups of 8 threads over the slots.
  absl::StatusOr<internal::GsaPlan> small =
      internal::PlanGsaStep(PlanShape(fla::Kind::kGsa, 4, 32, 32, 16), 128, 128, 1, kH200Sms);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->value_span, 8);
  EXPECT_EQ(small->value_groups, 16);
  EXPECT_EQ(small->split.splits, 1);
}

}  // namespace
}  // namespace abcd::cuda
