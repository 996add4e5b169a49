#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/ops/elementwise_cuda.h"
#include "engine/ops/matmul_cuda.h"

namespace abcd::cuda {
namespace {

uint16_t ToBf16(float value) {
  const __nv_bfloat16 rounded = __float2bfloat16_rn(value);
  uint16_t bits;
  std::memcpy(&bits, &rounded, sizeof(bits));
  return bits;
}

uint16_t ToF16(float value) {
  const __half rounded = __float2half_rn(value);
  uint16_t bits;
  std::memcpy(&bits, &rounded, sizeof(bits));
  return bits;
}

template <typename Half>
__device__ Half RoundTo(float value);
template <>
__device__ __nv_bfloat16 RoundTo<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <>
__device__ __half RoundTo<__half>(float value) {
  return __float2half_rn(value);
}

template <typename Half>
__global__ void RoundActivations(const float* __restrict__ x, int64_t n, Half* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = RoundTo<Half>(x[i]);
  }
}

int GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

absl::StatusOr<DeviceMatrix> DeviceMatrix::Upload(CudaContext& context, const float* host,
                                                  int64_t out, int64_t in, WeightType type) {
  if (out <= 0 || in <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("weight shape [", out, ", ", in, "]"));
  }
  DeviceMatrix matrix;
  matrix.out_ = out;
  matrix.in_ = in;
  matrix.type_ = type;
  const int64_t count = out * in;
  if (type == WeightType::kF32) {
    absl::StatusOr<DeviceArray<float>> full = DeviceArray<float>::Allocate(count);
    if (!full.ok()) return full.status();
    matrix.full_ = std::move(*full);
    absl::Status status = matrix.full_.CopyFromHost(context, host, count);
    if (status.ok()) status = context.Synchronize();
    if (!status.ok()) return status;
    return matrix;
  }
  std::vector<uint16_t> rounded(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    rounded[i] = type == WeightType::kBF16 ? ToBf16(host[i]) : ToF16(host[i]);
  }
  absl::StatusOr<DeviceArray<uint16_t>> half = DeviceArray<uint16_t>::FromHost(context, rounded);
  if (!half.ok()) return half.status();
  matrix.half_ = std::move(*half);
  // `rounded` dies here: wait for the copy.
  absl::Status status = context.Synchronize();
  if (!status.ok()) return status;
  return matrix;
}

int64_t DeviceMatrix::bytes() const { return out_ * in_ * (type_ == WeightType::kF32 ? 4 : 2); }

absl::Status Linear(CudaContext& context, const float* x, int64_t rows, const DeviceMatrix& w,
                    const float* bias, float* y) {
  if (rows == 0) return absl::OkStatus();
  const int64_t in = w.in(), out = w.out();
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y[rows, out] = x[rows, in] W^T is column-major Y[out, rows] = W^T[out, in] X.
  const void* activations = x;
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (w.type() != WeightType::kF32) {
    absl::StatusOr<void*> scratch = context.Workspace(static_cast<size_t>(rows * in) * 2);
    if (!scratch.ok()) return scratch.status();
    constexpr int kThreads = 256;
    if (w.type() == WeightType::kBF16) {
      type = CUDA_R_16BF;
      RoundActivations<<<GridFor(rows * in, kThreads), kThreads, 0, context.stream()>>>(
          x, rows * in, static_cast<__nv_bfloat16*>(*scratch));
    } else {
      type = CUDA_R_16F;
      RoundActivations<<<GridFor(rows * in, kThreads), kThreads, 0, context.stream()>>>(
          x, rows * in, static_cast<__half*>(*scratch));
    }
    absl::Status status = CheckLaunch("RoundActivations");
    if (!status.ok()) return status;
    activations = *scratch;
  }
  absl::Status status =
      Check(cublasGemmEx(context.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                         static_cast<int>(rows), static_cast<int>(in), &alpha, w.data(), type,
                         static_cast<int>(in), activations, type, static_cast<int>(in), &beta, y,
                         CUDA_R_32F, static_cast<int>(out), compute, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
  if (!status.ok() || bias == nullptr) return status;
  return AddBias(context, y, rows, out, bias);
}

}  // namespace abcd::cuda
