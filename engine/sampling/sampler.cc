#include "engine/sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
constexpr int32_t kDrawBlock = 64;  // ids per block of the id-order draw
constexpr int kArgmaxLanes = 8;
// Top-p's candidate bins: (max - logit) / T in steps of 1 / kBinsPerNat, the last one open.
constexpr int kNucleusBins = 64;
constexpr float kBinsPerNat = 4.0f;

// The value a logit is ordered by: NaN counts as -inf (masked); -0 equals +0.
inline float OrderKey(float logit) { return logit == logit ? logit : kNegativeInfinity; }

// Highest key first, ties by id: a strict total order, so the sorted order is unique.
struct Higher {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    const float ka = OrderKey(logits[a]);
    const float kb = OrderKey(logits[b]);
    return ka > kb || (ka == kb && a < b);
  }
};

// Non-increasing in the logit, so the ids of the bins <= b are a prefix of the sorted order.
inline int NucleusBin(float max_logit, float logit, float scale) {
  const float d = (max_logit - logit) * scale;  // NaN (a NaN logit) and +inf: the last bin
  return d < static_cast<float>(kNucleusBins - 1) ? static_cast<int>(d) : kNucleusBins - 1;
}

// The hot loops of the draw, one clone per instruction-set level (vector_clones.h). Each lane
// does the same IEEE operations in the same order in every clone, so the results do not depend
// on the CPU.

// The highest logit (NaN ignored; -inf when there is none), over independent lanes.
ABCD_VECTOR_CLONES float MaxLogit(const float* x, size_t n) {
  float lanes[kArgmaxLanes];
  std::fill(lanes, lanes + kArgmaxLanes, kNegativeInfinity);
  size_t i = 0;
  for (; i + kArgmaxLanes <= n; i += kArgmaxLanes) {
    for (int l = 0; l < kArgmaxLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  float m = kNegativeInfinity;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (float v : lanes) m = v > m ? v : m;
  return m;
}

// The highest x[i] below `bound` (-inf when there is none), over independent lanes.
ABCD_VECTOR_CLONES float MaxBelow(const float* x, size_t n, float bound) {
  float lanes[kArgmaxLanes];
  std::fill(lanes, lanes + kArgmaxLanes, kNegativeInfinity);
  size_t i = 0;
  for (; i + kArgmaxLanes <= n; i += kArgmaxLanes) {
    for (int l = 0; l < kArgmaxLanes; ++l) {
      lanes[l] = x[i + l] < bound && x[i + l] > lanes[l] ? x[i + l] : lanes[l];
    }
  }
  float m = kNegativeInfinity;
  for (; i < n; ++i) m = x[i] < bound && x[i] > m ? x[i] : m;
  for (float v : lanes) m = v > m ? v : m;
  return m;
}

// y[i] = (x[i] - max) / t, NaN counting as masked (-inf).
ABCD_VECTOR_CLONES void ScaleLogits(const float* __restrict x, size_t n, float max_logit, float t,
                                    float* __restrict y) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] == x[i] ? (x[i] - max_logit) / t : kNegativeInfinity;
}

// sums[b] = the sum of w[b * kDrawBlock, (b + 1) * kDrawBlock) over eight lanes; returns the
// sum of the sums, in order.
ABCD_VECTOR_CLONES double BlockSums(const float* w, size_t blocks, double* sums) {
  double total = 0.0;
  for (size_t b = 0; b < blocks; ++b) {
    double lanes[kArgmaxLanes] = {};
    for (int32_t j = 0; j < kDrawBlock; j += kArgmaxLanes) {
      for (int l = 0; l < kArgmaxLanes; ++l) lanes[l] += w[b * kDrawBlock + j + l];
    }
    sums[b] = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
              ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    total += sums[b];
  }
  return total;
}

