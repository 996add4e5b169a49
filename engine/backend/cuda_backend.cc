#include "engine/backend/cuda_backend.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

// Tokens of the parity probe: bos, then a fixed spread over the vocabulary.
std::vector<int32_t> ProbeTokens(const ModelConfig& config, int count) {
  std::vector<int32_t> tokens = {config.bos_id};
  for (int i = 1; i < count; ++i) {
    tokens.push_back(static_cast<int32_t>((int64_t{i} * 7919 + 3) % config.vocab_size));
  }
  return tokens;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const Model& model, const CudaBackendOptions& options) {
  if (model.config().is_encoder_decoder()) {
    return absl::UnimplementedError(
        "the CUDA backend runs decoder-only models; encoder-decoder models use the CPU");
  }
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> context, CudaContext::Create(options.device));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(model, std::move(context)));

  CudaModelOptions model_options;
  model_options.max_sequences = options.max_sequences;
  model_options.max_prefill_tokens = options.max_prefill_tokens;
  model_options.max_context = options.max_context;
  model_options.weights = options.weights;
  model_options.cuda_graphs = options.cuda_graphs;
  if (options.state_budget_bytes > 0) {
    // Size the slots from the budget before allocating: one empty-context probe model would
    // cost a second upload, so the per-slot bytes come from the CPU layout (the device pads
    // each layer's block to 16 bytes, a few floats more).
    const StateLayout& layout = model.state_layout();
    int64_t softmax_layers = 0;
    for (bool cross : layout.kv_is_cross) softmax_layers += cross ? 0 : 1;
    const int64_t context_tokens = options.max_context > 0 ? options.max_context : 2048;
    const int64_t slot_bytes =
        layout.FixedBytes() + softmax_layers * context_tokens * layout.KvBytesPerToken() + 64;
    const int64_t fitting = options.state_budget_bytes / std::max<int64_t>(slot_bytes, 1);
    if (fitting < 1) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the state budget of ", options.state_budget_bytes,
                       " bytes holds no CUDA sequence slot (", slot_bytes, " bytes each)"));
    }
    model_options.max_sequences =
        static_cast<int>(std::min<int64_t>(options.max_sequences, fitting));
  }
  ABCD_ASSIGN_OR_RETURN(backend->cuda_model_,
                        CudaModel::Create(model, *backend->context_, model_options));
  const CudaModel& cuda_model = *backend->cuda_model_;
  backend->kv_slot_bytes_ = cuda_model.kv_bytes_per_token() > 0
                                ? cuda_model.max_context() * cuda_model.kv_bytes_per_token()
                                : 0;
  backend->slot_bytes_ = cuda_model.state_bytes_per_sequence() + backend->kv_slot_bytes_;
  if (options.parity_probe) {
    ABCD_RETURN_IF_ERROR(
        backend->RunParityProbe(options.weights == WeightType::kF32 ? 1e-3 : 5e-2));
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  // Best effort: a failure here leaves the memory to the driver at exit.
  context_->MakeCurrent().IgnoreError();
  cuda_model_.reset();
}

std::string CudaBackend::device_description() const {
  return absl::StrCat(context_->device_name(), " (cuda:", context_->device(), ")");
}

