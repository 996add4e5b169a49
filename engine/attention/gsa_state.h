// GSA (gated slot attention, the fla model zoo's `gsa`): abc's bounded slot memory with a
// per-slot forget gate. Per query head j and slot s, with alpha_s = sigmoid(a_s)^(1/n)
// (a = W_f u, n = gate_logit_normalizer) and write weight 1 - alpha_s:
//   K~[s] = alpha_s K~[s] + (1 - alpha_s) k,   V~[s] = alpha_s V~[s] + (1 - alpha_s) v,
//   y = sum_s softmax_s(q . K~[s]) V~[s]                       (unscaled q, as fla)
// with q = phi(W_q u), k = phi(W_k u) (phi: silu, relu, or relu of a learned [K, K] map shared by
// the heads), v = silu(W_v u). The heads' outputs are concatenated, silu'ed and RMS-normed over
// the whole value width (weight g_norm) before the output projection. From zero memories this
// is abc's running-mean update with the control w = 1 - alpha fed directly; no normaliser is
// needed. GQA: query head j uses key/value/gate head j / (heads / kv_heads), and keeps its own
// memories (fla's layout).
// State per head: K~ [slots, K] then V~ [slots, V] (fp32). Immutable; thread-safe per state.
#pragma once

#include <vector>

#include "engine/attention/attention_state.h"

namespace abcd {

class GsaState final : public AttentionState {
 public:
  // `t2r_weight` is the [K, K] feature-map layer for MixerFeatureMap::kT2r (else empty);
  // `norm_weight` the [heads * V] output RMSNorm weight.
  GsaState(int heads, int kv_heads, int key_dim, int value_dim, int slots, float gate_normalizer,
           MixerFeatureMap feature_map, std::vector<float> t2r_weight,
           std::vector<float> norm_weight, float norm_eps);

  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  int heads() const override { return heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // A run's rows fused per row (slot_scan.h): equal to UpdateHead then ReadHead.
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  // Prepared rows: phi(q) [H K] | phi(k) [Hkv K] | silu(v) [Hkv V] | alpha [Hkv slots];
  // the projection rows are q | k | v | a in the same widths.
  int64_t PreparedWidth() const override;
  KernelRowLayout PreparedLayout() const override;
  void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width, int64_t rows,
                   std::span<const StateRef> states, float* prepared) const override;
  int64_t AttendedWidth(int64_t) const override { return int64_t{heads_} * value_dim_; }
  void FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                  float* attended) const override;

  // For the device copy (fla_state_cuda.h).
  int kv_heads() const { return kv_heads_; }
  int key_dim() const { return key_dim_; }
  int value_dim() const { return value_dim_; }
  int slots() const { return slots_; }
  float gate_normalizer() const { return gate_normalizer_; }
  MixerFeatureMap feature_map() const { return feature_map_; }
  const std::vector<float>& t2r_weight() const { return t2r_weight_; }
  const std::vector<float>& norm_weight() const { return norm_weight_; }
  float norm_eps() const { return norm_eps_; }

 private:
  void FeatureMap(float* x, int count) const;  // count heads of K features, in place

  int heads_, kv_heads_, key_dim_, value_dim_, slots_;
  float gate_normalizer_;
  MixerFeatureMap feature_map_;
  std::vector<float> t2r_weight_;  // [K, K]
  std::vector<float> norm_weight_;
  float norm_eps_;
};

}  // namespace abcd