// ids[0, count) = the i < n where keep(x[i]), in order: eight tests into a bit mask, then one
// store per kept id (no branch per id, so a dense or a sparse set costs the same).
template <typename Keep>
int32_t Collect(const float* x, size_t n, Keep keep, int32_t* ids) {
  int32_t count = 0;
  size_t i = 0;
  for (; i + kArgmaxLanes <= n; i += kArgmaxLanes) {
    unsigned bits = 0;
    for (int l = 0; l < kArgmaxLanes; ++l) bits |= (keep(x[i + l]) ? 1u : 0u) << l;
    for (; bits != 0; bits &= bits - 1) {
      ids[count++] = static_cast<int32_t>(i) + std::countr_zero(bits);
    }
  }
  for (; i < n; ++i) {
    if (keep(x[i])) ids[count++] = static_cast<int32_t>(i);
  }
  return count;
}

}  // namespace

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
  kept_ = -1;
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
  const float max_logit = MaxLogit(scratch_.data(), scratch_.size());
  kept_ = -1;
  if (!(max_logit >
        kNegativeInfinity)) {  // every id masked: the lowest id, as the full sort keeps it
    NextUniform();
    return 0;
  }
  const int32_t k = params_.top_k > 0 && params_.top_k < vocab ? params_.top_k : 0;
  int32_t token = -1;
  if (k > 0) {
    token = DrawSorted(SelectTopK(k), 0.0, kNegativeInfinity, /*complete=*/true);
  } else if (params_.top_p < 1.0f) {
    double tail_mass = 0.0;
    const int32_t n = SelectNucleusCandidates(max_logit, ComputeWeights(max_logit), &tail_mass);
    token = DrawSorted(n, tail_mass, kNegativeInfinity, /*complete=*/n == vocab);
  } else if (params_.min_p > 0.0f) {
    // p >= min_p <=> (logit - max) / T >= log(min_p); the candidates reach 1e-3 nats below.
    const double bound =
        max_logit + params_.temperature * (std::log(static_cast<double>(params_.min_p)) - 1e-3);
    float best_excluded = kNegativeInfinity;
    const int32_t n =
        SelectAtLeast(std::nextafter(static_cast<float>(bound), kNegativeInfinity), &best_excluded);
    token = DrawSorted(n, 0.0, best_excluded, /*complete=*/true);
  } else {
    return DrawAll(max_logit);
  }
  return token >= 0 ? token : DrawSorted(SelectAll(), 0.0, kNegativeInfinity, /*complete=*/true);
}

double Sampler::ComputeWeights(float max_logit) {
  const size_t vocab = scratch_.size();
  const size_t blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
  const size_t padded = blocks * kDrawBlock;
  weights_.resize(padded);
  ScaleLogits(scratch_.data(), vocab, max_logit, params_.temperature, weights_.data());
  std::fill(weights_.begin() + static_cast<ptrdiff_t>(vocab), weights_.end(), kNegativeInfinity);
  cpu::ExpArray(weights_.data(), static_cast<int64_t>(padded), weights_.data());
  block_sums_.resize(blocks);
  return BlockSums(weights_.data(), blocks, block_sums_.data());
}

int32_t Sampler::DrawAll(float max_logit) {
  const int32_t vocab = static_cast<int32_t>(scratch_.size());
  double target = NextUniform() * ComputeWeights(max_logit);
  // Walk the blocks, then the ids of the block the target falls in. An id of weight 0 (masked)
  // never takes the target below 0, which stays >= 0 until the id that is drawn.
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    if (!(target < block_sums_[b])) {
      target -= block_sums_[b];
      continue;
    }
    const int32_t begin = static_cast<int32_t>(b) * kDrawBlock;
    const int32_t end = std::min(vocab, begin + kDrawBlock);
    int32_t last_positive = -1;
    for (int32_t id = begin; id < end; ++id) {
      if (!(weights_[id] > 0.0f)) continue;
      last_positive = id;
      target -= weights_[id];
      if (target < 0.0) return id;
    }
    if (last_positive >= 0) return last_positive;  // rounding: the block's last drawable id
  }
  // Rounding (or a +inf logit): the last id of positive weight, else the top one.
  for (int32_t id = vocab - 1; id >= 0; --id) {
    if (weights_[id] > 0.0f) return id;
  }
  return static_cast<int32_t>(std::find(scratch_.begin(), scratch_.end(), max_logit) -
                              scratch_.begin());
}

int32_t Sampler::SelectTopK(int32_t k) {
  // One pass that keeps the ids above the running k-th best key in a buffer of at most
  // max(2k, 256) entries, cut back to the best k whenever it fills. An id equal to the k-th best
  // comes after every buffered one, so it loses the tie: the best k by (key, id) survive.
  const auto higher = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  const size_t vocab = scratch_.size();
  const size_t capacity = std::max<size_t>(2 * static_cast<size_t>(k), 256);
  top_.clear();
  top_.reserve(capacity);
  float kth = kNegativeInfinity;
  bool cut = false;
  for (size_t i = 0; i < vocab; ++i) {
    const float key = OrderKey(scratch_[i]);
    if (cut && !(key > kth)) continue;
    top_.emplace_back(key, static_cast<int32_t>(i));
    if (top_.size() == capacity) {
      std::nth_element(top_.begin(), top_.begin() + (k - 1), top_.end(), higher);
      top_.resize(k);
      kth = top_[k - 1].first;
      cut = true;
    }
  }
  if (top_.size() > static_cast<size_t>(k)) {
    std::nth_element(top_.begin(), top_.begin() + (k - 1), top_.end(), higher);
    top_.resize(k);
  }
  std::sort(top_.begin(), top_.end(), higher);
  order_.resize(k);
  for (int32_t i = 0; i < k; ++i) order_[i] = top_[i].second;
  return k;
}

