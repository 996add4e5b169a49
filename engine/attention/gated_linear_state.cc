#include "engine/attention/gated_linear_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "engine/attention/gated_linear_chunk.h"
#include "engine/attention/mixer_math.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/vector_math.h"

namespace abcd {

GatedLinearState::GatedLinearState(Options options) : o_(std::move(options)) {
  if (o_.type == AttentionType::kRetnet) {
    for (int h = 0; h < o_.heads; ++h) {
      retnet_decay_.push_back(static_cast<float>(1.0 - std::exp2(-5.0 - h)));
    }
  }
}

int64_t GatedLinearState::FixedFloats() const {
  return int64_t{o_.heads} * o_.key_dim * o_.value_dim;
}

void GatedLinearState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

int64_t GatedLinearState::PreparedWidth() const {
  const int64_t gate = o_.output_gate ? int64_t{o_.heads} * o_.value_dim : 0;
  return PreparedLayout().extra + int64_t{o_.kv_heads} * o_.key_dim + gate;
}

KernelRowLayout GatedLinearState::PreparedLayout() const {
  const int64_t q = int64_t{o_.heads} * o_.key_dim;
  const int64_t k = int64_t{o_.kv_heads} * o_.key_dim;
  const int64_t v = int64_t{o_.kv_heads} * o_.value_dim;
  const int64_t gate = o_.output_gate ? int64_t{o_.heads} * o_.value_dim : 0;
  return {q, q + k, q + k + v, q + 2 * k + v + gate};
}

namespace {

void FeatureMapInPlace(MixerFeatureMap map, float* x, int64_t n) {
  if (map == MixerFeatureMap::kSwish) {
    cpu::SiluInPlace(x, n);
  } else if (map == MixerFeatureMap::kRelu) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.0f);
  }
}

}  // namespace

void GatedLinearState::PrepareRow(const float* in, int64_t position, float* out) const {
  const KernelRowLayout layout = PreparedLayout();
  const int64_t q_width = int64_t{o_.heads} * o_.key_dim;
  const int64_t k_width = int64_t{o_.kv_heads} * o_.key_dim;
  const int64_t v_width = int64_t{o_.kv_heads} * o_.value_dim;
  const int64_t gate_width = int64_t{o_.heads} * o_.value_dim;
  float* q = out;
  float* k = out + layout.k;
  float* v = out + layout.v;
  float* lambda = out + layout.extra;
  float* gate = lambda + k_width;
  const float q_scale = o_.scale_query ? 1.0f / std::sqrt(static_cast<float>(o_.key_dim)) : 1.0f;
  switch (o_.type) {
    case AttentionType::kGla: {
      std::copy(in, in + q_width + k_width + v_width, out);
      FeatureMapInPlace(o_.feature_map, q, q_width);
      FeatureMapInPlace(o_.feature_map, k, k_width);
      const float* g_in = in + q_width + k_width + v_width;
      if (o_.output_gate) std::copy(g_in, g_in + gate_width, gate);
      const float* low = g_in + (o_.output_gate ? gate_width : 0);  // W_gk0 u, rank wide
      const float inv_normalizer = 1.0f / o_.gate_normalizer;
      for (int64_t c = 0; c < k_width; ++c) {
        const float* w = o_.gate_up_weight.data() + c * o_.gate_rank;
        float z = o_.gate_up_bias[static_cast<size_t>(c)];
        for (int i = 0; i < o_.gate_rank; ++i) z += w[i] * low[i];
        float g = LogSigmoid(z) * inv_normalizer;
        if (o_.has_clamp) g = std::max(g, o_.clamp_min);
        lambda[c] = std::exp(g);
      }
      break;
    }
    case AttentionType::kRetnet: {
      std::copy(in, in + q_width + k_width + v_width, out);
      if (o_.output_gate) {
        const float* g_in = in + q_width + k_width + v_width;
        std::copy(g_in, g_in + gate_width, gate);
      }
      const int half = o_.key_dim / 2;
      absl::InlinedVector<float, 256> cos_sin(static_cast<size_t>(2 * half));
      cpu::RopeAngles(position, o_.rope_inv_freq.data(), half, cos_sin.data());
      cpu::RotateHalf(q, o_.heads, half, cos_sin.data());
      cpu::RotateHalf(k, o_.kv_heads, half, cos_sin.data());
      break;  // lambda: the fixed per-head decay (retnet_decay_)
    }
    case AttentionType::kHgrn2: {
      // Projection: q [H K] | f [H K] | i [H V] (kv_heads == heads).
      std::copy(in, in + q_width, q);
      cpu::SiluInPlace(q, q_width);
      const float* f = in + q_width;
      const bool bounded = !o_.lower_bound.empty();
      for (int64_t c = 0; c < k_width; ++c) {
        const float s = Sigmoid(f[c]);
        if (bounded) {
          const float lb = o_.lower_bound[static_cast<size_t>(c)];
          lambda[c] = lb + (1.0f - lb) * s;
          k[c] = 1.0f - lambda[c];
        } else {
          lambda[c] = s;
          k[c] = Sigmoid(-f[c]);  // 1 - sigmoid(f), without cancellation
        }
      }
      std::copy(f + k_width, f + k_width + v_width, v);
      break;
    }
    default:
      break;
  }
  if (q_scale != 1.0f) {
    for (int64_t i = 0; i < q_width; ++i) q[i] *= q_scale;
  }
}

