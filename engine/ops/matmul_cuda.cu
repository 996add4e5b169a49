#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
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

cudaDataType_t DataType(WeightType type) {
  switch (type) {
    case WeightType::kBF16:
      return CUDA_R_16BF;
    case WeightType::kF16:
      return CUDA_R_16F;
    case WeightType::kF32:
      break;
  }
  return CUDA_R_32F;
}

// The largest power of two up to 256 that divides the address (cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise).
uint32_t Alignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

constexpr int kGemvThreads = 256;  // 8 warps a block
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvUnroll = 4;   // 16-byte weight loads each lane has in flight
constexpr int kGemvSpan = 1024;  // a warp's share of a weight row is split at this many values

__device__ __forceinline__ float Widen(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ __forceinline__ float Widen(__half value) { return __half2float(value); }

// Eight 16-bit values of one 16-byte load, widened.
template <typename Half>
__device__ __forceinline__ void Unpack8(const uint4& bits, float* out) {
  const Half* halves = reinterpret_cast<const Half*>(&bits);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = Widen(halves[i]);
}

// An activation as the product sees it: rounded to the weights' type (x already is, or fp32 x
// is rounded here exactly as RoundTo would), widened to fp32.
template <typename Half>
__device__ __forceinline__ float Operand(Half x) {
  return Widen(x);
}
template <typename Half>
__device__ __forceinline__ float Operand(float x) {
  if constexpr (std::is_same_v<Half, __nv_bfloat16>) {
    return __bfloat162float(__float2bfloat16_rn(x));
  } else {
    return __half2float(__float2half_rn(x));
  }
}

// Eight consecutive activations (16-byte aligned) as operands.
template <typename Half>
__device__ __forceinline__ void LoadOperands8(const Half* x, float* out) {
  Unpack8<Half>(__ldg(reinterpret_cast<const uint4*>(x)), out);
}
template <typename Half>
__device__ __forceinline__ void LoadOperands8(const float* x, float* out) {
  const float4 low = __ldg(reinterpret_cast<const float4*>(x));
  const float4 high = __ldg(reinterpret_cast<const float4*>(x) + 1);
  out[0] = Operand<Half>(low.x);
  out[1] = Operand<Half>(low.y);
  out[2] = Operand<Half>(low.z);
  out[3] = Operand<Half>(low.w);
  out[4] = Operand<Half>(high.x);
  out[5] = Operand<Half>(high.y);
  out[6] = Operand<Half>(high.z);
  out[7] = Operand<Half>(high.w);
}

// y[r, o] (+)= sum_c x[r, c] w[o, c] + bias[o] for kRows rows: `split` warps share each output
// feature o (a contiguous part of its weight row each, in / split values), their lanes striding
// over it with kGemvUnroll 16-byte loads in flight when kVector (in % (8 * split) == 0, 16-byte
// aligned w and x; else split is 1 and the loads are scalar). fp32 accumulation, a warp
// reduction, then the parts are added in shared memory and written once. At a few rows a
// projection is a read of the weights, which cuBLAS's GEMM tiles (8-64 outputs a block) leave
// mostly unused bandwidth for.
template <typename Half, typename X, int kRows, bool kVector>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(const Half* __restrict__ w, const X* __restrict__ x, int in, int out, int split,
               const float* __restrict__ bias, bool accumulate, float* __restrict__ y) {
  __shared__ float parts[kGemvWarps][kRows];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int o = static_cast<int>(blockIdx.x) * (kGemvWarps / split) + warp / split;
  const int part = warp % split;
  const int span = in / split;
  const int begin = part * span, end = begin + span;
  float acc[kRows] = {};
  if (o < out) {
    const Half* row = w + static_cast<int64_t>(o) * in;
    if constexpr (kVector) {
      for (int base = begin + lane * 8; base < end; base += 32 * 8 * kGemvUnroll) {
        uint4 bits[kGemvUnroll];
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const int c = base + u * 32 * 8;
          bits[u] =
              c < end ? __ldg(reinterpret_cast<const uint4*>(row + c)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const int c = base + u * 32 * 8;
          if (c >= end) break;
          float weight[8];
          Unpack8<Half>(bits[u], weight);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float operand[8];
            LoadOperands8<Half>(x + static_cast<int64_t>(r) * in + c, operand);
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) sum += weight[i] * operand[i];
            acc[r] += sum;
          }
        }
      }
    } else {
      for (int c = begin + lane; c < end; c += 32) {
        const float weight = Widen(row[c]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          acc[r] += weight * Operand<Half>(x[static_cast<int64_t>(r) * in + c]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    }
  }
  if (split > 1) {  // uniform over the block
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) parts[warp][r] = acc[r];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.0f;
      for (int p = 0; p < split; ++p) sum += parts[warp + p][r];
      acc[r] = sum;
    }
  }
  if (o >= out || lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float value = bias != nullptr ? acc[r] + bias[o] : acc[r];
    float* target = y + static_cast<int64_t>(r) * out + o;
    *target = accumulate ? *target + value : value;
  }
}

