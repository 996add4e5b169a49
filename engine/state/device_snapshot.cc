#include "engine/state/device_snapshot.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace abcd {
namespace {

// A stage's pool holds one sequence, whatever its size.
constexpr int64_t kDeviceStageBudget = int64_t{1} << 62;

absl::Status DeviceLayerError(size_t layer, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("device state map: decoder_layers[", layer, "]: ", what));
}

absl::Status BeyondDeviceContext(int64_t position, int64_t max_context) {
  return absl::FailedPreconditionError(
      absl::StrCat("snapshot: its ", position, " tokens exceed the device's KV capacity of ",
                   max_context, " tokens per sequence (max_context)"));
}

}  // namespace

DeviceStateMap::DeviceStateMap(StateLayout layout, std::vector<DeviceLayerState> layers,
                               int64_t block_floats, int64_t kv_width, int64_t max_context,
                               std::vector<int> cpu_kv)
    : pool_(std::move(layout), 0),
      layers_(std::move(layers)),
      block_floats_(block_floats),
      kv_width_(kv_width),
      max_context_(max_context),
      cpu_kv_(std::move(cpu_kv)) {}

absl::StatusOr<DeviceStateMap> DeviceStateMap::Create(const StateLayout& cpu,
                                                      std::vector<DeviceLayerState> layers,
                                                      int64_t block_floats, int64_t kv_width,
                                                      int64_t max_context) {
  if (!cpu.cross.empty()) {
    return absl::FailedPreconditionError(
        "device state map: encoder-decoder states (cross attention) have no device form");
  }
  if (layers.size() != cpu.self.size()) {
    return absl::InvalidArgumentError(absl::StrCat("device state map: ", layers.size(),
                                                   " device layers, the model has ",
                                                   cpu.self.size(), " decoder layers"));
  }
  if (block_floats < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device state map: block_floats ", block_floats, " is negative"));
  }
  std::vector<int> cpu_kv;
  for (size_t l = 0; l < layers.size(); ++l) {
    const StateLayout::Slot& slot = cpu.self[l];
    const DeviceLayerState& device = layers[l];
    if ((slot.kv_index >= 0) != (device.kv_layer >= 0)) {
      return DeviceLayerError(l, slot.kv_index >= 0
                                     ? "the CPU keeps a KV cache, the device a fixed block"
                                     : "the device keeps a KV cache, the CPU a fixed block");
    }
    if (slot.kv_index >= 0) {
      if (static_cast<size_t>(device.kv_layer) != cpu_kv.size()) {
        return DeviceLayerError(l, absl::StrCat("KV cache ", device.kv_layer, " out of order (",
                                                cpu_kv.size(), " expected)"));
      }
      cpu_kv.push_back(slot.kv_index);
      continue;
    }
    if (device.floats != slot.fixed_floats) {
      return DeviceLayerError(
          l, absl::StrCat("a state block of ", device.floats, " floats on the device, ",
                          slot.fixed_floats, " on the CPU"));
    }
    if (device.offset < 0 || device.offset + device.floats > block_floats) {
      return DeviceLayerError(
          l, absl::StrCat("floats [", device.offset, ", ", device.offset + device.floats,
                          ") are outside the device block of ", block_floats));
    }
  }
  if (cpu_kv.size() != cpu.kv_is_cross.size()) {
    return absl::InvalidArgumentError(absl::StrCat("device state map: ", cpu_kv.size(),
                                                   " device KV caches, the CPU has ",
                                                   cpu.kv_is_cross.size()));
  }
  if (!cpu_kv.empty()) {
    if (kv_width != cpu.kv_width) {
      return absl::InvalidArgumentError(absl::StrCat("device state map: KV rows of ", kv_width,
                                                     " floats on the device, ", cpu.kv_width,
                                                     " on the CPU"));
    }
    if (max_context <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device state map: max_context ", max_context, " with KV caches"));
    }
  }
  StateLayout layout = cpu;
  layout.kv_format = KvFormat::kF32;
  return DeviceStateMap(std::move(layout), std::move(layers), block_floats, kv_width, max_context,
                        std::move(cpu_kv));
}

void DeviceStateMap::ToCpuFixed(const float* block, float* fixed) const {
  const std::vector<StateLayout::Slot>& slots = layout().self;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l].kv_layer >= 0) continue;
    std::copy_n(block + layers_[l].offset, layers_[l].floats, fixed + slots[l].fixed_offset);
  }
}

