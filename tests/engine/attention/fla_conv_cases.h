// Random gated_deltanet layers and fla short convolutions for the tests of fla_math.h's
// convolution and delta-rule math (tests/engine/attention/fla_conv_math_test.cc, on the CPU) and
// of their CUDA kernels (tests/cuda/fla_conv_cuda_test.cc): a CPU state (GatedDeltaState, or a
// ShortConvState around any fla state) with random parameters, the same parameters as host
// fla::DeltaParams / fla::ConvParams, and the attention spec the CUDA dispatch takes.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/attention/attention_spec.h"
#include "engine/attention/fla_math.h"
#include "engine/attention/gated_delta_state.h"
#include "engine/attention/short_conv.h"
#include "tests/engine/attention/fla_cases.h"

namespace abcd::testing_fla {

// A gated_deltanet layer: H value heads, Hk q/k heads.
struct DeltaCase {
  std::unique_ptr<AttentionState> state;
  std::vector<float> minus_a, dt_bias, norm_weight;  // host.* point into them
  fla::DeltaParams host;
};

inline std::unique_ptr<DeltaCase> GatedDeltaCase(int heads, int kv_heads, int key_dim,
                                                 int value_dim, bool output_gate,
                                                 bool allow_neg_eigval, bool silu_qkv,
                                                 uint32_t seed) {
  std::mt19937 rng(seed);
  auto c = std::make_unique<DeltaCase>();
  GatedDeltaState::Options o;
  o.heads = heads;
  o.kv_heads = kv_heads;
  o.key_dim = key_dim;
  o.value_dim = value_dim;
  o.output_gate = output_gate;
  o.allow_neg_eigval = allow_neg_eigval;
  o.silu_qkv = silu_qkv;
  o.a_log = Uniform(heads, rng, -1.0f, 1.5f);
  o.dt_bias = Uniform(heads, rng, -1.0f, 1.0f);
  o.norm_weight = c->norm_weight = Uniform(value_dim, rng, 0.5f, 1.5f);
  o.norm_eps = 1e-5f;
  c->dt_bias = o.dt_bias;
  for (float a : o.a_log) c->minus_a.push_back(-std::exp(a));
  fla::DeltaParams& p = c->host;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  p.output_gate = output_gate;
  p.allow_neg_eigval = allow_neg_eigval;
  p.silu_qkv = silu_qkv;
  p.norm_eps = o.norm_eps;
  p.minus_a = c->minus_a.data();
  p.dt_bias = c->dt_bias.data();
  p.norm_weight = c->norm_weight.data();
  c->state = std::make_unique<GatedDeltaState>(std::move(o));
  return c;
}

// A ShortConvState of `size` taps over the first `channels` projection columns around `inner`.
struct ConvCase {
  std::string name;
  AttentionSpec spec;  // type and conv_size, as the CUDA dispatch reads them
  std::unique_ptr<AttentionState> state;
  int64_t projection_width = 0;  // the inner layer's projection row
  std::vector<float> weight, bias;
  fla::ConvParams host;  // weight / bias point into the vectors above
  // The inner layer's host parameters (their states moved into `state`): one of the two.
  std::unique_ptr<DeltaCase> delta_case;
  std::unique_ptr<FlaCase> fla_case;
};

inline std::unique_ptr<ConvCase> WrapConv(std::unique_ptr<AttentionState> inner, AttentionType type,
                                          int64_t channels, int64_t projection_width, int size,
                                          bool bias, bool silu, uint32_t seed) {
  std::mt19937 rng(seed);
  auto c = std::make_unique<ConvCase>();
  c->spec.type = type;
  c->spec.conv_size = size;
  c->projection_width = projection_width;
  ShortConvState::Options o;
  o.channels = static_cast<int>(channels);
  o.size = size;
  o.silu = silu;
  o.weight = c->weight = Uniform(channels * size, rng, -0.8f, 0.8f);
  if (bias) o.bias = c->bias = Uniform(channels, rng, -0.5f, 0.5f);
  fla::ConvParams& p = c->host;
  p.channels = o.channels;
  p.size = size;
  p.silu = silu;
  p.inner_floats = inner->FixedFloats();
  p.weight = c->weight.data();
  p.bias = c->bias.empty() ? nullptr : c->bias.data();
  c->state = std::make_unique<ShortConvState>(std::move(inner), std::move(o));
  return c;
}

// Every form the kernels take: gated_deltanet plain, GVA (value heads > q/k heads), without the
// gate, with negative eigenvalues and with its own silu; convolutions (2, 3, 4 taps; bias or not)
// around gated_deltanet, gla (GQA, silu), hgrn2 (no silu: q|f|i all convolved) and gsa.
inline std::vector<std::unique_ptr<ConvCase>> AllConvCases() {
  std::vector<std::unique_ptr<ConvCase>> cases;
  using T = AttentionType;
  using M = MixerFeatureMap;
  auto delta = [&](std::string name, std::unique_ptr<DeltaCase> d, int conv, bool bias) {
    const fla::DeltaParams p = d->host;
    std::unique_ptr<ConvCase> c;
    if (conv > 0) {
      c = WrapConv(std::move(d->state), T::kGatedDelta, p.ExtraOffset(), p.ProjectionWidth(), conv,
                   bias, true, 40 + static_cast<uint32_t>(cases.size()));
    } else {
      c = std::make_unique<ConvCase>();
      c->spec.type = T::kGatedDelta;
      c->projection_width = p.ProjectionWidth();
      c->state = std::move(d->state);
    }
    c->delta_case = std::move(d);
    c->name = std::move(name);
    cases.push_back(std::move(c));
  };
  delta("delta_plain", GatedDeltaCase(2, 2, 16, 24, true, false, true, 31), 0, false);
  delta("delta_gva_nogate_neg", GatedDeltaCase(4, 2, 32, 40, false, true, true, 32), 0, false);
  delta("delta_conv4", GatedDeltaCase(2, 1, 16, 32, true, false, false, 33), 4, false);
  delta("delta_wide_conv2_bias", GatedDeltaCase(2, 2, 64, 96, true, true, false, 34), 2, true);
  auto wrap_fla = [&](std::string name, std::unique_ptr<FlaCase> f, int conv, bool bias) {
    const fla::Params p = f->host;
    const bool hgrn2 = p.kind == fla::Kind::kHgrn2;
    const AttentionType type = p.kind == fla::Kind::kGla     ? T::kGla
                               : p.kind == fla::Kind::kGsa   ? T::kGsa
                               : p.kind == fla::Kind::kHgrn2 ? T::kHgrn2
                                                             : T::kRetnet;
    auto c =
        WrapConv(std::move(f->state), type, hgrn2 ? p.ProjectionWidth() : p.ExtraOffset(),
                 p.ProjectionWidth(), conv, bias, !hgrn2, 50 + static_cast<uint32_t>(cases.size()));
    c->fla_case = std::move(f);
    c->name = std::move(name);
    cases.push_back(std::move(c));
  };
  wrap_fla("gla_gqa_conv4_bias",
           GatedLinearCase(T::kGla, 4, 2, 32, 64, true, false, M::kSwish, false, 41), 4, true);
  wrap_fla("hgrn2_conv3",
           GatedLinearCase(T::kHgrn2, 2, 2, 16, 16, false, false, M::kNone, true, 42), 3, false);
  wrap_fla("gsa_conv4", GsaCase(4, 2, 16, 16, 8, M::kSwish, 43), 4, false);
  return cases;
}

}  // namespace abcd::testing_fla
