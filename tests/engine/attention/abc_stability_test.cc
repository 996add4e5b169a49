// ABC's running-mean form over 100k steps with control logits of +-80: every value stays
// finite and equals the exact normalised memory computed in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/attention/abc_state.h"

namespace abcd {
namespace {

TEST(AbcStability, HundredThousandStepsWithLargeControlLogits) {
  constexpr int kSlots = 4, kDim = 8, kSteps = 100'000;
  std::vector<float> keys(kSlots * kDim, 0.0f), values(kSlots * kDim, 0.0f);
  std::vector<float> log_norm(kSlots, -std::numeric_limits<float>::infinity());
  // Exact reference: weighted sums in double, rescaled by the running maximum per slot.
  std::vector<double> ref_keys(kSlots * kDim, 0.0), ref_values(kSlots * kDim, 0.0);
  std::vector<double> ref_total(kSlots, 0.0), ref_max(kSlots, -INFINITY);

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::bernoulli_distribution coin(0.5);
  std::vector<float> k(kDim), v(kDim), control(kSlots);
  for (int step = 0; step < kSteps; ++step) {
    for (int c = 0; c < kDim; ++c) {
      k[c] = unit(rng);
      v[c] = unit(rng);
    }
    for (int j = 0; j < kSlots; ++j) control[j] = (coin(rng) ? 80.0f : -80.0f) + unit(rng);
    AbcUpdateHead(k.data(), v.data(), control.data(), kSlots, kDim, keys.data(), values.data(),
                  log_norm.data());
    for (int j = 0; j < kSlots; ++j) {
      const double a = control[j];
      if (a > ref_max[j]) {
        const double rescale = std::exp(ref_max[j] - a);
        ref_total[j] *= rescale;
        for (int c = 0; c < kDim; ++c) {
          ref_keys[j * kDim + c] *= rescale;
          ref_values[j * kDim + c] *= rescale;
        }
        ref_max[j] = a;
      }
      const double w = std::exp(a - ref_max[j]);
      ref_total[j] += w;
      for (int c = 0; c < kDim; ++c) {
        ref_keys[j * kDim + c] += w * k[c];
        ref_values[j * kDim + c] += w * v[c];
      }
    }
  }
  for (int j = 0; j < kSlots; ++j) {
    ASSERT_TRUE(std::isfinite(log_norm[j]));
    EXPECT_NEAR(log_norm[j], ref_max[j] + std::log(ref_total[j]), 1e-3 * std::abs(log_norm[j]));
    for (int c = 0; c < kDim; ++c) {
      ASSERT_TRUE(std::isfinite(keys[j * kDim + c]));
      ASSERT_TRUE(std::isfinite(values[j * kDim + c]));
      EXPECT_NEAR(keys[j * kDim + c], ref_keys[j * kDim + c] / ref_total[j], 1e-4);
      EXPECT_NEAR(values[j * kDim + c], ref_values[j * kDim + c] / ref_total[j], 1e-4);
    }
  }
}

TEST(AbcStability, FirstTokenHasWeightOne) {
  const float k[2] = {1.5f, -2.0f}, v[2] = {0.25f, 4.0f}, control[1] = {-80.0f};
  float keys[2] = {0, 0}, values[2] = {0, 0}, log_norm[1] = {-INFINITY};
  AbcUpdateHead(k, v, control, 1, 2, keys, values, log_norm);
  EXPECT_EQ(keys[0], 1.5f);
  EXPECT_EQ(values[1], 4.0f);
  EXPECT_EQ(log_norm[0], -80.0f);
}

}  // namespace
}  // namespace abcd
