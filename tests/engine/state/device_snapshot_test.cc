// DeviceStateMap / DeviceSnapshotStage (engine/state/device_snapshot.h) without a GPU, against a
// host mirror of a CUDA slot laid out as CudaModel lays it out (each bounded layer's block
// starting at a multiple of 4 floats, softmax layers' KV caches numbered in layer order): on
// every decoder-only golden fixture a CPU StatePool snapshot, unpacked into the mirror and
// packed back, gives the same bytes, the mirror's layer blocks are the CPU fixed block's, and a
// CPU sequence restored from the packed bytes continues with the original's logits bit for bit.
// 16-bit KV snapshots widen to fp32 and come back to the same bytes; the refusals name what they
// refuse.
#include "engine/state/device_snapshot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

using testing::FixtureDir;
using testing::FixtureNames;
using testing::Golden;
using testing::LoadGolden;

constexpr int64_t kDeviceMirrorBudget = int64_t{1} << 30;
constexpr int64_t kDeviceMirrorContext = 256;

// A CUDA slot's layout of `layout` (CudaModel::UploadLayer's rule).
struct DeviceMirrorLayout {
  std::vector<DeviceLayerState> layers;
  int64_t block_floats = 0;
};

DeviceMirrorLayout MirrorCudaLayout(const StateLayout& layout) {
  DeviceMirrorLayout mirror;
  int kv_layers = 0;
  for (const StateLayout::Slot& slot : layout.self) {
    DeviceLayerState layer;
    if (slot.kv_index >= 0) {
      layer.kv_layer = kv_layers++;
    } else {
      layer.offset = mirror.block_floats;
      layer.floats = slot.fixed_floats;
      mirror.block_floats = (layer.offset + layer.floats + 3) / 4 * 4;
    }
    mirror.layers.push_back(layer);
  }
  return mirror;
}

absl::StatusOr<DeviceStateMap> MirrorMap(const StateLayout& layout,
                                         int64_t max_context = kDeviceMirrorContext) {
  DeviceMirrorLayout mirror = MirrorCudaLayout(layout);
  return DeviceStateMap::Create(layout, std::move(mirror.layers), mirror.block_floats,
                                layout.kv_width, max_context);
}

// The device's copy of a stage: its block and KV rows as a CUDA slot would hold them.
struct DeviceMirrorSlot {
  int64_t position = 0;
  std::vector<float> block;
  std::vector<std::vector<float>> keys, values;
};

DeviceMirrorSlot ReadMirror(const DeviceStateMap& map, const DeviceSnapshotStage& stage) {
  DeviceMirrorSlot slot;
  slot.position = stage.position();
  slot.block = stage.DeviceBlock();
  const size_t floats = static_cast<size_t>(slot.position * map.kv_width());
  for (int l = 0; l < map.kv_layers(); ++l) {
    slot.keys.emplace_back(stage.keys(l), stage.keys(l) + floats);
    slot.values.emplace_back(stage.values(l), stage.values(l) + floats);
  }
  return slot;
}