bool Aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

template <typename Half, typename X, int kRows>
void LaunchGemvRows(CudaContext& context, bool vector, const Half* w, const X* x, int in, int out,
                    int split, const float* bias, bool accumulate, float* y) {
  const unsigned blocks =
      static_cast<unsigned>((out + kGemvWarps / split - 1) / (kGemvWarps / split));
  if (vector) {
    GemvKernel<Half, X, kRows, true>
        <<<blocks, kGemvThreads, 0, context.stream()>>>(w, x, in, out, split, bias, accumulate, y);
  } else {
    GemvKernel<Half, X, kRows, false>
        <<<blocks, kGemvThreads, 0, context.stream()>>>(w, x, in, out, split, bias, accumulate, y);
  }
}

template <typename Half, typename X>
absl::Status LaunchGemv(CudaContext& context, const Half* w, const X* x, int64_t rows, int64_t in,
                        int64_t out, const float* bias, bool accumulate, float* y) {
  const bool vector = in % 8 == 0 && Aligned16(w) && Aligned16(x);
  // Long rows are shared by up to 8 warps, kGemvSpan values or more each, so that enough loads
  // are in flight when there are few output features.
  int split = 1;
  while (vector && split < kGemvWarps && in % (16 * split) == 0 && in / (2 * split) >= kGemvSpan) {
    split *= 2;
  }
  if (rows < 1 || rows > kGemvMaxRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMV rows ", rows, " (1 to ", kGemvMaxRows, ")"));
  }
  // One instantiation per row count (the kernel keeps a sum per row in registers).
  using Launch = void (*)(CudaContext&, bool, const Half*, const X*, int, int, int, const float*,
                          bool, float*);
  static_assert(kGemvMaxRows == 4, "one entry per row count below");
  static constexpr Launch kLaunches[] = {&LaunchGemvRows<Half, X, 1>, &LaunchGemvRows<Half, X, 2>,
                                         &LaunchGemvRows<Half, X, 3>, &LaunchGemvRows<Half, X, 4>};
  kLaunches[rows - 1](context, vector, w, x, static_cast<int>(in), static_cast<int>(out), split,
                      bias, accumulate, y);
  return CheckLaunch("GemvKernel");
}

// The GEMV path with weights of type Half; x is fp32 (rounded as it is read) or already of the
// weights' type (X = void).
template <typename Half, typename X>
absl::Status GemvAs(CudaContext& context, const X* x, int64_t rows, const DeviceMatrix& w,
                    const float* bias, float* y, bool accumulate) {
  const auto* weights = static_cast<const Half*>(w.data());
  if constexpr (std::is_same_v<X, float>) {
    return LaunchGemv(context, weights, x, rows, w.in(), w.out(), bias, accumulate, y);
  } else {
    return LaunchGemv(context, weights, static_cast<const Half*>(x), rows, w.in(), w.out(), bias,
                      accumulate, y);
  }
}

