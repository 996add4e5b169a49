#include "engine/attention/gsa_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "engine/attention/gsa_chunk.h"
#include "engine/attention/mixer_math.h"
#include "engine/attention/slot_scan.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/vector_math.h"

namespace abcd {

GsaState::GsaState(int heads, int kv_heads, int key_dim, int value_dim, int slots,
                   float gate_normalizer, MixerFeatureMap feature_map,
                   std::vector<float> t2r_weight, std::vector<float> norm_weight, float norm_eps)
    : heads_(heads),
      kv_heads_(kv_heads),
      key_dim_(key_dim),
      value_dim_(value_dim),
      slots_(slots),
      gate_normalizer_(gate_normalizer),
      feature_map_(feature_map),
      t2r_weight_(std::move(t2r_weight)),
      norm_weight_(std::move(norm_weight)),
      norm_eps_(norm_eps) {}

int64_t GsaState::FixedFloats() const { return int64_t{heads_} * slots_ * (key_dim_ + value_dim_); }

void GsaState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

int64_t GsaState::PreparedWidth() const {
  return int64_t{heads_} * key_dim_ + int64_t{kv_heads_} * (key_dim_ + value_dim_ + slots_);
}

KernelRowLayout GsaState::PreparedLayout() const {
  const int64_t q = int64_t{heads_} * key_dim_;
  const int64_t k = int64_t{kv_heads_} * key_dim_;
  const int64_t v = int64_t{kv_heads_} * value_dim_;
  return {q, q + k, q + k + v, PreparedWidth()};
}

void GsaState::FeatureMap(float* x, int count) const {
  switch (feature_map_) {
    case MixerFeatureMap::kSwish:
      cpu::SiluInPlace(x, int64_t{count} * key_dim_);
      return;
    case MixerFeatureMap::kRelu:
      for (int64_t i = 0; i < int64_t{count} * key_dim_; ++i) x[i] = std::max(x[i], 0.0f);
      return;
    case MixerFeatureMap::kT2r: {
      absl::InlinedVector<float, 512> in(static_cast<size_t>(key_dim_));
      for (int h = 0; h < count; ++h) {
        float* head = x + int64_t{h} * key_dim_;
        std::copy(head, head + key_dim_, in.begin());
        for (int o = 0; o < key_dim_; ++o) {
          const float* w = t2r_weight_.data() + int64_t{o} * key_dim_;
          float sum = 0.0f;
          for (int i = 0; i < key_dim_; ++i) sum += w[i] * in[static_cast<size_t>(i)];
          head[o] = std::max(sum, 0.0f);
        }
      }
      return;
    }
    case MixerFeatureMap::kNone:
      return;
  }
}

void GsaState::PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                           int64_t rows, std::span<const StateRef>, float* prepared) const {
  const int64_t width = PreparedWidth();
  const KernelRowLayout layout = PreparedLayout();
  const float inv_normalizer = 1.0f / gate_normalizer_;
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* out = prepared + r * width;
    std::copy(projection + r * projection_width, projection + r * projection_width + width, out);
    FeatureMap(out, heads_);
    FeatureMap(out + layout.k, kv_heads_);
    cpu::SiluInPlace(out + layout.v, int64_t{kv_heads_} * value_dim_);
    // alpha = exp(logsigmoid(a) / n), the forget gate of each slot.
    float* gate = out + layout.extra;
    for (int64_t i = 0; i < int64_t{kv_heads_} * slots_; ++i) {
      gate[i] = std::exp(LogSigmoid(gate[i]) * inv_normalizer);
    }
  });
}

void GsaState::UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const {
  const int kv = head / (heads_ / kv_heads_);
  const float* k = row.k + int64_t{kv} * key_dim_;
  const float* v = row.v + int64_t{kv} * value_dim_;
  const float* alpha = row.extra + int64_t{kv} * slots_;
  float* keys = state.fixed + int64_t{head} * slots_ * (key_dim_ + value_dim_);
  float* values = keys + int64_t{slots_} * key_dim_;
  for (int s = 0; s < slots_; ++s) {
    const float a = alpha[s], w = 1.0f - a;
    cpu::DecayAdd(keys + int64_t{s} * key_dim_, a, w, k, key_dim_);
    cpu::DecayAdd(values + int64_t{s} * value_dim_, a, w, v, value_dim_);
  }
}

