// DecodeBackend: where one model's sequences live and where their tokens are computed.
//
// The scheduler (Executor) drives a backend through sequence ids only: acquire a sequence,
// encode a source (encoder-decoder), decode a batch of rows that mixes single decode tokens and
// prompt chunks, fork (beam search), release. Admission is in the backend's own bytes:
// RequestBytes() is a request's worst case and capacity_bytes() the total, so the scheduler never
// admits what the backend cannot hold. Two implementations side by side: CpuBackend (Model +
// StatePool, the reference) and CudaBackend (CudaModel, one GPU).
// Not thread-safe: one engine thread owns a backend. Exceptions: the accessors of constants
// (name, device_description, config, weight_bytes, state_bytes_per_sequence, RequestBytes,
// capacity_bytes) may be called from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model.h"
#include "engine/sampling/sampler.h"
#include "engine/state/state_pool.h"

namespace abcd {

struct BackendMemory {
  int64_t sequences = 0;        // live sequences
  int64_t bytes_in_use = 0;     // state (and KV cache) bytes charged to live sequences
  int64_t kv_bytes_in_use = 0;  // the softmax KV caches' share of bytes_in_use
  int64_t kv_spare_bytes = 0;   // released sequences' KV storage kept for reuse (not in use)
};

// One decode token of one sequence whose next token the backend samples itself.
struct SampledRow {
  SequenceId sequence = 0;
  int32_t token = 0;
  SamplingParams sampling;  // !NeedsHostSampling(sampling) (penalties need the host's context)
  uint64_t step = 0;        // the draw's index within its request (seeds the draw)
};

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;

  // OK while the backend can serve; after a failure it cannot recover from (a GPU context that a
  // kernel fault poisoned, where every later call fails too), that failure. The Executor then
  // ends its requests and refuses new ones, and the server reports itself unhealthy so that an
  // orchestrator restarts it. Any thread may call it.
  virtual absl::Status Health() const { return absl::OkStatus(); }

  // "cpu" or "cuda"; for logs and metrics labels.
  virtual std::string name() const = 0;
  // The device in words (e.g. "NVIDIA H100 80GB HBM3"), "cpu" for the CPU backend.
  virtual std::string device_description() const = 0;
  virtual const ModelConfig& config() const = 0;
  // Parameter bytes as the backend stores them.
  virtual int64_t weight_bytes() const = 0;
  // Bytes of one sequence's constant-size state (softmax layers add KV bytes per token).
  virtual int64_t state_bytes_per_sequence() const = 0;

  // Worst-case bytes for a request holding `sequences` sequences of `prompt_tokens` decoder
  // tokens, `source_tokens` encoder tokens and up to `max_new_tokens` generated tokens;
  // RESOURCE_EXHAUSTED when such a request can never fit this backend.
  virtual absl::StatusOr<int64_t> RequestBytes(int64_t prompt_tokens, int64_t source_tokens,
                                               int64_t max_new_tokens, int sequences) const = 0;
  // What RequestBytes() of all running requests together may reach.
  virtual int64_t capacity_bytes() const = 0;
  virtual BackendMemory memory() const = 0;

  // A new empty sequence; RESOURCE_EXHAUSTED when there is no room.
  virtual absl::StatusOr<SequenceId> Acquire() = 0;
  // Frees the sequence at once. Unknown ids are ignored.
  virtual void Release(SequenceId id) = 0;
  // A new sequence with an identical state (beam search).
  virtual absl::StatusOr<SequenceId> Fork(SequenceId id) = 0;
  // Sequence states as bytes (sessions, the prefix cache): the StatePool snapshot format
  // (state_pool.h), whatever the backend. A backend without it answers FAILED_PRECONDITION.
  virtual bool snapshots_supported() const { return false; }
  // `buffer`: storage the snapshot may be written into (its capacity reused: a recycled blob).
  virtual absl::StatusOr<std::string> Snapshot(SequenceId id, std::string buffer) const;
  absl::StatusOr<std::string> Snapshot(SequenceId id) const { return Snapshot(id, std::string()); }
  // Whether SnapshotAt() can save a sequence's state as it was at an earlier position (true
  // where every self-attention layer keeps a KV cache: its rows never change once written), so
  // the prefix cache need not stop a prompt's prefill where it takes a snapshot.
  virtual bool earlier_snapshots_supported() const { return false; }
  virtual absl::StatusOr<std::string> SnapshotAt(SequenceId id, int64_t position,
                                                 std::string buffer) const;
  // A new sequence holding the snapshot's state; RESOURCE_EXHAUSTED when there is no room.
  virtual absl::StatusOr<SequenceId> Restore(absl::string_view snapshot);
  // Whether Restore() would take `snapshot`: INVALID_ARGUMENT when it is corrupt,
  // FAILED_PRECONDITION when it is another model's. Any thread may call it.
  virtual absl::Status CheckSnapshot(absl::string_view snapshot) const;
  // Encoder-decoder: encodes `source` into `id`'s cross-attention memory.
  virtual absl::Status Encode(std::span<const int32_t> source, SequenceId id) = 0;
  // Folds `rows` into their sequences (a sequence's rows are consecutive and in order) and
  // appends the logits of the rows with want_logits, in row order, vocab_size floats each.
  virtual absl::Status Decode(std::span<const DecodeRow> rows, std::vector<float>* logits) = 0;

  // Speculative decoding: whether Decode() honours DecodeRow::checkpoint (the state after such a
  // row is saved into the sequence's next checkpoint slot) and Rollback() puts one back, so a
  // verify pass over k draft rows can end exactly as if only the accepted ones had been fed.
  // A backend without it refuses checkpoint rows and Rollback with UNIMPLEMENTED (naming
  // itself); the Executor then decodes without speculation.
  virtual bool checkpoints_supported() const { return false; }
  // Bytes `slots` checkpoints of one sequence take; admission adds them to RequestBytes().
  virtual int64_t CheckpointBytes(int slots) const { return 0; }
  // `id`'s state as after the row of checkpoint `checkpoint` of its last Decode call (slots in
  // row order), in O(state bytes); the later checkpoints of that call stay valid for another
  // Rollback to an earlier one. OUT_OF_RANGE for a checkpoint that call did not write.
  virtual absl::Status Rollback(SequenceId id, int checkpoint);

  // Optional decode fast path: feeds each row's token to its sequence (one row per sequence)
  // and samples the next token where the logits are, so only token ids come back (the CUDA
  // backend: device sampling, CUDA graphs). Appends one id per row, in row order.
  virtual bool samples_tokens() const { return false; }
  virtual absl::Status DecodeAndSample(std::span<const SampledRow> rows,
                                       std::vector<int32_t>* tokens) {
    return absl::UnimplementedError(name() + " backend does not sample tokens itself");
  }
};

// A maximal stretch of consecutive rows of one sequence.
struct SequenceRun {
  SequenceId sequence = 0;
  int64_t first_row = 0;
  int64_t rows = 0;
};

// Splits `rows` into runs of one sequence each; INVALID_ARGUMENT (naming the row) when a
// sequence's rows are not consecutive. Backends that compute a sequence's rows in one call
// (CUDA prefill) use it.
absl::StatusOr<std::vector<SequenceRun>> SplitIntoSequenceRuns(std::span<const DecodeRow> rows);

}  // namespace abcd