template <typename X>
absl::Status Gemv(CudaContext& context, const X* x, int64_t rows, const DeviceMatrix& w,
                  const float* bias, float* y, bool accumulate) {
  if (w.in() > INT32_MAX || w.out() > INT32_MAX) {
    return absl::InvalidArgumentError("GEMV: weight matrix too large");
  }
  return w.type() == WeightType::kBF16
             ? GemvAs<__nv_bfloat16>(context, x, rows, w, bias, y, accumulate)
             : GemvAs<__half>(context, x, rows, w, bias, y, accumulate);
}

// Whether a projection of `rows` rows takes the GEMV path (the context's setting).
bool UseGemv(const CudaContext& context, int64_t rows, const DeviceMatrix& w) {
  return w.type() != WeightType::kF32 &&
         rows <= std::min<int64_t>(context.gemv_max_rows(), kGemvMaxRows);
}

}  // namespace

// One GEMM shape's cuBLASLt descriptors and chosen algorithm.
struct LinearPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t weights = nullptr, activations = nullptr, output = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  size_t workspace_bytes = 0;
  bool bias_in_epilogue = false;

  LinearPlan() = default;
  LinearPlan(const LinearPlan&) = delete;
  LinearPlan& operator=(const LinearPlan&) = delete;
  ~LinearPlan() {
    if (output != nullptr) cublasLtMatrixLayoutDestroy(output);
    if (activations != nullptr) cublasLtMatrixLayoutDestroy(activations);
    if (weights != nullptr) cublasLtMatrixLayoutDestroy(weights);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct DeviceMatrix::Plans {
  struct Key {
    int64_t rows;
    bool bias, accumulate;
    uint32_t alignment;  // the least of the operands' (Alignment)
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& key) {
      return H::combine(std::move(h), key.rows, key.bias, key.accumulate, key.alignment);
    }
  };
  absl::flat_hash_map<Key, std::unique_ptr<LinearPlan>> by_key;
};

namespace {

// Descriptors and the heuristic's first algorithm for y[rows, out] (+)= x W^T (+ bias), in
// cuBLAS's column-major terms Y[out, rows] = W^T X: W is stored [in, out] column-major. With a
// bias, the bias epilogue is tried first; shapes it does not support add the bias after the
// GEMM (AddBias).
absl::StatusOr<std::unique_ptr<LinearPlan>> MakePlan(CudaContext& context, const DeviceMatrix& w,
                                                     const DeviceMatrix::Plans::Key& key) {
  auto plan = std::make_unique<LinearPlan>();
  const cudaDataType_t type = DataType(w.type());
  const uint64_t in = static_cast<uint64_t>(w.in()), out = static_cast<uint64_t>(w.out());
  const uint64_t rows = static_cast<uint64_t>(key.rows);
  ABCD_RETURN_IF_ERROR(Check(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate"));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  ABCD_RETURN_IF_ERROR(Check(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                            &transpose, sizeof(transpose)),
                             "CUBLASLT_MATMUL_DESC_TRANSA"));
  ABCD_RETURN_IF_ERROR(Check(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)),
      "CUBLASLT_MATMUL_DESC_TRANSB"));
  ABCD_RETURN_IF_ERROR(Check(cublasLtMatrixLayoutCreate(&plan->weights, type, in, out, in),
                             "cublasLtMatrixLayoutCreate weights"));
  ABCD_RETURN_IF_ERROR(Check(cublasLtMatrixLayoutCreate(&plan->activations, type, in, rows, in),
                             "cublasLtMatrixLayoutCreate activations"));
  ABCD_RETURN_IF_ERROR(Check(cublasLtMatrixLayoutCreate(&plan->output, CUDA_R_32F, out, rows, out),
                             "cublasLtMatrixLayoutCreate output"));

  cublasLtMatmulPreference_t preference = nullptr;
  ABCD_RETURN_IF_ERROR(
      Check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate"));
  const uint64_t workspace = context.cublas_workspace_bytes();
  absl::Status status = Check(
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace, sizeof(workspace)),
      "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
  for (const cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (!status.ok()) break;
    status = Check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &key.alignment,
                                                        sizeof(key.alignment)),
                   "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT");
  }
  bool found = false;
  for (const bool epilogue_bias : {true, false}) {
    if (!status.ok() || found) break;
    if (epilogue_bias && !key.bias) continue;
    const cublasLtEpilogue_t epilogue =
        epilogue_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    status = Check(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                  &epilogue, sizeof(epilogue)),
                   "CUBLASLT_MATMUL_DESC_EPILOGUE");
    if (!status.ok()) break;
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
        context.cublas_lt(), plan->desc, plan->weights, plan->activations, plan->output,
        plan->output, preference, 1, &result, &count);
    if (heuristic == CUBLAS_STATUS_SUCCESS && count > 0) {
      plan->algorithm = result.algo;
      plan->workspace_bytes = result.workspaceSize;
      plan->bias_in_epilogue = epilogue_bias;
      found = true;
    } else if (heuristic != CUBLAS_STATUS_SUCCESS && heuristic != CUBLAS_STATUS_NOT_SUPPORTED) {
      status = Check(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    }
  }
  cublasLtMatmulPreferenceDestroy(preference);
  if (!status.ok()) return status;
  if (!found) {
    return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for a [", rows, ", ", in,
                                            "] x [", out, ", ", in, "]^T GEMM"));
  }
  return plan;
}

}  // namespace

