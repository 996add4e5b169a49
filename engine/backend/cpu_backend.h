// The CPU backend: the loaded Model computes on this backend's CpuContext (its own `threads`
// threads and reused buffers), a StatePool of `budget_bytes` holds the states. The reference
// every other backend is compared against, and the fallback without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/decode_backend.h"
#include "engine/model/model.h"
#include "engine/state/state_pool.h"

namespace abcd {

class CpuBackend final : public DecodeBackend {
 public:
  // `model` must outlive the backend.
  CpuBackend(const Model& model, int64_t budget_bytes, int threads = 1,
             cpu::LinearProducts products = cpu::LinearProducts::kFloat32);

  std::string name() const override { return "cpu"; }
  std::string device_description() const override;
  const ModelConfig& config() const override { return model_.config(); }
  int64_t weight_bytes() const override { return model_.weight_bytes(); }
  int64_t state_bytes_per_sequence() const override { return model_.state_layout().FixedBytes(); }
  absl::StatusOr<int64_t> RequestBytes(int64_t prompt_tokens, int64_t source_tokens,
                                       int64_t max_new_tokens, int sequences) const override;
  int64_t capacity_bytes() const override { return pool_.budget_bytes(); }
  BackendMemory memory() const override;

  absl::StatusOr<SequenceId> Acquire() override { return pool_.Acquire(); }
  void Release(SequenceId id) override { pool_.Release(id); }
  absl::StatusOr<SequenceId> Fork(SequenceId id) override { return pool_.Fork(id); }
  bool snapshots_supported() const override { return true; }
  using DecodeBackend::Snapshot;
  absl::StatusOr<std::string> Snapshot(SequenceId id, std::string buffer) const override {
    return pool_.Snapshot(id, std::move(buffer));
  }
  bool earlier_snapshots_supported() const override { return pool_.earlier_snapshots(); }
  absl::StatusOr<std::string> SnapshotAt(SequenceId id, int64_t position,
                                         std::string buffer) const override {
    return pool_.SnapshotAt(id, position, std::move(buffer));
  }
  absl::StatusOr<SequenceId> Restore(absl::string_view snapshot) override {
    return pool_.Restore(snapshot);
  }
  // Reads only the pool's layout, which never changes: safe from any thread.
  absl::Status CheckSnapshot(absl::string_view snapshot) const override {
    return pool_.CheckSnapshot(snapshot);
  }
  absl::Status Encode(std::span<const int32_t> source, SequenceId id) override {
    return model_.Encode(context_, source, id, pool_);
  }
  absl::Status Decode(std::span<const DecodeRow> rows, std::vector<float>* logits) override {
    return model_.Decode(context_, rows, pool_, logits);
  }
  // Checkpoints are copies of the fixed block (the KV caches are cut back by length).
  bool checkpoints_supported() const override { return true; }
  int64_t CheckpointBytes(int slots) const override {
    return slots * model_.state_layout().FixedBytes();
  }
  absl::Status Rollback(SequenceId id, int checkpoint) override {
    return pool_.Rollback(id, checkpoint);
  }

 private:
  const Model& model_;
  StatePool pool_;
  CpuContext context_;
};

}  // namespace abcd
