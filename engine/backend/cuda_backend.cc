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
  // A device pass holds at most this many prompt rows whatever the scheduler's budget (its
  // activation buffers grow with it); Decode cuts larger batches into passes.
  constexpr int kMaxPassPrefillRows = 4096;
  model_options.max_prefill_tokens = std::min(options.max_prefill_tokens, kMaxPassPrefillRows);
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
    // The device keeps its KV cache in fp32 whatever the CPU layout's format.
    const int64_t device_kv_bytes_per_token = 2 * layout.kv_width * 4;
    const int64_t slot_bytes =
        layout.FixedBytes() + softmax_layers * context_tokens * device_kv_bytes_per_token + 64;
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
  backend->snapshot_map_ = cuda_model.MakeStateMap(model.state_layout());
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

absl::Status CudaBackend::Health() const {
  absl::MutexLock lock(&health_mu_);
  return health_;
}

absl::Status CudaBackend::Checked(absl::Status status) const {
  if (status.ok() || status.code() != absl::StatusCode::kInternal) return status;
  // Sticky errors answer every later call, this query included; a failed allocation does not.
  const cudaError_t stream = cudaStreamQuery(context_->stream());
  if (stream != cudaSuccess && stream != cudaErrorNotReady) {
    absl::MutexLock lock(&health_mu_);
    if (health_.ok()) {
      health_ = absl::InternalError(absl::StrCat("CUDA device ", context_->device(), ": ",
                                                 status.message(), " (the context reports ",
                                                 cudaGetErrorName(stream), " and cannot recover)"));
    }
  }
  return status;
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
  // The device keeps fp32 KV caches: compare against an fp32 CPU cache too.
  StateLayout layout = model_.state_layout();
  layout.kv_format = KvFormat::kF32;
  StatePool pool(std::move(layout), int64_t{1} << 40);
  ABCD_ASSIGN_OR_RETURN(const SequenceId cpu_sequence, pool.Acquire());
  std::vector<DecodeRow> rows;
  for (int32_t token : tokens) rows.push_back({cpu_sequence, token, true});
  std::vector<float> expected;
  ABCD_RETURN_IF_ERROR(model_.Decode(rows, pool, &expected));

  // Device, through the two paths serving uses: Forward() (Decode) and StepSample()
  // (DecodeAndSample, the CUDA-graph path). First one pass prefills the probed sequence and a
  // sampler sequence side by side; then each step feeds the probed sequence one token in the
  // same pass as a two-token chunk of a third (discarded) sequence, so multi-sequence scans
  // and mixed prompt/decode passes are both probed, and the sampler takes the same steps
  // through device greedy sampling.
  ABCD_ASSIGN_OR_RETURN(const int slot, cuda_model_->Acquire());
  absl::StatusOr<int> other = cuda_model_->Acquire();
  absl::StatusOr<int> sampler = cuda_model_->Acquire();
  std::vector<float> actual;
  std::vector<int32_t> sampled;
  const std::span<const int32_t> prompt = std::span<const int32_t>(tokens).first(kPrefillTokens);
  absl::Status status;
  const int64_t max_rows = cuda_model_->max_rows();  // tiny only with tiny server limits
  if (sampler.ok() && 2 * kPrefillTokens <= max_rows) {
    const CudaModel::SequenceTokens prefill[] = {{slot, prompt}, {*sampler, prompt}};
    std::vector<int64_t> prompt_rows(kPrefillTokens);
    for (int r = 0; r < kPrefillTokens; ++r) prompt_rows[r] = r;
    status = cuda_model_->Forward(prefill, prompt_rows, &actual);
  } else {
    status = cuda_model_->Prefill(slot, prompt, /*last_only=*/false, &actual);
    std::vector<float> ignored;
    if (status.ok() && sampler.ok())
      status = cuda_model_->Prefill(*sampler, prompt, true, &ignored);
  }
  for (int t = kPrefillTokens; status.ok() && t < kPrefillTokens + kStepTokens; ++t) {
    std::vector<CudaModel::SequenceTokens> step = {{slot, {&tokens[t], 1}}};
    if (other.ok() && max_rows >= 3) {
      step.push_back({*other, {&tokens[2 * (t - kPrefillTokens)], 2}});
    }
    const int64_t first_row[] = {0};
    status = cuda_model_->Forward(step, first_row, &actual);
    if (!status.ok()) break;
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
  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  absl::StatusOr<int> acquired = cuda_model_->Acquire();
  if (!acquired.ok()) return Checked(acquired.status());
  const int slot = *acquired;
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
  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  absl::StatusOr<int> forked = cuda_model_->Fork(it->second);
  if (!forked.ok()) return Checked(forked.status());
  const int slot = *forked;
  const SequenceId copy = next_id_++;
  slots_[copy] = slot;
  return copy;
}

absl::StatusOr<std::string> CudaBackend::Snapshot(SequenceId id, std::string buffer) const {
  if (!snapshot_map_.ok()) return snapshot_map_.status();
  auto it = slots_.find(id);
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  absl::StatusOr<DeviceSnapshotStage> stage = cuda_model_->ReadState(it->second, *snapshot_map_);
  if (!stage.ok()) return Checked(stage.status());
  return stage->Snapshot(std::move(buffer));
}

absl::StatusOr<SequenceId> CudaBackend::Restore(absl::string_view snapshot) {
  if (!snapshot_map_.ok()) return snapshot_map_.status();
  ABCD_ASSIGN_OR_RETURN(DeviceSnapshotStage stage,
                        DeviceSnapshotStage::FromSnapshot(*snapshot_map_, snapshot));
  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  absl::StatusOr<int> slot = cuda_model_->AcquireWithState(stage, *snapshot_map_);
  if (!slot.ok()) return Checked(slot.status());
  const SequenceId id = next_id_++;
  slots_[id] = *slot;
  return id;
}

absl::Status CudaBackend::CheckSnapshot(absl::string_view snapshot) const {
  if (!snapshot_map_.ok()) return snapshot_map_.status();
  return snapshot_map_->CheckSnapshot(snapshot);
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

  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  // Speculative decoding: each sequence fed here forgets its earlier checkpoints; those with
  // checkpoint rows get room for them (numbered in row order across the call's passes).
  for (size_t i = 0; i < runs.size(); ++i) {
    cuda_model_->ClearCheckpoints(run_slots[i]);
    const int count = static_cast<int>(std::count_if(
        rows.begin() + runs[i].first_row, rows.begin() + runs[i].first_row + runs[i].rows,
        [](const DecodeRow& row) { return row.checkpoint; }));
    if (count > 0) {
      ABCD_RETURN_IF_ERROR(Checked(cuda_model_->ReserveCheckpoints(run_slots[i], count)));
    }
  }

  // A verify pass of one sequence (speculation at batch 1): every row's logits, from a captured
  // graph where the model has one.
  if (runs.size() == 1 && runs[0].rows <= cuda_model_->max_rows() &&
      std::all_of(rows.begin(), rows.end(), [](const DecodeRow& row) { return row.want_logits; }) &&
      std::any_of(rows.begin(), rows.end(), [](const DecodeRow& row) { return row.checkpoint; })) {
    std::vector<int32_t> tokens, checkpoint_rows;
    for (size_t r = 0; r < rows.size(); ++r) {
      tokens.push_back(rows[r].token);
      if (rows[r].checkpoint) checkpoint_rows.push_back(static_cast<int32_t>(r));
    }
    return Checked(cuda_model_->Verify({run_slots[0], tokens, checkpoint_rows}, logits));
  }

  // As few forward passes as the rows allow: each carries up to max_rows() rows, prompt chunks
  // and decode tokens together. A run longer than that continues in the next pass (a slot
  // appears once per pass). Passes run in row order, so the logits come out in row order.
  std::vector<CudaModel::SequenceTokens> entries;
  std::vector<std::vector<int32_t>> entry_checkpoints;  // rows within each entry's tokens
  std::vector<int64_t> logit_rows;
  std::vector<int32_t> tokens(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) tokens[r] = rows[r].token;
  int64_t pass_rows = 0;
  auto flush = [&]() -> absl::Status {
    if (entries.empty()) return absl::OkStatus();
    for (size_t e = 0; e < entries.size(); ++e) entries[e].checkpoint_rows = entry_checkpoints[e];
    absl::Status status = Checked(cuda_model_->Forward(entries, logit_rows, logits));
    entries.clear();
    entry_checkpoints.clear();
    logit_rows.clear();
    pass_rows = 0;
    return status;
  };
  const int64_t max_rows = cuda_model_->max_rows();
  for (size_t i = 0; i < runs.size(); ++i) {
    for (int64_t begin = 0; begin < runs[i].rows;) {
      if (pass_rows == max_rows) ABCD_RETURN_IF_ERROR(flush());
      const int64_t take = std::min(runs[i].rows - begin, max_rows - pass_rows);
      const int64_t first_row = runs[i].first_row + begin;
      CudaModel::SequenceTokens entry{run_slots[i],
                                      std::span<const int32_t>(tokens).subspan(first_row, take)};
      std::vector<int32_t> saved;
      for (int64_t r = 0; r < take; ++r) {
        if (rows[first_row + r].want_logits) logit_rows.push_back(pass_rows + r);
        if (rows[first_row + r].checkpoint) saved.push_back(static_cast<int32_t>(r));
        if (rows[first_row + r].checkpoint && saved.size() == 1) {
          // Checkpoints before this pass's first one: this run's earlier checkpoint rows.
          entry.first_checkpoint = static_cast<int>(
              std::count_if(rows.begin() + runs[i].first_row, rows.begin() + first_row + r,
                            [](const DecodeRow& row) { return row.checkpoint; }));
        }
      }
      entries.push_back(entry);
      entry_checkpoints.push_back(std::move(saved));
      pass_rows += take;
      begin += take;
      // The rest of this run needs the state this pass leaves: it goes in the next one.
      if (begin < runs[i].rows) ABCD_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

absl::Status CudaBackend::Rollback(SequenceId id, int checkpoint) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  return Checked(cuda_model_->Rollback(it->second, checkpoint));
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
    if (NeedsHostSampling(rows[i].sampling)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows[", i,
                       "]: penalties, min_p and logit_bias are applied on the host, not by "
                       "DecodeAndSample"));
    }
    ABCD_RETURN_IF_ERROR(ValidateSamplingParams(rows[i].sampling));
    slots.push_back(it->second);
    inputs.push_back(rows[i].token);
    params.push_back(MakeDeviceSamplingParams(rows[i].sampling, rows[i].step));
  }
  if (rows.empty()) return absl::OkStatus();
  ABCD_RETURN_IF_ERROR(Checked(context_->MakeCurrent()));
  // StepSample refuses repeated slots and full KV caches before it changes anything.
  std::vector<int32_t> next;
  ABCD_RETURN_IF_ERROR(Checked(cuda_model_->StepSample(slots, inputs, params, &next)));
  tokens->insert(tokens->end(), next.begin(), next.end());
  return absl::OkStatus();
}

}  // namespace abcd::cuda
