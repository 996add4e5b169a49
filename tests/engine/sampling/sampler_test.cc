// Sampling: greedy is argmax; seeds reproduce; top-k/top-p/min-p restrict the support; the
// repetition penalty lowers repeated tokens, the presence and frequency penalties generated
// ones; a logit bias bans or forces tokens; bad parameters name their field.
#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Relative to the top token (id 1, logit 2.0) the probabilities at temperature 1 are
// id 2: 0.90, id 5: 0.37, id 4: 0.22, id 0: 0.15, id 3: 0.05.
TEST(Sampler, MinPDropsTokensBelowItsShareOfTheTopOne) {
  SamplingParams params;
  params.seed = 5;
  params.min_p = 0.3f;
  const auto draws = Draw(params, 2000);
  EXPECT_EQ(std::set<int32_t>(draws.begin(), draws.end()), (std::set<int32_t>{1, 2, 5}));
  params.min_p = 0.95f;  // the top token alone
  const auto top = Draw(params, 200);
  EXPECT_EQ(std::set<int32_t>(top.begin(), top.end()), (std::set<int32_t>{1}));
  params.min_p = 0.2f;  // with top-k 4: {1, 2, 5, 4}, all above 0.2
  params.top_k = 4;
  const auto both = Draw(params, 2000);
  EXPECT_EQ(std::set<int32_t>(both.begin(), both.end()), (std::set<int32_t>{1, 2, 4, 5}));
}

// Greedy, so each step is the argmax of the penalised logits: presence 0.5 lowers a generated
// token once (1: 2.0 -> 1.5 < 1.9, then 2: 1.9 -> 1.4 < 1.5, and 1 stays at 1.5); frequency
// 0.5 lowers it again each time it is generated (1 and 2 take turns; at 1.0 id 1 ties with
// id 5 and wins by id). Prompt ids in the context count for neither.
TEST(Sampler, PresenceAndFrequencyPenaltiesLowerGeneratedTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = 0.5f;
  Sampler presence(params);
  std::vector<int32_t> tokens;
  const std::vector<int32_t> prompt = {1, 1, 1};
  for (int i = 0; i < 4; ++i) tokens.push_back(presence.Sample(kLogits, prompt));
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 1, 1}));
  params.presence_penalty = 0.0f;
  params.frequency_penalty = 0.5f;
  Sampler frequency(params);
  tokens.clear();
  for (int i = 0; i < 6; ++i) tokens.push_back(frequency.Sample(kLogits, {}));
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 1, 2, 1, 5}));
  // Negative values encourage repetition: the top token keeps winning by more.
  params.frequency_penalty = -2.0f;
  params.temperature = 1.0f;
  const auto repeated = Draw(params, 50);
  EXPECT_GT(std::count(repeated.begin(), repeated.end(), repeated.back()), 40);
}

TEST(Sampler, LogitBiasBansAndForcesTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(Draw(params, 3), std::vector<int32_t>(3, 3));
  params.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(Draw(params, 3), std::vector<int32_t>(3, 2));
  params.logit_bias = {{1, -100.0f}, {2, -100.0f}, {99, 100.0f}};  // 99: outside, ignored
  params.temperature = 1.0f;
  params.seed = 9;
  const auto draws = Draw(params, 2000);
  const std::set<int32_t> seen(draws.begin(), draws.end());
  EXPECT_EQ(seen, (std::set<int32_t>{0, 3, 4, 5}));
}

TEST(Sampler, HostSamplingIsNeededForPenaltiesMinPAndBias) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 5;
  params.top_p = 0.9f;
  EXPECT_FALSE(NeedsHostSampling(params));
  for (int field = 0; field < 5; ++field) {
    SamplingParams p = params;
    if (field == 0) p.repetition_penalty = 1.1f;
    if (field == 1) p.min_p = 0.1f;
    if (field == 2) p.presence_penalty = 0.1f;
    if (field == 3) p.frequency_penalty = -0.1f;
    if (field == 4) p.logit_bias = {{0, 1.0f}};
    EXPECT_TRUE(NeedsHostSampling(p)) << field;
  }
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
  const std::pair<void (*)(SamplingParams&), const char*> bad[] = {
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "sampling.min_p must be in [0, 1]"},
      {[](SamplingParams& p) { p.min_p = -0.1f; }, "sampling.min_p"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "sampling.presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "sampling.frequency_penalty"},
      {[](SamplingParams& p) {
         p.logit_bias = {{7, 101.0f}};
       },
       "sampling.logit_bias[7] must be in [-100, 100]"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "sampling.logit_bias: token id -1"},
      {[](SamplingParams& p) {
         p.logit_bias.assign(kMaxLogitBias + 1, {0, 1.0f});
       },
       "sampling.logit_bias has"},
  };
  for (const auto& [spoil, message] : bad) {
    params = {};
    spoil(params);
    const absl::Status status = ValidateSamplingParams(params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_NE(status.message().find(message), std::string::npos) << status;
  }
  params = {};
  params.min_p = 1.0f;
  params.presence_penalty = -2.0f;
  params.frequency_penalty = 2.0f;
  params.logit_bias = {{0, -100.0f}, {1, 100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(params).ok());
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
}

}  // namespace
}  // namespace abcd