std::string PackMirror(const DeviceStateMap& map, const DeviceMirrorSlot& slot) {
  absl::StatusOr<DeviceSnapshotStage> stage = DeviceSnapshotStage::ForDevice(map, slot.position);
  EXPECT_TRUE(stage.ok()) << stage.status();
  if (!stage.ok()) return "";
  stage->SetDeviceBlock(slot.block.data());
  for (int l = 0; l < map.kv_layers(); ++l) {
    std::copy(slot.keys[l].begin(), slot.keys[l].end(), stage->keys(l));
    std::copy(slot.values[l].begin(), slot.values[l].end(), stage->values(l));
  }
  absl::StatusOr<std::string> bytes = stage->Snapshot();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

// A sequence of `pool` that has seen the fixture's prompt and its first decode ids.
SequenceId DeviceMirrorPrompted(const Model& model, const Golden& golden, StatePool& pool) {
  const SequenceId id = pool.Acquire().value();
  std::vector<DecodeRow> rows;
  for (int32_t t : golden.prompt_ids) rows.push_back({id, t, false});
  for (size_t i = 0; i < 3 && i < golden.decode_ids.size(); ++i) {
    rows.push_back({id, golden.decode_ids[i], false});
  }
  std::vector<float> logits;
  EXPECT_TRUE(model.Decode(rows, pool, &logits).ok());
  return id;
}

TEST(DeviceSnapshot, MirrorRoundTripIsByteExactOnEveryDecoderFixture) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    SCOPED_TRACE(name);
    auto model = Model::Load(FixtureDir(name));
    ASSERT_TRUE(model.ok()) << model.status();
    if ((*model)->config().is_encoder_decoder()) continue;
    ++checked;
    const StateLayout& layout = (*model)->state_layout();
    const Golden golden = LoadGolden(name);
    StatePool pool(layout, kDeviceMirrorBudget);
    const SequenceId id = DeviceMirrorPrompted(**model, golden, pool);
    const std::string snapshot = pool.Snapshot(id).value();

    absl::StatusOr<DeviceStateMap> map = MirrorMap(layout);
    ASSERT_TRUE(map.ok()) << map.status();
    ASSERT_TRUE(map->CheckSnapshot(snapshot).ok());
    absl::StatusOr<DeviceSnapshotStage> stage = DeviceSnapshotStage::FromSnapshot(*map, snapshot);
    ASSERT_TRUE(stage.ok()) << stage.status();
    const DeviceMirrorSlot slot = ReadMirror(*map, *stage);

    // The mirror holds each bounded layer's CPU block at its device offset, zeros between.
    const SequenceState& cpu = *pool.Get(id);
    const DeviceMirrorLayout mirror = MirrorCudaLayout(layout);
    std::vector<bool> covered(slot.block.size(), false);
    for (size_t l = 0; l < mirror.layers.size(); ++l) {
      const DeviceLayerState& layer = mirror.layers[l];
      if (layer.kv_layer >= 0) continue;
      for (int64_t i = 0; i < layer.floats; ++i) {
        covered[static_cast<size_t>(layer.offset + i)] = true;
        ASSERT_EQ(slot.block[static_cast<size_t>(layer.offset + i)],
                  cpu.fixed[static_cast<size_t>(layout.self[l].fixed_offset + i)])
            << "decoder_layers[" << l << "] float " << i;
      }
    }
    for (size_t i = 0; i < covered.size(); ++i) {
      if (!covered[i]) {
        EXPECT_EQ(slot.block[i], 0.0f) << "padding float " << i;
      }
    }
    for (int l = 0; l < map->kv_layers(); ++l) {
      const KvCache& kv = cpu.kv[static_cast<size_t>(map->cpu_kv(l))];
      ASSERT_EQ(slot.keys[l].size(), static_cast<size_t>(kv.length * kv.width));
      EXPECT_TRUE(std::equal(slot.keys[l].begin(), slot.keys[l].end(), kv.keys.begin()));
      EXPECT_TRUE(std::equal(slot.values[l].begin(), slot.values[l].end(), kv.values.begin()));
    }

    // Packed back: the CPU's bytes, and a sequence restored from them continues identically.
    const std::string packed = PackMirror(*map, slot);
    EXPECT_EQ(packed, snapshot);
    const SequenceId restored = pool.Restore(packed).value();
    const int32_t next = golden.decode_ids.size() > 3 ? golden.decode_ids[3] : golden.prompt_ids[0];
    std::vector<float> original, continued;
    const DecodeRow row_original{id, next, true};
    const DecodeRow row_restored{restored, next, true};
    ASSERT_TRUE((*model)->Decode({&row_original, 1}, pool, &original).ok());
    ASSERT_TRUE((*model)->Decode({&row_restored, 1}, pool, &continued).ok());
    EXPECT_EQ(original, continued);
  }
  EXPECT_GT(checked, 20);
}

