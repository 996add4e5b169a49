// Model::LoadHf: Hugging Face checkpoints under their published tensor names
// (models/FORMAT.md, "Hugging Face checkpoints"). Llama/Mistral/Qwen2/Qwen3:
//   model.embed_tokens, model.layers.i.{input_layernorm, self_attn.*, post_attention_layernorm,
//   mlp.{gate,up,down}_proj}, model.norm, lm_head
// fla (gsa, gla, retnet, hgrn2, gated_deltanet):
//   model.embeddings (older: model.embed_tokens), model.layers.i.{attn_norm, attn.*, mlp_norm,
//   mlp.*}, model.norm, lm_head
// with the older fla layouts recognised by their tensor names: a fused mlp.gate_proj [2I, d]
// (gate rows, then up rows) without up_proj, and GSA's attn.norm / mlp.norm in place of
// attn_norm / mlp_norm. A tied head uses the embedding even when the file also holds lm_head.
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/attention_loader.h"
#include "engine/model/model.h"
#include "engine/model/weights.h"

namespace abcd {
namespace {

bool IsLlamaNaming(const ModelConfig& c) {
  return c.hf_model_type == "llama" || c.hf_model_type == "mistral" || c.hf_model_type == "qwen2" ||
         c.hf_model_type == "qwen3" || c.hf_model_type == "abcd_llama";
}

// The first of `names` present (the current name first); the first when none is.
std::string FirstPresentWeight(const WeightLoader& weights,
                               std::initializer_list<std::string> names) {
  for (const std::string& name : names) {
    if (weights.Contains(name)) return name;
  }
  return *names.begin();
}

}  // namespace

absl::Status Model::LoadHfBlock(int layer, WeightLoader& weights, Block& block) {
  const ModelConfig& c = config_;
  const int64_t d = c.d_model, ff = c.d_ff;
  const std::string p = absl::StrCat("model.layers.", layer);
  const bool llama = IsLlamaNaming(c);
  const std::string attn_norm =
      llama ? p + ".input_layernorm.weight"
            : FirstPresentWeight(weights, {p + ".attn_norm.weight", p + ".attn.norm.weight"});
  const std::string mlp_norm =
      llama ? p + ".post_attention_layernorm.weight"
            : FirstPresentWeight(weights, {p + ".mlp_norm.weight", p + ".mlp.norm.weight"});
  ABCD_ASSIGN_OR_RETURN(block.ln1_weight, weights.Load(attn_norm, {d}));
  ABCD_ASSIGN_OR_RETURN(block.ln2_weight, weights.Load(mlp_norm, {d}));
  const AttentionSpec& spec = c.decoder_layers[static_cast<size_t>(layer)].attention;
  ABCD_ASSIGN_OR_RETURN(
      block.self_attention,
      LoadHfAttentionLayer(c, spec, p + (llama ? ".self_attn" : ".attn"), weight_format_, weights));
  // SwiGLU: fc1 = [gate; up] (2 ff rows); the older fla files store exactly that as gate_proj.
  const std::string gate = p + ".mlp.gate_proj.weight", up = p + ".mlp.up_proj.weight";
  std::vector<float> gate_up;
  if (!weights.Contains(up) && weights.ShapeOf(gate) == std::vector<int64_t>{2 * ff, d}) {
    ABCD_ASSIGN_OR_RETURN(gate_up, weights.Load(gate, {2 * ff, d}));
  } else {
    ABCD_ASSIGN_OR_RETURN(gate_up, weights.Load(gate, {ff, d}));
    ABCD_ASSIGN_OR_RETURN(std::vector<float> up_rows, weights.Load(up, {ff, d}));
    gate_up.insert(gate_up.end(), up_rows.begin(), up_rows.end());
  }
  block.fc1 = PackedMatrix::Pack(gate_up, 2 * ff, d, weight_format_);
  ABCD_ASSIGN_OR_RETURN(std::vector<float> down,
                        weights.Load(p + ".mlp.down_proj.weight", {d, ff}));
  block.fc2 = PackedMatrix::Pack(down, d, ff, weight_format_);
  if (c.hf_mlp_bias) {
    ABCD_ASSIGN_OR_RETURN(block.fc1_bias, weights.Load(p + ".mlp.gate_proj.bias", {ff}));
    ABCD_ASSIGN_OR_RETURN(std::vector<float> up_bias, weights.Load(p + ".mlp.up_proj.bias", {ff}));
    block.fc1_bias.insert(block.fc1_bias.end(), up_bias.begin(), up_bias.end());
    ABCD_ASSIGN_OR_RETURN(block.fc2_bias, weights.Load(p + ".mlp.down_proj.bias", {d}));
  }
  return absl::OkStatus();
}

absl::Status Model::LoadHf(WeightLoader& weights) {
  const ModelConfig& c = config_;
  const int64_t vocab = c.vocab_size, d = c.d_model;
  const std::string embed =
      IsLlamaNaming(c)
          ? std::string("model.embed_tokens.weight")
          : FirstPresentWeight(weights, {"model.embeddings.weight", "model.embed_tokens.weight"});
  ABCD_ASSIGN_OR_RETURN(std::vector<float> embedding, weights.Load(embed, {vocab, d}));
  embedding_ = PackedMatrix::Pack(embedding, vocab, d, weight_format_);
  if (!c.tie_embeddings) {
    ABCD_ASSIGN_OR_RETURN(std::vector<float> head, weights.Load("lm_head.weight", {vocab, d}));
    lm_head_ = PackedMatrix::Pack(head, vocab, d, weight_format_);
  } else if (weights.Contains("lm_head.weight")) {
    weights.MarkUsed("lm_head.weight");  // tied: the embedding is the head
  }
  decoder_ = std::make_unique<Stack>();
  for (size_t i = 0; i < c.decoder_layers.size(); ++i) {
    Block block;
    ABCD_RETURN_IF_ERROR(LoadHfBlock(static_cast<int>(i), weights, block));
    decoder_->blocks.push_back(std::move(block));
  }
  ABCD_ASSIGN_OR_RETURN(decoder_->ln_f_weight, weights.Load("model.norm.weight", {d}));
  return weights.CheckAllUsed();
}

}  // namespace abcd
