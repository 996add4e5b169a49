// The fla mixers on the device (fla_state_cuda.h: gla, retnet, hgrn2, gsa) against the CPU
// states (GatedLinearState, GsaState built from their options with random parameters,
// tests/engine/attention/fla_cases.h): random projection rows through PrepareRows, UpdateHead
// then ReadHead row by row, and FinishRows on the CPU, FlaMixerForward on the device; the
// attended rows, the state blocks and a speculative checkpoint compared, in the decode form (one
// row per sequence, several steps) and the scan form (runs of several rows, several chunks),
// with a padding row or run (null state: output zero, no state). Strided projection and output
// rows. Skipped without a GPU.
#include "engine/attention/fla_state_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
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

// How one pass's rows belong to sequences.
struct Layout {
  bool scan = false;            // the scan form (first/count) or decode (one row a sequence)
  std::vector<int32_t> counts;  // rows per sequence (decode: all 1)
  std::vector<bool> padding;    // per sequence: a padding row/run (null state)
  int checkpoint_row = -1;      // the row whose state is checkpointed (-1: none)
};

class FlaCudaTest : public CudaTest {
 protected:
  void Compare(const FlaCase& c, const Layout& layout, int passes,
               float tolerance = kFlaTolerance) {
    const std::string what = c.name + (layout.scan ? " scan" : " decode");
    const AttentionState& state = *c.state;
    int64_t bytes = 0;
    absl::StatusOr<CudaFlaMixer> uploaded = UploadFlaMixer(context(), state, what, &bytes);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    const CudaFlaMixer& mixer = *uploaded;
    ASSERT_EQ(mixer.prepared_width, state.PreparedWidth()) << what;
    ASSERT_EQ(mixer.state_floats, state.FixedFloats()) << what;
    const int64_t floats = state.FixedFloats();
    const int64_t sequences = static_cast<int64_t>(layout.counts.size());
    const int64_t projection_width = mixer.projection_width, q_stride = projection_width + 3;
    const int64_t width = mixer.attended_width, out_stride = width + 2;
    const int64_t prepared_width = mixer.prepared_width;
    const KernelRowLayout kernel_layout = state.PreparedLayout();

    std::vector<float> host_states(static_cast<size_t>(sequences * floats));
    for (int64_t s = 0; s < sequences; ++s) state.Init(host_states.data() + s * floats);
    DeviceArray<float> device_blocks = Upload(host_states);
    std::vector<float*> pointers;
    for (int64_t s = 0; s < sequences; ++s) {
      pointers.push_back(
          layout.padding[static_cast<size_t>(s)] ? nullptr : device_blocks.data() + s * floats);
    }
    DeviceArray<float*> device_pointers = Upload(pointers);
    std::vector<int32_t> first;
    int32_t rows = 0;
    for (int32_t count : layout.counts) {
      first.push_back(rows);
      rows += count;
    }
    const int32_t longest = *std::max_element(layout.counts.begin(), layout.counts.end());
    DeviceArray<int32_t> device_first = Upload(first), device_count = Upload(layout.counts);
    DeviceArray<float> prepared = Upload(std::vector<float>(rows * prepared_width, NAN));
    DeviceArray<float> checkpoint = Upload(std::vector<float>(floats, NAN));
    std::vector<float*> checkpoint_pointers(static_cast<size_t>(rows), nullptr);
    if (layout.checkpoint_row >= 0) {
      checkpoint_pointers[static_cast<size_t>(layout.checkpoint_row)] = checkpoint.data();
    }
    DeviceArray<float*> device_checkpoints = Upload(checkpoint_pointers);
    std::vector<int64_t> next_position(static_cast<size_t>(sequences), 0);
    CpuContext ctx(1);

    for (int pass = 0; pass < passes; ++pass) {
      const std::string at = what + " pass " + std::to_string(pass);
      const std::vector<float> projection = RandomProjection(c, rows, 100 + pass);
      std::vector<int64_t> positions(static_cast<size_t>(rows));
      std::vector<StateRef> refs(static_cast<size_t>(rows));
      for (int64_t s = 0; s < sequences; ++s) {
        for (int32_t t = 0; t < layout.counts[static_cast<size_t>(s)]; ++t) {
          const int64_t r = first[static_cast<size_t>(s)] + t;
          positions[static_cast<size_t>(r)] = next_position[static_cast<size_t>(s)]++;
          refs[static_cast<size_t>(r)].position = positions[static_cast<size_t>(r)];
        }
      }
      // The CPU layer: prepare, the rows of each sequence in order, finish.
      std::vector<float> host_prepared(static_cast<size_t>(rows * prepared_width));
      state.PrepareRows(ctx, projection.data(), projection_width, rows, refs, host_prepared.data());
      std::vector<float> expected(static_cast<size_t>(rows * width), 0.0f);
      std::vector<float> expected_checkpoint;
      for (int64_t s = 0; s < sequences; ++s) {
        if (layout.padding[static_cast<size_t>(s)]) continue;
        for (int32_t t = 0; t < layout.counts[static_cast<size_t>(s)]; ++t) {
          const int64_t r = first[static_cast<size_t>(s)] + t;
          const float* row = host_prepared.data() + r * prepared_width;
          StateRef ref{host_states.data() + s * floats, nullptr, positions[static_cast<size_t>(r)]};
          const KeyValueRow kv{row + kernel_layout.k, row + kernel_layout.v,
                               row + kernel_layout.extra};
          for (int h = 0; h < state.heads(); ++h) {
            state.UpdateHead(h, kv, ref);
            state.ReadHead(h, row, ref, expected.data() + r * width);
          }
          if (r == layout.checkpoint_row) {
            expected_checkpoint.assign(ref.fixed, ref.fixed + floats);
          }
        }
      }
      state.FinishRows(ctx, host_prepared.data(), rows, expected.data());
      for (int64_t s = 0; s < sequences; ++s) {
        if (!layout.padding[static_cast<size_t>(s)]) continue;
        const int64_t r0 = first[static_cast<size_t>(s)];
        std::fill(expected.begin() + r0 * width,
                  expected.begin() + (r0 + layout.counts[static_cast<size_t>(s)]) * width, 0.0f);
      }

      // The device layer over strided rows.
      std::vector<float> strided = RandomFloats(rows * q_stride, 7 + pass);
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(projection.begin() + r * projection_width,
                  projection.begin() + (r + 1) * projection_width, strided.begin() + r * q_stride);
      }
      DeviceArray<float> device_projection = Upload(strided);
      DeviceArray<int64_t> device_positions = Upload(positions);
      DeviceArray<float> out = Upload(std::vector<float>(rows * out_stride, NAN));
      StepRows step;
      step.batch = rows;
      step.q = device_projection.data();
      step.q_stride = q_stride;
      step.states = device_pointers.data();
      step.out = out.data();
      step.out_stride = out_stride;
      if (layout.scan) {
        step.sequences = sequences;
        step.first = device_first.data();
        step.count = device_count.data();
        step.longest_run = longest;
      }
      if (layout.checkpoint_row >= 0) step.checkpoints = device_checkpoints.data();
      const absl::Status status =
          FlaMixerForward(context(), mixer, step, device_positions.data(), prepared.data());
      ASSERT_TRUE(status.ok()) << at << ": " << status;
      const std::vector<float> got = Download(out);
      std::vector<float> attended(static_cast<size_t>(rows * width));
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(got.begin() + r * out_stride, got.begin() + r * out_stride + width,
                  attended.begin() + r * width);
      }
      ExpectClose(attended, expected, tolerance, at + " output");
      ExpectClose(Download(device_blocks), host_states, tolerance, at + " state");
      if (layout.checkpoint_row >= 0) {
        ExpectClose(Download(checkpoint), expected_checkpoint, tolerance, at + " checkpoint");
      }
      if (HasFailure()) return;
    }
  }
};

TEST_F(FlaCudaTest, DecodeStepsMatchTheCpu) {
  for (const auto& c : AllCases()) {
    // Batch 1 (the key rows split across blocks) and batch 3 with a padding row.
    Compare(*c, Layout{false, {1}, {false}, -1}, 3);
    Compare(*c, Layout{false, {1, 1, 1}, {false, true, false}, 2}, 3);
    if (HasFailure()) return;
  }
}

TEST_F(FlaCudaTest, ScanRunsMatchTheCpu) {
  for (const auto& c : AllCases()) {
    // A lone long run; then runs of 5, 1 (padding) and 3 rows with a checkpoint mid-run.
    Compare(*c, Layout{true, {40}, {false}, -1}, 2);
    Compare(*c, Layout{true, {5, 1, 3}, {false, true, false}, 2}, 2);
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
    Compare(*c, Layout{false, {1}, {false}, -1}, 2, kFlaLongReductionTolerance);
    Compare(*c, Layout{true, {6, 2}, {false, false}, 3}, 1, kFlaLongReductionTolerance);
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