// A bf16 or f16 cache's snapshot unpacks to fp32 rows (exact), packs to fp32 rows, and a pool of
// the original format restores those to the original bytes.
TEST(DeviceSnapshot, HalfKvSnapshotsWidenAndComeBackExactly) {
  for (const KvFormat format : {KvFormat::kBf16, KvFormat::kF16}) {
    SCOPED_TRACE(KvFormatName(format));
    ModelLoadOptions options;
    options.kv_cache_format = format;
    auto model = Model::Load(FixtureDir("hf_llama_gqa"), options);
    ASSERT_TRUE(model.ok()) << model.status();
    const StateLayout& layout = (*model)->state_layout();
    StatePool pool(layout, kDeviceMirrorBudget);
    const SequenceId id = DeviceMirrorPrompted(**model, LoadGolden("hf_llama_gqa"), pool);
    const std::string snapshot = pool.Snapshot(id).value();
    absl::StatusOr<DeviceStateMap> map = MirrorMap(layout);
    ASSERT_TRUE(map.ok()) << map.status();
    ASSERT_GT(map->kv_layers(), 0);
    absl::StatusOr<DeviceSnapshotStage> stage = DeviceSnapshotStage::FromSnapshot(*map, snapshot);
    ASSERT_TRUE(stage.ok()) << stage.status();
    std::vector<float> widened(static_cast<size_t>(stage->position() * map->kv_width()));
    pool.Get(id)->kv[static_cast<size_t>(map->cpu_kv(0))].ReadRows(
        stage->position(), widened.data(), std::vector<float>(widened.size()).data());
    EXPECT_TRUE(std::equal(widened.begin(), widened.end(), stage->keys(0)));
    const std::string packed = PackMirror(*map, ReadMirror(*map, *stage));
    EXPECT_GT(packed.size(), snapshot.size());  // fp32 rows
    const SequenceId restored = pool.Restore(packed).value();
    EXPECT_EQ(pool.Snapshot(restored).value(), snapshot);
  }
}

TEST(DeviceSnapshot, RefusalsNameWhatTheyRefuse) {
  auto softmax = Model::Load(FixtureDir("dec_mixed"));
  ASSERT_TRUE(softmax.ok()) << softmax.status();
  const StateLayout& layout = (*softmax)->state_layout();
  DeviceMirrorLayout mirror = MirrorCudaLayout(layout);

  // Layouts that disagree.
  auto encdec = Model::Load(FixtureDir("encdec_mixed"));
  ASSERT_TRUE(encdec.ok()) << encdec.status();
  absl::StatusOr<DeviceStateMap> map =
      DeviceStateMap::Create((*encdec)->state_layout(), {}, 0, 0, kDeviceMirrorContext);
  EXPECT_EQ(map.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(map.status().message().find("cross attention"), std::string::npos);
  size_t bounded = 0;
  while (mirror.layers[bounded].kv_layer >= 0) ++bounded;
  std::vector<DeviceLayerState> layers = mirror.layers;
  layers[bounded].floats += 4;
  map = DeviceStateMap::Create(layout, layers, mirror.block_floats + 4, layout.kv_width, 64);
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(map.status().message().find(absl::StrCat("decoder_layers[", bounded, "]")),
            std::string::npos)
      << map.status();
  layers = mirror.layers;
  layers[bounded].offset = mirror.block_floats;
  map = DeviceStateMap::Create(layout, layers, mirror.block_floats, layout.kv_width, 64);
  EXPECT_NE(map.status().message().find("outside the device block"), std::string::npos)
      << map.status();
  map = DeviceStateMap::Create(layout, mirror.layers, mirror.block_floats, layout.kv_width + 1, 64);
  EXPECT_NE(map.status().message().find("KV rows of"), std::string::npos) << map.status();

  // Snapshots a slot cannot take.
  map = MirrorMap(layout, /*max_context=*/4);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_GT(map->kv_layers(), 0);
  StatePool pool(layout, kDeviceMirrorBudget);
  const SequenceId id = DeviceMirrorPrompted(**softmax, LoadGolden("dec_mixed"), pool);
  const std::string snapshot = pool.Snapshot(id).value();
  absl::Status status = map->CheckSnapshot(snapshot);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("max_context"), std::string::npos) << status;
  EXPECT_EQ(DeviceSnapshotStage::FromSnapshot(*map, snapshot).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeviceSnapshotStage::ForDevice(*map, 5).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeviceSnapshotStage::ForDevice(*map, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  map = MirrorMap(layout);
  ASSERT_TRUE(map.ok());
  EXPECT_TRUE(map->CheckSnapshot(snapshot).ok());
  EXPECT_EQ(map->CheckSnapshot(snapshot.substr(0, snapshot.size() - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  auto other = Model::Load(FixtureDir("dec_abc"));
  ASSERT_TRUE(other.ok()) << other.status();
  StatePool other_pool((*other)->state_layout(), kDeviceMirrorBudget);
  const std::string foreign = other_pool.Snapshot(other_pool.Acquire().value()).value();
  EXPECT_EQ(map->CheckSnapshot(foreign).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeviceSnapshotStage::FromSnapshot(*map, foreign).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace abcd
