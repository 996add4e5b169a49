// The fla mixers' layer on the device (fla_state_cuda.h): the prepare and finish kernels every
// type shares, the gated linear step of gla, retnet and hgrn2, and FlaMixerForward, which
// launches them (gsa's step is in gsa_state_cuda.cu).
//
// The step keeps S [K, V] of a head in global memory (at the 1.3B shapes a head's S is 512 KiB:
// no shared memory holds it) and reads and writes each element once per row, the HBM floor: a
// block owns a tile of 32 x kVec value columns (one float4 per lane) and a range of key rows
// (a split), its 4 warps take every 4th key row of the range, and each lane folds its columns
// of a row, S[c] = lambda[c] S[c] + k[c] v, and accumulates q[c] S[c]. The warps' sums meet
// in shared memory; the splits' sums in the finish kernel.

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_common.cuh"
#include "engine/attention/fla_math.h"
#include "engine/attention/fla_state_cuda.h"
#include "engine/attention/split_plan.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

using internal::kThreads;
using internal::LoadVec;
using internal::SequenceRows;
using internal::StoreVec;

constexpr int kWarps = kThreads / 32;
static_assert(kThreads == internal::kFlaStepThreads, "the planner's block size");
constexpr int kFinishThreads = 256;
constexpr int kMaxFinishRowBlocks = 64;  // blocks sharing one sequence's rows in the finish

// One row per block: each thread computes prepared columns from the projection row.
__global__ void __launch_bounds__(kThreads)
    FlaPrepareKernel(fla::Params params, const float* projection, int64_t projection_stride,
                     const int64_t* positions, float* prepared, int64_t prepared_width) {
  const int64_t row = blockIdx.x;
  const float* in = projection + row * projection_stride;
  const int64_t position = positions != nullptr ? positions[row] : 0;
  float* out = prepared + row * prepared_width;
  for (int64_t c = threadIdx.x; c < prepared_width; c += kThreads) {
    out[c] = fla::PrepareElement(params, in, position, c);
  }
}

// Sum of `value` over the block (kFinishThreads threads) into every thread; `shared` holds
// kFinishThreads / 32 floats and may be reused after the call.
__device__ float FinishBlockSum(float value, float* shared) {
  value = internal::GroupSum(value, 32);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kFinishThreads / 32; ++w) total += shared[w];
  __syncthreads();
  return total;
}

// Block (group g, sequence s, z): rows first[s] + z, + gridDim.z, ... of the sequence; per row
// the norm group g's columns: the splits' partial reads summed (or the read in rows.out), the
// output RMSNorm and the gate; a padding sequence's rows are zero.
__global__ void __launch_bounds__(kFinishThreads)
    FlaFinishKernel(fla::Params params, StepRows rows, const float* prepared,
                    int64_t prepared_width, const float* partials, int splits) {
  __shared__ float reduce[kFinishThreads / 32];
  const int64_t sequence = blockIdx.y;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int64_t group = params.NormGroup();
  const int64_t begin = blockIdx.x * group;
  const int64_t width = params.AttendedWidth();
  const bool padding = rows.states[sequence] == nullptr;
  for (int64_t r = blockIdx.z; r < count; r += gridDim.z) {
    const int64_t b = first + r;
    float* out = rows.out + b * rows.out_stride;
    if (padding) {
      for (int64_t c = begin + threadIdx.x; c < begin + group; c += kFinishThreads) out[c] = 0.0f;
      continue;
    }
    float squares = 0.0f;
    for (int64_t c = begin + threadIdx.x; c < begin + group; c += kFinishThreads) {
      float y;
      if (splits == 1) {
        y = out[c];
      } else {
        y = 0.0f;
        for (int s = 0; s < splits; ++s) y += partials[(b * splits + s) * width + c];
      }
      const float x = fla::FinishInput(params, y);
      out[c] = x;  // read back below by this thread only
      squares += x * x;
    }
    const float inverse_rms = fla::InverseRms(params, FinishBlockSum(squares, reduce));
    const float* row = prepared + b * prepared_width;
    for (int64_t c = begin + threadIdx.x; c < begin + group; c += kFinishThreads) {
      out[c] = fla::FinishElement(params, out[c], inverse_rms, c, row);
    }
  }
}

