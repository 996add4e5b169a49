// Random fla mixer layers for the tests of fla_math.h (tests/engine/attention/fla_math_test.cc,
// on the CPU) and of the CUDA kernels (tests/cuda/fla_state_cuda_test.cc): a CPU state
// (GatedLinearState or GsaState built from its options) with random parameters, the same
// parameters as host fla::Params, and random projection rows in the CPU layer's layout.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/attention/fla_math.h"
#include "engine/attention/gated_linear_state.h"
#include "engine/attention/gsa_state.h"

namespace abcd::testing_fla {

struct FlaCase {
  std::string name;
  std::unique_ptr<AttentionState> state;
  // Host copies of the parameters (host.* point into them).
  std::vector<float> gate_up_weight, gate_up_bias, rope_inv_freq, retnet_decay, lower_bound,
      norm_weight, t2r_weight;
  fla::Params host;
};

inline std::vector<float> Uniform(int64_t n, std::mt19937& rng, float low, float high) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = dist(rng);
  return out;
}

inline void PointAtHostArrays(FlaCase& c) {
  auto data = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  c.host.gate_up_weight = data(c.gate_up_weight);
  c.host.gate_up_bias = data(c.gate_up_bias);
  c.host.rope_inv_freq = data(c.rope_inv_freq);
  c.host.retnet_decay = data(c.retnet_decay);
  c.host.lower_bound = data(c.lower_bound);
  c.host.norm_weight = data(c.norm_weight);
  c.host.t2r_weight = data(c.t2r_weight);
}

// gla (rank-4 gate projection), retnet or hgrn2 (kv_heads == heads), q scaled by K^-0.5 as the
// Hugging Face loader builds them.
inline std::unique_ptr<FlaCase> GatedLinearCase(AttentionType type, int heads, int kv_heads,
                                                int key_dim, int value_dim, bool output_gate,
                                                bool has_clamp, MixerFeatureMap feature_map,
                                                bool lower_bound, uint32_t seed) {
  std::mt19937 rng(seed);
  auto c = std::make_unique<FlaCase>();
  GatedLinearState::Options o;
  o.type = type;
  o.heads = heads;
  o.kv_heads = kv_heads;
  o.key_dim = key_dim;
  o.value_dim = value_dim;
  o.feature_map = feature_map;
  o.scale_query = true;
  o.output_gate = output_gate;
  o.has_clamp = has_clamp;
  o.clamp_min = -0.1f;
  o.gate_normalizer = 16.0f;
  o.norm_eps = 1e-5f;
  fla::Params& p = c->host;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  p.q_scale = 1.0f / std::sqrt(static_cast<float>(key_dim));
  p.norm_eps = o.norm_eps;
  const int64_t k_width = int64_t{kv_heads} * key_dim;
  if (type == AttentionType::kGla) {
    o.gate_rank = 4;
    o.gate_up_weight = c->gate_up_weight = Uniform(k_width * o.gate_rank, rng, -1.0f, 1.0f);
    o.gate_up_bias = c->gate_up_bias = Uniform(k_width, rng, -2.0f, 2.0f);
    p.kind = fla::Kind::kGla;
    p.feature = feature_map == MixerFeatureMap::kSwish  ? fla::Feature::kSilu
                : feature_map == MixerFeatureMap::kRelu ? fla::Feature::kRelu
                                                        : fla::Feature::kNone;
    p.output_gate = output_gate;
    p.has_clamp = has_clamp;
    p.clamp_min = o.clamp_min;
    p.inv_gate_normalizer = 1.0f / o.gate_normalizer;
    p.gate_rank = o.gate_rank;
  } else if (type == AttentionType::kRetnet) {
    for (int i = 0; i < key_dim / 2; ++i) {
      c->rope_inv_freq.push_back(
          static_cast<float>(std::pow(10000.0, -2.0 * i / static_cast<double>(key_dim))));
    }
    o.rope_inv_freq = c->rope_inv_freq;
    p.kind = fla::Kind::kRetnet;
    p.output_gate = output_gate;
  } else {
    if (lower_bound) o.lower_bound = c->lower_bound = Uniform(k_width, rng, 0.0f, 0.9f);
    p.kind = fla::Kind::kHgrn2;
  }
  const int64_t norm = type == AttentionType::kHgrn2 ? int64_t{heads} * value_dim : value_dim;
  o.norm_weight = c->norm_weight = Uniform(norm, rng, 0.5f, 1.5f);
  auto state = std::make_unique<GatedLinearState>(std::move(o));
  c->retnet_decay = state->retnet_decay();
  c->state = std::move(state);
  PointAtHostArrays(*c);
  return c;
}

