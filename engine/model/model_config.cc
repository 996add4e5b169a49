#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "engine/model/hf_config.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

using nlohmann::json;

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("config field \"", field, "\": ", message));
}

// Typed field access that reports the JSON path on error.
class Fields {
 public:
  Fields(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  std::string Path(absl::string_view key) const {
    return prefix_.empty() ? std::string(key) : absl::StrCat(prefix_, ".", key);
  }
  bool Has(absl::string_view key) const { return object_.contains(key); }

  absl::StatusOr<int> Int(absl::string_view key, std::optional<int> fallback, int min_value) const {
    const auto it = object_.find(key);
    if (it == object_.end()) {
      if (fallback) return *fallback;
      return FieldError(Path(key), "is required");
    }
    if (!it->is_number_integer()) return FieldError(Path(key), "must be an integer");
    const int64_t value = it->get<int64_t>();
    if (value < min_value || value > (1 << 30)) {
      return FieldError(Path(key), absl::StrCat("must be in [", min_value, ", 2^30], got ", value));
    }
    return static_cast<int>(value);
  }
  absl::StatusOr<int64_t> NonNegativeInt64(absl::string_view key) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return FieldError(Path(key), "is required");
    if (!it->is_number_integer()) return FieldError(Path(key), "must be an integer");
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(Path(key), "must be in [0, 2^63)");
    }
    const int64_t value = it->get<int64_t>();
    if (value < 0) return FieldError(Path(key), absl::StrCat("must be >= 0, got ", value));
    return value;
  }
  absl::StatusOr<float> Float(absl::string_view key, float fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_number()) return FieldError(Path(key), "must be a number");
    const double value = it->get<double>();
    if (!(value > 0.0) || value > 1.0) return FieldError(Path(key), "must be in (0, 1]");
    return static_cast<float>(value);
  }
  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return fallback;
    if (!it->is_boolean()) return FieldError(Path(key), "must be true or false");
    return it->get<bool>();
  }
  absl::StatusOr<std::string> String(absl::string_view key,
                                     std::optional<std::string> fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end()) {
      if (fallback) return *fallback;
      return FieldError(Path(key), "is required");
    }
    if (!it->is_string()) return FieldError(Path(key), "must be a string");
    return it->get<std::string>();
  }

 private:
  const json& object_;
  std::string prefix_;
};

enum class Role { kDecoderSelf, kEncoderSelf, kCross };

