#include "engine/model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"

namespace abcd {
namespace {

using nlohmann::json;

// Sizes beyond these are refused before anything is allocated (a 1e9-wide config must fail in
// microseconds, not after gigabytes).
constexpr int64_t kMaxHidden = 1 << 16;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxIntermediate = 1 << 20;
constexpr int64_t kMaxWindow = 1 << 20;

absl::Status KeyError(absl::string_view file, absl::string_view key, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, " key \"", key, "\": ", message));
}

// Typed access to a Hugging Face JSON object: a JSON null counts as absent (HF writes every
// default out, many as null).
class HfFields {
 public:
  HfFields(const json& object, absl::string_view file) : object_(object), file_(file) {}

  bool Present(absl::string_view key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  const json* Find(absl::string_view key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  absl::Status Error(absl::string_view key, absl::string_view message) const {
    return KeyError(file_, key, message);
  }
  absl::StatusOr<int> Int(absl::string_view key, std::optional<int64_t> fallback, int64_t min_value,
                          int64_t max_value) const {
    const json* v = Find(key);
    if (v == nullptr) {
      if (fallback) return static_cast<int>(*fallback);
      return Error(key, "is required");
    }
    if (!v->is_number_integer()) return Error(key, "must be an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max_value)) {
      return Error(key, absl::StrCat("must be in [", min_value, ", ", max_value, "]"));
    }
    const int64_t value = v->get<int64_t>();
    if (value < min_value || value > max_value) {
      return Error(key, absl::StrCat("must be in [", min_value, ", ", max_value, "], got ", value));
    }
    return static_cast<int>(value);
  }
  absl::StatusOr<double> Number(absl::string_view key, double fallback, double min_exclusive,
                                double max_inclusive) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Error(key, "must be a number");
    const double value = v->get<double>();
    if (!std::isfinite(value) || !(value > min_exclusive) || value > max_inclusive) {
      return Error(
          key, absl::StrCat("must be in (", min_exclusive, ", ", max_inclusive, "], got ", value));
    }
    return value;
  }
  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, "must be true or false");
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(absl::string_view key, std::string fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return Error(key, "must be a string");
    return v->get<std::string>();
  }
  // Refuses a key that is present and not the accepted value(s) (null always passes).
  absl::Status RefuseIfSet(absl::string_view key, absl::string_view why) const {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (v->is_boolean() && !v->get<bool>()) return absl::OkStatus();
    return Error(key, absl::StrCat("is not supported: ", why));
  }

 private:
  const json& object_;
  std::string file_;
};

constexpr absl::string_view kConfig = "config.json";

// rope_parameters (transformers >= 5) first, then rope_theta + rope_scaling.
absl::StatusOr<RopeSpec> ParseRope(const HfFields& f, double default_theta) {
  RopeSpec rope;
  rope.enabled = true;
  const json* parameters = f.Find("rope_parameters");
  const json* scaling = f.Find("rope_scaling");
  std::string where = "rope_scaling";
  if (parameters != nullptr) {
    if (!parameters->is_object()) return f.Error("rope_parameters", "must be an object");
    scaling = parameters;
    where = "rope_parameters";
  }
  ABCD_ASSIGN_OR_RETURN(rope.theta, f.Number("rope_theta", default_theta, 0.0, 1e12));
  if (scaling == nullptr) return rope;
  if (!scaling->is_object()) return f.Error(where, "must be an object");
  const HfFields s(*scaling, absl::StrCat(kConfig, " ", where));
  if (parameters != nullptr) {
    ABCD_ASSIGN_OR_RETURN(const double theta, s.Number("rope_theta", rope.theta, 0.0, 1e12));
    rope.theta = theta;
  }
  std::string type;
  ABCD_ASSIGN_OR_RETURN(type, s.String("rope_type", ""));
  if (type.empty()) {
    ABCD_ASSIGN_OR_RETURN(type, s.String("type", "default"));
  }
  if (type == "default") return rope;
  if (type == "linear") {
    rope.scaling = RopeSpec::Scaling::kLinear;
    ABCD_ASSIGN_OR_RETURN(rope.factor, s.Number("factor", 0.0, 0.0, 1e6));
    if (rope.factor == 0.0) return s.Error("factor", "is required for linear scaling");
    return rope;
  }
  if (type == "llama3") {
    rope.scaling = RopeSpec::Scaling::kLlama3;
    ABCD_ASSIGN_OR_RETURN(rope.factor, s.Number("factor", 0.0, 0.0, 1e6));
    if (rope.factor == 0.0) return s.Error("factor", "is required for llama3 scaling");
    ABCD_ASSIGN_OR_RETURN(rope.low_freq_factor, s.Number("low_freq_factor", 1.0, 0.0, 1e6));
    ABCD_ASSIGN_OR_RETURN(rope.high_freq_factor, s.Number("high_freq_factor", 4.0, 0.0, 1e6));
    if (!(rope.high_freq_factor > rope.low_freq_factor)) {
      return s.Error("high_freq_factor", "must be greater than low_freq_factor");
    }
    ABCD_ASSIGN_OR_RETURN(rope.original_max_positions,
                          s.Number("original_max_position_embeddings", 8192.0, 0.0, 1e9));
    return rope;
  }
  return s.Error("rope_type", absl::StrCat("\"", type.substr(0, 32),
                                           "\" is not supported (default, linear and llama3 are)"));
}

