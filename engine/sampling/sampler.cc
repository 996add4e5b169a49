#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.min_p must be in [0, 1], got ", p.min_p));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.presence_penalty must be in [-2, 2], got ", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.frequency_penalty must be in [-2, 2], got ", p.frequency_penalty));
  }
  if (p.logit_bias.size() > kMaxLogitBias) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias has ", p.logit_bias.size(),
                                                   " entries, at most ", kMaxLogitBias));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.logit_bias: token id ", id, " must be >= 0"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.logit_bias[", id, "] must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

bool NeedsHostSampling(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.min_p > 0.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f || !p.logit_bias.empty();
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

void Sampler::AdjustLogits(std::span<const float> logits, std::span<const int32_t> context) {
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
  for (const auto& [id, count] : generated_) {
    if (id >= vocab) continue;
    scratch_[id] -=
        params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && id < vocab) scratch_[id] += bias;
  }
}

void Sampler::ApplyMask(const TokenMask& mask) {
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  const size_t vocab = scratch_.size();
  for (size_t w = 0; w * 64 < vocab; ++w) {
    const uint64_t word = w < mask.bits.size() ? mask.bits[w] : 0;
    if (word == ~uint64_t{0}) continue;
    const size_t end = std::min(vocab, (w + 1) * 64);
    for (size_t id = w * 64; id < end; ++id) {
      if (((word >> (id % 64)) & 1) == 0) scratch_[id] = kBanned;
    }
  }
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> context,
                        const TokenMask* mask) {
  AdjustLogits(logits, context);
  if (mask != nullptr) ApplyMask(*mask);
  const int32_t token =
      params_.temperature == 0.0f
          ? static_cast<int32_t>(std::max_element(scratch_.begin(), scratch_.end()) -
                                 scratch_.begin())
          : Draw();
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) ++generated_[token];
  return token;
}

int32_t Sampler::Draw() {
  const int32_t vocab = static_cast<int32_t>(scratch_.size());
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  int32_t keep = vocab;
  if (params_.top_k > 0 && params_.top_k < vocab) keep = params_.top_k;
  // Highest logits first (ties by id, so the order is deterministic).
  auto higher = [this](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), higher);
  // Masked ids (-inf) sort last: they are never drawn, not even by the rounding fallback below.
  while (keep > 1 && std::isinf(scratch_[order_[keep - 1]]) && scratch_[order_[keep - 1]] < 0) {
    --keep;
  }
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
  if (params_.min_p > 0.0f) {
    // probs[0] is the most likely token's (unnormalised) probability; it is always kept.
    const double floor = static_cast<double>(params_.min_p) * probs[0];
    int32_t cut = 1;
    while (cut < keep && probs[cut] >= floor) ++cut;
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