void GatedLinearState::PrepareRows(CpuContext& ctx, const float* projection,
                                   int64_t projection_width, int64_t rows,
                                   std::span<const StateRef> states, float* prepared) const {
  const int64_t width = PreparedWidth();
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    PrepareRow(projection + r * projection_width, states[static_cast<size_t>(r)].position,
               prepared + r * width);
  });
}

void GatedLinearState::UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const {
  const int kv = head / (o_.heads / o_.kv_heads);
  const int K = o_.key_dim, V = o_.value_dim;
  const float* k = row.k + int64_t{kv} * K;
  const float* v = row.v + int64_t{kv} * V;
  const float* lambda = row.extra + int64_t{kv} * K;
  float* S = state.fixed + int64_t{head} * K * V;
  const bool fixed_decay = o_.type == AttentionType::kRetnet;
  const float decay = fixed_decay ? retnet_decay_[static_cast<size_t>(head)] : 0.0f;
  for (int c = 0; c < K; ++c) {
    cpu::DecayAdd(S + int64_t{c} * V, fixed_decay ? decay : lambda[c], k[c], v, V);
  }
}

void GatedLinearState::ReadHead(int head, const float* q, const StateRef& state, float* out) const {
  const int K = o_.key_dim, V = o_.value_dim;
  const float* query = q + int64_t{head} * K;
  const float* S = state.fixed + int64_t{head} * K * V;
  float* y = out + int64_t{head} * V;
  std::fill(y, y + V, 0.0f);
  for (int c = 0; c < K; ++c) {
    cpu::Axpy(y, query[c], S + int64_t{c} * V, V);
  }
}

void GatedLinearState::ScanHead(int head, const ScanArgs& args, const RowRun& run) const {
  const int kv = head / (o_.heads / o_.kv_heads);
  const int K = o_.key_dim, V = o_.value_dim;
  const bool fixed_decay = o_.type == AttentionType::kRetnet;
  const int64_t first = run.first * args.width;
  GatedHeadRows rows;
  rows.q = args.rows + first + int64_t{head} * K;
  rows.k = args.rows + first + args.layout.k + int64_t{kv} * K;
  rows.v = args.rows + first + args.layout.v + int64_t{kv} * V;
  rows.lambda = fixed_decay ? nullptr : args.rows + first + args.layout.extra + int64_t{kv} * K;
  rows.fixed_decay = fixed_decay ? retnet_decay_[static_cast<size_t>(head)] : 1.0f;
  rows.stride = args.width;
  rows.out = args.out + run.first * args.out_width + int64_t{head} * V;
  rows.out_stride = args.out_width;
  rows.rows = run.count;
  // Every row of a run is one sequence's: one state.
  float* S = args.states[static_cast<size_t>(run.first)].fixed + int64_t{head} * K * V;
  if (run.count >= kGatedChunkMinRows && int64_t{K} * V >= kGatedChunkMinStateFloats) {
    GatedChunkScan(rows, K, V, S);
  } else {
    GatedRowScan(rows, K, V, S);
  }
}

void GatedLinearState::FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                                  float* attended) const {
  const int64_t width = AttendedWidth(0), prepared_width = PreparedWidth();
  const int64_t gate_offset = PreparedLayout().extra + int64_t{o_.kv_heads} * o_.key_dim;
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* row = attended + r * width;
    if (o_.type == AttentionType::kHgrn2) {
      cpu::RmsNorm(row, 1, width, o_.norm_weight.data(), o_.norm_eps, row);
      return;
    }
    cpu::RmsNorm(row, o_.heads, o_.value_dim, o_.norm_weight.data(), o_.norm_eps, row);
    if (!o_.output_gate) return;
    cpu::SiluGateArray(prepared + r * prepared_width + gate_offset, row, width, row);
  });
}

}  // namespace abcd
