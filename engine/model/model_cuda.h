// A decoder-only model on one GPU: the same forward pass as Model::Decode
// (engine/model/decoder_forward.h) over device ops.
//
// Built from a loaded CPU Model, abcd's own format or a Hugging Face directory whose layer
// types have kernels (attention_cuda_dispatch.h): its parameters are uploaded once (projections
// in fp32, bf16 or fp16 for cuBLAS; norms, biases and the embedding gather table in fp32) and every
// sequence gets a fixed slot in a device state slab (bounded types) or a KV cache of
// `max_context` tokens (softmax, the baseline). A step feeds one token to each of a batch of
// slots and runs the whole forward pass on the device: embedding, per layer LayerNorm or RMSNorm,
// ONE fused q|k|v|extra GEMM, the fused per-type state kernel (Hugging Face softmax layers rotate
// q and k first), output projection, residuals, FFN (activation or SwiGLU), final norm, LM head
// (biases and residual adds in the GEMMs' epilogues, the rounding of a projection's input in the
// LayerNorm or activation before it), and either copies the logits back (parity, evaluation) or
// samples on the device so that only token ids cross to the host. With `cuda_graphs`, StepSample
// replays one captured graph per bucketed batch size (1, 2, 4, ... max_sequences), and for softmax
// models per context bucket too (256, 512, ... max_context tokens: the split-K grid depends on it);
// rows of a bucket beyond the batch carry no state or cache (the kernels skip them) and are
// discarded.
//
// Forward() runs prompt chunks of several sequences and single decode tokens as ONE pass: every
// GEMM over all the rows, the bounded states by the scan form of the state kernels (each
// sequence's rows in order), softmax by causal split-K over the appended rows; the result
// equals feeding the tokens one step at a time. Encoder-decoder models and dilated window
// attention stay on the CPU backend (Create returns Unimplemented).
// Files: model_cuda.cc (refusals, staging, graphs), model_cuda_forward.cc (the device's ops of
// the one forward pass), model_cuda_weights.cc (weight upload), model_cuda_state.cc (slot states
// to and from StatePool snapshots, device_snapshot.h); the attention kernels are chosen
// and launched by engine/attention/attention_cuda_dispatch.h, the state slots live in
// engine/state/device_state_slots.h.
// Not thread-safe: one engine thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_cuda_dispatch.h"
#include "engine/device/cuda_context.h"
#include "engine/model/model.h"
#include "engine/ops/matmul_cuda.h"
#include "engine/sampling/sampler_cuda.h"
#include "engine/state/device_snapshot.h"
#include "engine/state/device_state_slots.h"

namespace abcd::cuda {

struct CudaModelOptions {
  int max_sequences = 64;        // state slots (the largest batch)
  int max_prefill_tokens = 512;  // rows of one prefill chunk (longer prompts take several)
  int64_t max_context = 0;       // softmax layers: KV capacity per sequence in tokens (0: 2048)
  WeightType weights = WeightType::kBF16;
  bool cuda_graphs = true;  // StepSample replays captured graphs
};

class CudaModel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaModel>> Create(const Model& model, CudaContext& context,
                                                           const CudaModelOptions& options);
  ~CudaModel();

