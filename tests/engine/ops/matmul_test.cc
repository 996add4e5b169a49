// cpu::Linear over PackedMatrix against a plain double-precision reference, for every weight
// format, on odd shapes (1 row, rows that are not multiples of the register tile, outputs that
// are not multiples of 16), with and without bias and threads; and the ThreadPool under it.
#include "engine/ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/parallel_row_ranges.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/matmul_kernels.h"
#include "engine/ops/packed_matrix.h"
#include "gtest/gtest.h"

namespace abcd {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// x as the kernels multiply it: int8 products take each row quantised to int16 (QuantizeRows).
std::vector<float> AsMultiplied(const std::vector<float>& x, int64_t rows, int64_t in,
                                WeightFormat format) {
  if (format != WeightFormat::kInt8) return x;
  const int64_t stride = cpu::kernels::QuantizedStride(in);
  std::vector<int16_t> q(static_cast<size_t>(rows * stride));
  std::vector<float> scales(static_cast<size_t>(rows));
  cpu::kernels::QuantizeRows(x.data(), rows, in, q.data(), scales.data());
  std::vector<float> back(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in; ++k) {
      back[r * in + k] = static_cast<float>(q[r * stride + k]) * scales[r];
    }
  }
  return back;
}

// y = x' W'^T + b in double, with W' the matrix as the packed format stores it and x' the
// activations as the kernels multiply them.
std::vector<float> Reference(const std::vector<float>& x_in, int64_t rows, const PackedMatrix& w,
                             const float* bias) {
  const std::vector<float> x = AsMultiplied(x_in, rows, w.in(), w.format());
  const std::vector<float> dense = w.ToFloat();
  std::vector<float> y(static_cast<size_t>(rows * w.out()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out(); ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0;
      for (int64_t k = 0; k < w.in(); ++k) {
        acc += static_cast<double>(x[r * w.in() + k]) * dense[o * w.in() + k];
      }
      y[r * w.out() + o] = static_cast<float>(acc);
    }
  }
  return y;
}

struct Shape {
  int64_t rows, in, out;
};

// The arguments cpu::Linear gives its kernels, for calling a kernel directly: for int8, with
// the activations quantised as Linear does (kept alive here).
struct KernelCall {
  std::vector<int16_t> x_int16;
  std::vector<float> x_scales;
  cpu::kernels::LinearArgs args;

  KernelCall(const std::vector<float>& x, int64_t rows, const PackedMatrix& packed,
             const float* bias, float* y) {
    args.x = x.data();
    args.rows = rows;
    args.in = packed.in();
    args.panels = packed.panel(0);
    args.panel_bytes = packed.panel_stride();
    args.bias = bias;
    args.out = packed.out();
    args.format = static_cast<cpu::kernels::Format>(static_cast<int>(packed.format()));
    args.y = y;
    if (packed.format() == WeightFormat::kInt8) {
      const int64_t stride = cpu::kernels::QuantizedStride(packed.in());
      x_int16.resize(static_cast<size_t>(rows * stride));
      x_scales.resize(static_cast<size_t>(rows));
      cpu::kernels::QuantizeRows(x.data(), rows, packed.in(), x_int16.data(), x_scales.data());
      args.scales = packed.scales();
      args.x_int16 = x_int16.data();
      args.x_int16_stride = stride;
      args.x_scales = x_scales.data();
    }
  }
};