// Block (head h x column tile, sequence, key split): see the file comment. Dynamic shared
// memory: q, k, lambda [chunk] | v [tile] | warp sums [kWarps, tile]. At most 64 registers
// (8 blocks, 32 warps an SM; ptxas chose 72-96 unbounded, and spills none at 64 on sm_90).
template <int kVec, bool kCheckpoints>
__global__ void __launch_bounds__(kThreads, 8)
    GatedLinearStepKernel(fla::Params params, StepRows rows, const float* prepared,
                          int64_t prepared_width, int tiles, int chunk, float* partials) {
  extern __shared__ float shared[];
  constexpr int kTile = 32 * kVec;
  const int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int64_t sequence = blockIdx.y;
  const int split = blockIdx.z, splits = gridDim.z;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int K = params.key_dim, V = params.value_dim;
  const int64_t width = params.AttendedWidth();
  const int col0 = tile * kTile;
  const int c0 = split * chunk;
  const int local = min(K, c0 + chunk) - c0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int column = col0 + lane * kVec;  // this lane's first column
  float* state = rows.states[sequence];
  if (state == nullptr) {
    // A padding row of a CUDA-graph bucket: no state to touch; its output is zero.
    for (int64_t b = first; b < first + count; ++b) {
      for (int i = threadIdx.x; i < kTile && col0 + i < V; i += kThreads) {
        const int64_t c = static_cast<int64_t>(h) * V + col0 + i;
        if (splits == 1) {
          rows.out[b * rows.out_stride + c] = 0.0f;
        } else {
          partials[(b * splits + split) * width + c] = 0.0f;
        }
      }
    }
    return;
  }
  float* q_s = shared;
  float* k_s = q_s + chunk;
  float* lambda_s = k_s + chunk;
  float* v_s = lambda_s + chunk;
  float* reduce_s = v_s + kTile;

  const int kv = h / (params.heads / params.kv_heads);
  const int64_t head_offset = static_cast<int64_t>(h) * K * V;
  float* s_head = state + head_offset;
  const bool fixed_decay = params.kind == fla::Kind::kRetnet;
  const float decay = fixed_decay ? params.retnet_decay[h] : 0.0f;
  const bool owns = column < V;
  for (int64_t b = first; b < first + count; ++b) {
    const float* row = prepared + b * prepared_width;
    for (int i = threadIdx.x; i < local; i += kThreads) {
      const int c = c0 + i;
      q_s[i] = row[static_cast<int64_t>(h) * K + c];
      k_s[i] = row[params.KOffset() + static_cast<int64_t>(kv) * K + c];
      lambda_s[i] =
          fixed_decay ? decay : row[params.ExtraOffset() + static_cast<int64_t>(kv) * K + c];
    }
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      v_s[i] =
          col0 + i < V ? row[params.VOffset() + static_cast<int64_t>(kv) * V + col0 + i] : 0.0f;
    }
    __syncthreads();
    float acc[kVec] = {};
    if (owns) {
      float v[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = v_s[lane * kVec + e];
      float* checkpoint = nullptr;
      if constexpr (kCheckpoints) {
        if (rows.checkpoints[b] != nullptr) checkpoint = rows.checkpoints[b] + head_offset;
      }
      for (int i = warp; i < local; i += kWarps) {
        const int64_t offset = static_cast<int64_t>(c0 + i) * V + column;
        float s[kVec];
        LoadVec<kVec>(s_head + offset, s);
        const float a = lambda_s[i], key = k_s[i], query = q_s[i];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          s[e] = a * s[e] + key * v[e];
          acc[e] += query * s[e];
        }
        StoreVec<kVec>(s_head + offset, s);
        if constexpr (kCheckpoints) {
          if (checkpoint != nullptr) StoreVec<kVec>(checkpoint + offset, s);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) reduce_s[warp * kTile + lane * kVec + e] = acc[e];
    __syncthreads();
    for (int i = threadIdx.x; i < kTile && col0 + i < V; i += kThreads) {
      float y = 0.0f;
      for (int w = 0; w < kWarps; ++w) y += reduce_s[w * kTile + i];
      const int64_t c = static_cast<int64_t>(h) * V + col0 + i;
      if (splits == 1) {
        rows.out[b * rows.out_stride + c] = y;
      } else {
        partials[(b * splits + split) * width + c] = y;
      }
    }
    __syncthreads();  // the next row reuses shared memory
  }
}

}  // namespace

