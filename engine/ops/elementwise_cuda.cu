#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/ops/elementwise_cuda.h"

namespace abcd::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxWarps = 32;  // 1024 threads
constexpr int kElementwiseThreads = 256;
constexpr int kLayerNormMaxThreads = 512;
constexpr int kEmbedThreads = 256;
constexpr float kSqrtHalf = 0.707106781186547524f;  // float(M_SQRT1_2), as the CPU uses

absl::Status CheckCount(int64_t value, const char* what) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " must be >= 0, got ", value));
}

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
int GridStrideBlocks(const CudaContext& context, int64_t n, int threads) {
  const int64_t needed = (n + threads - 1) / threads;
  const int64_t fill = static_cast<int64_t>(std::max(context.sm_count(), 1)) * 8;
  return static_cast<int>(std::max<int64_t>(1, std::min(needed, fill)));
}

// Grid for a [rows, width] kernel whose x strides over columns and y over rows (both loops
// grid-stride, so any size fits the limits).
dim3 RowColumnGrid(int64_t rows, int64_t width) {
  const int64_t column_blocks = (width + kElementwiseThreads - 1) / kElementwiseThreads;
  return dim3(static_cast<unsigned>(std::min<int64_t>(column_blocks, 1024)),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
}

// The sum of `value` over the block, returned to every thread. blockDim.x must be a multiple
// of 32 (at most 1024); `shared` holds kMaxWarps + 1 floats and may be reused by the next call.
__device__ float BlockSum(float value, float* shared) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  __syncthreads();  // a previous call may still be reading `shared`
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    float partial = lane < warps ? shared[lane] : 0.0f;
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      partial += __shfl_xor_sync(0xffffffffu, partial, offset);
    }
    if (lane == 0) shared[kMaxWarps] = partial;
  }
  __syncthreads();
  return shared[kMaxWarps];
}

// An fp32 value as Out: itself, or rounded to nearest even (bf16, fp16), as a GEMM's input.
template <typename Out>
__device__ Out Convert(float value);
template <>
__device__ float Convert<float>(float value) {
  return value;
}
template <>
__device__ __nv_bfloat16 Convert<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <>
__device__ __half Convert<__half>(float value) {
  return __float2half_rn(value);
}

// One block per row. kVector reads float4 (d % 4 == 0, 16-byte aligned pointers) and writes
// four values at a time. x and y may alias (Out = float): each element is read before the same
// thread writes it, and the statistics are complete (block barriers) before any write.
template <bool kVector, typename Out>
__global__ void LayerNormKernel(const float* x, int64_t d, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float eps, Out* y) {
  __shared__ float shared[kMaxWarps + 1];
  const int64_t row = blockIdx.x;
  const float* in = x + row * d;
  Out* out = y + row * d;
  const int64_t stride = blockDim.x;
  const int64_t vectors = d / 4;

  float sum = 0.0f;
  if constexpr (kVector) {
    const float4* in4 = reinterpret_cast<const float4*>(in);
    for (int64_t i = threadIdx.x; i < vectors; i += stride) {
      const float4 v = in4[i];
      sum += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += stride) sum += in[i];
  }
  const float mean = BlockSum(sum, shared) / static_cast<float>(d);

  float squares = 0.0f;
  if constexpr (kVector) {
    const float4* in4 = reinterpret_cast<const float4*>(in);
    for (int64_t i = threadIdx.x; i < vectors; i += stride) {
      const float4 v = in4[i];
      const float cx = v.x - mean, cy = v.y - mean, cz = v.z - mean, cw = v.w - mean;
      squares += (cx * cx + cy * cy) + (cz * cz + cw * cw);
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += stride) {
      const float c = in[i] - mean;
      squares += c * c;
    }
  }
  const float variance = BlockSum(squares, shared) / static_cast<float>(d);
  const float inv = 1.0f / sqrtf(variance + eps);  // IEEE sqrt and division, as the CPU

  if constexpr (kVector) {
    const float4* in4 = reinterpret_cast<const float4*>(in);
    const float4* gamma4 = reinterpret_cast<const float4*>(gamma);
    const float4* beta4 = reinterpret_cast<const float4*>(beta);
    for (int64_t i = threadIdx.x; i < vectors; i += stride) {
      const float4 v = in4[i], g = gamma4[i], b = beta4[i];
      const float4 normed =
          make_float4((v.x - mean) * inv * g.x + b.x, (v.y - mean) * inv * g.y + b.y,
                      (v.z - mean) * inv * g.z + b.z, (v.w - mean) * inv * g.w + b.w);
      if constexpr (std::is_same_v<Out, float>) {
        reinterpret_cast<float4*>(out)[i] = normed;
      } else {
        out[4 * i] = Convert<Out>(normed.x);
        out[4 * i + 1] = Convert<Out>(normed.y);
        out[4 * i + 2] = Convert<Out>(normed.z);
        out[4 * i + 3] = Convert<Out>(normed.w);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += stride) {
      out[i] = Convert<Out>((in[i] - mean) * inv * gamma[i] + beta[i]);
    }
  }
}

// One block per row: y = x / sqrt(mean(x^2) + eps) * gamma (cpu::RmsNorm; the sum of squares in
// fp32 here, in double there). x and y may alias (Out = float): the statistics are complete
// (block barriers) before any write.
template <typename Out>
__global__ void RmsNormKernel(const float* x, int64_t d, const float* __restrict__ gamma, float eps,
                              Out* y) {
  __shared__ float shared[kMaxWarps + 1];
  const int64_t row = blockIdx.x;
  const float* in = x + row * d;
  Out* out = y + row * d;
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) squares += in[i] * in[i];
  const float mean = BlockSum(squares, shared) / static_cast<float>(d);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    out[i] = Convert<Out>(in[i] * inv * gamma[i]);
}