class LinearTest : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(LinearTest, MatchesReferenceOnOddShapes) {
  const WeightFormat format = GetParam();
  const Shape shapes[] = {{1, 256, 896},  {1, 7, 5},    {2, 33, 17},  {3, 64, 48},
                          {5, 100, 130},  {6, 16, 16},  {7, 256, 24}, {13, 40, 200},
                          {16, 256, 256}, {17, 31, 33}, {64, 96, 160}};
  ThreadPool pool(3);
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    const std::vector<float> w = Random(static_cast<size_t>(s.out * s.in), seed++);
    const std::vector<float> x = Random(static_cast<size_t>(s.rows * s.in), seed++);
    const std::vector<float> bias = Random(static_cast<size_t>(s.out), seed++);
    const PackedMatrix packed = PackedMatrix::Pack(w, s.out, s.in, format);
    for (bool with_bias : {false, true}) {
      for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const float* b = with_bias ? bias.data() : nullptr;
        const std::vector<float> expected = Reference(x, s.rows, packed, b);
        // Sentinels past the end catch writes beyond out columns.
        std::vector<float> y(static_cast<size_t>(s.rows * s.out) + 16, 12345.0f);
        cpu::Linear(x.data(), s.rows, packed, b, y.data(), threads);
        for (size_t i = 0; i < expected.size(); ++i) {
          ASSERT_NEAR(y[i], expected[i], 1e-4f * (1.0f + std::fabs(expected[i])))
              << WeightFormatName(format) << " rows=" << s.rows << " in=" << s.in
              << " out=" << s.out << " index " << i << " bias=" << with_bias;
        }
        for (size_t i = expected.size(); i < y.size(); ++i) ASSERT_EQ(y[i], 12345.0f);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearTest,
                         ::testing::Values(WeightFormat::kF32, WeightFormat::kBF16,
                                           WeightFormat::kF16, WeightFormat::kInt8),
                         [](const auto& param_info) {
                           return std::string(WeightFormatName(param_info.param));
                         });

// cpu::Linear runs only the widest kernel of this CPU. The narrower ones are what other machines
// run: each kernel this CPU can execute is called directly against the same reference (the
// portable one on every machine), on shapes that reach every tile and remainder path.
TEST_P(LinearTest, EveryKernelThisCpuRunsMatchesReference) {
  struct Kernel {
    const char* name;
    void (*run)(const cpu::kernels::LinearArgs&, int64_t, int64_t);
    bool supported;
  };
  const Kernel kernels[] = {
    {"generic", &cpu::kernels::LinearPanelsGeneric, true},
#if defined(__x86_64__)
    {"avx2", &cpu::kernels::LinearPanelsAvx2, cpu::kernels::CpuRunsAvx2Kernels()},
    {"avx512", &cpu::kernels::LinearPanelsAvx512, cpu::kernels::CpuRunsAvx512Kernels()},
#endif
  };
  const WeightFormat format = GetParam();
  const Shape shapes[] = {{1, 256, 896}, {1, 9, 70},   {2, 33, 17},  {3, 40, 100},
                          {4, 19, 48},   {7, 40, 130}, {13, 8, 300}, {17, 31, 33}};
  for (const Kernel& kernel : kernels) {
    if (!kernel.supported) continue;
    uint32_t seed = 100;
    for (const Shape& s : shapes) {
      const std::vector<float> w = Random(static_cast<size_t>(s.out * s.in), seed++);
      const std::vector<float> x = Random(static_cast<size_t>(s.rows * s.in), seed++);
      const std::vector<float> bias = Random(static_cast<size_t>(s.out), seed++);
      const PackedMatrix packed = PackedMatrix::Pack(w, s.out, s.in, format);
      for (bool with_bias : {false, true}) {
        const float* b = with_bias ? bias.data() : nullptr;
        const std::vector<float> expected = Reference(x, s.rows, packed, b);
        std::vector<float> y(static_cast<size_t>(s.rows * s.out) + 16, 12345.0f);
        const KernelCall call(x, s.rows, packed, b, y.data());
        // In two calls, as the thread pool splits the panels.
        const int64_t half = packed.panels() / 2;
        kernel.run(call.args, 0, half);
        kernel.run(call.args, half, packed.panels() - half);
        for (size_t i = 0; i < expected.size(); ++i) {
          ASSERT_NEAR(y[i], expected[i], 1e-4f * (1.0f + std::fabs(expected[i])))
              << kernel.name << " " << WeightFormatName(format) << " rows=" << s.rows
              << " in=" << s.in << " out=" << s.out << " index " << i << " bias=" << with_bias;
        }
        for (size_t i = expected.size(); i < y.size(); ++i) ASSERT_EQ(y[i], 12345.0f);
      }
    }
  }
}

TEST(PackedMatrixTest, FormatsRoundTripWithinTheirPrecision) {
  const int64_t out = 21, in = 37;
  const std::vector<float> w = Random(static_cast<size_t>(out * in), 99, 3.0f);
  EXPECT_EQ(PackedMatrix::Pack(w, out, in, WeightFormat::kF32).ToFloat(), w);
  struct Bound {
    WeightFormat format;
    float relative;  // of |w| (bf16: 8 bits of mantissa, f16: 11)
  };
  for (const Bound& b :
       {Bound{WeightFormat::kBF16, 1.0f / 256}, Bound{WeightFormat::kF16, 1.0f / 2048}}) {
    const std::vector<float> back = PackedMatrix::Pack(w, out, in, b.format).ToFloat();
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_LE(std::fabs(back[i] - w[i]), b.relative * std::fabs(w[i]))
          << WeightFormatName(b.format) << " " << i;
    }
  }
  // int8: per-row absmax / 127 steps, so the error is at most half a step of that row.
  const PackedMatrix q = PackedMatrix::Pack(w, out, in, WeightFormat::kInt8);
  const std::vector<float> back = q.ToFloat();
  for (int64_t o = 0; o < out; ++o) {
    float max_abs = 0;
    for (int64_t k = 0; k < in; ++k) max_abs = std::max(max_abs, std::fabs(w[o * in + k]));
    for (int64_t k = 0; k < in; ++k) {
      ASSERT_LE(std::fabs(back[o * in + k] - w[o * in + k]), 0.5f * max_abs / 127 * 1.0001f);
    }
  }
  // Panels of whole column pairs (37 -> 38) and a 4-byte scale per row.
  EXPECT_EQ(q.bytes(), q.panels() * PackedMatrix::kPanel * (38 + 4));
}

