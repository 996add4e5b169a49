// LoadHfAttentionLayer (attention_loader.h): the attention sublayers of Hugging Face checkpoints,
// with the tensor names as published (models/FORMAT.md, "Hugging Face checkpoints"): Llama's
// self_attn q/k/v/o_proj (GQA, RoPE, optional biases; Mistral and Qwen2/Qwen3 alike, Qwen3 with its
// per-head q_norm / k_norm, sliding windows as window rings of the key/value heads) and
// the fla mixers gsa, gla, retnet, hgrn2 and gated_deltanet with their gates and output norms,
// including the older fla names (g_norm for g_norm_swish_gate), and fla's short convolutions
// (`*_conv1d.weight`, optional `.bias`) in front of them (ShortConvState). The projections are
// fused into one matrix per layer as for abcd's own layers; everything the state kernels need
// besides (norm weights, the gla decay's second factor, t2r feature maps, hgrn2 lower bounds,
// convolution taps, the delta rule's A_log and dt_bias) goes to the state.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/attention/gated_delta_state.h"
#include "engine/attention/gated_linear_state.h"
#include "engine/attention/gsa_state.h"
#include "engine/attention/short_conv.h"
#include "engine/attention/softmax_state.h"
#include "engine/core/status_macros.h"
#include "engine/model/attention_loader.h"

