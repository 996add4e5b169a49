// The fused ABC decode step (see attention_state_cuda.h): per (row, head, slot split) one block
// updates L, K~ and V~ of its slots and reads them out in the same pass over the state.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_common.cuh"
#include "engine/attention/attention_state_cuda.h"
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
using internal::WriteSoftmaxHead;

// Dynamic shared memory: q, k, v [dh] | weight, score [chunk] | value partials [groups, dh] |
// stats [2].
template <int kVec, bool kCheckpoints>
__global__ void __launch_bounds__(kThreads)
    AbcStepKernel(AbcShape shape, StepRows rows, bool update, int chunk, int lanes,
                  float* partials) {
  extern __shared__ float shared[];
  const int h = blockIdx.x;
  const int64_t sequence = blockIdx.y;
  // Decode: row = sequence. Prefill: the sequence's rows in order, a scan over its state.
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int split = blockIdx.z;
  const int n = shape.slots, dh = shape.head_dim;
  const int64_t d = static_cast<int64_t>(shape.n_heads) * dh;
  const int j0 = split * chunk;
  const int local = min(n, j0 + chunk) - j0;
  const int columns = dh / kVec;
  if (rows.states[sequence] == nullptr) {
    // A padding row of a CUDA-graph bucket: no state to touch; its output is zero.
    WritePaddingRows<2>(rows, partials, first, count, shape.n_heads, h, dh);
    return;
  }
  const int value_groups = kThreads / columns;

  float* q_s = shared;
  float* k_s = q_s + dh;
  float* v_s = k_s + dh;
  float* weight_s = v_s + dh;
  float* score_s = weight_s + chunk;
  float* reduce_s = score_s + chunk;
  float* stats_s = reduce_s + value_groups * dh;

  float* head = rows.states[sequence] + static_cast<int64_t>(h) * n * (2 * dh + 1);
  float* keys = head;
  float* values = head + static_cast<int64_t>(n) * dh;
  float* log_norm = head + 2 * static_cast<int64_t>(n) * dh;
  for (int64_t b = first; b < first + count; ++b) {
    const float* q = rows.q + b * rows.q_stride + static_cast<int64_t>(h) * dh;
    const float* kv = rows.kv + b * rows.kv_stride;
    const float* k = kv + static_cast<int64_t>(h) * dh;
    const float* v = kv + d + static_cast<int64_t>(h) * dh;
    const float* control = kv + 2 * d + static_cast<int64_t>(h) * n;

    for (int c = threadIdx.x; c < dh; c += kThreads) {
      q_s[c] = q[c];
      k_s[c] = update ? k[c] : 0.0f;
      v_s[c] = update ? v[c] : 0.0f;
    }
    // L' = logaddexp(L, a) (the first token, L = -inf, gets weight exactly 1); weight e^(a - L').
    for (int jj = threadIdx.x; jj < local; jj += kThreads) {
      float weight = 0.0f;
      if (update) {
        const int j = j0 + jj;
        const float a = control[j];
        const float old = log_norm[j];
        const float updated =
            isinf(old) && old < 0.0f ? a : fmaxf(old, a) + log1pf(expf(-fabsf(old - a)));
        weight = expf(a - updated);
        log_norm[j] = updated;
      }
      weight_s[jj] = weight;
    }
    __syncthreads();

    // Keys: a group of `lanes` lanes per slot updates the slot's key row and scores it.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane % lanes;
    const int groups_per_warp = 32 / lanes;
    const int groups = (kThreads / 32) * groups_per_warp;
    const int group = warp * groups_per_warp + lane / lanes;
    for (int base = 0; base < local; base += groups) {
      const int jj = base + group;
      float dot = 0.0f;
      if (jj < local) {
        const float weight = weight_s[jj];
        float* key_row = keys + static_cast<int64_t>(j0 + jj) * dh;
        for (int c4 = sub; c4 < columns; c4 += lanes) {
          float key[kVec];
          LoadVec<kVec>(key_row + c4 * kVec, key);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const int c = c4 * kVec + e;
            if (update) key[e] += weight * (k_s[c] - key[e]);
            dot += q_s[c] * key[e];
          }
          if (update) StoreVec<kVec>(key_row + c4 * kVec, key);
        }
      }
      dot = GroupSum(dot, lanes);
      if (jj < local && sub == 0) score_s[jj] = dot;
    }
    __syncthreads();

    // Softmax over this block's slots: m = max score, weights e^(s - m), l = their sum.
    BlockSoftmax(score_s, local, stats_s);
    __syncthreads();

    // Values: thread (group g, column c4) updates rows g, g + groups, ... and accumulates them.
    const int column = threadIdx.x % columns, value_group = threadIdx.x / columns;
    if (value_group < value_groups) {
      float acc[kVec] = {};
      for (int jj = value_group; jj < local; jj += value_groups) {
        float* value_row = values + static_cast<int64_t>(j0 + jj) * dh + column * kVec;
        float value[kVec];
        LoadVec<kVec>(value_row, value);
        const float weight = weight_s[jj], p = score_s[jj];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          if (update) value[e] += weight * (v_s[column * kVec + e] - value[e]);
          acc[e] += p * value[e];
        }
        if (update) StoreVec<kVec>(value_row, value);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) reduce_s[value_group * dh + column * kVec + e] = acc[e];
    }
    __syncthreads();

    WriteSoftmaxHead(rows, partials, b, shape.n_heads, h, dh, reduce_s, value_groups, stats_s);
    __syncthreads();  // the next row reuses shared memory and reads this state
    if constexpr (kCheckpoints) {
      // This block's slots: their key and value rows and their log normalisers.
      const int64_t head_offset = static_cast<int64_t>(h) * n * (2 * dh + 1);
      SaveCheckpoint(rows, b, rows.states[sequence], head_offset + static_cast<int64_t>(j0) * dh,
                     static_cast<int64_t>(local) * dh);
      SaveCheckpoint(rows, b, rows.states[sequence],
                     head_offset + static_cast<int64_t>(n + j0) * dh,
                     static_cast<int64_t>(local) * dh);
      SaveCheckpoint(rows, b, rows.states[sequence],
                     head_offset + 2 * static_cast<int64_t>(n) * dh + j0, local);
    }
  }
}

}  // namespace