// Keys shared by every model type: vocabulary, width, depth, tied head, special ids.
absl::Status ParseCommon(const HfFields& f, ModelConfig& c, absl::string_view layers_key,
                         int64_t default_vocab = 32000) {
  ABCD_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", default_vocab, 1, kMaxVocab));
  ABCD_ASSIGN_OR_RETURN(c.d_model, f.Int("hidden_size", std::nullopt, 2, kMaxHidden));
  ABCD_ASSIGN_OR_RETURN(const int layers, f.Int(layers_key, std::nullopt, 1, kMaxLayers));
  c.decoder_layers.resize(static_cast<size_t>(layers));
  ABCD_ASSIGN_OR_RETURN(c.tie_embeddings, f.Bool("tie_word_embeddings", false));
  c.architecture = Architecture::kDecoder;
  c.positional = Positional::kNone;
  c.scale_embeddings = false;
  c.norm = Norm::kPre;
  c.norm_kind = NormKind::kRmsNorm;
  c.activation = Activation::kSwiGlu;
  ABCD_ASSIGN_OR_RETURN(c.bos_id, f.Int("bos_token_id", 1, 0, c.vocab_size - 1));
  // eos_token_id may be a list (newer configs): the first ends generation, the rest too.
  if (const json* eos = f.Find("eos_token_id"); eos != nullptr && eos->is_array()) {
    if (eos->empty()) return f.Error("eos_token_id", "must not be an empty list");
    for (size_t i = 0; i < eos->size(); ++i) {
      const json& id = (*eos)[i];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c.vocab_size) {
        return f.Error("eos_token_id",
                       absl::StrCat("[", i, "] must be a token id below vocab_size"));
      }
      if (i == 0) {
        c.eos_id = static_cast<int>(id.get<int64_t>());
      } else {
        c.extra_stop_ids.push_back(static_cast<int>(id.get<int64_t>()));
      }
    }
  } else {
    ABCD_ASSIGN_OR_RETURN(c.eos_id, f.Int("eos_token_id", 2, 0, c.vocab_size - 1));
  }
  ABCD_ASSIGN_OR_RETURN(c.pad_id, f.Int("pad_token_id", 0, 0, c.vocab_size - 1));
  c.unk_id = 0;  // SentencePiece <unk>
  return absl::OkStatus();
}

bool IsQwen(const ModelConfig& c) {
  return c.hf_model_type == "qwen2" || c.hf_model_type == "qwen3";
}

