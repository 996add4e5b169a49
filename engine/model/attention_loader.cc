// The attention sublayers of abcd's own checkpoints (attention_loader.h): tensors
// "<prefix>.{q,k,v,o}.{weight,bias}", the abc control or rfa gate as extra columns, and the
// per-type state kernels with the tensors they own.
#include "engine/model/attention_loader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/attention/abc_state.h"
#include "engine/attention/linear_state.h"
#include "engine/attention/softmax_state.h"
#include "engine/attention/txl_state.h"
#include "engine/core/status_macros.h"

namespace abcd {

std::string LinformerTableName(absl::string_view prefix) {
  if (absl::StartsWith(prefix, "encoder.")) return "encoder.linformer.weight";
  if (absl::EndsWith(prefix, ".cross")) return "decoder.cross_linformer.weight";
  return "decoder.linformer.weight";
}

absl::StatusOr<std::unique_ptr<AttentionState>> MakeAttentionState(const ModelConfig& config,
                                                                   const AttentionSpec& spec,
                                                                   const std::string& prefix,
                                                                   WeightLoader& weights) {
  const int heads = config.n_heads;
  const int dh = config.head_dim();
  switch (spec.type) {
    case AttentionType::kSoftmax:
      return std::make_unique<SoftmaxState>(heads, dh);
    case AttentionType::kWindow:
      return std::make_unique<WindowState>(heads, dh, spec.window, spec.dilation);
    case AttentionType::kAbc: {
      std::vector<float> table;
      if (spec.control == AbcControl::kPosition) {
        // One table per stack: decoder self, encoder self, and the decoder's cross table for
        // cross attention (prefix "decoder.layers.i.cross"); each layer keeps its own copy.
        ABCD_ASSIGN_OR_RETURN(
            table, weights.Load(LinformerTableName(prefix), {spec.slots, spec.max_positions}));
      }
      return std::make_unique<AbcState>(heads, dh, spec.slots, spec.control, spec.reduce, spec.seed,
                                        spec.layer_id, spec.block, std::move(table),
                                        spec.max_positions);
    }
    case AttentionType::kRfa: {
      const int64_t features = spec.features;
      ABCD_ASSIGN_OR_RETURN(std::vector<float> projection,
                            weights.Load(prefix + ".rfa.proj", {heads, features, dh}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> sigma,
                            weights.Load(prefix + ".rfa.sigma", {heads, dh}));
      // w_i = sigma * w~_i, folded once.
      for (int h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < features; ++i) {
          float* row = projection.data() + (h * features + i) * dh;
          for (int c = 0; c < dh; ++c) row[c] *= sigma[h * dh + c];
        }
      }
      auto phi = std::make_unique<RandomFeatureMap>(heads, dh, spec.features, spec.kernel,
                                                    std::move(projection));
      return std::make_unique<LinearState>(heads, dh, std::move(phi), spec.gate, spec.eps);
    }
    case AttentionType::kT2r: {
      const int64_t r = spec.features;
      ABCD_ASSIGN_OR_RETURN(std::vector<float> w,
                            weights.Load(prefix + ".t2r.weight", {heads, r, dh}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> b, weights.Load(prefix + ".t2r.bias", {heads, r}));
      auto phi =
          std::make_unique<LearnedReluFeatureMap>(dh, spec.features, std::move(w), std::move(b));
      return std::make_unique<LinearState>(heads, dh, std::move(phi), false, spec.eps);
    }
    case AttentionType::kElu:
      return std::make_unique<LinearState>(heads, dh, std::make_unique<EluFeatureMap>(dh), false,
                                           spec.eps);
    case AttentionType::kTxl: {
      // txl is decoder self attention only: u and v are the decoder stack's, shared by its layers.
      const int64_t d = config.d_model;
      ABCD_ASSIGN_OR_RETURN(std::vector<float> w_r, weights.Load(prefix + ".r.weight", {d, d}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> u, weights.Load("decoder.r_w_bias", {heads, dh}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> v, weights.Load("decoder.r_r_bias", {heads, dh}));
      // q arrives scaled by 1/sqrt(dh); scaling u and v alike gives ((q + u).k + (q + v).p) /
      // sqrt(dh).
      const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
      for (float& x : u) x *= scale;
      for (float& x : v) x *= scale;
      const int64_t rows = int64_t{std::min(spec.memory, spec.clamp_len)} + 1;
      return std::make_unique<TxlState>(heads, dh, spec.memory, spec.clamp_len, spec.ring_format,
                                        TxlState::BuildTable(w_r, d, d, rows), std::move(u),
                                        std::move(v));
    }
    case AttentionType::kGsa:
    case AttentionType::kGla:
    case AttentionType::kRetnet:
    case AttentionType::kHgrn2:
    case AttentionType::kGatedDelta:
      break;  // Hugging Face layers only: LoadHfAttentionLayer builds them
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported attention type ", AttentionTypeName(spec.type)));
}

namespace {

void AppendRows(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionLayer>> LoadAttentionLayer(
    const ModelConfig& config, const AttentionSpec& spec, const std::string& prefix,
    const std::string& shared_prefix, bool cross, WeightFormat format, WeightLoader& weights) {
  AttentionLayer::Parts layer;
  const int64_t d = config.d_model;
  const int64_t heads = config.n_heads;
  layer.spec = spec;
  layer.d_model = d;
  const int64_t floats_before = weights.loaded_floats();
  ABCD_ASSIGN_OR_RETURN(layer.state, MakeAttentionState(config, spec, prefix, weights));
  layer.state_weight_bytes = 4 * (weights.loaded_floats() - floats_before);

  ABCD_ASSIGN_OR_RETURN(std::vector<float> wq, weights.Load(prefix + ".q.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> bq, weights.Load(prefix + ".q.bias", {d}));
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim()));
  for (float& w : wq) w *= scale;
  for (float& b : bq) b *= scale;
  ABCD_ASSIGN_OR_RETURN(std::vector<float> wk, weights.Load(prefix + ".k.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> bk, weights.Load(prefix + ".k.bias", {d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> wv, weights.Load(prefix + ".v.weight", {d, d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> bv, weights.Load(prefix + ".v.bias", {d}));
  ABCD_ASSIGN_OR_RETURN(std::vector<float> wo, weights.Load(prefix + ".o.weight", {d, d}));
  layer.out = PackedMatrix::Pack(wo, d, d, format);
  ABCD_ASSIGN_OR_RETURN(layer.out_bias, weights.Load(prefix + ".o.bias", {d}));

  std::vector<float> we, be;  // extra columns: abc control or rfa gate logits
  if (spec.type == AttentionType::kAbc && AbcControlIsLearned(spec.control)) {
    // random, position, block and cluster have no projection: a checkpoint carrying `control.*`
    // for them is refused by the loader's unused-tensor check.
    const std::string control = spec.shared_control ? shared_prefix : prefix + ".control";
    const int64_t n = heads * spec.slots;
    ABCD_ASSIGN_OR_RETURN(we, weights.Load(control + ".weight", {n, d}));
    ABCD_ASSIGN_OR_RETURN(be, weights.Load(control + ".bias", {n}));
  } else if (spec.type == AttentionType::kRfa && spec.gate) {
    ABCD_ASSIGN_OR_RETURN(we, weights.Load(prefix + ".gate.weight", {heads, d}));
    ABCD_ASSIGN_OR_RETURN(be, weights.Load(prefix + ".gate.bias", {heads}));
  }

  std::vector<float> fused;
  if (cross) {
    layer.query = PackedMatrix::Pack(wq, d, d, format);
    layer.query_bias = std::move(bq);
  } else {
    AppendRows(fused, wq);
    AppendRows(layer.fused_bias, bq);
  }
  for (const auto* part : {&wk, &wv, &we}) AppendRows(fused, *part);
  for (const auto* part : {&bk, &bv, &be}) AppendRows(layer.fused_bias, *part);
  const int64_t width = static_cast<int64_t>(layer.fused_bias.size());
  layer.fused = PackedMatrix::Pack(fused, width, d, format);
  layer.layout = {d, 2 * d, 3 * d, width};
  layer.attended_width = d;
  return AttentionLayer::FromParts(std::move(layer));
}

}  // namespace abcd
