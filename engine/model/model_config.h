// Model architecture as described by a model directory's config.json (models/FORMAT.md).
// Parsing validates every field and names the offending one (e.g.
// "decoder_layers[1].attention.slots") in the returned error. The attention vocabulary
// (AttentionSpec, AttentionType, ...) is engine/attention/attention_spec.h, the blocks' op kinds
// (Activation, NormKind) engine/ops/op_kinds.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/attention/attention_spec.h"
#include "engine/ops/op_kinds.h"

namespace abcd {

enum class Architecture { kDecoder, kEncoderDecoder };
// Model input positions: sinusoidal pe added to the embedding, or none (Transformer-XL: the
// attention's relative term carries position).
enum class Positional { kSinusoidal, kNone };
// Block norms: pre-LN (x += f(ln(x)), final ln_f) or post-LN (x = ln(x + f(x)), no ln_f).
enum class Norm { kPre, kPost };

struct LayerSpec {
  AttentionSpec attention;
  std::optional<AttentionSpec> cross_attention;  // encoder-decoder decoder layers only
};

// Model-level "gmat" (Gupta & Berant 2020): M learned memory tokens appended to the
// source in the encoder; the encoder output is ln_f of the memory rows (output "memory": the
// cross attention reads M vectors whatever the source length) or of [source; memory] ("all").
struct GmatConfig {
  int memory = 0;
  bool output_all = false;
};

struct ModelConfig {
  Architecture architecture = Architecture::kDecoder;
  int vocab_size = 0;
  int d_model = 0;
  int n_heads = 0;
  int d_ff = 0;
  Activation activation = Activation::kGelu;
  NormKind norm_kind = NormKind::kLayerNorm;
  float layer_norm_eps = 1e-5f;
  bool scale_embeddings = true;
  bool tie_embeddings = true;
  Positional positional = Positional::kSinusoidal;
  Norm norm = Norm::kPre;
  int bos_id = 1;
  int eos_id = 2;
  int pad_id = 0;
  int unk_id = 3;
  // Prompts start with bos_id (HF tokenizer_config.json add_bos_token).
  bool add_bos = true;
  // Further token ids that end generation like eos_id (HF generation_config.json eos lists).
  std::vector<int> extra_stop_ids;
  // Hugging Face checkpoints: config.json's model_type (llama, mistral, gsa, gla, retnet, hgrn2,
  // transformer); empty for the abcd format.
  std::string hf_model_type;
  // hgrn2 with lower bounds: the model-level [layers, d] lower_bounds tensor is read.
  bool hgrn2_lower_bounds = false;
  bool hf_mlp_bias = false;  // llama mlp_bias
  bool is_hf() const { return !hf_model_type.empty(); }
  // True for eos_id and the extra stop ids: the token ends generation.
  bool IsStopToken(int token) const {
    if (token == eos_id) return true;
    for (int id : extra_stop_ids) {
      if (token == id) return true;
    }
    return false;
  }
  std::vector<LayerSpec> decoder_layers;
  std::vector<LayerSpec> encoder_layers;
  std::optional<GmatConfig> gmat;  // encoder-decoder with a GMAT encoder only

  int head_dim() const { return d_model / n_heads; }
  // Decoder positions a sequence may reach (prompt + generated tokens): the max_positions of
  // abc position layers, 0 = unbounded.
  int max_positions() const;
  // Source tokens (with eos) an encoder-decoder model can encode: the smallest max_positions of
  // its encoder and cross abc position layers (each stack's Linformer table), 0 = unbounded.
  int max_source_positions() const;
  bool is_encoder_decoder() const { return architecture == Architecture::kEncoderDecoder; }
  // Rows of the encoder output (what cross attention reads) for a source of `source_length`
  // tokens: the source length, or with gmat M ("memory") or source length + M ("all").
  int64_t EncoderOutputRows(int64_t source_length) const;
};

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);
// The config of a model directory: `dir`/config.json, and for Hugging Face checkpoints also
// generation_config.json and tokenizer_config.json when present. Errors name the file.
absl::StatusOr<ModelConfig> LoadModelDirectoryConfig(const std::string& dir);

}  // namespace abcd