DeviceMatrix::DeviceMatrix() : plans_(std::make_unique<Plans>()) {}
DeviceMatrix::DeviceMatrix(DeviceMatrix&&) noexcept = default;
DeviceMatrix& DeviceMatrix::operator=(DeviceMatrix&&) noexcept = default;
DeviceMatrix::~DeviceMatrix() = default;

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

absl::Status LinearRounded(CudaContext& context, const void* x, int64_t rows, const DeviceMatrix& w,
                           const float* bias, float* y, LinearOutput output) {
  if (rows == 0) return absl::OkStatus();
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("Linear rows ", rows));
  const bool accumulate = output == LinearOutput::kAccumulate;
  if (UseGemv(context, rows, w)) return Gemv(context, x, rows, w, bias, y, accumulate);
  const DeviceMatrix::Plans::Key key{rows, bias != nullptr, accumulate,
                                     std::min({Alignment(w.data()), Alignment(x), Alignment(y)})};
  auto& plans = w.plans().by_key;
  auto found = plans.find(key);
  if (found == plans.end()) {
    absl::StatusOr<std::unique_ptr<LinearPlan>> plan = MakePlan(context, w, key);
    if (!plan.ok()) return plan.status();
    found = plans.emplace(key, std::move(*plan)).first;
  }
  LinearPlan& plan = *found->second;
  if (plan.bias_in_epilogue) {
    ABCD_RETURN_IF_ERROR(
        Check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof(bias)),
              "CUBLASLT_MATMUL_DESC_BIAS_POINTER"));
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  ABCD_RETURN_IF_ERROR(
      Check(cublasLtMatmul(context.cublas_lt(), plan.desc, &alpha, w.data(), plan.weights, x,
                           plan.activations, &beta, y, plan.output, y, plan.output, &plan.algorithm,
                           context.cublas_workspace(), plan.workspace_bytes, context.stream()),
            "cublasLtMatmul"));
  if (bias == nullptr || plan.bias_in_epilogue) return absl::OkStatus();
  return AddBias(context, y, rows, w.out(), bias);
}

absl::Status Linear(CudaContext& context, const float* x, int64_t rows, const DeviceMatrix& w,
                    const float* bias, float* y, LinearOutput output) {
  if (rows == 0) return absl::OkStatus();
  if (w.type() == WeightType::kF32) return LinearRounded(context, x, rows, w, bias, y, output);
  if (UseGemv(context, rows, w)) {  // rounded as the weights are read
    return Gemv(context, x, rows, w, bias, y, output == LinearOutput::kAccumulate);
  }
  absl::StatusOr<void*> scratch = context.Workspace(static_cast<size_t>(rows * w.in()) * 2);
  if (!scratch.ok()) return scratch.status();
  ABCD_RETURN_IF_ERROR(RoundTo(context, x, rows * w.in(), w.type(), *scratch));
  return LinearRounded(context, *scratch, rows, w, bias, y, output);
}

}  // namespace abcd::cuda
