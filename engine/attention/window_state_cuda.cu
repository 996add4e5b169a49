// Sliding-window softmax attention on the device (the CUDA twin of WindowState with dilation 1,
// see attention_state_cuda.h): per (key/value head, sequence, ring split) one block keeps its
// share of the ring rows, writes a row's key and value there when the row's ring slot is one of
// its own, then reads its rows for the row's query group (GroupAttend); splits are merged by the
// softmax combine. A block reads and writes only its own ring rows, so the splits of a scan need
// no synchronisation with each other.

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
using internal::GroupWrite;
using internal::kThreads;
using internal::SequenceRows;
using internal::WritePaddingRows;

constexpr int kMaxChunk = 512;  // ring rows per block at most
constexpr int kMinChunk = 64;   // ring rows per block at least (when splitting to fill the GPU)

// Dynamic shared memory: GroupAttend's.
template <int kVec, bool kCheckpoints>
__global__ void __launch_bounds__(kThreads)
    WindowStepKernel(WindowShape shape, StepRows rows, const int64_t* positions, int chunk,
                     int lanes, float* partials) {
  extern __shared__ float shared[];
  const int kv_head = blockIdx.x;
  const int64_t sequence = blockIdx.y;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const int split = blockIdx.z, splits = gridDim.z;
  const int dh = shape.head_dim, span = shape.window;
  const int group = shape.q_heads / shape.kv_heads;
  const int h0 = kv_head * group;
  if (rows.states[sequence] == nullptr) {
    // A padding row of a CUDA-graph bucket: no state to touch; its output is zero.
    for (int g = 0; g < group; ++g) {
      WritePaddingRows<2>(rows, partials, first, count, shape.q_heads, h0 + g, dh);
    }
    return;
  }
  const int64_t width = static_cast<int64_t>(shape.kv_heads) * dh;  // floats per ring row
  const int s0 = split * chunk;
  const int owned = max(0, min(span, s0 + chunk) - s0);  // this block's ring rows
  float* state = rows.states[sequence];
  float* keys = state + static_cast<int64_t>(s0) * width + static_cast<int64_t>(kv_head) * dh;
  float* values = keys + static_cast<int64_t>(span) * width;
  for (int64_t b = first; b < first + count; ++b) {
    const int64_t position = positions[b];
    const int slot = static_cast<int>(position % span) - s0;
    if (slot >= 0 && slot < owned) {
      const float* k = rows.kv + b * rows.kv_stride + static_cast<int64_t>(kv_head) * dh;
      for (int c = threadIdx.x; c < dh; c += kThreads) {
        keys[slot * width + c] = k[c];
        values[slot * width + c] = k[width + c];
      }
    }
    __syncthreads();  // the new row stored before any thread reads it
    // Ring rows 0 .. min(p + 1, span) - 1 hold the window (the ring fills in order).
    const int valid = static_cast<int>(position + 1 < span ? position + 1 : span);
    const int local = max(0, min(valid, s0 + chunk) - s0);
    GroupAttend<kVec>(rows.q + b * rows.q_stride + static_cast<int64_t>(h0) * dh, group, dh, keys,
                      values, shape.kv_heads * dh, local, chunk, lanes, shared);
    GroupWrite<kVec>(
        group, dh, chunk, shared, rows.out + b * rows.out_stride + static_cast<int64_t>(h0) * dh,
        splits == 1 ? nullptr : partials + ((b * shape.q_heads + h0) * splits + split) * (dh + 2),
        static_cast<int64_t>(splits) * (dh + 2));
    __syncthreads();  // the next row reuses shared memory and may overwrite a ring row
    if constexpr (kCheckpoints) {
      if (rows.checkpoints[b] != nullptr) {
        // This block's ring rows of its key/value head, at the same offsets of the checkpoint.
        const int64_t offset = keys - state;
        float* saved = rows.checkpoints[b] + offset;
        for (int i = threadIdx.x; i < owned * dh; i += kThreads) {
          const int64_t at = (i / dh) * width + i % dh;
          saved[at] = keys[at];
          saved[static_cast<int64_t>(span) * width + at] = values[at];
        }
        __syncthreads();  // copied before the next row writes its ring row
      }
    }
  }
}

}  // namespace

absl::Status WindowStep(CudaContext& context, const WindowShape& shape, const StepRows& rows,
                        const int64_t* positions) {
  if (rows.batch == 0) return absl::OkStatus();
  const int dh = shape.head_dim;
  if (shape.q_heads <= 0 || shape.kv_heads <= 0 || shape.q_heads % shape.kv_heads != 0 || dh <= 0 ||
      shape.window <= 0 || positions == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("window shape: heads ", shape.q_heads, "/",
                                                   shape.kv_heads, ", head_dim ", dh, ", window ",
                                                   shape.window));
  }
  const int vec = dh % 4 == 0 ? 4 : 1;
  if (dh / vec > kThreads) {
    return absl::InvalidArgumentError(absl::StrCat("window on CUDA: head_dim ", dh, " too large"));
  }
  // One block row per sequence: a row each when decoding, a scan over its rows in a prefill.
  const int64_t sequences = rows.first != nullptr ? rows.sequences : rows.batch;
  ABCD_RETURN_IF_ERROR(CheckGridRows("window", sequences));
  const int group = shape.q_heads / shape.kv_heads;
  const int64_t fitting =
      MaxChunkForSharedMemory(internal::GroupAttendFixedFloats(group, dh, vec), group);
  ABCD_ASSIGN_OR_RETURN(
      const SplitPlan plan,
      PlanSplits("window", shape.window, internal::SplitBlocks(rows, sequences, shape.kv_heads),
                 context.sm_count(), kMinChunk, fitting < kMaxChunk ? fitting : kMaxChunk));
  const int splits = plan.splits, chunk = plan.chunk;
  if (splits > 1) ABCD_RETURN_IF_ERROR(CheckGridRows("window combine", rows.batch));
  float* partials = nullptr;
  if (splits > 1) {
    absl::StatusOr<void*> workspace = context.Workspace(
        static_cast<size_t>(rows.batch) * shape.q_heads * splits * (dh + 2) * sizeof(float));
    if (!workspace.ok()) return workspace.status();
    partials = static_cast<float*>(*workspace);
  }
  const int lanes = internal::LanesPerRow(dh, vec);
  const size_t shared_bytes = sizeof(float) * (internal::GroupAttendFixedFloats(group, dh, vec) +
                                               static_cast<int64_t>(group) * chunk);
  const dim3 grid(shape.kv_heads, static_cast<unsigned>(sequences), splits);
  // Checkpoints are a variant of their own, as in the abc step.
  const bool checkpoints = rows.checkpoints != nullptr;
  const auto kernel = vec == 4
                          ? (checkpoints ? WindowStepKernel<4, true> : WindowStepKernel<4, false>)
                          : (checkpoints ? WindowStepKernel<1, true> : WindowStepKernel<1, false>);
  kernel<<<grid, kThreads, shared_bytes, context.stream()>>>(shape, rows, positions, chunk, lanes,
                                                             partials);
  absl::Status status = CheckLaunch("WindowStepKernel");
  if (!status.ok() || splits == 1) return status;
  return internal::CombineSoftmaxPartials(context, partials, rows.batch, shape.q_heads, dh, splits,
                                          rows.out, rows.out_stride);
}

}  // namespace abcd::cuda