namespace abcd {
namespace {

void Append(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// The first of `names` the checkpoint holds (the current fla name first, then older ones).
std::string FirstPresent(const WeightLoader& weights, std::initializer_list<std::string> names) {
  for (const std::string& name : names) {
    if (weights.Contains(name)) return name;
  }
  return *names.begin();
}

// hgrn2 lower bounds of layer `layer`: softmax over layers of the [L, d] parameter, cumulative
// sum, minus the first row (layer 0: exactly zero, i.e. none).
absl::StatusOr<std::vector<float>> Hgrn2LowerBound(const ModelConfig& config, int layer,
                                                   WeightLoader& weights) {
  const int64_t layers = static_cast<int64_t>(config.decoder_layers.size()), d = config.d_model;
  ABCD_ASSIGN_OR_RETURN(std::vector<float> raw, weights.Load("model.lower_bounds", {layers, d}));
  if (layer == 0) return std::vector<float>{};
  std::vector<float> bound(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) {
    double max_value = raw[static_cast<size_t>(c)];
    for (int64_t l = 1; l < layers; ++l) {
      max_value = std::max(max_value, static_cast<double>(raw[static_cast<size_t>(l * d + c)]));
    }
    double total = 0.0, upto = 0.0;
    for (int64_t l = 0; l < layers; ++l) {
      const double e = std::exp(raw[static_cast<size_t>(l * d + c)] - max_value);
      total += e;
      if (l >= 1 && l <= layer) upto += e;  // cumsum to `layer` minus the first row
    }
    bound[static_cast<size_t>(c)] = static_cast<float>(upto / total);
  }
  return bound;
}

struct Projections {
  std::vector<float> fused, fused_bias, out, out_bias;
  int64_t fused_rows = 0, out_in = 0;
  int64_t synthetic_floats = 0;  // zero biases made up here (not read from the checkpoint)
};

absl::Status LoadInto(WeightLoader& weights, const std::string& name, int64_t rows, int64_t cols,
                      Projections& p) {
  ABCD_ASSIGN_OR_RETURN(std::vector<float> w, weights.Load(name, {rows, cols}));
  Append(p.fused, w);
  p.fused_rows += rows;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AttentionState>> LoadLlama(const ModelConfig& c,
                                                          const AttentionSpec& a,
                                                          const std::string& prefix,
                                                          WeightLoader& weights, Projections& p) {
  const int64_t d = c.d_model, hd = a.key_dim, q = int64_t{a.heads} * hd,
                kv = int64_t{a.kv_heads} * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (auto [name, rows] :
       {std::pair<const char*, int64_t>{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
    const size_t first = p.fused.size();
    ABCD_RETURN_IF_ERROR(LoadInto(weights, absl::StrCat(prefix, ".", name, ".weight"), rows, d, p));
    std::vector<float> bias(static_cast<size_t>(rows), 0.0f);
    if (a.qkv_bias) {
      ABCD_ASSIGN_OR_RETURN(bias, weights.Load(absl::StrCat(prefix, ".", name, ".bias"), {rows}));
    }
    if (name == std::string("q_proj") && !a.qk_norm) {  // 1/sqrt(hd) folded into q (RoPE is linear)
      for (size_t i = first; i < p.fused.size(); ++i) p.fused[i] *= scale;
      for (float& b : bias) b *= scale;
    }
    Append(p.fused_bias, bias);
  }
  if (!a.qkv_bias) p.fused_bias.clear();
  ABCD_ASSIGN_OR_RETURN(p.out, weights.Load(prefix + ".o_proj.weight", {d, q}));
  if (a.o_bias) {
    ABCD_ASSIGN_OR_RETURN(p.out_bias, weights.Load(prefix + ".o_proj.bias", {d}));
  }
  p.out_in = q;
  std::vector<float> inv_freq =
      a.rope.enabled ? a.rope.InverseFrequencies(a.key_dim) : std::vector<float>{};
  // Qwen3: q_norm / k_norm over each head before RoPE; the norm would undo a scale folded into
  // q_proj, so 1/sqrt(hd) goes into q_norm's weight instead.
  std::vector<float> q_norm, k_norm;
  if (a.qk_norm) {
    ABCD_ASSIGN_OR_RETURN(q_norm, weights.Load(prefix + ".q_norm.weight", {hd}));
    ABCD_ASSIGN_OR_RETURN(k_norm, weights.Load(prefix + ".k_norm.weight", {hd}));
    for (float& w : q_norm) w *= scale;
  }
  if (a.type == AttentionType::kWindow) {  // Mistral's and Qwen's sliding windows
    return std::make_unique<WindowState>(a.heads, a.kv_heads, a.key_dim, a.window,
                                         std::move(inv_freq), std::move(q_norm), std::move(k_norm),
                                         a.norm_eps);
  }
  if (!a.qk_norm) {
    return std::make_unique<SoftmaxState>(a.heads, a.kv_heads, a.key_dim, std::move(inv_freq));
  }
  return std::make_unique<SoftmaxState>(a.heads, a.kv_heads, a.key_dim, std::move(inv_freq),
                                        std::move(q_norm), std::move(k_norm), a.norm_eps);
}

// abcd_llama's t2r and abc layers: Llama's q/k/v/o (MHA, head_dim * heads == d) around abcd's
// own kernels, without RoPE; q scaled by 1/sqrt(dh) as in abcd's layers; abc's exp control
// `control.{weight,bias}` as the extra columns.
absl::StatusOr<std::unique_ptr<AttentionState>> LoadAbcdMixer(const ModelConfig& c,
                                                              const AttentionSpec& a,
                                                              const std::string& prefix,
                                                              WeightLoader& weights,
                                                              Projections& p) {
  AttentionSpec llama = a;
  llama.heads = c.n_heads;
  llama.kv_heads = c.n_heads;
  llama.key_dim = c.head_dim();
  ABCD_RETURN_IF_ERROR(LoadLlama(c, llama, prefix, weights, p).status());
  const int64_t d = c.d_model;
  if (a.type == AttentionType::kAbc) {
    const int64_t n = int64_t{c.n_heads} * a.slots;
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".control.weight", n, d, p));
    ABCD_ASSIGN_OR_RETURN(std::vector<float> bias, weights.Load(prefix + ".control.bias", {n}));
    if (p.fused_bias.empty()) {
      p.fused_bias.assign(static_cast<size_t>(3 * d), 0.0f);
      p.synthetic_floats += 3 * d;
    }
    Append(p.fused_bias, bias);
  }
  return MakeAttentionState(c, a, prefix, weights);
}

absl::StatusOr<std::unique_ptr<AttentionState>> LoadGsa(const ModelConfig& c,
                                                        const AttentionSpec& a,
                                                        const std::string& prefix,
                                                        WeightLoader& weights, Projections& p) {
  if (weights.Contains(prefix + ".g_proj.weight")) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix,
                     ".g_proj.weight: gsa with an output gate (use_output_gate, 2024 fla) is not "
                     "supported"));
  }
  const int64_t d = c.d_model, K = a.key_dim, V = a.value_dim;
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".q_proj.weight", int64_t{a.heads} * K, d, p));
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".k_proj.weight", int64_t{a.kv_heads} * K, d, p));
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".v_proj.weight", int64_t{a.kv_heads} * V, d, p));
  ABCD_RETURN_IF_ERROR(
      LoadInto(weights, prefix + ".f_proj.weight", int64_t{a.kv_heads} * a.slots, d, p));
  const int64_t value_width = int64_t{a.heads} * V;
  ABCD_ASSIGN_OR_RETURN(std::vector<float> norm,
                        weights.Load(prefix + ".g_norm.weight", {value_width}));
  ABCD_ASSIGN_OR_RETURN(p.out, weights.Load(prefix + ".o_proj.weight", {d, value_width}));
  p.out_in = value_width;
  std::vector<float> t2r;
  if (a.feature_map == MixerFeatureMap::kT2r) {
    ABCD_ASSIGN_OR_RETURN(t2r, weights.Load(prefix + ".feature_map.layer.weight", {K, K}));
  }
  return std::make_unique<GsaState>(a.heads, a.kv_heads, a.key_dim, a.value_dim, a.slots,
                                    a.gate_normalizer, a.feature_map, std::move(t2r),
                                    std::move(norm), a.norm_eps);
}