int32_t Sampler::SelectNucleusCandidates(float max_logit, double total, double* tail_mass) {
  // The mass per bin of (max - logit) / T (from ComputeWeights' weights); the candidates are the
  // bins from the top until they hold top_p of the total with a margin for the weights' rounding
  // (exp within 2 ulp). Bins are monotone in the logit, so the candidates are a prefix of the
  // sorted order that contains the nucleus; DrawSorted checks that its cut lies inside them.
  const float scale = kBinsPerNat / params_.temperature;
  double mass[kNucleusBins] = {};
  const size_t vocab = scratch_.size();
  for (size_t i = 0; i < vocab; ++i) {
    if (weights_[i] > 0.0f) mass[NucleusBin(max_logit, scratch_[i], scale)] += weights_[i];
  }
  const double need = static_cast<double>(params_.top_p) * total * (1.0 + 1e-5);
  double cum = 0.0;
  int last = kNucleusBins - 1;
  for (int b = 0; b < kNucleusBins - 1; ++b) {
    cum += mass[b];
    if (cum >= need) {
      last = b;
      break;
    }
  }
  *tail_mass = 0.0;
  if (last == kNucleusBins - 1) return SelectAll();
  for (int b = last + 1; b < kNucleusBins; ++b) *tail_mass += mass[b];
  // bin <= last < kNucleusBins - 1 <=> (max - logit) * scale < last + 1 (NaN and -inf: false).
  const float end = static_cast<float>(last + 1);
  order_.resize(vocab);
  const int32_t n = Collect(
      scratch_.data(), vocab, [&](float l) { return (max_logit - l) * scale < end; },
      order_.data());
  std::sort(order_.begin(), order_.begin() + n, Higher{scratch_.data()});
  return n;
}

int32_t Sampler::SelectAtLeast(float bound, float* best_excluded) {
  const size_t vocab = scratch_.size();
  order_.resize(vocab);
  const int32_t n = Collect(
      scratch_.data(), vocab, [bound](float l) { return l >= bound; }, order_.data());
  *best_excluded = MaxBelow(scratch_.data(), vocab, bound);  // NaN: neither kept nor the best
  std::sort(order_.begin(), order_.begin() + n, Higher{scratch_.data()});
  return n;
}

int32_t Sampler::SelectAll() {
  order_.resize(scratch_.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), Higher{scratch_.data()});
  return static_cast<int32_t>(order_.size());
}

int32_t Sampler::DrawSorted(int32_t n, double tail_mass, float best_excluded, bool complete) {
  if (n == 0) return -1;
  int32_t keep = n;
  // Masked ids (-inf) sort last: they are never drawn, not even by the rounding fallback below.
  while (keep > 1 && OrderKey(scratch_[order_[keep - 1]]) == kNegativeInfinity) --keep;
  const float max_logit = scratch_[order_[0]];
  const double temperature = params_.temperature;
  probs_.resize(keep);
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    probs_[i] = std::exp((static_cast<double>(scratch_[order_[i]]) - max_logit) / temperature);
    total += probs_[i];
  }
  total += tail_mass;
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    int32_t cut = -1;
    for (int32_t i = 0; i < keep; ++i) {
      mass += probs_[i] / total;
      if (mass >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    if (cut < 0 && !complete) return -1;  // the nucleus reaches past the candidates
    if (cut > 0) keep = cut;
    total = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
  }
  if (params_.min_p > 0.0f) {
    // probs_[0] is the most likely token's (unnormalised) probability; it is always kept.
    const double floor = static_cast<double>(params_.min_p) * probs_[0];
    int32_t cut = 1;
    while (cut < keep && probs_[cut] >= floor) ++cut;
    if (cut == n &&
        std::exp((static_cast<double>(best_excluded) - max_logit) / temperature) >= floor) {
      return -1;  // the first id left out would be kept too
    }
    keep = cut;
    total = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
  }
  kept_ = keep;
  double target = NextUniform() * total;
  for (int32_t i = 0; i < keep; ++i) {
    target -= probs_[i];
    if (target < 0.0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace abcd
