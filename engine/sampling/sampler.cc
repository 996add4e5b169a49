#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace abcd {

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f && p.temperature <= 100.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature must be in [0, 100], got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_k must be >= 0, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.repetition_penalty must be in (0, 10], got ", p.repetition_penalty));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), state_(params.seed ^ 0x9e3779b97f4a7c15ull) {}

double Sampler::NextUniform() {
  // splitmix64: tiny, fast and identical everywhere.
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> context) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  scratch_.assign(logits.begin(), logits.end());
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t id : context) {
      if (id < 0 || id >= vocab) continue;
      float& l = scratch_[id];
      // Applied once per distinct token: mark by comparing with the original logit.
      if (l != logits[id]) continue;
      l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  if (params_.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(scratch_.begin(), scratch_.end()) -
                                scratch_.begin());
  }
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  int32_t keep = vocab;
  if (params_.top_k > 0 && params_.top_k < vocab) keep = params_.top_k;
  // Highest logits first (ties by id, so the order is deterministic).
  auto higher = [this](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), higher);
  const float max_logit = scratch_[order_[0]];
  std::vector<double> probs(keep);
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    probs[i] =
        std::exp((static_cast<double>(scratch_[order_[i]]) - max_logit) / params_.temperature);
    total += probs[i];
  }
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    int32_t cut = keep;
    for (int32_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
  }
  double target = NextUniform() * total;
  for (int32_t i = 0; i < keep; ++i) {
    target -= probs[i];
    if (target < 0.0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace abcd
