// cpu::Linear over PackedMatrix against a plain double-precision reference, for every weight
// format, on odd shapes (1 row, rows that are not multiples of the register tile, outputs that
// are not multiples of 16), with and without bias and threads; and the ThreadPool under it.
#include "engine/ops/matmul.h"

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

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

// y = x W'^T + b in double, with W' the matrix as the packed format stores it.
std::vector<float> Reference(const std::vector<float>& x, int64_t rows, const PackedMatrix& w,
                             const float* bias) {
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
    {"avx2", &cpu::kernels::LinearPanelsAvx2,
     __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c")},
    {"avx512", &cpu::kernels::LinearPanelsAvx512, __builtin_cpu_supports("avx512f") != 0},
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
        cpu::kernels::LinearArgs args;
        args.x = x.data();
        args.rows = s.rows;
        args.in = s.in;
        args.panels = packed.panel(0);
        args.panel_bytes = packed.panel_stride();
        args.scales = format == WeightFormat::kInt8 ? packed.scales() : nullptr;
        args.bias = b;
        args.out = s.out;
        args.format = static_cast<cpu::kernels::Format>(static_cast<int>(format));
        args.y = y.data();
        // In two calls, as the thread pool splits the panels.
        const int64_t half = packed.panels() / 2;
        kernel.run(args, 0, half);
        kernel.run(args, half, packed.panels() - half);
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
  EXPECT_EQ(q.bytes(), q.panels() * PackedMatrix::kPanel * (in + 4));
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

}  // namespace
}  // namespace abcd
