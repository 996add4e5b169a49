// cpu::RmsNorm, cpu::LayerNorm and the residual add (engine/ops/elementwise.h) with a batch's rows
// split across a thread pool: every row the same bits as on the caller alone, in place or not,
// and each row normalised (unit mean square / zero mean and unit variance before the gains).
#include "engine/ops/elementwise.h"

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "engine/core/thread_pool.h"
#include "gtest/gtest.h"

namespace abcd {
namespace {

TEST(ElementwiseSplitTest, RowsSplitAcrossAPoolGiveEachRowsBitsAlone) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::uniform_real_distribution<float> gain(0.5f, 1.5f);
  ThreadPool pool(3);
  // Too few values to split (1 x 2048, 7 x 2048), then split in 2-6 pieces, uneven ones too.
  for (const auto& [rows, d] :
       {std::pair<int64_t, int64_t>{1, 2048}, {7, 2048}, {64, 2048}, {33, 1000}, {5, 4096}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows of " << d);
    std::vector<float> x(static_cast<size_t>(rows * d)), gamma(static_cast<size_t>(d));
    std::vector<float> beta(gamma.size());
    for (float& v : x) v = normal(rng);
    for (float& v : gamma) v = gain(rng);
    for (float& v : beta) v = normal(rng);
    constexpr float kEps = 1e-6f;

    std::vector<float> alone(x.size()), split(x.size(), -7.0f);
    cpu::RmsNorm(x.data(), rows, d, gamma.data(), kEps, alone.data());
    cpu::RmsNorm(x.data(), rows, d, gamma.data(), kEps, split.data(), &pool);
    EXPECT_EQ(split, alone);
    std::vector<float> in_place = x;
    cpu::RmsNorm(in_place.data(), rows, d, gamma.data(), kEps, in_place.data(), &pool);
    EXPECT_EQ(in_place, alone);
    for (int64_t r = 0; r < rows; ++r) {
      double square = 0;
      for (int64_t i = 0; i < d; ++i) {
        const double v = alone[static_cast<size_t>(r * d + i)] / gamma[static_cast<size_t>(i)];
        square += v * v;
      }
      ASSERT_NEAR(square / static_cast<double>(d), 1.0, 1e-4) << "RMSNorm row " << r;
    }

    std::vector<float> layer_alone(x.size()), layer_split(x.size(), -7.0f);
    cpu::LayerNorm(x.data(), rows, d, gamma.data(), beta.data(), kEps, layer_alone.data());
    cpu::LayerNorm(x.data(), rows, d, gamma.data(), beta.data(), kEps, layer_split.data(), &pool);
    EXPECT_EQ(layer_split, layer_alone);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, square = 0;
      for (int64_t i = 0; i < d; ++i) {
        const size_t at = static_cast<size_t>(r * d + i);
        const double v =
            (layer_alone[at] - beta[static_cast<size_t>(i)]) / gamma[static_cast<size_t>(i)];
        sum += v;
        square += v * v;
      }
      ASSERT_NEAR(sum / static_cast<double>(d), 0.0, 1e-4) << "LayerNorm row " << r;
      ASSERT_NEAR(square / static_cast<double>(d), 1.0, 1e-4) << "LayerNorm row " << r;
    }
  }
}

TEST(ElementwiseSplitTest, ResidualAddSplitAcrossAPoolEqualsTheAddAlone) {
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (const int64_t n : {int64_t{5}, int64_t{16384}, int64_t{64 * 2048}, int64_t{100003}}) {
    std::vector<float> y(static_cast<size_t>(n)), x(y.size());
    for (float& v : y) v = normal(rng);
    for (float& v : x) v = normal(rng);
    std::vector<float> expected = y;
    for (size_t i = 0; i < y.size(); ++i) expected[i] += x[i];
    std::vector<float> alone = y;
    cpu::AddInPlace(alone.data(), x.data(), n);
    cpu::AddInPlace(y.data(), x.data(), n, &pool);
    EXPECT_EQ(alone, expected) << n;
    EXPECT_EQ(y, expected) << n;
  }
}

}  // namespace
}  // namespace abcd
