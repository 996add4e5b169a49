#include "engine/model/model_cuda.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/attention/split_plan.h"
#include "engine/core/status_macros.h"
#include "engine/ops/elementwise_cuda.h"

namespace abcd::cuda {

struct CudaModel::Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

namespace {

template <typename T>
absl::Status CopyToDevice(CudaContext& context, const std::vector<T>& host, T* device) {
  if (host.empty()) return absl::OkStatus();
  // Pageable host memory is staged before cudaMemcpyAsync returns: `host` may die afterwards.
  return Check(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice,
                               context.stream()),
               "cudaMemcpyAsync step inputs");
}

// The refusals made before anything is uploaded, in this order: attention without a CUDA
// kernel (attention_cuda_dispatch.h: feature-map cross attention, Hugging Face layer types
// without one, txl), the model-level options the device pass lacks (post-LN), abc controls other
// than exp in cross and encoder attention, gmat encoders, encoder-decoder models. Decoder self
// attention is checked layer by layer as it is uploaded (UploadCudaAttention).
absl::Status CheckCudaSupport(const ModelConfig& config) {
  const std::vector<LayerSpec>& decoder_layers = config.decoder_layers;
  const auto decoder = [](size_t l) { return absl::StrCat("decoder_layers[", l, "]"); };
  const auto cross = [](size_t l) {
    return absl::StrCat("decoder_layers[", l, "].cross_attention");
  };
  const auto encoder = [](size_t l) { return absl::StrCat("encoder_layers[", l, "].attention"); };
  // Feature-map cross attention first: named before the encoder-decoder refusal.
  for (size_t l = 0; l < decoder_layers.size(); ++l) {
    const std::optional<AttentionSpec>& c = decoder_layers[l].cross_attention;
    if (c && IsFeatureMapType(c->type)) return CheckCudaKernel(*c, cross(l), /*cross=*/true);
  }
  // Hugging Face models: softmax and sliding-window layers (Llama, Mistral, Qwen2, Qwen3: RoPE,
  // GQA, q/k norms), the fla mixers gsa, gla, retnet and hgrn2 and abcd_llama's t2r / abc
  // layers have kernels; the rest (short convolutions, gated_deltanet) is refused by layer
  // type (CheckCudaKernel), so --device auto serves the model on the CPU.
  if (config.is_hf()) {
    for (size_t l = 0; l < decoder_layers.size(); ++l) {
      ABCD_RETURN_IF_ERROR(
          CheckCudaKernel(decoder_layers[l].attention, decoder(l), /*cross=*/false));
    }
    return absl::OkStatus();
  }
  // Transformer-XL, before its model-level options.
  for (size_t l = 0; l < decoder_layers.size(); ++l) {
    const AttentionSpec& a = decoder_layers[l].attention;
    if (a.type == AttentionType::kTxl) return CheckCudaKernel(a, decoder(l), /*cross=*/false);
  }
  if (config.norm != Norm::kPre) {
    return absl::UnimplementedError(
        "config field \"norm\": post-LN blocks have no CUDA path; use the CPU backend");
  }
  for (size_t l = 0; l < decoder_layers.size(); ++l) {
    const std::optional<AttentionSpec>& c = decoder_layers[l].cross_attention;
    if (c && c->type == AttentionType::kAbc) {
      ABCD_RETURN_IF_ERROR(CheckCudaKernel(*c, cross(l), /*cross=*/true));
    }
  }
  const std::vector<LayerSpec>& encoder_layers = config.encoder_layers;
  for (size_t l = 0; l < encoder_layers.size(); ++l) {
    const AttentionSpec& a = encoder_layers[l].attention;
    if (a.type == AttentionType::kAbc) ABCD_RETURN_IF_ERROR(CheckCudaKernel(a, encoder(l), false));
  }
  for (size_t l = 0; l < encoder_layers.size(); ++l) {
    const AttentionSpec& a = encoder_layers[l].attention;
    if (a.gmat_chunk >= 0) return CheckCudaKernel(a, encoder(l), /*cross=*/false);
  }
  if (config.is_encoder_decoder()) {
    return absl::UnimplementedError(
        "the CUDA backend runs decoder-only models; encoder-decoder models use the CPU");
  }
  return absl::OkStatus();
}

}  // namespace

CudaModel::CudaModel(CudaContext& context, const ModelConfig& config)
    : context_(context), config_(config) {}

