// W8A8 (cpu::LinearProducts::kInt8, the AVX-512 VNNI vpdpbusd kernel): outputs equal to the
// exact integer products of the 8-bit activations and the int8 weights, scaled back, within
// fp32 rounding, on odd shapes (`in` not a multiple of 4, an odd count of stored pairs, several
// 256-column blocks, outputs not a multiple of 16, row counts around the tile) with and without
// bias and threads; extreme values that would overflow one int32 sum; a row's outputs the same
// bits alone or in any batch; the activation quantisation (nearest even, clamped, padded with
// the zero code 128, zero and non-finite rows); other formats unchanged. Skipped where the CPU
// lacks AVX-512 VNNI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/matmul.h"
#include "engine/ops/matmul_kernels.h"
#include "engine/ops/packed_matrix.h"

namespace abcd::w8a8_test {
namespace {

std::vector<float> Uniform(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(W8A8Test, OutputsAreTheExactProductsOfTheQuantisedActivations) {
  if (!cpu::W8A8Supported()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  struct Shape {
    int64_t rows, in, out;
  };
  const Shape shapes[] = {{1, 256, 896}, {1, 9, 70},    {2, 6, 17},    {3, 40, 100}, {4, 19, 48},
                          {7, 600, 130}, {13, 258, 33}, {1, 1001, 40}, {5, 1, 20},   {17, 31, 300},
                          {3, 1030, 64}, {6, 70, 50},   {8, 130, 40},  {9, 66, 35}};
  ThreadPool pool(2);
  uint32_t seed = 11;
  for (const Shape& s : shapes) {
    const std::vector<float> w = Uniform(static_cast<size_t>(s.out * s.in), seed++, 1.0f);
    const std::vector<float> x = Uniform(static_cast<size_t>(s.rows * s.in), seed++, 3.0f);
    const std::vector<float> bias = Uniform(static_cast<size_t>(s.out), seed++, 1.0f);
    const PackedMatrix packed = PackedMatrix::Pack(w, s.out, s.in, WeightFormat::kInt8);
    const std::vector<float> dense = packed.ToFloat();  // the int8 weights times their scales
    const int64_t stride = cpu::kernels::QuadStride(s.in);
    std::vector<uint8_t> xq(static_cast<size_t>(s.rows * stride));
    std::vector<float> scales(static_cast<size_t>(s.rows));
    cpu::kernels::QuantizeRowsU8(x.data(), s.rows, s.in, xq.data(), scales.data());
    for (bool with_bias : {false, true}) {
      for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const float* b = with_bias ? bias.data() : nullptr;
        std::vector<float> y(static_cast<size_t>(s.rows * s.out));
        cpu::Linear(x.data(), s.rows, packed, b, y.data(), threads, cpu::LinearProducts::kInt8);
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t o = 0; o < s.out; ++o) {
            double expected = 0.0, magnitude = 0.0;
            for (int64_t k = 0; k < s.in; ++k) {
              const double activation =
                  (static_cast<int>(xq[r * stride + k]) - 128) * static_cast<double>(scales[r]);
              const double term = activation * dense[o * s.in + k];
              expected += term;
              magnitude += std::fabs(term);
            }
            if (b != nullptr) expected += b[o], magnitude += std::fabs(b[o]);
            // Exact integer sums per 256 columns, added and scaled in fp32: a few ulps.
            ASSERT_NEAR(y[r * s.out + o], expected, 1e-6 * (1.0 + magnitude))
                << "rows=" << s.rows << " in=" << s.in << " out=" << s.out << " row " << r
                << " output " << o << " bias=" << with_bias;
          }
        }
      }
    }
  }
}

TEST(W8A8Test, ExtremeValuesDoNotOverflowTheIntegerSums) {
  if (!cpu::W8A8Supported()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const int64_t in = 8192, out = 32;
  std::vector<float> w(static_cast<size_t>(out * in), 1.0f);
  for (int64_t k = 0; k < in; ++k) w[static_cast<size_t>(in + k)] = -1.0f;  // row 1: all -1
  const PackedMatrix packed = PackedMatrix::Pack(w, out, in, WeightFormat::kInt8);
  for (const float sign : {1.0f, -1.0f}) {
    const std::vector<float> x(static_cast<size_t>(in), 2.5f * sign);
    std::vector<float> y(static_cast<size_t>(out));
    cpu::Linear(x.data(), 1, packed, nullptr, y.data(), nullptr, cpu::LinearProducts::kInt8);
    ASSERT_NEAR(y[0], sign * 2.5f * in, 1e-5f * 2.5f * in);
    ASSERT_NEAR(y[1], -sign * 2.5f * in, 1e-5f * 2.5f * in);
  }
}

TEST(W8A8Test, ARowIsTheSameBitsAloneOrInAnyBatch) {
  if (!cpu::W8A8Supported()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const int64_t in = 301, out = 77, rows = 13;
  const std::vector<float> w = Uniform(static_cast<size_t>(out * in), 41, 1.0f);
  const std::vector<float> x = Uniform(static_cast<size_t>(rows * in), 42, 2.0f);
  const std::vector<float> bias = Uniform(static_cast<size_t>(out), 43, 1.0f);
  const PackedMatrix packed = PackedMatrix::Pack(w, out, in, WeightFormat::kInt8);
  std::vector<float> all(static_cast<size_t>(rows * out));
  cpu::Linear(x.data(), rows, packed, bias.data(), all.data(), nullptr, cpu::LinearProducts::kInt8);
  for (int64_t first = 0; first < rows; first += 3) {
    const int64_t counts[] = {1, 5, 8, 2};  // unstaged (<= 8 rows) beside the 13-row staged batch
    const int64_t count = std::min<int64_t>(counts[(first / 3) % 4], rows - first);
    std::vector<float> some(static_cast<size_t>(count * out));
    cpu::Linear(x.data() + first * in, count, packed, bias.data(), some.data(), nullptr,
                cpu::LinearProducts::kInt8);
    for (int64_t i = 0; i < count * out; ++i) {
      ASSERT_EQ(std::memcmp(&some[i], &all[first * out + i], 4), 0)
          << "rows " << first << " + " << count << ", value " << i;
    }
  }
}

TEST(W8A8Test, ActivationsQuantiseToNearestEvenClampedAndPadded) {
  if (!cpu::W8A8Supported()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const int64_t rows = 4, in = 37, stride = cpu::kernels::QuadStride(in);
  ASSERT_EQ(stride, 40);
  std::vector<float> x = Uniform(static_cast<size_t>(rows * in), 7, 50.0f);
  x[0] = 127.0f;  // row 0's max: scale 1, so its values quantise to themselves rounded
  x[1] = 2.5f;    // a halfway case: to even (2)
  x[2] = -3.5f;   // to even (-4)
  for (int64_t k = 0; k < in; ++k) x[static_cast<size_t>(in + k)] = 0.0f;  // row 1: zeros
  x[static_cast<size_t>(2 * in + 5)] = std::nanf("");                      // row 2: a NaN
  x[static_cast<size_t>(3 * in + 9)] = -INFINITY;                          // row 3: an infinity
  std::vector<uint8_t> xq(static_cast<size_t>(rows * stride), 7);
  std::vector<float> scales(static_cast<size_t>(rows));
  cpu::kernels::QuantizeRowsU8(x.data(), rows, in, xq.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(xq[1], 128 + 2);
  EXPECT_EQ(xq[2], 128 - 4);
  for (int64_t k = 0; k < in; ++k) {
    ASSERT_EQ(xq[k], 128 + static_cast<int>(std::nearbyint(x[k]))) << k;
  }
  EXPECT_EQ(scales[1], 0.0f);
  EXPECT_TRUE(std::isnan(scales[2]));
  EXPECT_TRUE(std::isnan(scales[3]));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = r == 0 ? in : 0; k < stride; ++k) {
      ASSERT_EQ(xq[r * stride + k], 128) << "row " << r << " column " << k;
    }
  }
  // NaN in, NaN out, as fp32 products would give.
  {
    const PackedMatrix packed = PackedMatrix::Pack(Uniform(static_cast<size_t>(16 * in), 9, 1.0f),
                                                   16, in, WeightFormat::kInt8);
    std::vector<float> y(static_cast<size_t>(rows * 16));
    cpu::Linear(x.data(), rows, packed, nullptr, y.data(), nullptr, cpu::LinearProducts::kInt8);
    EXPECT_EQ(y[16], 0.0f);
    EXPECT_TRUE(std::isnan(y[2 * 16]));
    EXPECT_TRUE(std::isnan(y[3 * 16]));
  }
}

// The setting changes only int8 weights.
TEST(W8A8Test, OtherFormatsIgnoreIt) {
  const int64_t in = 70, out = 40, rows = 5;
  const std::vector<float> w = Uniform(static_cast<size_t>(out * in), 51, 1.0f);
  const std::vector<float> x = Uniform(static_cast<size_t>(rows * in), 52, 1.0f);
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16}) {
    const PackedMatrix packed = PackedMatrix::Pack(w, out, in, format);
    std::vector<float> fp32(static_cast<size_t>(rows * out)), int8(fp32.size());
    cpu::Linear(x.data(), rows, packed, nullptr, fp32.data(), nullptr);
    cpu::Linear(x.data(), rows, packed, nullptr, int8.data(), nullptr, cpu::LinearProducts::kInt8);
    for (size_t i = 0; i < fp32.size(); ++i) {
      ASSERT_EQ(std::memcmp(&fp32[i], &int8[i], 4), 0) << WeightFormatName(format) << " " << i;
    }
  }
}

}  // namespace
}  // namespace abcd::w8a8_test
