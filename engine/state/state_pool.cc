#include "engine/state/state_pool.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/ops/packed_matrix.h"
#include "engine/state/byte_reader.h"

namespace abcd {
namespace {

// Version 2 keeps each KV cache's rows in its own format (a byte after the row count: 0 fp32,
// 1 bf16, 2 f16); version 1 (still read) widened every row to fp32.
constexpr char kSnapshotMagic[8] = {'A', 'B', 'C', 'D', 'S', 'E', 'Q', '2'};
constexpr char kSnapshotMagicV1[8] = {'A', 'B', 'C', 'D', 'S', 'E', 'Q', '1'};
// KV rows restored into another format go through a buffer of this many values (64 KiB of fp32).
constexpr int64_t kSnapshotBlockFloats = 16384;

absl::Status NotFound(SequenceId id) {
  return absl::NotFoundError(absl::StrCat("no sequence with id ", id));
}

class Writer {
 public:
  Writer() = default;
  // Writes into `buffer` from its start, keeping its capacity.
  explicit Writer(std::string buffer) : out_(std::move(buffer)) { out_.clear(); }
  template <typename T>
  void Put(const T& value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutFloats(const float* data, int64_t count) {
    out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * 4);
  }
  void PutHalves(const uint16_t* data, int64_t count) {
    out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * 2);
  }
  void Reserve(size_t bytes) { out_.reserve(bytes); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

StatePool::StatePool(StateLayout layout, int64_t budget_bytes)
    : layout_(std::move(layout)), budget_bytes_(budget_bytes) {}

int64_t StatePool::ChargedBytes(const SequenceState& state) const {
  int64_t bytes = layout_.FixedBytes();
  for (const KvCache& kv : state.kv) bytes += kv.capacity() * layout_.KvBytesPerToken();
  return bytes + static_cast<int64_t>(state.checkpoints.size()) * 4;
}

SequenceId StatePool::Insert(std::unique_ptr<SequenceState> state, int64_t bytes) {
  const SequenceId id = next_id_++;
  bytes_in_use_ += bytes;
  sequences_.emplace(id, std::move(state));
  TrimSpare();
  return id;
}

void StatePool::KeepSpare(std::vector<KvCache> kv) {
  int64_t bytes = 0;
  for (KvCache& cache : kv) {
    cache.Empty();
    bytes += cache.storage_bytes();
  }
  if (bytes == 0 || bytes_in_use_ + spare_kv_bytes_ + bytes > budget_bytes_) return;
  spare_kv_.push_back(std::move(kv));
  spare_kv_bytes_ += bytes;
}

std::vector<KvCache> StatePool::TakeSpare() {
  std::vector<KvCache> kv;
  if (!spare_kv_.empty()) {
    kv = std::move(spare_kv_.back());
    spare_kv_.pop_back();
    for (const KvCache& cache : kv) spare_kv_bytes_ -= cache.storage_bytes();
  }
  kv.resize(layout_.kv_is_cross.size());
  for (KvCache& cache : kv) {
    cache.width = layout_.kv_width;
    cache.format = layout_.kv_format;
  }
  return kv;
}

void StatePool::TrimSpare() {
  size_t dropped = 0;
  while (dropped < spare_kv_.size() && bytes_in_use_ + spare_kv_bytes_ > budget_bytes_) {
    for (const KvCache& cache : spare_kv_[dropped]) spare_kv_bytes_ -= cache.storage_bytes();
    ++dropped;
  }
  spare_kv_.erase(spare_kv_.begin(), spare_kv_.begin() + static_cast<std::ptrdiff_t>(dropped));
}

absl::StatusOr<SequenceId> StatePool::Acquire() {
  const int64_t bytes = layout_.FixedBytes();
  if (bytes_in_use_ + bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("state pool full: ", bytes_in_use_, " of ",
                                                     budget_bytes_,
                                                     " bytes in use, a sequence needs ", bytes));
  }
  auto state = std::make_unique<SequenceState>();
  state->fixed = layout_.initial_fixed;
  state->kv = TakeSpare();
  return Insert(std::move(state), bytes);
}

void StatePool::Release(SequenceId id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  bytes_in_use_ -= ChargedBytes(*it->second);
  checkpoint_bytes_ -= static_cast<int64_t>(it->second->checkpoints.size()) * 4;
  KeepSpare(std::move(it->second->kv));
  sequences_.erase(it);
}

absl::StatusOr<SequenceId> StatePool::Fork(SequenceId id) {
  const SequenceState* source = Get(id);
  if (source == nullptr) return NotFound(id);
  // The fork starts without checkpoints (they are the source's speculation, not its state).
  const int64_t bytes =
      ChargedBytes(*source) - static_cast<int64_t>(source->checkpoints.size()) * 4;
  if (bytes_in_use_ + bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("state pool full: cannot fork a sequence of ", bytes, " bytes"));
  }
  auto fork = std::make_unique<SequenceState>();
  fork->position = source->position;
  fork->source_length = source->source_length;
  fork->encoded = source->encoded;
  fork->fixed = source->fixed;
  fork->kv = TakeSpare();
  fork->kv = source->kv;  // element-wise: rows copied into the spare storage
  return Insert(std::move(fork), bytes);
}

absl::Status StatePool::Grow(SequenceId id, bool cross, int64_t rows) {
  SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  const int64_t target = RoundUpToKvPage(rows);
  int64_t extra_bytes = 0;
  for (size_t i = 0; i < state->kv.size(); ++i) {
    if (layout_.kv_is_cross[i] != cross) continue;
    const int64_t capacity = state->kv[i].capacity();
    if (capacity < target) extra_bytes += (target - capacity) * layout_.KvBytesPerToken();
  }
  if (extra_bytes == 0) return absl::OkStatus();
  if (bytes_in_use_ + extra_bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("state pool full: KV cache growth to ", target,
                                                     " tokens needs ", extra_bytes, " more bytes"));
  }
  for (size_t i = 0; i < state->kv.size(); ++i) {
    if (layout_.kv_is_cross[i] != cross) continue;
    KvCache& kv = state->kv[i];
    if (kv.capacity() >= target) continue;
    kv.Resize(target);
  }
  bytes_in_use_ += extra_bytes;
  TrimSpare();
  return absl::OkStatus();
}

