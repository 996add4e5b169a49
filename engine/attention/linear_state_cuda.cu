// The fused rfa / t2r / elu decode step (see attention_state_cuda.h): per (row, head, feature
// split) one block computes phi(k) and phi(q) for its features, updates S and z (plain sum or
// the gated convex mix) and accumulates phi(q)^T S and phi(q) . z in the same pass. Splits add
// their numerators and denominators in a combine kernel; the guard max(den, eps) comes last.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_common.cuh"
#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/split_plan.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

using internal::GroupSum;
using internal::kThreads;
using internal::LoadVec;
using internal::SaveCheckpoint;
using internal::SequenceRows;
using internal::StoreVec;
using internal::WritePaddingRows;

// std::max(denominator, eps) as the CPU computes it: a NaN denominator stays NaN (fmaxf would
// return eps and hide it).
__device__ __forceinline__ float GuardDenominator(float denominator, float eps) {
  return denominator < eps ? eps : denominator;
}

// Dynamic shared memory: k, q, v [dh] | phi(k), phi(q) [chunk] | numerator partials
// [groups, dh] | scalars [4] (|k|, |q|, gate, denominator).
template <int kVec, bool kCheckpoints>
__global__ void __launch_bounds__(kThreads)
    LinearStepKernel(LinearAttentionParams params, int f_count, StepRows rows, int chunk, int lanes,
                     float* partials) {
  extern __shared__ float shared[];
  const int h = blockIdx.x;
  const int64_t sequence = blockIdx.y;
  // Decode: row = sequence. Prefill: the sequence's rows in order, a scan over its state.
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int split = blockIdx.z, splits = gridDim.z;
  const int dh = params.head_dim;
  const int64_t d = static_cast<int64_t>(params.n_heads) * dh;
  const int f0 = split * chunk;
  const int local = min(f_count, f0 + chunk) - f0;
  const int columns = dh / kVec;
  if (rows.states[sequence] == nullptr) {
    // A padding row of a CUDA-graph bucket: no state to touch; its output is zero.
    WritePaddingRows<1>(rows, partials, first, count, params.n_heads, h, dh);
    return;
  }
  const int value_groups = kThreads / columns;

  float* k_s = shared;
  float* q_s = k_s + dh;
  float* v_s = q_s + dh;
  float* phi_k = v_s + dh;
  float* phi_q = phi_k + chunk;
  float* reduce_s = phi_q + chunk;
  float* scalars = reduce_s + value_groups * dh;

  for (int64_t b = first; b < first + count; ++b) {
    const float* q = rows.q + b * rows.q_stride + static_cast<int64_t>(h) * dh;
    const float* kv = rows.kv + b * rows.kv_stride;
    for (int c = threadIdx.x; c < dh; c += kThreads) {
      k_s[c] = kv[static_cast<int64_t>(h) * dh + c];
      v_s[c] = kv[d + static_cast<int64_t>(h) * dh + c];
      q_s[c] = q[c];
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const bool rfa =
        params.kind == FeatureMapKind::kRfaGaussian || params.kind == FeatureMapKind::kRfaArccos;
    if (warp == 0) {
      float kk = 0.0f, qq = 0.0f;
      if (rfa) {
        for (int c = lane; c < dh; c += 32) {
          kk += k_s[c] * k_s[c];
          qq += q_s[c] * q_s[c];
        }
        kk = GroupSum(kk, 32);
        qq = GroupSum(qq, 32);
      }
      if (lane == 0) {
        scalars[0] = 1.0f / fmaxf(sqrtf(kk), 1e-12f);
        scalars[1] = 1.0f / fmaxf(sqrtf(qq), 1e-12f);
        scalars[2] = params.gated ? 1.0f / (1.0f + expf(-kv[2 * d + h])) : 0.0f;
      }
    }
    __syncthreads();
    if (rfa) {  // rfa projects the l2-normalised input
      for (int c = threadIdx.x; c < dh; c += kThreads) {
        k_s[c] *= scalars[0];
        q_s[c] *= scalars[1];
      }
      __syncthreads();
    }

    // Features f0 .. f0 + local of phi(k) and phi(q).
    if (params.kind == FeatureMapKind::kElu) {
      for (int ff = threadIdx.x; ff < local; ff += kThreads) {
        const float x = k_s[f0 + ff], y = q_s[f0 + ff];
        phi_k[ff] = x > 0.0f ? x + 1.0f : expf(x);
        phi_q[ff] = y > 0.0f ? y + 1.0f : expf(y);
      }
    } else {
      // One lane group per feature: a dot product of a projection row with k and with q.
      const int sub = lane % lanes;
      const int groups_per_warp = 32 / lanes;
      const int groups = (kThreads / 32) * groups_per_warp;
      const int group = warp * groups_per_warp + lane / lanes;
      const int rf = params.random_features;
      for (int base = 0; base < local; base += groups) {
        const int ff = base + group;
        const int f = f0 + ff;
        float dot_k = 0.0f, dot_q = 0.0f;
        if (ff < local) {
          const int row = rfa && f >= rf ? f - rf : f;  // gaussian: cos features reuse the rows
          const int rows_per_head = rfa ? rf : params.learned_features;
          const float* w = params.projection + (static_cast<int64_t>(h) * rows_per_head + row) * dh;
          for (int c = sub; c < dh; c += lanes) {
            dot_k += w[c] * k_s[c];
            dot_q += w[c] * q_s[c];
          }
        }
        dot_k = GroupSum(dot_k, lanes);
        dot_q = GroupSum(dot_q, lanes);
        if (ff < local && sub == 0) {
          if (params.kind == FeatureMapKind::kT2r) {
            const float bias = params.bias[static_cast<int64_t>(h) * params.learned_features + f];
            phi_k[ff] = fmaxf(dot_k + bias, 0.0f);
            phi_q[ff] = fmaxf(dot_q + bias, 0.0f);
          } else {
            const float scale = 1.0f / sqrtf(static_cast<float>(rf));
            if (params.kind == FeatureMapKind::kRfaArccos) {
              phi_k[ff] = scale * fmaxf(dot_k, 0.0f);
              phi_q[ff] = scale * fmaxf(dot_q, 0.0f);
            } else if (f < rf) {
              phi_k[ff] = scale * sinf(dot_k);
              phi_q[ff] = scale * sinf(dot_q);
            } else {
              phi_k[ff] = scale * cosf(dot_k);
              phi_q[ff] = scale * cosf(dot_q);
            }
          }
        }
      }
    }
    __syncthreads();

    float* s = rows.states[sequence] + static_cast<int64_t>(h) * f_count * (dh + 1);
    float* z = s + static_cast<int64_t>(f_count) * dh;
    const float gate = scalars[2];

    // z and the denominator (warp 0), then S and the numerator (every thread).
    if (warp == 0) {
      float denominator = 0.0f;
      for (int ff = lane; ff < local; ff += 32) {
        const int f = f0 + ff;
        const float updated =
            params.gated ? gate * z[f] + (1.0f - gate) * phi_k[ff] : z[f] + phi_k[ff];
        z[f] = updated;
        denominator += phi_q[ff] * updated;
      }
      denominator = GroupSum(denominator, 32);
      if (lane == 0) scalars[3] = denominator;
    }
    const int column = threadIdx.x % columns, value_group = threadIdx.x / columns;
    if (value_group < value_groups) {
      float acc[kVec] = {};
      float v[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = v_s[column * kVec + e];
      for (int ff = value_group; ff < local; ff += value_groups) {
        float* s_row = s + static_cast<int64_t>(f0 + ff) * dh + column * kVec;
        float state[kVec];
        LoadVec<kVec>(s_row, state);
        const float pk = phi_k[ff], pq = phi_q[ff];
        const float mixed = (1.0f - gate) * pk;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          state[e] = params.gated ? gate * state[e] + mixed * v[e] : state[e] + pk * v[e];
          acc[e] += pq * state[e];
        }
        StoreVec<kVec>(s_row, state);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) reduce_s[value_group * dh + column * kVec + e] = acc[e];
    }
    __syncthreads();

    const float denominator = scalars[3];
    for (int c = threadIdx.x; c < dh; c += kThreads) {
      float numerator = 0.0f;
      for (int g = 0; g < value_groups; ++g) numerator += reduce_s[g * dh + c];
      if (splits == 1) {
        rows.out[b * rows.out_stride + static_cast<int64_t>(h) * dh + c] =
            numerator / GuardDenominator(denominator, params.eps);
      } else {
        float* partial = partials + ((b * params.n_heads + h) * splits + split) * (dh + 1);
        partial[c] = numerator;
        if (c == 0) partial[dh] = denominator;
      }
    }
    __syncthreads();  // the next row reuses shared memory and reads this state
    if constexpr (kCheckpoints) {
      // This block's features: their rows of S and their entries of z.
      const int64_t head_offset = static_cast<int64_t>(h) * f_count * (dh + 1);
      SaveCheckpoint(rows, b, rows.states[sequence], head_offset + static_cast<int64_t>(f0) * dh,
                     static_cast<int64_t>(local) * dh);
      SaveCheckpoint(rows, b, rows.states[sequence],
                     head_offset + static_cast<int64_t>(f_count) * dh + f0, local);
    }
  }
}

__global__ void CombineLinearKernel(const float* partials, int n_heads, int head_dim, int splits,
                                    float eps, float* out, int64_t out_stride) {
  const int h = blockIdx.x;
  const int64_t b = blockIdx.y;
  const int dh = head_dim;
  const float* first = partials + (b * n_heads + h) * splits * (dh + 1);
  float denominator = 0.0f;
  for (int s = 0; s < splits; ++s) denominator += first[s * (dh + 1) + dh];
  const float inv = 1.0f / GuardDenominator(denominator, eps);
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float numerator = 0.0f;
    for (int s = 0; s < splits; ++s) numerator += first[s * (dh + 1) + c];
    out[b * out_stride + static_cast<int64_t>(h) * dh + c] = numerator * inv;
  }
}

}  // namespace

