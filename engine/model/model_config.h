// Model architecture as described by a model directory's config.json (models/FORMAT.md).
// Parsing validates every field and names the offending one (e.g.
// "decoder_layers[1].attention.slots") in the returned error.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

enum class AttentionType { kSoftmax, kWindow, kAbc, kRfa, kT2r, kElu };
enum class RfaKernel { kGaussian, kArccos };
enum class Architecture { kDecoder, kEncoderDecoder };
enum class Activation { kGelu, kRelu };

absl::string_view AttentionTypeName(AttentionType type);

struct AttentionSpec {
  AttentionType type = AttentionType::kSoftmax;
  int window = 0;               // window
  int slots = 0;                // abc
  bool shared_control = false;  // abc: control tensor shared by the stack
  int features = 0;             // rfa (D), t2r (r)
  RfaKernel kernel = RfaKernel::kGaussian;
  bool gate = false;  // rfa
  float eps = 0.0f;   // rfa, t2r, elu: denominator floor

  // True when the per-sequence state has a fixed size (everything but softmax).
  bool bounded() const { return type != AttentionType::kSoftmax; }
  // Feature count of the linear-attention state (rfa, t2r, elu); 0 otherwise.
  int FeatureDim(int head_dim) const;
};

struct LayerSpec {
  AttentionSpec attention;
  std::optional<AttentionSpec> cross_attention;  // encoder-decoder decoder layers only
};

struct ModelConfig {
  Architecture architecture = Architecture::kDecoder;
  int vocab_size = 0;
  int d_model = 0;
  int n_heads = 0;
  int d_ff = 0;
  Activation activation = Activation::kGelu;
  float layer_norm_eps = 1e-5f;
  bool scale_embeddings = true;
  bool tie_embeddings = true;
  int bos_id = 1;
  int eos_id = 2;
  int pad_id = 0;
  int unk_id = 3;
  std::vector<LayerSpec> decoder_layers;
  std::vector<LayerSpec> encoder_layers;

  int head_dim() const { return d_model / n_heads; }
  bool is_encoder_decoder() const { return architecture == Architecture::kEncoderDecoder; }
};

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// One-line description of an attention spec, e.g. "abc(slots=32)".
std::string DescribeAttention(const AttentionSpec& spec);

}  // namespace abcd