absl::Status StatePool::ReserveTokens(SequenceId id, int64_t tokens) {
  return Grow(id, /*cross=*/false, tokens);
}

absl::Status StatePool::ReserveSource(SequenceId id, int64_t source_tokens) {
  return Grow(id, /*cross=*/true, source_tokens);
}

absl::Status StatePool::ReserveCheckpoints(SequenceId id, int64_t slots) {
  SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  const int64_t floats = slots * static_cast<int64_t>(layout_.initial_fixed.size());
  const int64_t extra_bytes = (floats - static_cast<int64_t>(state->checkpoints.size())) * 4;
  if (extra_bytes <= 0) return absl::OkStatus();
  if (bytes_in_use_ + extra_bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "state pool full: ", slots, " state checkpoints need ", extra_bytes, " more bytes"));
  }
  state->checkpoints.resize(static_cast<size_t>(floats));
  bytes_in_use_ += extra_bytes;
  checkpoint_bytes_ += extra_bytes;
  TrimSpare();
  return absl::OkStatus();
}

absl::Status StatePool::Rollback(SequenceId id, int64_t checkpoint) {
  SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  const int64_t saved = static_cast<int64_t>(state->checkpoint_positions.size());
  if (checkpoint < 0 || checkpoint >= saved) {
    return absl::OutOfRangeError(absl::StrCat(
        "sequence ", id, " has ", saved, " checkpoints from its last decode, not ", checkpoint));
  }
  const int64_t position = state->checkpoint_positions[static_cast<size_t>(checkpoint)];
  const int64_t floats = static_cast<int64_t>(layout_.initial_fixed.size());
  const float* saved_fixed = state->checkpoints.data() + checkpoint * floats;
  // Cross-attention memory does not change while decoding: only self-attention slots go back.
  for (const StateLayout::Slot& slot : layout_.self) {
    if (slot.kv_index >= 0) {
      KvCache& kv = state->kv[static_cast<size_t>(slot.kv_index)];
      kv.length = std::min(kv.length, position);
      continue;
    }
    std::copy_n(saved_fixed + slot.fixed_offset, slot.fixed_floats,
                state->fixed.data() + slot.fixed_offset);
  }
  state->position = position;
  return absl::OkStatus();
}