int LinearAttentionParams::Features() const {
  switch (kind) {
    case FeatureMapKind::kRfaGaussian:
      return 2 * random_features;
    case FeatureMapKind::kRfaArccos:
      return random_features;
    case FeatureMapKind::kT2r:
      return learned_features;
    case FeatureMapKind::kElu:
      return head_dim;
  }
  return 0;
}

absl::Status LinearAttentionStep(CudaContext& context, const LinearAttentionParams& params,
                                 const StepRows& rows) {
  if (rows.batch == 0) return absl::OkStatus();
  // One block row per sequence: a row each when decoding, a scan over its rows in a prefill.
  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  const int dh = params.head_dim, f_count = params.Features();
  const bool needs_projection = params.kind != FeatureMapKind::kElu;
  if (params.n_heads <= 0 || dh <= 0 || f_count <= 0 ||
      (needs_projection && params.projection == nullptr) ||
      (params.kind == FeatureMapKind::kT2r && params.bias == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("linear attention: heads ", params.n_heads,
                                                   ", head_dim ", dh, ", features ", f_count,
                                                   needs_projection ? " (needs weights)" : ""));
  }
  // 16-byte state rows need dh % 4 == 0 and head blocks F (dh + 1) floats apart aligned.
  const int vec = (dh % 4 == 0 && f_count % 4 == 0) ? 4 : 1;
  if (dh / vec > kThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear attention on CUDA: head_dim ", dh, " too large"));
  }
  const int lanes = internal::LanesPerRow(dh, 1);
  ABCD_RETURN_IF_ERROR(CheckGridRows("linear attention", sequences));
  const int value_groups = kThreads / (dh / vec);
  // Splits of at least 8 features each; k, q, v and the numerator partials share memory with
  // phi(k) and phi(q) of the block's features.
  ABCD_ASSIGN_OR_RETURN(
      const SplitPlan plan,
      PlanSplits("linear attention", f_count,
                 internal::SplitBlocks(rows, sequences, params.n_heads), context.sm_count(),
                 /*min_chunk=*/8, MaxChunkForSharedMemory(3 * dh + value_groups * dh + 4, 2)));
  const int splits = plan.splits, chunk = plan.chunk;
  if (splits > 1) ABCD_RETURN_IF_ERROR(CheckGridRows("linear attention combine", rows.batch));

  float* partials = nullptr;
  if (splits > 1) {
    absl::StatusOr<void*> workspace = context.Workspace(
        static_cast<size_t>(rows.batch) * params.n_heads * splits * (dh + 1) * sizeof(float));
    if (!workspace.ok()) return workspace.status();
    partials = static_cast<float*>(*workspace);
  }
  const size_t shared_bytes = sizeof(float) * (3 * dh + 2 * chunk + value_groups * dh + 4);
  const dim3 grid(params.n_heads, static_cast<unsigned>(sequences), splits);
  // Checkpoints are a variant of their own: their code would cost the plain step registers
  // (and so blocks per SM) even when it is skipped.
  const bool checkpoints = rows.checkpoints != nullptr;
  const auto kernel = vec == 4
                          ? (checkpoints ? LinearStepKernel<4, true> : LinearStepKernel<4, false>)
                          : (checkpoints ? LinearStepKernel<1, true> : LinearStepKernel<1, false>);
  kernel<<<grid, kThreads, shared_bytes, context.stream()>>>(params, f_count, rows, chunk, lanes,
                                                             partials);
  absl::Status status = CheckLaunch("LinearStepKernel");
  if (!status.ok() || splits == 1) return status;
  const int threads = dh < kThreads ? ((dh + 31) / 32) * 32 : kThreads;
  CombineLinearKernel<<<dim3(params.n_heads, static_cast<unsigned>(rows.batch)), threads, 0,
                        context.stream()>>>(partials, params.n_heads, dh, splits, params.eps,
                                            rows.out, rows.out_stride);
  return CheckLaunch("CombineLinearKernel");
}

}  // namespace abcd::cuda