  const ModelConfig& config() const { return config_; }
  // Device bytes of the parameters as stored (projections in the chosen type).
  int64_t weight_bytes() const { return weight_bytes_; }
  // Bytes one sequence's bounded state occupies (excludes softmax KV caches).
  int64_t state_bytes_per_sequence() const { return slots_.state_floats() * 4; }
  // Bytes one token adds to a sequence's softmax KV caches (0 for bounded models).
  int64_t kv_bytes_per_token() const { return kv_bytes_per_token_; }
  bool uses_graphs() const { return !graphs_.empty() && graphs_enabled_; }
  // Benchmarks: StepSample() runs eagerly while disabled, so one model can be timed both ways.
  void set_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }

  // A free slot, reset to the empty state; ResourceExhausted when all are in use.
  absl::StatusOr<int> Acquire();
  void Release(int slot);
  // A free slot holding a copy of `slot`'s state (and KV cache rows): beam search.
  absl::StatusOr<int> Fork(int slot);
  int64_t position(int slot) const { return slots_.position(slot); }
  int max_sequences() const { return options_.max_sequences; }
  // Softmax layers' KV capacity per sequence in tokens (unused by bounded models).
  int64_t max_context() const { return options_.max_context; }

  // One sequence's rows of a Forward(): a prompt chunk, or the one token of a decode step.
  struct SequenceTokens {
    SequenceTokens(int slot_in, std::span<const int32_t> tokens_in,
                   std::span<const int32_t> checkpoint_rows_in = {}, int first_checkpoint_in = 0)
        : slot(slot_in),
          tokens(tokens_in),
          checkpoint_rows(checkpoint_rows_in),
          first_checkpoint(first_checkpoint_in) {}
    int slot = 0;
    std::span<const int32_t> tokens;
    // Speculative decoding: rows of `tokens` (ascending) after which the slot's state is saved,
    // into its checkpoints first_checkpoint, first_checkpoint + 1, ... (ReserveCheckpoints()
    // first; Rollback() puts one back).
    std::span<const int32_t> checkpoint_rows;
    int first_checkpoint = 0;
  };
  // Rows one Forward() carries at most: max_sequences + max_prefill_tokens, a full iteration of
  // decode tokens beside a full prefill chunk.
  int64_t max_rows() const { return max_rows_; }
  // Folds each entry's tokens into its slot (distinct acquired slots, max_rows() rows in all)
  // in ONE forward pass: the GEMMs run over every row and the state kernels scan each
  // sequence's rows in order, so prompt chunks of several sequences and decode tokens share one
  // pass over the weights. Appends the logits of the rows `logit_rows` (ascending indices into
  // the entries' rows, concatenated in order) to `logits`. Equal to feeding every token one
  // step at a time; nothing changes when the entries are refused.
  absl::Status Forward(std::span<const SequenceTokens> entries, std::span<const int64_t> logit_rows,
                       std::vector<float>* logits);

  // Folds `tokens` into `slot` (Forward() in chunks of max_prefill_tokens) and appends the
  // logits after every token ([tokens, vocab]) to `logits`, or only after the last one with
  // `last_only`.
  absl::Status Prefill(int slot, std::span<const int32_t> tokens, bool last_only,
                       std::vector<float>* logits);

  // Feeds tokens[b] to slots[b] (distinct acquired slots) and appends the next-token logits of
  // every row ([batch, vocab], row order) to `logits`.
  absl::Status StepLogits(std::span<const int> slots, std::span<const int32_t> tokens,
                          std::vector<float>* logits);
  // The same step, then samples row b with params[b] on the device; next[b] = the token.
  absl::Status StepSample(std::span<const int> slots, std::span<const int32_t> tokens,
                          std::span<const DeviceSamplingParams> params, std::vector<int32_t>* next);

  // Speculative decoding's verify pass: Forward() of one entry with the logits of every row,
  // from a captured graph (one per bucket of 2, 4, ... kMaxVerifyGraphRows rows, padded) when
  // graphs are on and the entry has checkpoint rows; else Forward() itself.
  static constexpr int64_t kMaxVerifyGraphRows = 32;
  absl::Status Verify(const SequenceTokens& entry, std::vector<float>* logits);

  // Speculative decoding (DecodeBackend::Rollback): room for `count` checkpoints of `slot`;
  // ClearCheckpoints() forgets the ones a Forward() wrote; Rollback() restores one (the state
  // block and the position) in O(state bytes). OutOfRange for a checkpoint not written since.
  absl::Status ReserveCheckpoints(int slot, int count);
  void ClearCheckpoints(int slot);
  absl::Status Rollback(int slot, int checkpoint);

  // Sessions and the prefix cache (DecodeBackend::Snapshot / Restore; model_cuda_state.cc):
  // where each decoder layer's state lives in a slot, checked against the CPU model's `cpu`.
  absl::StatusOr<DeviceStateMap> MakeStateMap(const StateLayout& cpu) const;
  // Copies `slot`'s fixed block and the KV rows of its position into a stage of `map`
  // (ForDevice) and waits for the copies.
  absl::StatusOr<DeviceSnapshotStage> ReadState(int slot, const DeviceStateMap& map) const;
  // A free slot holding `stage`'s state and position (no checkpoints); ResourceExhausted when
  // all are in use. The slot is released again when a copy fails.
  absl::StatusOr<int> AcquireWithState(const DeviceSnapshotStage& stage, const DeviceStateMap& map);

  // Benchmarks only: declares that `slot` already holds `position` tokens, without computing
  // them (softmax caches then attend over whatever their memory holds). Lets decode at a 32k
  // context be timed without 32k steps first.
  absl::Status SetPositionForBenchmark(int slot, int64_t position);

 private:
  // One decoder layer on the device.
  struct Layer {
    DeviceArray<float> ln1_weight, ln1_bias, ln2_weight, ln2_bias;
    DeviceMatrix fused, out, fc1, fc2;
    DeviceArray<float> fused_bias, out_bias, fc1_bias, fc2_bias;
    int64_t fused_width = 0;
    CudaAttention attention;
    int64_t state_offset = 0;  // floats into a sequence's state block (bounded types)
    int64_t state_floats = 0;  // the layer's floats there (the CPU slot's fixed_floats)
    int softmax_index = -1;    // its KV caches among the slots' (softmax)
  };
  struct Graph;
  // The ops of the decoder's one forward pass on the device (engine/model/decoder_forward.h).
  class CudaPass;
  CudaModel(CudaContext& context, const ModelConfig& config);
  // model_cuda_weights.cc: every parameter to the device (layers_ and the model-level
  // tensors); returns one sequence's empty fixed state block.
  absl::StatusOr<std::vector<float>> UploadWeights(const Model& model);
  absl::StatusOr<Layer> UploadLayer(const Model::Block& block, size_t index,
                                    std::vector<float>& empty_state);
  // The step buffers for max_rows_ rows.
  absl::Status AllocateStepBuffers();
  absl::Status Validate(std::span<const int> slots, std::span<const int32_t> tokens) const;
  // Copies the step's inputs into the device input buffers for `rows` rows (>= slots.size();
  // extra rows are padding: no state, no KV cache; the kernels skip them).
  absl::Status StageInputs(std::span<const int> slots, std::span<const int32_t> tokens,
                           int64_t rows);
  // Stages the rows of a Forward(): each entry's tokens from its slot's current position.
  // Verify graphs: pads to `padded_rows` rows in `scan_sequences` sequences (see the .cc).
  absl::Status StageSequences(std::span<const SequenceTokens> entries, int64_t rows,
                              int64_t padded_rows = 0, int64_t scan_sequences = 0);
  // What Forward() checks of its entries, and the pass they make.
  struct EntryShape {
    int64_t rows = 0;
    int32_t max_length = 0;    // the longest context a row attends over, minus one
    int64_t longest_run = 0;   // the most rows of one entry
    bool checkpoints = false;  // some entry saves checkpoints
  };
  absl::StatusOr<EntryShape> CheckEntries(std::span<const SequenceTokens> entries) const;
  // After a pass: records the entries' checkpoints' positions and advances their slots.
  void FinishEntries(std::span<const SequenceTokens> entries);
  // Enqueues the forward pass over the staged rows, leaving logits in logits_. With
  // `scan_sequences` > 0 the rows are that many sequences' runs of consecutive tokens (the scan
  // form of the state kernels, StageSequences), the longest `scan_longest_run` rows; 0: one row
  // per sequence (StageInputs).
  // Without `lm_head` it stops after the final LayerNorm (normed_), for Forward() to run the
  // LM head over the rows it wants only.
  // With `checkpoints`, the bounded layers' kernels also write the checkpoints StageSequences
  // staged.
  absl::Status EnqueueForward(int64_t rows, int32_t max_length, int64_t scan_sequences,
                              int64_t scan_longest_run, bool lm_head = true,
                              bool checkpoints = false);
  absl::Status CaptureGraphs();
  // One graph of what `enqueue` puts on the stream (captured, then instantiated).
  absl::StatusOr<std::unique_ptr<Graph>> Capture(const std::function<absl::Status()>& enqueue);
  int64_t BucketFor(int64_t batch) const;
  void Advance(std::span<const int> slots);

  CudaContext& context_;
  ModelConfig config_;
  CudaModelOptions options_;
  int64_t weight_bytes_ = 0;
  int64_t kv_bytes_per_token_ = 0;
  int64_t kv_width_ = 0;  // floats of a KV cache row: the softmax layers' key/value heads
  float embed_scale_ = 1.0f;

  std::vector<Layer> layers_;
  DeviceArray<float> embedding_;  // [V, d] fp32 gather table
  DeviceMatrix lm_head_;
  DeviceArray<float> ln_f_weight_, ln_f_bias_;

  // Per sequence: the fixed state block (each layer's block padded to 16 bytes), the softmax
  // layers' KV caches and the position.
  DeviceStateSlots slots_;

  // Step buffers sized for max_rows_ = max_sequences + max_prefill_tokens rows.
  int64_t max_rows_ = 0;
  DeviceArray<int32_t> scan_first_, scan_count_;  // [max_rows_]: each sequence's rows
  DeviceArray<int32_t> tokens_;
  DeviceArray<int64_t> token_positions_;
  DeviceArray<int32_t> lengths_;
  DeviceArray<float*> state_pointers_;       // [layers, rows]: each layer's block of each row
  DeviceArray<float*> checkpoint_pointers_;  // [layers, rows]: where a row's checkpoint goes
  DeviceArray<float*> key_pointers_, value_pointers_;  // [softmax layers, rows]
  DeviceArray<float> x_, normed_, fused_, attended_, hidden_;
  DeviceArray<float> gated_;    // SwiGLU with fp32 weights: silu(gate) * up [max_rows_, d_ff]
  DeviceArray<float> scratch_;  // the fla mixers' prepared rows [max_rows_, scratch width]
  // 16-bit weights: a projection's input rounded to their type ([max_rows_, max(d, d_ff)]).
  DeviceArray<uint16_t> rounded_;
  DeviceArray<float> logits_;        // [max_sequences, vocab]
  DeviceArray<int32_t> logit_rows_;  // [max_rows_]: Forward()'s wanted rows
  DeviceArray<DeviceSamplingParams> sampling_params_;
  DeviceArray<int32_t> sampled_;

  // Captured decode steps: graphs_[context index * batch buckets + batch index].
  std::vector<int64_t> graph_batches_;   // 1, 2, 4, ... max_sequences
  std::vector<int64_t> graph_contexts_;  // softmax: 256, 512, ... max_context tokens; else {0}
  std::vector<std::unique_ptr<Graph>> graphs_;
  // Captured verify passes: verify_graphs_[context index * buckets + bucket index].
  std::vector<int64_t> verify_buckets_;  // rows: 2, 4, ... kMaxVerifyGraphRows
  std::vector<std::unique_ptr<Graph>> verify_graphs_;
  bool graphs_enabled_ = true;
};

}  // namespace abcd::cuda
