#include "engine/attention/softmax_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {

namespace {

constexpr int64_t kScoreChunk = 256;

inline float Load(const float* p, int64_t i) { return p[i]; }
inline float Load(const uint16_t* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// scores[i] = q . keys[i] for `count` rows `stride` values apart. Four rows at a time, so the
// four horizontal sums at the end of each group overlap instead of queueing behind each other.
template <typename T>
ABCD_VECTOR_CLONES void Scores(const float* q, const T* keys, int64_t count, int64_t stride,
                               int head_dim, float* scores) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const T* k0 = keys + i * stride;
    const T* k1 = k0 + stride;
    const T* k2 = k1 + stride;
    const T* k3 = k2 + stride;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int c = 0; c < head_dim; ++c) {
      s0 += q[c] * Load(k0, c);
      s1 += q[c] * Load(k1, c);
      s2 += q[c] * Load(k2, c);
      s3 += q[c] * Load(k3, c);
    }
    scores[i] = s0;
    scores[i + 1] = s1;
    scores[i + 2] = s2;
    scores[i + 3] = s3;
  }
  for (; i < count; ++i) {
    const T* key = keys + i * stride;
    float score = 0.0f;
    for (int c = 0; c < head_dim; ++c) score += q[c] * Load(key, c);
    scores[i] = score;
  }
}

// out = out * rescale + sum_i weights[i] values[i].
template <typename T>
ABCD_VECTOR_CLONES void Accumulate(const float* weights, const T* values, int64_t count,
                                   int64_t stride, int head_dim, float rescale, float* out) {
  for (int c = 0; c < head_dim; ++c) out[c] *= rescale;
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const T* value = values + i * stride;
    for (int c = 0; c < head_dim; ++c) out[c] += w * Load(value, c);
  }
}

template <typename T>
void ReadHead(const float* q, const T* keys, const T* values, const float* bias, int64_t count,
              int64_t stride, int head_dim, float* out) {
  std::fill(out, out + head_dim, 0.0f);
  if (count == 0) return;
  // Chunks of rows: the scores of a chunk in one vector pass, exp over the chunk at once, the
  // running sum rescaled only when a chunk raises the maximum (flash-attention style).
  float scores[kScoreChunk];
  float running_max = -std::numeric_limits<float>::infinity();
  float denominator = 0.0f;
  for (int64_t first = 0; first < count; first += kScoreChunk) {
    const int64_t n = std::min(kScoreChunk, count - first);
    Scores(q, keys + first * stride, n, stride, head_dim, scores);
    if (bias != nullptr) {
      for (int64_t i = 0; i < n; ++i) scores[i] += bias[first + i];
    }
    float chunk_max = scores[0];
    for (int64_t i = 1; i < n; ++i) chunk_max = std::max(chunk_max, scores[i]);
    const float new_max = std::max(running_max, chunk_max);
    const float rescale = std::exp(running_max - new_max);  // 0 on the first chunk
    for (int64_t i = 0; i < n; ++i) scores[i] -= new_max;
    cpu::ExpArray(scores, n, scores);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += scores[i];
    denominator = denominator * rescale + sum;
    Accumulate(scores, values + first * stride, n, stride, head_dim, rescale, out);
    running_max = new_max;
  }
  const float inv = 1.0f / denominator;
  for (int c = 0; c < head_dim; ++c) out[c] *= inv;
}

}  // namespace

