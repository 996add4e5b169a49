// Per-sequence attention state on one GPU: the CUDA twin of StatePool (state_pool.h), used by
// CudaModel. A fixed number of slots, each with one fixed block of `state_floats` floats (every
// bounded layer's state, each layer's block 16-byte aligned; reset from the empty block on
// Acquire) and, per softmax layer, a KV cache of `max_context` rows of `kv_width` keys and as
// many values (fp32). A slot also keeps its position (tokens folded in so far).
// Speculative decoding: a slot may hold checkpoints, copies of its fixed block that the state
// kernels write after chosen rows of a forward pass, and the positions they were taken at;
// Rollback() copies one back (softmax caches need only the position cut). Checkpoint memory
// is allocated the first time a slot needs that many and stays with the slot (a later sequence
// in it reuses it) until the slots are destroyed.
// Acquire/Fork/Release enqueue device copies on the context's stream. Not thread-safe: one
// owner (the engine thread) drives it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda {

class DeviceStateSlots {
 public:
  DeviceStateSlots() = default;  // no slots
  // `empty_state`: one slot's fixed block after Init() (its size is state_floats).
  static absl::StatusOr<DeviceStateSlots> Create(CudaContext& context, int slots,
                                                 const std::vector<float>& empty_state,
                                                 int kv_layers, int64_t max_context,
                                                 int64_t kv_width);

  int slots() const { return static_cast<int>(in_use_.size()); }
  int64_t state_floats() const { return state_floats_; }
  int kv_layers() const { return static_cast<int>(keys_.size()); }
  int64_t max_context() const { return max_context_; }
  bool in_use(int slot) const { return slot >= 0 && slot < slots() && in_use_[slot]; }

  // A free slot reset to the empty state at position 0; ResourceExhausted when all are in use.
  absl::StatusOr<int> Acquire(CudaContext& context);
  // A free slot holding a copy of `slot`'s state, KV rows and position.
  absl::StatusOr<int> Fork(CudaContext& context, int slot);
  // Out-of-range slots are ignored.
  void Release(int slot);

  int64_t position(int slot) const { return positions_[slot]; }
  void set_position(int slot, int64_t position) { positions_[slot] = position; }
  void Advance(int slot, int64_t tokens) { positions_[slot] += tokens; }

  // Grows `slot`'s checkpoint memory to at least `count` blocks (ResourceExhausted when the
  // device has no room; the slot keeps what it had).
  absl::Status ReserveCheckpoints(int slot, int count);
  int checkpoint_capacity(int slot) const { return checkpoint_capacity_[slot]; }
  // Forgets `slot`'s checkpoints (a new forward pass is about to write its own).
  void ClearCheckpoints(int slot) { checkpoint_positions_[slot].clear(); }
  // Checkpoint `index` (< checkpoint_capacity) of `slot` at `offset` floats: where a kernel
  // writes it. Then RecordCheckpoint() names the position its row left.
  float* Checkpoint(int slot, int index, int64_t offset) const {
    return checkpoints_[slot].data() + index * state_floats_ + offset;
  }
  void RecordCheckpoint(int slot, int index, int64_t position);
  // Puts checkpoint `index` back: the fixed block (an enqueued device copy) and the position.
  // OutOfRange when the slot's last forward pass wrote no such checkpoint; the checkpoints stay
  // valid, so a later Rollback may go to an earlier one.
  absl::Status Rollback(CudaContext& context, int slot, int index);

  // Device addresses: `slot`'s fixed block at `offset` floats, and its rows of the KV cache of
  // softmax layer `kv_layer`.
  float* State(int slot, int64_t offset) const {
    return states_.data() + slot * state_floats_ + offset;
  }
  float* Keys(int slot, int kv_layer) const {
    return keys_[kv_layer].data() + static_cast<int64_t>(slot) * max_context_ * kv_width_;
  }
  float* Values(int slot, int kv_layer) const {
    return values_[kv_layer].data() + static_cast<int64_t>(slot) * max_context_ * kv_width_;
  }

 private:
  // The lowest free slot, not reset; ResourceExhausted when all are in use.
  absl::StatusOr<int> FreeSlot() const;

  int64_t state_floats_ = 0;
  int64_t max_context_ = 0;
  int64_t kv_width_ = 0;
  DeviceArray<float> states_;                      // [slots, state_floats]
  DeviceArray<float> empty_state_;                 // [state_floats]
  std::vector<DeviceArray<float>> keys_, values_;  // per softmax layer [slots, max_context, width]
  std::vector<int64_t> positions_;
  std::vector<bool> in_use_;
  std::vector<DeviceArray<float>> checkpoints_;  // per slot [checkpoint_capacity, state_floats]
  std::vector<int> checkpoint_capacity_;
  std::vector<std::vector<int64_t>> checkpoint_positions_;  // per slot; -1: not written
};

}  // namespace abcd::cuda
