// A loaded model (decoder-only LM or encoder-decoder) on the CPU backend.
//
// Decode() runs one forward pass over a batch of token rows that may mix several sequences
// and several tokens per sequence (a prompt prefill next to single decode tokens): every
// projection is one matrix product over all rows (weights read once per step, packed at load
// in the chosen WeightFormat), and each sequence's attention state is scanned row by row in
// order, so a prefill of T tokens leaves exactly the state of T single steps. The work runs on
// the caller's CpuContext (threads and reused buffers).
// State lives in a StatePool; the model itself is immutable after Load() and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_layer.h"
#include "engine/model/model_config.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/packed_matrix.h"
#include "engine/state/state_pool.h"

namespace abcd {

struct DecodeRow {
  SequenceId sequence = 0;
  int32_t token = 0;
  bool want_logits = false;  // return the next-token logits after this row
  // Speculative decoding: save the sequence's state after this row into its next checkpoint
  // slot (slot i for the sequence's i-th such row of the call), for StatePool::Rollback.
  bool checkpoint = false;
};

struct ModelLoadOptions {
  // The format the matrices are kept and read in. Unset: the checkpoint's own (f32, bf16 or
  // f16, exact); int8 quantises per output row at load (products with int16 activations;
  // engine/ops/packed_matrix.h).
  std::optional<WeightFormat> weight_format;
  // Storage of softmax layers' KV cache rows: fp32, or bf16 / f16 (half the bytes; llama.cpp
  // keeps f16 by default); also of the K/V rings of txl layers (written once, never
  // accumulated). Reads compute in fp32 whatever the format.
  KvFormat kv_cache_format = KvFormat::kF32;
};

class Model {
 public:
  // Loads `dir`/config.json and `dir`/model.safetensors; every tensor must be used.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir,
                                                     const ModelLoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const StateLayout& state_layout() const { return layout_; }
  const std::string& directory() const { return directory_; }
  // Bytes of parameters as stored for the CPU kernels (what one decode step reads).
  int64_t weight_bytes() const { return weight_bytes_; }
  WeightFormat weight_format() const { return weight_format_; }
  // Checkpoint tensors holding NaN or infinite values, with their counts (loaded anyway; the
  // server logs them as a warning).
  const std::vector<std::pair<std::string, int64_t>>& non_finite_tensors() const {
    return non_finite_tensors_;
  }
  // Multiply-adds of the matrix products one decoded token costs (projections, feed-forward,
  // vocabulary), for GFLOP/s figures.
  int64_t projection_macs_per_token() const;

  // Encoder-decoder: encodes `source` and builds every cross-attention memory of `sequence`.
  absl::Status Encode(CpuContext& ctx, std::span<const int32_t> source, SequenceId sequence,
                      StatePool& pool) const;

  // Folds `rows` into their sequences' states and appends the logits of the rows with
  // want_logits (in row order) to `logits`, vocab_size floats each. Rows with `checkpoint` save
  // the state after them (StatePool::ReserveCheckpoints, Rollback); every sequence fed here
  // forgets its earlier checkpoints. On error no state changed.
  absl::Status Decode(CpuContext& ctx, std::span<const DecodeRow> rows, StatePool& pool,
                      std::vector<float>* logits) const;

  // The same on a one-thread context made for the call (tests, tools).
  absl::Status Encode(std::span<const int32_t> source, SequenceId sequence, StatePool& pool) const;
  absl::Status Decode(std::span<const DecodeRow> rows, StatePool& pool,
                      std::vector<float>* logits) const;

  // The parameters (1/sqrt(dh) folded into the query projections), read by backends that keep
  // their own copy (the CUDA decoder): PackedMatrix::ToFloat() gives fp32 [out, in].
  struct Block {
    std::vector<float> ln1_weight, ln1_bias, ln2_weight, ln2_bias;
    std::vector<float> ln_cross_weight, ln_cross_bias;
    std::unique_ptr<AttentionLayer> self_attention;
    std::unique_ptr<AttentionLayer> cross_attention;
    PackedMatrix fc1, fc2;
    std::vector<float> fc1_bias, fc2_bias;
  };
  struct Stack {
    std::vector<Block> blocks;
    std::vector<float> ln_f_weight, ln_f_bias;
  };
  const Stack& decoder() const { return *decoder_; }
  // [V, d] as fp32.
  std::vector<float> embedding() const { return embedding_.ToFloat(); }
  // The output projection [V, d] as fp32: the embedding when tied.
  std::vector<float> lm_head() const { return head().ToFloat(); }
  // The same as the CPU kernels read it.
  const PackedMatrix& head_matrix() const { return head(); }

 private:
  // The CPU's ops of the decoder's one forward pass (engine/model/decoder_forward.h).
  class CpuPass;
  Model();
  absl::Status LoadStack(const std::string& name, const std::vector<LayerSpec>& layers,
                         class WeightLoader& weights, Stack& stack);
  // Hugging Face checkpoints (model_hf.cc): embeddings, blocks and head under their published
  // names, legacy fla layouts included.
  absl::Status LoadHf(class WeightLoader& weights);
  absl::Status LoadHfBlock(int layer, class WeightLoader& weights, Block& block);
  // The block norm of the config (LayerNorm with bias, or RMSNorm) over `rows` rows of d, the
  // rows split across `pool`'s threads (may be null).
  void Normalize(const float* x, int64_t rows, const std::vector<float>& weight,
                 const std::vector<float>& bias, float* y, ThreadPool* pool = nullptr) const;
  void BuildLayout();
  const PackedMatrix& head() const { return config_.tie_embeddings ? embedding_ : lm_head_; }
  void Embed(int32_t token, int64_t position, float* row) const;
  void FeedForward(CpuContext& ctx, const Block& block, const float* x_norm, int64_t rows,
                   float* out) const;
  // The encoder over `source`: returns encoder.ln_f of its output rows
  // (config_.EncoderOutputRows) in the context's kNormed buffer.
  const float* RunEncoder(CpuContext& ctx, std::span<const int32_t> source) const;
  // GMAT encoder (gmat_encoder.cc): the same over [source; memory tokens] with the GMAT mask.
  const float* RunGmatEncoder(CpuContext& ctx, std::span<const int32_t> source) const;
  // One gmat layer's attention over x [main + M, d] (main rows first) into out, for the query
  // rows [query_first, main + M) only (rows before it are left unwritten).
  void GmatAttention(CpuContext& ctx, const AttentionLayer& layer, const float* x, int64_t main,
                     int64_t query_first, float* out) const;
  int64_t CountWeightBytes() const;

  ModelConfig config_;
  std::string directory_;
  int64_t weight_bytes_ = 0;
  WeightFormat weight_format_ = WeightFormat::kF32;
  std::vector<std::pair<std::string, int64_t>> non_finite_tensors_;
  std::vector<double> position_denominators_;  // 10000^(2i/d), i < d/2
  PackedMatrix embedding_;                     // [V, d]
  PackedMatrix lm_head_;                       // [V, d] when not tied
  std::unique_ptr<Stack> decoder_;
  std::unique_ptr<Stack> encoder_;
  std::vector<float> memory_embed_;  // GMAT: encoder.memory_embed [M, d]
  StateLayout layout_;
};

}  // namespace abcd
