// Per-sequence attention state, allocated against one byte budget.
//
// Every sequence owns one fixed block (all bounded layers: abc, rfa, t2r, elu, window, abc
// cross attention) of exactly StateLayout::FixedBytes(), plus one KvCache per softmax layer
// that grows in pages of kKvPageTokens tokens. All of it is charged to the same budget, so a
// pool of B bytes admits B / FixedBytes() bounded sequences, and softmax models pay for every
// token they keep; the two are directly comparable.
//
// Speculative decoding keeps checkpoints: copies of a sequence's fixed block taken after chosen
// rows of a Decode call (Model::Decode writes them), charged to the same budget; Rollback() puts
// one back (and cuts the KV caches to its position), so a sequence ends exactly as if only the
// rows up to that one had been fed.
//
// A released sequence's KV caches keep their storage, emptied, for the next Acquire, Fork or
// Restore (the most recently released first): a new sequence's KV growth then writes memory
// that is already resident instead of copying rows into, and faulting in, fresh pages (on a
// virtual machine a fresh page can cost 30x its copy). Spare storage is held only while
// bytes_in_use() + spare_kv_bytes() <= budget_bytes() (the oldest goes first as use grows), so
// the pool's memory stays within its budget.
//
// Acquire/Release/Fork/Snapshot/Restore/Rollback cost O(state bytes). Not thread-safe: one owner
// (the engine loop) drives it; others read published copies of its counters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/state/kv_cache.h"

namespace abcd {

using SequenceId = int64_t;

// Where each decoder layer keeps its state; produced by the model.
struct StateLayout {
  struct Slot {
    int64_t fixed_offset = 0;  // into the fixed block, in floats
    int64_t fixed_floats = 0;
    int kv_index = -1;  // index of the layer's KvCache, -1 for bounded layers
  };
  std::vector<Slot> self;               // one per decoder layer
  std::vector<Slot> cross;              // one per decoder layer (encoder-decoder only)
  std::vector<float> initial_fixed;     // the empty fixed block
  std::vector<bool> kv_is_cross;        // one per KvCache
  int64_t kv_width = 0;                 // values per key (and per value) row
  KvFormat kv_format = KvFormat::kF32;  // storage of the KvCache rows
  uint64_t fingerprint = 0;             // identifies the model's state format in snapshots

  int64_t FixedBytes() const { return static_cast<int64_t>(initial_fixed.size()) * 4; }
  // Bytes a KvCache row (key + value) costs.
  int64_t KvBytesPerToken() const { return 2 * kv_width * KvValueBytes(kv_format); }
};

struct SequenceState {
  int64_t position = 0;       // decoder tokens folded in so far
  int64_t source_length = 0;  // encoder tokens (encoder-decoder)
  bool encoded = false;       // cross-attention memory built
  std::vector<float> fixed;
  std::vector<KvCache> kv;
  // Speculative decoding: checkpoint slots of fixed-block size each (reserved, charged), and the
  // positions of those the last Decode call that fed this sequence wrote, in row order.
  std::vector<float> checkpoints;
  std::vector<int64_t> checkpoint_positions;
};

class StatePool {
 public:
  static constexpr int64_t kKvPageTokens = 16;
  // rows rounded up to a whole number of KV pages.
  static constexpr int64_t RoundUpToKvPage(int64_t rows) {
    return (rows + kKvPageTokens - 1) / kKvPageTokens * kKvPageTokens;
  }

  StatePool(StateLayout layout, int64_t budget_bytes);

  // RESOURCE_EXHAUSTED when the budget cannot hold another empty sequence.
  absl::StatusOr<SequenceId> Acquire();
  // Frees the sequence's bytes at once. Unknown ids are ignored.
  void Release(SequenceId id);
  // A new sequence with an identical state (beam search, shared prefixes).
  absl::StatusOr<SequenceId> Fork(SequenceId id);
  // A self-describing byte string of the state; Restore() turns it into a new sequence.
  // Restore: INVALID_ARGUMENT for a corrupt or truncated snapshot, FAILED_PRECONDITION for one
  // taken from another model (fingerprint), RESOURCE_EXHAUSTED when the budget cannot hold it;
  // the pool is unchanged on any error.
  // `buffer`: storage to write into (cleared first; its capacity is reused, so a recycled blob
  // of the same size costs no fresh pages).
  absl::StatusOr<std::string> Snapshot(SequenceId id, std::string buffer = {}) const;
  // The state as it was after `position` <= the sequence's position decoder tokens: its
  // self-attention KV caches cut to `position` rows (rows never change once written; the cut
  // copies only the rows kept). Only where every self-attention layer keeps a KV cache
  // (earlier_snapshots()); FAILED_PRECONDITION otherwise, OUT_OF_RANGE for a position past the
  // sequence's or one a Rollback has since cut away.
  bool earlier_snapshots() const;
  absl::StatusOr<std::string> SnapshotAt(SequenceId id, int64_t position,
                                         std::string buffer = {}) const;
  absl::StatusOr<SequenceId> Restore(absl::string_view snapshot);
  // What Restore() would restore, without restoring it: the same INVALID_ARGUMENT and
  // FAILED_PRECONDITION errors (not the budget check). Allocates nothing in proportion to the
  // snapshot. Thread-safe (reads only the layout).
  absl::Status CheckSnapshot(absl::string_view snapshot) const;
  // The snapshot's position (decoder tokens folded), source length and fingerprint, read from its
  // header alone (INVALID_ARGUMENT when the header is not one). Thread-safe.
  struct SnapshotHeader {
    uint64_t fingerprint = 0;
    int64_t position = 0;
    int64_t source_length = 0;
  };
  static absl::StatusOr<SnapshotHeader> ReadSnapshotHeader(absl::string_view snapshot);