CudaModel::~CudaModel() = default;

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const Model& model,
                                                             CudaContext& context,
                                                             const CudaModelOptions& options) {
  ABCD_RETURN_IF_ERROR(CheckCudaSupport(model.config()));
  // One kernel launch covers every row of a step or prefill chunk along the grid's y axis.
  if (options.max_sequences <= 0 || options.max_sequences > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat("max_sequences must be in [1, ", kMaxGridYZ,
                                                   "], got ", options.max_sequences));
  }
  if (options.max_prefill_tokens <= 0 || options.max_prefill_tokens > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat("max_prefill_tokens must be in [1, ", kMaxGridYZ,
                                                   "], got ", options.max_prefill_tokens));
  }
  std::unique_ptr<CudaModel> cuda_model(new CudaModel(context, model.config()));
  cuda_model->options_ = options;
  if (cuda_model->options_.max_context <= 0) cuda_model->options_.max_context = 2048;
  ABCD_ASSIGN_OR_RETURN(const std::vector<float> empty_state, cuda_model->UploadWeights(model));
  // Exactly one slot per sequence: padding rows (graph buckets, bounded models only) carry no
  // state, so nothing beyond max_sequences is allocated and the state budget holds.
  int softmax_layers = 0;
  for (const Layer& layer : cuda_model->layers_) softmax_layers += layer.softmax_index >= 0;
  ABCD_ASSIGN_OR_RETURN(
      cuda_model->slots_,
      DeviceStateSlots::Create(context, options.max_sequences, empty_state, softmax_layers,
                               cuda_model->options_.max_context, cuda_model->kv_width_));
  ABCD_RETURN_IF_ERROR(cuda_model->AllocateStepBuffers());
  if (options.cuda_graphs) {
    ABCD_RETURN_IF_ERROR(cuda_model->CaptureGraphs());
  }
  return cuda_model;
}