inline std::unique_ptr<FlaCase> GsaCase(int heads, int kv_heads, int key_dim, int value_dim,
                                        int slots, MixerFeatureMap feature_map, uint32_t seed) {
  std::mt19937 rng(seed);
  auto c = std::make_unique<FlaCase>();
  if (feature_map == MixerFeatureMap::kT2r) {
    c->t2r_weight = Uniform(int64_t{key_dim} * key_dim, rng, -0.3f, 0.3f);
  }
  c->norm_weight = Uniform(int64_t{heads} * value_dim, rng, 0.5f, 1.5f);
  c->state = std::make_unique<GsaState>(heads, kv_heads, key_dim, value_dim, slots, 8.0f,
                                        feature_map, c->t2r_weight, c->norm_weight, 1e-5f);
  fla::Params& p = c->host;
  p.kind = fla::Kind::kGsa;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  p.slots = slots;
  p.feature = feature_map == MixerFeatureMap::kSwish  ? fla::Feature::kSilu
              : feature_map == MixerFeatureMap::kRelu ? fla::Feature::kRelu
              : feature_map == MixerFeatureMap::kT2r  ? fla::Feature::kT2r
                                                      : fla::Feature::kNone;
  p.inv_gate_normalizer = 1.0f / 8.0f;
  p.norm_eps = 1e-5f;
  PointAtHostArrays(*c);
  return c;
}

// The cases both tests run: every type and option with a kernel, GQA shapes, value widths that
// are and are not multiples of 4, and (gla) more than one 128-column tile.
inline std::vector<std::unique_ptr<FlaCase>> AllCases() {
  std::vector<std::unique_ptr<FlaCase>> cases;
  auto add = [&](std::string name, std::unique_ptr<FlaCase> c) {
    c->name = std::move(name);
    cases.push_back(std::move(c));
  };
  using T = AttentionType;
  using M = MixerFeatureMap;
  add("gla_gqa_gate_clamp_swish",
      GatedLinearCase(T::kGla, 4, 2, 32, 64, true, true, M::kSwish, false, 1));
  add("gla_plain", GatedLinearCase(T::kGla, 2, 2, 64, 36, false, false, M::kNone, false, 2));
  add("gla_wide_relu", GatedLinearCase(T::kGla, 2, 1, 128, 256, true, false, M::kRelu, false, 3));
  add("retnet_gqa_gate",
      GatedLinearCase(T::kRetnet, 4, 2, 32, 48, true, false, M::kNone, false, 4));
  add("retnet_plain", GatedLinearCase(T::kRetnet, 2, 2, 16, 20, false, false, M::kNone, false, 5));
  add("hgrn2_unbounded",
      GatedLinearCase(T::kHgrn2, 4, 4, 16, 16, false, false, M::kNone, false, 6));
  add("hgrn2_lower_bound",
      GatedLinearCase(T::kHgrn2, 2, 2, 32, 22, false, false, M::kNone, true, 7));
  add("gsa_gqa_silu", GsaCase(4, 2, 32, 32, 16, M::kSwish, 8));
  add("gsa_relu_odd", GsaCase(2, 2, 18, 22, 10, M::kRelu, 9));
  add("gsa_t2r", GsaCase(4, 1, 24, 16, 32, M::kT2r, 10));
  return cases;
}

// Random projection rows (`rows` x the projection width) for `c`.
inline std::vector<float> RandomProjection(const FlaCase& c, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  return Uniform(rows * c.host.ProjectionWidth(), rng, -2.0f, 2.0f);
}

}  // namespace abcd::testing_fla