// int8 products: every kernel this CPU runs gives the same bits (the sums are integers, and the
// scaling is done in one order), over shapes with several 256-column blocks and odd `in`.
TEST(Int8LinearTest, EveryKernelGivesTheSameBits) {
  const Shape shapes[] = {{1, 1001, 40}, {3, 513, 33}, {7, 256, 100}, {13, 2049, 17}};
  uint32_t seed = 500;
  for (const Shape& s : shapes) {
    const std::vector<float> w = Random(static_cast<size_t>(s.out * s.in), seed++);
    const std::vector<float> x = Random(static_cast<size_t>(s.rows * s.in), seed++, 4.0f);
    const std::vector<float> bias = Random(static_cast<size_t>(s.out), seed++);
    const PackedMatrix packed = PackedMatrix::Pack(w, s.out, s.in, WeightFormat::kInt8);
    std::vector<float> through_linear(static_cast<size_t>(s.rows * s.out));
    cpu::Linear(x.data(), s.rows, packed, bias.data(), through_linear.data(), nullptr);
    std::vector<float> generic(through_linear.size());
    const KernelCall call(x, s.rows, packed, bias.data(), generic.data());
    cpu::kernels::LinearPanelsGeneric(call.args, 0, packed.panels());
    for (size_t i = 0; i < generic.size(); ++i) {
      ASSERT_EQ(std::memcmp(&generic[i], &through_linear[i], 4), 0)
          << cpu::LinearKernelName() << " rows=" << s.rows << " in=" << s.in << " index " << i
          << ": " << generic[i] << " vs " << through_linear[i];
    }
  }
}

// The integer sums at their extremes: all weights +-127 and all activations +-32767 over 4,096
// columns would overflow one int32 sum 8 times over; the 256-column blocks keep it exact.
TEST(Int8LinearTest, ExtremeValuesDoNotOverflowTheIntegerSums) {
  const int64_t in = 4096, out = 32;
  std::vector<float> w(static_cast<size_t>(out * in), 1.0f);
  for (int64_t k = 0; k < in; ++k) w[static_cast<size_t>(in + k)] = -1.0f;  // row 1: all -1
  const PackedMatrix packed = PackedMatrix::Pack(w, out, in, WeightFormat::kInt8);
  for (const float sign : {1.0f, -1.0f}) {
    const std::vector<float> x(static_cast<size_t>(in), 2.5f * sign);
    std::vector<float> y(static_cast<size_t>(out));
    cpu::Linear(x.data(), 1, packed, nullptr, y.data(), nullptr);
    ASSERT_NEAR(y[0], sign * 2.5f * in, 1e-5f * 2.5f * in) << cpu::LinearKernelName();
    ASSERT_NEAR(y[1], -sign * 2.5f * in, 1e-5f * 2.5f * in) << cpu::LinearKernelName();
  }
}

