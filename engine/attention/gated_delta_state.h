// Gated DeltaNet (fla `gated_deltanet`, fla/layers/gated_deltanet.py): the gated delta rule. Per
// value head j (state S [K, V], fp32), with q/k head i = j / (heads / kv_heads):
//   S = exp(g) S,   v' = beta (v - S^T k),   S = S + k v'^T,   y = S^T (q K^-0.5)
// where q, k are silu'ed (by the short convolution, or directly without one) and L2-normalised
// per head (x / sqrt(sum x^2 + 1e-6)), v silu'ed likewise, beta = sigmoid(W_b u) (doubled with
// allow_neg_eigval), g = -exp(A_log) softplus(W_a u + dt_bias) (softplus(x) = x above 20). Output
// per head: RMSNorm(y; o_norm [V], norm_eps), times silu(W_g u) with the output gate (use_gate);
// heads concatenated before o_proj.
// Projection rows: q [Hk K] | k [Hk K] | v [H V] | [g [H V]] | a [H] | b [H] (H value heads,
// Hk q/k heads). Prepared rows: q [Hk K] | k [Hk K] | v [H V] | decay exp(g) [H] | beta [H] |
// [gate [H V]]. State per value head: S [K, V] row-major (key channel rows). Immutable;
// thread-safe per state.
#pragma once

#include <vector>

#include "engine/attention/attention_state.h"

namespace abcd {

class GatedDeltaState final : public AttentionState {
 public:
  struct Options {
    int heads = 0;     // value heads (num_v_heads): one state each
    int kv_heads = 0;  // q/k heads (num_heads), dividing `heads`
    int key_dim = 0, value_dim = 0;
    bool output_gate = true;         // use_gate
    bool allow_neg_eigval = false;   // beta in (0, 2)
    bool silu_qkv = false;           // silu q, k, v here (no short convolution in front)
    std::vector<float> a_log;        // A_log [heads]
    std::vector<float> dt_bias;      // [heads]
    std::vector<float> norm_weight;  // o_norm [V]
    float norm_eps = 1e-6f;
  };
  explicit GatedDeltaState(Options options);

  const Options& options() const { return o_; }

  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  std::pair<int64_t, int64_t> HeadStateRange(int head) const override;
  int heads() const override { return o_.heads; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // UpdateHead then ReadHead per row (GatedDeltaRowScan, the read fused into the update's second
  // pass over S), or fla's chunk form (GatedDeltaChunkScan, gated_delta_chunk.h) for runs of
  // kGatedDeltaChunkMinRows rows and more of heads with K V >= kGatedDeltaChunkMinStateFloats.
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  int64_t PreparedWidth() const override;
  KernelRowLayout PreparedLayout() const override;
  void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width, int64_t rows,
                   std::span<const StateRef> states, float* prepared) const override;
  int64_t AttendedWidth(int64_t) const override { return int64_t{o_.heads} * o_.value_dim; }
  void FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                  float* attended) const override;

 private:
  void PrepareRow(const float* in, float* out) const;
  // The delta rule's update of head `head` from one prepared row; `read` (may be null): the
  // query to read the new state with into `out` in the same pass.
  void Fold(int head, const KeyValueRow& row, float* S, const float* read, float* out) const;

  Options o_;
  std::vector<float> minus_a_;  // -exp(A_log) [heads]
};

}  // namespace abcd
