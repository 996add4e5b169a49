// Sampling: greedy is argmax; seeds reproduce; top-k/top-p restrict the support; the
// repetition penalty lowers repeated tokens; bad parameters name their field.
#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <set>

namespace abcd {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f, 1.0f};

std::vector<int32_t> Draw(const SamplingParams& params, int n) {
  Sampler sampler(params);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.Sample(kLogits, {}));
  return out;
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_EQ(Draw(params, 5), std::vector<int32_t>(5, 1));
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams params;
  params.seed = 11;
  EXPECT_EQ(Draw(params, 64), Draw(params, 64));
  SamplingParams other = params;
  other.seed = 12;
  EXPECT_NE(Draw(params, 64), Draw(other, 64));
}

TEST(Sampler, TopKAndTopPRestrictSupport) {
  SamplingParams params;
  params.top_k = 2;
  params.seed = 3;
  const auto top_k = Draw(params, 500);
  EXPECT_EQ(std::set<int32_t>(top_k.begin(), top_k.end()), (std::set<int32_t>{1, 2}));
  params.top_k = 0;
  params.top_p = 0.3f;  // token 1 alone holds more than 30% of the mass
  const auto top_p = Draw(params, 200);
  EXPECT_EQ(std::set<int32_t>(top_p.begin(), top_p.end()), (std::set<int32_t>{1}));
  params.top_p = 1.0f;
  const auto all = Draw(params, 2000);
  EXPECT_EQ(std::set<int32_t>(all.begin(), all.end()).size(), kLogits.size());
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 1.5f;
  Sampler sampler(params);
  const std::vector<int32_t> context = {1, 1, 1};
  EXPECT_EQ(sampler.Sample(kLogits, context), 2);  // 2.0 / 1.5 < 1.9
}

TEST(Sampler, ValidationNamesField) {
  SamplingParams params;
  params.top_p = 1.5f;
  EXPECT_NE(ValidateSamplingParams(params).message().find("sampling.top_p"), std::string::npos);
  params = {};
  params.temperature = -1.0f;
  EXPECT_NE(ValidateSamplingParams(params).message().find("sampling.temperature"),
            std::string::npos);
  params = {};
  params.top_k = -2;
  EXPECT_NE(ValidateSamplingParams(params).message().find("sampling.top_k"), std::string::npos);
  params = {};
  params.repetition_penalty = 0.0f;
  EXPECT_NE(ValidateSamplingParams(params).message().find("sampling.repetition_penalty"),
            std::string::npos);
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
}

}  // namespace
}  // namespace abcd