void DeviceStateMap::ToDeviceBlock(const float* fixed, float* block) const {
  std::fill_n(block, block_floats_, 0.0f);
  const std::vector<StateLayout::Slot>& slots = layout().self;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l].kv_layer >= 0) continue;
    std::copy_n(fixed + slots[l].fixed_offset, layers_[l].floats, block + layers_[l].offset);
  }
}

absl::Status DeviceStateMap::CheckSnapshot(absl::string_view snapshot) const {
  if (absl::Status status = pool_.CheckSnapshot(snapshot); !status.ok()) return status;
  absl::StatusOr<StatePool::SnapshotHeader> header = StatePool::ReadSnapshotHeader(snapshot);
  if (!header.ok()) return header.status();
  if (header->source_length != 0) {
    return absl::FailedPreconditionError(
        "snapshot: holds encoder memory, which a device slot does not keep");
  }
  if (!cpu_kv_.empty() && header->position > max_context_) {
    return BeyondDeviceContext(header->position, max_context_);
  }
  return absl::OkStatus();
}

DeviceSnapshotStage::DeviceSnapshotStage(const DeviceStateMap& map, std::unique_ptr<StatePool> pool,
                                         SequenceId id)
    : map_(&map), pool_(std::move(pool)), id_(id) {}

absl::StatusOr<DeviceSnapshotStage> DeviceSnapshotStage::ForDevice(const DeviceStateMap& map,
                                                                   int64_t position) {
  if (position < 0) {
    return absl::InvalidArgumentError(absl::StrCat("position ", position, " is negative"));
  }
  if (map.kv_layers() > 0 && position > map.max_context()) {
    return BeyondDeviceContext(position, map.max_context());
  }
  auto pool = std::make_unique<StatePool>(map.layout(), kDeviceStageBudget);
  absl::StatusOr<SequenceId> id = pool->Acquire();
  if (!id.ok()) return id.status();
  if (absl::Status status = pool->ReserveTokens(*id, position); !status.ok()) return status;
  SequenceState& state = *pool->Get(*id);
  state.position = position;
  for (KvCache& kv : state.kv) kv.length = position;
  return DeviceSnapshotStage(map, std::move(pool), *id);
}

absl::StatusOr<DeviceSnapshotStage> DeviceSnapshotStage::FromSnapshot(const DeviceStateMap& map,
                                                                      absl::string_view snapshot) {
  if (absl::Status status = map.CheckSnapshot(snapshot); !status.ok()) return status;
  auto pool = std::make_unique<StatePool>(map.layout(), kDeviceStageBudget);
  absl::StatusOr<SequenceId> id = pool->Restore(snapshot);
  if (!id.ok()) return id.status();
  return DeviceSnapshotStage(map, std::move(pool), *id);
}

SequenceState& DeviceSnapshotStage::state() const { return *pool_->Get(id_); }

int64_t DeviceSnapshotStage::position() const { return state().position; }

float* DeviceSnapshotStage::keys(int kv_layer) {
  return state().kv[static_cast<size_t>(map_->cpu_kv(kv_layer))].keys.data();
}
float* DeviceSnapshotStage::values(int kv_layer) {
  return state().kv[static_cast<size_t>(map_->cpu_kv(kv_layer))].values.data();
}
const float* DeviceSnapshotStage::keys(int kv_layer) const {
  return state().kv[static_cast<size_t>(map_->cpu_kv(kv_layer))].keys.data();
}
const float* DeviceSnapshotStage::values(int kv_layer) const {
  return state().kv[static_cast<size_t>(map_->cpu_kv(kv_layer))].values.data();
}

void DeviceSnapshotStage::SetDeviceBlock(const float* block) {
  map_->ToCpuFixed(block, state().fixed.data());
}

std::vector<float> DeviceSnapshotStage::DeviceBlock() const {
  std::vector<float> block(static_cast<size_t>(map_->block_floats()));
  map_->ToDeviceBlock(state().fixed.data(), block.data());
  return block;
}

absl::StatusOr<std::string> DeviceSnapshotStage::Snapshot(std::string buffer) const {
  return pool_->Snapshot(id_, std::move(buffer));
}

}  // namespace abcd
