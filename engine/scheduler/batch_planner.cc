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

absl::StatusOr<PrefillPolicy> ParsePrefillPolicy(absl::string_view value, absl::string_view field) {
  if (value == "time") return PrefillPolicy::kTime;
  if (value == "tokens") return PrefillPolicy::kTokens;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be time or tokens, got \"", value, "\""));
}

std::string PrefillPolicyName(PrefillPolicy policy) {
  return policy == PrefillPolicy::kTime ? "time" : "tokens";
}

int64_t PrefillTokensForIteration(const PrefillSizing& sizing) {
  const int64_t cap = std::max<int64_t>(sizing.token_budget, 1);
  if (sizing.decode_rows <= 0) return cap;
  const double extra = std::max(sizing.decode_step_share * sizing.decode_step_seconds,
                                sizing.iteration_budget_seconds);
  if (sizing.prompt_row_seconds <= 0 || extra <= 0) {
    return std::clamp<int64_t>(sizing.decode_rows, 1, cap);
  }
  const double tokens = std::floor(extra / sizing.prompt_row_seconds);
  if (!(tokens < static_cast<double>(cap))) return cap;  // also catches inf and nan
  return std::max<int64_t>(static_cast<int64_t>(tokens), 1);
}

void StepCostModel::Observe(int64_t decode_rows, int64_t prompt_rows, double seconds) {
  if (decode_rows < 0 || prompt_rows < 0 || decode_rows + prompt_rows == 0 || !(seconds > 0) ||
      !std::isfinite(seconds)) {
    return;
  }
  if (prompt_rows == 0) {
    int64_t slot = decode_rows;
    double sample = seconds;
    if (slot > kMaxTrackedRows) {
      sample = seconds * static_cast<double>(kMaxTrackedRows) / static_cast<double>(slot);
      slot = kMaxTrackedRows;
    }
    if (static_cast<int64_t>(decode_step_seconds_.size()) <= slot) {
      decode_step_seconds_.resize(slot + 1, 0.0);
    }
    decode_step_seconds_[slot] = Average(decode_step_seconds_[slot], sample);
    return;
  }
  double decode = 0;
  if (decode_rows > 0) {
    decode = DecodeStepSeconds(decode_rows);
    if (decode <= 0) return;  // cannot split the time yet
  }
  const double residual = seconds - decode;
  if (residual <= 0) return;
  prompt_row_seconds_ = Average(prompt_row_seconds_, residual / static_cast<double>(prompt_rows));
}

double StepCostModel::DecodeStepSeconds(int64_t decode_rows) const {
  if (decode_rows <= 0) return 0;
  const int64_t slot = std::min(decode_rows, kMaxTrackedRows);
  const int64_t last =
      std::min<int64_t>(slot, static_cast<int64_t>(decode_step_seconds_.size()) - 1);
  for (int64_t d = last; d >= 1; --d) {
    if (decode_step_seconds_[d] > 0) {
      // Above the tracked range the largest slot holds kMaxTrackedRows rows' worth.
      return d == kMaxTrackedRows && decode_rows > kMaxTrackedRows
                 ? decode_step_seconds_[d] * static_cast<double>(decode_rows) /
                       static_cast<double>(kMaxTrackedRows)
                 : decode_step_seconds_[d];
    }
  }
  return 0;
}

}  // namespace abcd
