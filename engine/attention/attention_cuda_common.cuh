// Device helpers shared by the attention kernels (*_cuda.cu): vector loads, lane-group
// reductions, and the partial-result combine of split-K decoding (split_plan.h picks the splits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda::internal {

constexpr int kThreads = 128;  // threads per attention block (4 warps)

template <int kVec>
__device__ __forceinline__ void LoadVec(const float* p, float* r) {
  if constexpr (kVec == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    r[0] = x.x;
    r[1] = x.y;
    r[2] = x.z;
    r[3] = x.w;
  } else {
    r[0] = *p;
  }
}

template <int kVec>
__device__ __forceinline__ void StoreVec(float* p, const float* r) {
  if constexpr (kVec == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
  } else {
    *p = r[0];
  }
}

// Sum over aligned groups of `group` lanes (a power of two <= 32); every lane of the warp must
// call it. Each lane gets its group's sum.
__device__ __forceinline__ float GroupSum(float value, int group) {
  for (int offset = group / 2; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Lanes that cooperate on one row of `head_dim` floats read as `vec`-wide vectors: the largest
// power of two <= min(32, head_dim / vec). Rows longer than that are strided.
inline int LanesPerRow(int head_dim, int vec) {
  const int columns = head_dim / vec;
  int lanes = 1;
  while (lanes * 2 <= columns && lanes * 2 <= 32) lanes *= 2;
  return lanes;
}

// Blocks a launch has before splitting, as the split choice should see them: rows x heads in
// decode mode; in a scan, the blocks divided by the longest run (never fewer than the heads),
// so a long prompt chunk, the pass's critical path, is split as if it were nearly alone even
// beside many decode rows, while many short runs still count as a full grid.
inline int64_t SplitBlocks(const StepRows& rows, int64_t sequences, int n_heads) {
  const int64_t blocks = sequences * n_heads;
  if (rows.first == nullptr || rows.longest_run <= 1) return blocks;
  const int64_t scaled = blocks / rows.longest_run;
  return scaled > n_heads ? scaled : n_heads;
}

// Softmax-style partials, one per (row, head, split): [o (head_dim), m, l] where o is the
// exp(score - m)-weighted sum of values and l the sum of the weights. Writes
// out[b * out_stride + h * head_dim + c] = sum_s o_s[c] e^(m_s - M) / sum_s l_s e^(m_s - M).
// Defined in softmax_state_cuda.cu.
absl::Status CombineSoftmaxPartials(CudaContext& context, const float* partials, int64_t batch,
                                    int n_heads, int head_dim, int splits, float* out,
                                    int64_t out_stride);

}  // namespace abcd::cuda::internal