absl::Status AbcStep(CudaContext& context, const AbcShape& shape, const StepRows& rows,
                     bool update) {
  if (rows.batch == 0) return absl::OkStatus();
  // One block row per sequence: a row each when decoding, a scan over its rows in a prefill.
  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  const int dh = shape.head_dim, n = shape.slots;
  if (shape.n_heads <= 0 || dh <= 0 || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("abc shape: heads ", shape.n_heads, ", head_dim ", dh, ", slots ", n));
  }
  const int vec = (dh % 4 == 0 && n % 4 == 0) ? 4 : 1;
  if (dh / vec > internal::kThreads) {
    return absl::InvalidArgumentError(absl::StrCat("abc on CUDA: head_dim ", dh, " too large"));
  }
  const int lanes = internal::LanesPerRow(dh, vec);
  ABCD_RETURN_IF_ERROR(CheckGridRows("abc", sequences));
  const int value_groups = internal::kThreads / (dh / vec);
  // Splits of at least 4 slots each; q, k, v and the value partials share memory with a
  // weight and a score per slot of the block.
  ABCD_ASSIGN_OR_RETURN(const SplitPlan plan,
                        PlanSplits("abc", n, internal::SplitBlocks(rows, sequences, shape.n_heads),
                                   context.sm_count(), /*min_chunk=*/4,
                                   MaxChunkForSharedMemory(3 * dh + value_groups * dh + 2, 2)));
  const int splits = plan.splits, chunk = plan.chunk;
  if (splits > 1) ABCD_RETURN_IF_ERROR(CheckGridRows("abc combine", rows.batch));

  float* partials = nullptr;
  if (splits > 1) {
    absl::StatusOr<void*> workspace = context.Workspace(
        static_cast<size_t>(rows.batch) * shape.n_heads * splits * (dh + 2) * sizeof(float));
    if (!workspace.ok()) return workspace.status();
    partials = static_cast<float*>(*workspace);
  }
  const size_t shared_bytes = sizeof(float) * (3 * dh + 2 * chunk + value_groups * dh + 2);
  const dim3 grid(shape.n_heads, static_cast<unsigned>(sequences), splits);
  // Checkpoints are a variant of their own: their code would cost the plain step registers
  // (and so blocks per SM) even when it is skipped.
  const bool checkpoints = rows.checkpoints != nullptr;
  const auto kernel = vec == 4 ? (checkpoints ? AbcStepKernel<4, true> : AbcStepKernel<4, false>)
                               : (checkpoints ? AbcStepKernel<1, true> : AbcStepKernel<1, false>);
  kernel<<<grid, internal::kThreads, shared_bytes, context.stream()>>>(shape, rows, update, chunk,
                                                                       lanes, partials);
  absl::Status status = CheckLaunch("AbcStepKernel");
  if (!status.ok() || splits == 1) return status;
  return internal::CombineSoftmaxPartials(context, partials, rows.batch, shape.n_heads, dh, splits,
                                          rows.out, rows.out_stride);
}

}  // namespace abcd::cuda
