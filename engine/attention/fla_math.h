// The per-element math of the fla mixers (gla, retnet, hgrn2 in gated_linear_state.h; gsa in
// gsa_state.h) between their projections, written once for the host and the device: what one
// column of a prepared row is (feature maps, gates, RoPE, gla's low-rank gate up-projection), and
// what one column of an attended row becomes (output RMSNorm, swish gate). The CUDA kernels
// (gated_linear_state_cuda.cu, gsa_state_cuda.cu) call these per thread; the host test
// (tests/engine/attention/fla_math_test.cc) checks them against the CPU states' PrepareRows and
// FinishRows. Plain functions on a plain struct of pointers (device pointers on the device).
//
// Prepared rows (the CPU layout): gla, retnet, hgrn2: q [H K] | k [Hkv K] | v [Hkv V] |
// lambda [Hkv K] | gate [H V] (with the output gate; retnet's lambda columns hold 0 here: its
// decay is per query head and fixed); gsa: q [H K] | k [Hkv K] | v [Hkv V] | alpha [Hkv slots].
// Projection rows: gla q | k | v | [g] | gk0 (rank); retnet q | k | v | [g]; hgrn2 q | f | i;
// gsa q | k | v | a. Below them: fla's short convolution (short_conv.h: a convolved channel, the
// window after a run's rows) and gated_deltanet's prepare / finish elements (gated_delta_state.h;
// the q/k L2 norms need a head's sum, which the kernel forms: DeltaNormed applies it).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ABCD_FLA_FN __host__ __device__ __forceinline__
#else
#define ABCD_FLA_FN inline
#endif

namespace abcd::fla {

enum class Kind : int32_t { kGla, kRetnet, kHgrn2, kGsa };
enum class Feature : int32_t { kNone, kSilu, kRelu, kT2r };

// One layer's shapes, options and parameters (all pointers on the side that runs the math).
struct Params {
  Kind kind = Kind::kGla;
  int heads = 0, kv_heads = 0, key_dim = 0, value_dim = 0;
  int slots = 0;                          // gsa
  Feature feature = Feature::kNone;       // gla, gsa
  float q_scale = 1.0f;                   // K^-0.5 when the state scales q, else 1 (gsa: 1)
  bool output_gate = false;               // gla, retnet
  bool has_clamp = false;                 // gla
  float clamp_min = 0.0f;                 // gla
  float inv_gate_normalizer = 1.0f;       // gla, gsa
  int gate_rank = 0;                      // gla
  float norm_eps = 1e-6f;                 //
  const float* gate_up_weight = nullptr;  // gla: W_gk1 [Hkv K, rank]
  const float* gate_up_bias = nullptr;    // gla: [Hkv K]
  const float* rope_inv_freq = nullptr;   // retnet: [K / 2]
  const float* lower_bound = nullptr;     // hgrn2: [H K] or null
  const float* norm_weight = nullptr;     // [V] (gla, retnet) or [H V] (hgrn2, gsa)
  const float* t2r_weight = nullptr;      // gsa with Feature::kT2r: [K, K]
  const float* retnet_decay = nullptr;    // retnet: [H]