absl::Status CudaModel::AllocateStepBuffers() {
  const CudaModelOptions& options = options_;
  const int64_t d = config_.d_model, ff = config_.d_ff, vocab = config_.vocab_size;
  int64_t max_width = 0, max_attended = d, max_scratch = 0;
  for (const Layer& layer : layers_) {
    max_width = std::max(max_width, layer.fused_width);
    max_attended = std::max(max_attended, layer.attention.attended_width);
    max_scratch = std::max(max_scratch, layer.attention.scratch_width);
  }
  const bool swiglu = config_.activation == Activation::kSwiGlu;
  // A pass's rows are one launch's grid rows: at most kMaxGridYZ (Decode cuts passes there).
  max_rows_ =
      std::min<int64_t>(int64_t{options.max_sequences} + options.max_prefill_tokens, kMaxGridYZ);
  const int64_t rows = max_rows_;
  const int64_t n_layers = static_cast<int64_t>(layers_.size());
  const int64_t n_softmax = slots_.kv_layers();
  ABCD_ASSIGN_OR_RETURN(tokens_, DeviceArray<int32_t>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(token_positions_, DeviceArray<int64_t>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(lengths_, DeviceArray<int32_t>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(state_pointers_, DeviceArray<float*>::Allocate(n_layers * rows));
  ABCD_ASSIGN_OR_RETURN(checkpoint_pointers_, DeviceArray<float*>::Allocate(n_layers * rows));
  ABCD_ASSIGN_OR_RETURN(key_pointers_, DeviceArray<float*>::Allocate(n_softmax * rows));
  ABCD_ASSIGN_OR_RETURN(value_pointers_, DeviceArray<float*>::Allocate(n_softmax * rows));
  ABCD_ASSIGN_OR_RETURN(x_, DeviceArray<float>::Allocate(rows * d));
  ABCD_ASSIGN_OR_RETURN(normed_, DeviceArray<float>::Allocate(rows * d));
  ABCD_ASSIGN_OR_RETURN(fused_, DeviceArray<float>::Allocate(rows * max_width));
  ABCD_ASSIGN_OR_RETURN(attended_, DeviceArray<float>::Allocate(rows * max_attended));
  ABCD_ASSIGN_OR_RETURN(scratch_, DeviceArray<float>::Allocate(rows * max_scratch));
  // SwiGLU: fc1 gives gate | up (2 ff columns); with fp32 weights the product goes to gated_.
  ABCD_ASSIGN_OR_RETURN(hidden_, DeviceArray<float>::Allocate(rows * (swiglu ? 2 * ff : ff)));
  if (swiglu && options.weights == WeightType::kF32) {
    ABCD_ASSIGN_OR_RETURN(gated_, DeviceArray<float>::Allocate(rows * ff));
  }
  if (options.weights != WeightType::kF32) {
    ABCD_ASSIGN_OR_RETURN(rounded_, DeviceArray<uint16_t>::Allocate(rows * std::max(d, ff)));
  }
  // Logits for at most one decode batch: Forward() runs the LM head over its wanted rows in
  // pieces of that size, so the buffer does not grow with the prompt rows of a pass.
  ABCD_ASSIGN_OR_RETURN(logits_, DeviceArray<float>::Allocate(options.max_sequences * vocab));
  ABCD_ASSIGN_OR_RETURN(logit_rows_, DeviceArray<int32_t>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(sampling_params_, DeviceArray<DeviceSamplingParams>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(sampled_, DeviceArray<int32_t>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(scan_first_, DeviceArray<int32_t>::Allocate(rows));
  ABCD_ASSIGN_OR_RETURN(scan_count_, DeviceArray<int32_t>::Allocate(rows));
  return context_.Synchronize();
}

absl::StatusOr<int> CudaModel::Acquire() { return slots_.Acquire(context_); }

absl::StatusOr<int> CudaModel::Fork(int slot) { return slots_.Fork(context_, slot); }

void CudaModel::Release(int slot) { slots_.Release(slot); }

absl::Status CudaModel::SetPositionForBenchmark(int slot, int64_t position) {
  if (!slots_.in_use(slot)) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  }
  if (slots_.kv_layers() > 0 && position >= options_.max_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("position ", position, " >= max_context ", options_.max_context));
  }
  slots_.set_position(slot, position);
  return absl::OkStatus();
}

absl::Status CudaModel::Validate(std::span<const int> slots,
                                 std::span<const int32_t> tokens) const {
  if (slots.empty() || slots.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a step needs one token per slot, got ",
                                                   slots.size(), " slots and ", tokens.size(),
                                                   " tokens"));
  }
  if (static_cast<int64_t>(slots.size()) > options_.max_sequences) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", slots.size(), " > max_sequences ", options_.max_sequences));
  }
  absl::flat_hash_set<int> seen;
  for (size_t b = 0; b < slots.size(); ++b) {
    const int slot = slots[b];
    if (!slots_.in_use(slot)) {
      return absl::InvalidArgumentError(absl::StrCat("slots[", b, "] = ", slot, " is not in use"));
    }
    if (!seen.insert(slot).second) {
      return absl::InvalidArgumentError(absl::StrCat("slots[", b, "] = ", slot, " repeats"));
    }
    if (tokens[b] < 0 || tokens[b] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokens[", b, "] = ", tokens[b],
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
    if (slots_.kv_layers() > 0 && slots_.position(slot) >= options_.max_context) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "slots[", b, "]: the KV cache holds max_context = ", options_.max_context, " tokens"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaModel::StageInputs(std::span<const int> slots, std::span<const int32_t> tokens,
                                    int64_t rows) {
  const int64_t stride = max_rows_;
  std::vector<int32_t> token_ids(rows, 0), lengths(rows, 0);
  std::vector<int64_t> positions(rows, 0);
  std::vector<float*> state_pointers(layers_.size() * stride, nullptr);
  std::vector<float*> checkpoint_pointers;  // only when an entry has checkpoint rows
  std::vector<float*> key_pointers(static_cast<size_t>(slots_.kv_layers()) * stride, nullptr);
  std::vector<float*> value_pointers(static_cast<size_t>(slots_.kv_layers()) * stride, nullptr);
  for (int64_t b = 0; b < rows; ++b) {
    const bool real = b < static_cast<int64_t>(slots.size());
    // Padding rows of a graph bucket keep token 0 and null state and cache pointers (the
    // kernels skip them).
    if (!real) continue;
    const int slot = slots[b];
    token_ids[b] = tokens[b];
    positions[b] = slots_.position(slot);
    lengths[b] = static_cast<int32_t>(slots_.position(slot));
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      if (layer.softmax_index < 0) {
        state_pointers[l * stride + b] = slots_.State(slot, layer.state_offset);
      } else {
        key_pointers[layer.softmax_index * stride + b] = slots_.Keys(slot, layer.softmax_index);
        value_pointers[layer.softmax_index * stride + b] = slots_.Values(slot, layer.softmax_index);
      }
    }
  }
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, token_ids, tokens_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, positions, token_positions_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, lengths, lengths_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, state_pointers, state_pointers_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, key_pointers, key_pointers_.data()));
  return CopyToDevice(context_, value_pointers, value_pointers_.data());
}

absl::Status CudaModel::StageSequences(std::span<const SequenceTokens> entries, int64_t rows,
                                       int64_t padded_rows, int64_t scan_sequences) {
  const int64_t stride = max_rows_;
  std::vector<int32_t> token_ids, lengths, first, count;
  std::vector<int64_t> positions;
  token_ids.reserve(rows);
  lengths.reserve(rows);
  positions.reserve(rows);
  // Bounded layers: each sequence's block once (the scan walks its rows); softmax: every row
  // appends to and reads its sequence's cache, attending over start + t + 1 tokens.
  std::vector<float*> state_pointers(layers_.size() * stride, nullptr);
  std::vector<float*> checkpoint_pointers;  // only when an entry has checkpoint rows
  std::vector<float*> key_pointers(static_cast<size_t>(slots_.kv_layers()) * stride, nullptr);
  std::vector<float*> value_pointers(static_cast<size_t>(slots_.kv_layers()) * stride, nullptr);
  for (size_t s = 0; s < entries.size(); ++s) {
    const int slot = entries[s].slot;
    const int64_t start = slots_.position(slot);
    const int64_t row0 = static_cast<int64_t>(token_ids.size());
    first.push_back(static_cast<int32_t>(row0));
    count.push_back(static_cast<int32_t>(entries[s].tokens.size()));
    for (size_t t = 0; t < entries[s].tokens.size(); ++t) {
      token_ids.push_back(entries[s].tokens[t]);
      positions.push_back(start + static_cast<int64_t>(t));
      lengths.push_back(static_cast<int32_t>(start + static_cast<int64_t>(t)));
    }
    if (!entries[s].checkpoint_rows.empty() && checkpoint_pointers.empty()) {
      checkpoint_pointers.assign(layers_.size() * stride, nullptr);
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      if (layer.softmax_index < 0) {
        state_pointers[l * stride + static_cast<int64_t>(s)] =
            slots_.State(slot, layer.state_offset);
        for (size_t c = 0; c < entries[s].checkpoint_rows.size(); ++c) {
          checkpoint_pointers[l * stride + row0 + entries[s].checkpoint_rows[c]] =
              slots_.Checkpoint(slot, entries[s].first_checkpoint + static_cast<int>(c),
                                layer.state_offset);
        }
        continue;
      }
      for (int64_t r = row0; r < static_cast<int64_t>(token_ids.size()); ++r) {
        key_pointers[layer.softmax_index * stride + r] = slots_.Keys(slot, layer.softmax_index);
        value_pointers[layer.softmax_index * stride + r] = slots_.Values(slot, layer.softmax_index);
      }
    }
  }
  // Padding: the rows up to padded_rows form the first sequence after the entries, any more
  // sequences up to scan_sequences are empty; none has state or cache (zero output).
  for (int64_t p = static_cast<int64_t>(entries.size()); p < scan_sequences; ++p) {
    first.push_back(static_cast<int32_t>(token_ids.size()));
    count.push_back(static_cast<int32_t>(
        p == static_cast<int64_t>(entries.size()) ? std::max<int64_t>(padded_rows - rows, 0) : 0));
  }
  if (padded_rows > rows) {
    token_ids.resize(static_cast<size_t>(padded_rows), 0);
    positions.resize(static_cast<size_t>(padded_rows), 0);
    lengths.resize(static_cast<size_t>(padded_rows), 0);
  }
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, token_ids, tokens_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, positions, token_positions_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, lengths, lengths_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, first, scan_first_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, count, scan_count_.data()));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, state_pointers, state_pointers_.data()));
  if (!checkpoint_pointers.empty()) {
    ABCD_RETURN_IF_ERROR(CopyToDevice(context_, checkpoint_pointers, checkpoint_pointers_.data()));
  }
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, key_pointers, key_pointers_.data()));
  return CopyToDevice(context_, value_pointers, value_pointers_.data());
}

