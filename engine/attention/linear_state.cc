#include "engine/attention/linear_state.h"

#include <algorithm>
#include <cmath>

#include "absl/container/inlined_vector.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {

LinearState::LinearState(int n_heads, int head_dim, std::unique_ptr<FeatureMap> phi, bool gated,
                         float eps)
    : n_heads_(n_heads), head_dim_(head_dim), phi_(std::move(phi)), gated_(gated), eps_(eps) {}

int64_t LinearState::HeadFloats() const {
  return static_cast<int64_t>(phi_->features()) * (head_dim_ + 1);
}

int64_t LinearState::FixedFloats() const { return n_heads_ * HeadFloats(); }

void LinearState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

namespace {

// S = g*S + p (x) v, z = g*z + p: the gated (or, with g = 1, plain) fold of one token.
ABCD_VECTOR_CLONES void FoldToken(const float* phi, const float* v, float g, float mix, int f_count,
                                  int head_dim, float* s, float* z) {
  for (int f = 0; f < f_count; ++f) {
    const float p = mix * phi[f];
    float* s_row = s + static_cast<int64_t>(f) * head_dim;
    for (int c = 0; c < head_dim; ++c) s_row[c] = g * s_row[c] + p * v[c];
    z[f] = g * z[f] + p;
  }
}

// o = S^T phi; returns phi . z.
ABCD_VECTOR_CLONES float ReadState(const float* phi, const float* s, const float* z, int f_count,
                                   int head_dim, float* o) {
  std::fill(o, o + head_dim, 0.0f);
  float denominator = 0.0f;
  for (int f = 0; f < f_count; ++f) {
    const float p = phi[f];
    denominator += p * z[f];
    const float* s_row = s + static_cast<int64_t>(f) * head_dim;
    for (int c = 0; c < head_dim; ++c) o[c] += p * s_row[c];
  }
  return denominator;
}

// Columns of S (or outputs of a mat-vec) per block, accumulated in registers.
constexpr int kBlock = 32;

// FoldToken then ReadState in one pass over S (per element the same operations in the same
// order): S and z take the token, o = S^T phi_q; returns phi_q . z.
ABCD_VECTOR_CLONES float FoldAndRead(const float* phi_k, const float* v, float g, float mix,
                                     const float* phi_q, int f_count, int head_dim, float* s,
                                     float* z, float* o) {
  int c0 = 0;
  for (; c0 + kBlock <= head_dim; c0 += kBlock) {
    float acc[kBlock] = {}, vb[kBlock];
    for (int l = 0; l < kBlock; ++l) vb[l] = v[c0 + l];
    for (int f = 0; f < f_count; ++f) {
      const float p = mix * phi_k[f], read = phi_q[f];
      float* s_row = s + static_cast<int64_t>(f) * head_dim + c0;
      for (int l = 0; l < kBlock; ++l) {
        s_row[l] = g * s_row[l] + p * vb[l];
        acc[l] += read * s_row[l];
      }
    }
    for (int l = 0; l < kBlock; ++l) o[c0 + l] = acc[l];
  }
  for (int c = c0; c < head_dim; ++c) o[c] = 0.0f;
  float denominator = 0.0f;
  for (int f = 0; f < f_count; ++f) {
    const float p = mix * phi_k[f], read = phi_q[f];
    float* s_row = s + static_cast<int64_t>(f) * head_dim;
    for (int c = c0; c < head_dim; ++c) {
      s_row[c] = g * s_row[c] + p * v[c];
      o[c] += read * s_row[c];
    }
    z[f] = g * z[f] + p;
    denominator += read * z[f];
  }
  return denominator;
}

// y[i] = bias[i] (0 when null) + sum_c w_t[c, i] x[c], c in order: a [out, in] matrix times x
// from its transpose [in, out], vectorised over the outputs.
ABCD_VECTOR_CLONES void TransposedMatVec(const float* w_t, const float* bias, const float* x,
                                         int in, int out, float* y) {
  int i0 = 0;
  for (; i0 + kBlock <= out; i0 += kBlock) {
    float acc[kBlock];
    for (int l = 0; l < kBlock; ++l) acc[l] = bias == nullptr ? 0.0f : bias[i0 + l];
    for (int c = 0; c < in; ++c) {
      const float xc = x[c];
      const float* row = w_t + static_cast<int64_t>(c) * out + i0;
      for (int l = 0; l < kBlock; ++l) acc[l] += row[l] * xc;
    }
    for (int l = 0; l < kBlock; ++l) y[i0 + l] = acc[l];
  }
  for (int i = i0; i < out; ++i) y[i] = bias == nullptr ? 0.0f : bias[i];
  for (int c = 0; c < in && i0 < out; ++c) {
    const float xc = x[c];
    const float* row = w_t + static_cast<int64_t>(c) * out;
    for (int i = i0; i < out; ++i) y[i] += row[i] * xc;
  }
}

// [heads, rows, cols] -> [heads, cols, rows].
std::vector<float> TransposeHeads(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<float> t(w.size());
  const int64_t heads = rows * cols == 0 ? 0 : static_cast<int64_t>(w.size()) / (rows * cols);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        t[(h * cols + c) * rows + r] = w[(h * rows + r) * cols + c];
    }
  }
  return t;
}

}  // namespace