// out[r, c] = silu(gate_up[r, c]) * gate_up[r, ff + c] as Out (cpu::SwiGlu's gate | up rows);
// out must not overlap gate_up.
template <typename Out>
__global__ void SwiGluKernel(const float* __restrict__ gate_up, int64_t rows, int64_t ff,
                             Out* __restrict__ out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < ff;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
      const float g = gate_up[r * 2 * ff + c], u = gate_up[r * 2 * ff + ff + c];
      out[r * ff + c] = Convert<Out>(g / (1.0f + expf(-g)) * u);
    }
  }
}

// out[i] = x[i] as Out (x and out do not alias unless Out = float).
template <typename Out>
__global__ void RoundKernel(const float* __restrict__ x, int64_t n, Out* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = Convert<Out>(x[i]);
  }
}

// out[i] = activation(x[i]) as Out; x and out may be the same buffer (Out = float).
template <Activation kActivation, typename Out>
__global__ void ActivateKernel(const float* x, int64_t n, Out* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    if constexpr (kActivation == Activation::kRelu) {
      out[i] = Convert<Out>(v > 0.0f ? v : 0.0f);
    } else {
      out[i] = Convert<Out>(0.5f * v * (1.0f + erff(v * kSqrtHalf)));
    }
  }
}

// grid.x strides over columns, grid.y over rows (no per-element division).
__global__ void AddBiasKernel(float* __restrict__ y, int64_t rows, int64_t width,
                              const float* __restrict__ bias) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < width;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float b = bias[c];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) y[r * width + c] += b;
  }
}

// grid.y strides over output rows, grid.x and the threads over columns.
__global__ void GatherRowsKernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                 int64_t count, int64_t d, float* __restrict__ y) {
  for (int64_t i = blockIdx.y; i < count; i += gridDim.y) {
    const float* source = x + static_cast<int64_t>(rows[i]) * d;
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < d;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      y[i * d + c] = source[c];
    }
  }
}

// One block per row; thread j owns the pair (2j, 2j + 1). Mirrors Model::Embed followed by
// cpu::AddSinusoidalPosition operation by operation: the scaled embedding is rounded to fp32,
// then the fp32-rounded sin / cos is added (__fmul_rn / __fadd_rn forbid FMA contraction).
__global__ void EmbedKernel(const float* __restrict__ table, const int32_t* __restrict__ tokens,
                            const int64_t* __restrict__ positions, int64_t d, float scale,
                            float* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const float* embedding = table + static_cast<int64_t>(tokens[row]) * d;
  float* destination = out + row * d;
  if (positions == nullptr) {  // no positional encoding (rotary models rotate q and k instead)
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      destination[i] = __fmul_rn(embedding[i], scale);
    }
    return;
  }
  const double position = static_cast<double>(positions[row]);
  const int64_t pairs = d / 2;
  for (int64_t j = threadIdx.x; j < (d + 1) / 2; j += blockDim.x) {
    const int64_t even = 2 * j;
    const float scaled_even = __fmul_rn(embedding[even], scale);
    if (j < pairs) {
      const double angle =
          position / pow(10000.0, 2.0 * static_cast<double>(j) / static_cast<double>(d));
      double sine, cosine;
      sincos(angle, &sine, &cosine);
      destination[even] = __fadd_rn(scaled_even, static_cast<float>(sine));
      destination[even + 1] =
          __fadd_rn(__fmul_rn(embedding[even + 1], scale), static_cast<float>(cosine));
    } else {
      destination[even] = scaled_even;  // odd d: the last element has no position term
    }
  }
}

