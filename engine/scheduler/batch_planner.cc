#include "engine/scheduler/batch_planner.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace abcd {

std::vector<PrefillChunk> PlanPrefill(std::span<const int64_t> remaining, int64_t token_budget) {
  std::vector<PrefillChunk> chunks;
  int64_t budget = std::max<int64_t>(token_budget, 1);
  for (size_t i = 0; i < remaining.size() && budget > 0; ++i) {
    if (remaining[i] <= 0) continue;
    const int64_t take = std::min(remaining[i], budget);
    chunks.push_back({static_cast<int>(i), take});
    budget -= take;
  }
  return chunks;
}

std::vector<PrefillChunk> PlanPrefillOverdueFirst(std::span<const int64_t> overdue,
                                                  std::span<const int64_t> others,
                                                  int64_t token_budget) {
  std::vector<PrefillChunk> chunks = PlanPrefill(overdue, token_budget);
  int64_t left = std::max<int64_t>(token_budget, 1);
  for (const PrefillChunk& chunk : chunks) left -= chunk.tokens;
  if (chunks.empty() || left > 0) {
    const std::vector<PrefillChunk> more =
        PlanPrefill(others, chunks.empty() ? token_budget : left);
    chunks.insert(chunks.end(), more.begin(), more.end());
  }
  std::sort(chunks.begin(), chunks.end(),
            [](const PrefillChunk& a, const PrefillChunk& b) { return a.index < b.index; });
  return chunks;
}

absl::StatusOr<PrefillPolicy> ParsePrefillPolicy(absl::string_view value, absl::string_view field) {
  if (value == "time") return PrefillPolicy::kTime;
  if (value == "tokens") return PrefillPolicy::kTokens;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be time or tokens, got \"", value, "\""));
}

std::string PrefillPolicyName(PrefillPolicy policy) {
  return policy == PrefillPolicy::kTime ? "time" : "tokens";
}

namespace {

// The time policy's prompt tokens alone (PrefillTokensForIteration without overdue prompts),
// for an iteration with decode rows; in [1, cap].
int64_t PrefillTimeShareTokens(const PrefillSizing& sizing, int64_t cap) {
  const double extra = std::max(sizing.decode_step_share * sizing.decode_step_seconds,
                                sizing.iteration_budget_seconds);
  if (sizing.prompt_row_seconds <= 0 || extra <= 0) {
    return std::clamp<int64_t>(sizing.decode_rows, 1, cap);
  }
  const double tokens = std::floor(extra / sizing.prompt_row_seconds);
  if (!(tokens < static_cast<double>(cap))) return cap;  // also catches inf and nan
  return std::max<int64_t>(static_cast<int64_t>(tokens), 1);
}

}  // namespace

int64_t PrefillTokensForIteration(const PrefillSizing& sizing) {
  const int64_t cap = std::max<int64_t>(sizing.token_budget, 1);
  if (sizing.decode_rows <= 0) return cap;
  return std::max(PrefillTimeShareTokens(sizing, cap), std::min(sizing.overdue_tokens, cap));
}

void StepCostModel::Observe(int64_t decode_rows, int64_t prompt_rows, double seconds) {
  if (decode_rows < 0 || prompt_rows < 0 || decode_rows + prompt_rows == 0 || !(seconds > 0) ||
      !std::isfinite(seconds)) {
    return;
  }
  const double d = static_cast<double>(decode_rows);
  const double p = static_cast<double>(prompt_rows);
  dd_ = decay_ * dd_ + d * d;
  dp_ = decay_ * dp_ + d * p;
  pp_ = decay_ * pp_ + p * p;
  dt_ = decay_ * dt_ + d * seconds;
  pt_ = decay_ * pt_ + p * seconds;
  t_ = decay_ * t_ + seconds;
  rows_ = decay_ * rows_ + d + p;
  // The normal equations of the two-cost fit; 1 - det / (dd * pp) is the squared (uncentred)
  // correlation of the two row counts, so a small ratio means the mixes did not differ enough.
  const double det = dd_ * pp_ - dp_ * dp_;
  if (det > 0.05 * dd_ * pp_) {
    const double decode = (dt_ * pp_ - pt_ * dp_) / det;
    const double prompt = (pt_ * dd_ - dt_ * dp_) / det;
    if (decode > 0 && prompt > 0) {
      decode_row_seconds_ = decode;
      prompt_row_seconds_ = prompt;
      return;
    }
  }
  decode_row_seconds_ = prompt_row_seconds_ = t_ / rows_;
}

}  // namespace abcd
