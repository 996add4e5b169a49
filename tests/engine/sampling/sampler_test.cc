// Sampling: greedy is argmax; seeds reproduce; top-k/top-p/min-p restrict the support; the
// repetition penalty lowers repeated tokens, the presence and frequency penalties generated
// ones; a logit bias bans or forces tokens; bad parameters name their field. The draw: its kept
// sets are the reference definition's (a slow sort-everything implementation below), its
// draws follow softmax(logits / T) over them (chi-square), and masked ids are never drawn.
#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <span>

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

constexpr float kInf = std::numeric_limits<float>::infinity();

// The reference definition of the kept set (the draw as it was before its fast paths): every
// id sorted by (logit descending, id ascending), cut to top_k, masked (-inf) ids dropped, then
// the shortest prefix whose mass reaches top_p, then the ids at least min_p times as likely as
// the first. probs are unnormalised; near_cut: top-p's mass passed within 1e-9 of top_p (where
// rounding may decide either way).
struct Reference {
  std::vector<int32_t> kept;
  std::vector<double> probs;
  bool near_cut = false;
};

Reference ReferenceKept(std::span<const float> logits, const SamplingParams& p) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  int32_t keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  while (keep > 1 && logits[order[keep - 1]] == -kInf) --keep;
  Reference ref;
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    ref.probs.push_back(
        std::exp((static_cast<double>(logits[order[i]]) - logits[order[0]]) / p.temperature));
    total += ref.probs.back();
  }
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    for (int32_t i = 0; i < keep; ++i) {
      const double before = mass;
      mass += ref.probs[i] / total;
      ref.near_cut |= std::abs(mass - p.top_p) < 1e-9 || std::abs(before - p.top_p) < 1e-9;
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    int32_t cut = 1;
    while (cut < keep && ref.probs[cut] >= static_cast<double>(p.min_p) * ref.probs[0]) ++cut;
    keep = cut;
  }
  ref.kept.assign(order.begin(), order.begin() + keep);
  ref.probs.resize(keep);
  return ref;
}

// The reference draw over the reference kept set, with the Sampler's generator (splitmix64).
class ReferenceSampler {
 public:
  explicit ReferenceSampler(const SamplingParams& p)
      : p_(p), state_(p.seed ^ 0x9e3779b97f4a7c15ull) {}
  int32_t Sample(std::span<const float> logits) {
    const Reference ref = ReferenceKept(logits, p_);
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double target = static_cast<double>(z >> 11) * 0x1.0p-53 *
                    std::accumulate(ref.probs.begin(), ref.probs.end(), 0.0);
    for (size_t i = 0; i < ref.kept.size(); ++i) {
      target -= ref.probs[i];
      if (target < 0.0) return ref.kept[i];
    }
    return ref.kept.back();
  }

 private:
  SamplingParams p_;
  uint64_t state_;
};

// Gaussian logits; `tie_step` > 0 rounds them to its multiples (many ties), a `masked` share
// of ids (the highest ones among them when `mask_top`) is -inf.
std::vector<float> RandomLogits(int32_t vocab, float scale, float tie_step, double masked,
                                bool mask_top, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::bernoulli_distribution mask(masked);
  std::vector<float> logits(vocab);
  for (float& l : logits) {
    l = normal(rng);
    if (tie_step > 0.0f) l = std::round(l / tie_step) * tie_step;
  }
  const float top = *std::max_element(logits.begin(), logits.end());
  for (float& l : logits) {
    if (mask(rng) || (mask_top && l > top - scale)) l = -kInf;
  }
  return logits;
}

struct Cut {
  int top_k;
  float top_p;
  float min_p;
};

// Every kind of cut and their combinations; top_k == vocab - 1 and >= vocab are filled in.
std::vector<Cut> Cuts(int32_t vocab) {
  return {{1, 1.0f, 0.0f},     {5, 1.0f, 0.0f},     {50, 1.0f, 0.0f},       {vocab - 1, 1.0f, 0.0f},
          {0, 0.9f, 0.0f},     {0, 0.5f, 0.0f},     {0, 0.99f, 0.0f},       {0, 0.999999f, 0.0f},
          {0, 0.01f, 0.0f},    {0, 1.0f, 0.05f},    {0, 1.0f, 0.3f},        {0, 1.0f, 1.0f},
          {0, 1.0f, 1e-6f},    {40, 0.8f, 0.0f},    {40, 1.0f, 0.1f},       {0, 0.9f, 0.1f},
          {100, 0.95f, 0.02f}, {vocab, 0.7f, 0.0f}, {vocab + 3, 1.0f, 0.2f}};
}