absl::Status CudaModel::Forward(std::span<const SequenceTokens> entries,
                                std::span<const int64_t> logit_rows, std::vector<float>* logits) {
  // Everything is checked before anything is staged.
  ABCD_ASSIGN_OR_RETURN(const EntryShape shape, CheckEntries(entries));
  const int64_t rows = shape.rows;
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    if (logit_rows[i] < 0 || logit_rows[i] >= rows ||
        (i > 0 && logit_rows[i] <= logit_rows[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("logit_rows[", i, "] = ", logit_rows[i],
                                                     " is not an ascending row below ", rows));
    }
  }

  ABCD_RETURN_IF_ERROR(StageSequences(entries, rows));
  ABCD_RETURN_IF_ERROR(EnqueueForward(rows, shape.max_length, static_cast<int64_t>(entries.size()),
                                      shape.longest_run, /*lm_head=*/false, shape.checkpoints));
  // The LM head only over the wanted rows, packed into x_ (free after the final LayerNorm),
  // in pieces of the logits buffer's max_sequences rows, each copied out in stream order.
  const int64_t vocab = config_.vocab_size, d = config_.d_model;
  const int64_t wanted = static_cast<int64_t>(logit_rows.size());
  size_t offset = logits->size();
  logits->resize(offset + static_cast<size_t>(wanted * vocab));
  if (wanted > 0) {
    const std::vector<int32_t> indices(logit_rows.begin(), logit_rows.end());
    ABCD_RETURN_IF_ERROR(CopyToDevice(context_, indices, logit_rows_.data()));
    ABCD_RETURN_IF_ERROR(
        GatherRows(context_, normed_.data(), logit_rows_.data(), wanted, d, x_.data()));
  }
  for (int64_t first = 0; first < wanted; first += options_.max_sequences) {
    const int64_t count = std::min<int64_t>(options_.max_sequences, wanted - first);
    ABCD_RETURN_IF_ERROR(
        Linear(context_, x_.data() + first * d, count, lm_head_, nullptr, logits_.data()));
    ABCD_RETURN_IF_ERROR(Check(cudaMemcpyAsync(logits->data() + offset, logits_.data(),
                                               static_cast<size_t>(count * vocab) * sizeof(float),
                                               cudaMemcpyDeviceToHost, context_.stream()),
                               "copy logits"));
    offset += static_cast<size_t>(count * vocab);
  }
  ABCD_RETURN_IF_ERROR(context_.Synchronize());
  FinishEntries(entries);
  return absl::OkStatus();
}

