// Transformer-XL relative-position attention (models/FORMAT.md "txl"; Dai et al. 2019,
// following their published code).
//
// State per sequence and layer: a ring of the last M + 1 keys and values of every head (token p
// in row p mod (M + 1); update-then-read, like `window` with w = M + 1), fp32 or bf16. The
// relative-position table p[r] = W_r R_min(r, C), r = 0..min(M, C), is a model constant built at
// load in float64 and kept in fp32, shared by every sequence. Read of head h at position t:
//   s_j = (q + u_h) . k_j + (q + v_h) . p[min(t - j, C)]   for j = max(0, t - M) .. t
//   out = sum_j softmax_j(s) v_j
// q arrives scaled by 1/sqrt(dh) (AttentionLayer folds it into W_q) and u, v are stored scaled
// by 1/sqrt(dh) too, so s equals the code's ((q + u).k + (q + v).p) / sqrt(dh).
// Immutable after construction; thread-safe on different states (as every AttentionState).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/attention/attention_state.h"
#include "engine/state/kv_cache.h"

namespace abcd {

class TxlState final : public AttentionState {
 public:
  // table: [min(memory, clamp_len) + 1, H * dh]; u, v: [H * dh] (scaled by 1/sqrt(dh)).
  TxlState(int n_heads, int head_dim, int memory, int clamp_len, KvFormat ring_format,
           std::vector<float> table, std::vector<float> u, std::vector<float> v);

  // fp32: 2 (M + 1) H dh; bf16 or f16: (M + 1) H dh (two 16-bit values per float of the block).
  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;

  int64_t ring_rows() const { return span_; }
  KvFormat ring_format() const { return ring_format_; }
  const std::vector<float>& table() const { return table_; }

  // The table rows p[r] = W_r R_r for r = 0..rows-1 (the caller passes rows = min(M, C) + 1),
  // R_r = [sin(r w_0)..sin(r w_{D/2-1}), cos(r w_0)..cos(r w_{D/2-1})], w_i = 10000^(-2i/D),
  // D = d_model, all in float64, rounded to fp32 once. w_r: [H*dh, d_model] row-major.
  static std::vector<float> BuildTable(const std::vector<float>& w_r, int64_t out_width,
                                       int64_t d_model, int64_t rows);

 private:
  int n_heads_;
  int head_dim_;
  int memory_;
  int clamp_len_;
  KvFormat ring_format_;
  int64_t span_;  // ring rows, M + 1
  std::vector<float> table_;
  std::vector<float> u_, v_;
};

}  // namespace abcd
