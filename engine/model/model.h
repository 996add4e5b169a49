// A loaded model (decoder-only LM or encoder-decoder) on the CPU backend.
//
// Decode() runs one forward pass over a batch of token rows that may mix several sequences
// and several tokens per sequence (a prompt prefill next to single decode tokens): every
// projection is one GEMM over all rows, and each sequence's attention state is scanned row by
// row in order, so a prefill of T tokens leaves exactly the state of T single steps.
// State lives in a StatePool; the model itself is immutable after Load() and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_layer.h"
#include "engine/model/model_config.h"
#include "engine/state/state_pool.h"

namespace abcd {

struct DecodeRow {
  SequenceId sequence = 0;
  int32_t token = 0;
  bool want_logits = false;  // return the next-token logits after this row
};

class Model {
 public:
  // Loads `dir`/config.json and `dir`/model.safetensors; every tensor must be used.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const StateLayout& state_layout() const { return layout_; }
  const std::string& directory() const { return directory_; }
  int64_t weight_bytes() const { return weight_bytes_; }

  // Encoder-decoder: encodes `source` and builds every cross-attention memory of `sequence`.
  absl::Status Encode(std::span<const int32_t> source, SequenceId sequence, StatePool& pool) const;

  // Folds `rows` into their sequences' states and appends the logits of the rows with
  // want_logits (in row order) to `logits`, vocab_size floats each. On error no state changed.
  absl::Status Decode(std::span<const DecodeRow> rows, StatePool& pool,
                      std::vector<float>* logits) const;

  // The parameters as loaded (fp32, 1/sqrt(dh) folded into the query projections), read by
  // backends that keep their own copy (the CUDA decoder).
  struct Block {
    std::vector<float> ln1_weight, ln1_bias, ln2_weight, ln2_bias;
    std::vector<float> ln_cross_weight, ln_cross_bias;
    std::unique_ptr<AttentionLayer> self_attention;
    std::unique_ptr<AttentionLayer> cross_attention;
    std::vector<float> fc1_weight, fc1_bias, fc2_weight, fc2_bias;
  };
  struct Stack {
    std::vector<Block> blocks;
    std::vector<float> ln_f_weight, ln_f_bias;
  };
  const Stack& decoder() const { return *decoder_; }
  const std::vector<float>& embedding() const { return embedding_; }
  // The output projection [V, d]: the embedding when tied.
  const std::vector<float>& lm_head() const {
    return config_.tie_embeddings ? embedding_ : lm_head_;
  }

 private:
  Model();
  absl::Status LoadStack(const std::string& name, const std::vector<LayerSpec>& layers,
                         class WeightLoader& weights, Stack& stack);
  void BuildLayout();
  void Embed(int32_t token, int64_t position, float* row) const;
  void FeedForward(const Block& block, const float* x_norm, int64_t rows, float* out) const;

  ModelConfig config_;
  std::string directory_;
  int64_t weight_bytes_ = 0;
  std::vector<float> embedding_;  // [V, d]
  std::vector<float> lm_head_;    // [V, d] when not tied
  std::unique_ptr<Stack> decoder_;
  std::unique_ptr<Stack> encoder_;
  StateLayout layout_;
};

}  // namespace abcd
