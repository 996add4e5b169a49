// The attention vocabulary: what one attention sublayer is (AttentionSpec: type, abc control,
// feature maps, window, RoPE, per-layer shapes, ...), shared by the attention kernels below and
// the model config above (model/model_config.h parses config.json into these). Plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/state/kv_cache.h"

namespace abcd {

// The last five are the fla model zoo's token mixers (Hugging Face checkpoints, models/FORMAT.md
// "Hugging Face checkpoints"): gsa (gated slot attention: abc's slots with a forget gate), gla
// (gated linear attention), retnet (retention: fixed per-head decay with RoPE), hgrn2, and
// gated_deltanet (the gated delta rule).
enum class AttentionType {
  kSoftmax,
  kWindow,
  kAbc,
  kRfa,
  kT2r,
  kElu,
  kTxl,
  kGsa,
  kGla,
  kRetnet,
  kHgrn2,
  kGatedDelta
};
enum class RfaKernel { kGaussian, kArccos };
// q/k feature map of the fla mixers: none, silu ("swish"), relu, or t2r (relu of a learned [K, K]
// map shared by the heads; gsa only).
enum class MixerFeatureMap { kNone, kSwish, kRelu, kT2r };

// Rotary position embedding, half-split (GPT-NeoX / HF rotate_half): the pair (x_i, x_{i+D/2})
// turns by p * inv_freq_i, inv_freq_i = theta^(-2i/D), optionally rescaled (linear: / factor;
// llama3: by wavelength band).
struct RopeSpec {
  enum class Scaling { kNone, kLinear, kLlama3 };
  bool enabled = false;
  double theta = 10000.0;
  Scaling scaling = Scaling::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  double original_max_positions = 8192.0;  // llama3
  // The D/2 inverse frequencies (fp32, as HF computes them) after scaling.
  std::vector<float> InverseFrequencies(int dim) const;
};
// abc control (models/FORMAT.md): the per-slot log-control a' of a token. exp: a' = a;
// sigmoid: a' = logsigmoid(a); relu: a' = log(a) if a > 0 else -inf (no write); random: one slot
// per (layer, head, position) from a hash of `seed`, no learned projection; position (causal
// Linformer): signed plain sums with phi = column t of the stack's [n, N] linformer table (decoder
// self, encoder self, or the decoder's cross_linformer for cross attention; t = source position);
// block (compressive mean pooling): a FIFO ring of n block means of `block` tokens; cluster:
// online k-means on the sequence's own keys (lowest empty slot, else the nearest centroid).
enum class AbcControl { kExp, kSigmoid, kRelu, kRandom, kPosition, kBlock, kCluster };
// How abc slots fold tokens: running means with a log-normaliser (mean) or plain sums / block
// means without one (sum: random with reduce sum, position, block; the state has no L).
enum class AbcReduce { kMean, kSum };

absl::string_view AttentionTypeName(AttentionType type);
absl::string_view AbcControlName(AbcControl control);
// True for the controls with a learned projection `control.{weight,bias}` (exp, sigmoid, relu).
bool AbcControlIsLearned(AbcControl control);

// Layer ids of the abc random control's slot hash: decoder self attention of decoder layer i
// uses i, encoder self attention of encoder layer i uses kAbcEncoderLayerId + i, cross attention
// of decoder layer i uses kAbcCrossLayerId + i.
inline constexpr int kAbcEncoderLayerId = 1 << 12;
inline constexpr int kAbcCrossLayerId = 1 << 13;

struct AttentionSpec {
  AttentionType type = AttentionType::kSoftmax;
  int window = 0;                         // window: keys attended per query
  int dilation = 1;                       // window: stride between them (1 = the last `window`)
  int slots = 0;                          // abc
  bool shared_control = false;            // abc: control tensor shared by the stack
  AbcControl control = AbcControl::kExp;  // abc
  AbcReduce reduce = AbcReduce::kMean;    // abc (sum: random control only)
  int64_t seed = 0;                       // abc random: slot hash seed
  int max_positions = 0;                  // abc position: N (columns of the linformer table)
  int block = 0;                          // abc block: tokens per block (c)
  int layer_id = 0;  // abc random: the layer id of the slot hash (set by the parser, see above)
  int features = 0;  // rfa (D), t2r (r)
  RfaKernel kernel = RfaKernel::kGaussian;
  bool gate = false;  // rfa
  float eps = 0.0f;   // rfa, t2r, elu: denominator floor
  int memory = 0;     // txl: previous positions each query sees (M)
  int clamp_len = 0;  // txl: relative distances beyond C use the row of C
  // txl: the K/V ring's storage (not a config.json field: set from the load options'
  // kv_cache_format by Model::Load; part of the state layout's description).
  KvFormat ring_format = KvFormat::kF32;
  // Encoder "gmat" layers (issue 16) are softmax attention (same tensors) with the GMAT mask:
  // main tokens see their chunk of `gmat_chunk` tokens (0 = all) plus the memory tokens. -1 =
  // not a gmat layer.
  int gmat_chunk = -1;

