// Micro-batch planning for one iteration: every decoding sequence contributes its one token,
// and prompts still being prefilled share a token budget in admission order (chunked prefill),
// so a long prompt is spread over several iterations instead of stalling running streams.
//
// The budget comes either from a fixed token count (PrefillPolicy::kTokens) or from time
// (kTime): StepCostModel learns, on the engine thread, what a decode step of d rows and one
// prompt row cost from the wall time of the backend calls, and PrefillTokensForIteration sizes
// the prompt tokens so that prefill adds at most about one decode step's time to an iteration
// that has running streams. Plain values and functions; StepCostModel is not thread-safe (one
// engine thread owns it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

struct PrefillChunk {
  int index;       // into the `remaining` span
  int64_t tokens;  // prompt tokens to feed this iteration
};

// `remaining`: prompt tokens left per prefilling request, in admission order. At least one
// token is planned whenever something is waiting, even with a zero budget.
std::vector<PrefillChunk> PlanPrefill(std::span<const int64_t> remaining, int64_t token_budget);

// kTime: prompt tokens per iteration from the measured costs (below), capped by the token
// budget. kTokens: always the token budget (the pre-time behaviour: one long prompt stalls
// running streams for the time of that many prompt tokens).
enum class PrefillPolicy { kTime, kTokens };

// "time" or "tokens"; INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<PrefillPolicy> ParsePrefillPolicy(absl::string_view value, absl::string_view field);
std::string PrefillPolicyName(PrefillPolicy policy);

struct PrefillSizing {
  int64_t decode_rows = 0;              // rows of running sequences in this iteration
  double decode_step_seconds = 0;       // estimated time of those rows alone; <= 0: unknown
  double prompt_row_seconds = 0;        // estimated time one prompt row adds; <= 0: unknown
  double iteration_budget_seconds = 0;  // the least extra time prefill may take (a floor)
  double decode_step_share = 1.0;       // extra time as a share of the decode step, > 0
  int64_t token_budget = 512;           // hard cap on prompt tokens per iteration
};

// Prompt tokens to feed this iteration under the time policy:
//  - no decode rows: nothing to stall, so token_budget (full speed);
//  - else floor(max(decode_step_share * decode_step_seconds, iteration_budget_seconds) /
//    prompt_row_seconds), so the iteration takes at most about max(that share of one decode
//    step, the budget) longer than the decode step alone;
//  - while a cost is unknown (no measurement yet), as many prompt tokens as decode rows (a
//    prompt row costs no more than an average decode row, which carries the weight reads);
// always clamped to [1, token_budget] so a waiting prompt makes progress.
int64_t PrefillTokensForIteration(const PrefillSizing& sizing);

// Exponentially weighted estimates of the backend's costs, fed with the wall time of each
// iteration's backend calls and their row counts:
//  - decode step of d rows (iterations without prompt rows), one estimate per d, since a
//    step's time is mostly weight reads shared by its rows; for a d not seen yet, the nearest
//    smaller d seen (an underestimate, so prefill is sized conservatively);
//  - one prompt row: (time - the decode step estimate for its d) / prompt rows, over
//    iterations with prompt rows; an iteration whose residual is not positive (noise) is
//    skipped.
class StepCostModel {
 public:
  // `weight` of the newest observation in each average, in (0, 1].
  explicit StepCostModel(double weight = 0.25) : weight_(weight) {}

  void Observe(int64_t decode_rows, int64_t prompt_rows, double seconds);
  // <= 0 when nothing at or below `decode_rows` was observed (0 rows cost 0).
  double DecodeStepSeconds(int64_t decode_rows) const;
  // <= 0 until an iteration with prompt rows was observed.
  double PromptRowSeconds() const { return prompt_row_seconds_; }

 private:
  // Estimates beyond this many rows extrapolate from the largest one linearly in rows.
  static constexpr int64_t kMaxTrackedRows = 4096;
  double Average(double old_value, double sample) const {
    return old_value <= 0 ? sample : old_value + weight_ * (sample - old_value);
  }

  double weight_;
  std::vector<double> decode_step_seconds_;  // by decode rows; 0 = not observed
  double prompt_row_seconds_ = 0;
};

}  // namespace abcd
