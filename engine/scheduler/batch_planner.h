// Micro-batch planning for one iteration: every decoding sequence contributes its one token,
// and prompts still being prefilled share a token budget in admission order (chunked prefill),
// so a long prompt is spread over several iterations instead of stalling running streams.
//
// The budget comes either from a fixed token count (PrefillPolicy::kTokens) or from time
// (kTime): StepCostModel learns, on the engine thread, what a decode row and a prompt row cost
// from the wall time of the backend calls, and PrefillTokensForIteration sizes the prompt
// tokens so that prefill adds at most about one decode step's time to an iteration that has
// running streams. A prompt that has waited past a deadline (overdue) lifts that limit for its
// remaining tokens, so a wave of arrivals cannot crawl in behind the streams it started, at the
// cost of a long iteration (an inter-token latency spike for the running streams). Plain values
// and functions; StepCostModel is not thread-safe (one engine thread owns it).
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

// PlanPrefill with the overdue prompts served first: the budget goes to `overdue` (their
// remaining tokens, 0 for the others) in order, and what is left of it to `others` in order
// (admission is first come, first served except that a request waiting for a prefix snapshot
// lets younger ones pass, so an overdue prompt can come after younger ones). Both spans have
// one entry per request and no request is in both. Chunks come back in index order.
std::vector<PrefillChunk> PlanPrefillOverdueFirst(std::span<const int64_t> overdue,
                                                  std::span<const int64_t> others,
                                                  int64_t token_budget);

// kTime: prompt tokens per iteration from the measured costs (below), capped by the token
// budget. kTokens: always the token budget (the pre-time behaviour: one long prompt stalls
// running streams for the time of that many prompt tokens).
enum class PrefillPolicy { kTime, kTokens };

// "time" or "tokens"; INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<PrefillPolicy> ParsePrefillPolicy(absl::string_view value, absl::string_view field);
std::string PrefillPolicyName(PrefillPolicy policy);

struct PrefillSizing {
  int64_t decode_rows = 0;  // rows of sequences decoding in this iteration
  // Estimated time of one decode step of every running sequence, the ones still prefilling
  // included (the step they will all take once prefilled); <= 0: unknown.
  double decode_step_seconds = 0;
  double prompt_row_seconds = 0;        // estimated time one prompt row adds; <= 0: unknown
  double iteration_budget_seconds = 0;  // the least extra time prefill may take (a floor)
  double decode_step_share = 1.0;       // extra time as a share of the decode step, > 0
  int64_t token_budget = 512;           // hard cap on prompt tokens per iteration
  // Prompt tokens the overdue prompts (waiting longer than the prefill deadline since their
  // enqueue) can take this iteration: their remaining tokens up to where prefill may go; <= 0:
  // none overdue.
  int64_t overdue_tokens = 0;
};

// Prompt tokens to feed this iteration under the time policy:
//  - no decode rows: nothing to stall, so token_budget (full speed);
//  - else floor(max(decode_step_share * decode_step_seconds, iteration_budget_seconds) /
//    prompt_row_seconds), so the iteration takes at most about max(that share of one decode
//    step, the budget) longer than the decode step alone;
//  - while a cost is unknown (no measurement yet), as many prompt tokens as decode rows;
//  - with overdue prompts, at least overdue_tokens (the TTFT bound: they all go in now);
// always clamped to [1, token_budget] so a waiting prompt makes progress.
// The decode step is the whole batch's, not only the rows decoding now: sized from the few
// streams that happen to decode while many prompts wait, prefill would crawl, those prompts
// would not join, and the batch would stay small (a collapse measured at 32 streams).
int64_t PrefillTokensForIteration(const PrefillSizing& sizing);

// What a decode row and a prompt row cost, learnt from every iteration's backend wall time and
// row counts: time ~= decode_row * decode_rows + prompt_row * prompt_rows, fitted by least
// squares over exponentially decaying sums (the newest iteration weighs 1, the one before
// `decay`, ...). Both kinds of iteration inform it: decode-only, prefill-only and mixed ones,
// so it keeps learning under load when decode-only iterations are rare. While the recent
// iterations do not tell the two costs apart (one kind only, or the same mix every time), or
// the fit is not positive, both costs are the average time per row. A step's fixed cost (weight
// reads) is spread over its rows, so the estimates are those of the recent batch sizes.
class StepCostModel {
 public:
  explicit StepCostModel(double decay = 0.98) : decay_(decay) {}

  // Ignores empty, negative or non-finite observations.
  void Observe(int64_t decode_rows, int64_t prompt_rows, double seconds);
  // 0 until something was observed.
  double DecodeRowSeconds() const { return decode_row_seconds_; }
  double PromptRowSeconds() const { return prompt_row_seconds_; }
  double DecodeStepSeconds(int64_t rows) const {
    return rows > 0 ? decode_row_seconds_ * static_cast<double>(rows) : 0.0;
  }

 private:
  double decay_;
  // Decayed sums of d*d, d*p, p*p, d*t, p*t, t and d+p.
  double dd_ = 0, dp_ = 0, pp_ = 0, dt_ = 0, pt_ = 0, t_ = 0, rows_ = 0;
  double decode_row_seconds_ = 0;
  double prompt_row_seconds_ = 0;
};

}  // namespace abcd