void CudaModel::FinishEntries(std::span<const SequenceTokens> entries) {
  for (const SequenceTokens& entry : entries) {
    const int64_t start = slots_.position(entry.slot);
    for (size_t c = 0; c < entry.checkpoint_rows.size(); ++c) {
      slots_.RecordCheckpoint(entry.slot, entry.first_checkpoint + static_cast<int>(c),
                              start + entry.checkpoint_rows[c] + 1);
    }
    slots_.Advance(entry.slot, static_cast<int64_t>(entry.tokens.size()));
  }
}

absl::Status CudaModel::Verify(const SequenceTokens& entry, std::vector<float>* logits) {
  const int64_t rows = static_cast<int64_t>(entry.tokens.size());
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(verify_buckets_.begin(), verify_buckets_.end(), rows) -
                          verify_buckets_.begin());
  // The graphs write checkpoints wherever the staged pointers say, so they need some.
  if (!uses_graphs() || bucket == verify_buckets_.size() || entry.checkpoint_rows.empty()) {
    std::vector<int64_t> every_row(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) every_row[static_cast<size_t>(r)] = r;
    return Forward({&entry, 1}, every_row, logits);
  }
  ABCD_ASSIGN_OR_RETURN(const EntryShape shape, CheckEntries({&entry, 1}));
  // The entry, then its bucket's padding rows as a second sequence without state.
  ABCD_RETURN_IF_ERROR(StageSequences({&entry, 1}, rows, verify_buckets_[bucket], 2));
  const size_t context_index = GraphContextIndex(graph_contexts_, int64_t{shape.max_length} + 1);
  const size_t index = context_index * verify_buckets_.size() + bucket;
  if (index >= verify_graphs_.size()) {
    return absl::InternalError(absl::StrCat("no CUDA verify graph for ", rows, " rows"));
  }
  ABCD_RETURN_IF_ERROR(
      Check(cudaGraphLaunch(verify_graphs_[index]->exec, context_.stream()), "cudaGraphLaunch"));
  const int64_t vocab = config_.vocab_size;
  const size_t offset = logits->size();
  logits->resize(offset + static_cast<size_t>(rows * vocab));
  ABCD_RETURN_IF_ERROR(Check(cudaMemcpyAsync(logits->data() + offset, logits_.data(),
                                             static_cast<size_t>(rows * vocab) * sizeof(float),
                                             cudaMemcpyDeviceToHost, context_.stream()),
                             "copy logits"));
  ABCD_RETURN_IF_ERROR(context_.Synchronize());
  FinishEntries({&entry, 1});
  return absl::OkStatus();
}