// The kept set of every cut equals the reference's on logits with and without ties and masked
// ids (the masked ones at the top, too), at several temperatures; where top-p is decided by the
// reference's total (top_k or top_p alone), the tokens equal the reference draw's too.
TEST(SamplerDraw, KeptSetsAreTheReferenceDefinition) {
  int cases = 0;
  int near_cut = 0;
  uint32_t seed = 1;
  for (int32_t vocab : {300, 8000}) {
    for (const auto& [scale, tie_step, masked, mask_top] :
         std::vector<std::tuple<float, float, double, bool>>{{1.0f, 0.0f, 0.0, false},
                                                             {3.0f, 0.0f, 0.3, false},
                                                             {8.0f, 0.5f, 0.0, false},
                                                             {2.0f, 0.25f, 0.5, true}}) {
      const std::vector<float> logits =
          RandomLogits(vocab, scale, tie_step, masked, mask_top, ++seed);
      for (float temperature : {0.5f, 1.0f, 2.0f}) {
        for (const Cut& cut : Cuts(vocab)) {
          SamplingParams params;
          params.temperature = temperature;
          params.top_k = cut.top_k;
          params.top_p = cut.top_p;
          params.min_p = cut.min_p;
          params.seed = seed;
          const Reference ref = ReferenceKept(logits, params);
          const std::string where = ::testing::PrintToString(std::make_tuple(
              vocab, scale, tie_step, masked, temperature, cut.top_k, cut.top_p, cut.min_p));
          ++cases;
          if (ref.near_cut) {
            ++near_cut;
            continue;
          }
          Sampler sampler(params);
          ReferenceSampler reference(params);
          for (int draw = 0; draw < 3; ++draw) {
            const int32_t token = sampler.Sample(logits, {});
            const std::span<const int32_t> kept = sampler.LastKeptForTesting();
            const bool no_cut =
                (cut.top_k <= 0 || cut.top_k >= vocab) && cut.top_p == 1.0f && cut.min_p == 0.0f;
            if (no_cut) {
              EXPECT_TRUE(kept.empty()) << where;
            } else {
              ASSERT_EQ(std::vector<int32_t>(kept.begin(), kept.end()), ref.kept) << where;
            }
            EXPECT_NE(logits[token], -kInf) << where;
            if ((cut.top_k > 0 && cut.top_k < vocab) || (!no_cut && cut.top_p == 1.0f)) {
              EXPECT_EQ(token, reference.Sample(logits)) << where << " draw " << draw;
            }
          }
        }
      }
    }
  }
  EXPECT_LE(near_cut * 100, cases) << near_cut << " of " << cases << " cases skipped";
}

// A chi-square bound that a correct sampler exceeds with probability ~1e-7 (Wilson-Hilferty).
double ChiSquareBound(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 5.2 * std::sqrt(a), 3.0);
}

// n draws from `params` against softmax(logits / T) over the reference kept set (every id that
// is not masked without a cut): no id outside it, and a chi-square over the ids expected >= 5
// times (the others pooled) within the bound.
void ExpectSoftmaxDraws(const std::vector<float>& logits, const SamplingParams& params, int n) {
  const Reference ref = ReferenceKept(logits, params);
  std::vector<double> expected(logits.size(), 0.0);
  const double total = std::accumulate(ref.probs.begin(), ref.probs.end(), 0.0);
  for (size_t i = 0; i < ref.kept.size(); ++i) expected[ref.kept[i]] = ref.probs[i] / total * n;
  std::vector<int> counts(logits.size(), 0);
  Sampler sampler(params);
  for (int i = 0; i < n; ++i) ++counts[sampler.Sample(logits, {})];
  double chi2 = 0.0;
  double pooled_expected = 0.0;
  int pooled_count = 0;
  int cells = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (expected[id] == 0.0) {
      EXPECT_EQ(counts[id], 0) << "id " << id << " is not kept";
    } else if (expected[id] < 5.0) {
      pooled_expected += expected[id];
      pooled_count += counts[id];
    } else {
      chi2 += (counts[id] - expected[id]) * (counts[id] - expected[id]) / expected[id];
      ++cells;
    }
  }
  if (pooled_expected >= 5.0) {
    chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
    ++cells;
  }
  ASSERT_GE(cells, 2);
  EXPECT_LT(chi2, ChiSquareBound(cells - 1))
      << cells << " cells, T " << params.temperature << ", top_k " << params.top_k << ", top_p "
      << params.top_p << ", min_p " << params.min_p;
}

