// The softmax read of a KV cache (engine/attention/softmax_state.h) against a double-precision
// reference: one head, and the grouped read of GQA (several query heads per key/value head,
// the rows walked once for the group, each head the same bits as its own read), over f32, bf16
// and f16 rows, with counts on both sides of the chunk boundaries (the widened bf16 chunk is
// 8192 / head_dim rows, the score chunk 256).
#include "engine/attention/softmax_read.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/attention/softmax_state.h"
#include "engine/ops/packed_matrix.h"
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

struct ReadCase {
  int group;
  int head_dim;
  int64_t count;
};

TEST(SoftmaxReadTest, GroupedReadsEqualTheReferenceForEveryQueryHead) {
  const ReadCase cases[] = {{1, 64, 1},    {1, 64, 300}, {2, 16, 513}, {4, 64, 1},
                            {4, 64, 127},  {4, 64, 128}, {4, 64, 129}, {4, 64, 1000},
                            {8, 128, 200}, {3, 256, 70}, {4, 512, 33}, {5, 24, 777}};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ReadCase& c : cases) {
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
    // f16 rows, and the floats they hold (the reference reads those: f16 rounds the tiny
    // values that bf16 holds and f16 does not).
    std::vector<F16> keys_f16(keys.size()), values_f16(values.size());
    std::vector<float> keys_in_f16(keys.size()), values_in_f16(values.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      keys_f16[i].bits = FloatToHalf(keys[i]);
      values_f16[i].bits = FloatToHalf(values[i]);
      keys_in_f16[i] = HalfToFloatValue(keys_f16[i].bits);
      values_in_f16[i] = HalfToFloatValue(values_f16[i].bits);
    }
    std::vector<float> q(static_cast<size_t>(c.group * c.head_dim));
    for (float& x : q) x = normal(rng);
    for (const KvFormat format : {KvFormat::kF32, KvFormat::kBf16, KvFormat::kF16}) {
      // Both read the rows of head 1 of 2 (`offset`) from every format's arrays.
      const auto read_group = [&](const float* query, int group, float* into) {
        if (format == KvFormat::kBf16) {
          SoftmaxReadGroup(query, group, keys16.data() + offset, values16.data() + offset, c.count,
                           stride, c.head_dim, into);
        } else if (format == KvFormat::kF16) {
          SoftmaxReadGroup(query, group, keys_f16.data() + offset, values_f16.data() + offset,
                           c.count, stride, c.head_dim, into);
        } else {
          SoftmaxReadGroup(query, group, keys.data() + offset, values.data() + offset, c.count,
                           stride, c.head_dim, into);
        }
      };
      const auto read_head = [&](const float* query, float* into) {
        if (format == KvFormat::kBf16) {
          SoftmaxReadHead(query, keys16.data() + offset, values16.data() + offset, c.count, stride,
                          c.head_dim, into);
        } else if (format == KvFormat::kF16) {
          SoftmaxReadHead(query, keys_f16.data() + offset, values_f16.data() + offset, c.count,
                          stride, c.head_dim, into);
        } else {
          SoftmaxReadHead(query, keys.data() + offset, values.data() + offset, c.count, stride,
                          c.head_dim, into);
        }
      };
      const bool f16 = format == KvFormat::kF16;
      std::vector<float> out(q.size() + 8, 12345.0f);
      read_group(q.data(), c.group, out.data());
      for (int g = 0; g < c.group; ++g) {
        const float* qg = q.data() + int64_t{g} * c.head_dim;
        const std::vector<double> expected =
            Reference(qg, f16 ? keys_in_f16 : keys, f16 ? values_in_f16 : values, c.count, stride,
                      offset, c.head_dim);
        // The single-head read of the same query head gives the same bits (the group's heads
        // read each key row together, in fours or twos where the group allows, one head four
        // rows at a time: the same sums, added in the same order).
        std::vector<float> one(static_cast<size_t>(c.head_dim));
        read_head(qg, one.data());
        for (int d = 0; d < c.head_dim; ++d) {
          const float got = out[static_cast<size_t>(g * c.head_dim + d)];
          ASSERT_NEAR(got, expected[d], 2e-5 * (1 + std::fabs(expected[d])))
              << "group " << c.group << " head_dim " << c.head_dim << " count " << c.count
              << " format " << KvFormatName(format) << " head " << g << " dim " << d;
          ASSERT_EQ(got, one[static_cast<size_t>(d)])
              << "group " << c.group << " head_dim " << c.head_dim << " count " << c.count
              << " format " << KvFormatName(format) << " head " << g << " dim " << d;
        }
      }
      for (size_t i = q.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 12345.0f);
    }
  }
}

// f16 rows are read exactly as the fp32 rows holding the same values, by the kernels this CPU
// runs (F16C's widening where it has it) and by the portable widening: every finite f16 value
// as a value, subnormal and signed-zero keys among ordinary ones, the outputs equal bit for bit.
TEST(SoftmaxReadTest, F16RowsReadAsTheFloatsTheyHold) {
  constexpr int kHeadDim = 64;
  std::vector<uint16_t> finite;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    if ((bits & 0x7C00) != 0x7C00) finite.push_back(static_cast<uint16_t>(bits));
  }
  const int64_t count = static_cast<int64_t>(finite.size()) / kHeadDim;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<F16> keys(static_cast<size_t>(count * kHeadDim)), values(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    // One key in eight subnormal (or a signed zero), the rest ordinary.
    keys[i].bits =
        i % 8 == 0 ? static_cast<uint16_t>(((i / 8) & 0x83FF)) : FloatToHalf(normal(rng));
    values[i].bits = finite[i];
  }
  std::vector<float> keys32(keys.size()), values32(values.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    keys32[i] = HalfToFloatValue(keys[i].bits);
    values32[i] = HalfToFloatValue(values[i].bits);
  }
  std::vector<float> q(kHeadDim);
  for (float& x : q) x = normal(rng);
  for (const int64_t rows : {count, int64_t{5}, int64_t{70}}) {
    std::vector<float> from_f16(kHeadDim), portably(kHeadDim), from_f32(kHeadDim);
    SoftmaxReadHead(q.data(), keys.data(), values.data(), rows, kHeadDim, kHeadDim,
                    from_f16.data());
    SoftmaxReadHeadWidenedPortably(q.data(), keys.data(), values.data(), rows, kHeadDim, kHeadDim,
                                   portably.data());
    SoftmaxReadHead(q.data(), keys32.data(), values32.data(), rows, kHeadDim, kHeadDim,
                    from_f32.data());
    for (int d = 0; d < kHeadDim; ++d) {
      ASSERT_EQ(from_f16[d], from_f32[d])
          << rows << " rows, dim " << d << ", F16C: " << SoftmaxReadsF16WithF16c();
      ASSERT_EQ(portably[d], from_f32[d]) << rows << " rows, dim " << d;
      ASSERT_TRUE(std::isfinite(from_f16[d])) << rows << " rows, dim " << d;
    }
  }
}

}  // namespace
}  // namespace abcd