TEST(Int8LinearTest, QuantisedRowsAreWithinHalfAStepAndPadded) {
  const int64_t rows = 4, in = 37, stride = cpu::kernels::QuantizedStride(in);
  ASSERT_EQ(stride, 38);
  std::vector<float> x = Random(static_cast<size_t>(rows * in), 7, 50.0f);
  for (int64_t k = 0; k < in; ++k) x[static_cast<size_t>(in + k)] = 0.0f;  // row 1: zeros
  x[static_cast<size_t>(2 * in + 5)] = std::nanf("");                      // row 2: a NaN
  x[static_cast<size_t>(3 * in + 9)] = -INFINITY;                          // row 3: an infinity
  std::vector<int16_t> q(static_cast<size_t>(rows * stride), 99);
  std::vector<float> scales(static_cast<size_t>(rows));
  cpu::kernels::QuantizeRows(x.data(), rows, in, q.data(), scales.data());
  float max_abs = 0;
  for (int64_t k = 0; k < in; ++k)
    max_abs = std::max(max_abs, std::fabs(x[static_cast<size_t>(k)]));
  ASSERT_FLOAT_EQ(scales[0], max_abs / 32767);
  for (int64_t k = 0; k < in; ++k) {
    ASSERT_LE(std::fabs(q[static_cast<size_t>(k)] * scales[0] - x[static_cast<size_t>(k)]),
              0.5001f * scales[0])
        << k;
  }
  EXPECT_EQ(q[static_cast<size_t>(in)], 0);  // the pad column
  EXPECT_EQ(scales[1], 0.0f);
  EXPECT_TRUE(std::isnan(scales[2]));
  EXPECT_TRUE(std::isnan(scales[3]));
  for (int64_t r = 1; r < rows; ++r) {
    for (int64_t k = 0; k < stride; ++k) ASSERT_EQ(q[static_cast<size_t>(r * stride + k)], 0);
  }
  // Through Linear, the NaN row's outputs are NaN and the other rows' are finite.
  const std::vector<float> w = Random(static_cast<size_t>(5 * in), 8);
  const PackedMatrix packed = PackedMatrix::Pack(w, 5, in, WeightFormat::kInt8);
  std::vector<float> y(static_cast<size_t>(rows * 5));
  cpu::Linear(x.data(), rows, packed, nullptr, y.data(), nullptr);
  for (int64_t o = 0; o < 5; ++o) {
    EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(o)]));
    EXPECT_EQ(y[static_cast<size_t>(5 + o)], 0.0f);
    EXPECT_TRUE(std::isnan(y[static_cast<size_t>(10 + o)]));
  }
}