bool Aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

template <typename Out>
absl::Status LaunchLayerNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                             const float* gamma, const float* beta, float eps, Out* y) {
  if (absl::Status status = CheckCount(rows, "LayerNorm rows"); !status.ok()) return status;
  if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("LayerNorm d must be > 0, got ", d));
  if (rows > INT32_MAX) return absl::InvalidArgumentError("LayerNorm: too many rows");
  if (rows == 0) return absl::OkStatus();
  // 16-bit outputs are written one value at a time, so only the fp32 one needs aligned rows.
  const bool vector = d % 4 == 0 && Aligned16(x) && Aligned16(gamma) && Aligned16(beta) &&
                      (!std::is_same_v<Out, float> || Aligned16(y));
  const int64_t work = vector ? d / 4 : d;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      (work + kWarpSize - 1) / kWarpSize * kWarpSize, kWarpSize, kLayerNormMaxThreads));
  const dim3 grid(static_cast<unsigned>(rows));
  if (vector) {
    LayerNormKernel<true, Out><<<grid, threads, 0, context.stream()>>>(x, d, gamma, beta, eps, y);
  } else {
    LayerNormKernel<false, Out><<<grid, threads, 0, context.stream()>>>(x, d, gamma, beta, eps, y);
  }
  return CheckLaunch("LayerNormKernel");
}

template <typename Out>
absl::Status LaunchRmsNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                           const float* gamma, float eps, Out* y) {
  if (absl::Status status = CheckCount(rows, "RmsNorm rows"); !status.ok()) return status;
  if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("RmsNorm d must be > 0, got ", d));
  if (rows > INT32_MAX) return absl::InvalidArgumentError("RmsNorm: too many rows");
  if (rows == 0) return absl::OkStatus();
  const int threads = static_cast<int>(std::clamp<int64_t>(
      (d + kWarpSize - 1) / kWarpSize * kWarpSize, kWarpSize, kLayerNormMaxThreads));
  RmsNormKernel<Out>
      <<<static_cast<unsigned>(rows), threads, 0, context.stream()>>>(x, d, gamma, eps, y);
  return CheckLaunch("RmsNormKernel");
}

template <typename Out>
absl::Status LaunchSwiGlu(CudaContext& context, const float* gate_up, int64_t rows, int64_t ff,
                          Out* out) {
  if (absl::Status status = CheckCount(rows, "SwiGlu rows"); !status.ok()) return status;
  if (absl::Status status = CheckCount(ff, "SwiGlu ff"); !status.ok()) return status;
  if (rows == 0 || ff == 0) return absl::OkStatus();
  const dim3 grid = RowColumnGrid(rows, ff);
  SwiGluKernel<Out><<<grid, kElementwiseThreads, 0, context.stream()>>>(gate_up, rows, ff, out);
  return CheckLaunch("SwiGluKernel");
}

template <typename Out>
absl::Status LaunchActivate(CudaContext& context, Activation activation, const float* x, int64_t n,
                            Out* out) {
  if (absl::Status status = CheckCount(n, "Activate n"); !status.ok()) return status;
  if (n == 0) return absl::OkStatus();
  const int blocks = GridStrideBlocks(context, n, kElementwiseThreads);
  switch (activation) {
    case Activation::kRelu:
      ActivateKernel<Activation::kRelu, Out>
          <<<blocks, kElementwiseThreads, 0, context.stream()>>>(x, n, out);
      break;
    case Activation::kGelu:
      ActivateKernel<Activation::kGelu, Out>
          <<<blocks, kElementwiseThreads, 0, context.stream()>>>(x, n, out);
      break;
    case Activation::kSwiGlu:  // gated: SwiGluRounded
      return absl::InvalidArgumentError("swiglu is gated: use SwiGluRounded");
  }
  return CheckLaunch("ActivateKernel");
}

template <typename Out>
absl::Status LaunchRound(CudaContext& context, const float* x, int64_t n, Out* out) {
  if (absl::Status status = CheckCount(n, "RoundTo n"); !status.ok()) return status;
  if (n == 0) return absl::OkStatus();
  const int blocks = GridStrideBlocks(context, n, kElementwiseThreads);
  RoundKernel<Out><<<blocks, kElementwiseThreads, 0, context.stream()>>>(x, n, out);
  return CheckLaunch("RoundKernel");
}