// abc "control" (default exp) and, for random, "seed" (required) and "reduce" (mean | sum); for
// position "max_positions", for block "block" (both required, decoder self attention only).
absl::Status ParseAbcControl(const Fields& f, Role role, AttentionSpec& spec) {
  ABCD_ASSIGN_OR_RETURN(const std::string control, f.String("control", "exp"));
  if (control == "exp") {
    spec.control = AbcControl::kExp;
  } else if (control == "sigmoid") {
    spec.control = AbcControl::kSigmoid;
  } else if (control == "relu") {
    spec.control = AbcControl::kRelu;
  } else if (control == "random") {
    spec.control = AbcControl::kRandom;
  } else if (control == "position") {
    spec.control = AbcControl::kPosition;
  } else if (control == "block") {
    spec.control = AbcControl::kBlock;
  } else if (control == "cluster") {
    spec.control = AbcControl::kCluster;
  } else {
    return FieldError(
        f.Path("control"),
        absl::StrCat("unknown abc control \"", control,
                     "\" (expected exp, sigmoid, relu, random, position, block or cluster)"));
  }
  for (auto [key, owner] : {std::pair<const char*, AbcControl>{"seed", AbcControl::kRandom},
                            {"reduce", AbcControl::kRandom},
                            {"max_positions", AbcControl::kPosition},
                            {"block", AbcControl::kBlock}}) {
    if (spec.control != owner && f.Has(key)) {
      return FieldError(f.Path(key), absl::StrCat("is only allowed with control \"",
                                                  AbcControlName(owner), "\""));
    }
  }
  if (spec.shared_control && !AbcControlIsLearned(spec.control)) {
    return FieldError(f.Path("shared_control"),
                      absl::StrCat("needs a learned control (not \"", control, "\")"));
  }
  // position has a causal, a bidirectional (encoder) and a cross form, each with its own table.
  if (role != Role::kDecoderSelf && spec.control == AbcControl::kBlock) {
    return FieldError(f.Path("control"), absl::StrCat("\"", control,
                                                      "\" is only supported in decoder self "
                                                      "attention"));
  }
  if (spec.control == AbcControl::kPosition) {
    ABCD_ASSIGN_OR_RETURN(spec.max_positions, f.Int("max_positions", std::nullopt, 1));
    spec.reduce = AbcReduce::kSum;  // signed sums: no log-normaliser
    return absl::OkStatus();
  }
  if (spec.control == AbcControl::kBlock) {
    ABCD_ASSIGN_OR_RETURN(spec.block, f.Int("block", std::nullopt, 1));
    spec.reduce = AbcReduce::kSum;  // liveness and fill follow from the position: no L
    return absl::OkStatus();
  }
  if (spec.control != AbcControl::kRandom) return absl::OkStatus();
  ABCD_ASSIGN_OR_RETURN(spec.seed, f.NonNegativeInt64("seed"));
  ABCD_ASSIGN_OR_RETURN(const std::string reduce, f.String("reduce", "mean"));
  if (reduce == "mean") {
    spec.reduce = AbcReduce::kMean;
  } else if (reduce == "sum") {
    spec.reduce = AbcReduce::kSum;
  } else {
    return FieldError(f.Path("reduce"),
                      absl::StrCat("must be \"mean\" or \"sum\", got \"", reduce, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<AttentionSpec> ParseAttention(const json& node, const std::string& path, Role role) {
  if (!node.is_object()) return FieldError(path, "must be an object");
  Fields f(node, path);
  ABCD_ASSIGN_OR_RETURN(const std::string type, f.String("type", std::nullopt));
  AttentionSpec spec;
  if (type == "softmax") {
    spec.type = AttentionType::kSoftmax;
  } else if (type == "window") {
    spec.type = AttentionType::kWindow;
    ABCD_ASSIGN_OR_RETURN(spec.window, f.Int("window", std::nullopt, 1));
    ABCD_ASSIGN_OR_RETURN(spec.dilation, f.Int("dilation", 1, 1));
    if (spec.WindowSpan() > (int64_t{1} << 30)) {
      return FieldError(f.Path("dilation"),
                        absl::StrCat("(window - 1) * dilation + 1 must be at most 2^30, got ",
                                     spec.WindowSpan()));
    }
  } else if (type == "abc") {
    spec.type = AttentionType::kAbc;
    ABCD_ASSIGN_OR_RETURN(spec.slots, f.Int("slots", std::nullopt, 1));
    ABCD_ASSIGN_OR_RETURN(spec.shared_control, f.Bool("shared_control", false));
    ABCD_RETURN_IF_ERROR(ParseAbcControl(f, role, spec));
  } else if (type == "rfa") {
    spec.type = AttentionType::kRfa;
    ABCD_ASSIGN_OR_RETURN(spec.features, f.Int("features", std::nullopt, 1));
    ABCD_ASSIGN_OR_RETURN(const std::string kernel, f.String("kernel", "gaussian"));
    if (kernel == "gaussian") {
      spec.kernel = RfaKernel::kGaussian;
    } else if (kernel == "arccos") {
      spec.kernel = RfaKernel::kArccos;
    } else {
      return FieldError(f.Path("kernel"),
                        absl::StrCat("must be \"gaussian\" or \"arccos\", got \"", kernel, "\""));
    }
    ABCD_ASSIGN_OR_RETURN(spec.gate, f.Bool("gate", false));
    ABCD_ASSIGN_OR_RETURN(spec.eps, f.Float("eps", 1e-2f));
  } else if (type == "t2r") {
    spec.type = AttentionType::kT2r;
    ABCD_ASSIGN_OR_RETURN(spec.features, f.Int("features", std::nullopt, 1));
    ABCD_ASSIGN_OR_RETURN(spec.eps, f.Float("eps", 1e-6f));
  } else if (type == "elu") {
    spec.type = AttentionType::kElu;
    ABCD_ASSIGN_OR_RETURN(spec.eps, f.Float("eps", 1e-6f));
  } else if (type == "txl") {
    if (role != Role::kDecoderSelf) {
      return FieldError(f.Path("type"),
                        "txl attention is only supported in decoder self attention");
    }
    spec.type = AttentionType::kTxl;
    ABCD_ASSIGN_OR_RETURN(spec.memory, f.Int("memory", std::nullopt, 1));
    if (spec.memory >= (1 << 30)) {
      return FieldError(f.Path("memory"), "must be below 2^30");
    }
    ABCD_ASSIGN_OR_RETURN(spec.clamp_len, f.Int("clamp_len", std::nullopt, 1));
  } else if (type == "gmat") {
    if (role != Role::kEncoderSelf) {
      return FieldError(f.Path("type"),
                        "\"gmat\" is only allowed in encoder_layers (there is no causal GMAT)");
    }
    spec.type = AttentionType::kSoftmax;  // the softmax tensors, with the GMAT mask
    ABCD_ASSIGN_OR_RETURN(spec.gmat_chunk, f.Int("chunk", 0, 0));
  } else {
    return FieldError(
        f.Path("type"),
        absl::StrCat("unknown attention type \"", type,
                     "\" (expected softmax, window, abc, rfa, t2r, elu, txl or gmat)"));
  }
  if (spec.type != AttentionType::kTxl) {
    for (const char* key : {"memory", "clamp_len"}) {
      if (f.Has(key)) return FieldError(f.Path(key), "is only allowed on txl attention");
    }
  }
  if (spec.gmat_chunk < 0 && f.Has("chunk")) {
    return FieldError(f.Path("chunk"), "is only allowed on gmat attention");
  }
  if (spec.type != AttentionType::kAbc) {
    for (const char* key : {"control", "seed", "reduce", "max_positions", "block"}) {
      if (f.Has(key)) return FieldError(f.Path(key), "is only allowed on abc attention");
    }
  }
  if (spec.type != AttentionType::kWindow && f.Has("dilation")) {
    return FieldError(f.Path("dilation"), "is only allowed on window attention");
  }
  if (role == Role::kCross && spec.type == AttentionType::kWindow) {
    return FieldError(f.Path("type"), "cross attention must be softmax, abc, rfa, t2r or elu");
  }
  if (role == Role::kCross && spec.gate) {
    return FieldError(f.Path("gate"), "is not allowed on cross attention (gates are causal)");
  }
  if (role == Role::kEncoderSelf && spec.type == AttentionType::kWindow) {
    return FieldError(f.Path("type"), "window attention is causal-only (decoder)");
  }
  if (role == Role::kEncoderSelf && spec.gate) {
    return FieldError(f.Path("gate"), "gated rfa is causal-only (decoder)");
  }
  if (spec.shared_control && role == Role::kCross) {
    return FieldError(f.Path("shared_control"), "is only supported for self attention");
  }
  return spec;
}

absl::StatusOr<std::vector<LayerSpec>> ParseLayers(const json& root, const std::string& key,
                                                   bool decoder, bool cross) {
  const auto it = root.find(key);
  if (it == root.end()) return FieldError(key, "is required");
  if (!it->is_array() || it->empty()) return FieldError(key, "must be a non-empty array");
  std::vector<LayerSpec> layers;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& layer = (*it)[i];
    const std::string path = absl::StrCat(key, "[", i, "]");
    if (!layer.is_object()) return FieldError(path, "must be an object");
    if (!layer.contains("attention")) return FieldError(path + ".attention", "is required");
    LayerSpec spec;
    ABCD_ASSIGN_OR_RETURN(spec.attention,
                          ParseAttention(layer["attention"], path + ".attention",
                                         decoder ? Role::kDecoderSelf : Role::kEncoderSelf));
    const int index = static_cast<int>(i);
    spec.attention.layer_id = decoder ? index : kAbcEncoderLayerId + index;
    if (cross) {
      if (!layer.contains("cross_attention")) {
        return FieldError(path + ".cross_attention", "is required for encoder-decoder models");
      }
      ABCD_ASSIGN_OR_RETURN(
          spec.cross_attention,
          ParseAttention(layer["cross_attention"], path + ".cross_attention", Role::kCross));
      spec.cross_attention->layer_id = kAbcCrossLayerId + index;
    } else if (layer.contains("cross_attention")) {
      return FieldError(path + ".cross_attention", "is only allowed in encoder-decoder decoders");
    }
    layers.push_back(spec);
  }
  // A shared control tensor has one shape, so every layer that uses it needs the same slots.
  int shared_slots = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const AttentionSpec& a = layers[i].attention;
    if (!a.shared_control) continue;
    if (shared_slots != 0 && a.slots != shared_slots) {
      return FieldError(absl::StrCat(key, "[", i, "].attention.slots"),
                        "layers with shared_control must all have the same slots");
    }
    shared_slots = a.slots;
  }
  // position layers share one [slots, max_positions] linformer table.
  const AttentionSpec* linformer = nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    const AttentionSpec& a = layers[i].attention;
    if (a.type != AttentionType::kAbc || a.control != AbcControl::kPosition) continue;
    if (linformer != nullptr &&
        (a.slots != linformer->slots || a.max_positions != linformer->max_positions)) {
      return FieldError(absl::StrCat(key, "[", i, "].attention.max_positions"),
                        "control \"position\" layers share one linformer table: they must all "
                        "have the same slots and max_positions");
    }
    linformer = &a;
  }
  // Cross position layers share the decoder's one [slots, max_positions] cross_linformer table.
  const AttentionSpec* cross_linformer = nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i].cross_attention) continue;
    const AttentionSpec& a = *layers[i].cross_attention;
    if (a.type != AttentionType::kAbc || a.control != AbcControl::kPosition) continue;
    if (cross_linformer != nullptr &&
        (a.slots != cross_linformer->slots || a.max_positions != cross_linformer->max_positions)) {
      return FieldError(absl::StrCat(key, "[", i, "].cross_attention.max_positions"),
                        "control \"position\" cross attention layers share one cross_linformer "
                        "table: they must all have the same slots and max_positions");
    }
    cross_linformer = &a;
  }
  return layers;
}

