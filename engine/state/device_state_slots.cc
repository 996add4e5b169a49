#include "engine/state/device_state_slots.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {

absl::StatusOr<DeviceStateSlots> DeviceStateSlots::Create(CudaContext& context, int slots,
                                                          const std::vector<float>& empty_state,
                                                          int kv_layers, int64_t max_context,
                                                          int64_t kv_width) {
  DeviceStateSlots result;
  result.state_floats_ = static_cast<int64_t>(empty_state.size());
  result.max_context_ = max_context;
  result.kv_width_ = kv_width;
  // Exactly one block per slot: padding rows (graph buckets) carry no state.
  ABCD_ASSIGN_OR_RETURN(result.empty_state_, DeviceArray<float>::FromHost(context, empty_state));
  ABCD_ASSIGN_OR_RETURN(result.states_,
                        DeviceArray<float>::Allocate(int64_t{slots} * result.state_floats_));
  for (int i = 0; i < kv_layers; ++i) {
    ABCD_ASSIGN_OR_RETURN(DeviceArray<float> keys,
                          DeviceArray<float>::Allocate(slots * max_context * kv_width));
    ABCD_ASSIGN_OR_RETURN(DeviceArray<float> values,
                          DeviceArray<float>::Allocate(slots * max_context * kv_width));
    result.keys_.push_back(std::move(keys));
    result.values_.push_back(std::move(values));
  }
  result.positions_.assign(slots, 0);
  result.in_use_.assign(slots, false);
  result.checkpoints_.resize(slots);
  result.checkpoint_capacity_.assign(slots, 0);
  result.checkpoint_positions_.resize(slots);
  return result;
}

absl::StatusOr<int> DeviceStateSlots::FreeSlot() const {
  for (int slot = 0; slot < slots(); ++slot) {
    if (!in_use_[slot]) return slot;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("all ", slots(), " CUDA sequence slots are in use"));
}

absl::StatusOr<int> DeviceStateSlots::Acquire(CudaContext& context) {
  ABCD_ASSIGN_OR_RETURN(const int slot, FreeSlot());
  if (state_floats_ > 0) {
    ABCD_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(State(slot, 0), empty_state_.data(), state_floats_ * 4,
                              cudaMemcpyDeviceToDevice, context.stream()),
              "reset state slot"));
  }
  in_use_[slot] = true;
  positions_[slot] = 0;
  checkpoint_positions_[slot].clear();
  return slot;
}

absl::StatusOr<int> DeviceStateSlots::Fork(CudaContext& context, int slot) {
  if (!in_use(slot))
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  ABCD_ASSIGN_OR_RETURN(const int copy, FreeSlot());
  if (state_floats_ > 0) {
    ABCD_RETURN_IF_ERROR(Check(cudaMemcpyAsync(State(copy, 0), State(slot, 0), state_floats_ * 4,
                                               cudaMemcpyDeviceToDevice, context.stream()),
                               "fork state slot"));
  }
  const int64_t kv_floats = positions_[slot] * kv_width_;
  for (int layer = 0; layer < kv_layers() && kv_floats > 0; ++layer) {
    ABCD_RETURN_IF_ERROR(Check(cudaMemcpyAsync(Keys(copy, layer), Keys(slot, layer), kv_floats * 4,
                                               cudaMemcpyDeviceToDevice, context.stream()),
                               "fork key cache"));
    ABCD_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(Values(copy, layer), Values(slot, layer), kv_floats * 4,
                              cudaMemcpyDeviceToDevice, context.stream()),
              "fork value cache"));
  }
  in_use_[copy] = true;
  positions_[copy] = positions_[slot];
  // The fork starts without checkpoints: they are the source's speculation, not its state.
  checkpoint_positions_[copy].clear();
  return copy;
}

void DeviceStateSlots::Release(int slot) {
  if (slot < 0 || slot >= slots()) return;
  in_use_[slot] = false;
  checkpoint_positions_[slot].clear();
}

absl::Status DeviceStateSlots::ReserveCheckpoints(int slot, int count) {
  if (!in_use(slot))
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  if (count <= checkpoint_capacity_[slot]) return absl::OkStatus();
  if (state_floats_ > 0) {
    absl::StatusOr<DeviceArray<float>> grown =
        DeviceArray<float>::Allocate(int64_t{count} * state_floats_);
    if (!grown.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(count, " state checkpoints of slot ", slot, ": ", grown.status().message()));
    }
    checkpoints_[slot] = std::move(*grown);
  }
  checkpoint_capacity_[slot] = count;
  // A grown block holds none of the old checkpoints.
  checkpoint_positions_[slot].clear();
  return absl::OkStatus();
}

void DeviceStateSlots::RecordCheckpoint(int slot, int index, int64_t position) {
  std::vector<int64_t>& saved = checkpoint_positions_[slot];
  if (static_cast<int>(saved.size()) <= index) saved.resize(index + 1, -1);
  saved[index] = position;
}

absl::Status DeviceStateSlots::Rollback(CudaContext& context, int slot, int index) {
  if (!in_use(slot))
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  const std::vector<int64_t>& saved = checkpoint_positions_[slot];
  if (index < 0 || index >= static_cast<int>(saved.size()) || saved[index] < 0) {
    return absl::OutOfRangeError(absl::StrCat("slot ", slot, " has ", saved.size(),
                                              " checkpoints from its last forward pass, not ",
                                              index));
  }
  if (state_floats_ > 0) {
    ABCD_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(State(slot, 0), Checkpoint(slot, index, 0), state_floats_ * 4,
                              cudaMemcpyDeviceToDevice, context.stream()),
              "roll a state slot back"));
  }
  // Softmax caches: the rows past the position are overwritten by the next tokens.
  positions_[slot] = saved[index];
  return absl::OkStatus();
}

}  // namespace abcd::cuda
