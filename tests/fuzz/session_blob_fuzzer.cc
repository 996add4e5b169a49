// libFuzzer target: session blobs (DecodeSequenceBlob, PeekSequenceBlob) and the StatePool
// snapshots inside them (CheckSnapshot, Restore, Release) on a tiny model with one bounded
// layer and one softmax KV cache, in fp32 and bf16 pools. Each input runs three ways: as a blob,
// as the same blob with its checksum recomputed (so mutations reach the fields behind it), and
// as a bare snapshot.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/ops/packed_matrix.h"
#include "engine/state/sequence_blob.h"
#include "engine/state/state_pool.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr uint64_t kFingerprint = 0xabcd5e55;  // tests/fuzz/make_corpus.py writes the same

abcd::StateLayout TinyLayout(bool bf16) {
  abcd::StateLayout layout;
  layout.initial_fixed.assign(4, 0.0f);  // the bounded layer
  layout.kv_is_cross = {false};          // the softmax layer
  layout.kv_width = 2;
  layout.kv_format = bf16 ? abcd::KvFormat::kBf16 : abcd::KvFormat::kF32;
  layout.fingerprint = kFingerprint;
  return layout;
}

// `expected_position` < 0: unknown (a bare snapshot).
void CheckSnapshotBytes(absl::string_view snapshot, int64_t expected_position) {
  const auto header = abcd::StatePool::ReadSnapshotHeader(snapshot);
  for (const bool bf16 : {false, true}) {
    abcd::StatePool pool(TinyLayout(bf16), int64_t{1} << 24);
    const absl::Status checked = pool.CheckSnapshot(snapshot);
    ABCD_FUZZ_CHECK(pool.size() == 0 && pool.bytes_in_use() == 0);
    const absl::StatusOr<abcd::SequenceId> restored = pool.Restore(snapshot);
    if (!checked.ok()) {
      ABCD_FUZZ_CHECK(checked.code() == absl::StatusCode::kInvalidArgument ||
                      checked.code() == absl::StatusCode::kFailedPrecondition);
      ABCD_FUZZ_CHECK(!checked.message().empty());
      ABCD_FUZZ_CHECK(!restored.ok() && restored.status().code() == checked.code());
      ABCD_FUZZ_CHECK(pool.size() == 0 && pool.bytes_in_use() == 0);
      continue;
    }
    ABCD_FUZZ_CHECK(header.ok() && header->fingerprint == kFingerprint);
    if (!restored.ok()) {
      ABCD_FUZZ_CHECK(restored.status().code() == absl::StatusCode::kResourceExhausted);
      continue;
    }
    const abcd::SequenceState* state = pool.Get(*restored);
    ABCD_FUZZ_CHECK(state != nullptr && state->position == header->position);
    ABCD_FUZZ_CHECK(expected_position < 0 || state->position == expected_position);
    ABCD_FUZZ_CHECK(state->kv.size() == 1 && state->kv[0].length == state->position);
    ABCD_FUZZ_CHECK(state->kv[0].capacity() >= state->kv[0].length);
    // Re-taken in this pool's KV format (which may not be the snapshot's), then stable: restoring
    // that and taking it again gives the same bytes.
    const absl::StatusOr<std::string> again = pool.Snapshot(*restored);
    ABCD_FUZZ_CHECK(again.ok() && pool.CheckSnapshot(*again).ok());
    const absl::StatusOr<abcd::SequenceId> second = pool.Restore(*again);
    ABCD_FUZZ_CHECK(second.ok());
    const absl::StatusOr<std::string> third = pool.Snapshot(*second);
    ABCD_FUZZ_CHECK(third.ok() && *third == *again);
    pool.Release(*second);
    pool.Release(*restored);
    ABCD_FUZZ_CHECK(pool.size() == 0 && pool.bytes_in_use() == 0);
  }
}

void CheckBlob(absl::string_view bytes) {
  const absl::StatusOr<abcd::SequenceBlob> blob = abcd::DecodeSequenceBlob(bytes);
  const absl::StatusOr<abcd::SequenceBlobInfo> info = abcd::PeekSequenceBlob(bytes);
  if (!info.ok()) {
    ABCD_FUZZ_CHECK(info.status().code() == absl::StatusCode::kInvalidArgument);
    ABCD_FUZZ_CHECK(!blob.ok());  // Decode checks everything Peek does
  }
  if (!blob.ok()) {
    ABCD_FUZZ_CHECK(blob.status().code() == absl::StatusCode::kInvalidArgument);
    ABCD_FUZZ_CHECK(absl::string_view(blob.status().message()).substr(0, 14) == "session blob: ");
    return;
  }
  ABCD_FUZZ_CHECK(info.ok());
  ABCD_FUZZ_CHECK(info->model == blob->model && info->fingerprint == blob->fingerprint);
  ABCD_FUZZ_CHECK(info->tokens == static_cast<int64_t>(blob->tokens.size()));
  ABCD_FUZZ_CHECK(info->folded == blob->folded);
  ABCD_FUZZ_CHECK(info->state_bytes == static_cast<int64_t>(blob->state.size()));
  ABCD_FUZZ_CHECK(info->total_bytes == static_cast<int64_t>(bytes.size()));
  ABCD_FUZZ_CHECK(blob->model.size() <= abcd::SequenceBlob::kMaxModelBytes);
  ABCD_FUZZ_CHECK(blob->folded >= 0 && blob->folded <= static_cast<int64_t>(blob->tokens.size()));
  for (const int32_t token : blob->tokens) ABCD_FUZZ_CHECK(token >= 0);
  ABCD_FUZZ_CHECK(abcd::EncodeSequenceBlob(*blob) == bytes);  // the format is canonical
  CheckSnapshotBytes(blob->state, blob->folded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  CheckBlob(bytes);
  if (size >= 8) {
    std::string resealed(bytes);
    const uint64_t sum = abcd::SequenceBlobChecksum(bytes.substr(0, size - 8));
    std::memcpy(resealed.data() + size - 8, &sum, 8);
    CheckBlob(resealed);
  }
  CheckSnapshotBytes(bytes, -1);
  return 0;
}
