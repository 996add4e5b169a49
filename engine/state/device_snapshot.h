// Sequence snapshots of a device backend in the StatePool format (state_pool.h), so that a state
// saved on one backend restores on the other (sessions, the prefix cache). Host-only: no device
// call here, so the conversion is tested without a GPU; CudaModel copies between its slots and a
// DeviceSnapshotStage.
//
// A device slot keeps the same per-layer state blocks as the CPU's fixed block (the kernels use
// the CPU layouts: abc slots, linear / fla states, window rings, short-convolution windows, gated
// delta S), but at its own offsets (each layer's block padded to 16 bytes on CUDA), and one fp32
// KV cache per softmax layer whose first `position` rows are the sequence's keys and values.
// DeviceStateMap says where each decoder layer lives on both sides; a DeviceSnapshotStage holds
// one sequence in the CPU format (a one-sequence StatePool whose KV rows are fp32) for the
// device's copies to fill or read. A device snapshot's KV rows are fp32 (format code 0): the
// StatePool of a bf16 or f16 cache rounds them on Restore, as it rounds the rows it writes;
// snapshots of any format restore on the device (16-bit rows widen exactly).
// Thread-safety: a DeviceStateMap is immutable after Create (any thread may call its const
// methods); a DeviceSnapshotStage has one owner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/state/state_pool.h"

namespace abcd {

// Where one decoder layer's self-attention state lives in a device slot.
struct DeviceLayerState {
  int64_t offset = 0;  // bounded layers: floats into the slot's fixed block
  int64_t floats = 0;  // bounded layers: the block's floats (the CPU slot's fixed_floats)
  int kv_layer = -1;   // softmax layers: the index of its KV cache among the slot's; else -1
};

class DeviceStateMap {
 public:
  // `cpu`: the model's StateLayout; `layers`: one per decoder layer, in order; `block_floats`:
  // the device slot's fixed block; `kv_width`: floats of a device KV row (keys; values alike);
  // `max_context`: KV rows a device slot holds (used when there are softmax layers).
  // FAILED_PRECONDITION for an encoder-decoder layout (cross attention has no device state),
  // INVALID_ARGUMENT naming the layer (decoder_layers[i]) where the two disagree: a bounded
  // layer of another size or outside the block, a softmax layer without a KV cache on either
  // side, KV caches mapped twice or of another width.
  static absl::StatusOr<DeviceStateMap> Create(const StateLayout& cpu,
                                               std::vector<DeviceLayerState> layers,
                                               int64_t block_floats, int64_t kv_width,
                                               int64_t max_context);

  // The model's layout with fp32 KV rows (the device's).
  const StateLayout& layout() const { return pool_.layout(); }
  int64_t block_floats() const { return block_floats_; }
  int kv_layers() const { return static_cast<int>(cpu_kv_.size()); }
  int64_t kv_width() const { return kv_width_; }
  int64_t max_context() const { return max_context_; }
  // The CPU KvCache index of device KV cache `kv_layer`.
  int cpu_kv(int kv_layer) const { return cpu_kv_[static_cast<size_t>(kv_layer)]; }

  // Each bounded layer's floats from a device block (block_floats) into a CPU fixed block
  // (layout().initial_fixed.size() floats), and back; the device block's padding is zeroed.
  void ToCpuFixed(const float* block, float* fixed) const;
  void ToDeviceBlock(const float* fixed, float* block) const;

  // Whether a device slot can take `snapshot`: StatePool::CheckSnapshot's INVALID_ARGUMENT
  // (corrupt) and FAILED_PRECONDITION (another model), then FAILED_PRECONDITION for a state with
  // encoder memory or a position beyond max_context (softmax models), naming the limit.
  absl::Status CheckSnapshot(absl::string_view snapshot) const;

 private:
  DeviceStateMap(StateLayout layout, std::vector<DeviceLayerState> layers, int64_t block_floats,
                 int64_t kv_width, int64_t max_context, std::vector<int> cpu_kv);

  StatePool pool_;  // no sequences: its layout and CheckSnapshot (const, thread-safe)
  std::vector<DeviceLayerState> layers_;
  int64_t block_floats_ = 0;
  int64_t kv_width_ = 0;
  int64_t max_context_ = 0;
  std::vector<int> cpu_kv_;  // per device KV cache
};

// One sequence's state on the host in the StatePool format, between a device slot and the
// snapshot bytes. The map must outlive the stage.
class DeviceSnapshotStage {
 public:
  // An empty state at `position` whose KV caches have `position` rows: the device's copies fill
  // keys() / values() and SetDeviceBlock(), then Snapshot(). FAILED_PRECONDITION beyond
  // max_context, INVALID_ARGUMENT for a negative position.
  static absl::StatusOr<DeviceSnapshotStage> ForDevice(const DeviceStateMap& map, int64_t position);
  // The state of `snapshot` (CheckSnapshot's errors), its KV rows in fp32, for the device's
  // copies to read (DeviceBlock(), keys(), values()).
  static absl::StatusOr<DeviceSnapshotStage> FromSnapshot(const DeviceStateMap& map,
                                                          absl::string_view snapshot);

  int64_t position() const;
  // Device KV cache `kv_layer`'s first position() rows of kv_width floats.
  float* keys(int kv_layer);
  float* values(int kv_layer);
  const float* keys(int kv_layer) const;
  const float* values(int kv_layer) const;
  // The bounded layers' states from / as a device block (block_floats floats, padding zero).
  void SetDeviceBlock(const float* block);
  std::vector<float> DeviceBlock() const;
  // The StatePool snapshot bytes (written into `buffer`, its capacity reused).
  absl::StatusOr<std::string> Snapshot(std::string buffer = {}) const;

 private:
  DeviceSnapshotStage(const DeviceStateMap& map, std::unique_ptr<StatePool> pool, SequenceId id);
  SequenceState& state() const;

  const DeviceStateMap* map_;
  std::unique_ptr<StatePool> pool_;
  SequenceId id_;
};

}  // namespace abcd
