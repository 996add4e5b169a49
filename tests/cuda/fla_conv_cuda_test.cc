// fla's short convolution and gated_deltanet on the device, through the CUDA dispatch
// (attention_cuda_dispatch.h: UploadCudaAttention, LaunchCudaAttention) against the CPU states
// (tests/engine/attention/fla_conv_cases.h: GatedDeltaState plain, GVA, gateless, negative
// eigenvalues, own silu; ShortConvState around gated_deltanet, gla, hgrn2 and gsa): random
// projection rows through PrepareRows, UpdateHead then ReadHead row by row and FinishRows on the
// CPU; the attended rows, the whole state blocks (the inner state and the convolution's window)
// and a speculative checkpoint compared, in the decode form over several steps and the scan form
// (runs of several rows over several chunks, so taps cross chunk boundaries through the window),
// with a padding row or run. Strided projection and output rows. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/attention/attention_cuda_dispatch.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/attention/fla_conv_cases.h"

namespace abcd::cuda {
namespace {

using testing_fla::AllConvCases;
using testing_fla::ConvCase;

// Reductions over up to 64 key channels and 96 value columns in different orders on the two
// sides (and FMAs on the device): the other fla kernels' tolerance.
constexpr float kConvTolerance = 1e-4f;

struct ConvLayout {
  bool scan = false;            // the scan form (first/count) or decode (one row a sequence)
  std::vector<int32_t> counts;  // rows per sequence (decode: all 1)
  std::vector<bool> padding;    // per sequence: a padding row/run (null state)
  int checkpoint_row = -1;      // the row whose state is checkpointed (-1: none)
};

class FlaConvCudaTest : public CudaTest {
 protected:
  void Compare(const ConvCase& c, const ConvLayout& layout, int passes) {
    const std::string what = c.name + (layout.scan ? " scan" : " decode");
    const AttentionState& state = *c.state;
    int64_t bytes = 0;
    absl::StatusOr<CudaAttention> uploaded =
        UploadCudaAttention(context(), c.spec, state, state.heads(), 0, 0, what, &bytes);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    const CudaAttention& attention = *uploaded;
    ASSERT_EQ(attention.has_conv, c.spec.conv_size > 0) << what;
    const int64_t floats = state.FixedFloats();
    const int64_t sequences = static_cast<int64_t>(layout.counts.size());
    const int64_t projection_width = c.projection_width, q_stride = projection_width + 3;
    const int64_t width = state.AttendedWidth(0), out_stride = width + 2;
    ASSERT_EQ(attention.attended_width, width) << what;
    const int64_t prepared_width = state.PreparedWidth();
    const KernelRowLayout kernel_layout = state.PreparedLayout();

    // One block per sequence; a padding sequence's block is the CPU's alone (its rows' taps).
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
    DeviceArray<float> scratch = Upload(std::vector<float>(rows * attention.scratch_width, NAN));
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
      const std::vector<float> projection = RandomFloats(rows * projection_width, 100 + pass);
      std::vector<int64_t> positions(static_cast<size_t>(rows));
      std::vector<StateRef> refs(static_cast<size_t>(rows));
      for (int64_t s = 0; s < sequences; ++s) {
        for (int32_t t = 0; t < layout.counts[static_cast<size_t>(s)]; ++t) {
          const size_t r = static_cast<size_t>(first[static_cast<size_t>(s)] + t);
          positions[r] = next_position[static_cast<size_t>(s)]++;
          refs[r] = {host_states.data() + s * floats, nullptr, positions[r]};
        }
      }
      // The CPU layer: prepare (the convolution reads the windows), each sequence's rows in
      // order, finish.
      std::vector<float> host_prepared(static_cast<size_t>(rows * prepared_width));
      state.PrepareRows(ctx, projection.data(), projection_width, rows, refs, host_prepared.data());
      std::vector<float> expected(static_cast<size_t>(rows * width), 0.0f);
      std::vector<float> expected_checkpoint;
      for (int64_t s = 0; s < sequences; ++s) {
        if (layout.padding[static_cast<size_t>(s)]) continue;
        for (int32_t t = 0; t < layout.counts[static_cast<size_t>(s)]; ++t) {
          const int64_t r = first[static_cast<size_t>(s)] + t;
          const float* row = host_prepared.data() + r * prepared_width;
          const StateRef& ref = refs[static_cast<size_t>(r)];
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
          LaunchCudaAttention(context(), attention, device_projection.data(),
                              device_positions.data(), scratch.data(), step, KvCacheRows{});
      ASSERT_TRUE(status.ok()) << at << ": " << status;
      const std::vector<float> got = Download(out);
      std::vector<float> attended(static_cast<size_t>(rows * width));
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(got.begin() + r * out_stride, got.begin() + r * out_stride + width,
                  attended.begin() + r * width);
      }
      ExpectClose(attended, expected, kConvTolerance, at + " output");
      ExpectClose(Download(device_blocks), host_states, kConvTolerance, at + " state");
      if (layout.checkpoint_row >= 0) {
        ExpectClose(Download(checkpoint), expected_checkpoint, kConvTolerance, at + " checkpoint");
      }
      if (HasFailure()) return;
    }
  }
};

TEST_F(FlaConvCudaTest, DecodeStepsMatchTheCpu) {
  for (const auto& c : AllConvCases()) {
    // Batch 1, then batch 3 with a padding row, over more steps than any case's taps.
    Compare(*c, ConvLayout{false, {1}, {false}, -1}, 5);
    Compare(*c, ConvLayout{false, {1, 1, 1}, {false, true, false}, 2}, 5);
    if (HasFailure()) return;
  }
}

TEST_F(FlaConvCudaTest, ScanRunsMatchTheCpu) {
  for (const auto& c : AllConvCases()) {
    // A lone long run; then runs of 5, 1 (padding) and 2 rows with a checkpoint mid-run (the
    // checkpoint's window mixes the old window and the run's rows).
    Compare(*c, ConvLayout{true, {40}, {false}, -1}, 2);
    Compare(*c, ConvLayout{true, {5, 1, 2}, {false, true, false}, 1}, 3);
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
