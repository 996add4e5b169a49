// gsa's step on the device (fla_state_cuda.h): per (sequence, head, slot split) one block folds
// the row into its slots' K~ rows and scores them (a lane group per slot), takes the softmax over
// its slots, then folds the row into their V~ rows and mixes them (a thread per value column),
// one pass over the state each, as abc's kernel (abc_state_cuda.cu) with gsa's forget gates:
//   K~[s] = alpha_s K~[s] + (1 - alpha_s) k,  V~[s] = alpha_s V~[s] + (1 - alpha_s) v.
// Splits combine their softmax partials as split-K decoding does (CombineSoftmaxPartials).

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_common.cuh"
#include "engine/attention/fla_math.h"
#include "engine/attention/fla_state_cuda.h"
#include "engine/attention/split_plan.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

using internal::BlockSoftmax;
using internal::GroupSum;
using internal::kThreads;
using internal::LoadVec;
using internal::SaveCheckpoint;
using internal::SequenceRows;
using internal::StoreVec;
using internal::WritePaddingRows;

static_assert(kThreads == internal::kFlaStepThreads, "the planner's block size");

// Dynamic shared memory: q, k [K] | v [V] | alpha, score [chunk] | value partials [groups, V] |
// stats [2]. `span` threads share a V~ row's columns (GsaPlan::value_span).
template <int kVec, bool kCheckpoints>
__global__ void __launch_bounds__(kThreads)
    GsaStepKernel(fla::Params params, StepRows rows, const float* prepared, int64_t prepared_width,
                  int chunk, int lanes, int span, float* partials) {
  extern __shared__ float shared[];
  const int h = blockIdx.x;
  const int64_t sequence = blockIdx.y;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int split = blockIdx.z, splits = gridDim.z;
  const int n = params.slots, K = params.key_dim, V = params.value_dim;
  const int j0 = split * chunk;
  const int local = min(n, j0 + chunk) - j0;
  if (rows.states[sequence] == nullptr) {
    // A padding row of a CUDA-graph bucket: no state to touch; its output is zero.
    WritePaddingRows<2>(rows, partials, first, count, params.heads, h, V);
    return;
  }
  const int key_columns = K / kVec, value_columns = V / kVec;
  const int value_groups = kThreads / span;

  float* q_s = shared;
  float* k_s = q_s + K;
  float* v_s = k_s + K;
  float* alpha_s = v_s + V;
  float* score_s = alpha_s + chunk;
  float* reduce_s = score_s + chunk;
  float* stats_s = reduce_s + value_groups * V;

  const int kv = h / (params.heads / params.kv_heads);
  const int64_t head_offset = static_cast<int64_t>(h) * n * (K + V);
  float* keys = rows.states[sequence] + head_offset;
  float* values = keys + static_cast<int64_t>(n) * K;
  for (int64_t b = first; b < first + count; ++b) {
    const float* row = prepared + b * prepared_width;
    const float* q = row + static_cast<int64_t>(h) * K;
    const float* k = row + params.KOffset() + static_cast<int64_t>(kv) * K;
    const float* v = row + params.VOffset() + static_cast<int64_t>(kv) * V;
    const float* alpha = row + params.ExtraOffset() + static_cast<int64_t>(kv) * n;
    for (int c = threadIdx.x; c < K; c += kThreads) {
      q_s[c] = q[c];
      k_s[c] = k[c];
    }
    for (int c = threadIdx.x; c < V; c += kThreads) v_s[c] = v[c];
    for (int jj = threadIdx.x; jj < local; jj += kThreads) alpha_s[jj] = alpha[j0 + jj];
    __syncthreads();

    // Keys: a group of `lanes` lanes per slot folds the slot's key row in and scores it.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane % lanes;
    const int groups_per_warp = 32 / lanes;
    const int groups = (kThreads / 32) * groups_per_warp;
    const int group = warp * groups_per_warp + lane / lanes;
    for (int base = 0; base < local; base += groups) {
      const int jj = base + group;
      float dot = 0.0f;
      if (jj < local) {
        const float a = alpha_s[jj], w = 1.0f - a;
        float* key_row = keys + static_cast<int64_t>(j0 + jj) * K;
        for (int c4 = sub; c4 < key_columns; c4 += lanes) {
          float key[kVec];
          LoadVec<kVec>(key_row + c4 * kVec, key);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const int c = c4 * kVec + e;
            key[e] = a * key[e] + w * k_s[c];
            dot += q_s[c] * key[e];
          }
          StoreVec<kVec>(key_row + c4 * kVec, key);
        }
      }
      dot = GroupSum(dot, lanes);
      if (jj < local && sub == 0) score_s[jj] = dot;
    }
    __syncthreads();

    // Softmax over this block's slots: m = max score, weights e^(s - m), l = their sum.
    BlockSoftmax(score_s, local, stats_s);
    __syncthreads();

    // Values: thread (group g, column c4) folds rows g, g + groups, ... in and mixes them.
    const int value_group = threadIdx.x / span;
    if (value_group < value_groups) {
      for (int column = threadIdx.x % span; column < value_columns; column += span) {
        float acc[kVec] = {};
        for (int jj = value_group; jj < local; jj += value_groups) {
          float* value_row = values + static_cast<int64_t>(j0 + jj) * V + column * kVec;
          float value[kVec];
          LoadVec<kVec>(value_row, value);
          const float a = alpha_s[jj], w = 1.0f - a, p = score_s[jj];
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            value[e] = a * value[e] + w * v_s[column * kVec + e];
            acc[e] += p * value[e];
          }
          StoreVec<kVec>(value_row, value);
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) reduce_s[value_group * V + column * kVec + e] = acc[e];
      }
    }
    __syncthreads();

    const float m = stats_s[0], l = stats_s[1];
    for (int c = threadIdx.x; c < V; c += kThreads) {
      float o = 0.0f;
      for (int g = 0; g < value_groups; ++g) o += reduce_s[g * V + c];
      if (splits == 1) {
        rows.out[b * rows.out_stride + static_cast<int64_t>(h) * V + c] = o / l;
      } else {
        float* partial = partials + ((b * params.heads + h) * splits + split) * (V + 2);
        partial[c] = o;
        if (c == 0) {
          partial[V] = m;
          partial[V + 1] = l;
        }
      }
    }
    __syncthreads();  // the next row reuses shared memory and reads this state
    if constexpr (kCheckpoints) {
      // This block's slots: their key rows and their value rows.
      SaveCheckpoint(rows, b, rows.states[sequence], head_offset + static_cast<int64_t>(j0) * K,
                     static_cast<int64_t>(local) * K);
      SaveCheckpoint(rows, b, rows.states[sequence],
                     head_offset + static_cast<int64_t>(n) * K + static_cast<int64_t>(j0) * V,
                     static_cast<int64_t>(local) * V);
    }
  }
}

}  // namespace