// The AVX-512 and AVX2 quantisations Linear takes where the CPU has them give QuantizeRows'
// values exactly: odd widths (masked and scalar tails), halfway cases, zero and non-finite rows,
// large and tiny magnitudes.
TEST(Int8LinearTest, VectorQuantisationsEqualThePortableOne) {
  if (!cpu::kernels::CpuRunsAvx2Kernels()) GTEST_SKIP() << "this CPU has no AVX2";
  for (int64_t in : {1, 15, 16, 17, 37, 256, 1001}) {
    const int64_t rows = 6, stride = cpu::kernels::QuantizedStride(in);
    std::vector<float> x = Random(static_cast<size_t>(rows * in), static_cast<uint32_t>(in), 50.0f);
    for (int64_t k = 0; k < in; ++k) {
      x[static_cast<size_t>(in + k)] = 0.0f;                                  // row 1: zeros
      x[static_cast<size_t>(4 * in + k)] *= 1e-30f;                           // row 4: tiny
      x[static_cast<size_t>(5 * in + k)] = static_cast<float>(k % 7) - 2.5f;  // row 5: ties
    }
    x[static_cast<size_t>(5 * in)] = 32767.0f;  // scale 1: row 5 rounds its halves to even
    x[static_cast<size_t>(2 * in + in / 2)] = std::nanf("");  // row 2: a NaN
    x[static_cast<size_t>(3 * in)] = INFINITY;                // row 3: an infinity
    std::vector<int16_t> portable(static_cast<size_t>(rows * stride), 99),
        vectorised_out = portable;
    std::vector<float> portable_scales(static_cast<size_t>(rows)), vector_scales(portable_scales);
    cpu::kernels::QuantizeRows(x.data(), rows, in, portable.data(), portable_scales.data());
    using Quantize = void (*)(const float*, int64_t, int64_t, int16_t*, float*);
    std::vector<std::pair<const char*, Quantize>> vectorised = {
        {"avx2", &cpu::kernels::QuantizeRowsAvx2}};
    if (cpu::kernels::CpuRunsAvx512Kernels()) {
      vectorised.push_back({"avx512", &cpu::kernels::QuantizeRowsAvx512});
    }
    for (const auto& [name, quantize] : vectorised) {
      std::fill(vectorised_out.begin(), vectorised_out.end(), int16_t{99});
      quantize(x.data(), rows, in, vectorised_out.data(), vector_scales.data());
      EXPECT_EQ(vectorised_out, portable) << name << " in=" << in;
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(std::memcmp(&vector_scales[r], &portable_scales[r], 4), 0)
            << name << " in=" << in << " row " << r;
      }
    }
  }
}

#if defined(__FLT16_MAX__)
// The bit-level f16 conversions against the compiler's own _Float16 (GCC on x86-64 has it):
// every half value widened, and a sweep of float bit patterns narrowed (all exponents, the
// rounding ties, subnormals, overflow, infinities and NaNs).
TEST(PackedMatrixTest, HalfConversionsEqualTheCompilersFloat16) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    _Float16 half;
    const auto bits = static_cast<uint16_t>(h);
    std::memcpy(&half, &bits, 2);
    const float expected = static_cast<float>(half);
    const float got = HalfToFloatValue(bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&got, &expected, 4), 0) << h;
    }
  }
  auto check = [](uint32_t pattern) {
    float value;
    std::memcpy(&value, &pattern, 4);
    const _Float16 half = static_cast<_Float16>(value);
    uint16_t expected;
    std::memcpy(&expected, &half, 2);
    const uint16_t got = FloatToHalf(value);
    if (std::isnan(value)) {
      ASSERT_EQ(got & 0x7c00u, 0x7c00u) << pattern;
      ASSERT_NE(got & 0x3ffu, 0u) << pattern;
      ASSERT_EQ(got & 0x8000u, expected & 0x8000u) << pattern;
    } else {
      ASSERT_EQ(got, expected) << std::hex << pattern;
    }
  };
  for (uint64_t pattern = 0; pattern <= 0xffffffffull; pattern += 997) {
    check(static_cast<uint32_t>(pattern));
  }
  // Every half value's exact float and the ties halfway to its neighbours, both signs.
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float value = HalfToFloatValue(static_cast<uint16_t>(h));
    uint32_t pattern;
    std::memcpy(&pattern, &value, 4);
    for (const uint32_t p : {pattern, pattern + 0x1000u, pattern + 0xfffu, pattern + 0x1001u}) {
      check(p);
      check(p | 0x80000000u);
    }
  }
}
#endif