SequenceState* StatePool::Get(SequenceId id) {
  const auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

const SequenceState* StatePool::Get(SequenceId id) const {
  const auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

absl::StatusOr<int64_t> StatePool::SequenceBytes(SequenceId id) const {
  const SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  return ChargedBytes(*state);
}

absl::StatusOr<std::string> StatePool::Snapshot(SequenceId id, std::string buffer) const {
  const SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  return WriteSnapshot(*state, state->position, std::move(buffer));
}

bool StatePool::earlier_snapshots() const {
  for (const StateLayout::Slot& slot : layout_.self) {
    if (slot.kv_index < 0) return false;
  }
  return true;
}

absl::StatusOr<std::string> StatePool::SnapshotAt(SequenceId id, int64_t position,
                                                  std::string buffer) const {
  const SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  if (!earlier_snapshots()) {
    return absl::FailedPreconditionError(
        "snapshots at an earlier position need every self-attention layer to keep a KV cache");
  }
  if (position < 0 || position > state->position) {
    return absl::OutOfRangeError(absl::StrCat("snapshot position ", position,
                                              " outside the sequence's 0..", state->position));
  }
  for (size_t i = 0; i < state->kv.size(); ++i) {
    if (!layout_.kv_is_cross[i] && state->kv[i].length < position) {
      return absl::OutOfRangeError(
          absl::StrCat("snapshot position ", position, " past the KV cache's rows"));
    }
  }
  return WriteSnapshot(*state, position, std::move(buffer));
}

absl::StatusOr<std::string> StatePool::WriteSnapshot(const SequenceState& state, int64_t position,
                                                     std::string buffer) const {
  // Self-attention caches hold `position` rows; cross ones all theirs.
  const auto rows = [&](size_t i) {
    return layout_.kv_is_cross[i] ? state.kv[i].length : std::min(state.kv[i].length, position);
  };
  Writer out(std::move(buffer));
  size_t bytes = 64 + state.fixed.size() * 4;  // the header and the fixed state, with room
  for (size_t i = 0; i < state.kv.size(); ++i) {
    const KvCache& kv = state.kv[i];
    bytes += 9 + static_cast<size_t>(2 * rows(i) * kv.width * KvValueBytes(kv.format));
  }
  out.Reserve(bytes);  // one allocation, no copy of the blob
  for (char c : kSnapshotMagic) out.Put(c);
  out.Put(layout_.fingerprint);
  out.Put(position);
  out.Put(state.source_length);
  out.Put(static_cast<uint8_t>(state.encoded));
  out.Put(static_cast<int64_t>(state.fixed.size()));
  out.PutFloats(state.fixed.data(), static_cast<int64_t>(state.fixed.size()));
  out.Put(static_cast<int64_t>(state.kv.size()));
  // Rows in the cache's own format, copied as they are (a pool of another format converts them
  // when it restores the snapshot).
  for (size_t i = 0; i < state.kv.size(); ++i) {
    const KvCache& kv = state.kv[i];
    out.Put(rows(i));
    out.Put(static_cast<uint8_t>(kv.format));
    const int64_t values = rows(i) * kv.width;
    if (kv.half()) {
      out.PutHalves(kv.keys16.data(), values);
      out.PutHalves(kv.values16.data(), values);
    } else {
      out.PutFloats(kv.keys.data(), values);
      out.PutFloats(kv.values.data(), values);
    }
  }
  return out.Take();
}

namespace {

absl::Status InvalidSnapshot(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("snapshot: ", what));
}

// Magic, fingerprint, position and source length: the fixed start of every snapshot. `version`
// (optional): 1 or 2, from the magic.
absl::Status ReadHeader(ByteReader& in, StatePool::SnapshotHeader* header, int* version = nullptr) {
  char magic[8];
  for (char& c : magic) {
    if (!in.Get(&c)) return InvalidSnapshot("truncated header");
  }
  const bool v1 = std::memcmp(magic, kSnapshotMagicV1, 8) == 0;
  if (!v1 && std::memcmp(magic, kSnapshotMagic, 8) != 0) {
    return InvalidSnapshot("not an abcd sequence snapshot");
  }
  if (version != nullptr) *version = v1 ? 1 : 2;
  if (!in.Get(&header->fingerprint) || !in.Get(&header->position) ||
      !in.Get(&header->source_length)) {
    return InvalidSnapshot("truncated header");
  }
  if (header->position < 0 || header->source_length < 0)
    return InvalidSnapshot("negative position");
  return absl::OkStatus();
}

// One side of a snapshot's KV rows, stored in `format`, into `kv` (sized), converted to its
// format where the two differ.
void ReadKvRows(absl::string_view bytes, KvFormat format, bool value_side, KvCache& kv) {
  if (bytes.empty()) return;  // an empty cache's vectors may have no storage
  if (format == kv.format) {
    char* storage = kv.half()
                        ? reinterpret_cast<char*>((value_side ? kv.values16 : kv.keys16).data())
                        : reinterpret_cast<char*>((value_side ? kv.values : kv.keys).data());
    std::memcpy(storage, bytes.data(), bytes.size());
    return;
  }
  // Another format: through fp32 (exact from bf16 and f16; rounded, as a written row is, into
  // a 16-bit cache).
  const int64_t value_bytes = KvValueBytes(format);
  const int64_t values = static_cast<int64_t>(bytes.size()) / value_bytes;
  std::vector<float> block(static_cast<size_t>(std::min(values, kSnapshotBlockFloats)));
  std::vector<uint16_t> halves(format == KvFormat::kF32 ? 0 : block.size());
  for (int64_t first = 0; first < values; first += kSnapshotBlockFloats) {
    const int64_t count = std::min(kSnapshotBlockFloats, values - first);
    const char* in = bytes.data() + first * value_bytes;
    const size_t n = static_cast<size_t>(count);
    if (format == KvFormat::kF32) {
      std::memcpy(block.data(), in, n * 4);
    } else {
      std::memcpy(halves.data(), in, n * 2);
      if (format == KvFormat::kBf16) {
        Bf16sToFloats(halves.data(), n, block.data());
      } else {
        HalvesToFloats(halves.data(), n, block.data());
      }
    }
    kv.WriteFlat(value_side, first, count, block.data());
  }
}

}  // namespace

absl::StatusOr<StatePool::SnapshotHeader> StatePool::ReadSnapshotHeader(
    absl::string_view snapshot) {
  ByteReader in(snapshot);
  SnapshotHeader header;
  if (absl::Status status = ReadHeader(in, &header); !status.ok()) return status;
  return header;
}

absl::Status StatePool::ParseSnapshot(absl::string_view snapshot, SequenceState* state) const {
  ByteReader in(snapshot);
  SnapshotHeader header;
  int version = 0;
  if (absl::Status status = ReadHeader(in, &header, &version); !status.ok()) return status;
  if (header.fingerprint != layout_.fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot: taken from a different model (state fingerprint ",
                     header.fingerprint, ", this model's is ", layout_.fingerprint, ")"));
  }
  uint8_t encoded;
  int64_t fixed_floats, kv_count;
  if (!in.Get(&encoded) || !in.Get(&fixed_floats)) return InvalidSnapshot("truncated header");
  if (fixed_floats != static_cast<int64_t>(layout_.initial_fixed.size())) {
    return InvalidSnapshot("fixed state size does not match the model");
  }
  if (state != nullptr) {
    state->position = header.position;
    state->source_length = header.source_length;
    state->encoded = encoded != 0;
    state->fixed.resize(fixed_floats);
  }
  const bool fixed_ok = state != nullptr ? in.GetFloats(state->fixed.data(), fixed_floats)
                                         : in.Skip(fixed_floats * 4);
  if (!fixed_ok || !in.Get(&kv_count)) return InvalidSnapshot("truncated fixed state");
  if (kv_count != static_cast<int64_t>(layout_.kv_is_cross.size())) {
    return InvalidSnapshot("KV cache count does not match the model");
  }
  if (state != nullptr) state->kv.resize(kv_count);
  const int64_t width = layout_.kv_width;
  for (int64_t i = 0; i < kv_count; ++i) {
    int64_t length;
    if (!in.Get(&length)) return InvalidSnapshot("truncated KV cache");
    const int64_t expected = layout_.kv_is_cross[i] ? header.source_length : header.position;
    if (length != expected) return InvalidSnapshot("KV cache length does not match the position");
    KvFormat format = KvFormat::kF32;
    if (version >= 2) {
      uint8_t code;
      if (!in.Get(&code)) return InvalidSnapshot("truncated KV cache");
      if (code > static_cast<uint8_t>(KvFormat::kF16)) {
        return InvalidSnapshot(absl::StrCat("KV cache format ", int{code}, " is not 0, 1 or 2"));
      }
      format = static_cast<KvFormat>(code);
    }
    const int64_t value_bytes = KvValueBytes(format);
    // Bounded by what is left before any multiplication or allocation.
    if (width > 0 && length > static_cast<int64_t>(in.remaining()) / (2 * value_bytes * width)) {
      return InvalidSnapshot("truncated KV cache");
    }
    const int64_t values = length * width;
    if (state == nullptr) {
      if (!in.Skip(2 * values * value_bytes)) return InvalidSnapshot("truncated KV cache");
      continue;
    }
    KvCache& kv = state->kv[i];
    kv.width = width;
    kv.format = layout_.kv_format;
    kv.length = length;
    kv.Resize(RoundUpToKvPage(length));
    for (const bool value_side : {false, true}) {
      absl::string_view bytes;
      if (!in.Take(static_cast<uint64_t>(values * value_bytes), &bytes)) {
        return InvalidSnapshot("truncated KV cache");
      }
      ReadKvRows(bytes, format, value_side, kv);
    }
  }
  if (!in.done()) return InvalidSnapshot("trailing bytes");
  return absl::OkStatus();
}

absl::Status StatePool::CheckSnapshot(absl::string_view snapshot) const {
  return ParseSnapshot(snapshot, nullptr);
}

absl::StatusOr<SequenceId> StatePool::Restore(absl::string_view snapshot) {
  auto state = std::make_unique<SequenceState>();
  state->kv = TakeSpare();
  absl::Status status = ParseSnapshot(snapshot, state.get());
  const int64_t bytes = ChargedBytes(*state);
  if (status.ok() && bytes_in_use_ + bytes > budget_bytes_) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("state pool full: cannot restore a sequence of ", bytes, " bytes"));
  }
  if (!status.ok()) {
    KeepSpare(std::move(state->kv));
    return status;
  }
  return Insert(std::move(state), bytes);
}

}  // namespace abcd