// The window of each layer (0: full attention), as transformers derives it. Mistral:
// sliding_window (null or an integer) on every layer. Qwen2/Qwen3: sliding_window counts only with
// use_sliding_window true; layer_types (written by transformers >= 4.53) names each layer
// "full_attention" or "sliding_attention", and without it the layers from max_window_layers on
// slide. A query at t sees keys s with t - s < window (transformers' sliding-window mask).
absl::StatusOr<std::vector<int>> LayerWindows(const HfFields& f, const ModelConfig& c) {
  const size_t layers = c.decoder_layers.size();
  std::vector<int> windows(layers, 0);
  if (c.hf_model_type == "mistral") {
    if (!f.Present("sliding_window")) return windows;
    ABCD_ASSIGN_OR_RETURN(const int window, f.Int("sliding_window", std::nullopt, 1, kMaxWindow));
    windows.assign(layers, window);
    return windows;
  }
  if (!IsQwen(c)) return windows;
  ABCD_ASSIGN_OR_RETURN(const bool use_window, f.Bool("use_sliding_window", false));
  int window = 0;
  if (use_window && f.Present("sliding_window")) {
    ABCD_ASSIGN_OR_RETURN(window, f.Int("sliding_window", std::nullopt, 1, kMaxWindow));
  }
  const json* types = f.Find("layer_types");
  if (types == nullptr) {
    ABCD_ASSIGN_OR_RETURN(const int first, f.Int("max_window_layers", 28, 0, kMaxLayers));
    for (size_t i = static_cast<size_t>(first); i < layers; ++i) windows[i] = window;
    return windows;
  }
  if (!types->is_array() || types->size() != layers) {
    return f.Error("layer_types", "must be a list with one entry per layer");
  }
  for (size_t i = 0; i < layers; ++i) {
    const std::string key = absl::StrCat("layer_types[", i, "]");
    if ((*types)[i] == "full_attention") continue;
    if ((*types)[i] != "sliding_attention") {
      return f.Error(key, "must be \"full_attention\" or \"sliding_attention\"");
    }
    if (window == 0) {
      return f.Error(key,
                     "\"sliding_attention\" needs use_sliding_window true and a sliding_window");
    }
    windows[i] = window;
  }
  return windows;
}

// Llama and the models built like it: Mistral and Qwen2/Qwen3 (sliding windows, LayerWindows),
// Qwen2 (q/k/v biases, none on o_proj) and Qwen3 (per-head q_norm / k_norm before RoPE, head_dim
// 128 by default, attention_bias on all four projections).
absl::Status ParseLlama(const HfFields& f, ModelConfig& c) {
  const bool qwen3 = c.hf_model_type == "qwen3";
  ABCD_RETURN_IF_ERROR(ParseCommon(f, c, "num_hidden_layers", IsQwen(c) ? 151936 : 32000));
  ABCD_ASSIGN_OR_RETURN(c.n_heads, f.Int("num_attention_heads", std::nullopt, 1, c.d_model));
  ABCD_ASSIGN_OR_RETURN(const int kv_heads, f.Int("num_key_value_heads", c.n_heads, 1, c.n_heads));
  if (c.n_heads % kv_heads != 0) {
    return f.Error("num_key_value_heads",
                   absl::StrCat("must divide num_attention_heads (", c.n_heads, ")"));
  }
  ABCD_ASSIGN_OR_RETURN(const int head_dim,
                        f.Int("head_dim", qwen3 ? 128 : c.d_model / c.n_heads, 2, 4096));
  if (head_dim % 2 != 0) return f.Error("head_dim", "must be even (rotary pairs)");
  if (!qwen3 && !f.Present("head_dim") && c.d_model % c.n_heads != 0) {
    return f.Error("num_attention_heads", "must divide hidden_size when head_dim is absent");
  }
  ABCD_ASSIGN_OR_RETURN(c.d_ff, f.Int("intermediate_size", std::nullopt, 1, kMaxIntermediate));
  ABCD_ASSIGN_OR_RETURN(const std::string act, f.String("hidden_act", "silu"));
  if (act != "silu" && act != "swish") {
    return f.Error("hidden_act",
                   absl::StrCat("\"", act.substr(0, 32), "\" is not supported (silu)"));
  }
  ABCD_ASSIGN_OR_RETURN(const double eps, f.Number("rms_norm_eps", 1e-6, 0.0, 1.0));
  c.layer_norm_eps = static_cast<float>(eps);
  ABCD_ASSIGN_OR_RETURN(const RopeSpec rope, ParseRope(f, 10000.0));
  // Qwen2's q/k/v projections always have biases and o_proj none (no attention_bias key).
  bool qkv_bias = true, o_bias = false;
  if (c.hf_model_type != "qwen2") {
    ABCD_ASSIGN_OR_RETURN(qkv_bias, f.Bool("attention_bias", false));
    o_bias = qkv_bias;
  }
  // Qwen2/Qwen3 have no MLP biases (no mlp_bias key).
  c.hf_mlp_bias = false;
  if (!IsQwen(c)) {
    ABCD_ASSIGN_OR_RETURN(c.hf_mlp_bias, f.Bool("mlp_bias", false));
  }
  // A windowed layer keeps a ring of the last `window` keys and values (WindowState).
  ABCD_ASSIGN_OR_RETURN(const std::vector<int> windows, LayerWindows(f, c));
  for (size_t i = 0; i < c.decoder_layers.size(); ++i) {
    AttentionSpec& a = c.decoder_layers[i].attention;
    a.type = windows[i] > 0 ? AttentionType::kWindow : AttentionType::kSoftmax;
    a.window = windows[i];
    a.heads = c.n_heads;
    a.kv_heads = kv_heads;
    a.key_dim = head_dim;
    a.value_dim = head_dim;
    a.rope = rope;
    a.qkv_bias = qkv_bias;
    a.o_bias = o_bias;
    a.qk_norm = qwen3;
    a.norm_eps = c.layer_norm_eps;
  }
  return absl::OkStatus();
}

