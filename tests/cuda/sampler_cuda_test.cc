// The CUDA sampler against the CPU Sampler's rules: greedy is the CPU argmax (ties to the
// lowest id), every sampled token lies in the top-k / top-p set computed on the host, draws
// depend only on (row, seed, step), and the empirical distribution over many steps matches the
// renormalised nucleus probabilities.
#include "engine/sampling/sampler_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/sampling/sampler.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {
namespace {

std::vector<float> NormalLogits(int64_t n, uint32_t seed, float stddev) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> distribution(0.0f, stddev);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& value : values) value = distribution(generator);
  return values;
}

// The CPU rule for greedy decoding (std::max_element: the first maximum).
int32_t CpuArgmax(std::span<const float> logits) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params);
  return sampler.Sample(logits, {});
}

struct Candidate {
  int32_t id;
  double probability;  // renormalised over the candidate set
};

// The candidates the CPU Sampler draws from, in its order: the top_k highest logits (ties by
// lowest id), then the smallest prefix with mass >= top_p + slack. A small positive slack
// admits the one extra token the device may keep when the mass lands within rounding of top_p.
std::vector<Candidate> Nucleus(std::span<const float> logits, float temperature, int top_k,
                               float top_p, double slack = 0.0) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&logits](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int32_t keep = top_k > 0 && top_k < vocab ? top_k : vocab;
  const double max_logit = logits[order[0]];
  std::vector<double> weights(keep);
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    weights[i] = std::exp((static_cast<double>(logits[order[i]]) - max_logit) / temperature);
    total += weights[i];
  }
  if (top_p < 1.0f) {
    double mass = 0.0;
    for (int32_t i = 0; i < keep; ++i) {
      mass += weights[i] / total;
      if (mass >= static_cast<double>(top_p) + slack) {
        keep = i + 1;
        break;
      }
    }
  }
  const double kept_total = std::accumulate(weights.begin(), weights.begin() + keep, 0.0);
  std::vector<Candidate> candidates(keep);
  for (int32_t i = 0; i < keep; ++i) candidates[i] = {order[i], weights[i] / kept_total};
  return candidates;
}

std::set<int32_t> Ids(const std::vector<Candidate>& candidates) {
  std::set<int32_t> ids;
  for (const Candidate& candidate : candidates) ids.insert(candidate.id);
  return ids;
}

DeviceSamplingParams Params(float temperature, int top_k, float top_p, uint64_t seed,
                            uint64_t step) {
  return DeviceSamplingParams{temperature, top_k, top_p, seed, step};
}

class SamplerCudaTest : public CudaTest {
 protected:
  // Samples one token per row of `logits` ([params.size(), vocab]).
  std::vector<int32_t> Sample(const std::vector<float>& logits, int64_t vocab,
                              const std::vector<DeviceSamplingParams>& params) {
    const int64_t rows = static_cast<int64_t>(params.size());
    EXPECT_EQ(static_cast<int64_t>(logits.size()), rows * vocab);
    DeviceArray<float> logits_device = Upload(logits);
    DeviceArray<DeviceSamplingParams> params_device = Upload(params);
    DeviceArray<int32_t> tokens_device = Upload(std::vector<int32_t>(rows, -1));
    const absl::Status status = SampleTokens(context(), logits_device.data(), rows, vocab,
                                             params_device.data(), tokens_device.data());
    EXPECT_TRUE(status.ok()) << status;
    return Download(tokens_device);
  }

  // The tokens of `rows` copies of one logits row, row r drawing with step first_step + r.
  std::vector<int32_t> SampleSteps(const std::vector<float>& row, int64_t rows,
                                   DeviceSamplingParams params, uint64_t first_step = 0) {
    std::vector<float> logits;
    logits.reserve(row.size() * rows);
    std::vector<DeviceSamplingParams> batch(rows, params);
    for (int64_t r = 0; r < rows; ++r) {
      logits.insert(logits.end(), row.begin(), row.end());
      batch[r].step = first_step + static_cast<uint64_t>(r);
    }
    return Sample(logits, static_cast<int64_t>(row.size()), batch);
  }
};