void SoftmaxReadHead(const float* q, const float* keys, const float* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadHead(q, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadHead(q, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const float* keys, const float* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out) {
  ReadHead(q, keys, values, bias, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values,
                     const float* bias, int64_t count, int64_t stride, int head_dim, float* out) {
  ReadHead(q, keys, values, bias, count, stride, head_dim, out);
}

void SoftmaxState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  state.kv->Write(state.position, offset, row.k + offset, row.v + offset, head_dim_);
}

void SoftmaxState::ReadHead(int g, const float* q, const StateRef& state, float* out) const {
  const KvCache& kv = *state.kv;
  const int64_t kv_offset = static_cast<int64_t>(g) * head_dim_;
  const int64_t count = std::min(kv.length, state.position + 1);
  const int group = q_heads_ / kv_heads_;
  for (int j = g * group; j < (g + 1) * group; ++j) {
    const int64_t offset = static_cast<int64_t>(j) * head_dim_;
    if (kv.bf16) {
      SoftmaxReadHead(q + offset, kv.keys16.data() + kv_offset, kv.values16.data() + kv_offset,
                      count, kv.width, head_dim_, out + offset);
    } else {
      SoftmaxReadHead(q + offset, kv.keys.data() + kv_offset, kv.values.data() + kv_offset, count,
                      kv.width, head_dim_, out + offset);
    }
  }
}

int64_t SoftmaxState::PreparedWidth() const {
  if (!prepared()) return 0;
  return static_cast<int64_t>(q_heads_ + 2 * kv_heads_) * head_dim_;
}

KernelRowLayout SoftmaxState::PreparedLayout() const {
  const int64_t q = static_cast<int64_t>(q_heads_) * head_dim_, kv = KvWidth();
  return {q, q + kv, q + 2 * kv, q + 2 * kv};
}

int64_t SoftmaxState::AttendedWidth(int64_t d_model) const {
  return prepared() ? static_cast<int64_t>(q_heads_) * head_dim_ : d_model;
}

void SoftmaxState::PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                               int64_t rows, std::span<const StateRef> states,
                               float* prepared) const {
  const int64_t width = PreparedWidth();
  const int half = head_dim_ / 2;
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* out = prepared + r * width;
    std::copy(projection + r * projection_width, projection + r * projection_width + width, out);
    if (rope_inv_freq_.empty()) return;
    absl::InlinedVector<float, 256> cos_sin(static_cast<size_t>(2 * half));
    cpu::RopeAngles(states[static_cast<size_t>(r)].position, rope_inv_freq_.data(), half,
                    cos_sin.data());
    cpu::RotateHalf(out, q_heads_, half, cos_sin.data());                                   // q
    cpu::RotateHalf(out + int64_t{q_heads_} * head_dim_, kv_heads_, half, cos_sin.data());  // k
  });
}

// Window layout: keys [span, d_model] then values [span, d_model], span = (window - 1) *
// dilation + 1; token p lives in row p % span.
int64_t WindowState::FixedFloats() const { return 2 * span_ * n_heads_ * head_dim_; }

void WindowState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

void WindowState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  const int64_t slot = state.position % span_;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  std::copy(row.k + offset, row.k + offset + head_dim_, state.fixed + slot * width + offset);
  std::copy(row.v + offset, row.v + offset + head_dim_,
            state.fixed + (span_ + slot) * width + offset);
}

void WindowState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  // Softmax is order-independent, so the ring can be read in storage order.
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  if (dilation_ == 1) {
    const int64_t count = std::min<int64_t>(state.position + 1, window_);
    SoftmaxReadHead(q + offset, state.fixed + offset, state.fixed + window_ * width + offset, count,
                    width, head_dim_, out + offset);
    return;
  }
  // Dilated: positions t, t - d, ... (>= 0) sit at scattered ring rows; gather them (at most
  // `window` rows of this head) and read them as one block.
  const int64_t count = std::min<int64_t>(state.position / dilation_ + 1, window_);
  absl::InlinedVector<float, 1024> keys(static_cast<size_t>(count * head_dim_));
  absl::InlinedVector<float, 1024> values(keys.size());
  for (int64_t j = 0; j < count; ++j) {
    const int64_t slot = (state.position - j * dilation_) % span_;
    std::copy_n(state.fixed + slot * width + offset, head_dim_, keys.data() + j * head_dim_);
    std::copy_n(state.fixed + (span_ + slot) * width + offset, head_dim_,
                values.data() + j * head_dim_);
  }
  SoftmaxReadHead(q + offset, keys.data(), values.data(), count, head_dim_, head_dim_,
                  out + offset);
}

}  // namespace abcd
