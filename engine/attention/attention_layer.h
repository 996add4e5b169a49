// One attention sublayer: the projections (one GEMM for q|k|v|extra over every row of a step,
// one GEMM for the output) around a per-type AttentionState kernel that touches each
// sequence's state row by row. Three uses:
//   ForwardCausal        decoder self attention; rows of one sequence must appear in order
//   ForwardBidirectional encoder self attention over one whole source (temporary state)
//   BuildMemory + ForwardCross   cross attention: memory built once from the encoder output
// 1/sqrt(dh) is folded into the query weights at load. Immutable after Load; thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_state.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace abcd {

class AttentionLayer {
 public:
  // `prefix` names the tensors (e.g. "decoder.layers.0.attn"); `shared_prefix` names the
  // stack's shared abc control (e.g. "decoder.shared_control"), used when spec.shared_control.
  static absl::StatusOr<std::unique_ptr<AttentionLayer>> Load(const ModelConfig& config,
                                                              const AttentionSpec& spec,
                                                              const std::string& prefix,
                                                              const std::string& shared_prefix,
                                                              bool cross, WeightLoader& weights);

  const AttentionSpec& spec() const { return spec_; }
  const AttentionState& state() const { return *state_; }
  // Weights as loaded, for backends that keep their own copy. Self attention: fused rows
  // [q; k; v; extra] (q scaled by 1/sqrt(dh)); cross: query_* = q, fused = [k; v; extra].
  const std::vector<float>& fused_weight() const { return fused_weight_; }
  const std::vector<float>& fused_bias() const { return fused_bias_; }
  const std::vector<float>& query_weight() const { return query_weight_; }
  const std::vector<float>& query_bias() const { return query_bias_; }
  const std::vector<float>& out_weight() const { return out_weight_; }
  const std::vector<float>& out_bias() const { return out_bias_; }

  // x: [rows, d] (normalised layer input), out: [rows, d].
  void ForwardCausal(const float* x, int64_t rows, std::span<const StateRef> states,
                     float* out) const;
  void ForwardBidirectional(const float* x, int64_t rows, float* out) const;
  void BuildMemory(const float* source, int64_t rows, const StateRef& state) const;
  void ForwardCross(const float* x, int64_t rows, std::span<const StateRef> states,
                    float* out) const;

 private:
  AttentionLayer() = default;
  KeyValueRow KeyValueAt(const float* projection_row, int64_t k_offset) const;

  AttentionSpec spec_;
  int64_t d_model_ = 0;
  std::unique_ptr<AttentionState> state_;
  // Self attention: fused [q; k; v; extra] rows. Cross: query_ = q only, fused_ = [k; v; extra].
  std::vector<float> fused_weight_, fused_bias_;
  std::vector<float> query_weight_, query_bias_;
  std::vector<float> out_weight_, out_bias_;
};

}  // namespace abcd