void GsaState::ReadHead(int head, const float* q, const StateRef& state, float* out) const {
  const float* query = q + int64_t{head} * key_dim_;
  const float* keys = state.fixed + int64_t{head} * slots_ * (key_dim_ + value_dim_);
  const float* values = keys + int64_t{slots_} * key_dim_;
  absl::InlinedVector<float, 256> p(static_cast<size_t>(slots_));
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < slots_; ++s) {
    const float dot = cpu::Dot(query, keys + int64_t{s} * key_dim_, key_dim_);
    p[static_cast<size_t>(s)] = dot;
    max_logit = std::max(max_logit, dot);
  }
  float sum = 0.0f;
  for (float& x : p) {
    x = std::exp(x - max_logit);
    sum += x;
  }
  float* y = out + int64_t{head} * value_dim_;
  std::fill(y, y + value_dim_, 0.0f);
  for (int s = 0; s < slots_; ++s) {
    cpu::Axpy(y, p[static_cast<size_t>(s)] / sum, values + int64_t{s} * value_dim_, value_dim_);
  }
}

void GsaState::FinishRows(CpuContext& ctx, const float*, int64_t rows, float* attended) const {
  const int64_t width = int64_t{heads_} * value_dim_;
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* row = attended + r * width;
    cpu::SiluInPlace(row, width);
    cpu::RmsNorm(row, 1, width, norm_weight_.data(), norm_eps_, row);
  });
}

void GsaState::ScanHead(int head, const ScanArgs& args, const RowRun& run) const {
  const int kv = head / (heads_ / kv_heads_);
  if (run.count >= kGsaChunkMinRows &&
      int64_t{slots_} * (key_dim_ + value_dim_) >= kGsaChunkMinStateFloats) {
    // fla's chunk form (gsa_chunk.h). Every row of a run is one sequence's: one state.
    const int64_t first = run.first * args.width;
    GsaHeadRows rows;
    rows.q = args.rows + first + int64_t{head} * key_dim_;
    rows.k = args.rows + first + args.layout.k + int64_t{kv} * key_dim_;
    rows.v = args.rows + first + args.layout.v + int64_t{kv} * value_dim_;
    rows.alpha = args.rows + first + args.layout.extra + int64_t{kv} * slots_;
    rows.stride = args.width;
    rows.out = args.out + run.first * args.out_width + int64_t{head} * value_dim_;
    rows.out_stride = args.out_width;
    rows.rows = run.count;
    float* keys = args.states[static_cast<size_t>(run.first)].fixed +
                  int64_t{head} * slots_ * (key_dim_ + value_dim_);
    GsaChunkScan(rows, key_dim_, value_dim_, slots_, keys, keys + int64_t{slots_} * key_dim_);
    return;
  }
  // Per row one pass over the keys (fold and score) and one over the values (fold and mix):
  // the state is read and written once per row (slot_scan.h).
  absl::InlinedVector<float, 256> buffer(2 * static_cast<size_t>(slots_));
  float* scores = buffer.data();
  float* p = scores + slots_;
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    const KeyValueRow row = args.KeyValueOf(r);
    float* keys = args.states[static_cast<size_t>(r)].fixed +
                  int64_t{head} * slots_ * (key_dim_ + value_dim_);
    float* values = keys + int64_t{slots_} * key_dim_;
    const float* alpha = row.extra + int64_t{kv} * slots_;
    const float* q = args.rows + r * args.width + int64_t{head} * key_dim_;
    FoldSlotsAndScore(SlotFold::kDecay, row.k + int64_t{kv} * key_dim_, alpha, q, slots_, key_dim_,
                      keys, scores);
    SlotSoftmax(scores, nullptr, slots_, p);
    FoldSlotsAndMix(SlotFold::kDecay, row.v + int64_t{kv} * value_dim_, alpha, p, slots_,
                    value_dim_, values, args.out + r * args.out_width + int64_t{head} * value_dim_);
  }
}

}  // namespace abcd
