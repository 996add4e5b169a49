#include "engine/scheduler/speculation.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace abcd {

absl::Status ValidateSpeculativeParams(const SpeculativeParams& params, absl::string_view field) {
  if (params.mode == SpeculativeMode::kOff) return absl::OkStatus();
  if (params.k < 1 || params.k > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".k must be in [1, ", kMaxSpeculativeTokens, "], got ", params.k));
  }
  return absl::OkStatus();
}

absl::StatusOr<SpeculativeParams> ParseSpeculativeFlag(absl::string_view value,
                                                       absl::string_view flag) {
  SpeculativeParams params;
  if (value == "off" || value.empty()) return params;
  const absl::string_view mode = value.substr(0, value.find(':'));
  if (mode != "ngram") {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be off, ngram or ngram:K, got '", value, "'"));
  }
  params.mode = SpeculativeMode::kNgram;
  if (mode.size() < value.size()) {
    const absl::string_view k = value.substr(mode.size() + 1);
    if (!absl::SimpleAtoi(k, &params.k)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": K in ngram:K must be a number, got '", k, "'"));
    }
  }
  if (absl::Status status = ValidateSpeculativeParams(params, flag); !status.ok()) return status;
  return params;
}

std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> context, int k, int max_n) {
  const int64_t size = static_cast<int64_t>(context.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= 1; --n) {
    const std::span<const int32_t> suffix = context.last(static_cast<size_t>(n));
    // Latest first: an occurrence starting at `start` < size - n (not the suffix itself).
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(k, size - from);
      return std::vector<int32_t>(context.begin() + from, context.begin() + from + count);
    }
  }
  return {};
}

void DraftPacer::Observe(int drafted, int accepted) {
  if (k_ <= 0) return;
  if (drafted == 0) {
    skip_ = std::max(0, skip_ - 1);
    return;
  }
  if (accepted == 0) {
    ++misses_;
    current_ = std::max(1, current_ / 2);
    skip_ = std::min(kMaxSkip, (1 << std::min(misses_, 5)) - 1);
    return;
  }
  misses_ = 0;
  current_ = accepted == drafted ? std::min(k_, current_ * 2) : std::min(k_, accepted + 1);
}

}  // namespace abcd