// Greedy rows (temperature 0, or top_k 1 at any temperature) equal the CPU argmax, including
// planted ties and -0 / +0, while sampling rows share the batch.
TEST_F(SamplerCudaTest, GreedyMatchesCpuArgmax) {
  struct Case {
    int64_t rows;
    int64_t vocab;
  };
  uint32_t seed = 1;
  for (const Case& shape : {Case{37, 1000}, Case{3, 256000}, Case{300, 17}, Case{1, 1}}) {
    std::vector<float> logits = NormalLogits(shape.rows * shape.vocab, seed++, 3.0f);
    std::mt19937 generator(seed++);
    std::vector<DeviceSamplingParams> params(shape.rows);
    for (int64_t r = 0; r < shape.rows; ++r) {
      float* row = logits.data() + r * shape.vocab;
      if (r % 3 == 0 && shape.vocab > 1) {  // a tie for the maximum: the lower id wins
        const float top = *std::max_element(row, row + shape.vocab) + 1.0f;
        int64_t a = generator() % shape.vocab, b = generator() % shape.vocab;
        if (a == b) b = (a + 1) % shape.vocab;
        row[a] = top;
        row[b] = top;
      }
      if (r % 7 == 1 && shape.vocab > 6) {  // -0 and +0 are equal maxima
        std::fill(row, row + shape.vocab, -1.0f);
        row[5] = 0.0f;
        row[2] = -0.0f;
        row[6] = -0.0f;
      }
      params[r] = r % 4 == 3   ? Params(1.0f, 0, 1.0f, 5, r)  // sampled, not checked here
                  : r % 4 == 2 ? Params(0.8f, 1, 0.9f, 5, r)
                               : Params(0.0f, 0, 1.0f, 5, r);
    }
    const std::vector<int32_t> tokens = Sample(logits, shape.vocab, params);
    ASSERT_EQ(static_cast<int64_t>(tokens.size()), shape.rows);
    for (int64_t r = 0; r < shape.rows; ++r) {
      const std::span<const float> row = Row(logits, r, shape.vocab);
      if (r % 4 == 3) {
        EXPECT_TRUE(tokens[r] >= 0 && tokens[r] < shape.vocab) << tokens[r];
        continue;
      }
      EXPECT_EQ(tokens[r], CpuArgmax(row))
          << "rows " << shape.rows << " vocab " << shape.vocab << " row " << r;
    }
  }
}

TEST_F(SamplerCudaTest, TopKOneIsArgmaxAtAnyTemperature) {
  constexpr int64_t kRows = 64, kVocab = 5000;
  std::vector<float> logits = NormalLogits(kRows * kVocab, 7, 2.0f);
  std::vector<DeviceSamplingParams> params(kRows);
  const float temperatures[] = {0.05f, 0.7f, 1.0f, 5.0f, 100.0f};
  for (int64_t r = 0; r < kRows; ++r) {
    if (r % 2 == 0) logits[r * kVocab + 4999] = logits[r * kVocab + 10] = 50.0f;  // tie
    params[r] = Params(temperatures[r % 5], 1, r % 3 == 0 ? 0.5f : 1.0f, 9, r);
  }
  const std::vector<int32_t> tokens = Sample(logits, kVocab, params);
  for (int64_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(tokens[r], CpuArgmax(Row(logits, r, kVocab))) << "row " << r;
  }
}

