// The causal run's bf16-products mode (SoftmaxReadCausalRunBf16Products, opt-in with
// cpu::LinearProducts::kBf16) against a double-precision read of the same bf16 rows with the
// queries rounded as the kernel rounds them, within the rounding of the softmax weights; exactly,
// where the weights are all 1 (a zero query averages the rows it may read, so a row read past a
// query's position, or one missed, shows); and through SoftmaxState::Scan, which takes it for
// prompt runs over a bf16 cache only when the pass asks for bf16 products. Skipped where the CPU
// has no AVX512_BF16.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/attention/softmax_read.h"
#include "engine/attention/softmax_state.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/matmul.h"
#include "engine/ops/packed_matrix.h"
#include "gtest/gtest.h"

namespace abcd::softmax_bf16_products_test {
namespace {

struct RunCase {
  int group, head_dim;
  int64_t first_position, rows;
};

// Every shape the kernels cut: runs from 0 and deep in a context, blocks cut by the run's first
// row, odd block tails, groups of queries (GQA), head_dim 64, 128 and 80 (a 16-column tail).
constexpr RunCase kCases[] = {{1, 64, 0, 32},    {1, 64, 0, 300},  {4, 64, 100, 130},
                              {2, 80, 257, 45},  {1, 128, 63, 70}, {1, 64, 3000, 64},
                              {4, 64, 5001, 37}, {1, 16, 129, 33}, {3, 32, 0, 513}};

double FromBf16(uint16_t b) { return Bf16ToFloat(b); }

TEST(SoftmaxBf16ProductsTest, CausalRunEqualsADoubleReadOfTheRoundedQueries) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const RunCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "group " << c.group << ", head_dim " << c.head_dim
                                    << ", rows " << c.rows << " from " << c.first_position);
    const int64_t stride = 2 * int64_t{c.head_dim};  // head 1 of 2
    const int64_t total = c.first_position + c.rows;
    std::vector<uint16_t> keys(static_cast<size_t>(total * stride));
    std::vector<uint16_t> values(keys.size());
    for (uint16_t& x : keys) x = FloatToBf16(normal(rng) * 0.4f);
    for (uint16_t& x : values) x = FloatToBf16(normal(rng));
    const int64_t width = int64_t{c.group} * c.head_dim;
    const int64_t q_stride = width + 3, out_stride = width + 5;
    std::vector<float> q(static_cast<size_t>(c.rows * q_stride));
    for (float& x : q) x = normal(rng);
    std::vector<float> out(static_cast<size_t>(c.rows * out_stride), 777.0f);
    SoftmaxReadCausalRunBf16Products(q.data(), q_stride, c.group, keys.data() + c.head_dim,
                                     values.data() + c.head_dim, c.first_position, c.rows, stride,
                                     c.head_dim, out.data(), out_stride);
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t count = c.first_position + i + 1;
      for (int g = 0; g < c.group; ++g) {
        const float* qi = q.data() + i * q_stride + g * c.head_dim;
        std::vector<double> scores(static_cast<size_t>(count));
        double max = -INFINITY;
        for (int64_t j = 0; j < count; ++j) {
          double s = 0;
          for (int d = 0; d < c.head_dim; ++d) {
            s += FromBf16(FloatToBf16(qi[d])) * FromBf16(keys[j * stride + c.head_dim + d]);
          }
          scores[j] = s;
          max = std::max(max, s);
        }
        double sum = 0, largest_value = 0;
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (int d = 0; d < c.head_dim; ++d) {
          double want = 0;
          for (int64_t j = 0; j < count; ++j) {
            const double v = FromBf16(values[j * stride + c.head_dim + d]);
            want += scores[j] * v;
            largest_value = std::max(largest_value, std::fabs(v));
          }
          want /= sum;
          // Each weight rounded to bf16 (relative error <= 2^-9) moves the output by at most
          // 2^-9 of the largest value it weighs.
          const double got = out[i * out_stride + g * c.head_dim + d];
          ASSERT_NEAR(got, want, largest_value * 0x1p-9 + 1e-5)
              << "row " << i << ", head " << g << ", column " << d;
        }
      }
      EXPECT_EQ(out[i * out_stride + width], 777.0f) << "wrote past row " << i;
    }
  }
}

