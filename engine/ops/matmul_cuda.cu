#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <memory>
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
  absl::StatusOr<void*> scratch = context.Workspace(static_cast<size_t>(rows * w.in()) * 2);
  if (!scratch.ok()) return scratch.status();
  ABCD_RETURN_IF_ERROR(RoundTo(context, x, rows * w.in(), w.type(), *scratch));
  return LinearRounded(context, *scratch, rows, w, bias, y, output);
}

}  // namespace abcd::cuda
