// Loaders of attention sublayers: they read a layer's tensors through the WeightLoader, build
// its AttentionState and fused projections from the ModelConfig, and hand them to
// AttentionLayer::FromParts. Here, in model/, so that attention/ needs nothing from above it.
// Thread-safety: plain functions; the WeightLoader is the caller's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/attention/attention_layer.h"
#include "engine/attention/attention_state.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/ops/packed_matrix.h"

namespace abcd {

// abcd's own layer: `prefix` names the tensors (e.g. "decoder.layers.0.attn"); `shared_prefix`
// names the stack's shared abc control (e.g. "decoder.shared_control"), used when
// spec.shared_control. 1/sqrt(dh) is folded into the query weights.
absl::StatusOr<std::unique_ptr<AttentionLayer>> LoadAttentionLayer(
    const ModelConfig& config, const AttentionSpec& spec, const std::string& prefix,
    const std::string& shared_prefix, bool cross, WeightFormat format, WeightLoader& weights);

// A Hugging Face layer (config.is_hf()): tensors named as published under `prefix` (e.g.
// "model.layers.0.self_attn" for Llama, "model.layers.0.attn" for the fla mixers); decoder
// self attention only (attention_loader_hf.cc).
absl::StatusOr<std::unique_ptr<AttentionLayer>> LoadHfAttentionLayer(const ModelConfig& config,
                                                                     const AttentionSpec& spec,
                                                                     const std::string& prefix,
                                                                     WeightFormat format,
                                                                     WeightLoader& weights);

// The abc position (Linformer) table an attention with tensor prefix `prefix` reads:
// "encoder.linformer.weight" (encoder self), "decoder.cross_linformer.weight" (cross, prefix
// "decoder.layers.i.cross") or "decoder.linformer.weight" (decoder self).
std::string LinformerTableName(absl::string_view prefix);

// Builds the kernel for `spec` (abcd's own types); `prefix` names the attention's tensors (e.g.
// "decoder.layers.0.attn") for the types that own weights (rfa, t2r, txl, abc position).
absl::StatusOr<std::unique_ptr<AttentionState>> MakeAttentionState(const ModelConfig& config,
                                                                   const AttentionSpec& spec,
                                                                   const std::string& prefix,
                                                                   WeightLoader& weights);

}  // namespace abcd
