#include "engine/attention/abc_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/attention/softmax_state.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {

int64_t AbcState::FixedFloats() const { return n_heads_ * HeadFloats(); }

void AbcState::Init(float* fixed) const {
  for (int h = 0; h < n_heads_; ++h) {
    float* head = fixed + h * HeadFloats();
    const int64_t means = 2 * static_cast<int64_t>(slots_) * head_dim_;
    std::fill(head, head + means, 0.0f);
    std::fill(head + means, head + means + slots_, -std::numeric_limits<float>::infinity());
  }
}

namespace {

// Folds k, v into every slot with its weight w[j] (running means).
ABCD_VECTOR_CLONES void FoldIntoSlots(const float* k, const float* v, const float* w, int slots,
                                      int head_dim, float* keys, float* values) {
  for (int j = 0; j < slots; ++j) {
    const float wj = w[j];
    float* key = keys + static_cast<int64_t>(j) * head_dim;
    float* value = values + static_cast<int64_t>(j) * head_dim;
    for (int c = 0; c < head_dim; ++c) {
      key[c] += wj * (k[c] - key[c]);
      value[c] += wj * (v[c] - value[c]);
    }
  }
}

}  // namespace

void AbcUpdateHead(const float* k, const float* v, const float* control, int slots, int head_dim,
                   float* keys, float* values, float* log_norm) {
  // Slots in chunks, each chunk's normalisers and weights as whole-array exp/log1p passes:
  //   L' = max(L, a) + log1p(exp(-|L - a|)),  w = exp(a - L')
  // (L = -inf on the first token gives L' = a and w = 1 exactly).
  constexpr int kChunk = 64;
  float spread[kChunk], weight[kChunk];
  for (int first = 0; first < slots; first += kChunk) {
    const int n = std::min(kChunk, slots - first);
    const float* a = control + first;
    float* old = log_norm + first;
    for (int j = 0; j < n; ++j) spread[j] = -std::fabs(old[j] - a[j]);
    for (int j = 0; j < n; ++j) {
      if (std::isinf(old[j]) && old[j] < 0) spread[j] = -std::numeric_limits<float>::infinity();
    }
    cpu::ExpArray(spread, n, spread);
    cpu::Log1pUnitArray(spread, n, spread);
    for (int j = 0; j < n; ++j) {
      const float updated = std::max(old[j], a[j]) + spread[j];
      weight[j] = a[j] - updated;
      old[j] = updated;
    }
    cpu::ExpArray(weight, n, weight);
    FoldIntoSlots(k, v, weight, n, head_dim, keys + static_cast<int64_t>(first) * head_dim,
                  values + static_cast<int64_t>(first) * head_dim);
  }
}

void AbcState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  float* head = state.fixed + h * HeadFloats();
  const int64_t means = static_cast<int64_t>(slots_) * head_dim_;
  AbcUpdateHead(row.k + h * head_dim_, row.v + h * head_dim_, row.extra + h * slots_, slots_,
                head_dim_, head, head + means, head + 2 * means);
}

void AbcState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  // Reading n slots is softmax attention over n (key, value) pairs.
  const float* head = state.fixed + h * HeadFloats();
  const int64_t means = static_cast<int64_t>(slots_) * head_dim_;
  SoftmaxReadHead(q + h * head_dim_, head, head + means, slots_, head_dim_, head_dim_,
                  out + h * head_dim_);
}

}  // namespace abcd