absl::StatusOr<CudaModel::EntryShape> CudaModel::CheckEntries(
    std::span<const SequenceTokens> entries) const {
  if (entries.empty()) return absl::InvalidArgumentError("a forward pass needs a sequence");
  absl::flat_hash_set<int> seen;
  EntryShape shape;
  int64_t& rows = shape.rows;
  int32_t& max_length = shape.max_length;
  bool& any_checkpoints = shape.checkpoints;
  for (size_t s = 0; s < entries.size(); ++s) {
    const int slot = entries[s].slot;
    if (!slots_.in_use(slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", s, "].slot = ", slot, " is not in use"));
    }
    if (!seen.insert(slot).second) {
      return absl::InvalidArgumentError(absl::StrCat("entries[", s, "].slot = ", slot, " repeats"));
    }
    const std::span<const int32_t> tokens = entries[s].tokens;
    if (tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("entries[", s, "] has no tokens"));
    }
    for (size_t t = 0; t < tokens.size(); ++t) {
      if (tokens[t] < 0 || tokens[t] >= config_.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("entries[", s, "].tokens[", t, "] = ", tokens[t],
                         " is outside the vocabulary [0, ", config_.vocab_size, ")"));
      }
    }
    const int64_t end = slots_.position(slot) + static_cast<int64_t>(tokens.size());
    if (slots_.kv_layers() > 0 && end > options_.max_context) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "entries[", s, "]: the KV cache holds max_context = ", options_.max_context, " tokens"));
    }
    const std::span<const int32_t> checkpoint_rows = entries[s].checkpoint_rows;
    for (size_t c = 0; c < checkpoint_rows.size(); ++c) {
      if (checkpoint_rows[c] < 0 || checkpoint_rows[c] >= static_cast<int32_t>(tokens.size()) ||
          (c > 0 && checkpoint_rows[c] <= checkpoint_rows[c - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("entries[", s, "].checkpoint_rows[", c, "] = ", checkpoint_rows[c],
                         " is not an ascending row of its ", tokens.size(), " tokens"));
      }
    }
    if (!checkpoint_rows.empty() &&
        (entries[s].first_checkpoint < 0 ||
         entries[s].first_checkpoint + static_cast<int64_t>(checkpoint_rows.size()) >
             slots_.checkpoint_capacity(slot))) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", s, "]: checkpoints ", entries[s].first_checkpoint, " + ",
                       checkpoint_rows.size(), " exceed the ", slots_.checkpoint_capacity(slot),
                       " reserved for slot ", slot));
    }
    any_checkpoints = any_checkpoints || !checkpoint_rows.empty();
    rows += static_cast<int64_t>(tokens.size());
    max_length = std::max(max_length, static_cast<int32_t>(end - 1));
    shape.longest_run = std::max(shape.longest_run, static_cast<int64_t>(tokens.size()));
  }
  if (rows > max_rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a forward pass of ", rows, " rows > max_rows ", max_rows_));
  }
  return shape;
}

absl::Status CudaModel::ReserveCheckpoints(int slot, int count) {
  return slots_.ReserveCheckpoints(slot, count);
}

void CudaModel::ClearCheckpoints(int slot) {
  if (slots_.in_use(slot)) slots_.ClearCheckpoints(slot);
}

absl::Status CudaModel::Rollback(int slot, int checkpoint) {
  return slots_.Rollback(context_, slot, checkpoint);
}

absl::Status CudaModel::Prefill(int slot, std::span<const int32_t> tokens, bool last_only,
                                std::vector<float>* logits) {
  if (!slots_.in_use(slot)) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("a prefill needs at least one token");
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokens[", t, "] = ", tokens[t],
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  if (slots_.kv_layers() > 0 &&
      slots_.position(slot) + static_cast<int64_t>(tokens.size()) > options_.max_context) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the prompt does not fit the KV cache of max_context = ", options_.max_context));
  }
  for (size_t begin = 0; begin < tokens.size(); begin += options_.max_prefill_tokens) {
    const SequenceTokens chunk{
        slot, tokens.subspan(begin,
                             std::min<size_t>(options_.max_prefill_tokens, tokens.size() - begin))};
    const int64_t rows = static_cast<int64_t>(chunk.tokens.size());
    const bool last_chunk = begin + chunk.tokens.size() == tokens.size();
    std::vector<int64_t> wanted;
    if (!last_only) {
      for (int64_t r = 0; r < rows; ++r) wanted.push_back(r);
    } else if (last_chunk) {
      wanted.push_back(rows - 1);
    }
    ABCD_RETURN_IF_ERROR(Forward({&chunk, 1}, wanted, logits));
  }
  return absl::OkStatus();
}

