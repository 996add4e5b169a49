// The kinds of the elementwise ops a transformer block applies: the feed-forward activation and
// the block norm. Plain enums, below the ops that implement them (elementwise.h) and the model
// config that names them (model/model_config.h).
#pragma once

namespace abcd {

// Feed-forward activation. swiglu (Llama, fla): fc1 holds [gate; up] (2 d_ff rows) and the
// hidden row is silu(gate) * up.
enum class Activation { kGelu, kRelu, kSwiGlu };
// Block norms: LayerNorm with bias (abcd models) or RMSNorm without (Llama, fla).
enum class NormKind { kLayerNorm, kRmsNorm };

}  // namespace abcd
