// Device helpers shared by the attention kernels (*_cuda.cu): vector loads, lane-group
// reductions, a sequence's rows in a step, the output of CUDA-graph padding rows, the block
// softmax of split-K decoding and its partial-result combine (split_plan.h picks the splits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/split_plan.h"
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

// The rows block row `sequence` of a launch covers: decode, one row (row = sequence); prefill
// (rows.first set), the sequence's run of rows in order, a scan over its state.
__device__ __forceinline__ void SequenceRows(const StepRows& rows, int64_t sequence, int64_t* first,
                                             int64_t* count) {
  *first = rows.first != nullptr ? rows.first[sequence] : sequence;
  *count = rows.first != nullptr ? rows.count[sequence] : 1;
}

// Speculative decoding: after row b, copies `floats` floats at `offset` of the state block
// `state` to the same offset of rows.checkpoints[b] (when set), with the block's threads, and
// waits for them, so the next row may change the state. Every thread of the block must call it
// after the row's last __syncthreads(); each block copies only the part of the state it owns.
__device__ __forceinline__ void SaveCheckpoint(const StepRows& rows, int64_t b, const float* state,
                                               int64_t offset, int64_t floats) {
  if (rows.checkpoints == nullptr || rows.checkpoints[b] == nullptr) return;
  float* saved = rows.checkpoints[b] + offset;
  for (int64_t i = threadIdx.x; i < floats; i += kThreads) saved[i] = state[offset + i];
  __syncthreads();
}

// Rows [first, first + count) of a padding row of a CUDA-graph bucket (no state or cache):
// head h's output is zero; split across blocks, this block's partial is one the combine turns
// into zero: o = 0 and its kStats trailing floats m = 0, l = 1 (softmax-style partials,
// kStats = 2) or denominator = 1 (the linear kernels' partials, kStats = 1).
template <int kStats>
__device__ __forceinline__ void WritePaddingRows(const StepRows& rows, float* partials,
                                                 int64_t first, int64_t count, int n_heads, int h,
                                                 int dh) {
  const int split = blockIdx.z, splits = gridDim.z;
  for (int64_t b = first; b < first + count; ++b) {
    for (int c = threadIdx.x; c < dh; c += kThreads) {
      if (splits == 1) {
        rows.out[b * rows.out_stride + static_cast<int64_t>(h) * dh + c] = 0.0f;
      } else {
        float* partial = partials + ((b * n_heads + h) * splits + split) * (dh + kStats);
        partial[c] = 0.0f;
        if (c == 0) {
          if constexpr (kStats == 2) {
            partial[dh] = 0.0f;      // m
            partial[dh + 1] = 1.0f;  // l: the combine then yields 0
          } else {
            partial[dh] = 1.0f;  // denominator: the combine then yields 0
          }
        }
      }
    }
  }
}

// Softmax over `count` scores in shared memory, by one whole warp: each score s becomes
// e^(s - m), stats[0] = m (their max, -inf when count is 0) and stats[1] = l (the sum of the
// weights). The caller synchronises the block afterwards.
__device__ __forceinline__ void WarpSoftmax(float* scores, int count, float* stats) {
  const int lane = threadIdx.x % 32;
  float m = -INFINITY;
  for (int i = lane; i < count; i += 32) m = fmaxf(m, scores[i]);
  m = WarpMax(m);
  float l = 0.0f;
  for (int i = lane; i < count; i += 32) {
    const float e = expf(scores[i] - m);
    scores[i] = e;
    l += e;
  }
  l = GroupSum(l, 32);
  if (lane == 0) {
    stats[0] = m;
    stats[1] = l;
  }
}

// WarpSoftmax by the block's first warp (the other warps return at once).
__device__ __forceinline__ void BlockSoftmax(float* scores, int count, float* stats) {
  if (threadIdx.x / 32 != 0) return;
  WarpSoftmax(scores, count, stats);
}

// The end of a softmax-style block over one (row b, head h): o[c] = the sum over its
// `value_groups` partial rows reduce[g * dh + c], then o / l into rows.out (unsplit) or the
// split-K partial [o (dh), m, l] that CombineSoftmaxPartials merges; stats = {m, l}. By the
// whole block, after the block synchronised over reduce and stats.
__device__ __forceinline__ void WriteSoftmaxHead(const StepRows& rows, float* partials, int64_t b,
                                                 int n_heads, int h, int dh, const float* reduce,
                                                 int value_groups, const float* stats) {
  const int split = blockIdx.z, splits = gridDim.z;
  const float m = stats[0], l = stats[1];
  for (int c = threadIdx.x; c < dh; c += kThreads) {
    float o = 0.0f;
    for (int g = 0; g < value_groups; ++g) o += reduce[g * dh + c];
    if (splits == 1) {
      rows.out[b * rows.out_stride + static_cast<int64_t>(h) * dh + c] = o / l;
    } else {
      float* partial = partials + ((b * n_heads + h) * splits + split) * (dh + 2);
      partial[c] = o;
      if (c == 0) {
        partial[dh] = m;
        partial[dh + 1] = l;
      }
    }
  }
}

// Lanes that cooperate on one row of `head_dim` floats read as `vec`-wide vectors: the largest
// power of two <= min(32, head_dim / vec). Rows longer than that are strided.
inline int LanesPerRow(int head_dim, int vec) {
  const int columns = head_dim / vec;
  int lanes = 1;
  while (lanes * 2 <= columns && lanes * 2 <= 32) lanes *= 2;
  return lanes;
}

// Blocks a launch of `rows` has before splitting (split_plan.h's SplitBlocks): a scan's longest
// run counts, a decode step's rows do not.
inline int64_t SplitBlocks(const StepRows& rows, int64_t sequences, int n_heads) {
  return cuda::SplitBlocks(sequences, n_heads, rows.first != nullptr ? rows.longest_run : 1);
}

// Softmax-style partials, one per (row, head, split): [o (head_dim), m, l] where o is the
// exp(score - m)-weighted sum of values and l the sum of the weights. Writes
// out[b * out_stride + h * head_dim + c] = sum_s o_s[c] e^(m_s - M) / sum_s l_s e^(m_s - M).
// Defined in softmax_state_cuda.cu.
absl::Status CombineSoftmaxPartials(CudaContext& context, const float* partials, int64_t batch,
                                    int n_heads, int head_dim, int splits, float* out,
                                    int64_t out_stride);

}  // namespace abcd::cuda::internal