void CudaModel::Advance(std::span<const int> slots) {
  for (int slot : slots) slots_.Advance(slot, 1);
}

absl::Status CudaModel::StepLogits(std::span<const int> slots, std::span<const int32_t> tokens,
                                   std::vector<float>* logits) {
  ABCD_RETURN_IF_ERROR(Validate(slots, tokens));
  const int64_t rows = static_cast<int64_t>(slots.size());
  int32_t max_length = 0;
  for (int slot : slots)
    max_length = std::max(max_length, static_cast<int32_t>(slots_.position(slot)));
  ABCD_RETURN_IF_ERROR(StageInputs(slots, tokens, rows));
  ABCD_RETURN_IF_ERROR(EnqueueForward(rows, max_length, 0, 0));
  const size_t offset = logits->size();
  logits->resize(offset + static_cast<size_t>(rows * config_.vocab_size));
  ABCD_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(logits->data() + offset, logits_.data(),
                            static_cast<size_t>(rows * config_.vocab_size) * sizeof(float),
                            cudaMemcpyDeviceToHost, context_.stream()),
            "copy logits"));
  ABCD_RETURN_IF_ERROR(context_.Synchronize());
  Advance(slots);
  return absl::OkStatus();
}

int64_t CudaModel::BucketFor(int64_t batch) const {
  int64_t bucket = 1;
  while (bucket < batch) bucket *= 2;
  return std::min<int64_t>(bucket, options_.max_sequences);
}

