// The array exp / gelu / log1p of engine/ops/vector_math.h against libm over their ranges,
// including the edges (underflow to 0, overflow to inf, NaN, the first-token -inf of ABC).
#include "engine/ops/vector_math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace abcd {
namespace {

std::vector<float> Range(float lo, float hi, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = lo + (hi - lo) * i / (n - 1);
  return v;
}

TEST(VectorMathTest, ExpWithinTwoUlpOverItsRange) {
  std::vector<float> x = Range(-87.0f, 88.5f, 200001);
  std::vector<float> y(x.size());
  cpu::ExpArray(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i], exact, 2.5e-7 * exact) << "x = " << x[i];
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edges = {-inf, -1000.0f, -88.0f, 0.0f, 89.0f, inf, std::nanf("")};
  std::vector<float> out(edges.size());
  cpu::ExpArray(edges.data(), static_cast<int64_t>(edges.size()), out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 1.0f);  // exactly: ABC's first-token weight
  EXPECT_EQ(out[4], inf);
  EXPECT_EQ(out[5], inf);
  EXPECT_TRUE(std::isnan(out[6]));
}

TEST(VectorMathTest, GeluMatchesTheErfForm) {
  std::vector<float> x = Range(-12.0f, 12.0f, 100001);
  std::vector<float> y = x;
  cpu::GeluErfInPlace(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double exact = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(y[i], exact, 3e-7 * (1.0 + std::fabs(v))) << "x = " << x[i];
  }
}

TEST(VectorMathTest, Log1pOnTheUnitIntervalKeepsRelativePrecision) {
  std::vector<float> x = Range(0.0f, 1.0f, 100001);
  for (float tiny : {1e-30f, 1e-12f, 1e-7f, 3e-5f}) x.push_back(tiny);
  std::vector<float> y(x.size());
  cpu::Log1pUnitArray(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::log1p(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i], exact, 3e-7 * exact + 1e-45) << "x = " << x[i];
  }
}

TEST(VectorMathTest, SinCosWithinThreeTenMillionthsAndLibmBeyondItsRange) {
  std::vector<float> x = Range(-100.0f, 100.0f, 400001);
  for (float big : {-8192.0f, 1000.5f, 4096.3f, 8191.9f, 9000.0f, 1e6f, -3e7f}) x.push_back(big);
  std::vector<float> s(x.size()), c(x.size());
  cpu::SinCosArray(x.data(), static_cast<int64_t>(x.size()), s.data(), c.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(s[i], std::sin(static_cast<double>(x[i])), 3e-7) << "x = " << x[i];
    ASSERT_NEAR(c[i], std::cos(static_cast<double>(x[i])), 3e-7) << "x = " << x[i];
  }
  const float special[2] = {INFINITY, NAN};
  float s2[2], c2[2];
  cpu::SinCosArray(special, 2, s2, c2);
  EXPECT_TRUE(std::isnan(s2[0]) && std::isnan(c2[0]) && std::isnan(s2[1]) && std::isnan(c2[1]));
}

}  // namespace
}  // namespace abcd