// abcd_llama (models/FORMAT.md): a Llama whose layers may be t2r or abc (no RoPE) by
// "abcd_layers", one entry per layer; written by models/convert.py --from-hf.
absl::Status ParseAbcdLayers(const HfFields& f, ModelConfig& c) {
  const json* list = f.Find("abcd_layers");
  if (list == nullptr || !list->is_array() || list->size() != c.decoder_layers.size()) {
    return f.Error("abcd_layers", "must be a list with one entry per layer");
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string key = absl::StrCat("abcd_layers[", i, "]");
    if (!(*list)[i].is_object()) return f.Error(key, "must be an object");
    const HfFields e((*list)[i], absl::StrCat(kConfig, " ", key));
    ABCD_ASSIGN_OR_RETURN(const std::string type, e.String("type", ""));
    AttentionSpec& a = c.decoder_layers[i].attention;
    if (type == "softmax") continue;
    if (type != "t2r" && type != "abc") {
      return e.Error("type", absl::StrCat("\"", type.substr(0, 32),
                                          "\" is not supported (softmax, t2r or abc)"));
    }
    if (a.kv_heads != a.heads || int64_t{a.key_dim} * a.heads != c.d_model) {
      return e.Error("type",
                     "t2r and abc layers need num_key_value_heads == num_attention_heads "
                     "and head_dim * num_attention_heads == hidden_size");
    }
    const bool qkv_bias = a.qkv_bias, o_bias = a.o_bias;
    a = AttentionSpec();
    a.qkv_bias = qkv_bias;
    a.o_bias = o_bias;
    if (type == "t2r") {
      a.type = AttentionType::kT2r;
      ABCD_ASSIGN_OR_RETURN(a.features, e.Int("features", std::nullopt, 1, 1 << 16));
      ABCD_ASSIGN_OR_RETURN(const double eps, e.Number("eps", 1e-6, 0.0, 1.0));
      a.eps = static_cast<float>(eps);
    } else {
      a.type = AttentionType::kAbc;
      ABCD_ASSIGN_OR_RETURN(a.slots, e.Int("slots", std::nullopt, 1, 1 << 16));
      a.layer_id = static_cast<int>(i);
    }
  }
  return absl::OkStatus();
}

// fla hybrids: config "attn" lists the layers that are softmax attention (fla/layers/attn.py:
// RoPE over head_dim = hidden_size / num_heads, GQA, optional q/k/v biases).
absl::Status ParseFlaHybrid(const HfFields& f, ModelConfig& c) {
  const json* attn = f.Find("attn");
  if (attn == nullptr) return absl::OkStatus();
  if (!attn->is_object()) return f.Error("attn", "must be an object or null");
  const HfFields a(*attn, absl::StrCat(kConfig, " attn"));
  ABCD_RETURN_IF_ERROR(a.RefuseIfSet("window_size", "sliding-window hybrid layers"));
  ABCD_RETURN_IF_ERROR(a.RefuseIfSet("qk_norm", "q/k norms in hybrid layers"));
  ABCD_ASSIGN_OR_RETURN(const int heads, a.Int("num_heads", std::nullopt, 1, c.d_model));
  ABCD_ASSIGN_OR_RETURN(const int kv_heads, a.Int("num_kv_heads", heads, 1, heads));
  if (heads % kv_heads != 0) return a.Error("num_kv_heads", "must divide num_heads");
  if (c.d_model % heads != 0 || (c.d_model / heads) % 2 != 0) {
    return a.Error("num_heads", "must divide hidden_size into even head widths");
  }
  ABCD_ASSIGN_OR_RETURN(const bool bias, a.Bool("qkv_bias", false));
  ABCD_ASSIGN_OR_RETURN(const double theta, a.Number("rope_theta", 10000.0, 0.0, 1e12));
  const json* layers = a.Find("layers");
  if (layers == nullptr || !layers->is_array()) return a.Error("layers", "must be a list");
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& index = (*layers)[i];
    if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
        index.get<int64_t>() >= static_cast<int64_t>(c.decoder_layers.size())) {
      return a.Error("layers", absl::StrCat("[", i, "] must be a layer index below ",
                                            c.decoder_layers.size()));
    }
    AttentionSpec s;
    s.type = AttentionType::kSoftmax;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.key_dim = c.d_model / heads;
    s.value_dim = s.key_dim;
    s.rope.enabled = true;
    s.rope.theta = theta;
    s.qkv_bias = bias;
    c.decoder_layers[static_cast<size_t>(index.get<int64_t>())].attention = s;
  }
  return absl::OkStatus();
}

