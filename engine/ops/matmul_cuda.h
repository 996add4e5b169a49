// Dense projection y = x W^T + b on the device through cuBLAS, for every row of a step at once
// (the CUDA twin of matmul.h). Weights may be fp32, bf16 or fp16; activations stay fp32 in
// memory and are rounded to the weights' type for the GEMM, which accumulates in fp32.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda {

enum class WeightType { kF32, kBF16, kF16 };

// A [out, in] weight matrix (torch nn.Linear layout) resident on the device.
class DeviceMatrix {
 public:
  // Uploads host fp32 values, rounded to `type` (round to nearest even).
  static absl::StatusOr<DeviceMatrix> Upload(CudaContext& context, const float* host, int64_t out,
                                             int64_t in, WeightType type);
  DeviceMatrix() = default;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  WeightType type() const { return type_; }
  const void* data() const {
    return type_ == WeightType::kF32 ? static_cast<const void*>(full_.data())
                                     : static_cast<const void*>(half_.data());
  }
  int64_t bytes() const;

 private:
  int64_t out_ = 0;
  int64_t in_ = 0;
  WeightType type_ = WeightType::kF32;
  DeviceArray<float> full_;
  DeviceArray<uint16_t> half_;
};

// x: [rows, in] device, bias: [out] device or nullptr, y: [rows, out] device (overwritten).
// fp32 weights use exact fp32 GEMMs (no TF32), so results match the CPU to fp32 rounding.
absl::Status Linear(CudaContext& context, const float* x, int64_t rows, const DeviceMatrix& w,
                    const float* bias, float* y);

}  // namespace abcd::cuda