  ABCD_FLA_FN int64_t QWidth() const { return int64_t{heads} * key_dim; }
  ABCD_FLA_FN int64_t KWidth() const { return int64_t{kv_heads} * key_dim; }
  ABCD_FLA_FN int64_t VWidth() const { return int64_t{kv_heads} * value_dim; }
  ABCD_FLA_FN int64_t GateWidth() const {
    return output_gate ? int64_t{heads} * value_dim : int64_t{0};
  }
  // Where k, v and the extra columns (lambda / alpha) start in a prepared row.
  ABCD_FLA_FN int64_t KOffset() const { return QWidth(); }
  ABCD_FLA_FN int64_t VOffset() const { return QWidth() + KWidth(); }
  ABCD_FLA_FN int64_t ExtraOffset() const { return QWidth() + KWidth() + VWidth(); }
  // gla, retnet: the gate columns start here.
  ABCD_FLA_FN int64_t GateOffset() const { return ExtraOffset() + KWidth(); }
  ABCD_FLA_FN int64_t PreparedWidth() const {
    if (kind == Kind::kGsa) return ExtraOffset() + int64_t{kv_heads} * slots;
    return GateOffset() + GateWidth();
  }
  ABCD_FLA_FN int64_t AttendedWidth() const { return int64_t{heads} * value_dim; }
  // The projection row's width.
  ABCD_FLA_FN int64_t ProjectionWidth() const {
    switch (kind) {
      case Kind::kGla:
        return ExtraOffset() + GateWidth() + gate_rank;
      case Kind::kRetnet:
        return ExtraOffset() + GateWidth();
      case Kind::kHgrn2:
        return 2 * QWidth() + AttendedWidth();
      case Kind::kGsa:
        return PreparedWidth();
    }
    return 0;
  }
  // Attended columns one output RMSNorm covers: a head (gla, retnet) or the row (hgrn2, gsa).
  ABCD_FLA_FN int64_t NormGroup() const {
    return kind == Kind::kGla || kind == Kind::kRetnet ? int64_t{value_dim} : AttendedWidth();
  }
};

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)) (mixer_math.h's form).
ABCD_FLA_FN float LogSigmoid(float x) { return fminf(x, 0.0f) - log1pf(expf(-fabsf(x))); }

// sigmoid(x) without overflow (mixer_math.h's form).
ABCD_FLA_FN float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

ABCD_FLA_FN float Silu(float x) { return x / (1.0f + expf(-x)); }

// The elementwise feature maps (t2r is a projection: FeatureT2r).
ABCD_FLA_FN float FeatureElement(Feature feature, float x) {
  if (feature == Feature::kSilu) return Silu(x);
  if (feature == Feature::kRelu) return fmaxf(x, 0.0f);
  return x;
}

// gsa's t2r feature o of a head whose K raw features start at `head`: relu(W[o] . head).
ABCD_FLA_FN float FeatureT2r(const Params& p, const float* head, int o) {
  const float* w = p.t2r_weight + int64_t{o} * p.key_dim;
  float sum = 0.0f;
  for (int i = 0; i < p.key_dim; ++i) sum += w[i] * head[i];
  return fmaxf(sum, 0.0f);
}

// Column `column` of head vectors `key_dim` wide starting at `x` (column 0 of the vector group)
// rotated half-split by the angle of pair (column mod K) mod K/2 at `position`: as
// cpu::RopeAngles (angle fp32(position) * inv_freq, cos and sin in double) and cpu::RotateHalf.
ABCD_FLA_FN float RopeElement(const Params& p, const float* x, int64_t column, int64_t position) {
  const int half = p.key_dim / 2;
  const int i = static_cast<int>(column % p.key_dim);
  const int pair = i < half ? i : i - half;
  const float angle = static_cast<float>(position) * p.rope_inv_freq[pair];
  const float c = static_cast<float>(cos(static_cast<double>(angle)));
  const float s = static_cast<float>(sin(static_cast<double>(angle)));
  if (i < half) return x[column] * c - x[column + half] * s;
  return x[column] * c + x[column - half] * s;
}

// gla's forget gate of key channel c (of all kv heads): exp(max(logsigmoid(z) / n, clamp)),
// z = W_gk1[c] . low + b[c].
ABCD_FLA_FN float GlaLambda(const Params& p, const float* low, int64_t c) {
  const float* w = p.gate_up_weight + c * p.gate_rank;
  float z = p.gate_up_bias[c];
  for (int i = 0; i < p.gate_rank; ++i) z += w[i] * low[i];
  float g = LogSigmoid(z) * p.inv_gate_normalizer;
  if (p.has_clamp) g = fmaxf(g, p.clamp_min);
  return expf(g);
}

// hgrn2's forget gate of channel c from its logit f: sigmoid(f), or lb + (1 - lb) sigmoid(f).
ABCD_FLA_FN float Hgrn2Lambda(const Params& p, float f, int64_t c) {
  const float s = Sigmoid(f);
  if (p.lower_bound == nullptr) return s;
  const float lb = p.lower_bound[c];
  return lb + (1.0f - lb) * s;
}

// hgrn2's key of channel c: 1 - lambda (1 - sigmoid(f) = sigmoid(-f) unbounded).
ABCD_FLA_FN float Hgrn2Key(const Params& p, float f, int64_t c) {
  if (p.lower_bound == nullptr) return Sigmoid(-f);
  return 1.0f - Hgrn2Lambda(p, f, c);
}

// Column `column` of the prepared row of projection row `in` at `position` (the CPU states'
// PrepareRows, one element).
ABCD_FLA_FN float PrepareElement(const Params& p, const float* in, int64_t position,
                                 int64_t column) {
  const int64_t qw = p.QWidth(), kw = p.KWidth();
  const int64_t extra = p.ExtraOffset();
  switch (p.kind) {
    case Kind::kGla:
      if (column < qw) return FeatureElement(p.feature, in[column]) * p.q_scale;
      if (column < qw + kw) return FeatureElement(p.feature, in[column]);
      if (column < extra) return in[column];
      if (column < extra + kw) {
        return GlaLambda(p, in + extra + p.GateWidth(), column - extra);
      }
      return in[extra + (column - extra - kw)];  // the output gate's logits
    case Kind::kRetnet:
      if (column < qw) return RopeElement(p, in, column, position) * p.q_scale;
      if (column < qw + kw) return RopeElement(p, in + qw, column - qw, position);
      if (column < extra) return in[column];
      if (column < extra + kw) return 0.0f;  // unused: retnet's decay is fixed per head
      return in[extra + (column - extra - kw)];
    case Kind::kHgrn2:
      if (column < qw) return Silu(in[column]) * p.q_scale;
      if (column < qw + kw) return Hgrn2Key(p, in[column], column - qw);
      if (column < extra) return in[column];
      return Hgrn2Lambda(p, in[qw + (column - extra)], column - extra);
    case Kind::kGsa:
      if (column < qw + kw) {
        if (p.feature != Feature::kT2r) return FeatureElement(p.feature, in[column]);
        const int64_t head_start = column - column % p.key_dim;
        return FeatureT2r(p, in + head_start, static_cast<int>(column % p.key_dim));
      }
      if (column < extra) return Silu(in[column]);
      return expf(LogSigmoid(in[column]) * p.inv_gate_normalizer);
  }
  return 0.0f;
}

// What an attended column's norm statistics read: gsa's output is silu'ed before its norm.
ABCD_FLA_FN float FinishInput(const Params& p, float y) {
  return p.kind == Kind::kGsa ? Silu(y) : y;
}

// 1 / sqrt(mean square + eps) of a norm group from the sum of its squares, in double as
// cpu::RmsNorm.
ABCD_FLA_FN float InverseRms(const Params& p, double sum_squares) {
  const double n = static_cast<double>(p.NormGroup());
  return static_cast<float>(1.0 / sqrt(sum_squares / n + static_cast<double>(p.norm_eps)));
}

// Attended column `column` from its FinishInput value x and its group's InverseRms: the norm,
// then (gla, retnet with the output gate) silu(gate) times it. `prepared` is the row's prepared
// row (the gate logits).
ABCD_FLA_FN float FinishElement(const Params& p, float x, float inverse_rms, int64_t column,
                                const float* prepared) {
  const bool per_head = p.kind == Kind::kGla || p.kind == Kind::kRetnet;
  const float normed = x * inverse_rms * p.norm_weight[per_head ? column % p.value_dim : column];
  if (!p.output_gate || p.kind == Kind::kHgrn2 || p.kind == Kind::kGsa) return normed;
  const float g = prepared[p.GateOffset() + column];
  return g / (1.0f + expf(-g)) * normed;
}

// ---- fla's short convolution (short_conv.h) in front of a mixer: C channels, W taps.
struct ConvParams {
  int channels = 0;               // C: convolved columns at the start of a projection row
  int size = 0;                   // W: taps
  bool silu = true;               // activation after the convolution
  int64_t inner_floats = 0;       // the window [W - 1, C] follows the inner state's floats
  const float* weight = nullptr;  // [C, W]; w[c, W - 1] multiplies the current input
  const float* bias = nullptr;    // [C] or null
};

// Channel c of the convolved row whose projection row is `x` (rows `stride` floats apart), with
// `before` rows of its run before it (their projection rows precede x) and the sequence's window
// (`window`: [W - 1, C] oldest first, null: zeros) before the run: ShortConvState::PrepareRows'
// sum, in its order (bias, then the taps oldest first), then silu.
ABCD_FLA_FN float ShortConvElement(const ConvParams& p, const float* x, int64_t stride,
                                   int64_t before, const float* window, int64_t c) {
  const int64_t W = p.size, C = p.channels;
  float y = p.bias != nullptr ? p.bias[c] : 0.0f;
  for (int64_t i = 0; i < W; ++i) {
    const int64_t back = W - 1 - i;  // tokens before this row
    float in = 0.0f;
    if (back <= before) {
      in = x[-back * stride + c];
    } else if (window != nullptr) {
      in = window[(W - 1 - (back - before)) * C + c];
    }
    y += p.weight[c * W + i] * in;
  }
  return p.silu ? Silu(y) : y;
}

// Element t (0 oldest) of channel c of the window after the first `folded` rows of a run whose
// first projection row is `x`, the window before the run being `window` ([W - 1, C]).
ABCD_FLA_FN float ShortConvWindowAfter(const ConvParams& p, const float* x, int64_t stride,
                                       int64_t folded, const float* window, int64_t t, int64_t c) {
  const int64_t m = folded - (p.size - 1) + t;  // its row in the run; < 0: still the old window
  return m >= 0 ? x[m * stride + c] : window[(t + folded) * p.channels + c];
}

// ---- gated_deltanet (gated_delta_state.h). H value heads (one state S [K, V] each), Hk q/k
// heads. Projection rows: q [Hk K] | k [Hk K] | v [H V] | [g [H V]] | a [H] | b [H]; prepared
// rows: q | k | v | decay [H] | beta [H] | [gate [H V]].
struct DeltaParams {
  int heads = 0, kv_heads = 0, key_dim = 0, value_dim = 0;
  bool output_gate = true;
  bool allow_neg_eigval = false;
  bool silu_qkv = false;  // silu q, k, v here (no short convolution in front)
  float norm_eps = 1e-6f;
  const float* minus_a = nullptr;      // -exp(A_log) [H]
  const float* dt_bias = nullptr;      // [H]
  const float* norm_weight = nullptr;  // o_norm [V]

  ABCD_FLA_FN int64_t QkWidth() const { return int64_t{kv_heads} * key_dim; }
  ABCD_FLA_FN int64_t ValueWidth() const { return int64_t{heads} * value_dim; }
  ABCD_FLA_FN int64_t GateWidth() const { return output_gate ? ValueWidth() : int64_t{0}; }
  ABCD_FLA_FN int64_t VOffset() const { return 2 * QkWidth(); }
  ABCD_FLA_FN int64_t ExtraOffset() const { return 2 * QkWidth() + ValueWidth(); }
  ABCD_FLA_FN int64_t GateOffset() const { return ExtraOffset() + 2 * int64_t{heads}; }
  ABCD_FLA_FN int64_t PreparedWidth() const { return GateOffset() + GateWidth(); }
  ABCD_FLA_FN int64_t ProjectionWidth() const { return PreparedWidth(); }
  ABCD_FLA_FN int64_t AttendedWidth() const { return ValueWidth(); }
};

// fla's softplus: x itself above 20.
ABCD_FLA_FN float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The L2 norm's scale of a q/k head from its sum of squares (fla's x / sqrt(sum x^2 + 1e-6)).
ABCD_FLA_FN float L2Scale(float sum_squares) { return 1.0f / sqrtf(sum_squares + 1e-6f); }