absl::StatusOr<std::unique_ptr<AttentionState>> LoadGatedLinear(const ModelConfig& c,
                                                                const AttentionSpec& a,
                                                                const std::string& prefix,
                                                                WeightLoader& weights,
                                                                Projections& p) {
  const int64_t d = c.d_model, K = a.key_dim, V = a.value_dim;
  const int64_t q_width = int64_t{a.heads} * K, k_width = int64_t{a.kv_heads} * K;
  const int64_t value_width = int64_t{a.heads} * V;
  GatedLinearState::Options o;
  o.type = a.type;
  o.heads = a.heads;
  o.kv_heads = a.kv_heads;
  o.key_dim = a.key_dim;
  o.value_dim = a.value_dim;
  o.feature_map = a.feature_map;
  o.scale_query = true;
  o.output_gate = a.output_gate;
  o.has_clamp = a.has_clamp;
  o.clamp_min = a.clamp_min;
  o.gate_normalizer = a.gate_normalizer;
  o.gate_rank = a.gate_rank;
  o.norm_eps = a.norm_eps;
  if (a.type == AttentionType::kHgrn2) {
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".q_proj.weight", q_width, d, p));
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".f_proj.weight", q_width, d, p));
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".i_proj.weight", value_width, d, p));
    ABCD_ASSIGN_OR_RETURN(o.norm_weight, weights.Load(prefix + ".g_norm.weight", {value_width}));
    if (c.hgrn2_lower_bounds) {
      if (q_width != d) {
        return absl::FailedPreconditionError(absl::StrCat(
            prefix, ": hgrn2 lower bounds need num_heads * expand_ratio == hidden_size"));
      }
      ABCD_ASSIGN_OR_RETURN(o.lower_bound, Hgrn2LowerBound(c, a.layer_index, weights));
    }
  } else {
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".q_proj.weight", q_width, d, p));
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".k_proj.weight", k_width, d, p));
    ABCD_RETURN_IF_ERROR(
        LoadInto(weights, prefix + ".v_proj.weight", int64_t{a.kv_heads} * V, d, p));
    if (a.output_gate) {
      ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".g_proj.weight", value_width, d, p));
    }
    if (a.type == AttentionType::kGla) {
      const int64_t rank = a.gate_rank;
      ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".gk_proj.0.weight", rank, d, p));
      ABCD_ASSIGN_OR_RETURN(o.gate_up_weight,
                            weights.Load(prefix + ".gk_proj.1.weight", {k_width, rank}));
      ABCD_ASSIGN_OR_RETURN(o.gate_up_bias, weights.Load(prefix + ".gk_proj.1.bias", {k_width}));
    } else {
      o.rope_inv_freq = a.rope.InverseFrequencies(a.key_dim);
    }
    const std::string norm =
        FirstPresent(weights, {prefix + ".g_norm_swish_gate.weight", prefix + ".g_norm.weight"});
    ABCD_ASSIGN_OR_RETURN(o.norm_weight, weights.Load(norm, {V}));
  }
  ABCD_ASSIGN_OR_RETURN(p.out, weights.Load(prefix + ".o_proj.weight", {d, value_width}));
  p.out_in = value_width;
  return std::make_unique<GatedLinearState>(std::move(o));
}

