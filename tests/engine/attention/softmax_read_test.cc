// The softmax read of a KV cache (engine/attention/softmax_state.h) against a double-precision
// reference: one head, and the grouped read of GQA (several query heads per key/value head,
// the rows walked once for the group), over f32 and bf16 rows, with counts on both sides of
// the chunk boundaries (the widened bf16 chunk is 8192 / head_dim rows, the score chunk 256).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/attention/softmax_state.h"
#include "gtest/gtest.h"

namespace abcd {
namespace {

uint16_t ToBf16(float x) {  // truncation: the test compares against the rows as stored
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// x rounded to a value bf16 holds exactly, so the f32 and bf16 caches hold the same rows.
float ToBf16Round(float x) {
  const uint32_t bits = static_cast<uint32_t>(ToBf16(x)) << 16;
  float y;
  std::memcpy(&y, &bits, 4);
  return y;
}

// softmax_i(q . k_i) v_i for one head, in double.
std::vector<double> Reference(const float* q, const std::vector<float>& keys,
                              const std::vector<float>& values, int64_t count, int64_t stride,
                              int64_t offset, int head_dim) {
  std::vector<double> scores(static_cast<size_t>(count));
  double max = -1e300;
  for (int64_t i = 0; i < count; ++i) {
    double s = 0;
    for (int c = 0; c < head_dim; ++c) s += double{q[c]} * keys[i * stride + offset + c];
    scores[i] = s;
    max = std::max(max, s);
  }
  double sum = 0;
  for (double& s : scores) sum += (s = std::exp(s - max));
  std::vector<double> out(static_cast<size_t>(head_dim), 0.0);
  for (int64_t i = 0; i < count; ++i) {
    for (int c = 0; c < head_dim; ++c) out[c] += scores[i] / sum * values[i * stride + offset + c];
  }
  return out;
}

struct Case {
  int group;
  int head_dim;
  int64_t count;
};

TEST(SoftmaxReadTest, GroupedReadsEqualTheReferenceForEveryQueryHead) {
  const Case cases[] = {{1, 64, 1},    {1, 64, 300}, {2, 16, 513}, {4, 64, 1},
                        {4, 64, 127},  {4, 64, 128}, {4, 64, 129}, {4, 64, 1000},
                        {8, 128, 200}, {3, 256, 70}, {4, 512, 33}, {5, 24, 777}};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : cases) {
    const int kv_heads = 2;  // the group reads head 1 of 2: rows are strided
    const int64_t stride = int64_t{kv_heads} * c.head_dim, offset = c.head_dim;
    std::vector<float> keys(static_cast<size_t>(c.count * stride));
    std::vector<float> values(keys.size());
    // Scores of a few units, so the softmax is neither flat nor one-hot.
    for (float& x : keys) x = ToBf16Round(normal(rng) * 0.3f);
    for (float& x : values) x = ToBf16Round(normal(rng));
    std::vector<uint16_t> keys16(keys.size()), values16(values.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      keys16[i] = ToBf16(keys[i]);
      values16[i] = ToBf16(values[i]);
    }
    std::vector<float> q(static_cast<size_t>(c.group * c.head_dim));
    for (float& x : q) x = normal(rng);
    for (bool bf16 : {false, true}) {
      std::vector<float> out(q.size() + 8, 12345.0f);
      if (bf16) {
        SoftmaxReadGroup(q.data(), c.group, keys16.data() + offset, values16.data() + offset,
                         c.count, stride, c.head_dim, out.data());
      } else {
        SoftmaxReadGroup(q.data(), c.group, keys.data() + offset, values.data() + offset, c.count,
                         stride, c.head_dim, out.data());
      }
      for (int g = 0; g < c.group; ++g) {
        const float* qg = q.data() + int64_t{g} * c.head_dim;
        const std::vector<double> expected =
            Reference(qg, keys, values, c.count, stride, offset, c.head_dim);
        // The single-head read of the same query head gives the same values.
        std::vector<float> one(static_cast<size_t>(c.head_dim));
        if (bf16) {
          SoftmaxReadHead(qg, keys16.data() + offset, values16.data() + offset, c.count, stride,
                          c.head_dim, one.data());
        } else {
          SoftmaxReadHead(qg, keys.data() + offset, values.data() + offset, c.count, stride,
                          c.head_dim, one.data());
        }
        for (int d = 0; d < c.head_dim; ++d) {
          const float got = out[static_cast<size_t>(g * c.head_dim + d)];
          ASSERT_NEAR(got, expected[d], 2e-5 * (1 + std::fabs(expected[d])))
              << "group " << c.group << " head_dim " << c.head_dim << " count " << c.count
              << " bf16 " << bf16 << " head " << g << " dim " << d;
          ASSERT_NEAR(got, one[static_cast<size_t>(d)], 1e-5 * (1 + std::fabs(expected[d])));
        }
      }
      for (size_t i = q.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 12345.0f);
    }
  }
}

}  // namespace
}  // namespace abcd
