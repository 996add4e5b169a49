// Shared pieces of the CUDA tests: a fixture that owns a CudaContext (or skips the test when
// the machine has no GPU), seeded random inputs, row views, the comparison every CUDA test uses
// and its tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/device/cuda_context.h"
#include "engine/ops/matmul_cuda.h"

namespace abcd::cuda {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override;
  CudaContext& context() { return *context_; }

  template <typename T>
  DeviceArray<T> Upload(const std::vector<T>& host) {
    absl::StatusOr<DeviceArray<T>> array = DeviceArray<T>::FromHost(*context_, host);
    EXPECT_TRUE(array.ok()) << array.status();
    return array.ok() ? std::move(*array) : DeviceArray<T>();
  }
  template <typename T>
  std::vector<T> Download(const DeviceArray<T>& array) {
    absl::StatusOr<std::vector<T>> host = array.ToHost(*context_);
    EXPECT_TRUE(host.ok()) << host.status();
    return host.ok() ? std::move(*host) : std::vector<T>();
  }

 private:
  std::unique_ptr<CudaContext> context_;
};

// One kernel against its CPU twin.
inline constexpr float kKernelTolerance = 1e-5f;
// A whole model's logits against the CPU engine or the golden fixtures (fp32 weights; the CPU
// parity test's tolerance).
inline constexpr float kLogitsTolerance = 1e-4f;

// Row `row` of a row-major matrix `width` wide (a view into `matrix`).
inline std::span<const float> Row(const std::vector<float>& matrix, int64_t row, int64_t width) {
  return std::span<const float>(matrix).subspan(static_cast<size_t>(row * width),
                                                static_cast<size_t>(width));
}

// n values uniform in [low, high), fixed seed.
std::vector<float> RandomFloats(int64_t n, uint32_t seed, float low = -1.0f, float high = 1.0f);

// `values` rounded to `type` on the host (round to nearest even, as the device rounds a GEMM's
// input) and widened back to fp32; kF32 returns them unchanged.
std::vector<float> RoundedOnHost(const std::vector<float>& values, WeightType type);
// 16-bit values of `type` (bf16 or fp16 bits, as the device stores them) widened to fp32.
std::vector<float> Widened(const std::vector<uint16_t>& bits, WeightType type);

// Fails (naming `what` and the first offending index) unless every element equals its
// expectation exactly (infinities included: an empty ABC slot's normaliser is -inf) or is finite
// with |actual - expected| <= tolerance * max(1, |expected|). NaN never passes.
void ExpectClose(std::span<const float> actual, std::span<const float> expected, float tolerance,
                 const std::string& what);

}  // namespace abcd::cuda
