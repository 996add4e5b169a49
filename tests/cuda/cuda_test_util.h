// Shared pieces of the CUDA tests: a fixture that owns a CudaContext (or skips the test when
// the machine has no GPU), seeded random inputs, and the comparison every CUDA test uses.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/cuda_context.h"

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

// n values uniform in [low, high), fixed seed.
std::vector<float> RandomFloats(int64_t n, uint32_t seed, float low = -1.0f, float high = 1.0f);

// Fails (naming `what` and the first offending index) unless every element equals its
// expectation exactly (infinities included: an empty ABC slot's normaliser is -inf) or is finite
// with |actual - expected| <= tolerance * max(1, |expected|). NaN never passes.
void ExpectClose(const std::vector<float>& actual, const std::vector<float>& expected,
                 float tolerance, const std::string& what);

}  // namespace abcd::cuda