  // Grows self-attention KvCaches to hold `tokens` rows, or cross ones to hold `source_tokens`.
  // RESOURCE_EXHAUSTED (and no change) when the budget does not allow it.
  absl::Status ReserveTokens(SequenceId id, int64_t tokens);
  absl::Status ReserveSource(SequenceId id, int64_t source_tokens);
  // Grows the sequence's checkpoint slots to at least `slots` (never shrinks them; they are freed
  // with the sequence). RESOURCE_EXHAUSTED (and no change) when the budget does not allow it.
  absl::Status ReserveCheckpoints(SequenceId id, int64_t slots);
  // Puts checkpoint `checkpoint` of the last Decode call back: the self-attention parts of the
  // fixed block, the self KV caches' length and the position, as after that checkpoint's row.
  // NOT_FOUND for an unknown id, OUT_OF_RANGE for a checkpoint that call did not write. The
  // checkpoints stay valid until the sequence's next Decode, so a later Rollback may go to an
  // earlier one.
  absl::Status Rollback(SequenceId id, int64_t checkpoint);

  SequenceState* Get(SequenceId id);
  const SequenceState* Get(SequenceId id) const;

  const StateLayout& layout() const { return layout_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  int64_t bytes_in_use() const { return bytes_in_use_; }
  // The KvCache (softmax layers) share of bytes_in_use().
  int64_t kv_bytes_in_use() const {
    return bytes_in_use_ - size() * layout_.FixedBytes() - checkpoint_bytes_;
  }
  // The checkpoint slots' share of bytes_in_use().
  int64_t checkpoint_bytes_in_use() const { return checkpoint_bytes_; }
  int64_t size() const { return static_cast<int64_t>(sequences_.size()); }
  // Storage of released sequences' KV caches kept for reuse (not part of bytes_in_use()).
  int64_t spare_kv_bytes() const { return spare_kv_bytes_; }
  // Bytes charged to one sequence: fixed block plus reserved KvCache pages and checkpoint slots.
  absl::StatusOr<int64_t> SequenceBytes(SequenceId id) const;

 private:
  absl::Status Grow(SequenceId id, bool cross, int64_t rows);
  int64_t ChargedBytes(const SequenceState& state) const;
  SequenceId Insert(std::unique_ptr<SequenceState> state, int64_t bytes);
  // Validates `snapshot` against the layout; fills `state` when not null (Restore), else only
  // checks (CheckSnapshot). Never touches the pool.
  absl::Status ParseSnapshot(absl::string_view snapshot, SequenceState* state) const;
  // `state` as after `position` tokens (self KV caches cut there) in the snapshot format.
  absl::StatusOr<std::string> WriteSnapshot(const SequenceState& state, int64_t position,
                                            std::string buffer) const;
  // Spare KV storage: KeepSpare empties `kv` and keeps it when the budget allows; TakeSpare
  // returns the most recently kept (or new empty caches); TrimSpare drops the oldest while
  // bytes_in_use_ + spare_kv_bytes_ > budget_bytes_.
  void KeepSpare(std::vector<KvCache> kv);
  std::vector<KvCache> TakeSpare();
  void TrimSpare();

  StateLayout layout_;
  int64_t budget_bytes_;
  int64_t bytes_in_use_ = 0;
  int64_t checkpoint_bytes_ = 0;
  SequenceId next_id_ = 1;
  absl::flat_hash_map<SequenceId, std::unique_ptr<SequenceState>> sequences_;
  std::vector<std::vector<KvCache>> spare_kv_;  // oldest first
  int64_t spare_kv_bytes_ = 0;
};

}  // namespace abcd
