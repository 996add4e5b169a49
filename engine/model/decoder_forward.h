// The decoder's forward pass, written once for every device. A pass runs over a batch of rows
// (prompt chunks of several sequences beside single decode tokens); what a block does to them is
// decided here from the model's config, and each device supplies the ops over its own buffers:
// Model::Decode (CPU, model.cc) and CudaModel (CUDA, model_cuda.cc) implement DecoderOps, so a
// block structure (pre- or post-norm, cross attention, LayerNorm or RMSNorm, the feed-forward
// form) runs on every device that has its ops, and a new model type is added once.
//
//   x = Embed(tokens, positions)
//   pre-norm block:  x += SelfAttention(Norm1(x)); [x += Cross(NormCross(x))];
//                    x += FeedForward(Norm2(x))
//   post-norm block: x += SelfAttention(x); n = Norm1(x); n += FeedForward(n); x = Norm2(n)
//   Output(x, final_norm = pre-norm)
//
// The ops name their operands by DecoderBuffer: each device maps kResidual and kNormed to its own
// memory (the CUDA one keeps kNormed in the next projection's weight type). Thread-safety: a
// DecoderOps serves one pass on one thread.
#pragma once

#include "absl/status/status.h"
#include "engine/model/model_config.h"

namespace abcd {

// The two activations a block moves between: the residual stream and a sublayer's normalised
// input (each [rows, d_model]).
enum class DecoderBuffer { kResidual, kNormed };

// Which of a block's norms: before self attention (ln1), before cross attention, before the
// feed-forward (ln2).
enum class BlockNorm { kAttention, kCross, kFeedForward };

class DecoderOps {
 public:
  virtual ~DecoderOps() = default;
  // kResidual = the token embeddings of the pass's rows at their positions.
  virtual absl::Status Embed() = 0;
  // `to` = norm `which` of block `layer` over `from` (LayerNorm or RMSNorm, as configured).
  virtual absl::Status Norm(int layer, BlockNorm which, DecoderBuffer from, DecoderBuffer to) = 0;
  // `into` += the block's self attention over `from` (each row's sequence state updated, causal).
  virtual absl::Status SelfAttention(int layer, DecoderBuffer from, DecoderBuffer into) = 0;
  // `into` += the block's cross attention over `from` (reads the encoder memory).
  virtual absl::Status CrossAttention(int layer, DecoderBuffer from, DecoderBuffer into) = 0;
  // `into` += the block's feed-forward over `from`.
  virtual absl::Status FeedForward(int layer, DecoderBuffer from, DecoderBuffer into) = 0;
  // The blocks are done: `output` holds the decoder's rows, to be normalised by the stack's final
  // norm first when `final_norm` (the device then computes the logits it was asked for).
  virtual absl::Status Output(DecoderBuffer output, bool final_norm) = 0;
};

// Runs the decoder of `config` (its decoder_layers, norm placement and cross attention) over the
// ops' rows; stops at the first failing op.
absl::Status RunDecoder(const ModelConfig& config, DecoderOps& ops);

}  // namespace abcd
