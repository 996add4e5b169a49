// The CUDA backend: a CudaModel on one GPU behind the DecodeBackend interface.
//
// Sequence ids map to the CudaModel's fixed state slots (one per sequence, preallocated, so
// capacity is max_sequences slots and a softmax slot always holds max_context tokens of KV).
// Decode() runs every single-token row of a batch as ONE batched device step and each
// multi-row prompt chunk through the prefill scan, then returns the logits in row order.
// Create() ends with a parity probe against the CPU Model (a prefill, batched steps and device
// greedy sampling on a fixed token sequence); a backend that disagrees is refused, so callers fall
// back to the CPU instead of serving wrong tokens. Snapshots are the CPU backend's format, so a
// session moves between the two. Every entry point makes the backend's device
// current first, so one thread may create it and another drive it. Decoder-only models;
// encoder-decoder models are Unimplemented here and stay on the CPU backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend/decode_backend.h"
#include "engine/device/cuda_context.h"
#include "engine/model/model_cuda.h"

namespace abcd::cuda {

struct CudaBackendOptions {
  int device = 0;
  int max_sequences = 256;         // state slots: the largest batch, beams included
  int max_prefill_tokens = 512;    // prompt rows of one device pass (at most 4096 are used)
  int64_t max_context = 0;         // softmax layers: KV tokens per sequence (0: 2048)
  int64_t state_budget_bytes = 0;  // > 0: fewer slots when max_sequences would exceed it
  WeightType weights = WeightType::kBF16;
  bool cuda_graphs = true;
  bool parity_probe = true;  // compare against the CPU model before serving
};

class CudaBackend final : public DecodeBackend {
 public:
  // `model` must outlive the backend. NotFound without a GPU, Unimplemented for models the
  // device path does not run, Internal when the parity probe fails.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Model& model,
                                                             const CudaBackendOptions& options);
  // Frees the device memory with the backend's device current (any thread may destroy it).
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::string device_description() const override;
  const ModelConfig& config() const override { return model_.config(); }
  int64_t weight_bytes() const override { return cuda_model_->weight_bytes(); }
  int64_t state_bytes_per_sequence() const override {
    return cuda_model_->state_bytes_per_sequence();
  }
  absl::StatusOr<int64_t> RequestBytes(int64_t prompt_tokens, int64_t source_tokens,
                                       int64_t max_new_tokens, int sequences) const override;
  int64_t capacity_bytes() const override { return cuda_model_->max_sequences() * slot_bytes_; }
  BackendMemory memory() const override;

  absl::StatusOr<SequenceId> Acquire() override;
  void Release(SequenceId id) override;
  absl::StatusOr<SequenceId> Fork(SequenceId id) override;
  // Snapshots in the StatePool format (device_snapshot.h): the CPU backend restores what this
  // one saves and the reverse. A snapshot copies the slot's state and KV rows to the host and
  // waits for them; its KV rows are fp32 whatever the CPU layout's format. Restore takes any
  // format, and refuses (FAILED_PRECONDITION) a state longer than max_context.
  bool snapshots_supported() const override { return snapshot_map_.ok(); }
  using DecodeBackend::Snapshot;
  absl::StatusOr<std::string> Snapshot(SequenceId id, std::string buffer) const override;
  absl::StatusOr<SequenceId> Restore(absl::string_view snapshot) override;
  // Reads only the immutable state map: any thread.
  absl::Status CheckSnapshot(absl::string_view snapshot) const override;
  absl::Status Encode(std::span<const int32_t> source, SequenceId id) override;
  absl::Status Decode(std::span<const DecodeRow> rows, std::vector<float>* logits) override;
  // Checkpoints are fixed-block copies on the device that the state kernels write during the
  // verify pass; a slot keeps their memory once allocated.
  bool checkpoints_supported() const override { return true; }
  int64_t CheckpointBytes(int slots) const override {
    return slots * cuda_model_->state_bytes_per_sequence();
  }
  absl::Status Rollback(SequenceId id, int checkpoint) override;
  // One batched step, sampled on the device (a captured CUDA graph per batch bucket when the
  // model has them); the random stream differs from the CPU Sampler's (sampler_cuda.h).
  bool samples_tokens() const override { return true; }
  absl::Status DecodeAndSample(std::span<const SampledRow> rows,
                               std::vector<int32_t>* tokens) override;

  // The first failure that left the CUDA context unusable (a sticky error such as an illegal
  // address: every later call fails too), else OK.
  absl::Status Health() const override;

  // Largest |logit difference| / max(1, max |CPU logit|) the parity probe measured.
  double probe_relative_error() const { return probe_relative_error_; }

 private:
  CudaBackend(const Model& model, std::unique_ptr<CudaContext> context)
      : model_(model), context_(std::move(context)) {}
  absl::Status RunParityProbe(double tolerance);
  // Passes `status` through; when a device call failed, asks the stream whether the context is
  // poisoned and, if so, keeps the failure for Health().
  absl::Status Checked(absl::Status status) const;

  const Model& model_;
  std::unique_ptr<CudaContext> context_;
  std::unique_ptr<CudaModel> cuda_model_;
  int64_t slot_bytes_ = 0;  // state + preallocated KV of one slot
  int64_t kv_slot_bytes_ = 0;
  absl::flat_hash_map<SequenceId, int> slots_;
  SequenceId next_id_ = 1;
  double probe_relative_error_ = 0.0;
  // Where a slot's state sits against the CPU layout; its error when the two disagree (then
  // snapshots are refused with it).
  absl::StatusOr<DeviceStateMap> snapshot_map_ =
      absl::FailedPreconditionError("the CUDA backend has no state map yet");
  mutable absl::Mutex health_mu_;
  mutable absl::Status health_ ABSL_GUARDED_BY(health_mu_);
};

}  // namespace abcd::cuda
