// gated_deltanet on the device (fla_state_cuda.h: GatedDeltaForward), the CUDA twin of
// GatedDeltaState: three launches a layer.
//   GatedDeltaPrepareKernel (one block per row): fla_math.h's DeltaPrepareElement per column,
//     then per q/k head the L2 norm (a block sum of squares) and q's K^-0.5;
//   GatedDeltaStepKernel<checkpoints> (block = value head x 32-column tile, sequence): S [K, V]
//     stays in global memory; lane j owns column j of the tile, warp w the key rows w, w + 4, ...
//     Per row: delta_j = sum_c k[c] S[c, j] (the warps' partial sums meet in shared memory),
//     v'_j = beta (v_j - decay delta_j), then S[c, j] = decay S[c, j] + k[c] v'_j and
//     y_j += q[c] S[c, j] in a second pass. A column depends only on its own S column, so no
//     block needs another's; each S element is read twice and written once per row;
//   GatedDeltaFinishKernel (block = head, sequence, row chunk): o_norm over the head's V
//     columns, then the silu gate.
// Reductions use shared memory and __syncthreads only (no warp shuffles).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_common.cuh"
#include "engine/attention/fla_math.h"
#include "engine/attention/fla_state_cuda.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

using internal::kThreads;
using internal::SequenceRows;

constexpr int kWarps = kThreads / 32;
static_assert(kThreads == internal::kFlaStepThreads, "the planner's block size");
constexpr int kMaxRowBlocks = 64;  // finish blocks sharing one sequence's rows

// The sum of every thread's `value` (kThreads threads) into every thread, by a tree over
// `shared` (kThreads floats; reusable after the call).
__device__ float BlockSum(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kThreads)
    GatedDeltaPrepareKernel(fla::DeltaParams params, const float* projection,
                            int64_t projection_stride, float* prepared, int64_t prepared_width) {
  __shared__ float reduce[kThreads];
  const int64_t row = blockIdx.x;
  const float* in = projection + row * projection_stride;
  float* out = prepared + row * prepared_width;
  for (int64_t c = threadIdx.x; c < prepared_width; c += kThreads) {
    out[c] = fla::DeltaPrepareElement(params, in, c);
  }
  __syncthreads();
  const int K = params.key_dim;
  for (int head = 0; head < 2 * params.kv_heads; ++head) {  // q heads, then k heads
    float* x = out + int64_t{head} * K;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < K; c += kThreads) squares += x[c] * x[c];
    const float scale = fla::L2Scale(BlockSum(squares, reduce));
    for (int c = threadIdx.x; c < K; c += kThreads) {
      x[c] = fla::DeltaNormed(params, x[c], scale, head);
    }
  }
}

// Dynamic shared memory: q, k [K] | the warps' sums [kWarps, 32].
template <bool kCheckpoints>
__global__ void __launch_bounds__(kThreads)
    GatedDeltaStepKernel(fla::DeltaParams params, StepRows rows, const float* prepared,
                         int64_t prepared_width, int tiles) {
  extern __shared__ float shared[];
  const int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int64_t sequence = blockIdx.y;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int K = params.key_dim, V = params.value_dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int j = tile * 32 + lane;  // this lane's value column
  const bool owns = j < V;
  const int64_t out_column = int64_t{h} * V + j;
  float* state = rows.states[sequence];
  if (state == nullptr) {  // a padding row of a CUDA-graph bucket: output 0, no state
    if (warp == 0 && owns) {
      for (int64_t b = first; b < first + count; ++b)
        rows.out[b * rows.out_stride + out_column] = 0.0f;
    }
    return;
  }
  float* q_s = shared;
  float* k_s = q_s + K;
  float* sums = k_s + K;  // [kWarps, 32]
  const int qk_head = h / (params.heads / params.kv_heads);
  const int64_t head_offset = int64_t{h} * K * V;
  float* S = state + head_offset;
  for (int64_t b = first; b < first + count; ++b) {
    const float* row = prepared + b * prepared_width;
    for (int c = threadIdx.x; c < K; c += kThreads) {
      q_s[c] = row[int64_t{qk_head} * K + c];
      k_s[c] = row[params.QkWidth() + int64_t{qk_head} * K + c];
    }
    __syncthreads();
    const float decay = row[params.ExtraOffset() + h];
    const float beta = row[params.ExtraOffset() + params.heads + h];
    float partial = 0.0f;
    if (owns) {
      for (int c = warp; c < K; c += kWarps) partial += k_s[c] * S[int64_t{c} * V + j];
    }
    sums[warp * 32 + lane] = partial;
    __syncthreads();
    float delta = 0.0f;
    for (int w = 0; w < kWarps; ++w) delta += sums[w * 32 + lane];
    float read = 0.0f;
    if (owns) {
      const float v = row[params.VOffset() + out_column];
      const float update = beta * (v - decay * delta);
      float* checkpoint = nullptr;
      if constexpr (kCheckpoints) {
        if (rows.checkpoints[b] != nullptr) checkpoint = rows.checkpoints[b] + head_offset;
      }
      for (int c = warp; c < K; c += kWarps) {
        const int64_t at = int64_t{c} * V + j;
        const float s = decay * S[at] + k_s[c] * update;
        S[at] = s;
        if constexpr (kCheckpoints) {
          if (checkpoint != nullptr) checkpoint[at] = s;
        }
        read += q_s[c] * s;
      }
    }
    __syncthreads();  // every lane has its delta before the sums are overwritten
    sums[warp * 32 + lane] = read;
    __syncthreads();
    if (warp == 0 && owns) {
      float y = 0.0f;
      for (int w = 0; w < kWarps; ++w) y += sums[w * 32 + lane];
      rows.out[b * rows.out_stride + out_column] = y;
    }
    __syncthreads();  // the next row reuses q, k and the sums
  }
}