absl::StatusOr<std::unique_ptr<AttentionState>> LoadGatedDelta(const ModelConfig& c,
                                                               const AttentionSpec& a,
                                                               const std::string& prefix,
                                                               WeightLoader& weights,
                                                               Projections& p) {
  const int64_t d = c.d_model, qk = int64_t{a.kv_heads} * a.key_dim;
  const int64_t value_width = int64_t{a.heads} * a.value_dim, heads = a.heads;
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".q_proj.weight", qk, d, p));
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".k_proj.weight", qk, d, p));
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".v_proj.weight", value_width, d, p));
  if (a.output_gate) {
    ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".g_proj.weight", value_width, d, p));
  }
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".a_proj.weight", heads, d, p));
  ABCD_RETURN_IF_ERROR(LoadInto(weights, prefix + ".b_proj.weight", heads, d, p));
  GatedDeltaState::Options o;
  o.heads = a.heads;
  o.kv_heads = a.kv_heads;
  o.key_dim = a.key_dim;
  o.value_dim = a.value_dim;
  o.output_gate = a.output_gate;
  o.allow_neg_eigval = a.allow_neg_eigval;
  o.silu_qkv = a.conv_size == 0;
  o.norm_eps = a.norm_eps;
  ABCD_ASSIGN_OR_RETURN(o.a_log, weights.Load(prefix + ".A_log", {heads}));
  ABCD_ASSIGN_OR_RETURN(o.dt_bias, weights.Load(prefix + ".dt_bias", {heads}));
  ABCD_ASSIGN_OR_RETURN(o.norm_weight, weights.Load(prefix + ".o_norm.weight", {a.value_dim}));
  ABCD_ASSIGN_OR_RETURN(p.out, weights.Load(prefix + ".o_proj.weight", {d, value_width}));
  p.out_in = value_width;
  return std::make_unique<GatedDeltaState>(std::move(o));
}

