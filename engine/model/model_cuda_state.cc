// CudaModel's slot states to and from the StatePool snapshot format: the device side of
// DecodeBackend::Snapshot / Restore. The layout conversion is device_snapshot.h's (host-only,
// tested without a GPU); here only the copies between a slot and a DeviceSnapshotStage.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/model_cuda.h"

namespace abcd::cuda {
namespace {

absl::Status CopyStateRows(void* to, const void* from, int64_t floats, cudaMemcpyKind kind,
                           cudaStream_t stream, const char* what) {
  if (floats == 0) return absl::OkStatus();
  return Check(cudaMemcpyAsync(to, from, static_cast<size_t>(floats) * sizeof(float), kind, stream),
               what);
}

}  // namespace

absl::StatusOr<DeviceStateMap> CudaModel::MakeStateMap(const StateLayout& cpu) const {
  // Only decoder-only models reach the device (Create refuses the others), so the model's
  // layout has no cross slots.
  std::vector<DeviceLayerState> layers;
  for (const Layer& layer : layers_) {
    DeviceLayerState where;
    if (layer.softmax_index >= 0) {
      where.kv_layer = layer.softmax_index;
    } else {
      where.offset = layer.state_offset;
      where.floats = layer.state_floats;
    }
    layers.push_back(where);
  }
  return DeviceStateMap::Create(cpu, std::move(layers), slots_.state_floats(), kv_width_,
                                options_.max_context);
}

absl::StatusOr<DeviceSnapshotStage> CudaModel::ReadState(int slot,
                                                         const DeviceStateMap& map) const {
  if (!slots_.in_use(slot)) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  }
  ABCD_ASSIGN_OR_RETURN(DeviceSnapshotStage stage,
                        DeviceSnapshotStage::ForDevice(map, slots_.position(slot)));
  std::vector<float> block(static_cast<size_t>(map.block_floats()));
  const cudaStream_t stream = context_.stream();
  ABCD_RETURN_IF_ERROR(CopyStateRows(block.data(), slots_.State(slot, 0), map.block_floats(),
                                     cudaMemcpyDeviceToHost, stream, "state block to host"));
  const int64_t rows = stage.position() * map.kv_width();
  for (int l = 0; l < map.kv_layers(); ++l) {
    ABCD_RETURN_IF_ERROR(CopyStateRows(stage.keys(l), slots_.Keys(slot, l), rows,
                                       cudaMemcpyDeviceToHost, stream, "KV keys to host"));
    ABCD_RETURN_IF_ERROR(CopyStateRows(stage.values(l), slots_.Values(slot, l), rows,
                                       cudaMemcpyDeviceToHost, stream, "KV values to host"));
  }
  ABCD_RETURN_IF_ERROR(context_.Synchronize());
  stage.SetDeviceBlock(block.data());
  return stage;
}

absl::StatusOr<int> CudaModel::AcquireWithState(const DeviceSnapshotStage& stage,
                                                const DeviceStateMap& map) {
  if (map.block_floats() != slots_.state_floats() || map.kv_layers() != slots_.kv_layers()) {
    return absl::InvalidArgumentError("the state map is not this model's");
  }
  if (map.kv_layers() > 0 && stage.position() > options_.max_context) {
    return absl::FailedPreconditionError(
        absl::StrCat("a state of ", stage.position(), " tokens exceeds the KV capacity of ",
                     options_.max_context, " tokens per sequence"));
  }
  ABCD_ASSIGN_OR_RETURN(const int slot, slots_.Acquire(context_));
  const std::vector<float> block = stage.DeviceBlock();
  const cudaStream_t stream = context_.stream();
  const int64_t rows = stage.position() * map.kv_width();
  absl::Status status = CopyStateRows(slots_.State(slot, 0), block.data(), map.block_floats(),
                                      cudaMemcpyHostToDevice, stream, "state block to device");
  for (int l = 0; status.ok() && l < map.kv_layers(); ++l) {
    status = CopyStateRows(slots_.Keys(slot, l), stage.keys(l), rows, cudaMemcpyHostToDevice,
                           stream, "KV keys to device");
    if (status.ok()) {
      status = CopyStateRows(slots_.Values(slot, l), stage.values(l), rows, cudaMemcpyHostToDevice,
                             stream, "KV values to device");
    }
  }
  // The host buffers must outlive the copies.
  if (status.ok()) status = context_.Synchronize();
  if (!status.ok()) {
    slots_.Release(slot);
    return status;
  }
  slots_.set_position(slot, stage.position());
  slots_.ClearCheckpoints(slot);
  return slot;
}

}  // namespace abcd::cuda
