#include "tests/cuda/cuda_test_util.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace abcd::cuda {

void CudaTest::SetUp() {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CPU backend is used";
  absl::StatusOr<std::unique_ptr<CudaContext>> context = CudaContext::Create(0);
  ASSERT_TRUE(context.ok()) << context.status();
  context_ = std::move(*context);
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float low, float high) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& value : values) value = distribution(generator);
  return values;
}

std::vector<float> RoundedOnHost(const std::vector<float>& values, WeightType type) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    switch (type) {
      case WeightType::kF32:
        out[i] = values[i];
        break;
      case WeightType::kBF16:
        out[i] = __bfloat162float(__float2bfloat16_rn(values[i]));
        break;
      case WeightType::kF16:
        out[i] = __half2float(__float2half_rn(values[i]));
        break;
    }
  }
  return out;
}

std::vector<float> Widened(const std::vector<uint16_t>& bits, WeightType type) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    if (type == WeightType::kBF16) {
      const uint32_t wide = uint32_t{bits[i]} << 16;
      std::memcpy(&out[i], &wide, sizeof(wide));
    } else {
      __half_raw raw;
      raw.x = bits[i];
      out[i] = __half2float(__half(raw));
    }
  }
  return out;
}

void ExpectClose(std::span<const float> actual, std::span<const float> expected, float tolerance,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  float worst = 0.0f;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i]) continue;  // equal, including equal infinities (empty ABC L)
    ASSERT_TRUE(std::isfinite(actual[i])) << what << ": element " << i << " is " << actual[i];
    const float error = std::abs(actual[i] - expected[i]) / std::max(1.0f, std::abs(expected[i]));
    ASSERT_LE(error, tolerance) << what << ": element " << i << " is " << actual[i] << ", expected "
                                << expected[i];
    worst = std::max(worst, error);
  }
  ::testing::Test::RecordProperty(what + "_max_relative_error", std::to_string(worst));
}

}  // namespace abcd::cuda
