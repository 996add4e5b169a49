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
    const int64_t length = n >= 3 ? k : n == 2 ? std::max(1, k / 2) : 1;
    // Latest first (an occurrence starting at `start` < size - n, not the suffix itself); one
    // so close to the end that fewer tokens follow it gives way to the latest that has
    // `length` (in a run of one token, the latest match is followed by a single token).
    int64_t best_from = -1, best_count = 0;
    for (int64_t start = size - n - 1; start >= 0 && best_count < length; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(length, size - from);
      if (count > best_count) best_from = from, best_count = count;
    }
    if (best_count > 0) {
      return std::vector<int32_t>(context.begin() + best_from,
                                  context.begin() + best_from + best_count);
    }
  }
  return {};
}

void DraftPacer::Observe(int drafted, int accepted) {
  if (k_ <= 0) return;
  if (drafted == 0) {
    skip_ = std::max(0, skip_ - 1);
  } else if (accepted == 0) {
    ++misses_;
    skip_ = std::min(kMaxSkip, (1 << std::min(misses_, 4)) - 1);
  } else {
    misses_ = 0;
  }
}

}  // namespace abcd
