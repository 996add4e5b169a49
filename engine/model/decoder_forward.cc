#include "engine/model/decoder_forward.h"

#include "engine/core/status_macros.h"

namespace abcd {

absl::Status RunDecoder(const ModelConfig& config, DecoderOps& ops) {
  using enum DecoderBuffer;
  ABCD_RETURN_IF_ERROR(ops.Embed());
  const bool post_norm = config.norm == Norm::kPost;
  for (size_t i = 0; i < config.decoder_layers.size(); ++i) {
    const int layer = static_cast<int>(i);
    if (post_norm) {
      // Post-LN (Transformer-XL; decoder-only models): x = ln1(x + attn(x)), then
      // x = ln2(x + ffn(x)).
      ABCD_RETURN_IF_ERROR(ops.SelfAttention(layer, kResidual, kResidual));
      ABCD_RETURN_IF_ERROR(ops.Norm(layer, BlockNorm::kAttention, kResidual, kNormed));
      ABCD_RETURN_IF_ERROR(ops.FeedForward(layer, kNormed, kNormed));
      ABCD_RETURN_IF_ERROR(ops.Norm(layer, BlockNorm::kFeedForward, kNormed, kResidual));
      continue;
    }
    ABCD_RETURN_IF_ERROR(ops.Norm(layer, BlockNorm::kAttention, kResidual, kNormed));
    ABCD_RETURN_IF_ERROR(ops.SelfAttention(layer, kNormed, kResidual));
    if (config.decoder_layers[i].cross_attention) {
      ABCD_RETURN_IF_ERROR(ops.Norm(layer, BlockNorm::kCross, kResidual, kNormed));
      ABCD_RETURN_IF_ERROR(ops.CrossAttention(layer, kNormed, kResidual));
    }
    ABCD_RETURN_IF_ERROR(ops.Norm(layer, BlockNorm::kFeedForward, kResidual, kNormed));
    ABCD_RETURN_IF_ERROR(ops.FeedForward(layer, kNormed, kResidual));
  }
  return ops.Output(kResidual, /*final_norm=*/!post_norm);
}

}  // namespace abcd