namespace internal {

absl::Status GsaStep(CudaContext& context, const CudaFlaMixer& mixer, const StepRows& rows,
                     const float* prepared) {
  const fla::Params& p = mixer.params;
  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  ABCD_ASSIGN_OR_RETURN(
      const GsaPlan plan,
      PlanGsaStep(p, rows.batch, sequences, rows.first != nullptr ? rows.longest_run : 1,
                  context.sm_count()));
  const int lanes = LanesPerRow(p.key_dim, plan.vec);
  float* partials = nullptr;
  if (plan.partial_floats > 0) {
    ABCD_ASSIGN_OR_RETURN(
        void* workspace,
        context.Workspace(static_cast<size_t>(plan.partial_floats) * sizeof(float)));
    partials = static_cast<float*>(workspace);
  }
  const int splits = plan.split.splits;
  const dim3 grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(sequences),
                  static_cast<unsigned>(splits));
  const bool checkpoints = rows.checkpoints != nullptr;
  const auto kernel = plan.vec == 4
                          ? (checkpoints ? GsaStepKernel<4, true> : GsaStepKernel<4, false>)
                          : (checkpoints ? GsaStepKernel<1, true> : GsaStepKernel<1, false>);
  kernel<<<grid, kThreads, plan.shared_bytes, context.stream()>>>(
      p, rows, prepared, mixer.prepared_width, plan.split.chunk, lanes, plan.value_span, partials);
  absl::Status status = CheckLaunch("GsaStepKernel");
  if (!status.ok() || splits == 1) return status;
  return CombineSoftmaxPartials(context, partials, rows.batch, p.heads, p.value_dim, splits,
                                rows.out, rows.out_stride);
}

}  // namespace internal
}  // namespace abcd::cuda
