// The gated linear recurrences of the fla model zoo, one kernel for three model types. Per
// query head, a state S [K, V] (fp32) decays key-channel-wise and takes the token's outer
// product, then the query reads it:
//   S = diag(lambda) S + k v^T,      y = S^T q
// gla:    q = W_q u, k = W_k u (optional feature map), lambda = exp(max(logsigmoid(z) / 16,
//         clamp_min)) per key channel with z = W_gk1 (W_gk0 u) + b (a rank-16 projection);
// retnet: RoPE on q and k at the row's position, lambda = 1 - 2^(-5-h) fixed per head h;
// hgrn2:  q = silu(W_q u), lambda = sigmoid(W_f u) (layer l > 0: lb_l + (1 - lb_l) sigmoid(...)
//         with the model's lower bounds), k = 1 - lambda, v = W_i u;
// q is scaled by K^-0.5 (folded into W_q at load where q is linear). Output: gla and retnet
// RMS-norm each head's y (shared [V] weight) and, with the output gate, multiply by
// silu(W_g u); hgrn2 RMS-norms the concatenated heads ([H V] weight). GQA: query head j reads
// key/value/decay head j / (heads / kv_heads) and keeps its own S.
// State per head: S [K, V] row-major. Immutable; thread-safe per state.
#pragma once

#include <vector>

#include "engine/attention/attention_state.h"
#include "engine/ops/packed_matrix.h"

namespace abcd {

class GatedLinearState final : public AttentionState {
 public:
  struct Options {
    AttentionType type = AttentionType::kGla;
    int heads = 0, kv_heads = 0, key_dim = 0, value_dim = 0;
    MixerFeatureMap feature_map = MixerFeatureMap::kNone;  // gla
    bool scale_query = false;                              // q *= K^-0.5 here (not folded into W_q)
    bool output_gate = false;                              // gla, retnet
    bool has_clamp = false;                                // gla
    float clamp_min = 0.0f;                                // gla
    float gate_normalizer = 16;                            // gla
    int gate_rank = 0;                  // gla: W_gk0 rows (the projection's last columns)
    std::vector<float> gate_up_weight;  // gla: W_gk1 [Hkv K, rank]
    std::vector<float> gate_up_bias;    // gla: [Hkv K]
    std::vector<float> rope_inv_freq;   // retnet: K / 2 inverse frequencies
    std::vector<float> lower_bound;     // hgrn2 layer > 0: lb [H K] (empty: none)
    std::vector<float> norm_weight;     // [V] (gla, retnet) or [H V] (hgrn2)
    float norm_eps = 1e-6f;
  };
  explicit GatedLinearState(Options options);

  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  int heads() const override { return o_.heads; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // Long runs of large heads: fla's chunk form (gated_linear_chunk.h); otherwise per row one
  // pass over S that decays, adds k v^T and reads (UpdateHead, ReadHead fused).
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  // Projection rows: gla q | k | v | [g] | gk0; retnet q | k | v | [g]; hgrn2 q | f | i.
  // Prepared rows: q [H K] | k [Hkv K] | v [Hkv V] | lambda [Hkv K] | gate [H V] (when gated).
  int64_t PreparedWidth() const override;
  KernelRowLayout PreparedLayout() const override;
  void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width, int64_t rows,
                   std::span<const StateRef> states, float* prepared) const override;
  int64_t AttendedWidth(int64_t) const override { return int64_t{o_.heads} * o_.value_dim; }
  void FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                  float* attended) const override;

  // For the device copy (fla_state_cuda.h).
  const Options& options() const { return o_; }
  const std::vector<float>& retnet_decay() const { return retnet_decay_; }  // [H], retnet

 private:
  void PrepareRow(const float* in, int64_t position, float* out) const;

  Options o_;
  std::vector<float> retnet_decay_;  // [H]
};

}  // namespace abcd
