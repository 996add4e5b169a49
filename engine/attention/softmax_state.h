// Softmax attention over a growing KvCache: the baseline whose memory grows with every token.
// Used causally (decoder), bidirectionally (encoder: all rows appended before any read) and for
// cross attention (the cache holds the projected encoder outputs).
#pragma once

#include "engine/attention/attention_state.h"

namespace abcd {

class SoftmaxState final : public AttentionState {
 public:
  SoftmaxState(int n_heads, int head_dim) : n_heads_(n_heads), head_dim_(head_dim) {}
  int64_t FixedFloats() const override { return 0; }
  bool UsesKvCache() const override { return true; }
  void Init(float*) const override {}
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;

 private:
  int n_heads_;
  int head_dim_;
};

// Softmax over `window` tokens t, t - dilation, ..., t - (window - 1) * dilation (dilation 1: the
// last `window`), kept in a fixed ring of the last (window - 1) * dilation + 1 keys and values
// (tokens of the other residues are read by later queries).
class WindowState final : public AttentionState {
 public:
  WindowState(int n_heads, int head_dim, int window, int dilation = 1)
      : n_heads_(n_heads),
        head_dim_(head_dim),
        window_(window),
        dilation_(dilation),
        span_(int64_t{window - 1} * dilation + 1) {}
  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;

 private:
  int n_heads_;
  int head_dim_;
  int window_;
  int dilation_;
  int64_t span_;  // ring rows
};

// out[dh] = sum_i softmax_i(q . keys[i]) values[i] over `count` rows `stride` floats apart.
void SoftmaxReadHead(const float* q, const float* keys, const float* values, int64_t count,
                     int64_t stride, int head_dim, float* out);
// The same over bf16 rows (a bf16 KvCache), computed in fp32.
void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values, int64_t count,
                     int64_t stride, int head_dim, float* out);
// Both with a per-row additive score term: softmax_i(q . keys[i] + bias[i]) (txl's relative
// positions); `bias` holds `count` floats.
void SoftmaxReadHead(const float* q, const float* keys, const float* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out);
void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values,
                     const float* bias, int64_t count, int64_t stride, int head_dim, float* out);

}  // namespace abcd