// Block (head, sequence, z): rows z, z + gridDim.z, ... of the sequence; o_norm and the gate
// over the head's V columns of each.
__global__ void __launch_bounds__(kThreads)
    GatedDeltaFinishKernel(fla::DeltaParams params, StepRows rows, const float* prepared,
                           int64_t prepared_width) {
  __shared__ float reduce[kThreads];
  const int h = blockIdx.x;
  const int64_t sequence = blockIdx.y;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const bool padding = rows.states[sequence] == nullptr;
  const int V = params.value_dim;
  const int64_t begin = int64_t{h} * V;
  for (int64_t r = blockIdx.z; r < count; r += gridDim.z) {
    const int64_t b = first + r;
    float* out = rows.out + b * rows.out_stride;
    if (padding) {
      for (int c = threadIdx.x; c < V; c += kThreads) out[begin + c] = 0.0f;
      continue;
    }
    float squares = 0.0f;
    for (int c = threadIdx.x; c < V; c += kThreads) squares += out[begin + c] * out[begin + c];
    const float inverse_rms = fla::DeltaInverseRms(params, BlockSum(squares, reduce));
    const float* row = prepared + b * prepared_width;
    for (int c = threadIdx.x; c < V; c += kThreads) {
      out[begin + c] = fla::DeltaFinishElement(params, out[begin + c], inverse_rms, begin + c, row);
    }
  }
}

}  // namespace

absl::Status GatedDeltaForward(CudaContext& context, const CudaGatedDelta& delta,
                               const StepRows& rows, float* prepared) {
  if (rows.batch == 0) return absl::OkStatus();
  const fla::DeltaParams& p = delta.params;
  if (rows.q == nullptr || rows.out == nullptr || rows.states == nullptr || prepared == nullptr) {
    return absl::InvalidArgumentError("gated delta: null projection, output, states or scratch");
  }
  if (rows.q_stride < p.ProjectionWidth() || rows.out_stride < p.AttendedWidth()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gated delta: q_stride ", rows.q_stride, " (needs ", p.ProjectionWidth(),
                     "), out_stride ", rows.out_stride, " (needs ", p.AttendedWidth(), ")"));
  }
  if (rows.batch > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("gated delta: ", rows.batch, " rows"));
  }
  const int64_t width = p.PreparedWidth();
  GatedDeltaPrepareKernel<<<static_cast<unsigned>(rows.batch), kThreads, 0, context.stream()>>>(
      p, rows.q, rows.q_stride, prepared, width);
  ABCD_RETURN_IF_ERROR(CheckLaunch("GatedDeltaPrepareKernel"));

  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  ABCD_ASSIGN_OR_RETURN(const internal::GatedDeltaPlan plan,
                        internal::PlanGatedDeltaStep(p, sequences));
  const dim3 grid(static_cast<unsigned>(p.heads * plan.tiles), static_cast<unsigned>(sequences));
  const auto kernel =
      rows.checkpoints != nullptr ? GatedDeltaStepKernel<true> : GatedDeltaStepKernel<false>;
  kernel<<<grid, kThreads, plan.shared_bytes, context.stream()>>>(p, rows, prepared, width,
                                                                  plan.tiles);
  ABCD_RETURN_IF_ERROR(CheckLaunch("GatedDeltaStepKernel"));

  const int64_t row_blocks =
      rows.first != nullptr ? std::clamp<int64_t>(rows.longest_run, 1, kMaxRowBlocks) : 1;
  const dim3 finish(static_cast<unsigned>(p.heads), static_cast<unsigned>(sequences),
                    static_cast<unsigned>(row_blocks));
  GatedDeltaFinishKernel<<<finish, kThreads, 0, context.stream()>>>(p, rows, prepared, width);
  return CheckLaunch("GatedDeltaFinishKernel");
}

}  // namespace abcd::cuda