// fla's ShortConvolution of each convolved projection (in projection order) around `inner`:
// q|k|v (hgrn2: q|f|i, no activation), weights [C, 1, conv_size], biases when the checkpoint
// has them (all or none).
absl::StatusOr<std::unique_ptr<AttentionState>> WrapShortConv(
    const AttentionSpec& a, const std::string& prefix, WeightLoader& weights,
    std::unique_ptr<AttentionState> inner) {
  const bool hgrn2 = a.type == AttentionType::kHgrn2;
  const bool delta = a.type == AttentionType::kGatedDelta;
  const int64_t K = a.key_dim, V = a.value_dim;
  // Widths of the convolved projections: q, then k (hgrn2: f), then v (hgrn2: i).
  const int64_t q = (delta ? a.kv_heads : a.heads) * K;
  const int64_t k = (hgrn2 ? a.heads : a.kv_heads) * K;
  const int64_t v = (hgrn2 || delta ? a.heads : a.kv_heads) * V;
  const std::pair<const char*, int64_t> convs[] = {
      {"q_conv1d", q}, {hgrn2 ? "f_conv1d" : "k_conv1d", k}, {hgrn2 ? "i_conv1d" : "v_conv1d", v}};
  const bool bias = weights.Contains(absl::StrCat(prefix, ".", convs[0].first, ".bias"));
  ShortConvState::Options o;
  o.size = a.conv_size;
  o.silu = !hgrn2;
  for (const auto& [name, channels] : convs) {
    const std::string base = absl::StrCat(prefix, ".", name);
    ABCD_ASSIGN_OR_RETURN(std::vector<float> w,
                          weights.Load(base + ".weight", {channels, 1, int64_t{a.conv_size}}));
    Append(o.weight, w);
    if (bias) {
      ABCD_ASSIGN_OR_RETURN(std::vector<float> b, weights.Load(base + ".bias", {channels}));
      Append(o.bias, b);
    }
    o.channels += static_cast<int>(channels);
  }
  return std::make_unique<ShortConvState>(std::move(inner), std::move(o));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionLayer>> LoadHfAttentionLayer(const ModelConfig& config,
                                                                     const AttentionSpec& spec,
                                                                     const std::string& prefix,
                                                                     WeightFormat format,
                                                                     WeightLoader& weights) {
  AttentionLayer::Parts layer;
  layer.spec = spec;
  layer.d_model = config.d_model;
  Projections p;
  const int64_t floats_before = weights.loaded_floats();
  absl::StatusOr<std::unique_ptr<AttentionState>> state;
  switch (spec.type) {
    case AttentionType::kSoftmax:
    case AttentionType::kWindow:
      state = LoadLlama(config, spec, prefix, weights, p);
      break;
    case AttentionType::kT2r:
    case AttentionType::kAbc:
      state = LoadAbcdMixer(config, spec, prefix, weights, p);
      break;
    case AttentionType::kGsa:
      state = LoadGsa(config, spec, prefix, weights, p);
      break;
    case AttentionType::kGla:
    case AttentionType::kRetnet:
    case AttentionType::kHgrn2:
      state = LoadGatedLinear(config, spec, prefix, weights, p);
      break;
    case AttentionType::kGatedDelta:
      state = LoadGatedDelta(config, spec, prefix, weights, p);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(prefix, ": ", AttentionTypeName(spec.type),
                                                     " is not a Hugging Face layer type"));
  }
  if (state.ok() && spec.conv_size > 0) {
    state = WrapShortConv(spec, prefix, weights, *std::move(state));
  }
  if (!state.ok()) return state.status();
  layer.state = *std::move(state);
  // Bytes the state kernels keep besides the packed matrices (norms, gates, feature maps).
  const int64_t packed_floats = static_cast<int64_t>(p.fused.size() + p.fused_bias.size() +
                                                     p.out.size() + p.out_bias.size()) -
                                p.synthetic_floats;
  layer.state_weight_bytes = 4 * (weights.loaded_floats() - floats_before - packed_floats);
  const int64_t d = config.d_model;
  layer.fused = PackedMatrix::Pack(p.fused, p.fused_rows, d, format);
  layer.fused_bias = std::move(p.fused_bias);
  layer.out = PackedMatrix::Pack(p.out, d, p.out_in, format);
  layer.out_bias = std::move(p.out_bias);
  if (layer.state->PreparedWidth() > 0) {
    layer.layout = layer.state->PreparedLayout();
  } else {  // abcd's own kernels read the projection rows: q | k | v | extra, d each
    layer.layout = {d, 2 * d, 3 * d, p.fused_rows};
  }
  layer.attended_width = layer.state->AttendedWidth(d);
  if (layer.attended_width != p.out_in) {
    return absl::InternalError(absl::StrCat(prefix, ": inconsistent kernel row layout"));
  }
  return AttentionLayer::FromParts(std::move(layer));
}

}  // namespace abcd
