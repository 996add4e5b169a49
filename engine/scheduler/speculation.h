// Speculative decoding's draft side: the per-request options, prompt-lookup (n-gram) drafts
// and the pacing that keeps a request whose drafts keep failing from paying for them.
//
// A request with speculation proposes up to k tokens from its own context (the latest earlier
// occurrence of its last n tokens, n = 3 down to 1, and the k tokens that followed it); the
// Executor feeds them with the pending token as k + 1 rows of one decode step (checkpoints
// after the first k, DecodeBackend::Rollback), accepts the drafted tokens its sampler returns
// in order, and rolls the state back to the last accepted one. Drafts only decide how many rows
// a step feeds, never which tokens come out.
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
// that starts before them, and up to `k` tokens that followed it; empty when no n matches.
std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> context, int k, int max_n = 3);

// How many tokens a request drafts next (adaptive k with back-off): all drafts accepted doubles
// it up to the request's k; some accepted sets it to one more than were; none halves it and,
// after m such steps in a row, skips drafting for min(2^m - 1, kMaxSkip) steps, so a workload
// where nothing is accepted costs a verify row now and then, not every step.
class DraftPacer {
 public:
  static constexpr int kMaxSkip = 16;

  explicit DraftPacer(int k = 0) : k_(k), current_(k) {}

  // Draft tokens to propose this step; 0: a plain step (speculation off, or backing off).
  int Budget() const { return skip_ > 0 ? 0 : current_; }
  // After a step: `drafted` tokens were verified (0: a plain step) and `accepted` of them kept.
  void Observe(int drafted, int accepted);

 private:
  int k_;
  int current_;
  int misses_ = 0;  // verify steps in a row with nothing accepted
  int skip_ = 0;    // plain steps left before drafting again
};

}  // namespace abcd