// The fla skeleton: norms, MLP size, refusals shared by every fla model type.
absl::Status ParseFlaSkeleton(const HfFields& f, ModelConfig& c, double default_hidden_ratio) {
  ABCD_RETURN_IF_ERROR(ParseCommon(f, c, "num_hidden_layers"));
  ABCD_ASSIGN_OR_RETURN(const double eps, f.Number("norm_eps", 1e-6, 0.0, 1.0));
  c.layer_norm_eps = static_cast<float>(eps);
  ABCD_ASSIGN_OR_RETURN(const double ratio,
                        f.Number("hidden_ratio", default_hidden_ratio, 0.0, 64.0));
  if (f.Present("intermediate_size")) {
    ABCD_ASSIGN_OR_RETURN(c.d_ff, f.Int("intermediate_size", std::nullopt, 1, kMaxIntermediate));
  } else {
    c.d_ff = FlaIntermediateSize(c.d_model, ratio);
  }
  ABCD_ASSIGN_OR_RETURN(const std::string act, f.String("hidden_act", "swish"));
  if (act != "swish" && act != "silu") {
    return f.Error("hidden_act",
                   absl::StrCat("\"", act.substr(0, 32), "\" is not supported (swish)"));
  }
  ABCD_RETURN_IF_ERROR(f.RefuseIfSet("attnres_block_size", "attention residual blocks"));
  ABCD_ASSIGN_OR_RETURN(const bool affine, f.Bool("elementwise_affine", true));
  if (!affine)
    return f.Error("elementwise_affine", "false (norms without weights) is not supported");
  return absl::OkStatus();
}

// fla's use_short_conv and conv_size: the taps of the layer's ShortConvolutions, 0 for none. fla's
// models never pass a conv_bias on to the layer; a bias is read when the checkpoint holds one.
absl::StatusOr<int> ParseShortConv(const HfFields& f, bool fallback) {
  ABCD_ASSIGN_OR_RETURN(const bool use, f.Bool("use_short_conv", fallback));
  if (!use) return 0;
  return f.Int("conv_size", 4, 1, 64);
}

absl::StatusOr<MixerFeatureMap> ParseFeatureMap(const HfFields& f, MixerFeatureMap fallback,
                                                bool allow_t2r) {
  ABCD_ASSIGN_OR_RETURN(const std::string name, f.String("feature_map", ""));
  if (name.empty()) return fallback;
  if (name == "swish" || name == "silu") return MixerFeatureMap::kSwish;
  if (name == "relu") return MixerFeatureMap::kRelu;
  if (name == "t2r" && allow_t2r) return MixerFeatureMap::kT2r;
  return f.Error("feature_map", absl::StrCat("\"", name.substr(0, 32), "\" is not supported"));
}

// expand_k / expand_v give key_dim = int(d * expand_k); heads split them evenly.
absl::StatusOr<int> ExpandedWidth(const HfFields& f, absl::string_view key, double fallback,
                                  int hidden) {
  ABCD_ASSIGN_OR_RETURN(const double expand, f.Number(key, fallback, 0.0, 64.0));
  const int64_t width = static_cast<int64_t>(hidden * expand);
  if (width < 1) return f.Error(key, "gives an empty projection");
  return static_cast<int>(width);
}

absl::Status SetMixerHeads(const HfFields& f, ModelConfig& c, int heads, int key_dim, int value_dim,
                           AttentionSpec& a) {
  ABCD_ASSIGN_OR_RETURN(const int kv_heads, f.Int("num_kv_heads", heads, 1, heads));
  if (heads % kv_heads != 0) {
    return f.Error("num_kv_heads", absl::StrCat("must divide num_heads (", heads, ")"));
  }
  if (key_dim % heads != 0) return f.Error("expand_k", "key width must divide into num_heads");
  if (value_dim % heads != 0) return f.Error("expand_v", "value width must divide into num_heads");
  c.n_heads = heads;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.key_dim = key_dim / heads;
  a.value_dim = value_dim / heads;
  a.norm_eps = c.layer_norm_eps;
  return absl::OkStatus();
}