namespace internal {

absl::Status GatedLinearStep(CudaContext& context, const CudaFlaMixer& mixer, const StepRows& rows,
                             const float* prepared, const float** partials, int* splits_out) {
  const fla::Params& p = mixer.params;
  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  ABCD_ASSIGN_OR_RETURN(
      const GatedLinearPlan plan,
      PlanGatedLinearStep(p, rows.batch, sequences, rows.first != nullptr ? rows.longest_run : 1,
                          context.sm_count()));
  float* partial_rows = nullptr;
  if (plan.partial_floats > 0) {
    ABCD_ASSIGN_OR_RETURN(
        void* workspace,
        context.Workspace(static_cast<size_t>(plan.partial_floats) * sizeof(float)));
    partial_rows = static_cast<float*>(workspace);
  }
  const dim3 grid(static_cast<unsigned>(p.heads * plan.tiles), static_cast<unsigned>(sequences),
                  static_cast<unsigned>(plan.split.splits));
  const bool checkpoints = rows.checkpoints != nullptr;
  const auto kernel =
      plan.vec == 4
          ? (checkpoints ? GatedLinearStepKernel<4, true> : GatedLinearStepKernel<4, false>)
          : (checkpoints ? GatedLinearStepKernel<1, true> : GatedLinearStepKernel<1, false>);
  kernel<<<grid, kThreads, plan.shared_bytes, context.stream()>>>(
      p, rows, prepared, mixer.prepared_width, plan.tiles, plan.split.chunk, partial_rows);
  *partials = partial_rows;
  *splits_out = plan.split.splits;
  return CheckLaunch("GatedLinearStepKernel");
}

}  // namespace internal

absl::Status FlaMixerForward(CudaContext& context, const CudaFlaMixer& mixer, const StepRows& rows,
                             const int64_t* positions, float* prepared) {
  if (rows.batch == 0) return absl::OkStatus();
  const fla::Params& p = mixer.params;
  if (rows.q == nullptr || rows.out == nullptr || rows.states == nullptr || prepared == nullptr) {
    return absl::InvalidArgumentError("fla mixer: null projection, output, states or scratch");
  }
  if (rows.q_stride < mixer.projection_width || rows.out_stride < mixer.attended_width) {
    return absl::InvalidArgumentError(
        absl::StrCat("fla mixer: q_stride ", rows.q_stride, " (needs ", mixer.projection_width,
                     "), out_stride ", rows.out_stride, " (needs ", mixer.attended_width, ")"));
  }
  if (p.kind == fla::Kind::kRetnet && positions == nullptr) {
    return absl::InvalidArgumentError("fla mixer: retnet needs the rows' positions");
  }
  if (rows.batch > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("fla mixer: ", rows.batch, " rows"));
  }
  FlaPrepareKernel<<<static_cast<unsigned>(rows.batch), kThreads, 0, context.stream()>>>(
      p, rows.q, rows.q_stride, positions, prepared, mixer.prepared_width);
  ABCD_RETURN_IF_ERROR(CheckLaunch("FlaPrepareKernel"));

  const float* partials = nullptr;
  int splits = 1;
  if (p.kind == fla::Kind::kGsa) {
    ABCD_RETURN_IF_ERROR(internal::GsaStep(context, mixer, rows, prepared));
  } else {
    ABCD_RETURN_IF_ERROR(
        internal::GatedLinearStep(context, mixer, rows, prepared, &partials, &splits));
  }

  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  ABCD_RETURN_IF_ERROR(CheckGridRows("fla finish", sequences));
  const int64_t row_blocks =
      rows.first != nullptr ? std::clamp<int64_t>(rows.longest_run, 1, kMaxFinishRowBlocks) : 1;
  const dim3 grid(static_cast<unsigned>(p.AttendedWidth() / p.NormGroup()),
                  static_cast<unsigned>(sequences), static_cast<unsigned>(row_blocks));
  FlaFinishKernel<<<grid, kFinishThreads, 0, context.stream()>>>(
      p, rows, prepared, mixer.prepared_width, partials, splits);
  return CheckLaunch("FlaFinishKernel");
}

}  // namespace abcd::cuda
