// Kernelised linear attention: per head a feature map phi (F features), state S [F, dh] and
// z [F]; update S += phi(k) v^T, z += phi(k) (or the gated convex mix for gated RFA); read
// S^T phi(q) / max(phi(q) . z, eps). The three types differ only in phi:
//   rfa  random features of the l2-normalised input, sin/cos (gaussian) or relu (arccos)
//   t2r  learned per-head relu(W x + b)
//   elu  elu(x) + 1
#pragma once

#include <memory>
#include <vector>

#include "engine/attention/attention_state.h"

namespace abcd {

// phi for one head: input x[dh] -> features[F]. `scratch` holds at least dh floats.
class FeatureMap {
 public:
  virtual ~FeatureMap() = default;
  virtual int features() const = 0;
  virtual void Apply(int head, const float* x, float* features, float* scratch) const = 0;
};

class LinearState final : public AttentionState {
 public:
  // `gated`: the first n_heads extra projection columns are gate logits (rfa with gate).
  LinearState(int n_heads, int head_dim, std::unique_ptr<FeatureMap> phi, bool gated, float eps);
  int64_t FixedFloats() const override;
  std::pair<int64_t, int64_t> HeadStateRange(int head) const override {
    return {head * HeadFloats(), HeadFloats()};
  }
  int64_t ExtraColumns() const override { return gated_ ? n_heads_ : 0; }
  void Init(float* fixed) const override;
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // Per row phi(k), phi(q) and one pass over S that folds and reads (the same arithmetic as
  // UpdateHead then ReadHead).
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;
  const FeatureMap& feature_map() const { return *phi_; }
  bool gated() const { return gated_; }
  float eps() const { return eps_; }

 private:
  int64_t HeadFloats() const;

  int n_heads_;
  int head_dim_;
  std::unique_ptr<FeatureMap> phi_;
  bool gated_;
  float eps_;
};

// rfa: W = sigma * W~ per head, computed once at load.
class RandomFeatureMap final : public FeatureMap {
 public:
  RandomFeatureMap(int n_heads, int head_dim, int random_features, RfaKernel kernel,
                   std::vector<float> scaled_projection);
  int features() const override;
  void Apply(int head, const float* x, float* features, float* scratch) const override;
  int random_features() const { return random_features_; }
  RfaKernel kernel() const { return kernel_; }
  const std::vector<float>& projection() const { return projection_; }  // [H, D, dh]

 private:
  int head_dim_;
  int random_features_;
  RfaKernel kernel_;
  std::vector<float> projection_;    // [H, D, dh]
  std::vector<float> projection_t_;  // [H, dh, D]: Apply's matrix-vector product
};

// t2r: relu(W_h x + b_h), W [H, r, dh], b [H, r].
class LearnedReluFeatureMap final : public FeatureMap {
 public:
  LearnedReluFeatureMap(int head_dim, int features, std::vector<float> weight,
                        std::vector<float> bias);
  int features() const override { return features_; }
  void Apply(int head, const float* x, float* features, float* scratch) const override;
  const std::vector<float>& weight() const { return weight_; }  // [H, r, dh]
  const std::vector<float>& bias() const { return bias_; }      // [H, r]

 private:
  int head_dim_;
  int features_;
  std::vector<float> weight_;
  std::vector<float> bias_;
  std::vector<float> weight_t_;  // [H, dh, r]: Apply's matrix-vector product
};

// elu: elu(x) + 1 element-wise (F = dh).
class EluFeatureMap final : public FeatureMap {
 public:
  explicit EluFeatureMap(int head_dim) : head_dim_(head_dim) {}
  int features() const override { return head_dim_; }
  void Apply(int head, const float* x, float* features, float* scratch) const override;

 private:
  int head_dim_;
};

}  // namespace abcd
