#include "engine/attention/softmax_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops/vector_clones.h"

namespace abcd {

ABCD_VECTOR_CLONES void SoftmaxReadHead(const float* q, const float* keys, const float* values,
                                        int64_t count, int64_t stride, int head_dim, float* out) {
  std::fill(out, out + head_dim, 0.0f);
  if (count == 0) return;
  // Online softmax: one pass, rescaling the running sum when the maximum grows.
  float running_max = -std::numeric_limits<float>::infinity();
  float denominator = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    const float* key = keys + i * stride;
    float score = 0.0f;
    for (int c = 0; c < head_dim; ++c) score += q[c] * key[c];
    if (score > running_max) {
      const float rescale = std::exp(running_max - score);
      denominator *= rescale;
      for (int c = 0; c < head_dim; ++c) out[c] *= rescale;
      running_max = score;
    }
    const float weight = std::exp(score - running_max);
    denominator += weight;
    const float* value = values + i * stride;
    for (int c = 0; c < head_dim; ++c) out[c] += weight * value[c];
  }
  const float inv = 1.0f / denominator;
  for (int c = 0; c < head_dim; ++c) out[c] *= inv;
}

void SoftmaxState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  KvCache& kv = *state.kv;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  std::copy(row.k + offset, row.k + offset + head_dim_, kv.key(state.position) + offset);
  std::copy(row.v + offset, row.v + offset + head_dim_, kv.value(state.position) + offset);
}

void SoftmaxState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const KvCache& kv = *state.kv;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  const int64_t count = std::min(kv.length, state.position + 1);
  SoftmaxReadHead(q + offset, kv.keys.data() + offset, kv.values.data() + offset, count, kv.width,
                  head_dim_, out + offset);
}

// Window layout: keys [window, d_model] then values [window, d_model]; token p lives in row
// p % window.
int64_t WindowState::FixedFloats() const {
  return 2 * static_cast<int64_t>(window_) * n_heads_ * head_dim_;
}

void WindowState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

void WindowState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  const int64_t slot = state.position % window_;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  std::copy(row.k + offset, row.k + offset + head_dim_, state.fixed + slot * width + offset);
  std::copy(row.v + offset, row.v + offset + head_dim_,
            state.fixed + (window_ + slot) * width + offset);
}

void WindowState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  // Softmax is order-independent, so the ring can be read in storage order.
  const int64_t count = std::min<int64_t>(state.position + 1, window_);
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  SoftmaxReadHead(q + offset, state.fixed + offset, state.fixed + window_ * width + offset, count,
                  width, head_dim_, out + offset);
}

}  // namespace abcd