// Every sampled token is one of the host's candidates; tokens vary where the set allows it.
TEST_F(SamplerCudaTest, SampledTokensStayInsideTopKTopP) {
  struct Config {
    float temperature;
    int top_k;
    float top_p;
    float logit_stddev;  // larger: a peaked distribution, so the nucleus is a few tokens
  };
  constexpr int64_t kVocab = 5000, kPatterns = 8, kStepsPerPattern = 32;
  const Config configs[] = {{1.0f, 0, 1.0f, 1.0f},  {1.0f, 40, 1.0f, 2.0f}, {0.7f, 0, 0.9f, 3.0f},
                            {1.3f, 50, 0.8f, 3.0f}, {1.0f, 0, 0.5f, 4.0f},  {2.0f, 5, 0.3f, 1.0f},
                            {0.3f, 0, 0.95f, 2.0f}, {1.0f, 3, 1.0f, 0.01f}};
  uint32_t seed = 100;
  for (const Config& config : configs) {
    const std::string what =
        absl::StrCat("T=", config.temperature, " top_k=", config.top_k, " top_p=", config.top_p);
    const std::vector<float> patterns =
        NormalLogits(kPatterns * kVocab, seed++, config.logit_stddev);
    std::vector<float> logits;
    std::vector<DeviceSamplingParams> params;
    for (int64_t s = 0; s < kStepsPerPattern; ++s) {
      for (int64_t pattern = 0; pattern < kPatterns; ++pattern) {
        const std::span<const float> row = Row(patterns, pattern, kVocab);
        logits.insert(logits.end(), row.begin(), row.end());
        params.push_back(Params(config.temperature, config.top_k, config.top_p, 1234 + pattern, s));
      }
    }
    const std::vector<int32_t> tokens = Sample(logits, kVocab, params);
    ASSERT_EQ(tokens.size(), params.size());
    for (int64_t pattern = 0; pattern < kPatterns; ++pattern) {
      const std::vector<Candidate> candidates = Nucleus(
          Row(patterns, pattern, kVocab), config.temperature, config.top_k, config.top_p, 1e-6);
      const std::set<int32_t> allowed = Ids(candidates);
      std::set<int32_t> seen;
      for (int64_t s = 0; s < kStepsPerPattern; ++s) {
        const int32_t token = tokens[s * kPatterns + pattern];
        EXPECT_TRUE(allowed.count(token) == 1)
            << what << " pattern " << pattern << " step " << s << ": token " << token
            << " outside the " << allowed.size() << " candidates";
        seen.insert(token);
      }
      // A candidate set whose top token has under half the mass must not give the same token
      // in all 32 draws (probability below 0.5^31; the seeds are fixed anyway).
      if (candidates.size() > 1 && candidates[0].probability < 0.5) {
        EXPECT_GT(seen.size(), 1u) << what << " pattern " << pattern;
      }
    }
  }
}

// Equal logits keep the lowest ids at the top-k cut, and -0 equals +0 (a radix sort on raw
// float bits would put every -0 after every +0).
TEST_F(SamplerCudaTest, TiesAtTheTopKCutKeepTheLowestIds) {
  constexpr int64_t kVocab = 64, kDraws = 2000;
  std::vector<float> row(kVocab, 0.0f);
  for (int64_t i = 1; i < kVocab; i += 2) row[i] = -0.0f;
  const std::vector<int32_t> tokens = SampleSteps(row, kDraws, Params(1.0f, 4, 1.0f, 77, 0));
  std::vector<int> counts(kVocab, 0);
  for (int32_t token : tokens) {
    ASSERT_TRUE(token >= 0 && token < kVocab) << token;
    ++counts[token];
  }
  for (int32_t id = 0; id < kVocab; ++id) {
    if (id < 4) {
      EXPECT_GT(counts[id], 350) << "id " << id << " (expected about 500)";
    } else {
      EXPECT_EQ(counts[id], 0) << "id " << id << " is outside the top 4";
    }
  }
}