// The bulk conversions (KV-cache writes, snapshots) give the scalar ones' bits: every 16-bit
// pattern widened, and a sweep of float bit patterns narrowed (NaNs included).
TEST(PackedMatrixTest, BulkConversionsEqualTheScalarOnes) {
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t h = 0; h <= 0xffffu; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(halves.size());
  Bf16sToFloats(halves.data(), halves.size(), wide.data());
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float expected = Bf16ToFloat(halves[h]);
    ASSERT_EQ(std::memcmp(&wide[h], &expected, 4), 0) << "bf16 " << h;
  }
  HalvesToFloats(halves.data(), halves.size(), wide.data());
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float expected = HalfToFloatValue(halves[h]);
    ASSERT_EQ(std::memcmp(&wide[h], &expected, 4), 0) << "f16 " << h;
  }
  std::vector<float> floats;
  for (uint64_t pattern = 0; pattern <= 0xffffffffull; pattern += 65521) {
    const auto bits = static_cast<uint32_t>(pattern);
    float value;
    std::memcpy(&value, &bits, 4);
    floats.push_back(value);
  }
  std::vector<uint16_t> narrow(floats.size());
  FloatsToBf16s(floats.data(), floats.size(), narrow.data());
  for (size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(narrow[i], FloatToBf16(floats[i])) << i;
  FloatsToHalves(floats.data(), floats.size(), narrow.data());
  for (size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(narrow[i], FloatToHalf(floats[i])) << i;
}

TEST(PackedMatrixTest, BytesCountPanelsAsStored) {
  const std::vector<float> w(17 * 8, 1.0f);
  EXPECT_EQ(PackedMatrix::Pack(w, 17, 8, WeightFormat::kF32).bytes(), 2 * 16 * 8 * 4);
  EXPECT_EQ(PackedMatrix::Pack(w, 17, 8, WeightFormat::kBF16).bytes(), 2 * 16 * 8 * 2);
}

TEST(PackedMatrixTest, ParsesFormatNamesAndRefusesOthers) {
  EXPECT_EQ(*ParseWeightFormat("bf16"), WeightFormat::kBF16);
  EXPECT_EQ(*ParseWeightFormat("fp32"), WeightFormat::kF32);
  EXPECT_EQ(*ParseWeightFormat("int8"), WeightFormat::kInt8);
  const absl::StatusOr<WeightFormat> bad = ParseWeightFormat("q4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("q4"), std::string::npos);
}

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnceManyTimes) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int job = 0; job < 2000; ++job) {
      const int64_t tasks = job % 17;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
      pool.ParallelFor(tasks, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
      for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1);
    }
  }
}

TEST(ThreadPoolTest, WorkersThatFellAsleepWakeForTheNextJob) {
  ThreadPool pool(3);
  std::atomic<int> sum{0};
  for (int job = 0; job < 3; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin window
    pool.ParallelFor(64, [&](int64_t t) { sum.fetch_add(static_cast<int>(t)); });
  }
  EXPECT_EQ(sum.load(), 3 * (63 * 64 / 2));
}

TEST(ParallelRowRangesTest, CoversEveryRowOnceInContiguousRangesOrStaysOnTheCaller) {
  ThreadPool pool(3);
  struct Case {
    ThreadPool* pool;
    int64_t rows, per_row, min_values;
    int64_t expected_ranges;
  };
  for (const Case& c : {Case{&pool, 100, 1000, 16384, 6},  // 2 ranges per thread
                        Case{&pool, 4, 10000, 16384, 4},   // no more ranges than rows
                        Case{&pool, 16, 1000, 16384, 1},   // 16,000 values: the caller alone
                        Case{&pool, 1, 100000, 16384, 1},  // one row
                        Case{&pool, 0, 100000, 16384, 1},  // no rows: one empty call
                        Case{nullptr, 100, 1000, 16384, 1}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(c.rows));
    std::atomic<int64_t> ranges{0};
    std::atomic<bool> ordered{true};
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> off_caller{false};
    ParallelRowRanges(c.pool, c.rows, c.per_row, c.min_values, [&](int64_t first, int64_t count) {
      ranges.fetch_add(1);
      if (first < 0 || count < 0 || first + count > c.rows) ordered = false;
      if (std::this_thread::get_id() != caller) off_caller = true;
      for (int64_t r = first; r < first + count; ++r) hits[static_cast<size_t>(r)].fetch_add(1);
    });
    EXPECT_EQ(ranges.load(), c.expected_ranges) << c.rows << " x " << c.per_row;
    EXPECT_TRUE(ordered.load());
    if (c.expected_ranges == 1) {
      EXPECT_FALSE(off_caller.load());
    }
    for (int64_t r = 0; r < c.rows; ++r) ASSERT_EQ(hits[static_cast<size_t>(r)].load(), 1) << r;
  }
}

}  // namespace
}  // namespace abcd