absl::Status CudaBackend::RunParityProbe(double tolerance) {
  constexpr int kPrefillTokens = 8, kStepTokens = 8;
  const ModelConfig& config = model_.config();
  const std::vector<int32_t> tokens = ProbeTokens(config, kPrefillTokens + kStepTokens);
  const int64_t vocab = config.vocab_size;

  // CPU reference: the whole sequence with logits after every token.
  StatePool pool(model_.state_layout(), int64_t{1} << 40);
  ABCD_ASSIGN_OR_RETURN(const SequenceId cpu_sequence, pool.Acquire());
  std::vector<DecodeRow> rows;
  for (int32_t token : tokens) rows.push_back({cpu_sequence, token, true});
  std::vector<float> expected;
  ABCD_RETURN_IF_ERROR(model_.Decode(rows, pool, &expected));

  // Device: a prefill of the first tokens, then batched steps of the rest next to a second
  // (discarded) sequence, so both the scan and the batched kernels are probed; a third
  // sequence takes the same steps through device greedy sampling (the CUDA-graph path).
  ABCD_ASSIGN_OR_RETURN(const int slot, cuda_model_->Acquire());
  absl::StatusOr<int> other = cuda_model_->Acquire();
  absl::StatusOr<int> sampler = cuda_model_->Acquire();
  std::vector<float> actual, ignored;
  std::vector<int32_t> sampled;
  const std::span<const int32_t> prompt = std::span<const int32_t>(tokens).first(kPrefillTokens);
  absl::Status status = cuda_model_->Prefill(slot, prompt, false, &actual);
  if (status.ok() && sampler.ok()) status = cuda_model_->Prefill(*sampler, prompt, true, &ignored);
  for (int t = kPrefillTokens; status.ok() && t < kPrefillTokens + kStepTokens; ++t) {
    std::vector<int> slots = {slot};
    std::vector<int32_t> step_tokens = {tokens[t]};
    if (other.ok()) {
      slots.push_back(*other);
      step_tokens.push_back(tokens[t - kPrefillTokens]);
    }
    std::vector<float> step;
    status = cuda_model_->StepLogits(slots, step_tokens, &step);
    if (!status.ok()) break;
    actual.insert(actual.end(), step.begin(), step.begin() + vocab);
    if (sampler.ok()) {
      const int sampler_slots[] = {*sampler};
      const DeviceSamplingParams greedy[] = {{0.0f, 0, 1.0f, 0, 0}};
      std::vector<int32_t> next;
      status = cuda_model_->StepSample(sampler_slots, {&tokens[t], 1}, greedy, &next);
      if (status.ok()) sampled.push_back(next[0]);
    }
  }
  cuda_model_->Release(slot);
  if (other.ok()) cuda_model_->Release(*other);
  if (sampler.ok()) cuda_model_->Release(*sampler);
  ABCD_RETURN_IF_ERROR(status);
  if (actual.size() != expected.size()) {
    return absl::InternalError(
        absl::StrCat("CUDA parity probe: ", actual.size(), " logits, expected ", expected.size()));
  }
  double scale = 1.0, worst = 0.0;
  for (float v : expected) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(diff <= worst)) worst = std::isnan(diff) ? INFINITY : diff;
  }
  // A greedy token must be the CPU's argmax, or within the tolerance of it (near-ties).
  for (size_t s = 0; s < sampled.size(); ++s) {
    const float* row = expected.data() + (kPrefillTokens + s) * vocab;
    const double best = *std::max_element(row, row + vocab);
    const double gap = sampled[s] >= 0 && sampled[s] < vocab ? best - row[sampled[s]] : INFINITY;
    if (!(gap <= tolerance * scale)) {
      return absl::InternalError(absl::StrCat("CUDA parity probe failed: device greedy sampling ",
                                              "chose token ", sampled[s], ", whose CPU logit is ",
                                              gap, " below the best"));
    }
  }
  probe_relative_error_ = worst / scale;
  if (!(probe_relative_error_ <= tolerance)) {
    return absl::InternalError(absl::StrCat(
        "CUDA parity probe failed: logits differ from the CPU model by ", probe_relative_error_,
        " of their largest magnitude (tolerance ", tolerance, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackend::RequestBytes(int64_t prompt_tokens, int64_t source_tokens,
                                                  int64_t max_new_tokens, int sequences) const {
  if (source_tokens > 0) {
    return absl::UnimplementedError("the CUDA backend has no encoder");
  }
  if (sequences > cuda_model_->max_sequences()) {
    return absl::ResourceExhaustedError(absl::StrCat("request needs ", sequences,
                                                     " sequences, the CUDA backend has ",
                                                     cuda_model_->max_sequences(), " slots"));
  }
  if (kv_slot_bytes_ > 0 && prompt_tokens + max_new_tokens > cuda_model_->max_context()) {
    return absl::ResourceExhaustedError(absl::StrCat("prompt and max_tokens need ",
                                                     prompt_tokens + max_new_tokens,
                                                     " tokens of KV cache, the CUDA backend holds ",
                                                     cuda_model_->max_context(), " per sequence"));
  }
  return sequences * slot_bytes_;
}

BackendMemory CudaBackend::memory() const {
  const int64_t live = static_cast<int64_t>(slots_.size());
  return {live, live * slot_bytes_, live * kv_slot_bytes_};
}

absl::StatusOr<SequenceId> CudaBackend::Acquire() {
  ABCD_RETURN_IF_ERROR(context_->MakeCurrent());
  ABCD_ASSIGN_OR_RETURN(const int slot, cuda_model_->Acquire());
  const SequenceId id = next_id_++;
  slots_[id] = slot;
  return id;
}

void CudaBackend::Release(SequenceId id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  cuda_model_->Release(it->second);  // host bookkeeping only: no device call
  slots_.erase(it);
}

absl::StatusOr<SequenceId> CudaBackend::Fork(SequenceId id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  ABCD_RETURN_IF_ERROR(context_->MakeCurrent());
  ABCD_ASSIGN_OR_RETURN(const int slot, cuda_model_->Fork(it->second));
  const SequenceId copy = next_id_++;
  slots_[copy] = slot;
  return copy;
}

absl::Status CudaBackend::Encode(std::span<const int32_t> /*source*/, SequenceId /*id*/) {
  return absl::UnimplementedError("the CUDA backend has no encoder");
}

absl::Status CudaBackend::Decode(std::span<const DecodeRow> rows, std::vector<float>* logits) {
  ABCD_ASSIGN_OR_RETURN(const std::vector<SequenceRun> runs, SplitIntoSequenceRuns(rows));
  const ModelConfig& config = model_.config();
  // Everything is checked before any state changes.
  std::vector<int> run_slots;
  for (const SequenceRun& run : runs) {
    auto it = slots_.find(run.sequence);
    if (it == slots_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows[", run.first_row, "]: unknown sequence ", run.sequence));
    }
    run_slots.push_back(it->second);
    for (int64_t r = run.first_row; r < run.first_row + run.rows; ++r) {
      if (rows[r].token < 0 || rows[r].token >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("rows[", r, "].token = ", rows[r].token,
                                                       " is outside the vocabulary [0, ",
                                                       config.vocab_size, ")"));
      }
    }
    if (kv_slot_bytes_ > 0 &&
        cuda_model_->position(it->second) + run.rows > cuda_model_->max_context()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rows[", run.first_row, "]: sequence ", run.sequence,
                       " would exceed the KV capacity of ", cuda_model_->max_context(), " tokens"));
    }
  }

  ABCD_RETURN_IF_ERROR(context_->MakeCurrent());
  // Single rows: one batched step. Longer runs: the prefill scan, one sequence at a time.
  const int64_t vocab = config.vocab_size;
  std::vector<int> step_slots;
  std::vector<int32_t> step_tokens;
  std::vector<int64_t> step_index(runs.size(), -1);  // run -> row of the step's logits
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].rows != 1) continue;
    step_index[i] = static_cast<int64_t>(step_slots.size());
    step_slots.push_back(run_slots[i]);
    step_tokens.push_back(rows[runs[i].first_row].token);
  }
  std::vector<float> step_logits;
  if (!step_slots.empty()) {
    ABCD_RETURN_IF_ERROR(cuda_model_->StepLogits(step_slots, step_tokens, &step_logits));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const SequenceRun& run = runs[i];
    const std::span<const DecodeRow> run_rows = rows.subspan(run.first_row, run.rows);
    if (run.rows == 1) {
      if (run_rows[0].want_logits) {
        const float* row = step_logits.data() + step_index[i] * vocab;
        logits->insert(logits->end(), row, row + vocab);
      }
      continue;
    }
    std::vector<int32_t> tokens;
    bool only_last = true;
    for (int64_t r = 0; r < run.rows; ++r) {
      tokens.push_back(run_rows[r].token);
      if (run_rows[r].want_logits && r + 1 < run.rows) only_last = false;
    }
    std::vector<float> prefill_logits;
    ABCD_RETURN_IF_ERROR(cuda_model_->Prefill(run_slots[i], tokens, only_last, &prefill_logits));
    for (int64_t r = 0; r < run.rows; ++r) {
      if (!run_rows[r].want_logits) continue;
      const float* row = prefill_logits.data() + (only_last ? 0 : r * vocab);
      logits->insert(logits->end(), row, row + vocab);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DecodeAndSample(std::span<const SampledRow> rows,
                                          std::vector<int32_t>* tokens) {
  const ModelConfig& config = model_.config();
  std::vector<int> slots;
  std::vector<int32_t> inputs;
  std::vector<DeviceSamplingParams> params;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = slots_.find(rows[i].sequence);
    if (it == slots_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows[", i, "]: unknown sequence ", rows[i].sequence));
    }
    if (rows[i].token < 0 || rows[i].token >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "].token = ", rows[i].token,
                                                     " is outside the vocabulary [0, ",
                                                     config.vocab_size, ")"));
    }
    if (rows[i].sampling.repetition_penalty != 1.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rows[", i, "]: the repetition penalty is applied on the host, not by DecodeAndSample"));
    }
    ABCD_RETURN_IF_ERROR(ValidateSamplingParams(rows[i].sampling));
    slots.push_back(it->second);
    inputs.push_back(rows[i].token);
    params.push_back(MakeDeviceSamplingParams(rows[i].sampling, rows[i].step));
  }
  if (rows.empty()) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(context_->MakeCurrent());
  // StepSample refuses repeated slots and full KV caches before it changes anything.
  std::vector<int32_t> next;
  ABCD_RETURN_IF_ERROR(cuda_model_->StepSample(slots, inputs, params, &next));
  tokens->insert(tokens->end(), next.begin(), next.end());
  return absl::OkStatus();
}

}  // namespace abcd::cuda
