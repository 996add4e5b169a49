// What the fla device tests share (fla_state_cuda_test.cc: the fla mixers; fla_conv_cuda_test.cc:
// short convolutions and gated_deltanet): one state's CPU layer against a device launch over the
// same random projection rows. PrepareRows, UpdateHead then ReadHead row by row and FinishRows on
// the CPU; the launch on strided projection and output rows; the attended rows, the state blocks
// and a speculative checkpoint compared, in the decode form (one row a sequence) or the scan form
// (runs of rows), with padding rows or runs (null state: output zero, no state). Skipped without
// a GPU (CudaTest).
//
// Thread-safety: test-only; the gtest thread.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/attention/attention_state.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/ops/cpu_context.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {

// How one pass's rows belong to sequences.
struct FlaRowLayout {
  bool scan = false;            // the scan form (first/count) or decode (one row a sequence)
  std::vector<int32_t> counts;  // rows per sequence (decode: all 1)
  std::vector<bool> padding;    // per sequence: a padding row/run (null state)
  int checkpoint_row = -1;      // the row whose state is checkpointed (-1: none)
};

class FlaRowsCudaTest : public CudaTest {
 protected:
  // The random projection rows (`rows` of them, `seed`) of one pass, in the CPU layer's layout.
  using Projection = std::function<std::vector<float>(int32_t rows, uint32_t seed)>;
  // The device launch of one pass: `step`, the strided projection rows (step.q, writable), the
  // rows' positions and Widths::scratch floats of scratch a row, all on the device.
  using Launch = std::function<absl::Status(const StepRows& step, float* projection,
                                            const int64_t* positions, float* scratch)>;

  // The rows' widths in floats, as the test's upload reports them.
  struct Widths {
    int64_t projection = 0;  // a projection row (the CPU layer's input)
    int64_t attended = 0;    // an output row
    int64_t scratch = 0;     // the launch's scratch, a row
  };

  // Runs `passes` passes (one block a sequence, carried from pass to pass) of `state` on the CPU
  // and through `launch`, and expects the outputs, the state blocks and the checkpoint within
  // `tolerance`, naming `what` and the pass. `prepare_reads_states`: PrepareRows is given each
  // row's state block (the short convolution reads its window there), else positions alone.
  void CompareRows(const AttentionState& state, const FlaRowLayout& layout, int passes,
                   const std::string& what, const Widths& widths, bool prepare_reads_states,
                   const Projection& random_projection, const Launch& launch, float tolerance) {
    const int64_t floats = state.FixedFloats();
    const int64_t sequences = static_cast<int64_t>(layout.counts.size());
    const int64_t projection_width = widths.projection, q_stride = projection_width + 3;
    const int64_t width = widths.attended, out_stride = width + 2;
    const int64_t prepared_width = state.PreparedWidth();
    const KernelRowLayout kernel_layout = state.PreparedLayout();

    // One block per sequence; a padding sequence's block is the CPU's alone.
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
    DeviceArray<float> scratch = Upload(std::vector<float>(rows * widths.scratch, NAN));
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
      const std::vector<float> projection =
          random_projection(rows, static_cast<uint32_t>(100 + pass));
      std::vector<int64_t> positions(static_cast<size_t>(rows));
      std::vector<StateRef> refs(static_cast<size_t>(rows));
      for (int64_t s = 0; s < sequences; ++s) {
        for (int32_t t = 0; t < layout.counts[static_cast<size_t>(s)]; ++t) {
          const size_t r = static_cast<size_t>(first[static_cast<size_t>(s)] + t);
          positions[r] = next_position[static_cast<size_t>(s)]++;
          refs[r].position = positions[r];
          if (prepare_reads_states) refs[r].fixed = host_states.data() + s * floats;
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
      std::vector<float> strided = RandomFloats(rows * q_stride, static_cast<uint32_t>(7 + pass));
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
          launch(step, device_projection.data(), device_positions.data(), scratch.data());
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

}  // namespace abcd::cuda