absl::Status ParseGsa(const HfFields& f, ModelConfig& c) {
  ABCD_RETURN_IF_ERROR(ParseFlaSkeleton(f, c, 4.0));
  ABCD_ASSIGN_OR_RETURN(const int conv_size, ParseShortConv(f, false));
  ABCD_ASSIGN_OR_RETURN(const int heads, f.Int("num_heads", 4, 1, c.d_model));
  // The constructor argument is misspelt exapnd_k; the saved key is expand_k.
  const char* k_key = f.Present("expand_k") || !f.Present("exapnd_k") ? "expand_k" : "exapnd_k";
  const char* v_key = f.Present("expand_v") || !f.Present("exapnd_v") ? "expand_v" : "exapnd_v";
  ABCD_ASSIGN_OR_RETURN(const int key_dim, ExpandedWidth(f, k_key, 1.0, c.d_model));
  ABCD_ASSIGN_OR_RETURN(const int value_dim, ExpandedWidth(f, v_key, 1.0, c.d_model));
  if (value_dim != c.d_model) {
    return f.Error(v_key, "must give a value width equal to hidden_size (the output norm's)");
  }
  AttentionSpec a;
  a.type = AttentionType::kGsa;
  a.conv_size = conv_size;
  ABCD_RETURN_IF_ERROR(SetMixerHeads(f, c, heads, key_dim, value_dim, a));
  ABCD_ASSIGN_OR_RETURN(a.slots, f.Int("num_slots", a.key_dim, 1, 1 << 16));
  ABCD_ASSIGN_OR_RETURN(const double normalizer, f.Number("gate_logit_normalizer", 8.0, 0.0, 1e6));
  a.gate_normalizer = static_cast<float>(normalizer);
  ABCD_ASSIGN_OR_RETURN(a.feature_map, ParseFeatureMap(f, MixerFeatureMap::kSwish, true));
  for (LayerSpec& layer : c.decoder_layers) layer.attention = a;
  return absl::OkStatus();
}

absl::Status ParseGlaOrRetnet(const HfFields& f, ModelConfig& c, AttentionType type) {
  const bool retnet = type == AttentionType::kRetnet;
  ABCD_RETURN_IF_ERROR(ParseFlaSkeleton(f, c, retnet ? 2.0 : 4.0));
  // fla never passes use_short_conv to its RetNet layer: retnet checkpoints hold no conv.
  int conv_size = 0;
  if (!retnet) {
    ABCD_ASSIGN_OR_RETURN(conv_size, ParseShortConv(f, false));
  }
  ABCD_ASSIGN_OR_RETURN(const int heads, f.Int("num_heads", retnet ? 8 : 4, 1, c.d_model));
  ABCD_ASSIGN_OR_RETURN(const int key_dim,
                        ExpandedWidth(f, "expand_k", retnet ? 1.0 : 0.5, c.d_model));
  ABCD_ASSIGN_OR_RETURN(const int value_dim,
                        ExpandedWidth(f, "expand_v", retnet ? 2.0 : 1.0, c.d_model));
  AttentionSpec a;
  a.type = type;
  a.conv_size = conv_size;
  ABCD_RETURN_IF_ERROR(SetMixerHeads(f, c, heads, key_dim, value_dim, a));
  ABCD_ASSIGN_OR_RETURN(a.output_gate, f.Bool("use_output_gate", true));
  if (retnet) {
    if (f.Present("feature_map")) return f.Error("feature_map", "is not supported for retnet");
    if (a.key_dim % 2 != 0) return f.Error("expand_k", "gives an odd head width (rotary pairs)");
    a.rope.enabled = true;
    a.rope.theta = 10000.0;
  } else {
    ABCD_ASSIGN_OR_RETURN(a.feature_map, ParseFeatureMap(f, MixerFeatureMap::kNone, false));
    a.gate_normalizer = 16.0f;
    ABCD_ASSIGN_OR_RETURN(a.gate_rank, f.Int("gate_low_rank_dim", 16, 1, 4096));
    if (f.Present("clamp_min")) {
      ABCD_ASSIGN_OR_RETURN(const double clamp, f.Number("clamp_min", 0.0, -1e9, 0.0));
      a.has_clamp = true;
      a.clamp_min = static_cast<float>(clamp);
    }
  }
  for (LayerSpec& layer : c.decoder_layers) layer.attention = a;
  return absl::OkStatus();
}

