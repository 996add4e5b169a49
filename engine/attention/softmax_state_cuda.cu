// Softmax attention over a KV cache on the device, the fair baseline for the bounded types:
// append the new key/value, then split-K (flash-decoding) over the cached tokens: per (row,
// key/value head, token chunk) one block computes, for every query head of the key/value head's
// group (GQA; one for abcd's own layers), the chunk's scores, their max m, weight sum l and the
// weighted value sum o, reading each cached row once; a combine kernel merges the chunks. Also:
// FillStates and the combine kernel the abc step shares.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_common.cuh"
#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/softmax_group_cuda.cuh"
#include "engine/attention/split_plan.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

using internal::GroupAttend;
using internal::GroupSum;
using internal::GroupWrite;
using internal::kThreads;
using internal::WarpMax;
using internal::WritePaddingRows;

constexpr int kMaxChunk = 512;  // tokens per block at most
constexpr int kMinChunk = 64;   // tokens per block at least (when splitting to fill the GPU)

__global__ void FillStatesKernel(float* const* states, const float* empty_state, int64_t floats) {
  float* state = states[blockIdx.y];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < floats;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    state[i] = empty_state[i];
  }
}

// The row's key [kv_width] and value [kv_width] (adjacent in the row) appended to its caches.
__global__ void AppendKeyValueKernel(StepRows rows, KvCacheRows cache, int64_t kv_width) {
  const int64_t b = blockIdx.x;
  if (cache.keys[b] == nullptr) return;  // a padding row of a CUDA-graph bucket
  const float* k = rows.kv + b * rows.kv_stride;
  const int64_t offset = static_cast<int64_t>(cache.lengths[b]) * kv_width;
  for (int64_t c = threadIdx.x; c < kv_width; c += blockDim.x) {
    cache.keys[b][offset + c] = k[c];
    cache.values[b][offset + c] = k[kv_width + c];
  }
}

