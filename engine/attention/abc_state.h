// ABC: n slots per head hold control-weighted running means of keys and values, K~ and V~, plus
// the log-normaliser L of the weights seen so far. Keeping the mean and L (instead of raw
// exp-weighted sums) is exact and cannot overflow at any length.
//
// One kernel for every abc control (models/FORMAT.md, "abc control"): the control only decides
// the per-slot log-control a' of a token (exp: a; sigmoid: logsigmoid(a); relu: log(a) or -inf;
// random: 0 on one hashed slot, -inf elsewhere; cluster: 0 on the lowest empty slot, else on the
// nearest centroid K~_j). A slot with a' = -inf is not written; the read masks slots never
// written (L = -inf) and a head with no live slot reads 0. random with reduce "sum" keeps plain
// sums (no L) and reads all n slots; position adds phi_j k with phi = column t of the linformer
// table (signed; nothing is written at t >= N, which the executor refuses); block keeps the
// running mean of block floor(t/c) in ring slot floor(t/c) mod n (overwritten by the block's first
// token) and reads the slots holding a block.
// Per head: K~ [n, dh], V~ [n, dh], L [n] (mean) or K~, V~ only (sum). Extra projection
// columns: the H*n control logits (exp, sigmoid, relu only).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/attention/attention_state.h"

namespace abcd {

class AbcState final : public AttentionState {
 public:
  // position: `position_table` is the [slots, max_positions] linformer weight; block: `block` = c.
  AbcState(int n_heads, int head_dim, int slots, AbcControl control = AbcControl::kExp,
           AbcReduce reduce = AbcReduce::kMean, int64_t seed = 0, int layer_id = 0, int block = 0,
           std::vector<float> position_table = {}, int max_positions = 0)
      : n_heads_(n_heads),
        head_dim_(head_dim),
        slots_(slots),
        control_(control),
        reduce_(reduce),
        seed_(seed),
        layer_id_(layer_id),
        block_(block),
        max_positions_(max_positions),
        position_table_(std::move(position_table)) {}
  int64_t FixedFloats() const override;
  std::pair<int64_t, int64_t> HeadStateRange(int head) const override {
    return {head * HeadFloats(), HeadFloats()};
  }
  int64_t ExtraColumns() const override;
  void Init(float* fixed) const override;
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // Learned controls (exp, sigmoid, relu): the run's rows fused per row (slot_scan.h); the other
  // controls write one slot per token and keep the row-by-row default.
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  AbcControl control() const { return control_; }
  AbcReduce reduce() const { return reduce_; }
  // random control: the slot token `position` of head `head` writes.
  int RandomSlot(int head, int64_t position) const;
  // cluster control: the slot a key k joins (lowest empty slot, else argmin ||k - K~_j||^2, ties
  // lowest j) given one head's centroids and log-normalisers.
  static int ClusterSlot(const float* k, const float* keys, const float* log_norm, int slots,
                         int head_dim);

 private:
  int64_t HeadFloats() const {
    return static_cast<int64_t>(slots_) * (2 * head_dim_ + (reduce_ == AbcReduce::kMean ? 1 : 0));
  }

  int n_heads_;
  int head_dim_;
  int slots_;
  AbcControl control_;
  AbcReduce reduce_;
  int64_t seed_;
  int layer_id_;
  int block_;
  int max_positions_;
  std::vector<float> position_table_;  // position: [slots, max_positions]
};

// One head's mean update with log-controls `log_control[n]` (a'; -inf = slot not written);
// exposed for the stability tests. With exp control a' is the control logit itself.
void AbcUpdateHead(const float* k, const float* v, const float* log_control, int slots,
                   int head_dim, float* keys, float* values, float* log_norm);

// out[dh] = sum over live slots j (log_norm[j] > -inf; every slot when log_norm is null) of
// softmax_j(K~_j . q) V~_j; 0 when no slot is live.
void AbcReadHead(const float* q, const float* keys, const float* values, const float* log_norm,
                 int slots, int head_dim, float* out);

// splitmix64 finaliser (the random control's slot hash).
uint64_t SplitMix64(uint64_t x);

}  // namespace abcd