// Model-level "gmat" (issue 16): present exactly when every encoder layer is gmat (no mix).
absl::Status ParseGmat(const json& root, ModelConfig& config) {
  const auto it = root.find("gmat");
  if (it == root.end()) {
    for (size_t i = 0; i < config.encoder_layers.size(); ++i) {
      if (config.encoder_layers[i].attention.gmat_chunk >= 0) {
        return FieldError(absl::StrCat("encoder_layers[", i, "].attention.type"),
                          "\"gmat\" layers need the model-level \"gmat\" object");
      }
    }
    return absl::OkStatus();
  }
  if (!config.is_encoder_decoder()) {
    return FieldError("gmat", "is only allowed for encoder-decoder models");
  }
  if (!it->is_object()) return FieldError("gmat", "must be an object");
  for (const auto& [key, value] : it->items()) {
    if (key != "memory" && key != "output" && key != "memory_only_layers") {
      return FieldError(absl::StrCat("gmat.", key), "is not a gmat field");
    }
  }
  Fields f(*it, "gmat");
  GmatConfig gmat;
  ABCD_ASSIGN_OR_RETURN(gmat.memory, f.Int("memory", std::nullopt, 1));
  ABCD_ASSIGN_OR_RETURN(const std::string output, f.String("output", "memory"));
  if (output == "memory") {
    gmat.output_all = false;
  } else if (output == "all") {
    gmat.output_all = true;
  } else {
    return FieldError("gmat.output",
                      absl::StrCat("must be \"memory\" or \"all\", got \"", output, "\""));
  }
  ABCD_ASSIGN_OR_RETURN(const int memory_only_layers, f.Int("memory_only_layers", 0, 0));
  if (memory_only_layers != 0) {
    return FieldError("gmat.memory_only_layers",
                      "must be 0 (memory-only layers are not implemented)");
  }
  for (size_t i = 0; i < config.encoder_layers.size(); ++i) {
    if (config.encoder_layers[i].attention.gmat_chunk < 0) {
      return FieldError(absl::StrCat("encoder_layers[", i, "].attention.type"),
                        "must be \"gmat\" when the model has \"gmat\" (no mixed encoders)");
    }
  }
  // Linformer cross attention indexes source positions; a GMAT encoder hands it memory rows.
  for (size_t i = 0; i < config.decoder_layers.size(); ++i) {
    const std::optional<AttentionSpec>& cross = config.decoder_layers[i].cross_attention;
    if (cross && cross->type == AttentionType::kAbc && cross->control == AbcControl::kPosition) {
      return FieldError(absl::StrCat("decoder_layers[", i, "].cross_attention.control"),
                        "\"position\" reads source positions; a GMAT encoder outputs memory rows");
    }
  }
  config.gmat = gmat;
  return absl::OkStatus();
}

}  // namespace

