#include "engine/attention/attention_layer.h"

#include <cmath>

#include "engine/core/status_macros.h"
#include "engine/ops/linear.h"

namespace abcd {
namespace {

void Append(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionLayer>> AttentionLayer::Load(
    const ModelConfig& config, const AttentionSpec& spec, const std::string& prefix,
    const std::string& shared_prefix, bool cross, WeightLoader& weights) {
  std::unique_ptr<AttentionLayer> layer(new AttentionLayer());
  const int64_t d = config.d_model;
  const int64_t heads = config.n_heads;
  layer->spec_ = spec;
  layer->d_model_ = d;
  ABCD_ASSIGN_OR_RETURN(layer->state_, MakeAttentionState(config, spec, prefix, weights));

  ABCD_ASSIGN_OR_RETURN(std::vector<float> wq, weights.Load(prefix + ".q.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> bq, weights.Load(prefix + ".q.bias", {d}));
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim()));
  for (float& w : wq) w *= scale;
  for (float& b : bq) b *= scale;
  ABCD_ASSIGN_OR_RETURN(std::vector<float> wk, weights.Load(prefix + ".k.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> bk, weights.Load(prefix + ".k.bias", {d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> wv, weights.Load(prefix + ".v.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> bv, weights.Load(prefix + ".v.bias", {d}));
  ABCD_ASSIGN_OR_RETURN(layer->out_weight_, weights.Load(prefix + ".o.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(layer->out_bias_, weights.Load(prefix + ".o.bias", {d}));

  std::vector<float> we, be;  // extra columns: abc control or rfa gate logits
  if (spec.type == AttentionType::kAbc) {
    const std::string control = spec.shared_control ? shared_prefix : prefix + ".control";
    const int64_t n = heads * spec.slots;
    ABCD_ASSIGN_OR_RETURN(we, weights.Load(control + ".weight", {n, d}));
    ABCD_ASSIGN_OR_RETURN(be, weights.Load(control + ".bias", {n}));
  } else if (spec.type == AttentionType::kRfa && spec.gate) {
    ABCD_ASSIGN_OR_RETURN(we, weights.Load(prefix + ".gate.weight", {heads, d}));
    ABCD_ASSIGN_OR_RETURN(be, weights.Load(prefix + ".gate.bias", {heads}));
  }

  if (cross) {
    layer->query_weight_ = std::move(wq);
    layer->query_bias_ = std::move(bq);
  } else {
    Append(layer->fused_weight_, wq);
    Append(layer->fused_bias_, bq);
  }
  for (const auto* part : {&wk, &wv, &we}) Append(layer->fused_weight_, *part);
  for (const auto* part : {&bk, &bv, &be}) Append(layer->fused_bias_, *part);
  return layer;
}

KeyValueRow AttentionLayer::KeyValueAt(const float* projection_row, int64_t k_offset) const {
  return {projection_row + k_offset, projection_row + k_offset + d_model_,
          projection_row + k_offset + 2 * d_model_};
}

void AttentionLayer::ForwardCausal(const float* x, int64_t rows, std::span<const StateRef> states,
                                   float* out) const {
  const int64_t d = d_model_;
  const int64_t width = static_cast<int64_t>(fused_bias_.size());
  std::vector<float> projection(rows * width), attended(rows * d);
  cpu::Linear(x, rows, d, fused_weight_.data(), fused_bias_.data(), width, projection.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = projection.data() + r * width;
    state_->Update(KeyValueAt(row, d), states[r]);
    state_->Read(row, states[r], attended.data() + r * d);
  }
  cpu::Linear(attended.data(), rows, d, out_weight_.data(), out_bias_.data(), d, out);
}

void AttentionLayer::ForwardBidirectional(const float* x, int64_t rows, float* out) const {
  const int64_t d = d_model_;
  const int64_t width = static_cast<int64_t>(fused_bias_.size());
  std::vector<float> projection(rows * width), attended(rows * d);
  cpu::Linear(x, rows, d, fused_weight_.data(), fused_bias_.data(), width, projection.data());
  // A temporary state for this source only: every key is folded in before any query reads.
  std::vector<float> fixed(state_->FixedFloats());
  state_->Init(fixed.data());
  KvCache kv;
  if (state_->UsesKvCache()) {
    kv.width = d;
    kv.keys.resize(rows * d);
    kv.values.resize(rows * d);
  }
  StateRef state{fixed.data(), state_->UsesKvCache() ? &kv : nullptr, 0};
  for (int64_t r = 0; r < rows; ++r) {
    state.position = r;
    state_->Update(KeyValueAt(projection.data() + r * width, d), state);
  }
  for (int64_t r = 0; r < rows; ++r) {
    state_->Read(projection.data() + r * width, state, attended.data() + r * d);
  }
  cpu::Linear(attended.data(), rows, d, out_weight_.data(), out_bias_.data(), d, out);
}

void AttentionLayer::BuildMemory(const float* source, int64_t rows, const StateRef& state) const {
  const int64_t width = static_cast<int64_t>(fused_bias_.size());
  std::vector<float> projection(rows * width);
  cpu::Linear(source, rows, d_model_, fused_weight_.data(), fused_bias_.data(), width,
              projection.data());
  StateRef row_state = state;
  for (int64_t r = 0; r < rows; ++r) {
    row_state.position = r;
    state_->Update(KeyValueAt(projection.data() + r * width, 0), row_state);
  }
}

void AttentionLayer::ForwardCross(const float* x, int64_t rows, std::span<const StateRef> states,
                                  float* out) const {
  const int64_t d = d_model_;
  std::vector<float> queries(rows * d), attended(rows * d);
  cpu::Linear(x, rows, d, query_weight_.data(), query_bias_.data(), d, queries.data());
  for (int64_t r = 0; r < rows; ++r) {
    state_->Read(queries.data() + r * d, states[r], attended.data() + r * d);
  }
  cpu::Linear(attended.data(), rows, d, out_weight_.data(), out_bias_.data(), d, out);
}

}  // namespace abcd