absl::Status ParseHgrn2(const HfFields& f, ModelConfig& c) {
  ABCD_RETURN_IF_ERROR(ParseFlaSkeleton(f, c, 4.0));
  ABCD_ASSIGN_OR_RETURN(const int conv_size, ParseShortConv(f, false));
  int heads = 0, expand_ratio = 0;
  if (f.Present("expand_ratio")) {
    ABCD_ASSIGN_OR_RETURN(expand_ratio, f.Int("expand_ratio", std::nullopt, 1, c.d_model));
    if (f.Present("num_heads")) {
      ABCD_ASSIGN_OR_RETURN(heads, f.Int("num_heads", std::nullopt, 1, c.d_model));
    } else {
      if (c.d_model % expand_ratio != 0) {
        return f.Error("expand_ratio", "must divide hidden_size");
      }
      heads = c.d_model / expand_ratio;
    }
  } else {
    ABCD_ASSIGN_OR_RETURN(heads, f.Int("num_heads", std::nullopt, 1, c.d_model));
    if (c.d_model % heads != 0) return f.Error("num_heads", "must divide hidden_size");
    expand_ratio = c.d_model / heads;
  }
  if (c.d_model % heads != 0) return f.Error("num_heads", "must divide hidden_size");
  AttentionSpec a;
  a.type = AttentionType::kHgrn2;
  a.conv_size = conv_size;
  c.n_heads = heads;
  a.heads = heads;
  a.kv_heads = heads;
  a.key_dim = expand_ratio;
  a.value_dim = c.d_model / heads;
  a.norm_eps = c.layer_norm_eps;
  ABCD_ASSIGN_OR_RETURN(c.hgrn2_lower_bounds, f.Bool("use_lower_bound", true));
  for (size_t i = 0; i < c.decoder_layers.size(); ++i) {
    c.decoder_layers[i].attention = a;
    c.decoder_layers[i].attention.layer_index = static_cast<int>(i);
  }
  return absl::OkStatus();
}

// Gated DeltaNet: num_heads q/k heads of head_dim, num_v_heads (default num_heads, a multiple of
// it) value heads of head_dim * expand_v, the short convolution on by default.
absl::Status ParseGatedDeltaNet(const HfFields& f, ModelConfig& c) {
  ABCD_RETURN_IF_ERROR(ParseFlaSkeleton(f, c, 4.0));
  ABCD_ASSIGN_OR_RETURN(const int conv_size, ParseShortConv(f, true));
  ABCD_ASSIGN_OR_RETURN(const int heads, f.Int("num_heads", 6, 1, 1024));
  ABCD_ASSIGN_OR_RETURN(const int head_dim, f.Int("head_dim", 256, 1, 4096));
  ABCD_ASSIGN_OR_RETURN(const int v_heads, f.Int("num_v_heads", heads, 1, 1024));
  if (v_heads % heads != 0) {
    return f.Error("num_v_heads", absl::StrCat("must be a multiple of num_heads (", heads, ")"));
  }
  ABCD_ASSIGN_OR_RETURN(const double expand_v, f.Number("expand_v", 2.0, 0.0, 64.0));
  const double value_dim = head_dim * expand_v;
  const int head_v = static_cast<int>(value_dim);
  if (head_v < 1 || std::abs(value_dim - head_v) > 1e-5 * value_dim) {
    return f.Error("expand_v", "must give an integer value head width (head_dim * expand_v)");
  }
  AttentionSpec a;
  a.type = AttentionType::kGatedDelta;
  a.conv_size = conv_size;
  a.heads = v_heads;
  a.kv_heads = heads;
  a.key_dim = head_dim;
  a.value_dim = head_v;
  a.norm_eps = c.layer_norm_eps;
  ABCD_ASSIGN_OR_RETURN(a.output_gate, f.Bool("use_gate", true));
  ABCD_ASSIGN_OR_RETURN(a.allow_neg_eigval, f.Bool("allow_neg_eigval", false));
  c.n_heads = v_heads;
  for (LayerSpec& layer : c.decoder_layers) layer.attention = a;
  return absl::OkStatus();
}