  // Per-layer shape of the Hugging Face layers (0 = the abcd default: n_heads heads of
  // d_model / n_heads for q, k and v alike). kv_heads < heads is GQA: query head j reads
  // key/value head j / (heads / kv_heads).
  int heads = 0;
  int kv_heads = 0;
  int key_dim = 0;    // per head (q and k)
  int value_dim = 0;  // per head
  RopeSpec rope;      // softmax (Llama) and retnet
  // fla mixers (models/FORMAT.md): gsa slots use `slots`.
  MixerFeatureMap feature_map = MixerFeatureMap::kNone;  // gsa (default swish), gla
  float gate_normalizer = 1.0f;                          // gsa (8): f = logsigmoid(a) / n; gla: 16
  int gate_rank = 0;       // gla: the low-rank decay projection's inner width (16)
  float clamp_min = 0.0f;  // gla: the log decay is clamped below at this (when has_clamp)
  bool has_clamp = false;
  bool output_gate = false;  // gla, retnet: per-head RMSNorm times silu(W_g u)
  float norm_eps = 1e-6f;    // the mixer's output RMSNorm
  bool qkv_bias = false;     // Hugging Face softmax: q/k/v projections have biases
  bool o_bias = false;       // ... and the output projection
  bool qk_norm = false;      // Hugging Face softmax (Qwen3): per-head RMSNorm of q and k (norm_eps)
  int layer_index = 0;       // hgrn2: which row of the model's lower bounds this layer uses
  // fla's ShortConvolution (use_short_conv): a depthwise causal convolution of `conv_size` taps
  // over the q/k/v (hgrn2: q/f/i) projections, its last conv_size - 1 inputs kept in the
  // sequence's state; 0: none. gsa, gla, hgrn2, gated_deltanet (short_conv.h).
  int conv_size = 0;
  // gated_deltanet: `heads` are the value heads (num_v_heads, one state each) and `kv_heads` the
  // q/k heads (num_heads): value head j reads q/k head j / (heads / kv_heads). beta is doubled
  // with allow_neg_eigval; `output_gate` is use_gate.
  bool allow_neg_eigval = false;

  // True when the per-sequence state has a fixed size (everything but softmax).
  bool bounded() const { return type != AttentionType::kSoftmax; }
  // True for the fla mixers (gsa, gla, retnet, hgrn2, gated_deltanet).
  bool is_fla_mixer() const { return type >= AttentionType::kGsa; }
  int QueryHeads(int model_heads) const { return heads > 0 ? heads : model_heads; }
  int KvHeads(int model_heads) const { return kv_heads > 0 ? kv_heads : QueryHeads(model_heads); }
  // Feature count of the linear-attention state (rfa, t2r, elu); 0 otherwise.
  int FeatureDim(int head_dim) const;
  // window: tokens the ring keeps, (window - 1) * dilation + 1 (every key a later query reads).
  int64_t WindowSpan() const { return int64_t{window - 1} * dilation + 1; }
};

// One-line description of an attention spec, e.g. "abc(slots=32)".
std::string DescribeAttention(const AttentionSpec& spec);

}  // namespace abcd
