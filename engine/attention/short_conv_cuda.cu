// fla's short convolution on the device (fla_state_cuda.h: ShortConvRows, ShortConvAdvance): a
// depthwise causal convolution of W taps over the first C columns of the projection rows, in
// front of an fla mixer or gated_deltanet; the window of the last W - 1 inputs per channel is
// part of the sequence's state block (after the inner state's floats, [W - 1, C] oldest first),
// as on the CPU (short_conv.h). Both kernels give one thread a channel; the per-element math is
// fla_math.h's (ShortConvElement, ShortConvWindowAfter), tested on the host.
//
// Order on the stream: ShortConvRows reads the windows, the inner mixer runs over the convolved
// rows, then ShortConvAdvance writes each checkpoint's window (from the old window) and moves the
// window on in place (a thread reads only its own channel, older entries first overwritten by
// newer ones it has already read).

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

constexpr int kMaxRowBlocks = 64;  // blocks sharing one sequence's rows

// Block (sequence, z): rows z, z + gridDim.y, ... of the sequence's run; each thread a column.
__global__ void __launch_bounds__(kThreads)
    ShortConvRowsKernel(fla::ConvParams params, StepRows rows, float* convolved, int64_t width) {
  const int64_t sequence = blockIdx.x;
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  const float* state = rows.states[sequence];
  const float* window = state != nullptr ? state + params.inner_floats : nullptr;
  for (int64_t r = blockIdx.y; r < count; r += gridDim.y) {
    const int64_t b = first + r;
    const float* x = rows.q + b * rows.q_stride;
    float* y = convolved + b * width;
    for (int64_t c = threadIdx.x; c < width; c += kThreads) {
      y[c] = c < params.channels ? fla::ShortConvElement(params, x, rows.q_stride, r, window, c)
                                 : x[c];
    }
  }
}

// Block (channel block, sequence): per channel, the checkpoints' windows, then the new window.
__global__ void __launch_bounds__(kThreads)
    ShortConvAdvanceKernel(fla::ConvParams params, StepRows rows) {
  const int64_t c = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  const int64_t sequence = blockIdx.y;
  if (c >= params.channels || params.size < 2) return;
  float* state = rows.states[sequence];
  if (state == nullptr) return;  // a padding row
  int64_t first, count;
  SequenceRows(rows, sequence, &first, &count);
  float* window = state + params.inner_floats;
  const float* x = rows.q + first * rows.q_stride;
  const int64_t kept = params.size - 1;
  if (rows.checkpoints != nullptr) {
    for (int64_t r = 0; r < count; ++r) {
      float* saved = rows.checkpoints[first + r];
      if (saved == nullptr) continue;
      for (int64_t t = 0; t < kept; ++t) {
        saved[params.inner_floats + t * params.channels + c] =
            fla::ShortConvWindowAfter(params, x, rows.q_stride, r + 1, window, t, c);
      }
    }
  }
  // Entry t reads entry t + count (> t) of the old window or a raw row: ascending t is in place.
  for (int64_t t = 0; t < kept; ++t) {
    window[t * params.channels + c] =
        fla::ShortConvWindowAfter(params, x, rows.q_stride, count, window, t, c);
  }
}

int64_t Sequences(const StepRows& rows) {
  return rows.first != nullptr ? rows.sequences : rows.batch;
}

absl::Status CheckRows(const CudaShortConv& conv, const StepRows& rows, const char* what) {
  if (rows.q == nullptr || rows.states == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null projection rows or states"));
  }
  if (rows.q_stride < conv.width) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": q_stride ", rows.q_stride, " (needs ", conv.width, ")"));
  }
  return CheckGridRows(what, Sequences(rows));
}

}  // namespace

absl::Status ShortConvRows(CudaContext& context, const CudaShortConv& conv, const StepRows& rows,
                           float* convolved) {
  if (rows.batch == 0) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(CheckRows(conv, rows, "short conv rows"));
  if (convolved == nullptr) return absl::InvalidArgumentError("short conv rows: null output");
  const int64_t sequences = Sequences(rows);
  if (sequences > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("short conv rows: ", sequences, " sequences"));
  }
  const int64_t row_blocks =
      rows.first != nullptr ? std::clamp<int64_t>(rows.longest_run, 1, kMaxRowBlocks) : 1;
  const dim3 grid(static_cast<unsigned>(sequences), static_cast<unsigned>(row_blocks));
  ShortConvRowsKernel<<<grid, kThreads, 0, context.stream()>>>(conv.params, rows, convolved,
                                                               conv.width);
  return CheckLaunch("ShortConvRowsKernel");
}

absl::Status ShortConvAdvance(CudaContext& context, const CudaShortConv& conv,
                              const StepRows& rows) {
  if (rows.batch == 0 || conv.params.size < 2) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(CheckRows(conv, rows, "short conv advance"));
  const dim3 grid(static_cast<unsigned>((conv.params.channels + kThreads - 1) / kThreads),
                  static_cast<unsigned>(Sequences(rows)));
  ShortConvAdvanceKernel<<<grid, kThreads, 0, context.stream()>>>(conv.params, rows);
  return CheckLaunch("ShortConvAdvanceKernel");
}

}  // namespace abcd::cuda