// generation_config.json: eos_token_id (int or list) adds stop ids. Its bos_token_id is not the
// prompt's: transformers reads it only to start generate() without input ids, while a prompt
// starts with what the tokenizer adds (LoadModelDirectoryConfig: tokenizer_config.json's
// bos_token through tokenizer.json, else config.json's bos_token_id).
absl::Status ApplyGenerationConfig(absl::string_view text, ModelConfig& c) {
  if (text.empty()) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(text, "generation_config.json"));
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("generation_config.json is not a JSON object");
  }
  const HfFields f(root, "generation_config.json");
  const json* eos = f.Find("eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  const json list = eos->is_array() ? *eos : json::array({*eos});
  for (size_t i = 0; i < list.size(); ++i) {
    const json& id = list[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c.vocab_size) {
      return f.Error("eos_token_id", absl::StrCat("[", i, "] must be a token id below vocab_size"));
    }
    const int token = static_cast<int>(id.get<int64_t>());
    if (token != c.eos_id && std::find(c.extra_stop_ids.begin(), c.extra_stop_ids.end(), token) ==
                                 c.extra_stop_ids.end()) {
      c.extra_stop_ids.push_back(token);
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyTokenizerConfig(absl::string_view text, ModelConfig& c) {
  if (text.empty()) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(text, "tokenizer_config.json"));
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
  }
  const HfFields f(root, "tokenizer_config.json");
  // An add_bos_token the file has decides, as transformers rebuilds the post-processor from it
  // (LlamaTokenizerFast; transformers 5 for every tokenizer.json): true adds bos, false none,
  // and so does null (falsy there), where elsewhere null counts as absent. Without one: true,
  // unless a tokenizer.json's post-processor says otherwise (LoadModelDirectoryConfig).
  if (const auto it = root.find("add_bos_token"); it != root.end() && it->is_null()) {
    c.add_bos = false;
  } else {
    ABCD_ASSIGN_OR_RETURN(c.add_bos, f.Bool("add_bos_token", true));
  }
  ABCD_ASSIGN_OR_RETURN(const bool add_eos, f.Bool("add_eos_token", false));
  if (add_eos) return f.Error("add_eos_token", "true is not supported for generation");
  return absl::OkStatus();
}

}  // namespace

bool IsHfConfig(const json& root) { return root.is_object() && root.contains("model_type"); }

int FlaIntermediateSize(int hidden_size, double hidden_ratio) {
  const int64_t base = static_cast<int64_t>(std::floor(hidden_size * hidden_ratio * 2.0 / 3.0));
  return static_cast<int>(256 * ((base + 255) / 256));
}

absl::StatusOr<ModelConfig> ParseHfConfig(const json& root, absl::string_view generation_config,
                                          absl::string_view tokenizer_config) {
  const HfFields f(root, kConfig);
  ModelConfig c;
  ABCD_ASSIGN_OR_RETURN(c.hf_model_type, f.String("model_type", ""));
  const std::string& type = c.hf_model_type;
  const bool llama_like =
      type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3";
  if (llama_like) {
    ABCD_RETURN_IF_ERROR(ParseLlama(f, c));
  } else if (type == "abcd_llama") {
    ABCD_RETURN_IF_ERROR(ParseLlama(f, c));
    ABCD_RETURN_IF_ERROR(ParseAbcdLayers(f, c));
  } else if (type == "gsa") {
    ABCD_RETURN_IF_ERROR(ParseGsa(f, c));
  } else if (type == "gla") {
    ABCD_RETURN_IF_ERROR(ParseGlaOrRetnet(f, c, AttentionType::kGla));
  } else if (type == "retnet") {
    ABCD_RETURN_IF_ERROR(ParseGlaOrRetnet(f, c, AttentionType::kRetnet));
  } else if (type == "hgrn2") {
    ABCD_RETURN_IF_ERROR(ParseHgrn2(f, c));
  } else if (type == "gated_deltanet") {
    ABCD_RETURN_IF_ERROR(ParseGatedDeltaNet(f, c));
  } else {
    return f.Error("model_type",
                   absl::StrCat("\"", type.substr(0, 64),
                                "\" is not supported (llama, mistral, qwen2, qwen3, gsa, gla, "
                                "retnet, hgrn2, gated_deltanet, abcd_llama)"));
  }
  if (!llama_like && type != "abcd_llama") {
    ABCD_RETURN_IF_ERROR(ParseFlaHybrid(f, c));
  }
  ABCD_RETURN_IF_ERROR(ApplyGenerationConfig(generation_config, c));
  ABCD_RETURN_IF_ERROR(ApplyTokenizerConfig(tokenizer_config, c));
  return c;
}

}  // namespace abcd
