#include "engine/attention/abc_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/attention/softmax_state.h"
#include "engine/ops/vector_clones.h"

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

ABCD_VECTOR_CLONES void AbcUpdateHead(const float* k, const float* v, const float* control,
                                      int slots, int head_dim, float* keys, float* values,
                                      float* log_norm) {
  for (int j = 0; j < slots; ++j) {
    const float a = control[j];
    const float old = log_norm[j];
    // L' = logaddexp(L, a); the first token (L = -inf) gets weight exactly 1.
    const float updated = std::isinf(old) && old < 0
                              ? a
                              : std::max(old, a) + std::log1p(std::exp(-std::abs(old - a)));
    const float w = std::exp(a - updated);
    float* key = keys + static_cast<int64_t>(j) * head_dim;
    float* value = values + static_cast<int64_t>(j) * head_dim;
    for (int c = 0; c < head_dim; ++c) {
      key[c] += w * (k[c] - key[c]);
      value[c] += w * (v[c] - value[c]);
    }
    log_norm[j] = updated;
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