// One block per (row, head) over q heads then k heads of a prepared row (cpu PrepareGqaRows):
// the head's RMSNorm (q_norm / k_norm, when given) then RoPE at the row's position (half-split
// pairs, angles as cpu::RopeAngles: the fp32 product p * inv_freq, its cos / sin in double).
// In place; a row is `stride` floats, q at column 0, k right after the q heads.
__global__ void PrepareRotaryKernel(float* rows, int64_t stride, int q_heads, int head_dim,
                                    const int64_t* __restrict__ positions,
                                    const float* __restrict__ inv_freq,
                                    const float* __restrict__ q_norm,
                                    const float* __restrict__ k_norm, float eps) {
  __shared__ float partial[32];
  const int64_t row = blockIdx.x;
  const int head = blockIdx.y;
  const bool is_query = head < q_heads;
  float* x = rows + row * stride + static_cast<int64_t>(head) * head_dim;
  const float* weight = is_query ? q_norm : k_norm;
  if (weight != nullptr) {
    float squares = 0.0f;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) squares += x[i] * x[i];
    for (int offset = 16; offset > 0; offset /= 2) {
      squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    }
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = squares;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x + 31) / 32; ++w) total += partial[w];
    const float inv = 1.0f / sqrtf(total / static_cast<float>(head_dim) + eps);
    __syncthreads();  // every thread has read its inputs' squares before any write
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) x[i] = x[i] * inv * weight[i];
    __syncthreads();
  }
  if (inv_freq == nullptr) return;
  const int half = head_dim / 2;
  const float p = static_cast<float>(positions[row]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double sine, cosine;
    sincos(static_cast<double>(__fmul_rn(p, inv_freq[i])), &sine, &cosine);
    const float c = static_cast<float>(cosine), s = static_cast<float>(sine);
    const float x0 = x[i], x1 = x[i + half];
    x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    x[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
}

// Block = (key/value head, row, token chunk): the `group` query heads of that key/value head
// read the chunk's keys and values once between them (GroupAttend, softmax_group_cuda.cuh).
// At most 48 registers (10 blocks an SM at 128 threads; tests/cuda/kernel_resources.txt).
template <int kVec>
__global__ void __launch_bounds__(kThreads, 10)
    SoftmaxSplitKernel(int n_heads, int kv_heads, int head_dim, StepRows rows, KvCacheRows cache,
                       int chunk, int lanes, float* partials) {
  extern __shared__ float shared[];
  const int kv_head = blockIdx.x;
  const int64_t b = blockIdx.y;
  const int split = blockIdx.z, splits = gridDim.z;
  const int dh = head_dim;
  const int group = n_heads / kv_heads;
  const int h0 = kv_head * group;  // the group's first query head
  if (cache.keys[b] == nullptr) {
    // A padding row of a CUDA-graph bucket: no cache to read; its output is zero.
    for (int g = 0; g < group; ++g) WritePaddingRows<2>(rows, partials, b, 1, n_heads, h0 + g, dh);
    return;
  }
  const int64_t d = static_cast<int64_t>(kv_heads) * dh;  // floats per cache row
  const int length = cache.lengths[b] + 1;
  const int t0 = split * chunk;
  const int local = max(0, min(length, t0 + chunk) - t0);
  const int64_t first = static_cast<int64_t>(t0) * d + static_cast<int64_t>(kv_head) * dh;
  GroupAttend<kVec>(rows.q + b * rows.q_stride + static_cast<int64_t>(h0) * dh, group, dh,
                    cache.keys[b] + first, cache.values[b] + first, kv_heads * dh, local, chunk,
                    lanes, shared);
  GroupWrite<kVec>(
      group, dh, chunk, shared, rows.out + b * rows.out_stride + static_cast<int64_t>(h0) * dh,
      splits == 1 ? nullptr : partials + ((b * n_heads + h0) * splits + split) * (dh + 2),
      static_cast<int64_t>(splits) * (dh + 2));
}

constexpr int kCombineTile = 1024;  // splits whose weights sit in shared memory at once
constexpr int kCombineColumns = 4;  // columns per thread: head_dim <= 4 * kThreads (checked)

// One block per (head, row). The first warp finds the splits' maximum m in parallel; then, a
// tile of splits at a time, it leaves each split's weight exp(m_s - m) in shared memory (-1 for
// an empty split, l == 0, which drops out) and adds up l, and every thread merges its columns.
// A NaN partial propagates, as on the CPU and unsplit.
__global__ void CombineSoftmaxKernel(const float* partials, int n_heads, int head_dim, int splits,
                                     float* out, int64_t out_stride) {
  __shared__ float weights[kCombineTile];
  __shared__ float maximum;
  const int h = blockIdx.x;
  const int64_t b = blockIdx.y;
  const int dh = head_dim;
  const float* first = partials + (b * n_heads + h) * splits * (dh + 2);
  if (threadIdx.x < 32) {
    float m = -INFINITY;
    for (int s = threadIdx.x; s < splits; s += 32) m = fmaxf(m, first[s * (dh + 2) + dh]);
    m = WarpMax(m);
    if (threadIdx.x == 0) maximum = m;
  }
  float o[kCombineColumns] = {};
  float l = 0.0f;  // the first warp's lanes' shares
  for (int tile = 0; tile < splits; tile += kCombineTile) {
    const int count = min(kCombineTile, splits - tile);
    __syncthreads();  // `maximum` set; the previous tile's weights read
    if (threadIdx.x < 32) {
      for (int s = threadIdx.x; s < count; s += 32) {
        const float* partial = first + (tile + s) * (dh + 2);
        const float weight = partial[dh + 1] != 0.0f ? expf(partial[dh] - maximum) : -1.0f;
        weights[s] = weight;
        if (weight != -1.0f) l += partial[dh + 1] * weight;
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kCombineColumns; ++j) {
      const int c = threadIdx.x + j * blockDim.x;
      if (c >= dh) break;
      for (int s = 0; s < count; ++s) {
        const float weight = weights[s];
        if (weight != -1.0f) o[j] += first[(tile + s) * (dh + 2) + c] * weight;
      }
    }
  }
  __shared__ float total;
  if (threadIdx.x < 32) {
    l = GroupSum(l, 32);
    if (threadIdx.x == 0) total = l;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kCombineColumns; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= dh) break;
    out[b * out_stride + static_cast<int64_t>(h) * dh + c] = o[j] / total;
  }
}

}  // namespace

namespace internal {

absl::Status CombineSoftmaxPartials(CudaContext& context, const float* partials, int64_t batch,
                                    int n_heads, int head_dim, int splits, float* out,
                                    int64_t out_stride) {
  ABCD_RETURN_IF_ERROR(CheckGridRows("split-K combine", batch));
  const dim3 grid(n_heads, static_cast<unsigned>(batch));
  const int threads = head_dim < kThreads ? ((head_dim + 31) / 32) * 32 : kThreads;
  if (head_dim > kCombineColumns * threads) {
    return absl::InvalidArgumentError(absl::StrCat("split-K combine: head_dim ", head_dim));
  }
  CombineSoftmaxKernel<<<grid, threads, 0, context.stream()>>>(partials, n_heads, head_dim, splits,
                                                               out, out_stride);
  return CheckLaunch("CombineSoftmaxKernel");
}

}  // namespace internal

absl::Status FillStates(CudaContext& context, float* const* states, int64_t batch,
                        const float* empty_state, int64_t floats) {
  if (batch == 0 || floats == 0) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(CheckGridRows("FillStates", batch));
  const int64_t blocks = (floats + 255) / 256;
  const dim3 grid(static_cast<unsigned>(blocks < 1024 ? blocks : 1024),
                  static_cast<unsigned>(batch));
  FillStatesKernel<<<grid, 256, 0, context.stream()>>>(states, empty_state, floats);
  return CheckLaunch("FillStatesKernel");
}