absl::Status CudaModel::CaptureGraphs() {
  graph_batches_.clear();
  graph_contexts_.clear();
  for (int64_t b = 1;; b *= 2) {
    graph_batches_.push_back(std::min<int64_t>(b, options_.max_sequences));
    if (b >= options_.max_sequences) break;
  }
  // Speculative decoding's verify passes (one sequence, the pending token and up to
  // kMaxVerifyGraphRows - 1 drafts), their logits for every row in logits_ (max_sequences rows).
  verify_buckets_.clear();
  for (int64_t rows = 2; rows <= std::min<int64_t>(kMaxVerifyGraphRows, options_.max_sequences);
       rows *= 2) {
    verify_buckets_.push_back(rows);
  }
  // Softmax layers: one graph per context bucket too, because the split-K grid is sized by the
  // tokens a step may attend over; a bucket's graph serves every step whose longest context
  // fits it (the chunks past a row's length are empty).
  graph_contexts_ =
      slots_.kv_layers() == 0 ? std::vector<int64_t>{0} : GraphContextBuckets(options_.max_context);
  auto max_length = [](int64_t context) {
    return static_cast<int32_t>(context > 0 ? context - 1 : 0);
  };
  // Every graph's work once eagerly first (padding rows only), so that the context workspace
  // has its final size before any capture: a graph keeps the addresses it was captured with.
  for (int64_t context : graph_contexts_) {
    for (int64_t rows : graph_batches_) {
      ABCD_RETURN_IF_ERROR(StageInputs({}, {}, rows));
      ABCD_RETURN_IF_ERROR(CopyToDevice(
          context_, std::vector<DeviceSamplingParams>(rows, DeviceSamplingParams{0, 0, 1, 0, 0}),
          sampling_params_.data()));
      ABCD_RETURN_IF_ERROR(EnqueueForward(rows, max_length(context), 0, 0));
      ABCD_RETURN_IF_ERROR(SampleTokens(context_, logits_.data(), rows, config_.vocab_size,
                                        sampling_params_.data(), sampled_.data()));
    }
    for (int64_t rows : verify_buckets_) {
      ABCD_RETURN_IF_ERROR(StageSequences({}, 0, rows, 2));
      ABCD_RETURN_IF_ERROR(EnqueueForward(rows, max_length(context), 2, rows, /*lm_head=*/true,
                                          /*checkpoints=*/true));
    }
  }
  ABCD_RETURN_IF_ERROR(context_.Synchronize());
  graphs_.clear();
  verify_graphs_.clear();
  for (int64_t context : graph_contexts_) {
    for (int64_t rows : graph_batches_) {
      ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, Capture([&]() -> absl::Status {
                              ABCD_RETURN_IF_ERROR(EnqueueForward(rows, max_length(context), 0, 0));
                              return SampleTokens(context_, logits_.data(), rows,
                                                  config_.vocab_size, sampling_params_.data(),
                                                  sampled_.data());
                            }));
      graphs_.push_back(std::move(graph));
    }
  }
  for (int64_t context : graph_contexts_) {
    for (int64_t rows : verify_buckets_) {
      ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, Capture([&] {
                              return EnqueueForward(rows, max_length(context), 2, rows,
                                                    /*lm_head=*/true, /*checkpoints=*/true);
                            }));
      verify_graphs_.push_back(std::move(graph));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaModel::Graph>> CudaModel::Capture(
    const std::function<absl::Status()>& enqueue) {
  auto graph = std::make_unique<Graph>();
  ABCD_RETURN_IF_ERROR(
      Check(cudaStreamBeginCapture(context_.stream(), cudaStreamCaptureModeThreadLocal),
            "cudaStreamBeginCapture"));
  const absl::Status status = enqueue();
  const absl::Status end =
      Check(cudaStreamEndCapture(context_.stream(), &graph->graph), "cudaStreamEndCapture");
  ABCD_RETURN_IF_ERROR(status);
  ABCD_RETURN_IF_ERROR(end);
  ABCD_RETURN_IF_ERROR(
      Check(cudaGraphInstantiate(&graph->exec, graph->graph, 0), "cudaGraphInstantiate"));
  return graph;
}

absl::Status CudaModel::StepSample(std::span<const int> slots, std::span<const int32_t> tokens,
                                   std::span<const DeviceSamplingParams> params,
                                   std::vector<int32_t>* next) {
  ABCD_RETURN_IF_ERROR(Validate(slots, tokens));
  if (params.size() != slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("params has ", params.size(), " rows for ", slots.size(), " slots"));
  }
  const int64_t batch = static_cast<int64_t>(slots.size());
  const bool replay = uses_graphs();
  const int64_t rows = replay ? BucketFor(batch) : batch;
  std::vector<DeviceSamplingParams> staged(params.begin(), params.end());
  staged.resize(rows, DeviceSamplingParams{0, 0, 1, 0, 0});  // padding rows: greedy
  ABCD_RETURN_IF_ERROR(StageInputs(slots, tokens, rows));
  ABCD_RETURN_IF_ERROR(CopyToDevice(context_, staged, sampling_params_.data()));
  int32_t max_length = 0;
  for (int slot : slots)
    max_length = std::max(max_length, static_cast<int32_t>(slots_.position(slot)));
  if (!replay) {
    ABCD_RETURN_IF_ERROR(EnqueueForward(rows, max_length, 0, 0));
    ABCD_RETURN_IF_ERROR(SampleTokens(context_, logits_.data(), rows, config_.vocab_size,
                                      sampling_params_.data(), sampled_.data()));
  } else {
    // The batch bucket, and the smallest context bucket that holds the longest context
    // (Validate keeps every position below max_context, the last bucket).
    const size_t batch_index = static_cast<size_t>(
        std::find(graph_batches_.begin(), graph_batches_.end(), rows) - graph_batches_.begin());
    const size_t context_index = GraphContextIndex(graph_contexts_, int64_t{max_length} + 1);
    const size_t index = context_index * graph_batches_.size() + batch_index;
    if (batch_index >= graph_batches_.size() || index >= graphs_.size()) {
      return absl::InternalError(absl::StrCat("no CUDA graph for batch ", rows));
    }
    ABCD_RETURN_IF_ERROR(
        Check(cudaGraphLaunch(graphs_[index]->exec, context_.stream()), "cudaGraphLaunch"));
  }
  next->resize(static_cast<size_t>(batch));
  ABCD_RETURN_IF_ERROR(Check(
      cudaMemcpyAsync(next->data(), sampled_.data(), static_cast<size_t>(batch) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, context_.stream()),
      "copy sampled tokens"));
  ABCD_RETURN_IF_ERROR(context_.Synchronize());
  Advance(slots);
  return absl::OkStatus();
}

}  // namespace abcd::cuda