// Calls launch(typed pointer) with `out` as the element type of `type`.
template <typename Launch>
absl::Status WithOutputType(WeightType type, void* out, const Launch& launch) {
  switch (type) {
    case WeightType::kF32:
      return launch(static_cast<float*>(out));
    case WeightType::kBF16:
      return launch(static_cast<__nv_bfloat16*>(out));
    case WeightType::kF16:
      return launch(static_cast<__half*>(out));
  }
  return absl::InvalidArgumentError("unknown weight type");
}

}  // namespace

absl::Status LayerNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                       const float* gamma, const float* beta, float eps, float* y) {
  return LaunchLayerNorm(context, x, rows, d, gamma, beta, eps, y);
}

absl::Status LayerNormRounded(CudaContext& context, const float* x, int64_t rows, int64_t d,
                              const float* gamma, const float* beta, float eps, WeightType type,
                              void* y) {
  return WithOutputType(type, y, [&](auto* out) {
    return LaunchLayerNorm(context, x, rows, d, gamma, beta, eps, out);
  });
}

absl::Status RmsNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                     const float* gamma, float eps, float* y) {
  return LaunchRmsNorm(context, x, rows, d, gamma, eps, y);
}

absl::Status RmsNormRounded(CudaContext& context, const float* x, int64_t rows, int64_t d,
                            const float* gamma, float eps, WeightType type, void* y) {
  return WithOutputType(
      type, y, [&](auto* out) { return LaunchRmsNorm(context, x, rows, d, gamma, eps, out); });
}

absl::Status SwiGluRounded(CudaContext& context, const float* gate_up, int64_t rows, int64_t ff,
                           WeightType type, void* out) {
  return WithOutputType(
      type, out, [&](auto* typed) { return LaunchSwiGlu(context, gate_up, rows, ff, typed); });
}

absl::Status ActivateRounded(CudaContext& context, Activation activation, const float* x, int64_t n,
                             WeightType type, void* out) {
  return WithOutputType(
      type, out, [&](auto* typed) { return LaunchActivate(context, activation, x, n, typed); });
}

absl::Status RoundTo(CudaContext& context, const float* x, int64_t n, WeightType type, void* out) {
  return WithOutputType(type, out, [&](auto* typed) { return LaunchRound(context, x, n, typed); });
}

absl::Status AddBias(CudaContext& context, float* y, int64_t rows, int64_t width,
                     const float* bias) {
  if (absl::Status status = CheckCount(rows, "AddBias rows"); !status.ok()) return status;
  if (absl::Status status = CheckCount(width, "AddBias width"); !status.ok()) return status;
  if (rows == 0 || width == 0) return absl::OkStatus();
  const dim3 grid = RowColumnGrid(rows, width);
  AddBiasKernel<<<grid, kElementwiseThreads, 0, context.stream()>>>(y, rows, width, bias);
  return CheckLaunch("AddBiasKernel");
}

absl::Status Embed(CudaContext& context, const float* table, const int32_t* tokens,
                   const int64_t* positions, int64_t rows, int64_t d, float scale, float* out) {
  if (absl::Status status = CheckCount(rows, "Embed rows"); !status.ok()) return status;
  if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("Embed d must be > 0, got ", d));
  if (rows > INT32_MAX) return absl::InvalidArgumentError("Embed: too many rows");
  if (rows == 0) return absl::OkStatus();
  const int threads = static_cast<int>(
      std::min<int64_t>(kEmbedThreads, ((d + 1) / 2 + kWarpSize - 1) / kWarpSize * kWarpSize));
  EmbedKernel<<<static_cast<unsigned>(rows), threads, 0, context.stream()>>>(
      table, tokens, positions, d, scale, out);
  return CheckLaunch("EmbedKernel");
}

absl::Status GatherRows(CudaContext& context, const float* x, const int32_t* rows, int64_t count,
                        int64_t d, float* y) {
  if (absl::Status status = CheckCount(count, "GatherRows count"); !status.ok()) return status;
  if (absl::Status status = CheckCount(d, "GatherRows d"); !status.ok()) return status;
  if (count == 0 || d == 0) return absl::OkStatus();
  const dim3 grid = RowColumnGrid(count, d);
  GatherRowsKernel<<<grid, kElementwiseThreads, 0, context.stream()>>>(x, rows, count, d, y);
  return CheckLaunch("GatherRowsKernel");
}

}  // namespace abcd::cuda