TEST(SoftmaxBf16ProductsTest, AZeroQueryAveragesExactlyTheRowsItMayRead) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  for (const RunCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "group " << c.group << ", head_dim " << c.head_dim
                                    << ", rows " << c.rows << " from " << c.first_position);
    const int64_t stride = int64_t{c.head_dim};
    const int64_t total = c.first_position + c.rows;
    std::vector<uint16_t> keys(static_cast<size_t>(total * stride));
    std::vector<uint16_t> values(keys.size());
    for (uint16_t& x : keys) x = FloatToBf16(normal(rng));
    for (uint16_t& x : values) x = FloatToBf16(static_cast<float>(small(rng)));
    const int64_t width = int64_t{c.group} * c.head_dim;
    const std::vector<float> q(static_cast<size_t>(c.rows * width), 0.0f);
    std::vector<float> out(static_cast<size_t>(c.rows * width));
    SoftmaxReadCausalRunBf16Products(q.data(), width, c.group, keys.data(), values.data(),
                                     c.first_position, c.rows, stride, c.head_dim, out.data(),
                                     width);
    std::vector<double> column_sums(static_cast<size_t>(c.head_dim), 0.0);
    int64_t summed = 0;
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t count = c.first_position + i + 1;
      for (; summed < count; ++summed) {
        for (int d = 0; d < c.head_dim; ++d)
          column_sums[d] += FromBf16(values[summed * stride + d]);
      }
      for (int g = 0; g < c.group; ++g) {
        for (int d = 0; d < c.head_dim; ++d) {
          const double want = column_sums[d] / static_cast<double>(count);
          ASSERT_NEAR(out[i * width + g * c.head_dim + d], want, 2e-6 * (1 + std::fabs(want)))
              << "row " << i << ", head " << g << ", column " << d;
        }
      }
    }
  }
}

// A 40-row prompt run next to a decode row, over a bf16 cache: bf16 products change the run's
// reads (within their rounding) and leave the decode row's and every f32 cache's alone.
TEST(SoftmaxBf16ProductsTest, ScanTakesThemForPromptRunsOverABf16CacheOnly) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int q_heads = 4, kv_heads = 2, head_dim = 64;
  const SoftmaxState state(q_heads, kv_heads, head_dim, {});
  const KernelRowLayout layout = state.PreparedLayout();
  const int64_t cached[] = {500, 700}, step_rows[] = {40, 1};
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kF32}) {
    SCOPED_TRACE(KvFormatName(format));
    std::vector<KvCache> caches(2);
    std::vector<StateRef> states;
    std::vector<RowRun> runs;
    for (size_t s = 0; s < caches.size(); ++s) {
      KvCache& kv = caches[s];
      kv.width = state.KvWidth();
      kv.format = format;
      kv.Resize(cached[s] + step_rows[s]);
      std::vector<float> k(static_cast<size_t>(cached[s] * kv.width)), v(k.size());
      for (float& x : k) x = normal(rng) * 0.4f;
      for (float& x : v) x = normal(rng);
      kv.WriteRows(cached[s], k.data(), v.data());
      kv.length = cached[s] + step_rows[s];
      runs.push_back({static_cast<int64_t>(states.size()), step_rows[s]});
      for (int64_t r = 0; r < step_rows[s]; ++r) states.push_back({nullptr, &kv, cached[s] + r});
    }
    const int64_t rows = static_cast<int64_t>(states.size());
    std::vector<float> kernel_rows(static_cast<size_t>(rows * layout.width));
    for (float& x : kernel_rows) x = normal(rng);
    const int64_t out_width = int64_t{q_heads} * head_dim;
    std::vector<float> fp32(static_cast<size_t>(rows * out_width)), bf16(fp32.size());
    CpuContext ctx(2);
    for (auto [products, out] :
         {std::pair{cpu::LinearProducts::kFloat32, &fp32}, {cpu::LinearProducts::kBf16, &bf16}}) {
      state.Scan(ctx, {kernel_rows.data(), layout.width, layout, states, runs, out->data(),
                       out_width, products});
    }
    int64_t differing = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < out_width; ++c) {
        const size_t at = static_cast<size_t>(r * out_width + c);
        if (format == KvFormat::kF32 || r == step_rows[0]) {
          ASSERT_EQ(bf16[at], fp32[at]) << "row " << r << ", column " << c;
        }
        // Scores of about +-10 here (unscaled queries): the queries' rounding moves a score by
        // up to about 2^-9 of its terms' magnitudes, a weight by a few percent at most.
        ASSERT_NEAR(bf16[at], fp32[at], 0.05f) << "row " << r << ", column " << c;
        differing += bf16[at] != fp32[at];
      }
    }
    if (format == KvFormat::kBf16) {
      EXPECT_GT(differing, 0) << "the run took the fp32 kernels";
    }
  }
}

}  // namespace
}  // namespace abcd::softmax_bf16_products_test
