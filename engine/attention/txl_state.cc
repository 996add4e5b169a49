#include "engine/attention/txl_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "engine/attention/softmax_state.h"
#include "engine/ops/packed_matrix.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

// bias[s] = position_terms[min(r, last_term)] for ring row s holding the token r positions
// back: the ring is read in storage order (softmax does not care about order), so rows
// [0, newest] are r = newest - s and, once the ring is full, rows (newest, span) wrap around.
void RingPositionBias(int64_t position, int64_t span, int64_t count, const float* position_terms,
                      int64_t last_term, float* bias) {
  const int64_t newest = position % span;
  for (int64_t s = 0; s <= newest; ++s) bias[s] = position_terms[std::min(newest - s, last_term)];
  for (int64_t s = newest + 1; s < count; ++s) {
    bias[s] = position_terms[std::min(newest - s + span, last_term)];
  }
}

}  // namespace

TxlState::TxlState(int n_heads, int head_dim, int memory, int clamp_len, KvFormat ring_format,
                   std::vector<float> table, std::vector<float> u, std::vector<float> v)
    : n_heads_(n_heads),
      head_dim_(head_dim),
      memory_(memory),
      clamp_len_(clamp_len),
      ring_format_(ring_format),
      span_(int64_t{memory} + 1),
      table_(std::move(table)),
      u_(std::move(u)),
      v_(std::move(v)) {}

std::vector<float> TxlState::BuildTable(const std::vector<float>& w_r, int64_t out_width,
                                        int64_t d_model, int64_t rows) {
  const int64_t half = d_model / 2;
  std::vector<double> frequencies(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    frequencies[i] =
        std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d_model));
  }
  std::vector<float> table(static_cast<size_t>(rows * out_width));
  std::vector<double> sinusoid(static_cast<size_t>(d_model));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(r) * frequencies[i];
      sinusoid[i] = std::sin(angle);
      sinusoid[half + i] = std::cos(angle);
    }
    for (int64_t o = 0; o < out_width; ++o) {
      const float* w = w_r.data() + o * d_model;
      double sum = 0.0;
      for (int64_t i = 0; i < d_model; ++i) sum += static_cast<double>(w[i]) * sinusoid[i];
      table[r * out_width + o] = static_cast<float>(sum);
    }
  }
  return table;
}

// Layout: keys [M + 1, H * dh] then values [M + 1, H * dh], as fp32, or as bf16 / f16 packed two
// per float of the block (uint16 view of the same bytes); token p lives in row p mod (M + 1).
int64_t TxlState::FixedFloats() const {
  const int64_t elements = 2 * span_ * n_heads_ * head_dim_;
  return ring_format_ == KvFormat::kF32 ? elements : elements / 2;
}

void TxlState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

void TxlState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  const int64_t slot = state.position % span_;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  if (ring_format_ == KvFormat::kF32) {
    std::copy_n(row.k + offset, head_dim_, state.fixed + slot * width + offset);
    std::copy_n(row.v + offset, head_dim_, state.fixed + (span_ + slot) * width + offset);
    return;
  }
  uint16_t (*const to)(float) = ring_format_ == KvFormat::kBf16 ? FloatToBf16 : FloatToHalf;
  uint16_t* ring = reinterpret_cast<uint16_t*>(state.fixed);
  uint16_t* key = ring + slot * width + offset;
  uint16_t* value = ring + (span_ + slot) * width + offset;
  for (int c = 0; c < head_dim_; ++c) {
    key[c] = to(row.k[offset + c]);
    value[c] = to(row.v[offset + c]);
  }
}

void TxlState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const int dh = head_dim_;
  const int64_t width = static_cast<int64_t>(n_heads_) * dh;
  const int64_t offset = static_cast<int64_t>(h) * dh;
  const int64_t count = std::min<int64_t>(state.position + 1, span_);
  const int64_t last_term = std::min<int64_t>(count - 1, std::min(memory_, clamp_len_));
  absl::InlinedVector<float, 256> qu(static_cast<size_t>(dh)), qv(static_cast<size_t>(dh));
  for (int c = 0; c < dh; ++c) {
    qu[c] = q[offset + c] + u_[offset + c];
    qv[c] = q[offset + c] + v_[offset + c];
  }
  // (q + v) . p[r] for every distance this read uses below the clamp (the rest reuse p[C]).
  absl::InlinedVector<float, 1024> terms(static_cast<size_t>(last_term + 1));
  for (int64_t r = 0; r <= last_term; ++r) {
    terms[r] = cpu::Dot(qv.data(), table_.data() + r * width + offset, dh);
  }
  absl::InlinedVector<float, 1024> bias(static_cast<size_t>(count));
  RingPositionBias(state.position, span_, count, terms.data(), last_term, bias.data());
  if (ring_format_ == KvFormat::kF32) {
    SoftmaxReadHead(qu.data(), state.fixed + offset, state.fixed + span_ * width + offset,
                    bias.data(), count, width, dh, out + offset);
    return;
  }
  const uint16_t* ring = reinterpret_cast<const uint16_t*>(state.fixed);
  if (ring_format_ == KvFormat::kBf16) {
    SoftmaxReadHead(qu.data(), ring + offset, ring + span_ * width + offset, bias.data(), count,
                    width, dh, out + offset);
    return;
  }
  const F16* half_ring = reinterpret_cast<const F16*>(ring);
  SoftmaxReadHead(qu.data(), half_ring + offset, half_ring + span_ * width + offset, bias.data(),
                  count, width, dh, out + offset);
}

}  // namespace abcd
