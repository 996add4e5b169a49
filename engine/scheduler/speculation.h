// Speculative decoding's draft side: the per-request options, prompt-lookup (n-gram) drafts
// and the pacing that keeps a request whose drafts keep failing from paying for them.
//
// A request with speculation proposes up to k tokens from its own context (the latest earlier
// occurrence of its last n tokens, n = 3 down to 1, and the tokens that followed it); the
// Executor feeds them with the pending token as k + 1 rows of one decode step (checkpoints
// after the first k, DecodeBackend::Rollback), accepts the drafted tokens its sampler returns
// in order, and rolls the state back to the last accepted one. Drafts only decide how many rows
// a step feeds, never which tokens come out. The draft lengths and the back-off were chosen by
// replaying abc-lm's own outputs (greedy and sampled, 32 x 128 tokens) against alternatives
// (fixed k, halving k on a miss, longer back-offs): they keep most of the greedy gain and cost
// little where nothing is accepted.
// Thread-safety: pure functions; a DraftPacer belongs to one request (the engine thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

enum class SpeculativeMode { kOff, kNgram };

inline constexpr int kMaxSpeculativeTokens = 16;

struct SpeculativeParams {
  SpeculativeMode mode = SpeculativeMode::kOff;
  int k = 4;  // draft tokens per step, in [1, kMaxSpeculativeTokens]

  bool enabled() const { return mode == SpeculativeMode::kNgram && k > 0; }
};

// INVALID_ARGUMENT naming `field` (e.g. "speculative.k must be in [1, 16], got 0").
absl::Status ValidateSpeculativeParams(const SpeculativeParams& params, absl::string_view field);

// "off", "ngram" (k 4) or "ngram:K"; INVALID_ARGUMENT naming `flag` otherwise.
absl::StatusOr<SpeculativeParams> ParseSpeculativeFlag(absl::string_view value,
                                                       absl::string_view flag);

// Prompt lookup: for n from `max_n` down to 1, the latest occurrence of context's last n tokens
// that starts before them, and the tokens that followed it: up to `k` after a match of 3 or more
// tokens, k / 2 (at least 1) after a 2-token match, 1 after a 1-token match (a short match
// predicts little); empty when no n matches.
std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> context, int k, int max_n = 3);

// When a request drafts (back-off): after m verify steps in a row that kept nothing it drafts
// nothing for min(2^m - 1, kMaxSkip) steps, so a workload where nothing is accepted pays a
// verify row now and then, not every step; a step that keeps a draft token ends the back-off.
class DraftPacer {
 public:
  static constexpr int kMaxSkip = 4;

  explicit DraftPacer(int k = 0) : k_(k) {}

  // Draft tokens to propose this step; 0: a plain step (speculation off, or backing off).
  int Budget() const { return skip_ > 0 ? 0 : k_; }
  // After a step: `drafted` tokens were verified (0: a plain step) and `accepted` of them kept.
  void Observe(int drafted, int accepted);

 private:
  int k_;
  int misses_ = 0;  // verify steps in a row with nothing accepted
  int skip_ = 0;    // plain steps left before drafting again
};

}  // namespace abcd
