// ABC with learned (MLP) control: n slots per head hold the control-weighted running means of
// keys and values, K~ and V~, plus the log-normaliser L of the weights seen so far. Keeping the
// mean and L (instead of raw exp-weighted sums) is exact and cannot overflow at any length.
// Per head: K~ [n, dh], V~ [n, dh], L [n]. Extra projection columns: the H*n control logits.
#pragma once

#include "engine/attention/attention_state.h"

namespace abcd {

class AbcState final : public AttentionState {
 public:
  AbcState(int n_heads, int head_dim, int slots)
      : n_heads_(n_heads), head_dim_(head_dim), slots_(slots) {}
  int64_t FixedFloats() const override;
  int64_t ExtraColumns() const override { return static_cast<int64_t>(n_heads_) * slots_; }
  void Init(float* fixed) const override;
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;

 private:
  int64_t HeadFloats() const { return static_cast<int64_t>(slots_) * (2 * head_dim_ + 1); }

  int n_heads_;
  int head_dim_;
  int slots_;
};

// One head's update with control logits `control[n]`; exposed for the stability tests.
void AbcUpdateHead(const float* k, const float* v, const float* control, int slots, int head_dim,
                   float* keys, float* values, float* log_norm);

}  // namespace abcd
