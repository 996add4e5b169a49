#include "engine/state/state_pool.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/state/byte_reader.h"

namespace abcd {
namespace {

constexpr char kSnapshotMagic[8] = {'A', 'B', 'C', 'D', 'S', 'E', 'Q', '1'};
// KV rows go in and out of a snapshot through a buffer of this many floats (64 KiB).
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
  void Reserve(size_t bytes) { out_.reserve(bytes); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

int64_t RoundUpToPage(int64_t rows) {
  return (rows + StatePool::kKvPageTokens - 1) / StatePool::kKvPageTokens *
         StatePool::kKvPageTokens;
}

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
  return id;
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
  state->kv.resize(layout_.kv_is_cross.size());
  for (KvCache& kv : state->kv) {
    kv.width = layout_.kv_width;
    kv.format = layout_.kv_format;
  }
  return Insert(std::move(state), bytes);
}

void StatePool::Release(SequenceId id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  bytes_in_use_ -= ChargedBytes(*it->second);
  checkpoint_bytes_ -= static_cast<int64_t>(it->second->checkpoints.size()) * 4;
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
  fork->kv = source->kv;
  return Insert(std::move(fork), bytes);
}

absl::Status StatePool::Grow(SequenceId id, bool cross, int64_t rows) {
  SequenceState* state = Get(id);
  if (state == nullptr) return NotFound(id);
  const int64_t target = RoundUpToPage(rows);
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
  Writer out(std::move(buffer));
  size_t bytes = 64 + state->fixed.size() * 4;  // the header and the fixed state, with room
  for (const KvCache& kv : state->kv)
    bytes += 8 + static_cast<size_t>(2 * kv.length * kv.width) * 4;
  out.Reserve(bytes);
  for (char c : kSnapshotMagic) out.Put(c);
  out.Put(layout_.fingerprint);
  out.Put(state->position);
  out.Put(state->source_length);
  out.Put(static_cast<uint8_t>(state->encoded));
  out.Put(static_cast<int64_t>(state->fixed.size()));
  out.PutFloats(state->fixed.data(), static_cast<int64_t>(state->fixed.size()));
  out.Put(static_cast<int64_t>(state->kv.size()));
  // Rows as fp32 whatever the cache's format, so a blob restores into either, widened a block at
  // a time into the blob (reserved at its size up front: one allocation, no copy of the blob).
  std::vector<float> block(static_cast<size_t>(kSnapshotBlockFloats));
  for (const KvCache& kv : state->kv) {
    out.Put(kv.length);
    const int64_t floats = kv.length * kv.width;
    for (const bool value_side : {false, true}) {
      for (int64_t first = 0; first < floats; first += kSnapshotBlockFloats) {
        const int64_t count = std::min(kSnapshotBlockFloats, floats - first);
        kv.ReadFlat(value_side, first, count, block.data());
        out.PutFloats(block.data(), count);
      }
    }
  }
  return out.Take();
}

namespace {

absl::Status InvalidSnapshot(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("snapshot: ", what));
}

// Magic, fingerprint, position and source length: the fixed start of every snapshot.
absl::Status ReadHeader(ByteReader& in, StatePool::SnapshotHeader* header) {
  char magic[8];
  for (char& c : magic) {
    if (!in.Get(&c)) return InvalidSnapshot("truncated header");
  }
  if (std::memcmp(magic, kSnapshotMagic, 8) != 0) {
    return InvalidSnapshot("not an abcd sequence snapshot");
  }
  if (!in.Get(&header->fingerprint) || !in.Get(&header->position) ||
      !in.Get(&header->source_length)) {
    return InvalidSnapshot("truncated header");
  }
  if (header->position < 0 || header->source_length < 0)
    return InvalidSnapshot("negative position");
  return absl::OkStatus();
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
  if (absl::Status status = ReadHeader(in, &header); !status.ok()) return status;
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
  std::vector<float> block(state != nullptr && kv_count > 0 ? kSnapshotBlockFloats : 0);
  for (int64_t i = 0; i < kv_count; ++i) {
    int64_t length;
    if (!in.Get(&length)) return InvalidSnapshot("truncated KV cache");
    const int64_t expected = layout_.kv_is_cross[i] ? header.source_length : header.position;
    if (length != expected) return InvalidSnapshot("KV cache length does not match the position");
    // Bounded by what is left before any multiplication or allocation.
    if (width > 0 && length > static_cast<int64_t>(in.remaining()) / (2 * 4 * width)) {
      return InvalidSnapshot("truncated KV cache");
    }
    const int64_t floats = length * width;
    if (state == nullptr) {
      if (!in.Skip(2 * floats * 4)) return InvalidSnapshot("truncated KV cache");
      continue;
    }
    KvCache& kv = state->kv[i];
    kv.width = width;
    kv.format = layout_.kv_format;
    kv.length = length;
    kv.Resize(RoundUpToPage(length));
    for (const bool value_side : {false, true}) {
      for (int64_t first = 0; first < floats; first += kSnapshotBlockFloats) {
        const int64_t count = std::min(kSnapshotBlockFloats, floats - first);
        if (!in.GetFloats(block.data(), count)) return InvalidSnapshot("truncated KV cache");
        kv.WriteFlat(value_side, first, count, block.data());
      }
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
  if (absl::Status status = ParseSnapshot(snapshot, state.get()); !status.ok()) return status;
  const int64_t bytes = ChargedBytes(*state);
  if (bytes_in_use_ + bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("state pool full: cannot restore a sequence of ", bytes, " bytes"));
  }
  return Insert(std::move(state), bytes);
}

}  // namespace abcd