absl::Status PrepareRotaryRows(CudaContext& context, float* rows, int64_t stride, int64_t batch,
                               int q_heads, int kv_heads, int head_dim, const int64_t* positions,
                               const float* inv_freq, const float* q_norm, const float* k_norm,
                               float eps) {
  if (batch == 0 || (inv_freq == nullptr && q_norm == nullptr)) return absl::OkStatus();
  if (q_heads <= 0 || kv_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 ||
      (q_norm == nullptr) != (k_norm == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotary rows: heads ", q_heads, "/", kv_heads, ", head_dim ", head_dim));
  }
  ABCD_RETURN_IF_ERROR(CheckGridRows("rotary rows", q_heads + kv_heads));
  const int threads = head_dim >= 128 ? 128 : (head_dim + 31) / 32 * 32;
  if (batch > INT32_MAX) return absl::InvalidArgumentError("rotary rows: too many rows");
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>(q_heads + kv_heads));
  PrepareRotaryKernel<<<grid, threads, 0, context.stream()>>>(
      rows, stride, q_heads, head_dim, positions, inv_freq, q_norm, k_norm, eps);
  return CheckLaunch("PrepareRotaryKernel");
}

absl::Status SoftmaxStep(CudaContext& context, int n_heads, int kv_heads, int head_dim,
                         const StepRows& rows, const KvCacheRows& cache) {
  if (rows.batch == 0) return absl::OkStatus();
  if (n_heads <= 0 || head_dim <= 0 || cache.max_length < 0 || kv_heads <= 0 ||
      n_heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("softmax shape: heads ", n_heads, "/", kv_heads,
                                                   ", head_dim ", head_dim, ", max_length ",
                                                   cache.max_length));
  }
  const int vec = head_dim % 4 == 0 ? 4 : 1;
  if (head_dim / vec > kThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("softmax on CUDA: head_dim ", head_dim, " too large"));
  }
  ABCD_RETURN_IF_ERROR(CheckGridRows("softmax", rows.batch));
  // One block row per key/value head: its query group's scores sit in shared memory beside a
  // tile of keys or values. Chunks of kMinChunk..kMaxChunk tokens (fewer when the shared memory
  // needs it): more of them when batch x kv_heads is small.
  const int group = n_heads / kv_heads;
  const int64_t fitting =
      MaxChunkForSharedMemory(internal::GroupAttendFixedFloats(group, head_dim, vec), group);
  ABCD_ASSIGN_OR_RETURN(
      const SplitPlan plan,
      PlanSplits("softmax", int64_t{cache.max_length} + 1, rows.batch * kv_heads,
                 context.sm_count(), kMinChunk, fitting < kMaxChunk ? fitting : kMaxChunk));
  const int splits = plan.splits, chunk = plan.chunk;

  // Planned first, so a refused shape leaves the caches as they were.
  const int64_t kv_width = static_cast<int64_t>(kv_heads) * head_dim;
  AppendKeyValueKernel<<<static_cast<unsigned>(rows.batch), 128, 0, context.stream()>>>(rows, cache,
                                                                                        kv_width);
  absl::Status status = CheckLaunch("AppendKeyValueKernel");
  if (!status.ok()) return status;

  float* partials = nullptr;
  if (splits > 1) {
    absl::StatusOr<void*> workspace = context.Workspace(static_cast<size_t>(rows.batch) * n_heads *
                                                        splits * (head_dim + 2) * sizeof(float));
    if (!workspace.ok()) return workspace.status();
    partials = static_cast<float*>(*workspace);
  }
  const int lanes = internal::LanesPerRow(head_dim, vec);
  const size_t shared_bytes =
      sizeof(float) * (internal::GroupAttendFixedFloats(group, head_dim, vec) +
                       static_cast<int64_t>(group) * chunk);
  const dim3 grid(kv_heads, static_cast<unsigned>(rows.batch), splits);
  if (vec == 4) {
    SoftmaxSplitKernel<4><<<grid, kThreads, shared_bytes, context.stream()>>>(
        n_heads, kv_heads, head_dim, rows, cache, chunk, lanes, partials);
  } else {
    SoftmaxSplitKernel<1><<<grid, kThreads, shared_bytes, context.stream()>>>(
        n_heads, kv_heads, head_dim, rows, cache, chunk, lanes, partials);
  }
  status = CheckLaunch("SoftmaxSplitKernel");
  if (!status.ok() || splits == 1) return status;
  return internal::CombineSoftmaxPartials(context, partials, rows.batch, n_heads, head_dim, splits,
                                          rows.out, rows.out_stride);
}

}  // namespace abcd::cuda