// A row's token depends only on its logits, parameters and step: not on its batch position,
// the batch size, or the chunk it is sorted in (256000-token rows: 65 per sort chunk).
TEST_F(SamplerCudaTest, RowsAreIndependentOfTheirBatch) {
  struct Case {
    int64_t rows;
    int64_t vocab;
  };
  uint32_t seed = 500;
  for (const Case& shape : {Case{50, 1000}, Case{70, 256000}}) {
    const std::vector<float> logits = NormalLogits(shape.rows * shape.vocab, seed++, 2.0f);
    std::vector<DeviceSamplingParams> params(shape.rows);
    for (int64_t r = 0; r < shape.rows; ++r) {
      params[r] = r % 5 == 0   ? Params(0.0f, 0, 1.0f, 0, 0)
                  : r % 5 == 1 ? Params(1.0f, 40, 1.0f, 1000 + r, r)
                  : r % 5 == 2 ? Params(0.8f, 0, 0.9f, 2000 + r, 3 * r)
                  : r % 5 == 3 ? Params(1.2f, 100, 0.7f, 3000 + r, 7)
                               : Params(1.0f, 0, 1.0f, 4000 + r, r);
    }
    const std::vector<int32_t> tokens = Sample(logits, shape.vocab, params);
    ASSERT_EQ(static_cast<int64_t>(tokens.size()), shape.rows);
    EXPECT_EQ(Sample(logits, shape.vocab, params), tokens) << "not deterministic";

    // Every row is a valid draw (greedy rows exact, the others inside their candidate set).
    for (int64_t r = 0; r < shape.rows; ++r) {
      const DeviceSamplingParams& p = params[r];
      const std::span<const float> row = Row(logits, r, shape.vocab);
      if (p.temperature == 0.0f) {
        EXPECT_EQ(tokens[r], CpuArgmax(row)) << "row " << r;
      } else {
        EXPECT_EQ(Ids(Nucleus(row, p.temperature, p.top_k, p.top_p, 1e-6)).count(tokens[r]), 1u)
            << "vocab " << shape.vocab << " row " << r << " token " << tokens[r];
      }
    }

    // The batch reversed gives the tokens reversed.
    std::vector<float> reversed_logits;
    std::vector<DeviceSamplingParams> reversed_params(params.rbegin(), params.rend());
    for (int64_t r = shape.rows - 1; r >= 0; --r) {
      const std::span<const float> row = Row(logits, r, shape.vocab);
      reversed_logits.insert(reversed_logits.end(), row.begin(), row.end());
    }
    std::vector<int32_t> reversed = Sample(reversed_logits, shape.vocab, reversed_params);
    std::reverse(reversed.begin(), reversed.end());
    EXPECT_EQ(reversed, tokens) << "vocab " << shape.vocab;

    // Rows alone, including ones from the second sort chunk.
    for (const int64_t r : {int64_t{1}, int64_t{2}, shape.rows - 4, shape.rows - 3}) {
      const std::span<const float> row = Row(logits, r, shape.vocab);
      const std::vector<int32_t> alone =
          Sample(std::vector<float>(row.begin(), row.end()), shape.vocab, {params[r]});
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_EQ(alone[0], tokens[r]) << "vocab " << shape.vocab << " row " << r;
    }
  }
}

// The step and the seed both change the draw; the same (seed, step) repeats it.
TEST_F(SamplerCudaTest, SeedAndStepSelectTheDraw) {
  constexpr int64_t kVocab = 1000, kDraws = 400;
  const std::vector<float> flat(kVocab, 0.0f);
  const std::vector<int32_t> first = SampleSteps(flat, kDraws, Params(1.0f, 0, 1.0f, 1, 0));
  const std::vector<int32_t> again = SampleSteps(flat, kDraws, Params(1.0f, 0, 1.0f, 1, 0));
  const std::vector<int32_t> other_seed = SampleSteps(flat, kDraws, Params(1.0f, 0, 1.0f, 2, 0));
  // SampleSteps numbers the rows' steps from its last argument (a Params step is overwritten).
  const std::vector<int32_t> shifted = SampleSteps(flat, kDraws, Params(1.0f, 0, 1.0f, 1, 0), 1);
  EXPECT_EQ(first, again);
  // 400 uniform draws from 1000 tokens: about 330 distinct.
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 250u);
  int same_as_other_seed = 0;
  for (int64_t i = 0; i < kDraws; ++i) same_as_other_seed += first[i] == other_seed[i];
  EXPECT_LT(same_as_other_seed, 20);
  // Step s of the shifted run is step s + 1 of the first.
  for (int64_t i = 0; i + 1 < kDraws; ++i) ASSERT_EQ(shifted[i], first[i + 1]) << i;
  // Large steps and seeds use their high 32 bits too.
  const std::vector<int32_t> high_step =
      SampleSteps(flat, kDraws, Params(1.0f, 0, 1.0f, 1, 0), uint64_t{1} << 32);
  const std::vector<int32_t> high_seed =
      SampleSteps(flat, kDraws, Params(1.0f, 0, 1.0f, (uint64_t{1} << 32) + 1, 0));
  int same_as_high_step = 0, same_as_high_seed = 0;
  for (int64_t i = 0; i < kDraws; ++i) {
    same_as_high_step += first[i] == high_step[i];
    same_as_high_seed += first[i] == high_seed[i];
  }
  EXPECT_LT(same_as_high_step, 20);
  EXPECT_LT(same_as_high_seed, 20);
}