int ModelConfig::max_positions() const {
  int limit = 0;
  for (const LayerSpec& layer : decoder_layers) {
    const AttentionSpec& a = layer.attention;
    if (a.type != AttentionType::kAbc || a.control != AbcControl::kPosition) continue;
    limit = limit == 0 ? a.max_positions : std::min(limit, a.max_positions);
  }
  return limit;
}

int ModelConfig::max_source_positions() const {
  int limit = 0;
  auto take = [&limit](const AttentionSpec& a) {
    if (a.type != AttentionType::kAbc || a.control != AbcControl::kPosition) return;
    limit = limit == 0 ? a.max_positions : std::min(limit, a.max_positions);
  };
  for (const LayerSpec& layer : encoder_layers) take(layer.attention);
  for (const LayerSpec& layer : decoder_layers) {
    if (layer.cross_attention) take(*layer.cross_attention);
  }
  return limit;
}

int64_t ModelConfig::EncoderOutputRows(int64_t source_length) const {
  if (!gmat) return source_length;
  return gmat->output_all ? source_length + gmat->memory : gmat->memory;
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(json_text, "config.json"));
  const json root =
      json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("config.json is not valid JSON");
  if (!root.is_object()) return absl::InvalidArgumentError("config.json must be a JSON object");
  if (IsHfConfig(root)) return ParseHfConfig(root, "", "");
  Fields f(root, "");
  ModelConfig config;
  ABCD_ASSIGN_OR_RETURN(const int version, f.Int("format_version", 1, 1));
  if (version != 1) return FieldError("format_version", "only version 1 is supported");
  ABCD_ASSIGN_OR_RETURN(const std::string arch, f.String("architecture", std::nullopt));
  if (arch == "decoder") {
    config.architecture = Architecture::kDecoder;
  } else if (arch == "encoder-decoder") {
    config.architecture = Architecture::kEncoderDecoder;
  } else {
    return FieldError("architecture", "must be \"decoder\" or \"encoder-decoder\"");
  }
  ABCD_ASSIGN_OR_RETURN(config.vocab_size, f.Int("vocab_size", std::nullopt, 1));
  ABCD_ASSIGN_OR_RETURN(config.d_model, f.Int("d_model", std::nullopt, 1));
  ABCD_ASSIGN_OR_RETURN(config.n_heads, f.Int("n_heads", std::nullopt, 1));
  ABCD_ASSIGN_OR_RETURN(config.d_ff, f.Int("d_ff", std::nullopt, 1));
  if (config.d_model % config.n_heads != 0) {
    return FieldError("n_heads", absl::StrCat("must divide d_model (", config.d_model, ")"));
  }
  if (config.d_model % 2 != 0) return FieldError("d_model", "must be even (sinusoidal positions)");
  ABCD_ASSIGN_OR_RETURN(const std::string activation, f.String("activation", "gelu"));
  if (activation == "gelu") {
    config.activation = Activation::kGelu;
  } else if (activation == "relu") {
    config.activation = Activation::kRelu;
  } else {
    return FieldError("activation", "must be \"gelu\" or \"relu\"");
  }
  ABCD_ASSIGN_OR_RETURN(config.layer_norm_eps, f.Float("layer_norm_eps", 1e-5f));
  ABCD_ASSIGN_OR_RETURN(config.scale_embeddings, f.Bool("scale_embeddings", true));
  ABCD_ASSIGN_OR_RETURN(config.tie_embeddings, f.Bool("tie_embeddings", true));
  ABCD_ASSIGN_OR_RETURN(const std::string positional, f.String("positional", "sinusoidal"));
  if (positional == "sinusoidal") {
    config.positional = Positional::kSinusoidal;
  } else if (positional == "none") {
    config.positional = Positional::kNone;
  } else {
    return FieldError("positional", absl::StrCat("must be \"sinusoidal\" or \"none\", got \"",
                                                 positional.substr(0, 64), "\""));
  }
  ABCD_ASSIGN_OR_RETURN(const std::string norm, f.String("norm", "pre"));
  if (norm == "pre") {
    config.norm = Norm::kPre;
  } else if (norm == "post") {
    config.norm = Norm::kPost;
  } else {
    return FieldError(
        "norm", absl::StrCat("must be \"pre\" or \"post\", got \"", norm.substr(0, 64), "\""));
  }
  for (auto [key, field] : {std::pair<const char*, int*>{"bos_id", &config.bos_id},
                            {"eos_id", &config.eos_id},
                            {"pad_id", &config.pad_id},
                            {"unk_id", &config.unk_id}}) {
    ABCD_ASSIGN_OR_RETURN(*field, f.Int(key, *field, 0));
    if (*field >= config.vocab_size) {
      return FieldError(key, absl::StrCat("must be below vocab_size (", config.vocab_size, ")"));
    }
  }
  const bool enc_dec = config.is_encoder_decoder();
  if (enc_dec && config.norm == Norm::kPost) {
    return FieldError("norm", "\"post\" is only supported for decoder models");
  }
  ABCD_ASSIGN_OR_RETURN(config.decoder_layers,
                        ParseLayers(root, "decoder_layers", /*decoder=*/true, /*cross=*/enc_dec));
  if (enc_dec) {
    ABCD_ASSIGN_OR_RETURN(config.encoder_layers,
                          ParseLayers(root, "encoder_layers", /*decoder=*/false, /*cross=*/false));
  } else if (root.contains("encoder_layers")) {
    return FieldError("encoder_layers", "is only allowed for encoder-decoder models");
  }
  ABCD_RETURN_IF_ERROR(ParseGmat(root, config));
  return config;
}

}  // namespace abcd
