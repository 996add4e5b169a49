// bf16 products (cpu::LinearProducts::kBf16, the AVX512_BF16 kernel): outputs within fp32
// rounding of a double-precision product of the bf16-rounded activations and the bf16 weights,
// on odd shapes (odd `in`, rows that are not multiples of the tile, outputs that are not
// multiples of 16), with and without bias and threads; a row's outputs the same bits alone or in
// any batch; the activation rounding equal to the scalar FloatToBf16; other formats and CPUs
// without AVX512_BF16 unchanged. The kernel's tests skip where the CPU lacks it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/matmul.h"
#include "engine/ops/matmul_kernels.h"
#include "engine/ops/packed_matrix.h"

namespace abcd::bf16_products_test {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(Bf16ProductsTest, MatchTheProductOfTheRoundedActivations) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  struct Shape {
    int64_t rows, in, out;
  };
  const Shape shapes[] = {{1, 256, 896}, {1, 9, 70},   {2, 33, 17},  {3, 40, 100},
                          {4, 19, 48},   {7, 40, 130}, {13, 8, 300}, {17, 31, 33}};
  ThreadPool pool(2);
  uint32_t seed = 7;
  for (const Shape& s : shapes) {
    const std::vector<float> w = Random(static_cast<size_t>(s.out * s.in), seed++);
    const std::vector<float> x = Random(static_cast<size_t>(s.rows * s.in), seed++, 3.0f);
    const std::vector<float> bias = Random(static_cast<size_t>(s.out), seed++);
    const PackedMatrix packed = PackedMatrix::Pack(w, s.out, s.in, WeightFormat::kBF16);
    const std::vector<float> dense = packed.ToFloat();
    for (bool with_bias : {false, true}) {
      for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const float* b = with_bias ? bias.data() : nullptr;
        std::vector<float> y(static_cast<size_t>(s.rows * s.out));
        cpu::Linear(x.data(), s.rows, packed, b, y.data(), threads, cpu::LinearProducts::kBf16);
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t o = 0; o < s.out; ++o) {
            double expected = b != nullptr ? b[o] : 0.0, magnitude = std::fabs(expected);
            for (int64_t k = 0; k < s.in; ++k) {
              const double term = static_cast<double>(Bf16ToFloat(FloatToBf16(x[r * s.in + k]))) *
                                  dense[o * s.in + k];
              expected += term;
              magnitude += std::fabs(term);
            }
            // fp32 sums of exact products: a few ulps of the terms' magnitude per column pair.
            ASSERT_NEAR(y[r * s.out + o], expected, 1e-6 * (1.0 + magnitude) * std::sqrt(s.in))
                << "rows=" << s.rows << " in=" << s.in << " out=" << s.out << " row " << r
                << " output " << o << " bias=" << with_bias;
          }
        }
      }
    }
  }
}

TEST(Bf16ProductsTest, ARowIsTheSameBitsAloneOrInAnyBatch) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  const int64_t in = 301, out = 77, rows = 13;
  const std::vector<float> w = Random(static_cast<size_t>(out * in), 41);
  const std::vector<float> x = Random(static_cast<size_t>(rows * in), 42, 2.0f);
  const std::vector<float> bias = Random(static_cast<size_t>(out), 43);
  const PackedMatrix packed = PackedMatrix::Pack(w, out, in, WeightFormat::kBF16);
  std::vector<float> all(static_cast<size_t>(rows * out));
  cpu::Linear(x.data(), rows, packed, bias.data(), all.data(), nullptr, cpu::LinearProducts::kBf16);
  for (int64_t first = 0; first < rows; first += 3) {
    const int64_t count = std::min<int64_t>(first % 2 == 0 ? 1 : 5, rows - first);
    std::vector<float> some(static_cast<size_t>(count * out));
    cpu::Linear(x.data() + first * in, count, packed, bias.data(), some.data(), nullptr,
                cpu::LinearProducts::kBf16);
    for (int64_t i = 0; i < count * out; ++i) {
      ASSERT_TRUE(SameBits(some[i], all[first * out + i]))
          << "rows " << first << " + " << count << ", value " << i;
    }
  }
}

TEST(Bf16ProductsTest, ActivationsRoundAsTheScalarConversionDoes) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  for (int64_t in : {1, 15, 16, 17, 40, 301}) {
    const int64_t rows = 3, stride = cpu::kernels::Bf16Stride(in);
    std::vector<float> x = Random(static_cast<size_t>(rows * in), static_cast<uint32_t>(in), 1e3f);
    // Halfway cases round to even, both ways.
    x[0] = Bf16ToFloat(0x3f80) + std::ldexp(1.0f, -8);  // 1 + half an ulp of bf16: stays 1
    std::vector<uint16_t> rounded(static_cast<size_t>(rows * stride), 0xffff);
    cpu::kernels::RoundRowsToBf16(x.data(), rows, in, rounded.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < in; ++k) {
        ASSERT_EQ(rounded[r * stride + k], FloatToBf16(x[r * in + k]))
            << in << " " << r << " " << k;
      }
      if (stride > in) {
        EXPECT_EQ(rounded[r * stride + in], 0) << "the pad of an odd row";
      }
    }
  }
}

// The setting changes only bf16 weights, and only where the CPU has the kernel.
TEST(Bf16ProductsTest, OtherFormatsAndCpusWithoutTheKernelMultiplyInFp32) {
  const int64_t in = 70, out = 40, rows = 5;
  const std::vector<float> w = Random(static_cast<size_t>(out * in), 51);
  const std::vector<float> x = Random(static_cast<size_t>(rows * in), 52);
  for (WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8}) {
    if (format == WeightFormat::kBF16 && cpu::Bf16ProductsSupported()) continue;
    const PackedMatrix packed = PackedMatrix::Pack(w, out, in, format);
    std::vector<float> fp32(static_cast<size_t>(rows * out)), bf16(fp32.size());
    cpu::Linear(x.data(), rows, packed, nullptr, fp32.data(), nullptr);
    cpu::Linear(x.data(), rows, packed, nullptr, bf16.data(), nullptr, cpu::LinearProducts::kBf16);
    for (size_t i = 0; i < fp32.size(); ++i) {
      ASSERT_TRUE(SameBits(fp32[i], bf16[i])) << WeightFormatName(format) << " " << i;
    }
  }
}

}  // namespace
}  // namespace abcd::bf16_products_test