// The scale a q head gets after its L2 norm (K^-0.5).
ABCD_FLA_FN float DeltaQueryScale(const DeltaParams& p) {
  return 1.0f / sqrtf(static_cast<float>(p.key_dim));
}

// Column `column` of the prepared row of projection row `in`, before the q/k heads' L2 norms
// (the q and k columns are the silu'ed or plain inputs; DeltaPrepareRow scales them).
ABCD_FLA_FN float DeltaPrepareElement(const DeltaParams& p, const float* in, int64_t column) {
  const int64_t extra = p.ExtraOffset(), H = p.heads;
  if (column < extra) return p.silu_qkv ? Silu(in[column]) : in[column];
  const int64_t a = extra + p.GateWidth();  // the a logits, then b
  if (column < extra + H) {
    const int64_t h = column - extra;
    return expf(p.minus_a[h] * Softplus(in[a + h] + p.dt_bias[h]));
  }
  if (column < extra + 2 * H) {
    return Sigmoid(in[a + H + (column - extra - H)]) * (p.allow_neg_eigval ? 2.0f : 1.0f);
  }
  return in[extra + (column - extra - 2 * H)];  // the output gate's logits
}

// What one prepared q/k column becomes once its head's L2 scale is known (`head` < Hk: q).
ABCD_FLA_FN float DeltaNormed(const DeltaParams& p, float x, float l2_scale, int64_t head) {
  const float y = x * l2_scale;
  return head < p.kv_heads ? y * DeltaQueryScale(p) : y;
}

// 1 / sqrt(mean square + eps) of a head's V attended columns (in double, as cpu::RmsNorm).
ABCD_FLA_FN float DeltaInverseRms(const DeltaParams& p, double sum_squares) {
  return static_cast<float>(
      1.0 / sqrt(sum_squares / static_cast<double>(p.value_dim) + static_cast<double>(p.norm_eps)));
}

// Attended column `column` (of all heads) from the delta rule's read x: o_norm, then with the
// output gate silu(gate) times it; `prepared` is the row's prepared row.
ABCD_FLA_FN float DeltaFinishElement(const DeltaParams& p, float x, float inverse_rms,
                                     int64_t column, const float* prepared) {
  const float normed = x * inverse_rms * p.norm_weight[column % p.value_dim];
  if (!p.output_gate) return normed;
  const float g = prepared[p.GateOffset() + column];
  return g / (1.0f + expf(-g)) * normed;
}

}  // namespace abcd::fla
