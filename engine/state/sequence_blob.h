// The session blob: what a session saves between requests, every token the sequence has seen
// plus its attention state (a StatePool snapshot), in one versioned, checksummed byte string
// (format in models/FORMAT.md, "Session blob"). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

// What a session saves: every token the sequence has seen and its attention state.
struct SequenceBlob {
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kMaxModelBytes = 256;
  std::string model;            // the served model's name (<= 256 bytes)
  uint64_t fingerprint = 0;     // StateLayout::fingerprint of that model
  std::vector<int32_t> tokens;  // everything seen, bos first: prompts and generated tokens in order
  int64_t folded = 0;           // tokens[0, folded) are folded into `state`; the rest are not yet
  std::string state;            // a StatePool snapshot (StatePool::Snapshot bytes)
};

// The blob's bytes. Encodes whatever it is given; Decode refuses a model name over
// kMaxModelBytes, negative tokens, `folded` outside [0, tokens.size()] and a state whose header
// disagrees with `fingerprint` / `folded`, so callers keep those true.
std::string EncodeSequenceBlob(const SequenceBlob& blob);

// INVALID_ARGUMENT "session blob: <what>" for anything corrupt, truncated, of another version or
// with trailing bytes; never crashes, never allocates more than a small multiple of bytes.size().
// Checks folded in [0, tokens.size()], tokens >= 0, and that the state is a StatePool snapshot
// (its header, not its body) of `fingerprint` at position `folded`. Does not know the model (the
// caller compares model name / fingerprint, and StatePool::CheckSnapshot checks the body).
absl::StatusOr<SequenceBlob> DecodeSequenceBlob(absl::string_view bytes);

// The header alone (no copy of the tokens or the state): for session metadata. Checks the
// structure as Decode does but not the checksum (it does not read every byte).
struct SequenceBlobInfo {
  std::string model;
  uint64_t fingerprint;
  int64_t tokens;
  int64_t folded;
  int64_t state_bytes;
  int64_t total_bytes;
};
absl::StatusOr<SequenceBlobInfo> PeekSequenceBlob(absl::string_view bytes);

// The blob's trailing checksum of everything before it: four 64-bit FNV-1a lanes over 8-byte
// words (see the definition), fast enough for every save and restore.
uint64_t SequenceBlobChecksum(absl::string_view bytes);

}  // namespace abcd