TEST(SamplerDraw, DrawsFollowSoftmaxOverTheKeptSet) {
  // 200 ids (four blocks of the id-order draw, the last one partial), 5% masked.
  const std::vector<float> logits = RandomLogits(200, 1.5f, 0.0f, 0.05, false, 7);
  const Cut cuts[] = {{0, 1.0f, 0.0f},   {20, 1.0f, 0.0f},  {0, 0.8f, 0.0f},  {0, 1.0f, 0.1f},
                      {30, 0.9f, 0.05f}, {0, 0.95f, 0.02f}, {300, 1.0f, 0.0f}};
  uint64_t seed = 100;
  for (float temperature : {0.7f, 1.0f, 1.3f}) {
    for (const Cut& cut : cuts) {
      SamplingParams params;
      params.temperature = temperature;
      params.top_k = cut.top_k;
      params.top_p = cut.top_p;
      params.min_p = cut.min_p;
      params.seed = ++seed;
      ExpectSoftmaxDraws(logits, params, 20000);
    }
  }
  // abc-lm's vocabulary size, no cut: the one-pass draw over 125 blocks.
  SamplingParams params;
  params.seed = 3;
  ExpectSoftmaxDraws(RandomLogits(8000, 2.5f, 0.0f, 0.1, false, 8), params, 20000);
}

// Masked ids are never drawn, with every cut, when they hold the highest logits, when they are
// the last ids (where a rounding fallback would land) and when one id alone is allowed. NaN
// logits count as masked.
TEST(SamplerDraw, MaskedIdsAreNeverDrawn) {
  constexpr int32_t kVocab = 130;
  std::vector<float> logits = RandomLogits(kVocab, 2.0f, 0.0f, 0.0, false, 11);
  TokenMask mask;
  mask.bits.assign((kVocab + 63) / 64, 0);
  for (int32_t id = 0; id < kVocab; ++id) {
    const bool banned = id % 3 == 0 || id >= kVocab - 10;
    if (banned) {
      logits[id] += 20.0f;  // the masked ids would be the likeliest by far
    } else {
      mask.bits[id / 64] |= uint64_t{1} << (id % 64);
      ++mask.allowed;
    }
  }
  TokenMask single;
  single.bits.assign(mask.bits.size(), 0);
  single.bits[1] |= uint64_t{1} << 5;  // id 69 alone
  single.allowed = 1;
  std::vector<float> with_nan = logits;
  for (int32_t id = 0; id < kVocab; id += 2) with_nan[id] = std::numeric_limits<float>::quiet_NaN();
  uint64_t seed = 0;
  for (const Cut& cut : Cuts(kVocab)) {
    SamplingParams params;
    params.top_k = cut.top_k;
    params.top_p = cut.top_p;
    params.min_p = cut.min_p;
    params.seed = ++seed;
    Sampler sampler(params);
    for (int i = 0; i < 1000; ++i) {
      const int32_t token = sampler.Sample(logits, {}, &mask);
      ASSERT_TRUE(mask.Allows(token))
          << token << " top_k " << cut.top_k << " top_p " << cut.top_p << " min_p " << cut.min_p;
      ASSERT_EQ(sampler.Sample(logits, {}, &single), 69);
      const int32_t not_nan = sampler.Sample(with_nan, {});
      ASSERT_EQ(not_nan % 2, 1) << not_nan;
    }
  }
}

}  // namespace
}  // namespace abcd
