// Dense projection y = x W^T + b on the device, for every row of a step at once (the CUDA twin
// of matmul.h): through cuBLASLt, or at a few rows with 16-bit weights through a GEMV kernel of
// abcd's own. Weights may be fp32, bf16 or fp16; activations stay fp32 in memory and are
// rounded to the weights' type for the product (by Linear, or beforehand by the op that produced
// them: LinearRounded), which accumulates in fp32. The bias and an optional residual (y += ...)
// are applied in the GEMM's epilogue (or the GEMV's write), so a projection is one kernel (two
// when Linear rounds the input for cuBLASLt) instead of rounding, GEMM, bias and residual adds.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda {

enum class WeightType { kF32, kBF16, kF16 };

// A [out, in] weight matrix (torch nn.Linear layout) resident on the device, with the cuBLASLt
// plans (descriptors and chosen algorithm) of the projections run with it, one per row count,
// bias and output mode, made on first use. Not thread-safe, like the context it is used with.
class DeviceMatrix {
 public:
  // Uploads host fp32 values, rounded to `type` (round to nearest even).
  static absl::StatusOr<DeviceMatrix> Upload(CudaContext& context, const float* host, int64_t out,
                                             int64_t in, WeightType type);
  DeviceMatrix();
  DeviceMatrix(DeviceMatrix&&) noexcept;
  DeviceMatrix& operator=(DeviceMatrix&&) noexcept;
  ~DeviceMatrix();

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  WeightType type() const { return type_; }
  const void* data() const {
    return type_ == WeightType::kF32 ? static_cast<const void*>(full_.data())
                                     : static_cast<const void*>(half_.data());
  }
  int64_t bytes() const;

  // matmul_cuda.cu's memo of cuBLASLt plans for this matrix.
  struct Plans;
  Plans& plans() const { return *plans_; }

 private:
  int64_t out_ = 0;
  int64_t in_ = 0;
  WeightType type_ = WeightType::kF32;
  DeviceArray<float> full_;
  DeviceArray<uint16_t> half_;
  std::unique_ptr<Plans> plans_;
};

// The most rows the GEMV kernel takes. A projection with 16-bit weights runs as that kernel
// (one pass over the weights, the input rounded as it is read) instead of cuBLASLt when its rows
// are at most context.gemv_max_rows() (and this).
inline constexpr int kGemvMaxRows = 4;

// Whether a projection overwrites y or adds to it (a residual: y += x W^T + b).
enum class LinearOutput { kOverwrite, kAccumulate };

// x: [rows, in] device, bias: [out] device or nullptr, y: [rows, out] device. fp32 weights use
// exact fp32 GEMMs (no TF32), so results match the CPU to fp32 rounding. The algorithm cuBLASLt
// picks for a shape is memoised in the context (the first call of a shape must not be inside a
// CUDA graph capture).
absl::Status Linear(CudaContext& context, const float* x, int64_t rows, const DeviceMatrix& w,
                    const float* bias, float* y, LinearOutput output = LinearOutput::kOverwrite);

// The same projection over activations already rounded to w's type: x holds [rows, in] bf16 or
// fp16 values (RoundTo, LayerNormRounded, ActivateRounded), or fp32 values for fp32 weights.
absl::Status LinearRounded(CudaContext& context, const void* x, int64_t rows, const DeviceMatrix& w,
                           const float* bias, float* y,
                           LinearOutput output = LinearOutput::kOverwrite);

}  // namespace abcd::cuda