// Head layout: S [F, dh] then z [F].
void LinearState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int f_count = phi_->features();
  // Inline buffers: no heap allocation for the usual F, dh of a few hundred.
  absl::InlinedVector<float, 512> phi(f_count), scratch(head_dim_);
  float* s = state.fixed + h * HeadFloats();
  float* z = s + static_cast<int64_t>(f_count) * head_dim_;
  phi_->Apply(h, row.k + h * head_dim_, phi.data(), scratch.data());
  float g = 1.0f, mix = 1.0f;
  if (gated_) {
    g = 1.0f / (1.0f + std::exp(-row.extra[h]));
    mix = 1.0f - g;
  }
  FoldToken(phi.data(), row.v + h * head_dim_, g, mix, f_count, head_dim_, s, z);
}

void LinearState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const int f_count = phi_->features();
  absl::InlinedVector<float, 512> phi(f_count), scratch(head_dim_);
  const float* s = state.fixed + h * HeadFloats();
  const float* z = s + static_cast<int64_t>(f_count) * head_dim_;
  float* o = out + h * head_dim_;
  phi_->Apply(h, q + h * head_dim_, phi.data(), scratch.data());
  const float denominator = ReadState(phi.data(), s, z, f_count, head_dim_, o);
  const float inv = 1.0f / std::max(denominator, eps_);
  for (int c = 0; c < head_dim_; ++c) o[c] *= inv;
}

void LinearState::ScanHead(int h, const ScanArgs& args, const RowRun& run) const {
  // Per row: phi(k) and phi(q), then one pass over S that folds the token in and reads it.
  const int f_count = phi_->features();
  absl::InlinedVector<float, 512> phi_k(f_count), phi_q(f_count), scratch(head_dim_);
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    float* s = args.states[static_cast<size_t>(r)].fixed + h * HeadFloats();
    float* z = s + static_cast<int64_t>(f_count) * head_dim_;
    const KeyValueRow row = args.KeyValueOf(r);
    phi_->Apply(h, row.k + h * head_dim_, phi_k.data(), scratch.data());
    phi_->Apply(h, args.rows + r * args.width + h * head_dim_, phi_q.data(), scratch.data());
    float g = 1.0f, mix = 1.0f;
    if (gated_) {
      g = 1.0f / (1.0f + std::exp(-row.extra[h]));
      mix = 1.0f - g;
    }
    float* o = args.out + r * args.out_width + h * head_dim_;
    const float denominator = FoldAndRead(phi_k.data(), row.v + h * head_dim_, g, mix, phi_q.data(),
                                          f_count, head_dim_, s, z, o);
    const float inv = 1.0f / std::max(denominator, eps_);
    for (int c = 0; c < head_dim_; ++c) o[c] *= inv;
  }
}

RandomFeatureMap::RandomFeatureMap(int n_heads, int head_dim, int random_features, RfaKernel kernel,
                                   std::vector<float> scaled_projection)
    : head_dim_(head_dim),
      random_features_(random_features),
      kernel_(kernel),
      projection_(std::move(scaled_projection)),
      projection_t_(TransposeHeads(projection_, random_features, head_dim)) {}

int RandomFeatureMap::features() const {
  return kernel_ == RfaKernel::kGaussian ? 2 * random_features_ : random_features_;
}

void RandomFeatureMap::Apply(int head, const float* x, float* features, float* scratch) const {
  float norm = 0.0f;
  for (int c = 0; c < head_dim_; ++c) norm += x[c] * x[c];
  const float inv_norm = 1.0f / std::max(std::sqrt(norm), 1e-12f);
  for (int c = 0; c < head_dim_; ++c) scratch[c] = x[c] * inv_norm;
  const float scale = 1.0f / std::sqrt(static_cast<float>(random_features_));
  // w_i . x for every i at once (into features[0, D)), then the map in place.
  TransposedMatVec(projection_t_.data() + static_cast<int64_t>(head) * head_dim_ * random_features_,
                   nullptr, scratch, head_dim_, random_features_, features);
  if (kernel_ == RfaKernel::kGaussian) {
    // [sin | cos] of the D dots: the dots move to scratch (dh >= D is not assumed: in chunks).
    for (int first = 0; first < random_features_; first += head_dim_) {
      const int n = std::min(head_dim_, random_features_ - first);
      std::copy(features + first, features + first + n, scratch);
      cpu::SinCosArray(scratch, n, features + first, features + random_features_ + first);
    }
    for (int i = 0; i < 2 * random_features_; ++i) features[i] *= scale;
  } else {
    for (int i = 0; i < random_features_; ++i) features[i] = scale * std::max(features[i], 0.0f);
  }
}

LearnedReluFeatureMap::LearnedReluFeatureMap(int head_dim, int features, std::vector<float> weight,
                                             std::vector<float> bias)
    : head_dim_(head_dim),
      features_(features),
      weight_(std::move(weight)),
      bias_(std::move(bias)),
      weight_t_(TransposeHeads(weight_, features, head_dim)) {}

void LearnedReluFeatureMap::Apply(int head, const float* x, float* features, float*) const {
  TransposedMatVec(weight_t_.data() + static_cast<int64_t>(head) * head_dim_ * features_,
                   bias_.data() + static_cast<int64_t>(head) * features_, x, head_dim_, features_,
                   features);
  for (int f = 0; f < features_; ++f) features[f] = std::max(features[f], 0.0f);
}

void EluFeatureMap::Apply(int, const float* x, float* features, float*) const {
  // elu(x) + 1 = x + 1 (x > 0), exp(x) (x <= 0): exp of min(x, 0) as one vectorised pass.
  for (int c = 0; c < head_dim_; ++c) features[c] = std::min(x[c], 0.0f);
  cpu::ExpArray(features, head_dim_, features);
  for (int c = 0; c < head_dim_; ++c) features[c] = x[c] > 0.0f ? x[c] + 1.0f : features[c];
}

}  // namespace abcd