// 20000 draws (steps) from a 16-token distribution against the renormalised candidate
// probabilities. The weights 16..1 sit on shuffled ids, and every top_p is at least 0.004 of
// mass away from a cut, so the nucleus is unambiguous; dropping or adding the boundary token
// moves thousands of draws. The bound is loose (p < 1e-8) and the seed fixed: never flaky.
TEST_F(SamplerCudaTest, EmpiricalFrequenciesMatchTheNucleus) {
  constexpr int64_t kVocab = 16, kDraws = 20000;
  std::vector<int32_t> ids(kVocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
  std::vector<float> row(kVocab);
  for (int64_t rank = 0; rank < kVocab; ++rank) {
    row[ids[rank]] = std::log(static_cast<float>(kVocab - rank));
  }
  struct Config {
    float temperature;
    int top_k;
    float top_p;
    size_t expected_candidates;  // guards the test's own arithmetic
  };
  for (const Config& config :
       {Config{1.0f, 0, 1.0f, 16}, Config{1.0f, 0, 0.6f, 7}, Config{0.5f, 5, 1.0f, 5},
        Config{1.0f, 10, 0.7f, 6}, Config{2.0f, 0, 0.9f, 13}, Config{1.5f, 12, 0.45f, 5}}) {
    const std::string what =
        absl::StrCat("T=", config.temperature, " top_k=", config.top_k, " top_p=", config.top_p);
    const std::vector<Candidate> candidates =
        Nucleus(row, config.temperature, config.top_k, config.top_p);
    ASSERT_EQ(candidates.size(), config.expected_candidates) << what;
    const std::vector<int32_t> tokens =
        SampleSteps(row, kDraws, Params(config.temperature, config.top_k, config.top_p, 42, 0));
    std::vector<int64_t> counts(kVocab, 0);
    for (int32_t token : tokens) {
      ASSERT_TRUE(token >= 0 && token < kVocab) << what << ": token " << token;
      ++counts[token];
    }
    double chi_square = 0.0;
    int64_t inside = 0;
    for (const Candidate& candidate : candidates) {
      const double expected = candidate.probability * kDraws;
      const double difference = static_cast<double>(counts[candidate.id]) - expected;
      chi_square += difference * difference / expected;
      inside += counts[candidate.id];
    }
    EXPECT_EQ(inside, kDraws) << what << ": draws outside the candidate set";
    const double freedom = static_cast<double>(candidates.size() - 1);
    const double bound = freedom + 8.0 * std::sqrt(2.0 * freedom) + 20.0;
    EXPECT_LT(chi_square, bound) << what;
    RecordProperty(absl::StrCat("chi_square ", what), std::to_string(chi_square));
  }
}

TEST_F(SamplerCudaTest, ShapesAndWorkspace) {
  EXPECT_TRUE(SampleTokens(context(), nullptr, 0, 10, nullptr, nullptr).ok());
  EXPECT_FALSE(SampleTokens(context(), nullptr, 1, 0, nullptr, nullptr).ok());
  EXPECT_FALSE(SampleTokens(context(), nullptr, -1, 10, nullptr, nullptr).ok());
  absl::StatusOr<size_t> small = SampleTokensWorkspaceBytes(4, 1000);
  absl::StatusOr<size_t> large = SampleTokensWorkspaceBytes(256, 256000);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_GE(*small, 4u * 1000u * 16u);  // two key and two id buffers
  // Chunked: bounded by kSampleSortChunkItems, not by rows * vocab.
  EXPECT_LT(*large, static_cast<size_t>(kSampleSortChunkItems) * 16u + (size_t{64} << 20));
}

}  // namespace
}  // namespace abcd::cuda
