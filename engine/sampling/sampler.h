// Next-token selection for one sequence: greedy, temperature, top-k, top-p, min-p, the
// repetition, presence and frequency penalties and a logit bias, driven by a per-request seed
// so that the same seed and prompt give the same tokens no matter what else runs in the batch
// (each sequence owns its generator). Order: repetition penalty (over the context), presence
// and frequency penalties (over the tokens this Sampler returned: the generated ones), logit
// bias, a token mask (constrained output, token_mask.h: the ids it does not allow get -inf), then
// greedy argmax, or temperature and the top-k, top-p and min-p cuts and one draw. A draw costs
// O(vocab) with no allocation once the Sampler's buffers have grown to the vocabulary; the same
// seed, inputs and build give the same tokens (streams may change between builds).
//
// Thread-compatible: one Sampler per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/sampling/token_mask.h"

namespace abcd {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = all tokens
  float top_p = 1.0f;               // nucleus mass in (0, 1]
  float repetition_penalty = 1.0f;  // > 1 discourages tokens already in the context
  uint64_t seed = 0;
  // [0, 1]: tokens less likely than min_p x the most likely one are dropped (0: none).
  float min_p = 0.0f;
  // [-2, 2] (OpenAI's): subtracted from the logit of every token generated so far (presence),
  // and once more for each time it was generated (frequency).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (id, bias in [-100, 100]) added to those logits (OpenAI's logit_bias: -100 bans a token,
  // 100 all but forces it); at most kMaxLogitBias entries. The Executor checks the ids against
  // the vocabulary; the Sampler ignores ids outside the logits.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

inline constexpr size_t kMaxLogitBias = 1024;

// InvalidArgument naming the field (e.g. "sampling.top_p must be in (0, 1], got 1.5").
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Whether sampling needs the host's logits and context (a penalty, min-p or a logit bias): a
// backend that samples on its own device (DecodeAndSample) does only temperature, top-k and
// top-p.
bool NeedsHostSampling(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `context` holds the prompt and generated ids (for the repetition penalty). The returned
  // id counts as generated for the presence and frequency penalties. With `mask` (which must
  // allow at least one id) the returned id is one it allows.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> context,
                 const TokenMask* mask = nullptr);

  // For tests: the ids the last temperature draw chose among when a cut (top-k, top-p, min-p)
  // applied, in (logit descending, id ascending) order; empty after a draw without a cut (every
  // id of positive probability) or a greedy one.
  std::span<const int32_t> LastKeptForTesting() const {
    return kept_ < 0 ? std::span<const int32_t>() : std::span<const int32_t>(order_.data(), kept_);
  }

 private:
  double NextUniform();  // [0, 1), the same sequence on every platform
  // scratch_ = logits with the penalties and the bias applied.
  void AdjustLogits(std::span<const float> logits, std::span<const int32_t> context);
  // -inf in scratch_ for the ids `mask` does not allow.
  void ApplyMask(const TokenMask& mask);
  // Temperature, top-k, top-p, min-p over scratch_. The kept set is the reference one: the ids
  // in (logit descending, id ascending) order, cut to top_k, then to the shortest prefix whose
  // mass reaches top_p, then to those at least min_p times as likely as the first; -inf (masked)
  // ids are never kept. Without a cut the draw is one O(vocab) pass in id order; with one, only
  // the candidates that can be kept are sorted (sampler.cc says how), falling back to a full sort.
  int32_t Draw();
  // No cut: the weights over every id (weights_, block_sums_) and one draw in id order.
  int32_t DrawAll(float max_logit);
  double ComputeWeights(float max_logit);  // fills weights_ and block_sums_; returns the total
  // order_[0, n) = the ids selected, sorted; the Select* return n.
  int32_t SelectTopK(int32_t k);
  int32_t SelectNucleusCandidates(float max_logit, double total, double* tail_mass);
  int32_t SelectAtLeast(float bound, float* best_excluded);
  int32_t SelectAll();
  // The cuts and the draw over the sorted candidates order_[0, n): `tail_mass` is the weight of
  // the ids left out (top-p's total counts it), `best_excluded` the highest logit left out,
  // `complete` whether top-p's cut may end at n. -1 when a cut would reach past the candidates
  // (the caller sorts everything instead).
  int32_t DrawSorted(int32_t n, double tail_mass, float best_excluded, bool complete);

  SamplingParams params_;
  uint64_t state_;
  std::vector<float> scratch_;
  // Draw's scratch, reused across calls (no allocation per draw once sized).
  std::vector<int32_t> order_;
  std::vector<float> weights_;                  // exp((logit - max) / T) per id, padded with zeros
  std::vector<double> block_sums_;              // sums of weights_ per block of kDrawBlock ids
  std::vector<double> probs_;                   // the sorted candidates' probabilities
  std::vector<std::pair<float, int32_t>> top_;  // top-k's (key, id) buffer
  int32_t kept_ = -1;                           // order_[0, kept_) was the last draw's kept set
  absl::flat_hash_map<int32_t, int32_t> generated_;  // id -> times returned (with penalties)
};

}  // namespace abcd
